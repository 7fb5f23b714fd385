/* kernels_simd.h - the static inline helpers kernels_avx2.c and kernels_avx512.c share (weight
 * types, scalar F16 load, the Q8_0/Q4_0 block loads) and the float-weight entry points both
 * define the same way over their own dot_float / gemm_float. Include only from a file built with
 * at least -mavx2 -mfma -mf16c (both are). */
#ifndef ATTND_KERNELS_SIMD_H
#define ATTND_KERNELS_SIMD_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/cpu/cpu_kernels_impl.h"
#include "kernels/cpu/scratch.h"

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "kernels_simd.h needs -mavx2 -mfma -mf16c"
#endif

#define INLINE static inline __attribute__((always_inline))

enum { WT_F32, WT_F16, WT_BF16 };

INLINE float ld_f16(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}

/* e^x for x <= 88; x < -87.3 (also -inf and NaN) gives 0. Cody-Waite reduction x = n ln2 + r,
 * |r| <= ln2/2, degree-6 Taylor polynomial: relative error below 2e-7. exp(0) is exactly 1. */
INLINE __m256 exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.3f);
    const __m256 valid = _mm256_cmp_ps(x, lo, _CMP_GE_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723212e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(_mm256_mul_ps(p, _mm256_castsi256_ps(e)), valid);
}

/* Generation streams every weight once per token, and on the Xeon (AMX) measured the hardware
 * prefetch left the dot loops waiting on memory: each step of a weight loop asks for the bytes it
 * will read KERNELS_PREFETCH ahead (Q8_0 / Q4_0 generation, tokens/s: no prefetch 27 / 29, 512 B
 * ahead 46 / 67, 2 KB 50 / 81, 4 KB 51 / 74). Rows lie one after another, so near a row's end
 * that is the next row's start. */
#define KERNELS_PREFETCH 2048

/* A matrix-vector product reads MV_STREAMS rows at a time, one from each quarter of its range
 * [r0, r1): rows r0 + k, r0 + q + k, r0 + 2q + k, r0 + 3q + k (q = (r1 - r0) / 4; the last rows
 * left over go one at a time), so each thread reads several weight streams far apart. With one
 * stream the dot loops left the memory idle (F16 896 x 4864 and 151936 x 896, two threads:
 * 31.5 -> 41.8 and 33.8 -> 39.3 GB/s with two or four streams; a plain one-stream read of the
 * same bytes, 40 and 38; Q4_0 generation 95 -> 112 tokens/s with two, 116 with four).
 * fn(R, pw, ctx, out) computes R rows (pw[0..R), R = MV_STREAMS or 1) into out[0..R). */
#define MV_STREAMS 4
#define MV_ROWS for (int k = 0; k < R; k++)
typedef void (*mv_rows_fn)(int R, const unsigned char *const pw[MV_STREAMS], const void *ctx, float out[MV_STREAMS]);

INLINE void mv_streams(mv_rows_fn fn, const void *ctx, const unsigned char *w, size_t wrb, size_t r0, size_t r1,
                       float *y)
{
    const size_t q = (r1 - r0) / MV_STREAMS;
    for (size_t r = r0; r < r0 + q; r++) {
        const unsigned char *pw[MV_STREAMS];
        float out[MV_STREAMS];
        for (int k = 0; k < MV_STREAMS; k++) pw[k] = w + (r + (size_t)k * q) * wrb;
        fn(MV_STREAMS, pw, ctx, out);
        for (int k = 0; k < MV_STREAMS; k++) y[r + (size_t)k * q] = out[k];
    }
    for (size_t r = r0 + MV_STREAMS * q; r < r1; r++) {
        const unsigned char *pw[MV_STREAMS] = {w + r * wrb};
        float out[MV_STREAMS];
        fn(1, pw, ctx, out);
        y[r] = out[0];
    }
}

INLINE void prefetch_ahead(const unsigned char *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)(p + KERNELS_PREFETCH + o), _MM_HINT_T0);
}

/* The chunk length that splits n elements into the fewest chunks of at most kmax (a multiple of
 * 16), evenly: a multiple of 16, the last chunk possibly shorter. */
