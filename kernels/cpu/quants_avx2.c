/* quants_avx2.c - AVX2 dot products for the K-quant, IQ4 and Q4_1/Q5_x weight types (layouts in
 * attnd/tensor.h), and the int8 panel GEMM for 2+ tokens. Built twice:
 *   - with -mavx2 -mfma -mf16c as itself: the quants_avx2_* functions;
 *   - with AVX-512 F/BW/VL/DQ + VNNI as quants_avx512.c (which includes this file with
 *     QUANTS_VNNI set): the quants_avx512_* functions, whose multiply-accumulate steps are
 *     vpdpbusd (u8 x s8 quads into int32) and vpdpwssd (int16 pairs times a scale into int32)
 *     on 256-bit vectors, and whose panel GEMM offsets the activations by 128 (u8) so no sign
 *     trick is needed. The exported names come from QS(name).
 * Called only when the CPU has the instruction set the object was built for.
 *
 * Each block's weights are widened to 32 int8 lanes at a time and multiplied with the int8
 * activations by maddubs (unsigned weights directly; signed ones through the sign trick,
 * |w| * sign(a, w), safe because no quant or activation is -128); the 16-bit pair sums are
 * then multiplied by the sub-block scales in madd, so a super-block's sum is exact in int32
 * as in the scalar reference. Only the float sum over blocks differs in order. */
#include "kernels/cpu/quants.h"
#include "kernels/cpu/kernels_simd.h" /* ld_f16: an f16 through F16C, not quants_ld_f16's call */

#include <immintrin.h>
#include <math.h>
#include <string.h>

#ifdef QUANTS_VNNI
#if !defined(__AVX512VNNI__) || !defined(__AVX512VL__)
#error "quants_avx512.c must be compiled with -mavx512vnni -mavx512vl"
#endif
#define QS(name) quants_avx512_##name
#else
#define QS(name) quants_avx2_##name
#endif

/* ---- helpers ---- */

static inline __m256i loadu256(const unsigned char *p) { return _mm256_loadu_si256((const __m256i *)(const void *)p); }
static inline __m128i loadu128(const unsigned char *p) { return _mm_loadu_si128((const __m128i *)(const void *)p); }

static inline float ld_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* 16 pair sums of unsigned w times signed a */
static inline __m256i pairs_u8(__m256i w, __m256i a) { return _mm256_maddubs_epi16(w, a); }

/* 16 pair sums of signed w times signed a */
static inline __m256i pairs_s8(__m256i w, __m256i a)
{
    return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

/* acc + the 8 int32 sums of 4 products of unsigned w and signed a (lanes 4i..4i+3) */
static inline __m256i quads_u8(__m256i acc, __m256i w, __m256i a)
{
#ifdef QUANTS_VNNI
    return _mm256_dpbusd_epi32(acc, w, a);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)));
#endif
}

/* the same for signed w (|w| * sign(a, w)) */
static inline __m256i quads_s8(__m256i acc, __m256i w, __m256i a)
{
    return quads_u8(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
}

/* acc + the 16-bit pair sums p times the int16 scales sc, pairwise summed into int32 */
static inline __m256i scaled_pairs(__m256i acc, __m256i p, __m256i sc)
{
#ifdef QUANTS_VNNI
    return _mm256_dpwssd_epi32(acc, p, sc);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, sc));
#endif
}

static inline float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles in the low lane, high nibbles in the high lane */
static inline __m256i nibbles16(const unsigned char *qs)
{
    const __m128i q = loadu128(qs), m = _mm_set1_epi8(0x0f);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

/* The 32 bits at p as 32 bytes: 0x10 where the bit is set, else 0 (byte k <- bit k). */
static inline __m256i fifth_bits(const unsigned char *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

static inline __m256i iq4_table(void)
{
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)quants_iq4nl_values));
}

/* scale s0 on the first 16 lanes' pair sums, s1 on the last 16 */
static inline __m256i scale2(int16_t s0, int16_t s1) { return _mm256_set_m128i(_mm_set1_epi16(s1), _mm_set1_epi16(s0)); }

/* ---- weight decoders, shared by the dots and the panel unpacking ---- */

/* One 32-block's weights as int8: Q4_0 and Q5_0 centred (q - 8, q - 16), Q4_1 and Q5_1 as the
 * unsigned q (their min is applied apart), IQ4_NL through the codebook. */
enum kind32 { K_Q4_0, K_Q4_1, K_Q5_0, K_Q5_1, K_IQ4_NL, K_Q8_0 };
static const size_t k32_bytes[6] = {18, 20, 22, 24, 18, 34};

static inline int k32_unsigned(enum kind32 k) { return k == K_Q4_1 || k == K_Q5_1; }

static inline __m256i w32(enum kind32 k, const unsigned char *pw)
{
    switch (k) {
    case K_Q4_0: return _mm256_sub_epi8(nibbles16(pw + 2), _mm256_set1_epi8(8));
    case K_Q4_1: return nibbles16(pw + 4);
    case K_Q5_0: return _mm256_sub_epi8(_mm256_or_si256(nibbles16(pw + 6), fifth_bits(pw + 2)), _mm256_set1_epi8(16));
    case K_Q5_1: return _mm256_or_si256(nibbles16(pw + 8), fifth_bits(pw + 4));
    case K_IQ4_NL: return _mm256_shuffle_epi8(iq4_table(), nibbles16(pw + 2));
    default: return loadu256(pw + 2);
    }
}

/* Q4_K (has_qh 0) or Q5_K super-block at pw: sub-block 2k + hi (k 0..3, hi 0..1) as the
 * unsigned q, 0..15 or 0..31 (the fifth bit is bit 2k + hi of qh[l]). */
static inline __m256i q45k_sub(int has_qh, const unsigned char *pw, int k, int hi)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), q = loadu256(pw + (has_qh ? 48 : 16) + 32 * k);
    __m256i v = hi ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m4) : _mm256_and_si256(q, m4);
    if (has_qh)
        v = _mm256_or_si256(
            v, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(loadu256(pw + 16), 2 * k + hi), _mm256_set1_epi8(1)), 4));
    return v;
}

/* Q6_K super-block at pw: chunk k (0..3) of half h (0..1), 32 weights as the unsigned q (0..63).
 * Low nibbles of ql[64h + 32(k%2) + l] for k < 2, high ones after; the top 2 bits are bits 2k of
 * qh[32h + l]. */
static inline __m256i q6k_chunk_u(const unsigned char *pw, int h, int k)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), ql = loadu256(pw + 64 * h + 32 * (k & 1)), qh = loadu256(pw + 128 + 32 * h);
    const __m256i lo = k < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
    const __m256i top = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(3)), 4);
    return _mm256_or_si256(lo, top);
}

/* The same chunk as weights, q - 32. */
static inline __m256i q6k_chunk(const unsigned char *pw, int h, int k)
{
    return _mm256_sub_epi8(q6k_chunk_u(pw, h, k), _mm256_set1_epi8(32));
}

/* Q3_K super-block at pw: chunk j (0..3) of half h (0..1), 32 weights as q in -4..3 (the low 2
 * bits from qs, minus 4 where bit 4h + j of hmask[l] is clear). */
static inline __m256i q3k_chunk(const unsigned char *pw, int h, int j)
{
    const __m256i q = loadu256(pw + 32 + 32 * h), bit = _mm256_set1_epi8((char)(1 << (4 * h + j)));
    const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(loadu256(pw), bit), _mm256_setzero_si256());
    return _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), _mm256_set1_epi8(3)),
                           _mm256_and_si256(clear, _mm256_set1_epi8(4)));
}

/* ---- 32-blocks against Q8_0 ---- */

/* One block into acc (and its min term into accm). */
static inline void dot32_block(enum kind32 k, const unsigned char *pw, const unsigned char *pa, __m256 *acc, __m256 *accm)
{
    const __m256i zero = _mm256_setzero_si256();
    const float d = ld_f16(pw) * ld_f16(pa);
    const __m256i av = loadu256(pa + 2), wq = w32(k, pw);
    const __m256i isum = k32_unsigned(k) ? quads_u8(zero, wq, av) : quads_s8(zero, wq, av);
    *acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum), *acc);
    if (k32_unsigned(k)) {
        const float m = ld_f16(pw + 2) * ld_f16(pa);
        const __m256i s = quads_u8(zero, _mm256_set1_epi8(1), av);
        *accm = _mm256_fmadd_ps(_mm256_set1_ps(m), _mm256_cvtepi32_ps(s), *accm);
    }
}

/* Two blocks per step into two accumulators: the FMA chain no longer sets the pace. */
static inline float dot32(enum kind32 k, size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    const size_t wb = k32_bytes[k], nb = n / 32;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, accm0 = acc0, accm1 = acc0;
    size_t b = 0;
    for (; b + 2 <= nb; b += 2, pw += 2 * wb, pa += 2 * CPU_Q8_0_BYTES) {
        prefetch_ahead(pw, 2 * wb);
        dot32_block(k, pw, pa, &acc0, &accm0);
        dot32_block(k, pw + wb, pa + CPU_Q8_0_BYTES, &acc1, &accm1);
    }
    if (b < nb) dot32_block(k, pw, pa, &acc0, &accm0);
    return hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(accm0, accm1)));
}

float QS(dot_q4_1)(size_t n, const void *w, const void *a) { return dot32(K_Q4_1, n, w, a); }
float QS(dot_q5_0)(size_t n, const void *w, const void *a) { return dot32(K_Q5_0, n, w, a); }
float QS(dot_q5_1)(size_t n, const void *w, const void *a) { return dot32(K_Q5_1, n, w, a); }
float QS(dot_iq4_nl)(size_t n, const void *w, const void *a) { return dot32(K_IQ4_NL, n, w, a); }

/* ---- super-blocks against Q8_K ---- */

/* Per-block epilogue: acc += d_w*d_a*sumi (vector), returns -dmin*d_a*summ for the scalar tail. */
static inline __m256 k_acc(__m256 acc, float dd, __m256i sumi) { return _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi), acc); }

static inline const int8_t *q8k_qs(const unsigned char *pa) { return (const int8_t *)(const void *)(pa + 4); }

static inline int16_t q8k_bsum(const unsigned char *pa, int s)
{
    int16_t v;
    memcpy(&v, pa + 4 + QUANTS_QK_K + 2 * s, 2);
    return v;
}

float QS(dot_q2_k)(size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    float tail = 0.0f;
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, pw += 84, pa += QUANTS_Q8_K_BYTES) {
        prefetch_ahead(pw, 84);
        const float da = ld_f32(pa);
        const unsigned char *sc = pw, *qa = (const unsigned char *)q8k_qs(pa);
        int summ = 0;
        for (int s = 0; s < 16; s++) summ += (sc[s] >> 4) * q8k_bsum(pa, s);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = loadu256(pw + 16 + 32 * h);
            for (int j = 0; j < 4; j++) {
                const int s = 8 * h + 2 * j;
                const __m256i wq = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
                const __m256i p = pairs_u8(wq, loadu256(qa + 128 * h + 32 * j));
                sumi = scaled_pairs(sumi, p, scale2(sc[s] & 0x0f, sc[s + 1] & 0x0f));
            }
        }
        acc = k_acc(acc, ld_f16(pw + 80) * da, sumi);
        tail -= ld_f16(pw + 82) * da * (float)summ;
    }
    return hsum_ps(acc) + tail;
}

