/* patching.c - POST /v1/patching. See patching.h. */
#include "server/api/patching.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/intervene.h"
#include "attnd/model.h"
#include "attnd/tokenizer.h"
#include "server/api/buf.h"
#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/api/ivrun.h"
#include "server/api/reply.h"

struct patch_req {
    const cJSON *clean, *corrupted, *answer, *distractor, *site, *layers, *positions, *heads;
};

struct patch {
    struct model_hparams hp;
    int32_t *clean, *corr;
    size_t n;
    int answer, distractor;
    enum iv_site site;
    int *layers, *positions, *heads; /* (n_layers), (n_positions), (n_heads: z only) */
    int n_layers, n_positions, n_heads;
    int n_cols;      /* positions, or heads for z */
    float *w;        /* (3, d): output_norm, the answer's output row, the distractor's */
    float *acts;     /* (n_layers, n, width) the clean run's site */
    size_t width;
    float *finals;   /* (2 + cells, d) the last position's resid_post: clean, corrupted, cells */
    struct iv_set **ivs; /* (2 + cells) NULL for a cell not run (cell_is_noop) */
    int n_skipped;       /* cells not run */
    double ms;
};

static const struct api_field patch_fields[] = {
    {"clean", FIELD_JSON, offsetof(struct patch_req, clean), 0, 0, FIELD_NO_GIVEN, NULL},
    {"corrupted", FIELD_JSON, offsetof(struct patch_req, corrupted), 0, 0, FIELD_NO_GIVEN, NULL},
    {"answer", FIELD_JSON, offsetof(struct patch_req, answer), 0, 0, FIELD_NO_GIVEN, NULL},
    {"distractor", FIELD_JSON, offsetof(struct patch_req, distractor), 0, 0, FIELD_NO_GIVEN, NULL},
    {"site", FIELD_JSON, offsetof(struct patch_req, site), 0, 0, FIELD_NO_GIVEN, NULL},
    {"layers", FIELD_JSON, offsetof(struct patch_req, layers), 0, 0, FIELD_NO_GIVEN, NULL},
    {"positions", FIELD_JSON, offsetof(struct patch_req, positions), 0, 0, FIELD_NO_GIVEN, NULL},
    {"heads", FIELD_JSON, offsetof(struct patch_req, heads), 0, 0, FIELD_NO_GIVEN, NULL},
    {"model", FIELD_STRING, 0, 0, 0, FIELD_NO_GIVEN, NULL},
    FIELD_END,
};

static const struct api_field *const patch_tables[] = {patch_fields, NULL};

static int n_cells(const struct patch *p) { return p->n_layers * p->n_cols; }

static void patch_free(struct patch *p)
{
    for (int i = 0; p->ivs && i < 2 + n_cells(p); i++) iv_destroy(p->ivs[i]);
    free(p->ivs);
    free(p->clean), free(p->corr);
    free(p->layers), free(p->positions), free(p->heads);
    free(p->w), free(p->acts), free(p->finals);
}

/* ---- the body ------------------------------------------------------------------------------ */

/* "answer" / "distractor": a token id, or a text of exactly one token. Returns 0 or 400. */
static int read_token(const cJSON *it, const char *name, const struct api_engine *e, int *out, char *err, size_t n)
{
    const int V = e->model->hp.n_vocab;
    double v;
    if (!it) return snprintf(err, n, "'%s' is required (a token id or a one-token text)", name), 400;
    if (cJSON_IsNumber(it)) {
        if (!api_json_int(it, 0, V - 1, &v)) return snprintf(err, n, "'%s' must be a token id in [0, %d]", name, V - 1), 400;
        *out = (int)v;
        return 0;
    }
    if (!cJSON_IsString(it) || !it->valuestring[0])
        return snprintf(err, n, "'%s' must be a token id or a non-empty text of one token", name), 400;
    int32_t *ids = NULL;
    size_t k = 0;
    attnd_status st = tok_encode(e->tok, it->valuestring, strlen(it->valuestring), false, false, &ids, &k);
    if (st) return free(ids), snprintf(err, n, "could not tokenize '%s': %s", name, attnd_status_str(st)), 500;
    if (k == 1) *out = ids[0];
    free(ids);
    if (k != 1)
        return snprintf(err, n, "'%s' is %zu tokens; it must be one token (give its id to be sure)", name, k), 400;
    return 0;
}

