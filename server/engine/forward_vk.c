/* forward_vk.c - one forward step on a Vulkan device: the "vulkan" backend of forward_backend.h
 * (see forward_vk.h). */
#include "server/engine/forward_vk.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/kvcache.h"
#include "attnd/log.h"
#include "kernels/cpu/fa2.h"
#include "kernels/vulkan/vk_device.h"
#include "kernels/vulkan/vk_fa2.h"
#include "kernels/vulkan/vk_ops.h"
#include "server/engine/rope.h"

#define MAX_WEIGHTS 4096
#define MAX_PARTS 16 /* buffers one weight may be split across (maxStorageBufferRange) */
#define LAYERS_PER_BATCH 48 /* a step's dispatches are submitted in batches of this many layers */

/* ---- the engine: device, pipelines and weights of one (model, device) -------------------------- */

/* A weight on the device: one buffer, or, when it is larger than the device's
 * maxStorageBufferRange (lavapipe: 128 MiB; a 151,936 x 896 Q8_0 output matrix is 145 MB),
 * whole rows split across up to MAX_PARTS buffers. */
struct dev_weight {
    const void *host; /* the host data it was uploaded from (tied output == embedding: one upload) */
    int n_parts;
    struct wpart {
        struct vkb_buffer *buf;
        uint32_t row0, rows; /* weight rows row0..row0+rows-1 */
    } part[MAX_PARTS];
};

/* A device and its pipelines, made on first use and kept for the life of the process (pipeline
 * builds are the slow part of starting a backend; every model on the device reuses them). */
struct vdev {
    struct vdev *next;
    int index;
    pthread_mutex_t lock; /* one step (or upload) at a time on the device */
    struct vkb_device *dev;
    struct vkb_ops *ops;
    struct vkb_fa2 *fa2;
};

/* The weights of one model on one device, shared by every context on that model and device. */
struct engine {
    struct engine *next;
    const struct model *m;
    struct vdev *vd;
    int refs;
    struct vkb_device *dev; /* == vd->dev */
    struct vkb_ops *ops;
    struct vkb_fa2 *fa2;
    pthread_mutex_t *lockp; /* == &vd->lock */
    struct dev_weight w[MAX_WEIGHTS];
    int n_w;
    struct vkb_buffer *f32; /* the model's 1-D tensors (norm weights, biases): f32_arena */
    char why[192];          /* what failed while making it, where vkb_last_error() does not say */
    size_t part_lim;        /* the largest buffer one weight part or logit chunk may take: part_limit() */
};

static pthread_mutex_t g_engines_lock = PTHREAD_MUTEX_INITIALIZER;
static struct engine *g_engines;
static struct vdev *g_devs;

/* The device at index (-1: the best), made on first use. Caller holds g_engines_lock. */
static attnd_status vdev_get(int index, bool need_gpu, struct vdev **out, char *why, size_t why_n)
{
    for (struct vdev *d = g_devs; d; d = d->next)
        if (d->index == index) {
            if (need_gpu && vkb_device_limits(d->dev)->is_cpu) break;
            *out = d;
            return ATTND_OK;
        }
    struct vdev *d = calloc(1, sizeof *d);
    if (!d) return ATTND_ERR_NOMEM;
    const struct vkb_device_opts o = {.device_index = index, .validation = -1, .timestamps = 0};
    attnd_status st = vkb_device_create(&o, &d->dev);
    if (st) {
        snprintf(why, why_n, "Vulkan device: %s (%s)", vkb_last_error(), attnd_status_str(st));
        free(d);
        return st;
    }
    if (need_gpu && vkb_device_limits(d->dev)->is_cpu) {
        snprintf(why, why_n, "the only Vulkan device is a CPU device (%s)", vkb_device_limits(d->dev)->name);
        vkb_device_destroy(d->dev);
        free(d);
        return ATTND_ERR_UNSUPPORTED;
    }
    if ((st = vkb_ops_create(d->dev, &d->ops)) || (st = vkb_fa2_create(d->dev, &d->fa2))) {
        snprintf(why, why_n, "Vulkan pipelines: %s", attnd_status_str(st));
        vkb_ops_destroy(d->ops);
        vkb_device_destroy(d->dev);
        free(d);
        return st;
    }
    pthread_mutex_init(&d->lock, NULL);
    d->index = index;
    d->next = g_devs;
    g_devs = d;
    log_info("vulkan: %s", vkb_device_limits(d->dev)->name);
    *out = d;
    return ATTND_OK;
}

static void engine_free(struct engine *e)
{
    if (!e) return;
    if (e->dev) {
        pthread_mutex_lock(e->lockp);
        for (int i = 0; i < e->n_w; i++)
            for (int k = 0; k < e->w[i].n_parts; k++) vkb_buffer_destroy(e->dev, e->w[i].part[k].buf);
        vkb_buffer_destroy(e->dev, e->f32);
        pthread_mutex_unlock(e->lockp);
    }
    free(e);
}

static const struct dev_weight *dev_weight_of(const struct engine *e, const struct model_weight *w)
{
    for (int i = 0; i < e->n_w; i++)
        if (e->w[i].host == w->data) return &e->w[i];
    return NULL;
}

