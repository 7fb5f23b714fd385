/* forward_vk.h - private to forward.c: one forward step on a Vulkan device.
 *
 * The same computation as fwd_eval_batch() on the CPU (see forward.c), recorded as one batch of
 * compute dispatches (kernels/vulkan/vk_ops.h for the products and element-wise steps,
 * vk_fa2.h for attention) and submitted once per step:
 *   embed -> per layer [rmsnorm, q/k/v products (+bias), RoPE, K/V write into the paged pools,
 *   FA2, W_o product, residual add, rmsnorm, gate/up products, SwiGLU, down product, residual
 *   add] -> gather the rows that want logits -> rmsnorm -> output product -> download.
 *
 * Shared state: the Vulkan device and its pipelines are made once per device index and kept for
 * the life of the process; the weights are uploaded once per (model, device) and shared by every
 * context on them (reference counted). Steps and uploads on one device are serialised by its
 * mutex (a Vulkan device here is used by one thread at a time).
 * Per context: activation buffers for n_batch tokens, the FA2 plan, and the K/V pools of each
 * kv_cache it has run on (device copies with the same block ids; the device is the only place
 * the K/V of those caches are written).
 *
 * Nothing here exits or prints; failures are statuses with a reason (vkb_last_error()). */
#ifndef ATTND_FORWARD_VK_H
#define ATTND_FORWARD_VK_H

#include <stdbool.h>
#include <stddef.h>

#include "attnd/forward.h"

struct vkf;

/* What a step should copy out besides logits (the probes of forward.h), or NULL. */
struct vkf_probe {
    int layer;           /* attention probe layer, or -1 */
    float *q, *att;      /* indexed by position: [pos * n_head * head_dim]; either may be NULL */
    int resid_pos;       /* residual-stream probe position, or -1 */
    float *resid;        /* [layer * n_embd] */
};

/* Creates the Vulkan side of a forward context. device_index: -1 = best device (discrete, then
 * integrated, then CPU), else the index in vkEnumeratePhysicalDevices order. rope_inv_freq:
 * n_rot/2 inverse frequencies (already divided by rope_freqs), copied. On failure *out is NULL
 * and why holds a one-line reason. need_gpu: fail (ATTND_ERR_UNSUPPORTED) when the chosen device
 * is a CPU device, before any pipeline or weight is made. */
attnd_status vkf_create(const struct model *m, int device_index, int n_batch, const double *rope_inv_freq,
                        bool need_gpu, struct vkf **out, char *why, size_t why_n);
void vkf_destroy(struct vkf *v); /* NULL: no-op */

const char *vkf_device_name(const struct vkf *v);
bool vkf_device_is_cpu(const struct vkf *v);
/* Validation-layer errors reported on this context's device so far (0 without validation). */
unsigned vkf_validation_errors(const struct vkf *v);

/* One step (arguments already checked by fwd_eval_batch). pos[t]: each token's position. After
 * a step with probe->layer >= 0 the host pools of kv (when kv has storage) hold that layer's
 * K/V, so fwd_attention_weights() and fwd_cache_v() read what the device computed. Commits the
 * sequences on success. */
attnd_status vkf_eval_batch(struct vkf *v, struct kv_cache *kv, const struct fwd_seq *seqs, int n_seqs, int T,
                            const int32_t *pos, const struct vkf_probe *probe);

#endif
