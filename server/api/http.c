/* http.c - the HTTP server: listening socket, libmicrohttpd set-up, routing, authentication,
 * request bodies, the request log line, /health and /v1/models, and the helpers the other
 * route files share (api.h). See http.h for the lifecycle.
 *
 * Threads: libmicrohttpd runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION), so a
 * route handler may block while the scheduler generates; the scheduler's callbacks run on the
 * scheduler thread and only touch per-request state under that request's own mutex.
 */
#include "attnd/http.h"

#include "attnd/check.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "attnd/log.h"
#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/utf8.h"
#include "server/api/api.h"
#include "server/api/attention.h"
#include "server/api/errors.h"
#include "server/api/generate.h"
#include "server/api/logit_lens.h"
#include "server/api/metrics.h"
#include "server/api/web.h"

#define CONN_MEMORY_LIMIT (64 * 1024) /* per-connection buffer for headers and body chunks */
#define BODY_DISCARD_MAX (64 * 1024)  /* bytes of an oversized chunked body read (and dropped) past the cap */

/* ==============================================================================================
 * Small helpers (api.h)
 * ============================================================================================== */

double api_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

bool api_peer_gone(int fd)
{
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

int api_conn_fd(struct api_conn *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

/* ---- api_buf --------------------------------------------------------------------------------- */

static bool buf_reserve(struct api_buf *b, size_t extra)
{
    if (b->oom) return false;
    if (extra > SIZE_MAX / 2 - b->len) {
        b->oom = true;
        return false;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return true;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < need) nc *= 2;
    char *p = realloc(b->p, nc);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = nc;
    return true;
}

void api_buf_put(struct api_buf *b, const char *s, size_t n)
{
    if (!buf_reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void api_buf_puts(struct api_buf *b, const char *s) { api_buf_put(b, s, strlen(s)); }

void api_buf_printf(struct api_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        api_buf_put(b, small, (size_t)n);
        return;
    }
    if (!buf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void api_buf_json_str(struct api_buf *b, const char *s, size_t n)
{
    if (!buf_reserve(b, n + 2)) return;
    api_buf_put(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        /* copy the longest run that needs no escaping in one go */
        size_t j = i;
        while (j < n) {
            unsigned char ch = (unsigned char)s[j];
            if (ch < 0x20 || ch == '"' || ch == '\\') break;
            if (ch < 0x80) {
                j++;
                continue;
            }
            size_t l = utf8_seq_len(s + j, n - j);
            if (!l) break;
            j += l;
        }
        api_buf_put(b, s + i, j - i);
        if (j >= n) break;
        unsigned char ch = (unsigned char)s[j];
        if (ch == '"') api_buf_put(b, "\\\"", 2);
        else if (ch == '\\') api_buf_put(b, "\\\\", 2);
        else if (ch == '\n') api_buf_put(b, "\\n", 2);
        else if (ch == '\r') api_buf_put(b, "\\r", 2);
        else if (ch == '\t') api_buf_put(b, "\\t", 2);
        else if (ch < 0x20) api_buf_printf(b, "\\u%04x", ch);
        else api_buf_put(b, "\xEF\xBF\xBD", 3); /* a byte that is not valid UTF-8 */
        i = j + 1;
    }
    api_buf_put(b, "\"", 1);
}

void api_buf_float(struct api_buf *b, double v)
{
    if (!isfinite(v)) api_buf_put(b, "null", 4);
    else api_buf_printf(b, "%.9g", v);
}

char *api_buf_take(struct api_buf *b)
{
    char *p = NULL;
    if (!b->oom) {
        if (!b->p) buf_reserve(b, 0);
        p = b->oom ? NULL : b->p;
    }
    if (!p) free(b->p);
    *b = (struct api_buf){0};
    return p;
}

void api_buf_free(struct api_buf *b)
{
    free(b->p);
    *b = (struct api_buf){0};
}

/* ---- responses ------------------------------------------------------------------------------- */

enum MHD_Result api_respond(struct api_conn *c, int code, const char *ctype, char *body, size_t len,
                            const char *const *headers)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    for (size_t i = 0; headers && headers[i] && headers[i + 1]; i += 2) MHD_add_response_header(r, headers[i], headers[i + 1]);
    enum MHD_Result ok = MHD_queue_response(c->mc, (unsigned)code, r);
    MHD_destroy_response(r);
    if (ok == MHD_YES) {
        c->status = code;
        c->responded = true;
    }
    return ok;
}

enum MHD_Result api_respond_json(struct api_conn *c, int code, cJSON *obj)
{
    char *s = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (!s) return api_error(c, 500, "out of memory");
    size_t len = strlen(s);
    /* cJSON allocates with malloc (the default hooks), so MHD may free() it */
    char *body = realloc(s, len + 2);
    if (!body) {
        free(s);
        return api_error(c, 500, "out of memory");
    }
    body[len++] = '\n';
    body[len] = 0;
    return api_respond(c, code, "application/json", body, len, NULL);
}

/* ---- engine guard ---------------------------------------------------------------------------- */

bool api_engine_acquire(struct http_server *srv, struct api_engine *e)
{
    pthread_rwlock_rdlock(&srv->engine_lock);
    if (!srv->sched) {
        pthread_rwlock_unlock(&srv->engine_lock);
        return false;
    }
    e->model = srv->model;
    e->tok = srv->tok;
    e->sched = srv->sched;
    return true;
}

void api_engine_release(struct http_server *srv) { pthread_rwlock_unlock(&srv->engine_lock); }

/* ==============================================================================================
 * Routes
 * ============================================================================================== */

struct route {
    const char *path;
    enum api_route id;
    const char *allow; /* methods, as the Allow header lists them */
    bool open;         /* no API key needed */
};

static const struct route g_routes[] = {
    {"/health", API_ROUTE_HEALTH, "GET, HEAD", true},
    {"/v1/models", API_ROUTE_MODELS, "GET, HEAD", false},
    {"/v1/generate", API_ROUTE_GENERATE, "POST", false},
    {"/attention", API_ROUTE_ATTENTION, "GET, HEAD", false},
    {"/metrics", API_ROUTE_METRICS, "GET, HEAD", false},
    {"/logit_lens", API_ROUTE_LOGIT_LENS, "GET, HEAD", false},
    {"/", API_ROUTE_WEB, "GET, HEAD", true}, /* static files, no secrets: the page asks for the key */
};

const char *api_route_name(enum api_route r)
{
    for (size_t i = 0; i < sizeof g_routes / sizeof g_routes[0]; i++)
        if (g_routes[i].id == r) return g_routes[i].path;
    return "other";
}

static const struct route *find_route(const char *url)
{
    for (size_t i = 0; i < sizeof g_routes / sizeof g_routes[0]; i++)
        if (!strcmp(url, g_routes[i].path)) return &g_routes[i];
    if (api_web_has(url)) return find_route("/");
    return NULL;
}

static bool method_allowed(const struct route *r, const char *method)
{
    if (r->id == API_ROUTE_GENERATE) return !strcmp(method, "POST");
    return !strcmp(method, "GET") || !strcmp(method, "HEAD");
}

/* Constant-time in the length of the configured key: every byte of it is compared. */
static bool key_matches(const struct http_server *srv, const char *given, size_t glen)
{
    const unsigned char *k = (const unsigned char *)srv->api_key;
    unsigned char diff = glen != srv->api_key_len;
    for (size_t i = 0; i < srv->api_key_len; i++) diff |= (unsigned char)(k[i] ^ (i < glen ? (unsigned char)given[i] : 0));
    return diff == 0;
}

static bool authorized(struct api_conn *c)
{
    const struct http_server *srv = c->srv;
    if (!srv->api_key) return true;
    const char *h = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    size_t n = strlen(h);
    while (n && (h[n - 1] == ' ' || h[n - 1] == '\t')) n--;
    return key_matches(srv, h, n);
}

static enum MHD_Result route_health(struct api_conn *c)
{
    int st = atomic_load(&c->srv->state);
    const char *s = st == API_STATE_READY ? "ok" : st == API_STATE_LOADING ? "loading" : "stopping";
    cJSON *o = cJSON_CreateObject();
    if (o) cJSON_AddStringToObject(o, "status", s);
    struct api_engine e;
    if (o && api_engine_acquire(c->srv, &e)) {
        cJSON_AddStringToObject(o, "backend", sched_backend(e.sched));
        cJSON_AddStringToObject(o, "device", sched_device(e.sched));
        api_engine_release(c->srv);
    }
    return api_respond_json(c, st == API_STATE_READY ? 200 : 503, o);
}

static enum MHD_Result route_models(struct api_conn *c)
{
    struct api_engine e;
    if (!api_engine_acquire(c->srv, &e)) return api_error_hdr(c, 503, "Retry-After", "1", "no model is loaded");
    const struct model *m = e.model;
    cJSON *o = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(o, "data"), *it = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(data, it);
    cJSON_AddStringToObject(it, "id", m->name ? m->name : "model");
    cJSON_AddStringToObject(it, "object", "model");
    cJSON_AddNumberToObject(it, "created", 0);
    cJSON_AddStringToObject(it, "owned_by", "attnd");
    cJSON_AddStringToObject(it, "arch", m->hp.arch_name);
    cJSON_AddNumberToObject(it, "context_length", sched_n_ctx(e.sched));
    cJSON_AddNumberToObject(it, "n_ctx_train", m->hp.n_ctx_train);
    cJSON_AddNumberToObject(it, "n_vocab", m->hp.n_vocab);
    cJSON_AddNumberToObject(it, "n_layer", m->hp.n_layer);
    cJSON_AddNumberToObject(it, "n_head", m->hp.n_head);
    cJSON_AddNumberToObject(it, "n_head_kv", m->hp.n_head_kv);
    cJSON_AddNumberToObject(it, "head_dim", m->hp.head_dim);
    cJSON_AddNumberToObject(it, "n_params", (double)model_n_params(m));
    api_engine_release(c->srv);
    return api_respond_json(c, 200, o);
}

/* First call for a request (headers read, body not yet): everything that can be refused
 * before reading the body is refused here. Returns MHD_YES to go on (possibly with an error
 * already queued; the body is then discarded). */
static enum MHD_Result admit(struct api_conn *c, const struct route *r, const char *method)
{
    struct http_server *srv = c->srv;
    if (!(r && r->open) && !authorized(c))
        return api_error_hdr(c, 401, "WWW-Authenticate", "Bearer", "missing or wrong API key (Authorization: Bearer KEY)");
    if (!r) return api_error(c, 404, "no route %s (routes: /v1/generate, /attention, /logit_lens, /health, /v1/models, /metrics, / for the playground)", c->path);
    if (!method_allowed(r, method))
        return api_error_hdr(c, 405, "Allow", r->allow, "%s does not accept %s (allowed: %s)", r->path, c->method, r->allow);
    int st = atomic_load(&srv->state);
    if (r->id == API_ROUTE_GENERATE || r->id == API_ROUTE_ATTENTION || r->id == API_ROUTE_LOGIT_LENS ||
        r->id == API_ROUTE_MODELS) {
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

static enum MHD_Result on_access(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                 const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
    struct http_server *srv = cls;
    struct api_conn *c = *con_cls;
    if (!c) {
        if (!(c = calloc(1, sizeof *c))) return MHD_NO;
        c->srv = srv;
        c->mc = mc;
        c->t_start = api_now();
        snprintf(c->method, sizeof c->method, "%s", method);
        snprintf(c->path, sizeof c->path, "%s", url);
        const struct route *r = find_route(url);
        c->route = r ? r->id : API_ROUTE_OTHER;
        *con_cls = c;
        return admit(c, r, method);
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
    switch (c->route) {
    case API_ROUTE_HEALTH: return route_health(c);
    case API_ROUTE_MODELS: return route_models(c);
    case API_ROUTE_GENERATE: return api_generate(c);
    case API_ROUTE_ATTENTION: return api_attention(c);
    case API_ROUTE_METRICS: return metrics_route(c);
    case API_ROUTE_LOGIT_LENS: return api_logit_lens(c);
    case API_ROUTE_WEB: return api_web(c);
    default: return api_error(c, 404, "no route %s", c->path);
    }
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
    struct api_conn *c = *con_cls;
    if (!c) return;
    *con_cls = NULL;
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
    metrics_request(srv->metrics, c->route, status);
    free(c->body);
    free(c);
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
                                .timeout_ms = 30000};
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

attnd_status http_create(const struct http_config *cfg, struct http_server **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!cfg || cfg->port < 0 || cfg->port > 65535 || cfg->max_body == 0 || cfg->max_tokens_cap < 0 ||
        cfg->keep_requests < 1 || cfg->attention_max_tokens < 1 || cfg->max_connections < 1 ||
        cfg->max_per_client < 0 || cfg->timeout_ms < 0) {
        snprintf(err, errlen, "invalid HTTP configuration");
        return ATTND_ERR_INVALID;
    }
    struct http_server *srv = calloc(1, sizeof *srv);
    if (!srv) return ATTND_ERR_NOMEM;
    srv->cfg = *cfg;
    srv->listen_fd = -1;
    pthread_rwlock_init(&srv->engine_lock, NULL);
    pthread_mutex_init(&srv->mu, NULL);
    pthread_cond_init(&srv->cv, NULL);
    atomic_init(&srv->state, API_STATE_LOADING);
    attnd_status st = ATTND_ERR_NOMEM;
    srv->host = strdup(cfg->host ? cfg->host : "127.0.0.1");
    if (cfg->api_key && cfg->api_key[0]) {
        if (!(srv->api_key = strdup(cfg->api_key))) goto fail;
        srv->api_key_len = strlen(srv->api_key);
    }
    srv->cfg.host = srv->host;
    srv->cfg.api_key = srv->api_key;
    srv->history = calloc((size_t)cfg->keep_requests, sizeof *srv->history);
    if (!srv->host || !srv->history || metrics_create(&srv->metrics)) {
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
    for (int i = 0; srv->history && i < srv->cfg.keep_requests; i++) free(srv->history[i].tokens);
    free(srv->history);
    metrics_destroy(srv->metrics);
    free(srv->host);
    free(srv->api_key);
    pthread_rwlock_destroy(&srv->engine_lock);
    pthread_mutex_destroy(&srv->mu);
    pthread_cond_destroy(&srv->cv);
    free(srv);
}
