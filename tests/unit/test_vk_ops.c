/* test_vk_ops.c - the forward-pass compute shaders (kernels/vulkan/vk_ops.h) against float64
 * references computed here from the same inputs (weights dequantised with cpu_dequant_row).
 *
 * Covered: get_rows for every weight type (rows of 32, 96, 4864 and, for plain types, 37
 * elements; padded rows; odd byte offsets for Q8_0/Q4_0); rmsnorm (d 7, 896, 4864; in place);
 * matmul for every weight type with n_in 32, 96, 896, 4864 (and 37, 100 for plain types: a
 * partial last chunk), odd n_out, n_tok 1, 3, 8 (GPU: matrix-vector shader) and 33, 100 (GPU: tiled
 * shader), bias on and off, non-zero offsets for every operand (on a CPU device: texel reads, and
 * a few cases with ATTND_VK_OPS_NO_TEXEL=1 for the storage-read variant); rope, both pair layouts, with
 * n_rot = head_dim and n_rot < head_dim; add; swiglu; kv_write into shuffled slots of F16 and
 * F32 pools with a padded block stride (F16 rounding checked bit for bit, ties and subnormals
 * included); a chain of ops in one batch (barriers); bad arguments. Every output buffer starts
 * filled with a sentinel, and every element outside the op's output must keep it.
 *
 * Tolerances: get_rows, add, kv_write exact; rmsnorm |err| <= 1e-5 |ref|; rope |err| <= 1e-6
 * (|x0| + |x1|); swiglu |err| <= 1e-5 |ref| + 1e-7 |up|; matmul |err| <= 1e-4 (sum |w x| + |bias|)
 * (f32 accumulation of up to 4864 terms).
 *
 * Prints (not checked) matmul times for the shapes of perf_matmul(). On a CPU device (lavapipe)
 * every matmul goes through op_matmul_lanes.comp (the GPU shaders op_matvec/op_matmul.comp only
 * for bindings under 16 bytes, see test_matmul) in the first pass; the second pass sets
 * ATTND_VK_OPS_GPU_SHADERS=1 so the GPU matrix shaders are checked on lavapipe too.
 *
 * Runs with the validation layer on and requires zero validation errors. Runs once with
 * lavapipe's default settings, then re-executes itself with LP_NATIVE_VECTOR_WIDTH=128
 * (subgroup size 4 instead of 8) on a subset: the subgroup-reducing shaders (matrix-vector,
 * rmsnorm) and Q8_0 (all shaders are compiled again for it, which dominates the time). No Vulkan
 * device is a FAIL: lavapipe (mesa-vulkan-drivers) is a build dependency. Under ASan the test
 * re-executes itself with detect_leaks=0 (a leak inside the driver stack). */
#include "kernels/vulkan/vk_ops.h"

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/vulkan/vk_device.h"

#include "tests/unit/testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------ */

static struct vkb_device *g_dev;
static struct vkb_ops *g_ops;
static int g_light; /* second pass: a subset (every pipeline is compiled again for it) */

#define SENTINEL 12345.0f


static uint64_t g_rng;
static void seed(uint64_t s) { g_rng = s * 0x9e3779b97f4a7c15ull + 1; }
static uint32_t rnd_u32(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}
static float rnd_f(void) { return (float)((double)rnd_u32() / 4294967296.0 * 2.0 - 1.0); } /* [-1, 1) */

static void fill_rnd(float *p, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) p[i] = rnd_f() * scale;
}
static void fill_val(float *p, size_t n, float v)
{
    for (size_t i = 0; i < n; i++) p[i] = v;
}

static const char *tname(enum tensor_type t) { return tensor_type_name((uint32_t)t); }

/* A device buffer of bytes bytes (at least) holding data (may be NULL: left as created). */
static struct vkb_buffer *mkbuf(const void *data, size_t bytes)
{
    struct vkb_buffer *b = NULL;
    attnd_status st = vkb_buffer_create(g_dev, bytes, &b);
    if (st == ATTND_OK && data) st = vkb_buffer_write(g_dev, b, 0, data, bytes);
    if (st != ATTND_OK) {
        fprintf(stderr, "test_vk_ops: buffer of %zu bytes: %s: %s\n", bytes, attnd_status_str(st), vkb_last_error());
        exit(1);
    }
    return b;
}

static void rdbuf(struct vkb_buffer *b, void *dst, size_t bytes)
{
    attnd_status st = vkb_buffer_read(g_dev, b, 0, dst, bytes);
    if (st != ATTND_OK) {
        fprintf(stderr, "test_vk_ops: read: %s: %s\n", attnd_status_str(st), vkb_last_error());
        exit(1);
    }
}

static void rmbuf(struct vkb_buffer *b) { vkb_buffer_destroy(g_dev, b); }

/* Ends the batch opened by vkb_begin() (always: the command buffer must leave the recording
 * state) and checks both the recording status st and the submission. Returns 1 on success. */
static int finish(attnd_status st, double *ms, const char *what)
{
    attnd_status st2 = vkb_submit_wait(g_dev, ms);
    T_CHECK(st == ATTND_OK && st2 == ATTND_OK, "%s: %s / %s: %s", what, attnd_status_str(st), attnd_status_str(st2),
            vkb_last_error());
    return st == ATTND_OK && st2 == ATTND_OK;
}

