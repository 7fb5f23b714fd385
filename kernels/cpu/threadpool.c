/* threadpool.c - see threadpool.h. */
#include "kernels/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "attnd/check.h"

/* Between jobs a worker spins SPIN_ITERS pauses (a decode step issues hundreds of short jobs),
 * then yields its core YIELD_ITERS times (another runnable thread - possibly the one it waits
 * for - gets the core), then sleeps. The caller waiting for workers does the same minus the sleep. */
#define SPIN_ITERS 4000
#define YIELD_ITERS 200

struct tpool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;      /* bumped for every job */
    atomic_int pending;   /* workers that have not finished the current job */
    atomic_int stop;
    tpool_fn fn;
    void *arg;
};

struct worker_arg {
    struct tpool *p;
    int ith;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker(void *varg)
{
    struct worker_arg wa = *(struct worker_arg *)varg;
    free(varg);
    struct tpool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen && !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            if (spins < SPIN_ITERS + YIELD_ITERS) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        p->fn(p->arg, wa.ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel);
    }
}

attnd_status tpool_create(int n_threads, struct tpool **out)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 1024) return ATTND_ERR_INVALID;
    struct tpool *p = calloc(1, sizeof *p);
    if (!p) return ATTND_ERR_NOMEM;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) goto err;
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (!wa) goto err;
        wa->p = p;
        wa->ith = i;
        if (pthread_create(&p->threads[i], NULL, worker, wa)) {
            free(wa);
            p->n = i; /* only join those started */
            goto err;
        }
    }
    *out = p;
    return ATTND_OK;
err:
    tpool_destroy(p);
    return ATTND_ERR_NOMEM;
}

void tpool_destroy(struct tpool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->threads)
        for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

int tpool_size(const struct tpool *p) { return p->n; }

void tpool_run(struct tpool *p, tpool_fn fn, void *arg)
{
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    ATTND_CHECK(atomic_load(&p->pending) == 0);
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0, p->n);
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        if (spins < SPIN_ITERS) cpu_relax();
        else sched_yield();
    }
}