/* An optional array of distinct-or-not integers in [0, hi) into *out (default: 0..hi-1). */
static int read_list(const cJSON *it, const char *name, int hi, int **out, int *cnt, char *err, size_t n)
{
    const bool all = !it;
    const int k = all ? hi : cJSON_GetArraySize(it);
    if (!all && (!cJSON_IsArray(it) || k < 1))
        return snprintf(err, n, "'%s' must be a non-empty array of integers in [0, %d]", name, hi - 1), 400;
    if (!(*out = malloc((size_t)k * sizeof **out))) return snprintf(err, n, "out of memory"), 503;
    *cnt = k;
    if (all) {
        for (int i = 0; i < k; i++) (*out)[i] = i;
        return 0;
    }
    int i = 0;
    const cJSON *el;
    cJSON_ArrayForEach(el, it)
    {
        double v;
        if (!api_json_int(el, 0, hi - 1, &v))
            return snprintf(err, n, "'%s[%d]' must be an integer in [0, %d]", name, i, hi - 1), 400;
        (*out)[i++] = (int)v;
    }
    return 0;
}

/* A prompt (text or ids) through api_gen_prompt, its messages naming the field. */
static int read_prompt(const cJSON *it, const char *name, const struct api_engine *e, int32_t **toks, size_t *cnt,
                       char *err, size_t n)
{
    if (!it) return snprintf(err, n, "'%s' is required (a text or token ids)", name), 400;
    char msg[400] = "";
    int code = api_gen_prompt(it, e, toks, cnt, msg, sizeof msg);
    if (code) snprintf(err, n, "'%s': %s", name, msg);
    return code;
}

/* The prompts, tokens, site and lists into p. Returns 0 or an HTTP status with *param. */
static int read_body(const struct patch_req *q, const struct api_engine *e, struct patch *p, const char **param,
                     char *err, size_t n)
{
    int code;
    *param = "clean";
    if ((code = read_prompt(q->clean, "clean", e, &p->clean, &p->n, err, n))) return code;
    size_t n2 = 0;
    *param = "corrupted";
    if ((code = read_prompt(q->corrupted, "corrupted", e, &p->corr, &n2, err, n))) return code;
    if (n2 != p->n)
        return snprintf(err, n, "'corrupted' has %zu tokens and 'clean' %zu: they must have the same count", n2, p->n),
               400;
    *param = "answer";
    if ((code = read_token(q->answer, "answer", e, &p->answer, err, n))) return code;
    *param = "distractor";
    if ((code = read_token(q->distractor, "distractor", e, &p->distractor, err, n))) return code;
    *param = "site";
    if (!cJSON_IsString(q->site) || iv_site_parse(q->site->valuestring, &p->site))
        return snprintf(err, n, "'site' must be resid_pre, resid_post, attn_out, mlp_out or z"), 400;
    *param = "layers";
    if ((code = read_list(q->layers, "layers", p->hp.n_layer, &p->layers, &p->n_layers, err, n))) return code;
    *param = "positions";
    if ((code = read_list(q->positions, "positions", (int)p->n, &p->positions, &p->n_positions, err, n))) return code;
    *param = "heads";
    if (q->heads && p->site != IV_SITE_Z) return snprintf(err, n, "'heads' is only for the z site"), 400;
    if (p->site == IV_SITE_Z && (code = read_list(q->heads, "heads", p->hp.n_head, &p->heads, &p->n_heads, err, n)))
        return code;
    p->n_cols = p->site == IV_SITE_Z ? p->n_heads : p->n_positions;
    *param = p->site == IV_SITE_Z ? "heads" : "positions";
    if (n_cells(p) > API_PATCH_MAX_CELLS)
        return snprintf(err, n, "the grid would have %d cells (layers x %s); at most %d", n_cells(p), *param,
                        API_PATCH_MAX_CELLS), 400;
    const double hd = p->hp.head_dim, width = (double)iv_site_width(&p->hp, p->site, -1);
    const double floats = (double)p->n_layers * (double)p->n * width +
                          n_cells(p) * (p->site == IV_SITE_Z ? p->n_positions * hd : width);
    if (floats > API_PATCH_MAX_FLOATS)
        return snprintf(err, n, "the clean activations and patches would take %.0f floats; at most %d (fewer layers "
                        "or positions)", floats, API_PATCH_MAX_FLOATS), 413;
    *param = NULL;
    return 0;
}

