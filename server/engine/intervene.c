/* intervene.c - interventions: the JSON form, the set's life, the hooks. See intervene.h. */
#include "attnd/intervene.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/model.h"
#include "kernels/cpu/cpu_kernels.h"

/* ---- the set ------------------------------------------------------------------------------- */

static attnd_status capture_add(struct iv_set *s, enum iv_site site, int layer, int head, float *out, size_t first,
                                size_t n_pos);

static void items_free(struct fwd_intervention *it, int n)
{
    for (int i = 0; i < n && it; i++) {
        free(it[i].positions);
        free(it[i].vector);
    }
    free(it);
}

void iv_destroy(struct iv_set *s)
{
    if (!s) return;
    items_free(s->items, s->n);
    free(s->means);
    free(s->mean_ready);
    free(s->hooks);
    free(s->caps);
    free(s);
}

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 29);
}

static uint64_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* A hash of the items' canonical bytes (kind, layer, head, scale bits, part, positions, vector
 * bits: exactly what changes the computation), never 0. */
static uint64_t fingerprint(const struct iv_set *s)
{
    uint64_t h = 0x1f83d9abfb41bd6bULL;
    for (int i = 0; i < s->n; i++) {
        const struct fwd_intervention *v = &s->items[i];
        h = mix(h, (uint64_t)v->kind << 48 | (uint64_t)(uint16_t)v->layer << 32 | (uint32_t)v->head);
        switch (v->kind) {
        case IV_HEAD_SCALE: h = mix(h, float_bits(v->scale)); break;
        case IV_HEAD_MEAN: break;
        case IV_SKIP: h = mix(h, (uint64_t)v->part); break;
        case IV_STEER:
            h = mix(h, float_bits(v->scale) | (uint64_t)v->where << 32);
            for (int k = 0; k < v->n_positions; k++) h = mix(h, (uint32_t)v->positions[k]);
            for (int k = 0; k < s->n_embd; k++) h = mix(h, float_bits(v->vector[k]));
            break;
        case IV_PATCH:
            h = mix(h, (uint64_t)v->site << 32 | (uint32_t)v->position);
            for (size_t k = 0; k < v->width; k++) h = mix(h, float_bits(v->vector[k]));
            break;
        }
    }
    return h ? h : 1;
}

static const uint8_t site_bit[] = {IV_AT_RESID_PRE, IV_AT_RESID_POST, IV_AT_ATTN_OUT, IV_AT_MLP_OUT, IV_AT_Z};

static unsigned item_hooks(const struct fwd_intervention *v)
{
    switch (v->kind) {
    case IV_PATCH: return site_bit[v->site];
    case IV_HEAD_SCALE:
    case IV_HEAD_MEAN: return IV_AT_Z;
    case IV_STEER: return IV_AT_RESID_PRE;
    case IV_SKIP:
        return v->part == IV_PART_ATTN  ? IV_AT_ATTN_OUT
               : v->part == IV_PART_MLP ? IV_AT_MLP_OUT
                                        : IV_AT_ATTN_OUT | IV_AT_MLP_OUT;
    }
    return 0;
}

/* The per-set arrays (means, hooks) and the fingerprint, once the items are in. */
static attnd_status set_finish(struct iv_set *s)
{
    s->means = calloc((size_t)(s->n ? s->n : 1) * (size_t)s->head_dim, sizeof *s->means);
    s->mean_ready = calloc((size_t)(s->n ? s->n : 1), sizeof *s->mean_ready);
    s->hooks = calloc((size_t)s->n_layer, sizeof *s->hooks);
    if (!s->means || !s->mean_ready || !s->hooks) return ATTND_ERR_NOMEM;
    for (int i = 0; i < s->n; i++) s->hooks[s->items[i].layer] |= (uint8_t)item_hooks(&s->items[i]);
    s->fingerprint = fingerprint(s);
    return ATTND_OK;
}

