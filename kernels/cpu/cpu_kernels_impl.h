/* cpu_kernels_impl.h - private to kernels/cpu: what cpu_kernels.c and its ISA files kernels_avx2.c,
 * kernels_avx512.c and kernels_amx.c (and kernels_simd.h, which two of them include) share: the
 * kernel function types, the Q8_0/Q4_0 block sizes and those files' entry points, which
 * cpu_kernels.c's type table names. kernels_avx2.c is built with -mavx2 -mfma -mf16c,
 * kernels_avx512.c with -mavx512f/bw/vl/dq and kernels_amx.c with those and AMX; nothing here may
 * be called unless cpu_kernels_init() found that ISA. The quants types' kernels: quants.h.
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
