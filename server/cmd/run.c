/* run.c - `attnd run`: generate text from a prompt on the command line.
 *   attnd run -m MODEL.gguf -p "prompt" [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P]
 *             [--repeat-penalty R] [--seed S] [--stop STR]... [--tokens 1,2,3] [--ignore-eos]
 *             [--special] [--threads N] [--ctx N] [--json] [--intervene FILE]
 * Streams the generated text to stdout (prompt and generation speed on stderr), or with
 * --json prints one object with the prompt tokens, generated tokens, text, finish reason and
 * timings. --intervene FILE: a JSON array of interventions (intervene.h; the API's "interventions"
 * field) applied to the whole run, on the CPU backend, the prompt evaluated in one step. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/check.h"
#include "attnd/forward.h"
#include "attnd/genstep.h"
#include "attnd/intervene.h"
#include "attnd/kvcache.h"
#include "attnd/model.h"
#include "attnd/sampler.h"
#include "attnd/tokenizer.h"
#include "attnd/utf8.h"
#include "server/cmd/cli.h"
#include "server/cmd/cmd.h"

#define MAX_STOPS 16 /* keep the --stop help text in step */


/* Output sink: plain streaming to stdout, or collected for --json. */
struct sink {
    int json;
    char *buf;
    size_t len, cap;
};

