/* test_quants.c - the K-quant, IQ4 and Q4_1/Q5_x weight types (kernels/cpu/quants.c):
 *   dequantization of hand-built blocks against values worked out by hand from the format
 *     definition (each expected value below is the format's formula applied to the bytes set);
 *   Q8_K activation quantization: bsums, the scale, and round-trip error <= |d|/2;
 *   every SIMD ISA this CPU has against the scalar reference, dot and GEMM, for 1, 2, 3 and 7
 *     blocks (odd counts, a single block, unaligned rows), within float rounding:
 *     the integer sums are exact, so |simd - ref| <= 1e-5 * S (S = sum |w_i * a_i| over the
 *     dequantized values), far below what a wrong layout gives;
 *   the dot against the dequantized weights times the dequantized activations, in double,
 *     within 1e-4 * S (the reference decodes the same integers). */
#include "kernels/cpu/cpu_kernels.h"

#include "tests/unit/testutil.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define F16_1 0x3C00    /* 1.0 */
#define F16_HALF 0x3800 /* 0.5 */
#define F16_QTR 0x3400  /* 0.25 */
#define F16_2 0x4000    /* 2.0 */
#define F16_M1 0xBC00   /* -1.0 */

/* the IQ4 codebook as the format defines it */
static const int K4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void put16(unsigned char *p, uint16_t v) { memcpy(p, &v, 2); }

static void expect(const char *what, const float *y, int i, double want)
{
    T_CHECK(fabs((double)y[i] - want) <= 1e-6 * (1 + fabs(want)), "%s element %d: %g, expected %g", what, i, (double)y[i],
            want);
}

static void test_dequant_32(void)
{
    unsigned char b[24];
    float y[32];
    /* Q4_1: d 0.5, m -1, qs[j] = j | (15-j) << 4 */
    put16(b, F16_HALF);
    put16(b + 2, F16_M1);
    for (int j = 0; j < 16; j++) b[4 + j] = (unsigned char)(j | (15 - j) << 4);
    cpu_dequant_row(TENSOR_Q4_1, b, y, 32);
    for (int j = 0; j < 16; j++) expect("q4_1", y, j, 0.5 * j - 1), expect("q4_1", y, j + 16, 0.5 * (15 - j) - 1);
    /* Q5_0: d 2, qh bits 0 and 31, every qs 0x53 */
    put16(b, F16_2);
    uint32_t qh = 0x80000001u;
    memcpy(b + 2, &qh, 4);
    memset(b + 6, 0x53, 16);
    cpu_dequant_row(TENSOR_Q5_0, b, y, 32);
    expect("q5_0", y, 0, 2.0 * (19 - 16));
    for (int j = 1; j < 16; j++) expect("q5_0", y, j, 2.0 * (3 - 16));
    for (int j = 16; j < 31; j++) expect("q5_0", y, j, 2.0 * (5 - 16));
    expect("q5_0", y, 31, 2.0 * (21 - 16));
    /* Q5_1: d 1, m 0.25, qh bit 16, every qs 0x21 */
    put16(b, F16_1);
    put16(b + 2, F16_QTR);
    qh = 1u << 16;
    memcpy(b + 4, &qh, 4);
    memset(b + 8, 0x21, 16);
    cpu_dequant_row(TENSOR_Q5_1, b, y, 32);
    for (int j = 0; j < 16; j++) expect("q5_1", y, j, 1.25);
    expect("q5_1", y, 16, 18.25);
    for (int j = 17; j < 32; j++) expect("q5_1", y, j, 2.25);
    /* IQ4_NL: d 0.5, qs[j] = j | (15-j) << 4 */
    put16(b, F16_HALF);
    for (int j = 0; j < 16; j++) b[2 + j] = (unsigned char)(j | (15 - j) << 4);
    cpu_dequant_row(TENSOR_IQ4_NL, b, y, 32);
    for (int j = 0; j < 16; j++) expect("iq4_nl", y, j, 0.5 * K4[j]), expect("iq4_nl", y, j + 16, 0.5 * K4[15 - j]);
}

