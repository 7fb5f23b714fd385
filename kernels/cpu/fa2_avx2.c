/* fa2_avx2.c - the FlashAttention-2 job kernel for AVX2 + FMA + F16C. Built with -mavx2 -mfma
 * -mf16c (the Makefile does that for *_avx2.c); fa2.c calls it only after cpu_kernels_init()
 * found those extensions, and only for head_dim % 8 == 0. Contract: struct fa2_job in fa2.h.
 *
 * A job's rows (tokens x query heads of one KV group) go through each 16-key tile in blocks of
 * R <= 4 rows:
 *   1. S = Qs Kᵀ (Qs = q * scale, copied once per job) in registers. Register block R rows x KJ
 *      keys, R * KJ = 8 accumulators over head_dim; a transposing reduction turns them into one
 *      vector of 8 dot products, and unpacks/permutes put those back in row order.
 *      A full block of 4 rows (decode with GQA 4, and most prefill blocks) instead uses blocks of
 *      4 rows x 3 keys (12 accumulators, the 3 K vectors converted once and held, Q streamed:
 *      7 loads per 12 FMAs) reduced per key into [rows 0-3], and keeps the tile's scores
 *      key-major (vector = 2 keys x 4 rows), so the softmax below is lane-wise over 8 vectors
 *      for all 4 rows at once (no per-row horizontal max / sum) and P is stored key-major.
 *   2. Online softmax per row, in registers: keys a row must not see (diagonal tile only) get
 *      -inf by a select, m' = max(m, rowmax S), P = exp(S - m') with a polynomial exp,
 *      alpha = exp(m - m') (skipped while the max does not move), l = alpha l + rowsum P.
 *   3. O = alpha O + P V, register block R rows x NV vectors of head_dim (R NV <= 12), O kept
 *      in the output rows themselves, P broadcast from a 256-byte buffer. With NV < R (4 rows x
 *      3 vectors) the NV V vectors stay in registers and the broadcasts stream, else the other
 *      way round: 7 loads per 12 FMAs instead of 6 per 8, loads being what bounds this loop.
 * F16 is converted once per tile for the whole group: with more than 4 rows into an f32 buffer
 * that every row block reads; with 4 rows or fewer (a decode step with GQA <= 4) on the fly,
 * since one row block then covers every row. Keys at or past the last visible one are never read
 * by step 3; in step 1 their scores are computed and replaced by -inf before any use.
 *
 * K/V tiles sit in scattered physical blocks the hardware prefetcher cannot follow, so the
 * tile FA2_PREFETCH_TILES ahead is requested while this one is computed: each step-1 block
 * requests the K and V rows of its own keys there, a few lines per block, so the requests spread
 * over the tile (a burst of a whole tile's prefetches does not overlap with the arithmetic) and
 * no inner loop carries a per-line test. */
#include "kernels/cpu/fa2.h"
#include "kernels/cpu/fa2_simd.h"

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "fa2_avx2.c must be compiled with -mavx2 -mfma -mf16c"
#endif

#define INLINE static inline __attribute__((always_inline))
/* Register blocks are arrays indexed by constant loops: unrolled fully, they become registers. */
#define UNROLL _Pragma("GCC unroll 8")

#define FA2_PREFETCH_TILES 4 /* tiles of K and V requested ahead of the one being computed */

/* ================================================================ helpers */

/* 8 K/V elements from p: F16 converted, or F32. */
INLINE __m256 ld8(const unsigned char *p, int f16)
{
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)) : _mm256_loadu_ps((const float *)p);
}

/* Requests the n bytes at p (p is 64-byte aligned in practice; otherwise this covers every line
 * but the last). */
INLINE void prefetch_bytes(const unsigned char *p, size_t n)
{
    for (size_t off = 0; off < n; off += 64) _mm_prefetch((const char *)(p + off), _MM_HINT_T0);
}

/* ================================================================ one tile, R rows */

/* Dot products of R query rows with KJ keys (R * KJ <= 8): lane r * KJ + c of the result is
 * Qs row r . key j0 + c. Keys are rows of krow bytes from kt; f16 says their element type. */
