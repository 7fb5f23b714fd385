/* embeddings.c - POST /v1/embeddings. See embeddings.h. */
#include "server/api/embeddings.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/intervene.h"
#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "server/api/buf.h"
#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/api/ivrun.h"
#include "server/api/oai_common.h"
#include "server/api/reply.h"

struct emb_req {
    const cJSON *input, *encoding, *dimensions;
};

struct emb_in {
    int32_t *toks;
    size_t n;
    float *rows; /* (n, d) the last layer's resid_post */
    struct iv_set *iv;
};

struct emb {
    struct emb_in *in;
    int n_in;
    size_t n_tokens;
    int d, dims;
    bool b64;
};

#define SEEN(f) \
    static int read_##f(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen) \
    {                                                                                           \
        ((struct emb_req *)x->dst)->f = it;                                                     \
        return 0;                                                                               \
    }
SEEN(input)
SEEN(encoding)
SEEN(dimensions)

static const struct api_field emb_fields[] = {
    {"input", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_input},
    {"encoding_format", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_encoding},
    {"dimensions", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_dimensions},
    {"model", FIELD_STRING, 0, 0, 0, FIELD_NO_GIVEN, NULL},
    {"user", FIELD_IGNORED, 0, 0, 0, FIELD_NO_GIVEN, NULL},
    FIELD_END,
};

static const struct api_field *const emb_tables[] = {emb_fields, NULL};

static void emb_free(struct emb *m)
{
    for (int i = 0; m->in && i < m->n_in; i++) {
        free(m->in[i].toks);
        free(m->in[i].rows);
        iv_destroy(m->in[i].iv);
    }
    free(m->in);
}

/* One input (a string or an array of token ids) into in. Returns 0 or an HTTP status. */
static int read_one(const cJSON *it, const char *path, const struct api_engine *e, struct emb_in *in, char *err,
                    size_t n)
{
    const int V = e->model->hp.n_vocab;
    if (cJSON_IsString(it)) {
        size_t len = strlen(it->valuestring);
        if (!len) return snprintf(err, n, "'%s' is an empty string", path), 400;
        attnd_status st = tok_encode(e->tok, it->valuestring, len, true, false, &in->toks, &in->n);
        if (st) return snprintf(err, n, "could not tokenize '%s': %s", path, attnd_status_str(st)), 500;
    } else {
        const int cnt = cJSON_GetArraySize(it);
        if (cnt < 1) return snprintf(err, n, "'%s' is an empty array", path), 400;
        if (!(in->toks = malloc((size_t)cnt * sizeof *in->toks))) return snprintf(err, n, "out of memory"), 503;
        const cJSON *el;
        cJSON_ArrayForEach(el, it)
        {
            double v;
            if (!api_json_int(el, 0, V - 1, &v))
                return snprintf(err, n, "'%s'[%zu] is not a token id (0..%d)", path, in->n, V - 1), 400;
            in->toks[in->n++] = (int32_t)v;
        }
    }
    if (in->n == 0) return snprintf(err, n, "'%s' has no tokens", path), 400;
    if (in->n > (size_t)sched_n_ctx(e->sched))
        return snprintf(err, n, "'%s' has %zu tokens; the context holds %d", path, in->n, sched_n_ctx(e->sched)), 400;
    return 0;
}

