/* vk_fa2.c - host side of the FA2 compute shaders (see vk_fa2.h and fa2_core.glsl). */
#include "kernels/vulkan/vk_fa2.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "spv_fa2_decode.h"
#include "spv_fa2_prefill.h"
#include "spv_fa2_reduce.h"

/* Mirrors the push_constant block of fa2_core.glsl. */
struct vkb_fa2_push {
    uint32_t n_head, n_head_kv;
    uint32_t kv_f16;       /* 1: F16 pools */
    uint32_t block_stride; /* elements */
    uint32_t n_items;
    float scale;
    uint32_t pad0, pad1;
};
static_assert(sizeof(struct vkb_fa2_push) == 32 && sizeof(struct vkb_fa2_push) <= 128, "push block");

/* Mirrors the push_constant block of fa2_reduce.comp. */
struct vkb_fa2_reduce_push {
    uint32_t n_head, n_head_kv, n_items, pad0;
};
static_assert(sizeof(struct vkb_fa2_reduce_push) == 16 && sizeof(struct vkb_fa2_reduce_push) <= 128, "push block");

#define MAX_ROWS 16u /* query rows per workgroup */
#define TPR 4u       /* threads per query row: head_dim / TPR <= 64 (MAXJ in the shader). More
                      * threads per row for few-row (decode) workgroups hung lavapipe at
                      * head_dim >= 192 (unexplained yet), so it stays 4. */

static uint32_t tpr_of(uint32_t rows) { (void)rows; return TPR; }
#define N_PIPES 24
#define ITEM_INTS 6
#define REDUCE_WG 64u

enum { K_PREFILL, K_DECODE, K_REDUCE };

struct pipe_entry {
    int kind, D, G;
    uint32_t rows;
    struct vkb_pipeline *p;
};

struct vkb_fa2 {
    struct vkb_device *dev;
    struct pipe_entry pipes[N_PIPES];
    int n_pipes;
};

attnd_status vkb_fa2_create(struct vkb_device *dev, struct vkb_fa2 **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return ATTND_ERR_NOMEM;
    (*out)->dev = dev;
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
        const uint32_t wg = rows * tpr_of(rows);
        if (shared <= l->max_shared_bytes && wg <= l->max_wg_invocations && wg <= l->max_wg_size[0]) return rows;
    }
    return 0;
}

static attnd_status get_pipe(struct vkb_fa2 *f, int kind, int D, int G, uint32_t rows, struct vkb_pipeline **out)
{
    for (int i = 0; i < f->n_pipes; i++) {
        const struct pipe_entry *e = &f->pipes[i];
        if (e->kind == kind && e->D == D && (kind == K_REDUCE || (e->G == G && e->rows == rows))) {
            *out = e->p;
            return ATTND_OK;
        }
    }
    if (f->n_pipes == N_PIPES) { /* evict the oldest */
        vkb_pipeline_destroy(f->dev, f->pipes[0].p);
        memmove(f->pipes, f->pipes + 1, (N_PIPES - 1) * sizeof f->pipes[0]);
        f->n_pipes--;
    }
    attnd_status st;
    struct vkb_pipeline *p = NULL;
    if (kind == K_REDUCE) {
        const uint32_t spec[2] = {(uint32_t)D, REDUCE_WG};
        st = vkb_pipeline_create(f->dev, spv_fa2_reduce, sizeof spv_fa2_reduce, 3, sizeof(struct vkb_fa2_reduce_push),
                                 spec, 2, &p);
    } else {
        const uint32_t spec[5] = {(uint32_t)D, (uint32_t)G, rows, tpr_of(rows), rows * tpr_of(rows)};
        st = kind == K_PREFILL ? vkb_pipeline_create(f->dev, spv_fa2_prefill, sizeof spv_fa2_prefill, 7,
                                                     sizeof(struct vkb_fa2_push), spec, 5, &p)
                               : vkb_pipeline_create(f->dev, spv_fa2_decode, sizeof spv_fa2_decode, 7,
                                                     sizeof(struct vkb_fa2_push), spec, 5, &p);
    }
    if (st != ATTND_OK) return st;
    f->pipes[f->n_pipes++] = (struct pipe_entry){kind, D, G, rows, p};
    *out = p;
    return ATTND_OK;
}

