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
#include "kernels/cpu/kernels_simd512.h"

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

/* Columns [d, d + 16 NV) of rows o[0..R) over the first nk keys, P of row r and key k at
 * P[r prs + k pks]; only lanes m of each chunk of
 * 16 are read or written (m is all lanes except for a last, partial chunk with NV == 1).
 * first: O starts at 0; rescale: O starts at alpha O, else at O (every alpha is 1). */
INLINE void pv_block(int R, int NV, int f16, const struct tile *t, size_t vrow, const float *P, int prs, int pks,
                     float *const *o, const float *alpha, int rescale, int d, __mmask16 m)
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
        UNROLL for (int r = 0; r < R; r++) p[r] = _mm512_set1_ps(P[r * prs + k * pks]);
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

INLINE void pv_rows(int R, int NV, int f16, int D, const struct tile *t, const float *P, int prs, int pks,
                    float *const *o, const float *alpha, int rescale)
{
    const size_t vrow = (size_t)D * (f16 ? 2 : 4);
    int d = 0;
    for (; d + 16 * NV <= D; d += 16 * NV) pv_block(R, NV, f16, t, vrow, P, prs, pks, o, alpha, rescale, d, 0xffff);
    if (NV > 4) /* what is left in the widest blocks that fit */
        for (; d + 64 <= D; d += 64) pv_block(R, 4, f16, t, vrow, P, prs, pks, o, alpha, rescale, d, 0xffff);
    if (NV > 2)
        for (; d + 32 <= D; d += 32) pv_block(R, 2, f16, t, vrow, P, prs, pks, o, alpha, rescale, d, 0xffff);
    for (; d < D; d += 16) pv_block(R, 1, f16, t, vrow, P, prs, pks, o, alpha, rescale, d, first_n(D - d));
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
    pv_rows(R, R == 1 ? 8 : R == 2 ? 8 : 4, f16, D, t, P, FA2_BLOCK, 1, o, alpha, rescale); /* R x NV <= 16 accumulators */
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

/* ================================================================ many rows: outer products */

/* A job of OUTER_MIN_ROWS rows or more (a prefill chunk) with head_dim % 16 == 0 takes this path:
 *   1. the K tile (16 keys) is converted once, transposed: kt[d] = element d of the 16 keys;
 *   2. S for blocks of 16 rows, s[r] = the 16 keys' scores, as outer products: per d, one kt load
 *      and 16 FMAs with q[r][d] broadcast (no reduction across lanes, unlike the dot products
 *      above: 16 MACs per lane-op instead of 8 plus the reduction);
 *   3. s transposed (s[k] = key k for the 16 rows), so the masking and the online softmax run
 *      lane-wise over 16 rows at once and P is stored key-major;
 *   4. O += P V as in the row blocks above, 4 rows x 4 vectors of head_dim at a time.
 * On the Xeon of the README, bench_fa2's prefill (512 tokens, head_dim 128, GQA 7, 2 threads) went
 * from 142 GFLOP/s (the dot products, no faster than the AVX2 kernel's 144) to 172, and a Q8_0
 * 512-token prompt of the 0.5B model (head_dim 64) from 826 to 880 tokens/s. A job of fewer rows
 * (a decode token of a group under 16 heads) keeps the dot products. */
#define OUTER_MIN_ROWS 16

/* Transposes the 16 x D tile at k (F16 or F32 rows of D) into kt (D vectors of 16 keys). */
INLINE void k_transposed(const unsigned char *k, int f16, int D, const unsigned char *pk, const unsigned char *pv,
                         float *kt)
{
    const size_t esz = f16 ? 2 : 4, krow = (size_t)D * esz;
    for (int d0 = 0; d0 < D; d0 += 16) {
        __m512 r[16];
        UNROLL for (int i = 0; i < 16; i++) {
            prefetch_at(pk, (size_t)i * krow + (size_t)d0 * esz);
            prefetch_at(pv, (size_t)i * krow + (size_t)d0 * esz);
            r[i] = ld16(k + (size_t)i * krow + (size_t)d0 * esz, f16, 0xffff);
        }
        transpose16(r);
        UNROLL for (int i = 0; i < 16; i++) _mm512_store_ps(kt + (size_t)(d0 + i) * 16, r[i]);
    }
}

/* Scores of 16 rows against the transposed tile: s[r] lane k = row r . key k. qt holds the rows
 * transposed too (qt[16 d + r] = row r's element d), so the 16 broadcasts of a step are one
 * pointer and constant offsets. */
INLINE void qk_outer(const float *qt, int D, const float *kt, __m512 s[16])
{
    UNROLL for (int r = 0; r < 16; r++) s[r] = _mm512_setzero_ps();
    for (int d = 0; d < D; d++) {
        const __m512 kd = _mm512_load_ps(kt + (size_t)d * 16);
        const float *q = qt + (size_t)d * 16;
        UNROLL for (int r = 0; r < 16; r++) s[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r]), kd, s[r]);
    }
}