/* "input" in its four forms into m->in. Returns 0 or an HTTP status. */
static int read_inputs(const cJSON *it, const struct api_engine *e, struct emb *m, char *err, size_t n)
{
    const char *form = "'input' must be a string, an array of strings, an array of token ids or an array of arrays "
                       "of token ids";
    if (!it) return snprintf(err, n, "'input' is required"), 400;
    if (!cJSON_IsString(it) && !cJSON_IsArray(it)) return snprintf(err, n, "%s", form), 400;
    const bool single = cJSON_IsString(it) || (it->child && cJSON_IsNumber(it->child));
    const int cnt = single ? 1 : cJSON_GetArraySize(it);
    if (cnt < 1 || cnt > API_EMB_MAX_INPUTS)
        return snprintf(err, n, "'input' must hold 1..%d inputs (it has %d)", API_EMB_MAX_INPUTS, cnt), 400;
    if (!(m->in = calloc((size_t)cnt, sizeof *m->in))) return snprintf(err, n, "out of memory"), 503;
    m->n_in = cnt;
    if (single) return read_one(it, "input", e, &m->in[0], err, n);
    int i = 0, code;
    const cJSON *el;
    cJSON_ArrayForEach(el, it)
    {
        char path[32];
        snprintf(path, sizeof path, "input[%d]", i);
        if (!cJSON_IsString(el) && !cJSON_IsArray(el)) return snprintf(err, n, "%s", form), 400;
        if (cJSON_IsString(el) != cJSON_IsString(it->child))
            return snprintf(err, n, "'%s': an array of inputs holds strings only or arrays of ids only", path), 400;
        if ((code = read_one(el, path, e, &m->in[i++], err, n))) return code;
    }
    return 0;
}

/* The other fields and a capture set per input. Returns 0 or an HTTP status with *param. */
static int prepare(const struct emb_req *q, const struct api_engine *e, struct emb *m, const char **param, char *err,
                   size_t n)
{
    const struct model_hparams *hp = &e->model->hp;
    int code;
    *param = "input";
    if ((code = read_inputs(q->input, e, m, err, n))) return code;
    for (int i = 0; i < m->n_in; i++) m->n_tokens += m->in[i].n;
    if (m->n_tokens > API_EMB_MAX_TOKENS)
        return snprintf(err, n, "'input' has %zu tokens in all; at most %d", m->n_tokens, API_EMB_MAX_TOKENS), 400;
    const cJSON *en = q->encoding;
    *param = "encoding_format";
    if (en && !cJSON_IsNull(en) &&
        !(cJSON_IsString(en) && (!strcmp(en->valuestring, "float") || !strcmp(en->valuestring, "base64"))))
        return snprintf(err, n, "'encoding_format' must be \"float\" or \"base64\""), 400;
    m->b64 = cJSON_IsString(en) && !strcmp(en->valuestring, "base64");
    m->d = m->dims = hp->n_embd;
    double v;
    *param = "dimensions";
    if (q->dimensions && !cJSON_IsNull(q->dimensions) && !api_json_int(q->dimensions, 1, hp->n_embd, &v))
        return snprintf(err, n, "'dimensions' must be an integer in [1, %d] (the model's width)", hp->n_embd), 400;
    if (q->dimensions && !cJSON_IsNull(q->dimensions)) m->dims = (int)v;
    *param = NULL;
    for (int i = 0; i < m->n_in; i++) {
        struct emb_in *in = &m->in[i];
        if (!(in->rows = malloc(in->n * (size_t)m->d * sizeof(float))) || iv_create(hp, &in->iv) ||
            iv_add_capture(in->iv, IV_SITE_RESID_POST, hp->n_layer - 1, -1, in->rows, in->n))
            return snprintf(err, n, "out of memory"), 503;
    }
    return 0;
}

/* ---- the answer ---------------------------------------------------------------------------- */

/* The mean of in's rows over its tokens, cut to dims components and L2-normalised, into out. */
static void embedding(const struct emb *m, const struct emb_in *in, float *out)
{
    double norm = 0;
    for (int k = 0; k < m->dims; k++) {
        double s = 0;
        for (size_t t = 0; t < in->n; t++) s += in->rows[t * (size_t)m->d + (size_t)k];
        out[k] = (float)(s / (double)in->n);
        norm += (double)out[k] * out[k];
    }
    norm = sqrt(norm);
    for (int k = 0; k < m->dims && norm > 0; k++) out[k] = (float)(out[k] / norm);
}

