/* quants.c - scalar reference for the K-quant, IQ4 and Q4_1/Q5_x weight types (layouts in
 * attnd/tensor.h): dequantization, Q8_K activation quantization, reference dot products, and the
 * row-at-a-time GEMM every level uses. Built for baseline x86-64. */
#include "kernels/cpu/quants.h"

#include <math.h>
#include <string.h>

const int8_t quants_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static inline float ld_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ================================================================ decoding to integers */

/* One 32-weight block as integers: w[i] = d*q[i] + m (m = 0 for the symmetric types). */
struct blk32 {
    int8_t q[32];
    float d, m;
};

static void unpack32(enum tensor_type t, const unsigned char *b, struct blk32 *o)
{
    const unsigned char *qs;
    uint32_t qh = 0;
    o->d = quants_ld_f16(b);
    o->m = 0.0f;
    switch (t) {
    case TENSOR_Q4_1: o->m = quants_ld_f16(b + 2); qs = b + 4; break;
    case TENSOR_Q5_0: memcpy(&qh, b + 2, 4); qs = b + 6; break;
    case TENSOR_Q5_1: o->m = quants_ld_f16(b + 2); memcpy(&qh, b + 4, 4); qs = b + 8; break;
    default: qs = b + 2; break; /* IQ4_NL */
    }
    for (int j = 0; j < 16; j++) {
        int lo = qs[j] & 0x0f, hi = qs[j] >> 4;
        if (t == TENSOR_IQ4_NL) {
            lo = quants_iq4nl_values[lo];
            hi = quants_iq4nl_values[hi];
        } else if (t != TENSOR_Q4_1) {
            lo |= (int)((qh >> j) & 1u) << 4;
            hi |= (int)((qh >> (j + 16)) & 1u) << 4;
            if (t == TENSOR_Q5_0) lo -= 16, hi -= 16;
        }
        o->q[j] = (int8_t)lo;
        o->q[j + 16] = (int8_t)hi;
    }
}

/* One 256-weight super-block as integers: w[i] = d*sc[s]*q[i] - dmin*mn[s], s = i / sub. */
struct blk256 {
    int8_t q[256];
    int16_t sc[16], mn[16];
    int sub; /* 16 or 32 weights per sub-block */
    float d, dmin;
};

/* Sub-blocks 0-3: low 6 bits of bytes j (scale) and j+4 (min); 4-7: a nibble of byte j+4 plus
 * the top 2 bits of bytes j-4 (scale) and j (min). */
void quants_k4_scales(const unsigned char *s, int16_t sc[8], int16_t mn[8])
{
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (int16_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
        mn[j] = (int16_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Low 4 bits: a nibble of bytes 0-7 (low nibbles for 0-7, high for 8-15); high 2 bits: bits
 * 2*(s/4) of byte 8 + s%4. */
void quants_q3_k_scales(const unsigned char *sc, int16_t out[16])
{
    for (int s = 0; s < 16; s++) {
        int lo = s < 8 ? sc[s] & 0x0f : sc[s - 8] >> 4;
        int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
        out[s] = (int16_t)((lo | hi << 4) - 32);
    }
}

/* Low 4 bits: nibble s%2 of scales_l[s/2]; high 2 bits: bits 2s of scales_h. */
void quants_iq4_xs_scales(const unsigned char *b, int16_t out[8])
{
    uint16_t sh;
    memcpy(&sh, b + 2, 2);
    for (int s = 0; s < 8; s++) {
        int ls = ((b[4 + s / 2] >> (4 * (s % 2))) & 0x0f) | (((sh >> (2 * s)) & 3) << 4);
        out[s] = (int16_t)(ls - 32);
    }
}

static void unpack_q2_k(const unsigned char *b, struct blk256 *o)
{
    const unsigned char *sc = b, *qs = b + 16;
    o->sub = 16;
    o->d = quants_ld_f16(b + 80);
    o->dmin = quants_ld_f16(b + 82);
    for (int s = 0; s < 16; s++) o->sc[s] = sc[s] & 0x0f, o->mn[s] = sc[s] >> 4;
    /* element 128*h + 32*j + l comes from bits 2j of qs[32*h + l] */
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) o->q[128 * h + 32 * j + l] = (int8_t)((qs[32 * h + l] >> (2 * j)) & 3);
}

static void unpack_q3_k(const unsigned char *b, struct blk256 *o)
{
    const unsigned char *hm = b, *qs = b + 32, *sc = b + 96;
    o->sub = 16;
    o->d = quants_ld_f16(b + 108);
    o->dmin = 0.0f;
    quants_q3_k_scales(sc, o->sc);
    memset(o->mn, 0, sizeof o->mn);
    /* low 2 bits as Q2_K; high bit (4h + j) of hmask[l] set: +0, clear: -4 */
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                int q = (qs[32 * h + l] >> (2 * j)) & 3;
                o->q[128 * h + 32 * j + l] = (int8_t)(q - ((hm[l] >> (4 * h + j)) & 1 ? 0 : 4));
            }
}

/* Q4_K, and Q5_K when qh != NULL. */
static void unpack_q45_k(const unsigned char *b, const unsigned char *qh, const unsigned char *qs,
                         struct blk256 *o)
{
    o->sub = 32;
    o->d = quants_ld_f16(b);
    o->dmin = quants_ld_f16(b + 2);
    quants_k4_scales(b + 4, o->sc, o->mn);
    /* sub-blocks 2k, 2k+1 are the low and high nibbles of qs[32k..32k+31]; Q5_K's fifth bits are bits 2k, 2k+1 of qh[l] */
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < 32; l++) {
            int lo = qs[32 * k + l] & 0x0f, hi = qs[32 * k + l] >> 4;
            if (qh) {
                lo |= ((qh[l] >> (2 * k)) & 1) << 4;
                hi |= ((qh[l] >> (2 * k + 1)) & 1) << 4;
            }
            o->q[64 * k + l] = (int8_t)lo;
            o->q[64 * k + 32 + l] = (int8_t)hi;
        }
}