float QS(dot_q3_k)(size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, pw += 110, pa += QUANTS_Q8_K_BYTES) {
        prefetch_ahead(pw, 110);
        int16_t sc[16];
        quants_q3_k_scales(pw + 96, sc);
        const unsigned char *qa = (const unsigned char *)q8k_qs(pa);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 4; j++) {
                const int s = 8 * h + 2 * j;
                const __m256i p = pairs_s8(q3k_chunk(pw, h, j), loadu256(qa + 128 * h + 32 * j));
                sumi = scaled_pairs(sumi, p, scale2(sc[s], sc[s + 1]));
            }
        acc = k_acc(acc, ld_f16(pw + 108) * ld_f32(pa), sumi);
    }
    return hsum_ps(acc);
}

/* The 8 6-bit scales and 8 mins of a Q4_K/Q5_K super-block (its 12 bytes at s, as
 * quants_k4_scales decodes them), as bytes: sc = bytes 0..7, mn = bytes 8..15. Words u0, u1, u2:
 * sc[0..3] = u0 & 63, mn[0..3] = u1 & 63 (per byte); sc[4..7] = the low nibbles of u2 with the top
 * 2 bits of u0's bytes above them, mn[4..7] = the high nibbles of u2 with u1's top 2 bits. */
static inline __m128i k4_scales_mins(const unsigned char *s)
{
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4), memcpy(&u1, s + 4, 4), memcpy(&u2, s + 8, 4);
    const uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 6) & 0x03030303u) << 4;
    const uint32_t mn_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 6) & 0x03030303u) << 4;
    return _mm_setr_epi32((int)(u0 & 0x3f3f3f3fu), (int)sc_hi, (int)(u1 & 0x3f3f3f3fu), (int)mn_hi);
}

/* Q4_K, and Q5_K when has_qh (fifth bits at pw + 16, nibbles at pw + 48), of R rows at once
 * (pw[0..R): R = 1, or MV_STREAMS for matvec_q's side-by-side rows, each activation super-block
 * loaded once for all). The mins' term sum_s mn[s] * (bsum[2s] + bsum[2s+1]) of each super-block
 * is one vpmaddwd of the activations' 16 block sums against the mins, each twice, summed in floats
 * across super-blocks. */
INLINE void q45k_rows(int R, int has_qh, size_t n, const unsigned char *const pw[MV_STREAMS], const unsigned char *pa,
                      float out[MV_STREAMS])
{
    const size_t bb = has_qh ? 176 : 144;
    __m256 acc[MV_STREAMS], accm[MV_STREAMS];
    MV_ROWS acc[k] = accm[k] = _mm256_setzero_ps();
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, pa += QUANTS_Q8_K_BYTES) {
        const __m256i bsums = loadu256(pa + 4 + QUANTS_QK_K);
        const float da = ld_f32(pa);
        const unsigned char *qa = (const unsigned char *)q8k_qs(pa);
        MV_ROWS {
            const unsigned char *p = pw[k] + b * bb;
            prefetch_ahead(p, bb);
            const __m128i scmn = k4_scales_mins(p + 4);
            _Alignas(16) int16_t sc[8];
            _mm_store_si128((__m128i *)(void *)sc, _mm_cvtepu8_epi16(scmn));
            const __m128i mn8 = _mm_srli_si128(scmn, 8);
            const __m256i mn2 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8)); /* mn[s] at 2s, 2s + 1 */
            accm[k] = _mm256_fmadd_ps(_mm256_set1_ps(ld_f16(p + 2) * da),
                                      _mm256_cvtepi32_ps(_mm256_madd_epi16(bsums, mn2)), accm[k]);
            __m256i sumi = _mm256_setzero_si256();
            for (int c = 0; c < 4; c++) {
                const __m256i p0 = pairs_u8(q45k_sub(has_qh, p, c, 0), loadu256(qa + 64 * c));
                const __m256i p1 = pairs_u8(q45k_sub(has_qh, p, c, 1), loadu256(qa + 64 * c + 32));
                sumi = scaled_pairs(sumi, p0, _mm256_set1_epi16(sc[2 * c]));
                sumi = scaled_pairs(sumi, p1, _mm256_set1_epi16(sc[2 * c + 1]));
            }
            acc[k] = k_acc(acc[k], ld_f16(p) * da, sumi);
        }
    }
    MV_ROWS out[k] = hsum_ps(_mm256_sub_ps(acc[k], accm[k]));
}

static float dot_q45_k(int has_qh, size_t n, const void *w, const void *a)
{
    const unsigned char *const pw[MV_STREAMS] = {w};
    float out[MV_STREAMS];
    q45k_rows(1, has_qh, n, pw, a, out);
    return out[0];
}

float QS(dot_q4_k)(size_t n, const void *w, const void *a) { return dot_q45_k(0, n, w, a); }
float QS(dot_q5_k)(size_t n, const void *w, const void *a) { return dot_q45_k(1, n, w, a); }

/* Q6_K of R rows at once (as q45k_rows). The weights as the unsigned q against the activations (no
 * sign trick), less 32 times the scaled block sums: sum (q - 32) a = sum q a - 32 sum a per 16
 * weights, the second term one vpmaddwd of the activations' 16 block sums against the 16 scales.
 * Each chunk's two scales are picked from the 16 (both lanes hold one half's 8) by one byte
 * shuffle. */
INLINE void q6k_rows(int R, size_t n, const unsigned char *const pw[MV_STREAMS], const unsigned char *pa,
                     float out[MV_STREAMS])
{
    __m256 acc[MV_STREAMS];
    MV_ROWS acc[k] = _mm256_setzero_ps();
    const __m256i pick[4] = {
        _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3),
        _mm256_setr_epi8(4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7),
        _mm256_setr_epi8(8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11,
                         10, 11, 10, 11),
        _mm256_setr_epi8(12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14, 15, 14, 15, 14, 15,
                         14, 15, 14, 15, 14, 15, 14, 15)};
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, pa += QUANTS_Q8_K_BYTES) {
        const unsigned char *qa = (const unsigned char *)q8k_qs(pa);
        const __m256i bsums = loadu256(pa + 4 + QUANTS_QK_K);
        const float da = ld_f32(pa);
        MV_ROWS {
            const unsigned char *p = pw[k] + b * 210;
            prefetch_ahead(p, 210);
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p + 192)));
            __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(bsums, sc16), 5));
            for (int h = 0; h < 2; h++) {
                const __m128i half = h ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16);
                const __m256i sch = _mm256_broadcastsi128_si256(half); /* scales 8h..8h+7 in both lanes */
                for (int c = 0; c < 4; c++) {
                    const __m256i pr = pairs_u8(q6k_chunk_u(p, h, c), loadu256(qa + 128 * h + 32 * c));
                    sumi = scaled_pairs(sumi, pr, _mm256_shuffle_epi8(sch, pick[c]));
                }
            }
            acc[k] = k_acc(acc[k], ld_f16(p + 208) * da, sumi);
        }
    }
    MV_ROWS out[k] = hsum_ps(acc[k]);
}

float QS(dot_q6_k)(size_t n, const void *w, const void *a)
{
    const unsigned char *const pw[MV_STREAMS] = {w};
    float out[MV_STREAMS];
    q6k_rows(1, n, pw, a, out);
    return out[0];
}

float QS(dot_iq4_xs)(size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    const __m256i tbl = iq4_table();
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, pw += 136, pa += QUANTS_Q8_K_BYTES) {
        prefetch_ahead(pw, 136);
        int16_t sc[8];
        quants_iq4_xs_scales(pw, sc);
        const unsigned char *qa = (const unsigned char *)q8k_qs(pa);
        __m256i sumi = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            const __m256i wq = _mm256_shuffle_epi8(tbl, nibbles16(pw + 8 + 16 * s));
            const __m256i p = pairs_s8(wq, loadu256(qa + 32 * s));
            sumi = scaled_pairs(sumi, p, _mm256_set1_epi16(sc[s]));
        }
        acc = k_acc(acc, ld_f16(pw) * ld_f32(pa), sumi);
    }
    return hsum_ps(acc);
}

#ifndef QUANTS_VNNI /* one Q8_K quantizer is enough: the AVX2 one runs on AVX-512 machines too */
/* ---- Q8_K activations: the bits of quants_quantize_row_q8_k ----
 * amax by vmaxps with the data first (a NaN lane keeps the running max, as the scalar's
 * comparison skips NaN), mx = the first element of that magnitude, then the same product
 * iscale * x, rounded to nearest even, clamped to [-127, 127] (NaN to -127). */
void quants_avx2_quantize_row_q8_k(const float *x, void *dst, size_t n)
{
    unsigned char *out = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, x += QUANTS_QK_K, out += QUANTS_Q8_K_BYTES) {
        __m256 m = _mm256_setzero_ps();
        for (int i = 0; i < QUANTS_QK_K; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h);
        int8_t *q = (int8_t *)(void *)(out + 4);
        float d = 0.0f;
        if (amax == 0.0f) {
            memset(q, 0, QUANTS_QK_K);
        } else {
            float mx = 0.0f;
            for (int i = 0; i < QUANTS_QK_K; i++)
                if (fabsf(x[i]) == amax) {
                    mx = x[i];
                    break;
                }
            const float iscale = -127.0f / mx;
            const __m256 vs = _mm256_set1_ps(iscale), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
            for (int i = 0; i < QUANTS_QK_K; i += 32) {
                __m256i v[4];
                for (int k = 0; k < 4; k++) {
                    __m256 r = _mm256_round_ps(_mm256_mul_ps(vs, _mm256_loadu_ps(x + i + 8 * k)),
                                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                    v[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
                }
                /* packs work per 128-bit lane: restore element order with one dword permute */
                __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
                p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
                _mm256_storeu_si256((__m256i *)(void *)(q + i), p);
            }
            d = 1.0f / iscale;
        }
        memcpy(out, &d, 4);
        const __m256i ones8 = _mm256_set1_epi8(1);
        for (int s = 0; s < 16; s += 2) { /* sums of each 16 */
            const __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)(q + 16 * s));
            /* |q| <= 127: maddubs(1, q) pairs, then madd to 8 sums of 4, hadd to sums of 16 */
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, qv), _mm256_set1_epi16(1));
            __m128i t = _mm_hadd_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
            t = _mm_hadd_epi32(t, t);
            int16_t bs[2] = {(int16_t)_mm_cvtsi128_si32(t), (int16_t)_mm_extract_epi32(t, 1)};
            memcpy(out + 4 + QUANTS_QK_K + 2 * s, bs, sizeof bs);
        }
    }
}
#endif

/* ================================================================ matrix-vector, Q8_0 and Q4_0
 *
 * One token (generation) streams every weight once, so this loop has to keep the memory busy and
 * do little per byte. The activation is decoded once per call: its float scales and, for Q4_0,
 * its blocks rearranged per pair of blocks to match how two blocks' nibbles sit in one vector
 * (low nibbles: elements 0..15 of both blocks, high nibbles: 16..31), with -8 * each block's sum
 * as the int32 start value of its dot (so the nibbles 0..15 multiply unsigned, no sign trick).
 * Q4_0 takes its weight scales 8 blocks at a time (one gather, one conversion, one multiply by
 * the activation scales). The weights are prefetched KERNELS_PREFETCH bytes ahead (rows lie one
 * after another, so near a row's end that is the next row's start). */
