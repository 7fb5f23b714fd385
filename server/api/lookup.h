/* lookup.h - what the routes that read a finished request again (/attention, /logit_lens) have
 * in common: the id= parameter, the model's shape, the request's tokens from the history with
 * the size cap applied, the token texts, and the closing answer. Each step answers its own
 * errors (one JSON shape, errors.h) and then returns false with the response's result in *ret.
 */
#ifndef ATTND_API_LOOKUP_H
#define ATTND_API_LOOKUP_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/model.h"
#include "attnd/status.h"
#include "server/api/api.h"
#include "server/api/buf.h"
#include "server/api/history.h"

struct tokenizer;

struct api_lookup {
    /* api_lookup_begin() */
    bool by_id;               /* id= was given */
    char want[API_HISTORY_ID_MAX]; /* its id as the history keeps it (history.h) */
    unsigned want_index;      /* index= (0 when absent) */
    const char *want_name;    /* id= as given */
    struct model_hparams hp;  /* the loaded model's shape */
    size_t n_ctx;             /* the scheduler's context length, tokens */
    /* api_lookup_tokens() */
    char name[API_HISTORY_ID_MAX]; /* the request found: its id as answered ("gen-<32 hex>"...) */
    unsigned index;           /* its choice */
    int32_t *tokens;          /* (n) its prompt then generated tokens, malloc'd */
    size_t n;                 /* at most n_ctx */
    bool truncated;           /* the request had more than n_ctx tokens */
};

/* Parses id_param (the value of id=, NULL when absent: the most recent request) and
 * index_param (index=: the choice of a chat or completion with n > 1; NULL: 0) and reads the
 * model's shape. Answers 400 for a bad id or index, 503 when no model is loaded. */
bool api_lookup_begin(struct api_conn *c, const char *id_param, const char *index_param, struct api_lookup *lk,
                      enum MHD_Result *ret);

/* Copies the request's tokens out of the history, looking only at the requests of c's tenant
 * (tenant.h): 404 when there is no such request (another tenant's is not found either), 503 out
 * of memory, 413 when it has more than cfg.attention_max_tokens (the message says
 * "<reads> at most N", e.g. reads = "/attention maps"). A request over n_ctx tokens is cut to
 * its first n_ctx (rows are causal, so they do not depend on the rest). */
bool api_lookup_tokens(struct api_conn *c, struct api_lookup *lk, const char *reads, enum MHD_Result *ret);

/* Frees the tokens; lk may be reused. */
void api_lookup_free(struct api_lookup *lk);

/* Appends token id's text as a JSON string (piece: a scratch buffer of cap bytes, cap =
 * tok_max_piece() + 8). */
void api_lookup_put_token(struct api_buf *b, const struct tokenizer *tok, int id, char *piece, size_t cap);

/* The response budget (--response-budget-mb): every answer of such a route holds its bytes,
 * from before it is computed until libmicrohttpd has sent it (or given up on the client), so
 * clients that ask and never read cannot make the daemon hold more than the budget. Takes bytes
 * (an upper bound of what computing and answering will hold) from c's server: false when the
 * budget cannot take them now (503 with Retry-After answered) or ever (413), with the result
 * in *ret. Thread-safe. */
bool api_lookup_reserve(struct api_conn *c, size_t bytes, enum MHD_Result *ret);

/* Gives bytes taken by api_lookup_reserve() back. Thread-safe. */
void api_lookup_unreserve(struct http_server *srv, size_t bytes);

/* Closes such a route: st != ATTND_OK answers the error (api_status_code(st, true), message
 * "<what> failed: <why or the status name>", Retry-After on 503) and frees b; otherwise b is
 * answered as 200 application/json (503 when b ran out of memory). reserved: what
 * api_lookup_reserve() took; the answer keeps exactly its body's length of it until the
 * body is freed, and the rest is given back here. */
enum MHD_Result api_lookup_reply(struct api_conn *c, attnd_status st, const char *why, const char *what,
                                 struct api_buf *b, size_t reserved);

#endif
