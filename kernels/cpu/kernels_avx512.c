/* kernels_avx512.c - AVX-512 F/BW/VL/DQ kernels. Built with -mavx512f -mavx512bw -mavx512vl
 * -mavx512dq -mfma -mf16c (the Makefile does that for *_avx512.c); cpu_kernels.c calls them only after
 * cpu_kernels_init() found all four extensions. Contracts: cpu_kernels_impl.h.
 *
 * Same algorithms as kernels_avx2.c, twice as wide: float kernels take 16 elements per vector
 * and finish with a masked step instead of a scalar tail; quantized kernels put two 32-weight
 * blocks in one zmm (block b in the low 256 bits, b+1 in the high 256 bits) and do an odd last
 * block with the 256-bit sequence. AVX-512 has no vpsignb, so sign(a, w) is a masked 0 - a where
 * w < 0 (for w == 0 the product with |w| = 0 is 0 either way). */
#include "kernels/cpu/cpu_kernels_impl.h"
#include "kernels/cpu/kernels_simd.h"
#include "kernels/cpu/kernels_simd512.h"

#include "attnd/tensor.h"

#include <immintrin.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__) || \
    !defined(__FMA__) || !defined(__F16C__)
#error "kernels_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c"
#endif


INLINE __mmask16 tail_mask(size_t rem) { return (__mmask16)((1u << rem) - 1u); } /* rem in 1..15 */

/* ================================================================ float weights */

