/* api.c - the core helpers of the HTTP layer. See api.h. */
#include "server/api/api.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/check.h"

double api_now(void) { return check_now_s(); }

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

void api_inflight_begin(struct http_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    srv->inflight++;
    pthread_mutex_unlock(&srv->mu);
}

void api_inflight_end(struct http_server *srv)
{
    pthread_mutex_lock(&srv->mu);
    srv->inflight--;
    pthread_cond_broadcast(&srv->cv);
    pthread_mutex_unlock(&srv->mu);
}

/* The request's Origin if --cors allows it ("*" for any), else NULL. */
static const char *allowed_origin(const struct api_conn *c)
{
    const char *list = c->srv->cfg.cors;
    if (!list || !*list) return NULL;
    const char *origin = MHD_lookup_connection_value(c->mc, MHD_HEADER_KIND, "Origin");
    if (!strcmp(list, "*")) return "*";
    if (!origin || !*origin) return NULL;
    size_t n = strlen(origin);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && p[0] == ' ') p++, len--;
        while (len && p[len - 1] == ' ') len--;
        if (len == n && !memcmp(p, origin, n)) return origin;
        if (!e) break;
        p = e + 1;
    }
    return NULL;
}

void api_cors(struct api_conn *c, struct MHD_Response *r)
{
    const char *o = allowed_origin(c);
    if (!o) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", o);
    if (strcmp(o, "*")) MHD_add_response_header(r, "Vary", "Origin");
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "Retry-After, WWW-Authenticate");
}

enum MHD_Result api_cors_preflight(struct api_conn *c, const char *methods)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    api_cors(c, r);
    char allow[96];
    snprintf(allow, sizeof allow, "%s, OPTIONS", methods);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", allow);
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    enum MHD_Result ok = MHD_queue_response(c->mc, 204, r);
    MHD_destroy_response(r);
    if (ok == MHD_YES) c->status = 204, c->responded = true;
    return ok;
}

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
    api_cors(c, r);
    enum MHD_Result ok = MHD_queue_response(c->mc, (unsigned)code, r);
    MHD_destroy_response(r);
    if (ok == MHD_YES) {
        c->status = code;
        c->responded = true;
    }
    return ok;
}