INLINE size_t even_chunk(size_t n, size_t kmax)
{
    const size_t chunks = n ? (n + kmax - 1) / kmax : 1;
    return ((n + chunks - 1) / chunks + 15) / 16 * 16;
}

/* The weights a float panel GEMM packs next: `rows` rows one stride apart (which the hardware
 * prefetchers do not follow), `bytes` of each from `at` on. They are asked for in pieces, one
 * before each tile of the current panel, so that the loads overlap the arithmetic. */
struct panel_next {
    const unsigned char *at; /* the first row's first byte, or NULL: nothing to fetch */
    size_t wrb, lines_per_row, lines;
};

INLINE struct panel_next panel_next_of(const unsigned char *at, size_t wrb, size_t rows, size_t bytes)
{
    const size_t lpr = (bytes + 63) / 64 + 1; /* + 1: a row's bytes need not start on a line */
    return (struct panel_next){at, wrb, lpr, lpr * rows};
}

/* Piece `part` of `parts` of nx's lines, into L1 (the panels are packed from there at once). */
INLINE void panel_next_fetch(const struct panel_next *nx, size_t part, size_t parts)
{
    if (!nx->at) return;
    const size_t i0 = nx->lines * part / parts, i1 = nx->lines * (part + 1) / parts;
    size_t row = i0 / nx->lines_per_row, col = i0 - row * nx->lines_per_row;
    const unsigned char *p = nx->at + row * nx->wrb;
    for (size_t i = i0; i < i1; i++) {
        _mm_prefetch((const char *)(p + col * 64), _MM_HINT_T0);
        if (++col == nx->lines_per_row) col = 0, p += nx->wrb;
    }
}

/* The panel after rows [r, r + per) of chunk [k0, k1) in a GEMM over rows [rb, re) and n columns
 * of es-byte weights (w: row 0): the next rows of the chunk, else the block's first rows of the
 * next chunk (k1 + kstep at most), else none. */
INLINE struct panel_next panel_next_after(const unsigned char *w, size_t wrb, size_t es, size_t rb, size_t re,
                                          size_t r, size_t per, size_t k0, size_t k1, size_t n, size_t kstep)
{
    if (r + per < re) return panel_next_of(w + (r + per) * wrb + k0 * es, wrb, re - r - per < per ? re - r - per : per,
                                           (k1 - k0) * es);
    if (k1 < n) return panel_next_of(w + rb * wrb + k1 * es, wrb, re - rb < per ? re - rb : per,
                                     (n - k1 < kstep ? n - k1 : kstep) * es);
    return (struct panel_next){0};
}

/* ---- the float panel GEMM driver, shared by the AVX2 and AVX-512 outer-product kernels ----
 * y (n_tok, rows [r0, r1)) (+)= a . W^T for f32/f16/bf16 weights W: per pass of groups x tok
 * tokens and block of rblk rows, K is cut into even chunks of at most kmax elements; each chunk's
 * activations are packed per token group (pack_a), then per panel of `rows` weight rows the chunk
 * is converted and transposed once (pack_w) and every token group runs a tile (tile) that adds
 * into y after the first chunk. While a panel's tiles run, the next panel's weights (panel_next)
 * and the outputs the next tile adds to are asked for. Buffers: the thread's scratch_get.
 * Returns 0 when those cannot be had. Inlined with constant shape and functions. */
struct float_panel_shape {
    size_t rows, tok, groups, rblk, kmax;
};
typedef void (*float_pack_a_fn)(int T, const unsigned char *a, size_t arb, size_t k0, size_t kn, float *ap);
typedef void (*float_pack_w_fn)(int wt, const unsigned char *w, size_t wrb, int R, size_t k0, size_t kn, float *panel);
typedef void (*float_tile_fn)(int T, int R, size_t kn, const float *panel, const float *ap, float *y, size_t ys,
                              int add);