static void begin(void)
{
    attnd_status st = vkb_begin(g_dev);
    if (st != ATTND_OK) {
        fprintf(stderr, "test_vk_ops: vkb_begin: %s: %s\n", attnd_status_str(st), vkb_last_error());
        exit(1);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Elements of out outside [lo, hi) must still be SENTINEL; returns how many are not. */
static size_t changed_outside(const float *out, size_t n, size_t lo, size_t hi)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if ((i < lo || i >= hi) && memcmp(&out[i], &(float){SENTINEL}, sizeof(float))) bad++;
    return bad;
}

/* A weight matrix in host memory: n_rows rows of n elements of type t, row r at byte off + r *
 * row_bytes, padding bytes 0xA5 (which decode to large values, so reading them would show), and
 * its dequantised copy (n_rows, n). */
struct wmat {
    enum tensor_type t;
    uint32_t n, n_rows;
    size_t off, row_bytes, bytes;
    unsigned char *data;
    float *deq;
};

static size_t type_row_bytes(enum tensor_type t, uint32_t n)
{
    uint64_t b = 0;
    if (tensor_nbytes((uint32_t)t, n, &b)) {
        fprintf(stderr, "bad row\n");
        exit(1);
    }
    return (size_t)b;
}

static void wmat_init(struct wmat *m, enum tensor_type t, uint32_t n, uint32_t n_rows, size_t off, size_t row_pad,
                      float scale)
{
    m->t = t;
    m->n = n;
    m->n_rows = n_rows;
    m->off = off;
    m->row_bytes = type_row_bytes(t, n) + row_pad;
    m->bytes = ((off + (size_t)n_rows * m->row_bytes + 3) & ~(size_t)3) + 8;
    m->data = t_xmalloc(m->bytes);
    memset(m->data, 0xA5, m->bytes);
    m->deq = t_xmalloc((size_t)n_rows * n * sizeof(float));
    float *row = t_xmalloc((size_t)n * sizeof(float));
    for (uint32_t r = 0; r < n_rows; r++) {
        unsigned char *p = m->data + off + (size_t)r * m->row_bytes;
        fill_rnd(row, n, scale);
        switch (t) {
        case TENSOR_F32: memcpy(p, row, (size_t)n * 4); break;
        case TENSOR_F16:
            for (uint32_t i = 0; i < n; i++) {
                uint16_t h = cpu_f32_to_f16(row[i]);
                memcpy(p + 2 * i, &h, 2);
            }
            break;
        case TENSOR_BF16:
            for (uint32_t i = 0; i < n; i++) {
                uint16_t h = cpu_f32_to_bf16(row[i]);
                memcpy(p + 2 * i, &h, 2);
            }
            break;
        case TENSOR_Q8_0: cpu_quantize_row_q8_0(row, p, n); break;
        case TENSOR_Q4_0: cpu_quantize_row_q4_0(row, p, n); break;
        default: fprintf(stderr, "bad type\n"); exit(1);
        }
        cpu_dequant_row(t, p, m->deq + (size_t)r * n, n);
    }
    free(row);
}

static void wmat_free(struct wmat *m)
{
    free(m->data);
    free(m->deq);
}

static const enum tensor_type g_types[] = {TENSOR_F32, TENSOR_F16, TENSOR_BF16, TENSOR_Q8_0, TENSOR_Q4_0};
#define N_TYPES 5

/* Byte offset of a weight operand for a type: the smallest misalignment its shader allows. */
static size_t odd_off(enum tensor_type t) { return t == TENSOR_F32 ? 12 : t == TENSOR_F16 || t == TENSOR_BF16 ? 6 : 7; }

/* ------------------------------------------------------------------------------------------
 * get_rows
 * ------------------------------------------------------------------------------------------ */

static void check_get_rows(enum tensor_type t, uint32_t d, size_t off, size_t row_pad)
{
    const uint32_t n_table = 9, n = 6, idx_off = 3, dst_off = 5;
    struct wmat m;
    seed(100 + t + d);
    wmat_init(&m, t, d, n_table, off, row_pad, 2.0f);
    int32_t idx[3 + 6] = {-1, -1, -1, 4, 0, 8, 4, 1, 7};
    const size_t dst_n = dst_off + (size_t)n * d + 3;
    float *out = t_xmalloc(dst_n * sizeof(float));
    fill_val(out, dst_n, SENTINEL);
    struct vkb_buffer *bw = mkbuf(m.data, m.bytes), *bi = mkbuf(idx, sizeof idx), *bd = mkbuf(out, dst_n * 4);
    char what[96];
    snprintf(what, sizeof what, "get_rows %s d %u off %zu pad %zu", tname(t), d, off, row_pad);
    begin();
    attnd_status st = vkb_op_get_rows(g_ops, t, bw, off, m.row_bytes, bi, idx_off, n, d, bd, dst_off);
    if (finish(st, NULL, what)) {
        rdbuf(bd, out, dst_n * 4);
        size_t bad = 0;
        for (uint32_t i = 0; i < n; i++)
            for (uint32_t e = 0; e < d; e++) {
                const float ref = m.deq[(size_t)idx[idx_off + i] * d + e], got = out[dst_off + (size_t)i * d + e];
                if (memcmp(&ref, &got, sizeof ref) && bad++ < 3)
                    fprintf(stderr, "  %s: row %u elem %u: %g, want %g\n", what, i, e, (double)got, (double)ref);
            }
        T_CHECK(bad == 0, "%s: %zu elements differ", what, bad);
        const size_t outside = changed_outside(out, dst_n, dst_off, dst_off + (size_t)n * d);
        T_CHECK(outside == 0, "%s: %zu elements outside the output changed", what, outside);
    }
    rmbuf(bw);
    rmbuf(bi);
    rmbuf(bd);
    free(out);
    wmat_free(&m);
}

static void test_get_rows(void)
{
    for (int ti = 0; ti < N_TYPES; ti++) {
        const enum tensor_type t = g_types[ti];
        if (g_light && t != TENSOR_Q8_0) continue;
        check_get_rows(t, 32, 0, 0);
        check_get_rows(t, 96, odd_off(t), t == TENSOR_F32 ? 8 : 6);
        if (t == TENSOR_Q8_0 || t == TENSOR_Q4_0) check_get_rows(t, 4864, 1, 3);
        if (t == TENSOR_F32 || t == TENSOR_F16 || t == TENSOR_BF16) check_get_rows(t, 37, odd_off(t), 4);
    }
}

/* ------------------------------------------------------------------------------------------
 * rmsnorm
 * ------------------------------------------------------------------------------------------ */

static void check_rmsnorm(uint32_t n_rows, uint32_t d, int in_place)
{
    const size_t x_off = 3, w_off = 5, o_off = in_place ? x_off : 7;
    const size_t xn = x_off + (size_t)n_rows * d + 2, wn = w_off + d, on = o_off + (size_t)n_rows * d + 2;
    const float eps = 1e-6f;
    float *x = t_xmalloc(xn * 4), *w = t_xmalloc(wn * 4), *out = t_xmalloc((in_place ? xn : on) * 4);
    seed(200 + d);
    fill_val(x, xn, SENTINEL);
    fill_rnd(x + x_off, (size_t)n_rows * d, 3.0f);
    x[x_off] = 1e-3f;
    fill_rnd(w, wn, 1.5f);
    if (!in_place) fill_val(out, on, SENTINEL);
    struct vkb_buffer *bx = mkbuf(x, xn * 4), *bw = mkbuf(w, wn * 4), *bo = in_place ? bx : mkbuf(out, on * 4);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm %u x %u%s", n_rows, d, in_place ? " in place" : "");
    begin();
    attnd_status st = vkb_op_rmsnorm(g_ops, bx, x_off, bw, w_off, bo, o_off, n_rows, d, eps);
    if (finish(st, NULL, what)) {
        const size_t total = in_place ? xn : on;
        rdbuf(bo, out, total * 4);
        size_t bad = 0;
        double worst = 0;
        for (uint32_t r = 0; r < n_rows; r++) {
            const float *xr = x + x_off + (size_t)r * d;
            double ss = 0;
            for (uint32_t i = 0; i < d; i++) ss += (double)xr[i] * xr[i];
            const double scale = 1.0 / sqrt(ss / d + (double)eps);
            for (uint32_t i = 0; i < d; i++) {
                const double ref = (double)xr[i] * scale * w[w_off + i], got = out[o_off + (size_t)r * d + i];
                const double err = fabs(got - ref);
                if (ref != 0 && err / fabs(ref) > worst) worst = err / fabs(ref);
                if (!(err <= 1e-5 * fabs(ref)) && bad++ < 3)
                    fprintf(stderr, "  %s: row %u elem %u: %.9g, want %.9g\n", what, r, i, got, ref);
            }
        }
        T_CHECK(bad == 0, "%s: %zu elements off (worst rel err %.3g)", what, bad, worst);
        const size_t outside = changed_outside(out, total, o_off, o_off + (size_t)n_rows * d);
        T_CHECK(outside == 0, "%s: %zu elements outside the output changed", what, outside);
    }
    rmbuf(bx);
    rmbuf(bw);
    if (!in_place) rmbuf(bo);
    free(x);
    free(w);
    free(out);
}

static void test_rmsnorm(void)
{
    check_rmsnorm(3, 7, 0);
    check_rmsnorm(2, 896, 1);
    check_rmsnorm(5, 4864, 0);
    if (!g_light) check_rmsnorm(1, 8192, 1);
}

/* ------------------------------------------------------------------------------------------
 * matmul
 * ------------------------------------------------------------------------------------------ */

/* Checks rows r % row_step == 0 of y against the float64 reference. Returns the bad count. */
static size_t matmul_compare(const struct wmat *m, const float *x, const float *bias, const float *y, size_t y_off,
                             uint32_t n_tok, uint32_t row_step, const char *what)
{
    size_t bad = 0;
    double worst = 0;
    const uint32_t n_in = m->n, n_out = m->n_rows;
    for (uint32_t t = 0; t < n_tok; t++)
        for (uint32_t r = 0; r < n_out; r += row_step) {
            const float *wr = m->deq + (size_t)r * n_in, *xr = x + (size_t)t * n_in;
            double s = 0, sa = 0;
            for (uint32_t i = 0; i < n_in; i++) {
                const double p = (double)wr[i] * xr[i];
                s += p;
                sa += fabs(p);
            }
            if (bias) {
                s += bias[r];
                sa += fabs(bias[r]);
            }
            const double got = y[y_off + (size_t)t * n_out + r], err = fabs(got - s);
            if (sa > 0 && err / sa > worst) worst = err / sa;
            if (!(err <= 1e-4 * sa) && bad++ < 3)
                fprintf(stderr, "  %s: tok %u row %u: %.9g, want %.9g (sum |w x| %.3g)\n", what, t, r, got, s, sa);
        }
    T_CHECK(bad == 0, "%s: %zu outputs off (worst err / sum|w x| %.3g)", what, bad, worst);
    return bad;
}

static void check_matmul(enum tensor_type t, uint32_t n_in, uint32_t n_out, uint32_t n_tok, int with_bias, int offsets)
{
    const size_t w_off = offsets ? odd_off(t) : 0, row_pad = offsets ? (t == TENSOR_F32 ? 4 : 2) : 0;
    const size_t x_off = offsets ? 5 : 0, b_off = offsets ? 3 : 0, y_off = offsets ? 9 : 0;
    struct wmat m;
    seed(1000 + 7 * t + n_in + 3 * n_out + 11 * n_tok);
    wmat_init(&m, t, n_in, n_out, w_off, row_pad, 1.0f);
    const size_t xn = x_off + (size_t)n_tok * n_in, yn = y_off + (size_t)n_tok * n_out + 5, bn = b_off + n_out;
    float *x = t_xmalloc(xn * 4), *y = t_xmalloc(yn * 4), *bias = t_xmalloc(bn * 4);
    fill_rnd(x, xn, 2.0f);
    fill_rnd(bias, bn, 1.0f);
    fill_val(y, yn, SENTINEL);
    struct vkb_buffer *bw = mkbuf(m.data, m.bytes), *bx = mkbuf(x, xn * 4), *bb = mkbuf(bias, bn * 4),
                      *by = mkbuf(y, yn * 4);
    char what[128];
    snprintf(what, sizeof what, "matmul %s n_in %u n_out %u n_tok %u%s%s", tname(t), n_in, n_out, n_tok,
             with_bias ? " bias" : "", offsets ? " offsets" : "");
    begin();
    attnd_status st = vkb_op_matmul(g_ops, t, bw, w_off, m.row_bytes, n_in, n_out, bx, x_off, n_tok,
                                    with_bias ? bb : NULL, b_off, by, y_off);
    if (finish(st, NULL, what)) {
        rdbuf(by, y, yn * 4);
        matmul_compare(&m, x + x_off, with_bias ? bias + b_off : NULL, y, y_off, n_tok, 1, what);
        const size_t outside = changed_outside(y, yn, y_off, y_off + (size_t)n_tok * n_out);
        T_CHECK(outside == 0, "%s: %zu elements outside the output changed", what, outside);
    }
    rmbuf(bw);
    rmbuf(bx);
    rmbuf(bb);
    rmbuf(by);
    free(x);
    free(y);
    free(bias);
    wmat_free(&m);
}

static void test_matmul(void)
{
    /* n_in, n_out, n_tok, bias, offsets */
    static const uint32_t cases[][5] = {
        {32, 7, 1, 1, 0},    {96, 67, 3, 0, 1},  {896, 131, 8, 1, 1}, {4864, 5, 1, 0, 1},
        {896, 67, 33, 1, 1}, {96, 130, 100, 0, 0}, {4864, 33, 100, 1, 1},
    };
    for (int ti = 0; ti < N_TYPES; ti++) {
        const enum tensor_type t = g_types[ti];
        if (g_light && t != TENSOR_Q8_0 && t != TENSOR_F16) continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            if (g_light && t == TENSOR_F16 && cases[c][2] > 8) continue; /* time (no subgroup ops involved) */
            if ((t == TENSOR_F32 || t == TENSOR_BF16) && cases[c][0] == 4864 && cases[c][2] > 8) continue; /* time */
            check_matmul(t, cases[c][0], cases[c][1], cases[c][2], (int)cases[c][3], (int)cases[c][4]);
        }
        if (t == TENSOR_F32 || t == TENSOR_F16 || t == TENSOR_BF16) { /* a partial last chunk of 8 */
            check_matmul(t, 37, 9, 1, 1, 1);
            check_matmul(t, 37, 9, 4, 0, 0);
            if (!g_light) check_matmul(t, 100, 70, 33, 1, 1);
        }
    }
    if (!g_light) { /* bindings under 16 bytes: on a CPU device the GPU shaders (the lanes one reads uvec4) */
        check_matmul(TENSOR_F32, 3, 5, 1, 1, 0); /* x: 12 bytes */
        check_matmul(TENSOR_F16, 2, 1, 9, 1, 0); /* w: 12 bytes with wmat's padding */
    }
    if (!g_light) { /* CPU device: the lanes shader's storage reads, its variant for buffers over a
                     * texel view's size (too large to test here) */
        setenv("ATTND_VK_OPS_NO_TEXEL", "1", 1);
        check_matmul(TENSOR_Q8_0, 4864, 5, 1, 0, 1);
        check_matmul(TENSOR_Q8_0, 896, 67, 33, 1, 1);
        check_matmul(TENSOR_F32, 37, 9, 1, 1, 1);
        check_matmul(TENSOR_F16, 100, 70, 33, 1, 1);
        unsetenv("ATTND_VK_OPS_NO_TEXEL");
    }
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Prints (not a check) the median time and GFLOP/s of the matmul shapes the forward pass spends
 * its time in: the output layer of the golden tests' tiny models (n_in 64, a 151936-token
 * vocabulary), a Qwen2-0.5B FFN matrix at decode and prefill, a small prefill; checks every
 * 31st row of each. */
