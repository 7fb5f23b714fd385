/* vk_device.c - Vulkan instance, device, buffers, pipelines and submission (see vk_device.h). */
#include "kernels/vulkan/vk_device.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

#include "attnd/log.h"

#define VKB_MAX_SETS 2048    /* dispatches per batch (a whole forward step is one batch) */
#define VKB_MAX_BINDINGS 16  /* storage buffers per pipeline */

struct vkb_device {
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    VkPhysicalDevice phys;
    VkDevice device;
    VkQueue queue;
    uint32_t queue_family;
    VkCommandPool cmd_pool;
    VkCommandBuffer cmd;  /* the batch */
    VkCommandBuffer xfer; /* staging copies */
    VkFence fence;
    VkDescriptorPool desc_pool;
    VkQueryPool query_pool;
    float timestamp_period; /* ns per tick */
    uint64_t timestamp_mask;
    VkPhysicalDeviceMemoryProperties mem;
    struct vkb_limits lim;
    unsigned validation_errors;
    int recording;
    int n_sets;
};

struct vkb_buffer {
    VkBuffer buf;
    VkDeviceMemory mem;
    size_t size;
    void *map; /* non-NULL when host-visible and coherent */
    VkBufferView view; /* R32G32B32A32_UINT view for texel bindings, made on first use */
};

struct vkb_pipeline {
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout layout;
    VkPipeline pipeline;
    uint32_t n_bindings, push_bytes;
    uint32_t texel_mask; /* bindings declared as uniform texel buffers */
};

/* ------------------------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------------------------ */

static _Thread_local char g_err[512];

const char *vkb_last_error(void) { return g_err; }

__attribute__((format(printf, 2, 3))) static attnd_status fail(attnd_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    log_debug("vulkan: %s", g_err);
    return st;
}

static const char *vk_result_str(VkResult r)
{
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    default: return "VkResult";
    }
}

/* Maps a failed VkResult to a status and records "what: VK_ERROR_... (code)". */
static attnd_status vk_fail(VkResult r, const char *what)
{
    attnd_status st = ATTND_ERR_INTERNAL;
    if (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_POOL_MEMORY ||
        r == VK_ERROR_FRAGMENTED_POOL)
        st = ATTND_ERR_NOMEM;
    else if (r == VK_ERROR_INCOMPATIBLE_DRIVER || r == VK_ERROR_LAYER_NOT_PRESENT ||
             r == VK_ERROR_EXTENSION_NOT_PRESENT || r == VK_ERROR_FEATURE_NOT_PRESENT ||
             r == VK_ERROR_INITIALIZATION_FAILED)
        st = ATTND_ERR_UNSUPPORTED;
    return fail(st, "%s: %s (%d)", what, vk_result_str(r), (int)r);
}

#define VK_TRY(call)                                                                                                   \
    do {                                                                                                               \
        VkResult r_ = (call);                                                                                          \
        if (r_ != VK_SUCCESS) {                                                                                        \
            st = vk_fail(r_, #call);                                                                                   \
            goto err;                                                                                                  \
        }                                                                                                              \
    } while (0)

/* ------------------------------------------------------------------------------------------
 * Device
 * ------------------------------------------------------------------------------------------ */

static VKAPI_ATTR VkBool32 VKAPI_CALL debug_cb(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                               VkDebugUtilsMessageTypeFlagsEXT type,
                                               const VkDebugUtilsMessengerCallbackDataEXT *data, void *user)
{
    struct vkb_device *dev = user;
    if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
        dev->validation_errors++;
        log_error("vulkan validation: %s", data && data->pMessage ? data->pMessage : "?");
    } else if (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
        log_warn("vulkan validation: %s", data && data->pMessage ? data->pMessage : "?");
    }
    return VK_FALSE;
}

