/* kernels_amx.c - matrix products on the AMX tile unit (Intel Sapphire Rapids and later): the
 * CPU_VAR_AMX variant of cpu_gemm for 2+ tokens. Built with AVX-512 (F/BW/VL/DQ/VNNI/BF16) and
 * -mamx-tile -mamx-int8 -mamx-bf16; cpu_kernels.c calls it only where the CPU has all of them and
 * the kernel let this process use the tile data (arch_prctl). Contracts: cpu_kernels_impl.h.
 *
 * A tile product multiplies A (16 rows x K) by B (K x 16 columns, stored K/4 rows of 16 groups of
 * 4 int8, or K/2 rows of 16 pairs of bf16: the "VNNI" layout) into C (16 x 16 int32 or float).
 * Here A is 16 weight rows and B 16 tokens:
 *
 * Quantized weights (int8 path, tdpbssd): the weights of 16 rows are unpacked once per chunk of
 * tokens into an int8 panel with a float scale (and min) per 32-block (per-type loops for whole
 * panels of the scale-first types and Q4_K, quants_avx2_unpack_row otherwise; Q8_0 rows are loaded
 * as tiles where they lie), the tokens' Q8_0 / Q8_K activations are packed per block into B. Every
 * 32-block is one tile product over K = 32, exact in int32 as in the scalar reference; its 16 x 16
 * sums then go through AVX-512: acc[row] += float(C[row]) * (s_w[row] * d_a[tokens])
 * (- m_w[row] * d_a * sum a), the 16 running sums held in registers (ACC16). That float work,
 * three vector operations a row (9-14 ns a block alone, against 5.4 for the tile loads and product
 * with everything in L1), and the operands' way from L2 bound this path (26-28 ns a block on the
 * Xeon of the README); a pair of blocks' tile products is issued before the previous pair is
 * scaled (PIPELINE_PAIRS) so that part of it overlaps. Batches of 2-16 tokens
 * take the small-batch path below (narrower, dense C tiles), whose sums are also stored two blocks
 * before they are scaled (PIPELINE_DEFERRED).
 *
 * Float weights (bf16 path, tdpbf16ps, F16 and BF16 weights): bf16 has 8 significant bits, f16
 * 11, so each F16 weight is split exactly into hi + lo bf16 values and each activation into
 * hi + lo (16 significant bits, more than the f16 the reference rounds its activations to); the
 * tile sums hi*hi + lo*hi + hi*lo (dropping lo*lo, below 2^-16 of the product) in float across
 * the whole row, with no per-block work. BF16 weights have no lo part.
 *
 * The unit is configured (ldtilecfg) at the start of each call and released at its end, so a
 * call leaves no tile state behind on the thread. */
#include "kernels/cpu/cpu_kernels_impl.h"
#include "kernels/cpu/kernels_simd.h" /* MV_STREAMS */
#include "kernels/cpu/kernels_simd512.h"
#include "kernels/cpu/quants.h"
#include "kernels/cpu/scratch.h"

#include <assert.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* gcc names the AMX macros __AMX_TILE__ ..., clang 14 __AMXTILE__ ... */
#if !(defined(__AMX_TILE__) || defined(__AMXTILE__)) || !(defined(__AMX_INT8__) || defined(__AMXINT8__)) || \
    !(defined(__AMX_BF16__) || defined(__AMXBF16__)) || !defined(__AVX512BF16__) || !defined(__AVX512F__) ||     \
    !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__F16C__)
#error "kernels_amx.c must be compiled with AVX-512 F/BW/VL/DQ/BF16, F16C and -mamx-tile -mamx-int8 -mamx-bf16"
#endif

#define INLINE static inline __attribute__((always_inline))

#define AMX_N 16         /* rows of weights and columns of tokens per tile */
#define AMX_TOK 256      /* tokens packed at once (16 token tiles: a forward step's chunk) */
#define AMX_KB 64        /* int8 path: 32-blocks per K chunk (2048 weights) */
#define AMX_KF 1024      /* bf16 path: elements per K chunk */

/* The tile configuration of ldtilecfg (palette 1). */
struct amx_cfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16]; /* bytes per row of each tile */
    uint8_t rows[16];
};
static_assert(sizeof(struct amx_cfg) == 64, "ldtilecfg reads 64 bytes");

/* int8: C0, C1 (16 x 16 int32), A0, A1 (16 rows x 32 int8), B0, B1 (8 quads x 16 tokens) */
static void config_int8(void)
{
    struct amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 2; i++) {
        c.rows[i] = 16, c.colsb[i] = 64;
        c.rows[2 + i] = 16, c.colsb[2 + i] = 32;
        c.rows[4 + i] = 8, c.colsb[4 + i] = 64;
        c.rows[6 + i] = 16, c.colsb[6 + i] = 64;
    }
    _tile_loadconfig(&c);
}

/* bf16: C0, C1 (16 x 16 float), A hi, A lo (16 rows x 32 bf16), B hi, B lo of two token tiles
 * (16 pairs x 16 tokens) */
static void config_bf16(void)
{
    struct amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 8; i++) c.rows[i] = 16, c.colsb[i] = 64;
    _tile_loadconfig(&c);
}

/* ================================================================ shared helpers */

/* acc[row] holds 16 tokens of one weight row: y[token * ys + row] = (add ? y : 0) + acc, for the
 * R rows and T tokens that exist. */
INLINE void store_tile(__m512 acc[16], int add, int R, int T, float *y, size_t ys)
{
    transpose16(acc); /* acc[token]: 16 rows */
    const __mmask16 m = (__mmask16)(R >= 16 ? 0xffff : (1u << R) - 1u);
    for (int j = 0; j < T; j++) {
        float *yj = y + (size_t)j * ys;
        __m512 v = acc[j];
        if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, yj));
        _mm512_mask_storeu_ps(yj, m, v);
    }
}

INLINE float ld_h(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, sizeof h);
    return _cvtsh_ss(h);
}

