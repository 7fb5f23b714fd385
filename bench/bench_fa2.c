/* bench_fa2.c - FlashAttention-2 CPU kernel speed (kernels/cpu/fa2.h) on a thread pool.
 * usage: bench_fa2 [threads] [reps]        (defaults: 2 threads, 20 reps after 3 warm-up runs)
 *
 * Decode: one query token per head over a paged F16 KV cache of 8 KV heads (shuffled blocks),
 * KV length 4096/8192, head dim 64/128, GQA 1:1 and 4:1. Two timings: "warm" runs the same pool
 * again and again (it stays in L3 when it fits), "cold" cycles through enough pools to exceed the
 * L3 cache, as successive layers of a model do; decode reads every K and V byte once, so the
 * table also gives the cold rate in GB/s and the machine's read bandwidth measured alongside. Prefill: 512 query tokens from position 0 with
 * the causal mask, head dim 128, 14 query / 2 KV heads, in GFLOP/s (4 * head_dim flops per
 * visible (query, key) pair and head). Prints markdown tables of medians (and the fastest call,
 * which shows the kernel when no other process competes for the cores). */
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/log.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/fa2.h"
#include "kernels/cpu/threadpool.h"
#include "bench/bench_util.h"

#define COLD_BYTES (96u << 20) /* pools cycled through for the cold timing: 3x a 32 MiB L3 */

static uint64_t g_rng = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd_u64(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static float rnd_sym(void) { return (float)((double)(rnd_u64() >> 11) * 0x1.0p-53 * 2.0 - 1.0); }

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "bench_fa2: out of memory\n");
        exit(1);
    }
    return p;
}

/* A K and a V pool of n_blocks F16 blocks with random values, in huge pages where the kernel
 * gives them, as the KV cache's pools are (kvcache.c). */
static uint16_t *make_pool(size_t n_halves)
{
    const size_t huge = 2u << 20, bytes = (n_halves * sizeof(uint16_t) + huge - 1) / huge * huge;
    uint16_t *p = aligned_alloc(huge, bytes);
    if (!p) {
        fprintf(stderr, "bench_fa2: out of memory\n");
        exit(1);
    }
    madvise(p, bytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < n_halves; i++) p[i] = cpu_f32_to_f16(rnd_sym());
    return p;
}

/* Shuffled block table of n entries over physical blocks 0..n-1. */
static int32_t *make_table(int n)
{
    int32_t *t = xmalloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) t[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rnd_u64() % (uint64_t)(i + 1));
        int32_t x = t[i];
        t[i] = t[j];
        t[j] = x;
    }
    return t;
}

/* Median ms of reps calls over n_pools pool pairs used in turn (after 3 warm-up calls); the
 * fastest call's ms into *best if not NULL. */
static double time_attend(struct tpool *pool, struct fa2_args *a, uint16_t **k, uint16_t **v, int n_pools, int reps,
                          double *best)
{
    double t[200];
    for (int i = 0; i < reps + 3; i++) {
        a->k = k[i % n_pools];
        a->v = v[i % n_pools];
        double t0 = bench_now();
        fa2_attend(pool, a);
        if (i >= 3) t[i - 3] = (bench_now() - t0) * 1e3;
    }
    const double med = bench_median(t, reps); /* sorts t */
    if (best) *best = t[0];
    return med;
}

/* Memory read bandwidth at the time of the run, in GB/s: every thread sums its share of a
 * buffer far larger than the caches (median of 5). Decode attention is bound by it. */
struct bw_job {
    const uint64_t *buf;
    size_t n;
    uint64_t sum[64];
};

static void bw_run(void *arg, int ith, int nth)
{
    struct bw_job *b = arg;
    size_t lo = b->n * ith / nth, hi = b->n * (ith + 1) / nth;
    uint64_t s = 0;
    for (size_t i = lo; i < hi; i++) s += b->buf[i];
    b->sum[ith % 64] = s;
}

static double read_bandwidth(struct tpool *pool)
{
    const size_t n = COLD_BYTES / sizeof(uint64_t);
    uint64_t *buf = xmalloc(COLD_BYTES);
    for (size_t i = 0; i < n; i++) buf[i] = i;
    struct bw_job b = {.buf = buf, .n = n};
    double t[5];
    tpool_run(pool, bw_run, &b);
    for (int i = 0; i < 5; i++) {
        double t0 = bench_now();
        tpool_run(pool, bw_run, &b);
        t[i] = bench_now() - t0;
    }
    free(buf);
    return (double)COLD_BYTES / bench_median(t, 5) / 1e9;
}