INLINE __m256 qk_block(int R, int KJ, int f16, const float *qs, int D, const struct tile *t, size_t krow, int j0)
{
    const size_t esz = f16 ? 2 : 4;
    /* the same KJ K and V rows of the later tile: a few requests per block, none in the loops */
    if (t->pk) prefetch_bytes(t->pk + (size_t)j0 * krow, KJ * krow);
    if (t->pv) prefetch_bytes(t->pv + (size_t)j0 * krow, KJ * krow);
    __m256 acc[8];
    UNROLL for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    const unsigned char *kt = t->k + (size_t)j0 * krow;
    for (int d = 0; d < D; d += 8) {
        __m256 q[4];
        UNROLL for (int r = 0; r < R; r++) q[r] = _mm256_loadu_ps(qs + (size_t)r * D + d);
        UNROLL for (int c = 0; c < KJ; c++) {
            const __m256 kv = ld8(kt + (size_t)c * krow + (size_t)d * esz, f16);
            UNROLL for (int r = 0; r < R; r++) acc[r * KJ + c] = _mm256_fmadd_ps(q[r], kv, acc[r * KJ + c]);
        }
    }
    return reduce8(acc);
}

/* The 16 scores of R <= 4 rows: s[r][0] keys 0-7, s[r][1] keys 8-15. The blocks R x KJ = 4x2,
 * 3x2, 2x4, 1x8 come out of reduce8 interleaved by key pairs or quads; unpacks and lane
 * permutes put them back in row order. */
INLINE void qk_rows(int R, int f16, const float *qs, int D, const struct tile *t, __m256 s[4][2])
{
    const size_t krow = (size_t)D * (f16 ? 2 : 4);
    if (R == 1) {
        s[0][0] = qk_block(1, 8, f16, qs, D, t, krow, 0);
        s[0][1] = qk_block(1, 8, f16, qs, D, t, krow, 8);
    } else if (R == 2) {
        UNROLL for (int h = 0; h < 2; h++) {
            const __m256 a = qk_block(2, 4, f16, qs, D, t, krow, 8 * h);
            const __m256 b = qk_block(2, 4, f16, qs, D, t, krow, 8 * h + 4);
            scores_r2(a, b, s, h);
        }
    } else {
        UNROLL for (int h = 0; h < 2; h++) {
            __m256d x[4];
            UNROLL for (int p = 0; p < 4; p++)
                x[p] = _mm256_castps_pd(qk_block(R, 2, f16, qs, D, t, krow, 8 * h + 2 * p));
            scores_r4(x, s, h);
        }
    }
}

/* Columns [d, d + 8 NV) of rows o[0..R) over the first nk keys. first: O starts at 0 (the output
 * rows hold nothing yet); rescale: O starts at alpha O, else at O (every alpha is 1). */