static void emit(struct sink *s, const char *p, size_t n)
{
    if (!n) return;
    if (!s->json) {
        fwrite(p, 1, n, stdout);
        fflush(stdout);
        return;
    }
    if (s->len + n + 1 > s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 4096;
        while (nc < s->len + n + 1) nc *= 2;
        char *nb = realloc(s->buf, nc);
        if (!nb) return;
        s->buf = nb;
        s->cap = nc;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = 0;
}

struct run_times {
    double pp_s, tg_s; /* prompt and generation wall time */
};

/* What the run evaluates on: the context's private sequence, or with interventions a cache and
 * sequence of its own whose steps carry them (fwd_eval's steps carry none). */
struct run_eng {
    struct fwd_ctx *c;
    struct iv_set *iv;
    struct kv_cache *kv;
    struct kv_seq *seq;
    int n_ctx;
};

/* n tokens appended and run, the last one's logits into logits (the prompt in one step: the
 * context's n_batch is the whole context when there are interventions). */
static attnd_status eng_eval(struct run_eng *e, const int32_t *t, int n, float *logits)
{
    if (!e->iv) return fwd_eval(e->c, t, n, false, logits);
    if (n > e->n_ctx - (int)kv_seq_len(e->seq)) return ATTND_ERR_RANGE;
    attnd_status st = kv_seq_append(e->seq, t, (size_t)n);
    if (st) return st;
    const struct fwd_seq fs = {.kv = e->seq, .tokens = t, .n = n, .logits = logits, .iv = e->iv};
    return fwd_eval_batch(e->c, e->kv, &fs, 1);
}

static int eng_full(const struct run_eng *e)
{
    return e->iv ? (int)kv_seq_len(e->seq) >= e->n_ctx : fwd_n_past(e->c) >= fwd_n_ctx(e->c);
}

/* The generation loop: the prompt in one evaluation, then one generation step (genstep.h) and
 * one decode evaluation per token until a stop, n_predict tokens or a full context. Generated
 * ids go to gen[*ng], text to out, the reason to *finish. Returns 1 (message printed) if an
 * evaluation failed. */
static int generate(struct run_eng *c, struct gen *g, const int32_t *ptoks, size_t np, long n_predict, float *logits,
                    int32_t *gen, size_t *ng, struct sink *out, const char **finish, struct run_times *rt)
{
    double t0 = check_now_s();
    if (eng_eval(c, ptoks, (int)np, logits)) {
        fprintf(stderr, "attnd run: evaluation failed\n");
        return 1;
    }
    double t1 = check_now_s();
    while ((long)*ng < n_predict) {
        struct gen_token gt;
        if (gen_step(g, logits, &gt)) {
            fprintf(stderr, "attnd run: the model produced no finite logits\n");
            return 1;
        }
        gen[(*ng)++] = gt.id;
        emit(out, gt.text, gt.len);
        if (gt.end == GEN_STOP) *finish = "stop";
        if (gt.end != GEN_MORE || eng_full(c)) break;
        if (eng_eval(c, &gen[*ng - 1], 1, logits)) {
            fprintf(stderr, "attnd run: evaluation failed\n");
            return 1;
        }
    }
    const char *tail;
    size_t tail_len;
    gen_finish(g, &tail, &tail_len); /* what the detokenizer and the stop matcher still hold */
    emit(out, tail, tail_len);
    rt->pp_s = t1 - t0;
    rt->tg_s = check_now_s() - t1;
    return 0;
}

/* Prints the --json object, or the newline and the speed line on stderr. */
static void report(const struct sink *out, const struct fwd_ctx *c, const int32_t *ptoks, size_t np,
                   const int32_t *gen, size_t ng, const char *finish, const struct run_times *rt)
{
    double pp_tps = rt->pp_s > 0 ? (double)np / rt->pp_s : 0, tg_tps = rt->tg_s > 0 && ng ? (double)ng / rt->tg_s : 0;
    if (!out->json) {
        putchar('\n');
        fprintf(stderr, "prompt: %zu tokens in %.1f ms (%.1f tokens/s); generation: %zu tokens in %.1f ms (%.1f tokens/s); finish: %s; backend: %s, %s\n",
                np, rt->pp_s * 1e3, pp_tps, ng, rt->tg_s * 1e3, tg_tps, finish, fwd_backend_name(c), fwd_device_name(c));
        return;
    }
    cJSON *o = cJSON_CreateObject(), *t = cJSON_CreateObject();
    cJSON *pa = cJSON_AddArrayToObject(o, "prompt_tokens");
    for (size_t i = 0; i < np; i++) cJSON_AddItemToArray(pa, cJSON_CreateNumber(ptoks[i]));
    cJSON *ga = cJSON_AddArrayToObject(o, "tokens");
    for (size_t i = 0; i < ng; i++) cJSON_AddItemToArray(ga, cJSON_CreateNumber(gen[i]));
    char *text = utf8_sanitize(out->buf ? out->buf : "", out->len, NULL);
    cJSON_AddStringToObject(o, "text", text ? text : "");
    free(text);
    cJSON_AddStringToObject(o, "finish_reason", finish);
    cJSON_AddStringToObject(o, "backend", fwd_backend_name(c));
    cJSON_AddStringToObject(o, "device", fwd_device_name(c));
    cJSON_AddNumberToObject(t, "prompt_tokens_per_s", pp_tps);
    cJSON_AddNumberToObject(t, "generation_tokens_per_s", tg_tps);
    cJSON_AddNumberToObject(t, "prompt_ms", rt->pp_s * 1e3);
    cJSON_AddNumberToObject(t, "generation_ms", rt->tg_s * 1e3);
    cJSON_AddItemToObject(o, "timings", t);
    char *s = cJSON_PrintUnformatted(o);
    if (s) puts(s);
    free(s);
    cJSON_Delete(o);
}

/* Loads the model and its tokenizer and the prompt's token ids (--tokens, or -p tokenized),
 * each checked. Returns 0, or the exit code (message printed): 1 for a file or tokenizer
 * failure, 2 for a bad prompt. */
static int load_inputs(const char *model_path, const char *prompt, const char *tokens_arg, int special,
                       struct model **m, struct tokenizer **tok, int32_t **ptoks, size_t *np)
{
    char err[512];
    if (model_load(model_path, m, err, sizeof err)) {
        fprintf(stderr, "attnd run: %s\n", err);
        return 1;
    }
    if (tok_create((*m)->gguf, tok, err, sizeof err)) {
        fprintf(stderr, "attnd run: %s: tokenizer: %s\n", model_path, err);
        return 1;
    }
    if (tokens_arg) {
        if (cli_int_list("--tokens", tokens_arg, ptoks, np)) return 2;
    } else if (tok_encode(*tok, prompt, strlen(prompt), true, special, ptoks, np)) {
        fprintf(stderr, "attnd run: could not tokenize the prompt\n");
        return 1;
    }
    const int V = (*m)->hp.n_vocab;
    for (size_t i = 0; i < *np; i++)
        if ((*ptoks)[i] < 0 || (*ptoks)[i] >= V) {
            fprintf(stderr, "attnd run: token id %d is outside the vocabulary (%d entries)\n", (*ptoks)[i], V);
            return 2;
        }
    if (*np == 0) {
        fprintf(stderr, "attnd run: the prompt is empty (and the model adds no BOS token)\n");
        return 2;
    }
    return 0;
}

/* Everything the command line sets. */
struct run_args {
    const char *model_path, *prompt, *tokens_arg, *intervene;
    struct {
        const char *v[MAX_STOPS];
        int n;
    } stops;
    int json, ignore_eos, special;
    long n_predict, threads, n_ctx;
    int backend, vk_device;
    struct sampler_params sp;
};

/* CLI_CUSTOM parser of the repeatable --stop STR: appends to run_args.stops. */
static int parse_stop(const char *flag, const char *v, void *dest)
{
    struct run_args *A = dest;
    if (A->stops.n == MAX_STOPS) {
        fprintf(stderr, "attnd run: at most %d --stop strings\n", MAX_STOPS);
        return -1;
    }
    A->stops.v[A->stops.n++] = v;
    return 0;
}

/* Fills *A from argv; returns CLI_GO, or the exit status (help printed, or a usage error). */
static int parse_args(struct run_args *A, int argc, char **argv)
{
    *A = (struct run_args){.n_predict = 128, .backend = FWD_BACKEND_AUTO, .sp = sampler_params_default()};
    struct sampler_params *sp = &A->sp;
    const struct cli_opt opts[] = {
        {CLI_OPT("--model", "-m", CLI_STR, &A->model_path, "PATH", "GGUF model (required)")},
        {CLI_OPT("--prompt", "-p", CLI_STR, &A->prompt, "PROMPT", "the prompt text")},
        {CLI_OPT("--tokens", NULL, CLI_STR, &A->tokens_arg, "ID,ID,...", "the prompt as token ids (instead of -p)")},
        {CLI_OPT("--n-predict", "-n", CLI_LONG, &A->n_predict, "N", "tokens to generate (default 128)"), CLI_RANGE(0, 1 << 20)},
        {CLI_OPT("--temp", NULL, CLI_FLOAT, &sp->temperature, "T", "temperature, 0 = greedy (default 0.8)"), CLI_RANGE(0, 100), .alias = "--temperature"},
        {CLI_OPT("--top-k", NULL, CLI_INT, &sp->top_k, "K", "(default 40; 0 = off)"), CLI_RANGE(0, 1 << 22)},
        {CLI_OPT("--top-p", NULL, CLI_FLOAT, &sp->top_p, "P", "(default 0.95)"), CLI_RANGE(0, 1)},
        {CLI_OPT("--min-p", NULL, CLI_FLOAT, &sp->min_p, "P", "(default 0.05)"), CLI_RANGE(0, 1)},
        {CLI_OPT("--repeat-penalty", NULL, CLI_FLOAT, &sp->repetition_penalty, "R", "(default 1 = off)"), CLI_RANGE(0, 10)},
        {CLI_OPT("--presence-penalty", NULL, CLI_FLOAT, &sp->presence_penalty, "X", "(default 0 = off)"), CLI_RANGE(-2, 2)},
        {CLI_OPT("--frequency-penalty", NULL, CLI_FLOAT, &sp->frequency_penalty, "X", "(default 0 = off)"), CLI_RANGE(-2, 2)},
        {CLI_OPT("--seed", NULL, CLI_U64, &sp->seed, "S", "sampling seed"), CLI_RANGE(0, 0x7fffffffL)},
        {CLI_OPT("--stop", NULL, CLI_CUSTOM, A, "STR", "stop when STR is generated (repeatable, up to 16)"), .parse = parse_stop},
        {CLI_OPT("--ignore-eos", NULL, CLI_FLAG, &A->ignore_eos, NULL, "keep generating past end-of-generation tokens")},
        {CLI_OPT("--special", NULL, CLI_FLAG, &A->special, NULL, "parse special tokens (<|im_end|>...) in the prompt and print them")},
        CLI_THREADS_OPT(CLI_LONG, &A->threads, 256),
        {CLI_OPT("--ctx", NULL, CLI_LONG, &A->n_ctx, "N", "context, tokens (default: prompt + N, at most the model's)"), CLI_RANGE(0, 1 << 22)},
        {CLI_OPT("--json", NULL, CLI_FLAG, &A->json, NULL, "print one JSON object instead of streaming the text")},
        {CLI_OPT("--intervene", NULL, CLI_STR, &A->intervene, "FILE",
                 "a JSON array of interventions (head_scale, head_mean, steer, skip; docs/API.md) applied to the run")},
        CLI_BACKEND_OPTS(&A->backend, &A->vk_device),
        CLI_HELP_OPT,
        {.type = CLI_END},
    };
    const struct cli_cmd cmd = {.name = "run", .usage = "attnd run -m MODEL.gguf (-p PROMPT | --tokens ID,ID,...) [options]",
                                .opts = opts};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO) return rc;
    if (!A->model_path || (!A->prompt && !A->tokens_arg) || (A->prompt && A->tokens_arg)) {
        fprintf(stderr, "attnd run: need -m MODEL and exactly one of -p PROMPT or --tokens IDS\n");
        cli_usage(&cmd, stderr);
        return 2;
    }
    char err[512];
    if (sampler_params_validate(sp, err, sizeof err)) {
        fprintf(stderr, "attnd run: %s\n", err);
        return 2;
    }
    return CLI_GO;
}

