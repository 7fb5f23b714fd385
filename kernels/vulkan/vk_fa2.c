/* vk_fa2.c - host side of the FA2 compute shaders (see vk_fa2.h, fa2_core.glsl, fa2_lanes.comp).
 *
 * Two shader families:
 *   tiles (fa2_prefill/fa2_decode.comp, fa2_core.glsl): K/V tiles in shared memory, threads over
 *     query rows x head dims. For GPUs.
 *   lanes (fa2_lanes.glsl, prefill and decode in one shader): no shared memory, one K/V row per
 *     lane read with the widest loads, a GQA group's query rows in registers. For CPU devices
 *     (lavapipe), where every memory access costs a scalar loop over the SIMD lanes; also needs
 *     head_dim and the block stride (in elements) to be multiples of 8. fa2_lanes_tex.comp reads
 *     the K/V pools as uniform texel buffers (texelFetch of 16-byte texels, which lavapipe runs
 *     through its vectorised sampler path: about 3x faster decode than storage loads) when a
 *     layer's pool fits the device's maxTexelBufferElements; else fa2_lanes.comp (uvec4 loads).
 * Split decode (either family) writes partial (O, m, l) rows that fa2_reduce.comp combines.
 * $ATTND_VK_FA2_TILES=1 forces the tile shaders (to test the GPU path on lavapipe);
 * $ATTND_VK_FA2_NO_TEXEL=1 forces fa2_lanes.comp over fa2_lanes_tex.comp (to test it). */
#include "kernels/vulkan/vk_fa2.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spv_fa2_decode.h"
#include "spv_fa2_lanes.h"
#include "spv_fa2_lanes_tex.h"
#include "spv_fa2_prefill.h"
#include "spv_fa2_reduce.h"

/* Mirrors the push_constant block of fa2_core.glsl and fa2_lanes.comp. */
struct vkb_fa2_push {
    uint32_t n_head, n_head_kv;
    uint32_t kv_f16;       /* 1: F16 pools */
    uint32_t block_stride; /* elements */
    uint32_t n_items;
    float scale;
    uint32_t q_off;   /* elements: start of q in its buffer */
    uint32_t out_off; /* elements: start of out in its buffer */
};
static_assert(sizeof(struct vkb_fa2_push) == 32 && sizeof(struct vkb_fa2_push) <= 128, "push block");

/* Mirrors the push_constant block of fa2_reduce.comp. */
struct vkb_fa2_reduce_push {
    uint32_t n_head, n_head_kv, n_items, out_off;
};
static_assert(sizeof(struct vkb_fa2_reduce_push) == 16 && sizeof(struct vkb_fa2_reduce_push) <= 128, "push block");

#define MAX_ROWS 16u /* tiles: query rows per workgroup */
#define TPR 4u       /* tiles: threads per query row: head_dim / TPR <= 64 (MAXJ in the shader). More
                      * threads per row for few-row (decode) workgroups hung lavapipe at
                      * head_dim >= 192 (unexplained yet), so it stays 4. */
#define MAX_GR 4     /* lanes: query heads per lane (registers: 2 * GR * head_dim floats) */
#define N_PIPES 64
#define ITEM_INTS 6
#define REDUCE_WG 64u
/* llvmpipe ends a shader invocation after 65535 loop iterations in total; keep a margin. */
#define LOOP_BUDGET (65535u - 4096u)

enum { K_PREFILL, K_DECODE, K_REDUCE, K_LANES, K_LANES_TEX };

struct pipe_entry {
    int kind;
    uint32_t spec[5];
    struct vkb_pipeline *p;
};

struct vkb_fa2 {
    struct vkb_device *dev;
    struct pipe_entry pipes[N_PIPES];
    int n_pipes;
    int tiles_only; /* $ATTND_VK_FA2_TILES=1 */
    int no_texel;   /* $ATTND_VK_FA2_NO_TEXEL=1 */
};

