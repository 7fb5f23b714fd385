/* sse.h - a Server-Sent Events answer whose bytes another thread (the scheduler's callback)
 * appends: MHD's content reader waits for them, sends a keep-alive comment after a quiet while,
 * and ends the stream when the client hangs up. The state lives in the owner's request object,
 * under the owner's lock. Back-pressure: once more than pause_at bytes wait unsent (the client
 * stopped reading) the owner's pause hook stops the producer; it resumes once the client has
 * taken the buffer below half, and each second in which the client still takes some bytes while
 * paused it is paused again (which restarts the producer's stall clock: sched_pause). Also the
 * bounded wait the routes use while a request runs. */
#ifndef ATTND_API_SSE_H
#define ATTND_API_SSE_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "server/api/api.h"
#include "server/api/buf.h"

struct api_sse {
    pthread_mutex_t *mu;          /* the owner's lock: guards the fields below and what state() reads */
    pthread_cond_t *cv;           /* the owner's condition (check_cond_init()), signalled when out grows
                                     or the stream ends */
    struct api_buf out;           /* bytes not yet handed to MHD, from out_pos (the owner appends) */
    size_t out_pos;
    double t_last_out;            /* when the client last got bytes (keep-alive) */
    int fd;                       /* the client's socket, for hang-up checks */
    int (*state)(void *owner);    /* mu held: 0 while more may come, 1 ended, -1 ended with an error */
    void (*release)(void *owner); /* MHD is done with the response (called once, without mu) */
    void *owner;
    size_t pause_at;              /* unsent bytes past which the stream pauses (0: never) */
    void (*pause)(void *owner, bool on); /* mu held: stop (on) or restart the producer */
    bool paused;
    double t_touch;               /* when pause(owner, true) was last called */
};

/* After the owner appended to s->out (mu held): pauses the producer when the unsent bytes
 * pass s->pause_at. */
void api_sse_appended(struct api_sse *s);

/* A 200 text/event-stream response reading s, or NULL when out of memory (then release is
 * not called). s must stay valid until release. With pause_at set, the socket's send buffer is
 * made that size too, so a client that stops reading is noticed after about 2 x pause_at. */
struct MHD_Response *api_sse_response(struct api_sse *s);

/* Queues r (from api_sse_response) as c's answer and drops the caller's handle on it. */
enum MHD_Result api_sse_queue(struct api_conn *c, struct MHD_Response *r);

/* Waits on cv (made by check_cond_init(), mu held) for at most ms. Returns what
 * pthread_cond_timedwait returns (ETIMEDOUT when the time ran out). */
int api_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int ms);

#endif