/* --intervene's file into *iv for m, a context of ctx positions and a prompt of np tokens.
 * Returns 0, or 2 (message printed). */
static int load_interventions(const char *path, const struct model *m, long ctx, size_t np, struct iv_set **iv)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL, err[512];
    size_t n = 0;
    int rc = 2;
    if (!f) {
        fprintf(stderr, "attnd run: cannot open %s\n", path);
        return 2;
    }
    for (size_t cap = 0, got; cap < (64u << 20); n += got) { /* at most 64 MiB */
        if (n == cap) {
            char *nb = realloc(buf, cap = cap ? cap * 2 : 65536);
            if (!nb) break;
            buf = nb;
        }
        if (!(got = fread(buf + n, 1, cap - n, f))) break;
    }
    fclose(f);
    cJSON *root = buf ? cJSON_ParseWithLength(buf, n) : NULL;
    if (!root) fprintf(stderr, "attnd run: %s is not valid JSON\n", path);
    else if (iv_parse_json(root, &m->hp, (int)ctx, "interventions", iv, err, sizeof err))
        fprintf(stderr, "attnd run: %s: %s\n", path, err);
    else rc = 0;
    if (*iv) (*iv)->n_prompt = np;
    cJSON_Delete(root);
    free(buf);
    return rc;
}