attnd_status vkb_fa2_create(struct vkb_device *dev, struct vkb_fa2 **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return ATTND_ERR_NOMEM;
    (*out)->dev = dev;
    const char *e = getenv("ATTND_VK_FA2_TILES");
    (*out)->tiles_only = e && strcmp(e, "1") == 0;
    e = getenv("ATTND_VK_FA2_NO_TEXEL");
    (*out)->no_texel = e && strcmp(e, "1") == 0;
    return ATTND_OK;
}

void vkb_fa2_destroy(struct vkb_fa2 *f)
{
    if (!f) return;
    for (int i = 0; i < f->n_pipes; i++) vkb_pipeline_destroy(f->dev, f->pipes[i].p);
    free(f);
}

/* Largest rows-per-workgroup (<= cap, a power of two) whose shared memory and workgroup size fit. */
static uint32_t pick_rows(const struct vkb_limits *l, uint32_t D, uint32_t cap)
{
    for (uint32_t rows = MAX_ROWS; rows >= 1; rows /= 2) {
        if (rows > cap && rows > 1) continue;
        const uint64_t shared = 4ull * ((uint64_t)rows * D + 16ull * D + rows * 16ull);
        const uint32_t wg = rows * TPR;
        if (shared <= l->max_shared_bytes && wg <= l->max_wg_invocations && wg <= l->max_wg_size[0]) return rows;
    }
    return 0;
}

static attnd_status get_pipe(struct vkb_fa2 *f, int kind, const uint32_t spec[5], struct vkb_pipeline **out)
{
    for (int i = 0; i < f->n_pipes; i++) {
        const struct pipe_entry *e = &f->pipes[i];
        if (e->kind == kind && memcmp(e->spec, spec, sizeof e->spec) == 0) {
            *out = e->p;
            return ATTND_OK;
        }
    }
    if (f->n_pipes == N_PIPES) { /* evict the oldest */
        vkb_pipeline_destroy(f->dev, f->pipes[0].p);
        memmove(f->pipes, f->pipes + 1, (N_PIPES - 1) * sizeof f->pipes[0]);
        f->n_pipes--;
    }
    const uint32_t push = kind == K_REDUCE ? sizeof(struct vkb_fa2_reduce_push) : sizeof(struct vkb_fa2_push);
    const uint32_t *spv = NULL;
    size_t spv_bytes = 0;
    uint32_t n_bind = 7, n_spec = 5;
    switch (kind) {
    case K_PREFILL: spv = spv_fa2_prefill, spv_bytes = sizeof spv_fa2_prefill; break;
    case K_DECODE: spv = spv_fa2_decode, spv_bytes = sizeof spv_fa2_decode; break;
    case K_LANES: spv = spv_fa2_lanes, spv_bytes = sizeof spv_fa2_lanes; break;
    case K_LANES_TEX: spv = spv_fa2_lanes_tex, spv_bytes = sizeof spv_fa2_lanes_tex; break;
    default: spv = spv_fa2_reduce, spv_bytes = sizeof spv_fa2_reduce, n_bind = 3, n_spec = 2; break;
    }
    struct vkb_pipeline *p = NULL;
    /* the texel variant reads the K and V pools (bindings 1 and 2) as uniform texel buffers */
    attnd_status st = vkb_pipeline_create_texel(f->dev, spv, spv_bytes, n_bind, kind == K_LANES_TEX ? 6u : 0u, push,
                                                spec, n_spec, &p);
    if (st != ATTND_OK) return st;
    struct pipe_entry *e = &f->pipes[f->n_pipes++];
    e->kind = kind;
    memcpy(e->spec, spec, sizeof e->spec);
    e->p = p;
    *out = p;
    return ATTND_OK;
}

