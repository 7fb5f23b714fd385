/* test_intervene.c - interventions (intervene.h) below the HTTP layer:
 *   1. the JSON form: every kind parsed as written, errors naming the field path, vector_b64
 *      decoded, positions sorted and made distinct, fingerprints equal exactly for equal lists;
 *   2. the keyed prefix cache: blocks committed under one key are found by that key only;
 *   3. the induction experiment on the shipped model (models/kjv.gguf, skipped if absent): on
 *      BOS + r + r (r: 40 seeded random NORMAL tokens), the second copy's loss is far below the
 *      first's; zeroing the census's induction heads (head_scale 0) raises it a large part of the
 *      way back (measured: 0.10 -> 4.37 nats, first copy 9.50), zeroing as many other heads of the
 *      same layer hardly (0.10 -> 0.21).
 * Exits 0 pass, 1 fail. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/census.h"
#include "attnd/forward.h"
#include "attnd/intervene.h"
#include "attnd/kvcache.h"
#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "tests/unit/testutil.h"

static const struct model_hparams HP = {.n_embd = 4, .n_layer = 2, .n_head = 2, .n_head_kv = 1, .head_dim = 2};

static attnd_status parse(const char *js, struct iv_set **out, char *err, size_t n)
{
    cJSON *a = cJSON_Parse(js);
    attnd_status st = iv_parse_json(a, &HP, 64, "interventions", out, err, n);
    cJSON_Delete(a);
    return st;
}

static void test_parse(void)
{
    char err[256];
    struct iv_set *s = NULL, *t = NULL, *u = NULL;
    /* 1,2,3,4 as little-endian float32: AACAPwAAAEAAAEBAAACAQA== */
    const char *ok = "[{\"kind\":\"head_scale\",\"layer\":1,\"head\":1,\"scale\":0.5},{\"kind\":\"head_mean\",\"layer\":0,"
                     "\"head\":0},{\"kind\":\"steer\",\"layer\":1,\"vector_b64\":\"AACAPwAAAEAAAEBAAACAQA==\","
                     "\"positions\":[5,2,5,0]},{\"kind\":\"skip\",\"layer\":0,\"part\":\"residual\"}]";
    T_CHECK(parse(ok, &s, err, sizeof err) == ATTND_OK && s && s->n == 4, "parse: %s", err);
    if (!s) return;
    const struct fwd_intervention *v = s->items;
    T_CHECK(v[0].kind == IV_HEAD_SCALE && v[0].layer == 1 && v[0].head == 1 && v[0].scale == 0.5f, "head_scale");
    T_CHECK(v[1].kind == IV_HEAD_MEAN && iv_has_head_mean(s) && !iv_means_ready(s), "head_mean");
    T_CHECK(v[2].kind == IV_STEER && v[2].scale == 1.0f && v[2].vector[0] == 1.0f && v[2].vector[3] == 4.0f, "b64");
    T_CHECK(v[2].where == IV_POS_LIST && v[2].n_positions == 3 && v[2].positions[0] == 0 && v[2].positions[2] == 5,
            "positions sorted, distinct: %d", v[2].n_positions);
    T_CHECK(v[3].kind == IV_SKIP && v[3].part == IV_PART_RESIDUAL && iv_skips(s, 0, IV_PART_RESIDUAL), "skip");
    T_CHECK(iv_layer_hooks(s, 0) == (IV_AT_Z | IV_AT_ATTN_OUT | IV_AT_MLP_OUT) &&
                iv_layer_hooks(s, 1) == (IV_AT_Z | IV_AT_RESID_PRE), "hooks %u %u", iv_layer_hooks(s, 0),
            iv_layer_hooks(s, 1));
    T_CHECK(parse(ok, &t, err, sizeof err) == ATTND_OK && t && t->fingerprint == s->fingerprint, "same fingerprint");
    T_CHECK(iv_clone(s, &u) == ATTND_OK && u && u->fingerprint == s->fingerprint && u->n == 4, "clone");
    iv_destroy(t);
    t = NULL;
    T_CHECK(parse("[{\"kind\":\"head_scale\",\"layer\":1,\"head\":1,\"scale\":0.25}]", &t, err, sizeof err) == ATTND_OK &&
                t && t->fingerprint != s->fingerprint, "other fingerprint");
    iv_destroy(s);
    iv_destroy(t);
    iv_destroy(u);
    s = NULL;
    T_CHECK(parse("[]", &s, err, sizeof err) == ATTND_OK && !s, "empty: no set");
    static const char *const bad[][2] = {
        {"[{\"kind\":\"skip\",\"layer\":0,\"part\":\"mlp\"},{\"kind\":\"head_scale\",\"layer\":0,\"head\":2,\"scale\":1}]",
         "interventions[1].head"},
        {"[{\"kind\":\"steer\",\"layer\":0,\"vector\":[1,2,3]}]", "interventions[0].vector"},
        {"[{\"kind\":\"steer\",\"layer\":0,\"vector\":[1,2,3,4],\"vector_b64\":\"AAAA\"}]", "interventions[0]'"},
        {"[{\"kind\":\"steer\",\"layer\":0,\"vector_b64\":\"AACAPwAAAEAAAEBA\"}]", "interventions[0].vector_b64"},
        {"[{\"kind\":\"steer\",\"layer\":0,\"vector\":[1,2,3,4],\"positions\":[64]}]", "interventions[0].positions"},
        {"[{\"kind\":\"steer\",\"layer\":0,\"vector\":[1,2,3,4],\"scale\":-10001}]", "interventions[0].scale"},
        {"[{\"kind\":\"skip\",\"layer\":-1,\"part\":\"mlp\"}]", "interventions[0].layer"},
        {"[{\"kind\":\"skip\",\"layer\":0,\"part\":\"mlp\",\"part\":\"attn\"}]", "interventions[0].part"},
        {"[3]", "interventions[0]'"},
        {"{}", "'interventions' must be an array"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s = NULL;
        err[0] = 0;
        attnd_status st = parse(bad[i][0], &s, err, sizeof err);
        T_CHECK(st == ATTND_ERR_INVALID && !s && strstr(err, bad[i][1]), "%s: %s (want %s)", bad[i][0], err, bad[i][1]);
    }
}