static void unpack_q6_k(const unsigned char *b, struct blk256 *o)
{
    const unsigned char *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    o->sub = 16;
    o->d = quants_ld_f16(b + 208);
    o->dmin = 0.0f;
    for (int s = 0; s < 16; s++) o->sc[s] = sc[s], o->mn[s] = 0;
    for (int h = 0; h < 2; h++, ql += 64, qh += 32)
        for (int l = 0; l < 32; l++) {
            int8_t *q = o->q + 128 * h + l;
            q[0] = (int8_t)(((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32);
            q[32] = (int8_t)(((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32);
            q[64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            q[96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
}

static void unpack_iq4_xs(const unsigned char *b, struct blk256 *o)
{
    const unsigned char *qs = b + 8;
    o->sub = 32;
    o->d = quants_ld_f16(b);
    o->dmin = 0.0f;
    quants_iq4_xs_scales(b, o->sc);
    memset(o->mn, 0, sizeof o->mn);
    for (int s = 0; s < 8; s++) {
        for (int j = 0; j < 16; j++) {
            o->q[32 * s + j] = quants_iq4nl_values[qs[16 * s + j] & 0x0f];
            o->q[32 * s + j + 16] = quants_iq4nl_values[qs[16 * s + j] >> 4];
        }
    }
}

static void unpack256(enum tensor_type t, const unsigned char *b, struct blk256 *o)
{
    switch (t) {
    case TENSOR_Q2_K: unpack_q2_k(b, o); break;
    case TENSOR_Q3_K: unpack_q3_k(b, o); break;
    case TENSOR_Q4_K: unpack_q45_k(b, NULL, b + 16, o); break;
    case TENSOR_Q5_K: unpack_q45_k(b, b + 16, b + 48, o); break;
    case TENSOR_Q6_K: unpack_q6_k(b, o); break;
    default: unpack_iq4_xs(b, o); break;
    }
}

/* ================================================================ public: dequant, Q8_K */

static int is_256(enum tensor_type t) { return tensor_block_elems(t) == QUANTS_QK_K; }

/* The caller (cpu_kernels.c) has checked the type and that n is a multiple of its block. */
void quants_dequant_row(enum tensor_type t, const void *src, float *dst, size_t n)
{
    const unsigned char *p = src;
    const size_t bb = tensor_block_bytes(t);
    if (!is_256(t)) {
        struct blk32 o;
        for (size_t b = 0; b < n / 32; b++, p += bb, dst += 32) {
            unpack32(t, p, &o);
            for (int i = 0; i < 32; i++) dst[i] = o.d * (float)o.q[i] + o.m;
        }
        return;
    }
    struct blk256 o;
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, p += bb, dst += QUANTS_QK_K) {
        unpack256(t, p, &o);
        for (int s = 0; s < QUANTS_QK_K / o.sub; s++) {
            const float dl = o.d * (float)o.sc[s], ml = o.dmin * (float)o.mn[s];
            for (int i = s * o.sub; i < (s + 1) * o.sub; i++) dst[i] = dl * (float)o.q[i] - ml;
        }
    }
}

/* n % 256 == 0 (checked by the caller). */
void quants_quantize_row_q8_k(const float *x, void *dst, size_t n)
{
    unsigned char *out = dst;
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, x += QUANTS_QK_K, out += QUANTS_Q8_K_BYTES) {
        float amax = 0.0f, mx = 0.0f;
        for (int i = 0; i < QUANTS_QK_K; i++)
            if (fabsf(x[i]) > amax) amax = fabsf(x[i]), mx = x[i];
        int8_t q[QUANTS_QK_K];
        int16_t bs[16];
        float d = 0.0f;
        if (amax == 0.0f) {
            memset(q, 0, sizeof q);
        } else {
            const float iscale = -127.0f / mx;
            for (int i = 0; i < QUANTS_QK_K; i++) {
                float v = nearbyintf(iscale * x[i]);
                if (!(v >= -127.0f)) v = -127.0f; /* NaN too; -128 never occurs, the SIMD sign trick relies on it */
                q[i] = (int8_t)(v > 127.0f ? 127 : (int)v);
            }
            d = 1.0f / iscale;
        }
        for (int s = 0; s < 16; s++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += q[16 * s + i];
            bs[s] = (int16_t)sum;
        }
        memcpy(out, &d, 4);
        memcpy(out + 4, q, sizeof q);
        memcpy(out + 4 + QUANTS_QK_K, bs, sizeof bs);
    }
}

/* ================================================================ reference dots */

/* 32-blocks against Q8_0: per block d_w*d_a*sum(q*qa) + m_w*d_a*sum(qa), summed in float. */
static float ref_dot32(enum tensor_type t, size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    const size_t bb = tensor_block_bytes(t);
    float sum = 0.0f;
    struct blk32 o;
    for (size_t b = 0; b < n / 32; b++, pw += bb, pa += sizeof(block_q8_0)) {
        unpack32(t, pw, &o);
        const int8_t *qa = (const int8_t *)(pa + 2);
        int isum = 0, asum = 0;
        for (int i = 0; i < 32; i++) isum += o.q[i] * qa[i], asum += qa[i];
        const float da = quants_ld_f16(pa);
        sum += (float)isum * (o.d * da) + (float)asum * (o.m * da);
    }
    return sum;
}

/* Super-blocks against Q8_K: per block d_w*d_a*sum_s sc[s]*isum_s - dmin*d_a*sum_s mn[s]*asum_s
 * with exact integer inner sums. */
static float ref_dot256(enum tensor_type t, size_t n, const void *w, const void *a)
{
    const unsigned char *pw = w, *pa = a;
    const size_t bb = tensor_block_bytes(t);
    float sum = 0.0f;
    struct blk256 o;
    for (size_t b = 0; b < n / QUANTS_QK_K; b++, pw += bb, pa += QUANTS_Q8_K_BYTES) {
        unpack256(t, pw, &o);
        const int8_t *qa = (const int8_t *)(pa + 4);
        int16_t bs[16];
        memcpy(bs, pa + 4 + QUANTS_QK_K, sizeof bs);
        int sumi = 0, summ = 0;
        for (int s = 0; s < QUANTS_QK_K / o.sub; s++) {
            int isum = 0;
            for (int i = s * o.sub; i < (s + 1) * o.sub; i++) isum += o.q[i] * qa[i];
            int asum = o.sub == 16 ? bs[s] : bs[2 * s] + bs[2 * s + 1];
            sumi += o.sc[s] * isum;
            summ += o.mn[s] * asum;
        }
        const float da = ld_f32(pa);
        sum += o.d * da * (float)sumi - o.dmin * da * (float)summ;
    }
    return sum;
}

/* The reference dot of each type (quants.h): ref_dot32 or ref_dot256 for that type. Pure. */
#define REF_DOT(name, T, body)                                                              \
    float quants_ref_dot_##name(size_t n, const void *w, const void *a) { return body(T, n, w, a); }
REF_DOT(q4_1, TENSOR_Q4_1, ref_dot32)
REF_DOT(q5_0, TENSOR_Q5_0, ref_dot32)
REF_DOT(q5_1, TENSOR_Q5_1, ref_dot32)
REF_DOT(iq4_nl, TENSOR_IQ4_NL, ref_dot32)
REF_DOT(q2_k, TENSOR_Q2_K, ref_dot256)
REF_DOT(q3_k, TENSOR_Q3_K, ref_dot256)
REF_DOT(q4_k, TENSOR_Q4_K, ref_dot256)
REF_DOT(q5_k, TENSOR_Q5_K, ref_dot256)
REF_DOT(q6_k, TENSOR_Q6_K, ref_dot256)
REF_DOT(iq4_xs, TENSOR_IQ4_XS, ref_dot256)
#undef REF_DOT

/* Rows outer, tokens inner: a weight row is read from memory once and from cache after that. */
void quants_gemm(quants_dot_fn dot, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                 const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride)
{
    for (size_t r = r0; r < r1; r++) {
        const unsigned char *wr = (const unsigned char *)w + r * w_row_bytes;
        for (size_t j = 0; j < n_tok; j++) y[j * y_stride + r] = dot(n, wr, (const unsigned char *)a + j * a_row_bytes);
    }
}
