/* test_batchk.c - the small-batch GEMMs (quants_avx2_batch, quants_avx512_batch: the avx2-batch and
 * vnni-batch variants of the batch family, issue 36) against the scalar reference cpu_gemm_ref, for
 * Q8_0, Q4_0, Q4_1, Q5_1, Q4_K and Q5_K weights, at every ISA this CPU has that runs them: odd row
 * ranges (tails of the 4-row tile), rows of 1, 3, 9, 67 and 70 blocks of 32 (not multiples of 8,
 * past the 64-block chunk; the K-types 8, 24, 72 and 80), every token count 2..17 and 31, 32, 33,
 * 40 (tails of the 4- and 8-token groups and the pass of 4 groups). The weights are random bytes
 * (Q8_0 quants including -128, the sign trick's edge; K-type scales and mins of every 6-bit value)
 * with finite f16 scales and mins of either sign; the activations random, one token all zero, one
 * at full scale (quants of +-127). Bound: |v - ref| <= 1e-5 * S + 1e-30, S the sum of |w_i| * |a_i| over the dequantized
 * weights and activations: the integer sums are exact, only the float sum over blocks differs. A
 * kernel that mixed tokens, rows or blocks would miss by about S. Outputs outside [r0, r1) and
 * past n_tok must stay untouched. */
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/quants.h"

#include "tests/unit/testutil.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define ROWS 11
#define MAXTOK 40
#define MAXN (80 * 32)
#define SENTINEL 12345.0f

typedef int (*batch_fn)(enum tensor_type t, size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a,
                        size_t arb, size_t n_tok, float *y, size_t ys);

static uint64_t g_rng = 0x243f6a8885a308d3ull;

static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}

struct data {
    enum tensor_type t;
    size_t n, wrb, arb;
    unsigned char *w, *a;
    float ref[MAXTOK * ROWS], bound[MAXTOK * ROWS];
};

/* Types with a second f16 (a min) at byte 2 of each block. */
static int has_min(enum tensor_type t)
{
    return t == TENSOR_Q4_1 || t == TENSOR_Q5_1 || t == TENSOR_Q4_K || t == TENSOR_Q5_K;
}

static void make_weights(struct data *d)
{
    const size_t bb = tensor_block_bytes(d->t), nb = d->n / tensor_block_elems(d->t);
    for (size_t i = 0; i < d->wrb * ROWS; i++) d->w[i] = (unsigned char)rnd();
    for (size_t r = 0; r < ROWS; r++)
        for (size_t b = 0; b < nb; b++)
            for (int k = 0; k < (has_min(d->t) ? 2 : 1); k++) { /* f16: |d| in [2^-8, 2^-4), either sign */
                const uint16_t h = (uint16_t)(0x1c00 + rnd() % 0x1000 + (rnd() % 2 ? 0x8000 : 0));
                memcpy(d->w + r * d->wrb + b * bb + 2 * k, &h, 2);
            }
}

/* The activations of row a (n values) as floats: Q8_0 through the kernels' dequantizer, Q8_K by
 * its layout (f32 d, 256 int8). */
static void dequant_acts(enum tensor_type at, const unsigned char *a, float *out, size_t n)
{
    if (at == TENSOR_Q8_0) {
        cpu_dequant_row(TENSOR_Q8_0, a, out, n);
        return;
    }
    for (size_t sb = 0; sb < n / QUANTS_QK_K; sb++) {
        const unsigned char *p = a + sb * QUANTS_Q8_K_BYTES;
        float dd;
        memcpy(&dd, p, 4);
        for (size_t i = 0; i < QUANTS_QK_K; i++) out[sb * QUANTS_QK_K + i] = dd * (float)(int8_t)p[4 + i];
    }
}

static void make_acts(struct data *d)
{
    static float x[MAXN];
    for (size_t j = 0; j < MAXTOK; j++) {
        const float range = j == 5 ? 0.0f : j == 6 ? 100.0f : (float)(1 + rnd() % 8);
        for (size_t i = 0; i < d->n; i++) x[i] = range * ((float)(rnd() % 20001) / 10000.0f - 1.0f);
        if (j == 6) x[0] = 100.0f, x[d->n - 1] = -100.0f;
        cpu_prepare_row(d->t, x, d->a + j * d->arb, d->n);
    }
}