attnd_status iv_clone(const struct iv_set *s, struct iv_set **out)
{
    *out = NULL;
    if (!s) return ATTND_OK;
    struct iv_set *c = calloc(1, sizeof *c);
    if (!c) return ATTND_ERR_NOMEM;
    *c = (struct iv_set){.n_embd = s->n_embd, .n_layer = s->n_layer, .n_head = s->n_head, .head_dim = s->head_dim,
                         .n_prompt = s->n_prompt};
    c->items = calloc((size_t)(s->n ? s->n : 1), sizeof *c->items);
    if (!c->items) goto oom;
    for (int i = 0; i < s->n; i++, c->n++) {
        const struct fwd_intervention *v = &s->items[i];
        struct fwd_intervention *w = &c->items[i];
        *w = *v;
        w->positions = NULL, w->vector = NULL;
        if (v->positions && !(w->positions = malloc((size_t)v->n_positions * sizeof *w->positions))) goto oom;
        if (v->positions) memcpy(w->positions, v->positions, (size_t)v->n_positions * sizeof *w->positions);
        const size_t nv = v->kind == IV_PATCH ? v->width : (size_t)s->n_embd;
        if (v->vector && !(w->vector = malloc(nv * sizeof *w->vector))) goto oom;
        if (v->vector) memcpy(w->vector, v->vector, nv * sizeof *w->vector);
    }
    if (set_finish(c)) goto oom;
    for (int i = 0; i < s->n_caps; i++) {
        const struct iv_capture *k = &s->caps[i];
        if (capture_add(c, k->site, k->layer, k->head, k->out, k->first, k->n_pos)) goto oom;
    }
    *out = c;
    return ATTND_OK;
oom:
    iv_destroy(c);
    return ATTND_ERR_NOMEM;
}

attnd_status iv_create(const struct model_hparams *hp, struct iv_set **out)
{
    *out = NULL;
    struct iv_set *s = calloc(1, sizeof *s);
    if (!s) return ATTND_ERR_NOMEM;
    *s = (struct iv_set){.n_embd = hp->n_embd, .n_layer = hp->n_layer, .n_head = hp->n_head, .head_dim = hp->head_dim};
    if (set_finish(s)) {
        iv_destroy(s);
        return ATTND_ERR_NOMEM;
    }
    *out = s;
    return ATTND_OK;
}

static const char *const site_names[] = {"resid_pre", "resid_post", "attn_out", "mlp_out", "z"};

int iv_site_parse(const char *name, enum iv_site *out)
{
    for (int i = 0; i < 5; i++)
        if (name && !strcmp(name, site_names[i])) {
            *out = (enum iv_site)i;
            return 0;
        }
    return -1;
}

const char *iv_site_name(enum iv_site site) { return (unsigned)site < 5 ? site_names[site] : "?"; }

size_t iv_site_width(const struct model_hparams *hp, enum iv_site site, int head)
{
    if (site != IV_SITE_Z) return (size_t)hp->n_embd;
    return (size_t)hp->head_dim * (head >= 0 ? 1 : (size_t)hp->n_head);
}

static bool site_ok(const struct iv_set *s, enum iv_site site, int layer, int head)
{
    return (unsigned)site <= IV_SITE_Z && layer >= 0 && layer < s->n_layer && head >= -1 && head < s->n_head &&
           (site == IV_SITE_Z || head == -1);
}

static size_t set_site_width(const struct iv_set *s, enum iv_site site, int head)
{
    return site == IV_SITE_Z ? (size_t)s->head_dim * (head >= 0 ? 1 : (size_t)s->n_head) : (size_t)s->n_embd;
}

/* A capture of positions [first, n_pos) into out. */
static attnd_status capture_add(struct iv_set *s, enum iv_site site, int layer, int head, float *out, size_t first,
                                size_t n_pos)
{
    if (!site_ok(s, site, layer, head)) return ATTND_ERR_INVALID;
    struct iv_capture *nc = realloc(s->caps, (size_t)(s->n_caps + 1) * sizeof *nc);
    if (!nc) return ATTND_ERR_NOMEM;
    s->caps = nc;
    s->caps[s->n_caps++] = (struct iv_capture){site, layer, head, set_site_width(s, site, head), out, first, n_pos};
    s->hooks[layer] |= site_bit[site];
    return ATTND_OK;
}

