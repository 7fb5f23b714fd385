/* bench_vk_fa2.c - FlashAttention-2 on the Vulkan device that is present (lavapipe here) beside the
 * CPU kernel (kernels/cpu/fa2.h on a thread pool), device-resident as in the Vulkan forward pass:
 * the pools, q and out live in device buffers, the plan (tables) is built once, and each run
 * records the dispatches into one batch and submits it (vkb_fa2_record, vkb_submit_wait).
 *
 * Cases: decode (one query token per sequence) at KV 4096 and 8192, head dims 64 and 128, 8 KV
 * heads with 8 or 32 query heads, F16, split across the device's parallelism; prefill (causal,
 * from position 0) of 512 and 4096 tokens, head dims 64 and 128, GQA 7:1 (14 query / 2 KV heads).
 * FLOPs: 4 * head_dim * query heads per visible (query, key) pair (QK^T and PV, 2 flops per
 * multiply-add), i.e. about 4 * n^2/2 * hd * heads for a causal prefill.
 * Times are medians: "device" from timestamps around the batch (-1 without), "wall" the wall clock
 * of vkb_submit_wait (recording included). Each case runs 10 times after a warm-up run, except a
 * case whose first run takes long (the 4096-token prefills on lavapipe: no warm-up, as many runs
 * as fit in BENCH_SECONDS, default 6, at least one); the "runs" column says how many. "diff" is
 * the largest |Vulkan - CPU| element.
 * Reference: an established engine's Vulkan FA kernel on lavapipe here, decode KV 4096 hd 128,
 * 8 KV heads: 9.8 ms with 8 query heads, 51 ms with 32.
 * Usage: bench_vk_fa2 [quick]  (quick: 3 runs, no 4096-token prefill). $THREADS: CPU threads
 * (default 2); $BENCH_FILTER: only the cases whose name contains it; $BENCH_SPLIT: decode split;
 * $BENCH_RUNS: runs per case (default 10, at most 64); $BENCH_SECONDS: see above; $BENCH_D2: the
 * second head dim of the decode cases instead of 64 (experiments). Exits 0 with a note when no
 * Vulkan device exists. */
#include "kernels/vulkan/vk_fa2.h"

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/fa2.h"
#include "kernels/cpu/threadpool.h"
#include "bench/bench_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    return bench_now() * 1e3;
}
static uint64_t g_rng = 88172645463325252ULL;
static float rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) * 0x1.0p-52 - 1.0);
}

#define MAX_RUNS 64
static int g_min_runs = 10;
static double g_budget_ms = 6000;

struct result {
    double dev_ms, wall_ms, cpu_ms, gflop, diff;
    int runs, cpu_runs;
};

static int runs_for(double first_ms)
{
    int n = (int)(g_budget_ms / (first_ms > 1e-3 ? first_ms : 1e-3));
    if (n > g_min_runs) n = g_min_runs;
    return n < 1 ? 1 : n;
}