INLINE float ld_s(const unsigned char *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ================================================================ int8 path */

/* 1 for the weight types of the int8 path: one float scale (and min) per 32 int8 weights. */
static int int8_type(enum tensor_type t)
{
    switch (t) {
    case TENSOR_Q8_0: case TENSOR_Q4_0: case TENSOR_Q4_1: case TENSOR_Q5_0: case TENSOR_Q5_1: case TENSOR_IQ4_NL:
    case TENSOR_Q4_K: case TENSOR_Q5_K: case TENSOR_IQ4_XS: return 1;
    default: return 0;
    }
}

static int has_min(enum tensor_type t)
{
    return t == TENSOR_Q4_1 || t == TENSOR_Q5_1 || t == TENSOR_Q4_K || t == TENSOR_Q5_K;
}

/* One token tile's activations for AMX_KB blocks: B of block b at x[b] (8 quads x 16 tokens),
 * the tokens' scales d[b] and d * sum(a) ds[b]. */
struct act8 {
    _Alignas(64) int8_t x[AMX_KB][8][64];
    _Alignas(64) float d[AMX_KB][16];
    _Alignas(64) float ds[AMX_KB][16];
};

/* 16 weight rows of AMX_KB blocks: row i, block b at q[i][b]; w = s[b][i] * q - m[b][i] (a block's
 * scales are a vector over the rows) */
struct panel8 {
    _Alignas(64) int8_t q[AMX_N][AMX_KB][32];
    _Alignas(64) float s[AMX_KB][AMX_N];
    _Alignas(64) float m[AMX_KB][AMX_N];
    float row_s[AMX_KB], row_m[AMX_KB]; /* one row's as unpacked, before they go into s and m */
    /* where the A tile of block b is: a + b * step, rows `stride` apart (q, or the weights) */
    const int8_t *a;
    size_t stride, step;
    /* Q8_0 and Q4_0 whole panels, scales decoded where used: block b's f16 scales at sw + b * sstep
     * + i * stride (s is not filled) */
    const unsigned char *sw;
    size_t sstep, sstride;
    /* Q4_0 whole panels of a small batch (used once): not unpacked here; the tile loop decodes
     * block b's 16 rows (nibbles at nib + b * 18 + i * sstride) just before its tile product */
    const unsigned char *nib;
};

/* Packs tokens [j0, j0 + 16) (those >= n_tok as zeros) of blocks [b0, b0 + nb): per pair of blocks
 * one 16 x 16 dword transpose (token rows of 2 x 8 quads -> 16 quad rows of 16 tokens). */
static void pack_act8(int q8k, int need_sum, const unsigned char *a, size_t arb, size_t j0, size_t n_tok, size_t b0,
                      size_t nb, struct act8 *o)
{
    for (size_t b = 0; b < nb; b += 2) {
        __m512 r[16];
        for (int l = 0; l < 16; l++) {
            const size_t j = j0 + (size_t)l;
            r[l] = _mm512_setzero_ps();
            for (size_t h = 0; h < 2 && b + h < nb; h++) {
                const size_t blk = b0 + b + h;
                float d = 0.0f, ds = 0.0f;
                if (j < n_tok) {
                    const unsigned char *row = a + j * arb, *q;
                    int sum = 0;
                    if (q8k) {
                        const unsigned char *sbp = row + (blk / 8) * QUANTS_Q8_K_BYTES;
                        int16_t bs[2];
                        memcpy(bs, sbp + 4 + QUANTS_QK_K + 4 * (blk % 8), sizeof bs);
                        d = ld_s(sbp), q = sbp + 4 + 32 * (blk % 8), sum = bs[0] + bs[1];
                    } else {
                        d = ld_h(row + blk * CPU_Q8_0_BYTES), q = row + blk * CPU_Q8_0_BYTES + 2;
                        if (need_sum) {
                            const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)q);
                            const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), v);
                            const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
                            sum = _mm512_reduce_add_epi32(_mm512_zextsi256_si512(s32));
                        }
                    }
                    const __m256 v = _mm256_loadu_ps((const float *)(const void *)q);
                    r[l] = h ? _mm512_insertf32x8(r[l], v, 1) : _mm512_insertf32x8(r[l], v, 0);
                    ds = d * (float)sum;
                }
                o->d[b + h][l] = d;
                o->ds[b + h][l] = ds;
            }
        }
        transpose16(r);
        for (int k = 0; k < 16 && b + (size_t)(k / 8) < nb; k++)
            _mm512_store_ps((float *)(void *)o->x[b + (size_t)(k / 8)][k % 8], r[k]);
    }
}

/* The bytes of nb 32-blocks of a row of type t from block b0 (K-types: whole super-blocks). */
static size_t chunk_bytes(enum tensor_type t, size_t nb)
{
    return tensor_block_bytes(t) * nb * 32 / tensor_block_elems(t);
}

/* Part `part` of `parts` of R rows' first `bytes` bytes (rows `stride` apart) into L2: the next
 * panel's weights arrive while this one computes (this machine's hardware prefetch does not
 * follow 16 strided streams). The row and line of each come from a division, which also spaces
 * the prefetches out: measured on a Q8_0 prompt here, this loop gave 603 tokens/s, the same
 * lines issued in a burst (a running row/line counter) 542, prefetches spread between the tile
 * products 618 (against 729 here, another hour), none 678. */
static void prefetch_part(const unsigned char *p, size_t stride, size_t R, size_t bytes, size_t part, size_t parts)
{
    const size_t lines = (bytes + 63) / 64, total = R * lines;
    for (size_t i = total * part / parts; i < total * (part + 1) / parts; i++)
        _mm_prefetch((const char *)(p + (i / lines) * stride + (i % lines) * 64), _MM_HINT_T1);
}

/* The f16 values of 16 rows' blocks, rows wrb apart from p (a scale, or a min): the low halves of the
 * dwords there */
INLINE __m512 rows_f16(const unsigned char *p, size_t wrb)
{
    const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)wrb));
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(rows, p, 1)));
}

/* 16 whole rows of Q4_K super-blocks (256 weights in 144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit
 * scales and mins, 128 bytes of nibbles; w0 at the first row's first one): the nibbles as int8 (the
 * low ones of 32 bytes are one 32-block, their high ones the next), and each 32-block's d * scale
 * and dmin * min decoded for the 16 rows at once from gathered dwords (the scalar quants_k4_scales
 * does one row). */