static int has_layer(const char *name)
{
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return 0;
    VkLayerProperties *p = calloc(n, sizeof *p);
    int found = 0;
    if (p && vkEnumerateInstanceLayerProperties(&n, p) == VK_SUCCESS)
        for (uint32_t i = 0; i < n; i++) found |= strcmp(p[i].layerName, name) == 0;
    free(p);
    return found;
}

static int type_rank(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 3;
    default: return 4;
    }
}

static int compute_family(VkPhysicalDevice pd, uint32_t *fam, uint32_t *ts_bits)
{
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, NULL);
    if (n == 0) return 0;
    VkQueueFamilyProperties *q = calloc(n, sizeof *q);
    if (!q) return 0;
    vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, q);
    int found = 0;
    /* prefer a compute family without graphics (an async compute queue) */
    for (int pass = 0; pass < 2 && !found; pass++)
        for (uint32_t i = 0; i < n && !found; i++) {
            if (!(q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) || q[i].queueCount == 0) continue;
            if (pass == 0 && (q[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) continue;
            *fam = i;
            *ts_bits = q[i].timestampValidBits;
            found = 1;
        }
    free(q);
    return found;
}

static attnd_status pick_device(struct vkb_device *d, int index)
{
    uint32_t n = 0;
    VkResult r = vkEnumeratePhysicalDevices(d->instance, &n, NULL);
    if (r != VK_SUCCESS) return vk_fail(r, "vkEnumeratePhysicalDevices");
    if (n == 0) return fail(ATTND_ERR_UNSUPPORTED, "no Vulkan physical device (is mesa-vulkan-drivers installed?)");
    VkPhysicalDevice *pds = calloc(n, sizeof *pds);
    if (!pds) return fail(ATTND_ERR_NOMEM, "out of memory");
    r = vkEnumeratePhysicalDevices(d->instance, &n, pds);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        free(pds);
        return vk_fail(r, "vkEnumeratePhysicalDevices");
    }
    int best = -1, best_rank = 99;
    uint32_t fam = 0, ts = 0;
    if (index >= 0) {
        if ((uint32_t)index >= n || !compute_family(pds[index], &fam, &ts)) {
            free(pds);
            return fail(ATTND_ERR_NOTFOUND, "Vulkan device %d: not present or without a compute queue (%u devices)",
                        index, n);
        }
        best = index;
    } else {
        for (uint32_t i = 0; i < n; i++) {
            VkPhysicalDeviceProperties p;
            vkGetPhysicalDeviceProperties(pds[i], &p);
            uint32_t f, t;
            if (p.apiVersion < VK_API_VERSION_1_2 || !compute_family(pds[i], &f, &t)) continue;
            if (type_rank(p.deviceType) < best_rank) {
                best_rank = type_rank(p.deviceType);
                best = (int)i;
            }
        }
        if (best < 0) {
            free(pds);
            return fail(ATTND_ERR_UNSUPPORTED, "no Vulkan 1.2 device with a compute queue among %u devices", n);
        }
        compute_family(pds[best], &fam, &ts);
    }
    d->phys = pds[best];
    d->queue_family = fam;
    d->timestamp_mask = ts >= 64 ? ~0ull : ts ? (1ull << ts) - 1 : 0;
    free(pds);
    return ATTND_OK;
}

static void query_limits(struct vkb_device *d)
{
    VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
    vkGetPhysicalDeviceProperties2(d->phys, &p2);
    const VkPhysicalDeviceLimits *l = &p2.properties.limits;
    struct vkb_limits *o = &d->lim;
    snprintf(o->name, sizeof o->name, "%s", p2.properties.deviceName);
    o->is_cpu = p2.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
    o->is_discrete = p2.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
    o->max_shared_bytes = l->maxComputeSharedMemorySize;
    o->subgroup_size = sg.subgroupSize;
    o->max_storage_range = l->maxStorageBufferRange;
    o->max_texel_elements = l->maxTexelBufferElements;
    for (int i = 0; i < 3; i++) {
        o->max_wg_size[i] = l->maxComputeWorkGroupSize[i];
        o->max_wg_count[i] = l->maxComputeWorkGroupCount[i];
    }
    o->max_wg_invocations = l->maxComputeWorkGroupInvocations;
    o->max_push_bytes = l->maxPushConstantsSize;
    d->timestamp_period = l->timestampPeriod;
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
    vkGetPhysicalDeviceFeatures2(d->phys, &f2);
    o->has_f16_storage = f11.storageBuffer16BitAccess == VK_TRUE;
    vkGetPhysicalDeviceMemoryProperties(d->phys, &d->mem);
}

