/* check.h - always-on assertion for broken invariants (bugs), never for input bytes; and the
 * deadline helper the waiting code shares. */
#ifndef ATTND_CHECK_H
#define ATTND_CHECK_H

_Noreturn void check_fail(const char *file, int line, const char *expr);

struct timespec;
/* Fills *ts with CLOCK_REALTIME now + ms (ms < 0 counts as 0): an absolute deadline for
 * pthread_cond_timedwait(). */
void check_deadline(struct timespec *ts, int ms);

#define ATTND_CHECK(e) ((e) ? (void)0 : check_fail(__FILE__, __LINE__, #e))

#endif