static void perf_matmul(void)
{
    static const struct {
        enum tensor_type t;
        uint32_t n_in, n_out, n_tok;
        int reps; /* timed runs after one warm-up */
    } cases[] = {
        {TENSOR_F32, 64, 151936, 1, 5},  {TENSOR_Q8_0, 64, 151936, 1, 5}, {TENSOR_Q8_0, 896, 4864, 1, 7},
        {TENSOR_Q8_0, 896, 4864, 128, 3}, {TENSOR_F32, 64, 160, 20, 7},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const enum tensor_type t = cases[c].t;
        const uint32_t n_in = cases[c].n_in, n_out = cases[c].n_out, nt = cases[c].n_tok;
        struct wmat m;
        seed(77 + c);
        wmat_init(&m, t, n_in, n_out, 0, 0, 1.0f);
        float *x = t_xmalloc((size_t)nt * n_in * 4), *y = t_xmalloc((size_t)nt * n_out * 4);
        fill_rnd(x, (size_t)nt * n_in, 1.0f);
        struct vkb_buffer *bw = mkbuf(m.data, m.bytes), *bx = mkbuf(x, (size_t)nt * n_in * 4),
                          *by = mkbuf(NULL, (size_t)nt * n_out * 4);
        double ms[16];
        int n = 0, ok = 1;
        for (int rep = 0; rep <= cases[c].reps && ok; rep++) { /* the first run is a warm-up */
            double gpu = -1;
            const double t0 = now_s();
            begin();
            attnd_status st = vkb_op_matmul(g_ops, t, bw, 0, m.row_bytes, n_in, n_out, bx, 0, nt, NULL, 0, by, 0);
            ok = finish(st, &gpu, "perf matmul");
            const double wall = (now_s() - t0) * 1e3;
            if (rep > 0) ms[n++] = gpu > 0 ? gpu : wall;
        }
        if (ok) {
            rdbuf(by, y, (size_t)nt * n_out * 4);
            matmul_compare(&m, x, NULL, y, 0, nt, 31, "perf matmul");
            qsort(ms, (size_t)n, sizeof ms[0], cmp_double);
            const double med = ms[n / 2], flop = 2.0 * n_in * n_out * nt;
            fprintf(stderr, "test_vk_ops: perf: matmul %-4s n_in %3u n_out %6u n_tok %3u: median %8.3f ms (min %8.3f), %.2f GFLOP/s\n",
                    tname(t), n_in, n_out, nt, med, ms[0], flop / (med * 1e-3) * 1e-9);
        }
        rmbuf(bw);
        rmbuf(bx);
        rmbuf(by);
        free(x);
        free(y);
        wmat_free(&m);
    }
}