/* The forward context, and with interventions the cache and sequence they run on (the CPU
 * backend; auto means the CPU then). Returns 0, or 1 (message printed). */
static int eng_open(struct run_eng *e, const struct model *m, struct fwd_opts fo)
{
    if (e->iv) {
        if (fo.backend == FWD_BACKEND_AUTO) fo.backend = FWD_BACKEND_CPU;
        e->n_ctx = fo.n_ctx;
        fo.n_batch = fo.n_ctx < (1 << 16) ? fo.n_ctx : (1 << 16); /* the prompt in one step (head_mean) */
        fo.n_ctx = -1;
    }
    if (fwd_create(m, &fo, &e->c)) {
        fprintf(stderr, "attnd run: cannot create the forward context: %s\n",
                fwd_backend_error()[0] ? fwd_backend_error() : "out of memory");
        return 1;
    }
    if (!e->iv) return 0;
    if (strcmp(fwd_backend_name(e->c), "cpu") != 0) {
        fprintf(stderr, "attnd run: --intervene needs the CPU backend\n");
        return 1;
    }
    const struct model_hparams *hp = &m->hp;
    struct kv_opts ko = kv_opts_default(hp->n_layer, hp->n_head_kv, hp->head_dim, kv_blocks_for_tokens((size_t)e->n_ctx));
    ko.type = TENSOR_F32;
    size_t cached;
    if (kv_create(&ko, &e->kv) || kv_seq_create(e->kv, NULL, 0, (size_t)e->n_ctx, &e->seq, &cached)) {
        fprintf(stderr, "attnd run: out of memory for the KV cache\n");
        return 1;
    }
    return 0;
}

