/* fa2_avx512.c - the FlashAttention-2 job kernel for AVX-512 F/BW/VL/DQ. Built with -mavx512f
 * -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c (the Makefile does that for *_avx512.c); fa2.c
 * calls it only after cpu_kernels_init() found all four extensions. Contract: struct fa2_job in
 * fa2.h; any head_dim up to FA2_MAX_HEAD_DIM.
 *
 * The same steps as fa2_avx2.c (read that file's comment first), 16 lanes wide: head_dim runs in
 * chunks of 16 with a masked last chunk (masked loads read nothing past it), a row's 16 scores of
 * a tile are one zmm, and the visible keys of a masked row are a __mmask16. The dot products
 * fold each 16-lane accumulator to 8 lanes and then use the AVX2 transposing reduction. */
#include "kernels/cpu/fa2.h"

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
#define UNROLL _Pragma("GCC unroll 8")

/* ================================================================ helpers */

/* e^x for x <= 88; x < -87.3 (also -inf and NaN) gives 0. Same reduction and polynomial as the
 * AVX2 exp8; 2^n is applied with scalef. exp(0) is exactly 1. */
INLINE __m512 exp16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.3f);
    const __mmask16 valid = _mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(valid, _mm512_scalef_ps(p, n));
}

/* Lane i of the result = sum of the 16 lanes of a[i]. */
INLINE __m256 reduce8x16(const __m512 a[8])
{
    __m256 h[8];
    UNROLL for (int i = 0; i < 8; i++) h[i] = _mm256_add_ps(_mm512_castps512_ps256(a[i]), _mm512_extractf32x8_ps(a[i], 1));
    const __m256 t0 = _mm256_hadd_ps(h[0], h[1]), t1 = _mm256_hadd_ps(h[2], h[3]);
    const __m256 t2 = _mm256_hadd_ps(h[4], h[5]), t3 = _mm256_hadd_ps(h[6], h[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* Lanes of m of the 16 K/V elements at p (F16 converted, or F32); other lanes 0, not read. */
INLINE __m512 ld16(const unsigned char *p, int f16, __mmask16 m)
{
    return f16 ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)) : _mm512_maskz_loadu_ps(m, p);
}

/* Lanes [0, n) set, n in 0..16. */
INLINE __mmask16 first_n(int n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1u); }

/* ================================================================ S = Qs Kᵀ */

/* S[r][j0 + c] = Qs row r . key j0 + c, for r < R, c < KJ (R * KJ <= 8). */
INLINE void qk_block(int R, int KJ, int f16, const float *qs, int D, const unsigned char *kt, size_t krow,
                     float *S, int j0)
{
    const size_t esz = f16 ? 2 : 4;
    __m512 acc[8];
    UNROLL for (int i = 0; i < 8; i++) acc[i] = _mm512_setzero_ps();
    for (int d = 0; d < D; d += 16) {
        const __mmask16 m = first_n(D - d);
        __m512 kv[8];
        UNROLL for (int c = 0; c < KJ; c++) kv[c] = ld16(kt + (size_t)(j0 + c) * krow + (size_t)d * esz, f16, m);
        UNROLL for (int r = 0; r < R; r++) {
            const __m512 q = _mm512_maskz_loadu_ps(m, qs + (size_t)r * D + d);
            UNROLL for (int c = 0; c < KJ; c++) acc[r * KJ + c] = _mm512_fmadd_ps(q, kv[c], acc[r * KJ + c]);
        }
    }
    const __m256 sums = reduce8x16(acc); /* lane r * KJ + c */
    _Alignas(32) float tmp[8];
    _mm256_store_ps(tmp, sums);
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int c = 0; c < KJ; c++) S[r * FA2_BLOCK + j0 + c] = tmp[r * KJ + c];
}

INLINE void qk_rows(int R, int KJ, int f16, const float *qs, int D, const unsigned char *kt, float *S)
{
    const size_t krow = (size_t)D * (f16 ? 2 : 4);
    for (int j0 = 0; j0 < FA2_BLOCK; j0 += KJ) qk_block(R, KJ, f16, qs, D, kt, krow, S, j0);
}

INLINE void tile_qk(int f16, const float *qs, int rows, int D, const unsigned char *kt, float *sp)
{
    int r = 0;
    for (; r + 4 <= rows; r += 4) qk_rows(4, 2, f16, qs + (size_t)r * D, D, kt, sp + r * FA2_BLOCK);
    switch (rows - r) {
    case 3: qk_rows(3, 2, f16, qs + (size_t)r * D, D, kt, sp + r * FA2_BLOCK); break;
    case 2: qk_rows(2, 4, f16, qs + (size_t)r * D, D, kt, sp + r * FA2_BLOCK); break;
    case 1: qk_rows(1, 8, f16, qs + (size_t)r * D, D, kt, sp + r * FA2_BLOCK); break;
    default: break;
    }
}