/* 16 weights from element i of a row of type wt; lanes outside mask m read nothing and are 0. */
INLINE __m512 load_w16(int wt, const unsigned char *row, size_t i, __mmask16 m)
{
    if (wt == WT_F32) return _mm512_maskz_loadu_ps(m, row + 4 * i);
    __m256i h = _mm256_maskz_loadu_epi16(m, row + 2 * i);
    if (wt == WT_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

INLINE __m512 load_a16(const unsigned char *row, size_t i, __mmask16 m) { return _mm512_maskz_loadu_ps(m, row + 4 * i); }

INLINE float dot_float(int wt, size_t n, const unsigned char *w, const unsigned char *a)
{
    const __mmask16 all = 0xffff;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    const size_t wsz = wt == WT_F32 ? 4 : 2;
    for (; i + 64 <= n; i += 64) {
        prefetch_ahead(w + wsz * i, 64 * wsz);
        s0 = _mm512_fmadd_ps(load_w16(wt, w, i, all), load_a16(a, i, all), s0);
        s1 = _mm512_fmadd_ps(load_w16(wt, w, i + 16, all), load_a16(a, i + 16, all), s1);
        s2 = _mm512_fmadd_ps(load_w16(wt, w, i + 32, all), load_a16(a, i + 32, all), s2);
        s3 = _mm512_fmadd_ps(load_w16(wt, w, i + 48, all), load_a16(a, i + 48, all), s3);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(load_w16(wt, w, i, all), load_a16(a, i, all), s0);
    if (i < n) {
        __mmask16 m = tail_mask(n - i);
        s1 = _mm512_fmadd_ps(load_w16(wt, w, i, m), load_a16(a, i, m), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

/* The dots of MV_STREAMS rows (pw) with a, read side by side (mv_streams): each activation vector
 * serves every row. */
INLINE void dot_float_rows(int wt, size_t n, const unsigned char *const pw[MV_STREAMS], const unsigned char *a,
                           float out[MV_STREAMS])
{
    enum { R = MV_STREAMS };
    const __mmask16 all = 0xffff;
    __m512 acc[R][2];
    MV_ROWS acc[k][0] = acc[k][1] = _mm512_setzero_ps();
    size_t i = 0;
    const size_t wsz = wt == WT_F32 ? 4 : 2;
    for (; i + 32 <= n; i += 32) {
        const __m512 a0 = load_a16(a, i, all), a1 = load_a16(a, i + 16, all);
        MV_ROWS {
            prefetch_ahead(pw[k] + wsz * i, 32 * wsz);
            acc[k][0] = _mm512_fmadd_ps(load_w16(wt, pw[k], i, all), a0, acc[k][0]);
            acc[k][1] = _mm512_fmadd_ps(load_w16(wt, pw[k], i + 16, all), a1, acc[k][1]);
        }
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? all : tail_mask(n - i);
        const __m512 a0 = load_a16(a, i, m);
        MV_ROWS acc[k][0] = _mm512_fmadd_ps(load_w16(wt, pw[k], i, m), a0, acc[k][0]);
    }
    MV_ROWS out[k] = _mm512_reduce_add_ps(_mm512_add_ps(acc[k][0], acc[k][1]));
}

/* R (1..2) weight rows x T (1..4) tokens; writes y[j*ys + ri]. */
INLINE void tile_float(int wt, int R, int T, size_t n, const unsigned char *w, size_t wrb, const unsigned char *a,
                       size_t arb, float *y, size_t ys)
{
    __m512 acc[2][4];
#pragma GCC unroll 2
    for (int ri = 0; ri < R; ri++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) acc[ri][j] = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail_mask(n - i);
        __m512 wv[2];
#pragma GCC unroll 2
        for (int ri = 0; ri < R; ri++) wv[ri] = load_w16(wt, w + ri * wrb, i, m);
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            __m512 av = load_a16(a + j * arb, i, m);
#pragma GCC unroll 2
            for (int ri = 0; ri < R; ri++) acc[ri][j] = _mm512_fmadd_ps(wv[ri], av, acc[ri][j]);
        }
    }
#pragma GCC unroll 2
    for (int ri = 0; ri < R; ri++)
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) y[j * ys + ri] = _mm512_reduce_add_ps(acc[ri][j]);
}

INLINE void tile_float_rt(int wt, int R, int T, size_t n, const unsigned char *w, size_t wrb,
                          const unsigned char *a, size_t arb, float *y, size_t ys)
{
    if (R == 2) {
        switch (T) {
        case 1: tile_float(wt, 2, 1, n, w, wrb, a, arb, y, ys); return;
        case 2: tile_float(wt, 2, 2, n, w, wrb, a, arb, y, ys); return;
        case 3: tile_float(wt, 2, 3, n, w, wrb, a, arb, y, ys); return;
        default: tile_float(wt, 2, 4, n, w, wrb, a, arb, y, ys); return;
        }
    }
    switch (T) {
    case 1: tile_float(wt, 1, 1, n, w, wrb, a, arb, y, ys); return;
    case 2: tile_float(wt, 1, 2, n, w, wrb, a, arb, y, ys); return;
    case 3: tile_float(wt, 1, 3, n, w, wrb, a, arb, y, ys); return;
    default: tile_float(wt, 1, 4, n, w, wrb, a, arb, y, ys); return;
    }
}

/* ---- many tokens: outer products over packed panels ----
 * A chunk of up to op_kmax() elements of OP_ROWS weight rows is converted to f32 and transposed
 * once into panel[k][OP_ROWS] (128 bytes an element); the activations of each group of OP_TOK
 * tokens are interleaved by element (ap[k][OP_TOK], packed once per row block and chunk); a tile
 * then loads, per element, the two weight vectors and broadcasts each token's activation into 24
 * FMAs on 24 accumulators that hold outputs (no horizontal sums; 14 loads per 24 FMAs). Chunks
 * after the first add into y. Both buffers are the thread's scratch_get.
 * F16, 896 x 4864, 128 tokens, one thread of the Xeon of the README: the dot-product tiles above
 * (2 rows x 4 tokens, a reduction per output) 19 GMAC/s, the AVX2 kernel 45, this 70 (the tile
 * alone, in L1: 81; zmm FMAs peak near 89 there). From OP_MIN_TOK tokens. */
#define OP_ROWS 32
#define OP_TOK 12
#define OP_GROUPS 11  /* token groups per pass (132 tokens) */
#define OP_RBLK 512   /* rows per block: the outputs a chunk adds into (132 x 512 floats, 264 KiB) stay in L2 */
#define OP_MIN_TOK 16 /* fewer tokens take the dot-product tiles */

/* panel[k][ri] = W[r + ri][k0 + k] for k < kn, ri < R (rows R..31 zero): 16 x 16 transposes. */
INLINE void op_pack_w(int wt, const unsigned char *w, size_t wrb, int R, size_t k0, size_t kn, float *panel)
{
    for (int rb = 0; rb < OP_ROWS; rb += 16)
        for (size_t k = 0; k < kn; k += 16) {
            const __mmask16 m = kn - k >= 16 ? (__mmask16)0xffff : tail_mask(kn - k);
            __m512 v[16];
            for (int i = 0; i < 16; i++)
                v[i] = rb + i < R ? load_w16(wt, w + (size_t)(rb + i) * wrb, k0 + k, m) : _mm512_setzero_ps();
            transpose16(v);
            for (int i = 0; i < 16 && k + (size_t)i < kn; i++) _mm512_store_ps(panel + (k + (size_t)i) * OP_ROWS + rb, v[i]);
        }
}

/* ap[k][j] = a_j[k0 + k] for k < kn, j < T (lanes T..11 of each element's 12 are zero). */
INLINE void op_pack_a(int T, const unsigned char *a, size_t arb, size_t k0, size_t kn, float *ap)
{
    for (size_t k = 0; k < kn; k += 16) {
        const __mmask16 m = kn - k >= 16 ? (__mmask16)0xffff : tail_mask(kn - k);
        __m512 v[16];
        for (int j = 0; j < 16; j++) v[j] = j < T ? load_a16(a + (size_t)j * arb, k0 + k, m) : _mm512_setzero_ps();
        transpose16(v);
        for (int i = 0; i < 16 && k + (size_t)i < kn; i++) _mm512_mask_storeu_ps(ap + (k + (size_t)i) * OP_TOK, 0x0fff, v[i]);
    }
}

/* y[j*ys + ri] (+)= sum_k panel[k][ri] ap[k][j] for ri < R, j < T (T a constant after inlining). */
INLINE void op_tile(int T, int R, size_t kn, const float *panel, const float *ap, float *y, size_t ys, int add)
{
    __m512 c0[OP_TOK], c1[OP_TOK];
#pragma GCC unroll 12
    for (int j = 0; j < T; j++) c0[j] = c1[j] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (size_t k = 0; k < kn; k++) {
        const __m512 w0 = _mm512_load_ps(panel + k * OP_ROWS), w1 = _mm512_load_ps(panel + k * OP_ROWS + 16);
        const float *b = ap + k * OP_TOK;
#pragma GCC unroll 12
        for (int j = 0; j < T; j++) {
            const __m512 bj = _mm512_set1_ps(b[j]);
            c0[j] = _mm512_fmadd_ps(w0, bj, c0[j]);
            c1[j] = _mm512_fmadd_ps(w1, bj, c1[j]);
        }
    }
    const __mmask16 m0 = R >= 16 ? (__mmask16)0xffff : tail_mask((size_t)R);
    const __mmask16 m1 = R >= 32 ? (__mmask16)0xffff : R <= 16 ? (__mmask16)0 : tail_mask((size_t)R - 16);
#pragma GCC unroll 12
    for (int j = 0; j < T; j++) {
        float *yo = y + (size_t)j * ys;
        __m512 s0 = c0[j], s1 = c1[j];
        if (add) s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(m0, yo)), s1 = _mm512_add_ps(s1, _mm512_maskz_loadu_ps(m1, yo + 16));
        _mm512_mask_storeu_ps(yo, m0, s0);
        _mm512_mask_storeu_ps(yo + 16, m1, s1);
    }
}

static void op_tile_rt(int T, int R, size_t kn, const float *panel, const float *ap, float *y, size_t ys, int add)
{
    switch (T) {
    case 1: op_tile(1, R, kn, panel, ap, y, ys, add); return;
    case 2: op_tile(2, R, kn, panel, ap, y, ys, add); return;
    case 3: op_tile(3, R, kn, panel, ap, y, ys, add); return;
    case 4: op_tile(4, R, kn, panel, ap, y, ys, add); return;
    case 5: op_tile(5, R, kn, panel, ap, y, ys, add); return;
    case 6: op_tile(6, R, kn, panel, ap, y, ys, add); return;
    case 7: op_tile(7, R, kn, panel, ap, y, ys, add); return;
    case 8: op_tile(8, R, kn, panel, ap, y, ys, add); return;
    case 9: op_tile(9, R, kn, panel, ap, y, ys, add); return;
    case 10: op_tile(10, R, kn, panel, ap, y, ys, add); return;
    case 11: op_tile(11, R, kn, panel, ap, y, ys, add); return;
    default: op_tile(12, R, kn, panel, ap, y, ys, add); return;
    }
}

/* Elements per chunk, at most. The fewer the chunks, the fewer times a tile's outputs are loaded
 * and added to (F16 pp128 on the Xeon of the README: 128 -> 512 -> 1024, 275 -> 309 -> 318
 * tokens/s); a chunk's packed activations (OP_GROUPS x 12 x 4 bytes an element: 528 KiB at 1024)
 * and panel stay within half the L2 (2 MiB there, 1 MiB on Zen 4 and 5). */
static size_t op_kmax(void)
{
    static atomic_size_t kmax; /* 0: not looked up yet */
    size_t k = atomic_load_explicit(&kmax, memory_order_relaxed);
    if (!k) {
        const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
        k = l2 >= (2l << 20) ? 1024 : 512;
        atomic_store_explicit(&kmax, k, memory_order_relaxed);
    }
    return k;
}

/* 0 when the per-thread buffers cannot be had (the caller takes the dot-product tiles). */
INLINE int gemm_float_outer(int wt, size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a,
                            size_t arb, size_t n_tok, float *y, size_t ys)
{
    const struct float_panel_shape shape = {OP_ROWS, OP_TOK, OP_GROUPS, OP_RBLK, op_kmax()};
    return float_panel_gemm(shape, op_pack_a, op_pack_w, op_tile_rt, wt, n, w, wrb, r0, r1, a, arb, n_tok, y, ys);
}

/* 2+ tokens (one token: KERNELS_FLOAT_ENTRIES's rows of dot_float) */
INLINE void gemm_float(int wt, size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a, size_t arb,
                       size_t n_tok, float *y, size_t ys)
{
    const unsigned char *pw = w, *pa = a;
    if (n_tok >= OP_MIN_TOK && n > 0 && gemm_float_outer(wt, n, w, wrb, r0, r1, a, arb, n_tok, y, ys)) return;
    for (size_t r = r0; r < r1; r += 2) {
        int R = r + 1 < r1 ? 2 : 1;
        for (size_t j = 0; j < n_tok; j += 4) {
            int T = n_tok - j >= 4 ? 4 : (int)(n_tok - j);
            tile_float_rt(wt, R, T, n, pw + r * wrb, wrb, pa + j * arb, arb, y + j * ys + r, ys);
        }
    }
}

/* The float-weight entry points (cpu_kernels_impl.h). */
KERNELS_FLOAT_ENTRIES(avx512)

/* ================================================================ quantized weights */

INLINE float scale_a(const unsigned char *row, size_t b) { return ld_f16(row + b * CPU_Q8_0_BYTES); }

INLINE __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* Scale vector: s0 in lanes 0..7 (block b), s1 in lanes 8..15 (block b+1). */
INLINE __m512 scale2(float s0, float s1)
{
    return _mm512_mask_blend_ps((__mmask16)0xff00, _mm512_set1_ps(s0), _mm512_set1_ps(s1));
}

/* 16 x i32 partial sums for a block pair; wneg = lanes where w < 0, wabs = |w|. */
INLINE __m512i idot16(__m512i wabs, __mmask64 wneg, __m512i av)
{
    __m512i s = _mm512_mask_sub_epi8(av, wneg, _mm512_setzero_si512(), av);
    return _mm512_madd_epi16(_mm512_maddubs_epi16(wabs, s), _mm512_set1_epi16(1));
}

/* 8 x i32 partial sums for one block (256-bit, as in the AVX2 kernels). */
INLINE __m256i idot8(__m256i w, __m256i av)
{
    __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(av, w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

INLINE float dot_quant(int q4, size_t n, const unsigned char *w, const unsigned char *a)
{
    size_t nb = n / QK8_0, b = 0;
    __m512 acc = _mm512_setzero_ps();
    for (; b + 2 <= nb; b += 2) {
        __m512i wv = join(load_wq(q4, w, b), load_wq(q4, w, b + 1));
        __m512i av = join(load_aq(a, b), load_aq(a, b + 1));
        __m512i p = idot16(_mm512_abs_epi8(wv), _mm512_movepi8_mask(wv), av);
        __m512 s = scale2(scale_w(q4, w, b) * scale_a(a, b), scale_w(q4, w, b + 1) * scale_a(a, b + 1));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), s, acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    if (b < nb) {
        __m256i p = idot8(load_wq(q4, w, b), load_aq(a, b));
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(scale_w(q4, w, b) * scale_a(a, b)));
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        sum += _mm_cvtss_f32(h);
    }
    return sum;
}

/* One weight row x T (1..4) tokens; writes y[j*ys]. */
INLINE void tile_quant(int q4, int T, size_t nb, const unsigned char *w, const unsigned char *a, size_t arb,
                       float *y, size_t ys)
{
    __m512 acc[4];
#pragma GCC unroll 4
    for (int j = 0; j < T; j++) acc[j] = _mm512_setzero_ps();
    size_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i wv = join(load_wq(q4, w, b), load_wq(q4, w, b + 1));
        __m512i wabs = _mm512_abs_epi8(wv);
        __mmask64 wneg = _mm512_movepi8_mask(wv);
        float dw0 = scale_w(q4, w, b), dw1 = scale_w(q4, w, b + 1);
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            const unsigned char *aj = a + j * arb;
            __m512i p = idot16(wabs, wneg, join(load_aq(aj, b), load_aq(aj, b + 1)));
            __m512 s = scale2(dw0 * scale_a(aj, b), dw1 * scale_a(aj, b + 1));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), s, acc[j]);
        }
    }
    if (b < nb) {
        /* odd last block: widen its 8 partial sums into the low lanes (high lanes add 0) */
        __m256i wv = load_wq(q4, w, b);
        float dw = scale_w(q4, w, b);
#pragma GCC unroll 4
        for (int j = 0; j < T; j++) {
            const unsigned char *aj = a + j * arb;
            __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(idot8(wv, load_aq(aj, b))), _mm256_set1_ps(dw * scale_a(aj, b)));
            acc[j] = _mm512_add_ps(acc[j], _mm512_castsi512_ps(_mm512_zextsi256_si512(_mm256_castps_si256(v))));
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < T; j++) y[j * ys] = _mm512_reduce_add_ps(acc[j]);
}

