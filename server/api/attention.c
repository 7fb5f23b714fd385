/* attention.c - GET /attention. See attention.h.
 *
 * The weights are computed by the scheduler thread (sched_attention); this file only checks the
 * query, finds the request (lookup.h) and writes the JSON (by hand: a 2048-token map is two
 * million numbers, and "%.9g" keeps every float exact at a third of cJSON's output size).
 */
#include "server/api/attention.h"

#include <stdlib.h>
#include <string.h>

#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "server/api/errors.h"
#include "server/api/lookup.h"
#include "server/api/query.h"

/* The parsed query. */
struct attn_query {
    unsigned long long layer, head;
    const char *id;    /* id= or NULL */
    const char *index; /* index= (the choice of a chat or completion) or NULL */
    bool values;    /* values=1: also the value vectors and the head's output */
};

/* What the engine computed for one map. */
struct attn_result {
    float *w;             /* (n(n+1)/2) row i has i+1 weights */
    float *vals, *outp;   /* (n, head_dim) each, when values were asked for */
    struct api_buf pieces; /* the tokens' texts, comma-separated JSON strings */
};

/* A flag given as 0, 1, false or true. */
static bool parse_flag(const char *s, bool *out)
{
    if (!strcmp(s, "1") || !strcmp(s, "true")) *out = true;
    else if (!strcmp(s, "0") || !strcmp(s, "false")) *out = false;
    else return false;
    return true;
}

static bool parse_query(struct api_conn *c, struct attn_query *q, enum MHD_Result *ret)
{
    static const char *const names[] = {"layer", "head", "id", "values", "index", NULL};
    const char *val[API_QUERY_MAX];
    if (!api_query_read(c, names, val, ret)) return false;
    const char *layer = val[0], *head = val[1], *values = val[3];
    *q = (struct attn_query){.id = val[2], .index = val[4]};
    if (!layer || !head)
        *ret = api_error(c, 400, "'layer' and 'head' are required, e.g. /attention?layer=0&head=0");
    else if (!api_parse_uint(layer, 1u << 20, &q->layer))
        *ret = api_error(c, 400, "'layer' must be a non-negative integer");
    else if (!api_parse_uint(head, 1u << 20, &q->head))
        *ret = api_error(c, 400, "'head' must be a non-negative integer");
    else if (values && !parse_flag(values, &q->values))
        *ret = api_error(c, 400, "'values' must be 0, 1, true or false");
    else return true;
    return false;
}

/* Runs the map on the scheduler and collects the token texts. Returns the status; *why gets a
 * message for the failures that have no engine status of their own. */
static attnd_status compute(struct api_conn *c, const struct attn_query *q, const struct api_lookup *lk,
                            struct attn_result *res, const char **why)
{
    const size_t n = lk->n, hd = (size_t)lk->hp.head_dim;
    res->w = malloc(n * (n + 1) / 2 * sizeof *res->w);
    res->vals = q->values ? malloc(n * hd * sizeof *res->vals) : NULL;
    res->outp = q->values ? malloc(n * hd * sizeof *res->outp) : NULL;
    if (!res->w || (q->values && (!res->vals || !res->outp))) return ATTND_ERR_NOMEM;
    struct api_engine e;
    if (!api_engine_acquire(c->srv, &e)) {
        *why = "no model is loaded";
        return ATTND_ERR_UNSUPPORTED;
    }
    attnd_status st = sched_attention(e.sched, lk->tokens, n, (int)q->layer, (int)q->head, res->w, res->vals, res->outp);
    size_t cap = tok_max_piece(e.tok) + 8;
    char *piece = st ? NULL : malloc(cap);
    if (!st && !piece) st = ATTND_ERR_NOMEM;
    for (size_t i = 0; !st && i < n; i++) {
        if (i) api_buf_put(&res->pieces, ",", 1);
        api_lookup_put_token(&res->pieces, e.tok, lk->tokens[i], piece, cap);
    }
    api_engine_release(c->srv);
    free(piece);
    if (!st && res->pieces.oom) st = ATTND_ERR_NOMEM;
    return st;
}

static void put_rows(struct api_buf *b, const char *name, const float *m, size_t rows, size_t cols)
{
    api_buf_printf(b, ",\"%s\":[", name);
    for (size_t i = 0; i < rows; i++) {
        api_buf_puts(b, i ? ",[" : "[");
        for (size_t j = 0; j < cols; j++) {
            if (j) api_buf_put(b, ",", 1);
            api_buf_float(b, m[i * cols + j]);
        }
        api_buf_put(b, "]", 1);
    }
    api_buf_put(b, "]", 1);
}