/* ================================================================ O = alpha O + P V */

/* Columns [d, d + 16 NV) of rows o[0..R) (only lanes m of each 16) over the first nk keys.
 * first: O starts at 0 instead of alpha O. */
INLINE void pv_block(int R, int NV, int f16, const unsigned char *vt, size_t vrow, int nk, const float *P,
                     float *const *o, const float *alpha, int first, int d, __mmask16 m)
{
    const size_t esz = f16 ? 2 : 4;
    __m512 acc[4][8];
    UNROLL for (int r = 0; r < R; r++) {
        const __m512 al = _mm512_set1_ps(alpha[r]);
        UNROLL for (int v = 0; v < NV; v++)
            acc[r][v] = first ? _mm512_setzero_ps() : _mm512_mul_ps(al, _mm512_maskz_loadu_ps(m, o[r] + d + 16 * v));
    }
    for (int k = 0; k < nk; k++) {
        __m512 vv[8];
        UNROLL for (int v = 0; v < NV; v++) vv[v] = ld16(vt + (size_t)k * vrow + (size_t)(d + 16 * v) * esz, f16, m);
        UNROLL for (int r = 0; r < R; r++) {
            const __m512 p = _mm512_set1_ps(P[r * FA2_BLOCK + k]);
            UNROLL for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(p, vv[v], acc[r][v]);
        }
    }
    UNROLL for (int r = 0; r < R; r++)
        UNROLL for (int v = 0; v < NV; v++) _mm512_mask_storeu_ps(o[r] + d + 16 * v, m, acc[r][v]);
}

INLINE void pv_rows(int R, int NV, int f16, const unsigned char *vt, int D, int nk, const float *P,
                    float *const *o, const float *alpha, int first)
{
    const size_t vrow = (size_t)D * (f16 ? 2 : 4);
    int d = 0;
    for (; d + 16 * NV <= D; d += 16 * NV) pv_block(R, NV, f16, vt, vrow, nk, P, o, alpha, first, d, 0xffff);
    for (; d < D; d += 16) pv_block(R, 1, f16, vt, vrow, nk, P, o, alpha, first, d, first_n(D - d));
}

INLINE void tile_pv(int f16, int rows, int D, const unsigned char *vt, int nk, const float *sp, float *const *o,
                    const float *alpha, int first)
{
    int r = 0;
    for (; r + 4 <= rows; r += 4) pv_rows(4, 2, f16, vt, D, nk, sp + r * FA2_BLOCK, o + r, alpha + r, first);
    switch (rows - r) {
    case 3: pv_rows(3, 2, f16, vt, D, nk, sp + r * FA2_BLOCK, o + r, alpha + r, first); break;
    case 2: pv_rows(2, 4, f16, vt, D, nk, sp + r * FA2_BLOCK, o + r, alpha + r, first); break;
    case 1: pv_rows(1, 8, f16, vt, D, nk, sp + r * FA2_BLOCK, o + r, alpha + r, first); break;
    default: break;
    }
}

/* ================================================================ the job */

struct rowstate {
    _Alignas(64) float m[FA2_MAX_ROWS];    /* running max */
    _Alignas(64) float l[FA2_MAX_ROWS];    /* running sum */
    _Alignas(64) float mnew[FA2_MAX_ROWS]; /* max after this tile */
    _Alignas(64) float psum[FA2_MAX_ROWS]; /* rowsum P of this tile */
    _Alignas(64) float alpha[FA2_MAX_ROWS];
};

/* Step 2 for every row: sp holds S on entry and P on return; with mask, token t's row sees only
 * the first lim0 + t keys of the tile. */
INLINE void tile_softmax(struct rowstate *st, float *sp, int rows, int G, int mask, int lim0)
{
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    for (int r = 0; r < rows; r++) {
        float *s = sp + r * FA2_BLOCK;
        __m512 sv = _mm512_loadu_ps(s);
        if (mask) sv = _mm512_mask_blend_ps(first_n(lim0 + r / G), ninf, sv);
        const float mx = _mm512_reduce_max_ps(sv);
        const float mn = mx > st->m[r] ? mx : st->m[r];
        const __m512 p = exp16(_mm512_sub_ps(sv, _mm512_set1_ps(mn)));
        _mm512_storeu_ps(s, p);
        st->mnew[r] = mn;
        st->psum[r] = _mm512_reduce_add_ps(p);
    }
    for (int r = 0; r < rows; r += 16) {
        const __m512 m = _mm512_load_ps(st->m + r), mn = _mm512_load_ps(st->mnew + r);
        const __m512 al = exp16(_mm512_sub_ps(m, mn));
        _mm512_store_ps(st->alpha + r, al);
        _mm512_store_ps(st->l + r, _mm512_fmadd_ps(al, _mm512_load_ps(st->l + r), _mm512_load_ps(st->psum + r)));
        _mm512_store_ps(st->m + r, mn);
    }
}

