/* test_kernels.c - CPU kernels: every SIMD ISA this CPU has against the scalar reference and
 * against a float64 reference, for every supported weight type; f16/bf16 conversions; Q8_0
 * quantization; the Q4_0 layout.
 *
 * Tolerances (S = sum |w_i * a_i| over the dequantized values, in double):
 *   float types (F32/F16/BF16):  |got - want| <= 1e-5 * S
 *   Q8_0/Q4_0:  the per-block integer dots are exact, only the float sum of nb = n/32 scaled
 *               block terms differs, so |got - want| <= (nb + 4) * FLT_EPSILON * S
 *   quantize_row_q8_0: every ISA writes the same bytes as the scalar one.
 *   conversions: exact (bit patterns). */
#include "kernels/cpu/cpu_kernels.h"

#include "tests/unit/testutil.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 11
#define MAX_TOK 13
#define Y_STRIDE (ROWS + 6) /* odd, larger than ROWS */
#define W_PAD 7             /* odd byte padding after each weight row: rows are unaligned */
#define A_PAD 5             /* same for activation rows */

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------ */

static uint64_t g_rng = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd_u64(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static double rnd_unit(void) { return (double)(rnd_u64() >> 11) * 0x1.0p-53; }

static float rnd_sym(void) { return (float)(2.0 * rnd_unit() - 1.0); }

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static size_t nbytes(enum tensor_type t, size_t n)
{
    uint64_t b = 0;
    if (tensor_nbytes(t, n, &b) != 0) {
        fprintf(stderr, "tensor_nbytes(%s, %zu) failed\n", tensor_type_name(t), n);
        exit(1);
    }
    return (size_t)b;
}


/* Activations with a different magnitude per 32-block, one all-zero block (d = 0 path). */
static void fill_acts(float *x, size_t n, int tok)
{
    for (size_t i = 0; i < n; i += 32) {
        float scale = (float)pow(10.0, 3.0 * rnd_unit() - 2.0);
        for (size_t k = i; k < i + 32 && k < n; k++) x[k] = rnd_sym() * scale;
        if (tok == 1 && i == 32) memset(x + i, 0, sizeof(float) * (n - i < 32 ? n - i : 32));
    }
}

/* ROWS weight rows of type t, row r at w + r*wrb; the padding bytes are garbage. */
static unsigned char *make_weights(enum tensor_type t, size_t n, size_t wrb)
{
    unsigned char *w = t_xmalloc(ROWS * wrb);
    for (size_t i = 0; i < ROWS * wrb; i++) w[i] = (unsigned char)rnd_u64();
    float *x = t_xmalloc(n * sizeof(float));
    for (size_t r = 0; r < ROWS; r++) {
        unsigned char *row = w + r * wrb;
        if (t == TENSOR_F32 || t == TENSOR_F16 || t == TENSOR_BF16) {
            for (size_t i = 0; i < n; i++) x[i] = rnd_sym() * 0.5f;
            for (size_t i = 0; i < n; i++) {
                if (t == TENSOR_F32) {
                    memcpy(row + 4 * i, &x[i], 4);
                } else {
                    uint16_t h = t == TENSOR_F16 ? cpu_f32_to_f16(x[i]) : cpu_f32_to_bf16(x[i]);
                    memcpy(row + 2 * i, &h, 2);
                }
            }
        } else {
            /* random quants over the whole stored range (Q8_0 includes -128) and random scales */
            size_t bb = t == TENSOR_Q8_0 ? 34 : 18;
            for (size_t b = 0; b < n / 32; b++) {
                uint16_t d = cpu_f32_to_f16((float)(1e-3 + 0.05 * rnd_unit()) * (rnd_u64() & 1 ? 1.0f : -1.0f));
                memcpy(row + b * bb, &d, 2);
            }
        }
    }
    free(x);
    return w;
}

static double dot64(const float *w, const float *a, size_t n, double *sabs)
{
    double s = 0.0, sa = 0.0;
    for (size_t i = 0; i < n; i++) {
        s += (double)w[i] * (double)a[i];
        sa += fabs((double)w[i] * (double)a[i]);
    }
    *sabs = sa;
    return s;
}

/* Q8_0 / Q4_0: float sums per block. F16 / BF16: the AMX tiles multiply bf16 hi + lo splits and
 * drop terms below 2^-16 of each product (kernels_amx.c), so 2^-16 of sum |w a|, which a single
 * product (n = 1) can reach. F32: float summation order. */
static double tolerance(enum tensor_type t, size_t n, double sabs)
{
    if (t == TENSOR_Q8_0 || t == TENSOR_Q4_0) return (double)(n / 32 + 4) * FLT_EPSILON * sabs + 1e-30;
    if (t == TENSOR_F16 || t == TENSOR_BF16) return (0x1p-16 + 1e-6) * sabs + 1e-30; /* + float rounding */
    return 1e-5 * sabs + 1e-30;
}

/* ------------------------------------------------------------------------------------------
 * Dot products and GEMM
 * ------------------------------------------------------------------------------------------ */

static void test_type_size(enum cpu_isa isa, enum tensor_type t, size_t n)
{
    static const size_t toks[] = {1, 2, 3, 4, 5, 7, 8, 13};
    const char *tn = tensor_type_name(t), *in = cpu_isa_name(isa);
    enum tensor_type at = cpu_vec_dot_type(t);
    size_t wrb = nbytes(t, n) + W_PAD, arb = nbytes(at, n) + A_PAD;

    unsigned char *w = make_weights(t, n, wrb);
    unsigned char *a = t_xmalloc(MAX_TOK * arb);
    memset(a, 0xcd, MAX_TOK * arb);
    float *x = t_xmalloc(n * sizeof(float));
    float *wd = t_xmalloc(ROWS * n * sizeof(float));        /* dequantized weights (ROWS, n) */
    float *ad = t_xmalloc(MAX_TOK * n * sizeof(float));     /* dequantized activations (MAX_TOK, n) */
    float *ref = t_xmalloc(MAX_TOK * ROWS * sizeof(float)); /* scalar reference (MAX_TOK, ROWS) */
    double *tol = t_xmalloc(MAX_TOK * ROWS * sizeof(double));
    float *y = t_xmalloc(MAX_TOK * Y_STRIDE * sizeof(float));

    for (size_t j = 0; j < MAX_TOK; j++) {
        fill_acts(x, n, (int)j);
        cpu_prepare_row(t, x, a + j * arb, n);
        if (at == TENSOR_F32)
            memcpy(ad + j * n, x, n * sizeof(float));
        else
            cpu_dequant_row(at, a + j * arb, ad + j * n, n);
    }
    for (size_t r = 0; r < ROWS; r++) cpu_dequant_row(t, w + r * wrb, wd + r * n, n);

    /* vec_dot: SIMD vs scalar reference vs float64 */
    int bad = 0;
    for (size_t j = 0; j < MAX_TOK; j++) {
        for (size_t r = 0; r < ROWS; r++) {
            double sabs, d64 = dot64(wd + r * n, ad + j * n, n, &sabs);
            double tl = tolerance(t, n, sabs);
            float got = cpu_vec_dot(t, n, w + r * wrb, a + j * arb);
            float rf = cpu_vec_dot_ref(t, n, w + r * wrb, a + j * arb);
            ref[j * ROWS + r] = rf;
            tol[j * ROWS + r] = tl;
            if (bad < 5) {
                int ok1 = fabs((double)got - (double)rf) <= tl, ok2 = fabs((double)rf - d64) <= tl;
                int ok3 = fabs((double)got - d64) <= tl;
                T_CHECK(ok1 && ok2 && ok3, "%s %s n=%zu row %zu tok %zu: simd %.9g scalar %.9g f64 %.9g tol %.3g", in,
                        tn, n, r, j, got, rf, d64, tl);
                bad += !(ok1 && ok2 && ok3);
            }
        }
    }

    /* gemm over row slices, odd y stride; elements outside the slice must stay untouched */
    const size_t ranges[2][2] = {{2, ROWS - 2}, {0, ROWS}};
    for (size_t ri = 0; ri < 2; ri++) {
        size_t r0 = ranges[ri][0], r1 = ranges[ri][1];
        for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
            size_t nt = toks[ti];
            /* the reference, the dispatched choice, then every variant the family has here */
            for (int mode = -2; mode < CPU_N_VARIANTS; mode++) {
                const int use_ref = mode == -2;
                const char *vn = mode < 0 ? (use_ref ? "ref" : "chosen") : cpu_variant_name((enum cpu_variant)mode);
                if (mode >= 0 && !cpu_variant_available(cpu_family_of(nt), t, (enum cpu_variant)mode)) continue;
                for (size_t i = 0; i < MAX_TOK * Y_STRIDE; i++) y[i] = -12345.0f;
                if (use_ref)
                    cpu_gemm_ref(t, n, w, wrb, r0, r1, a, arb, nt, y, Y_STRIDE);
                else if (mode == -1)
                    cpu_gemm(t, n, w, wrb, r0, r1, a, arb, nt, y, Y_STRIDE);
                else
                    cpu_gemm_variant((enum cpu_variant)mode, t, n, w, wrb, r0, r1, a, arb, nt, y, Y_STRIDE);
                int errs = 0, stray = 0;
                for (size_t j = 0; j < MAX_TOK; j++) {
                    for (size_t c = 0; c < Y_STRIDE; c++) {
                        float v = y[j * Y_STRIDE + c];
                        if (j < nt && c >= r0 && c < r1) {
                            float rf = ref[j * ROWS + c];
                            /* the reference gemm is the reference dot, element by element */
                            int ok = use_ref ? f32_bits(v) == f32_bits(rf)
                                             : fabs((double)v - (double)rf) <= tol[j * ROWS + c];
                            if (!ok && errs++ < 3)
                                fprintf(stderr, "  %s gemm %s %s n=%zu tok %zu/%zu row %zu: %.9g vs ref %.9g\n", in,
                                        vn, tn, n, j, nt, c, v, rf);
                        } else if (v != -12345.0f) {
                            stray++;
                        }
                    }
                }
                T_CHECK(errs == 0, "%s gemm %s %s n=%zu n_tok=%zu rows [%zu,%zu): %d wrong", in, vn, tn, n, nt, r0, r1,
                        errs);
                T_CHECK(stray == 0, "%s gemm %s %s n=%zu n_tok=%zu: %d writes outside the slice", in, vn, tn, n, nt,
                        stray);
            }
        }
    }
    /* an empty slice writes nothing */
    y[0] = -1.0f;
    cpu_gemm(t, n, w, wrb, 5, 5, a, arb, 3, y, Y_STRIDE);
    cpu_gemm(t, n, w, wrb, 0, ROWS, a, arb, 0, y, Y_STRIDE);
    T_CHECK(y[0] == -1.0f, "%s %s: empty gemm wrote", in, tn);

    free(w);
    free(a);
    free(x);
    free(wd);
    free(ad);
    free(ref);
    free(tol);
    free(y);
}

