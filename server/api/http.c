/* http.c - the HTTP server: listening socket, libmicrohttpd set-up, the dispatcher (it walks
 * the route table, routes.h: authentication, method, engine state, then the request body, then
 * the route's handler), the request log line, and the lifecycle (attnd/http.h).
 *
 * Threads: libmicrohttpd runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION), so a
 * route handler may block while the scheduler generates; the scheduler's callbacks run on the
 * scheduler thread and only touch per-request state under that request's own mutex.
 */
#include "attnd/http.h"

#include "attnd/check.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "attnd/log.h"
#include "server/api/api.h"
#include "server/api/buf.h"
#include "server/api/errors.h"
#include "server/api/framing.h"
#include "server/api/history.h"
#include "server/api/metrics.h"
#include "server/api/routes.h"
#include "server/api/tenant.h"

#define CONN_MEMORY_LIMIT (64 * 1024) /* per-connection buffer for headers and body chunks */
#define BODY_DISCARD_MAX (64 * 1024)  /* bytes of an oversized chunked body read (and dropped) past the cap */

/* ==============================================================================================
 * Admission and dispatch
 * ============================================================================================== */

/* The tenant whose key the request shows (tenant.h; TENANT_SINGLE when no key is configured),
 * or -1 for a missing or wrong key. */
static int request_tenant(struct api_conn *c)
{
    const struct tenant_table *t = c->srv->tenants;
    if (!tenant_count(t)) return TENANT_SINGLE;
    const char *h = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return -1;
    h += 7;
    while (*h == ' ') h++;
    size_t n = strlen(h);
    while (n && (h[n - 1] == ' ' || h[n - 1] == '\t')) n--;
    return tenant_match(t, h, n);
}

/* The 404 answer: names every route of the table. */
static enum MHD_Result no_route(struct api_conn *c)
{
    struct api_buf list = {0};
    for (size_t i = 0; i < api_n_routes; i++) api_buf_printf(&list, "%s%s", i ? ", " : "", api_routes[i].path);
    enum MHD_Result r = api_error(c, 404, "no route %s (routes: %s)", c->path, list.p ? list.p : "");
    api_buf_free(&list);
    return r;
}

/* First call for a request (headers read, body not yet): everything that can be refused
 * before reading the body is refused here. Returns MHD_YES to go on (possibly with an error
 * already queued; the body is then discarded). */
static enum MHD_Result admit(struct api_conn *c, const struct api_route *r, const char *method)
{
    struct http_server *srv = c->srv;
    if (r && srv->cfg.cors && !strcmp(method, "OPTIONS") &&
        MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "Access-Control-Request-Method"))
        return api_cors_preflight(c, r->methods); /* a browser sends it without credentials */
    c->tenant = request_tenant(c); /* -1 on an open route without a good key: it reads no history */
    if (!(r && (r->flags & ROUTE_OPEN)) && c->tenant < 0)
        return api_error_hdr(c, 401, "WWW-Authenticate", "Bearer", "missing or wrong API key (Authorization: Bearer KEY)");
    if (!r) return no_route(c);
    if (!api_route_allows(r, method))
        return api_error_hdr(c, 405, "Allow", r->methods, "%s does not accept %s (allowed: %s)", r->path, c->method,
                             r->methods);
    int st = atomic_load(&srv->state);
    if (r->flags & ROUTE_ENGINE) {
        if (st == API_STATE_LOADING) return api_error_hdr(c, 503, "Retry-After", "1", "the model is still loading");
        if (st == API_STATE_STOPPING) return api_error_hdr(c, 503, "Retry-After", "1", "the server is shutting down");
    }
    const char *cl = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(cl, &end, 10);
        if (errno || end == cl || *end || n > srv->cfg.max_body)
            return api_error(c, 413, "the request body is larger than %zu bytes", srv->cfg.max_body);
    }
    return MHD_YES;
}

/* Appends a chunk of the body. Past max_body (or out of memory) the rest is discarded and the
 * error is answered once the body has been read: MHD cannot queue a response mid-body. */
static void append_body(struct api_conn *c, const char *data, size_t n)
{
    size_t max = c->srv->cfg.max_body;
    c->body_seen += n;
    if (c->body_err) return;
    if (n > max || c->body_len > max - n) {
        c->body_err = 413;
        return;
    }
    if (c->body_len + n + 1 > c->body_cap) {
        size_t nc = c->body_cap ? c->body_cap : 4096;
        while (nc < c->body_len + n + 1) nc *= 2;
        char *p = realloc(c->body, nc);
        if (!p) {
            c->body_err = 503;
            return;
        }
        c->body = p;
        c->body_cap = nc;
    }
    memcpy(c->body + c->body_len, data, n);
    c->body_len += n;
    c->body[c->body_len] = 0;
}

