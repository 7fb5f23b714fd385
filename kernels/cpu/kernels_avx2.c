/* kernels_avx2.c - AVX2 + FMA + F16C kernels. Built with -mavx2 -mfma -mf16c (the Makefile
 * does that for *_avx2.c); cpu_kernels.c calls them only after cpu_kernels_init() found those
 * instructions. Contracts: cpu_kernels_impl.h.
 *
 * Quantized dots (Q8_0 or Q4_0 weights against Q8_0 activations) per 32-weight block:
 *   maddubs(|w|, sign(a, w))  -> 16 x i16 (exact: |w| <= 128, |a| <= 127)
 *   madd(.., 1)               -> 8 x i32
 *   acc += float(..) * (d_w * d_a)   (8 lanes, summed at the end)
 * The GEMMs register-block 2 weight rows x 4 tokens: each weight vector is loaded (and for Q4_0
 * unpacked) once for 4 tokens and each activation vector once for 2 rows. Q8_0 weights with
 * n_tok >= 4 take gemm_q8_il instead: activations repacked so that one cvt + fma covers 4 tokens.
 * For 2 or more tokens of Q4_0, and for prompts of F32/F16/BF16, the dispatcher weighs these
 * against the panel GEMMs (the int8 one in quants_avx2.c, the float one below) and runs whichever
 * it measured faster (cpu_tune.c). */
#include "kernels/cpu/cpu_kernels_impl.h"
#include "kernels/cpu/kernels_simd.h"

#include "attnd/tensor.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "kernels_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif


