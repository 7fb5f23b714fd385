/* test_vk_fa2.c - the Vulkan FlashAttention-2 shaders (kernels/vulkan/vk_fa2.h) against a float64
 * reference computed from the same f16-rounded inputs (the batch builder of test_fa2.c).
 *
 * Covered: head dims 64, 80, 128 and GQA ratios 1, 2, 7, 8 (1 or 2 KV heads) in six combinations
 * (g_combos), plus 36 and 200 once; lengths 1, 15, 16, 17, 63, 65, 1000 as full prefills (1000 in two combinations), as
 * chunks after a cached prefix and as decode steps, batched into one call; shuffled physical
 * blocks whose unused blocks and tail slots hold NaN; F16 and F32 pools (F32 with a padded block
 * stride); decode split into 1..8 parts and more parts than blocks; scores x30; the
 * device-resident API (plan + record of two layers into one batch, q and out at offsets). On a CPU
 * device the "lanes" shader runs; head_dim 36 takes the tile shaders (the GPU path) there, with
 * plan + record too.
 *
 * Runs with the validation layer on (ATTND_VK_VALIDATION=1) and requires zero validation errors.
 * Runs once with lavapipe's default settings, then re-executes itself with
 * LP_NATIVE_VECTOR_WIDTH=128 (subgroup size 4 instead of 8 on lavapipe) on a subset: head dim 64
 * with GQA 1 and head dim 128 with GQA 7 (every pipeline is compiled again for it), and with
 * ATTND_VK_FA2_NO_TEXEL=1, so that the first pass covers fa2_lanes_tex.comp (texel-buffer
 * pools) and this one fa2_lanes.comp; on a GPU only the first pass runs. ATTND_VK_VALIDATION=0 turns validation off (bench/gpu-check.sh, on a
 * machine without the layer). No Vulkan device is a FAIL: lavapipe
 * (mesa-vulkan-drivers) is a build dependency.
 *
 * Under ASan the test re-executes itself with detect_leaks=0 (a leak inside the driver stack).
 *
 * Pass criteria per sequence: NMSE <= 5e-4 and |err| <= 2e-3 + 2e-3 |ref| (a NaN fails). */
#include "kernels/vulkan/vk_fa2.h"

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/vulkan/vk_device.h"

#include "tests/unit/testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------ */

#include "tests/unit/fa2_cases.h"
}

/* ------------------------------------------------------------------------------------------
 * Running the shaders
 * ------------------------------------------------------------------------------------------ */

static struct vkb_device *g_dev;
static int g_light; /* second pass: a subset (every pipeline is compiled again for it) */
static struct vkb_fa2 *g_fa2;

/* Runs the batch once on the device (NaN-filled outputs, or in place over a copy of q) and
 * checks it. Returns the number of bad sequences. */
static int run_check(struct batch *b, int n_split, int in_place, const char *tag)
{
    float **out = batch_outputs(b, in_place);
    struct fa2_args a = batch_args(b, n_split);
    char what[160];
    snprintf(what, sizeof what, "%s vulkan split %d%s", tag, n_split, in_place ? " in-place" : "");
    attnd_status st = vkb_fa2_attend(g_fa2, &a, NULL);
    int bad;
    if (st != ATTND_OK) {
        T_CHECK(st == ATTND_OK, "%s: vkb_fa2_attend: %s: %s", what, attnd_status_str(st), vkb_last_error());
        bad = b->n_seqs;
    } else {
        bad = check_out(b, out, what);
    }
    batch_outputs_free(b, out);
    return bad;
}

/* ------------------------------------------------------------------------------------------
 * Cases
 * ------------------------------------------------------------------------------------------ */

static const int g_lens[] = {1, 15, 16, 17, 63, 65, 1000};
#define N_LENS ((int)(sizeof g_lens / sizeof g_lens[0]))