static void write_answer(struct api_buf *b, const struct attn_query *q, const struct api_lookup *lk,
                         const struct attn_result *res)
{
    const size_t n = lk->n, hd = (size_t)lk->hp.head_dim;
    api_buf_printf(b, "{\"id\":\"%s\",\"layer\":%llu,\"head\":%llu,\"kv_head\":%llu,\"n_tokens\":%zu,"
                      "\"head_dim\":%zu,\"truncated\":%s,\"token_ids\":[",
                   lk->name, q->layer, q->head,
                   q->head / (unsigned long long)(lk->hp.n_head / lk->hp.n_head_kv), n, hd,
                   lk->truncated ? "true" : "false");
    for (size_t i = 0; i < n; i++) api_buf_printf(b, "%s%d", i ? "," : "", lk->tokens[i]);
    api_buf_puts(b, "],\"tokens\":[");
    api_buf_put(b, res->pieces.p ? res->pieces.p : "", res->pieces.len);
    api_buf_puts(b, "],\"weights\":[");
    for (size_t i = 0; i < n; i++) {
        const float *row = res->w + i * (i + 1) / 2;
        api_buf_puts(b, i ? ",[" : "[");
        for (size_t j = 0; j <= i; j++) {
            if (j) api_buf_put(b, ",", 1);
            api_buf_float(b, row[j]);
        }
        api_buf_put(b, "]", 1);
    }
    api_buf_put(b, "]", 1);
    if (q->values) {
        put_rows(b, "values", res->vals, n, hd);
        put_rows(b, "output", res->outp, n, hd);
    }
    api_buf_puts(b, "}\n");
}

/* An upper bound of the answer's JSON: 16 bytes a number ("%.9g" and a comma), each token's
 * id and text, the brackets. */
static size_t json_bound(const struct attn_query *q, const struct api_lookup *lk)
{
    const size_t n = lk->n, cells = n * (n + 1) / 2 + (q->values ? 2 * n * (size_t)lk->hp.head_dim : 0);
    return cells * 16 + n * (3 + 12 + 64) + 1024;
}

/* What computing and answering holds at once (lookup.h's budget): the floats, the token texts
 * and the JSON. */
static size_t answer_bound(const struct attn_query *q, const struct api_lookup *lk)
{
    const size_t n = lk->n, cells = n * (n + 1) / 2 + (q->values ? 2 * n * (size_t)lk->hp.head_dim : 0);
    return cells * sizeof(float) + n * 64 + json_bound(q, lk);
}

enum MHD_Result api_attention(struct api_conn *c)
{
    struct attn_query q;
    struct api_lookup lk;
    enum MHD_Result ret;
    if (!parse_query(c, &q, &ret) || !api_lookup_begin(c, q.id, q.index, &lk, &ret)) return ret;
    if (q.layer >= (unsigned long long)lk.hp.n_layer)
        return api_error(c, 400, "'layer' %llu is out of range (the model has layers 0..%d)", q.layer, lk.hp.n_layer - 1);
    if (q.head >= (unsigned long long)lk.hp.n_head)
        return api_error(c, 400, "'head' %llu is out of range (the model has query heads 0..%d)", q.head,
                         lk.hp.n_head - 1);
    if (!api_lookup_tokens(c, &lk, "/attention maps", &ret)) return ret;
    if (lk.n == 0) {
        api_lookup_free(&lk);
        return api_error(c, 404, "request %s has no tokens", lk.name);
    }
    const size_t held = answer_bound(&q, &lk);
    if (!api_lookup_reserve(c, held, &ret)) {
        api_lookup_free(&lk);
        return ret;
    }
    struct attn_result res = {0};
    const char *why = NULL;
    /* the JSON's room taken at once: grown by doubling it would leave a trail of freed blocks in
     * this thread's malloc arena, memory the process keeps and the budget does not see */
    struct api_buf b = {0};
    const size_t room = json_bound(&q, &lk);
    if ((b.p = malloc(room))) b.cap = room, b.p[0] = 0;
    attnd_status st = compute(c, &q, &lk, &res, &why);
    if (!st) write_answer(&b, &q, &lk, &res);
    free(res.w); /* before the answer goes out: only its body stays held */
    res.w = NULL;
    ret = api_lookup_reply(c, st, why, "attention map", &b, held);
    api_buf_free(&res.pieces);
    free(res.w);
    free(res.vals);
    free(res.outp);
    api_lookup_free(&lk);
    return ret;
}