INLINE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE float ld_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE float ld_bf16(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    uint32_t u = (uint32_t)h << 16;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* ================================================================ float weights */

/* 8 weights starting at element i of a row of type wt (a compile-time constant after inlining). */
INLINE __m256 load_w8(int wt, const unsigned char *row, size_t i)
{
    if (wt == WT_F32) return _mm256_loadu_ps((const float *)(const void *)(row + 4 * i));
    __m128i h = _mm_loadu_si128((const __m128i *)(const void *)(row + 2 * i));
    if (wt == WT_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE float load_w1(int wt, const unsigned char *row, size_t i)
{
    if (wt == WT_F32) return ld_f32(row + 4 * i);
    if (wt == WT_F16) return ld_f16(row + 2 * i);
    return ld_bf16(row + 2 * i);
}

INLINE __m256 load_a8(const unsigned char *row, size_t i)
{
    return _mm256_loadu_ps((const float *)(const void *)(row + 4 * i));
}

/* One row: 4 accumulators of 8 lanes hide the FMA latency. */
INLINE float dot_float(int wt, size_t n, const unsigned char *w, const unsigned char *a)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    const size_t wsz = wt == WT_F32 ? 4 : 2;
    for (; i + 32 <= n; i += 32) {
        prefetch_ahead(w + wsz * i, 32 * wsz);
        s0 = _mm256_fmadd_ps(load_w8(wt, w, i), load_a8(a, i), s0);
        s1 = _mm256_fmadd_ps(load_w8(wt, w, i + 8), load_a8(a, i + 8), s1);
        s2 = _mm256_fmadd_ps(load_w8(wt, w, i + 16), load_a8(a, i + 16), s2);
        s3 = _mm256_fmadd_ps(load_w8(wt, w, i + 24), load_a8(a, i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load_w8(wt, w, i), load_a8(a, i), s0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += load_w1(wt, w, i) * ld_f32(a + 4 * i);
    return s;
}

/* The dots of MV_STREAMS rows (pw) with a, read side by side (mv_streams): each activation vector
 * serves every row. */
INLINE void dot_float_rows(int wt, size_t n, const unsigned char *const pw[MV_STREAMS], const unsigned char *a,
                           float out[MV_STREAMS])
{
    enum { R = MV_STREAMS };
    __m256 acc[R][2];
    MV_ROWS acc[k][0] = acc[k][1] = _mm256_setzero_ps();
    size_t i = 0;
    const size_t wsz = wt == WT_F32 ? 4 : 2;
    for (; i + 16 <= n; i += 16) {
        const __m256 a0 = load_a8(a, i), a1 = load_a8(a, i + 8);
        MV_ROWS {
            prefetch_ahead(pw[k] + wsz * i, 16 * wsz);
            acc[k][0] = _mm256_fmadd_ps(load_w8(wt, pw[k], i), a0, acc[k][0]);
            acc[k][1] = _mm256_fmadd_ps(load_w8(wt, pw[k], i + 8), a1, acc[k][1]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 a0 = load_a8(a, i);
        MV_ROWS acc[k][0] = _mm256_fmadd_ps(load_w8(wt, pw[k], i), a0, acc[k][0]);
    }
    MV_ROWS out[k] = hsum8(_mm256_add_ps(acc[k][0], acc[k][1]));
    for (; i < n; i++) {
        const float av = ld_f32(a + 4 * i);
        MV_ROWS out[k] += load_w1(wt, pw[k], i) * av;
    }
}

/* R (1..3) weight rows x T (1..4) tokens over elements [k0, k1): each weight vector is loaded
 * once for T tokens and each activation vector once for R rows (3 x 4: 7 loads per 12 FMAs, 16
 * registers). Writes (with add: adds to) y[j*ys + ri] for ri < R, j < T. */
INLINE void tile_float(int wt, int R, int T, size_t k0, size_t k1, const unsigned char *w, size_t wrb,
                       const unsigned char *a, size_t arb, float *y, size_t ys, int add)
{
    __m256 acc[3][4];
#pragma GCC unroll 3
    for (int ri = 0; ri < R; ri++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) acc[ri][j] = _mm256_setzero_ps();
    size_t i = k0;
    for (; i + 8 <= k1; i += 8) {
        __m256 wv[3];
#pragma GCC unroll 3
        for (int ri = 0; ri < R; ri++) wv[ri] = load_w8(wt, w + ri * wrb, i);
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            __m256 av = load_a8(a + j * arb, i);
#pragma GCC unroll 3
            for (int ri = 0; ri < R; ri++) acc[ri][j] = _mm256_fmadd_ps(wv[ri], av, acc[ri][j]);
        }
    }
#pragma GCC unroll 3
    for (int ri = 0; ri < R; ri++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            float s = hsum8(acc[ri][j]);
            for (size_t k = i; k < k1; k++) s += load_w1(wt, w + ri * wrb, k) * ld_f32(a + j * arb + 4 * k);
            y[j * ys + ri] = add ? y[j * ys + ri] + s : s;
        }
}

INLINE void tile_float_rt(int wt, int R, int T, size_t k0, size_t k1, const unsigned char *w, size_t wrb,
                          const unsigned char *a, size_t arb, float *y, size_t ys, int add)
{
    /* constant R and T per call so the tile's loops unroll into registers */
    if (R == 3) {
        switch (T) {
        case 1: tile_float(wt, 3, 1, k0, k1, w, wrb, a, arb, y, ys, add); return;
        case 2: tile_float(wt, 3, 2, k0, k1, w, wrb, a, arb, y, ys, add); return;
        case 3: tile_float(wt, 3, 3, k0, k1, w, wrb, a, arb, y, ys, add); return;
        default: tile_float(wt, 3, 4, k0, k1, w, wrb, a, arb, y, ys, add); return;
        }
    }
    if (R == 2) {
        switch (T) {
        case 1: tile_float(wt, 2, 1, k0, k1, w, wrb, a, arb, y, ys, add); return;
        case 2: tile_float(wt, 2, 2, k0, k1, w, wrb, a, arb, y, ys, add); return;
        case 3: tile_float(wt, 2, 3, k0, k1, w, wrb, a, arb, y, ys, add); return;
        default: tile_float(wt, 2, 4, k0, k1, w, wrb, a, arb, y, ys, add); return;
        }
    }
    switch (T) {
    case 1: tile_float(wt, 1, 1, k0, k1, w, wrb, a, arb, y, ys, add); return;
    case 2: tile_float(wt, 1, 2, k0, k1, w, wrb, a, arb, y, ys, add); return;
    case 3: tile_float(wt, 1, 3, k0, k1, w, wrb, a, arb, y, ys, add); return;
    default: tile_float(wt, 1, 4, k0, k1, w, wrb, a, arb, y, ys, add); return;
    }
}

#define GEMM_K 1024   /* multiple of 8 */
#define GEMM_TOKS 128 /* tokens per pass: their activation chunk, 512 KiB, stays in L2 */

/* gemm_float for at most GEMM_TOKS tokens */
INLINE void gemm_float_toks(int wt, size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a,
                            size_t arb, size_t n_tok, float *y, size_t ys)
{
    const unsigned char *pw = w, *pa = a;
    /* elements in chunks of GEMM_K so the activation chunk of all tokens (n_tok * 4 KiB for 32
     * tokens: 128 KiB) stays in L2 while the weight rows stream by; later chunks add into y.
     * F16/BF16 rows, 8 tokens or more: each 3-row panel of the chunk is converted to f32 once
     * (12 KiB, L1) instead of once per 4-token group */
    _Alignas(32) float panel[3][GEMM_K];
    const int convert = wt != WT_F32 && n_tok >= 8;
    for (size_t k0 = 0; k0 < n || k0 == 0; k0 += GEMM_K) {
        size_t k1 = n - k0 > GEMM_K ? k0 + GEMM_K : n;
        for (size_t r = r0; r < r1; r += 3) {
            int R = r1 - r < 3 ? (int)(r1 - r) : 3;
            if (convert) {
                for (int ri = 0; ri < R; ri++) {
                    const unsigned char *row = pw + (r + (size_t)ri) * wrb;
                    size_t i = k0;
                    for (; i + 8 <= k1; i += 8) _mm256_store_ps(panel[ri] + (i - k0), load_w8(wt, row, i));
                    for (; i < k1; i++) panel[ri][i - k0] = load_w1(wt, row, i);
                }
                for (size_t j = 0; j < n_tok; j += 4) {
                    int T = n_tok - j >= 4 ? 4 : (int)(n_tok - j);
                    tile_float_rt(WT_F32, R, T, 0, k1 - k0, (const unsigned char *)panel[0], sizeof panel[0],
                                  pa + j * arb + 4 * k0, arb, y + j * ys + r, ys, k0 > 0);
                }
                continue;
            }
            for (size_t j = 0; j < n_tok; j += 4) {
                int T = n_tok - j >= 4 ? 4 : (int)(n_tok - j);
                tile_float_rt(wt, R, T, k0, k1, pw + r * wrb, wrb, pa + j * arb, arb, y + j * ys + r, ys, k0 > 0);
            }
        }
    }
}

/* 2+ tokens (one token: KERNELS_FLOAT_ENTRIES's rows of dot_float, the 4-accumulator dot) */
INLINE void gemm_float(int wt, size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a, size_t arb,
                       size_t n_tok, float *y, size_t ys)
{
    const unsigned char *pa = a;
    /* more tokens in passes of GEMM_TOKS: 512 tokens' chunk (2 MiB) would come from L3 for every
     * 3-row panel (F16 pp512 ran 22 % slower per token than pp128 on the AVX2 path) */
    for (size_t j0 = 0; j0 < n_tok; j0 += GEMM_TOKS)
        gemm_float_toks(wt, n, w, wrb, r0, r1, pa + j0 * arb, arb, n_tok - j0 < GEMM_TOKS ? n_tok - j0 : GEMM_TOKS,
                        y + j0 * ys, ys);
}

/* The float-weight entry points (cpu_kernels_impl.h). */
KERNELS_FLOAT_ENTRIES(avx2)

/* ---------------------------------------------------------------- float panel GEMM
 * Outer-product form for many tokens: a chunk of up to FP_KMAX elements of FP_ROWS weight rows is
 * converted to f32 and transposed once into panel[k][FP_ROWS] (64 bytes an element); then every group of
 * FP_TOK tokens runs a 16-row x 6-token tile that per element loads two weight vectors,
 * broadcasts each token's activation and does 12 FMAs into 12 accumulators that hold outputs
 * (no horizontal sums). Chunks after the first add into y. Both buffers are the thread's scratch_get. */
#define FP_ROWS 16
#define FP_TOK 6
#define FP_KMAX 128 /* elements per chunk, at most (n is cut evenly; 512 and 1024 measured no faster) */
#define FP_GROUPS 22 /* token groups whose activations are packed per pass (132 tokens) */
#define FP_RBLK 512  /* rows per block (a multiple of FP_ROWS) */

/* 8x8 transpose of r[0..7] in place (r[i] lane j -> r[j] lane i). */
INLINE void transpose8(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* panel[k][ri] = W[r + ri][k0 + k] for k < kn, ri < R; rows R..15 are zero. */
INLINE void fp_pack(int wt, const unsigned char *w, size_t wrb, int R, size_t k0, size_t kn, float *panel)
{
    for (int rb = 0; rb < FP_ROWS; rb += 8) {
        size_t k = 0;
        for (; k + 8 <= kn; k += 8) {
            __m256 v[8];
            for (int i = 0; i < 8; i++)
                v[i] = rb + i < R ? load_w8(wt, w + (size_t)(rb + i) * wrb, k0 + k) : _mm256_setzero_ps();
            transpose8(v);
            for (int i = 0; i < 8; i++) _mm256_store_ps(panel + (k + (size_t)i) * FP_ROWS + rb, v[i]);
        }
        for (; k < kn; k++)
            for (int i = 0; i < 8; i++)
                panel[k * FP_ROWS + rb + i] = rb + i < R ? load_w1(wt, w + (size_t)(rb + i) * wrb, k0 + k) : 0.0f;
    }
}

/* ap[k*FP_TOK + j] = a_j[k0 + k] for j < T (the group's activations interleaved by element, so a
 * tile's broadcasts read one stream): 8 x 8 transposes of 8 elements of the tokens, each element's
 * FP_TOK stored under a mask. */
INLINE void fp_pack_acts(int T, const unsigned char *a, size_t arb, size_t k0, size_t kn, float *ap)
{
    const __m256i keep = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0); /* FP_TOK == 6 lanes */
    size_t k = 0;
    for (; k + 8 <= kn; k += 8) {
        __m256 v[8];
        for (int j = 0; j < 8; j++)
            v[j] = j < T ? _mm256_loadu_ps((const float *)(const void *)(a + (size_t)j * arb + 4 * (k0 + k))) : _mm256_setzero_ps();
        transpose8(v);
        for (int i = 0; i < 8; i++) _mm256_maskstore_ps(ap + (k + (size_t)i) * FP_TOK, keep, v[i]);
    }
    for (; k < kn; k++)
        for (int j = 0; j < FP_TOK; j++) ap[k * FP_TOK + (size_t)j] = j < T ? ld_f32(a + (size_t)j * arb + 4 * (k0 + k)) : 0.0f;
}

/* y[j*ys + ri] (+)= sum_k panel[k][ri] * ap[k][j] for ri < R, j < T (T a constant after inlining). */
INLINE void fp_tile(int T, int R, size_t kn, const float *panel, const float *ap, float *y, size_t ys, int add)
{
    __m256 c0[FP_TOK], c1[FP_TOK];
#pragma GCC unroll 6
    for (int j = 0; j < T; j++) c0[j] = c1[j] = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (size_t k = 0; k < kn; k++) {
        const __m256 w0 = _mm256_load_ps(panel + k * FP_ROWS), w1 = _mm256_load_ps(panel + k * FP_ROWS + 8);
#pragma GCC unroll 6
        for (int j = 0; j < T; j++) {
            const __m256 b = _mm256_broadcast_ss(ap + k * FP_TOK + j);
            c0[j] = _mm256_fmadd_ps(w0, b, c0[j]);
            c1[j] = _mm256_fmadd_ps(w1, b, c1[j]);
        }
    }
#pragma GCC unroll 6
    for (int j = 0; j < T; j++) {
        float *yo = y + (size_t)j * ys;
        if (R == FP_ROWS) {
            __m256 s0 = c0[j], s1 = c1[j];
            if (add) s0 = _mm256_add_ps(s0, _mm256_loadu_ps(yo)), s1 = _mm256_add_ps(s1, _mm256_loadu_ps(yo + 8));
            _mm256_storeu_ps(yo, s0);
            _mm256_storeu_ps(yo + 8, s1);
        } else {
            _Alignas(32) float v[FP_ROWS];
            _mm256_store_ps(v, c0[j]);
            _mm256_store_ps(v + 8, c1[j]);
            for (int ri = 0; ri < R; ri++) yo[ri] = add ? yo[ri] + v[ri] : v[ri];
        }
    }
}

/* Not inlined into the driver: there GCC spilled an accumulator of the 6-token tile (45 -> 31 GMAC/s). */
static __attribute__((noinline)) void fp_tile_rt(int T, int R, size_t kn, const float *panel, const float *ap, float *y,
                                                 size_t ys, int add)
{
    switch (T) {
    case 1: fp_tile(1, R, kn, panel, ap, y, ys, add); return;
    case 2: fp_tile(2, R, kn, panel, ap, y, ys, add); return;
    case 3: fp_tile(3, R, kn, panel, ap, y, ys, add); return;
    case 4: fp_tile(4, R, kn, panel, ap, y, ys, add); return;
    case 5: fp_tile(5, R, kn, panel, ap, y, ys, add); return;
    default: fp_tile(6, R, kn, panel, ap, y, ys, add); return;
    }
}

#define FP_SHAPE ((struct float_panel_shape){FP_ROWS, FP_TOK, FP_GROUPS, FP_RBLK, FP_KMAX})

/* 0 when the per-thread buffers cannot be had (the caller takes the dot-product tiles). */
INLINE int gemm_float_panel(int wt, size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a,
                            size_t arb, size_t n_tok, float *y, size_t ys)
{
    return float_panel_gemm(FP_SHAPE, fp_pack_acts, fp_pack, fp_tile_rt, wt, n, w, wrb, r0, r1, a, arb, n_tok, y,
                            ys);
}

void cpu_avx2_gemm_panel_f32(size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a, size_t arb,
                             size_t n_tok, float *y, size_t ys)
{
    if (!gemm_float_panel(WT_F32, n, w, wrb, r0, r1, a, arb, n_tok, y, ys))
        cpu_avx2_gemm_f32(n, w, wrb, r0, r1, a, arb, n_tok, y, ys);
}

void cpu_avx2_gemm_panel_f16(size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a, size_t arb,
                             size_t n_tok, float *y, size_t ys)
{
    if (!gemm_float_panel(WT_F16, n, w, wrb, r0, r1, a, arb, n_tok, y, ys))
        cpu_avx2_gemm_f16(n, w, wrb, r0, r1, a, arb, n_tok, y, ys);
}

void cpu_avx2_gemm_panel_bf16(size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a, size_t arb,
                              size_t n_tok, float *y, size_t ys)
{
    if (!gemm_float_panel(WT_BF16, n, w, wrb, r0, r1, a, arb, n_tok, y, ys))
        cpu_avx2_gemm_bf16(n, w, wrb, r0, r1, a, arb, n_tok, y, ys);
}

/* ================================================================ quantized weights */

/* 8 x i32 partial sums of w . a for one block; wabs = |w|. */
INLINE __m256i idot8(__m256i w, __m256i wabs, __m256i av)
{
    __m256i p16 = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(av, w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* Matrix-vector: one row over nb blocks, activation scales already in f32 (sa[b]). Two blocks
 * per step into two accumulators halve the FMA dependency chain. */
INLINE float dot_quant(int q4, size_t nb, const unsigned char *w, const unsigned char *a, const float *sa)
{
    size_t b = 0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; b + 2 <= nb; b += 2) {
        __m256i w0 = load_wq(q4, w, b), w1 = load_wq(q4, w, b + 1);
        __m256i p0 = idot8(w0, _mm256_abs_epi8(w0), load_aq(a, b));
        __m256i p1 = idot8(w1, _mm256_abs_epi8(w1), load_aq(a, b + 1));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(scale_w(q4, w, b) * sa[b]), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(scale_w(q4, w, b + 1) * sa[b + 1]), acc1);
    }
    if (b < nb) {
        __m256i w0 = load_wq(q4, w, b);
        __m256i p0 = idot8(w0, _mm256_abs_epi8(w0), load_aq(a, b));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(scale_w(q4, w, b) * sa[b]), acc0);
    }
    return hsum8(_mm256_add_ps(acc0, acc1));
}

/* GEMM blocking: tokens in chunks of GEMM_TOK (groups of 4 inside), blocks in chunks of GEMM_BLK
 * (32 * GEMM_BLK elements). Per chunk the activation scales are converted to f32 once, into
 * scales[group][block][4], and per pair of weight rows their scales once; then the row pair
 * walks all token groups while its chunk stays in L1, and the activation chunk (up to
 * 32 * 128 * 34 bytes = 136 KiB) in L2. Chunks after the first add into y. */
#define GEMM_TOK 32
#define GEMM_BLK 128

/* R (1..2) weight rows x T (1..4) tokens over nb blocks: each weight block is loaded (and
 * unpacked) once for T tokens, each activation block once for R rows. sw: the rows' f32
 * scales (row ri at sw + ri*GEMM_BLK); sa: the tokens' f32 scales, 4 per block. Writes (or,
 * with add, adds to) y[j*ys + ri]. */
INLINE void tile_quant(int q4, int R, int T, size_t nb, const unsigned char *w, size_t wrb, const unsigned char *a,
                       size_t arb, const float *sw, const float *sa, float *y, size_t ys, int add)
{
    __m256 acc[2][4];
    _Alignas(16) float s[2][4];
#pragma GCC unroll 2
    for (int ri = 0; ri < R; ri++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) acc[ri][j] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        __m256i wv[2], wabs[2];
        __m128 sab = _mm_load_ps(sa + 4 * b);
#pragma GCC unroll 2
        for (int ri = 0; ri < R; ri++) {
            wv[ri] = load_wq(q4, w + ri * wrb, b);
            wabs[ri] = _mm256_abs_epi8(wv[ri]);
            /* d_w * d_a for the 4 tokens at once, stored so each lane can be broadcast by a load */
            _mm_store_ps(s[ri], _mm_mul_ps(_mm_broadcast_ss(sw + ri * GEMM_BLK + b), sab));
        }
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            __m256i av = load_aq(a + j * arb, b);
#pragma GCC unroll 2
            for (int ri = 0; ri < R; ri++) {
                __m256i p = idot8(wv[ri], wabs[ri], av);
                acc[ri][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&s[ri][j]), acc[ri][j]);
            }
        }
    }
#pragma GCC unroll 2
    for (int ri = 0; ri < R; ri++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) y[j * ys + ri] = (add ? y[j * ys + ri] : 0.0f) + hsum8(acc[ri][j]);
}

INLINE void tile_quant_rt(int q4, int R, int T, size_t nb, const unsigned char *w, size_t wrb,
                          const unsigned char *a, size_t arb, const float *sw, const float *sa, float *y, size_t ys,
                          int add)
{
    /* constant R and T per call so the tile's loops unroll into registers */
    if (R == 2) {
        switch (T) {
        case 1: tile_quant(q4, 2, 1, nb, w, wrb, a, arb, sw, sa, y, ys, add); return;
        case 2: tile_quant(q4, 2, 2, nb, w, wrb, a, arb, sw, sa, y, ys, add); return;
        case 3: tile_quant(q4, 2, 3, nb, w, wrb, a, arb, sw, sa, y, ys, add); return;
        default: tile_quant(q4, 2, 4, nb, w, wrb, a, arb, sw, sa, y, ys, add); return;
        }
    }
    switch (T) {
    case 1: tile_quant(q4, 1, 1, nb, w, wrb, a, arb, sw, sa, y, ys, add); return;
    case 2: tile_quant(q4, 1, 2, nb, w, wrb, a, arb, sw, sa, y, ys, add); return;
    case 3: tile_quant(q4, 1, 3, nb, w, wrb, a, arb, sw, sa, y, ys, add); return;
    default: tile_quant(q4, 1, 4, nb, w, wrb, a, arb, sw, sa, y, ys, add); return;
    }
}

/* Q8_0 GEMM for full groups of 4 tokens, up to IL_ROWS weight rows at a time. The group's
 * activations are repacked per block into 4 vectors x[k] = [a_t0[8k..8k+8) | a_t1[..] | a_t2[..]
 * | a_t3[..]] (and |x[k]|), so a weight's 8 bytes w[8k..8k+8), broadcast, line up with all 4
 * tokens:  maddubs(|x[k]|, sign(w, x[k])) -> madd(.., 1) gives lanes [t0 t0 t1 t1 t2 t2 t3 t3]
 * of 4-product sums; the 4 k add up in int32 (|sum| <= 32 * 127 * 127), so one cvt and one fma
 * per (row, block) cover all 4 tokens instead of one per (row, token, block). */
#define IL_ROWS 8
/* token x block chunk of the repacked activations: 64 * 32 * 64 bytes = 128 KiB (L2; 64 tokens, not
 * 32: the weights stream once per chunk of tokens, and with ATTND_ISA=avx2 a Q8_0 pp128 ran 4 %
 * faster); one group's 32 blocks (8 KiB) and 8 weight rows' 32 blocks (8.5 KiB) stay in L1 */
#define IL_TOK 64
#define IL_BLK 32

typedef struct {
    _Alignas(32) unsigned char x[4][32], ax[4][32];
} il_block;

INLINE void tile_il(int R, size_t nb, const unsigned char *w, size_t wrb, const il_block *ab, const float *sw,
                    const float *sa8, float *y, size_t ys, int add)
{
    __m256 acc[IL_ROWS];
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
    for (int ri = 0; ri < R; ri++) acc[ri] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const il_block *xb = ab + b;
        __m256i ax[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) ax[k] = _mm256_load_si256((const __m256i *)(const void *)xb->ax[k]);
        __m256 s8 = _mm256_load_ps(sa8 + 8 * b);
#pragma GCC unroll 8
        for (int ri = 0; ri < R; ri++) {
            const unsigned char *wp = w + ri * wrb + b * CPU_Q8_0_BYTES + 2;
            __m256i m = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                long long w8;
                memcpy(&w8, wp + 8 * k, 8);
                __m256i t = _mm256_sign_epi8(_mm256_set1_epi64x(w8),
                                             _mm256_load_si256((const __m256i *)(const void *)xb->x[k]));
                t = _mm256_madd_epi16(_mm256_maddubs_epi16(ax[k], t), ones);
                m = k ? _mm256_add_epi32(m, t) : t;
            }
            __m256 sc = _mm256_mul_ps(_mm256_broadcast_ss(sw + ri * GEMM_BLK + b), s8);
            acc[ri] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), sc, acc[ri]);
        }
    }
