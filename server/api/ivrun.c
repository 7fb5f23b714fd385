/* ivrun.c - many prompt passes submitted together and waited for together. See ivrun.h. */
#include "server/api/ivrun.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/check.h"
#include "attnd/sampler.h"
#include "attnd/sched.h"
#include "server/api/errors.h"
#include "server/api/job.h"
#include "server/api/sse.h"

#define WAIT_SLICE_MS 50 /* how often the waiting connection checks its socket and the queue */
#define QUEUE_WAIT_S 60.0 /* a queue full of other traffic for this long: 503 */

struct run;

struct slot {
    struct run *r;
    bool done;
};

struct run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct slot *slots; /* (n) */
    uint64_t *ids;      /* (n) */
    uint64_t owner;     /* the caller's turn-taking owner (job_owner) */
    int n_done;
    bool failed;
    attnd_status st;
    char msg[256];
};

static void on_event(void *ud, const struct sched_event *ev)
{
    struct slot *sl = ud;
    struct run *r = sl->r;
    if (ev->kind == SCHED_EV_TOKEN) return;
    pthread_mutex_lock(&r->mu);
    if (!r->failed && (ev->kind == SCHED_EV_ERROR || (ev->finish_reason && !strcmp(ev->finish_reason, "cancelled")))) {
        r->failed = true;
        r->st = ev->kind == SCHED_EV_ERROR ? ev->status : ATTND_ERR_UNSUPPORTED;
        snprintf(r->msg, sizeof r->msg, "%s", ev->message ? ev->message : "the request was cancelled");
    }
    sl->done = true;
    r->n_done++;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* A refusal that room in the queue lifts (the queue, or this owner's share of it, is full): not
 * a bad request, no memory, or a scheduler shutting down. */
static bool retryable(attnd_status st, const char *msg)
{
    return st != ATTND_ERR_INVALID && st != ATTND_ERR_RANGE && st != ATTND_ERR_NOMEM && !strstr(msg, "shutting down");
}

/* Submits jobs from *next on while the queue takes them (the engine held). Returns 0 (all in, or
 * the queue is full: try again later) or an HTTP status with err. */
static int submit_some(struct sched *s, struct run *r, const struct ivrun_job *jobs, int n, int *next, char *err,
                       size_t errlen)
{
    while (*next < n) {
        const struct ivrun_job *j = &jobs[*next];
        struct sched_request req = {.prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = 0,
                                    .sampling = sampler_params_default(), .iv = j->iv, .owner = r->owner};
        char m[256] = "";
        attnd_status st = sched_submit(s, &req, on_event, &r->slots[*next], &r->ids[*next], m, sizeof m);
        if (st && retryable(st, m)) return 0;
        if (st) return snprintf(err, errlen, "%s", m), api_status_code(st, false);
        (*next)++;
    }
    return 0;
}

/* The wait: submits what the queue did not take as room appears, cancels everything on a
 * failure or a client gone. Returns 0, 499 or an HTTP status. */
static int wait_all(struct api_conn *c, struct api_engine *e, struct run *r, const struct ivrun_job *jobs, int n,
                    int next, char *err, size_t errlen)
{
    struct sched *s = e->sched;
    const int fd = api_conn_fd(c);
    int code = 0;
    bool cancelled = false;
    double since = api_now();
    pthread_mutex_lock(&r->mu);
    while (r->n_done < next || (next < n && !code && !cancelled)) {
        api_wait_ms(&r->cv, &r->mu, WAIT_SLICE_MS);
        if (r->failed && !code) code = -1;
        pthread_mutex_unlock(&r->mu);
        if (!cancelled && !code && api_peer_gone(fd)) code = 499;
        if (!code && next < n) {
            struct api_engine e2;
            const int had = next;
            const bool held = api_engine_acquire(c->srv, &e2);
            if (held && e2.sched == s) code = submit_some(s, r, jobs, n, &next, err, errlen);
            if (held) api_engine_release(c->srv);
            if (!held || e2.sched != s) { /* the old scheduler cancels what it holds as it goes */
                code = 503, snprintf(err, errlen, "the model was unloaded or replaced");
                cancelled = true;
            }
            if (next > had) since = api_now();
            else if (!code && api_now() - since > QUEUE_WAIT_S)
                code = 503, snprintf(err, errlen, "the request queue stayed full");
        }
        if (code && !cancelled) {
            for (int i = 0; i < next; i++) sched_cancel(s, r->ids[i]); /* finished ids are ignored */
            cancelled = true;
        }
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return code;
}

int ivrun_all(struct api_conn *c, struct api_engine *e, const struct ivrun_job *jobs, int n, char *err, size_t errlen)
{
    struct run r = {.slots = calloc((size_t)n, sizeof *r.slots), .ids = calloc((size_t)n, sizeof *r.ids),
                    .owner = job_owner(c)};
    if (!r.slots || !r.ids) {
        api_engine_release(c->srv);
        free(r.slots), free(r.ids);
        return snprintf(err, errlen, "out of memory"), 503;
    }
    pthread_mutex_init(&r.mu, NULL);
    check_cond_init(&r.cv); /* waited on with api_wait_ms() */
    for (int i = 0; i < n; i++) r.slots[i].r = &r;
    int next = 0;
    int code = submit_some(e->sched, &r, jobs, n, &next, err, errlen);
    api_engine_release(c->srv);
    api_inflight_begin(c->srv);
    if (code) { /* cancel what went in, wait for it */
        for (int i = 0; i < next; i++) sched_cancel(e->sched, r.ids[i]);
        pthread_mutex_lock(&r.mu);
        while (r.n_done < next) pthread_cond_wait(&r.cv, &r.mu);
        pthread_mutex_unlock(&r.mu);
    } else {
        code = wait_all(c, e, &r, jobs, n, next, err, errlen);
    }
    api_inflight_end(c->srv);
    if (code == -1 || (!code && r.failed))
        code = api_status_code(r.st, false), snprintf(err, errlen, "%s", r.msg);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
    free(r.slots);
    free(r.ids);
    return code;
}
