/* testutil.h - tiny test harness: each test is a program that exits 0 pass, 1 fail, 77 skip. */
#ifndef ATTND_TESTUTIL_H
#define ATTND_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>

static int t_failures = 0;
static int t_checks = 0;

#define T_CHECK(cond, ...)                                                                    \
    do {                                                                                      \
        t_checks++;                                                                           \
        if (!(cond)) {                                                                        \
            t_failures++;                                                                     \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                                     \
            fputc('\n', stderr);                                                              \
        }                                                                                     \
    } while (0)

/* Path of the shared test data folder ($SHARED, default ../shared). */
static inline const char *t_shared(void)
{
    const char *s = getenv("SHARED");
    return s && *s ? s : "../shared";
}

static inline int t_finish(const char *name)
{
    fprintf(stderr, "%s: %d checks, %d failed\n", name, t_checks, t_failures);
    return t_failures ? 1 : 0;
}

#endif