static void unpack_q4_k(const unsigned char *w0, size_t wrb, size_t nsb, struct panel8 *p)
{
    const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)wrb));
    const __m512i m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3);
    const __m256i n4 = _mm256_set1_epi8(0x0f);
    for (size_t sb = 0; sb < nsb; sb++) {
        const unsigned char *base = w0 + sb * 144;
        const __m512i dd = _mm512_i32gather_epi32(rows, base, 1);
        const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
        const __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
        const __m512i a = _mm512_i32gather_epi32(rows, base + 4, 1); /* scales[0..3] */
        const __m512i b = _mm512_i32gather_epi32(rows, base + 8, 1); /* scales[4..7] */
        const __m512i c = _mm512_i32gather_epi32(rows, base + 12, 1); /* scales[8..11] */
        for (int j = 0; j < 4; j++) {
            const unsigned sh = 8u * (unsigned)j;
            const __m512i sc_lo = _mm512_and_si512(_mm512_srli_epi32(a, sh), m6);
            const __m512i mn_lo = _mm512_and_si512(_mm512_srli_epi32(b, sh), m6);
            const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(c, sh), m4),
                                                  _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a, sh + 6), m2), 4));
            const __m512i mn_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(c, sh + 4), m4),
                                                  _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(b, sh + 6), m2), 4));
            _mm512_store_ps(p->s[8 * sb + (size_t)j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc_lo)));
            _mm512_store_ps(p->m[8 * sb + (size_t)j], _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn_lo)));
            _mm512_store_ps(p->s[8 * sb + 4 + (size_t)j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc_hi)));
            _mm512_store_ps(p->m[8 * sb + 4 + (size_t)j], _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn_hi)));
        }
        for (int i = 0; i < AMX_N; i++) {
            const unsigned char *qs = base + (size_t)i * wrb + 16;
            for (int k = 0; k < 4; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * k));
                _mm256_store_si256((__m256i *)(void *)p->q[i][8 * sb + 2 * (size_t)k], _mm256_and_si256(v, n4));
                _mm256_store_si256((__m256i *)(void *)p->q[i][8 * sb + 2 * (size_t)k + 1],
                                   _mm256_and_si256(_mm256_srli_epi16(v, 4), n4));
            }
        }
    }
}

/* 1 for the types whose 32-blocks start with their f16 scale (and, Q4_1 / Q5_1, the f16 min after it) */
static int scale_first(enum tensor_type t)
{
    return t == TENSOR_Q8_0 || t == TENSOR_Q4_0 || t == TENSOR_Q4_1 || t == TENSOR_Q5_0 || t == TENSOR_Q5_1 ||
           t == TENSOR_IQ4_NL;
}

/* Two 32-blocks' worth of 4-bit weights, 16 bytes of nibbles each (q0, q1), as 64 int8 minus off:
 * each block's bytes broadcast to two 128-bit lanes, the second one shifted right by 4, masked to
 * 0..15 (low nibbles: the block's weights 0..15, high: 16..31). */
INLINE __m512i nibbles_2x16(__m128i q0, __m128i q1, __m512i off)
{
    const __m512i x = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(q0)),
                                         _mm256_broadcastsi128_si256(q1), 1);
    return _mm512_sub_epi8(_mm512_and_si512(_mm512_mask_srli_epi16(x, 0xff00ff00u, x, 4), _mm512_set1_epi8(0x0f)), off);
}

/* The nibbles of 16 Q4_0 (q4_0 1: centred, q - 8) or Q4_1 rows (the unsigned q) at w0, wrb apart,
 * nb blocks, into the panel's int8 rows: two blocks a vector (nibbles_2x16), half the operations
 * of the generic 256-bit decoder. */
static void unpack_q4_rows(int q4_0, const unsigned char *w0, size_t wrb, size_t nb, struct panel8 *p)
{
    const size_t bb = q4_0 ? 18 : 20, qo = q4_0 ? 2 : 4; /* block bytes, where its nibbles start */
    const __m512i off = _mm512_set1_epi8(q4_0 ? 8 : 0);
    for (int i = 0; i < AMX_N; i++) {
        const unsigned char *row = w0 + (size_t)i * wrb + qo;
        int8_t *dst = p->q[i][0];
        for (size_t b = 0; b < nb; b += 2) {
            const __m128i q0 = _mm_loadu_si128((const __m128i *)(const void *)(row + b * bb));
            const __m128i q1 = b + 1 < nb ? _mm_loadu_si128((const __m128i *)(const void *)(row + (b + 1) * bb)) : q0;
            const __m512i x = nibbles_2x16(q0, q1, off);
            if (b + 1 < nb) _mm512_store_si512((void *)(dst + 32 * b), x);
            else _mm256_store_si256((__m256i *)(void *)(dst + 32 * b), _mm512_castsi512_si256(x));
        }
    }
}

/* Rows [r, r + R) of blocks [b0, b0 + nb) into the panel; rows R..15 are zero. Q8_0 weights of a
 * whole tile of rows are not copied: the tile loads read them in place (34-byte blocks, rows wrb
 * apart). The scales (and mins) of whole panels of the types whose blocks start with them are
 * decoded a block's 16 with one gather: into s and m, or (lazy, no mins) by the caller where it
 * uses them (sw). */
static void unpack_rows(enum tensor_type t, const unsigned char *w, size_t wrb, size_t r, int R, size_t b0, size_t nb,
                        int lazy, struct panel8 *p)
{
    p->nib = NULL;
    if (scale_first(t) && R == AMX_N) {
        const size_t bb = tensor_block_bytes(t);
        const unsigned char *w0 = w + r * wrb + b0 * bb;
        if (t == TENSOR_Q8_0) { /* the int8 weights are tiles as they lie */
            p->a = (const int8_t *)(const void *)(w0 + 2), p->stride = wrb, p->step = CPU_Q8_0_BYTES;
        } else if (t == TENSOR_Q4_0 && lazy) { /* decoded block by block in the tile loop */
            p->nib = w0 + 2, p->a = NULL, p->stride = 32, p->step = 0;
        } else if (t == TENSOR_Q4_0 || t == TENSOR_Q4_1) {
            unpack_q4_rows(t == TENSOR_Q4_0, w0, wrb, nb, p);
            p->a = p->q[0][0], p->stride = sizeof p->q[0], p->step = 32;
        } else {
            quants_avx2_unpack_q32_rows(t, w0, wrb, AMX_N, nb, p->q[0][0], sizeof p->q[0]);
            p->a = p->q[0][0], p->stride = sizeof p->q[0], p->step = 32;
        }
        const int mins = has_min(t);
        lazy = lazy && !mins;
        p->sw = lazy ? w0 : NULL, p->sstep = bb, p->sstride = wrb;
        for (size_t b = 0; b < nb && !lazy; b++) {
            _mm512_store_ps(p->s[b], rows_f16(w0 + b * bb, wrb));
            if (mins) /* w = d q + m_file = s q - m */
                _mm512_store_ps(p->m[b], _mm512_sub_ps(_mm512_setzero_ps(), rows_f16(w0 + b * bb + 2, wrb)));
        }
        return;
    }
    p->sw = NULL;
    p->a = p->q[0][0], p->stride = sizeof p->q[0], p->step = 32;
    if (t == TENSOR_Q4_K && R == AMX_N) { /* chunks are whole super-blocks */
        unpack_q4_k(w + r * wrb + b0 / 8 * 144, wrb, nb / 8, p);
        return;
    }
    for (int i = 0; i < AMX_N; i++) {
        if (i < R) {
            quants_avx2_unpack_row(t, w + (r + (size_t)i) * wrb, b0, nb, p->q[i][0], p->row_s, p->row_m);
        } else {
            memset(p->q[i], 0, nb * 32);
            memset(p->row_s, 0, nb * sizeof(float));
            memset(p->row_m, 0, nb * sizeof(float));
        }
        for (size_t b = 0; b < nb; b++) p->s[b][i] = p->row_s[b], p->m[b][i] = p->row_m[b];
    }
}