/* The two runs' sets (the clean one capturing the site at each layer), the output rows. */
static int prepare(const struct api_engine *e, struct patch *p, char *err, size_t n)
{
    const size_t d = (size_t)p->hp.n_embd;
    p->width = iv_site_width(&p->hp, p->site, -1);
    p->w = malloc(3 * d * sizeof *p->w);
    p->acts = malloc((size_t)p->n_layers * p->n * p->width * sizeof *p->acts);
    p->finals = malloc((size_t)(2 + n_cells(p)) * d * sizeof *p->finals);
    p->ivs = calloc((size_t)(2 + n_cells(p)), sizeof *p->ivs);
    if (!p->w || !p->acts || !p->finals || !p->ivs) return snprintf(err, n, "out of memory"), 503;
    memcpy(p->w, e->model->output_norm, d * sizeof *p->w);
    if (iv_output_row(e->model, p->answer, p->w + d) || iv_output_row(e->model, p->distractor, p->w + 2 * d))
        return snprintf(err, n, "the output matrix has no row for the answer or the distractor"), 400;
    for (int r = 0; r < 2; r++) {
        if (iv_create(&p->hp, &p->ivs[r]) ||
            iv_add_capture_at(p->ivs[r], IV_SITE_RESID_POST, p->hp.n_layer - 1, -1, p->finals + (size_t)r * d, p->n - 1))
            return snprintf(err, n, "out of memory"), 503;
    }
    for (int i = 0; i < p->n_layers; i++)
        if (iv_add_capture(p->ivs[0], p->site, p->layers[i], -1, p->acts + (size_t)i * p->n * p->width, p->n))
            return snprintf(err, n, "out of memory"), 503;
    return 0;
}

/* 1 if column ci's patch writes only positions before the first token where the prompts differ:
 * the clean and corrupted activations there are the same, so the patched run is the corrupted one. */
static int cell_is_noop(const struct patch *p, int ci)
{
    size_t first = 0;
    while (first < p->n && p->clean[first] == p->corr[first]) first++;
    if (p->site != IV_SITE_Z) return (size_t)p->positions[ci] < first;
    for (int k = 0; k < p->n_positions; k++)
        if ((size_t)p->positions[k] >= first) return 0;
    return 1;
}

/* Cell (layer index li, column ci): the corrupted run with the clean activation written in. */
static int cell_set(struct patch *p, int li, int ci, struct iv_set **out)
{
    const size_t d = (size_t)p->hp.n_embd, hd = (size_t)p->hp.head_dim;
    const int l = p->layers[li], cell = li * p->n_cols + ci;
    const float *acts = p->acts + (size_t)li * p->n * p->width;
    if (iv_create(&p->hp, out) ||
        iv_add_capture_at(*out, IV_SITE_RESID_POST, p->hp.n_layer - 1, -1, p->finals + (size_t)(2 + cell) * d, p->n - 1))
        return -1;
    if (p->site != IV_SITE_Z) {
        const int pos = p->positions[ci];
        return iv_add_patch(*out, p->site, l, -1, pos, acts + (size_t)pos * p->width) ? -1 : 0;
    }
    const int h = p->heads[ci];
    for (int k = 0; k < p->n_positions; k++) {
        const int pos = p->positions[k];
        if (iv_add_patch(*out, IV_SITE_Z, l, h, pos, acts + (size_t)pos * p->width + (size_t)h * hd)) return -1;
    }
    return 0;
}

/* answer - distractor logits from a last-position resid_post: final RMSNorm, two output rows. */
static double logit_diff(const struct patch *p, const float *x)
{
    const size_t d = (size_t)p->hp.n_embd;
    double ss = 0, dot = 0;
    for (size_t k = 0; k < d; k++) ss += (double)x[k] * x[k];
    const double inv = 1.0 / sqrt(ss / (double)d + p->hp.rms_eps);
    for (size_t k = 0; k < d; k++) dot += (double)x[k] * p->w[k] * ((double)p->w[d + k] - p->w[2 * d + k]);
    return dot * inv;
}

/* ---- the runs ------------------------------------------------------------------------------ */

/* Phase 1 (clean, corrupted), then every cell at once. Takes the engine and releases it. */
static int run(struct api_conn *c, struct api_engine *e, struct patch *p, char *err, size_t n)
{
    const int cells = n_cells(p);
    struct ivrun_job *jobs = calloc((size_t)(2 + cells), sizeof *jobs);
    struct sched *s = e->sched;
    if (!jobs) return api_engine_release(c->srv), snprintf(err, n, "out of memory"), 503;
    jobs[0] = (struct ivrun_job){p->clean, p->n, p->ivs[0]};
    jobs[1] = (struct ivrun_job){p->corr, p->n, p->ivs[1]};
    int code = ivrun_all(c, e, jobs, 2, err, n), k = 0;
    const size_t d = (size_t)p->hp.n_embd;
    for (int i = 0; !code && i < cells; i++) {
        if (cell_is_noop(p, i % p->n_cols)) { /* the corrupted run itself */
            memcpy(p->finals + (size_t)(2 + i) * d, p->finals + d, d * sizeof *p->finals);
            p->n_skipped++;
            continue;
        }
        if (cell_set(p, i / p->n_cols, i % p->n_cols, &p->ivs[2 + i])) code = 503, snprintf(err, n, "out of memory");
        jobs[2 + k++] = (struct ivrun_job){p->corr, p->n, p->ivs[2 + i]};
    }
    if (!code && k && (!api_engine_acquire(c->srv, e) || (e->sched != s && (api_engine_release(c->srv), 1))))
        code = 503, snprintf(err, n, "the model was unloaded or replaced");
    if (!code && k) code = ivrun_all(c, e, jobs + 2, k, err, n);
    free(jobs);
    return code;
}