/* The largest buffer a weight part may take: maxStorageBufferRange, or less when
 * $ATTND_VK_SPLIT_BYTES says so (tests split small models' weights with it). */
static size_t part_limit(const struct engine *e) /* read once per engine, into e->part_lim */
{
    size_t lim = vkb_device_limits(e->dev)->max_storage_range;
    const char *env = getenv("ATTND_VK_SPLIT_BYTES");
    if (env && *env) {
        unsigned long long v = strtoull(env, NULL, 10);
        if (v >= 4 && v < lim) lim = (size_t)v;
    }
    return lim & ~(size_t)3;
}

static attnd_status upload_part(struct engine *e, const struct model_weight *w, struct wpart *p)
{
    const size_t bytes = (size_t)p->rows * w->row_bytes;
    attnd_status st = vkb_buffer_create(e->dev, (bytes + 3) & ~(size_t)3, &p->buf);
    if (st) return st;
    return vkb_buffer_write(e->dev, p->buf, 0, (const char *)w->data + (size_t)p->row0 * w->row_bytes, bytes);
}

/* Uploads w (once: tied weights share it) as few whole-row parts as fit the part limit. */
static attnd_status upload_weight(struct engine *e, const struct model_weight *w)
{
    if (dev_weight_of(e, w)) return ATTND_OK;
    if (e->n_w == MAX_WEIGHTS) return ATTND_ERR_RANGE;
    const size_t lim = e->part_lim;
    /* a part's bytes are padded to whole words: rows * row_bytes + 3 must stay within lim */
    const size_t per_part = w->row_bytes + 3 <= lim ? (lim - 3) / w->row_bytes : 0;
    if (!per_part || (w->n_out + per_part - 1) / per_part > MAX_PARTS) {
        snprintf(e->why, sizeof e->why, "a weight of %zu rows of %zu bytes does not fit %d buffers of %zu bytes",
                 (size_t)w->n_out, w->row_bytes, MAX_PARTS, lim);
        return ATTND_ERR_RANGE;
    }
    struct dev_weight *dw = &e->w[e->n_w++];
    *dw = (struct dev_weight){.host = w->data};
    for (size_t r = 0; r < (size_t)w->n_out; r += per_part) {
        struct wpart *p = &dw->part[dw->n_parts++];
        p->row0 = (uint32_t)r;
        p->rows = (uint32_t)((size_t)w->n_out - r < per_part ? (size_t)w->n_out - r : per_part);
        attnd_status st = upload_part(e, w, p);
        if (st) return st; /* engine_free destroys the parts made so far */
    }
    if (dw->n_parts > 1) log_info("vulkan: a %zu x %zu-byte weight split across %d buffers", (size_t)w->n_out,
                                  w->row_bytes, dw->n_parts);
    return ATTND_OK;
}

/* Offset in floats of a 1-D model tensor inside the uploaded f32 arena. */
static size_t f32_off(const struct model *m, const float *p) { return (size_t)(p - m->f32_arena); }

/* y (n_tok, n_out) = x · Wᵀ (+ bias, a 1-D model tensor): one dispatch per part. */
static attnd_status record_matmul(struct engine *e, const struct model_weight *W, struct vkb_buffer *x,
                                  uint32_t n_tok, const float *bias, struct vkb_buffer *y)
{
    const struct dev_weight *dw = dev_weight_of(e, W);
    if (!dw) return ATTND_ERR_INTERNAL;
    const size_t bias_off = bias ? f32_off(e->m, bias) : 0;
    for (int k = 0; k < dw->n_parts; k++) {
        const struct wpart *p = &dw->part[k];
        attnd_status st = vkb_op_matmul_ld(e->ops, W->type, p->buf, 0, W->row_bytes, (uint32_t)W->n_in, p->rows, x,
                                           0, n_tok, bias ? e->f32 : NULL, bias_off + p->row0, y, p->row0,
                                           (uint32_t)W->n_out);
        if (st) return st;
    }
    return ATTND_OK;
}

/* dst[i] = row idx[idx_off + i] of the table W, for i < n: one dispatch per part. */
static attnd_status record_get_rows(struct engine *e, const struct model_weight *W, struct vkb_buffer *idx,
                                    size_t idx_off, uint32_t n, struct vkb_buffer *dst)
{
    const struct dev_weight *dw = dev_weight_of(e, W);
    if (!dw) return ATTND_ERR_INTERNAL;
    for (int k = 0; k < dw->n_parts; k++) {
        const struct wpart *p = &dw->part[k];
        attnd_status st = vkb_op_get_rows_part(e->ops, W->type, p->buf, 0, W->row_bytes, p->row0, p->row0 + p->rows,
                                               idx, idx_off, n, (uint32_t)W->n_in, dst, 0);
        if (st) return st;
    }
    return ATTND_OK;
}

static int add_type(enum tensor_type *types, int n, enum tensor_type t)
{
    for (int i = 0; i < n; i++)
        if (types[i] == t) return n;
    types[n] = t;
    return n + 1;
}

/* The Vulkan shaders decode only some weight types: anything else is refused here with its name
 * (auto falls back to the CPU). */
