/* cpu_kernels_impl.h - private to kernels/cpu: the per-ISA kernel entry points that cpu_kernels.c
 * dispatches to. kernels_avx2.c is built with -mavx2 -mfma -mf16c and kernels_avx512.c with
 * -mavx512f/bw/vl/dq; nothing here may be called unless cpu_kernels_init() found that ISA.
 *
 * Common contracts (same as the public ones in cpu_kernels.h):
 *   vec_dot: dot of one weight row w (n elements) with prepared activations a.
 *            Float types: a is n floats, n any size. Q8_0/Q4_0: n a multiple of 32, a is n/32
 *            Q8_0 blocks whose quants lie in [-127, 127] (what cpu_quantize_row_q8_0 writes).
 *   gemm:    y[j*y_stride + r] = vec_dot(W row r, A row j) for r in [r0, r1), j < n_tok.
 * No pointer needs more than byte alignment; all functions are thread-safe (pure). */
#ifndef ATTND_CPU_KERNELS_IMPL_H
#define ATTND_CPU_KERNELS_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attnd/tensor.h"
#include "kernels/cpu/cpu_kernels.h"

typedef float (*cpu_vec_dot_fn)(size_t n, const void *w, const void *a);
typedef void (*cpu_gemm_fn)(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                            const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);

/* Block sizes in bytes; kernels address blocks through byte pointers (rows may be unaligned). */
#define CPU_Q8_0_BYTES 34 /* sizeof(block_q8_0): f16 d, then 32 int8 */
#define CPU_Q4_0_BYTES 18 /* sizeof(block_q4_0): f16 d, then 16 bytes of nibbles */

