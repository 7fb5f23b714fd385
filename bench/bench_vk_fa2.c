/* bench_vk_fa2.c - FlashAttention-2 on the Vulkan device that is present (lavapipe here): decode
 * latency (one sequence, KV 4096, head dim 128, 8 KV heads, 8 and 32 query heads, F16) and
 * prefill throughput (512 and 4096 tokens, head dims 64 and 128, GQA 7:1, F16).
 * "device ms" is the timestamped dispatch time; "call ms" adds the uploads and download that this
 * first slice does on every call. Prints a table; exits 0 with a note when no device exists.
 * Usage: bench_vk_fa2 [quick|full]  (full adds the 4096-token prefills: minutes on lavapipe). */
#include "kernels/vulkan/vk_fa2.h"

#include "kernels/cpu/cpu_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static uint64_t g_rng = 88172645463325252ULL;
static float rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) * 0x1.0p-52 - 1.0);
}

/* Runs one configuration reps times; prints the best device and call times. */
static int run(struct vkb_fa2 *f, const char *what, int D, int Hkv, int H, int pos0, int n_q, int n_split, int reps)
{
    const int len = pos0 + n_q, nb = (len + FA2_BLOCK - 1) / FA2_BLOCK;
    const size_t pool = (size_t)nb * Hkv * FA2_BLOCK * D;
    uint16_t *k = malloc(pool * 2), *v = malloc(pool * 2);
    float *q = malloc((size_t)n_q * H * D * sizeof(float)), *o = malloc((size_t)n_q * H * D * sizeof(float));
    int32_t *bt = malloc((size_t)nb * sizeof(int32_t));
    if (!k || !v || !q || !o || !bt) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < pool; i++) {
        k[i] = cpu_f32_to_f16(rnd());
        v[i] = cpu_f32_to_f16(rnd());
    }
    for (size_t i = 0; i < (size_t)n_q * H * D; i++) q[i] = rnd();
    for (int i = 0; i < nb; i++) bt[i] = nb - 1 - i;
    struct fa2_seq s = {.q = q, .out = o, .n_q = n_q, .pos0 = pos0, .block_table = bt};
    struct fa2_args a = {.n_head = H, .n_head_kv = Hkv, .head_dim = D, .kv_type = TENSOR_F16, .k = k, .v = v,
                         .n_blocks = nb, .scale = 1.0f / sqrtf((float)D), .seqs = &s, .n_seqs = 1, .n_split = n_split};
    double best_dev = 1e30, best_call = 1e30;
    int rc = 0;
    for (int r = 0; r <= reps; r++) { /* rep 0 builds the pipeline */
        double dev_ms = -1, t0 = now_ms();
        attnd_status st = vkb_fa2_attend(f, &a, &dev_ms);
        double call = now_ms() - t0;
        if (st != ATTND_OK) {
            printf("%-44s failed: %s: %s\n", what, attnd_status_str(st), vkb_last_error());
            rc = 1;
            break;
        }
        if (r == 0) continue;
        if (dev_ms >= 0 && dev_ms < best_dev) best_dev = dev_ms;
        if (call < best_call) best_call = call;
    }
    if (!rc) {
        /* causal attention: 2 matmuls of 2 flops per multiply-add over the visible keys */
        double pairs = 0;
        for (int i = 0; i < n_q; i++) pairs += pos0 + i + 1;
        const double gflop = 4.0 * pairs * D * H * 1e-9;
        const double t = best_dev < 1e30 ? best_dev : best_call;
        printf("%-44s device %9.3f ms  call %9.3f ms  %8.2f GFLOP/s\n", what, best_dev < 1e30 ? best_dev : -1.0,
               best_call, gflop / (t * 1e-3));
    }
    free(k);
    free(v);
    free(q);
    free(o);
    free(bt);
    return rc;
}

int main(int argc, char **argv)
{
    /* quick: one repetition; full: also the 4096-token prefills (minutes on lavapipe) */
    const int quick = argc > 1 && strcmp(argv[1], "quick") == 0, full = argc > 1 && strcmp(argv[1], "full") == 0;
    struct vkb_device_opts opts = {.device_index = -1, .validation = 0, .timestamps = 1};
    struct vkb_device *dev = NULL;
    attnd_status st = vkb_device_create(&opts, &dev);
    if (st != ATTND_OK) {
        printf("bench_vk_fa2: no Vulkan device (%s: %s)\n", attnd_status_str(st), vkb_last_error());
        return 0;
    }
    const struct vkb_limits *l = vkb_device_limits(dev);
    printf("bench_vk_fa2: %s, subgroup %u, shared %u B\n", l->name, l->subgroup_size, l->max_shared_bytes);
    struct vkb_fa2 *f = NULL;
    if (vkb_fa2_create(dev, &f) != ATTND_OK) return 1;
    const int reps = quick ? 1 : 3;
    int rc = 0;
    rc |= run(f, "decode KV 4096 D128 8 KV / 8 q heads split 16", 128, 8, 8, 4095, 1, 16, reps);
    rc |= run(f, "decode KV 4096 D128 8 KV / 32 q heads split 16", 128, 8, 32, 4095, 1, 16, reps);
    rc |= run(f, "prefill 512 D64 GQA 7:1 (2 KV, 14 q heads)", 64, 2, 14, 0, 512, 1, reps);
    rc |= run(f, "prefill 512 D128 GQA 7:1 (2 KV, 14 q heads)", 128, 2, 14, 0, 512, 1, reps);
    if (full) {
        rc |= run(f, "prefill 4096 D64 GQA 7:1 (2 KV, 14 q heads)", 64, 2, 14, 0, 4096, 1, 1);
        rc |= run(f, "prefill 4096 D128 GQA 7:1 (2 KV, 14 q heads)", 128, 2, 14, 0, 4096, 1, 1);
    }
    vkb_fa2_destroy(f);
    vkb_device_destroy(dev);
    return rc;
}