attnd_status iv_add_capture(struct iv_set *s, enum iv_site site, int layer, int head, float *out, size_t n_pos)
{
    return capture_add(s, site, layer, head, out, 0, n_pos);
}

attnd_status iv_add_capture_at(struct iv_set *s, enum iv_site site, int layer, int head, float *out, size_t pos)
{
    return capture_add(s, site, layer, head, out, pos, pos + 1);
}

attnd_status iv_add_patch(struct iv_set *s, enum iv_site site, int layer, int head, int32_t pos, const float *vals)
{
    if (!site_ok(s, site, layer, head) || pos < 0) return ATTND_ERR_INVALID;
    const size_t w = set_site_width(s, site, head), n = (size_t)s->n + 1, hd = (size_t)s->head_dim;
    struct fwd_intervention *it = realloc(s->items, n * sizeof *it);
    if (it) s->items = it;
    float *means = it ? realloc(s->means, n * hd * sizeof *means) : NULL;
    if (means) s->means = means;
    bool *ready = means ? realloc(s->mean_ready, n * sizeof *ready) : NULL;
    if (ready) s->mean_ready = ready;
    float *v = ready ? malloc(w * sizeof *v) : NULL;
    if (!v) return ATTND_ERR_NOMEM;
    memcpy(v, vals, w * sizeof *v);
    s->mean_ready[s->n] = false;
    s->items[s->n] = (struct fwd_intervention){.kind = IV_PATCH, .layer = layer, .head = head, .site = site,
                                               .position = pos, .width = w, .vector = v};
    s->hooks[layer] |= (uint8_t)item_hooks(&s->items[s->n]);
    s->n++;
    s->fingerprint = fingerprint(s);
    return ATTND_OK;
}

attnd_status iv_output_row(const struct model *m, int token, float *out)
{
    const struct model_weight *w = &m->output;
    if (token < 0 || (size_t)token >= w->n_out) return ATTND_ERR_INVALID;
    cpu_dequant_row(w->type, (const char *)w->data + (size_t)token * w->row_bytes, out, w->n_in);
    return ATTND_OK;
}

uint64_t iv_kv_key(const struct iv_set *s)
{
    if (!s) return 0;
    for (int i = 0; i < s->n; i++)
        if (s->items[i].kind == IV_STEER && s->items[i].where == IV_POS_GENERATED) {
            uint64_t k = mix(s->fingerprint, (uint64_t)s->n_prompt);
            return k ? k : 1;
        }
    return s->fingerprint;
}

int iv_own_blocks(const struct iv_set *s) { return s && (s->n_caps > 0 || iv_has_head_mean(s)); }

void iv_capture(const struct iv_set *s, enum iv_site site, int l, const float *rows, size_t stride,
                const int32_t *pos, int n)
{
    for (int i = 0; i < s->n_caps; i++) {
        const struct iv_capture *k = &s->caps[i];
        if (k->site != site || k->layer != l) continue;
        const size_t off = site == IV_SITE_Z && k->head >= 0 ? (size_t)k->head * (size_t)s->head_dim : 0;
        for (int t = 0; t < n; t++)
            if ((size_t)pos[t] >= k->first && (size_t)pos[t] < k->n_pos)
                memcpy(k->out + ((size_t)pos[t] - k->first) * k->width, rows + (size_t)t * stride + off,
                       k->width * sizeof(float));
    }
}

int iv_matches(const struct iv_set *s, const struct model_hparams *hp)
{
    return s->n_embd == hp->n_embd && s->n_layer == hp->n_layer && s->n_head == hp->n_head &&
           s->head_dim == hp->head_dim;
}

int iv_has_head_mean(const struct iv_set *s)
{
    for (int i = 0; s && i < s->n; i++)
        if (s->items[i].kind == IV_HEAD_MEAN) return 1;
    return 0;
}

int iv_means_ready(const struct iv_set *s)
{
    for (int i = 0; s && i < s->n; i++)
        if (s->items[i].kind == IV_HEAD_MEAN && !s->mean_ready[i]) return 0;
    return 1;
}