static void eng_close(struct run_eng *e)
{
    kv_seq_destroy(e->seq);
    kv_destroy(e->kv);
    fwd_destroy(e->c);
    iv_destroy(e->iv);
}

int cmd_run(int argc, char **argv)
{
    struct run_args A;
    int rc = parse_args(&A, argc, argv);
    if (rc != CLI_GO) return rc;
    const char *model_path = A.model_path, *prompt = A.prompt, *tokens_arg = A.tokens_arg;
    const char *const *stops = A.stops.v;
    int n_stops = A.stops.n, json = A.json, ignore_eos = A.ignore_eos, special = A.special;
    long n_predict = A.n_predict, threads = A.threads, n_ctx = A.n_ctx;
    int backend = A.backend, vk_device = A.vk_device;
    struct sampler_params sp = A.sp;

    struct model *m = NULL;
    struct tokenizer *tok = NULL;
    struct run_eng eng = {0};
    struct gen *g = NULL;
    int32_t *ptoks = NULL, *gen = NULL;
    size_t np = 0, ng = 0;
    float *logits = NULL;
    struct sink out = {.json = json};
    const char *finish = "length";

    if ((rc = load_inputs(model_path, prompt, tokens_arg, special, &m, &tok, &ptoks, &np))) goto done;
    rc = 1;
    const int V = m->hp.n_vocab;
    long ctx = n_ctx ? n_ctx : (long)np + n_predict;
    if (ctx > m->hp.n_ctx_train && !n_ctx) ctx = m->hp.n_ctx_train;
    if ((long)np + (n_predict ? 1 : 0) > ctx) {
        fprintf(stderr, "attnd run: the prompt has %zu tokens; the context holds %ld\n", np, ctx);
        rc = 2;
        goto done;
    }
    struct fwd_opts fo = {.n_ctx = (int)ctx, .n_threads = (int)threads, .backend = (enum fwd_backend)backend,
                          .vk_device = vk_device};
    if (A.intervene && (rc = load_interventions(A.intervene, m, ctx, np, &eng.iv))) goto done;
    rc = 1;
    logits = malloc((size_t)V * sizeof(float));
    gen = malloc(((size_t)n_predict + 1) * sizeof *gen);
    if (logits && gen && eng_open(&eng, m, fo)) goto done;
    const struct gen_opts go = {.sampling = sp, .stops = stops, .n_stops = n_stops, .ignore_eos = ignore_eos,
                                .decode_flags = special ? TOK_DECODE_SPECIAL : 0, .max_tokens = (int)n_predict};
    if (!logits || !gen || gen_create(tok, V, &go, &g)) {
        fprintf(stderr, "attnd run: out of memory\n");
        goto done;
    }
    gen_accept_context(g, ptoks, np);
    struct run_times rt;
    if (generate(&eng, g, ptoks, np, n_predict, logits, gen, &ng, &out, &finish, &rt)) goto done;
    report(&out, eng.c, ptoks, np, gen, ng, finish, &rt);
    rc = 0;
done:
    free(out.buf);
    free(logits);
    free(gen);
    free(ptoks);
    gen_destroy(g);
    eng_close(&eng);
    tok_destroy(tok);
    model_destroy(m);
    return rc;
}
