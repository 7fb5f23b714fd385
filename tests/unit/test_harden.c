/* test_harden.c - regression tests for hostile model files and numerical faults (issue 17).
 *  1. tiny-llama-spm-f32 with every 1-D tensor rewritten as [n, 1] (same bytes) is refused with
 *     a format error naming the tensor (it overflowed the f32 arena in bind_vec: ASan caught the
 *     write, release crashed).
 *  2. A NaN row in output.weight: a request fails with ATTND_ERR_NUMERIC and a message that says
 *     "non-finite" (it used to sample around it and send uninitialised logprob arrays); an +Inf
 *     row the same; /logit_lens and the attention map of such a model fail with the same status.
 *  3. logprobs larger than the vocabulary (a 12-token model, logprobs 20): every top entry is a
 *     real token id with a finite log-probability <= 0, n_top == the vocabulary size, and the
 *     chosen token's logprob equals the top list's entry for it.
 *  4. max_tokens 0 is accepted (DONE "length", no tokens) and a prompt of exactly the context
 *     size is accepted the same way (both were refused with a misleading message). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/gguf.h"
#include "attnd/gguf_writer.h"
#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/tensor.h"
#include "attnd/tokenizer.h"
#include "testutil.h"

static char g_tmp[256];

/* ---- rewriting a shared model ---------------------------------------------------------------- */

enum craft { CRAFT_1D_AS_2D, CRAFT_NAN_ROW, CRAFT_INF_ROW };

struct copy_ctx {
    struct gguf *src;
    enum craft how;
};

static int copy_fill(void *ud, int idx, void *buf, size_t nbytes)
{
    struct copy_ctx *c = ud;
    const struct gguf_tensor *t = gguf_tensor(c->src, idx);
    if (t->nbytes != nbytes) return -1;
    memcpy(buf, gguf_mem_data(c->src, t), nbytes);
    if (c->how != CRAFT_1D_AS_2D && !strcmp(t->name, "output.weight") && t->type == TENSOR_F32) {
        float *row = (float *)buf + 5 * t->ne[0]; /* token 5's row */
        row[3] = c->how == CRAFT_NAN_ROW ? NAN : INFINITY;
    }
    return 0;
}

/* Writes shared/models/<name>.gguf transformed by `how` to out. Returns 0 on success. */
static int craft_model(const char *name, enum craft how, const char *out)
{
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/%s.gguf", t_shared(), name);
    size_t len;
    char *img = t_slurp(path, &len);
    struct gguf *g = NULL;
    if (!img || gguf_open_mem(img, len, &g, err, sizeof err)) {
        fprintf(stderr, "cannot read %s\n", path);
        free(img);
        return 1;
    }
    struct gguf_writer *w = gguf_writer_create();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) gguf_writer_copy_kv(w, g, i);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        uint64_t ne[GGUF_MAX_DIMS];
        memcpy(ne, t->ne, sizeof ne);
        uint32_t nd = t->n_dims;
        if (how == CRAFT_1D_AS_2D && nd == 1) nd = 2, ne[1] = 1;
        gguf_writer_add_tensor(w, t->name, t->type, nd, ne);
    }
    struct copy_ctx c = {.src = g, .how = how};
    attnd_status st = gguf_writer_write(w, out, copy_fill, &c, err, sizeof err);
    if (st) fprintf(stderr, "write %s: %s\n", out, err);
    gguf_writer_destroy(w);
    gguf_close(g);
    free(img);
    return st != ATTND_OK;
}

/* ---- scheduler results ----------------------------------------------------------------------- */

struct result {
    pthread_mutex_t mu;
    int done, n_tokens, kind;
    attnd_status status;
    char message[256], reason[16];
    int bad_top; /* top entries that were not a real id with a finite logprob <= 0 */
    int n_top, top_self_mismatch;
};

static void on_event(void *ud, const struct sched_event *ev)
{
    struct result *r = ud;
    pthread_mutex_lock(&r->mu);
    if (ev->kind == SCHED_EV_TOKEN) {
        r->n_tokens++;
        r->n_top = ev->n_top;
        for (int i = 0; i < ev->n_top; i++) {
            float lp = ev->top_logprobs[i];
            if (ev->top_ids[i] < 0 || ev->top_ids[i] >= 12 || !isfinite(lp) || lp > 1e-6f) r->bad_top++;
            if (ev->top_ids[i] == ev->token && fabsf(lp - ev->logprob) > 1e-5f) r->top_self_mismatch++;
        }
    } else {
        r->kind = ev->kind;
        r->status = ev->status;
        snprintf(r->message, sizeof r->message, "%s", ev->message ? ev->message : "");
        snprintf(r->reason, sizeof r->reason, "%s", ev->finish_reason ? ev->finish_reason : "");
        r->done = 1;
    }
    pthread_mutex_unlock(&r->mu);
}