/* rows up to 32768 weights (every matrix of the common models up to 70B); longer ones take the
 * per-row dots. Thread-local: 52 KB a build, which every thread carries */
#define MV_MAX_BLOCKS 1024

struct mv_act {
    _Alignas(32) float d[MV_MAX_BLOCKS];
    /* Q4_0, per pair of blocks p: lo = elements 0..15 of block 2p then of 2p+1, hi = 16..31 */
    _Alignas(32) int8_t lo[MV_MAX_BLOCKS / 2][32], hi[MV_MAX_BLOCKS / 2][32];
    _Alignas(32) int32_t init[MV_MAX_BLOCKS / 2][8]; /* lanes 0 and 4: -off * sum(a) of each block */
};

/* The row functions below take R rows (pw[0..R), R = MV_STREAMS or 1: mv_streams) and write
 * out[0..R); one body serves both counts. */
static int block_sum(const unsigned char *q)
{
    const __m256i s = quads_u8(_mm256_setzero_si256(), _mm256_set1_epi8(1), loadu256(q));
    __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    h = _mm_hadd_epi32(h, h);
    return _mm_cvtsi128_si32(_mm_hadd_epi32(h, h));
}

/* off: what the stored unsigned weights are offset by (Q4_0 8, Q5_0 16), 0 for Q8_0 (scales only) */
static void mv_decode(int off, const unsigned char *pa, size_t nb, struct mv_act *m)
{
    for (size_t b = 0; b < nb; b++) m->d[b] = ld_f16(pa + b * CPU_Q8_0_BYTES);
    if (!off) return;
    for (size_t p = 0; p < nb / 2; p++) {
        const unsigned char *b0 = pa + 2 * p * CPU_Q8_0_BYTES + 2, *b1 = b0 + CPU_Q8_0_BYTES;
        memcpy(m->lo[p], b0, 16), memcpy(m->lo[p] + 16, b1, 16);
        memcpy(m->hi[p], b0 + 16, 16), memcpy(m->hi[p] + 16, b1 + 16, 16);
        _mm256_store_si256((__m256i *)(void *)m->init[p],
                           _mm256_setr_epi32(-off * block_sum(b0), 0, 0, 0, -off * block_sum(b1), 0, 0, 0));
    }
}

/* One block of row pw against activation block pa into acc (the 8 lanes of one block). */
static inline __attribute__((always_inline)) __m256 mv_block(int q4, const unsigned char *pw, const unsigned char *pa,
                                                             float da, __m256 acc)
{
    const __m256i av = loadu256(pa + 2), zero = _mm256_setzero_si256();
    const __m256i isum = q4 ? quads_s8(zero, _mm256_sub_epi8(nibbles16(pw + 2), _mm256_set1_epi8(8)), av)
                            : quads_s8(zero, loadu256(pw + 2), av);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(ld_f16(pw) * da), acc);
}

/* The f16 scales of 8 Q4_0 blocks from pw, as floats, times the activation scales da. Scale k sits
 * at byte 18k: in the 32 bytes from 32q (q = k / 2) it is word 2q of lane 0 (k even) or word 2q + 1
 * of lane 1 (k odd), so three word blends and one across the lanes gather them (a vpgatherdd
 * cost more than the blocks' dot products). */
static inline __m256 q4_scales8(const unsigned char *pw, const float *da)
{
    const __m256i b01 = _mm256_blend_epi16(loadu256(pw), loadu256(pw + 32), 0xcc);
    const __m256i b23 = _mm256_blend_epi16(loadu256(pw + 64), loadu256(pw + 96), 0xcc);
    const __m256i t = _mm256_blend_epi16(b01, b23, 0xf0);
    const __m128i h = _mm_blend_epi16(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1), 0xaa);
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_load_ps(da));
}

/* Blocks 2p, 2p+1 of a Q4_0 row (at pw) against the rearranged activation pair p; s: their
 * combined scales in lanes 0..3 and 4..7. */
static inline __attribute__((always_inline)) __m256 q4_pair(const unsigned char *pw, const struct mv_act *m, size_t p,
                                                            __m256 s, __m256 acc)
{
    const __m256i raw = _mm256_set_m128i(loadu128(pw + CPU_Q4_0_BYTES + 2), loadu128(pw + 2));
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i isum = _mm256_load_si256((const __m256i *)(const void *)m->init[p]);
    isum = quads_u8(isum, _mm256_and_si256(raw, m4), _mm256_load_si256((const __m256i *)(const void *)m->lo[p]));
    isum = quads_u8(isum, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4),
                    _mm256_load_si256((const __m256i *)(const void *)m->hi[p]));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), s, acc);
}

#ifdef QUANTS_VNNI
/* Blocks 4q..4q+3 of a Q4_0 row (at pw) against the rearranged activation pairs 2q, 2q+1 (which lie
 * next to each other in m); s: the 4 blocks' combined scales, 4 lanes each. */
static inline __attribute__((always_inline)) __m512 q4_quad(const unsigned char *pw, const struct mv_act *m, size_t q,
                                                            __m512 s, __m512 acc)
{
    __m512i raw = _mm512_castsi128_si512(loadu128(pw + 2));
    raw = _mm512_inserti32x4(raw, loadu128(pw + CPU_Q4_0_BYTES + 2), 1);
    raw = _mm512_inserti32x4(raw, loadu128(pw + 2 * CPU_Q4_0_BYTES + 2), 2);
    raw = _mm512_inserti32x4(raw, loadu128(pw + 3 * CPU_Q4_0_BYTES + 2), 3);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    /* pairs 2q and 2q + 1 lie next to each other: one load each */
    const __m512i lo = _mm512_loadu_si512((const void *)m->lo[2 * q]);
    const __m512i hi = _mm512_loadu_si512((const void *)m->hi[2 * q]);
    __m512i isum = _mm512_loadu_si512((const void *)m->init[2 * q]);
    isum = _mm512_dpbusd_epi32(isum, _mm512_and_si512(raw, m4), lo);
    isum = _mm512_dpbusd_epi32(isum, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4), hi);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), s, acc);
}

/* Blocks 4q..4q+3 of a Q5_0 row (at pw, 22 bytes each: f16 d, 32 fifth bits, 16 bytes of nibbles)
 * against the rearranged activation pairs 2q, 2q+1, their init holding -16 * sum(a): the
 * nibbles as in q4_quad, each fifth bit adding 16 under a byte mask (the low nibbles' bits are
 * bits 0..15 of each block's 32, the high ones' 16..31); the four scales are words 0, 11, 22, 33
 * of the 88 bytes (a masked load: nothing past the blocks is read). */
static inline __attribute__((always_inline)) __m512 q5_quad(const unsigned char *pw, const struct mv_act *m, size_t q,
                                                            const float *da, __m512 acc)
{
    enum { B = 22 };
    __m512i raw = _mm512_castsi128_si512(loadu128(pw + 6));
    raw = _mm512_inserti32x4(raw, loadu128(pw + B + 6), 1);
    raw = _mm512_inserti32x4(raw, loadu128(pw + 2 * B + 6), 2);
    raw = _mm512_inserti32x4(raw, loadu128(pw + 3 * B + 6), 3);
    uint32_t qh[4];
    for (int i = 0; i < 4; i++) memcpy(&qh[i], pw + i * B + 2, 4);
    const __mmask64 lo5 = _cvtu64_mask64((uint64_t)(qh[0] & 0xffff) | (uint64_t)(qh[1] & 0xffff) << 16 |
                                         (uint64_t)(qh[2] & 0xffff) << 32 | (uint64_t)(qh[3] & 0xffff) << 48);
    const __mmask64 hi5 = _cvtu64_mask64((uint64_t)(qh[0] >> 16) | (uint64_t)(qh[1] >> 16) << 16 |
                                         (uint64_t)(qh[2] >> 16) << 32 | (uint64_t)(qh[3] >> 16) << 48);
    const __m512i m4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
    __m512i lo = _mm512_and_si512(raw, m4), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    lo = _mm512_mask_add_epi8(lo, lo5, lo, sixteen);
    hi = _mm512_mask_add_epi8(hi, hi5, hi, sixteen);
    __m512i isum = _mm512_loadu_si512((const void *)m->init[2 * q]);
    isum = _mm512_dpbusd_epi32(isum, lo, _mm512_loadu_si512((const void *)m->lo[2 * q]));
    isum = _mm512_dpbusd_epi32(isum, hi, _mm512_loadu_si512((const void *)m->hi[2 * q]));
    const __m512i si = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0, 0, 3 * B / 2, 2 * B / 2, B / 2, 0);
    const __m512i tail = _mm512_maskz_loadu_epi8((__mmask64)0xffffff, pw + 64); /* bytes 64..87 */
    const __m512i h = _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)pw), si, tail);
    const __m512 s = _mm512_castps128_ps512(_mm_mul_ps(_mm_cvtph_ps(_mm512_castsi512_si128(h)), _mm_loadu_ps(da)));
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_permutexvar_ps(spread, s), acc);
}

/* The blocks [0, nb) of R Q5_0 rows, nb a multiple of 4. */
INLINE void q5_rows(int R, const unsigned char *const pw[MV_STREAMS], size_t nb, const struct mv_act *m, float out[MV_STREAMS])
{
    __m512 acc[MV_STREAMS][2];
    MV_ROWS acc[k][0] = acc[k][1] = _mm512_setzero_ps();
    size_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        MV_ROWS {
            const unsigned char *p = pw[k] + b * 22;
            prefetch_ahead(p, 8 * 22);
            acc[k][0] = q5_quad(p, m, b / 4, m->d + b, acc[k][0]);
            acc[k][1] = q5_quad(p + 4 * 22, m, b / 4 + 1, m->d + b + 4, acc[k][1]);
        }
    }
    if (b < nb) MV_ROWS acc[k][0] = q5_quad(pw[k] + b * 22, m, b / 4, m->d + b, acc[k][0]);
    MV_ROWS out[k] = _mm512_reduce_add_ps(_mm512_add_ps(acc[k][0], acc[k][1]));
}
#endif

