/* bench_model.c - prompt processing and generation speed of one model on the CPU.
 * usage: bench_model MODEL.gguf [threads] [reps] [label] [tests: pp128,pp512,tg64 by default]
 * Prints one table row per test: median tokens/s over reps runs (and min/max). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/forward.h"
#include "attnd/log.h"
#include "attnd/model.h"
#include "bench/bench_util.h"

static void row(const char *model, const char *test, double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_d);
    printf("| %-22s | %-8s | %9.1f | %9.1f | %9.1f |\n", model, test, v[n / 2], v[0], v[n - 1]);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_model MODEL.gguf [threads] [reps] [label] [tests]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 2, reps = argc > 3 ? atoi(argv[3]) : 5;
    const char *label = argc > 4 ? argv[4] : argv[1];
    const char *only = argc > 5 ? argv[5] : "pp128,pp512,tg64"; /* the tests to run, e.g. "tg64" for a profile */
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
    model_destroy(m);
    return 0;
}
