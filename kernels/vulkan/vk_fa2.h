/* vk_fa2.h - FlashAttention-2 over the paged KV cache on a Vulkan device.
 *
 * Same contract as the CPU kernel (kernels/cpu/fa2.h): one call takes a struct fa2_args (queries,
 * K/V pools, block tables, causal with pos0, GQA) and writes every sequence's out rows. Prefill
 * chunks (n_q >= 2) run fa2_prefill.comp; decode steps (n_q == 1) run fa2_decode.comp split into
 * up to a->n_split parts of the KV length (never more than blocks) and fa2_reduce.comp.
 * a->scratch is not used (the partial results live on the device).
 *
 * This first slice uploads q, both pools and the block tables on every call and downloads out:
 * correct, not yet fast (the pools should live on the device). */
#ifndef ATTND_VK_FA2_H
#define ATTND_VK_FA2_H

#include "attnd/status.h"
#include "kernels/cpu/fa2.h"
#include "kernels/vulkan/vk_device.h"

struct vkb_fa2;

/* Creates the FA2 runner on dev (pipelines are built lazily per head_dim and group size).
 * dev must outlive it. */
attnd_status vkb_fa2_create(struct vkb_device *dev, struct vkb_fa2 **out);
void vkb_fa2_destroy(struct vkb_fa2 *f); /* NULL: no-op */

/* Computes a (see fa2.h) on the device. Returns ATTND_ERR_INVALID for bad arguments (head
 * counts, head_dim outside 1..FA2_MAX_HEAD_DIM, block ids outside the pool, a block stride that
 * is not a multiple of the element size), ATTND_ERR_RANGE when a buffer or dispatch exceeds a
 * device limit (on lavapipe also a prefill chunk longer than llvmpipe's loop limit allows: 61424
 * keys with the lanes shaders, any head_dim; fewer with the tile shaders, about 12k at head_dim 128
 * and 36k at head_dim 36), other statuses for Vulkan failures (message in vkb_last_error()). On failure the
 * out rows are unspecified. gpu_ms (may be NULL) gets the device time of the dispatches, -1
 * without timestamps. Not thread-safe per f. */
attnd_status vkb_fa2_attend(struct vkb_fa2 *f, const struct fa2_args *a, double *gpu_ms);

/* ---- device-resident use (the Vulkan forward pass) -------------------------------------------
 * A plan holds, on the device, what is the same for every layer of one step: the block tables,
 * the per-sequence offsets and the work-item lists (and scratch for split decode partials). It is
 * built once per step, outside any batch (before vkb_begin()), then recorded once per layer into
 * the open batch with that layer's pool buffers. Its device buffers are reused (grown when
 * needed) from step to step.
 *
 * Layouts on the device: q and out are f32 (T, n_head * head_dim) with the sequences' rows
 * consecutive in a->seqs order (sequences with n_q == 0 take no rows), starting at element
 * q_off / out_off. k and v are the layer's pools, layout of kvcache.h (a->kv_type,
 * a->block_stride bytes between blocks, a->n_blocks blocks), starting at element 0. The q, out,
 * k and v pointers inside a and its seqs are ignored; seqs' n_q, pos0 and block_table are read.
 *
 * vkb_fa2_record() records the dispatches (and the barrier between split decode and its
 * reduce); the caller puts a vkb_barrier() before it (after writing q and the pools) and after
 * it (before reading out). The plan must stay alive and unchanged until the batch is submitted
 * and waited for. */
struct vkb_fa2_plan;

attnd_status vkb_fa2_plan_create(struct vkb_fa2 *f, struct vkb_fa2_plan **out);
void vkb_fa2_plan_destroy(struct vkb_fa2_plan *p); /* NULL: no-op */
/* Validates a (same errors as vkb_fa2_attend) and uploads the step's tables. Builds the
 * pipelines the step needs. Not between vkb_begin() and vkb_submit_wait(). */
attnd_status vkb_fa2_plan_build(struct vkb_fa2_plan *p, const struct fa2_args *a);
attnd_status vkb_fa2_record(struct vkb_fa2_plan *p, struct vkb_buffer *q, size_t q_off, struct vkb_buffer *k,
                            struct vkb_buffer *v, struct vkb_buffer *out, size_t out_off);
/* vkb_fa2_record returns ATTND_ERR_INVALID without recording anything when the plan was not built
 * (or its last build failed), a buffer is NULL, q or out is too small for the plan's rows at
 * q_off / out_off (or an offset does not fit 32 bits), or k or v is smaller than the plan's pools;
 * else the status of vkb_dispatch (ATTND_ERR_INVALID outside a batch, ATTND_ERR_RANGE when the
 * batch is full). It records at most three dispatches and one barrier; any number of records of
 * one plan may go into one batch (one per layer). vkb_fa2_plan_build may be called again for the
 * next step once that batch was waited for; its buffers only grow. A plan may be destroyed only
 * when no batch that uses it is in flight.
 *
 * Shaders: on a CPU device (lavapipe) the lanes shader when head_dim and the block stride (in
 * elements) are multiples of 8: fa2_lanes_tex.comp (the pools read as uniform texel buffers)
 * when a layer's pool fits vkb_limits.max_texel_elements 16-byte texels, else fa2_lanes.comp;
 * otherwise and on GPUs the shared-memory tile shaders (fa2_prefill/fa2_decode.comp).
 * $ATTND_VK_FA2_TILES=1 at vkb_fa2_create() forces the tile shaders, $ATTND_VK_FA2_NO_TEXEL=1
 * fa2_lanes.comp over fa2_lanes_tex.comp. Pipelines are compiled in vkb_fa2_plan_build (on lavapipe seconds per new head_dim /
 * group size / pool type) and cached in the vkb_fa2. */

#endif