static void test_dequant_q2_q3(void)
{
    unsigned char b[110];
    float y[256];
    /* Q2_K: d 1, dmin 0.5; sub 0: scale 1 min 2, sub 1: scale 3 min 0, sub 13: scale 15 min 5;
     * qs bytes 0xE4 with the low 2 bits = l % 4, so shift 0 gives l%4 and shift 4 gives 2 */
    memset(b, 0, sizeof b);
    b[0] = 0x21, b[1] = 0x03, b[13] = 0x5F;
    for (int l = 0; l < 64; l++) b[16 + l] = (unsigned char)(0xE4 & ~3) | (unsigned char)(l % 4);
    put16(b + 80, F16_1);
    put16(b + 82, F16_HALF);
    cpu_dequant_row(TENSOR_Q2_K, b, y, 256);
    for (int l = 0; l < 16; l++) expect("q2_k", y, l, 1.0 * (l % 4) - 1.0);
    for (int l = 16; l < 32; l++) expect("q2_k", y, l, 3.0 * (l % 4));
    for (int l = 0; l < 16; l++) expect("q2_k", y, 128 + 64 + 16 + l, 15.0 * 2 - 0.5 * 5);
    expect("q2_k", y, 40, 0.0);
    /* Q3_K: d 0.5; every 6-bit scale 32 (= 0) but s0 = 35 and s9 = 27; low bits l%4 (h 0) and 2
     * (h 1); hmask bit 0 for l < 8, bit 4 for odd l */
    memset(b, 0, sizeof b);
    for (int l = 0; l < 32; l++) b[l] = (unsigned char)((l < 8 ? 0x01 : 0) | (l & 1 ? 0x10 : 0));
    for (int l = 0; l < 32; l++) b[32 + l] = (unsigned char)(l % 4), b[64 + l] = 2;
    b[96] = 0x03, b[97] = 0xB0;
    b[104] = b[106] = b[107] = 0xAA, b[105] = 0x9A;
    put16(b + 108, F16_HALF);
    cpu_dequant_row(TENSOR_Q3_K, b, y, 256);
    for (int l = 0; l < 16; l++) expect("q3_k", y, l, 0.5 * 3 * ((l % 4) - (l < 8 ? 0 : 4)));
    for (int l = 16; l < 32; l++) expect("q3_k", y, l, 0.0);
    for (int l = 16; l < 32; l++) expect("q3_k", y, 128 + l, 0.5 * -5 * (2 - (l & 1 ? 0 : 4)));
}

/* Q4_K / Q5_K scales: sub 0 scale 10 min 3, sub 1 scale 2 min 1, sub 4 scale 37 min 17, others 0 */
static void k4_scales(unsigned char *s)
{
    memset(s, 0, 12);
    s[0] = 10 | 2 << 6, s[4] = 3 | 1 << 6, s[8] = 5 | 1 << 4;
    s[1] = 2, s[5] = 1;
}

static void test_dequant_q4_q5_q6(void)
{
    unsigned char b[210];
    float y[256];
    /* Q4_K: d 1, dmin 0.5; qs[l] = l%16 | ((l/2)%16) << 4 for l < 32, qs[64 + l] = 0xF0 | l%7 */
    memset(b, 0, sizeof b);
    put16(b, F16_1);
    put16(b + 2, F16_HALF);
    k4_scales(b + 4);
    for (int l = 0; l < 32; l++) b[16 + l] = (unsigned char)(l % 16 | ((l / 2) % 16) << 4), b[16 + 64 + l] = (unsigned char)(0xF0 | l % 7);
    cpu_dequant_row(TENSOR_Q4_K, b, y, 256);
    for (int l = 0; l < 32; l++) {
        expect("q4_k", y, l, 10.0 * (l % 16) - 1.5);
        expect("q4_k", y, 32 + l, 2.0 * ((l / 2) % 16) - 0.5);
        expect("q4_k", y, 128 + l, 37.0 * (l % 7) - 8.5);
        expect("q4_k", y, 160 + l, 0.0);
    }
    /* Q5_K: the same plus fifth bits: qh[l] bit 0 for odd l, bit 4 always */
    memset(b, 0, sizeof b);
    put16(b, F16_1);
    put16(b + 2, F16_HALF);
    k4_scales(b + 4);
    for (int l = 0; l < 32; l++) {
        b[16 + l] = (unsigned char)((l & 1) | 0x10);
        b[48 + l] = (unsigned char)(l % 16 | ((l / 2) % 16) << 4), b[48 + 64 + l] = (unsigned char)(0xF0 | l % 7);
    }
    cpu_dequant_row(TENSOR_Q5_K, b, y, 256);
    for (int l = 0; l < 32; l++) {
        expect("q5_k", y, l, 10.0 * (l % 16 + 16 * (l & 1)) - 1.5);
        expect("q5_k", y, 32 + l, 2.0 * ((l / 2) % 16) - 0.5);
        expect("q5_k", y, 128 + l, 37.0 * (l % 7 + 16) - 8.5);
    }
    /* Q6_K: d 0.25; scales 0: 1, 1: -2, 4: 3, 10: 5, 11: -1; ql[l] = l%16 | (15 - l%16) << 4 and
     * qh[l] = 2 | 1 << 4 for l < 32; ql[96 + l] = l%8 and qh[32 + l] = 3 << 2 */
    memset(b, 0, sizeof b);
    for (int l = 0; l < 32; l++) {
        b[l] = (unsigned char)(l % 16 | (15 - l % 16) << 4), b[128 + l] = 2 | 1 << 4;
        b[96 + l] = (unsigned char)(l % 8), b[128 + 32 + l] = 3 << 2;
    }
    int8_t sc[16] = {1, -2, 0, 0, 3, 0, 0, 0, 0, 0, 5, -1, 0, 0, 0, 0};
    memcpy(b + 192, sc, 16);
    put16(b + 208, F16_QTR);
    cpu_dequant_row(TENSOR_Q6_K, b, y, 256);
    for (int l = 0; l < 32; l++) {
        expect("q6_k", y, l, 0.25 * (l < 16 ? 1 : -2) * (l % 16));
        expect("q6_k", y, 64 + l, 0.25 * (l < 16 ? 3 : 0) * (-1 - l % 16));
        expect("q6_k", y, 160 + l, 0.25 * (l < 16 ? 5 : -1) * (l % 8 + 16));
    }
}

