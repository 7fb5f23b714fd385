/* quants_avx2.c - AVX2 dot products for the K-quant, IQ4 and Q4_1/Q5_x weight types (layouts in
 * cpu_kernels_impl.h). Built with -mavx2 -mfma -mf16c; called only when the CPU has them.
 *
 * Each block's weights are widened to 32 int8 lanes at a time and multiplied with the int8
 * activations by maddubs (unsigned weights directly; signed ones through the sign trick,
 * |w| * sign(a, w), safe because no quant or activation is -128); the 16-bit pair sums are
 * then multiplied by the sub-block scales in madd, so a super-block's sum is exact in int32
 * as in the scalar reference. Only the float sum over blocks differs in order. */
#include "kernels/cpu/cpu_kernels_impl.h"

#include <immintrin.h>

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

/* ---- 32-blocks against Q8_0 ---- */

/* One block's 32 weights as int8 and whether they are signed. */
enum kind32 { K_Q4_1, K_Q5_0, K_Q5_1, K_IQ4_NL };

static inline float dot32(enum kind32 k, size_t n, const void *w, const void *a)
{
    static const size_t bytes[4] = {20, 22, 24, 18};
    const unsigned char *pw = w, *pa = a;
    const __m256i ones = _mm256_set1_epi16(1), ones8 = _mm256_set1_epi8(1);
    const __m256i tbl = iq4_table();
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (size_t b = 0; b < n / 32; b++, pw += bytes[k], pa += CPU_Q8_0_BYTES) {
        const float d = quants_ld_f16(pw) * quants_ld_f16(pa);
        const __m256i av = loadu256(pa + 2);
        __m256i p;
        switch (k) {
        case K_Q4_1: p = pairs_u8(nibbles16(pw + 4), av); break;
        case K_Q5_0: p = pairs_s8(_mm256_sub_epi8(_mm256_or_si256(nibbles16(pw + 6), fifth_bits(pw + 2)),
                                                  _mm256_set1_epi8(16)), av); break;
        case K_Q5_1: p = pairs_u8(_mm256_or_si256(nibbles16(pw + 8), fifth_bits(pw + 4)), av); break;
        default: p = pairs_s8(_mm256_shuffle_epi8(tbl, nibbles16(pw + 2)), av); break;
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones)), acc);
        if (k == K_Q4_1 || k == K_Q5_1) {
            const float m = quants_ld_f16(pw + 2) * quants_ld_f16(pa);
            const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, av), ones);
            accm = _mm256_fmadd_ps(_mm256_set1_ps(m), _mm256_cvtepi32_ps(s), accm);
        }
    }
    return hsum_ps(_mm256_add_ps(acc, accm));
}

float quants_avx2_dot_q4_1(size_t n, const void *w, const void *a) { return dot32(K_Q4_1, n, w, a); }
float quants_avx2_dot_q5_0(size_t n, const void *w, const void *a) { return dot32(K_Q5_0, n, w, a); }
float quants_avx2_dot_q5_1(size_t n, const void *w, const void *a) { return dot32(K_Q5_1, n, w, a); }
float quants_avx2_dot_iq4_nl(size_t n, const void *w, const void *a) { return dot32(K_IQ4_NL, n, w, a); }

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

float quants_avx2_dot_q2_k(size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    float tail = 0.0f;
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, pw += 84, pa += QUANTS_Q8_K_BYTES) {
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
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale2(sc[s] & 0x0f, sc[s + 1] & 0x0f)));
            }
        }
        acc = k_acc(acc, quants_ld_f16(pw + 80) * da, sumi);
        tail -= quants_ld_f16(pw + 82) * da * (float)summ;
    }
    return hsum_ps(acc) + tail;
}

float quants_avx2_dot_q3_k(size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4), zero = _mm256_setzero_si256();
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, pw += 110, pa += QUANTS_Q8_K_BYTES) {
        int16_t sc[16];
        quants_q3_k_scales(pw + 96, sc);
        const unsigned char *qa = (const unsigned char *)q8k_qs(pa);
        const __m256i hm = loadu256(pw);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i q = loadu256(pw + 32 + 32 * h);
            for (int j = 0; j < 4; j++) {
                const int s = 8 * h + 2 * j;
                const __m256i bit = _mm256_set1_epi8((char)(1 << (4 * h + j)));
                /* high bit clear -> subtract 4 */
                const __m256i clear = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), zero);
                const __m256i wq = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3),
                                                   _mm256_and_si256(clear, four));
                const __m256i p = pairs_s8(wq, loadu256(qa + 128 * h + 32 * j));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale2(sc[s], sc[s + 1])));
            }
        }
        acc = k_acc(acc, quants_ld_f16(pw + 108) * ld_f32(pa), sumi);
    }
    return hsum_ps(acc);
}

