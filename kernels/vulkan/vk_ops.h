/* vk_ops.h - the element-wise and matrix compute shaders the Vulkan forward pass needs
 * (everything except attention, which is vk_fa2.h).
 *
 * Every vkb_op_* RECORDS one (or a few) dispatches into the batch currently open on the device
 * (between vkb_begin() and vkb_submit_wait()); nothing is submitted or waited for here. The caller
 * puts vkb_barrier() between an op and a later op that reads what it wrote. Ops never read host
 * memory: every operand is a struct vkb_buffer. Offsets (`*_off`) are in ELEMENTS of the operand's
 * own type (floats for f32 operands, int32 for index buffers, bytes for weights), so one buffer
 * can hold several operands.
 *
 * Weight matrices keep their GGUF layout: n_out rows of n_in elements, row r at byte r *
 * row_bytes, in one of F32, F16, BF16, Q8_0 (blocks of 32: f16 scale + 32 int8) or Q4_0 (blocks
 * of 32: f16 scale + 16 bytes of nibbles, low nibbles = elements 0..15, value (q - 8) * scale).
 * Activations are f32; products are accumulated in f32 (activations are NOT quantized, unlike
 * the CPU path for Q8_0/Q4_0 weights, so results differ from it by the activation rounding).
 *
 * Pipelines are built lazily on first use and cached in the struct vkb_ops (one per shader and
 * specialisation). Errors: ATTND_ERR_INVALID for bad arguments (unsupported type, zero sizes,
 * an operand that does not fit its buffer), ATTND_ERR_RANGE for a dispatch over a device limit,
 * other statuses from vk_device.h (message in vkb_last_error()). Not thread-safe per ops.
 *
 * Clarifications (vk_ops.c):
 *   - Shaders read weights as 32-bit words: the bytes of a weight operand, rounded up to a whole
 *     word, must lie inside its buffer (pad odd-sized Q8_0/Q4_0 tensors to a multiple of 4).
 *     F32 weights need w_off and row_bytes multiples of 4, F16/BF16 multiples of 2; Q8_0/Q4_0
 *     may start at any byte. row_bytes >= the row's size. Otherwise ATTND_ERR_INVALID.
 *   - Offsets and counts travel as 32-bit values: off + count < 2^32 elements (always true for
 *     buffers within maxStorageBufferRange).
 *   - Loop trip counts per shader invocation stay far below lavapipe's limit; sizes past what
 *     the shaders allow for that are ATTND_ERR_RANGE: matmul n_in > 131072, rmsnorm d > 2^20.
 *   - Outputs must not alias inputs, except where an op says so (rmsnorm out == x; the in-place
 *     ops). */
#ifndef ATTND_VK_OPS_H
#define ATTND_VK_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"
#include "attnd/tensor.h"
#include "kernels/vulkan/vk_device.h"

struct vkb_ops;

attnd_status vkb_ops_create(struct vkb_device *dev, struct vkb_ops **out);
void vkb_ops_destroy(struct vkb_ops *ops); /* NULL: no-op */

/* Builds now every pipeline the ops below may need for these weight types (so the first
 * forward step does not pay for shader compilation, and a pipeline that fails to build is
 * known at load time). types: n_types distinct tensor types used by the model's matrices. */
attnd_status vkb_ops_prepare(struct vkb_ops *ops, const enum tensor_type *types, int n_types);
/* 1 if the matmul and get_rows shaders decode weights of type t: F32, F16, BF16, Q8_0, Q4_0,
 * Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K, IQ4_XS. */
int vkb_type_supported(enum tensor_type t);

/* dst[i, 0..d) = dequantised row idx[idx_off + i] of the table src (rows of d elements of type
 * `type`, row_bytes apart, starting at byte src_off), for i < n. Embedding lookup, and with an
 * F32 table the gathering of residual-stream rows. idx values are trusted (checked by the host):
 * only the first table row is checked against src. d must be a multiple of 32 for Q8_0/Q4_0. */
attnd_status vkb_op_get_rows(struct vkb_ops *ops, enum tensor_type type, struct vkb_buffer *src, size_t src_off,
                             size_t row_bytes, struct vkb_buffer *idx, size_t idx_off, uint32_t n, uint32_t d,
                             struct vkb_buffer *dst, size_t dst_off);
/* The same over one part of a table split across buffers (weights larger than
 * maxStorageBufferRange): src holds table rows row_lo..row_hi-1, row_lo at byte src_off; rows
 * idx selects outside that range are left untouched in dst (another part's dispatch writes them). */
attnd_status vkb_op_get_rows_part(struct vkb_ops *ops, enum tensor_type type, struct vkb_buffer *src, size_t src_off,
                                  size_t row_bytes, uint32_t row_lo, uint32_t row_hi, struct vkb_buffer *idx,
                                  size_t idx_off, uint32_t n, uint32_t d, struct vkb_buffer *dst, size_t dst_off);

/* out[r] = x[r] * (1 / sqrt(mean(x[r]^2) + eps)) * w for n_rows rows of d floats (the mean of
 * squares accumulated in f32 with a tree reduction). out may equal x. */