static void test_dequant_iq4_xs(void)
{
    /* d 0.5; every scale 32 (= 0) but sub 0: 33 and sub 3: 30; qs of sub 0: j | (15-j) << 4, sub 3: 0x77 */
    unsigned char b[136];
    float y[256];
    memset(b, 0, sizeof b);
    put16(b, F16_HALF);
    put16(b + 2, 0xAA6A);
    b[4] = 0x01, b[5] = 0xE0;
    for (int j = 0; j < 16; j++) b[8 + j] = (unsigned char)(j | (15 - j) << 4), b[8 + 48 + j] = 0x77;
    cpu_dequant_row(TENSOR_IQ4_XS, b, y, 256);
    for (int j = 0; j < 16; j++) {
        expect("iq4_xs", y, j, 0.5 * K4[j]);
        expect("iq4_xs", y, 16 + j, 0.5 * K4[15 - j]);
        expect("iq4_xs", y, 32 + j, 0.0);
        expect("iq4_xs", y, 96 + j, 0.5 * -2 * K4[7]);
        expect("iq4_xs", y, 112 + j, 0.5 * -2 * K4[7]);
    }
}

static void test_q8_k(void)
{
    float x[512];
    for (int i = 0; i < 512; i++) x[i] = (float)sin(i * 0.37) * (i < 256 ? 3.0f : 0.01f);
    x[100] = -5.0f; /* the largest magnitude of block 0, negative */
    unsigned char q[2 * 292];
    cpu_prepare_row(TENSOR_Q4_K, x, q, 512);
    for (int b = 0; b < 2; b++) {
        const unsigned char *p = q + 292 * b;
        float d;
        memcpy(&d, p, 4);
        const int8_t *qs = (const int8_t *)(p + 4);
        if (b == 0) T_CHECK(fabsf(d - 5.0f / 127.0f) < 1e-7f && qs[100] == -127, "q8_k block 0: d %g q %d", (double)d, qs[100]);
        for (int s = 0; s < 16; s++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += qs[16 * s + i];
            int16_t bs;
            memcpy(&bs, p + 4 + 256 + 2 * s, 2);
            T_CHECK(bs == sum, "q8_k block %d bsum %d: %d vs %d", b, s, bs, sum);
        }
        double worst = 0;
        for (int i = 0; i < 256; i++) worst = fmax(worst, fabs((double)d * qs[i] - x[256 * b + i]));
        T_CHECK(worst <= fabs(d) * 0.5 + 1e-9, "q8_k block %d round trip %g (d %g)", b, worst, (double)d);
    }
}

/* ---- SIMD vs scalar ---- */

static uint64_t g_rng = 0x243f6a8885a308d3ULL;
static uint64_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static float rndf(void) { return (float)((double)(rnd() >> 11) * 0x1.0p-53 * 2.0 - 1.0); }

