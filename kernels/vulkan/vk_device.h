/* vk_device.h - the Vulkan device layer (prefix vkb_, to keep it apart from the API's vk*).
 *
 * One struct vkb_device owns an instance, one physical device, one logical device with one
 * compute queue, a command buffer, a descriptor pool and (optionally) a timestamp query pool.
 * Buffers and compute pipelines are created on it; work is recorded between vkb_begin() and
 * vkb_submit_wait() (one batch in flight at a time, synchronous).
 *
 * Errors: every failing Vulkan call becomes an attnd_status (ATTND_ERR_UNSUPPORTED: no usable
 * device or feature; ATTND_ERR_NOMEM: out of host or device memory; ATTND_ERR_RANGE: a size over
 * a device limit; ATTND_ERR_INTERNAL: anything else) and a message readable with
 * vkb_last_error() on the same thread. Nothing here prints to stdout or exits.
 *
 * Thread safety: a device and everything created on it must be used by one thread at a time. */
#ifndef ATTND_VK_DEVICE_H
#define ATTND_VK_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

struct vkb_device;
struct vkb_buffer;
struct vkb_pipeline;

struct vkb_device_opts {
    int device_index; /* -1: best (discrete, then integrated, then virtual, then CPU); else the
                       * index in vkEnumeratePhysicalDevices order ($ATTND_VK_DEVICE overrides -1) */
    int validation;   /* -1: from $ATTND_VK_VALIDATION (1 = on); 0 off; 1 on (needs
                       * VK_LAYER_KHRONOS_validation; ATTND_ERR_UNSUPPORTED without it) */
    int timestamps;   /* 1: time each submitted batch on the device if the queue supports it */
};

/* What the device can do, queried once at creation. */
struct vkb_limits {
    char name[256];                 /* deviceName */
    int is_cpu;                     /* VK_PHYSICAL_DEVICE_TYPE_CPU (lavapipe): host-visible buffers */
    int is_discrete;
    uint32_t max_shared_bytes;      /* maxComputeSharedMemorySize */
    uint32_t subgroup_size;         /* VkPhysicalDeviceSubgroupProperties.subgroupSize */
    uint32_t max_storage_range;     /* maxStorageBufferRange, bytes */
    uint32_t max_wg_size[3];        /* maxComputeWorkGroupSize */
    uint32_t max_wg_invocations;    /* maxComputeWorkGroupInvocations */
    uint32_t max_wg_count[3];       /* maxComputeWorkGroupCount */
    uint32_t max_push_bytes;        /* maxPushConstantsSize */
    int has_f16_storage;            /* storageBuffer16BitAccess (not required: shaders unpack halves) */
    int has_timestamps;             /* timestamps enabled and supported */
    uint32_t max_texel_elements;    /* maxTexelBufferElements (texels of a texel-buffer view) */
};

/* Creates the device. opts may be NULL (all defaults: auto device, validation from the
 * environment, no timestamps). On failure *out is NULL and nothing is leaked. */
attnd_status vkb_device_create(const struct vkb_device_opts *opts, struct vkb_device **out);

/* Waits for the device to be idle and frees everything; NULL is a no-op. Buffers and pipelines
 * must be destroyed first. */
void vkb_device_destroy(struct vkb_device *dev);

const struct vkb_limits *vkb_device_limits(const struct vkb_device *dev);

/* Validation-layer messages of severity ERROR seen so far (0 when validation is off). */
unsigned vkb_validation_errors(const struct vkb_device *dev);

/* The message of the last failure on this thread ("" if none). */
const char *vkb_last_error(void);

/* ---- buffers: storage buffers, host-visible when the device is the CPU (or memory allows),
 * else device-local with transfers through a temporary staging buffer. ---- */
attnd_status vkb_buffer_create(struct vkb_device *dev, size_t bytes, struct vkb_buffer **out);
void vkb_buffer_destroy(struct vkb_device *dev, struct vkb_buffer *buf); /* NULL: no-op */
size_t vkb_buffer_size(const struct vkb_buffer *buf);
/* Host pointer to the whole buffer when its memory is host-visible and coherent (always on a CPU
 * device), else NULL. Writes through it must not race a batch that reads the buffer. */
void *vkb_buffer_map(const struct vkb_buffer *buf);
/* Copies n bytes between host memory and the buffer at offset off (synchronous). Not allowed
 * between vkb_begin() and vkb_submit_wait(). */
attnd_status vkb_buffer_write(struct vkb_device *dev, struct vkb_buffer *buf, size_t off, const void *src, size_t n);
attnd_status vkb_buffer_read(struct vkb_device *dev, struct vkb_buffer *buf, size_t off, void *dst, size_t n);

/* ---- compute pipelines from embedded SPIR-V ----
 * n_bindings storage buffers at bindings 0..n_bindings-1 of set 0, push_bytes of push
 * constants, spec[i] (4-byte values) given to constant_id i for i < n_spec. */
attnd_status vkb_pipeline_create(struct vkb_device *dev, const uint32_t *spv, size_t spv_bytes, uint32_t n_bindings,
                                 uint32_t push_bytes, const uint32_t *spec, uint32_t n_spec, struct vkb_pipeline **out);
/* The same, with the bindings whose bit is set in texel_mask declared as uniform texel buffers
 * (GLSL `uniform usamplerBuffer`, read with texelFetch) instead of storage buffers: the buffer
 * bound there is seen through an R32G32B32A32_UINT view (16 bytes a texel, made on first use,
 * covering min(size / 16, max_texel_elements) texels). A CPU device (lavapipe) fetches texels
 * through its vectorised sampler path, about 10x cheaper than lane-divergent storage loads. */
attnd_status vkb_pipeline_create_texel(struct vkb_device *dev, const uint32_t *spv, size_t spv_bytes,
                                       uint32_t n_bindings, uint32_t texel_mask, uint32_t push_bytes,
                                       const uint32_t *spec, uint32_t n_spec, struct vkb_pipeline **out);
void vkb_pipeline_destroy(struct vkb_device *dev, struct vkb_pipeline *p); /* NULL: no-op */

/* ---- recording and submitting ---- */
/* Starts a batch: resets the command buffer and descriptor pool. */
attnd_status vkb_begin(struct vkb_device *dev);
/* Records a dispatch of p with bufs[0..n_bufs-1] at bindings 0.. and push (p's push_bytes).
 * ATTND_ERR_RANGE if a group count exceeds the device limit or the batch has too many dispatches. */
attnd_status vkb_dispatch(struct vkb_device *dev, struct vkb_pipeline *p, struct vkb_buffer *const *bufs,
                          uint32_t n_bufs, const void *push, uint32_t gx, uint32_t gy, uint32_t gz);
/* Makes the writes of earlier dispatches visible to later ones. */
void vkb_barrier(struct vkb_device *dev);
/* Submits the batch and waits for it. gpu_ms (may be NULL) gets the device time of the batch,
 * or -1 without timestamps. */
attnd_status vkb_submit_wait(struct vkb_device *dev, double *gpu_ms);

#endif