static attnd_status vk_model_supported(const struct model *m, char *why, size_t why_n)
{
    for (int l = 0; l <= m->hp.n_layer; l++) {
        const struct model_weight *w[7] = {&m->tok_embd, &m->output};
        int n = 2;
        if (l < m->hp.n_layer) { /* the last round checks the embedding and output */
            const struct model_layer *L = &m->layers[l];
            const struct model_weight *lw[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
            memcpy(w, lw, sizeof lw);
            n = 7;
        }
        for (int i = 0; i < n; i++) {
            enum tensor_type t = w[i]->type;
            if (!vkb_type_supported(t)) {
                snprintf(why, why_n, "the Vulkan backend does not run %s weights yet", tensor_type_name(t));
                return ATTND_ERR_UNSUPPORTED;
            }
        }
    }
    return ATTND_OK;
}

/* Caller holds g_engines_lock. */
static attnd_status engine_open(const struct model *m, int device_index, bool need_gpu, struct engine **out, char *why,
                                size_t why_n)
{
    struct vdev *vd;
    attnd_status st = vk_model_supported(m, why, why_n);
    if (st) return st;
    st = vdev_get(device_index, need_gpu, &vd, why, why_n);
    if (st) return st;
    struct engine *e = calloc(1, sizeof *e);
    if (!e) return ATTND_ERR_NOMEM;
    e->m = m;
    e->vd = vd;
    e->dev = vd->dev;
    e->ops = vd->ops;
    e->fa2 = vd->fa2;
    e->lockp = &vd->lock;
    e->part_lim = part_limit(e);
    pthread_mutex_lock(e->lockp);
    const char *what = "pipelines";
    enum tensor_type types[8];
    int nt = 0;
    nt = add_type(types, nt, m->tok_embd.type);
    nt = add_type(types, nt, m->output.type);
    for (int l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        const struct model_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) nt = add_type(types, nt, ws[i]->type);
    }
    if ((st = vkb_ops_prepare(e->ops, types, nt))) goto fail;
    what = "weights";
    if ((st = upload_weight(e, &m->tok_embd)) || (st = upload_weight(e, &m->output))) goto fail;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const struct model_layer *L = &m->layers[l];
        const struct model_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++)
            if ((st = upload_weight(e, ws[i]))) goto fail;
    }
    if ((st = vkb_buffer_create(e->dev, (m->f32_count ? m->f32_count : 1) * sizeof(float), &e->f32)) ||
        (st = vkb_buffer_write(e->dev, e->f32, 0, m->f32_arena, m->f32_count * sizeof(float))))
        goto fail;
    pthread_mutex_unlock(e->lockp);
    *out = e;
    return ATTND_OK;
fail:
    snprintf(why, why_n, "Vulkan %s: %s (%s)", what, e->why[0] ? e->why : vkb_last_error()[0] ? vkb_last_error() : "failed",
             attnd_status_str(st));
    pthread_mutex_unlock(e->lockp);
    engine_free(e);
    return st;
}

static attnd_status engine_get(const struct model *m, int device_index, bool need_gpu, struct engine **out, char *why,
                               size_t why_n)
{
    pthread_mutex_lock(&g_engines_lock);
    struct engine *e = g_engines;
    while (e && (e->m != m || e->vd->index != device_index)) e = e->next;
    attnd_status st = ATTND_OK;
    if (e && need_gpu && vkb_device_limits(e->dev)->is_cpu) {
        snprintf(why, why_n, "the only Vulkan device is a CPU device (%s)", vkb_device_limits(e->dev)->name);
        st = ATTND_ERR_UNSUPPORTED;
    } else if (!e && !(st = engine_open(m, device_index, need_gpu, &e, why, why_n))) {
        e->next = g_engines;
        g_engines = e;
    }
    if (e && !st) e->refs++;
    pthread_mutex_unlock(&g_engines_lock);
    *out = st ? NULL : e;
    return st;
}

static void engine_put(struct engine *e)
{
    if (!e) return;
    pthread_mutex_lock(&g_engines_lock);
    if (--e->refs == 0) {
        struct engine **pp = &g_engines;
        while (*pp != e) pp = &(*pp)->next;
        *pp = e->next;
    } else {
        e = NULL;
    }
    pthread_mutex_unlock(&g_engines_lock);
    engine_free(e);
}

/* ---- a context ------------------------------------------------------------------------------ */

struct dev_pools {
    const struct kv_cache *kv;
    size_t n_blocks, stride;
    struct vkb_buffer **k, **v; /* (n_layer) */
};

struct vkf {
    struct engine *e;
    const struct model *m;
    int n_batch;
    double *inv_freq; /* (n_rot / 2) rope_inv_freqs */
    const struct fwd_backend_ops *host_ops; /* cfg->host: the CPU work (project) */
    void *host;                             /* its state */
    /* activations, n_batch rows */
    struct vkb_buffer *x, *h, *q, *k, *v, *att, *gate, *up;
    /* per-step tables: tokens, KV slots, logit rows, identity rows, resid row; cos/sin */
    struct vkb_buffer *idx, *cs;
    int32_t *idx_host;
    float *cs_host;
    struct vkb_buffer *rows, *logits; /* gathered rows (r, d) and their logits (r, V), grown */
    size_t logit_rows;
    struct vkb_buffer *probe_q, *probe_att, *probe_resid;
    float *tmp; /* host copy of probe rows */
    struct vkb_fa2_plan *plan;
    struct fa2_seq *fseqs;
    struct dev_pools pools[2];
};