unsigned iv_layer_hooks(const struct iv_set *s, int l) { return s && l >= 0 && l < s->n_layer ? s->hooks[l] : 0; }

int iv_skips(const struct iv_set *s, int l, enum iv_part part)
{
    for (int i = 0; s && i < s->n; i++)
        if (s->items[i].kind == IV_SKIP && s->items[i].layer == l && s->items[i].part == part) return 1;
    return 0;
}

/* ---- the hooks ----------------------------------------------------------------------------- */

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static bool steer_at(const struct iv_set *s, const struct fwd_intervention *v, int32_t pos)
{
    if (v->where == IV_POS_ALL) return true;
    if (v->where == IV_POS_GENERATED) return (size_t)pos >= s->n_prompt;
    return bsearch(&pos, v->positions, (size_t)v->n_positions, sizeof pos, cmp_i32) != NULL;
}

void iv_apply_resid_pre(const struct iv_set *s, int l, float *x, const int32_t *pos, int n)
{
    const size_t d = (size_t)s->n_embd;
    for (int i = 0; i < s->n; i++) {
        const struct fwd_intervention *v = &s->items[i];
        if (v->kind != IV_STEER || v->layer != l || v->scale == 0.0f) continue;
        for (int t = 0; t < n; t++) {
            if (!steer_at(s, v, pos[t])) continue;
            float *row = x + (size_t)t * d;
            for (size_t k = 0; k < d; k++) row[k] += v->scale * v->vector[k];
        }
    }
    iv_apply_patch(s, IV_SITE_RESID_PRE, l, x, d, pos, n);
}

void iv_apply_patch(const struct iv_set *s, enum iv_site site, int l, float *rows, size_t stride, const int32_t *pos,
                    int n)
{
    for (int i = 0; i < s->n; i++) {
        const struct fwd_intervention *v = &s->items[i];
        if (v->kind != IV_PATCH || v->layer != l || v->site != site) continue;
        const size_t off = site == IV_SITE_Z && v->head >= 0 ? (size_t)v->head * (size_t)s->head_dim : 0;
        for (int t = 0; t < n; t++)
            if (pos[t] == v->position) memcpy(rows + (size_t)t * stride + off, v->vector, v->width * sizeof(float));
    }
}

/* head_mean item i: its mean over the prompt rows among these n, unless already complete. */
static void mean_update(struct iv_set *s, int i, const float *z, size_t stride, const int32_t *pos, int n)
{
    if (s->mean_ready[i]) return;
    const size_t hd = (size_t)s->head_dim, off = (size_t)s->items[i].head * hd;
    double acc[1024];
    double *sum = hd <= 1024 ? acc : calloc(hd, sizeof *sum);
    if (!sum) return; /* out of memory: z keeps its value (the mean stays unset) */
    memset(sum, 0, hd * sizeof *sum);
    size_t cnt = 0;
    for (int t = 0; t < n; t++) {
        if ((size_t)pos[t] >= s->n_prompt) continue;
        for (size_t k = 0; k < hd; k++) sum[k] += z[(size_t)t * stride + off + k];
        cnt++;
    }
    if (cnt) {
        for (size_t k = 0; k < hd; k++) s->means[(size_t)i * hd + k] = (float)(sum[k] / (double)cnt);
        s->mean_ready[i] = cnt == s->n_prompt;
    }
    if (sum != acc) free(sum);
}

void iv_apply_z(struct iv_set *s, int l, float *z, size_t stride, const int32_t *pos, int n)
{
    const size_t hd = (size_t)s->head_dim;
    for (int i = 0; i < s->n; i++) {
        const struct fwd_intervention *v = &s->items[i];
        if (v->layer != l || (v->kind != IV_HEAD_SCALE && v->kind != IV_HEAD_MEAN)) continue;
        const size_t off = (size_t)v->head * hd;
        if (v->kind == IV_HEAD_SCALE) {
            for (int t = 0; t < n; t++)
                for (size_t k = 0; k < hd; k++) z[(size_t)t * stride + off + k] *= v->scale;
            continue;
        }
        mean_update(s, i, z, stride, pos, n);
        for (int t = 0; t < n; t++) memcpy(z + (size_t)t * stride + off, s->means + (size_t)i * hd, hd * sizeof(float));
    }
    iv_apply_patch(s, IV_SITE_Z, l, z, stride, pos, n);
}