#pragma GCC unroll 8
    for (int ri = 0; ri < R; ri++) {
        /* lanes [t0 t0 t1 t1 | t2 t2 t3 t3] -> [t0 t1 . . | t2 t3 . .] */
        __m256 h = _mm256_hadd_ps(acc[ri], acc[ri]);
        __m128 lo = _mm256_castps256_ps128(h), hi = _mm256_extractf128_ps(h, 1);
        float v[4] = {_mm_cvtss_f32(lo), _mm_cvtss_f32(_mm_movehdup_ps(lo)), _mm_cvtss_f32(hi),
                      _mm_cvtss_f32(_mm_movehdup_ps(hi))};
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) y[j * ys + ri] = (add ? y[j * ys + ri] : 0.0f) + v[j];
    }
}

INLINE void tile_il_r(int R, size_t nb, const unsigned char *w, size_t wrb, const il_block *ab, const float *sw,
                      const float *sa8, float *y, size_t ys, int add)
{
    switch (R) {
    case 1: tile_il(1, nb, w, wrb, ab, sw, sa8, y, ys, add); return;
    case 2: tile_il(2, nb, w, wrb, ab, sw, sa8, y, ys, add); return;
    case 3: tile_il(3, nb, w, wrb, ab, sw, sa8, y, ys, add); return;
    case 4: tile_il(4, nb, w, wrb, ab, sw, sa8, y, ys, add); return;
    case 5: tile_il(5, nb, w, wrb, ab, sw, sa8, y, ys, add); return;
    case 6: tile_il(6, nb, w, wrb, ab, sw, sa8, y, ys, add); return;
    case 7: tile_il(7, nb, w, wrb, ab, sw, sa8, y, ys, add); return;
    default: tile_il(8, nb, w, wrb, ab, sw, sa8, y, ys, add); return;
    }
}