/* 33 tokens committed under key ka; then a lookup under kb finds `want` cached tokens. */
static void keyed_case(uint64_t ka, uint64_t kb, size_t want)
{
    struct kv_opts o = kv_opts_default(1, 1, 4, 16);
    struct kv_cache *c;
    int32_t toks[33];
    for (int i = 0; i < 33; i++) toks[i] = 100 + i;
    T_CHECK(kv_create(&o, &c) == ATTND_OK, "kv_create");
    struct kv_seq *a, *b;
    size_t n;
    T_CHECK(kv_seq_create_keyed(c, ka, toks, 33, 40, &a, &n) == ATTND_OK && n == 0, "first");
    T_CHECK(kv_seq_append(a, toks, 33) == ATTND_OK && kv_seq_commit(a, 33) == ATTND_OK, "commit");
    kv_seq_destroy(a);
    T_CHECK(kv_seq_create_keyed(c, kb, toks, 33, 40, &b, &n) == ATTND_OK && n == want,
            "key %llx after %llx: %zu cached, want %zu", (unsigned long long)kb, (unsigned long long)ka, n, want);
    char err[256];
    T_CHECK(kv_validate(c, err, sizeof err) == ATTND_OK, "kv_validate: %s", err);
    kv_seq_destroy(b);
    kv_destroy(c);
}

static void test_keyed(void)
{
    keyed_case(0, 0, 32);
    keyed_case(0, 0x1234, 0);
    keyed_case(0x1234, 0, 0);
    keyed_case(0x1234, 0x1234, 32);
    keyed_case(0x1234, 0x1235, 0);
}

/* Mean loss over the first copy (targets r[1..L-1]) and the second (the same) of BOS + r + r,
 * under the interventions iv (NULL: none). */
static void rep_loss(struct fwd_ctx *f, const struct model *m, const int32_t *toks, int L, struct iv_set *iv,
                     double *first, double *second)
{
    const int n = 2 * L + 1, V = m->hp.n_vocab;
    struct kv_opts o = kv_opts_default(m->hp.n_layer, m->hp.n_head_kv, m->hp.head_dim, kv_blocks_for_tokens((size_t)n));
    o.type = TENSOR_F32;
    struct kv_cache *kv = NULL;
    struct kv_seq *seq = NULL;
    size_t cached;
    float *lg = t_xmalloc((size_t)n * (size_t)V * sizeof *lg);
    T_CHECK(kv_create(&o, &kv) == ATTND_OK && kv_seq_create(kv, NULL, 0, (size_t)n, &seq, &cached) == ATTND_OK &&
                kv_seq_append(seq, toks, (size_t)n) == ATTND_OK, "cache");
    const struct fwd_seq fs = {.kv = seq, .tokens = toks, .n = n, .logits = lg, .all_logits = true, .iv = iv};
    T_CHECK(fwd_eval_batch(f, kv, &fs, 1) == ATTND_OK, "eval");
    double sum[2] = {0, 0};
    for (int p = 1; p < 2 * L; p++) { /* logits at p predict toks[p + 1] */
        if (p == L) continue;        /* the second copy's first token: not predictable */
        const float *row = lg + (size_t)p * V;
        double mx = -INFINITY, z = 0;
        for (int k = 0; k < V; k++) mx = row[k] > mx ? row[k] : mx;
        for (int k = 0; k < V; k++) z += exp(row[k] - mx);
        sum[p > L] += mx + log(z) - row[toks[p + 1]];
    }
    *first = sum[0] / (L - 1);
    *second = sum[1] / (L - 1);
    free(lg);
    kv_seq_destroy(seq);
    kv_destroy(kv);
}