INLINE void job_impl(const struct fa2_job *j, int f16)
{
    const int D = j->head_dim, G = j->n_grp, rows = j->n_tok * j->n_grp;
    _Alignas(64) float qs[FA2_MAX_ROW_FLOATS];       /* (rows, D) q * scale */
    _Alignas(64) float sp[FA2_MAX_ROWS * FA2_BLOCK]; /* (rows, 16) S, then P */
    _Alignas(64) float kt[FA2_BLOCK * FA2_MAX_HEAD_DIM];
    _Alignas(64) float vt[FA2_BLOCK * FA2_MAX_HEAD_DIM];
    struct rowstate st;
    float *o[FA2_MAX_ROWS];

    const __m512 sc = _mm512_set1_ps(j->scale);
    for (int r = 0; r < rows; r++) {
        const float *q = j->q + (size_t)(r / G) * j->q_tok_stride + (size_t)(r % G) * D;
        for (int d = 0; d < D; d += 16) {
            const __mmask16 m = first_n(D - d);
            _mm512_mask_storeu_ps(qs + (size_t)r * D + d, m, _mm512_mul_ps(sc, _mm512_maskz_loadu_ps(m, q + d)));
        }
        o[r] = j->o + (size_t)(r / G) * j->o_tok_stride + (size_t)(r % G) * D;
    }
    for (int r = 0; r < FA2_MAX_ROWS; r++) {
        st.m[r] = -FLT_MAX / 2;
        st.l[r] = 0.0f;
        st.mnew[r] = st.m[r];
        st.psum[r] = 0.0f;
    }

    const int buffered = f16 && rows > 4;
    const int kend_last = j->kend0 + j->n_tok - 1;
    for (int kb = j->kb0; kb < j->kb1; kb++) {
        const int key0 = kb * FA2_BLOCK;
        const int nk = kend_last - key0 < FA2_BLOCK ? kend_last - key0 : FA2_BLOCK;
        const int mask = key0 + FA2_BLOCK > j->kend0;
        const size_t boff = (size_t)j->block_table[kb] * j->block_stride;
        const unsigned char *kp = j->k + boff, *vp = j->v + boff;
        if (buffered) {
            for (int i = 0; i < FA2_BLOCK * D; i += 16)
                _mm512_mask_storeu_ps(kt + i, first_n(FA2_BLOCK * D - i), ld16(kp + 2 * (size_t)i, 1, first_n(FA2_BLOCK * D - i)));
            for (int i = 0; i < nk * D; i += 16)
                _mm512_mask_storeu_ps(vt + i, first_n(nk * D - i), ld16(vp + 2 * (size_t)i, 1, first_n(nk * D - i)));
            tile_qk(0, qs, rows, D, (const unsigned char *)kt, sp);
        } else {
            tile_qk(f16, qs, rows, D, kp, sp);
        }
        tile_softmax(&st, sp, rows, G, mask, j->kend0 - key0);
        if (buffered)
            tile_pv(0, rows, D, (const unsigned char *)vt, nk, sp, o, st.alpha, kb == j->kb0);
        else
            tile_pv(f16, rows, D, vp, nk, sp, o, st.alpha, kb == j->kb0);
    }
    if (j->kb0 >= j->kb1) /* no keys: not produced by fa2.c, but the output is defined */
        for (int r = 0; r < rows; r++) memset(o[r], 0, (size_t)D * sizeof(float));

    for (int r = 0; r < rows; r++) {
        if (j->ml) {
            j->ml[2 * r] = st.m[r];
            j->ml[2 * r + 1] = st.l[r];
            continue;
        }
        const float l = st.l[r];
        const __m512 inv = _mm512_set1_ps(l > 0.0f ? 1.0f / l : 0.0f);
        for (int d = 0; d < D; d += 16) {
            const __mmask16 m = first_n(D - d);
            _mm512_mask_storeu_ps(o[r] + d, m, l > 0.0f ? _mm512_mul_ps(inv, _mm512_maskz_loadu_ps(m, o[r] + d)) : _mm512_setzero_ps());
        }
    }
}

/* AVX-512 job, any head_dim; see fa2.h. Thread-safe, about 55 KiB of stack. */
void fa2_avx512_job(const struct fa2_job *j)
{
    if (j->kv_f16)
        job_impl(j, 1);
    else
        job_impl(j, 0);
}