static void test_dots(enum cpu_isa isa)
{
    static const enum tensor_type types[] = {TENSOR_F32, TENSOR_F16, TENSOR_BF16, TENSOR_Q8_0, TENSOR_Q4_0};
    static const size_t sizes[] = {0, 32, 64, 96, 896, 4864};
    static const size_t odd_sizes[] = {1, 7, 37, 1001, 2051}; /* float types take any n */
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) test_type_size(isa, types[ti], sizes[si]);
        if (cpu_vec_dot_type(types[ti]) == TENSOR_F32)
            for (size_t si = 0; si < sizeof odd_sizes / sizeof odd_sizes[0]; si++)
                test_type_size(isa, types[ti], odd_sizes[si]);
    }
}

/* ------------------------------------------------------------------------------------------
 * Quantization
 * ------------------------------------------------------------------------------------------ */

/* Every ISA writes the scalar bytes; the dequantized error is at most d/2 per element
 * (plus what rounding d to f16 adds: up to 127 * |d16 - d|). */
static void test_quantize_q8_0(enum cpu_isa max_isa)
{
    enum { N = 32 * 40 };
    float *x = t_xmalloc(N * sizeof(float)), *back = t_xmalloc(N * sizeof(float));
    unsigned char *q_ref = t_xmalloc(N / 32 * 34), *q = t_xmalloc(N / 32 * 34);
    for (int round = 0; round < 20; round++) {
        fill_acts(x, N, round);
        if (round == 0) {
            /* special blocks: ties at .5 steps, -0, tiny, huge, subnormal scale */
            for (int k = 0; k < 32; k++) x[64 + k] = (float)(k - 16) * 127.0f / 16.0f / 8.0f + 0.5f;
            x[64] = -127.0f; /* amax 127 -> d = 1: x*id hits exact .5 ties */
            for (int k = 0; k < 32; k++) x[96 + k] = -0.0f;
            for (int k = 0; k < 32; k++) x[128 + k] = rnd_sym() * 1e-41f;
            for (int k = 0; k < 32; k++) x[160 + k] = rnd_sym() * 3e38f;
            for (int k = 0; k < 32; k++) x[192 + k] = rnd_sym() * 1e6f;
        }
        if (round == 1) {
            x[5] = NAN;
            x[40] = INFINITY;
            x[70] = -INFINITY;
            x[100] = -NAN;
            for (int b = 4; b < 36; b++) x[b * 32 + (b - 4)] = (b & 1) ? NAN : -NAN; /* every lane */
        }
        cpu_kernels_set_isa(CPU_ISA_SCALAR);
        cpu_quantize_row_q8_0(x, q_ref, N);
        for (int isa = CPU_ISA_AVX2; isa <= (int)max_isa; isa++) {
            cpu_kernels_set_isa((enum cpu_isa)isa);
            memset(q, 0, N / 32 * 34);
            cpu_quantize_row_q8_0(x, q, N);
            T_CHECK(memcmp(q, q_ref, N / 32 * 34) == 0, "%s quantize_row_q8_0 differs from scalar (round %d)",
                    cpu_isa_name((enum cpu_isa)isa), round);
        }
        if (round == 1) continue; /* inf/NaN blocks have no meaningful error bound */
        cpu_dequant_row(TENSOR_Q8_0, q_ref, back, N);
        int errs = 0;
        for (int b = 0; b < N / 32; b++) {
            double amax = 0.0;
            for (int k = 0; k < 32; k++) amax = fmax(amax, fabs((double)x[b * 32 + k]));
            float dexact = (float)amax / 127.0f;
            uint16_t h;
            memcpy(&h, q_ref + b * 34, 2);
            double d16 = cpu_f16_to_f32(h);
            T_CHECK(h == cpu_f32_to_f16(dexact), "block %d: stored scale %#x, want f16(%g)", b, h, dexact);
            double bound = d16 / 2.0 + 127.0 * fabs(d16 - dexact) + 1e-6 * amax;
            if (d16 == 0.0 && dexact != 0.0) bound = amax; /* d underflowed f16: everything is 0 */
            for (int k = 0; k < 32; k++) {
                int8_t qk = (int8_t)q_ref[b * 34 + 2 + k];
                double e = fabs((double)x[b * 32 + k] - (double)back[b * 32 + k]);
                if ((e > bound || qk < -127) && errs++ < 3)
                    fprintf(stderr, "  q8_0 block %d elem %d: x %.9g back %.9g q %d (d %.9g)\n", b, k, x[b * 32 + k],
                            back[b * 32 + k], qk, d16);
            }
        }
        T_CHECK(errs == 0, "quantize_row_q8_0 round %d: %d elements off by more than d/2", round, errs);
    }
    /* a hand-made block: amax = 127 gives d = 1, so q = round-to-nearest-even(x) */
    float hx[32];
    for (int k = 0; k < 32; k++) hx[k] = (float)k - 15.5f;
    hx[31] = 127.0f;
    for (int isa = 0; isa <= (int)max_isa; isa++) {
        cpu_kernels_set_isa((enum cpu_isa)isa);
        cpu_quantize_row_q8_0(hx, q, 32);
        uint16_t h;
        memcpy(&h, q, 2);
        T_CHECK(h == 0x3c00, "%s: d of amax 127 is %#x", cpu_isa_name((enum cpu_isa)isa), h);
        int ok = 1;
        for (int k = 0; k < 31; k++) ok &= (int8_t)q[2 + k] == (int)nearbyint(hx[k]);
        T_CHECK(ok && (int8_t)q[33] == 127, "%s: q8_0 ties do not round to even", cpu_isa_name((enum cpu_isa)isa));
    }
    free(x);
    free(back);
    free(q_ref);
    free(q);
}