/* idx layout: [0, B) tokens | [B, 2B) KV slots | [2B, 3B) logit rows | [3B, 4B) identity | 4B: resid row */
#define IDX_TOK(B) ((size_t)(B) * 0)
#define IDX_SLOT(B) ((size_t)(B))
#define IDX_ROWS(B) (2 * (size_t)(B))
#define IDX_IDENT(B) (3 * (size_t)(B))
#define IDX_RESID(B) (4 * (size_t)(B))

static const char *vk_device_name(const void *state)
{
    return vkb_device_limits(((const struct vkf *)state)->e->dev)->name;
}
static unsigned vk_validation_errors(const void *state)
{
    return vkb_validation_errors(((const struct vkf *)state)->e->dev);
}

static void pools_free(struct vkf *v, struct dev_pools *p)
{
    if (p->k)
        for (int l = 0; l < v->m->hp.n_layer; l++) {
            vkb_buffer_destroy(v->e->dev, p->k[l]);
            vkb_buffer_destroy(v->e->dev, p->v[l]);
        }
    free(p->k);
    free(p->v);
    memset(p, 0, sizeof *p);
}

static void vk_destroy(void *state)
{
    struct vkf *v = state;
    if (!v) return;
    if (v->e) {
        struct vkb_device *d = v->e->dev;
        pthread_mutex_lock(v->e->lockp);
        for (int i = 0; i < 2; i++) pools_free(v, &v->pools[i]);
        struct vkb_buffer *bufs[] = {v->x,    v->h,    v->q,    v->k,      v->v,       v->att,       v->gate,
                                     v->up,   v->idx,  v->cs,   v->rows,   v->logits,  v->probe_q,   v->probe_att,
                                     v->probe_resid};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) vkb_buffer_destroy(d, bufs[i]);
        vkb_fa2_plan_destroy(v->plan);
        pthread_mutex_unlock(v->e->lockp);
        engine_put(v->e);
    }
    if (v->host_ops) v->host_ops->destroy(v->host);
    free(v->inv_freq);
    free(v->idx_host);
    free(v->cs_host);
    free(v->tmp);
    free(v->fseqs);
    free(v);
}

static attnd_status mkbuf(struct vkf *v, size_t floats, struct vkb_buffer **b)
{
    return vkb_buffer_create(v->e->dev, (floats ? floats : 1) * sizeof(float), b);
}

/* The host backend's state (cfg->host, made with the same threads and batch): the logit lens'
 * projection runs there, on the CPU kernels (this backend has no device path for it). */
static attnd_status host_open(struct vkf *v, const struct model *m, const struct fwd_backend_cfg *cfg, char *why,
                              size_t why_n)
{
    struct fwd_backend_cfg hc = *cfg;
    hc.host = NULL;
    hc.need_gpu = false;
    attnd_status st = cfg->host->create(m, &hc, &v->host, why, why_n);
    if (!st) v->host_ops = cfg->host;
    return st;
}

static int vk_n_threads(const void *state)
{
    const struct vkf *v = state;
    return v->host_ops->n_threads(v->host);
}

static void vk_project(void *state, const float *x, int n, float *logits)
{
    struct vkf *v = state;
    v->host_ops->project(v->host, x, n, logits);
}

static attnd_status vk_create(const struct model *m, const struct fwd_backend_cfg *cfg, void **out, char *why,
                              size_t why_n)
{
    *out = NULL;
    const int n_batch = cfg->n_batch;
    if (why_n) why[0] = 0;
    if (!cfg->host) {
        snprintf(why, why_n, "the Vulkan backend needs a host backend");
        return ATTND_ERR_INVALID;
    }
    const struct model_hparams *hp = &m->hp;
    struct vkf *v = calloc(1, sizeof *v);
    if (!v) return ATTND_ERR_NOMEM;
    v->m = m;
    v->n_batch = n_batch;
    attnd_status st = engine_get(m, cfg->vk_device, cfg->need_gpu, &v->e, why, why_n);
    if (st) {
        free(v);
        return st;
    }
    const size_t B = (size_t)n_batch, d = (size_t)hp->n_embd, nq = (size_t)hp->n_head * hp->head_dim,
                 nkv = (size_t)hp->n_head_kv * hp->head_dim, ff = (size_t)hp->n_ff, half = (size_t)hp->n_rot / 2;
    if ((st = host_open(v, m, cfg, why, why_n))) goto fail;
    st = rope_inv_freqs(m, &v->inv_freq);
    v->idx_host = malloc((4 * B + 1) * sizeof(int32_t));
    v->cs_host = malloc((B * half * 2 + 1) * sizeof(float));
    v->tmp = malloc(B * (nq > d ? nq : d) * sizeof(float) + (size_t)hp->n_layer * d * sizeof(float));
    v->fseqs = malloc(B * sizeof *v->fseqs);
    if (st || !v->idx_host || !v->cs_host || !v->tmp || !v->fseqs) {
        st = ATTND_ERR_NOMEM;
        goto fail;
    }
    pthread_mutex_lock(v->e->lockp);
    if ((st = mkbuf(v, B * d, &v->x)) || (st = mkbuf(v, B * (d > nq ? d : nq), &v->h)) ||
        (st = mkbuf(v, B * nq, &v->q)) || (st = mkbuf(v, B * nkv, &v->k)) || (st = mkbuf(v, B * nkv, &v->v)) ||
        (st = mkbuf(v, B * nq, &v->att)) || (st = mkbuf(v, B * ff, &v->gate)) || (st = mkbuf(v, B * ff, &v->up)) ||
        (st = mkbuf(v, 4 * B + 1, &v->idx)) || (st = mkbuf(v, B * half * 2, &v->cs)) ||
        (st = vkb_fa2_plan_create(v->e->fa2, &v->plan)))
        snprintf(why, why_n, "Vulkan buffers: %s", vkb_last_error());
    pthread_mutex_unlock(v->e->lockp);
    if (st) goto fail;
    *out = v;
    return ATTND_OK;
fail:
    vk_destroy(v);
    return st;
}