/* ---- AVX2 + FMA + F16C (kernels_avx2.c) ---- */
float cpu_avx2_vec_dot_f32(size_t n, const void *w, const void *a);
float cpu_avx2_vec_dot_f16(size_t n, const void *w, const void *a);
float cpu_avx2_vec_dot_bf16(size_t n, const void *w, const void *a);
float cpu_avx2_vec_dot_q8_0(size_t n, const void *w, const void *a);
float cpu_avx2_vec_dot_q4_0(size_t n, const void *w, const void *a);
void cpu_avx2_gemm_f32(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                       size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
void cpu_avx2_gemm_f16(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                       size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
void cpu_avx2_gemm_bf16(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                        size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
void cpu_avx2_gemm_q8_0(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                        size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
void cpu_avx2_gemm_q4_0(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                        size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
/* The float panel GEMM (CPU_VAR_PANEL for F32/F16/BF16): 16 weight rows converted and transposed
 * per chunk of 256 elements, 16 rows x 6 tokens per outer-product tile. Any n and n_tok. */
void cpu_avx2_gemm_panel_f32(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                             size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
void cpu_avx2_gemm_panel_f16(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                             size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
void cpu_avx2_gemm_panel_bf16(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                              size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
/* Bit-identical to the scalar cpu_quantize_row_q8_0. */
void cpu_avx2_quantize_row_q8_0(const float *x, void *dst, size_t n);
/* Hardware F16C conversions (IEEE round-to-nearest-even, same results as the scalar ones). */
void cpu_avx2_f16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void cpu_avx2_f32_to_f16_row(const float *src, uint16_t *dst, size_t n);
/* Same results as cpu_argmax_ref / cpu_find_nonfinite_ref. */
size_t cpu_avx2_argmax(const float *x, size_t n);
size_t cpu_avx2_find_nonfinite(const float *x, size_t n);
/* cpu_swiglu_row_ref within 1e-6 relative (a polynomial exp). */
void cpu_avx2_swiglu_row(float *g, const float *u, size_t n);
/* cpu_rmsnorm_row_ref with the squares summed in 4 double lanes. */
void cpu_avx2_rmsnorm_row(float *out, const float *x, const float *w, size_t n, float eps);
void cpu_avx2_add_row(float *x, const float *y, size_t n);

/* ---- AVX-512 F/BW/VL/DQ (kernels_avx512.c) ---- */
/* cpu_swiglu_row_ref within 1e-6 relative: e^-g as 2^n p(r) (vscalefps), 16 lanes. */
void cpu_avx512_swiglu_row(float *g, const float *u, size_t n);
float cpu_avx512_vec_dot_f32(size_t n, const void *w, const void *a);
float cpu_avx512_vec_dot_f16(size_t n, const void *w, const void *a);
float cpu_avx512_vec_dot_bf16(size_t n, const void *w, const void *a);
float cpu_avx512_vec_dot_q8_0(size_t n, const void *w, const void *a);
float cpu_avx512_vec_dot_q4_0(size_t n, const void *w, const void *a);
void cpu_avx512_gemm_f32(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                         size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
void cpu_avx512_gemm_f16(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                         size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
void cpu_avx512_gemm_bf16(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                          size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
void cpu_avx512_gemm_q8_0(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                          size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
void cpu_avx512_gemm_q4_0(size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                          size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
/* Bit-identical to the scalar cpu_quantize_row_q8_0. */
void cpu_avx512_quantize_row_q8_0(const float *x, void *dst, size_t n);
void cpu_avx512_f16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void cpu_avx512_f32_to_f16_row(const float *src, uint16_t *dst, size_t n);


/* ---- quants.c (scalar) and quants_avx2.c: the K-quant (Q2_K..Q6_K), IQ4_NL/IQ4_XS and
 * Q4_1/Q5_0/Q5_1 weight types, which cpu_kernels.c dispatches to.
 *
 * Block layouts (facts from the GGUF/ggml format; f16 = IEEE half, all little-endian):
 *   Q4_1   32 w, 20 B: f16 d, f16 m, u8 qs[16]            w = d*q + m, q a nibble (j: low of qs[j], j+16: high)
 *   Q5_0   32 w, 22 B: f16 d, u8 qh[4], u8 qs[16]         q = nibble | bit j of qh << 4, w = d*(q - 16)
 *   Q5_1   32 w, 24 B: f16 d, f16 m, u8 qh[4], u8 qs[16]  w = d*q + m
 *   IQ4_NL 32 w, 18 B: f16 d, u8 qs[16]                   w = d*K[nibble], K the 16-entry codebook
 *   Q2_K  256 w, 84 B: u8 scales[16] (lo: scale, hi: min), u8 qs[64], f16 d, f16 dmin
 *   Q3_K  256 w,110 B: u8 hmask[32], u8 qs[64], u8 scales[12] (16 x 6 bits), f16 d
 *   Q4_K  256 w,144 B: f16 d, f16 dmin, u8 scales[12] (8 scales + 8 mins, 6 bits), u8 qs[128]
 *   Q5_K  256 w,176 B: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
 *   Q6_K  256 w,210 B: u8 ql[128], u8 qh[64], i8 scales[16], f16 d
 *   IQ4_XS 256 w,136 B: f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]  (8 sub-blocks, 6-bit scale - 32)
 * Every K-type decodes to w[i] = d*sc[s]*q[i] - dmin*mn[s] over sub-blocks s of 16 or 32 weights.
 *
 * Activations: K-quants and IQ4_XS take Q8_K (256 values: f32 d, i8 qs[256], i16 bsums[16] =
 * sums of each 16), the 32-blocks take Q8_0, as the reference engine does.
 * All functions are pure and thread-safe; pointers need only byte alignment. */
#define QUANTS_QK_K 256
#define QUANTS_Q8_K_BYTES 292

/* An f16 at any alignment, as f32. */
static inline float quants_ld_f16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return cpu_f16_to_f32(v);
}

/* The 16 IQ4 codebook values. */
extern const int8_t quants_iq4nl_values[16];

/* 1 if t is one of the types this module handles. */
int quants_supported(enum tensor_type t);
/* TENSOR_Q8_K or TENSOR_Q8_0 for a supported t. */
enum tensor_type quants_dot_type(enum tensor_type t);
/* Dequantizes n elements (a multiple of t's block size) of a supported type t. */
void quants_dequant_row(enum tensor_type t, const void *src, float *dst, size_t n);
/* Quantizes n floats (a multiple of 256) to Q8_K: per block, m = the value of largest magnitude,
 * iscale = -127/m, q = min(127, round-to-nearest-even(iscale*x)), d = 1/iscale (0 for an all-zero block). */
void quants_quantize_row_q8_k(const float *x, void *dst, size_t n);
/* Sub-block scales from a block's packed bytes (shared by the scalar and SIMD decoders):
 * Q4_K/Q5_K: 8 six-bit scales and mins from the 12 bytes at s12;
 * Q3_K: 16 six-bit scales minus 32 from the 12 bytes at s12;
 * IQ4_XS: 8 six-bit scales minus 32 from the block (scales_h at b+2, scales_l at b+4). */
void quants_k4_scales(const unsigned char *s12, int16_t sc[8], int16_t mn[8]);
void quants_q3_k_scales(const unsigned char *s12, int16_t sc[16]);
void quants_iq4_xs_scales(const unsigned char *b, int16_t sc[8]);
/* The levels of the quants kernels: the scalar reference, the AVX2 build (callable only when the
 * CPU has AVX2+FMA+F16C) and the AVX-512 VNNI build (only with AVX-512 F/BW/VL/DQ + VNNI). */
enum quants_level { QUANTS_LEVEL_REF, QUANTS_LEVEL_AVX2, QUANTS_LEVEL_VNNI, QUANTS_N_LEVELS };
/* The dot of a supported t at level, or NULL for any other type. */
cpu_vec_dot_fn quants_dot_fn(enum tensor_type t, enum quants_level level);
/* y[j*y_stride + r] = dot(W row r, A row j) for r in [r0, r1), j < n_tok, one weight row at a time
 * (so it stays in cache for every token). */
void quants_gemm(cpu_vec_dot_fn dot, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                 const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);

/* 1 for the types the panel GEMM of level takes (none at QUANTS_LEVEL_REF): Q4_0 and every supported type
 * but Q2_K, and Q8_0 at QUANTS_LEVEL_VNNI. */
int quants_panel_type(enum tensor_type t, enum quants_level level);

/* ---- AVX2 (quants_avx2.c) ---- */
/* The multi-token GEMM of cpu_gemm for n_tok >= 2, Q8_0, Q4_0 and every supported type but Q2_K (weights
 * unpacked to int8 panels once per 64 tokens, 8 rows x 4 tokens per tile); returns 0, doing
 * nothing, for any other type or n_tok. Sums in a different order than the dots: equal to
 * the QUANTS_LEVEL_REF dot's within float rounding. */
int quants_avx2_gemm(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                     const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
/* The matrix-vector product of Q8_0 or Q4_0 weights (rows [r0, r1)) with one Q8_0 activation row:
 * y[r] = the dot of row r; returns 0, doing nothing, for other types or rows over 32768 weights.
 * Exact int32 sums per block like the scalar reference; another float order. AVX2 build
 * (maddubs) and VNNI build (vpdpbusd). */
int quants_avx2_matvec_q(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                         const void *a, float *y);
int quants_avx512_matvec_q(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                           const void *a, float *y);
/* One weight row's 32-blocks [b0, b0 + nb) (K-types: multiples of 8) as int8 for a matrix unit: block
 * b0 + i's weights at q + 32 i (q 32-byte aligned), its scale at s[i] and its min at m[i], w = s * q - m
 * (m 0 for the types without). Returns 0, writing nothing, for Q2_K, Q3_K and Q6_K (scales per 16
 * weights) and the types quants_panel_type does not take. */
int quants_avx2_unpack_row(enum tensor_type t, const unsigned char *row, size_t b0, size_t nb, int8_t *q, float *s,
                           float *m);
/* The int8 weights of `rows` rows (wrb bytes apart, w0 at the first row's first block to take) of
 * nb blocks of a type with one f16 scale at the start of each 32-block (Q4_0, Q4_1, Q5_0, Q5_1,
 * IQ4_NL): row i's block b at q + i * q_stride + 32 b (32-byte aligned), as quants_avx2_unpack_row
 * gives them; the scales (and mins, at byte 2) are the caller's to read. Returns 0 for other types. */
int quants_avx2_unpack_q32_rows(enum tensor_type t, const unsigned char *w0, size_t wrb, int rows, size_t nb,
                                int8_t *q, size_t q_stride);
/* Bit-identical to quants_quantize_row_q8_k. */
void quants_avx2_quantize_row_q8_k(const float *x, void *dst, size_t n);
float quants_avx2_dot_q4_1(size_t n, const void *w, const void *a);
float quants_avx2_dot_q5_0(size_t n, const void *w, const void *a);
float quants_avx2_dot_q5_1(size_t n, const void *w, const void *a);
float quants_avx2_dot_iq4_nl(size_t n, const void *w, const void *a);
float quants_avx2_dot_q2_k(size_t n, const void *w, const void *a);
float quants_avx2_dot_q3_k(size_t n, const void *w, const void *a);
float quants_avx2_dot_q4_k(size_t n, const void *w, const void *a);
float quants_avx2_dot_q5_k(size_t n, const void *w, const void *a);
float quants_avx2_dot_q6_k(size_t n, const void *w, const void *a);
float quants_avx2_dot_iq4_xs(size_t n, const void *w, const void *a);

/* ---- AVX-512 VNNI (quants_avx512.c: quants_avx2.c built with QUANTS_VNNI) ----
 * The same contracts as the AVX2 functions above; the panel GEMM also takes 2+ tokens only. */
int quants_avx512_gemm(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                       const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
float quants_avx512_dot_q4_1(size_t n, const void *w, const void *a);
float quants_avx512_dot_q5_0(size_t n, const void *w, const void *a);
float quants_avx512_dot_q5_1(size_t n, const void *w, const void *a);
float quants_avx512_dot_iq4_nl(size_t n, const void *w, const void *a);
float quants_avx512_dot_q2_k(size_t n, const void *w, const void *a);
float quants_avx512_dot_q3_k(size_t n, const void *w, const void *a);
float quants_avx512_dot_q4_k(size_t n, const void *w, const void *a);
float quants_avx512_dot_q5_k(size_t n, const void *w, const void *a);
float quants_avx512_dot_q6_k(size_t n, const void *w, const void *a);
float quants_avx512_dot_iq4_xs(size_t n, const void *w, const void *a);

/* ---- AMX tiles (kernels_amx.c): AVX-512 + AMX-TILE/INT8/BF16, called only where cpu_kernels.c
 * found them and the kernel granted this process the tile data ---- */
/* 1 for the weight types cpu_amx_gemm takes: F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q4_K,
 * Q5_K and IQ4_XS. */
int cpu_amx_type(enum tensor_type t);
/* The GEMM of cpu_gemm (any n_tok; meant for 2+) on the tile unit; returns 0, doing nothing, for a
 * type cpu_amx_type refuses or when the calling thread's buffers (~1.8 MB, made on its first call,
 * freed when it exits) cannot be allocated. Quantized types: exact int32 sums per 32-block, as the scalar
 * reference, in another float order. F16/BF16: weights split exactly into two bf16 parts, the
 * activations into two (16 significant bits), summed in float: within about 2^-16 relative of
 * the exact dot per product. Configures the tiles on entry and releases them on return. */
int cpu_amx_gemm(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1, const void *a,
                 size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);

#endif
