/* lookup.c - see lookup.h. */
#include "server/api/lookup.h"

#include <stdio.h>
#include <stdlib.h>

#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "server/api/errors.h"
#include "server/api/history.h"
#include "server/api/query.h"

bool api_lookup_begin(struct api_conn *c, const char *id_param, struct api_lookup *lk, enum MHD_Result *ret)
{
    *lk = (struct api_lookup){.by_id = id_param != NULL};
    if (lk->by_id && !api_parse_gen_id(id_param, &lk->want_id)) {
        *ret = api_error(c, 400, "'id' must look like gen-N (as /v1/generate answers)");
        return false;
    }
    struct api_engine e;
    if (!api_engine_acquire(c->srv, &e)) {
        *ret = api_error_hdr(c, 503, "Retry-After", "1", "no model is loaded");
        return false;
    }
    lk->hp = e.model->hp;
    lk->n_ctx = (size_t)sched_n_ctx(e.sched);
    api_engine_release(c->srv);
    return true;
}

bool api_lookup_tokens(struct api_conn *c, struct api_lookup *lk, const char *reads, enum MHD_Result *ret)
{
    struct http_server *srv = c->srv;
    int code = api_history_get(srv, lk->by_id, lk->want_id, &lk->id, &lk->tokens, &lk->n);
    if (code == 404) {
        if (lk->by_id)
            *ret = api_error(c, 404, "no finished request gen-%llu (the last %d finished requests are kept)",
                             (unsigned long long)lk->want_id, srv->cfg.keep_requests);
        else *ret = api_error(c, 404, "no request has finished yet");
        return false;
    }
    if (code) {
        *ret = api_error_hdr(c, 503, "Retry-After", "1", "out of memory");
        return false;
    }
    if (lk->n > (size_t)srv->cfg.attention_max_tokens) {
        *ret = api_error(c, 413, "request gen-%llu has %zu tokens; %s at most %d (--attention-max-tokens)",
                         (unsigned long long)lk->id, lk->n, reads, srv->cfg.attention_max_tokens);
        api_lookup_free(lk);
        return false;
    }
    /* the last generated token may never have been evaluated, and a full context has no room
     * for it: read the first n_ctx tokens */
    lk->truncated = lk->n > lk->n_ctx;
    if (lk->truncated) lk->n = lk->n_ctx;
    return true;
}

void api_lookup_free(struct api_lookup *lk)
{
    free(lk->tokens);
    lk->tokens = NULL;
    lk->n = 0;
}

void api_lookup_put_token(struct api_buf *b, const struct tokenizer *tok, int id, char *piece, size_t cap)
{
    size_t len = tok_decode_token(tok, id, piece, cap, true);
    api_buf_json_str(b, piece, len < cap ? len : cap);
}

enum MHD_Result api_lookup_reply(struct api_conn *c, attnd_status st, const char *why, const char *what,
                                 struct api_buf *b)
{
    if (st) {
        api_buf_free(b);
        return api_error_retry(c, api_status_code(st, true), "%s failed: %s", what, why ? why : attnd_status_str(st));
    }
    size_t len = b->len;
    char *body = api_buf_take(b);
    if (!body) return api_error_hdr(c, 503, "Retry-After", "1", "out of memory for the answer");
    return api_respond(c, 200, "application/json", body, len, NULL);
}