static void bench_decode(struct tpool *pool, int threads, int reps)
{
    static const struct {
        int kv_len, head_dim, n_head;
        double ref_ms; /* reference engine, 2 threads; 0 = not measured */
    } cases[] = {
        {4096, 64, 8, 0},   {4096, 64, 32, 0},   {4096, 128, 8, 0.30}, {4096, 128, 32, 1.22},
        {8192, 64, 8, 0},   {8192, 64, 32, 0},   {8192, 128, 8, 0},    {8192, 128, 32, 0},
    };
    const int n_kv = 8;
    printf("\n## FA2 decode (CPU %s, %d threads, F16 KV, 8 KV heads, 1 query token; median ms of %d)\n\n",
           cpu_isa_name(cpu_kernels_init()), threads, reps);
    printf("| KV len | head dim | q heads (GQA) | warm ms | warm best ms | cold ms | cold K+V GB/s | reference ms | reference / warm |\n");
    printf("|-------:|---------:|--------------:|--------:|-------------:|--------:|--------------:|-------------:|-----------------:|\n");
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int L = cases[ci].kv_len, D = cases[ci].head_dim, H = cases[ci].n_head;
        const int n_blocks = L / FA2_BLOCK;
        const size_t halves = (size_t)n_blocks * n_kv * FA2_BLOCK * D;
        int n_pools = (int)(COLD_BYTES / (2 * halves * sizeof(uint16_t))) + 1;
        uint16_t **k = xmalloc((size_t)n_pools * sizeof *k), **v = xmalloc((size_t)n_pools * sizeof *v);
        for (int p = 0; p < n_pools; p++) {
            k[p] = make_pool(halves);
            v[p] = make_pool(halves);
        }
        int32_t *table = make_table(n_blocks);
        float *q = xmalloc((size_t)H * D * sizeof(float)), *out = xmalloc((size_t)H * D * sizeof(float));
        for (int i = 0; i < H * D; i++) q[i] = rnd_sym();
        struct fa2_seq seq = {.q = q, .out = out, .n_q = 1, .pos0 = L - 1, .block_table = table};
        /* enough work items for every thread; splitting costs a reduce pass, so no more */
        int n_split = (threads + n_kv - 1) / n_kv;
        struct fa2_args a = {.n_head = H, .n_head_kv = n_kv, .head_dim = D, .kv_type = TENSOR_F16,
                             .n_blocks = n_blocks, .scale = 0.125f, .seqs = &seq, .n_seqs = 1, .n_split = n_split};
        float *scratch = xmalloc(fa2_scratch_floats(&a) * sizeof(float) + 1);
        a.scratch = scratch;
        double best;
        const double warm = time_attend(pool, &a, k, v, 1, reps, &best);
        const double cold = time_attend(pool, &a, k, v, n_pools, reps, NULL);
        char ref[32] = "", ratio[32] = "";
        if (cases[ci].ref_ms > 0) {
            snprintf(ref, sizeof ref, "%.2f", cases[ci].ref_ms);
            snprintf(ratio, sizeof ratio, "%.2fx", cases[ci].ref_ms / warm);
        }
        printf("| %6d | %8d | %6d (%d:1) | %7.3f | %12.3f | %7.3f | %13.1f | %12s | %16s |\n", L, D, H, H / n_kv, warm,
               best, cold, (double)(2 * halves * sizeof(uint16_t)) / (cold * 1e-3) / 1e9, ref, ratio);
        fflush(stdout);
        for (int p = 0; p < n_pools; p++) {
            free(k[p]);
            free(v[p]);
        }
        free(k);
        free(v);
        free(table);
        free(q);
        free(out);
        free(scratch);
    }
    printf("\nMemory read bandwidth during this run: %.1f GB/s (%d threads, %u MiB buffer).\n", read_bandwidth(pool),
           threads, COLD_BYTES >> 20);
}

static void bench_prefill(struct tpool *pool, int threads, int reps)
{
    const int T = 512, D = 128, H = 14, n_kv = 2, n_blocks = T / FA2_BLOCK;
    const size_t halves = (size_t)n_blocks * n_kv * FA2_BLOCK * D;
    uint16_t *k = make_pool(halves), *v = make_pool(halves);
    int32_t *table = make_table(n_blocks);
    float *q = xmalloc((size_t)T * H * D * sizeof(float)), *out = xmalloc((size_t)T * H * D * sizeof(float));
    for (size_t i = 0; i < (size_t)T * H * D; i++) q[i] = rnd_sym();
    struct fa2_seq seq = {.q = q, .out = out, .n_q = T, .pos0 = 0, .block_table = table};
    struct fa2_args a = {.n_head = H, .n_head_kv = n_kv, .head_dim = D, .kv_type = TENSOR_F16, .n_blocks = n_blocks,
                         .scale = 0.088f, .seqs = &seq, .n_seqs = 1, .n_split = 1};
    double best;
    const double ms = time_attend(pool, &a, &k, &v, 1, reps, &best);
    const double flops = 4.0 * D * H * ((double)T * (T + 1) / 2);
    printf("\n## FA2 prefill (CPU kernel %s, %d threads, F16 KV, causal; median of %d)\n\n", fa2_variant_name(D, FA2_PREFILL),
           threads, reps);
    printf("| query tokens | head dim | q/kv heads |     ms | GFLOP/s | best ms | best GFLOP/s |\n");
    printf("|-------------:|---------:|-----------:|-------:|--------:|--------:|-------------:|\n");
    printf("| %12d | %8d | %5d/%-4d | %6.2f | %7.1f | %7.2f | %12.1f |\n", T, D, H, n_kv, ms, flops / (ms * 1e-3) / 1e9,
           best, flops / (best * 1e-3) / 1e9);
    free(k);
    free(v);
    free(table);
    free(q);
    free(out);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2, reps = argc > 2 ? atoi(argv[2]) : 20;
    if (threads < 1 || threads > 256) threads = 2;
    if (reps < 1 || reps > 200) reps = 20;
    log_set_level(LOG_WARN);
    cpu_kernels_init();
    struct tpool *pool;
    if (tpool_create(threads, &pool) != ATTND_OK) {
        fprintf(stderr, "bench_fa2: tpool_create failed\n");
        return 1;
    }
    const enum cpu_isa best = cpu_kernels_init();
    bench_decode(pool, threads, reps);
    /* the prefill on every variant the CPU has (fa2_variant_name: what a head size runs), the
     * chosen one last; the scalar reference with fewer runs */
    for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa++) {
        cpu_kernels_set_isa((enum cpu_isa)isa);
        bench_prefill(pool, threads, isa == CPU_ISA_SCALAR ? 3 : reps);
    }
    printf("\nReference engine (2 threads, KV 4096, head dim 128): decode 0.30 ms with 8 query heads, 1.22 ms with 32.\n");
    tpool_destroy(pool);
    return 0;
}