/* The options with their defaults and environment overrides filled in. */
static struct vkb_device_opts resolve_opts(const struct vkb_device_opts *opts)
{
    struct vkb_device_opts o = {.device_index = -1, .validation = -1, .timestamps = 0};
    if (opts) o = *opts;
    if (o.validation < 0) {
        const char *e = getenv("ATTND_VK_VALIDATION");
        o.validation = e && strcmp(e, "1") == 0;
    }
    if (o.device_index < 0) {
        const char *e = getenv("ATTND_VK_DEVICE");
        if (e && *e) o.device_index = atoi(e);
    }
    return o;
}

/* The instance, with the validation layer and its messenger when o asks for them. */
static attnd_status create_instance(struct vkb_device *d, const struct vkb_device_opts *o)
{
    attnd_status st = ATTND_OK;
    const VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                   .pApplicationName = "attnd",
                                   .pEngineName = "attnd",
                                   .apiVersion = VK_API_VERSION_1_2};
    const char *layers[] = {"VK_LAYER_KHRONOS_validation"};
    const char *exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
    VkDebugUtilsMessengerCreateInfoEXT dbg = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = debug_cb,
        .pUserData = d};
    const VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                      .pNext = o->validation ? &dbg : NULL,
                                      .pApplicationInfo = &app,
                                      .enabledLayerCount = o->validation ? 1 : 0,
                                      .ppEnabledLayerNames = layers,
                                      .enabledExtensionCount = o->validation ? 1 : 0,
                                      .ppEnabledExtensionNames = exts};
    VK_TRY(vkCreateInstance(&ici, NULL, &d->instance));
    if (o->validation) {
        PFN_vkCreateDebugUtilsMessengerEXT fn =
            (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(d->instance, "vkCreateDebugUtilsMessengerEXT");
        if (!fn) return fail(ATTND_ERR_UNSUPPORTED, "vkCreateDebugUtilsMessengerEXT not available");
        VK_TRY(fn(d->instance, &dbg, NULL, &d->messenger));
    }
err:
    return st;
}

/* The logical device and its queue. */
static attnd_status create_logical_device(struct vkb_device *d)
{
    attnd_status st = ATTND_OK;
    const float prio = 1.0f;
    const VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                         .queueFamilyIndex = d->queue_family,
                                         .queueCount = 1,
                                         .pQueuePriorities = &prio};
    const VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                                    .queueCreateInfoCount = 1,
                                    .pQueueCreateInfos = &qci};
    VK_TRY(vkCreateDevice(d->phys, &dci, NULL, &d->device));
    vkGetDeviceQueue(d->device, d->queue_family, 0, &d->queue);
err:
    return st;
}

/* The command pool with the compute and transfer command buffers, the fence, the descriptor
 * pool, and the timestamp query pool when asked for and supported. */