/* Byte offsets of a block's f16 scales (the rest of the block is random bytes). */
static void f16_fields(enum tensor_type t, int off[2], int *n)
{
    *n = 1;
    off[0] = 0;
    switch (t) {
    case TENSOR_Q4_1: case TENSOR_Q5_1: case TENSOR_Q4_K: case TENSOR_Q5_K: *n = 2, off[1] = 2; break;
    case TENSOR_Q2_K: *n = 2, off[0] = 80, off[1] = 82; break;
    case TENSOR_Q3_K: off[0] = 108; break;
    case TENSOR_Q6_K: off[0] = 208; break;
    default: break;
    }
}

/* Prepared activations back to floats: Q8_0 through the kernels, Q8_K by its definition. */
static void act_dequant(enum tensor_type at, const unsigned char *a, float *y, size_t n)
{
    if (at == TENSOR_Q8_0) {
        cpu_dequant_row(at, a, y, n);
        return;
    }
    for (size_t b = 0; b < n / 256; b++, a += 292) {
        float d;
        memcpy(&d, a, 4);
        for (int i = 0; i < 256; i++) y[256 * b + i] = d * (float)(int8_t)a[4 + i];
    }
}

#define ROWS 5
#define TOK 3
#define PAD 3 /* odd padding: rows are unaligned */

static void test_simd(enum tensor_type t, enum cpu_isa best)
{
    static const size_t nblocks[] = {1, 2, 3, 7};
    const size_t be = tensor_block_elems(t), bb = tensor_block_bytes(t);
    for (size_t k = 0; k < sizeof nblocks / sizeof *nblocks; k++) {
        const size_t n = be * nblocks[k];
        uint64_t abytes = 0;
        tensor_nbytes(cpu_vec_dot_type(t), n, &abytes);
        const size_t wrb = nblocks[k] * bb + PAD, arb = (size_t)abytes + PAD;
        unsigned char *w = t_xmalloc(ROWS * wrb), *a = t_xmalloc(TOK * arb);
        float *x = t_xmalloc(n * sizeof(float)), *wd = t_xmalloc(n * sizeof(float)), *ad = t_xmalloc(n * sizeof(float));
        for (size_t i = 0; i < ROWS * wrb; i++) w[i] = (unsigned char)rnd();
        int off[2], nf;
        f16_fields(t, off, &nf);
        for (size_t r = 0; r < ROWS; r++)
            for (size_t b = 0; b < nblocks[k]; b++)
                for (int f = 0; f < nf; f++) {
                    uint16_t h = cpu_f32_to_f16(rndf() * 0.05f);
                    memcpy(w + r * wrb + b * bb + off[f], &h, 2);
                }
        for (size_t j = 0; j < TOK; j++) {
            for (size_t i = 0; i < n; i++) x[i] = rndf() * (float)(j + 1);
            cpu_prepare_row(t, x, a + j * arb, n);
        }
        float yr[TOK * ROWS], ys[TOK * ROWS];
        for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa++) {
            cpu_kernels_set_isa((enum cpu_isa)isa);
            cpu_gemm(t, n, w, wrb, 0, ROWS, a, arb, TOK, ys, ROWS);
            cpu_gemm_ref(t, n, w, wrb, 0, ROWS, a, arb, TOK, yr, ROWS);
            for (size_t j = 0; j < TOK; j++) {
                act_dequant(cpu_vec_dot_type(t), a + j * arb, ad, n);
                for (size_t r = 0; r < ROWS; r++) {
                    cpu_dequant_row(t, w + r * wrb, wd, n);
                    double s = 0, sabs = 0;
                    for (size_t i = 0; i < n; i++) s += (double)wd[i] * ad[i], sabs += fabs((double)wd[i] * ad[i]);
                    const float dot = cpu_vec_dot(t, n, w + r * wrb, a + j * arb);
                    const float ref = cpu_vec_dot_ref(t, n, w + r * wrb, a + j * arb);
                    T_CHECK(fabs((double)dot - ref) <= 1e-5 * sabs + 1e-30, "%s %s n=%zu dot %.9g vs ref %.9g", tensor_type_name(t),
                            cpu_isa_name((enum cpu_isa)isa), n, (double)dot, (double)ref);
                    T_CHECK(fabs((double)ys[j * ROWS + r] - dot) <= (double)(n / 32 + 4) * FLT_EPSILON * sabs + 1e-30,
                            "%s %s gemm %g vs dot %g", tensor_type_name(t), cpu_isa_name((enum cpu_isa)isa),
                            (double)ys[j * ROWS + r], (double)dot);
                    T_CHECK(yr[j * ROWS + r] == ref, "%s gemm_ref vs dot_ref", tensor_type_name(t));
                    T_CHECK(fabs((double)ref - s) <= 1e-4 * sabs + 1e-30, "%s n=%zu ref %.9g vs float64 %.9g",
                            tensor_type_name(t), n, (double)ref, s);
                }
            }
        }
        free(w), free(a), free(x), free(wd), free(ad);
    }
}