/* head_scale 0 on every head of layers/heads listed (n of them). */
static struct iv_set *zero_heads(const struct model *m, const int *layer, const int *head, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", "head_scale");
        cJSON_AddNumberToObject(o, "layer", layer[i]);
        cJSON_AddNumberToObject(o, "head", head[i]);
        cJSON_AddNumberToObject(o, "scale", 0);
        cJSON_AddItemToArray(a, o);
    }
    struct iv_set *s = NULL;
    char err[256];
    T_CHECK(iv_parse_json(a, &m->hp, 4096, "interventions", &s, err, sizeof err) == ATTND_OK, "%s", err);
    cJSON_Delete(a);
    if (s) s->n_prompt = 0;
    return s;
}

static void test_induction(void)
{
    const char *path = "models/kjv.gguf";
    char err[512];
    struct model *m = NULL;
    struct tokenizer *tok = NULL;
    if (model_load(path, &m, err, sizeof err)) {
        fprintf(stderr, "test_intervene: no %s, induction experiment skipped\n", path);
        return;
    }
    T_CHECK(tok_create(m->gguf, &tok, err, sizeof err) == ATTND_OK, "tok: %s", err);
    struct sched_opts so = {.n_threads = 2, .n_ctx = 256};
    struct sched *s = NULL;
    struct census *cs = NULL;
    struct fwd_ctx *f = NULL;
    struct fwd_opts fo = {.n_ctx = -1, .n_threads = 2, .n_batch = 128};
    T_CHECK(sched_create(m, tok, &so, &s) == ATTND_OK && census_run(s, m, tok, &cs) == ATTND_OK, "census");
    T_CHECK(fwd_create(m, &fo, &f) == ATTND_OK, "fwd_create");
    if (!cs || !f) goto out;
    /* the census's induction heads, and as many other heads of their layers as there are */
    int il[64], ih[64], ol[64], oh[64], ni = 0, no = 0;
    for (int i = 0; i < cs->n_layer * cs->n_head && ni < 64; i++)
        if (!strcmp(cs->heads[i].role, "induction")) il[ni] = cs->heads[i].layer, ih[ni++] = cs->heads[i].head;
    for (int i = 0; i < cs->n_layer * cs->n_head && no < ni; i++) {
        bool same_layer = false;
        for (int k = 0; k < ni; k++) same_layer |= cs->heads[i].layer == il[k];
        if (same_layer && strcmp(cs->heads[i].role, "induction"))
            ol[no] = cs->heads[i].layer, oh[no++] = cs->heads[i].head;
    }
    T_CHECK(ni >= 1, "the census names induction heads");
    enum { L = 40 };
    int32_t toks[2 * L + 1];
    uint64_t x = 35;
    toks[0] = tok_bos(tok) >= 0 ? tok_bos(tok) : 0;
    for (int i = 0; i < L;) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        int id = (int)((x >> 33) % (uint64_t)m->hp.n_vocab);
        if (tok_token_type(tok, id) == TOK_TYPE_NORMAL) toks[1 + i] = toks[1 + L + i] = id, i++;
    }
    struct iv_set *ind = zero_heads(m, il, ih, ni), *oth = zero_heads(m, ol, oh, no);
    double f0, s0, f1, s1, f2, s2;
    rep_loss(f, m, toks, L, NULL, &f0, &s0);
    rep_loss(f, m, toks, L, ind, &f1, &s1);
    rep_loss(f, m, toks, L, oth, &f2, &s2);
    printf("induction: loss first/second copy: plain %.3f / %.3f; %d induction heads zeroed %.3f / %.3f; "
           "%d other heads of their layers zeroed %.3f / %.3f nats\n", f0, s0, ni, f1, s1, no, f2, s2);
    T_CHECK(s0 < f0 - 1.0, "plain: the second copy is predicted (%.3f vs %.3f)", s0, f0);
    T_CHECK(s1 > s0 + 0.3 * (f0 - s0), "induction heads zeroed: the second copy's loss goes a large part of the "
                                       "way back (%.3f, plain %.3f, first copy %.3f)", s1, s0, f0);
    T_CHECK(s1 - s0 > 2 * (s2 - s0), "other heads zeroed raise it far less (%.3f vs %.3f)", s2 - s0, s1 - s0);
    iv_destroy(ind);
    iv_destroy(oth);
out:
    fwd_destroy(f);
    census_destroy(cs);
    sched_destroy(s, 0);
    tok_destroy(tok);
    model_destroy(m);
}

int main(void)
{
    test_parse();
    test_keyed();
    test_induction();
    printf("test_intervene: %d checks, %d failed\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