INLINE void pv_block(int R, int NV, int f16, const struct tile *t, size_t vrow, const float *P, int prs, int pks,
                     float *const *o, const float *alpha, int rescale, int d)
{
    const size_t esz = f16 ? 2 : 4;
    __m256 acc[4][8];
    UNROLL for (int r = 0; r < R; r++) {
        const __m256 al = _mm256_set1_ps(alpha[r]);
        UNROLL for (int v = 0; v < NV; v++) {
            if (t->first)
                acc[r][v] = _mm256_setzero_ps();
            else if (rescale)
                acc[r][v] = _mm256_mul_ps(al, _mm256_loadu_ps(o[r] + d + 8 * v));
            else
                acc[r][v] = _mm256_loadu_ps(o[r] + d + 8 * v);
        }
    }
    const unsigned char *vt = t->v + (size_t)d * esz;
    for (int k = 0; k < t->nk; k++, vt += vrow) {
        if (NV < R) { /* hold the NV V vectors, stream the R broadcasts: R NV + NV + 1 registers */
            __m256 vv[8];
            UNROLL for (int v = 0; v < NV; v++) vv[v] = ld8(vt + (size_t)v * 8 * esz, f16);
            UNROLL for (int r = 0; r < R; r++) {
                const __m256 p = _mm256_broadcast_ss(P + r * prs + k * pks);
                UNROLL for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(p, vv[v], acc[r][v]);
            }
        } else { /* hold the R broadcasts, stream V: R NV + R + 1 registers */
            __m256 p[4];
            UNROLL for (int r = 0; r < R; r++) p[r] = _mm256_broadcast_ss(P + r * prs + k * pks);
            UNROLL for (int v = 0; v < NV; v++) {
                const __m256 vv = ld8(vt + (size_t)v * 8 * esz, f16);
                UNROLL for (int r = 0; r < R; r++) acc[r][v] = _mm256_fmadd_ps(p[r], vv, acc[r][v]);
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int v = 0; v < NV; v++) _mm256_storeu_ps(o[r] + d + 8 * v, acc[r][v]);
}

INLINE void pv_rows(int R, int NV, int f16, int D, const struct tile *t, const float *P, int prs, int pks,
                    float *const *o, const float *alpha, int rescale)
{
    const size_t vrow = (size_t)D * (f16 ? 2 : 4);
    int d = 0;
    for (; d + 8 * NV <= D; d += 8 * NV) pv_block(R, NV, f16, t, vrow, P, prs, pks, o, alpha, rescale, d);
    if (NV > 4) /* what is left in the widest blocks that fit */
        for (; d + 32 <= D; d += 32) pv_block(R, 4, f16, t, vrow, P, prs, pks, o, alpha, rescale, d);
    if (NV > 2)
        for (; d + 16 <= D; d += 16) pv_block(R, 2, f16, t, vrow, P, prs, pks, o, alpha, rescale, d);
    for (; d < D; d += 8) pv_block(R, 1, f16, t, vrow, P, prs, pks, o, alpha, rescale, d);
}

/* Steps 1-3 of one tile for R <= 4 rows (qs, st, o: this block's rows). f16: t's K/V type. */
INLINE void tile_rows(int R, int f16, int D, const float *qs, const struct tile *t, struct rowstate *st,
                      float *const *o)
{
    _Alignas(32) float P[4 * FA2_BLOCK];
    float alpha[4];
    __m256 s[4][2];
    qk_rows(R, f16, qs, D, t, s);
    const int rescale = softmax_rows(R, t, s, st, P, alpha);
    pv_rows(R, R == 1 ? 8 : R == 2 ? 4 : R == 3 ? 4 : 3, f16, D, t, P, FA2_BLOCK, 1, o, alpha, rescale); /* R NV <= 12 accumulators */
}

/* [sum a, sum b, sum c, sum d] */
INLINE __m128 reduce4(__m256 a, __m256 b, __m256 c, __m256 d)
{
    const __m256 t0 = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b)); /* [a02 b02 a13 b13 | ..] */
    const __m256 t1 = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
    const __m256d x = _mm256_castps_pd(t0), y = _mm256_castps_pd(t1);
    const __m256 u = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(x, y)), _mm256_castpd_ps(_mm256_unpackhi_pd(x, y)));
    return _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
}

/* Scores of the 4 rows with KJ <= 3 keys from j0: sc[j0 + c] = [row 0..3 . key j0 + c]. 4 x KJ
 * accumulators, the KJ K vectors (converted once) held, the 4 Q vectors streamed: 4 + KJ loads
 * per 4 KJ FMAs. */
INLINE void qk4_block(int KJ, int f16, const float *qs, int D, const struct tile *t, size_t krow, int j0, __m128 *sc)
{
    const size_t esz = f16 ? 2 : 4;
    if (t->pk) prefetch_bytes(t->pk + (size_t)j0 * krow, KJ * krow);
    if (t->pv) prefetch_bytes(t->pv + (size_t)j0 * krow, KJ * krow);
    __m256 acc[4][3];
    UNROLL for (int r = 0; r < 4; r++)
        UNROLL for (int c = 0; c < KJ; c++) acc[r][c] = _mm256_setzero_ps();
    const unsigned char *kt = t->k + (size_t)j0 * krow;
    for (int d = 0; d < D; d += 8) {
        __m256 kv[3];
        UNROLL for (int c = 0; c < KJ; c++) kv[c] = ld8(kt + (size_t)c * krow + (size_t)d * esz, f16);
        UNROLL for (int r = 0; r < 4; r++) {
            const __m256 q = _mm256_load_ps(qs + (size_t)r * D + d);
            UNROLL for (int c = 0; c < KJ; c++) acc[r][c] = _mm256_fmadd_ps(q, kv[c], acc[r][c]);
        }
    }
    UNROLL for (int c = 0; c < KJ; c++) sc[j0 + c] = reduce4(acc[0][c], acc[1][c], acc[2][c], acc[3][c]);
}