static void make_ref(struct data *d)
{
    static float wd[MAXN], ad[MAXN];
    cpu_gemm_ref(d->t, d->n, d->w, d->wrb, 0, ROWS, d->a, d->arb, MAXTOK, d->ref, ROWS);
    for (size_t j = 0; j < MAXTOK; j++) {
        dequant_acts(cpu_vec_dot_type(d->t), d->a + j * d->arb, ad, d->n);
        for (size_t r = 0; r < ROWS; r++) {
            cpu_dequant_row(d->t, d->w + r * d->wrb, wd, d->n);
            double s = 0;
            for (size_t i = 0; i < d->n; i++) s += fabs((double)wd[i] * ad[i]);
            d->bound[j * ROWS + r] = (float)(1e-5 * s + 1e-30);
        }
    }
}

/* fn over rows [r0, r1) and n_tok tokens against the reference; the rest untouched. */
static void check(const struct data *d, batch_fn fn, const char *name, size_t r0, size_t r1, size_t n_tok)
{
    static float y[(MAXTOK + 1) * ROWS];
    for (size_t i = 0; i < (MAXTOK + 1) * ROWS; i++) y[i] = SENTINEL;
    const int took = fn(d->t, d->n, d->w, d->wrb, r0, r1, d->a, d->arb, n_tok, y, ROWS);
    int off = 0, stray = 0;
    double worst = 0;
    for (size_t j = 0; j <= MAXTOK; j++)
        for (size_t r = 0; r < ROWS; r++) {
            const float got = y[j * ROWS + r];
            if (j >= n_tok || r < r0 || r >= r1) {
                stray += got != SENTINEL;
                continue;
            }
            const double e = fabs((double)got - d->ref[j * ROWS + r]);
            off += !(e <= d->bound[j * ROWS + r]);
            if (e / d->bound[j * ROWS + r] > worst) worst = e / d->bound[j * ROWS + r];
        }
    T_CHECK(took && off == 0 && stray == 0,
            "%s %s n=%zu rows [%zu,%zu) %zu tokens: took %d, %d off (worst %.3g of the bound), %d stray", name,
            tensor_type_name(d->t), d->n, r0, r1, n_tok, took, off, worst, stray);
}

/* Rows of nb blocks of 32 of type t, activations and the reference. */
static void setup(struct data *d, enum tensor_type t, size_t nb)
{
    const enum tensor_type at = cpu_vec_dot_type(t);
    d->t = t;
    d->n = nb * 32;
    d->wrb = d->n / tensor_block_elems(t) * tensor_block_bytes(t);
    d->arb = d->n / tensor_block_elems(at) * tensor_block_bytes(at);
    d->w = t_xmalloc(d->wrb * ROWS);
    d->a = t_xmalloc(d->arb * MAXTOK);
    make_weights(d);
    make_acts(d);
    make_ref(d);
}

static void test_type(enum tensor_type t, size_t nb, batch_fn fn, const char *name)
{
    static struct data d;
    setup(&d, t, nb);
    static const size_t more[] = {31, 32, 33, 40};
    for (size_t k = 2; k <= 17; k++) check(&d, fn, name, 1, ROWS - 1, k);
    for (size_t k = 0; k < 4; k++) check(&d, fn, name, 1, ROWS - 1, more[k]);
    check(&d, fn, name, 0, ROWS, 8);  /* 11 rows: two tiles and 3 */
    check(&d, fn, name, 3, 4, 5);     /* one row */
    check(&d, fn, name, 2, 8, 16);    /* 6 rows: a tile and 2 */
    check(&d, fn, name, 5, 5, 4);     /* no rows */
    /* the declines: one token, another type */
    static float y1[ROWS];
    T_CHECK(fn(t, d.n, d.w, d.wrb, 0, ROWS, d.a, d.arb, 1, y1, ROWS) == 0, "%s declines 1 token", name);
    T_CHECK(fn(TENSOR_IQ4_NL, 32, d.w, 18, 0, 1, d.a, d.arb, 4, y1, 1) == 0, "%s declines iq4_nl", name);
    free(d.w);
    free(d.a);
}