static attnd_status create_pools(struct vkb_device *d, const struct vkb_device_opts *o)
{
    attnd_status st = ATTND_OK;
    const VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                         .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                         .queueFamilyIndex = d->queue_family};
    VK_TRY(vkCreateCommandPool(d->device, &cpi, NULL, &d->cmd_pool));
    VkCommandBuffer cbs[2];
    const VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                             .commandPool = d->cmd_pool,
                                             .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                             .commandBufferCount = 2};
    VK_TRY(vkAllocateCommandBuffers(d->device, &cai, cbs));
    d->cmd = cbs[0];
    d->xfer = cbs[1];
    const VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VK_TRY(vkCreateFence(d->device, &fci, NULL, &d->fence));
    const VkDescriptorPoolSize ps[2] = {
        {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = VKB_MAX_SETS * VKB_MAX_BINDINGS},
        {.type = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, .descriptorCount = VKB_MAX_SETS * VKB_MAX_BINDINGS}};
    const VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                            .maxSets = VKB_MAX_SETS,
                                            .poolSizeCount = 2,
                                            .pPoolSizes = ps};
    VK_TRY(vkCreateDescriptorPool(d->device, &dpi, NULL, &d->desc_pool));
    if (o->timestamps && d->timestamp_mask && d->timestamp_period > 0) {
        const VkQueryPoolCreateInfo qpi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                           .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                           .queryCount = 2};
        VK_TRY(vkCreateQueryPool(d->device, &qpi, NULL, &d->query_pool));
        d->lim.has_timestamps = 1;
    }
err:
    return st;
}

attnd_status vkb_device_create(const struct vkb_device_opts *opts, struct vkb_device **out)
{
    attnd_status st;
    *out = NULL;
    g_err[0] = 0;
    const struct vkb_device_opts o = resolve_opts(opts);
    struct vkb_device *d = calloc(1, sizeof *d);
    if (!d) return fail(ATTND_ERR_NOMEM, "out of memory");

    if (o.validation && !has_layer("VK_LAYER_KHRONOS_validation")) {
        free(d);
        return fail(ATTND_ERR_UNSUPPORTED, "validation asked for but VK_LAYER_KHRONOS_validation is not installed "
                                           "(package vulkan-validationlayers)");
    }
    if ((st = create_instance(d, &o)) || (st = pick_device(d, o.device_index))) goto err;
    query_limits(d);
    if ((st = create_logical_device(d)) || (st = create_pools(d, &o))) goto err;
    log_info("vulkan: %s (%s), subgroup %u, shared %u B, max storage range %u B", d->lim.name,
             d->lim.is_cpu ? "CPU" : d->lim.is_discrete ? "discrete" : "GPU", d->lim.subgroup_size,
             d->lim.max_shared_bytes, d->lim.max_storage_range);
    *out = d;
    return ATTND_OK;
err:
    vkb_device_destroy(d);
    return st;
}

void vkb_device_destroy(struct vkb_device *d)
{
    if (!d) return;
    if (d->device) {
        vkDeviceWaitIdle(d->device);
        if (d->query_pool) vkDestroyQueryPool(d->device, d->query_pool, NULL);
        if (d->desc_pool) vkDestroyDescriptorPool(d->device, d->desc_pool, NULL);
        if (d->fence) vkDestroyFence(d->device, d->fence, NULL);
        if (d->cmd_pool) vkDestroyCommandPool(d->device, d->cmd_pool, NULL);
        vkDestroyDevice(d->device, NULL);
    }
    if (d->messenger) {
        PFN_vkDestroyDebugUtilsMessengerEXT fn =
            (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(d->instance, "vkDestroyDebugUtilsMessengerEXT");
        if (fn) fn(d->instance, d->messenger, NULL);
    }
    if (d->instance) vkDestroyInstance(d->instance, NULL);
    free(d);
}

const struct vkb_limits *vkb_device_limits(const struct vkb_device *d) { return &d->lim; }

unsigned vkb_validation_errors(const struct vkb_device *d) { return d->validation_errors; }

/* ------------------------------------------------------------------------------------------
 * Buffers
 * ------------------------------------------------------------------------------------------ */

static int find_memory(const struct vkb_device *d, uint32_t type_bits, VkMemoryPropertyFlags want)
{
    for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++)
        if ((type_bits & (1u << i)) && (d->mem.memoryTypes[i].propertyFlags & want) == want) return (int)i;
    return -1;
}

