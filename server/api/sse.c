/* sse.c - see sse.h. */
#include "server/api/sse.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "attnd/check.h"

#define WAIT_SLICE_MS 200 /* how often a waiting stream checks the client's socket */
#define KEEPALIVE_S 15.0  /* an SSE comment after this long without bytes */
#define STREAM_BLOCK (16 << 10)

int api_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms)
{
    struct timespec ts;
    check_deadline(&ts, ms);
    return pthread_cond_timedwait(cv, mu, &ts);
}

void api_sse_appended(struct api_sse *s)
{
    if (!s->pause || !s->pause_at || s->paused || s->out.len - s->out_pos <= s->pause_at) return;
    s->paused = true;
    s->t_touch = api_now();
    s->pause(s->owner, true);
}

/* The client took bytes (mu held): resume below half the cap, else restart the stall clock
 * (at most once a second). */
static void sse_taken(struct api_sse *s)
{
    if (!s->paused) return;
    double t = api_now();
    if (s->out.len - s->out_pos <= s->pause_at / 2) {
        s->paused = false;
        s->pause(s->owner, false);
    } else if (t - s->t_touch >= 1.0) {
        s->t_touch = t;
        s->pause(s->owner, true);
    }
}

static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct api_sse *s = cls;
    pthread_mutex_lock(s->mu);
    for (;;) {
        if (s->out_pos < s->out.len) {
            size_t n = s->out.len - s->out_pos;
            if (n > max) n = max;
            memcpy(buf, s->out.p + s->out_pos, n);
            s->out_pos += n;
            if (s->out_pos == s->out.len) s->out_pos = s->out.len = 0;
            s->t_last_out = api_now();
            sse_taken(s);
            pthread_mutex_unlock(s->mu);
            return (ssize_t)n;
        }
        int st = s->state(s->owner);
        if (st) {
            pthread_mutex_unlock(s->mu);
            return st < 0 ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
        }
        int rc = api_wait_ms(s->cv, s->mu, WAIT_SLICE_MS);
        if (rc == ETIMEDOUT && s->out_pos == s->out.len && !s->state(s->owner)) {
            if (api_peer_gone(s->fd)) {
                pthread_mutex_unlock(s->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR; /* the owner's job_end cancels */
            }
            if (api_now() - s->t_last_out > KEEPALIVE_S) api_buf_puts(&s->out, ": keep-alive\n\n");
        }
    }
}

static void sse_free(void *cls)
{
    struct api_sse *s = cls;
    s->release(s->owner);
}

struct MHD_Response *api_sse_response(struct api_sse *s)
{
    pthread_mutex_lock(s->mu);
    s->t_last_out = api_now();
    size_t cap = s->pause_at;
    pthread_mutex_unlock(s->mu);
    int sndbuf = cap > (1u << 24) ? 1 << 24 : (int)cap;
    if (cap && s->fd >= 0) (void)setsockopt(s->fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf); /* best effort */
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, sse_read, s, sse_free);
    if (!r) return NULL;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    return r;
}

enum MHD_Result api_sse_queue(struct api_conn *c, struct MHD_Response *r)
{
    api_cors(c, r);
    enum MHD_Result ok = MHD_queue_response(c->mc, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    if (ok == MHD_YES) {
        c->status = 200;
        c->responded = true;
    }
    return ok;
}