/* The blocks [0, nb) of R Q4_0 rows: nb a multiple of Q4_ROW_STEP. */
#ifdef QUANTS_VNNI
#define Q4_ROW_STEP 4
#else
#define Q4_ROW_STEP 8
#endif
INLINE void q4_rows(int R, const unsigned char *const pw[MV_STREAMS], size_t nb, const struct mv_act *m, float out[MV_STREAMS])
{
#ifdef QUANTS_VNNI
    __m512 acc[MV_STREAMS][2];
    MV_ROWS acc[k][0] = acc[k][1] = _mm512_setzero_ps();
    const __m512i i0 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i i1 = _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
    size_t b = 0;
    /* the 8 blocks' f16 scales are words 0, 9, .., 63 of their first 128 bytes */
    const __m512i si = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 63,
                                        54, 45, 36, 27, 18, 9, 0);
    for (; b + 8 <= nb; b += 8) {
        MV_ROWS {
            const unsigned char *p = pw[k] + b * CPU_Q4_0_BYTES;
            prefetch_ahead(p, 8 * CPU_Q4_0_BYTES);
            const __m512i h = _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)p), si,
                                                        _mm512_loadu_si512((const void *)(p + 64)));
            const __m512 sc = _mm512_castps256_ps512(
                _mm256_mul_ps(_mm256_cvtph_ps(_mm512_castsi512_si128(h)), _mm256_load_ps(m->d + b)));
            acc[k][0] = q4_quad(p, m, b / 4, _mm512_permutexvar_ps(i0, sc), acc[k][0]);
            acc[k][1] = q4_quad(p + 4 * CPU_Q4_0_BYTES, m, b / 4 + 1, _mm512_permutexvar_ps(i1, sc), acc[k][1]);
        }
    }
    if (b < nb) { /* 4 blocks left (a row of 896: 28 blocks), their 4 scales from their first 64 bytes */
        MV_ROWS {
            const unsigned char *p = pw[k] + b * CPU_Q4_0_BYTES;
            const __m512i h = _mm512_permutexvar_epi16(si, _mm512_loadu_si512((const void *)p));
            const __m128 d = _mm_cvtph_ps(_mm512_castsi512_si128(h));
            const __m512 sc = _mm512_castps128_ps512(_mm_mul_ps(d, _mm_loadu_ps(m->d + b)));
            acc[k][1] = q4_quad(p, m, b / 4, _mm512_permutexvar_ps(i0, sc), acc[k][1]);
        }
    }
    MV_ROWS out[k] = _mm512_reduce_add_ps(_mm512_add_ps(acc[k][0], acc[k][1]));
#else
    __m256 acc[MV_STREAMS][2];
    MV_ROWS acc[k][0] = acc[k][1] = _mm256_setzero_ps();
    for (size_t b = 0; b + 8 <= nb; b += 8) {
        MV_ROWS {
            const unsigned char *p = pw[k] + b * CPU_Q4_0_BYTES;
            prefetch_ahead(p, 8 * CPU_Q4_0_BYTES);
            const __m256 sc = q4_scales8(p, m->d + b);
            const size_t q = b / 2;
            acc[k][0] = q4_pair(p, m, q, _mm256_permutevar8x32_ps(sc, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1)),
                                acc[k][0]);
            acc[k][1] = q4_pair(p + 2 * CPU_Q4_0_BYTES, m, q + 1,
                                _mm256_permutevar8x32_ps(sc, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3)), acc[k][1]);
            acc[k][0] = q4_pair(p + 4 * CPU_Q4_0_BYTES, m, q + 2,
                                _mm256_permutevar8x32_ps(sc, _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5)), acc[k][0]);
            acc[k][1] = q4_pair(p + 6 * CPU_Q4_0_BYTES, m, q + 3,
                                _mm256_permutevar8x32_ps(sc, _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7)), acc[k][1]);
        }
    }
    MV_ROWS out[k] = hsum_ps(_mm256_add_ps(acc[k][0], acc[k][1]));
#endif
}

/* Q8_0 blocks [0, nb) of R rows, and Q4_0 blocks [b0, nb) (those past q4_rows' whole steps). */
INLINE void q8_rows(int R, int q4, const unsigned char *const pw[MV_STREAMS], size_t b0, size_t nb, const unsigned char *pa,
                    const struct mv_act *m, float out[MV_STREAMS])
{
    const size_t bw = q4 ? CPU_Q4_0_BYTES : CPU_Q8_0_BYTES;
    __m256 acc[MV_STREAMS][2];
    MV_ROWS acc[k][0] = acc[k][1] = _mm256_setzero_ps();
    size_t b = b0;
    for (; b + 2 <= nb; b += 2) {
        MV_ROWS {
            const unsigned char *p = pw[k] + b * bw;
            prefetch_ahead(p, 2 * bw);
            acc[k][0] = mv_block(q4, p, pa + b * CPU_Q8_0_BYTES, m->d[b], acc[k][0]);
            acc[k][1] = mv_block(q4, p + bw, pa + (b + 1) * CPU_Q8_0_BYTES, m->d[b + 1], acc[k][1]);
        }
    }
    if (b < nb) MV_ROWS acc[k][0] = mv_block(q4, pw[k] + b * bw, pa + b * CPU_Q8_0_BYTES, m->d[b], acc[k][0]);
    MV_ROWS out[k] = hsum_ps(_mm256_add_ps(acc[k][0], acc[k][1]));
}

/* What the rows of one matrix-vector product share: the type, the row length, the activations and
 * their decoding. */
struct mv_ctx {
    enum tensor_type t;
    size_t n;
    const unsigned char *pa;
    const struct mv_act *m;
};

/* R rows of type t (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K or, with VNNI, Q5_0): the whole steps of the row
 * functions and the rest block by block. */
INLINE void mv_rows(int R, const unsigned char *const pw[MV_STREAMS], const void *ctx, float out[MV_STREAMS])
{
    const struct mv_ctx *c = (const struct mv_ctx *)ctx;
    switch (c->t) {
    case TENSOR_Q4_K: q45k_rows(R, 0, c->n, pw, c->pa, out); return;
    case TENSOR_Q5_K: q45k_rows(R, 1, c->n, pw, c->pa, out); return;
    case TENSOR_Q6_K: q6k_rows(R, c->n, pw, c->pa, out); return;
    default: break;
    }
    const size_t nb = c->n / 32;
    float tail[MV_STREAMS] = {0.0f};
#ifdef QUANTS_VNNI
    if (c->t == TENSOR_Q5_0) { /* whole 4-block steps, then the rest (n / 32 % 4 blocks) by dot32_block */
        const size_t nb4 = nb / 4 * 4;
        MV_ROWS out[k] = 0.0f;
        if (nb4) q5_rows(R, pw, nb4, c->m, out);
        MV_ROWS {
            __m256 acc = _mm256_setzero_ps(), accm = acc;
            for (size_t b = nb4; b < nb; b++) dot32_block(K_Q5_0, pw[k] + b * 22, c->pa + b * CPU_Q8_0_BYTES, &acc, &accm);
            out[k] += hsum_ps(acc);
        }
        return;
    }
#endif
    const int q4 = c->t == TENSOR_Q4_0;
    const size_t nbs = q4 ? nb / Q4_ROW_STEP * Q4_ROW_STEP : 0; /* Q4_0: whole steps in q4_rows */
    MV_ROWS out[k] = 0.0f;
    if (nbs) q4_rows(R, pw, nbs, c->m, out);
    q8_rows(R, q4, pw, nbs, nb, c->pa, c->m, tail);
    MV_ROWS out[k] += tail[k];
}

int QS(matvec_q)(enum tensor_type t, size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a, float *y)
{
    static __thread struct mv_act act;
    const size_t nb = n / 32;
    const int k_type = t == TENSOR_Q4_K || t == TENSOR_Q5_K || t == TENSOR_Q6_K; /* Q8_K activations, as they are */
    int ok = t == TENSOR_Q8_0 || t == TENSOR_Q4_0;
#ifdef QUANTS_VNNI
    ok = ok || t == TENSOR_Q5_0;
#endif
    if (k_type && n % QUANTS_QK_K == 0) {
        const struct mv_ctx c = {t, n, a, NULL};
        mv_streams(mv_rows, &c, w, wrb, r0, r1, y);
        return 1;
    }
    if (!ok || nb > MV_MAX_BLOCKS) return 0;
    mv_decode(t == TENSOR_Q4_0 ? 8 : t == TENSOR_Q5_0 ? 16 : 0, a, nb, &act);
    const struct mv_ctx c = {t, n, a, &act};
    mv_streams(mv_rows, &c, w, wrb, r0, r1, y);
    return 1;
}

/* ================================================================ multi-token GEMM
 *
 * For 2 or more tokens the weights are unpacked once per chunk of PG_TOK tokens into an int8
 * panel of PG_ROWS rows x PG_BLK blocks of 32 (w[i] = s * isc[i/16] * q[i] - m: s the block's
 * float scale, isc an integer sub-scale for the types with 16-weight sub-blocks, m the block's
 * min), and the activations of each group of 4 tokens are interleaved per block by 8 bytes:
 * x[k] = [a_t0[8k..8k+8) | a_t1[..] | a_t2[..] | a_t3[..]] and |x[k]|. A weight's 8 bytes
 * w[8k..8k+8), broadcast, then line up with all 4 tokens:
 *   maddubs(|x[k]|, sign(w, x[k])) -> madd(.., isc)  = int32 lanes [t0 t0 t1 t1 t2 t2 t3 t3]
 * so one cvt and one fma per (row, block) cover 4 tokens. The min term subtracts m * d_a *
 * sum(a) per block (lanes [t0 0 t1 0 ...] so the final pair sums count it once). Tokens past
 * the last are zero activations with scale 0; their results are not stored. */
#define PG_ROWS 8
#define PG_BLK 32
#define PG_TOK 64
/* tokens per group: 4 (a 256-bit vector of [t0 t0 t1 t1 | t2 t2 t3 t3] int32 lanes); the VNNI build,
 * on AVX-512, 8 in 512-bit vectors ([t0 t0 .. t7 t7]): half the instructions per token. One
 * thread of the Xeon of the README, 128 tokens: Q4_0 76 -> 99 GMAC/s, Q8_0 80 -> 97, Q4_K 66 -> 86;
 * with ATTND_ISA=avx512 a Q4_0 pp128 398 -> 450 tokens/s. */
#ifdef QUANTS_VNNI
#define PG_G 8
typedef __m512i pg_vi;
typedef __m512 pg_vf;
#else
#define PG_G 4
typedef __m256i pg_vi;
typedef __m256 pg_vf;
#endif

struct pg_row {
    _Alignas(32) int8_t q[PG_BLK][32];
    int16_t isc[PG_BLK][2];
    int32_t corr[PG_BLK][2]; /* VNNI build: 128 * the sum of each half block's q (pg_corrections) */
    float s[PG_BLK], m[PG_BLK];
};

struct pg_group {
    _Alignas(64) int8_t x[PG_BLK][4][8 * PG_G];
    _Alignas(64) float sa[PG_BLK][2 * PG_G]; /* d_a of each token, twice */
    _Alignas(64) float as[PG_BLK][2 * PG_G]; /* d_a * sum(a) of each token at even lanes, 0 at odd */
};

static inline void store_q(int8_t *dst, __m256i v) { _mm256_store_si256((__m256i *)(void *)dst, v); }

/* ---- unpacking one row's blocks [b0, b0 + nb) into the panel row (K-types: b0, nb multiples of 8) */

static enum kind32 k32_of(enum tensor_type t)
{
    switch (t) {
    case TENSOR_Q4_0: return K_Q4_0;
    case TENSOR_Q4_1: return K_Q4_1;
    case TENSOR_Q5_0: return K_Q5_0;
    case TENSOR_Q5_1: return K_Q5_1;
    case TENSOR_Q8_0: return K_Q8_0;
    default: return K_IQ4_NL;
    }
}

/* The 32-weight-scale types: block b0 + i's int8 weights to q + 32 i (32-byte aligned), its
 * scale to s[i] and its min to m[i] (w = s * q - m; 0 for the types without one). */