/* Q8_0 weights, n_tok >= 4: full token groups through tile_il, the remainder (< 4 tokens)
 * through tile_quant. */
INLINE void gemm_q8_il(size_t nb, const unsigned char *pw, size_t wrb, size_t r0, size_t r1, const unsigned char *pa,
                       size_t arb, size_t n_tok, float *y, size_t ys)
{
    il_block xq[IL_TOK / 4][IL_BLK];
    _Alignas(32) float sa8[IL_TOK / 4][IL_BLK][8];
    _Alignas(32) float scales[IL_BLK][4];
    float wscales[IL_ROWS][GEMM_BLK], tsc[IL_TOK][IL_BLK];
    for (size_t t0 = 0; t0 < n_tok; t0 += IL_TOK) {
        size_t nt = n_tok - t0 < IL_TOK ? n_tok - t0 : IL_TOK, ng = nt / 4, rest = nt % 4;
        for (size_t b0 = 0; b0 < nb; b0 += IL_BLK) {
            size_t nbc = nb - b0 < IL_BLK ? nb - b0 : IL_BLK;
            for (size_t g = 0; g < ng; g++)
                for (size_t b = 0; b < nbc; b++) {
                    il_block *xb = &xq[g][b];
                    for (size_t l = 0; l < 4; l++) {
                        const unsigned char *src = pa + (t0 + 4 * g + l) * arb + (b0 + b) * CPU_Q8_0_BYTES;
                        sa8[g][b][2 * l] = sa8[g][b][2 * l + 1] = tsc[4 * g + l][b] = ld_f16(src);
                        for (int k = 0; k < 4; k++) memcpy(xb->x[k] + 8 * l, src + 2 + 8 * k, 8);
                    }
                    for (int k = 0; k < 4; k++)
                        _mm256_store_si256((__m256i *)(void *)xb->ax[k],
                                           _mm256_abs_epi8(_mm256_load_si256((const __m256i *)(const void *)xb->x[k])));
                }
            size_t jr = t0 + 4 * ng; /* first remainder token */
            for (size_t b = 0; b < nbc; b++)
                for (size_t l = 0; l < 4; l++) {
                    scales[b][l] = l < rest ? ld_f16(pa + (jr + l) * arb + (b0 + b) * CPU_Q8_0_BYTES) : 0.0f;
                    if (l < rest) tsc[4 * ng + l][b] = scales[b][l];
                }
            for (size_t r = r0; r < r1; r += IL_ROWS) {
                int R = r1 - r < IL_ROWS ? (int)(r1 - r) : IL_ROWS;
                const unsigned char *wr = pw + r * wrb + b0 * CPU_Q8_0_BYTES;
                __m256i m128 = _mm256_setzero_si256();
                for (int ri = 0; ri < R; ri++)
                    for (size_t b = 0; b < nbc; b++) {
                        const unsigned char *blk = wr + ri * wrb + b * CPU_Q8_0_BYTES;
                        wscales[ri][b] = ld_f16(blk);
                        m128 = _mm256_or_si256(m128, _mm256_cmpeq_epi8(load_aq(blk, 0), _mm256_set1_epi8(-128)));
                    }
                if (!_mm256_testz_si256(m128, m128)) {
                    /* a weight of -128: sign(w, a) would overflow, so these rows take the
                     * |w| * sign(a, w) dot, one (row, token) at a time (quantizers emit -127..127) */
                    for (int ri = 0; ri < R; ri++)
                        for (size_t l = 0; l < nt; l++) {
                            float v = dot_quant(0, nbc, wr + ri * wrb, pa + (t0 + l) * arb + b0 * CPU_Q8_0_BYTES,
                                                tsc[l]);
                            float *yo = y + (t0 + l) * ys + r + (size_t)ri;
                            *yo = b0 ? *yo + v : v;
                        }
                    continue;
                }
                for (size_t g = 0; g < ng; g++)
                    tile_il_r(R, nbc, wr, wrb, xq[g], wscales[0], sa8[g][0], y + (t0 + 4 * g) * ys + r, ys, b0 > 0);
                if (rest)
                    for (int ri = 0; ri < R; ri += 2)
                        tile_quant_rt(0, R - ri >= 2 ? 2 : 1, (int)rest, nbc, wr + ri * wrb, wrb,
                                      pa + jr * arb + b0 * CPU_Q8_0_BYTES, arb, wscales[ri], scales[0],
                                      y + jr * ys + r + ri, ys, b0 > 0);
            }
        }
    }
}