INLINE void gemm_quant(int q4, size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a, size_t arb,
                       size_t n_tok, float *y, size_t ys)
{
    const unsigned char *pw = w, *pa = a;
    size_t nb = n / QK8_0;
    if (n_tok == 1) {
        for (size_t r = r0; r < r1; r++) y[r] = dot_quant(q4, n, pw + r * wrb, pa);
        return;
    }
    for (size_t r = r0; r < r1; r++) {
        const unsigned char *wr = pw + r * wrb;
        size_t j = 0;
        for (; j + 4 <= n_tok; j += 4) tile_quant(q4, 4, nb, wr, pa + j * arb, arb, y + j * ys + r, ys);
        switch (n_tok - j) {
        case 1: tile_quant(q4, 1, nb, wr, pa + j * arb, arb, y + j * ys + r, ys); break;
        case 2: tile_quant(q4, 2, nb, wr, pa + j * arb, arb, y + j * ys + r, ys); break;
        case 3: tile_quant(q4, 3, nb, wr, pa + j * arb, arb, y + j * ys + r, ys); break;
        default: break;
        }
    }
}

/* Q8_0 weights x Q8_0 activations. */
float cpu_avx512_vec_dot_q8_0(size_t n, const void *w, const void *a) { return dot_quant(0, n, w, a); }
/* Q4_0 weights x Q8_0 activations. */
float cpu_avx512_vec_dot_q4_0(size_t n, const void *w, const void *a) { return dot_quant(1, n, w, a); }

