/* cli.c - see cli.h. */
#include "server/cmd/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/forward.h"

int cli_int(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "attnd: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

int cli_float(const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "attnd: %s expects a number in [%g, %g], got '%s'\n", flag, lo, hi, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

int cli_int_list(const char *flag, const char *s, int32_t **out, size_t *n)
{
    size_t cap = 16, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (p && *p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "attnd: %s expects comma-separated token ids, got '%s'\n", flag, s);
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        fprintf(stderr, "attnd: %s needs at least one token id\n", flag);
        free(v);
        return -1;
    }
    *out = v;
    *n = k;
    return 0;
}

int cli_backend_flag(const char *flag, const char *v, int *backend, int *vk_device)
{
    if (!strcmp(flag, "--backend")) {
        enum fwd_backend b;
        if (!v || fwd_backend_parse(v, &b)) {
            fprintf(stderr, "attnd: --backend expects auto, vulkan or cpu, got '%s'\n", v ? v : "");
            return -1;
        }
        *backend = (int)b;
        return 1;
    }
    if (!strcmp(flag, "--vk-device")) {
        long n;
        if (cli_int(flag, v, 0, 63, &n)) return -1;
        *vk_device = (int)n + 1;
        return 1;
    }
    return 0;
}