INLINE void gemm_quant(int q4, size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a, size_t arb,
                       size_t n_tok, float *y, size_t ys)
{
    const unsigned char *pw = w, *pa = a;
    size_t nb = n / QK8_0, wbb = q4 ? CPU_Q4_0_BYTES : CPU_Q8_0_BYTES;
    _Alignas(32) float scales[GEMM_TOK / 4][GEMM_BLK][4];
    float wscales[2][GEMM_BLK];
    if (nb == 0) {
        for (size_t j = 0; j < n_tok; j++)
            for (size_t r = r0; r < r1; r++) y[j * ys + r] = 0.0f;
        return;
    }
    if (!q4 && n_tok >= 4) {
        gemm_q8_il(nb, pw, wrb, r0, r1, pa, arb, n_tok, y, ys);
        return;
    }
    if (n_tok == 1) {
        /* matrix-vector: the same scale buffer, flat, one f32 scale per block */
        float *sa = scales[0][0];
        const size_t chunk = sizeof scales / sizeof(float);
        for (size_t b0 = 0; b0 < nb; b0 += chunk) {
            size_t nbc = nb - b0 < chunk ? nb - b0 : chunk;
            for (size_t b = 0; b < nbc; b++) sa[b] = ld_f16(pa + (b0 + b) * CPU_Q8_0_BYTES);
            const unsigned char *ac = pa + b0 * CPU_Q8_0_BYTES;
            /* one row after the other: the weights stream in address order (several rows at
             * once, sharing the activation loads, measured 40 % slower: interleaved streams) */
            for (size_t r = r0; r < r1; r++) {
                float v = dot_quant(q4, nbc, pw + r * wrb + b0 * wbb, ac, sa);
                y[r] = b0 ? y[r] + v : v;
            }
        }
        return;
    }
    for (size_t t0 = 0; t0 < n_tok; t0 += GEMM_TOK) {
        size_t nt = n_tok - t0 < GEMM_TOK ? n_tok - t0 : GEMM_TOK, ng = (nt + 3) / 4;
        for (size_t b0 = 0; b0 < nb; b0 += GEMM_BLK) {
            size_t nbc = nb - b0 < GEMM_BLK ? nb - b0 : GEMM_BLK;
            for (size_t g = 0; g < ng; g++)
                for (size_t b = 0; b < nbc; b++)
                    for (size_t l = 0; l < 4; l++) {
                        size_t j = t0 + 4 * g + l;
                        scales[g][b][l] = j < n_tok ? ld_f16(pa + j * arb + (b0 + b) * CPU_Q8_0_BYTES) : 0.0f;
                    }
            for (size_t r = r0; r < r1; r += 2) {
                int R = r + 1 < r1 ? 2 : 1;
                const unsigned char *wr = pw + r * wrb + b0 * wbb;
                for (int ri = 0; ri < R; ri++)
                    for (size_t b = 0; b < nbc; b++) wscales[ri][b] = scale_w(q4, wr + ri * wrb, b);
                for (size_t g = 0; g < ng; g++) {
                    size_t j = t0 + 4 * g;
                    int T = n_tok - j >= 4 ? 4 : (int)(n_tok - j);
                    tile_quant_rt(q4, R, T, nbc, wr, wrb, pa + j * arb + b0 * CPU_Q8_0_BYTES, arb, wscales[0],
                                  scales[g][0], y + j * ys + r, ys, b0 > 0);
                }
            }
        }
    }
}

