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
 * device limit (on lavapipe also a prefill chunk whose keys exceed the loop limit, about 12k keys at
 * head_dim 128), other statuses for Vulkan failures (message in vkb_last_error()). On failure the
 * out rows are unspecified. gpu_ms (may be NULL) gets the device time of the dispatches, -1
 * without timestamps. Not thread-safe per f. */
attnd_status vkb_fa2_attend(struct vkb_fa2 *f, const struct fa2_args *a, double *gpu_ms);

#endif