/* host: 1 = must be host-visible + coherent (staging); 0 = device-local preferred, mapped when
 * the device is the CPU or the memory happens to be host-visible too. */
static attnd_status buffer_make(struct vkb_device *d, size_t bytes, int host, VkBufferUsageFlags usage,
                                struct vkb_buffer **out)
{
    attnd_status st = ATTND_OK;
    *out = NULL;
    if (bytes == 0) bytes = 4;
    if (!host && bytes > d->lim.max_storage_range)
        return fail(ATTND_ERR_RANGE, "buffer of %zu bytes exceeds maxStorageBufferRange %u", bytes,
                    d->lim.max_storage_range);
    struct vkb_buffer *b = calloc(1, sizeof *b);
    if (!b) return fail(ATTND_ERR_NOMEM, "out of memory");
    b->size = bytes;
    const VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                    .size = bytes,
                                    .usage = usage,
                                    .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VK_TRY(vkCreateBuffer(d->device, &bci, NULL, &b->buf));
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(d->device, b->buf, &req);
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int ti = -1;
    if (host || d->lim.is_cpu) ti = find_memory(d, req.memoryTypeBits, hv);
    if (ti < 0 && !host) ti = find_memory(d, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (ti < 0 && !host) ti = find_memory(d, req.memoryTypeBits, 0);
    if (ti < 0) {
        st = fail(ATTND_ERR_UNSUPPORTED, "no suitable memory type for a %zu-byte buffer", bytes);
        goto err;
    }
    const VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                      .allocationSize = req.size,
                                      .memoryTypeIndex = (uint32_t)ti};
    VK_TRY(vkAllocateMemory(d->device, &mai, NULL, &b->mem));
    VK_TRY(vkBindBufferMemory(d->device, b->buf, b->mem, 0));
    if ((d->mem.memoryTypes[ti].propertyFlags & hv) == hv) VK_TRY(vkMapMemory(d->device, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map));
    *out = b;
    return ATTND_OK;
err:
    vkb_buffer_destroy(d, b);
    return st;
}

attnd_status vkb_buffer_create(struct vkb_device *d, size_t bytes, struct vkb_buffer **out)
{
    return buffer_make(d, bytes, 0,
                       VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_TEXEL_BUFFER_BIT |
                           VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                       out);
}

void vkb_buffer_destroy(struct vkb_device *d, struct vkb_buffer *b)
{
    if (!b) return;
    if (b->view) vkDestroyBufferView(d->device, b->view, NULL);
    if (b->map) vkUnmapMemory(d->device, b->mem);
    if (b->buf) vkDestroyBuffer(d->device, b->buf, NULL);
    if (b->mem) vkFreeMemory(d->device, b->mem, NULL);
    free(b);
}

size_t vkb_buffer_size(const struct vkb_buffer *b) { return b->size; }
void *vkb_buffer_map(const struct vkb_buffer *b) { return b->map; }

/* One synchronous copy on the transfer command buffer. */
static attnd_status copy_sync(struct vkb_device *d, VkBuffer src, size_t src_off, VkBuffer dst, size_t dst_off,
                              size_t n)
{
    attnd_status st = ATTND_OK;
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VK_TRY(vkResetCommandBuffer(d->xfer, 0));
    VK_TRY(vkBeginCommandBuffer(d->xfer, &bi));
    const VkBufferCopy c = {.srcOffset = src_off, .dstOffset = dst_off, .size = n};
    vkCmdCopyBuffer(d->xfer, src, dst, 1, &c);
    VK_TRY(vkEndCommandBuffer(d->xfer));
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &d->xfer};
    VK_TRY(vkResetFences(d->device, 1, &d->fence));
    VK_TRY(vkQueueSubmit(d->queue, 1, &si, d->fence));
    VK_TRY(vkWaitForFences(d->device, 1, &d->fence, VK_TRUE, UINT64_MAX));
