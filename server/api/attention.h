/* attention.h - GET /attention?layer=L&head=H[&id=ID][&values=1]: the causal attention weights
 * of one layer and query head over a finished request's tokens, recomputed by the scheduler
 * (sched_attention()), plus a short history of finished requests to address by id. */
#ifndef ATTND_API_ATTENTION_H
#define ATTND_API_ATTENTION_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "server/api/api.h"

/* Remembers a finished request (its prompt then its generated tokens, both copied) as the most
 * recent one; the oldest of cfg.keep_requests falls out. Thread-safe; drops the entry quietly
 * when out of memory. */
void api_attention_remember(struct http_server *srv, uint64_t id, const int32_t *prompt, size_t n_prompt,
                            const int32_t *gen, size_t n_gen);

/* Handles GET /attention on c. Bad or unknown query parameters and an out-of-range layer or
 * head answer 400, an unknown id 404, a sequence longer than cfg.attention_max_tokens 413. */
enum MHD_Result api_attention(struct api_conn *c);

/* Copies the tokens of finished request id (or of the most recent one if !by_id) into a
 * malloc'd array (*tokens, *n; *out_id gets its id). Returns 0, 404 (no such request) or 503
 * (out of memory). Thread-safe. */
int api_history_get(struct http_server *srv, bool by_id, uint64_t id, uint64_t *out_id, int32_t **tokens, size_t *n);
/* Parses a plain decimal number without sign, at most max. */
/* Parses a request id as the generation routes answer it (gen-N, chatcmpl-N, cmpl-N; index: the
 * choice of a chat or completion, NULL for 0) into its history key. False if malformed. */
bool api_parse_request_id(const char *id, const char *index, uint64_t *key);
/* The id a history key was answered under ("gen-N", "chatcmpl-N", "cmpl-N"), into buf. */
void api_request_id_str(uint64_t key, char *buf, size_t cap);
bool api_parse_uint(const char *s, unsigned long long max, unsigned long long *out);

#define API_QUERY_MAX 8
/* Reads the query string of c: val[i] = the value of names[i] (names: NULL-terminated, at most
 * API_QUERY_MAX; val[i] NULL when absent, "" when given without a value). An unknown or repeated
 * parameter is answered with a 400 error naming it (and the known ones): then returns false with
 * the response's result in *ret. */
bool api_query_read(struct api_conn *c, const char *const *names, const char **val, enum MHD_Result *ret);

#endif