/* The device pools of kv (made on first use; at most two caches per context: its private one
 * and the scheduler's shared one). */
static attnd_status get_pools(struct vkf *v, struct kv_cache *kv, struct dev_pools **out)
{
    struct dev_pools *free_slot = NULL;
    for (int i = 0; i < 2; i++) {
        struct dev_pools *p = &v->pools[i];
        if (p->kv == kv && p->n_blocks == kv_n_blocks(kv) && p->stride == kv_block_stride(kv)) {
            *out = p;
            return ATTND_OK;
        }
        if (p->kv == kv) pools_free(v, p); /* same address, different cache: rebuild */
        if (!p->kv && !free_slot) free_slot = p;
    }
    if (!free_slot) { /* a third cache: drop the older entry */
        pools_free(v, &v->pools[1]);
        free_slot = &v->pools[1];
    }
    struct dev_pools *p = free_slot;
    const int L = v->m->hp.n_layer;
    p->k = calloc((size_t)L, sizeof *p->k);
    p->v = calloc((size_t)L, sizeof *p->v);
    if (!p->k || !p->v) {
        pools_free(v, p);
        return ATTND_ERR_NOMEM;
    }
    const size_t bytes = kv_n_blocks(kv) * kv_block_stride(kv);
    attnd_status st = ATTND_OK;
    for (int l = 0; l < L && !st; l++)
        if (!(st = vkb_buffer_create(v->e->dev, bytes, &p->k[l]))) st = vkb_buffer_create(v->e->dev, bytes, &p->v[l]);
    if (st) {
        pools_free(v, p);
        return st;
    }
    p->kv = kv;
    p->n_blocks = kv_n_blocks(kv);
    p->stride = kv_block_stride(kv);
    *out = p;
    return ATTND_OK;
}

static attnd_status grow(struct vkf *v, struct vkb_buffer **b, size_t floats)
{
    if (*b && vkb_buffer_size(*b) >= floats * sizeof(float)) return ATTND_OK;
    vkb_buffer_destroy(v->e->dev, *b);
    *b = NULL;
    return mkbuf(v, floats, b);
}


static attnd_status record_layer(struct vkf *v, int l, int T, const struct dev_pools *P, const struct fwd_probe *probe,
                                 int resid_row)
{
    const struct model *m = v->m;
    const struct model_hparams *hp = &m->hp;
    const struct model_layer *L = &m->layers[l];
    struct engine *e = v->e;
    struct vkb_ops *o = e->ops;
    struct vkb_device *d = e->dev;
    const uint32_t D = (uint32_t)hp->n_embd, NQ = (uint32_t)(hp->n_head * hp->head_dim), FF = (uint32_t)hp->n_ff,
                   t = (uint32_t)T;
    const size_t B = (size_t)v->n_batch;
    attnd_status st;
#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        if ((st = (x))) return st;                                                                                     \
    } while (0)
