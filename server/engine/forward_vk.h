/* forward_vk.h - private to server/engine: one forward step on a Vulkan device, the "vulkan"
 * implementation of forward_backend.h.
 *
 * The same computation as the CPU backend (see forward_cpu.c), recorded as one batch of
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
 * Work with no device path (the logit lens' projection, fwd_project) runs on a state of the host
 * backend cfg->host (the CPU kernels) that each context makes beside its device buffers; create
 * fails (ATTND_ERR_INVALID) without one. Its table, fwd_vk_backend, is declared in
 * forward_backend.h.
 *
 * Nothing here exits or prints; failures are statuses with a reason (vkb_last_error(), and the create
 * op's why). create with cfg->need_gpu fails (ATTND_ERR_UNSUPPORTED) when the chosen device is a
 * CPU device, before any pipeline or weight is made; cfg->vk_device -1 is the best device
 * (discrete, then integrated, then CPU). */
#ifndef ATTND_FORWARD_VK_H
#define ATTND_FORWARD_VK_H

#include "server/engine/forward_backend.h"

#endif