/* The lines of y the tile of tokens [t, t + tok) and rows [r, r + rows) loads and adds to. */
INLINE void prefetch_outputs(const float *y, size_t ys, size_t t, size_t t_end, size_t r, size_t rows)
{
    for (; t < t_end; t++)
        for (size_t ri = 0; ri < rows; ri += 16) _mm_prefetch((const char *)(y + t * ys + r + ri), _MM_HINT_T0);
}

INLINE int float_panel_gemm(const struct float_panel_shape sh, float_pack_a_fn pack_a, float_pack_w_fn pack_w,
                            float_tile_fn tile, int wt, size_t n, const void *w, size_t wrb, size_t r0, size_t r1,
                            const void *a, size_t arb, size_t n_tok, float *y, size_t ys)
{
    const size_t es = wt == WT_F32 ? 4 : 2, kstep = even_chunk(n, sh.kmax), pass = sh.groups * sh.tok;
    float *const panel = (float *)scratch_get((sh.groups * sh.tok + sh.rows) * (kstep ? kstep : 1) * sizeof(float));
    if (!panel) return 0;
    float *const acts = panel + sh.rows * kstep; /* groups x (kstep x tok) */
    const unsigned char *pw = (const unsigned char *)w, *pa = (const unsigned char *)a;
    for (size_t t0 = 0; t0 < n_tok; t0 += pass) {
        const size_t tn = n_tok - t0 < pass ? n_tok - t0 : pass, groups = (tn + sh.tok - 1) / sh.tok;
        for (size_t rb = r0; rb < r1; rb += sh.rblk) {
            const size_t rbe = r1 - rb < sh.rblk ? r1 : rb + sh.rblk;
            for (size_t k0 = 0; k0 < n || k0 == 0; k0 += kstep) { /* n == 0: one pass writes zeros */
                const size_t kn = n - k0 < kstep ? n - k0 : kstep;
                for (size_t g = 0; g < groups; g++) {
                    const size_t j = g * sh.tok;
                    pack_a(tn - j < sh.tok ? (int)(tn - j) : (int)sh.tok, pa + (t0 + j) * arb, arb, k0, kn,
                           acts + g * kstep * sh.tok);
                }
                for (size_t r = rb; r < rbe; r += sh.rows) {
                    const int R = rbe - r < sh.rows ? (int)(rbe - r) : (int)sh.rows;
                    pack_w(wt, pw + r * wrb, wrb, R, k0, kn, panel);
                    const struct panel_next nx =
                        panel_next_after(pw, wrb, es, rb, rbe, r, sh.rows, k0, k0 + kn, n, kstep);
                    for (size_t g = 0; g < groups; g++) {
                        const size_t j = g * sh.tok, jn = j + sh.tok, jn_end = jn + sh.tok < tn ? jn + sh.tok : tn;
                        panel_next_fetch(&nx, g, groups);
                        if (k0 > 0 && jn < tn) prefetch_outputs(y, ys, t0 + jn, t0 + jn_end, r, (size_t)R);
                        tile(tn - j < sh.tok ? (int)(tn - j) : (int)sh.tok, R, kn, panel, acts + g * kstep * sh.tok,
                             y + (t0 + j) * ys + r, ys, k0 > 0);
                    }
                }
                if (n == 0) break;
            }
        }
    }
    return 1;
}

/* The 32 weights of block b as int8: Q8_0 as stored, Q4_0 unpacked (low nibbles are elements
 * 0..15, high nibbles 16..31) minus 8. */
INLINE __m256i load_wq(int q4, const unsigned char *row, size_t b)
{
    if (!q4) return _mm256_loadu_si256((const __m256i *)(const void *)(row + b * CPU_Q8_0_BYTES + 2));
    __m128i raw = _mm_loadu_si128((const __m128i *)(const void *)(row + b * CPU_Q4_0_BYTES + 2));
    __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1);
    return _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0f)), _mm256_set1_epi8(8));
}

/* The 32 int8 quants of Q8_0 activation block b. */
INLINE __m256i load_aq(const unsigned char *row, size_t b)
{
    return _mm256_loadu_si256((const __m256i *)(const void *)(row + b * CPU_Q8_0_BYTES + 2));
}

