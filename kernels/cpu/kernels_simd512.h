/* kernels_simd512.h - static inline AVX-512 helpers shared by the files built with AVX-512
 * F/BW/VL/DQ (kernels_avx512.c, fa2_avx512.c, kernels_amx.c): a 16 x 16 transpose and a 16-lane
 * e^x. */
#ifndef ATTND_KERNELS_SIMD512_H
#define ATTND_KERNELS_SIMD512_H

#include <immintrin.h>

#if !defined(__AVX512F__) || !defined(__AVX512DQ__)
#error "kernels_simd512.h needs -mavx512f -mavx512dq"
#endif

#define SIMD512_INLINE static inline __attribute__((always_inline))

/* r[i] (row i of a 16 x 16 matrix of 32-bit values) becomes column i. */
SIMD512_INLINE void transpose16(__m512 r[16])
{
    __m512 t[16], u[16], w[4][4];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) { /* u[4j + c], lane l: column 4l + c of rows 4j..4j+3 */
        const __m512d a = _mm512_castps_pd(t[4 * j]), b = _mm512_castps_pd(t[4 * j + 2]);
        const __m512d c = _mm512_castps_pd(t[4 * j + 1]), d = _mm512_castps_pd(t[4 * j + 3]);
        u[4 * j] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        u[4 * j + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        u[4 * j + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        u[4 * j + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
        w[c][0] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
        w[c][1] = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xee);
        w[c][2] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        w[c][3] = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xee);
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
        r[c] = _mm512_shuffle_f32x4(w[c][0], w[c][2], 0x88);
        r[4 + c] = _mm512_shuffle_f32x4(w[c][0], w[c][2], 0xdd);
        r[8 + c] = _mm512_shuffle_f32x4(w[c][1], w[c][3], 0x88);
        r[12 + c] = _mm512_shuffle_f32x4(w[c][1], w[c][3], 0xdd);
    }
}

/* e^t for 16 lanes as exp8 in kernels_simd.h gives it: t >= 88 is taken as 88, t < -87.3 (also
 * -inf and NaN) gives 0. t = n ln2 + r with |r| <= ln2/2 (ln2 in two parts), the degree-6 Taylor
 * polynomial of e^r (relative error below 2e-7), 2^n applied by vscalefps. */
SIMD512_INLINE __m512 exp16(__m512 t)
{
    const __m512 lo = _mm512_set1_ps(-87.3f);
    const __mmask16 valid = _mm512_cmp_ps_mask(t, lo, _CMP_GE_OQ);
    t = _mm512_min_ps(_mm512_max_ps(t, lo), _mm512_set1_ps(88.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), t);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);
    static const float c[] = {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};
    __m512 p = _mm512_set1_ps(c[0]);
    for (int k = 1; k < 7; k++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c[k]));
    return _mm512_maskz_scalef_ps(valid, p, n);
}

#endif
