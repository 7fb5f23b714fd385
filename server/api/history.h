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