/* The sums are kept in 16 named vectors, acc0 .. acc15 (ACC16 below), not in an array: gcc keeps
 * an array of vectors in memory across the tile stores' memory clobbers, so every scaled row was
 * also a load and a store of its sum, on the load and store ports the tile loads and stores use. */
#define ACC16(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#define ACC_ZERO(i) __m512 acc##i = _mm512_setzero_ps();
#define ACC_OUT(i) acc[i] = acc##i;

/* Row i of a block's 16 x 16 sums (sc_c, rows of 16 tokens) scaled into acc<i>: the weight scale
 * sc_s[i] (and min sc_m[i]) against the tokens' sc_da (and sc_ds). */
#define SCALE_ROW(i)                                                                                             \
    acc##i = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512((const void *)sc_c[i])),                       \
                             _mm512_mul_ps(sc_da, _mm512_set1_ps(sc_s[i])), acc##i);                             \
    if (mins) acc##i = _mm512_fnmadd_ps(_mm512_set1_ps(sc_m[i]), sc_ds, acc##i);

/* One block's tile product from zero: C = A (16 rows at a, sa bytes apart) times B (at b, rows sb apart) */
#define tile_product(C, A, B, a, sa, b, sb) \
    do {                                     \
        _tile_loadd(A, a, sa);               \
        _tile_loadd(B, b, sb);               \
        _tile_zero(C);                       \
        _tile_dpbssd(C, A, B);               \
    } while (0)

/* The schedule of both int8 tile loops over nb blocks (with c0, c1 buffers and ISSUE(C, A, B, k) /
 * SCALE(C, buf, k) defined by the loop, each skipping k >= nb): blocks b, b + 1 go through tiles C0,
 * C1 and b + 2, b + 3 through C2, C3, and a pair's products are issued before the previous pair's
 * sums are stored and scaled, so the tile unit works while the vector unit scales. */
#define PIPELINE_PAIRS(C0, C1, C2, C3, A0, A1, B0, B1) \
    do {                                                 \
        ISSUE(C0, A0, B0, 0);                            \
        ISSUE(C1, A1, B1, 1);                            \
        for (size_t b = 0; b < nb; b += 4) {             \
            ISSUE(C2, A0, B0, b + 2);                    \
            ISSUE(C3, A1, B1, b + 3);                    \
            SCALE(C0, c0, b);                            \
            SCALE(C1, c1, b + 1);                        \
            ISSUE(C0, A0, B0, b + 4);                    \
            ISSUE(C1, A1, B1, b + 5);                    \
            SCALE(C2, c0, b + 2);                        \
            SCALE(C3, c1, b + 3);                        \
        }                                                \
    } while (0)

/* PIPELINE_PAIRS with each pair's sums stored (STORE(C, buf, k), buffers c[0..3]) a pair before they
 * are scaled (SCALEBUF(buf, k)), so the vector loads do not wait on tile stores just issued. For
 * the small batches' narrow tiles: 8 tokens 61 -> 55 ns per 16 x 16 x 32 block-equivalent, 4 tokens
 * 98 -> 93 (one thread, weights in L2/L3). The prompt loop measured 4 % slower with it and keeps
 * PIPELINE_PAIRS. */
#define PIPELINE_DEFERRED(C0, C1, C2, C3, A0, A1, B0, B1)  \
    do {                                                   \
        size_t b = 0;                                      \
        ISSUE(C0, A0, B0, 0);                              \
        ISSUE(C1, A1, B1, 1);                              \
        for (; b < nb; b += 4) {                           \
            ISSUE(C2, A0, B0, b + 2);                      \
            ISSUE(C3, A1, B1, b + 3);                      \
            STORE(C0, c[0], b);                            \
            STORE(C1, c[1], b + 1);                        \
            SCALEBUF(c[2], b - 2);                         \
            SCALEBUF(c[3], b - 1);                         \
            ISSUE(C0, A0, B0, b + 4);                      \
            ISSUE(C1, A1, B1, b + 5);                      \
            STORE(C2, c[2], b + 2);                        \
            STORE(C3, c[3], b + 3);                        \
            SCALEBUF(c[0], b);                             \
            SCALEBUF(c[1], b + 1);                         \
        }                                                  \
        SCALEBUF(c[2], b - 2);                             \
        SCALEBUF(c[3], b - 1);                             \
    } while (0)

/* acc (16 rows x 16 tokens) = the panel's nb blocks times one token tile; two blocks per step, on
 * two sets of tiles, so the second product runs while the first one's sums are scaled. */
INLINE void tile_int8(const struct panel8 *p, const struct act8 *x, size_t nb, int mins, __m512 acc[16])
{
    _Alignas(64) int32_t c0[16][16], c1[16][16];
    ACC16(ACC_ZERO)
#define ISSUE(C, A, B, k)                                                                                        \
    do {                                                                                                         \
        if ((k) < nb) tile_product(C, A, B, p->a + (k) * p->step, p->stride, x->x[k], 64);                       \
    } while (0)
#define SCALE(C, buf, k)                                                                                         \
    do {                                                                                                         \
        if ((k) < nb) {                                                                                          \
            _tile_stored(C, buf, 64);                                                                            \
            const int32_t(*sc_c)[16] = (const int32_t(*)[16])buf;                                                \
            const float *sc_s = p->s[k], *sc_m = p->m[k];                                                        \
            const __m512 sc_da = _mm512_load_ps(x->d[k]), sc_ds = _mm512_load_ps(x->ds[k]);                      \
            ACC16(SCALE_ROW)                                                                                     \
        }                                                                                                        \
    } while (0)
    PIPELINE_PAIRS(0, 1, 6, 7, 2, 3, 4, 5);
#undef ISSUE
#undef SCALE
    ACC16(ACC_OUT)
}

/* ---- small batches (at most 16 tokens: batched decoding) ----
 * A 16 x 16 C tile would be half or more empty for a few tokens, and the float work is per row of
 * C. Here the C tiles are TP = 4, 8 or 16 tokens wide and stored densely, so one vector holds the
 * sums of 16 / TP rows: TP vector steps per block instead of 16, each with the rows' scales spread
 * over its lanes (one permute). Each panel of 16 rows is used once, for all the tokens, so it is taken whole
 * (rows are contiguous in memory, which the prefetch of the next panel streams); the tokens'
 * activations are packed once for up to SMALL_KB blocks and the sums stay in registers across
 * the panel's K chunks. */
