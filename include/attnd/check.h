/* check.h - always-on assertion for broken invariants (bugs), never for input bytes; and the
 * one monotonic clock every timing and timed wait shares (CLOCK_MONOTONIC: wall-clock jumps
 * neither cut a wait short nor stretch a measurement). */
#ifndef ATTND_CHECK_H
#define ATTND_CHECK_H

_Noreturn void check_fail(const char *file, int line, const char *expr);

#include <pthread.h>

struct timespec;
/* Fills *ts with CLOCK_MONOTONIC now + ms (ms < 0 counts as 0): an absolute deadline for
 * pthread_cond_timedwait() on a condition variable made by check_cond_init(). */
void check_deadline(struct timespec *ts, int ms);
/* CLOCK_MONOTONIC now, in seconds (for durations). */
double check_now_s(void);
/* pthread_cond_init for a condition variable whose timed waits take check_deadline() deadlines
 * (its clock set to CLOCK_MONOTONIC). Returns pthread_cond_init's result. */
int check_cond_init(pthread_cond_t *cv);

#define ATTND_CHECK(e) ((e) ? (void)0 : check_fail(__FILE__, __LINE__, #e))

#endif