/* The multi-token GEMM (weight panels of 8 rows x 32 blocks, 64 tokens per chunk, groups of 4)
 * on shapes that cut every one of those: 19 rows sliced to [3, 19), tokens 2..70, 40 blocks of
 * 32 (a partial second block chunk; 70 tokens: a second chunk, a partial group), 46 for the
 * 32-block types (the one-token row loops: 8-block steps, a 4-block step, 2 single blocks).
 * Each result against the scalar reference dot within
 * (blocks + 4) * FLT_EPSILON * S (the panel sums per block in float, the reference per
 * super-block in int32); y outside the slice and past the last token stays untouched. */
#define TG_ROWS 19
#define TG_STRIDE 23
#define TG_TOK 70

static void test_gemm_tiles(enum tensor_type t, enum cpu_isa best)
{
    static const size_t toks[] = {1, 2, 3, 4, 5, 8, 13, 31, 32, 33, 63, 64, 65, 70};
    const size_t be = tensor_block_elems(t), bb = tensor_block_bytes(t), n = (be == 32 ? 46 : 40) * 32, nb = n / be;
    uint64_t abytes = 0;
    tensor_nbytes(cpu_vec_dot_type(t), n, &abytes);
    const size_t wrb = nb * bb + PAD, arb = (size_t)abytes + PAD, r0 = 3, r1 = TG_ROWS;
    unsigned char *w = t_xmalloc(TG_ROWS * wrb), *a = t_xmalloc(TG_TOK * arb);
    float *x = t_xmalloc(n * sizeof(float)), *wd = t_xmalloc(TG_ROWS * n * sizeof(float));
    float *ad = t_xmalloc(TG_TOK * n * sizeof(float)), *y = t_xmalloc(TG_TOK * TG_STRIDE * sizeof(float));
    float *ref = t_xmalloc(TG_TOK * TG_ROWS * sizeof(float));
    double *tol = t_xmalloc(TG_TOK * TG_ROWS * sizeof(double));
    for (size_t i = 0; i < TG_ROWS * wrb; i++) w[i] = (unsigned char)rnd();
    int off[2], nf;
    f16_fields(t, off, &nf);
    for (size_t r = 0; r < TG_ROWS; r++)
        for (size_t b = 0; b < nb; b++)
            for (int f = 0; f < nf; f++) put16(w + r * wrb + b * bb + off[f], cpu_f32_to_f16(rndf() * 0.05f));
    for (size_t r = 0; r < TG_ROWS; r++) cpu_dequant_row(t, w + r * wrb, wd + r * n, n);
    for (size_t j = 0; j < TG_TOK; j++) {
        for (size_t i = 0; i < n; i++) x[i] = rndf() * (float)(j % 5 + 1);
        cpu_prepare_row(t, x, a + j * arb, n);
        act_dequant(cpu_vec_dot_type(t), a + j * arb, ad + j * n, n);
    }
    for (size_t j = 0; j < TG_TOK; j++)
        for (size_t r = 0; r < TG_ROWS; r++) {
            double sabs = 0;
            for (size_t i = 0; i < n; i++) sabs += fabs((double)wd[r * n + i] * ad[j * n + i]);
            ref[j * TG_ROWS + r] = cpu_vec_dot_ref(t, n, w + r * wrb, a + j * arb);
            tol[j * TG_ROWS + r] = (double)(n / 32 + 4) * FLT_EPSILON * sabs + 1e-30;
        }
    cpu_kernels_set_isa(best);
    for (int vi = 0; vi < CPU_N_VARIANTS; vi++) { /* every variant, whatever the dispatcher picks */
        const enum cpu_variant var = (enum cpu_variant)vi;
        for (size_t ti = 0; ti < sizeof toks / sizeof *toks; ti++) {
            const size_t nt = toks[ti];
            if (!cpu_variant_available(cpu_family_of(nt), t, var)) continue;
            for (size_t i = 0; i < TG_TOK * TG_STRIDE; i++) y[i] = -12345.0f;
            cpu_gemm_variant(var, t, n, w, wrb, r0, r1, a, arb, nt, y, TG_STRIDE);
            int errs = 0, stray = 0;
            for (size_t j = 0; j < TG_TOK; j++)
                for (size_t c = 0; c < TG_STRIDE; c++) {
                    const float v = y[j * TG_STRIDE + c];
                    if (j < nt && c >= r0 && c < r1) {
                        const float rf = ref[j * TG_ROWS + c];
                        if (!(fabs((double)v - rf) <= tol[j * TG_ROWS + c]) && errs++ < 3)
                            fprintf(stderr, "  %s %s gemm tok %zu/%zu row %zu: %.9g vs ref %.9g (tol %.3g)\n",
                                    tensor_type_name(t), cpu_variant_name(var), j, nt, c, (double)v,
                                    (double)rf, tol[j * TG_ROWS + c]);
                    } else if (v != -12345.0f) {
                        stray++;
                    }
                }
            T_CHECK(errs == 0, "%s %s gemm n_tok=%zu rows [%zu,%zu): %d wrong", tensor_type_name(t),
                    cpu_variant_name(var), nt, r0, r1, errs);
            T_CHECK(stray == 0, "%s %s gemm n_tok=%zu: %d writes outside", tensor_type_name(t), cpu_variant_name(var),
                    nt, stray);
        }
    }
    free(w), free(a), free(x), free(wd), free(ad), free(y), free(ref), free(tol);
}

