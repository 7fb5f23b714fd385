/* http.h - the HTTP front end (libmicrohttpd, one thread per connection).
 *
 * Routes: POST /v1/generate (JSON or Server-Sent Events), GET /attention, GET /logit_lens,
 * GET /health, GET /v1/models, GET /metrics, and the playground page at GET /. Every error answers one JSON shape
 * {"error":{"code":N,"type":"...","message":"..."}} and is counted in the metrics.
 *
 * Lifecycle (driven by `attnd serve`):
 *   http_create()          binds and starts serving; /health answers 503 "loading"
 *   http_set_engine()      the model is loaded: every route is live, /health answers 200
 *   http_stop_accepting()  closes the listening socket; new work answers 503
 *   http_detach_engine()   after it returns no HTTP thread touches the scheduler again, so the
 *                          caller may sched_destroy() it (requests still waiting for their
 *                          scheduler events are completed by that call)
 *   http_wait_idle()       lets connections finish sending their answers
 *   http_destroy()         closes every connection and frees the server
 *
 * Nothing here prints to stdout or exits; it logs one line per request through log.h.
 */
#ifndef ATTND_HTTP_H
#define ATTND_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "attnd/http_config.h"
#include "attnd/status.h"

struct http_server;
struct model;
struct tokenizer;
struct sched;

/* Fills cfg with the defaults: 127.0.0.1:8080, 1 MiB bodies, max_tokens cap 4096, 16 kept
 * requests, attention cap 2048 tokens, no API key, 256 connections, 64 per client address,
 * 30 s idle timeout, chat template from the model. */
void http_config_default(struct http_config *cfg);

/* Binds cfg->host:cfg->port and starts serving in background threads (strings in cfg are
 * copied). On failure returns ATTND_ERR_INVALID (bad config or host), ATTND_ERR_IO (bind or
 * listen failed, e.g. the port is taken) or ATTND_ERR_NOMEM, leaves *out NULL and writes a
 * one-line reason into err. */
attnd_status http_create(const struct http_config *cfg, struct http_server **out, char *err, size_t errlen);

/* The bound TCP port (the picked one when cfg->port was 0). Thread-safe. */
int http_port(const struct http_server *srv);

/* Makes the engine live. m, tok and s must stay valid until http_detach_engine() returns.
 * Call once. Thread-safe. */
void http_set_engine(struct http_server *srv, const struct model *m, const struct tokenizer *tok, struct sched *s);

/* Stops listening (new connections are refused) and answers 503 to new requests on open
 * connections. Requests already submitted carry on. Idempotent. */
void http_stop_accepting(struct http_server *srv);

/* Waits for any HTTP thread that is inside a scheduler call, then forgets the engine: no HTTP
 * thread calls sched_* (or reads the model) after this returns. Idempotent. */
void http_detach_engine(struct http_server *srv);

/* Waits until every submitted generation request has been answered and its connection
 * released, at most timeout_ms. Returns true if none is left. */
bool http_wait_idle(struct http_server *srv, int timeout_ms);

/* Stops the server: closes every connection, joins the threads and frees everything. If the
 * engine is still attached, the requests of the connections closed here are cancelled, so the
 * scheduler must still be alive then; normally http_detach_engine() has run before.
 * http_destroy(NULL) is a no-op. */
void http_destroy(struct http_server *srv);

#endif