attnd_status vkb_op_rmsnorm(struct vkb_ops *ops, struct vkb_buffer *x, size_t x_off, struct vkb_buffer *w, size_t w_off,
                            struct vkb_buffer *out, size_t out_off, uint32_t n_rows, uint32_t d, float eps);

/* y (n_tok, n_out) = x (n_tok, n_in) · Wᵀ (+ bias (n_out), when bias != NULL), rows of y n_out
 * apart (dense), rows of x n_in apart. W as described above (type, row_bytes, starting at byte
 * w_off). On GPUs: a matrix-vector shader for small n_tok (<= 8: op_matvec.comp), a tiled shader
 * otherwise (op_matmul.comp). On CPU devices (lavapipe, which runs every lane-divergent storage
 * load as a loop over the lanes): op_matmul_lanes.comp, whole dot products per lane with 16-byte
 * texel fetches of w and x (uniform texel buffer views, served by lavapipe's vectorised sampler
 * path), or 16-byte storage loads when w or x is too large for a texel view (more than
 * max_texel_elements * 16 bytes; $ATTND_VK_OPS_NO_TEXEL=1 forces these, for tests)
 * ($ATTND_VK_OPS_GPU_SHADERS=1 forces the GPU shaders there, for tests). n_in must be a multiple of 32 for Q8_0/Q4_0 (any n_in for
 * F32/F16/BF16). bias_off is ignored without a bias. */
attnd_status vkb_op_matmul(struct vkb_ops *ops, enum tensor_type wtype, struct vkb_buffer *w, size_t w_off,
                           size_t row_bytes, uint32_t n_in, uint32_t n_out, struct vkb_buffer *x, size_t x_off,
                           uint32_t n_tok, struct vkb_buffer *bias, size_t bias_off, struct vkb_buffer *y,
                           size_t y_off);
/* The same with rows of y ldy >= n_out floats apart: y[t * ldy + r] for r < n_out, the rest of
 * each row untouched. A weight split by rows across buffers writes its parts' columns of one y
 * (part p: w = its buffer, n_out = its rows, y_off = its first row, bias_off advanced as much). */
attnd_status vkb_op_matmul_ld(struct vkb_ops *ops, enum tensor_type wtype, struct vkb_buffer *w, size_t w_off,
                              size_t row_bytes, uint32_t n_in, uint32_t n_out, struct vkb_buffer *x, size_t x_off,
                              uint32_t n_tok, struct vkb_buffer *bias, size_t bias_off, struct vkb_buffer *y,
                              size_t y_off, uint32_t ldy);

/* Rotates, in place, the first n_rot dims of each of n_heads vectors (head_dim apart) of each
 * of n_tok rows of x (rows n_heads * head_dim apart). cs holds per token t and pair i < n_rot/2
 * the pair (cos θ, sin θ) at cs[cs_off + (t * (n_rot/2) + i) * 2 + {0,1}] (the host computes θ =
 * pos * inv_freq[i] in double). neox = 1: pairs (i, i + n_rot/2) (qwen2, NEOX); 0: pairs
 * (2i, 2i+1) (llama, adjacent). */
/* n_rot must be even and 2 <= n_rot <= head_dim. */
attnd_status vkb_op_rope(struct vkb_ops *ops, struct vkb_buffer *x, size_t x_off, struct vkb_buffer *cs, size_t cs_off,
                         uint32_t n_tok, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot, int neox);

/* x[i] += y[i] for i < n. */
attnd_status vkb_op_add(struct vkb_ops *ops, struct vkb_buffer *x, size_t x_off, struct vkb_buffer *y, size_t y_off,
                        uint32_t n);

/* gate[i] = silu(gate[i]) * up[i] for i < n, silu(g) = g / (1 + exp(-g)). */
attnd_status vkb_op_swiglu(struct vkb_ops *ops, struct vkb_buffer *gate, size_t gate_off, struct vkb_buffer *up,
                           size_t up_off, uint32_t n);

/* Writes n_tok rows of src (each n_head_kv * head_dim floats, dense) into a paged pool with
 * the kvcache.h layout [block][kv_head][16][head_dim]: token t goes to physical block
 * slot[slot_off + t] / 16, slot slot[slot_off + t] % 16, i.e. element
 *     (slot / 16) * block_stride + (h * 16 + slot % 16) * head_dim + e
 * of pool (block_stride in elements), stored as F16 (round to nearest even) when f16 != 0,
 * else F32. The pool is uint32-addressed: for F16 two halves share a word, so the shader
 * must not race on a word shared by two tokens (head_dim is even in every model; odd head_dim
 * returns ATTND_ERR_INVALID for F16, and so does an odd block_stride). block_stride must be at
 * least n_head_kv * 16 * head_dim and the pool must hold at least one block (ATTND_ERR_INVALID).
 * Slot values are trusted like get_rows' idx, but a word past the end of the pool is skipped,
 * never written. */
attnd_status vkb_op_kv_write(struct vkb_ops *ops, struct vkb_buffer *src, size_t src_off, struct vkb_buffer *slot,
                             size_t slot_off, uint32_t n_tok, uint32_t n_head_kv, uint32_t head_dim,
                             struct vkb_buffer *pool, uint32_t block_stride, int f16);

#endif