static void pg_unpack32(enum tensor_type t, const unsigned char *row, size_t b0, size_t nb, int8_t *q, float *s, float *m)
{
    const enum kind32 k = k32_of(t);
    for (size_t b = 0; b < nb; b++) {
        const unsigned char *pw = row + (b0 + b) * k32_bytes[k];
        store_q(q + 32 * b, w32(k, pw));
        s[b] = ld_f16(pw);
        m[b] = k32_unsigned(k) ? -ld_f16(pw + 2) : 0.0f; /* w = d*q + m */
    }
}

static void pg_unpack_q45_k(int has_qh, const unsigned char *row, size_t b0, size_t nb, int8_t *q, float *s, float *m)
{
    const size_t bb = has_qh ? 176 : 144;
    for (size_t sb = 0; sb < nb / 8; sb++) {
        const unsigned char *pw = row + (b0 / 8 + sb) * bb;
        const __m128i scmn = k4_scales_mins(pw + 4);
        const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(scmn));
        const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(scmn, 8)));
        _mm256_storeu_ps(s + 8 * sb, _mm256_mul_ps(_mm256_set1_ps(ld_f16(pw)), sc));
        _mm256_storeu_ps(m + 8 * sb, _mm256_mul_ps(_mm256_set1_ps(ld_f16(pw + 2)), mn));
        for (int j = 0; j < 8; j++) store_q(q + 32 * (8 * sb + (size_t)j), q45k_sub(has_qh, pw, j / 2, j % 2));
    }
}

/* Q6_K and Q3_K: 16-weight sub-blocks, so integer sub-scales per half block. */
static void pg_unpack_sub16(enum tensor_type t, const unsigned char *row, size_t b0, size_t nb, struct pg_row *o)
{
    const int q6 = t == TENSOR_Q6_K;
    for (size_t sb = 0; sb < nb / 8; sb++) {
        const unsigned char *pw = row + (b0 / 8 + sb) * (q6 ? 210 : 110);
        int16_t sc[16];
        if (q6)
            for (int s = 0; s < 16; s++) sc[s] = ((const int8_t *)(const void *)(pw + 192))[s];
        else
            quants_q3_k_scales(pw + 96, sc);
        const float d = ld_f16(pw + (q6 ? 208 : 108));
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++) {
                const size_t b = 8 * sb + 4 * (size_t)h + (size_t)k;
                store_q(o->q[b], q6 ? q6k_chunk(pw, h, k) : q3k_chunk(pw, h, k));
                o->isc[b][0] = sc[8 * h + 2 * k];
                o->isc[b][1] = sc[8 * h + 2 * k + 1];
                o->s[b] = d;
                o->m[b] = 0.0f;
            }
    }
}

static void pg_unpack_iq4_xs(const unsigned char *row, size_t b0, size_t nb, int8_t *q, float *s, float *m)
{
    const __m256i tbl = iq4_table();
    for (size_t sb = 0; sb < nb / 8; sb++) {
        const unsigned char *pw = row + (b0 / 8 + sb) * 136;
        int16_t sc[8];
        quants_iq4_xs_scales(pw, sc);
        const float d = ld_f16(pw);
        for (int j = 0; j < 8; j++) {
            store_q(q + 32 * (8 * sb + (size_t)j), _mm256_shuffle_epi8(tbl, nibbles16(pw + 8 + 16 * j)));
            s[8 * sb + (size_t)j] = d * sc[j];
            m[8 * sb + (size_t)j] = 0.0f;
        }
    }
}

/* The types whose weights are one scale (and min) per 32 times an int8: every panel type but
 * Q3_K and Q6_K (integer sub-scales per 16). */
static int pg_unpack_s32(enum tensor_type t, const unsigned char *row, size_t b0, size_t nb, int8_t *q, float *s, float *m)
{
    switch (t) {
    case TENSOR_Q4_K: pg_unpack_q45_k(0, row, b0, nb, q, s, m); return 1;
    case TENSOR_Q5_K: pg_unpack_q45_k(1, row, b0, nb, q, s, m); return 1;
    case TENSOR_IQ4_XS: pg_unpack_iq4_xs(row, b0, nb, q, s, m); return 1;
    case TENSOR_Q8_0: case TENSOR_Q4_0: case TENSOR_Q4_1: case TENSOR_Q5_0: case TENSOR_Q5_1: case TENSOR_IQ4_NL:
        pg_unpack32(t, row, b0, nb, q, s, m);
        return 1;
    default: return 0;
    }
}

static void pg_unpack(enum tensor_type t, const unsigned char *row, size_t b0, size_t nb, struct pg_row *o)
{
    if (!pg_unpack_s32(t, row, b0, nb, o->q[0], o->s, o->m)) pg_unpack_sub16(t, row, b0, nb, o);
}

#ifndef QUANTS_VNNI /* one is enough: the AMX GEMM calls the AVX2 build's */
int quants_avx2_unpack_row(enum tensor_type t, const unsigned char *row, size_t b0, size_t nb, int8_t *q, float *s,
                           float *m)
{
    return pg_unpack_s32(t, row, b0, nb, q, s, m);
}

/* The weights of rows x nb blocks of kind k, the kind known where this is inlined */
static inline __attribute__((always_inline)) void unpack32_rows(enum kind32 k, const unsigned char *w0, size_t wrb,
                                                                int rows, size_t nb, int8_t *q, size_t q_stride)
{
    for (int i = 0; i < rows; i++) {
        const unsigned char *row = w0 + (size_t)i * wrb;
        for (size_t b = 0; b < nb; b++) store_q(q + (size_t)i * q_stride + 32 * b, w32(k, row + b * k32_bytes[k]));
    }
}

int quants_avx2_unpack_q32_rows(enum tensor_type t, const unsigned char *w0, size_t wrb, int rows, size_t nb,
                                int8_t *q, size_t q_stride)
{
    switch (t) {
    case TENSOR_Q4_0: unpack32_rows(K_Q4_0, w0, wrb, rows, nb, q, q_stride); return 1;
    case TENSOR_Q4_1: unpack32_rows(K_Q4_1, w0, wrb, rows, nb, q, q_stride); return 1;
    case TENSOR_Q5_0: unpack32_rows(K_Q5_0, w0, wrb, rows, nb, q, q_stride); return 1;
    case TENSOR_Q5_1: unpack32_rows(K_Q5_1, w0, wrb, rows, nb, q, q_stride); return 1;
    case TENSOR_IQ4_NL: unpack32_rows(K_IQ4_NL, w0, wrb, rows, nb, q, q_stride); return 1;
    default: return 0;
    }
}
#endif

/* ---- activations: one group of PG_G tokens (j0 .., those >= n_tok as zeros), blocks [b0, b0 + nb) */

/* 8 activations into a group: as they are (AVX2: the tile takes |x| and the sign apart) or,
 * in the VNNI build, offset by 128 to the u8 that vpdpbusd multiplies (a + 128 = a ^ 0x80 for
 * a in [-127, 127]); tokens past the last (src NULL) are activations 0. */
static inline void pg_put8(int8_t *dst, const int8_t *src)
{
    uint64_t v = 0;
    if (src) memcpy(&v, src, 8);
#ifdef QUANTS_VNNI
    v ^= 0x8080808080808080ULL;
#endif
    memcpy(dst, &v, 8);
}

#ifdef QUANTS_VNNI
/* 128 * sum(q) per half block of a panel row: what the +128 on the activations adds to a dot */
static void pg_corrections(struct pg_row *o, size_t nb)
{
    const __m256i ones = _mm256_set1_epi8(1);
    for (size_t b = 0; b < nb; b++) {
        const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, _mm256_load_si256((const __m256i *)(const void *)o->q[b]));
        __m128i h = _mm_hadd_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_hadd_epi32(h, h); /* [half 0, half 1, ...] */
        o->corr[b][0] = 128 * _mm_cvtsi128_si32(h);
        o->corr[b][1] = 128 * _mm_extract_epi32(h, 1);
    }
}
#endif

static void pg_pack_group(int q8k, int need_sum, const unsigned char *pa, size_t arb, size_t j0, size_t n_tok,
                          size_t b0, size_t nb, struct pg_group *g)
{
    for (size_t b = 0; b < nb; b++) {
        for (size_t l = 0; l < PG_G; l++) {
            const size_t j = j0 + l, blk = b0 + b;
            float d = 0.0f;
            int sum = 0;
            const int8_t *qa = NULL;
            if (j < n_tok) {
                const unsigned char *row = pa + j * arb;
                if (q8k) {
                    const unsigned char *sbp = row + (blk / 8) * QUANTS_Q8_K_BYTES;
                    d = ld_f32(sbp);
                    qa = (const int8_t *)(const void *)(sbp + 4 + 32 * (blk % 8));
                    sum = q8k_bsum(sbp, (int)(2 * (blk % 8))) + q8k_bsum(sbp, (int)(2 * (blk % 8) + 1));
                } else {
                    d = ld_f16(row + blk * CPU_Q8_0_BYTES);
                    qa = (const int8_t *)(const void *)(row + blk * CPU_Q8_0_BYTES + 2);
                    if (need_sum)
                        for (int i = 0; i < 32; i++) sum += qa[i];
                }
            }
            for (int k = 0; k < 4; k++) {
                pg_put8(g->x[b][k] + 8 * l, qa ? qa + 8 * k : NULL);
            }
            g->sa[b][2 * l] = g->sa[b][2 * l + 1] = d;
            g->as[b][2 * l] = d * (float)sum;
            g->as[b][2 * l + 1] = 0.0f;
        }
    }
}

/* ---- the tile: R panel rows x one group of 4 tokens over nb blocks; v[ri][l] = the dot
 *
 * Kinds of panel: PG_WIDE (|q| up to 127: IQ4), PG_NARROW (|q| <= 32: the 4-, 5- and 6-bit
 * types), PG_MIN (narrow with a min) and PG_SUB16 (narrow with integer sub-scales per 16). For
 * narrow weights a maddubs pair sum is at most 2 * 32 * 127 = 8128, so the four k-chunks' (or,
 * with sub-scales, each half's two) sums add in int16 (<= 32512) before a single madd: 5 (or 6)
 * multiplies per row and block instead of 8. */
enum pg_kind { PG_WIDE, PG_NARROW, PG_MIN, PG_SUB16 };

/* The 8 weights of row wr, block b, chunk k broadcast to the group's tokens' lanes. */
static inline pg_vi pg_w8(const struct pg_row *wr, size_t b, int k)
{
    long long w8;
    memcpy(&w8, wr->q[b] + 8 * k, 8);
#ifdef QUANTS_VNNI
    return _mm512_set1_epi64(w8);
#else
    return _mm256_set1_epi64x(w8);
#endif
}

/* One row's block against the group's tokens, exact in int32: lanes [t0 t0 t1 t1 ..], each
 * token's dot the sum of its two lanes (times the sub-scales for PG_SUB16). x: the group's 4
 * chunks as packed (VNNI: u8 = a + 128); ax: their magnitudes (AVX2 only). */