/* Hand-built Q4_0 block: qs[j] low nibble = element j, high nibble = element j+16, w = d*(nib-8). */
static void test_q4_0_layout(enum cpu_isa max_isa)
{
    unsigned char blk[18];
    uint16_t d = 0x3800; /* 0.5 */
    memcpy(blk, &d, 2);
    for (int j = 0; j < 16; j++) blk[2 + j] = (unsigned char)(j | ((15 - j) << 4));
    float w[32];
    cpu_dequant_row(TENSOR_Q4_0, blk, w, 32);
    int ok = 1;
    for (int j = 0; j < 16; j++) {
        ok &= w[j] == 0.5f * (float)(j - 8);
        ok &= w[j + 16] == 0.5f * (float)(15 - j - 8);
    }
    T_CHECK(ok, "q4_0 dequant layout");

    /* the dot sees the same layout on every ISA: one-hot activations pick single elements */
    unsigned char a[34];
    for (int e = 0; e < 32; e++) {
        float x[32] = {0};
        x[e] = 1.0f; /* quantizes to q = 127, d = f16(1/127) */
        for (int isa = 0; isa <= (int)max_isa; isa++) {
            cpu_kernels_set_isa((enum cpu_isa)isa);
            cpu_prepare_row(TENSOR_Q4_0, x, a, 32);
            uint16_t ha;
            memcpy(&ha, a, 2);
            float want = (float)(w[e] * 127.0) * cpu_f16_to_f32(ha);
            float got = cpu_vec_dot(TENSOR_Q4_0, 32, blk, a);
            T_CHECK(fabsf(got - want) <= 1e-6f * fabsf(want) + 1e-30f, "%s q4_0 dot picks element %d: %g want %g",
                    cpu_isa_name((enum cpu_isa)isa), e, got, want);
        }
    }

    /* quantize_row_q4_0: the largest-magnitude element maps to nibble 0 (d = m / -8) */
    float x[64];
    for (int k = 0; k < 64; k++) x[k] = rnd_sym();
    x[7] = -3.0f;  /* block 0: m = -3, d = 0.375 */
    x[56] = 2.0f;  /* block 1 element 24 (high nibble of qs[8]): m = 2, d = -0.25 */
    unsigned char q[36];
    float back[64];
    cpu_quantize_row_q4_0(x, q, 64);
    cpu_dequant_row(TENSOR_Q4_0, q, back, 64);
    T_CHECK((q[2 + 7] & 0x0f) == 0 && back[7] == -3.0f, "q4_0 max element: nibble %d back %g", q[2 + 7] & 0x0f,
            back[7]);
    T_CHECK((q[18 + 2 + 8] >> 4) == 0 && back[56] == 2.0f, "q4_0 max element (high nibble): back %g", back[56]);
    int errs = 0;
    for (int k = 0; k < 64; k++) {
        uint16_t h;
        memcpy(&h, q + (k / 32) * 18, 2);
        if (fabs((double)x[k] - back[k]) > fabs(cpu_f16_to_f32(h)) / 2.0 + 1e-6) errs++;
    }
    T_CHECK(errs == 0, "q4_0 round trip: %d elements off by more than |d|/2", errs);
}