#define MM(W, X, Y, BIAS) record_matmul(e, (W), (X), t, (BIAS), (Y))
    TRY(vkb_op_rmsnorm(o, v->x, 0, e->f32, f32_off(m, L->attn_norm), v->h, 0, t, D, hp->rms_eps));
    vkb_barrier(d);
    TRY(MM(&L->wq, v->h, v->q, L->bq));
    TRY(MM(&L->wk, v->h, v->k, L->bk));
    TRY(MM(&L->wv, v->h, v->v, L->bv));
    vkb_barrier(d);
    /* qwen3: RMSNorm of every head of q and of k (one head_dim weight shared by all heads) */
    if (L->q_norm)
        TRY(vkb_op_rmsnorm(o, v->q, 0, e->f32, f32_off(m, L->q_norm), v->q, 0, t * (uint32_t)hp->n_head,
                           (uint32_t)hp->head_dim, hp->rms_eps));
    if (L->k_norm)
        TRY(vkb_op_rmsnorm(o, v->k, 0, e->f32, f32_off(m, L->k_norm), v->k, 0, t * (uint32_t)hp->n_head_kv,
                           (uint32_t)hp->head_dim, hp->rms_eps));
    if (L->q_norm || L->k_norm) vkb_barrier(d);
    TRY(vkb_op_rope(o, v->q, 0, v->cs, 0, t, (uint32_t)hp->n_head, (uint32_t)hp->head_dim, (uint32_t)hp->n_rot,
                    hp->rope_neox));
    TRY(vkb_op_rope(o, v->k, 0, v->cs, 0, t, (uint32_t)hp->n_head_kv, (uint32_t)hp->head_dim, (uint32_t)hp->n_rot,
                    hp->rope_neox));
    vkb_barrier(d);
    const uint32_t stride_el = (uint32_t)(P->stride / (kv_type(P->kv) == TENSOR_F16 ? 2 : 4));
    const int f16 = kv_type(P->kv) == TENSOR_F16;
    TRY(vkb_op_kv_write(o, v->k, 0, v->idx, IDX_SLOT(B), t, (uint32_t)hp->n_head_kv, (uint32_t)hp->head_dim, P->k[l],
                        stride_el, f16));
    TRY(vkb_op_kv_write(o, v->v, 0, v->idx, IDX_SLOT(B), t, (uint32_t)hp->n_head_kv, (uint32_t)hp->head_dim, P->v[l],
                        stride_el, f16));
    if (probe && probe->layer == l && probe->q)
        TRY(vkb_op_get_rows(o, TENSOR_F32, v->q, 0, (size_t)NQ * 4, v->idx, IDX_IDENT(B), t, NQ, v->probe_q, 0));
    vkb_barrier(d);
    TRY(vkb_fa2_record(v->plan, v->q, 0, P->k[l], P->v[l], v->att, 0));
    vkb_barrier(d);
    if (probe && probe->layer == l && probe->att)
        TRY(vkb_op_get_rows(o, TENSOR_F32, v->att, 0, (size_t)NQ * 4, v->idx, IDX_IDENT(B), t, NQ, v->probe_att, 0));
    TRY(MM(&L->wo, v->att, v->h, (const float *)NULL));
    vkb_barrier(d);
    TRY(vkb_op_add(o, v->x, 0, v->h, 0, t * D));
    vkb_barrier(d);
    TRY(vkb_op_rmsnorm(o, v->x, 0, e->f32, f32_off(m, L->ffn_norm), v->h, 0, t, D, hp->rms_eps));
    vkb_barrier(d);
    TRY(MM(&L->w_gate, v->h, v->gate, (const float *)NULL));
    TRY(MM(&L->w_up, v->h, v->up, (const float *)NULL));
    vkb_barrier(d);
    TRY(vkb_op_swiglu(o, v->gate, 0, v->up, 0, t * FF));
    vkb_barrier(d);
    TRY(MM(&L->w_down, v->gate, v->h, (const float *)NULL));
    vkb_barrier(d);
    TRY(vkb_op_add(o, v->x, 0, v->h, 0, t * D));
    vkb_barrier(d);
    if (resid_row >= 0)
        TRY(vkb_op_get_rows(o, TENSOR_F32, v->x, 0, (size_t)D * 4, v->idx, IDX_RESID(B), 1, D, v->probe_resid,
                            (size_t)l * D));
#undef MM
#undef TRY
    return ATTND_OK;
}

/* The host tables of a step (tokens, KV slots, logit rows, identity rows, cos/sin per token)
 * and the FA2 work list; *n_rows gets the logit rows, *resid_row the residual-probe row or -1. */
static void fill_tables(struct vkf *v, const struct fwd_step *s, size_t *n_rows, int *resid_row)
{
    const size_t B = (size_t)v->n_batch, half = (size_t)v->m->hp.n_rot / 2;
    const int32_t *pos = s->pos;
    int32_t *ih = v->idx_host;
    *n_rows = 0;
    *resid_row = -1;
    for (int i = 0, t = 0; i < s->n_seqs; i++) {
        const struct fwd_seq *q = &s->seqs[i];
        const int32_t *bt = kv_seq_block_table(q->kv);
        v->fseqs[i] = (struct fa2_seq){.n_q = q->n, .pos0 = pos[t], .block_table = bt};
        const int first = q->all_logits ? 0 : q->n - 1;
        for (int k = 0; k < q->n; k++, t++) {
            ih[IDX_TOK(B) + (size_t)t] = q->tokens[k];
            ih[IDX_SLOT(B) + (size_t)t] = bt[pos[t] / KV_BLOCK_SIZE] * KV_BLOCK_SIZE + pos[t] % KV_BLOCK_SIZE;
            ih[IDX_IDENT(B) + (size_t)t] = t;
            if (q->logits && k >= first) ih[IDX_ROWS(B) + (*n_rows)++] = t;
            if (s->probe->resid && pos[t] == s->probe->resid_pos) *resid_row = t;
            rope_row(v->inv_freq, half, pos[t], v->cs_host + (size_t)t * half * 2);
        }
    }
    ih[IDX_RESID(B)] = *resid_row;
}