/* Tiles: key tiles one workgroup may walk. llvmpipe (the CPU device) ends a shader invocation
 * after 65535 loop iterations in total; count those of one tile in fa2_core.glsl (the tile loop,
 * the K and V loads unrolled by 4, the score loop times the dot product unrolled by 8) and keep a
 * margin for the query load. Unlimited on other devices. */
static int tile_cap(const struct vkb_limits *l, uint32_t D, uint32_t rows)
{
    if (!l->is_cpu) return INT32_MAX;
    const uint32_t wg = rows * TPR;
    const uint32_t per_tile = 1 + 2 * ((16 * D + 4 * wg - 1) / (4 * wg)) + ((rows * 16 + wg - 1) / wg) * ((D + 7) / 8);
    return (int)(LOOP_BUDGET / per_tile);
}

/* Lanes: blocks one work item may walk. The only loop left after unrolling is the key loop: one
 * iteration per key (prefill: every lane walks every key) or per WG keys (decode). */
static int lanes_cap(uint32_t wg, int decode)
{
    return (int)((uint64_t)LOOP_BUDGET * (decode ? wg : 1) / FA2_BLOCK);
}

/* Parts of a decode sequence of nb blocks: n_split, at most nb, at least enough for the cap. */
static int dec_parts(int n_split, int nb, int cap)
{
    int parts = n_split < nb ? n_split : nb;
    const int need = (nb + cap - 1) / cap;
    return parts < need ? need : parts;
}

static int nblk(const struct fa2_seq *s) { return (s->pos0 + s->n_q + FA2_BLOCK - 1) / FA2_BLOCK; }

/* ------------------------------------------------------------------------------------------
 * Plans
 * ------------------------------------------------------------------------------------------ */

enum { B_BT, B_SEQ, B_PRE, B_DEC, B_RED, B_PART, N_BUFS };

struct vkb_fa2_plan {
    struct vkb_fa2 *f;
    struct vkb_buffer *buf[N_BUFS]; /* grown, never shrunk */
    int32_t *host;                  /* staging for buffers that are not host-visible */
    size_t host_ints;
    /* what vkb_fa2_record needs, set by the last successful vkb_fa2_plan_build */
    int ready;
    struct vkb_pipeline *pp, *pd, *pr;
    struct vkb_fa2_push push;
    uint32_t n_pre, n_dec, n_red;
    size_t q_floats;   /* rows of q and out: floats */
    size_t pool_bytes; /* bytes each pool buffer must hold */
};

attnd_status vkb_fa2_plan_create(struct vkb_fa2 *f, struct vkb_fa2_plan **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return ATTND_ERR_NOMEM;
    (*out)->f = f;
    return ATTND_OK;
}

void vkb_fa2_plan_destroy(struct vkb_fa2_plan *p)
{
    if (!p) return;
    for (int i = 0; i < N_BUFS; i++) vkb_buffer_destroy(p->f->dev, p->buf[i]);
    free(p->host);
    free(p);
}

/* Makes buf[i] hold at least bytes (grows by doubling; contents are not kept). */
static attnd_status ensure_buf(struct vkb_fa2_plan *p, int i, size_t bytes)
{
    if (bytes < 16) bytes = 16;
    if (p->buf[i] && vkb_buffer_size(p->buf[i]) >= bytes) return ATTND_OK;
    const size_t old = p->buf[i] ? vkb_buffer_size(p->buf[i]) : 0;
    size_t want = old * 2 > bytes ? old * 2 : bytes;
    vkb_buffer_destroy(p->f->dev, p->buf[i]);
    p->buf[i] = NULL;
    attnd_status st = vkb_buffer_create(p->f->dev, want, &p->buf[i]);
    if (st != ATTND_OK && want > bytes) st = vkb_buffer_create(p->f->dev, bytes, &p->buf[i]);
    return st;
}