/* GEMM, Q8_0 and Q4_0 weights (cpu_kernels_impl.h). */
KERNELS_QUANT_GEMMS(avx512)

/* ================================================================ quantize, conversions */

/* Same arithmetic as the scalar version: max|x| ignoring NaN (max_ps returns its second operand
 * when the first is NaN), d and id in scalar float, x*id, clamp to +-127 (NaN -> -127), round to
 * nearest even, then a truncating dword -> byte narrow (values already in range). */
void cpu_avx512_quantize_row_q8_0(const float *x, void *dst, size_t n)
{
    unsigned char *out = dst;
    const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    for (size_t b = 0; b < n / QK8_0; b++, out += CPU_Q8_0_BYTES) {
        const float *xb = x + b * QK8_0;
        __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
        __m512 m = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_setzero_ps());
        m = _mm512_max_ps(_mm512_abs_ps(v1), m);
        float amax = _mm512_reduce_max_ps(m);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t hd = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        memcpy(out, &hd, sizeof hd);
        const __m512 vid = _mm512_set1_ps(id);
        __m512 t0 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v0, vid), lo), hi);
        __m512 t1 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v1, vid), lo), hi);
        __m512i q0 = _mm512_cvt_roundps_epi32(t0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512i q1 = _mm512_cvt_roundps_epi32(t1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(void *)(out + 2), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(void *)(out + 18), _mm512_cvtepi32_epi8(q1));
    }
}

/* F16C conversion, masked last step; bit-identical to cpu_f16_to_f32. */
void cpu_avx512_f16_to_f32_row(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
    }
}

/* Round to nearest even, masked last step; bit-identical to cpu_f32_to_f16. */
void cpu_avx512_f32_to_f16_row(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail_mask(n - i);
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_mask_storeu_epi16(dst + i, m, h);
    }
}

/* g = g / (1 + e^-g) * u, 16 lanes a step, the last one masked. */
void cpu_avx512_swiglu_row(float *g, const float *u, size_t n)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : tail_mask(n - i);
        const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_maskz_loadu_ps(m, u + i)));
    }
}
