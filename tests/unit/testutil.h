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

/* Reads a whole file into a malloc'd, NUL-terminated buffer (NULL if it cannot be read). */
static inline char *t_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    long n = -1;
    if (!fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) && (b = malloc((size_t)n + 1))) {
        if (fread(b, 1, (size_t)n, f) != (size_t)n) {
            free(b);
            b = NULL;
        } else b[n] = 0;
    }
    fclose(f);
    if (b && len) *len = (size_t)n;
    return b;
}

static inline int t_finish(const char *name)
{
    fprintf(stderr, "%s: %d checks, %d failed\n", name, t_checks, t_failures);
    return t_failures ? 1 : 0;
}

#endif