/* The shape of one step: validated arguments and the work decomposition. */
struct shape {
    int D, G, H, Hkv, lanes, kv_f16;
    int lanes_tex;      /* lanes: fa2_lanes_tex.comp */
    size_t esz, stride; /* bytes */
    uint32_t rows_pre, rows_dec; /* tiles: query rows per workgroup */
    uint32_t wg, gr, n_gc;       /* lanes: lanes per workgroup, heads per lane, head chunks */
    int cap_pre, cap_dec;        /* blocks per work item */
    uint32_t pm;                 /* partial slots per decode part (lanes: one per lane) */
    size_t q_floats, bt_ints, n_pre, n_dec, n_red, n_slots;
};

/* n_split, capped so that fa2_reduce.comp's loops over the partials of one sequence (about
 * 2 + head_dim / 64 per partial) stay under llvmpipe's loop limit. */
static int max_split(const struct fa2_args *a, const struct shape *sh)
{
    const int cap = (int)(8192u / sh->pm);
    return a->n_split < cap ? a->n_split : cap;
}

static attnd_status get_shape(struct vkb_fa2 *f, const struct fa2_args *a, struct shape *sh)
{
    const struct vkb_limits *lim = vkb_device_limits(f->dev);
    memset(sh, 0, sizeof *sh);
    if (a->n_head_kv < 1 || a->n_head < a->n_head_kv || a->n_head % a->n_head_kv || a->head_dim < 1 ||
        a->head_dim > FA2_MAX_HEAD_DIM || (a->kv_type != TENSOR_F16 && a->kv_type != TENSOR_F32) || a->n_seqs < 0 ||
        a->n_blocks < 0 || a->n_split < 1 || (a->n_seqs && !a->seqs))
        return ATTND_ERR_INVALID;
    const int D = sh->D = a->head_dim, G = sh->G = a->n_head / a->n_head_kv;
    sh->H = a->n_head;
    sh->Hkv = a->n_head_kv;
    sh->kv_f16 = a->kv_type == TENSOR_F16;
    const size_t esz = sh->esz = sh->kv_f16 ? 2 : 4;
    const size_t dense = (size_t)sh->Hkv * FA2_BLOCK * D * esz;
    const size_t stride = sh->stride = a->block_stride ? a->block_stride : dense;
    if (stride < dense || stride % esz || stride / esz > UINT32_MAX) return ATTND_ERR_INVALID;
    const size_t pool_bytes = (size_t)a->n_blocks * stride;
    if (pool_bytes / esz > UINT32_MAX || pool_bytes > lim->max_storage_range) return ATTND_ERR_RANGE;

    sh->lanes = lim->is_cpu && !f->tiles_only && D % 8 == 0 && (stride / esz) % 8 == 0;
    if (sh->lanes) {
        uint32_t wg = lim->subgroup_size;
        if (wg < 4) wg = 4;
        if (wg > 16) wg = 16;
        if (wg > lim->max_wg_invocations) wg = lim->max_wg_invocations;
        sh->wg = wg;
        sh->lanes_tex = !f->no_texel && pool_bytes / 16 <= lim->max_texel_elements;
        sh->n_gc = (uint32_t)((G + MAX_GR - 1) / MAX_GR);
        sh->gr = (uint32_t)((G + (int)sh->n_gc - 1) / (int)sh->n_gc);
        sh->cap_pre = lanes_cap(wg, 0);
        sh->cap_dec = lanes_cap(wg, 1);
        sh->pm = wg;
    } else {
        sh->rows_pre = pick_rows(lim, (uint32_t)D, MAX_ROWS);
        uint32_t g2 = 1;
        while (g2 < (uint32_t)G && g2 < MAX_ROWS) g2 *= 2;
        sh->rows_dec = pick_rows(lim, (uint32_t)D, g2);
        if (!sh->rows_pre || !sh->rows_dec) return ATTND_ERR_UNSUPPORTED;
        sh->cap_pre = tile_cap(lim, (uint32_t)D, sh->rows_pre);
        sh->cap_dec = tile_cap(lim, (uint32_t)D, sh->rows_dec);
        sh->pm = 1;
    }

    /* sizes and validation of the block tables */
    for (int s = 0; s < a->n_seqs; s++) {
        const struct fa2_seq *sq = &a->seqs[s];
        if (sq->n_q < 0 || sq->pos0 < 0 || (sq->n_q > 0 && !sq->block_table) ||
            (int64_t)sq->pos0 + sq->n_q > INT32_MAX - FA2_BLOCK)
            return ATTND_ERR_INVALID;
        if (sq->n_q == 0) continue;
        const int nb = nblk(sq);
        for (int b = 0; b < nb; b++)
            if (sq->block_table[b] < 0 || sq->block_table[b] >= a->n_blocks) return ATTND_ERR_INVALID;
        sh->q_floats += (size_t)sq->n_q * sh->H * D;
        sh->bt_ints += (size_t)nb;
        if (sq->n_q == 1) {
            const int parts = dec_parts(max_split(a, sh), nb, sh->cap_dec);
            sh->n_dec += (size_t)parts * (sh->lanes ? sh->n_gc : (G + sh->rows_dec - 1) / sh->rows_dec);
            sh->n_slots += (size_t)parts;
            sh->n_red++;
        } else {
            if (nb > sh->cap_pre) return ATTND_ERR_RANGE; /* a prefill chunk this long: CPU device only */
            sh->n_pre += sh->lanes ? ((size_t)sq->n_q + sh->wg - 1) / sh->wg * sh->n_gc
                                   : ((size_t)sq->n_q * G + sh->rows_pre - 1) / sh->rows_pre;
        }
    }
    if (sh->q_floats > UINT32_MAX || sh->n_pre > lim->max_wg_count[0] || sh->n_dec > lim->max_wg_count[0] ||
        sh->n_red > lim->max_wg_count[0] || (uint32_t)sh->Hkv > lim->max_wg_count[1] ||
        (uint32_t)sh->H > lim->max_wg_count[1])
        return ATTND_ERR_RANGE;
    if (sh->n_slots * sh->pm * (size_t)sh->H * (D + 2) * 4 > lim->max_storage_range) return ATTND_ERR_RANGE;
    return ATTND_OK;
}