#define SMALL_KB 1024 /* 32-blocks of activations packed at once: rows of up to 32768 weights */

/* The activations of up to tp = 16 tokens: block b's B tile at x + 32 tp b (8 quads x tp tokens),
 * the tokens' scales d[b] and d * sum(a) ds[b]. */
struct act_small {
    _Alignas(64) int8_t x[SMALL_KB * 8 * 64];
    _Alignas(64) float d[SMALL_KB][16];
    _Alignas(64) float ds[SMALL_KB][16];
};

/* C0, C1: 16 rows x tp tokens (int32), A0, A1 (tiles 4, 5): 16 rows x 32 int8, B0, B1 (6, 7): 8
 * quads x tp tokens */
static void config_int8_small(int tp)
{
    struct amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 4; i++) c.rows[i] = 16, c.colsb[i] = (uint16_t)(4 * tp);
    for (int i = 4; i < 6; i++) c.rows[i] = 16, c.colsb[i] = 32;
    for (int i = 6; i < 8; i++) c.rows[i] = 8, c.colsb[i] = (uint16_t)(4 * tp);
    _tile_loadconfig(&c);
}

/* Packs the n_tok (<= tp) tokens' blocks [b0, b0 + nb); tokens n_tok..tp-1 are zeros. Gathers
 * across the tokens' rows: one vector holds 16 / tp quad rows of the B tile. */
static void pack_act_small(int q8k, int need_sum, const unsigned char *a, size_t arb, size_t n_tok, int tp,
                           size_t b0, size_t nb, struct act_small *o)
{
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i tok = _mm512_and_si512(lane, _mm512_set1_epi32(tp - 1));
    const __mmask16 live_q = _mm512_cmplt_epi32_mask(tok, _mm512_set1_epi32((int)n_tok));
    const __mmask16 live = _mm512_cmplt_epi32_mask(lane, _mm512_set1_epi32((int)n_tok));
    const __m512i rows = _mm512_mullo_epi32(lane, _mm512_set1_epi32((int)arb)); /* token l's row */
    /* lane l of vector v: token l % tp, quad (16 / tp) v + l / tp */
    const __m512i quad0 = _mm512_add_epi32(_mm512_mullo_epi32(tok, _mm512_set1_epi32((int)arb)),
                                           _mm512_slli_epi32(_mm512_srli_epi32(lane, tp == 16 ? 4 : tp == 8 ? 3 : 2), 2));
    const int vecs = tp / 2; /* 8 quads x tp tokens / 16 lanes */
    for (size_t b = 0; b < nb; b++) {
        const size_t blk = b0 + b;
        size_t qo, dof; /* the block's quants and scale within a row */
        if (q8k) dof = (blk / 8) * QUANTS_Q8_K_BYTES, qo = dof + 4 + 32 * (blk % 8);
        else dof = blk * CPU_Q8_0_BYTES, qo = dof + 2;
        int8_t *x = o->x + 32 * (size_t)tp * b;
        for (int v = 0; v < vecs; v++) {
            const __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live_q, quad0, a + qo + 4 * (16 / tp) * v, 1);
            _mm512_store_si512((void *)(x + 64 * v), g);
        }
        const __m512i dw = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, rows, a + dof, 1);
        const __m512 d = q8k ? _mm512_castsi512_ps(dw) : _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dw));
        _mm512_store_ps(o->d[b], d);
        if (!need_sum) continue;
        __m512i sum;
        if (q8k) { /* the two 16-weight sums of the block, as int16 halves of a dword */
            const __m512i bs = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, rows,
                                                           a + (blk / 8) * QUANTS_Q8_K_BYTES + 4 + QUANTS_QK_K + 4 * (blk % 8), 1);
            sum = _mm512_add_epi32(_mm512_srai_epi32(_mm512_slli_epi32(bs, 16), 16), _mm512_srai_epi32(bs, 16));
        } else {
            _Alignas(64) int32_t s[16] = {0};
            for (size_t j = 0; j < n_tok; j++)
                for (int i = 0; i < 32; i++) s[j] += (int8_t)a[j * arb + qo + (size_t)i];
            sum = _mm512_load_si512((const void *)s);
        }
        _mm512_store_ps(o->ds[b], _mm512_mul_ps(d, _mm512_cvtepi32_ps(sum)));
    }
}

/* Vector i of block k's dense sums (sm_c: 16 rows x tp tokens, lane l: row 16/tp * i + l / tp,
 * token l % tp) scaled into acc<i>; vectors i >= tp do not exist. The tokens' scales sm_da (and
 * sm_ds) are spread over the lanes; the rows' weight scales (and block k's mins) are broadcast from
 * sm_s (and sm_m) for tp = 16, or else permuted from sm_dw (and sm_mw; rowi<i>: each lane's row). */