err:
    return st;
}

static attnd_status transfer(struct vkb_device *d, struct vkb_buffer *b, size_t off, void *host, size_t n, int to_dev)
{
    if (off > b->size || n > b->size - off)
        return fail(ATTND_ERR_RANGE, "copy of %zu bytes at %zu outside a %zu-byte buffer", n, off, b->size);
    if (d->recording) return fail(ATTND_ERR_INVALID, "buffer copy while a batch is being recorded");
    if (n == 0) return ATTND_OK;
    if (b->map) {
        if (to_dev)
            memcpy((char *)b->map + off, host, n);
        else
            memcpy(host, (const char *)b->map + off, n);
        return ATTND_OK;
    }
    struct vkb_buffer *s = NULL;
    attnd_status st = buffer_make(d, n, 1, VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, &s);
    if (st != ATTND_OK) return st;
    if (to_dev) {
        memcpy(s->map, host, n);
        st = copy_sync(d, s->buf, 0, b->buf, off, n);
    } else {
        st = copy_sync(d, b->buf, off, s->buf, 0, n);
        if (st == ATTND_OK) memcpy(host, s->map, n);
    }
    vkb_buffer_destroy(d, s);
    return st;
}

attnd_status vkb_buffer_write(struct vkb_device *d, struct vkb_buffer *b, size_t off, const void *src, size_t n)
{
    return transfer(d, b, off, (void *)(uintptr_t)src, n, 1);
}

attnd_status vkb_buffer_read(struct vkb_device *d, struct vkb_buffer *b, size_t off, void *dst, size_t n)
{
    return transfer(d, b, off, dst, n, 0);
}

/* ------------------------------------------------------------------------------------------
 * Pipelines
 * ------------------------------------------------------------------------------------------ */

attnd_status vkb_pipeline_create(struct vkb_device *d, const uint32_t *spv, size_t spv_bytes, uint32_t n_bindings,
                                 uint32_t push_bytes, const uint32_t *spec, uint32_t n_spec, struct vkb_pipeline **out)
{
    return vkb_pipeline_create_texel(d, spv, spv_bytes, n_bindings, 0, push_bytes, spec, n_spec, out);
}

attnd_status vkb_pipeline_create_texel(struct vkb_device *d, const uint32_t *spv, size_t spv_bytes,
                                       uint32_t n_bindings, uint32_t texel_mask, uint32_t push_bytes,
                                       const uint32_t *spec, uint32_t n_spec, struct vkb_pipeline **out)
{
    attnd_status st = ATTND_OK;
    VkShaderModule mod = VK_NULL_HANDLE;
    VkSpecializationMapEntry ent[16];
    *out = NULL;
    if (n_bindings > VKB_MAX_BINDINGS || n_spec > 16 || spv_bytes % 4 || push_bytes > d->lim.max_push_bytes)
        return fail(ATTND_ERR_INVALID, "pipeline: %u bindings, %u spec constants, %zu SPIR-V bytes, %u push bytes",
                    n_bindings, n_spec, spv_bytes, push_bytes);
    struct vkb_pipeline *p = calloc(1, sizeof *p);
    if (!p) return fail(ATTND_ERR_NOMEM, "out of memory");
    p->n_bindings = n_bindings;
    p->push_bytes = push_bytes;
    p->texel_mask = texel_mask;
    VkDescriptorSetLayoutBinding bind[VKB_MAX_BINDINGS];
    for (uint32_t i = 0; i < n_bindings; i++)
        bind[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                                 .descriptorType = (texel_mask >> i & 1u)
                                                                       ? VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
                                                                       : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                 .descriptorCount = 1,
                                                 .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    const VkDescriptorSetLayoutCreateInfo dli = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                                 .bindingCount = n_bindings,
                                                 .pBindings = bind};
    VK_TRY(vkCreateDescriptorSetLayout(d->device, &dli, NULL, &p->set_layout));
    const VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = push_bytes};
    const VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                            .setLayoutCount = 1,
                                            .pSetLayouts = &p->set_layout,
                                            .pushConstantRangeCount = push_bytes ? 1 : 0,
                                            .pPushConstantRanges = &pr};
    VK_TRY(vkCreatePipelineLayout(d->device, &pli, NULL, &p->layout));
    const VkShaderModuleCreateInfo smi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                          .codeSize = spv_bytes,
                                          .pCode = spv};
    VK_TRY(vkCreateShaderModule(d->device, &smi, NULL, &mod));
    for (uint32_t i = 0; i < n_spec; i++)
        ent[i] = (VkSpecializationMapEntry){.constantID = i, .offset = 4 * i, .size = 4};
    const VkSpecializationInfo si = {.mapEntryCount = n_spec, .pMapEntries = ent, .dataSize = 4 * n_spec, .pData = spec};
    const VkComputePipelineCreateInfo cpi = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = mod,
                  .pName = "main",
                  .pSpecializationInfo = n_spec ? &si : NULL},
        .layout = p->layout};
    VK_TRY(vkCreateComputePipelines(d->device, VK_NULL_HANDLE, 1, &cpi, NULL, &p->pipeline));
    vkDestroyShaderModule(d->device, mod, NULL);
    *out = p;
    return ATTND_OK;
