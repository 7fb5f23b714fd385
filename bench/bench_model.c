/* bench_model.c - prompt processing and generation speed of one model on the CPU.
 * usage: bench_model MODEL.gguf [threads] [reps] [label] [tests: pp128,pp512,tg64,read by default]
 * Prints one table row per test: median tokens/s over reps runs (and min/max).
 *
 * "read" is generation's ceiling on this machine: one pass reads every weight byte a token
 * multiplies (each layer's q/k/v, o, gate/up and down, then the output matrix), in the jobs the
 * engine runs and with each matrix's rows split over the threads as the engine splits them, and
 * does nothing else with them. Passes per second bound the tokens per second of any engine that
 * reads these weights once per token, whatever its kernels. */
#include <emmintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/forward.h"
#include "attnd/log.h"
#include "attnd/model.h"
#include "bench/bench_util.h"
#include "kernels/cpu/threadpool.h"

static void row(const char *model, const char *test, double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
    printf("| %-22s | %-8s | %9.1f | %9.1f | %9.1f |\n", model, test, v[n / 2], v[0], v[n - 1]);
    fflush(stdout);
}

/* ---- the read ceiling ---- */

#define READ_MAX 3 /* matrices in one job (q, k, v) */
struct read_job {
    const struct model_weight *w[READ_MAX];
    int n;
    uint64_t sink[8]; /* per thread, so the loads are not dropped */
};

/* OR of the 16-byte words of [p, p + bytes) and [q, q + bytes), 128 bytes of each in turn (two
 * streams: one stream reads slower here, and the matrix-vector kernels read several, mv_streams),
 * bytes a multiple of 128 (the rest is not read). */
static uint64_t read_bytes2(const unsigned char *p, const unsigned char *q, size_t bytes)
{
    __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
    for (size_t o = 0; o + 128 <= bytes; o += 128) {
        const __m128i *x = (const __m128i *)(const void *)(p + o), *z = (const __m128i *)(const void *)(q + o);
        a = _mm_or_si128(a, _mm_or_si128(_mm_loadu_si128(x), _mm_loadu_si128(x + 1)));
        b = _mm_or_si128(b, _mm_or_si128(_mm_loadu_si128(x + 2), _mm_loadu_si128(x + 3)));
        c = _mm_or_si128(c, _mm_or_si128(_mm_loadu_si128(x + 4), _mm_loadu_si128(x + 5)));
        d = _mm_or_si128(d, _mm_or_si128(_mm_loadu_si128(x + 6), _mm_loadu_si128(x + 7)));
        a = _mm_or_si128(a, _mm_or_si128(_mm_loadu_si128(z), _mm_loadu_si128(z + 1)));
        b = _mm_or_si128(b, _mm_or_si128(_mm_loadu_si128(z + 2), _mm_loadu_si128(z + 3)));
        c = _mm_or_si128(c, _mm_or_si128(_mm_loadu_si128(z + 4), _mm_loadu_si128(z + 5)));
        d = _mm_or_si128(d, _mm_or_si128(_mm_loadu_si128(z + 6), _mm_loadu_si128(z + 7)));
    }
    const __m128i r = _mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d));
    return (uint64_t)_mm_cvtsi128_si64(r) | (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(r, r));
}

/* Thread ith's rows of each matrix: the engine's split, whole multiples of 16 rows. */
static void read_run(void *arg, int ith, int nth)
{
    struct read_job *j = arg;
    uint64_t s = 0;
    for (int i = 0; i < j->n; i++) {
        const struct model_weight *w = j->w[i];
        const size_t chunks = (w->n_out + 15) / 16, per = chunks / (size_t)nth, rem = chunks % (size_t)nth;
        const size_t c0 = (size_t)ith * per + ((size_t)ith < rem ? (size_t)ith : rem), c1 = c0 + per + ((size_t)ith < rem);
        const size_t r0 = c0 * 16 < w->n_out ? c0 * 16 : w->n_out, r1 = c1 * 16 < w->n_out ? c1 * 16 : w->n_out;
        const unsigned char *p = (const unsigned char *)w->data + r0 * w->row_bytes;
        const size_t half = (r1 - r0) * w->row_bytes / 2;
        s |= read_bytes2(p, p + half, half);
    }
    j->sink[ith & 7] |= s;
}