/* A request's context: what the routes see (struct api_conn) and what only the dispatcher
 * keeps. Made by on_uri(), before libmicrohttpd parses the query and the headers. */
struct conn_box {
    struct api_conn c;
    bool started;      /* the access handler has had its first call */
    size_t query_cut;  /* the query had this many parameters (> API_FRAMING_MAX_PARAMS): cut off */
};

/* MHD_OPTION_URI_LOG_CALLBACK: its return value is the request's *con_cls. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *mc)
{
    struct conn_box *box = calloc(1, sizeof *box);
    if (!box) return NULL;
    box->c.srv = cls;
    box->c.mc = mc;
    box->query_cut = api_framing_cut_query((char *)uri); /* see framing.h */
    return box;
}

/* The first call: the headers are in, the body is not. Framing first (it decides how the
 * bytes that follow are read), then the route's own checks. */
static enum MHD_Result start_request(struct conn_box *box, const char *url, const char *method)
{
    struct api_conn *c = &box->c;
    box->started = true;
    c->t_start = api_now();
    snprintf(c->method, sizeof c->method, "%s", method);
    snprintf(c->path, sizeof c->path, "%s", url);
    c->route = api_route_find(url);
    c->openai_errors = c->route && (c->route->flags & ROUTE_OPENAI);
    enum MHD_Result ret;
    if (!api_framing_check(c, &ret)) return ret;
    if (box->query_cut)
        return api_error(c, 414, "the query has %zu parameters; at most %d are read", box->query_cut,
                         API_FRAMING_MAX_PARAMS);
    return admit(c, c->route, method);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
    struct http_server *srv = cls;
    struct conn_box *box = *con_cls;
    if (!box) { /* on_uri() ran out of memory */
        if (!(box = on_uri(srv, NULL, mc))) return MHD_NO;
        *con_cls = box;
    }
    struct api_conn *c = &box->c;
    if (!box->started) {
        c->mc = mc;
        return start_request(box, url, method);
    }
    c->mc = mc;
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (c->responded) return MHD_YES; /* an error is queued: the rest of the body is dropped */
        append_body(c, upload_data, n);
        /* a body without Content-Length that goes on and on: the 413 goes out if it ends within
         * BODY_DISCARD_MAX past the cap, else the connection is closed (it was 16 x the cap) */
        if (c->body_err && c->body_seen > srv->cfg.max_body + BODY_DISCARD_MAX) return MHD_NO;
        return MHD_YES;
    }
    if (c->responded) return MHD_YES;
    if (c->body_err == 413) return api_error(c, 413, "the request body is larger than %zu bytes", srv->cfg.max_body);
    if (c->body_err) return api_error(c, 503, "out of memory for the request body");
    if (!c->route) return no_route(c); /* not reached: admit() answered */
    return c->route->handler(c);
}

/* Copies s into out (cap bytes, NUL-terminated, cut to fit) with every byte outside printable
 * ASCII, the backslash and the double quote written as \xNN: a request path can then never
 * forge or break a log line (MHD has already turned %0A into a real newline). */
static void log_escape(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 5 <= cap; p++) {
        if (*p >= 0x20 && *p < 0x7f && *p != '\\' && *p != '"') out[o++] = (char)*p;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", *p);
    }
    out[o < cap ? o : cap - 1] = 0;
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    struct http_server *srv = cls;
    struct conn_box *box = *con_cls;
    if (!box) return;
    *con_cls = NULL;
    struct api_conn *c = &box->c;
    if (!box->started) { /* libmicrohttpd refused the request itself, before the handler */
        free(box);
        return;
    }
    bool ok = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
    if (c->job_end) c->job_end(c, ok);
    /* 499: the client went away before an answer was queued (nginx's convention) */
    int status = c->status ? c->status : 499;
    double ms = (api_now() - c->t_start) * 1e3;
    char method[4 * sizeof c->method + 1], path[4 * sizeof c->path + 1];
    log_escape(c->method, method, sizeof method);
    log_escape(c->path, path, sizeof path);
    if (c->prompt_tokens || c->completion_tokens)
        log_info("%s %s %d %.1f ms tokens %d+%d%s", method, path, status, ms, c->prompt_tokens,
                 c->completion_tokens, ok ? "" : " (connection ended early)");
    else
        log_info("%s %s %d %.1f ms%s", method, path, status, ms, ok ? "" : " (connection ended early)");
    metrics_request(srv->metrics, c->route ? (size_t)(c->route - api_routes) : api_n_routes, status);
    free(c->body);
    free(box);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    log_warn("http: %s", line);
}

