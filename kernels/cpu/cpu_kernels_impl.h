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
/* Bit-identical to the scalar cpu_quantize_row_q8_0. */
void cpu_avx2_quantize_row_q8_0(const float *x, void *dst, size_t n);
/* Hardware F16C conversions (IEEE round-to-nearest-even, same results as the scalar ones). */
void cpu_avx2_f16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void cpu_avx2_f32_to_f16_row(const float *src, uint16_t *dst, size_t n);

/* ---- AVX-512 F/BW/VL/DQ (kernels_avx512.c) ---- */
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

#endif