/* tile_rows for R == 4, the scores kept key-major: vector i = [key 2i rows 0-3 | key 2i+1 rows
 * 0-3], so the row max / sum are lane-wise over 8 vectors and one exp8 covers 2 keys x 4 rows.
 * P is stored key-major too (P[4 k + r]). */
INLINE void tile_rows4(int f16, int D, const float *qs, const struct tile *t, struct rowstate *st, float *const *o)
{
    _Alignas(32) float P[4 * FA2_BLOCK];
    _Alignas(16) float alpha[4], mv[4], lv[4];
    __m128 sc[FA2_BLOCK];
    const size_t krow = (size_t)D * (f16 ? 2 : 4);
    UNROLL for (int j = 0; j < 15; j += 3) qk4_block(3, f16, qs, D, t, krow, j, sc);
    qk4_block(1, f16, qs, D, t, krow, 15, sc);
    __m256 s[8];
    UNROLL for (int i = 0; i < 8; i++) s[i] = _mm256_set_m128(sc[2 * i + 1], sc[2 * i]);
    if (t->mask) {
        const __m256 ninf = _mm256_set1_ps(-INFINITY);
        const __m256i lim = _mm256_setr_epi32(t->lim[0], t->lim[1], t->lim[2], t->lim[3], t->lim[0], t->lim[1],
                                              t->lim[2], t->lim[3]);
        __m256i key = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
        UNROLL for (int i = 0; i < 8; i++) { /* keys [0, lim) visible */
            s[i] = _mm256_blendv_ps(ninf, s[i], _mm256_castsi256_ps(_mm256_cmpgt_epi32(lim, key)));
            key = _mm256_add_epi32(key, _mm256_set1_epi32(2));
        }
    }
    __m256 mx = _mm256_max_ps(_mm256_max_ps(_mm256_max_ps(s[0], s[1]), _mm256_max_ps(s[2], s[3])),
                              _mm256_max_ps(_mm256_max_ps(s[4], s[5]), _mm256_max_ps(s[6], s[7])));
    const __m128 m = _mm_setr_ps(_mm256_cvtss_f32(st[0].m), _mm256_cvtss_f32(st[1].m), _mm256_cvtss_f32(st[2].m),
                                 _mm256_cvtss_f32(st[3].m));
    const __m128 l = _mm_setr_ps(_mm256_cvtss_f32(st[0].l), _mm256_cvtss_f32(st[1].l), _mm256_cvtss_f32(st[2].l),
                                 _mm256_cvtss_f32(st[3].l));
    const __m128 mn = _mm_max_ps(m, _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1)));
    /* alpha = e^(m - m'), exactly 1 while the max does not move (most tiles) */
    __m128 al = _mm_set1_ps(1.0f);
    int rescale = 0;
    if (_mm_movemask_ps(_mm_cmpgt_ps(mn, m))) {
        al = _mm256_castps256_ps128(exp8(_mm256_castps128_ps256(_mm_sub_ps(m, mn))));
        rescale = 1;
    }
    const __m256 mn2 = _mm256_set_m128(mn, mn);
    __m256 sum = _mm256_setzero_ps();
    UNROLL for (int i = 0; i < 8; i++) {
        const __m256 p = exp8(_mm256_sub_ps(s[i], mn2));
        sum = _mm256_add_ps(sum, p);
        _mm256_store_ps(P + 8 * i, p);
    }
    const __m128 ln = _mm_fmadd_ps(al, l, _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1)));
    _mm_store_ps(mv, mn);
    _mm_store_ps(lv, ln);
    _mm_store_ps(alpha, al);
    UNROLL for (int r = 0; r < 4; r++) {
        st[r].m = _mm256_set1_ps(mv[r]);
        st[r].l = _mm256_set1_ps(lv[r]);
    }
    pv_rows(4, 3, f16, D, t, P, 1, 4, o, alpha, rescale);
}

/* ================================================================ the job */

/* tile_rows for fixed R, K/V type and head_dim (0: any), each its own function so the register
 * allocator sees only the tile's values (inlined into the job's tile loop, the loop's hoisted
 * values pushed accumulators out to the stack). */

#define TILE_FN(R, F, DC)                                                                                    \
    static __attribute__((noinline)) void tile_##R##_##F##_##DC(int D, const float *qs, const struct tile *t, \
                                                                struct rowstate *st, float *const *o)        \
    {                                                                                                        \
        if (R == 4)                                                                                          \
            tile_rows4(F, DC ? DC : D, qs, t, st, o);                                                        \
        else                                                                                                 \
            tile_rows(R, F, DC ? DC : D, qs, t, st, o);                                                      \
    }
