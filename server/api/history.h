/* history.h - the last few finished requests (prompt then generated tokens), so that routes
 * such as /attention and /logit_lens can address one again by the id it was answered under.
 * A ring of a fixed number of entries under its own mutex; every function is thread-safe.
 *
 * Ids: a response's id is its prefix ("gen", "chatcmpl", "cmpl") and 128 random bits from
 * getrandom() as 32 lowercase hex digits ("chatcmpl-3f9c...", 41 bytes at most): it cannot be
 * guessed, and it says nothing about how many requests came before. Choice i of an n-choice
 * response is kept under (the response's id, i), as it is addressed: id=chatcmpl-...&index=i.
 *
 * Tenants: each entry carries the tenant that made the request (tenant.h), and a lookup finds
 * only that tenant's entries; another tenant's request is "not found", never "forbidden", so
 * an id's existence is not confirmed to anyone else.
 */
#ifndef ATTND_API_HISTORY_H
#define ATTND_API_HISTORY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

struct http_server;
struct api_history;

#define API_HISTORY_ID_HEX 32 /* hex digits of an id's random part (128 bits) */
#define API_HISTORY_ID_MAX 48 /* bytes of the longest id, NUL included ("chatcmpl-" + 32 + 1) */
#define API_HISTORY_MAX_INDEX 255 /* largest choice index */

/* A request's public identity: what it was answered under and who made it. */
struct api_reqid {
    char id[API_HISTORY_ID_MAX]; /* "<prefix>-<32 hex>" */
    int tenant;                  /* tenant.h */
};

/* Fills *rid with prefix (at most 14 bytes, e.g. "chatcmpl"), '-', 128 random bits from
 * getrandom() in hex, and tenant. ATTND_ERR_INVALID for a longer prefix, ATTND_ERR_IO when the
 * kernel gives no random bytes (then rid->id is ""). Thread-safe. */
attnd_status api_history_new_id(const char *prefix, int tenant, struct api_reqid *rid);

/* A history of the keep (>= 1) most recent requests. Returns ATTND_OK, ATTND_ERR_INVALID
 * (keep < 1) or ATTND_ERR_NOMEM; *out stays NULL on failure. */
attnd_status api_history_create(int keep, struct api_history **out);
/* api_history_destroy(NULL) is a no-op. */
void api_history_destroy(struct api_history *h);

/* Remembers choice index of finished request rid in srv's history (its prompt then its
 * generated tokens, both copied) as the most recent entry; the oldest falls out. Drops the
 * entry quietly when out of memory. */
void api_history_remember(struct http_server *srv, const struct api_reqid *rid, unsigned index, const int32_t *prompt,
                          size_t n_prompt, const int32_t *gen, size_t n_gen);

/* What api_history_get() found. */
struct api_history_hit {
    char id[API_HISTORY_ID_MAX]; /* its id */
    unsigned index;              /* its choice */
    int32_t *tokens;             /* (n) prompt then generated tokens, malloc'd: the caller frees */
    size_t n;
};

/* Copies out tenant's entry (id, index), or tenant's most recent entry when id is NULL. Another
 * tenant's entries are never found. Returns 0, 404 (none) or 503 (out of memory). */
int api_history_get(struct http_server *srv, int tenant, const char *id, unsigned index, struct api_history_hit *out);

#endif