err:
    if (mod) vkDestroyShaderModule(d->device, mod, NULL);
    vkb_pipeline_destroy(d, p);
    return st;
}

void vkb_pipeline_destroy(struct vkb_device *d, struct vkb_pipeline *p)
{
    if (!p) return;
    if (p->pipeline) vkDestroyPipeline(d->device, p->pipeline, NULL);
    if (p->layout) vkDestroyPipelineLayout(d->device, p->layout, NULL);
    if (p->set_layout) vkDestroyDescriptorSetLayout(d->device, p->set_layout, NULL);
    free(p);
}

/* ------------------------------------------------------------------------------------------
 * Recording and submission
 * ------------------------------------------------------------------------------------------ */

attnd_status vkb_begin(struct vkb_device *d)
{
    attnd_status st = ATTND_OK;
    if (d->recording) return fail(ATTND_ERR_INVALID, "vkb_begin: a batch is already being recorded");
    VK_TRY(vkResetDescriptorPool(d->device, d->desc_pool, 0));
    VK_TRY(vkResetCommandBuffer(d->cmd, 0));
    const VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                         .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VK_TRY(vkBeginCommandBuffer(d->cmd, &bi));
    d->recording = 1;
    d->n_sets = 0;
    if (d->query_pool) {
        vkCmdResetQueryPool(d->cmd, d->query_pool, 0, 2);
        vkCmdWriteTimestamp(d->cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, d->query_pool, 0);
    }
err:
    return st;
}