/* One configuration (one sequence, F16 pools, shuffled blocks). Returns 0 or 1 (failure printed). */
static int run(struct vkb_device *dev, struct vkb_fa2 *f, struct tpool *pool, int D, int Hkv, int H, int pos0,
               int n_q, int n_split, struct result *r)
{
    const int len = pos0 + n_q, nb = (len + FA2_BLOCK - 1) / FA2_BLOCK;
    const size_t pool_el = (size_t)nb * Hkv * FA2_BLOCK * D, qn = (size_t)n_q * H * D;
    uint16_t *k = malloc(pool_el * 2), *v = malloc(pool_el * 2);
    float *q = malloc(qn * sizeof(float)), *o = malloc(qn * sizeof(float)), *oc = malloc(qn * sizeof(float));
    int32_t *bt = malloc((size_t)nb * sizeof(int32_t));
    struct vkb_fa2_plan *plan = NULL;
    struct vkb_buffer *bq = NULL, *bk = NULL, *bv = NULL, *bo = NULL;
    float *scratch = NULL;
    int rc = 1;
    attnd_status st = ATTND_ERR_NOMEM;
    memset(r, 0, sizeof *r);
    if (!k || !v || !q || !o || !oc || !bt) goto done;
    for (size_t i = 0; i < pool_el; i++) {
        k[i] = cpu_f32_to_f16(rnd());
        v[i] = cpu_f32_to_f16(rnd());
    }
    for (size_t i = 0; i < qn; i++) q[i] = rnd();
    for (int i = 0; i < nb; i++) bt[i] = (int32_t)(((int64_t)i * 7919) % nb); /* shuffled when nb % 7919 != 0 */
    struct fa2_seq s = {.q = q, .out = o, .n_q = n_q, .pos0 = pos0, .block_table = bt};
    struct fa2_args a = {.n_head = H, .n_head_kv = Hkv, .head_dim = D, .kv_type = TENSOR_F16, .k = k, .v = v,
                         .n_blocks = nb, .scale = 1.0f / sqrtf((float)D), .seqs = &s, .n_seqs = 1, .n_split = n_split};
    double pairs = 0;
    for (int i = 0; i < n_q; i++) pairs += pos0 + i + 1;
    r->gflop = 4.0 * pairs * D * H * 1e-9;

    /* device-resident: pools, q and out uploaded once, the plan built once */
    if ((st = vkb_fa2_plan_create(f, &plan)) || (st = vkb_buffer_create(dev, pool_el * 2, &bk)) ||
        (st = vkb_buffer_create(dev, pool_el * 2, &bv)) || (st = vkb_buffer_create(dev, qn * 4, &bq)) ||
        (st = vkb_buffer_create(dev, qn * 4, &bo)) || (st = vkb_buffer_write(dev, bk, 0, k, pool_el * 2)) ||
        (st = vkb_buffer_write(dev, bv, 0, v, pool_el * 2)) || (st = vkb_buffer_write(dev, bq, 0, q, qn * 4)) ||
        (st = vkb_fa2_plan_build(plan, &a)))
        goto done;
    double dev_t[MAX_RUNS], wall_t[MAX_RUNS], cpu_t[MAX_RUNS];
    int n = 0, want = 1;
    /* run -1 warms up (the plan build compiled the pipelines), except for long runs */
    for (int i = r->gflop > 2.0 ? 0 : -1; i < want && i < MAX_RUNS; i++) {
        double dms = -1, t0 = now_ms();
        if ((st = vkb_begin(dev))) goto done;
        attnd_status st1 = vkb_fa2_record(plan, bq, 0, bk, bv, bo, 0);
        st = vkb_submit_wait(dev, &dms);
        if (st1) st = st1;
        if (st) goto done;
        const double w = now_ms() - t0;
        if (i < 0) continue;
        if (i == 0) want = runs_for(w);
        dev_t[n] = dms;
        wall_t[n++] = w;
    }
    r->runs = n;
    r->dev_ms = dev_t[0] >= 0 ? bench_median(dev_t, n) : -1;
    r->wall_ms = bench_median(wall_t, n);
    if ((st = vkb_buffer_read(dev, bo, 0, o, qn * 4))) goto done;

    /* the CPU kernel on the same pools */
    scratch = malloc(fa2_scratch_floats(&a) * sizeof(float) + 4);
    if (!scratch) goto done;
    a.scratch = scratch;
    a.n_split = (tpool_size(pool) + Hkv - 1) / Hkv;
    s.out = oc;
    fa2_attend(pool, &a); /* warm-up */
    n = 0;
    want = 1;
    for (int i = 0; i < want && i < MAX_RUNS; i++) {
        const double t0 = now_ms();
        fa2_attend(pool, &a);
        cpu_t[n++] = now_ms() - t0;
        if (i == 0) want = runs_for(cpu_t[0]);
    }
    r->cpu_runs = n;
    r->cpu_ms = bench_median(cpu_t, n);
    for (size_t i = 0; i < qn; i++) {
        const double e = fabs((double)o[i] - (double)oc[i]);
        if (!(e <= r->diff)) r->diff = e; /* NaN sticks */
    }
    rc = 0;
done:
    if (rc && st) fprintf(stderr, "bench_vk_fa2: %s: %s\n", attnd_status_str(st), vkb_last_error());
    vkb_fa2_plan_destroy(plan);
    vkb_buffer_destroy(dev, bq);
    vkb_buffer_destroy(dev, bk);
    vkb_buffer_destroy(dev, bv);
    vkb_buffer_destroy(dev, bo);
    free(scratch);
    free(k);
    free(v);
    free(q);
    free(o);
    free(oc);
    free(bt);
    return rc;
}