/* Q8_0 weights x Q8_0 activations (the one-row case of the GEMM). */
float cpu_avx2_vec_dot_q8_0(size_t n, const void *w, const void *a)
{
    float y = 0.0f;
    gemm_quant(0, n, w, 0, 0, 1, a, 0, 1, &y, 0);
    return y;
}

/* Q4_0 weights x Q8_0 activations (the one-row case of the GEMM). */
float cpu_avx2_vec_dot_q4_0(size_t n, const void *w, const void *a)
{
    float y = 0.0f;
    gemm_quant(1, n, w, 0, 0, 1, a, 0, 1, &y, 0);
    return y;
}

/* GEMM, Q8_0 and Q4_0 weights (cpu_kernels_impl.h). */
KERNELS_QUANT_GEMMS(avx2)

/* ================================================================ quantize, conversions */

/* Same arithmetic as the scalar version, step for step: max|x| ignoring NaN (max_ps returns its
 * second operand when the first is NaN), d and id in scalar float, x*id, clamp to +-127 (NaN ->
 * -127), round to nearest even. */
void cpu_avx2_quantize_row_q8_0(const float *x, void *dst, size_t n)
{
    unsigned char *out = dst;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (size_t b = 0; b < n / QK8_0; b++, out += CPU_Q8_0_BYTES) {
        const float *xb = x + b * QK8_0;
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(xb + 8 * k);
            m = _mm256_max_ps(_mm256_and_ps(v[k], absmask), m);
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        float amax = _mm_cvtss_f32(m4);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t hd = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        memcpy(out, &hd, sizeof hd);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[k], vid), lo), hi);
            t = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            q[k] = _mm256_cvttps_epi32(t);
        }
        /* packs work per 128-bit lane; the permute puts the 8 dwords back in element order */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        p = _mm256_permutevar8x32_epi32(p, order);
        _mm256_storeu_si256((__m256i *)(void *)(out + 2), p);
    }
}