/* ==============================================================================================
 * Lifecycle (http.h)
 * ============================================================================================== */

void http_config_default(struct http_config *cfg)
{
    *cfg = (struct http_config){.host = "127.0.0.1",
                                .port = 8080,
                                .max_body = 1 << 20,
                                .max_tokens_cap = 4096,
                                .keep_requests = 16,
                                .attention_max_tokens = 2048,
                                .api_key = NULL,
                                .max_connections = 256,
                                .max_per_client = 64,
                                .timeout_ms = 30000,
                                .response_budget_mib = 256,
                                .chat_template = -1};
}

static attnd_status open_listener(struct http_server *srv, char *err, size_t errlen)
{
    char port[16];
    snprintf(port, sizeof port, "%d", srv->cfg.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV | AI_ADDRCONFIG};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(srv->host, port, &hints, &res);
    if (gai) {
        snprintf(err, errlen, "cannot resolve --host '%s': %s", srv->host, gai_strerror(gai));
        return ATTND_ERR_INVALID;
    }
    int fd = -1, last_errno = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last_errno = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 256) == 0) break;
        last_errno = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", srv->host, srv->cfg.port, strerror(last_errno));
        return ATTND_ERR_IO;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl)) {
        snprintf(err, errlen, "getsockname: %s", strerror(errno));
        close(fd);
        return ATTND_ERR_IO;
    }
    char hbuf[NI_MAXHOST], sbuf[NI_MAXSERV];
    if (getnameinfo((struct sockaddr *)&ss, sl, hbuf, sizeof hbuf, sbuf, sizeof sbuf, NI_NUMERICHOST | NI_NUMERICSERV)) {
        snprintf(err, errlen, "getnameinfo failed");
        close(fd);
        return ATTND_ERR_IO;
    }
    srv->listen_fd = fd;
    srv->port = atoi(sbuf);
    return ATTND_OK;
}

/* The metrics, keyed by the route table's lines and the error types. */
static attnd_status create_metrics(struct http_server *srv)
{
    const char *names[api_n_routes];
    for (size_t i = 0; i < api_n_routes; i++) names[i] = api_routes[i].path;
    const struct metrics_labels labels = {.routes = names,
                                          .n_routes = api_n_routes,
                                          .error_types = api_error_kind_names,
                                          .n_error_types = API_ERROR_KIND_COUNT};
    return metrics_create(&labels, &srv->metrics);
}

/* The tenant table: --api-key (one unnamed tenant) or --api-keys FILE, or none (single-user);
 * the start-up log says which. */
static attnd_status load_tenants(struct http_server *srv, const struct http_config *cfg, char *err, size_t errlen)
{
    bool one = cfg->api_key && cfg->api_key[0];
    if (one && cfg->api_keys_file) {
        snprintf(err, errlen, "give --api-key (or --api-key-file) or --api-keys, not both");
        return ATTND_ERR_INVALID;
    }
    attnd_status st = tenant_table_create(&srv->tenants);
    char why[256] = "";
    if (!st && one && (st = tenant_add(srv->tenants, "", cfg->api_key, strlen(cfg->api_key), why, sizeof why)))
        snprintf(err, errlen, "--api-key: %s", why[0] ? why : attnd_status_str(st));
    else if (!st && cfg->api_keys_file) st = tenant_load_file(srv->tenants, cfg->api_keys_file, err, errlen);
    else if (st) snprintf(err, errlen, "out of memory");
    if (st) return st;
    int n = tenant_count(srv->tenants);
    if (!n) log_info("no API key: single-user, every client may use every route and read every finished request");
    else if (one) log_info("API key required (one tenant)");
    else log_info("API keys required: %d tenants, each reads only its own finished requests", n);
    return ATTND_OK;
}