/* Key tiles one workgroup may walk. llvmpipe (the CPU device) ends a shader invocation after
 * 65535 loop iterations in total; count those of one tile in fa2_core.glsl (the tile loop, the
 * K and V loads unrolled by 4, the score loop times the dot product unrolled by 8) and keep a
 * margin for the query load. Unlimited on other devices. */
static int tile_cap(const struct vkb_limits *l, uint32_t D, uint32_t rows)
{
    if (!l->is_cpu) return INT32_MAX;
    const uint32_t wg = rows * tpr_of(rows);
    const uint32_t per_tile = 1 + 2 * ((16 * D + 4 * wg - 1) / (4 * wg)) + ((rows * 16 + wg - 1) / wg) * ((D + 7) / 8);
    return (int)((65535u - 4096u) / per_tile);
}

/* Parts of a decode sequence of nb blocks: n_split, at most nb, at least enough for the cap. */
static int dec_parts(int n_split, int nb, int cap)
{
    int parts = n_split < nb ? n_split : nb;
    const int need = (nb + cap - 1) / cap;
    return parts < need ? need : parts;
}

static int nblk(const struct fa2_seq *s) { return (s->pos0 + s->n_q + FA2_BLOCK - 1) / FA2_BLOCK; }

attnd_status vkb_fa2_attend(struct vkb_fa2 *f, const struct fa2_args *a, double *gpu_ms)
{
    struct vkb_device *dev = f->dev;
    const struct vkb_limits *lim = vkb_device_limits(dev);
    if (gpu_ms) *gpu_ms = -1.0;
    if (a->n_head_kv < 1 || a->n_head < a->n_head_kv || a->n_head % a->n_head_kv || a->head_dim < 1 ||
        a->head_dim > FA2_MAX_HEAD_DIM || (a->kv_type != TENSOR_F16 && a->kv_type != TENSOR_F32) || a->n_seqs < 0 ||
        a->n_blocks < 0 || a->n_split < 1 || (a->n_seqs && !a->seqs))
        return ATTND_ERR_INVALID;
    const int D = a->head_dim, G = a->n_head / a->n_head_kv, Hkv = a->n_head_kv, H = a->n_head;
    const size_t esz = a->kv_type == TENSOR_F16 ? 2 : 4;
    const size_t dense = (size_t)Hkv * FA2_BLOCK * D * esz;
    const size_t stride = a->block_stride ? a->block_stride : dense;
    if (stride < dense || stride % esz || stride / esz > UINT32_MAX) return ATTND_ERR_INVALID;
    const size_t pool_bytes = (size_t)a->n_blocks * stride;
    if (pool_bytes / esz > UINT32_MAX) return ATTND_ERR_RANGE;

    const uint32_t rows_pre = pick_rows(lim, (uint32_t)D, MAX_ROWS);
    uint32_t g2 = 1;
    while (g2 < (uint32_t)G && g2 < MAX_ROWS) g2 *= 2;
    const uint32_t rows_dec = pick_rows(lim, (uint32_t)D, g2);
    if (!rows_pre || !rows_dec) return ATTND_ERR_UNSUPPORTED;
    const int cap_pre = tile_cap(lim, (uint32_t)D, rows_pre), cap_dec = tile_cap(lim, (uint32_t)D, rows_dec);

    /* sizes and validation of the block tables */
    size_t q_floats = 0, bt_ints = 0, n_pre = 0, n_dec = 0, n_red = 0, n_slots = 0;
    for (int s = 0; s < a->n_seqs; s++) {
        const struct fa2_seq *sq = &a->seqs[s];
        if (sq->n_q < 0 || sq->pos0 < 0 || (sq->n_q > 0 && (!sq->q || !sq->out || !sq->block_table)))
            return ATTND_ERR_INVALID;
        if (sq->n_q == 0) continue;
        const int nb = nblk(sq);
        for (int b = 0; b < nb; b++)
            if (sq->block_table[b] < 0 || sq->block_table[b] >= a->n_blocks) return ATTND_ERR_INVALID;
        q_floats += (size_t)sq->n_q * H * D;
        bt_ints += (size_t)nb;
        if (sq->n_q == 1) {
            const int parts = dec_parts(a->n_split, nb, cap_dec);
            n_dec += (size_t)parts * ((G + rows_dec - 1) / rows_dec);
            n_slots += (size_t)parts;
            n_red++;
        } else {
            if (nb > cap_pre) return ATTND_ERR_RANGE; /* a prefill chunk this long: CPU device only */
            n_pre += ((size_t)sq->n_q * G + rows_pre - 1) / rows_pre;
        }
    }
    if (q_floats == 0) return ATTND_OK;

    attnd_status st = ATTND_OK;
    float *qh = malloc(q_floats * sizeof(float));
    int32_t *bth = malloc((bt_ints ? bt_ints : 1) * sizeof(int32_t));
    int32_t *seqh = malloc((size_t)a->n_seqs * 4 * sizeof(int32_t));
    int32_t *preh = malloc((n_pre ? n_pre : 1) * ITEM_INTS * sizeof(int32_t));
    int32_t *dech = malloc((n_dec ? n_dec : 1) * ITEM_INTS * sizeof(int32_t));
    int32_t *redh = malloc((n_red ? n_red : 1) * 3 * sizeof(int32_t));
    struct vkb_buffer *bq = NULL, *bk = NULL, *bv = NULL, *bbt = NULL, *bseq = NULL, *bpre = NULL, *bdec = NULL,
                      *bred = NULL, *bout = NULL, *bpart = NULL;
    if (!qh || !bth || !seqh || !preh || !dech || !redh) {
        st = ATTND_ERR_NOMEM;
        goto done;
    }
    {
        size_t qo = 0, bo = 0, ip = 0, id = 0, ir = 0, slot = 0;
        for (int s = 0; s < a->n_seqs; s++) {
            const struct fa2_seq *sq = &a->seqs[s];
            seqh[4 * s + 0] = (int32_t)qo;
            seqh[4 * s + 1] = sq->n_q;
            seqh[4 * s + 2] = sq->pos0;
            seqh[4 * s + 3] = (int32_t)bo;
            if (sq->n_q == 0) continue;
            const int nb = nblk(sq);
            const size_t nf = (size_t)sq->n_q * H * D;
            memcpy(qh + qo, sq->q, nf * sizeof(float));
            memcpy(bth + bo, sq->block_table, (size_t)nb * sizeof(int32_t));
            if (sq->n_q == 1) {
                const int parts = dec_parts(a->n_split, nb, cap_dec);
                for (int p = 0; p < parts; p++)
                    for (int r0 = 0; r0 < G; r0 += (int)rows_dec) {
                        int32_t *it = dech + ITEM_INTS * id++;
                        it[0] = s;
                        it[1] = r0;
                        it[2] = (int32_t)((int64_t)p * nb / parts);
                        it[3] = (int32_t)((int64_t)(p + 1) * nb / parts);
                        it[4] = (int32_t)(slot + (size_t)p);
                        it[5] = sq->pos0 + 1;
                    }
                redh[3 * ir + 0] = (int32_t)qo;
                redh[3 * ir + 1] = (int32_t)slot;
                redh[3 * ir + 2] = parts;
                ir++;
                slot += (size_t)parts;
            } else {
                const int n_rows = sq->n_q * G;
                for (int r0 = 0; r0 < n_rows; r0 += (int)rows_pre) {
                    const int last = (r0 + (int)rows_pre < n_rows ? r0 + (int)rows_pre : n_rows) - 1;
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
            qo += nf;
            bo += (size_t)nb;
        }
    }
    const size_t part_floats = n_slots * (size_t)H * (D + 2);
    if ((st = vkb_buffer_create(dev, q_floats * 4, &bq)) || (st = vkb_buffer_create(dev, (pool_bytes + 3) & ~(size_t)3, &bk)) ||
        (st = vkb_buffer_create(dev, (pool_bytes + 3) & ~(size_t)3, &bv)) || (st = vkb_buffer_create(dev, bt_ints * 4, &bbt)) ||
        (st = vkb_buffer_create(dev, (size_t)a->n_seqs * 16, &bseq)) ||
        (st = vkb_buffer_create(dev, n_pre * ITEM_INTS * 4, &bpre)) ||
        (st = vkb_buffer_create(dev, n_dec * ITEM_INTS * 4, &bdec)) || (st = vkb_buffer_create(dev, n_red * 12, &bred)) ||
        (st = vkb_buffer_create(dev, q_floats * 4, &bout)) || (st = vkb_buffer_create(dev, part_floats * 4, &bpart)))
        goto done;
    if ((st = vkb_buffer_write(dev, bq, 0, qh, q_floats * 4)) || (st = vkb_buffer_write(dev, bk, 0, a->k, pool_bytes)) ||
        (st = vkb_buffer_write(dev, bv, 0, a->v, pool_bytes)) || (st = vkb_buffer_write(dev, bbt, 0, bth, bt_ints * 4)) ||
        (st = vkb_buffer_write(dev, bseq, 0, seqh, (size_t)a->n_seqs * 16)) ||
        (st = vkb_buffer_write(dev, bpre, 0, preh, n_pre * ITEM_INTS * 4)) ||
        (st = vkb_buffer_write(dev, bdec, 0, dech, n_dec * ITEM_INTS * 4)) ||
        (st = vkb_buffer_write(dev, bred, 0, redh, n_red * 12)))
        goto done;

    struct vkb_pipeline *pp = NULL, *pd = NULL, *pr = NULL;
    if (n_pre && (st = get_pipe(f, K_PREFILL, D, G, rows_pre, &pp))) goto done;
    if (n_dec && ((st = get_pipe(f, K_DECODE, D, G, rows_dec, &pd)) || (st = get_pipe(f, K_REDUCE, D, G, 0, &pr))))
        goto done;
    if ((st = vkb_begin(dev))) goto done;
    const struct vkb_fa2_push push = {.n_head = (uint32_t)H,
                                      .n_head_kv = (uint32_t)Hkv,
                                      .kv_f16 = a->kv_type == TENSOR_F16,
                                      .block_stride = (uint32_t)(stride / esz),
                                      .scale = a->scale};
    if (n_pre) {
        struct vkb_fa2_push p = push;
        p.n_items = (uint32_t)n_pre;
        struct vkb_buffer *b[7] = {bq, bk, bv, bbt, bseq, bpre, bout};
        st = vkb_dispatch(dev, pp, b, 7, &p, (uint32_t)n_pre, (uint32_t)Hkv, 1);
    }
    if (!st && n_dec) {
        struct vkb_fa2_push p = push;
        p.n_items = (uint32_t)n_dec;
        struct vkb_buffer *b[7] = {bq, bk, bv, bbt, bseq, bdec, bpart};
        st = vkb_dispatch(dev, pd, b, 7, &p, (uint32_t)n_dec, (uint32_t)Hkv, 1);
        vkb_barrier(dev);
        const struct vkb_fa2_reduce_push rp = {(uint32_t)H, (uint32_t)Hkv, (uint32_t)n_red, 0};
        struct vkb_buffer *rb[3] = {bred, bpart, bout};
        if (!st) st = vkb_dispatch(dev, pr, rb, 3, &rp, (uint32_t)n_red, (uint32_t)H, 1);
    }
    {
        /* always submit: the command buffer must leave the recording state */
        attnd_status st2 = vkb_submit_wait(dev, gpu_ms);
        if (!st) st = st2;
    }
    if (st) goto done;
    if ((st = vkb_buffer_read(dev, bout, 0, qh, q_floats * 4))) goto done;
    {
        size_t qo = 0;
        for (int s = 0; s < a->n_seqs; s++) {
            const struct fa2_seq *sq = &a->seqs[s];
            const size_t nf = (size_t)sq->n_q * H * D;
            if (nf) memcpy(sq->out, qh + qo, nf * sizeof(float));
            qo += nf;
        }
    }
done:
    vkb_buffer_destroy(dev, bq);
    vkb_buffer_destroy(dev, bk);
    vkb_buffer_destroy(dev, bv);
    vkb_buffer_destroy(dev, bbt);
    vkb_buffer_destroy(dev, bseq);
    vkb_buffer_destroy(dev, bpre);
    vkb_buffer_destroy(dev, bdec);
    vkb_buffer_destroy(dev, bred);
    vkb_buffer_destroy(dev, bout);
    vkb_buffer_destroy(dev, bpart);
    free(qh);
    free(bth);
    free(seqh);
    free(preh);
    free(dech);
    free(redh);
    return st;
}