static inline __attribute__((always_inline)) pg_vi pg_block(enum pg_kind kind, const struct pg_row *wr, size_t b,
                                                            const pg_vi x[4], const pg_vi ax[4])
{
#ifdef QUANTS_VNNI
    (void)ax;
    const __m512i zero = _mm512_setzero_si512();
    __m512i m0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, x[0], pg_w8(wr, b, 0)), x[1], pg_w8(wr, b, 1));
    if (kind == PG_SUB16) {
        /* the +128 counted in the even lane of each token's pair; then the half blocks' sub-scales */
        __m512i m1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, x[2], pg_w8(wr, b, 2)), x[3], pg_w8(wr, b, 3));
        m0 = _mm512_sub_epi32(m0, _mm512_set1_epi64((long long)(uint32_t)wr->corr[b][0]));
        m1 = _mm512_sub_epi32(m1, _mm512_set1_epi64((long long)(uint32_t)wr->corr[b][1]));
        return _mm512_add_epi32(_mm512_mullo_epi32(m0, _mm512_set1_epi32(wr->isc[b][0])),
                                _mm512_mullo_epi32(m1, _mm512_set1_epi32(wr->isc[b][1])));
    }
    m0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(m0, x[2], pg_w8(wr, b, 2)), x[3], pg_w8(wr, b, 3));
    return _mm512_sub_epi32(m0, _mm512_set1_epi64((long long)(uint32_t)(wr->corr[b][0] + wr->corr[b][1])));
#else
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) p[k] = _mm256_maddubs_epi16(ax[k], _mm256_sign_epi8(pg_w8(wr, b, k), x[k]));
    if (kind == PG_WIDE)
        return _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(p[0], ones), _mm256_madd_epi16(p[1], ones)),
                                _mm256_add_epi32(_mm256_madd_epi16(p[2], ones), _mm256_madd_epi16(p[3], ones)));
    if (kind == PG_SUB16)
        return _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_set1_epi16(wr->isc[b][0])),
                                _mm256_madd_epi16(_mm256_add_epi16(p[2], p[3]), _mm256_set1_epi16(wr->isc[b][1])));
    return _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3])), ones);
#endif
}

#ifdef QUANTS_VNNI
#define PG_LOADI(p) _mm512_load_si512((const void *)(p))
#define PG_LOADF(p) _mm512_load_ps(p)
#define PG_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define PG_FNMA(a, b, c) _mm512_fnmadd_ps(a, b, c)
#define PG_MUL(a, b) _mm512_mul_ps(a, b)
#define PG_SET1F(v) _mm512_set1_ps(v)
#define PG_CVT(m) _mm512_cvtepi32_ps(m)
#define PG_ZEROF() _mm512_setzero_ps()
#else
#define PG_LOADI(p) _mm256_load_si256((const __m256i *)(const void *)(p))
#define PG_LOADF(p) _mm256_load_ps(p)
#define PG_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define PG_FNMA(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define PG_MUL(a, b) _mm256_mul_ps(a, b)
#define PG_SET1F(v) _mm256_set1_ps(v)
#define PG_CVT(m) _mm256_cvtepi32_ps(m)
#define PG_ZEROF() _mm256_setzero_ps()
#endif

static inline __attribute__((always_inline)) void pg_tile(int R, enum pg_kind kind, size_t nb,
                                                          const struct pg_row *w, const struct pg_group *g,
                                                          float v[PG_ROWS][PG_G])
{
    pg_vf acc[PG_ROWS];
#pragma GCC unroll 8
    for (int ri = 0; ri < R; ri++) acc[ri] = PG_ZEROF();
    for (size_t b = 0; b < nb; b++) {
        pg_vi x[4], ax[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            x[k] = PG_LOADI(g->x[b][k]);
#ifndef QUANTS_VNNI
            ax[k] = _mm256_abs_epi8(x[k]);
#endif
        }
        const pg_vf sa = PG_LOADF(g->sa[b]);
#pragma GCC unroll 8
        for (int ri = 0; ri < R; ri++) {
            const struct pg_row *wr = w + ri;
            const pg_vi m = pg_block(kind, wr, b, x, ax);
            acc[ri] = PG_FMA(PG_CVT(m), PG_MUL(PG_SET1F(wr->s[b]), sa), acc[ri]);
            if (kind == PG_MIN) acc[ri] = PG_FNMA(PG_SET1F(wr->m[b]), PG_LOADF(g->as[b]), acc[ri]);
        }
    }
#pragma GCC unroll 8
    for (int ri = 0; ri < R; ri++) {
#ifdef QUANTS_VNNI
        /* lanes [t0 t0 t1 t1 ..]: each pair's sum */
        _Alignas(64) float l[16];
        _mm512_store_ps(l, _mm512_add_ps(acc[ri], _mm512_permute_ps(acc[ri], 0xb1)));
        for (int t = 0; t < PG_G; t++) v[ri][t] = l[2 * t];
#else
        /* lanes [t0 t0 t1 t1 | t2 t2 t3 t3] -> [t0 t1 . . | t2 t3 . .] */
        __m256 h = _mm256_hadd_ps(acc[ri], acc[ri]);
        __m128 lo = _mm256_castps256_ps128(h), hi = _mm256_extractf128_ps(h, 1);
        v[ri][0] = _mm_cvtss_f32(lo);
        v[ri][1] = _mm_cvtss_f32(_mm_movehdup_ps(lo));
        v[ri][2] = _mm_cvtss_f32(hi);
        v[ri][3] = _mm_cvtss_f32(_mm_movehdup_ps(hi));
#endif
    }
}

/* constant R and kind per call so the tile unrolls into registers */
#define PG_TILE_R(K)                                                                       \
    switch (R) {                                                                           \
    case 1: pg_tile(1, K, nb, w, g, v); return;                                            \
    case 2: pg_tile(2, K, nb, w, g, v); return;                                            \
    case 3: pg_tile(3, K, nb, w, g, v); return;                                            \
    case 4: pg_tile(4, K, nb, w, g, v); return;                                            \
    case 5: pg_tile(5, K, nb, w, g, v); return;                                            \
    case 6: pg_tile(6, K, nb, w, g, v); return;                                            \
    case 7: pg_tile(7, K, nb, w, g, v); return;                                            \
    default: pg_tile(8, K, nb, w, g, v); return;                                           \
    }

static void pg_tile_rt(int R, enum pg_kind kind, size_t nb, const struct pg_row *w, const struct pg_group *g,
                       float v[PG_ROWS][PG_G])
{
    switch (kind) {
    case PG_WIDE: PG_TILE_R(PG_WIDE)
    case PG_NARROW: PG_TILE_R(PG_NARROW)
    case PG_MIN: PG_TILE_R(PG_MIN)
    default: PG_TILE_R(PG_SUB16)
    }
}

static enum pg_kind pg_kind_of(enum tensor_type t)
{
    switch (t) {
    case TENSOR_IQ4_NL: case TENSOR_IQ4_XS: case TENSOR_Q8_0: return PG_WIDE;
    case TENSOR_Q4_1: case TENSOR_Q5_1: case TENSOR_Q4_K: case TENSOR_Q5_K: return PG_MIN;
    case TENSOR_Q3_K: case TENSOR_Q6_K: return PG_SUB16;
    default: return PG_NARROW;
    }
}

/* The panel GEMM of this build's level: the types of the table's panel column (not Q2_K, whose mins are
 * per 16 weights; Q8_0 only in the VNNI build, where no sign trick has to negate a -128 weight). */
int QS(gemm)(enum tensor_type t, size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a,
                     size_t arb, size_t n_tok, float *y, size_t ys)
{
    if (n_tok < 2) return 0; /* t: a type cpu_kernels.c's table gives this panel */
    const int q8k = tensor_dot_type(t) == TENSOR_Q8_K;
    const enum pg_kind kind = pg_kind_of(t);
    const int has_min = kind == PG_MIN;
    const unsigned char *pw = w, *pa = a;
    const size_t nb = n / 32;
    /* thread-local, not on the stack: the stack version (160 KiB) returned zeros at -O2 in
     * test_quants (not under -O0 or ASan); not understood yet, so the validated layout stays */
    static __thread struct pg_group groups[PG_TOK / PG_G];
    static __thread struct pg_row panel[PG_ROWS];
    float v[PG_ROWS][PG_G];
    if (nb == 0) { /* an empty dot is 0 */
        for (size_t j = 0; j < n_tok; j++)
            for (size_t r = r0; r < r1; r++) y[j * ys + r] = 0.0f;
        return 1;
    }
    for (size_t t0 = 0; t0 < n_tok; t0 += PG_TOK) {
        const size_t nt = n_tok - t0 < PG_TOK ? n_tok - t0 : PG_TOK, ng = (nt + PG_G - 1) / PG_G;
        for (size_t b0 = 0; b0 < nb; b0 += PG_BLK) {
            const size_t nbc = nb - b0 < PG_BLK ? nb - b0 : PG_BLK;
            for (size_t gi = 0; gi < ng; gi++)
                pg_pack_group(q8k, has_min, pa, arb, t0 + PG_G * gi, n_tok, b0, nbc, &groups[gi]);
            for (size_t r = r0; r < r1; r += PG_ROWS) {
                const int R = r1 - r < PG_ROWS ? (int)(r1 - r) : PG_ROWS;
                for (int ri = 0; ri < R; ri++) {
                    pg_unpack(t, pw + (r + (size_t)ri) * wrb, b0, nbc, &panel[ri]);
#ifdef QUANTS_VNNI
                    pg_corrections(&panel[ri], nbc);
#endif
                }
                /* the next rows' bytes of this chunk, into L2 while these compute, a share per
                 * group (the hardware prefetch does not follow 8 strided rows: unpacking waited on
                 * them for a third of a Q4_0 prompt's time with ATTND_ISA=avx512) */
                const size_t rn = r + PG_ROWS, Rn = rn < r1 ? (r1 - rn < PG_ROWS ? r1 - rn : PG_ROWS) : 0;
                const size_t cb = tensor_block_bytes(t) * nbc * 32 / tensor_block_elems(t);
                const size_t co = tensor_block_bytes(t) * b0 * 32 / tensor_block_elems(t), lines = (cb + 63) / 64 + 1;
                for (size_t gi = 0; gi < ng; gi++) {
                    for (size_t i = Rn * lines * gi / ng; i < Rn * lines * (gi + 1) / ng; i++)
                        _mm_prefetch((const char *)(pw + (rn + i / lines) * wrb + co + (i % lines) * 64), _MM_HINT_T1);
                    pg_tile_rt(R, kind, nbc, panel, &groups[gi], v);
                    for (size_t l = 0; l < PG_G && t0 + PG_G * gi + l < n_tok; l++) {
                        float *yo = y + (t0 + PG_G * gi + l) * ys + r;
                        for (int ri = 0; ri < R; ri++) yo[ri] = (b0 ? yo[ri] : 0.0f) + v[ri][l];
                    }
                }
            }
        }
    }
    return 1;
}

