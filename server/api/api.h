/* api.h - the core of the HTTP layer (server/api/), implemented in api.c: the server's state,
 * the per-request context, the engine guard, raw responses and small helpers. Not a public
 * header: only server/api/ includes it.
 *
 * The layer, bottom up (each file includes only files above it in this list, never a route):
 *   buf.h      byte buffer and JSON writing (no HTTP)
 *   metrics.h  counters keyed by integers, Prometheus text
 *   api.h      server state, request context, engine guard, api_respond()
 *   history.h  finished requests, for the routes that read them again
 *   errors.h   status -> HTTP code, the one JSON error shape (counted in metrics)
 *   reply.h    cJSON answers;  query.h  the query string;  lookup.h  a finished request by id=
 *   the routes (health.c, models.c, generate.c, attention.c, logit_lens.c, heads.c, metrics_route.c, web.c)
 *   routes.h   the route table: one line per route
 *   http.c     libmicrohttpd set-up, the dispatcher walking the table, lifecycle (attnd/http.h)
 *
 * Naming: public functions of this layer use http_ (include/attnd/http.h), internal ones api_,
 * and the metrics module metrics_.
 */
#ifndef ATTND_API_H
#define ATTND_API_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/http_config.h"

struct api_history;
struct api_route;
struct metrics;
struct tenant_table;
struct model;
struct tokenizer;
struct sched;

/* ---- server state ---------------------------------------------------------------------------- */

enum api_state { API_STATE_LOADING = 0, API_STATE_READY = 1, API_STATE_STOPPING = 2 };

struct http_server {
    struct http_config cfg; /* host points at the copy below */
    char *host;
    struct tenant_table *tenants; /* the API keys (tenant.h); none: single-user */
    int listen_fd;          /* -1 once closed */
    int port;
    struct MHD_Daemon *mhd;
    struct metrics *metrics;
    struct api_history *history; /* finished requests (history.h; its own lock) */
    atomic_int state;       /* enum api_state */
    atomic_size_t answer_bytes; /* /attention and /logit_lens answers in flight (lookup.h), of cfg.response_budget_mib */

    /* The engine. Readers (HTTP threads calling sched_*) hold engine_lock for reading;
     * http_detach_engine() takes it for writing and clears the pointers. */
    pthread_rwlock_t engine_lock;
    const struct model *model;
    const struct tokenizer *tok;
    struct sched *sched;

    /* mu guards everything below (and closing listen_fd, http_stop_accepting()). */
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* signalled when inflight drops */
    int inflight;           /* submitted generation requests whose connection is not released */
};

/* ---- per-request context --------------------------------------------------------------------- */

struct api_conn {
    struct http_server *srv;
    struct MHD_Connection *mc;
    const struct api_route *route; /* its line in the route table, NULL if none matched */
    int tenant;             /* who made the request (tenant.h: tenant_of()), set before the handler runs */
    bool openai_errors;     /* errors answer in the OpenAI API's shape (the route's line says so) */
    char method[16];
    char path[128];
    double t_start;         /* monotonic seconds */
    int status;             /* HTTP status queued (0 until then) */
    int prompt_tokens;      /* for the request log line */
    int completion_tokens;
    char *body;             /* request body (NUL-terminated), body_len bytes */
    size_t body_len, body_cap;
    size_t body_seen;       /* body bytes received, kept or not */
    int body_err;           /* 413 (too large) or 503 (no memory): answered after the body */
    bool responded;         /* a response is queued */
    /* A route that keeps state past the handler (a generation) sets these; job_end is called
     * once when MHD is done with the request (ok: the answer was sent completely). */
    void *job;
    void (*job_end)(struct api_conn *c, bool ok);
};

/* ---- engine guard ---------------------------------------------------------------------------- */

struct api_engine {
    const struct model *model;
    const struct tokenizer *tok;
    struct sched *sched;
};

/* Read-locks the engine and fills e. Returns false (and holds nothing) when no engine is
 * attached (still loading, or detached for shutdown). Pair a true return with
 * api_engine_release(). Hold it only around sched_* calls, never while waiting for a client. */
bool api_engine_acquire(struct http_server *srv, struct api_engine *e);
/* Releases what a true api_engine_acquire() took. */
void api_engine_release(struct http_server *srv);

/* Counts a submitted generation whose connection is not released yet (http_wait_idle() waits
 * for the count to drop to 0); api_inflight_end() when it is released. Thread-safe. */
void api_inflight_begin(struct http_server *srv);
void api_inflight_end(struct http_server *srv);

/* ---- helpers --------------------------------------------------------------------------------- */

/* Monotonic clock, seconds. */
double api_now(void);

/* True if the peer of socket fd has closed or reset the connection (non-blocking check). */
bool api_peer_gone(int fd);

/* The connection's socket, or -1. */
int api_conn_fd(struct api_conn *c);

/* ---- responses ------------------------------------------------------------------------------- */

/* Adds the CORS headers to r when --cors allows the request's Origin (every response takes them:
 * api_respond and the stream and map writers call it). */
void api_cors(struct api_conn *c, struct MHD_Response *r);
/* Answers a CORS preflight (OPTIONS with Access-Control-Request-Method) with 204: the origin if
 * allowed, methods (the route's, then OPTIONS), the headers a client may send, a 10-minute cache. */
enum MHD_Result api_cors_preflight(struct api_conn *c, const char *methods);

/* Queues a response with status code and body[0..len) (ownership of the malloc'd body passes
 * to the function, also on failure), Content-Type ctype, and optional extra headers given as
 * name/value pairs ending with NULL. Records the status for the log line and the metrics.
 * Returns MHD_YES or MHD_NO (MHD then closes the connection). Errors go through errors.h,
 * cJSON answers through reply.h. */
enum MHD_Result api_respond(struct api_conn *c, int code, const char *ctype, char *body, size_t len,
                            const char *const *headers);

#endif