static int run_request(struct sched *s, const int32_t *p, size_t n, int max_tokens, int logprobs, struct result *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    struct sched_request rq = {.prompt = p, .n_prompt = n, .max_tokens = max_tokens, .logprobs = logprobs};
    rq.sampling = sampler_params_default();
    rq.sampling.temperature = 0;
    char err[256] = "";
    uint64_t id;
    attnd_status st = sched_submit(s, &rq, on_event, r, &id, err, sizeof err);
    if (st) {
        snprintf(r->message, sizeof r->message, "%s", err);
        return (int)st;
    }
    for (int i = 0; i < 60000; i++) {
        pthread_mutex_lock(&r->mu);
        int d = r->done;
        pthread_mutex_unlock(&r->mu);
        if (d) return 0;
        usleep(1000);
    }
    return -1;
}

/* ---- 1 ---------------------------------------------------------------------------------------- */

static void test_2d_vectors(void)
{
    char out[512], err[512] = "";
    snprintf(out, sizeof out, "%s/vec2d.gguf", g_tmp);
    if (craft_model("tiny-llama-spm-f32", CRAFT_1D_AS_2D, out)) {
        T_CHECK(0, "could not craft the [n,1] model");
        return;
    }
    struct model *m = NULL;
    attnd_status st = model_load(out, &m, err, sizeof err);
    T_CHECK(st == ATTND_ERR_FORMAT, "[n,1] norms load with %s (%s)", attnd_status_str(st), err);
    T_CHECK(strstr(err, "norm.weight") && strstr(err, "dimension"), "message names the tensor: %s", err);
    model_destroy(m);
}

/* ---- 2 ---------------------------------------------------------------------------------------- */

static void test_nonfinite(enum craft how)
{
    char out[512], err[512] = "";
    snprintf(out, sizeof out, "%s/nan.gguf", g_tmp);
    if (craft_model("tiny-llama-spm-f32", how, out)) {
        T_CHECK(0, "could not craft the NaN model");
        return;
    }
    struct model *m;
    if (model_load(out, &m, err, sizeof err)) {
        T_CHECK(0, "NaN model load: %s", err);
        return;
    }
    struct tokenizer *tok;
    T_CHECK(tok_create(m->gguf, &tok, err, sizeof err) == ATTND_OK, "tok_create: %s", err);
    struct sched_opts so = {.n_threads = 2, .n_ctx = 64, .kv_blocks = 64};
    struct sched *s;
    T_CHECK(sched_create(m, tok, &so, &s) == ATTND_OK, "sched_create");
    const int32_t p[] = {1, 450, 4996, 17354};
    for (int lp = 0; lp <= 5; lp += 5) {
        struct result r;
        T_CHECK(run_request(s, p, 4, 4, lp, &r) == 0, "submit: %s", r.message);
        T_CHECK(r.kind == SCHED_EV_ERROR && r.status == ATTND_ERR_NUMERIC, "logprobs %d: kind %d status %s", lp,
                r.kind, attnd_status_str(r.status));
        T_CHECK(strstr(r.message, "non-finite") != NULL, "message: %s", r.message);
        T_CHECK(r.n_tokens == 0, "%d tokens sent from NaN logits", r.n_tokens);
    }
    int ids[5 * 2];
    float pr[5 * 2];
    T_CHECK(sched_logit_lens(s, p, 4, 3, 5, ids, pr) == ATTND_ERR_NUMERIC, "logit lens of a NaN model");
    sched_destroy(s, 0);
    tok_destroy(tok);
    model_destroy(m);
}

/* ---- 3 and 4 ---------------------------------------------------------------------------------- */