#define TILE_FNS(F, DC) TILE_FN(1, F, DC) TILE_FN(2, F, DC) TILE_FN(3, F, DC) TILE_FN(4, F, DC)
TILE_FNS(0, 0)
TILE_FNS(1, 0)
TILE_FNS(0, 64)
TILE_FNS(1, 64)
TILE_FNS(0, 128)
TILE_FNS(1, 128)
#define TILE_ROW(F, DC) {tile_1_##F##_##DC, tile_2_##F##_##DC, tile_3_##F##_##DC, tile_4_##F##_##DC}

/* [head_dim 64 / 128 / other][F32 / F16 rows][R - 1] */
static const tile_fn g_tiles[3][2][4] = {
    {TILE_ROW(0, 64), TILE_ROW(1, 64)},
    {TILE_ROW(0, 128), TILE_ROW(1, 128)},
    {TILE_ROW(0, 0), TILE_ROW(1, 0)},
};

/* AVX2 job (head_dim % 8 == 0); see fa2.h. Thread-safe; about 50 KiB of stack. */
void fa2_avx2_job(const struct fa2_job *j)
{
    const int D = j->head_dim, rows = j->n_tok * j->n_grp, f16 = j->kv_f16;
    _Alignas(32) float qs[FA2_MAX_ROW_FLOATS]; /* (rows, D) q * scale */
    _Alignas(32) float kt[FA2_BLOCK * FA2_MAX_HEAD_DIM];
    _Alignas(32) float vt[FA2_BLOCK * FA2_MAX_HEAD_DIM];
    struct rowstate st[FA2_MAX_ROWS];
    float *o[FA2_MAX_ROWS];

    const __m256 sc = _mm256_set1_ps(j->scale);
    for (int r = 0; r < rows; r++) {
        const float *q = job_row(j, r, &st[r], &o[r]);
        for (int d = 0; d < D; d += 8) _mm256_store_ps(qs + (size_t)r * D + d, _mm256_mul_ps(sc, _mm256_loadu_ps(q + d)));
    }

    /* more than 4 rows: several row blocks read each tile, so F16 is converted once into kt/vt */
    const int buffered = f16 && rows > 4;
    const tile_fn *tiles = g_tiles[D == 64 ? 0 : D == 128 ? 1 : 2][buffered ? 0 : f16];
    prefetch_first_tiles(j, FA2_PREFETCH_TILES);
    for (int kb = j->kb0; kb < j->kb1; kb++) {
        const unsigned char *pk, *pv;
        struct tile t = job_tile(j, kb, FA2_PREFETCH_TILES, &pk, &pv);
        if (buffered) {
            /* the whole K tile (scores of invisible keys are masked), the visible V rows; the later
             * tile's K and V lines are requested during the conversion (step 1 reads the f32 copy) */
            for (int i = 0; i < FA2_BLOCK * D; i += 8) {
                if (pk && i % 32 == 0) {
                    _mm_prefetch((const char *)pk + 2 * (size_t)i, _MM_HINT_T0);
                    _mm_prefetch((const char *)pv + 2 * (size_t)i, _MM_HINT_T0);
                }
                _mm256_store_ps(kt + i, ld8(t.k + 2 * (size_t)i, 1));
            }
            for (int i = 0; i < t.nk * D; i += 8) _mm256_store_ps(vt + i, ld8(t.v + 2 * (size_t)i, 1));
            t.k = (const unsigned char *)kt;
            t.v = (const unsigned char *)vt;
        } else {
            t.pk = pk;
            t.pv = pv;
        }
        run_row_blocks(j, tiles, kb, &t, qs, st, o);
    }
    if (finish_job(j, st, o)) return;
    for (int r = 0; r < rows; r++) {
        const float l = _mm256_cvtss_f32(st[r].l);
        const __m256 inv = _mm256_set1_ps(l > 0.0f ? 1.0f / l : 0.0f);
        for (int d = 0; d < D; d += 8)
            _mm256_storeu_ps(o[r] + d, l > 0.0f ? _mm256_mul_ps(inv, _mm256_loadu_ps(o[r] + d)) : _mm256_setzero_ps());
    }
}