/* The f16 scale of weight block b. */
INLINE float scale_w(int q4, const unsigned char *row, size_t b)
{
    return ld_f16(row + b * (q4 ? CPU_Q4_0_BYTES : CPU_Q8_0_BYTES));
}

/* Defines cpu_<isa>_vec_dot_{f32,f16,bf16} and cpu_<isa>_gemm_{f32,f16,bf16} (declared in
 * cpu_kernels_impl.h) over the including file's dot_float(wt, n, w, a), dot_float_rows(wt, n, pw,
 * a, out) (MV_STREAMS rows at once) and gemm_float(wt, ...) (2+ tokens; one token takes its rows
 * through mv_streams). */
struct float_rows_ctx {
    int wt;
    size_t n;
    const unsigned char *a;
};
#define KERNELS_FLOAT_ENTRIES(isa)                                                                          \
    INLINE void float_rows(int R, const unsigned char *const pw[MV_STREAMS], const void *ctx, float out[MV_STREAMS]) \
    {                                                                                                          \
        const struct float_rows_ctx *c = (const struct float_rows_ctx *)ctx;                                  \
        if (R == MV_STREAMS) dot_float_rows(c->wt, c->n, pw, c->a, out);                                       \
        else out[0] = dot_float(c->wt, c->n, pw[0], c->a);                                                     \
    }                                                                                                          \
    static void gemm_float_any(int wt, size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a, \
                               size_t arb, size_t n_tok, float *y, size_t ys)                                 \
    {                                                                                                          \
        if (n_tok != 1) {                                                                                      \
            gemm_float(wt, n, w, wrb, r0, r1, a, arb, n_tok, y, ys);                                           \
            return;                                                                                            \
        }                                                                                                      \
        const struct float_rows_ctx c = {wt, n, (const unsigned char *)a};                                    \
        mv_streams(float_rows, &c, (const unsigned char *)w, wrb, r0, r1, y);                                  \
    }                                                                                                          \
    float cpu_##isa##_vec_dot_f32(size_t n, const void *w, const void *a) { return dot_float(WT_F32, n, w, a); } \
    float cpu_##isa##_vec_dot_f16(size_t n, const void *w, const void *a) { return dot_float(WT_F16, n, w, a); } \
    float cpu_##isa##_vec_dot_bf16(size_t n, const void *w, const void *a) { return dot_float(WT_BF16, n, w, a); } \
    void cpu_##isa##_gemm_f32(size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a, size_t arb, \
                              size_t n_tok, float *y, size_t ys)                                              \
    {                                                                                                          \
        gemm_float_any(WT_F32, n, w, wrb, r0, r1, a, arb, n_tok, y, ys);                                       \
    }                                                                                                          \
    void cpu_##isa##_gemm_f16(size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a, size_t arb, \
                              size_t n_tok, float *y, size_t ys)                                              \
    {                                                                                                          \
        gemm_float_any(WT_F16, n, w, wrb, r0, r1, a, arb, n_tok, y, ys);                                       \
    }                                                                                                          \
    void cpu_##isa##_gemm_bf16(size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a,        \
                               size_t arb, size_t n_tok, float *y, size_t ys)                                 \
    {                                                                                                          \
        gemm_float_any(WT_BF16, n, w, wrb, r0, r1, a, arb, n_tok, y, ys);                                      \
    }

/* Defines cpu_<isa>_gemm_{q8_0,q4_0} over the including file's gemm_quant(q4, ...). */
#define KERNELS_QUANT_GEMMS(isa)                                                                            \
    void cpu_##isa##_gemm_q8_0(size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a,        \
                               size_t arb, size_t n_tok, float *y, size_t ys)                                 \
    {                                                                                                          \
        gemm_quant(0, n, w, wrb, r0, r1, a, arb, n_tok, y, ys);                                                \
    }                                                                                                          \
    void cpu_##isa##_gemm_q4_0(size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a,        \
                               size_t arb, size_t n_tok, float *y, size_t ys)                                 \
    {                                                                                                          \
        gemm_quant(1, n, w, wrb, r0, r1, a, arb, n_tok, y, ys);                                                \
    }

#endif
