/* logit_lens.c - GET /logit_lens. See logit_lens.h.
 *
 * Same steps as /attention (lookup.h): check the query, copy the finished request's tokens out
 * of the history, let the scheduler thread compute (sched_logit_lens), write the JSON by hand.
 * The lens at pos depends only on tokens[0..pos] (attention is causal), so only those pos + 1
 * tokens are evaluated.
 */
#include "server/api/logit_lens.h"

#include <stdlib.h>

#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "server/api/errors.h"
#include "server/api/lookup.h"
#include "server/api/query.h"

_Static_assert(API_LOGIT_LENS_TOP_MAX <= SCHED_MAX_LOGPROBS, "top= cap above what the scheduler accepts");

/* The parsed query. */
struct lens_query {
    unsigned long long pos, top;
    const char *id;    /* id= or NULL */
    const char *index; /* index= (the choice of a chat or completion) or NULL */
};

static bool parse_query(struct api_conn *c, struct lens_query *q, enum MHD_Result *ret)
{
    static const char *const names[] = {"id", "pos", "top", "index", NULL};
    const char *val[API_QUERY_MAX];
    if (!api_query_read(c, names, val, ret)) return false;
    *q = (struct lens_query){.id = val[0], .index = val[3], .top = API_LOGIT_LENS_TOP_DEFAULT};
    const char *pos = val[1], *top = val[2];
    if (!pos) *ret = api_error(c, 400, "'pos' is required, e.g. /logit_lens?pos=3");
    else if (!api_parse_uint(pos, 1u << 30, &q->pos)) *ret = api_error(c, 400, "'pos' must be a non-negative integer");
    else if (top && (!api_parse_uint(top, API_LOGIT_LENS_TOP_MAX, &q->top) || q->top < 1))
        *ret = api_error(c, 400, "'top' must be an integer 1..%d", API_LOGIT_LENS_TOP_MAX);
    else return true;
    return false;
}

/* Appends the answer: one entry per layer with its top k texts, probabilities and ids. */
static void write_answer(struct api_buf *b, const struct tokenizer *tok, const struct lens_query *q,
                         const struct api_lookup *lk, const int *ids, const float *probs, char *piece, size_t cap)
{
    const size_t k = (size_t)q->top;
    api_buf_printf(b, "{\"id\":\"%s\",\"pos\":%llu,\"token_id\":%d,\"token\":", lk->name, q->pos,
                   lk->tokens[q->pos]);
    api_lookup_put_token(b, tok, lk->tokens[q->pos], piece, cap);
    api_buf_printf(b, ",\"n_tokens\":%zu,\"top\":%zu,\"layers\":[", lk->n, k);
    for (int l = 0; l < lk->hp.n_layer; l++) {
        const int *li = ids + (size_t)l * k;
        const float *lp = probs + (size_t)l * k;
        api_buf_printf(b, "%s{\"layer\":%d,\"top\":[", l ? "," : "", l);
        for (size_t i = 0; i < k; i++) {
            api_buf_puts(b, i ? ",[" : "[");
            api_lookup_put_token(b, tok, li[i], piece, cap);
            api_buf_put(b, ",", 1);
            api_buf_float(b, lp[i]);
            api_buf_put(b, "]", 1);
        }
        api_buf_puts(b, "],\"top_ids\":[");
        for (size_t i = 0; i < k; i++) api_buf_printf(b, "%s%d", i ? "," : "", li[i]);
        api_buf_puts(b, "]}");
    }
    api_buf_puts(b, "]}\n");
}

/* Runs the lens on the scheduler and writes the answer into b (the texts need the tokenizer,
 * so under the same engine hold). *why gets a message for failures without a status of their own. */
static attnd_status compute(struct api_conn *c, const struct lens_query *q, const struct api_lookup *lk,
                            struct api_buf *b, const char **why)
{
    const size_t k = (size_t)q->top, cells = (size_t)lk->hp.n_layer * k;
    int *ids = malloc(cells * sizeof *ids);
    float *probs = malloc(cells * sizeof *probs);
    char *piece = NULL;
    struct api_engine e;
    attnd_status st = ATTND_OK;
    if (!ids || !probs) st = ATTND_ERR_NOMEM;
    else if (!api_engine_acquire(c->srv, &e)) {
        *why = "no model is loaded";
        st = ATTND_ERR_UNSUPPORTED;
    } else {
        st = sched_logit_lens(e.sched, lk->tokens, (size_t)q->pos + 1, (int)q->pos, (int)k, ids, probs);
        size_t cap = tok_max_piece(e.tok) + 8;
        if (!st && !(piece = malloc(cap))) st = ATTND_ERR_NOMEM;
        if (!st) write_answer(b, e.tok, q, lk, ids, probs, piece, cap);
        api_engine_release(c->srv);
        if (!st && b->oom) st = ATTND_ERR_NOMEM;
    }
    free(piece);
    free(ids);
    free(probs);
    return st;
}

enum MHD_Result api_logit_lens(struct api_conn *c)
{
    struct lens_query q;
    struct api_lookup lk;
    enum MHD_Result ret;
    if (!parse_query(c, &q, &ret) || !api_lookup_begin(c, q.id, q.index, &lk, &ret)) return ret;
    if (q.top > (unsigned long long)lk.hp.n_vocab) q.top = (unsigned long long)lk.hp.n_vocab;
    if (!api_lookup_tokens(c, &lk, "/logit_lens reads", &ret)) return ret;
    if (q.pos >= lk.n) {
        ret = api_error(c, 400, "'pos' %llu is out of range (request %s has positions 0..%zu)", q.pos,
                        lk.name, lk.n ? lk.n - 1 : 0);
        api_lookup_free(&lk);
        return ret;
    }
    /* the budget (lookup.h): per layer and candidate its text (escaped), probability and id */
    const size_t held = (size_t)lk.hp.n_layer * (size_t)q.top * (6 * 64 + 48) + 4096;
    if (!api_lookup_reserve(c, held, &ret)) {
        api_lookup_free(&lk);
        return ret;
    }
    struct api_buf b = {0};
    const char *why = NULL;
    attnd_status st = compute(c, &q, &lk, &b, &why);
    ret = api_lookup_reply(c, st, why, "logit lens", &b, held);
    api_lookup_free(&lk);
    return ret;
}