/* ------------------------------------------------------------------------------------------
 * rope
 * ------------------------------------------------------------------------------------------ */

static void check_rope(uint32_t n_tok, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, int neox)
{
    const size_t x_off = 7, cs_off = 5, row = (size_t)n_heads * head_dim;
    const size_t xn = x_off + n_tok * row + 3, csn = cs_off + (size_t)n_tok * n_rot;
    const uint32_t half = n_rot / 2;
    float *x = t_xmalloc(xn * 4), *cs = t_xmalloc(csn * 4), *out = t_xmalloc(xn * 4);
    seed(300 + head_dim + n_rot + (uint32_t)neox);
    fill_val(x, xn, SENTINEL);
    fill_rnd(x + x_off, n_tok * row, 4.0f);
    fill_val(cs, csn, NAN);
    for (uint32_t t = 0; t < n_tok; t++) {
        const int pos = (int)(rnd_u32() % 5000);
        for (uint32_t i = 0; i < half; i++) {
            const double th = pos * pow(10000.0, -2.0 * i / n_rot);
            cs[cs_off + (t * half + i) * 2] = (float)cos(th);
            cs[cs_off + (t * half + i) * 2 + 1] = (float)sin(th);
        }
    }
    struct vkb_buffer *bx = mkbuf(x, xn * 4), *bc = mkbuf(cs, csn * 4);
    char what[96];
    snprintf(what, sizeof what, "rope %s n_tok %u heads %u head_dim %u n_rot %u", neox ? "neox" : "adjacent", n_tok,
             n_heads, head_dim, n_rot);
    begin();
    attnd_status st = vkb_op_rope(g_ops, bx, x_off, bc, cs_off, n_tok, n_heads, head_dim, n_rot, neox);
    if (finish(st, NULL, what)) {
        rdbuf(bx, out, xn * 4);
        size_t bad = 0;
        for (uint32_t t = 0; t < n_tok; t++)
            for (uint32_t h = 0; h < n_heads; h++) {
                const size_t base = x_off + t * row + (size_t)h * head_dim;
                for (uint32_t i = 0; i < half; i++) {
                    const uint32_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                    const double c = cs[cs_off + (t * half + i) * 2], s = cs[cs_off + (t * half + i) * 2 + 1];
                    const double x0 = x[base + a], x1 = x[base + b];
                    const double ra = x0 * c - x1 * s, rb = x0 * s + x1 * c, tol = 1e-6 * (fabs(x0) + fabs(x1));
                    if ((!(fabs(out[base + a] - ra) <= tol) || !(fabs(out[base + b] - rb) <= tol)) && bad++ < 3)
                        fprintf(stderr, "  %s: tok %u head %u pair %u: (%g, %g), want (%g, %g)\n", what, t, h, i,
                                (double)out[base + a], (double)out[base + b], ra, rb);
                }
                for (uint32_t e = n_rot; e < head_dim; e++)
                    if (memcmp(&out[base + e], &x[base + e], 4) && bad++ < 3)
                        fprintf(stderr, "  %s: tok %u head %u dim %u (not rotated) changed\n", what, t, h, e);
            }
        T_CHECK(bad == 0, "%s: %zu values off", what, bad);
        const size_t outside = changed_outside(out, xn, x_off, x_off + n_tok * row);
        T_CHECK(outside == 0, "%s: %zu elements outside x changed", what, outside);
    }
    rmbuf(bx);
    rmbuf(bc);
    free(x);
    free(cs);
    free(out);
}