#define SMALL_ROW(i)                                                                                             \
    if ((i) < tp) {                                                                                              \
        const __m512 sm_v = _mm512_cvtepi32_ps(_mm512_load_si512((const void *)(sm_c + 16 * (i))));              \
        const __m512 sm_w = tp == 16 ? _mm512_set1_ps(sm_s[i]) : _mm512_permutexvar_ps(rowi##i, sm_dw);          \
        acc##i = _mm512_fmadd_ps(sm_v, _mm512_mul_ps(sm_da, sm_w), acc##i);                                      \
        if (mins)                                                                                                \
            acc##i = _mm512_fnmadd_ps(tp == 16 ? _mm512_set1_ps(sm_m[i]) : _mm512_permutexvar_ps(rowi##i, sm_mw), \
                                      sm_ds, acc##i);                                                            \
    }

/* Block b of a Q4_0 panel left packed (p->nib): its 16 rows' nibbles, centred (q - 8), into dst
 * (16 rows of 32 int8), two rows a vector. */
INLINE const int8_t *decode_q4_0_block(const struct panel8 *p, size_t b, int8_t dst[16][32])
{
    const __m512i off = _mm512_set1_epi8(8);
    const unsigned char *q = p->nib + b * 18;
    for (int i = 0; i < 16; i += 2) {
        const __m128i q0 = _mm_loadu_si128((const __m128i *)(const void *)(q + (size_t)i * p->sstride));
        const __m128i q1 = _mm_loadu_si128((const __m128i *)(const void *)(q + (size_t)(i + 1) * p->sstride));
        _mm512_store_si512((void *)dst[i], nibbles_2x16(q0, q1, off));
    }
    return dst[0];
}

/* The next panel's weights, prefetched in `steps` parts while this one computes */
struct prefetch {
    const unsigned char *p;
    size_t stride, rows, bytes, steps;
};

/* Part `part` of pf. Rows that lie back to back (whole rows: the usual case) are one span, whose
 * lines are issued with no division per line (a division per line costs more than the tile
 * products of a small batch), in MV_STREAMS interleaved streams, one from each quarter of the span
 * (line k of each quarter, then line k + 1, ...): the hardware prefetchers then follow four
 * streams as well, as in generation's mv_streams. Q8_0 decode of 8 sequences (bench_sched),
 * interleaved, three runs of three: 282-299 -> 304-320 tokens/s; two streams 301-315, eight
 * 299-310; fewer prefetches
 * (every second or fourth line) 15-20 % slower. */
INLINE void prefetch_step(const struct prefetch *pf, size_t part)
{
    if (pf->stride != pf->bytes) {
        prefetch_part(pf->p, pf->stride, pf->rows, pf->bytes, part, pf->steps);
        return;
    }
    const size_t lines = (pf->rows * pf->bytes + 63) / 64, quarter = lines / MV_STREAMS;
    const size_t end = lines * (part + 1) / pf->steps;
    for (size_t i = lines * part / pf->steps; i < end; i++) {
        const size_t line = i < quarter * MV_STREAMS ? (i % MV_STREAMS) * quarter + i / MV_STREAMS : i;
        _mm_prefetch((const char *)(pf->p + 64 * line), _MM_HINT_T1);
    }
}

/* acc (16 rows x tp tokens, dense) += the panel's nb blocks times the activations' blocks [xb0,
 * xb0 + nb); two blocks per step, step i issuing part xb0 / 2 + i of pf. */
INLINE void tile_int8_small(const struct panel8 *p, const struct act_small *x, size_t xb0, size_t nb, int mins, int tp,
                            const struct prefetch *pf, __m512 acc[16])
{
    _Alignas(64) int32_t c[4][16 * 16];
    _Alignas(64) int8_t ring[4][16][32]; /* decoded Q4_0 blocks (p->nib), block k in ring[k & 3] */
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i toki = _mm512_and_si512(lane, _mm512_set1_epi32(tp - 1));
    const __m512i row0 = _mm512_srli_epi32(lane, tp == 16 ? 4 : tp == 8 ? 3 : 2);
#define ACC_IN(i)                                                                                                \
    __m512 acc##i = acc[i];                                                                                      \
    const __m512i rowi##i = _mm512_add_epi32(_mm512_set1_epi32(16 / tp * (i)), row0);
    ACC16(ACC_IN)
#undef ACC_IN
#define ISSUE(C, A, B, k)                                                                                        \
    do {                                                                                                         \
        if ((k) < nb)                                                                                            \
            tile_product(C, A, B, p->nib ? decode_q4_0_block(p, k, ring[(k) & 3]) : p->a + (k) * p->step,         \
                         p->stride, x->x + 32 * tp * (xb0 + (k)), 4 * tp);                                       \
    } while (0)
#define STORE(C, buf, k)                                                                                         \
    do {                                                                                                         \
        if ((k) < nb) {                                                                                          \
            if (pf->rows) prefetch_step(pf, xb0 + (k));                                                          \
            _tile_stored(C, buf, 4 * tp);                                                                        \
        }                                                                                                        \
    } while (0)
#define SCALEBUF(buf, k)                                                                                         \
    do {                                                                                                         \
        if ((k) < nb) {                                                                                          \
            const int32_t *sm_c = buf;                                                                           \
            const size_t sm_xb = xb0 + (k);                                                                      \
            const __m512 sm_da = _mm512_permutexvar_ps(toki, _mm512_load_ps(x->d[sm_xb]));                       \
            const __m512 sm_ds = mins ? _mm512_permutexvar_ps(toki, _mm512_load_ps(x->ds[sm_xb])) : sm_da;       \
            const __m512 sm_mw = mins && tp != 16 ? _mm512_load_ps(p->m[k]) : sm_da;                                         \
            _Alignas(64) float sm_sw[16];                                                                        \
            const float *sm_s = p->s[k], *sm_m = p->m[k];                                                        \
            __m512 sm_dw = sm_da;                                                                                \
            if (p->sw) sm_dw = rows_f16(p->sw + (k) * p->sstep, p->sstride);                                     \
            else if (tp != 16) sm_dw = _mm512_load_ps(p->s[k]);                                                  \
            if (p->sw && tp == 16) _mm512_store_ps(sm_sw, sm_dw), sm_s = sm_sw;                                  \
            ACC16(SMALL_ROW)                                                                                     \
        }                                                                                                        \
    } while (0)
    PIPELINE_DEFERRED(0, 1, 2, 3, 4, 5, 6, 7);
#undef ISSUE
#undef STORE
#undef SCALEBUF
    ACC16(ACC_OUT)
}

/* acc (dense 16 rows x tp tokens): y[token * ys + row] = (add ? y : 0) + sum, for R rows, T tokens */
INLINE void store_small(const __m512 acc[16], int tp, int add, int R, int T, float *y, size_t ys)
{
    _Alignas(64) float c[16 * 16];
    for (int k = 0; k < tp; k++) _mm512_store_ps(c + 16 * k, acc[k]);
    const __mmask16 m = (__mmask16)(R >= 16 ? 0xffff : (1u << R) - 1u);
    const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(tp));
    for (int j = 0; j < T; j++) {
        float *yj = y + (size_t)j * ys;
        __m512 v = _mm512_i32gather_ps(_mm512_add_epi32(rows, _mm512_set1_epi32(j)), c, 4);
        if (add) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, yj));
        _mm512_mask_storeu_ps(yj, m, v);
    }
}

