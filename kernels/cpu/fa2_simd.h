/* fa2_simd.h - the static inline helpers fa2_avx2.c and fa2_avx512.c share: the 8-lane
 * max, sum and transposing reduction, the tile and row-state structs, step 2 (the online
 * softmax of one tile, on two 8-lane vectors of scores per row) and the job's tile walk.
 * Include only from a file built with at least -mavx2 -mfma -mf16c (both kernels are). */
#ifndef ATTND_FA2_SIMD_H
#define ATTND_FA2_SIMD_H

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu/fa2.h"
#include "kernels/cpu/kernels_simd.h" /* exp8 */

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "fa2_simd.h needs -mavx2 -mfma -mf16c"
#endif

#define FA2_INLINE static inline __attribute__((always_inline))

/* All-lanes max / sum of v. */
FA2_INLINE __m256 bmax8(__m256 v)
{
    v = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
    v = _mm256_max_ps(v, _mm256_permute_ps(v, 0x4e));
    return _mm256_max_ps(v, _mm256_permute_ps(v, 0xb1));
}

FA2_INLINE __m256 bsum8(__m256 v)
{
    v = _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 1));
    v = _mm256_add_ps(v, _mm256_permute_ps(v, 0x4e));
    return _mm256_add_ps(v, _mm256_permute_ps(v, 0xb1));
}

/* Lane i of the result = sum of the 8 lanes of a[i]: pairs of vectors, then quads, then the
 * two 128-bit halves, with unpacks and adds. */
FA2_INLINE __m256 reduce8(const __m256 a[8])
{
    __m256 t[4];
    _Pragma("GCC unroll 8") for (int i = 0; i < 4; i++) /* [x0+x2, y0+y2, x1+x3, y1+y3 | same for 4..7] of x, y = a[2i], a[2i+1] */
        t[i] = _mm256_add_ps(_mm256_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm256_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    __m256 u[2];
    _Pragma("GCC unroll 8") for (int i = 0; i < 2; i++) { /* [a0 a1 a2 a3 | a0 a1 a2 a3] partial sums of the quad 4i.. */
        const __m256d x = _mm256_castps_pd(t[2 * i]), y = _mm256_castps_pd(t[2 * i + 1]);
        u[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)), _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
    }
    return _mm256_add_ps(_mm256_permute2f128_ps(u[0], u[1], 0x20), _mm256_permute2f128_ps(u[0], u[1], 0x31));
}

/* qk_rows for R = 2, half h (keys 8h..8h+7): a = [r0 k0-3 | r1 k0-3], b = [r0 k4-7 | r1 k4-7]
 * into row order s[r][h]. */
FA2_INLINE void scores_r2(__m256 a, __m256 b, __m256 s[4][2], int h)
{
    s[0][h] = _mm256_permute2f128_ps(a, b, 0x20);
    s[1][h] = _mm256_permute2f128_ps(a, b, 0x31);
}

/* qk_rows for R = 3 or 4, half h: x[p] = [r0 k2p k2p+1, r1 k2p k2p+1 | r2 .., r3 ..] as 64-bit
 * pairs, into row order s[r][h] (row 3 zeros when R == 3). */
FA2_INLINE void scores_r4(const __m256d x[4], __m256 s[4][2], int h)
{
    const __m256 lo01 = _mm256_castpd_ps(_mm256_unpacklo_pd(x[0], x[1])); /* [r0 k0-3 | r2 k0-3] */
    const __m256 lo23 = _mm256_castpd_ps(_mm256_unpacklo_pd(x[2], x[3])); /* [r0 k4-7 | r2 k4-7] */
    const __m256 hi01 = _mm256_castpd_ps(_mm256_unpackhi_pd(x[0], x[1])); /* rows 1 and 3 */
    const __m256 hi23 = _mm256_castpd_ps(_mm256_unpackhi_pd(x[2], x[3]));
    s[0][h] = _mm256_permute2f128_ps(lo01, lo23, 0x20);
    s[1][h] = _mm256_permute2f128_ps(hi01, hi23, 0x20);
    s[2][h] = _mm256_permute2f128_ps(lo01, lo23, 0x31);
    s[3][h] = _mm256_permute2f128_ps(hi01, hi23, 0x31);
}

/* What a row block needs to know about the tile. */
struct tile {
    const unsigned char *k, *v;   /* the tile's 16 K and V rows (pool or converted buffer) */
    const unsigned char *pk, *pv; /* the same rows of a later tile, to prefetch; or NULL */
    int nk;                       /* keys any row sees (V rows read) */
    int mask;                     /* diagonal tile: row r sees only its first lim[r] keys */
    int first;                    /* first tile of the job: O starts at 0 */
    int lim[4];
};

/* Online-softmax state of one row, every lane the same value. */
struct rowstate {
    __m256 m; /* running max */
    __m256 l; /* running sum */
};

/* Step 2 for R <= 4 rows: s[r] = row r's 16 scores (two vectors). Masks the keys a row must not
 * see, updates st, writes P (rows of FA2_BLOCK floats, 32-byte aligned) and alpha[r] = e^(m - m').
 * Returns 1 if any alpha is not 1 (O must be rescaled). */
