/* history.h - the last few finished requests (prompt then generated tokens), so that routes
 * such as /attention and /logit_lens can address one again by id. A ring of a fixed number of
 * entries under its own mutex; every function is thread-safe.
 */
#ifndef ATTND_API_HISTORY_H
#define ATTND_API_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

struct http_server;
struct api_history;

/* History keys. A /v1/generate request is kept under its scheduler id (below 2^48); choice
 * index (0..255) of a response of the OpenAI-compatible routes, whose id is chatcmpl-N or
 * cmpl-N, under api_history_key(ns, N, index), so the two never collide. */
enum api_history_ns { API_HISTORY_GEN = 0, API_HISTORY_CHAT = 1, API_HISTORY_CMPL = 2 };
#define API_HISTORY_MAX_N ((1ull << 48) - 1)
uint64_t api_history_key(enum api_history_ns ns, uint64_t n, unsigned index);
/* The id the key's request was answered under ("gen-N", "chatcmpl-N", "cmpl-N"), into buf. */
void api_history_id_str(uint64_t key, char *buf, size_t cap);

/* A history of the keep (>= 1) most recent requests. Returns ATTND_OK, ATTND_ERR_INVALID
 * (keep < 1) or ATTND_ERR_NOMEM; *out stays NULL on failure. */
attnd_status api_history_create(int keep, struct api_history **out);
/* api_history_destroy(NULL) is a no-op. */
void api_history_destroy(struct api_history *h);

/* Remembers a finished request in srv's history (its prompt then its generated tokens, both
 * copied) as the most recent one; the oldest falls out. Drops the entry quietly when out of
 * memory. */
void api_history_remember(struct http_server *srv, uint64_t id, const int32_t *prompt, size_t n_prompt,
                          const int32_t *gen, size_t n_gen);

/* Copies the tokens of finished request id (or of the most recent one if !by_id) from srv's
 * history into a malloc'd array (*tokens, *n; *out_id gets its id). Returns 0, 404 (no such
 * request) or 503 (out of memory). */
int api_history_get(struct http_server *srv, bool by_id, uint64_t id, uint64_t *out_id, int32_t **tokens, size_t *n);

#endif