/* ---- the JSON form ------------------------------------------------------------------------- */

/* Parse state: the model's dimensions and where an error message goes. */
struct parse {
    const struct model_hparams *hp;
    int n_ctx;
    const char *prefix;
    int idx;
    char *err;
    size_t errlen;
};

static attnd_status bad(const struct parse *p, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static attnd_status bad(const struct parse *p, const char *field, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (field) snprintf(p->err, p->errlen, "'%s[%d].%s' %s", p->prefix, p->idx, field, msg);
    else snprintf(p->err, p->errlen, "'%s[%d]' %s", p->prefix, p->idx, msg);
    return ATTND_ERR_INVALID;
}

/* An integer member in [lo, hi] (required). */
static attnd_status get_int(const struct parse *p, const cJSON *o, const char *name, int lo, int hi, int *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, name);
    char range[64];
    snprintf(range, sizeof range, "must be an integer in [%d, %d]", lo, hi);
    if (!it) return bad(p, name, "is missing (it %s)", range);
    double v = it->valuedouble;
    if (!cJSON_IsNumber(it) || !isfinite(v) || floor(v) != v || v < lo || v > hi) return bad(p, name, "%s", range);
    *out = (int)v;
    return ATTND_OK;
}

/* A finite scale with |s| <= IV_MAX_SCALE; def when absent and def_ok. */
static attnd_status get_scale(const struct parse *p, const cJSON *o, bool def_ok, float def, float *out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, "scale");
    if (!it && def_ok) {
        *out = def;
        return ATTND_OK;
    }
    if (!it) return bad(p, "scale", "is missing (%s)", "a number");
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || fabs(it->valuedouble) > IV_MAX_SCALE)
        return bad(p, "scale", "must be a finite number with |scale| <= %s", "1e4");
    *out = (float)it->valuedouble;
    return ATTND_OK;
}

static int b64_val(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+' || ch == '-') return 62;
    if (ch == '/' || ch == '_') return 63;
    return -1;
}

/* Standard or URL-safe base64 (padding optional) into exactly n bytes; -1 if it is not that. */
static int b64_decode(const char *s, unsigned char *out, size_t n)
{
    size_t len = strlen(s), o = 0;
    while (len && s[len - 1] == '=') len--;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64_val((unsigned char)s[i]);
        if (v < 0) return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o == n) return -1;
            out[o++] = (unsigned char)(acc >> bits);
        }
    }
    return o == n ? 0 : -1;
}

/* steer's and patch's "vector" (d numbers) or "vector_b64" (base64 of d little-endian float32). */
static attnd_status get_vector(const struct parse *p, const cJSON *o, size_t d, float **out)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "vector"), *b = cJSON_GetObjectItemCaseSensitive(o, "vector_b64");
    char want[96];
    snprintf(want, sizeof want, "%zu", d);
    if (!a == !b) return bad(p, NULL, "needs exactly one of 'vector' (%s numbers) or 'vector_b64'", want);
    float *v = malloc(d * sizeof *v);
    if (!v) return ATTND_ERR_NOMEM;
    *out = v;
    if (a) {
        if (!cJSON_IsArray(a) || (size_t)cJSON_GetArraySize(a) != d)
            return bad(p, "vector", "must be an array of %s numbers (the site's width)", want);
        size_t k = 0;
        const cJSON *el;
        cJSON_ArrayForEach(el, a)
        {
            if (!cJSON_IsNumber(el) || !isfinite(el->valuedouble) || fabs(el->valuedouble) > 3e38)
                return bad(p, "vector", "must hold finite numbers only%s", "");
            v[k++] = (float)el->valuedouble;
        }
        return ATTND_OK;
    }
    snprintf(want, sizeof want, "%zu little-endian float32 (%zu bytes)", d, d * 4);
    if (!cJSON_IsString(b) || b64_decode(b->valuestring, (unsigned char *)v, d * 4))
        return bad(p, "vector_b64", "must be base64 of %s", want);
    for (size_t k = 0; k < d; k++) {
        unsigned char *q = (unsigned char *)&v[k];
        uint32_t u = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        memcpy(&v[k], &u, sizeof u);
        if (!isfinite(v[k])) return bad(p, "vector_b64", "must hold finite floats only%s", "");
    }
    return ATTND_OK;
}