static void put_b64(struct api_buf *b, const float *v, int n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t len = (size_t)n * 4;
    unsigned char *p = malloc(len);
    if (!p) {
        b->oom = true;
        return;
    }
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        p[4 * i] = (unsigned char)u, p[4 * i + 1] = (unsigned char)(u >> 8);
        p[4 * i + 2] = (unsigned char)(u >> 16), p[4 * i + 3] = (unsigned char)(u >> 24);
    }
    api_buf_put(b, "\"", 1);
    for (size_t i = 0; i < len; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < len ? p[i + 2] : 0);
        char q[4] = {tab[w >> 18 & 63], tab[w >> 12 & 63], i + 1 < len ? tab[w >> 6 & 63] : '=',
                     i + 2 < len ? tab[w & 63] : '='};
        api_buf_put(b, q, 4);
    }
    api_buf_put(b, "\"", 1);
    free(p);
}

static enum MHD_Result answer(struct api_conn *c, const struct emb *m, const char *model)
{
    struct api_buf b = {0};
    float *v = malloc((size_t)m->d * sizeof *v);
    if (!v) return oai_error(c, 503, NULL, NULL, "out of memory while writing the answer");
    api_buf_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < m->n_in; i++) {
        embedding(m, &m->in[i], v);
        api_buf_printf(&b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
        if (m->b64) {
            put_b64(&b, v, m->dims);
        } else {
            api_buf_put(&b, "[", 1);
            for (int k = 0; k < m->dims; k++) {
                if (k) api_buf_put(&b, ",", 1);
                api_buf_float(&b, v[k]);
            }
            api_buf_put(&b, "]", 1);
        }
        api_buf_put(&b, "}", 1);
    }
    free(v);
    api_buf_puts(&b, "],\"model\":");
    api_buf_json_str(&b, model, strlen(model));
    api_buf_printf(&b, ",\"usage\":{\"prompt_tokens\":%zu,\"total_tokens\":%zu}}", m->n_tokens, m->n_tokens);
    return api_respond_buf(c, &b);
}

/* Runs every input's prompt pass together (releases the engine). Returns 0 or an HTTP status. */
static int run(struct api_conn *c, struct api_engine *e, struct emb *m, char *err, size_t n)
{
    struct ivrun_job *jobs = calloc((size_t)m->n_in, sizeof *jobs);
    if (!jobs) {
        api_engine_release(c->srv);
        return snprintf(err, n, "out of memory"), 503;
    }
    for (int i = 0; i < m->n_in; i++) jobs[i] = (struct ivrun_job){m->in[i].toks, m->in[i].n, m->in[i].iv};
    int code = ivrun_all(c, e, jobs, m->n_in, err, n);
    free(jobs);
    return code;
}

enum MHD_Result api_embeddings(struct api_conn *c)
{
    enum MHD_Result ret;
    cJSON *root = oai_parse_body(c, &ret);
    if (!root) return ret;
    struct api_engine e;
    if (!api_engine_acquire(c->srv, &e)) {
        cJSON_Delete(root);
        return api_error_hdr(c, 503, "Retry-After", "1", "no model is loaded");
    }
    char err[512] = "", model[256];
    snprintf(model, sizeof model, "%s", e.model->name ? e.model->name : "model");
    struct emb m = {0};
    struct emb_req q = {0};
    const char *param = NULL;
    const struct api_field_ctx x = {.c = c, .e = &e, .root = root, .dst = &q, .null_ok = true};
    int code = api_fields_read(emb_tables, &x, &param, err, sizeof err);
    if (!code) code = prepare(&q, &e, &m, &param, err, sizeof err);
    char pbuf[64];
    snprintf(pbuf, sizeof pbuf, "%s", code && param ? param : "");
    if (code) api_engine_release(c->srv);
    else code = run(c, &e, &m, err, sizeof err); /* releases the engine */
    cJSON_Delete(root);
    if (code == 499) ret = MHD_NO;
    else if (code) ret = oai_error(c, code, pbuf[0] ? pbuf : NULL, NULL, "%s", err);
    else ret = answer(c, &m, model);
    emb_free(&m);
    return ret;
}