/* How many logit rows one pass computes: all n_rows, or as many as one buffer may hold (a
 * 151,936-token vocabulary is 594 KiB a row: 220 rows in lavapipe's 128 MiB). */
static size_t logit_chunk(const struct vkf *v, size_t n_rows)
{
    const size_t per = v->e->part_lim / ((size_t)v->m->hp.n_vocab * sizeof(float));
    return per == 0 ? 1 : per < n_rows ? per : n_rows;
}

/* Uploads the tables, grows the gathered-row, logit and probe buffers, builds the FA2 plan. */
static attnd_status step_buffers(struct vkf *v, const struct fwd_step *s, size_t n_rows, int resid_row)
{
    const struct model_hparams *hp = &v->m->hp;
    struct vkb_device *d = v->e->dev;
    const size_t B = (size_t)v->n_batch, D = (size_t)hp->n_embd, V = (size_t)hp->n_vocab,
                 nq = (size_t)hp->n_head * hp->head_dim, half = (size_t)hp->n_rot / 2;
    const struct fwd_probe *pr = s->probe;
    attnd_status st;
    if ((st = vkb_buffer_write(d, v->idx, 0, v->idx_host, (4 * B + 1) * sizeof(int32_t))) ||
        (st = vkb_buffer_write(d, v->cs, 0, v->cs_host, (size_t)s->n_tokens * half * 2 * sizeof(float))))
        return st;
    if (n_rows && ((st = grow(v, &v->rows, n_rows * D)) || (st = grow(v, &v->logits, logit_chunk(v, n_rows) * V))))
        return st;
    if ((pr->layer >= 0 && pr->q && (st = grow(v, &v->probe_q, B * nq))) ||
        (pr->layer >= 0 && pr->att && (st = grow(v, &v->probe_att, B * nq))) ||
        (resid_row >= 0 && (st = grow(v, &v->probe_resid, (size_t)hp->n_layer * D))))
        return st;
    int n_decode = 0;
    for (int i = 0; i < s->n_seqs; i++) n_decode += s->seqs[i].n == 1;
    const int target = vkb_device_limits(d)->is_cpu ? 8 : 256; /* workgroups wanted per decode dispatch */
    int n_split = n_decode ? target / (n_decode * hp->n_head_kv) : 1;
    if (n_split < 1) n_split = 1;
    const struct fa2_args fa = {.n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim,
                                .kv_type = kv_type(s->kv), .block_stride = kv_block_stride(s->kv),
                                .n_blocks = (int)kv_n_blocks(s->kv), .scale = 1.0f / sqrtf((float)hp->head_dim),
                                .seqs = v->fseqs, .n_seqs = s->n_seqs, .n_split = n_split};
    return vkb_fa2_plan_build(v->plan, &fa); /* the same plan for every layer */
}

/* Logit rows row0..row0+n_rows-1 of the step (of those that want logits): gathered, RMSNorm,
 * output product, into logits rows 0..n_rows-1. */
static attnd_status record_logits(struct vkf *v, size_t row0, size_t n_rows)
{
    const struct model *m = v->m;
    struct engine *e = v->e;
    const size_t B = (size_t)v->n_batch, D = (size_t)m->hp.n_embd;
    attnd_status st = vkb_op_get_rows(e->ops, TENSOR_F32, v->x, 0, D * 4, v->idx, IDX_ROWS(B) + row0,
                                      (uint32_t)n_rows, (uint32_t)D, v->rows, 0);
    vkb_barrier(e->dev);
    if (!st)
        st = vkb_op_rmsnorm(e->ops, v->rows, 0, e->f32, f32_off(m, m->output_norm), v->rows, 0, (uint32_t)n_rows,
                            (uint32_t)D, m->hp.rms_eps);
    vkb_barrier(e->dev);
    const struct model_weight *W = &m->output;
    if (!st)
        st = record_matmul(e, W, v->rows, (uint32_t)n_rows, NULL, v->logits);
    return st;
}

/* Records and submits the whole step: embed -> layers -> logits. */
static attnd_status record_step(struct vkf *v, const struct fwd_step *s, const struct dev_pools *P, size_t n_rows,
                                int resid_row)
{
    const struct model *m = v->m;
    struct engine *e = v->e;
    struct vkb_device *d = e->dev;
    const size_t B = (size_t)v->n_batch;
    attnd_status st = vkb_begin(d);
    if (st) return st;
    st = record_get_rows(e, &m->tok_embd, v->idx, IDX_TOK(B), (uint32_t)s->n_tokens, v->x);
    vkb_barrier(d);
    for (int l = 0; l < m->hp.n_layer && !st; l++) {
        st = record_layer(v, l, s->n_tokens, P, s->probe, resid_row);
        if (!st && (l + 1) % LAYERS_PER_BATCH == 0 && l + 1 < m->hp.n_layer) {
            if ((st = vkb_submit_wait(d, NULL)) || (st = vkb_begin(d))) return st;
        }
    }
    if (!st && n_rows) st = record_logits(v, 0, logit_chunk(v, n_rows));
    attnd_status st2 = vkb_submit_wait(d, NULL); /* always: the batch must leave the recording state */
    return st ? st : st2;
}