/* steer's "positions": "all" (the default), "generated" or an array of positions. */
static attnd_status get_positions(const struct parse *p, const cJSON *o, struct fwd_intervention *v)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, "positions");
    char range[64];
    snprintf(range, sizeof range, "%d", p->n_ctx - 1);
    v->where = IV_POS_ALL;
    if (!it || (cJSON_IsString(it) && !strcmp(it->valuestring, "all"))) return ATTND_OK;
    if (cJSON_IsString(it) && !strcmp(it->valuestring, "generated")) {
        v->where = IV_POS_GENERATED;
        return ATTND_OK;
    }
    if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) < 1 || cJSON_GetArraySize(it) > p->n_ctx)
        return bad(p, "positions", "must be \"all\", \"generated\" or a non-empty array of positions (0..%s)", range);
    v->where = IV_POS_LIST;
    if (!(v->positions = malloc((size_t)cJSON_GetArraySize(it) * sizeof *v->positions))) return ATTND_ERR_NOMEM;
    const cJSON *el;
    cJSON_ArrayForEach(el, it)
    {
        double x = el->valuedouble;
        if (!cJSON_IsNumber(el) || !isfinite(x) || floor(x) != x || x < 0 || x >= p->n_ctx)
            return bad(p, "positions", "must hold integer positions in [0, %s]", range);
        v->positions[v->n_positions++] = (int32_t)x;
    }
    qsort(v->positions, (size_t)v->n_positions, sizeof *v->positions, cmp_i32);
    int k = 0;
    for (int i = 0; i < v->n_positions; i++)
        if (!k || v->positions[k - 1] != v->positions[i]) v->positions[k++] = v->positions[i];
    v->n_positions = k;
    return ATTND_OK;
}

static attnd_status get_part(const struct parse *p, const cJSON *o, enum iv_part *out)
{
    static const char *const parts[] = {"attn", "mlp", "residual"};
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, "part");
    for (int i = 0; i < 3 && cJSON_IsString(it); i++)
        if (!strcmp(it->valuestring, parts[i])) {
            *out = (enum iv_part)i;
            return ATTND_OK;
        }
    return bad(p, "part", "must be %s", "\"attn\", \"mlp\" or \"residual\"");
}

/* The members each kind takes (anything else is refused). */
static bool member_known(enum iv_kind k, const char *name)
{
    static const char *const known[5][7] = {
        [IV_HEAD_SCALE] = {"kind", "layer", "head", "scale"},
        [IV_HEAD_MEAN] = {"kind", "layer", "head"},
        [IV_STEER] = {"kind", "layer", "vector", "vector_b64", "scale", "positions"},
        [IV_SKIP] = {"kind", "layer", "part"},
        [IV_PATCH] = {"kind", "layer", "site", "head", "position", "vector", "vector_b64"},
    };
    for (int i = 0; i < 7 && known[k][i]; i++)
        if (!strcmp(known[k][i], name)) return true;
    return false;
}

/* patch's members: site, head (z only, optional), position, the vector of the site's width. */
static attnd_status get_patch(const struct parse *p, const cJSON *o, struct fwd_intervention *v)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, "site");
    if (!cJSON_IsString(it) || iv_site_parse(it->valuestring, &v->site))
        return bad(p, "site", "must be %s", "\"resid_pre\", \"resid_post\", \"attn_out\", \"mlp_out\" or \"z\"");
    attnd_status st;
    v->head = -1;
    if (cJSON_GetObjectItemCaseSensitive(o, "head")) {
        if (v->site != IV_SITE_Z) return bad(p, "head", "is only for the %s site", "z");
        if ((st = get_int(p, o, "head", 0, p->hp->n_head - 1, &v->head))) return st;
    }
    int pos;
    if ((st = get_int(p, o, "position", 0, p->n_ctx - 1, &pos))) return st;
    v->position = pos;
    v->width = iv_site_width(p->hp, v->site, v->head);
    return get_vector(p, o, v->width, &v->vector);
}