attnd_status http_create(const struct http_config *cfg, struct http_server **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!cfg || cfg->port < 0 || cfg->port > 65535 || cfg->max_body == 0 || cfg->max_tokens_cap < 0 ||
        cfg->keep_requests < 1 || cfg->attention_max_tokens < 1 || cfg->max_connections < 1 ||
        cfg->max_per_client < 0 || cfg->timeout_ms < 0 || cfg->response_budget_mib < 1 ||
        cfg->response_budget_mib > ((size_t)1 << 30)) {
        snprintf(err, errlen, "invalid HTTP configuration");
        return ATTND_ERR_INVALID;
    }
    struct http_server *srv = calloc(1, sizeof *srv);
    if (!srv) return ATTND_ERR_NOMEM;
    srv->cfg = *cfg;
    srv->listen_fd = -1;
    pthread_rwlock_init(&srv->engine_lock, NULL);
    pthread_mutex_init(&srv->mu, NULL);
    check_cond_init(&srv->cv); /* http_wait_idle waits on it with a check_deadline */
    atomic_init(&srv->state, API_STATE_LOADING);
    atomic_init(&srv->answer_bytes, 0);
    attnd_status st = ATTND_ERR_NOMEM;
    srv->host = strdup(cfg->host ? cfg->host : "127.0.0.1");
    if ((st = load_tenants(srv, cfg, err, errlen))) goto fail;
    st = ATTND_ERR_NOMEM;
    srv->cfg.host = srv->host;
    srv->cfg.api_key = NULL; /* the keys live in srv->tenants only */
    srv->cfg.api_keys_file = NULL;
    if (!srv->host || api_history_create(cfg->keep_requests, &srv->history) || create_metrics(srv)) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if ((st = open_listener(srv, err, errlen))) goto fail;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    srv->mhd = MHD_start_daemon(flags, (uint16_t)srv->port, NULL, NULL, on_access, srv,
                                MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, /* first, so it sees every message */
                                MHD_OPTION_LISTEN_SOCKET, (MHD_socket)srv->listen_fd,
                                MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
                                MHD_OPTION_URI_LOG_CALLBACK, on_uri, srv,
                                MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
                                MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY_LIMIT,
                                /* idle or half-sent requests cannot hold a thread for ever, and one
                                 * address cannot take every connection (MHD closes the extra one) */
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)((cfg->timeout_ms + 999) / 1000),
                                MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                                (unsigned)(cfg->max_per_client && cfg->max_per_client < cfg->max_connections
                                               ? cfg->max_per_client : cfg->max_connections),
                                MHD_OPTION_END);
    if (!srv->mhd) {
        snprintf(err, errlen, "libmicrohttpd failed to start on %s:%d", srv->host, srv->port);
        st = ATTND_ERR_IO;
        goto fail;
    }
    *out = srv;
    return ATTND_OK;
fail:
    http_destroy(srv);
    return st;
}

int http_port(const struct http_server *srv) { return srv->port; }

void http_set_engine(struct http_server *srv, const struct model *m, const struct tokenizer *tok, struct sched *s)
{
    pthread_rwlock_wrlock(&srv->engine_lock);
    srv->model = m;
    srv->tok = tok;
    srv->sched = s;
    pthread_rwlock_unlock(&srv->engine_lock);
    int expected = API_STATE_LOADING;
    atomic_compare_exchange_strong(&srv->state, &expected, API_STATE_READY);
}

void http_stop_accepting(struct http_server *srv)
{
    atomic_store(&srv->state, API_STATE_STOPPING);
    pthread_mutex_lock(&srv->mu);
    if (srv->listen_fd >= 0 && srv->mhd) {
        MHD_socket fd = MHD_quiesce_daemon(srv->mhd);
        if (fd != MHD_INVALID_SOCKET) close(fd);
        else log_warn("http: could not stop listening");
        srv->listen_fd = -1;
    }
    pthread_mutex_unlock(&srv->mu);
}

void http_detach_engine(struct http_server *srv)
{
    pthread_rwlock_wrlock(&srv->engine_lock);
    srv->model = NULL;
    srv->tok = NULL;
    srv->sched = NULL;
    pthread_rwlock_unlock(&srv->engine_lock);
}

bool http_wait_idle(struct http_server *srv, int timeout_ms)
{
    struct timespec ts;
    check_deadline(&ts, timeout_ms);
    pthread_mutex_lock(&srv->mu);
    int rc = 0;
    while (srv->inflight > 0 && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&srv->cv, &srv->mu, &ts);
    bool idle = srv->inflight == 0;
    pthread_mutex_unlock(&srv->mu);
    return idle;
}

void http_destroy(struct http_server *srv)
{
    if (!srv) return;
    atomic_store(&srv->state, API_STATE_STOPPING);
    /* With the engine still attached, requests of closed connections get cancelled. */
    if (srv->mhd) MHD_stop_daemon(srv->mhd);
    if (srv->listen_fd >= 0) close(srv->listen_fd);
    http_detach_engine(srv);
    api_history_destroy(srv->history);
    metrics_destroy(srv->metrics);
    free(srv->host);
    tenant_table_destroy(srv->tenants);
    pthread_rwlock_destroy(&srv->engine_lock);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    free(srv);
}