/* ------------------------------------------------------------------------------------------
 * Conversions
 * ------------------------------------------------------------------------------------------ */

static void test_f16_constants(void)
{
    static const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {65504.0f, 0x7bff},
        {65519.0f, 0x7bff},                 /* below the midpoint to 65536 */
        {65520.0f, 0x7c00},                 /* midpoint, odd mantissa: rounds up to inf */
        {1e10f, 0x7c00},
        {-1e10f, 0xfc00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {0.1f, 0x2e66},
        {1e-8f, 0x0000},                    /* below 2^-25: flushes to zero */
        {0x1p-25f, 0x0000},                 /* exact tie between 0 and 2^-24: even */
        {0x1.000002p-25f, 0x0001},          /* just above the tie */
        {0x1p-24f, 0x0001},                 /* smallest subnormal */
        {0x1.8p-24f, 0x0002},               /* tie 1.5 -> 2 */
        {0x1.4p-23f, 0x0002},               /* 2.5 ulp -> 2 */
        {0x1.ff8p-15f, 0x03ff},             /* largest subnormal */
        {0x1.ffcp-15f, 0x0400},             /* rounds up into the smallest normal */
        {0x1p-14f, 0x0400},
        {1.0f + 0x1p-11f, 0x3c00},          /* tie, even stays */
        {1.0f + 0x1.8p-10f, 0x3c02},        /* tie, odd rounds up */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01},
        {-1.0f - 0x1p-11f - 0x1p-20f, 0xbc01},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = cpu_f32_to_f16(cases[i].f);
        T_CHECK(h == cases[i].h, "f32_to_f16(%a) = %#06x, want %#06x", cases[i].f, h, cases[i].h);
    }
    T_CHECK(cpu_f16_to_f32(0x3c00) == 1.0f && cpu_f16_to_f32(0x7bff) == 65504.0f, "f16 normals");
    T_CHECK(cpu_f16_to_f32(0x0001) == 0x1p-24f && cpu_f16_to_f32(0x83ff) == -0x1.ff8p-15f, "f16 subnormals");
    T_CHECK(isinf(cpu_f16_to_f32(0x7c00)) && cpu_f16_to_f32(0xfc00) < 0, "f16 inf");
    T_CHECK(f32_bits(cpu_f16_to_f32(0x8000)) == 0x80000000u, "f16 -0");
    uint16_t hn = cpu_f32_to_f16(NAN);
    T_CHECK((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0, "NaN -> f16 %#x is not NaN", hn);
    T_CHECK(isnan(cpu_f16_to_f32(0x7e00)) && isnan(cpu_f16_to_f32(0x7c01)) && isnan(cpu_f16_to_f32(0xfc01)),
            "f16 NaN -> f32 NaN");
    T_CHECK((cpu_f32_to_f16(bits_f32(0x7f800001u)) & 0x3ff) != 0, "f32 sNaN with a low payload stays NaN");

    /* every f16 round-trips exactly (NaNs come back as NaN) */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cpu_f16_to_f32((uint16_t)h);
        uint16_t back = cpu_f32_to_f16(f);
        int is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (is_nan ? !(isnan(f) && (back & 0x7c00) == 0x7c00 && (back & 0x3ff)) : back != h) bad++;
    }
    T_CHECK(bad == 0, "f16 round trip: %d values", bad);

    /* random floats: the result is a nearest f16, ties to even (checked against both neighbours) */
    bad = 0;
    for (int i = 0; i < 400000; i++) {
        uint32_t u = (uint32_t)rnd_u64();
        if (i & 1) u = (u & 0x8fffffffu) | 0x30000000u; /* bias half the draws into the f16 range */
        float f = bits_f32(u);
        if (isnan(f) || fabsf(f) >= 65520.0f) continue;
        uint16_t h = cpu_f32_to_f16(f);
        uint16_t mag = h & 0x7fff, sign = h & 0x8000;
        double x = f, e = fabs(x - cpu_f16_to_f32(h));
        int ok = mag <= 0x7bff;
        if (mag > 0) ok &= e <= fabs(x - cpu_f16_to_f32((uint16_t)(sign | (mag - 1))));
        if (mag < 0x7bff) ok &= e <= fabs(x - cpu_f16_to_f32((uint16_t)(sign | (mag + 1))));
        if (mag > 0 && e == fabs(x - cpu_f16_to_f32((uint16_t)(sign | (mag - 1))))) ok &= !(h & 1);
        if (mag < 0x7bff && e == fabs(x - cpu_f16_to_f32((uint16_t)(sign | (mag + 1))))) ok &= !(h & 1);
        if (!ok && bad++ < 3) fprintf(stderr, "  f32_to_f16(%a) = %#06x is not the nearest even\n", f, h);
    }
    T_CHECK(bad == 0, "f32_to_f16 nearest-even: %d values", bad);
}

