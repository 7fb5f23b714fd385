/* tensor.h - the tensor type table's description part (core/tensor.c): the ggml type ids, each
 * type's name, block size and bytes and the activation type attnd's dot products take for it, and
 * the exact f16/bf16 <-> f32 conversions. The kernels of each type (dequantize, dot and GEMM per
 * ISA level, the variants it allows) are the other part of its row, kernels/cpu/cpu_kernels.c's
 * table, keyed by the same enum.
 *
 * Block layouts (facts from the GGUF/ggml format; f16 = IEEE half, all little-endian):
 *   F32, F16, BF16     1 w per "block"
 *   Q8_0   32 w, 34 B: f16 d, i8 qs[32]                   w = d*q
 *   Q4_0   32 w, 18 B: f16 d, u8 qs[16]                   w = d*(q - 8), q a nibble (j: low of qs[j], j+16: high)
 *   Q4_1   32 w, 20 B: f16 d, f16 m, u8 qs[16]            w = d*q + m
 *   Q5_0   32 w, 22 B: f16 d, u8 qh[4], u8 qs[16]         q = nibble | bit j of qh << 4, w = d*(q - 16)
 *   Q5_1   32 w, 24 B: f16 d, f16 m, u8 qh[4], u8 qs[16]  w = d*q + m
 *   IQ4_NL 32 w, 18 B: f16 d, u8 qs[16]                   w = d*K[nibble], K the 16-entry codebook
 *   Q2_K  256 w, 84 B: u8 scales[16] (lo: scale, hi: min), u8 qs[64], f16 d, f16 dmin
 *   Q3_K  256 w,110 B: u8 hmask[32], u8 qs[64], u8 scales[12] (16 x 6 bits), f16 d
 *   Q4_K  256 w,144 B: f16 d, f16 dmin, u8 scales[12] (8 scales + 8 mins, 6 bits), u8 qs[128]
 *   Q5_K  256 w,176 B: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
 *   Q6_K  256 w,210 B: u8 ql[128], u8 qh[64], i8 scales[16], f16 d
 *   IQ4_XS 256 w,136 B: f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]  (8 sub-blocks, 6-bit scale - 32)
 *   Q8_K  256 w,292 B: f32 d, i8 qs[256], i16 bsums[16] (the sums of each 16): activations only
 * Every K-type decodes to w[i] = d*sc[s]*q[i] - dmin*mn[s] over sub-blocks s of 16 or 32 weights. */
#ifndef ATTND_TENSOR_H
#define ATTND_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ggml type ids as stored in GGUF tensor infos. */
enum tensor_type {
    TENSOR_F32 = 0,
    TENSOR_F16 = 1,
    TENSOR_Q4_0 = 2,
    TENSOR_Q4_1 = 3,
    TENSOR_Q5_0 = 6,
    TENSOR_Q5_1 = 7,
    TENSOR_Q8_0 = 8,
    TENSOR_Q8_1 = 9,
    TENSOR_Q2_K = 10,
    TENSOR_Q3_K = 11,
    TENSOR_Q4_K = 12,
    TENSOR_Q5_K = 13,
    TENSOR_Q6_K = 14,
    TENSOR_Q8_K = 15,
    TENSOR_IQ4_NL = 20,
    TENSOR_IQ4_XS = 23,
    TENSOR_I8 = 24,
    TENSOR_I16 = 25,
    TENSOR_I32 = 26,
    TENSOR_I64 = 27,
    TENSOR_F64 = 28,
    TENSOR_BF16 = 30,
    TENSOR_TYPE_MAX = 31 /* ids >= this are unknown */
};

#define QK8_0 32
#define QK4_0 32

/* Q8_0: 32 weights, w = d * q. 34 bytes. */
typedef struct {
    uint16_t d; /* f16 scale */
    int8_t qs[QK8_0];
} block_q8_0;

/* Q4_0: 32 weights; element j<16 is the low nibble of qs[j], j+16 the high nibble; w = d*(nib-8). 18 bytes. */
typedef struct {
    uint16_t d; /* f16 scale */
    uint8_t qs[QK4_0 / 2];
} block_q4_0;

_Static_assert(sizeof(block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(block_q4_0) == 18, "Q4_0 block is 18 bytes");

/* One row of the description table. */
struct tensor_type_info {
    const char *name;          /* lower-case, as ggml names it ("f32", "q8_0", ...) */
    uint32_t block_elems;      /* elements per block (1 for plain types) */
    uint32_t block_bytes;      /* bytes per block */
    enum tensor_type dot_type; /* what activations are prepared as for weights of this type: TENSOR_F32
                                  (float weights), TENSOR_Q8_0 (32-blocks) or TENSOR_Q8_K (256-blocks);
                                  TENSOR_F32 too for the types no kernel computes with */
};

/* The row of type t, or NULL if t is not a type id this build knows the layout of. */
const struct tensor_type_info *tensor_type_info(uint32_t t);
/* 1 if t is a type id this build knows the layout of (it may still be unsupported by the kernels). */
int tensor_type_known(uint32_t t);
/* Lower-case name ("f32", "q8_0", ...), or "unknown". */
const char *tensor_type_name(uint32_t t);
/* Elements per block (1 for plain types); 0 for an unknown type. */
size_t tensor_block_elems(uint32_t t);
/* Bytes per block; 0 for an unknown type. */
size_t tensor_block_bytes(uint32_t t);
/* The row's dot_type; TENSOR_F32 for an unknown type. */
enum tensor_type tensor_dot_type(uint32_t t);
/* Bytes needed for n elements of type t into *out. Returns 0 on success, -1 if t is unknown,
 * n is not a multiple of the block size, or the size overflows size_t/uint64. */
int tensor_nbytes(uint32_t t, uint64_t n, uint64_t *out);

/* ---- the f16 / bf16 <-> f32 conversions (exact IEEE round-to-nearest-even, as F16C does) ----
 * Inline: the scalar kernels decode a scale per block with them. kernels/cpu/cpu_kernels.h gives
 * the same functions as cpu_f16_to_f32 & co. */

static inline float tensor_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Exact: every f16 is representable as f32. NaN payloads are kept and the quiet bit set, as the
 * F16C instruction does. */
static inline float tensor_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in f32 */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return tensor_bits_f32(sign | 0x7f800000u | (mant ? 0x400000u : 0u) | (mant << 13));
    return tensor_bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* IEEE round-to-nearest-even; overflow gives inf; NaN stays (quiet) NaN keeping the top payload
 * bits, which is also what the F16C instruction does. */
static inline uint16_t tensor_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((u >> 13) & 0x3ffu));
    if (u >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (u < 0x38800000u) {
        /* result is subnormal (or zero): q = round(|f| / 2^-24) */
        if (u <= 0x33000000u) return sign; /* <= 2^-25: ties to even give 0 */
        uint32_t e = u >> 23;              /* 102..112 */
        uint32_t m = (u & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++; /* q may reach 0x400: min normal */
        return (uint16_t)(sign | q);
    }
    uint32_t h = (u >> 13) - (112u << 10); /* rebias exponent 127 -> 15 */
    uint32_t rem = u & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry into the exponent is right */
    return (uint16_t)(sign | h);
}

/* Exact. */
static inline float tensor_bf16_to_f32(uint16_t h) { return tensor_bits_f32((uint32_t)h << 16); }

/* Round to nearest even; NaN stays NaN (quiet bit set so it cannot become inf). */
static inline uint16_t tensor_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

#endif
