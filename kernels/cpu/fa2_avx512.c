/* fa2_avx512.c - the FlashAttention-2 job kernel for AVX-512 F/BW/VL/DQ. Built with -mavx512f
 * -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c (the Makefile does that for *_avx512.c); fa2.c
 * calls it only after cpu_kernels_init() found all four extensions. Contract: struct fa2_job in
 * fa2.h; any head_dim up to FA2_MAX_HEAD_DIM.
 *
 * The algorithm, data flow and prefetching of fa2_avx2.c (read that file's comment first); only
 * the two loops over head_dim are 16 lanes wide:
 *   - S = Qs Kᵀ: R x KJ zmm accumulators; each is folded to 8 lanes (lo + hi) and the same
 *     transposing reduction as in the AVX2 kernel gives 8 dot products per vector.
 *   - O = alpha O + P V: R x NV zmm accumulators (up to 16 of the 32 registers).
 * head_dim runs in chunks of 16; the last chunk of a head_dim that is not a multiple of 16 uses
 * masked loads and stores, which read and write nothing past it. The online softmax works on the
 * same two 8-lane vectors of scores per row as the AVX2 kernel (AVX-512VL runs that code as is). */
#include "kernels/cpu/fa2.h"
#include "kernels/cpu/fa2_simd.h"

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__) || \
    !defined(__FMA__) || !defined(__F16C__)
#error "fa2_avx512.c must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c"
#endif

#define INLINE static inline __attribute__((always_inline))
/* Register blocks are arrays indexed by constant loops: unrolled fully, they become registers. */
#define UNROLL _Pragma("GCC unroll 16")

#define FA2_PREFETCH_TILES 2 /* tiles of K and V requested ahead of the one being computed */

/* ================================================================ helpers */

/* Lane i of the result = sum of the 16 lanes of a[i]: each folded to 8 lanes, then reduce8. */
INLINE __m256 reduce8x16(const __m512 a[8])
{
    __m256 h[8];
    UNROLL for (int i = 0; i < 8; i++) h[i] = _mm256_add_ps(_mm512_castps512_ps256(a[i]), _mm512_extractf32x8_ps(a[i], 1));
    return reduce8(h);
}

/* Lanes [0, n) set, n in 0..16. */
INLINE __mmask16 first_n(int n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1u); }

/* The lanes m of 16 K/V elements at p, F16 converted or F32; other lanes 0 and not read. */
INLINE __m512 ld16(const unsigned char *p, int f16, __mmask16 m)
{
    return f16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)) : _mm512_maskz_loadu_ps(m, p);
}

/* Requests the line at p + off when off starts a cache line. */
INLINE void prefetch_at(const unsigned char *p, size_t off)
{
    if (p && (off & 63) == 0) _mm_prefetch((const char *)(p + off), _MM_HINT_T0);
}

/* ================================================================ one tile, R rows */

/* Dot products of R query rows with KJ keys (R * KJ <= 8): lane r * KJ + c of the result is
 * Qs row r . key j0 + c. Keys are rows of krow bytes from kt; f16 says their element type. */
INLINE __m256 qk_block(int R, int KJ, int f16, const float *qs, int D, const unsigned char *kt,
                       const unsigned char *pf, size_t krow, int j0)
{
    const size_t esz = f16 ? 2 : 4;
    __m512 acc[8];
    UNROLL for (int i = 0; i < 8; i++) acc[i] = _mm512_setzero_ps();
    for (int d = 0; d < D; d += 16) {
        const __mmask16 m = first_n(D - d);
        __m512 q[4];
        UNROLL for (int r = 0; r < R; r++) q[r] = _mm512_maskz_loadu_ps(m, qs + (size_t)r * D + d);
        UNROLL for (int c = 0; c < KJ; c++) {
            const size_t off = (size_t)(j0 + c) * krow + (size_t)d * esz;
            prefetch_at(pf, off);
            if (!f16) prefetch_at(pf, off + 32); /* 16 F32 = 64 bytes: off + 32 starts a line when off does not */
            const __m512 kv = ld16(kt + off, f16, m);
            UNROLL for (int r = 0; r < R; r++) acc[r * KJ + c] = _mm512_fmadd_ps(q[r], kv, acc[r * KJ + c]);
        }
    }
    return reduce8x16(acc);
}