static void test_bf16(void)
{
    T_CHECK(cpu_f32_to_bf16(1.0f) == 0x3f80, "bf16 1.0");
    T_CHECK(cpu_f32_to_bf16(bits_f32(0x3f808000u)) == 0x3f80, "bf16 tie, even stays");
    T_CHECK(cpu_f32_to_bf16(bits_f32(0x3f818000u)) == 0x3f82, "bf16 tie, odd rounds up");
    T_CHECK(cpu_f32_to_bf16(bits_f32(0x3f808001u)) == 0x3f81, "bf16 above tie");
    T_CHECK(cpu_f32_to_bf16(bits_f32(0xbf807fffu)) == 0xbf80, "bf16 below tie, negative");
    T_CHECK(cpu_f32_to_bf16(INFINITY) == 0x7f80 && cpu_f32_to_bf16(-INFINITY) == 0xff80, "bf16 inf");
    T_CHECK(cpu_f32_to_bf16(FLT_MAX) == 0x7f80, "bf16 FLT_MAX rounds to inf");
    uint16_t n1 = cpu_f32_to_bf16(bits_f32(0x7f800001u)), n2 = cpu_f32_to_bf16(NAN);
    T_CHECK((n1 & 0x7f80) == 0x7f80 && (n1 & 0x7f) && (n2 & 0x7f80) == 0x7f80 && (n2 & 0x7f), "bf16 NaN stays NaN");
    T_CHECK(cpu_bf16_to_f32(0x3f80) == 1.0f && cpu_bf16_to_f32(0xc000) == -2.0f, "bf16 -> f32");
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cpu_bf16_to_f32((uint16_t)h);
        uint16_t back = cpu_f32_to_bf16(f);
        if (isnan(f) ? !isnan(cpu_bf16_to_f32(back)) : back != h) bad++;
    }
    T_CHECK(bad == 0, "bf16 round trip: %d values", bad);
}

/* The SwiGLU gate against its scalar reference on every ISA: lengths 0..40 (tails) and 4864, gate
 * values from -100 to 100 (e^-g past the float range both ways), zeros, NaN kept NaN. */
/* x += y: every ISA's sums are the scalar loop's, bit for bit, on lengths around the vector widths. */
static void test_add_row(enum cpu_isa max_isa)
{
    enum { N = 4864 };
    float *x = t_xmalloc(N * sizeof(float)), *y = t_xmalloc(N * sizeof(float));
    float *got = t_xmalloc(N * sizeof(float)), *ref = t_xmalloc(N * sizeof(float));
    for (size_t i = 0; i < N; i++) {
        x[i] = (float)((double)(rnd_u64() % 2000001) / 1e3 - 1e3);
        y[i] = (float)((double)(rnd_u64() % 2000001) / 1e6 - 1.0);
    }
    x[3] = INFINITY, y[4] = NAN;
    for (int isa = 0; isa <= (int)max_isa; isa++) {
        cpu_kernels_set_isa((enum cpu_isa)isa);
        int bad = 0;
        for (size_t n = 0; n <= 41; n++) {
            const size_t len = n <= 40 ? n : N;
            memcpy(got, x, len * sizeof(float));
            memcpy(ref, x, len * sizeof(float));
            cpu_add_row(got, y, len);
            cpu_add_row_ref(ref, y, len);
            bad += memcmp(got, ref, len * sizeof(float)) != 0;
        }
        T_CHECK(bad == 0, "%s add_row: %d lengths differ from the scalar sums", cpu_isa_name((enum cpu_isa)isa), bad);
    }
    free(x), free(y), free(got), free(ref);
}

static void test_swiglu(enum cpu_isa max_isa)
{
    enum { N = 4864 };
    float *g = t_xmalloc(N * sizeof(float)), *u = t_xmalloc(N * sizeof(float));
    float *got = t_xmalloc(N * sizeof(float)), *ref = t_xmalloc(N * sizeof(float));
    for (size_t i = 0; i < N; i++) {
        const double r = (double)(rnd_u64() % 2000001) / 1e6 - 1.0; /* [-1, 1] */
        g[i] = (float)(i % 7 == 0 ? 100.0 * r : 8.0 * r);
        u[i] = (float)(rnd_u64() % 2001) / 1000.0f - 1.0f;
    }
    g[5] = 0.0f, g[6] = -0.0f, g[9] = NAN, g[10] = 88.5f, g[11] = -88.5f;
    for (int isa = 0; isa <= (int)max_isa; isa++) {
        cpu_kernels_set_isa((enum cpu_isa)isa);
        int bad = 0;
        for (size_t n = 0; n <= 41; n++) {
            const size_t len = n <= 40 ? n : N;
            memcpy(got, g, len * sizeof(float));
            memcpy(ref, g, len * sizeof(float));
            cpu_swiglu_row(got, u, len);
            cpu_swiglu_row_ref(ref, u, len);
            for (size_t i = 0; i < len; i++) {
                const int ok = isnan(ref[i]) ? isnan(got[i])
                                              : fabs((double)got[i] - (double)ref[i]) <= 1e-6 * fabs((double)ref[i]) + 1e-30;
                if (!ok && bad++ < 3)
                    fprintf(stderr, "  %s swiglu len %zu [%zu]: g %g u %g: %.9g vs ref %.9g\n",
                            cpu_isa_name((enum cpu_isa)isa), len, i, g[i], u[i], got[i], ref[i]);
            }
        }
        T_CHECK(bad == 0, "%s swiglu_row: %d values off the reference", cpu_isa_name((enum cpu_isa)isa), bad);
    }
    float one = 2.0f, uu = 3.0f; /* silu(2) * 3 = 2 / (1 + e^-2) * 3 */
    cpu_swiglu_row_ref(&one, &uu, 1);
    T_CHECK(fabs(one - 6.0 / (1.0 + exp(-2.0))) < 1e-6, "swiglu reference: %g", one);
    free(g), free(u), free(got), free(ref);
}

/* RMSNorm against its scalar reference on every ISA: lengths 0..40 and 896, in place and not; the
 * SIMD sums of squares in double differ only in order, so the outputs agree within 2 float ulps. */