static void row(const char *what, const struct result *r, const char *ref)
{
    const double t = r->dev_ms >= 0 ? r->dev_ms : r->wall_ms;
    printf("| %-34s | %9.3f | %9.3f | %8.2f | %9.3f | %8.2f | %4d | %7.1e | %-8s |\n", what, r->dev_ms, r->wall_ms,
           r->gflop / (t * 1e-3), r->cpu_ms, r->gflop / (r->cpu_ms * 1e-3), r->runs, r->diff, ref);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    if (quick) g_min_runs = 3;
    if (getenv("BENCH_RUNS")) {
        g_min_runs = atoi(getenv("BENCH_RUNS"));
        if (g_min_runs > MAX_RUNS) g_min_runs = MAX_RUNS;
    }
    if (getenv("BENCH_SECONDS")) g_budget_ms = atof(getenv("BENCH_SECONDS")) * 1e3;
    const int threads = getenv("THREADS") ? atoi(getenv("THREADS")) : 2;
    struct vkb_device_opts opts = {.device_index = -1, .validation = 0, .timestamps = 1};
    struct vkb_device *dev = NULL;
    attnd_status st = vkb_device_create(&opts, &dev);
    if (st != ATTND_OK) {
        printf("bench_vk_fa2: no Vulkan device (%s: %s)\n", attnd_status_str(st), vkb_last_error());
        return 0;
    }
    const struct vkb_limits *l = vkb_device_limits(dev);
    struct vkb_fa2 *f = NULL;
    struct tpool *pool = NULL;
    if (vkb_fa2_create(dev, &f) != ATTND_OK || tpool_create(threads > 0 ? threads : 1, &pool) != ATTND_OK) {
        fprintf(stderr, "bench_vk_fa2: out of memory\n");
        return 1;
    }
    /* decode split: enough workgroups for every core of a CPU device (lavapipe runs one workgroup
     * per core at a time), a few per multiprocessor on a GPU */
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (getenv("LP_NUM_THREADS")) ncpu = atol(getenv("LP_NUM_THREADS"));
    if (ncpu < 1) ncpu = 1;
    int dev_split = l->is_cpu ? (int)((2 * ncpu + 7) / 8) : 32;
    if (getenv("BENCH_SPLIT")) dev_split = atoi(getenv("BENCH_SPLIT"));
    const char *filter = getenv("BENCH_FILTER"); /* only the cases whose name contains it */

    printf("\n## FlashAttention-2, Vulkan: %s (%s, subgroup %u) vs CPU kernel (%d threads)\n\n", l->name,
           l->is_cpu ? "CPU device" : l->is_discrete ? "discrete GPU" : "GPU", l->subgroup_size, threads);
    printf("F16 K/V, device-resident pools, one batch per run; medians in ms; GFLOP/s = 4*hd*heads per "
           "visible (query, key) pair; decode split %d.\n\n", dev_split);
    printf("| %-34s | %9s | %9s | %8s | %9s | %8s | %4s | %7s | %-8s |\n", "case", "device ms", "wall ms", "GFLOP/s",
           "CPU ms", "CPU GF/s", "runs", "diff", "ref ms");
    printf("|------------------------------------|-----------|-----------|----------|-----------|----------|"
           "------|---------|----------|\n");
    int rc = 0;
    static const int kvs[] = {4096, 8192}, qh[] = {8, 32};
    int dims[] = {128, 64};
    if (getenv("BENCH_D2")) dims[1] = atoi(getenv("BENCH_D2")); /* experiments: another head dim */
    for (int ki = 0; ki < 2; ki++)
        for (int di = 0; di < 2; di++)
            for (int hi = 0; hi < 2; hi++) {
                if (quick && (ki || di)) continue;
                struct result r;
                char what[64];
                snprintf(what, sizeof what, "decode KV %d hd %d 8 KV/%d q heads", kvs[ki], dims[di], qh[hi]);
                if (filter && !strstr(what, filter)) continue;
                if (run(dev, f, pool, dims[di], 8, qh[hi], kvs[ki] - 1, 1, dev_split, &r)) {
                    printf("| %-34s | failed |\n", what);
                    rc = 1;
                    continue;
                }
                row(what, &r, ki == 0 && di == 0 ? (hi ? "51" : "9.8") : "");
            }
    static const int lens[] = {512, 4096};
    for (int li = 0; li < 2; li++)
        for (int di = 1; di >= 0; di--) {
            if (quick && li) continue;
            struct result r;
            char what[64];
            snprintf(what, sizeof what, "prefill %d hd %d 2 KV/14 q heads", lens[li], dims[di]);
            if (filter && !strstr(what, filter)) continue;
            if (run(dev, f, pool, dims[di], 2, 14, 0, lens[li], 1, &r)) {
                printf("| %-34s | failed |\n", what);
                rc = 1;
                continue;
            }
            row(what, &r, "");
        }
    printf("\nref ms: an established engine's Vulkan FA kernel on lavapipe on this machine (decode, 8 KV heads).\n");
    tpool_destroy(pool);
    vkb_fa2_destroy(f);
    vkb_device_destroy(dev);
    return rc;
}