/* The (head_dim, GQA, pool type) combinations: every head dim and every group size, F32 pools
 * (with a padded block stride) once, each with its own pipeline. They are not the full cross
 * product because compiling a pipeline dominates the run time on lavapipe (seconds each from a
 * cold shader cache); each test reuses the same combinations, so no pipeline is built twice. */
struct combo {
    int D, n_head_kv, group;
    enum tensor_type kvt;
    int long_prefill; /* include the 1000-token full prefill */
    int light;        /* also in the second pass (subgroup size 4) */
};
static const struct combo g_combos[] = {
    {64, 2, 1, TENSOR_F16, 0, 1},  {64, 2, 8, TENSOR_F32, 0, 0},  {80, 1, 2, TENSOR_F16, 1, 0},
    {80, 1, 7, TENSOR_F16, 0, 0},  {128, 2, 1, TENSOR_F16, 0, 0}, {128, 1, 7, TENSOR_F16, 1, 1},
};
#define N_COMBOS ((int)(sizeof g_combos / sizeof g_combos[0]))
#define COMBO_D128_G7 5

/* Every length as a prefill (the 1000 one only if long), as a chunk after a cached prefix and as
 * a decode step, all in one batch, plus an empty entry. */
static int mixed_defs(struct seqdef *defs, int long_prefill)
{
    int n = 0;
    for (int i = 0; i < N_LENS; i++) {
        const int L = g_lens[i];
        if (L < 1000 || long_prefill) defs[n++] = (struct seqdef){0, L};
        if (L > 1) {
            const int chunk = L >= 1000 ? 9 : 1 + L / 3;
            defs[n++] = (struct seqdef){L - chunk, chunk};
        }
        defs[n++] = (struct seqdef){L - 1, 1};
    }
    defs[n++] = (struct seqdef){5, 0};
    return n;
}

static void test_mixed(void)
{
    struct seqdef defs[3 * N_LENS + 1];
    for (int c = 0; c < N_COMBOS; c++) {
        const struct combo *cb = &g_combos[c];
        if (g_light && !cb->light) continue;
        const float mul = c % 3 == 1 || (cb->long_prefill && cb->D == 128) ? 30.0f : 1.0f;
        const int n = mixed_defs(defs, cb->long_prefill);
        struct batch b;
        batch_init(&b, cb->D, cb->n_head_kv, cb->group, cb->kvt, defs, n, mul);
        char tag[64];
        snprintf(tag, sizeof tag, "mixed x%g", (double)mul);
        run_check(&b, 1 + c % 4, c % 5 == 0, tag);
        batch_free(&b);
    }
}

/* Decode steps only, split into 1..8 parts and into more parts than blocks. */
static void test_decode_splits(void)
{
    static const int splits[] = {1, 2, 3, 5, 8, 100};
    struct seqdef defs[N_LENS];
    for (int i = 0; i < N_LENS; i++) defs[i] = (struct seqdef){g_lens[i] - 1, 1};
    for (int c = 0; c < N_COMBOS; c++) {
        const struct combo *cb = &g_combos[c];
        if (g_light && !cb->light) continue;
        const float mul = c % 2 ? 30.0f : 1.0f;
        struct batch b;
        batch_init(&b, cb->D, cb->n_head_kv, cb->group, cb->kvt, defs, N_LENS, mul);
        char tag[64];
        snprintf(tag, sizeof tag, "decode x%g", (double)mul);
        for (size_t si = 0; si < sizeof splits / sizeof splits[0]; si++)
            if ((si + (size_t)c) % 2 == 0 || si == 0 || splits[si] == 100) run_check(&b, splits[si], 0, tag);
        batch_free(&b);
    }
}

/* Odd head dims: 36 (not a multiple of 8: the tile shaders even on a CPU device) and 200, F32. */
static const struct combo g_d36 = {36, 2, 1, TENSOR_F16, 0, 0};
static void test_odd_dims(void)
{
    static const int dims[][3] = {{36, 2, 1}, {200, 1, 1}}; /* D, n_head_kv, group */
    struct seqdef defs[3 * N_LENS + 1];
    for (int i = 0; i < 2; i++) {
        const int n = mixed_defs(defs, 0);
        struct batch b;
        batch_init(&b, dims[i][0], dims[i][1], dims[i][2], i == 1 ? TENSOR_F32 : TENSOR_F16, defs, n, 1.0f);
        run_check(&b, 1 + i, 0, "odd dims");
        batch_free(&b);
    }
}