static void test_rmsnorm(enum cpu_isa max_isa)
{
    enum { N = 896 };
    float x[N], w[N], got[N], ref[N];
    for (size_t i = 0; i < N; i++) {
        x[i] = (float)(rnd_u64() % 20001) / 1000.0f - 10.0f;
        w[i] = (float)(rnd_u64() % 2001) / 1000.0f;
    }
    for (int isa = 0; isa <= (int)max_isa; isa++) {
        cpu_kernels_set_isa((enum cpu_isa)isa);
        int bad = 0;
        for (size_t k = 0; k <= 41; k++) {
            const size_t len = k <= 40 ? k : N;
            cpu_rmsnorm_row_ref(ref, x, w, len, 1e-6f);
            cpu_rmsnorm_row(got, x, w, len, 1e-6f);
            for (size_t i = 0; i < len; i++) bad += !(fabs((double)got[i] - (double)ref[i]) <= 2.5e-7 * fabs((double)ref[i]));
            memcpy(got, x, len * sizeof(float));
            cpu_rmsnorm_row(got, got, w, len, 1e-6f); /* in place */
            for (size_t i = 0; i < len; i++) bad += !(fabs((double)got[i] - (double)ref[i]) <= 2.5e-7 * fabs((double)ref[i]));
        }
        T_CHECK(bad == 0, "%s rmsnorm_row: %d values off the reference", cpu_isa_name((enum cpu_isa)isa), bad);
    }
    const float one[2] = {3.0f, -4.0f}, wt[2] = {1.0f, 2.0f}; /* mean square 12.5 */
    float o[2];
    cpu_rmsnorm_row_ref(o, one, wt, 2, 0.0f);
    T_CHECK(fabs(o[0] - 3.0 / sqrt(12.5)) < 1e-6 && fabs(o[1] + 8.0 / sqrt(12.5)) < 1e-6, "rmsnorm reference");
}

/* argmax and find_nonfinite equal their scalar references on every ISA: rows of every length up to
 * 70 and a vocabulary's, with the maximum or a NaN / infinity at the start, in the middle, in the
 * tail or nowhere, ties (the lowest index wins), NaNs around the maximum, and rows all -inf / NaN. */
static void test_scans(enum cpu_isa max_isa)
{
    enum { V = 151936 };
    float *x = t_xmalloc(V * sizeof(float));
    const float specials[] = {NAN, INFINITY, -INFINITY};
    for (int isa = 0; isa <= (int)max_isa; isa++) {
        cpu_kernels_set_isa((enum cpu_isa)isa);
        const char *in = cpu_isa_name((enum cpu_isa)isa);
        int bad = 0;
        for (int trial = 0; trial < 400; trial++) {
            const size_t n = trial < 300 ? (size_t)(trial % 71) : (size_t)V - (size_t)(trial % 3);
            for (size_t i = 0; i < n; i++) x[i] = (float)(rnd_u64() % 2001) / 100.0f - 10.0f; /* ties likely */
            switch (trial % 6) {
            case 1: /* a special value somewhere */
                if (n) x[rnd_u64() % n] = specials[rnd_u64() % 3];
                break;
            case 2: /* several NaNs and a maximum */
                for (int k = 0; k < 3 && n; k++) x[rnd_u64() % n] = NAN;
                if (n) x[rnd_u64() % n] = 50.0f;
                break;
            case 3: /* the first or the last is special */
                if (n) x[trial % 2 ? 0 : n - 1] = specials[trial % 3];
                break;
            case 4: /* all -inf or NaN */
                for (size_t i = 0; i < n; i++) x[i] = i % 2 ? NAN : -INFINITY;
                break;
            case 5: /* a row of one value */
                for (size_t i = 0; i < n; i++) x[i] = 1.5f;
                break;
            default: break;
            }
            const size_t a = cpu_argmax(x, n), ar = cpu_argmax_ref(x, n);
            const size_t f = cpu_find_nonfinite(x, n), fr = cpu_find_nonfinite_ref(x, n);
            if ((a != ar || f != fr) && bad++ < 3)
                fprintf(stderr, "  %s n=%zu trial %d: argmax %zu (ref %zu), nonfinite %zu (ref %zu)\n", in, n, trial, a,
                        ar, f, fr);
        }
        T_CHECK(bad == 0, "%s argmax / find_nonfinite: %d rows differ from the scalar reference", in, bad);
    }
    /* the references themselves, on rows whose answers are known */
    const float r1[] = {1.0f, NAN, 3.0f, 3.0f, -INFINITY};
    T_CHECK(cpu_argmax_ref(r1, 5) == 2 && cpu_find_nonfinite_ref(r1, 5) == 1, "reference scans");
    const float r2[] = {-INFINITY, NAN};
    T_CHECK(cpu_argmax_ref(r2, 2) == 2 && cpu_argmax_ref(r2, 0) == 0 && cpu_find_nonfinite_ref(r1, 1) == 1,
            "reference scans: nothing above -inf, empty rows, all finite");
    free(x);
}

/* The dispatched row conversions give the scalar bits on every ISA (NaNs included). */
static void test_rows(enum cpu_isa max_isa)
{
    enum { N = 65536 + 13 };
    uint16_t *h = t_xmalloc(N * 2), *h2 = t_xmalloc(N * 2), *href = t_xmalloc(N * 2);
    float *f = t_xmalloc(N * 4), *fref = t_xmalloc(N * 4);
    for (uint32_t i = 0; i < N; i++) h[i] = (uint16_t)(i < 65536 ? i : rnd_u64());
    for (uint32_t i = 0; i < N; i++) f[i] = bits_f32(i & 1 ? (uint32_t)rnd_u64() : ((uint32_t)rnd_u64() & 0x8fffffffu) | 0x30000000u);
    for (int isa = 0; isa <= (int)max_isa; isa++) {
        cpu_kernels_set_isa((enum cpu_isa)isa);
        const char *in = cpu_isa_name((enum cpu_isa)isa);
        for (size_t len = 0; len <= 37; len++) {
            /* short lengths exercise the tails */
            cpu_f16_to_f32_row(h + 100, fref, len);
            int ok = 1;
            for (size_t i = 0; i < len; i++) ok &= f32_bits(fref[i]) == f32_bits(cpu_f16_to_f32(h[100 + i]));
            T_CHECK(ok, "%s f16_to_f32_row len %zu", in, len);
        }
        cpu_f16_to_f32_row(h, fref, N);
        int bad = 0;
        for (size_t i = 0; i < N; i++) bad += f32_bits(fref[i]) != f32_bits(cpu_f16_to_f32(h[i]));
        T_CHECK(bad == 0, "%s f16_to_f32_row: %d differ from cpu_f16_to_f32", in, bad);
        cpu_f32_to_f16_row(f + 1, h2, N - 1);
        bad = 0;
        for (size_t i = 0; i + 1 < N; i++) {
            href[i] = cpu_f32_to_f16(f[i + 1]);
            if (h2[i] != href[i] && bad++ < 3)
                fprintf(stderr, "  %s f32_to_f16_row(%a) = %#x, scalar %#x\n", in, f[i + 1], h2[i], href[i]);
        }
        T_CHECK(bad == 0, "%s f32_to_f16_row: %d differ from cpu_f32_to_f16", in, bad);
    }
    free(h);
    free(h2);
    free(href);
    free(f);
    free(fref);
}