/* Q8_K quantization on every ISA gives the scalar's bits: Gaussian-ish rows, a +m/-m tie (the
 * first wins), an all-zero block, NaN and infinity lanes, values that round at .5. */
static void test_q8_k_isa(enum cpu_isa best)
{
    enum { N = 6 * 256 };
    static float x[N];
    static unsigned char want[6 * 292], got[6 * 292];
    for (int i = 0; i < N; i++) x[i] = rndf() * (float)(1 + i % 7);
    x[5] = 9.0f, x[77] = -9.0f;                     /* block 0: tie, +9 first */
    x[256 + 3] = -9.0f, x[256 + 200] = 9.0f;        /* block 1: tie, -9 first */
    for (int i = 512; i < 768; i++) x[i] = 0.0f;    /* block 2: zero */
    x[768 + 10] = NAN;                              /* block 3: NaN skipped by the max */
    x[1024 + 20] = INFINITY;                        /* block 4: inf max */
    for (int i = 1280; i < 1536; i++) x[i] = (float)(i % 255 - 127) * 0.5f; /* block 5: exact .5 products */
    cpu_kernels_set_isa(CPU_ISA_SCALAR);
    cpu_prepare_row(TENSOR_Q4_K, x, want, N);
    for (int isa = CPU_ISA_SCALAR + 1; isa <= (int)best; isa++) {
        cpu_kernels_set_isa((enum cpu_isa)isa);
        memset(got, 0xaa, sizeof got);
        cpu_prepare_row(TENSOR_Q4_K, x, got, N);
        for (int b = 0; b < 6; b++)
            T_CHECK(memcmp(got + 292 * b, want + 292 * b, 292) == 0, "q8_k %s block %d differs from scalar",
                    cpu_isa_name((enum cpu_isa)isa), b);
    }
}

int main(void)
{
    const enum cpu_isa best = cpu_kernels_set_isa(CPU_ISA_AMX);
    fprintf(stderr, "test_quants: ISAs scalar..%s\n", cpu_isa_name(best));
    static const enum tensor_type types[] = {TENSOR_Q4_0, TENSOR_Q4_1, TENSOR_Q5_0, TENSOR_Q5_1, TENSOR_IQ4_NL, TENSOR_Q2_K,
                                             TENSOR_Q3_K, TENSOR_Q4_K, TENSOR_Q5_K, TENSOR_Q6_K, TENSOR_IQ4_XS};
    for (int isa = CPU_ISA_SCALAR; isa <= (int)best; isa++) {
        cpu_kernels_set_isa((enum cpu_isa)isa); /* dequantization is the same on every ISA */
        test_dequant_32();
        test_dequant_q2_q3();
        test_dequant_q4_q5_q6();
        test_dequant_iq4_xs();
        test_q8_k();
    }
    test_q8_k_isa(best);
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        T_CHECK(cpu_type_supported(types[i]), "%s supported", tensor_type_name(types[i]));
        test_simd(types[i], best);
        test_gemm_tiles(types[i], best);
    }
    return t_finish("test_quants");
}