/* ================================================================ small batches (2..32 tokens): Q8_0, Q4_0, and the
 * types with unsigned quants and a min (Q4_1, Q5_1, Q4_K, Q5_K)
 *
 * The panel GEMM above unpacks each weight row into a panel (and, with VNNI, sums it for the +128
 * correction) once per call: over 64 tokens that is nothing, over 4 or 8 it costs as much as the
 * dot products. Here the weights are made ready with as little work as a row can take (Q8_0: one
 * xor or abs per block, Q4_0: the nibbles split) and the tokens pay the zero-point correction
 * instead, once per call and not per row: the weights are the unsigned operand, so
 *   Q8_0 (VNNI): u = w + 128, dot = sum(u * a) - 128 * sum(a);  Q4_0: u = q, dot = sum(u * a) - 8 * sum(a)
 * and the int32 accumulator of each (row, block) starts at -off * sum(a) per token. The min types'
 * quants are unsigned as they are (the panel GEMM's unpacking, w = s * q - m); their min term,
 * m * d_a * sum(a), is one more fma per (row, block). Tokens lie in
 * lanes: one vector holds a group of tokens, G bytes of each (token l's a[G c .. G c + G) at byte
 * G l of chunk c, 32 / G chunks per block), so one broadcast of G weight bytes meets the whole
 * group in one multiply-accumulate:
 *   AVX2: 256-bit vectors, G = 4, 8 tokens; vpmaddubsw then vpmaddwd, Q8_0 through the sign trick
 *         |w| * sign(a, w) (w + 128 times a would saturate the 16-bit pairs);
 *   VNNI: 512-bit vpdpbusd (on the Xeon here a 256-bit one issues no faster than a 512-bit one),
 *         G = 8 (8 tokens, each in 2 int32 lanes) or, for up to 4 tokens, G = 16 (4 lanes each).
 * Per (row, block) one conversion and one fma then apply d_w * d_a to every lane; a token's lanes
 * are summed at the end of the row. 4 rows per tile. Sums exact in int32 per block as in the
 * scalar reference; the float sum over blocks is in another order (per lane, fma, per chunk of
 * BK_BLK blocks). */
#define BK_R 4      /* rows per tile */
#define BK_BLK 64   /* blocks per chunk of a row */
#define BK_GROUPS 4 /* groups per pass */
/* How far ahead the unpacking prefetches, in bytes (rows lie one after another; a tile prefetches
 * the next tile's blocks too): with both, a decode step's matrices
 * of the 0.5B shape, Q8_0, one thread, 8 tokens: 87 -> 66-73 ms (a token alone: 33-38 ms) */
#define BK_AHEAD 4096
#ifdef QUANTS_VNNI
#define BK_VB 64 /* bytes per vector */
#else
#define BK_VB 32
#endif
#define BK_LANES (BK_VB / 4)

struct bk_acts {
    _Alignas(64) int8_t x[BK_GROUPS][BK_BLK][32 / 4 * 32]; /* [group][block]: chunk c at c * BK_VB */
    _Alignas(64) float sa[BK_GROUPS][BK_BLK][BK_LANES];    /* d_a of each lane's token (0 past the last) */
    _Alignas(64) int32_t init[BK_GROUPS][BK_BLK][BK_LANES]; /* -off * sum(a) in each token's first lane */
    _Alignas(64) float as[BK_GROUPS][BK_BLK][BK_LANES];     /* the min types: d_a * sum(a), first lane */
};

struct bk_rows {
    _Alignas(64) uint8_t q[BK_R][BK_BLK][32]; /* the unsigned operand: Q4_0 q, Q8_0 w + 128 (AVX2: |w|) */
#ifndef QUANTS_VNNI
    _Alignas(32) int8_t sg[BK_R][BK_BLK][32]; /* AVX2 Q8_0: w, whose signs go onto the activations */
#endif
    _Alignas(64) uint16_t h[BK_R][BK_BLK];    /* the f16 scales, then as floats: */
    _Alignas(64) float s[BK_R][BK_BLK];
    _Alignas(64) float m[BK_R][BK_BLK]; /* the min types' mins */
};

/* What the tile does with a type's quants: Q8_0 (signed), Q4_0 (0..15, offset 8), the min types
 * with quants 0..15 (Q4_1, Q4_K) and 0..31 (Q5_1, Q5_K: the AVX2 16-bit pair sums of only 4
 * chunks add up safely). */
enum bk_kind { BK_S8, BK_U4, BK_MIN4, BK_MIN5 };

/* The weights a tile prefetches while it computes, spread over its blocks (so the memory works while
 * the multipliers do; all at once, they waited on the unpacking for a third of the time): block b
 * of rows p, p + wrb, .. (rows of them, at most BK_R), bb bytes per block of 32; p NULL: none. */
struct bk_pf {
    const unsigned char *p;
    size_t wrb, bb;
    int rows;
};

static inline void bk_prefetch(const struct bk_pf *pf, size_t b)
{
    if (!pf->p) return;
#pragma GCC unroll 4
    for (int ri = 0; ri < BK_R; ri++)
        if (ri < pf->rows) _mm_prefetch((const char *)(pf->p + (size_t)ri * pf->wrb + b * pf->bb), _MM_HINT_T0);
}

static int bk_kind_of(enum tensor_type t)
{
    switch (t) {
    case TENSOR_Q8_0: return BK_S8;
    case TENSOR_Q4_0: return BK_U4;
    case TENSOR_Q4_1: case TENSOR_Q4_K: return BK_MIN4;
    case TENSOR_Q5_1: case TENSOR_Q5_K: return BK_MIN5;
    default: return -1;
    }
}

/* One token's 32 activations of a block into its place in the group's chunks, G bytes per chunk
 * (constant sizes: plain moves, no memcpy call). */
static inline void bk_put(int8_t *dst, const int8_t *v, int G)
{
    if (G == 4)
        for (int c = 0; c < 8; c++) memcpy(dst + c * BK_VB, v + 4 * c, 4);
    else if (G == 8)
        for (int c = 0; c < 4; c++) memcpy(dst + c * BK_VB, v + 8 * c, 8);
    else
        for (int c = 0; c < 2; c++) memcpy(dst + c * BK_VB, v + 16 * c, 16);
}

/* Tokens [j0, j0 + nt) (nt <= BK_GROUPS * BK_VB / G), blocks [b0, b0 + nb) of Q8_0 or (q8k) Q8_K
 * rows: interleaved as struct bk_acts says, G bytes of a token per chunk; need_sum: the sums for
 * the min types' term. */
static void bk_pack(int off, int q8k, int need_sum, int G, const unsigned char *pa, size_t arb, size_t j0, size_t nt,
                    size_t b0, size_t nb, struct bk_acts *A)
{
    const size_t T = BK_VB / (size_t)G, ng = (nt + T - 1) / T, lpt = (size_t)G / 4; /* lanes per token */
    for (size_t g = 0; g < ng; g++)
        for (size_t b = 0; b < nb; b++)
            for (size_t l = 0; l < T; l++) {
                const size_t j = g * T + l;
                int8_t v[32] = {0};
                float d = 0.0f;
                int sum = 0;
                if (j < nt && q8k) {
                    const size_t blk = b0 + b;
                    const unsigned char *sbp = pa + (j0 + j) * arb + (blk / 8) * QUANTS_Q8_K_BYTES;
                    d = ld_f32(sbp);
                    memcpy(v, sbp + 4 + 32 * (blk % 8), 32);
                    sum = q8k_bsum(sbp, (int)(2 * (blk % 8))) + q8k_bsum(sbp, (int)(2 * (blk % 8) + 1));
                } else if (j < nt) {
                    const unsigned char *blk = pa + (j0 + j) * arb + (b0 + b) * CPU_Q8_0_BYTES;
                    d = ld_f16(blk);
                    memcpy(v, blk + 2, 32);
                    if (off || need_sum) sum = block_sum(blk + 2);
                }
                bk_put(A->x[g][b] + G * (int)l, v, G);
                for (size_t i = 0; i < lpt; i++) {
                    A->sa[g][b][l * lpt + i] = d;
                    A->init[g][b][l * lpt + i] = i ? 0 : -off * sum;
                    A->as[g][b][l * lpt + i] = i ? 0.0f : d * (float)sum;
                }
            }
}

/* The min types' R rows: the panel GEMM's unpacking (the bytes BK_AHEAD on prefetched first). */
static void bk_unpack_min(enum tensor_type t, const unsigned char *w0, size_t wrb, int R, size_t b0, size_t nb,
                          struct bk_rows *W)
{
    const size_t cb = tensor_block_bytes(t) * nb * 32 / tensor_block_elems(t);
    const size_t co = tensor_block_bytes(t) * b0 * 32 / tensor_block_elems(t);
    for (int ri = 0; ri < R; ri++) {
        const unsigned char *row = w0 + (size_t)ri * wrb + co;
        for (size_t i = 0; i < cb; i += 64) _mm_prefetch((const char *)(row + BK_AHEAD + i), _MM_HINT_T0);
        pg_unpack_s32(t, w0 + (size_t)ri * wrb, b0, nb, (int8_t *)(void *)W->q[ri][0], W->s[ri], W->m[ri]);
    }
}

/* R rows from w0 (wrb bytes apart), blocks [b0, b0 + nb): the unsigned operand and the scales. */
static void bk_unpack(enum tensor_type t, const unsigned char *w0, size_t wrb, int R, size_t b0, size_t nb,
                      struct bk_rows *W)
{
    if (t != TENSOR_Q8_0 && t != TENSOR_Q4_0) {
        bk_unpack_min(t, w0, wrb, R, b0, nb, W);
        return;
    }
    const int q4 = t == TENSOR_Q4_0;
    const size_t bb = q4 ? CPU_Q4_0_BYTES : CPU_Q8_0_BYTES;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int ri = 0; ri < R; ri++) {
        const unsigned char *row = w0 + (size_t)ri * wrb + b0 * bb;
        for (size_t b = 0; b < nb; b++) {
            const unsigned char *pw = row + b * bb;
            for (size_t o = 0; o < bb; o += 64) _mm_prefetch((const char *)(pw + BK_AHEAD + o), _MM_HINT_T0);
            memcpy(&W->h[ri][b], pw, 2);
            if (q4) {
                const __m128i raw = loadu128(pw + 2);
                _mm_store_si128((__m128i *)(void *)W->q[ri][b], _mm_and_si128(raw, m4));
                _mm_store_si128((__m128i *)(void *)(W->q[ri][b] + 16), _mm_and_si128(_mm_srli_epi16(raw, 4), m4));
                continue;
            }
            const __m256i wv = loadu256(pw + 2);
#ifdef QUANTS_VNNI
            _mm256_store_si256((__m256i *)(void *)W->q[ri][b], _mm256_xor_si256(wv, _mm256_set1_epi8((char)0x80)));
#else
            _mm256_store_si256((__m256i *)(void *)W->q[ri][b], _mm256_abs_epi8(wv));
            _mm256_store_si256((__m256i *)(void *)W->sg[ri][b], wv);
#endif
        }
        for (size_t b = 0; b < nb; b += 8) /* past nb: scales of no block, never read */
            _mm256_store_ps(W->s[ri] + b, _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(const void *)(W->h[ri] + b))));
    }
}

#define BK_LD(p) _mm256_load_si256((const __m256i *)(const void *)(p))

#ifdef QUANTS_VNNI
typedef __m512 bk_vf;