/* The online softmax of 16 rows over the tile, lane-wise: s[k] = key k's scores of the rows (key-
 * major, after the transpose); keys at or past lim[r] masked for row r (diagonal tile); m, l the
 * rows' running max and sum (updated); P[16 k + r] = e^(s - m'); alpha[r] = e^(m - m'). Returns 1
 * if some alpha is not 1. */
INLINE int softmax_outer(const struct tile *t, const int *lim, __m512 s[16], float *m, float *l, float *P, float *alpha)
{
    if (t->mask) {
        const __m512i lv = _mm512_loadu_si512((const void *)lim);
        const __m512 ninf = _mm512_set1_ps(-INFINITY);
        UNROLL for (int k = 0; k < 16; k++)
            s[k] = _mm512_mask_blend_ps(_mm512_cmpgt_epi32_mask(lv, _mm512_set1_epi32(k)), ninf, s[k]);
    }
    __m512 mx = s[0];
    UNROLL for (int k = 1; k < 16; k++) mx = _mm512_max_ps(mx, s[k]);
    const __m512 mo = _mm512_loadu_ps(m), mn = _mm512_max_ps(mo, mx);
    const __m512 al = exp16(_mm512_sub_ps(mo, mn));
    __m512 sum = _mm512_setzero_ps();
    UNROLL for (int k = 0; k < 16; k++) {
        const __m512 pk = exp16(_mm512_sub_ps(s[k], mn));
        sum = _mm512_add_ps(sum, pk);
        _mm512_store_ps(P + 16 * k, pk);
    }
    _mm512_storeu_ps(l, _mm512_fmadd_ps(al, _mm512_loadu_ps(l), sum));
    _mm512_storeu_ps(m, mn);
    _mm512_storeu_ps(alpha, al);
    return _mm512_cmp_ps_mask(al, _mm512_set1_ps(1.0f), _CMP_NEQ_UQ) != 0;
}

/* Steps 2-4 of the tile for rows [r0, r0 + R) (R <= 16; qt: their 16 rows transposed, zero past R). */
static __attribute__((noinline)) void outer_block(int R, int D, const float *qt, const float *kt, const struct tile *t,
                                                  const int *lim, float *m, float *l, float *const *o)
{
    _Alignas(64) float P[16 * 16];
    _Alignas(64) float alpha[16];
    __m512 s[16];
    qk_outer(qt, D, kt, s);
    transpose16(s);
    const int rescale = softmax_outer(t, lim, s, m, l, P, alpha);
    for (int r = 0; r < R; r += 4) {
        const int n = R - r < 4 ? R - r : 4;
        if (n == 4) pv_rows(4, 4, 0, D, t, P + r, 1, 16, o + r, alpha + r, rescale);
        else if (n == 3) pv_rows(3, 4, 0, D, t, P + r, 1, 16, o + r, alpha + r, rescale);
        else if (n == 2) pv_rows(2, 8, 0, D, t, P + r, 1, 16, o + r, alpha + r, rescale);
        else pv_rows(1, 8, 0, D, t, P + r, 1, 16, o + r, alpha + r, rescale);
    }
}