/* Every variant of every type on a wide slice: 37 rows sliced to [3, 37) (full 16-row panels and
 * a partial one), 1..140 tokens (crossing the float panel's 6-token groups and its 132-token
 * pass), 300 elements (two 128-element chunks and a tail) and, for F32 and F16, 2336 (three evenly
 * cut chunks of the AVX-512 outer GEMM, 19 of the AVX2 panel's); the quantized types on 288 (9 blocks: an
 * odd count for the AMX pairs of blocks) and 2336 (73 blocks: a second K chunk of the AMX panels,
 * summed onto the first). Against the reference gemm within the float-ordering bound; nothing
 * written outside the slice or past the last token. */
static void test_wide_gemm(void)
{
    enum { WR = 37, WN = 2336, WT = 140, WS = 41 };
    static const size_t toks[] = {1, 2, 6, 7, 12, 31, 33, 64, 131, 132, 133, 140};
    static const struct {
        enum tensor_type t;
        size_t n;
    } cases[] = {{TENSOR_F32, 300},   {TENSOR_F32, 2336},  {TENSOR_F16, 300},  {TENSOR_F16, 2336},
                 {TENSOR_BF16, 300},  {TENSOR_Q8_0, 288},  {TENSOR_Q8_0, 2336}, {TENSOR_Q4_0, 288},
                 {TENSOR_Q4_0, 2336}};
    const size_t r0 = 3, r1 = WR;
    float *x = t_xmalloc(WN * sizeof(float)), *y = t_xmalloc((size_t)WT * WS * sizeof(float));
    float *ref = t_xmalloc((size_t)WT * WS * sizeof(float)), *wd = t_xmalloc((size_t)WR * WN * sizeof(float));
    float *ad = t_xmalloc((size_t)WT * WN * sizeof(float));
    for (size_t ti = 0; ti < sizeof cases / sizeof *cases; ti++) {
        const enum tensor_type t = cases[ti].t, at = cpu_vec_dot_type(t);
        const size_t n = cases[ti].n;
        const size_t wrb = nbytes(t, n) + W_PAD, arb = nbytes(at, n) + A_PAD;
        unsigned char *w = t_xmalloc(WR * wrb), *a = t_xmalloc(WT * arb);
        for (size_t r = 0; r < WR; r++) {
            for (size_t i = 0; i < n; i++) x[i] = rnd_sym() * 0.5f;
            if (t == TENSOR_F32) memcpy(w + r * wrb, x, n * sizeof(float));
            else if (t == TENSOR_Q8_0) cpu_quantize_row_q8_0(x, w + r * wrb, n);
            else if (t == TENSOR_Q4_0) cpu_quantize_row_q4_0(x, w + r * wrb, n);
            else
                for (size_t i = 0; i < n; i++) {
                    const uint16_t h = t == TENSOR_F16 ? cpu_f32_to_f16(x[i]) : cpu_f32_to_bf16(x[i]);
                    memcpy(w + r * wrb + 2 * i, &h, 2);
                }
            cpu_dequant_row(t, w + r * wrb, wd + r * n, n);
        }
        for (size_t j = 0; j < WT; j++) {
            fill_acts(x, n, (int)j);
            cpu_prepare_row(t, x, a + j * arb, n);
            if (at == TENSOR_F32) memcpy(ad + j * n, x, n * sizeof(float));
            else cpu_dequant_row(at, a + j * arb, ad + j * n, n);
        }
        cpu_gemm_ref(t, n, w, wrb, r0, r1, a, arb, WT, ref, WS);
        for (int vi = 0; vi < CPU_N_VARIANTS; vi++) {
            for (size_t k = 0; k < sizeof toks / sizeof *toks; k++) {
                const size_t nt = toks[k];
                if (vi == CPU_VAR_SCALAR || !cpu_variant_available(cpu_family_of(nt), t, (enum cpu_variant)vi)) continue;
                for (size_t i = 0; i < (size_t)WT * WS; i++) y[i] = -12345.0f;
                cpu_gemm_variant((enum cpu_variant)vi, t, n, w, wrb, r0, r1, a, arb, nt, y, WS);
                int errs = 0, stray = 0;
                for (size_t j = 0; j < WT; j++)
                    for (size_t c = 0; c < WS; c++) {
                        const float v = y[j * WS + c];
                        if (j < nt && c >= r0 && c < r1) {
                            double sabs;
                            (void)dot64(wd + c * n, ad + j * n, n, &sabs);
                            if (!(fabs((double)v - ref[j * WS + c]) <= tolerance(t, n, sabs)) && errs++ < 3)
                                fprintf(stderr, "  wide %s %s tok %zu/%zu row %zu: %.9g vs %.9g\n", tensor_type_name(t),
                                        cpu_variant_name((enum cpu_variant)vi), j, nt, c, v, ref[j * WS + c]);
                        } else if (v != -12345.0f) {
                            stray++;
                        }
                    }
                T_CHECK(errs == 0 && stray == 0, "wide gemm %s %s n=%zu n_tok=%zu: %d wrong, %d stray",
                        tensor_type_name(t), cpu_variant_name((enum cpu_variant)vi), n, nt, errs, stray);
            }
        }
        free(w), free(a);
    }
    free(x), free(y), free(ref), free(wd), free(ad);
}

/* Rows longer than the AMX small-batch path packs at once (1024 blocks): 1032 blocks of Q8_0 and
 * Q4_0, 16 rows (a full panel), 2, 8 and 16 tokens; the second pass is summed onto the first.
 * Against the reference gemm. */