/* R rows of W against group g over nb blocks, G = 8 or 16: out[ri] = the group's lanes of row ri. */
static inline __attribute__((always_inline)) void bk_tile(int R, int G, int mn, size_t nb, const struct bk_rows *W,
                                                          const struct bk_acts *A, size_t g, const struct bk_pf *pf,
                                                          bk_vf out[BK_R])
{
    __m512 acc[BK_R];
#pragma GCC unroll 4
    for (int ri = 0; ri < R; ri++) acc[ri] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        bk_prefetch(pf, b);
        const __m512 sab = _mm512_load_ps(A->sa[g][b]);
        const __m512i ib = _mm512_load_si512((const void *)A->init[g][b]);
        __m512i x[4] = {_mm512_load_si512((const void *)A->x[g][b]), _mm512_load_si512((const void *)(A->x[g][b] + 64))};
        if (G == 8) {
            x[2] = _mm512_load_si512((const void *)(A->x[g][b] + 128));
            x[3] = _mm512_load_si512((const void *)(A->x[g][b] + 192));
        }
#pragma GCC unroll 4
        for (int ri = 0; ri < R; ri++) {
            const uint8_t *q = W->q[ri][b];
            __m512i isum = ib;
            if (G == 8) {
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    long long w8;
                    memcpy(&w8, q + 8 * c, 8);
                    isum = _mm512_dpbusd_epi32(isum, _mm512_set1_epi64(w8), x[c]);
                }
            } else {
                isum = _mm512_dpbusd_epi32(isum, _mm512_broadcast_i32x4(loadu128(q)), x[0]);
                isum = _mm512_dpbusd_epi32(isum, _mm512_broadcast_i32x4(loadu128(q + 16)), x[1]);
            }
            acc[ri] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(_mm512_set1_ps(W->s[ri][b]), sab), acc[ri]);
            if (mn) acc[ri] = _mm512_fnmadd_ps(_mm512_set1_ps(W->m[ri][b]), _mm512_load_ps(A->as[g][b]), acc[ri]);
        }
    }
#pragma GCC unroll 4
    for (int ri = 0; ri < R; ri++) out[ri] = acc[ri];
}

static inline void bk_store_lanes(float *l, bk_vf v) { _mm512_store_ps(l, v); }

/* constant R, G and min per call so the tile unrolls into registers (the quants' range only
 * changes the unpacking) */
#define BK_TILE_R(G, MN)                                      \
    switch (R) {                                              \
    case 1: bk_tile(1, G, MN, nb, W, A, g, pf, out); return;      \
    case 2: bk_tile(2, G, MN, nb, W, A, g, pf, out); return;      \
    case 3: bk_tile(3, G, MN, nb, W, A, g, pf, out); return;      \
    default: bk_tile(4, G, MN, nb, W, A, g, pf, out); return;     \
    }

static void bk_tile_rt(int R, int G, int kind, size_t nb, const struct bk_rows *W, const struct bk_acts *A, size_t g,
                       const struct bk_pf *pf, bk_vf out[BK_R])
{
    const int mn = kind == BK_MIN4 || kind == BK_MIN5;
    if (G == 16 && mn) BK_TILE_R(16, 1)
    if (G == 16) BK_TILE_R(16, 0)
    if (mn) BK_TILE_R(8, 1)
    BK_TILE_R(8, 0)
}
#else
typedef __m256 bk_vf;

static inline __m256i bk_bcast(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* R rows of W against group g over nb blocks (G = 4): out[ri] = the 8 tokens' partial dots of row ri. */
static inline __attribute__((always_inline)) void bk_tile(int R, int kind, size_t nb, const struct bk_rows *W,
                                                          const struct bk_acts *A, size_t g, const struct bk_pf *pf,
                                                          __m256 out[BK_R])
{
    __m256 acc[BK_R];
#pragma GCC unroll 4
    for (int ri = 0; ri < R; ri++) acc[ri] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (size_t b = 0; b < nb; b++) {
        bk_prefetch(pf, b);
        const __m256 sab = _mm256_load_ps(A->sa[g][b]);
        const __m256i ib = BK_LD(A->init[g][b]);
        const int8_t *x = A->x[g][b];
#pragma GCC unroll 4
        for (int ri = 0; ri < R; ri++) {
            const uint8_t *q = W->q[ri][b];
            __m256i isum;
            if (kind != BK_S8) { /* pairs <= 2 * 15 * 127: eight chunks add in int16 (31: four) */
                __m256i p0 = _mm256_maddubs_epi16(bk_bcast(q), BK_LD(x));
                __m256i p1 = _mm256_maddubs_epi16(bk_bcast(q + 4), BK_LD(x + 32));
#pragma GCC unroll 3
                for (int k = 2; k < 8; k += 2) {
                    p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(bk_bcast(q + 4 * k), BK_LD(x + 32 * k)));
                    p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(bk_bcast(q + 4 * k + 4), BK_LD(x + 32 * k + 32)));
                }
                if (kind == BK_MIN5)
                    isum = _mm256_add_epi32(ib, _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones)));
                else
                    isum = _mm256_add_epi32(ib, _mm256_madd_epi16(_mm256_add_epi16(p0, p1), ones));
            } else { /* |w| * sign(a, w): pairs <= 2 * 128 * 127, one madd per chunk */
                const int8_t *sg = W->sg[ri][b];
                __m256i i0 = ib, i1 = _mm256_setzero_si256();
#pragma GCC unroll 4
                for (int k = 0; k < 8; k += 2) {
                    const __m256i a0 = _mm256_sign_epi8(BK_LD(x + 32 * k), bk_bcast(sg + 4 * k));
                    const __m256i a1 = _mm256_sign_epi8(BK_LD(x + 32 * k + 32), bk_bcast(sg + 4 * k + 4));
                    i0 = _mm256_add_epi32(i0, _mm256_madd_epi16(_mm256_maddubs_epi16(bk_bcast(q + 4 * k), a0), ones));
                    i1 = _mm256_add_epi32(i1, _mm256_madd_epi16(_mm256_maddubs_epi16(bk_bcast(q + 4 * k + 4), a1), ones));
                }
                isum = _mm256_add_epi32(i0, i1);
            }
            acc[ri] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(_mm256_set1_ps(W->s[ri][b]), sab),
                                      acc[ri]);
            if (kind == BK_MIN4 || kind == BK_MIN5)
                acc[ri] = _mm256_fnmadd_ps(_mm256_set1_ps(W->m[ri][b]), _mm256_load_ps(A->as[g][b]), acc[ri]);
        }
    }
#pragma GCC unroll 4
    for (int ri = 0; ri < R; ri++) out[ri] = acc[ri];
}

static inline void bk_store_lanes(float *l, bk_vf v) { _mm256_store_ps(l, v); }

/* constant R and kind per call so the tile unrolls into registers */
#define BK_TILE_R(K)                                      \
    switch (R) {                                          \
    case 1: bk_tile(1, K, nb, W, A, g, pf, out); return;      \
    case 2: bk_tile(2, K, nb, W, A, g, pf, out); return;      \
    case 3: bk_tile(3, K, nb, W, A, g, pf, out); return;      \
    default: bk_tile(4, K, nb, W, A, g, pf, out); return;     \
    }

static void bk_tile_rt(int R, int G, int kind, size_t nb, const struct bk_rows *W, const struct bk_acts *A, size_t g,
                       const struct bk_pf *pf, bk_vf out[BK_R])
{
    (void)G;
    switch (kind) {
    case BK_S8: BK_TILE_R(BK_S8)
    case BK_U4: BK_TILE_R(BK_U4)
    case BK_MIN4: BK_TILE_R(BK_MIN4)
    default: BK_TILE_R(BK_MIN5)
    }
}
#endif

/* The small-batch GEMM of Q8_0, Q4_0, Q4_1, Q5_1, Q4_K and Q5_K (cpu_gemm's contract); returns 0,
 * doing nothing, for other types and n_tok < 2. Any n_tok works (BK_GROUPS groups per pass); meant
 * for the batch family. */
int QS(batch)(enum tensor_type t, size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a,
              size_t arb, size_t n_tok, float *y, size_t ys)
{
    const int kind = bk_kind_of(t), q8k = tensor_dot_type(t) == TENSOR_Q8_K;
    if (n_tok < 2 || kind < 0 || (q8k && n % QUANTS_QK_K)) return 0;
#ifdef QUANTS_VNNI
    const int off = kind == BK_U4 ? 8 : kind == BK_S8 ? 128 : 0, G = n_tok <= 4 ? 16 : 8;
#else
    const int off = kind == BK_U4 ? 8 : 0, G = 4;
#endif
    const int need_sum = kind == BK_MIN4 || kind == BK_MIN5;
    static __thread struct bk_acts acts; /* thread-local like the panel GEMM's: ~80 KiB + 11 KiB */
    static __thread struct bk_rows rows;
    const unsigned char *pw = w;
    const size_t nb = n / 32, T = BK_VB / (size_t)G, lpt = (size_t)G / 4, pass = BK_GROUPS * T;
    const size_t bpb = tensor_block_bytes(t) * 32 / tensor_block_elems(t); /* bytes per 32 weights */
    for (size_t j0 = 0; j0 < n_tok; j0 += pass) {
        const size_t nt = n_tok - j0 < pass ? n_tok - j0 : pass, ng = (nt + T - 1) / T;
        if (nb == 0) /* an empty dot is 0 */
            for (size_t j = 0; j < nt; j++)
                for (size_t r = r0; r < r1; r++) y[(j0 + j) * ys + r] = 0.0f;
        for (size_t b0 = 0; b0 < nb; b0 += BK_BLK) {
            const size_t nbc = nb - b0 < BK_BLK ? nb - b0 : BK_BLK;
            bk_pack(off, q8k, need_sum, G, a, arb, j0, nt, b0, nbc, &acts);
            /* tiles of 4 rows a quarter of the range apart (r0 + k + i q: four streams from memory, as
             * the matrix-vector product reads), then the rest (under 4 rows) as one tile */
            const size_t q = (r1 - r0) / BK_R, rest = (r1 - r0) % BK_R;
            for (size_t k = 0; k < q + (rest > 0); k++) {
                const size_t r = k < q ? r0 + k : r0 + BK_R * q, step = k < q ? q : 1;
                const int R = k < q ? BK_R : (int)rest;
                bk_unpack(t, pw + r * wrb, step * wrb, R, b0, nbc, &rows);
                /* the next tile's rows, this chunk, prefetched during the first group */
                struct bk_pf pf = {NULL, wrb, bpb, BK_R};
                if (k + 1 < q) pf = (struct bk_pf){pw + (r + 1) * wrb + b0 * bpb, step * wrb, bpb, BK_R};
                else if (k + 1 == q && rest) pf = (struct bk_pf){pw + (r0 + BK_R * q) * wrb + b0 * bpb, wrb, bpb, (int)rest};
                for (size_t g = 0; g < ng; g++) {
                    bk_vf out[BK_R];
                    _Alignas(64) float l[BK_LANES];
                    const struct bk_pf none = {NULL, wrb, bpb, 0};
                    bk_tile_rt(R, G, kind, nbc, &rows, &acts, g, g ? &none : &pf, out);
                    const size_t lt = nt - g * T < T ? nt - g * T : T;
                    for (int ri = 0; ri < R; ri++) {
                        bk_store_lanes(l, out[ri]);
                        for (size_t i = 0; i < lt; i++) {
                            float v = l[i * lpt];
                            for (size_t c = 1; c < lpt; c++) v += l[i * lpt + c];
                            float *yo = y + (j0 + g * T + i) * ys + r + (size_t)ri * step;
                            *yo = (b0 ? *yo : 0.0f) + v;
                        }
                    }
                }
            }
        }
    }
    return 1;
}
