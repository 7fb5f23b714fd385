/* threadpool.h - a fixed set of worker threads that run one parallel job at a time.
 * The calling thread takes part as thread 0, so a pool of n threads starts n-1 workers.
 * Workers spin briefly between jobs (a decode step issues hundreds of jobs per token) and
 * then sleep on a condition variable. Not re-entrant: one tpool_run() at a time per pool. */
#ifndef ATTND_THREADPOOL_H
#define ATTND_THREADPOOL_H

#include "attnd/status.h"

struct tpool;

/* fn(arg, ith, nth) runs on every thread with ith in [0, nth). */
typedef void (*tpool_fn)(void *arg, int ith, int nth);

/* Starts a pool of n_threads (>= 1; 1 means no workers). */
attnd_status tpool_create(int n_threads, struct tpool **out);
/* Stops and joins the workers; tpool_destroy(NULL) is a no-op. */
void tpool_destroy(struct tpool *p);
int tpool_size(const struct tpool *p);
/* Runs fn on all threads and returns when every thread has finished. */
void tpool_run(struct tpool *p, tpool_fn fn, void *arg);

#endif