/* Q4_K, and Q5_K when has_qh (fifth bits at pw + 16, nibbles at pw + 48). */
static inline float dot_q45_k(int has_qh, size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    const size_t bb = has_qh ? 176 : 144;
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    float tail = 0.0f;
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, pw += bb, pa += QUANTS_Q8_K_BYTES) {
        int16_t sc[8], mn[8];
        quants_k4_scales(pw + 4, sc, mn);
        const float da = ld_f32(pa);
        int summ = 0;
        for (int s = 0; s < 8; s++) summ += mn[s] * (q8k_bsum(pa, 2 * s) + q8k_bsum(pa, 2 * s + 1));
        const unsigned char *qs = pw + (has_qh ? 48 : 16), *qa = (const unsigned char *)q8k_qs(pa);
        const __m256i qh = has_qh ? loadu256(pw + 16) : _mm256_setzero_si256();
        __m256i sumi = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            const __m256i q = loadu256(qs + 32 * k);
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (has_qh) {
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k + 1), one), 4));
            }
            const __m256i p0 = pairs_u8(lo, loadu256(qa + 64 * k)), p1 = pairs_u8(hi, loadu256(qa + 64 * k + 32));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p0, _mm256_set1_epi16(sc[2 * k])));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p1, _mm256_set1_epi16(sc[2 * k + 1])));
        }
        acc = k_acc(acc, quants_ld_f16(pw) * da, sumi);
        tail -= quants_ld_f16(pw + 2) * da * (float)summ;
    }
    return hsum_ps(acc) + tail;
}

float quants_avx2_dot_q4_k(size_t n, const void *w, const void *a) { return dot_q45_k(0, n, w, a); }
float quants_avx2_dot_q5_k(size_t n, const void *w, const void *a) { return dot_q45_k(1, n, w, a); }

float quants_avx2_dot_q6_k(size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    const __m256i m4 = _mm256_set1_epi8(0x0f), m3 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, pw += 210, pa += QUANTS_Q8_K_BYTES) {
        const int8_t *sc = (const int8_t *)(const void *)(pw + 192);
        const unsigned char *qa = (const unsigned char *)q8k_qs(pa);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = loadu256(pw + 64 * h), ql1 = loadu256(pw + 64 * h + 32), qh = loadu256(pw + 128 + 32 * h);
            __m256i g[4];
            g[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
            g[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
            g[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
            g[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
            for (int k = 0; k < 4; k++) {
                const int s = 8 * h + 2 * k;
                const __m256i p = pairs_s8(_mm256_sub_epi8(g[k], off), loadu256(qa + 128 * h + 32 * k));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale2(sc[s], sc[s + 1])));
            }
        }
        acc = k_acc(acc, quants_ld_f16(pw + 208) * ld_f32(pa), sumi);
    }
    return hsum_ps(acc);
}

float quants_avx2_dot_iq4_xs(size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    const __m256i tbl = iq4_table();
    __m256 acc = _mm256_setzero_ps();
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, pw += 136, pa += QUANTS_Q8_K_BYTES) {
        int16_t sc[8];
        quants_iq4_xs_scales(pw, sc);
        const unsigned char *qa = (const unsigned char *)q8k_qs(pa);
        __m256i sumi = _mm256_setzero_si256();
        for (int s = 0; s < 8; s++) {
            const __m256i wq = _mm256_shuffle_epi8(tbl, nibbles16(pw + 8 + 16 * s));
            const __m256i p = pairs_s8(wq, loadu256(qa + 32 * s));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, _mm256_set1_epi16(sc[s])));
        }
        acc = k_acc(acc, quants_ld_f16(pw) * ld_f32(pa), sumi);
    }
    return hsum_ps(acc);
}
