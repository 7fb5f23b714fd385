/* lookup.c - see lookup.h. */
#include "server/api/lookup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "server/api/errors.h"
#include "server/api/history.h"
#include "server/api/query.h"
#include "server/api/tenant.h"

bool api_lookup_begin(struct api_conn *c, const char *id_param, const char *index_param, struct api_lookup *lk,
                      enum MHD_Result *ret)
{
    *lk = (struct api_lookup){.by_id = id_param != NULL, .want_name = id_param};
    if ((lk->by_id || index_param) &&
        !api_parse_request_id(id_param, index_param, lk->want, sizeof lk->want, &lk->want_index)) {
        *ret = api_error(c, 400, "'id' must look like gen-H, chatcmpl-H or cmpl-H with H the 32 hex digits the "
                                 "routes answer, with 'index' 0..255 only for the last two");
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
    struct api_history_hit hit = {0};
    int code = api_history_get(srv, tenant_of(c), lk->by_id ? lk->want : NULL, lk->want_index, &hit);
    if (code == 404) {
        if (lk->by_id)
            *ret = api_error(c, 404, "no finished request %s (the last %d finished requests are kept)",
                             lk->want_name, srv->cfg.keep_requests);
        else *ret = api_error(c, 404, "no request has finished yet");
        return false;
    }
    if (code) {
        *ret = api_error_hdr(c, 503, "Retry-After", "1", "out of memory");
        return false;
    }
    memcpy(lk->name, hit.id, sizeof lk->name);
    lk->index = hit.index;
    lk->tokens = hit.tokens;
    lk->n = hit.n;
    if (lk->n > (size_t)srv->cfg.attention_max_tokens) {
        *ret = api_error(c, 413, "request %s has %zu tokens; %s at most %d (--attention-max-tokens)",
                         lk->name, lk->n, reads, srv->cfg.attention_max_tokens);
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

bool api_lookup_reserve(struct api_conn *c, size_t bytes, enum MHD_Result *ret)
{
    struct http_server *srv = c->srv;
    const size_t budget = srv->cfg.response_budget_mib << 20;
    if (bytes > budget) {
        *ret = api_error(c, 413, "this answer needs %zu MiB, more than --response-budget-mb %zu", (bytes >> 20) + 1,
                         srv->cfg.response_budget_mib);
        return false;
    }
    size_t cur = atomic_load(&srv->answer_bytes);
    do {
        if (bytes > budget - cur) {
            *ret = api_error_hdr(c, 503, "Retry-After", "1",
                                 "answers in flight hold %zu of the %zu MiB of --response-budget-mb; try again",
                                 cur >> 20, srv->cfg.response_budget_mib);
            return false;
        }
    } while (!atomic_compare_exchange_weak(&srv->answer_bytes, &cur, cur + bytes));
    return true;
}

void api_lookup_unreserve(struct http_server *srv, size_t bytes) { atomic_fetch_sub(&srv->answer_bytes, bytes); }

/* An answer's body and its share of the budget, freed together by libmicrohttpd. */
struct held_body {
    struct http_server *srv;
    char *body;
    size_t len;
};

static void free_held(void *cls)
{
    struct held_body *h = cls;
    free(h->body);
    api_lookup_unreserve(h->srv, h->len);
    free(h);
}

/* Queues body (len bytes, holding len of the budget) as the 200 answer; the response frees it. */
static enum MHD_Result respond_held(struct api_conn *c, char *body, size_t len)
{
    struct held_body *h = malloc(sizeof *h);
    struct MHD_Response *r = h ? MHD_create_response_from_buffer_with_free_callback_cls(len, body, free_held, h) : NULL;
    if (!r) {
        free(h);
        free(body);
        api_lookup_unreserve(c->srv, len);
        return api_error_hdr(c, 503, "Retry-After", "1", "out of memory for the answer");
    }
    *h = (struct held_body){.srv = c->srv, .body = body, .len = len};
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    api_cors(c, r);
    enum MHD_Result ok = MHD_queue_response(c->mc, 200, r);
    MHD_destroy_response(r); /* the queued response keeps its own reference; a failed one frees h here */
    if (ok == MHD_YES) {
        c->status = 200;
        c->responded = true;
    }
    return ok;
}

enum MHD_Result api_lookup_reply(struct api_conn *c, attnd_status st, const char *why, const char *what,
                                 struct api_buf *b, size_t reserved)
{
    if (st) {
        api_buf_free(b);
        api_lookup_unreserve(c->srv, reserved);
        return api_error_retry(c, api_status_code(st, true), "%s failed: %s", what, why ? why : attnd_status_str(st));
    }
    size_t len = b->len;
    char *body = api_buf_take(b);
    char *fit = body ? realloc(body, len + 1) : NULL; /* a grown buffer's spare room is not held */
    if (fit) body = fit;
    /* the estimate was an upper bound: keep what the body holds, give back the rest */
    if (len <= reserved) api_lookup_unreserve(c->srv, reserved - len);
    else atomic_fetch_add(&c->srv->answer_bytes, len - reserved);
    if (!body) {
        api_lookup_unreserve(c->srv, len);
        return api_error_hdr(c, 503, "Retry-After", "1", "out of memory for the answer");
    }
    return respond_held(c, body, len);
}