/* The device-resident API: q, both layers' pools and out in device buffers, q and out at
 * non-zero (unaligned) element offsets, one plan recorded for two layers into one batch. Layer 1
 * has the same keys and twice the values of layer 0 (exact in f16), so its reference is 2x. */
static void test_plan_record(struct vkb_fa2 *fa2, const struct combo *cb, const char *what)
{
    struct seqdef defs[3 * N_LENS + 1];
    const int n = mixed_defs(defs, 0);
    struct batch b;
    batch_init(&b, cb->D, cb->n_head_kv, cb->group, cb->kvt, defs, n, 1.0f);
    const size_t row = (size_t)b.n_head * b.D;
    size_t T = 0;
    for (int s = 0; s < b.n_seqs; s++) T += (size_t)b.def[s].n_q;
    const size_t qoff[2] = {37, 37 + T * row + 5}, ooff[2] = {11, 11 + T * row + 3};
    const size_t qn = qoff[1] + T * row + 2, on = ooff[1] + T * row + 1;
    const size_t pool_bytes = (size_t)b.n_blocks * b.block_stride;
    unsigned char *v2 = t_xmalloc(pool_bytes);
    memcpy(v2, b.v, pool_bytes);
    for (size_t i = 0; i < pool_bytes / b.esz; i++) {
        if (b.kv_type == TENSOR_F16) {
            uint16_t h;
            memcpy(&h, v2 + 2 * i, 2);
            h = cpu_f32_to_f16(2.0f * cpu_f16_to_f32(h));
            memcpy(v2 + 2 * i, &h, 2);
        } else {
            float x;
            memcpy(&x, v2 + 4 * i, 4);
            x *= 2.0f;
            memcpy(v2 + 4 * i, &x, 4);
        }
    }
    float *qh = t_xmalloc(qn * sizeof(float)), *oh = t_xmalloc(on * sizeof(float));
    fill_nan(qh, qn);
    fill_nan(oh, on);
    for (int layer = 0; layer < 2; layer++)
        for (int s = 0, t = 0; s < b.n_seqs; t += b.def[s].n_q, s++)
            memcpy(qh + qoff[layer] + (size_t)t * row, b.qv[s], (size_t)b.def[s].n_q * row * sizeof(float));
    const struct fa2_args a = batch_args(&b, 3); /* its k and v are ignored by plans */
    struct vkb_fa2_plan *plan = NULL;
    struct vkb_buffer *bq = NULL, *bo = NULL, *bk = NULL, *bv[2] = {NULL, NULL};
    attnd_status st;
    if ((st = vkb_fa2_plan_create(fa2, &plan)) || (st = vkb_buffer_create(g_dev, qn * 4, &bq)) ||
        (st = vkb_buffer_create(g_dev, on * 4, &bo)) || (st = vkb_buffer_create(g_dev, pool_bytes, &bk)) ||
        (st = vkb_buffer_create(g_dev, pool_bytes, &bv[0])) || (st = vkb_buffer_create(g_dev, pool_bytes, &bv[1])) ||
        (st = vkb_buffer_write(g_dev, bq, 0, qh, qn * 4)) || (st = vkb_buffer_write(g_dev, bo, 0, oh, on * 4)) ||
        (st = vkb_buffer_write(g_dev, bk, 0, b.k, pool_bytes)) ||
        (st = vkb_buffer_write(g_dev, bv[0], 0, b.v, pool_bytes)) ||
        (st = vkb_buffer_write(g_dev, bv[1], 0, v2, pool_bytes))) {
        T_CHECK(st == ATTND_OK, "%s: buffers: %s: %s", what, attnd_status_str(st), vkb_last_error());
        goto done;
    }
    /* a first plan of another shape, so that the second build reuses (and grows) its buffers */
    struct fa2_args a1 = a;
    a1.n_seqs = 1;
    if ((st = vkb_fa2_plan_build(plan, &a1)) || (st = vkb_fa2_plan_build(plan, &a))) {
        T_CHECK(st == ATTND_OK, "%s: plan_build: %s: %s", what, attnd_status_str(st), vkb_last_error());
        goto done;
    }
    T_CHECK(vkb_fa2_record(plan, bq, 0, bk, bv[0], bo, 0) != ATTND_OK, "%s: record outside a batch", what);
    if ((st = vkb_begin(g_dev))) {
        T_CHECK(st == ATTND_OK, "%s: vkb_begin: %s", what, vkb_last_error());
        goto done;
    }
    /* q and out too short for the offsets: refused before anything is recorded */
    T_CHECK(vkb_fa2_record(plan, bq, qn, bk, bv[0], bo, 0) == ATTND_ERR_INVALID, "%s: q_off past q", what);
    T_CHECK(vkb_fa2_record(plan, bq, 0, bk, bv[0], bo, on) == ATTND_ERR_INVALID, "%s: out_off past out", what);
    vkb_barrier(g_dev);
    st = vkb_fa2_record(plan, bq, qoff[0], bk, bv[0], bo, ooff[0]);
    if (!st) st = vkb_fa2_record(plan, bq, qoff[1], bk, bv[1], bo, ooff[1]);
    vkb_barrier(g_dev);
    {
        attnd_status st2 = vkb_submit_wait(g_dev, NULL);
        if (!st) st = st2;
    }
    if (st || (st = vkb_buffer_read(g_dev, bo, 0, oh, on * 4))) {
        T_CHECK(st == ATTND_OK, "%s: record/submit: %s: %s", what, attnd_status_str(st), vkb_last_error());
        goto done;
    }
    /* untouched around and between the two layers' rows */
    T_CHECK(isnan(oh[0]) && isnan(oh[ooff[0] - 1]) && isnan(oh[ooff[0] + T * row]) && isnan(oh[ooff[1] - 1]) &&
                isnan(oh[on - 1]),
            "%s: writes outside the out rows", what);
    {
        float **outs = t_xmalloc((size_t)b.n_seqs * sizeof *outs);
        char tag[96];
        for (int layer = 0; layer < 2; layer++) {
            for (int s = 0, t = 0; s < b.n_seqs; t += b.def[s].n_q, s++) outs[s] = oh + ooff[layer] + (size_t)t * row;
            if (layer == 1)
                for (int s = 0; s < b.n_seqs; s++)
                    for (size_t i = 0; i < (size_t)b.def[s].n_q * row; i++) b.ref[s][i] *= 2.0;
            snprintf(tag, sizeof tag, "%s plan+record layer %d", what, layer);
            check_out(&b, outs, tag);
        }
        free(outs);
    }
done:
    vkb_fa2_plan_destroy(plan);
    vkb_buffer_destroy(g_dev, bq);
    vkb_buffer_destroy(g_dev, bo);
    vkb_buffer_destroy(g_dev, bk);
    vkb_buffer_destroy(g_dev, bv[0]);
    vkb_buffer_destroy(g_dev, bv[1]);
    free(qh);
    free(oh);
    free(v2);
    batch_free(&b);
}