/* Copies logits rows 0..n-1 (the step's logit rows row0..row0+n-1) to the sequences' arrays. */
static attnd_status read_logit_rows(struct vkf *v, const struct fwd_step *s, size_t row0, size_t n)
{
    const size_t V = (size_t)v->m->hp.n_vocab;
    size_t g = 0; /* the step's logit row where sequence i's rows start */
    for (int i = 0; i < s->n_seqs && g < row0 + n; i++) {
        if (!s->seqs[i].logits) continue;
        const size_t rows = s->seqs[i].all_logits ? (size_t)s->seqs[i].n : 1;
        const size_t lo = g > row0 ? g : row0, hi = g + rows < row0 + n ? g + rows : row0 + n;
        if (lo < hi) {
            attnd_status st = vkb_buffer_read(v->e->dev, v->logits, (lo - row0) * V * 4,
                                              s->seqs[i].logits + (lo - g) * V, (hi - lo) * V * 4);
            if (st) return st;
        }
        g += rows;
    }
    return ATTND_OK;
}

/* Downloads the logits (n_rows of them) and the probes; after an attention probe, that layer's
 * host pools. */
static attnd_status download(struct vkf *v, const struct fwd_step *s, const struct dev_pools *P, size_t n_rows,
                             int resid_row)
{
    const struct model_hparams *hp = &v->m->hp;
    struct vkb_device *d = v->e->dev;
    const size_t nq = (size_t)hp->n_head * hp->head_dim;
    const struct fwd_probe *pr = s->probe;
    attnd_status st;
    /* the first chunk of logit rows was computed with the step; any further chunk is computed now */
    const size_t chunk = n_rows ? logit_chunk(v, n_rows) : 0;
    for (size_t r0 = 0; r0 < n_rows; r0 += chunk) {
        const size_t n = n_rows - r0 < chunk ? n_rows - r0 : chunk;
        if (r0 && ((st = vkb_begin(d)) || (st = record_logits(v, r0, n)) || (st = vkb_submit_wait(d, NULL))))
            return st;
        if ((st = read_logit_rows(v, s, r0, n))) return st;
    }
    if (pr->layer >= 0 && (pr->q || pr->att)) {
        for (int which = 0; which < 2; which++) {
            float *dst = which ? pr->att : pr->q;
            if (!dst) continue;
            if ((st = vkb_buffer_read(d, which ? v->probe_att : v->probe_q, 0, v->tmp, (size_t)s->n_tokens * nq * 4)))
                return st;
            for (int t = 0; t < s->n_tokens; t++)
                memcpy(dst + (size_t)s->pos[t] * nq, v->tmp + (size_t)t * nq, nq * sizeof(float));
        }
        /* the host pools of that layer, for fwd_attention_weights / fwd_cache_v */
        void *hk = kv_k_base(s->kv, pr->layer), *hv = kv_v_base(s->kv, pr->layer);
        const size_t bytes = kv_n_blocks(s->kv) * kv_block_stride(s->kv);
        if (hk && ((st = vkb_buffer_read(d, P->k[pr->layer], 0, hk, bytes)) ||
                   (st = vkb_buffer_read(d, P->v[pr->layer], 0, hv, bytes))))
            return st;
    }
    if (resid_row >= 0 && (st = vkb_buffer_read(d, v->probe_resid, 0, pr->resid, (size_t)hp->n_layer * hp->n_embd * 4)))
        return st;
    return ATTND_OK;
}

static attnd_status vk_eval_batch(void *state, const struct fwd_step *s)
{
    struct vkf *v = state;
    for (int i = 0; i < s->n_seqs; i++) /* interventions (intervene.h) run on the CPU backend only */
        if (s->seqs[i].iv) return ATTND_ERR_UNSUPPORTED;
    pthread_mutex_lock(v->e->lockp);
    struct dev_pools *P;
    size_t n_rows;
    int resid_row;
    attnd_status st = get_pools(v, s->kv, &P);
    if (!st) {
        fill_tables(v, s, &n_rows, &resid_row);
        st = step_buffers(v, s, n_rows, resid_row);
    }
    if (!st) st = record_step(v, s, P, n_rows, resid_row);
    if (!st) st = download(v, s, P, n_rows, resid_row);
    if (!st)
        for (int i = 0; i < s->n_seqs; i++) kv_seq_commit(s->seqs[i].kv, kv_seq_len(s->seqs[i].kv) - (size_t)s->seqs[i].n_draft);
    if (st) log_warn("vulkan step failed: %s (%s)", vkb_last_error(), attnd_status_str(st));
    pthread_mutex_unlock(v->e->lockp);
    return st;
}

const struct fwd_backend_ops fwd_vk_backend = {
    .name = "vulkan",
    .create = vk_create,
    .eval_batch = vk_eval_batch,
    .destroy = vk_destroy,
    .device_name = vk_device_name,
    .validation_errors = vk_validation_errors,
    .n_threads = vk_n_threads,
    .project = vk_project,
};