static int fill_seeded(void *ud, int idx, void *buf, size_t nbytes)
{
    (void)ud;
    float *f = buf;
    uint32_t x = 2463534242u + (uint32_t)idx * 7919u;
    for (size_t i = 0; i < nbytes / 4; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        f[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 0.5f;
    }
    return 0;
}

/* A 1-layer llama with a 12-token SentencePiece vocabulary. */
static int write_small_vocab_model(const char *path)
{
    enum { D = 32, F = 64, V = 12 };
    struct gguf_writer *w = gguf_writer_create();
    gguf_writer_set_str(w, "general.architecture", "llama", 5);
    gguf_writer_set_u32(w, "llama.embedding_length", D);
    gguf_writer_set_u32(w, "llama.block_count", 1);
    gguf_writer_set_u32(w, "llama.feed_forward_length", F);
    gguf_writer_set_u32(w, "llama.attention.head_count", 4);
    gguf_writer_set_u32(w, "llama.attention.head_count_kv", 2);
    gguf_writer_set_u32(w, "llama.context_length", 64);
    const char *toks[V] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a", "b", "c", "d", "e", "f", "g", "h"};
    size_t lens[V];
    float scores[V];
    int32_t types[V];
    for (int i = 0; i < V; i++) lens[i] = strlen(toks[i]), scores[i] = -(float)i, types[i] = i < 3 ? (i ? 3 : 2) : 1;
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", 5);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, lens, V);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_F32, scores, V);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_I32, types, V);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    const struct {
        const char *name;
        uint64_t n0, n1;
    } ts[] = {{"token_embd.weight", D, V},       {"output_norm.weight", D, 0},   {"output.weight", D, V},
              {"blk.0.attn_norm.weight", D, 0},  {"blk.0.attn_q.weight", D, D},  {"blk.0.attn_k.weight", D, 16},
              {"blk.0.attn_v.weight", D, 16},    {"blk.0.attn_output.weight", D, D}, {"blk.0.ffn_norm.weight", D, 0},
              {"blk.0.ffn_gate.weight", D, F},   {"blk.0.ffn_up.weight", D, F},  {"blk.0.ffn_down.weight", F, D}};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        uint64_t ne[2] = {ts[i].n0, ts[i].n1};
        gguf_writer_add_tensor(w, ts[i].name, TENSOR_F32, ts[i].n1 ? 2 : 1, ne);
    }
    char err[256];
    attnd_status st = gguf_writer_write(w, path, fill_seeded, NULL, err, sizeof err);
    if (st) fprintf(stderr, "write: %s\n", err);
    gguf_writer_destroy(w);
    return st != ATTND_OK;
}

static void test_small_vocab(void)
{
    char out[512], err[512] = "";
    snprintf(out, sizeof out, "%s/v12.gguf", g_tmp);
    struct model *m;
    if (write_small_vocab_model(out) || model_load(out, &m, err, sizeof err)) {
        T_CHECK(0, "small-vocabulary model: %s", err);
        return;
    }
    struct tokenizer *tok;
    if (tok_create(m->gguf, &tok, err, sizeof err)) {
        T_CHECK(0, "tok_create: %s", err);
        model_destroy(m);
        return;
    }
    const int n_ctx = 32;
    struct sched_opts so = {.n_threads = 2, .n_ctx = n_ctx, .kv_blocks = 64};
    struct sched *s;
    T_CHECK(sched_create(m, tok, &so, &s) == ATTND_OK, "sched_create");
    int32_t p[32];
    for (int i = 0; i < 32; i++) p[i] = 3 + i % 9;
    p[0] = 1;
    struct result r;
    /* 3. logprobs 20 > 12 tokens */
    T_CHECK(run_request(s, p, 5, 6, 20, &r) == 0, "submit: %s", r.message);
    T_CHECK(r.kind == SCHED_EV_DONE && r.n_tokens == 6, "logprobs 20: kind %d, %d tokens (%s)", r.kind, r.n_tokens,
            r.message);
    T_CHECK(r.n_top == 12, "n_top %d, want the vocabulary size 12", r.n_top);
    T_CHECK(r.bad_top == 0, "%d top entries are not (real id, finite logprob <= 0)", r.bad_top);
    T_CHECK(r.top_self_mismatch == 0, "the chosen token's logprob differs from its top entry");
    /* 4. max_tokens 0, and a prompt that fills the context */
    int rc = run_request(s, p, 5, 0, 0, &r);
    T_CHECK(rc == 0 && r.kind == SCHED_EV_DONE && !strcmp(r.reason, "length") && r.n_tokens == 0,
            "max_tokens 0: rc %d kind %d reason '%s' tokens %d (%s)", rc, r.kind, r.reason, r.n_tokens, r.message);
    rc = run_request(s, p, (size_t)n_ctx, 0, 0, &r);
    T_CHECK(rc == 0 && r.kind == SCHED_EV_DONE && !strcmp(r.reason, "length") && r.n_tokens == 0,
            "prompt == context: rc %d kind %d reason '%s' (%s)", rc, r.kind, r.reason, r.message);
    rc = run_request(s, p, (size_t)n_ctx, 1, 0, &r);
    T_CHECK(rc == ATTND_ERR_RANGE, "prompt == context + 1 token to generate is still refused (rc %d)", rc);
    sched_destroy(s, 0);
    tok_destroy(tok);
    model_destroy(m);
}

int main(void)
{
    snprintf(g_tmp, sizeof g_tmp, "/tmp/attnd-harden-XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 1;
    }
    test_2d_vectors();
    test_nonfinite(CRAFT_NAN_ROW);
    test_nonfinite(CRAFT_INF_ROW);
    test_small_vocab();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_tmp);
    return t_finish("test_harden");
}