/* Bad arguments are statuses, not crashes. */
static void test_bad_args(void)
{
    int32_t bt[1] = {5};
    float q[64] = {0}, o[64];
    uint16_t pool[16 * 64] = {0};
    struct fa2_seq s = {.q = q, .out = o, .n_q = 1, .pos0 = 0, .block_table = bt};
    struct fa2_args a = {.n_head = 1, .n_head_kv = 1, .head_dim = 64, .kv_type = TENSOR_F16, .k = pool, .v = pool,
                         .n_blocks = 1, .scale = 1, .seqs = &s, .n_seqs = 1, .n_split = 1};
    T_CHECK(vkb_fa2_attend(g_fa2, &a, NULL) == ATTND_ERR_INVALID, "block id outside the pool");
    bt[0] = 0;
    a.n_head = 3;
    a.n_head_kv = 2;
    T_CHECK(vkb_fa2_attend(g_fa2, &a, NULL) == ATTND_ERR_INVALID, "heads not a multiple");
    a.n_head = 1;
    a.n_head_kv = 1;
    a.head_dim = 300;
    T_CHECK(vkb_fa2_attend(g_fa2, &a, NULL) == ATTND_ERR_INVALID, "head_dim too large");
    a.head_dim = 64;
    T_CHECK(vkb_fa2_attend(g_fa2, &a, NULL) == ATTND_OK, "valid call: %s", vkb_last_error());
}

