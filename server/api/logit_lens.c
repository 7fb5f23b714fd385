/* logit_lens.c - GET /logit_lens. See logit_lens.h.
 *
 * Same pattern as /attention: check the query, copy the finished request's tokens out of the
 * history (srv->history under srv->mu), let the scheduler thread compute (sched_logit_lens),
 * write the JSON by hand. The lens at pos depends only on tokens[0..pos] (attention is causal),
 * so only those pos + 1 tokens are evaluated.
 */
#include "server/api/logit_lens.h"

#include "server/api/attention.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "server/api/errors.h"

_Static_assert(API_LOGIT_LENS_TOP_MAX <= SCHED_MAX_LOGPROBS, "top= cap above what the scheduler accepts");

/* Appends token id's text as a JSON string (piece is a scratch buffer of cap bytes). */
static void put_piece(struct api_buf *b, const struct tokenizer *tok, int id, char *piece, size_t cap)
{
    size_t len = tok_decode_token(tok, id, piece, cap, true);
    api_buf_json_str(b, piece, len < cap ? len : cap);
}

/* ---- the route ------------------------------------------------------------------------------- */

enum MHD_Result api_logit_lens(struct api_conn *c)
{
    struct http_server *srv = c->srv;
    static const char *const names[] = {"id", "pos", "top", NULL};
    struct {
        const char *id, *pos, *top;
    } q;
    const char *val[API_QUERY_MAX];
    enum MHD_Result ret;
    if (!api_query_read(c, names, val, &ret)) return ret;
    q.id = val[0], q.pos = val[1], q.top = val[2];
    if (!q.pos) return api_error(c, 400, "'pos' is required, e.g. /logit_lens?pos=3");
    unsigned long long pos, top = API_LOGIT_LENS_TOP_DEFAULT, id = 0;
    if (!api_parse_uint(q.pos, 1u << 30, &pos)) return api_error(c, 400, "'pos' must be a non-negative integer");
    if (q.top && (!api_parse_uint(q.top, API_LOGIT_LENS_TOP_MAX, &top) || top < 1))
        return api_error(c, 400, "'top' must be an integer 1..%d", API_LOGIT_LENS_TOP_MAX);
    bool by_id = q.id != NULL;
    if (by_id) {
        const char *s = q.id;
        if (!strncmp(s, "gen-", 4)) s += 4;
        if (!api_parse_uint(s, UINT64_MAX, &id)) return api_error(c, 400, "'id' must look like gen-N (as /v1/generate answers)");
    }

    struct api_engine e;
    if (!api_engine_acquire(srv, &e)) return api_error_hdr(c, 503, "Retry-After", "1", "no model is loaded");
    const int n_layer = e.model->hp.n_layer, n_vocab = e.model->hp.n_vocab;
    const size_t n_ctx = (size_t)sched_n_ctx(e.sched);
    api_engine_release(srv);
    if (top > (unsigned long long)n_vocab) top = (unsigned long long)n_vocab;

    int32_t *tokens = NULL;
    size_t n = 0;
    uint64_t rid = 0;
    int code = api_history_get(srv, by_id, id, &rid, &tokens, &n);
    if (code == 404) {
        if (by_id)
            return api_error(c, 404, "no finished request gen-%llu (the last %d finished requests are kept)", id,
                             srv->cfg.keep_requests);
        return api_error(c, 404, "no request has finished yet");
    }
    if (code) return api_error_hdr(c, 503, "Retry-After", "1", "out of memory");
    if (n > (size_t)srv->cfg.attention_max_tokens) {
        free(tokens);
        return api_error(c, 413, "request gen-%llu has %zu tokens; /logit_lens reads at most %d (--attention-max-tokens)",
                         (unsigned long long)rid, n, srv->cfg.attention_max_tokens);
    }
    /* as /attention: a request that filled its context is read over its first n_ctx tokens */
    if (n > n_ctx) n = n_ctx;
    if (pos >= n) {
        free(tokens);
        return api_error(c, 400, "'pos' %llu is out of range (request gen-%llu has positions 0..%zu)", pos,
                         (unsigned long long)rid, n ? n - 1 : 0);
    }

    const size_t k = (size_t)top, cells = (size_t)n_layer * k;
    int *ids = malloc(cells * sizeof *ids);
    float *probs = malloc(cells * sizeof *probs);
    char *piece = NULL;
    struct api_buf b = {0};
    int hc = 0;
    const char *why = NULL;
    if (!ids || !probs) {
        hc = 503;
        why = "out of memory";
    } else if (!api_engine_acquire(srv, &e)) {
        hc = 503;
        why = "no model is loaded";
    } else {
        attnd_status st = sched_logit_lens(e.sched, tokens, (size_t)pos + 1, (int)pos, (int)k, ids, probs);
        size_t cap = tok_max_piece(e.tok) + 8;
        if (!st && !(piece = malloc(cap))) st = ATTND_ERR_NOMEM;
        if (!st) {
            api_buf_printf(&b, "{\"id\":\"gen-%llu\",\"pos\":%llu,\"token_id\":%d,\"token\":", (unsigned long long)rid,
                           pos, tokens[pos]);
            put_piece(&b, e.tok, tokens[pos], piece, cap);
            api_buf_printf(&b, ",\"n_tokens\":%zu,\"top\":%zu,\"layers\":[", n, k);
            for (int l = 0; l < n_layer; l++) {
                const int *li = ids + (size_t)l * k;
                const float *lp = probs + (size_t)l * k;
                api_buf_printf(&b, "%s{\"layer\":%d,\"top\":[", l ? "," : "", l);
                for (size_t i = 0; i < k; i++) {
                    api_buf_puts(&b, i ? ",[" : "[");
                    put_piece(&b, e.tok, li[i], piece, cap);
                    api_buf_put(&b, ",", 1);
                    api_buf_float(&b, lp[i]);
                    api_buf_put(&b, "]", 1);
                }
                api_buf_puts(&b, "],\"top_ids\":[");
                for (size_t i = 0; i < k; i++) api_buf_printf(&b, "%s%d", i ? "," : "", li[i]);
                api_buf_puts(&b, "]}");
            }
            api_buf_puts(&b, "]}\n");
            if (b.oom) st = ATTND_ERR_NOMEM;
        }
        api_engine_release(srv);
        if (st) {
            hc = st == ATTND_ERR_INVALID ? 400 : st == ATTND_ERR_RANGE ? 413 : st == ATTND_ERR_INTERNAL || st == ATTND_ERR_NUMERIC ? 500 : 503;
            why = attnd_status_str(st);
        }
    }

    enum MHD_Result r;
    if (hc) {
        api_buf_free(&b);
        r = hc == 503 ? api_error_hdr(c, 503, "Retry-After", "1", "logit lens failed: %s", why)
                      : api_error(c, hc, "logit lens failed: %s", why);
    } else {
        size_t len = b.len;
        char *body = api_buf_take(&b);
        r = body ? api_respond(c, 200, "application/json", body, len, NULL)
                 : api_error_hdr(c, 503, "Retry-After", "1", "out of memory for the answer");
    }
    free(piece);
    free(ids);
    free(probs);
    free(tokens);
    return r;
}