/* The 16 scores of R <= 4 rows: s[r][0] keys 0-7, s[r][1] keys 8-15 (as in fa2_avx2.c). */
INLINE void qk_rows(int R, int f16, const float *qs, int D, const struct tile *t, __m256 s[4][2])
{
    const size_t krow = (size_t)D * (f16 ? 2 : 4);
    if (R == 1) {
        s[0][0] = qk_block(1, 8, f16, qs, D, t->k, t->pk, krow, 0);
        s[0][1] = qk_block(1, 8, f16, qs, D, t->k, t->pk, krow, 8);
    } else if (R == 2) {
        UNROLL for (int h = 0; h < 2; h++) {
            const __m256 a = qk_block(2, 4, f16, qs, D, t->k, t->pk, krow, 8 * h);
            const __m256 b = qk_block(2, 4, f16, qs, D, t->k, t->pk, krow, 8 * h + 4);
            scores_r2(a, b, s, h);
        }
    } else {
        UNROLL for (int h = 0; h < 2; h++) {
            __m256d x[4];
            UNROLL for (int p = 0; p < 4; p++)
                x[p] = _mm256_castps_pd(qk_block(R, 2, f16, qs, D, t->k, t->pk, krow, 8 * h + 2 * p));
            scores_r4(x, s, h);
        }
    }
}

/* Columns [d, d + 16 NV) of rows o[0..R) over the first nk keys; only lanes m of each chunk of
 * 16 are read or written (m is all lanes except for a last, partial chunk with NV == 1).
 * first: O starts at 0; rescale: O starts at alpha O, else at O (every alpha is 1). */
INLINE void pv_block(int R, int NV, int f16, const struct tile *t, size_t vrow, const float *P, float *const *o,
                     const float *alpha, int rescale, int d, __mmask16 m)
{
    const size_t esz = f16 ? 2 : 4;
    __m512 acc[4][8];
    UNROLL for (int r = 0; r < R; r++) {
        const __m512 al = _mm512_set1_ps(alpha[r]);
        UNROLL for (int v = 0; v < NV; v++) {
            if (t->first)
                acc[r][v] = _mm512_setzero_ps();
            else if (rescale)
                acc[r][v] = _mm512_mul_ps(al, _mm512_maskz_loadu_ps(m, o[r] + d + 16 * v));
            else
                acc[r][v] = _mm512_maskz_loadu_ps(m, o[r] + d + 16 * v);
        }
    }
    for (int k = 0; k < t->nk; k++) {
        __m512 p[4];
        UNROLL for (int r = 0; r < R; r++) p[r] = _mm512_set1_ps(P[r * FA2_BLOCK + k]);
        UNROLL for (int v = 0; v < NV; v++) {
            const size_t off = (size_t)k * vrow + (size_t)(d + 16 * v) * esz;
            prefetch_at(t->pv, off);
            if (!f16) prefetch_at(t->pv, off + 32);
            const __m512 vv = ld16(t->v + off, f16, m);
            UNROLL for (int r = 0; r < R; r++) acc[r][v] = _mm512_fmadd_ps(p[r], vv, acc[r][v]);
        }
    }
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int v = 0; v < NV; v++) _mm512_mask_storeu_ps(o[r] + d + 16 * v, m, acc[r][v]);
}

INLINE void pv_rows(int R, int NV, int f16, int D, const struct tile *t, const float *P, float *const *o,
                    const float *alpha, int rescale)
{
    const size_t vrow = (size_t)D * (f16 ? 2 : 4);
    int d = 0;
    for (; d + 16 * NV <= D; d += 16 * NV) pv_block(R, NV, f16, t, vrow, P, o, alpha, rescale, d, 0xffff);
    if (NV > 4) /* what is left in the widest blocks that fit */
        for (; d + 64 <= D; d += 64) pv_block(R, 4, f16, t, vrow, P, o, alpha, rescale, d, 0xffff);
    if (NV > 2)
        for (; d + 32 <= D; d += 32) pv_block(R, 2, f16, t, vrow, P, o, alpha, rescale, d, 0xffff);
    for (; d < D; d += 16) pv_block(R, 1, f16, t, vrow, P, o, alpha, rescale, d, first_n(D - d));
}

/* Steps 1-3 of one tile for R <= 4 rows (qs, st, o: this block's rows). f16: t's K/V type. */
INLINE void tile_rows(int R, int f16, int D, const float *qs, const struct tile *t, struct rowstate *st,
                      float *const *o)
{
    _Alignas(64) float P[4 * FA2_BLOCK];
    float alpha[4];
    __m256 s[4][2];
    qk_rows(R, f16, qs, D, t, s);
    const int rescale = softmax_rows(R, t, s, st, P, alpha);
    pv_rows(R, R == 1 ? 8 : R == 2 ? 8 : 4, f16, D, t, P, o, alpha, rescale); /* R x NV <= 16 accumulators */
}