FA2_INLINE int softmax_rows(int R, const struct tile *t, __m256 s[4][2], struct rowstate *st, float *P, float *alpha)
{
    const __m256i iota0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i iota1 = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
    int rescale = 0;
    _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {
        __m256 s0 = s[r][0], s1 = s[r][1];
        if (t->mask) {
            const __m256 ninf = _mm256_set1_ps(-INFINITY);
            const __m256i l = _mm256_set1_epi32(t->lim[r]); /* keys [0, lim) visible */
            s0 = _mm256_blendv_ps(ninf, s0, _mm256_castsi256_ps(_mm256_cmpgt_epi32(l, iota0)));
            s1 = _mm256_blendv_ps(ninf, s1, _mm256_castsi256_ps(_mm256_cmpgt_epi32(l, iota1)));
        }
        const __m256 mn = _mm256_max_ps(st[r].m, bmax8(_mm256_max_ps(s0, s1)));
        /* alpha = e^(m - m'), exactly 1 while the max does not move (most tiles) */
        __m256 al = _mm256_set1_ps(1.0f);
        if (_mm256_movemask_ps(_mm256_cmp_ps(mn, st[r].m, _CMP_GT_OQ))) {
            al = exp8(_mm256_sub_ps(st[r].m, mn));
            rescale = 1;
        }
        const __m256 p0 = exp8(_mm256_sub_ps(s0, mn)), p1 = exp8(_mm256_sub_ps(s1, mn));
        st[r].l = _mm256_fmadd_ps(al, st[r].l, bsum8(_mm256_add_ps(p0, p1)));
        st[r].m = mn;
        _mm256_store_ps(P + r * FA2_BLOCK, p0);
        _mm256_store_ps(P + r * FA2_BLOCK + 8, p1);
        alpha[r] = _mm256_cvtss_f32(al);
    }
    return rescale;
}

/* tile_rows for fixed R and K/V type, each its own function. */
typedef void (*tile_fn)(int D, const float *qs, const struct tile *t, struct rowstate *st, float *const *o);

/* Job row r: *o = its output row, *st = the empty state; returns its query row. */
FA2_INLINE const float *job_row(const struct fa2_job *j, int r, struct rowstate *st, float **o)
{
    const int D = j->head_dim, G = j->n_grp;
    *o = j->o + (size_t)(r / G) * j->o_tok_stride + (size_t)(r % G) * D;
    st->m = _mm256_set1_ps(-FLT_MAX / 2);
    st->l = _mm256_setzero_ps();
    return j->q + (size_t)(r / G) * j->q_tok_stride + (size_t)(r % G) * D;
}

/* The first `ahead` tiles of the job, requested before the walk starts. */
FA2_INLINE void prefetch_first_tiles(const struct fa2_job *j, int ahead)
{
    const size_t tile_bytes = (size_t)FA2_BLOCK * j->head_dim * (j->kv_f16 ? 2 : 4);
    for (int kb = j->kb0; kb < j->kb1 && kb < j->kb0 + ahead; kb++) {
        const size_t boff = (size_t)j->block_table[kb] * j->block_stride;
        for (size_t off = 0; off < tile_bytes; off += 64) {
            _mm_prefetch((const char *)(j->k + boff + off), _MM_HINT_T0);
            _mm_prefetch((const char *)(j->v + boff + off), _MM_HINT_T0);
        }
    }
}

/* Tile kb of the job (in the pool); *pk, *pv = tile kb + ahead's K and V rows, or NULL. */
FA2_INLINE struct tile job_tile(const struct fa2_job *j, int kb, int ahead, const unsigned char **pk,
                                const unsigned char **pv)
{
    const int key0 = kb * FA2_BLOCK, kend_last = j->kend0 + j->n_tok - 1;
    const size_t boff = (size_t)j->block_table[kb] * j->block_stride;
    struct tile t = {
        .k = j->k + boff,
        .v = j->v + boff,
        .nk = kend_last - key0 < FA2_BLOCK ? kend_last - key0 : FA2_BLOCK,
        .mask = key0 + FA2_BLOCK > j->kend0,
        .first = kb == j->kb0,
    };
    *pk = *pv = NULL;
    if (kb + ahead < j->kb1) {
        const size_t poff = (size_t)j->block_table[kb + ahead] * j->block_stride;
        *pk = j->k + poff;
        *pv = j->v + poff;
    }
    return t;
}

/* Steps 1-3 of tile kb for every row, in blocks of 4 (only the first block prefetches). */
FA2_INLINE void run_row_blocks(const struct fa2_job *j, const tile_fn *tiles, int kb, struct tile *t,
                               const float *qs, struct rowstate *st, float *const *o)
{
    const int D = j->head_dim, G = j->n_grp, rows = j->n_tok * j->n_grp, key0 = kb * FA2_BLOCK;
    for (int r0 = 0; r0 < rows; r0 += 4) {
        const int R = rows - r0 < 4 ? rows - r0 : 4;
        for (int r = 0; r < R; r++) t->lim[r] = j->kend0 + (r0 + r) / G - key0;
        tiles[R - 1](D, qs + (size_t)r0 * D, t, st + r0, o + r0);
        t->pk = t->pv = NULL;
    }
}

/* After the walk: a job without keys gets zero output rows (not produced by fa2.c, but defined);
 * with j->ml the rows' (m, l) are stored and 1 returned (the caller leaves O unnormalised). */
FA2_INLINE int finish_job(const struct fa2_job *j, const struct rowstate *st, float *const *o)
{
    const int rows = j->n_tok * j->n_grp;
    if (j->kb0 >= j->kb1)
        for (int r = 0; r < rows; r++) memset(o[r], 0, (size_t)j->head_dim * sizeof(float));
    if (!j->ml) return 0;
    for (int r = 0; r < rows; r++) {
        j->ml[2 * r] = _mm256_cvtss_f32(st[r].m);
        j->ml[2 * r + 1] = _mm256_cvtss_f32(st[r].l);
    }
    return 1;
}

#endif