/* Fills the tables: seqinfo (4 ints per sequence), block tables, prefill/decode items, reduce items. */
static void fill_tables(const struct fa2_args *a, const struct shape *sh, int32_t *seqh, int32_t *bth, int32_t *preh,
                        int32_t *dech, int32_t *redh)
{
    size_t qo = 0, bo = 0, ip = 0, id = 0, ir = 0, slot = 0;
    const int G = sh->G;
    for (int s = 0; s < a->n_seqs; s++) {
        const struct fa2_seq *sq = &a->seqs[s];
        seqh[4 * s + 0] = (int32_t)qo;
        seqh[4 * s + 1] = sq->n_q;
        seqh[4 * s + 2] = sq->pos0;
        seqh[4 * s + 3] = (int32_t)bo;
        if (sq->n_q == 0) continue;
        const int nb = nblk(sq);
        memcpy(bth + bo, sq->block_table, (size_t)nb * sizeof(int32_t));
        if (sq->n_q == 1) {
            const int parts = dec_parts(max_split(a, sh), nb, sh->cap_dec);
            const int step = sh->lanes ? (int)sh->gr : (int)sh->rows_dec;
            for (int p = 0; p < parts; p++)
                for (int r0 = 0; r0 < G; r0 += step) {
                    int32_t *it = dech + ITEM_INTS * id++;
                    it[0] = s;
                    it[1] = r0;
                    it[2] = (int32_t)((int64_t)p * nb / parts);
                    it[3] = (int32_t)((int64_t)(p + 1) * nb / parts);
                    it[4] = (int32_t)(slot + (size_t)p);
                    it[5] = sq->pos0 + 1;
                }
            redh[3 * ir + 0] = (int32_t)qo;
            redh[3 * ir + 1] = (int32_t)(slot * sh->pm);
            redh[3 * ir + 2] = (int32_t)((size_t)parts * sh->pm);
            ir++;
            slot += (size_t)parts;
        } else if (sh->lanes) {
            for (int g0 = 0; g0 < G; g0 += (int)sh->gr)
                for (int t0 = 0; t0 < sq->n_q; t0 += (int)sh->wg) {
                    const int last = (t0 + (int)sh->wg < sq->n_q ? t0 + (int)sh->wg : sq->n_q) - 1;
                    const int kv_end = sq->pos0 + last + 1;
                    int32_t *it = preh + ITEM_INTS * ip++;
                    it[0] = s;
                    it[1] = t0;
                    it[2] = 0;
                    it[3] = (kv_end + FA2_BLOCK - 1) / FA2_BLOCK;
                    it[4] = g0;
                    it[5] = kv_end;
                }
        } else {
            const int n_rows = sq->n_q * G;
            for (int r0 = 0; r0 < n_rows; r0 += (int)sh->rows_pre) {
                const int last = (r0 + (int)sh->rows_pre < n_rows ? r0 + (int)sh->rows_pre : n_rows) - 1;
                const int kv_end = sq->pos0 + last / G + 1; /* causal: later tiles are skipped */
                int32_t *it = preh + ITEM_INTS * ip++;
                it[0] = s;
                it[1] = r0;
                it[2] = 0;
                it[3] = (kv_end + FA2_BLOCK - 1) / FA2_BLOCK;
                it[4] = 0;
                it[5] = kv_end;
            }
        }
        qo += (size_t)sq->n_q * sh->H * sh->D;
        bo += (size_t)nb;
    }
}

