/* quants.h - private to kernels/cpu: the kernels of the K-quant (Q2_K..Q6_K), IQ4_NL/IQ4_XS and
 * Q4_1/Q5_0/Q5_1 weight types (block layouts: attnd/tensor.h), which cpu_kernels.c's type table
 * names. quants.c holds the scalar references, dequantization and the Q8_K activation quantizer;
 * quants_avx2.c the AVX2 kernels (callable only when the CPU has AVX2+FMA+F16C), built a second
 * time as quants_avx512.c with AVX-512 VNNI (callable only with AVX-512 F/BW/VL/DQ + VNNI).
 *
 * Activations: K-quants and IQ4_XS take Q8_K (256 values: f32 d, i8 qs[256], i16 bsums[16] =
 * sums of each 16), the 32-blocks take Q8_0 (tensor_dot_type), as the reference engine does.
 * All functions are pure and thread-safe; pointers need only byte alignment. This header uses
 * nothing of kernels/cpu: cpu_kernels.c includes it, not the other way round. */
#ifndef ATTND_QUANTS_H
#define ATTND_QUANTS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "attnd/tensor.h"

#define QUANTS_QK_K 256
#define QUANTS_Q8_K_BYTES 292

/* A dot of one weight row (n elements) with one prepared activation row (cpu_vec_dot_fn's shape). */
typedef float (*quants_dot_fn)(size_t n, const void *w, const void *a);

/* An f16 at any alignment, as f32. */
static inline float quants_ld_f16(const unsigned char *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return tensor_f16_to_f32(v);
}

/* The 16 IQ4 codebook values. */
extern const int8_t quants_iq4nl_values[16];

/* ---- scalar (quants.c) ---- */
/* Dequantizes n elements (a multiple of t's block size) of a type of this module. */
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
/* The scalar reference dots: exact integer sums per block (per sub-block for the K-types), summed
 * in float. */
float quants_ref_dot_q4_1(size_t n, const void *w, const void *a);
float quants_ref_dot_q5_0(size_t n, const void *w, const void *a);
float quants_ref_dot_q5_1(size_t n, const void *w, const void *a);
float quants_ref_dot_iq4_nl(size_t n, const void *w, const void *a);
float quants_ref_dot_q2_k(size_t n, const void *w, const void *a);
float quants_ref_dot_q3_k(size_t n, const void *w, const void *a);
float quants_ref_dot_q4_k(size_t n, const void *w, const void *a);
float quants_ref_dot_q5_k(size_t n, const void *w, const void *a);
float quants_ref_dot_q6_k(size_t n, const void *w, const void *a);
float quants_ref_dot_iq4_xs(size_t n, const void *w, const void *a);
/* y[j*y_stride + r] = dot(W row r, A row j) for r in [r0, r1), j < n_tok, one weight row at a time
 * (so it stays in cache for every token). */
void quants_gemm(quants_dot_fn dot, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                 const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);

/* ---- AVX2 (quants_avx2.c) ---- */
/* The int8 panel GEMM of cpu_gemm for n_tok >= 2 (weights unpacked to int8 panels once per 64
 * tokens, 8 rows x 4 tokens per tile), for the types cpu_kernels.c's table gives it: Q4_0 and every
 * type of this module but Q2_K (and Q8_0 in the VNNI build). Returns 0, doing nothing, for
 * n_tok < 2. Sums in a different order than the dots: equal to the reference dot's within float
 * rounding. */
int quants_avx2_gemm(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                     const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
/* The small-batch GEMM of cpu_gemm (the batch family, 2..32 tokens; any n_tok >= 2 works) for Q8_0,
 * Q4_0, Q4_1, Q5_1, Q4_K and Q5_K weights: 4 rows per tile, a group of tokens in the int32 lanes of
 * one vector, each broadcast of a few weight bytes meeting the whole group; the weights unpacked
 * only as far as one xor/abs (Q8_0) or one nibble split (Q4_0) per block (the min types: the panel
 * GEMM's unpacking), the zero-point correction paid per token instead of per row. Returns 0, doing
 * nothing, for other types and n_tok < 2. Exact int32 sums per block; another float order than
 * the reference (fma, and sums per chunk of 64 blocks). AVX2 build (256-bit maddubs, 8 tokens a
 * group, Q8_0 through the sign trick) and VNNI build (512-bit vpdpbusd, 8 tokens a group, 4 for
 * up to 4 tokens). */
int quants_avx2_batch(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                      const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
int quants_avx512_batch(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                        const void *a, size_t a_row_bytes, size_t n_tok, float *y, size_t y_stride);
/* The matrix-vector product of Q8_0, Q4_0 (rows over 32768 weights declined), Q4_K, Q5_K or Q6_K
 * weights (rows [r0, r1)) with one prepared activation row, reading four rows at once: y[r] = the
 * dot of row r; returns 0, doing nothing, for other types (the VNNI build also takes Q5_0). Exact
 * int32 sums per block like the scalar reference; another float order. AVX2 build (maddubs) and
 * VNNI build (vpdpbusd). */
int quants_avx2_matvec_q(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                         const void *a, float *y);
int quants_avx512_matvec_q(enum tensor_type t, size_t n, const void *w, size_t w_row_bytes, size_t r0, size_t r1,
                           const void *a, float *y);
/* One weight row's 32-blocks [b0, b0 + nb) (K-types: multiples of 8) as int8 for a matrix unit: block
 * b0 + i's weights at q + 32 i (q 32-byte aligned), its scale at s[i] and its min at m[i], w = s * q - m
 * (m 0 for the types without). Returns 0, writing nothing, for Q2_K, Q3_K and Q6_K (scales per 16
 * weights) and the types the panel GEMM does not take. */
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
 * The same contracts as the AVX2 functions above. */
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

#endif