/* gemm_int8 for n_tok <= 16 */
static void gemm_int8_small(enum tensor_type t, size_t n, const unsigned char *w, size_t wrb, size_t r0, size_t r1,
                            const unsigned char *a, size_t arb, size_t n_tok, float *y, size_t ys,
                            struct act_small *act, struct panel8 *panel)
{
    const int q8k = tensor_dot_type(t) == TENSOR_Q8_K, mins = has_min(t), tp = n_tok <= 4 ? 4 : n_tok <= 8 ? 8 : 16;
    const size_t nb = n / 32;
    config_int8_small(tp);
    for (size_t k0 = 0; k0 < nb; k0 += SMALL_KB) {
        const size_t nbk = nb - k0 < SMALL_KB ? nb - k0 : SMALL_KB;
        pack_act_small(q8k, mins, a, arb, n_tok, tp, k0, nbk, act);
        for (size_t r = r0; r < r1; r += AMX_N) {
            const int R = r1 - r < AMX_N ? (int)(r1 - r) : AMX_N;
            const size_t rn = r + AMX_N < r1 ? r + AMX_N : r1;
            const struct prefetch pf = {w + rn * wrb + chunk_bytes(t, k0), wrb, r1 - rn < AMX_N ? r1 - rn : AMX_N,
                                        chunk_bytes(t, nbk), nbk};
            __m512 acc[16];
            for (int k = 0; k < 16; k++) acc[k] = _mm512_setzero_ps();
            for (size_t b0 = 0; b0 < nbk; b0 += AMX_KB) {
                const size_t nbc = nbk - b0 < AMX_KB ? nbk - b0 : AMX_KB;
                unpack_rows(t, w, wrb, r, R, k0 + b0, nbc, 1, panel);
                /* mins and tp as constants: one straight loop each, no branch among the rows */
                if (tp == 4 && mins) tile_int8_small(panel, act, b0, nbc, 1, 4, &pf, acc);
                else if (tp == 4) tile_int8_small(panel, act, b0, nbc, 0, 4, &pf, acc);
                else if (tp == 8 && mins) tile_int8_small(panel, act, b0, nbc, 1, 8, &pf, acc);
                else if (tp == 8) tile_int8_small(panel, act, b0, nbc, 0, 8, &pf, acc);
                else if (mins) tile_int8_small(panel, act, b0, nbc, 1, 16, &pf, acc);
                else tile_int8_small(panel, act, b0, nbc, 0, 16, &pf, acc);
            }
            store_small(acc, tp, k0 > 0, R, (int)n_tok, y + r, ys);
        }
    }
    _tile_release();
}

/* acts: AMX_TOK / AMX_N token tiles' buffers */
static void gemm_int8(enum tensor_type t, size_t n, const unsigned char *w, size_t wrb, size_t r0, size_t r1,
                      const unsigned char *a, size_t arb, size_t n_tok, float *y, size_t ys, struct act8 *acts,
                      struct act_small *act_small, struct panel8 *panel)
{
    if (n_tok <= 16) {
        gemm_int8_small(t, n, w, wrb, r0, r1, a, arb, n_tok, y, ys, act_small, panel);
        return;
    }
    const int q8k = tensor_dot_type(t) == TENSOR_Q8_K, mins = has_min(t);
    const size_t nb = n / 32;
    config_int8();
    for (size_t j0 = 0; j0 < n_tok; j0 += AMX_TOK) {
        const size_t nt = n_tok - j0 < AMX_TOK ? n_tok - j0 : AMX_TOK, ntt = (nt + AMX_N - 1) / AMX_N;
        for (size_t b0 = 0; b0 < nb; b0 += AMX_KB) {
            const size_t nbc = nb - b0 < AMX_KB ? nb - b0 : AMX_KB;
            for (size_t tt = 0; tt < ntt; tt++)
                pack_act8(q8k, mins, a, arb, j0 + AMX_N * tt, n_tok, b0, nbc, &acts[tt]);
            for (size_t r = r0; r < r1; r += AMX_N) {
                const int R = r1 - r < AMX_N ? (int)(r1 - r) : AMX_N;
                unpack_rows(t, w, wrb, r, R, b0, nbc, 0, panel);
                /* the next 16 rows' bytes of this chunk, into L2 while these rows compute */
                const size_t rn = r + AMX_N < r1 ? r + AMX_N : r1, Rn = r1 - rn < AMX_N ? r1 - rn : AMX_N;
                const size_t cb = chunk_bytes(t, nbc), co = chunk_bytes(t, b0);
                for (size_t tt = 0; tt < ntt; tt++) {
                    __m512 acc[16];
                    const size_t jt = j0 + AMX_N * tt;
                    const int T = n_tok - jt < AMX_N ? (int)(n_tok - jt) : AMX_N;
                    /* a batch of 1-2 token tiles has too little work to hide the prefetch loop behind */
                    if (ntt > 2) prefetch_part(w + rn * wrb + co, wrb, Rn, cb, tt, ntt);
                    if (mins) tile_int8(panel, &acts[tt], nbc, 1, acc);
                    else tile_int8(panel, &acts[tt], nbc, 0, acc);
                    store_tile(acc, b0 > 0, R, T, y + jt * ys + r, ys);
                }
            }
        }
    }
    _tile_release();
}

/* ================================================================ bf16 path */

/* One token tile's activations for AMX_KF elements: B (hi, lo) of each 32 at x[k / 32] */
struct actf {
    _Alignas(64) uint32_t hi[AMX_KF / 32][16][16];
    _Alignas(64) uint32_t lo[AMX_KF / 32][16][16];
};

/* 16 weight rows of AMX_KF elements as bf16 hi and lo (row i at hi[i]) */
struct panelf {
    _Alignas(64) uint16_t hi[AMX_N][AMX_KF];
    _Alignas(64) uint16_t lo[AMX_N][AMX_KF];
};

/* hi = bf16(v) (round to nearest even), lo = bf16(v - hi) */
INLINE void split_bf16(__m512 v0, __m512 v1, __m512i *hi, __m512i *lo)
{
    const __m512bh h = _mm512_cvtne2ps_pbh(v1, v0);
    const __m512i hb = (__m512i)h;
    /* hi back to float: the bf16 halves of each dword shifted into place */
    const __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(hb)), 16));
    const __m512 h1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(hb, 1)), 16));
    *hi = hb;
    *lo = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(v1, h1), _mm512_sub_ps(v0, h0));
}

/* 16 floats of row p from element i, zero past n */
INLINE __m512 ld_row16(const unsigned char *p, size_t i, size_t n)
{
    if (i >= n) return _mm512_setzero_ps();
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
    return _mm512_maskz_loadu_ps(m, p + 4 * i);
}

/* Packs tokens [j0, j0 + 16) (those >= n_tok as zeros), elements [k0, k0 + nk) (zero past n). */
static void pack_actf(const unsigned char *a, size_t arb, size_t j0, size_t n_tok, size_t k0, size_t nk, size_t n,
                      struct actf *o)
{
    for (size_t kb = 0; kb < nk; kb += 32) {
        __m512 rh[16], rl[16];
        for (int l = 0; l < 16; l++) {
            const size_t j = j0 + (size_t)l;
            if (j >= n_tok) {
                rh[l] = rl[l] = _mm512_setzero_ps();
                continue;
            }
            const unsigned char *row = a + j * arb;
            __m512i hi, lo;
            split_bf16(ld_row16(row, k0 + kb, n), ld_row16(row, k0 + kb + 16, n), &hi, &lo);
            rh[l] = _mm512_castsi512_ps(hi), rl[l] = _mm512_castsi512_ps(lo);
        }
        transpose16(rh);
        transpose16(rl);
        for (int k = 0; k < 16; k++) {
            _mm512_store_ps((float *)(void *)o->hi[kb / 32][k], rh[k]);
            _mm512_store_ps((float *)(void *)o->lo[kb / 32][k], rl[k]);
        }
    }
}