/* ---- the answer ---------------------------------------------------------------------------- */

static void put_ints(struct api_buf *b, const char *name, const int *v, int n)
{
    api_buf_printf(b, "\"%s\":[", name);
    for (int i = 0; i < n; i++) api_buf_printf(b, "%s%d", i ? "," : "", v[i]);
    api_buf_puts(b, "],");
}

static void put_toks(struct api_buf *b, const char *name, const int32_t *v, size_t n)
{
    api_buf_printf(b, "\"%s\":[", name);
    for (size_t i = 0; i < n; i++) api_buf_printf(b, "%s%d", i ? "," : "", v[i]);
    api_buf_puts(b, "],");
}

/* The grid (normalised, or the raw differences) as rows per layer. */
static void put_grid(struct api_buf *b, const struct patch *p, double cl, double co, bool raw)
{
    const size_t d = (size_t)p->hp.n_embd;
    api_buf_puts(b, raw ? "\"patched_diff\":[" : "\"grid\":[");
    for (int li = 0; li < p->n_layers; li++) {
        api_buf_puts(b, li ? ",[" : "[");
        for (int ci = 0; ci < p->n_cols; ci++) {
            const double v = logit_diff(p, p->finals + (size_t)(2 + li * p->n_cols + ci) * d);
            if (ci) api_buf_put(b, ",", 1);
            api_buf_float(b, raw ? v : cl != co ? (v - co) / (cl - co) : NAN);
        }
        api_buf_puts(b, "]");
    }
    api_buf_puts(b, "],");
}

static enum MHD_Result answer(struct api_conn *c, const struct patch *p)
{
    const size_t d = (size_t)p->hp.n_embd;
    const double cl = logit_diff(p, p->finals), co = logit_diff(p, p->finals + d);
    struct api_buf b = {0};
    api_buf_puts(&b, "{\"clean_diff\":");
    api_buf_float(&b, cl);
    api_buf_puts(&b, ",\"corrupted_diff\":");
    api_buf_float(&b, co);
    api_buf_printf(&b, ",\"site\":\"%s\",", iv_site_name(p->site));
    put_ints(&b, "layers", p->layers, p->n_layers);
    put_ints(&b, "positions", p->positions, p->n_positions);
    if (p->site == IV_SITE_Z) put_ints(&b, "heads", p->heads, p->n_heads);
    put_grid(&b, p, cl, co, false);
    put_grid(&b, p, cl, co, true);
    api_buf_puts(&b, "\"tokens\":{");
    put_toks(&b, "clean", p->clean, p->n);
    put_toks(&b, "corrupted", p->corr, p->n);
    api_buf_printf(&b, "\"answer\":%d,\"distractor\":%d},\"runs\":%d,\"skipped\":%d,\"ms\":%.3f}", p->answer,
                   p->distractor, 2 + n_cells(p) - p->n_skipped, p->n_skipped, p->ms);
    return api_respond_buf(c, &b);
}

enum MHD_Result api_patching(struct api_conn *c)
{
    enum MHD_Result ret;
    struct api_engine e;
    cJSON *root = api_begin(c, &e, &ret);
    if (!root) return ret;
    char err[512] = "";
    const double t0 = api_now();
    struct patch p = {.hp = e.model->hp};
    struct patch_req q = {0};
    const char *param = NULL;
    const struct api_field_ctx x = {.c = c, .e = &e, .root = root, .dst = &q};
    int code = api_fields_read(patch_tables, &x, &param, err, sizeof err);
    if (!code) code = read_body(&q, &e, &p, &param, err, sizeof err);
    if (!code) code = prepare(&e, &p, err, sizeof err);
    if (code) api_engine_release(c->srv);
    else code = run(c, &e, &p, err, sizeof err); /* releases the engine */
    p.ms = (api_now() - t0) * 1e3;
    cJSON_Delete(root);
    ret = code == 499 ? MHD_NO : code ? api_error_retry(c, code, "%s", err) : answer(c, &p);
    patch_free(&p);
    return ret;
}