static int g_is_cpu; /* the device is a CPU (lavapipe): the LP_NATIVE_VECTOR_WIDTH pass applies */

static int run_all(void)
{
    /* validation on, unless ATTND_VK_VALIDATION=0 (bench/gpu-check.sh on a machine without the layer) */
    const char *ve = getenv("ATTND_VK_VALIDATION");
    struct vkb_device_opts opts = {
        .device_index = -1, .validation = ve && strcmp(ve, "0") == 0 ? 0 : 1, .timestamps = 1};
    if (!opts.validation) fprintf(stderr, "test_vk_fa2: validation layer OFF (ATTND_VK_VALIDATION=0)\n");
    attnd_status st = vkb_device_create(&opts, &g_dev);
    if (st != ATTND_OK) {
        fprintf(stderr,
                "test_vk_fa2: FAIL: no usable Vulkan device with validation (%s: %s). lavapipe comes with "
                "mesa-vulkan-drivers and the layer with vulkan-validationlayers (deploy/install-deps.sh).\n",
                attnd_status_str(st), vkb_last_error());
        return 1;
    }
    const struct vkb_limits *l = vkb_device_limits(g_dev);
    g_is_cpu = l->is_cpu;
    fprintf(stderr, "test_vk_fa2: %s, subgroup %u, shared %u B, storage range %u B, f16 storage %d, LP_NATIVE_VECTOR_WIDTH=%s\n",
            l->name, l->subgroup_size, l->max_shared_bytes, l->max_storage_range, l->has_f16_storage,
            getenv("LP_NATIVE_VECTOR_WIDTH") ? getenv("LP_NATIVE_VECTOR_WIDTH") : "(default)");
    if (vkb_fa2_create(g_dev, &g_fa2) != ATTND_OK) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    test_bad_args();
    test_mixed();
    test_decode_splits();
    test_plan_record(g_fa2, &g_combos[COMBO_D128_G7], "D128 G7");
    if (!g_light) {
        test_odd_dims();
        test_plan_record(g_fa2, &g_d36, "D36 (tile shaders)");
    }
    vkb_fa2_destroy(g_fa2);
    const unsigned verr = vkb_validation_errors(g_dev);
    T_CHECK(verr == 0, "%u Vulkan validation errors (see the log above)", verr);
    vkb_device_destroy(g_dev);
    return t_finish("test_vk_fa2");
}

int main(int argc, char **argv)
{
    (void)argc;
    if (t_vk_no_leak_check(argv)) return 1;
    const int child = getenv("LP_NATIVE_VECTOR_WIDTH") != NULL;
    g_light = child;
    int rc = run_all();
    if (child || !g_is_cpu) return rc;
    /* second pass: lavapipe with 128-bit vectors (subgroup size 4 instead of 8), and the
     * storage-buffer lanes shader instead of the texel one */
    static const char *const env[] = {"LP_NATIVE_VECTOR_WIDTH", "128", "ATTND_VK_FA2_NO_TEXEL", "1", NULL};
    if (t_rerun_with_env(argv, env, "test_vk_fa2: the LP_NATIVE_VECTOR_WIDTH=128 pass")) return 1;
    return rc;
}