/* F16C conversion; bit-identical to cpu_f16_to_f32. */
void cpu_avx2_f16_to_f32_row(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

/* F16C conversion (round to nearest even); bit-identical to cpu_f32_to_f16. */
void cpu_avx2_f32_to_f16_row(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = (uint16_t)_cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

/* Two passes: the largest value (vmaxps keeps the running maximum, its second operand, where the
 * row holds NaN), then the first index holding it. */
size_t cpu_avx2_argmax(const float *x, size_t n)
{
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    }
    _Alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_max_ps(m0, m1));
    float mx = -INFINITY;
    for (int k = 0; k < 8; k++) mx = lanes[k] > mx ? lanes[k] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    if (!(mx > -INFINITY)) return n;
    const __m256 vm = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        const int k = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (k) return i + (size_t)__builtin_ctz((unsigned)k);
    }
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return n;
}

/* A float is NaN or infinite when its exponent bits are all ones. */
size_t cpu_avx2_find_nonfinite(const float *x, size_t n)
{
    const __m256i e = _mm256_set1_epi32(0x7f800000);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(x + i));
        const int k = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(v, e), e)));
        if (k) return i + (size_t)__builtin_ctz((unsigned)k);
    }
    for (; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

/* g = silu(g) * u = g / (1 + e^-g) * u, with the polynomial exp8 (relative error below 2e-7). */
void cpu_avx2_swiglu_row(float *g, const float *u, size_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void cpu_avx2_add_row(float *x, const float *y, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) x[i] += y[i];
}

void cpu_avx2_rmsnorm_row(float *out, const float *x, const float *w, size_t n, float eps)
{
    __m256d s0 = _mm256_setzero_pd(), s1 = s0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        s0 = _mm256_fmadd_pd(lo, lo, s0);
        s1 = _mm256_fmadd_pd(hi, hi, s1);
    }
    _Alignas(32) double l[4];
    _mm256_store_pd(l, _mm256_add_pd(s0, s1));
    double ss = (l[0] + l[1]) + (l[2] + l[3]);
    for (; i < n; i++) ss += (double)x[i] * x[i];
    const float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    const __m256 vs = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) out[i] = x[i] * scale * w[i];
}