/* The variant through the dispatcher (the table's row and the batch family's availability). */
static void test_dispatch(enum tensor_type t, enum cpu_variant v)
{
    T_CHECK(cpu_variant_available(CPU_FAM_BATCH, t, v), "%s %s available for the batch family",
            tensor_type_name(t), cpu_variant_name(v));
    T_CHECK(!cpu_variant_available(CPU_FAM_MATVEC, t, v) && !cpu_variant_available(CPU_FAM_GEMM, t, v),
            "%s %s only for the batch family", tensor_type_name(t), cpu_variant_name(v));
    T_CHECK(!cpu_variant_available(CPU_FAM_BATCH, TENSOR_Q6_K, v), "%s not for q6_k", cpu_variant_name(v));
    static struct data d;
    setup(&d, t, 16);
    static float y[MAXTOK * ROWS];
    int off = 0;
    cpu_gemm_variant(v, t, d.n, d.w, d.wrb, 0, ROWS, d.a, d.arb, 7, y, ROWS);
    for (size_t i = 0; i < 7 * ROWS; i++) off += !(fabs((double)y[i] - d.ref[i]) <= d.bound[i]);
    T_CHECK(off == 0, "%s %s through cpu_gemm_variant, 7 tokens: %d off", tensor_type_name(t), cpu_variant_name(v), off);
    free(d.w);
    free(d.a);
}

int main(void)
{
    const enum cpu_isa start = cpu_kernels_init();
    static const size_t nbs[] = {1, 3, 9, 67, 70}, nbs_k[] = {8, 24, 72, 80, 8};
    static const enum tensor_type types[] = {TENSOR_Q8_0, TENSOR_Q4_0, TENSOR_Q4_1, TENSOR_Q5_1, TENSOR_Q4_K, TENSOR_Q5_K};
    int ran = 0;
    if (cpu_kernels_max_isa() >= CPU_ISA_AVX2) {
        cpu_kernels_set_isa(CPU_ISA_AVX2);
        for (int ti = 0; ti < 6; ti++) {
            const size_t *nb = tensor_block_elems(types[ti]) == 256 ? nbs_k : nbs;
            for (size_t k = 0; k < 5; k++) test_type(types[ti], nb[k], quants_avx2_batch, "avx2-batch");
            if (types[ti] != TENSOR_Q8_0) test_dispatch(types[ti], CPU_VAR_AVX2_BATCH);
            else /* the table leaves Q8_0 to the AVX2 row kernel */
                T_CHECK(!cpu_variant_available(CPU_FAM_BATCH, TENSOR_Q8_0, CPU_VAR_AVX2_BATCH), "q8_0: no avx2-batch");
        }
        ran = 1;
    }
    cpu_kernels_set_isa(cpu_kernels_max_isa());
    if (cpu_variant_available(CPU_FAM_BATCH, TENSOR_Q8_0, CPU_VAR_VNNI_BATCH)) {
        for (int ti = 0; ti < 6; ti++) {
            const size_t *nb = tensor_block_elems(types[ti]) == 256 ? nbs_k : nbs;
            for (size_t k = 0; k < 5; k++) test_type(types[ti], nb[k], quants_avx512_batch, "vnni-batch");
            test_dispatch(types[ti], CPU_VAR_VNNI_BATCH);
        }
        ran = 1;
    } else {
        fprintf(stderr, "test_batchk: no AVX-512 VNNI here, vnni-batch not run\n");
    }
    cpu_kernels_set_isa(start);
    fprintf(stderr, "test_batchk: %d checks, %d failed\n", t_checks, t_failures);
    if (!ran) return 77;
    return t_failures ? 1 : 0;
}
