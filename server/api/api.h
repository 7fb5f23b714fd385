/* api.h - internals shared by the files of the HTTP layer (server/api/), implemented in
 * http.c: the server's state, the per-request context, response helpers, the engine guard and
 * a growable byte buffer. Not a public header: only server/api/ includes it.
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

#include "attnd/http.h"

struct cJSON;
struct metrics;
struct model;
struct tokenizer;
struct sched;

/* ---- routes ---------------------------------------------------------------------------------- */

enum api_route {
    API_ROUTE_OTHER = 0, /* unknown path (404) */
    API_ROUTE_HEALTH,
    API_ROUTE_MODELS,
    API_ROUTE_GENERATE,
    API_ROUTE_ATTENTION,
    API_ROUTE_METRICS,
    API_ROUTE_LOGIT_LENS,
    API_ROUTE_WEB,       /* the playground page and its files (web.c) */
    API_ROUTE_HEADS,     /* the head census (heads.c) */
    API_ROUTE_COUNT
};

/* The route's path ("/v1/generate"...), or "other". Never NULL. */
const char *api_route_name(enum api_route r);

/* ---- server state ---------------------------------------------------------------------------- */

enum api_state { API_STATE_LOADING = 0, API_STATE_READY = 1, API_STATE_STOPPING = 2 };

/* One finished request that /attention can address (owned by attention.c's history). */
struct api_finished {
    uint64_t id;
    int32_t *tokens; /* prompt then generated tokens (n) */
    size_t n;
};

struct http_server {
    struct http_config cfg; /* host and api_key point at the copies below */
    char *host, *api_key;
    size_t api_key_len;
    int listen_fd;          /* -1 once closed */
    int port;
    struct MHD_Daemon *mhd;
    struct metrics *metrics;
    atomic_int state;       /* enum api_state */

    /* The engine. Readers (HTTP threads calling sched_*) hold engine_lock for reading;
     * http_detach_engine() takes it for writing and clears the pointers. */
    pthread_rwlock_t engine_lock;
    const struct model *model;
    const struct tokenizer *tok;
    struct sched *sched;

    /* mu guards everything below. */
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* signalled when inflight drops */
    int inflight;           /* submitted generation requests whose connection is not released */
    struct api_finished *history; /* ring of cfg.keep_requests entries (attention.c) */
    int hist_len, hist_next;
};

/* ---- per-request context --------------------------------------------------------------------- */

struct api_conn {
    struct http_server *srv;
    struct MHD_Connection *mc;
    enum api_route route;
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
void api_engine_release(struct http_server *srv);

/* Monotonic clock, seconds. */
double api_now(void);

/* True if the peer of socket fd has closed or reset the connection (non-blocking check). */
bool api_peer_gone(int fd);

/* The connection's socket, or -1. */
int api_conn_fd(struct api_conn *c);

/* ---- growable byte buffer -------------------------------------------------------------------- */

/* A malloc'd byte string that stays NUL-terminated. On allocation failure it sets oom and
 * ignores further appends, so callers check oom once at the end. */
struct api_buf {
    char *p;
    size_t len, cap;
    bool oom;
};

void api_buf_put(struct api_buf *b, const char *s, size_t n);
void api_buf_puts(struct api_buf *b, const char *s);
void api_buf_printf(struct api_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s[0..n) as a quoted JSON string: escapes quotes, backslashes and control bytes, and
 * replaces every byte that is not part of valid UTF-8 with U+FFFD. */
void api_buf_json_str(struct api_buf *b, const char *s, size_t n);
/* Appends a float as the shortest text that round-trips a float ("%.9g"), or null if not finite. */
void api_buf_float(struct api_buf *b, double v);
/* Hands the bytes to the caller (who frees them) and resets b; NULL if b->oom. */
char *api_buf_take(struct api_buf *b);
void api_buf_free(struct api_buf *b);

/* ---- responses ------------------------------------------------------------------------------- */

/* Queues a response with status code and body[0..len) (ownership of the malloc'd body passes
 * to the function, also on failure), Content-Type ctype, and optional extra headers given as
 * name/value pairs ending with NULL. Records the status for the log line and the metrics.
 * Returns MHD_YES or MHD_NO (MHD then closes the connection). */
enum MHD_Result api_respond(struct api_conn *c, int code, const char *ctype, char *body, size_t len,
                            const char *const *headers);
/* Queues obj printed as JSON (obj is deleted). Out of memory: 500. */
enum MHD_Result api_respond_json(struct api_conn *c, int code, struct cJSON *obj);

#endif