/* ================================================================ the job */


#define TILE_FN(R, F)                                                                                     \
    static __attribute__((noinline)) void tile_##R##_##F(int D, const float *qs, const struct tile *t,    \
                                                         struct rowstate *st, float *const *o)            \
    {                                                                                                     \
        tile_rows(R, F, D, qs, t, st, o);                                                                 \
    }
TILE_FN(1, 0)
TILE_FN(2, 0)
TILE_FN(3, 0)
TILE_FN(4, 0)
TILE_FN(1, 1)
TILE_FN(2, 1)
TILE_FN(3, 1)
TILE_FN(4, 1)

/* [F32 / F16 rows][R - 1] */
static const tile_fn g_tiles[2][4] = {{tile_1_0, tile_2_0, tile_3_0, tile_4_0}, {tile_1_1, tile_2_1, tile_3_1, tile_4_1}};

/* AVX-512 job, any head_dim; see fa2.h. Thread-safe; about 50 KiB of stack. */
void fa2_avx512_job(const struct fa2_job *j)
{
    const int D = j->head_dim, rows = j->n_tok * j->n_grp, f16 = j->kv_f16;
    _Alignas(64) float qs[FA2_MAX_ROW_FLOATS]; /* (rows, D) q * scale */
    _Alignas(64) float kt[FA2_BLOCK * FA2_MAX_HEAD_DIM];
    _Alignas(64) float vt[FA2_BLOCK * FA2_MAX_HEAD_DIM];
    struct rowstate st[FA2_MAX_ROWS];
    float *o[FA2_MAX_ROWS];

    const __m512 sc = _mm512_set1_ps(j->scale);
    for (int r = 0; r < rows; r++) {
        const float *q = job_row(j, r, &st[r], &o[r]);
        for (int d = 0; d < D; d += 16) {
            const __mmask16 m = first_n(D - d);
            _mm512_mask_storeu_ps(qs + (size_t)r * D + d, m, _mm512_mul_ps(sc, _mm512_maskz_loadu_ps(m, q + d)));
        }
    }

    /* more than 4 rows: several row blocks read each tile, so F16 is converted once into kt/vt */
    const int buffered = f16 && rows > 4;
    const tile_fn *tiles = g_tiles[buffered ? 0 : f16];
    prefetch_first_tiles(j, FA2_PREFETCH_TILES);
    for (int kb = j->kb0; kb < j->kb1; kb++) {
        const unsigned char *pk, *pv;
        struct tile t = job_tile(j, kb, FA2_PREFETCH_TILES, &pk, &pv);
        if (buffered) {
            /* the whole K tile (scores of invisible keys are masked), the visible V rows */
            const int nkd = FA2_BLOCK * D, nvd = t.nk * D;
            for (int i = 0; i < nkd; i += 16) {
                prefetch_at(pk, 2 * (size_t)i);
                const __mmask16 m = first_n(nkd - i);
                _mm512_mask_storeu_ps(kt + i, m, ld16(t.k + 2 * (size_t)i, 1, m));
            }
            for (int i = 0; i < nvd; i += 16) {
                const __mmask16 m = first_n(nvd - i);
                _mm512_mask_storeu_ps(vt + i, m, ld16(t.v + 2 * (size_t)i, 1, m));
            }
            t.k = (const unsigned char *)kt;
            t.v = (const unsigned char *)vt;
            t.pv = pv; /* pk was requested during the conversion; pv while the first block runs */
        } else {
            t.pk = pk;
            t.pv = pv;
        }
        run_row_blocks(j, tiles, kb, &t, qs, st, o);
    }
    if (finish_job(j, st, o)) return;
    for (int r = 0; r < rows; r++) {
        const float l = _mm256_cvtss_f32(st[r].l);
        const __m512 inv = _mm512_set1_ps(l > 0.0f ? 1.0f / l : 0.0f);
        for (int d = 0; d < D; d += 16) {
            const __mmask16 m = first_n(D - d);
            _mm512_mask_storeu_ps(o[r] + d, m,
                                  l > 0.0f ? _mm512_mul_ps(inv, _mm512_maskz_loadu_ps(m, o[r] + d)) : _mm512_setzero_ps());
        }
    }
}