static void outer_job(const struct fa2_job *j)
{
    const int D = j->head_dim, G = j->n_grp, rows = j->n_tok * j->n_grp, f16 = j->kv_f16;
    const int padded = (rows + 15) / 16 * 16;
    /* q * scale of each 16 rows transposed: [padded / 16][D][16] */
    _Alignas(64) float qt[FA2_MAX_ROW_FLOATS + 15 * FA2_MAX_HEAD_DIM];
    _Alignas(64) float kt[FA2_BLOCK * FA2_MAX_HEAD_DIM];
    _Alignas(64) float vt[FA2_BLOCK * FA2_MAX_HEAD_DIM];
    float m[FA2_MAX_ROWS + 16], l[FA2_MAX_ROWS + 16];
    int lim[FA2_MAX_ROWS + 16];
    float *o[FA2_MAX_ROWS];

    const __m512 sc = _mm512_set1_ps(j->scale);
    const float *q[FA2_MAX_ROWS + 16];
    for (int r = 0; r < padded; r++) {
        struct rowstate unused;
        m[r] = -FLT_MAX / 2, l[r] = 0.0f;
        q[r] = r < rows ? job_row(j, r, &unused, &o[r]) : NULL;
    }
    for (int r0 = 0; r0 < padded; r0 += 16)
        for (int d0 = 0; d0 < D; d0 += 16) {
            __m512 x[16];
            UNROLL for (int i = 0; i < 16; i++)
                x[i] = q[r0 + i] ? _mm512_mul_ps(sc, _mm512_loadu_ps(q[r0 + i] + d0)) : _mm512_setzero_ps();
            transpose16(x);
            UNROLL for (int i = 0; i < 16; i++) _mm512_store_ps(qt + ((size_t)r0 * D + (size_t)(d0 + i) * 16), x[i]);
        }
    prefetch_first_tiles(j, FA2_PREFETCH_TILES);
    for (int kb = j->kb0; kb < j->kb1; kb++) {
        const unsigned char *pk, *pv;
        struct tile t = job_tile(j, kb, FA2_PREFETCH_TILES, &pk, &pv);
        k_transposed(t.k, f16, D, pk, pv, kt);
        const int nvd = t.nk * D;
        for (int i = 0; i < nvd; i += 16) _mm512_store_ps(vt + i, ld16(t.v + (size_t)i * (f16 ? 2 : 4), f16, 0xffff));
        t.k = (const unsigned char *)kt;
        t.v = (const unsigned char *)vt;
        t.pk = t.pv = NULL;
        const int key0 = kb * FA2_BLOCK;
        for (int r = 0; r < padded; r++) lim[r] = r < rows ? j->kend0 + r / G - key0 : 0;
        for (int r0 = 0; r0 < rows; r0 += 16)
            outer_block(rows - r0 < 16 ? rows - r0 : 16, D, qt + (size_t)r0 * D, kt, &t, lim + r0, m + r0, l + r0,
                        o + r0);
    }
    if (j->kb0 >= j->kb1)
        for (int r = 0; r < rows; r++) memset(o[r], 0, (size_t)D * sizeof(float));
    if (j->ml) {
        for (int r = 0; r < rows; r++) j->ml[2 * r] = m[r], j->ml[2 * r + 1] = l[r];
        return;
    }
    for (int r = 0; r < rows; r++) {
        const __m512 inv = _mm512_set1_ps(l[r] > 0.0f ? 1.0f / l[r] : 0.0f);
        for (int d = 0; d < D; d += 16)
            _mm512_storeu_ps(o[r] + d, l[r] > 0.0f ? _mm512_mul_ps(inv, _mm512_loadu_ps(o[r] + d)) : _mm512_setzero_ps());
    }
}

/* AVX-512 job, any head_dim; see fa2.h. Thread-safe; about 50 KiB of stack (70 on the outer-product path). */
void fa2_avx512_job(const struct fa2_job *j)
{
    const int D = j->head_dim, rows = j->n_tok * j->n_grp, f16 = j->kv_f16;
    if (rows >= OUTER_MIN_ROWS && D % 16 == 0) {
        outer_job(j);
        return;
    }
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