/* One element of the array into *v. */
static attnd_status parse_one(const struct parse *p, const cJSON *o, struct fwd_intervention *v)
{
    static const char *const kinds[] = {"head_scale", "head_mean", "steer", "skip", "patch"};
    const struct model_hparams *hp = p->hp;
    if (!cJSON_IsObject(o)) return bad(p, NULL, "must be an object with a 'kind'%s", "");
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "kind");
    int kind = -1;
    for (int i = 0; i < 5 && cJSON_IsString(k); i++)
        if (!strcmp(k->valuestring, kinds[i])) kind = i;
    if (kind < 0)
        return bad(p, "kind", "must be %s", "\"head_scale\", \"head_mean\", \"steer\", \"skip\" or \"patch\"");
    v->kind = (enum iv_kind)kind;
    for (const cJSON *m = o->child; m; m = m->next) {
        if (!member_known(v->kind, m->string ? m->string : "")) {
            char f[80];
            snprintf(f, sizeof f, "%.60s", m->string ? m->string : "");
            return bad(p, f, "is not a member of a %s intervention", kinds[kind]);
        }
        for (const cJSON *q = o->child; q != m; q = q->next)
            if (q->string && m->string && !strcmp(q->string, m->string)) return bad(p, m->string, "appears twice%s", "");
    }
    attnd_status st = get_int(p, o, "layer", 0, hp->n_layer - 1, &v->layer);
    if (st) return st;
    switch (v->kind) {
    case IV_HEAD_SCALE:
        if ((st = get_int(p, o, "head", 0, hp->n_head - 1, &v->head))) return st;
        return get_scale(p, o, false, 0, &v->scale);
    case IV_HEAD_MEAN: return get_int(p, o, "head", 0, hp->n_head - 1, &v->head);
    case IV_STEER:
        if ((st = get_vector(p, o, (size_t)hp->n_embd, &v->vector)) || (st = get_scale(p, o, true, 1.0f, &v->scale)))
            return st;
        return get_positions(p, o, v);
    case IV_SKIP: return get_part(p, o, &v->part);
    case IV_PATCH: return get_patch(p, o, v);
    }
    return ATTND_ERR_INTERNAL;
}

attnd_status iv_parse_json(const cJSON *arr, const struct model_hparams *hp, int n_ctx, const char *prefix,
                           struct iv_set **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!cJSON_IsArray(arr)) {
        snprintf(err, errlen, "'%s' must be an array of interventions", prefix);
        return ATTND_ERR_INVALID;
    }
    const int n = cJSON_GetArraySize(arr);
    if (n > IV_MAX) {
        snprintf(err, errlen, "'%s' has %d entries; at most %d", prefix, n, IV_MAX);
        return ATTND_ERR_INVALID;
    }
    if (n == 0) return ATTND_OK;
    struct iv_set *s = calloc(1, sizeof *s);
    if (!s) return ATTND_ERR_NOMEM;
    *s = (struct iv_set){.n_embd = hp->n_embd, .n_layer = hp->n_layer, .n_head = hp->n_head, .head_dim = hp->head_dim};
    attnd_status st = ATTND_ERR_NOMEM;
    if (!(s->items = calloc((size_t)n, sizeof *s->items))) goto fail;
    struct parse p = {.hp = hp, .n_ctx = n_ctx, .prefix = prefix, .err = err, .errlen = errlen};
    const cJSON *el;
    cJSON_ArrayForEach(el, arr)
    {
        p.idx = s->n;
        st = parse_one(&p, el, &s->items[s->n++]);
        if (st) goto fail;
    }
    if ((st = set_finish(s))) goto fail;
    *out = s;
    return ATTND_OK;
fail:
    if (st == ATTND_ERR_NOMEM) snprintf(err, errlen, "out of memory");
    iv_destroy(s);
    return st;
}