/* 16 weights of an F16 or BF16 row from element i as float, zero past n */
INLINE __m512 ld_w16(int f16, const unsigned char *p, size_t i, size_t n)
{
    if (i >= n) return _mm512_setzero_ps();
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1u);
    const __m256i h = _mm256_maskz_loadu_epi16(m, p + 2 * i);
    if (f16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static void unpack_rowsf(int f16, const unsigned char *w, size_t wrb, size_t r, int R, size_t k0, size_t nk, size_t n,
                         struct panelf *p)
{
    for (int i = 0; i < AMX_N; i++) {
        for (size_t k = 0; k < nk; k += 32) {
            __m512i hi = _mm512_setzero_si512(), lo = hi;
            if (i < R) {
                const unsigned char *row = w + (r + (size_t)i) * wrb;
                split_bf16(ld_w16(f16, row, k0 + k, n), ld_w16(f16, row, k0 + k + 16, n), &hi, &lo);
            }
            _mm512_store_si512((void *)(p->hi[i] + k), hi);
            _mm512_store_si512((void *)(p->lo[i] + k), lo);
        }
    }
}

/* C0 / C1 (16 rows x token tiles x0 / x1) += the panel's nk elements; lo_w: the weights have lo parts */
INLINE void tiles_bf16(const struct panelf *p, const struct actf *x0, const struct actf *x1, size_t nk, int lo_w)
{
    for (size_t k = 0; k < nk; k += 32) {
        _tile_loadd(2, p->hi[0] + k, sizeof p->hi[0]);
        _tile_loadd(4, x0->hi[k / 32], 64);
        _tile_loadd(5, x0->lo[k / 32], 64);
        _tile_dpbf16ps(0, 2, 4);
        _tile_dpbf16ps(0, 2, 5);
        if (x1) {
            _tile_loadd(6, x1->hi[k / 32], 64);
            _tile_loadd(7, x1->lo[k / 32], 64);
            _tile_dpbf16ps(1, 2, 6);
            _tile_dpbf16ps(1, 2, 7);
        }
        if (lo_w) {
            _tile_loadd(3, p->lo[0] + k, sizeof p->lo[0]);
            _tile_dpbf16ps(0, 3, 4);
            if (x1) _tile_dpbf16ps(1, 3, 6);
        }
    }
}

INLINE void store_c(int which, int add, int R, int T, float *y, size_t ys)
{
    _Alignas(64) float c[16][16];
    __m512 acc[16];
    if (which == 0) _tile_stored(0, c, 64);
    else _tile_stored(1, c, 64);
    for (int i = 0; i < 16; i++) acc[i] = _mm512_load_ps(c[i]);
    store_tile(acc, add, R, T, y, ys);
}

/* acts: AMX_TOK / AMX_N token tiles' buffers */
static void gemm_bf16(int f16, size_t n, const unsigned char *w, size_t wrb, size_t r0, size_t r1,
                      const unsigned char *a, size_t arb, size_t n_tok, float *y, size_t ys, struct actf *acts,
                      struct panelf *panel)
{
    config_bf16();
    for (size_t j0 = 0; j0 < n_tok; j0 += AMX_TOK) {
        const size_t nt = n_tok - j0 < AMX_TOK ? n_tok - j0 : AMX_TOK, ntt = (nt + AMX_N - 1) / AMX_N;
        for (size_t k0 = 0; k0 < n; k0 += AMX_KF) {
            const size_t nk = (n - k0 < AMX_KF ? n - k0 : AMX_KF), nkp = (nk + 31) / 32 * 32;
            for (size_t tt = 0; tt < ntt; tt++) pack_actf(a, arb, j0 + AMX_N * tt, n_tok, k0, nkp, n, &acts[tt]);
            for (size_t r = r0; r < r1; r += AMX_N) {
                const int R = r1 - r < AMX_N ? (int)(r1 - r) : AMX_N;
                unpack_rowsf(f16, w, wrb, r, R, k0, nkp, n, panel);
                for (size_t tt = 0; tt < ntt; tt += 2) {
                    const size_t jt = j0 + AMX_N * tt;
                    const int two = tt + 1 < ntt;
                    _tile_zero(0);
                    _tile_zero(1);
                    tiles_bf16(panel, &acts[tt], two ? &acts[tt + 1] : NULL, nkp, f16);
                    const int T0 = n_tok - jt < AMX_N ? (int)(n_tok - jt) : AMX_N;
                    store_c(0, k0 > 0, R, T0, y + jt * ys + r, ys);
                    if (two) {
                        const size_t j1 = jt + AMX_N;
                        store_c(1, k0 > 0, R, n_tok - j1 < AMX_N ? (int)(n_tok - j1) : AMX_N, y + j1 * ys + r, ys);
                    }
                }
            }
        }
    }
    _tile_release();
}

/* ================================================================ per-thread buffers */

/* Each thread's packed activations and weight panels (~1.8 MB), from scratch_get. */
struct amx_buffers {
    union { /* a call uses one */
        struct act8 acts8[AMX_TOK / AMX_N];
        struct act_small act_small;
    };
    struct panel8 panel8;
    struct actf actsf[AMX_TOK / AMX_N];
    struct panelf panelf;
};

/* ================================================================ entry points */

int cpu_amx_type(enum tensor_type t) { return int8_type(t) || t == TENSOR_F16 || t == TENSOR_BF16; }

int cpu_amx_gemm(enum tensor_type t, size_t n, const void *w, size_t wrb, size_t r0, size_t r1, const void *a,
                 size_t arb, size_t n_tok, float *y, size_t ys)
{
    if (!cpu_amx_type(t)) return 0;
    if (r0 >= r1 || n_tok == 0) return 1;
    if (n == 0) { /* an empty dot is 0 */
        for (size_t j = 0; j < n_tok; j++) memset(y + j * ys + r0, 0, (r1 - r0) * sizeof(float));
        return 1;
    }
    struct amx_buffers *sc = scratch_get(sizeof *sc);
    if (!sc) return 0;
    if (t == TENSOR_F16 || t == TENSOR_BF16)
        gemm_bf16(t == TENSOR_F16, n, w, wrb, r0, r1, a, arb, n_tok, y, ys, sc->actsf, &sc->panelf);
    else
        gemm_int8(t, n, w, wrb, r0, r1, a, arb, n_tok, y, ys, sc->acts8, &sc->act_small, &sc->panel8);
    return 1;
}