static void test_rope(void)
{
    for (int neox = 0; neox <= 1; neox++) {
        check_rope(5, 3, 64, 64, neox);
        check_rope(3, 2, 128, 32, neox);
        if (!g_light) check_rope(17, 14, 64, 64, neox);
    }
}

/* ------------------------------------------------------------------------------------------
 * add, swiglu
 * ------------------------------------------------------------------------------------------ */

static void check_binary(int swiglu, uint32_t n)
{
    const size_t a_off = 3, b_off = 6, an = a_off + n + 5, bn = b_off + n;
    float *a = t_xmalloc(an * 4), *b = t_xmalloc(bn * 4), *out = t_xmalloc(an * 4);
    seed(400 + n + (uint32_t)swiglu);
    fill_val(a, an, SENTINEL);
    fill_rnd(a + a_off, n, 10.0f);
    fill_rnd(b, bn, 3.0f);
    if (swiglu && n > 4) {
        a[a_off] = -100.0f; /* exp(100): silu -> -0 */
        a[a_off + 1] = 90.0f;
        a[a_off + 2] = 0.0f;
    }
    struct vkb_buffer *ba = mkbuf(a, an * 4), *bb = mkbuf(b, bn * 4);
    char what[64];
    snprintf(what, sizeof what, "%s n %u", swiglu ? "swiglu" : "add", n);
    begin();
    attnd_status st = swiglu ? vkb_op_swiglu(g_ops, ba, a_off, bb, b_off, n) : vkb_op_add(g_ops, ba, a_off, bb, b_off, n);
    if (finish(st, NULL, what)) {
        rdbuf(ba, out, an * 4);
        size_t bad = 0;
        for (uint32_t i = 0; i < n; i++) {
            const float g = a[a_off + i], u = b[b_off + i], got = out[a_off + i];
            int ok;
            double ref;
            if (swiglu) {
                ref = (double)g / (1.0 + exp(-(double)g)) * u;
                ok = fabs(got - ref) <= 1e-5 * fabs(ref) + 1e-7 * fabs(u);
            } else {
                const float r = g + u;
                ref = r;
                ok = !memcmp(&r, &got, 4);
            }
            if (!ok && bad++ < 3) fprintf(stderr, "  %s: elem %u: %.9g, want %.9g\n", what, i, (double)got, ref);
        }
        T_CHECK(bad == 0, "%s: %zu values off", what, bad);
        const size_t outside = changed_outside(out, an, a_off, a_off + n);
        T_CHECK(outside == 0, "%s: %zu elements outside changed", what, outside);
    }
    rmbuf(ba);
    rmbuf(bb);
    free(a);
    free(b);
    free(out);
}