attnd_status vkb_fa2_plan_build(struct vkb_fa2_plan *p, const struct fa2_args *a)
{
    struct vkb_fa2 *f = p->f;
    struct shape sh;
    p->ready = 0;
    attnd_status st = get_shape(f, a, &sh);
    if (st != ATTND_OK) return st;

    /* pipelines */
    p->pp = p->pd = p->pr = NULL;
    if (sh.lanes) {
        const uint32_t spec[5] = {(uint32_t)sh.D, (uint32_t)sh.G, sh.gr, sh.wg, (uint32_t)sh.kv_f16};
        if ((sh.n_pre || sh.n_dec) && (st = get_pipe(f, sh.lanes_tex ? K_LANES_TEX : K_LANES, spec, &p->pp))) return st;
        p->pd = p->pp; /* one shader for both */
    } else {
        const uint32_t sp[5] = {(uint32_t)sh.D, (uint32_t)sh.G, sh.rows_pre, TPR, sh.rows_pre * TPR};
        const uint32_t sd[5] = {(uint32_t)sh.D, (uint32_t)sh.G, sh.rows_dec, TPR, sh.rows_dec * TPR};
        if (sh.n_pre && (st = get_pipe(f, K_PREFILL, sp, &p->pp))) return st;
        if (sh.n_dec && (st = get_pipe(f, K_DECODE, sd, &p->pd))) return st;
    }
    if (sh.n_dec) {
        const uint32_t spec[5] = {(uint32_t)sh.D, REDUCE_WG, 0, 0, 0};
        if ((st = get_pipe(f, K_REDUCE, spec, &p->pr))) return st;
    }

    /* device buffers, then the tables written straight into them when host-visible */
    const size_t n_ints[N_BUFS] = {sh.bt_ints, (size_t)a->n_seqs * 4, sh.n_pre * ITEM_INTS, sh.n_dec * ITEM_INTS,
                                   sh.n_red * 3, 0};
    for (int i = 0; i < B_PART; i++)
        if ((st = ensure_buf(p, i, n_ints[i] * 4))) return st;
    if ((st = ensure_buf(p, B_PART, sh.n_slots * sh.pm * (size_t)sh.H * (sh.D + 2) * 4))) return st;
    size_t staged = 0;
    for (int i = 0; i < B_PART; i++)
        if (!vkb_buffer_map(p->buf[i])) staged += n_ints[i];
    if (staged > p->host_ints) {
        int32_t *h = realloc(p->host, staged * sizeof(int32_t));
        if (!h) return ATTND_ERR_NOMEM;
        p->host = h;
        p->host_ints = staged;
    }
    int32_t *dst[B_PART];
    staged = 0;
    for (int i = 0; i < B_PART; i++) {
        dst[i] = vkb_buffer_map(p->buf[i]);
        if (!dst[i]) {
            dst[i] = p->host + staged;
            staged += n_ints[i];
        }
    }
    fill_tables(a, &sh, dst[B_SEQ], dst[B_BT], dst[B_PRE], dst[B_DEC], dst[B_RED]);
    for (int i = 0; i < B_PART; i++)
        if (!vkb_buffer_map(p->buf[i]) && n_ints[i] &&
            (st = vkb_buffer_write(f->dev, p->buf[i], 0, dst[i], n_ints[i] * 4)))
            return st;

    p->push = (struct vkb_fa2_push){.n_head = (uint32_t)sh.H,
                                    .n_head_kv = (uint32_t)sh.Hkv,
                                    .kv_f16 = (uint32_t)sh.kv_f16,
                                    .block_stride = (uint32_t)(sh.stride / sh.esz),
                                    .scale = a->scale};
    p->n_pre = (uint32_t)sh.n_pre;
    p->n_dec = (uint32_t)sh.n_dec;
    p->n_red = (uint32_t)sh.n_red;
    p->q_floats = sh.q_floats;
    p->pool_bytes = (size_t)a->n_blocks * sh.stride;
    p->ready = 1;
    return ATTND_OK;
}