attnd_status vkb_dispatch(struct vkb_device *d, struct vkb_pipeline *p, struct vkb_buffer *const *bufs,
                          uint32_t n_bufs, const void *push, uint32_t gx, uint32_t gy, uint32_t gz)
{
    attnd_status st = ATTND_OK;
    if (!d->recording) return fail(ATTND_ERR_INVALID, "vkb_dispatch outside vkb_begin/vkb_submit_wait");
    if (n_bufs != p->n_bindings) return fail(ATTND_ERR_INVALID, "dispatch with %u buffers for %u bindings", n_bufs, p->n_bindings);
    if (gx > d->lim.max_wg_count[0] || gy > d->lim.max_wg_count[1] || gz > d->lim.max_wg_count[2])
        return fail(ATTND_ERR_RANGE, "dispatch of %ux%ux%u workgroups exceeds the device limit %ux%ux%u", gx, gy, gz,
                    d->lim.max_wg_count[0], d->lim.max_wg_count[1], d->lim.max_wg_count[2]);
    if (d->n_sets >= VKB_MAX_SETS) return fail(ATTND_ERR_RANGE, "more than %d dispatches in one batch", VKB_MAX_SETS);
    if (gx == 0 || gy == 0 || gz == 0) return ATTND_OK;
    VkDescriptorSet set;
    const VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                            .descriptorPool = d->desc_pool,
                                            .descriptorSetCount = 1,
                                            .pSetLayouts = &p->set_layout};
    VK_TRY(vkAllocateDescriptorSets(d->device, &ai, &set));
    d->n_sets++;
    VkDescriptorBufferInfo bi[VKB_MAX_BINDINGS];
    VkWriteDescriptorSet w[VKB_MAX_BINDINGS];
    for (uint32_t i = 0; i < n_bufs; i++) {
        bi[i] = (VkDescriptorBufferInfo){.buffer = bufs[i]->buf, .offset = 0, .range = VK_WHOLE_SIZE};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = set,
                                      .dstBinding = i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
        if (p->texel_mask >> i & 1u) {
            struct vkb_buffer *b = bufs[i];
            if (!b->view) {
                size_t texels = b->size / 16;
                if (texels > d->lim.max_texel_elements) texels = d->lim.max_texel_elements;
                if (!texels) return fail(ATTND_ERR_INVALID, "a texel binding needs at least 16 bytes");
                const VkBufferViewCreateInfo vci = {.sType = VK_STRUCTURE_TYPE_BUFFER_VIEW_CREATE_INFO,
                                                    .buffer = b->buf,
                                                    .format = VK_FORMAT_R32G32B32A32_UINT,
                                                    .offset = 0,
                                                    .range = texels * 16};
                VK_TRY(vkCreateBufferView(d->device, &vci, NULL, &b->view));
            }
            w[i].descriptorType = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
            w[i].pBufferInfo = NULL;
            w[i].pTexelBufferView = &b->view;
        }
    }
    vkUpdateDescriptorSets(d->device, n_bufs, w, 0, NULL);
    vkCmdBindPipeline(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->pipeline);
    vkCmdBindDescriptorSets(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p->layout, 0, 1, &set, 0, NULL);
    if (p->push_bytes) vkCmdPushConstants(d->cmd, p->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, p->push_bytes, push);
    vkCmdDispatch(d->cmd, gx, gy, gz);
err:
    return st;
}

void vkb_barrier(struct vkb_device *d)
{
    if (!d->recording) return;
    const VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
                                .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT};
    vkCmdPipelineBarrier(d->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb,
                         0, NULL, 0, NULL);
}

attnd_status vkb_submit_wait(struct vkb_device *d, double *gpu_ms)
{
    attnd_status st = ATTND_OK;
    if (gpu_ms) *gpu_ms = -1.0;
    if (!d->recording) return fail(ATTND_ERR_INVALID, "vkb_submit_wait without vkb_begin");
    d->recording = 0;
    if (d->query_pool) vkCmdWriteTimestamp(d->cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, d->query_pool, 1);
    VK_TRY(vkEndCommandBuffer(d->cmd));
    const VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &d->cmd};
    VK_TRY(vkResetFences(d->device, 1, &d->fence));
    VK_TRY(vkQueueSubmit(d->queue, 1, &si, d->fence));
    VK_TRY(vkWaitForFences(d->device, 1, &d->fence, VK_TRUE, UINT64_MAX));
    if (d->query_pool && gpu_ms) {
        uint64_t ts[2];
        VK_TRY(vkGetQueryPoolResults(d->device, d->query_pool, 0, 2, sizeof ts, ts, sizeof ts[0],
                                     VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
        *gpu_ms = (double)((ts[1] - ts[0]) & d->timestamp_mask) * d->timestamp_period * 1e-6;
    }
err:
    return st;
}