static void test_binary(void)
{
    static const uint32_t ns[] = {1, 3, 1000, 4099, 300001};
    for (int sw = 0; sw <= 1; sw++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            if (!g_light || i == 3) check_binary(sw, ns[i]);
}

/* ------------------------------------------------------------------------------------------
 * kv_write
 * ------------------------------------------------------------------------------------------ */

static void check_kv_write(int f16, uint32_t n_tok, uint32_t n_head_kv, uint32_t head_dim, uint32_t pad)
{
    const uint32_t n_blocks = 4, block_stride = n_head_kv * 16 * head_dim + pad;
    const size_t esz = f16 ? 2 : 4, pool_bytes = (size_t)n_blocks * block_stride * esz;
    const size_t src_off = 3, slot_off = 2, row = (size_t)n_head_kv * head_dim;
    const size_t srcn = src_off + n_tok * row;
    float *src = t_xmalloc(srcn * 4);
    int32_t *slots = t_xmalloc((slot_off + n_tok) * 4);
    unsigned char *pool = t_xmalloc(pool_bytes), *want = t_xmalloc(pool_bytes), *got = t_xmalloc(pool_bytes);
    seed(500 + (uint32_t)f16 + head_dim);
    fill_rnd(src, srcn, 8.0f);
    /* f16 rounding corner cases: ties (to even), a subnormal, overflow, tiny */
    static const float special[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -0x1.8p-20f, 3e-8f, 70000.0f, 65519.0f, 1e-30f, -2.5f};
    for (size_t i = 0; i < sizeof special / sizeof special[0] && i < n_tok * row; i++) src[src_off + i] = special[i];
    /* a shuffle of the pool's slots; the first n_tok are used */
    int32_t perm[64];
    for (int i = 0; i < 64; i++) perm[i] = i;
    for (int i = 63; i > 0; i--) {
        const int j = (int)(rnd_u32() % (uint32_t)(i + 1));
        const int32_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    slots[0] = slots[1] = 999;
    for (uint32_t t = 0; t < n_tok; t++) slots[slot_off + t] = perm[t];
    for (size_t i = 0; i < pool_bytes; i++) pool[i] = (unsigned char)rnd_u32();
    memcpy(want, pool, pool_bytes);
    for (uint32_t t = 0; t < n_tok; t++) {
        const uint32_t s = (uint32_t)slots[slot_off + t];
        for (uint32_t h = 0; h < n_head_kv; h++)
            for (uint32_t e = 0; e < head_dim; e++) {
                const size_t el = (size_t)(s / 16) * block_stride + (h * 16 + s % 16) * (size_t)head_dim + e;
                const float v = src[src_off + t * row + (size_t)h * head_dim + e];
                if (f16) {
                    const uint16_t hv = cpu_f32_to_f16(v);
                    memcpy(want + el * 2, &hv, 2);
                } else {
                    memcpy(want + el * 4, &v, 4);
                }
            }
    }
    struct vkb_buffer *bs = mkbuf(src, srcn * 4), *bt = mkbuf(slots, (slot_off + n_tok) * 4), *bp = mkbuf(pool, pool_bytes);
    char what[96];
    snprintf(what, sizeof what, "kv_write %s n_tok %u heads %u head_dim %u stride %u", f16 ? "f16" : "f32", n_tok,
             n_head_kv, head_dim, block_stride);
    begin();
    attnd_status st = vkb_op_kv_write(g_ops, bs, src_off, bt, slot_off, n_tok, n_head_kv, head_dim, bp, block_stride, f16);
    if (finish(st, NULL, what)) {
        rdbuf(bp, got, pool_bytes);
        size_t bad = 0;
        for (size_t i = 0; i < pool_bytes; i += esz)
            if (memcmp(got + i, want + i, esz) && bad++ < 4) {
                uint32_t g = 0, w = 0;
                memcpy(&g, got + i, esz);
                memcpy(&w, want + i, esz);
                fprintf(stderr, "  %s: pool element %zu: 0x%x, want 0x%x\n", what, i / esz, g, w);
            }
        T_CHECK(bad == 0, "%s: %zu pool elements differ (written or not)", what, bad);
    }
    rmbuf(bs);
    rmbuf(bt);
    rmbuf(bp);
    free(src);
    free(slots);
    free(pool);
    free(want);
    free(got);
}

static void test_kv_write(void)
{
    check_kv_write(1, 7, 2, 64, 64);
    check_kv_write(0, 7, 2, 64, 36);
    check_kv_write(0, 5, 3, 5, 3); /* odd head_dim and block stride: fine for F32 */
    check_kv_write(1, 20, 1, 6, 2);
}

/* ------------------------------------------------------------------------------------------
 * A chain in one batch: x = get_rows(table) ; h = rmsnorm(x) ; y = h · Wᵀ ; x += y
 * ------------------------------------------------------------------------------------------ */

static void test_chain(void)
{
    const uint32_t d = 96, n_out = 96, n_tok = 3, vocab = 11;
    struct wmat table, w;
    seed(600);
    wmat_init(&table, TENSOR_F32, d, vocab, 0, 0, 1.0f);
    wmat_init(&w, TENSOR_Q8_0, d, n_out, 0, 0, 1.0f);
    float *norm_w = t_xmalloc(d * 4), *x = t_xmalloc(n_tok * d * 4);
    fill_rnd(norm_w, d, 1.0f);
    const int32_t ids[3] = {10, 2, 10};
    struct vkb_buffer *bt = mkbuf(table.data, table.bytes), *bw = mkbuf(w.data, w.bytes), *bn = mkbuf(norm_w, d * 4),
                      *bi = mkbuf(ids, sizeof ids), *bx = mkbuf(NULL, n_tok * d * 4), *bh = mkbuf(NULL, n_tok * d * 4),
                      *by = mkbuf(NULL, n_tok * d * 4);
    begin();
    attnd_status st = vkb_op_get_rows(g_ops, TENSOR_F32, bt, 0, table.row_bytes, bi, 0, n_tok, d, bx, 0);
    vkb_barrier(g_dev);
    if (!st) st = vkb_op_rmsnorm(g_ops, bx, 0, bn, 0, bh, 0, n_tok, d, 1e-5f);
    vkb_barrier(g_dev);
    if (!st) st = vkb_op_matmul(g_ops, TENSOR_Q8_0, bw, 0, w.row_bytes, d, n_out, bh, 0, n_tok, NULL, 0, by, 0);
    vkb_barrier(g_dev);
    if (!st) st = vkb_op_add(g_ops, bx, 0, by, 0, n_tok * d);
    if (finish(st, NULL, "chain")) {
        rdbuf(bx, x, n_tok * d * 4);
        size_t bad = 0;
        for (uint32_t t = 0; t < n_tok; t++) {
            const float *e = table.deq + (size_t)ids[t] * d;
            double ss = 0;
            for (uint32_t i = 0; i < d; i++) ss += (double)e[i] * e[i];
            const double sc = 1.0 / sqrt(ss / d + 1e-5);
            for (uint32_t r = 0; r < n_out; r++) {
                double s = 0, sa = 0;
                for (uint32_t i = 0; i < d; i++) {
                    const double p = (double)w.deq[(size_t)r * d + i] * (e[i] * sc * norm_w[i]);
                    s += p;
                    sa += fabs(p);
                }
                const double ref = e[r] + s;
                if (!(fabs(x[t * d + r] - ref) <= 1e-4 * (sa + fabs(e[r]))) && bad++ < 3)
                    fprintf(stderr, "  chain: tok %u elem %u: %.9g, want %.9g\n", t, r, (double)x[t * d + r], ref);
            }
        }
        T_CHECK(bad == 0, "chain: %zu values off", bad);
    }
    struct vkb_buffer *all[] = {bt, bw, bn, bi, bx, bh, by};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) rmbuf(all[i]);
    free(norm_w);
    free(x);
    wmat_free(&table);
    wmat_free(&w);
}

/* ------------------------------------------------------------------------------------------
 * Bad arguments: statuses, nothing recorded
 * ------------------------------------------------------------------------------------------ */

static void test_bad_args(void)
{
    struct vkb_buffer *b = mkbuf(NULL, 4096), *small = mkbuf(NULL, 64);
    begin();
    T_CHECK(vkb_op_matmul(g_ops, TENSOR_Q8_K, b, 0, 292, 256, 4, b, 0, 1, NULL, 0, b, 0) == ATTND_ERR_INVALID,
            "Q8_K (an activation type the shaders do not decode)");
    T_CHECK(vkb_op_matmul(g_ops, TENSOR_Q8_0, b, 0, 34, 48, 4, b, 0, 1, NULL, 0, b, 0) == ATTND_ERR_INVALID,
            "n_in not a multiple of 32");
    T_CHECK(vkb_op_matmul(g_ops, TENSOR_F32, b, 0, 128, 32, 4, b, 0, 0, NULL, 0, b, 0) == ATTND_ERR_INVALID, "n_tok 0");
    T_CHECK(vkb_op_matmul(g_ops, TENSOR_F32, b, 0, 124, 32, 4, b, 0, 1, NULL, 0, b, 0) == ATTND_ERR_INVALID,
            "row_bytes below the row size");
    T_CHECK(vkb_op_matmul(g_ops, TENSOR_F32, b, 2, 128, 32, 4, b, 0, 1, NULL, 0, b, 0) == ATTND_ERR_INVALID,
            "misaligned F32 weights");
    T_CHECK(vkb_op_matmul(g_ops, TENSOR_F32, b, 0, 128, 32, 40, b, 0, 1, NULL, 0, b, 0) == ATTND_ERR_INVALID,
            "weights past the buffer");
    T_CHECK(vkb_op_matmul(g_ops, TENSOR_F32, b, 0, 128, 32, 4, b, 0, 1, small, 0, b, 0) == ATTND_OK,
            "bias that fits");
    T_CHECK(vkb_op_matmul(g_ops, TENSOR_F32, b, 0, 128, 32, 4, b, 0, 1, small, 14, b, 0) == ATTND_ERR_INVALID,
            "bias past its buffer");
    T_CHECK(vkb_op_matmul(g_ops, TENSOR_F32, b, 0, 128, 32, 4, small, 0, 1, NULL, 0, b, 0) == ATTND_ERR_INVALID,
            "x past its buffer");
    T_CHECK(vkb_op_matmul(g_ops, TENSOR_F32, b, 0, 128, 32, 4, b, SIZE_MAX - 2, 1, NULL, 0, b, 0) == ATTND_ERR_INVALID,
            "x offset overflow");
    T_CHECK(vkb_op_matmul(g_ops, TENSOR_F32, b, 0, 128, 32, 2000000, b, 0, 1, NULL, 0, b, 0) == ATTND_ERR_INVALID,
            "n_out past the buffer");
    T_CHECK(vkb_op_get_rows(g_ops, TENSOR_Q8_0, small, 0, 34, b, 0, 1, 64, b, 0) == ATTND_ERR_INVALID,
            "table row past the buffer");
    T_CHECK(vkb_op_get_rows(g_ops, TENSOR_F16, b, 0, 64, b, 0, 0, 32, b, 0) == ATTND_ERR_INVALID, "get_rows n 0");
    T_CHECK(vkb_op_rmsnorm(g_ops, b, 0, small, 0, b, 0, 1, 32, 1e-6f) == ATTND_ERR_INVALID, "norm weight too short");
    T_CHECK(vkb_op_rmsnorm(g_ops, b, 0, b, 0, b, 0, 1, 0, 1e-6f) == ATTND_ERR_INVALID, "rmsnorm d 0");
    T_CHECK(vkb_op_rope(g_ops, b, 0, b, 0, 1, 1, 64, 65, 1) == ATTND_ERR_INVALID, "odd n_rot");
    T_CHECK(vkb_op_rope(g_ops, b, 0, b, 0, 1, 1, 64, 128, 1) == ATTND_ERR_INVALID, "n_rot > head_dim");
    T_CHECK(vkb_op_add(g_ops, b, 0, small, 0, 17) == ATTND_ERR_INVALID, "add past a buffer");
    T_CHECK(vkb_op_swiglu(g_ops, b, 0, b, 0, 0) == ATTND_ERR_INVALID, "swiglu n 0");
    T_CHECK(vkb_op_kv_write(g_ops, b, 0, b, 0, 1, 1, 5, b, 80, 1) == ATTND_ERR_INVALID, "odd head_dim, F16");
    T_CHECK(vkb_op_kv_write(g_ops, b, 0, b, 0, 1, 1, 4, b, 63, 0) == ATTND_ERR_INVALID, "block stride below a block");
    T_CHECK(vkb_op_kv_write(g_ops, b, 0, b, 0, 1, 1, 64, small, 1024, 0) == ATTND_ERR_INVALID, "pool below a block");
    struct vkb_buffer *big = mkbuf(NULL, 4u * 131104 + 64);
    T_CHECK(vkb_op_matmul(g_ops, TENSOR_F32, big, 0, 4u * 131104, 131104, 1, big, 0, 1, NULL, 0, b, 0) == ATTND_ERR_RANGE,
            "n_in past the shaders' loop budget");
    T_CHECK(vkb_op_rmsnorm(g_ops, big, 0, big, 0, big, 0, 1, (1u << 20) + 1, 1e-6f) == ATTND_ERR_INVALID,
            "rmsnorm row past the buffer");
    enum tensor_type bad_t = TENSOR_Q8_1;
    T_CHECK(vkb_ops_prepare(g_ops, &bad_t, 1) == ATTND_ERR_INVALID, "prepare Q8_1");
    finish(ATTND_OK, NULL, "bad args (valid bias call)");
    rmbuf(b);
    rmbuf(small);
    rmbuf(big);
}

/* ------------------------------------------------------------------------------------------
 * Main
 * ------------------------------------------------------------------------------------------ */

static int run_all(void)
{
    cpu_kernels_init();
    struct vkb_device_opts opts = {.device_index = -1, .validation = 1, .timestamps = 1};
    attnd_status st = vkb_device_create(&opts, &g_dev);
    if (st != ATTND_OK) {
        fprintf(stderr,
                "test_vk_ops: FAIL: no usable Vulkan device with validation (%s: %s). lavapipe comes with "
                "mesa-vulkan-drivers and the layer with vulkan-validationlayers (deploy/install-deps.sh).\n",
                attnd_status_str(st), vkb_last_error());
        return 1;
    }
    const struct vkb_limits *l = vkb_device_limits(g_dev);
    fprintf(stderr, "test_vk_ops: %s, subgroup %u, LP_NATIVE_VECTOR_WIDTH=%s\n", l->name, l->subgroup_size,
            getenv("LP_NATIVE_VECTOR_WIDTH") ? getenv("LP_NATIVE_VECTOR_WIDTH") : "(default)");
    if (vkb_ops_create(g_dev, &g_ops) != ATTND_OK) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    const double t0 = now_s();
    static const enum tensor_type light_types[] = {TENSOR_Q8_0, TENSOR_F16};
    st = g_light ? vkb_ops_prepare(g_ops, light_types, 2) : vkb_ops_prepare(g_ops, g_types, N_TYPES);
    T_CHECK(st == ATTND_OK, "vkb_ops_prepare: %s: %s", attnd_status_str(st), vkb_last_error());
    fprintf(stderr, "test_vk_ops: pipelines built in %.2f s\n", now_s() - t0);
    test_bad_args();
    test_get_rows();
    test_rmsnorm();
    test_matmul();
    test_rope();
    test_binary();
    test_kv_write();
    test_chain();
    if (!g_light) perf_matmul();
    vkb_ops_destroy(g_ops);
    vkb_ops_destroy(NULL);
    const unsigned verr = vkb_validation_errors(g_dev);
    T_CHECK(verr == 0, "%u Vulkan validation errors (see the log above)", verr);
    vkb_device_destroy(g_dev);
    fprintf(stderr, "test_vk_ops: %.2f s\n", now_s() - t0);
    return t_finish("test_vk_ops");
}

int main(int argc, char **argv)
{
    (void)argc;
    if (t_vk_no_leak_check(argv)) return 1;
    const int child = getenv("LP_NATIVE_VECTOR_WIDTH") != NULL;
    g_light = child;
    int rc = run_all();
    if (child) return rc;
    /* second pass: lavapipe with 128-bit vectors (subgroup size 4 instead of 8), and the GPU
     * matrix shaders instead of op_matmul_lanes.comp */
    static const char *const env[] = {"LP_NATIVE_VECTOR_WIDTH", "128", "ATTND_VK_OPS_GPU_SHADERS", "1", NULL};
    if (t_rerun_with_env(argv, env, "test_vk_ops: the LP_NATIVE_VECTOR_WIDTH=128 pass")) return 1;
    return rc;
}