static void test_amx_long_rows(void)
{
    enum { LR = 16, LN = 1032 * 32, LT = 16 };
    if (!cpu_variant_available(CPU_FAM_BATCH, TENSOR_Q8_0, CPU_VAR_AMX)) return;
    static const enum tensor_type types[] = {TENSOR_Q8_0, TENSOR_Q4_0};
    static const size_t toks[] = {2, 8, 16};
    float *x = t_xmalloc(LN * sizeof(float)), *y = t_xmalloc(LT * LR * sizeof(float));
    float *ref = t_xmalloc(LT * LR * sizeof(float)), *wd = t_xmalloc((size_t)LR * LN * sizeof(float));
    float *ad = t_xmalloc((size_t)LT * LN * sizeof(float));
    for (size_t ti = 0; ti < 2; ti++) {
        const enum tensor_type t = types[ti];
        const size_t wrb = nbytes(t, LN), arb = nbytes(TENSOR_Q8_0, LN);
        unsigned char *w = t_xmalloc(LR * wrb), *a = t_xmalloc(LT * arb);
        for (size_t r = 0; r < LR; r++) {
            for (size_t i = 0; i < LN; i++) x[i] = rnd_sym() * 0.5f;
            if (t == TENSOR_Q8_0) cpu_quantize_row_q8_0(x, w + r * wrb, LN);
            else cpu_quantize_row_q4_0(x, w + r * wrb, LN);
            cpu_dequant_row(t, w + r * wrb, wd + r * LN, LN);
        }
        for (size_t j = 0; j < LT; j++) {
            fill_acts(x, LN, (int)j);
            cpu_prepare_row(t, x, a + j * arb, LN);
            cpu_dequant_row(TENSOR_Q8_0, a + j * arb, ad + j * LN, LN);
        }
        cpu_gemm_ref(t, LN, w, wrb, 0, LR, a, arb, LT, ref, LR);
        for (size_t k = 0; k < sizeof toks / sizeof *toks; k++) {
            cpu_gemm_variant(CPU_VAR_AMX, t, LN, w, wrb, 0, LR, a, arb, toks[k], y, LR);
            int bad = 0;
            for (size_t j = 0; j < toks[k]; j++)
                for (size_t r = 0; r < LR; r++) {
                    double sabs;
                    (void)dot64(wd + r * LN, ad + j * LN, LN, &sabs);
                    bad += !(fabs((double)y[j * LR + r] - ref[j * LR + r]) <= tolerance(t, LN, sabs));
                }
            T_CHECK(bad == 0, "amx %s rows of %d weights, %zu tokens: %d off the reference", tensor_type_name(t), LN,
                    toks[k], bad);
        }
        free(w), free(a);
    }
    free(x), free(y), free(ref), free(wd), free(ad);
}

/* ------------------------------------------------------------------------------------------
 * Dispatch and type table
 * ------------------------------------------------------------------------------------------ */

static void test_types(void)
{
    T_CHECK(cpu_type_supported(TENSOR_F32) && cpu_type_supported(TENSOR_F16) && cpu_type_supported(TENSOR_BF16) &&
                cpu_type_supported(TENSOR_Q8_0) && cpu_type_supported(TENSOR_Q4_0),
            "supported types");
    /* the K-quants, IQ4 and Q4_1/Q5_x are tested in test_quants.c */
    T_CHECK(cpu_type_supported(TENSOR_Q4_K) && cpu_type_supported(TENSOR_Q4_1) && cpu_vec_dot_type(TENSOR_Q4_K) == TENSOR_Q8_K &&
                cpu_vec_dot_type(TENSOR_Q4_1) == TENSOR_Q8_0,
            "quants.c types");
    T_CHECK(!cpu_type_supported(TENSOR_Q8_K) && !cpu_type_supported(TENSOR_Q8_1) && !cpu_type_supported(TENSOR_I32),
            "unsupported types");
    T_CHECK(cpu_vec_dot_type(TENSOR_F16) == TENSOR_F32 && cpu_vec_dot_type(TENSOR_BF16) == TENSOR_F32 &&
                cpu_vec_dot_type(TENSOR_F32) == TENSOR_F32,
            "float types take f32 activations");
    T_CHECK(cpu_vec_dot_type(TENSOR_Q8_0) == TENSOR_Q8_0 && cpu_vec_dot_type(TENSOR_Q4_0) == TENSOR_Q8_0,
            "quant types take q8_0 activations");
    float x[5] = {1, 2, 3, 4, 5}, y[5] = {0};
    cpu_prepare_row(TENSOR_F16, x, y, 5);
    T_CHECK(memcmp(x, y, sizeof x) == 0, "prepare_row copies f32");
    cpu_prepare_row(TENSOR_F32, x, x, 5);
    T_CHECK(x[4] == 5.0f, "prepare_row in place");
}

int main(void)
{
    /* the $ATTND_ISA cap applies at the first init; cpu_kernels_set_isa may go above it */
    setenv("ATTND_ISA", "scalar", 1);
    enum cpu_isa first = cpu_kernels_init();
    T_CHECK(first == CPU_ISA_SCALAR, "ATTND_ISA=scalar gave %s", cpu_isa_name(first));
    T_CHECK(cpu_kernels_init() == CPU_ISA_SCALAR, "second init changes nothing");
    enum cpu_isa max_isa = cpu_kernels_set_isa(CPU_ISA_AMX);
    T_CHECK(cpu_kernels_set_isa((enum cpu_isa)99) == max_isa, "set_isa caps at the CPU");
    fprintf(stderr, "test_kernels: cpu supports up to %s\n", cpu_isa_name(max_isa));
    T_CHECK(!strcmp(cpu_isa_name(CPU_ISA_AVX2), "avx2") && !strcmp(cpu_isa_name((enum cpu_isa)7), "unknown"),
            "isa names");

    test_types();
    test_f16_constants();
    test_bf16();
    test_rows(max_isa);
    test_scans(max_isa);
    test_swiglu(max_isa);
    test_add_row(max_isa);
    test_rmsnorm(max_isa);
    test_quantize_q8_0(max_isa);
    test_q4_0_layout(max_isa);
    for (int isa = 0; isa <= (int)max_isa; isa++) {
        T_CHECK(cpu_kernels_set_isa((enum cpu_isa)isa) == (enum cpu_isa)isa, "set_isa(%d)", isa);
        test_dots((enum cpu_isa)isa);
    }
    cpu_kernels_set_isa(max_isa);
    test_wide_gemm();
    test_amx_long_rows();
    if (max_isa < CPU_ISA_AVX512) fprintf(stderr, "test_kernels: avx512 not on this cpu, not run\n");
    if (max_isa < CPU_ISA_AMX) fprintf(stderr, "test_kernels: amx not on this cpu, not run\n");
    return t_finish("test_kernels");
}