attnd_status vkb_fa2_record(struct vkb_fa2_plan *p, struct vkb_buffer *q, size_t q_off, struct vkb_buffer *k,
                            struct vkb_buffer *v, struct vkb_buffer *out, size_t out_off)
{
    struct vkb_device *dev = p->f->dev;
    if (!p->ready || !q || !k || !v || !out) return ATTND_ERR_INVALID;
    if (p->q_floats == 0) return ATTND_OK;
    if (q_off > UINT32_MAX - p->q_floats || out_off > UINT32_MAX - p->q_floats ||
        (q_off + p->q_floats) * 4 > vkb_buffer_size(q) || (out_off + p->q_floats) * 4 > vkb_buffer_size(out) ||
        vkb_buffer_size(k) < p->pool_bytes || vkb_buffer_size(v) < p->pool_bytes)
        return ATTND_ERR_INVALID;
    struct vkb_fa2_push push = p->push;
    push.q_off = (uint32_t)q_off;
    push.out_off = (uint32_t)out_off;
    attnd_status st = ATTND_OK;
    if (p->n_pre) {
        push.n_items = p->n_pre;
        struct vkb_buffer *b[7] = {q, k, v, p->buf[B_BT], p->buf[B_SEQ], p->buf[B_PRE], out};
        if ((st = vkb_dispatch(dev, p->pp, b, 7, &push, p->n_pre, push.n_head_kv, 1))) return st;
    }
    if (p->n_dec) {
        push.n_items = p->n_dec;
        struct vkb_buffer *b[7] = {q, k, v, p->buf[B_BT], p->buf[B_SEQ], p->buf[B_DEC], p->buf[B_PART]};
        if ((st = vkb_dispatch(dev, p->pd, b, 7, &push, p->n_dec, push.n_head_kv, 1))) return st;
        vkb_barrier(dev);
        const struct vkb_fa2_reduce_push rp = {push.n_head, push.n_head_kv, p->n_red, (uint32_t)out_off};
        struct vkb_buffer *rb[3] = {p->buf[B_RED], p->buf[B_PART], out};
        if ((st = vkb_dispatch(dev, p->pr, rb, 3, &rp, p->n_red, push.n_head, 1))) return st;
    }
    return ATTND_OK;
}

