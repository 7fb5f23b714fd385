/* check.c - see check.h. */
#include "attnd/check.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void check_fail(const char *file, int line, const char *expr)
{
    fprintf(stderr, "attnd: invariant broken at %s:%d: %s\n", file, line, expr);
    fflush(stderr);
    abort();
}

double check_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void check_deadline(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    long long ns = ts->tv_nsec + (long long)(ms > 0 ? ms : 0) * 1000000LL;
    ts->tv_sec += (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
}

int check_cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    int rc = pthread_condattr_init(&ca);
    if (rc) return rc;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    rc = pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
    return rc;
}