static void read_job(struct tpool *pool, struct read_job *j, const struct model_weight *a,
                     const struct model_weight *b, const struct model_weight *c)
{
    j->n = 0;
    if (a) j->w[j->n++] = a;
    if (b) j->w[j->n++] = b;
    if (c) j->w[j->n++] = c;
    tpool_run(pool, read_run, j);
}

/* One token's weight bytes, read once in the engine's jobs. */
static void read_pass(struct tpool *pool, const struct model *m, struct read_job *j)
{
    for (int l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        read_job(pool, j, &L->wq, &L->wk, &L->wv);
        read_job(pool, j, &L->wo, NULL, NULL);
        read_job(pool, j, &L->w_gate, &L->w_up, NULL);
        read_job(pool, j, &L->w_down, NULL, NULL);
    }
    read_job(pool, j, &m->output, NULL, NULL);
}

/* The ceiling row: passes per second over reps runs of ng passes. */
static int read_ceiling(const struct model *m, int threads, int reps, int ng, const char *label, double *v)
{
    struct tpool *pool;
    if (tpool_create(threads, &pool)) return 1;
    struct read_job j = {0};
    read_pass(pool, m, &j); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        for (int i = 0; i < ng; i++) read_pass(pool, m, &j);
        v[r] = ng / (bench_now() - t0);
    }
    tpool_destroy(pool);
    uint64_t s = 0;
    for (int i = 0; i < 8; i++) s |= j.sink[i];
    if (s == 0x5eed) fprintf(stderr, "(unlikely)\n"); /* uses the sums */
    row(label, "read", v, reps);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_model MODEL.gguf [threads] [reps] [label] [tests]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 2, reps = argc > 3 ? atoi(argv[3]) : 5;
    const char *label = argc > 4 ? argv[4] : argv[1];
    const char *only = argc > 5 ? argv[5] : "pp128,pp512,tg64,read"; /* the tests to run, e.g. "tg64" for a profile */
    if (reps < 1 || reps > 100) reps = 5;
    log_set_level(LOG_WARN);
    char err[512];
    struct model *m;
    if (model_load(argv[1], &m, err, sizeof err)) {
        fprintf(stderr, "bench_model: %s\n", err);
        return 1;
    }
    printf("| %-22s | %-8s | %9.3f | %9s | %9s |  load s, %s at %.0f MB/s\n", label, "load", m->load_seconds, "", "",
           m->load_method, (double)m->load_bytes / 1e6 / m->load_seconds);
    struct fwd_opts o = {.n_ctx = 1024, .n_threads = threads, .n_batch = 512};
    struct fwd_ctx *c;
    if (fwd_create(m, &o, &c)) return 1;
    int V = m->hp.n_vocab;
    float *logits = malloc((size_t)V * sizeof(float));
    int32_t toks[512];
    srand(1);
    for (int i = 0; i < 512; i++) toks[i] = rand() % V;
    double v[100];
    int pp[] = {128, 512};
    for (int k = 0; k < 2; k++) {
        char name[16];
        snprintf(name, sizeof name, "pp%d", pp[k]);
        if (!strstr(only, name)) continue;
        fwd_reset(c);
        fwd_eval(c, toks, pp[k], false, logits); /* warm-up: the same prompt once, as llama-bench does */
        for (int r = 0; r < reps; r++) {
            fwd_reset(c);
            double t0 = bench_now();
            fwd_eval(c, toks, pp[k], false, logits);
            v[r] = pp[k] / (bench_now() - t0);
        }
        row(label, name, v, reps);
    }
    const int ng = 64;
    if (strstr(only, "tg64")) { /* warm-up: one generated token, as llama-bench does */
        fwd_reset(c);
        fwd_eval(c, toks, 1, false, logits);
    }
    for (int r = 0; r < reps && strstr(only, "tg64"); r++) {
        fwd_reset(c);
        int32_t t = toks[0];
        double t0 = bench_now();
        for (int i = 0; i < ng; i++) {
            fwd_eval(c, &t, 1, false, logits);
            t = toks[(i + 1) % 512];
        }
        v[r] = ng / (bench_now() - t0);
    }
    if (strstr(only, "tg64")) row(label, "tg64", v, reps);
    free(logits);
    fwd_destroy(c);
    if (strstr(only, "read") && read_ceiling(m, threads, reps, ng, label, v)) return 1;
    model_destroy(m);
    return 0;
}