/* ------------------------------------------------------------------------------------------
 * One-shot use: host arrays in, host arrays out
 * ------------------------------------------------------------------------------------------ */

attnd_status vkb_fa2_attend(struct vkb_fa2 *f, const struct fa2_args *a, double *gpu_ms)
{
    struct vkb_device *dev = f->dev;
    if (gpu_ms) *gpu_ms = -1.0;
    if (a->n_seqs > 0 && a->seqs)
        for (int s = 0; s < a->n_seqs; s++)
            if (a->seqs[s].n_q > 0 && (!a->seqs[s].q || !a->seqs[s].out)) return ATTND_ERR_INVALID;
    struct vkb_fa2_plan *p = NULL;
    struct vkb_buffer *bq = NULL, *bk = NULL, *bv = NULL, *bout = NULL;
    float *tmp = NULL;
    attnd_status st = vkb_fa2_plan_create(f, &p);
    if (st) return st;
    if ((st = vkb_fa2_plan_build(p, a))) goto done;
    if (p->q_floats == 0) goto done;
    if (a->n_blocks > 0 && (!a->k || !a->v)) {
        st = ATTND_ERR_INVALID;
        goto done;
    }
    const size_t qb = p->q_floats * 4, pb = (p->pool_bytes + 3) & ~(size_t)3;
    if ((st = vkb_buffer_create(dev, qb, &bq)) || (st = vkb_buffer_create(dev, pb, &bk)) ||
        (st = vkb_buffer_create(dev, pb, &bv)) || (st = vkb_buffer_create(dev, qb, &bout)))
        goto done;
    float *qh = vkb_buffer_map(bq);
    if (!qh && !(qh = tmp = malloc(qb))) {
        st = ATTND_ERR_NOMEM;
        goto done;
    }
    for (size_t s = 0, qo = 0; s < (size_t)a->n_seqs; s++) {
        const size_t nf = (size_t)a->seqs[s].n_q * a->n_head * a->head_dim;
        if (nf) memcpy(qh + qo, a->seqs[s].q, nf * sizeof(float));
        qo += nf;
    }
    if ((tmp && (st = vkb_buffer_write(dev, bq, 0, qh, qb))) ||
        (p->pool_bytes && ((st = vkb_buffer_write(dev, bk, 0, a->k, p->pool_bytes)) ||
                           (st = vkb_buffer_write(dev, bv, 0, a->v, p->pool_bytes)))))
        goto done;
    if ((st = vkb_begin(dev))) goto done;
    st = vkb_fa2_record(p, bq, 0, bk, bv, bout, 0);
    {
        /* always submit: the command buffer must leave the recording state */
        attnd_status st2 = vkb_submit_wait(dev, gpu_ms);
        if (!st) st = st2;
    }
    if (st) goto done;
    const float *oh = vkb_buffer_map(bout);
    if (!oh) {
        if (!tmp && !(tmp = malloc(qb))) {
            st = ATTND_ERR_NOMEM;
            goto done;
        }
        if ((st = vkb_buffer_read(dev, bout, 0, tmp, qb))) goto done;
        oh = tmp;
    }
    for (size_t s = 0, qo = 0; s < (size_t)a->n_seqs; s++) {
        const size_t nf = (size_t)a->seqs[s].n_q * a->n_head * a->head_dim;
        if (nf) memcpy(a->seqs[s].out, oh + qo, nf * sizeof(float));
        qo += nf;
    }
done:
    vkb_buffer_destroy(dev, bq);
    vkb_buffer_destroy(dev, bk);
    vkb_buffer_destroy(dev, bv);
    vkb_buffer_destroy(dev, bout);
    vkb_fa2_plan_destroy(p);
    free(tmp);
    return st;
}
