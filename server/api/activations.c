/* activations.c - POST /v1/activations. See activations.h. */
#include "server/api/activations.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/check.h"
#include "attnd/intervene.h"
#include "attnd/model.h"
#include "attnd/sampler.h"
#include "attnd/sched.h"
#include "server/api/buf.h"
#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/api/job.h"
#include "server/api/reply.h"
#include "server/api/sse.h"

#define WAIT_SLICE_MS 200 /* how often the waiting connection checks its socket */

/* The body, read by the field table; checked against the prompt once it is known. */
struct act_req {
    const cJSON *prompt, *sites, *positions, *encoding, *interventions;
};

struct act_site {
    enum iv_site site;
    int layer, head; /* head -1: none given */
    size_t width;
    float *buf;      /* (n_prompt, width) */
};

struct act {
    int32_t *prompt;
    size_t n_prompt;
    struct act_site sites[API_ACT_MAX_SITES];
    int n_sites;
    int32_t *rows; /* (n_rows) the positions answered, in order */
    size_t n_rows;
    bool b64;
    struct iv_set *iv; /* the interventions, then the captures */
    int n_interventions;
    /* the scheduler's events */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done, failed;
    attnd_status st;
    char msg[256];
};

static const struct api_field act_fields[] = {
    {"prompt", FIELD_JSON, offsetof(struct act_req, prompt), 0, 0, FIELD_NO_GIVEN, NULL},
    {"sites", FIELD_JSON, offsetof(struct act_req, sites), 0, 0, FIELD_NO_GIVEN, NULL},
    {"positions", FIELD_JSON, offsetof(struct act_req, positions), 0, 0, FIELD_NO_GIVEN, NULL},
    {"encoding", FIELD_JSON, offsetof(struct act_req, encoding), 0, 0, FIELD_NO_GIVEN, NULL},
    {"interventions", FIELD_JSON, offsetof(struct act_req, interventions), 0, 0, FIELD_NO_GIVEN, NULL},
    {"model", FIELD_STRING, 0, 0, 0, FIELD_NO_GIVEN, NULL},
    FIELD_END,
};

static const struct api_field *const act_tables[] = {act_fields, NULL};

static void act_free(struct act *a)
{
    free(a->prompt);
    free(a->rows);
    for (int i = 0; i < a->n_sites; i++) free(a->sites[i].buf);
    iv_destroy(a->iv);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
}

/* One element of "sites" into a->sites[i]. Returns 0 or 400. */
static int parse_site(const cJSON *o, int i, const struct model_hparams *hp, struct act_site *s, char *err, size_t n)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "site"), *l = cJSON_GetObjectItemCaseSensitive(o, "layer"),
                *h = cJSON_GetObjectItemCaseSensitive(o, "head");
    double v;
    if (!cJSON_IsObject(o)) return snprintf(err, n, "'sites[%d]' must be an object {\"site\",\"layer\",\"head\"?}", i), 400;
    for (const cJSON *m = o->child; m; m = m->next)
        if (!m->string || (strcmp(m->string, "site") && strcmp(m->string, "layer") && strcmp(m->string, "head")))
            return snprintf(err, n, "'sites[%d].%.40s' is not a member of a site", i, m->string ? m->string : ""), 400;
    if (!cJSON_IsString(name) || iv_site_parse(name->valuestring, &s->site))
        return snprintf(err, n, "'sites[%d].site' must be resid_pre, resid_post, attn_out, mlp_out or z", i), 400;
    if (!api_json_int(l, 0, hp->n_layer - 1, &v))
        return snprintf(err, n, "'sites[%d].layer' must be an integer in [0, %d]", i, hp->n_layer - 1), 400;
    s->layer = (int)v;
    s->head = -1;
    if (h && s->site != IV_SITE_Z) return snprintf(err, n, "'sites[%d].head' is only for the z site", i), 400;
    if (h && !api_json_int(h, 0, hp->n_head - 1, &v))
        return snprintf(err, n, "'sites[%d].head' must be an integer in [0, %d]", i, hp->n_head - 1), 400;
    if (h) s->head = (int)v;
    s->width = iv_site_width(hp, s->site, s->head);
    return 0;
}

/* "positions": "all" or prompt positions, into a->rows. Returns 0, 400 or 503. */
static int parse_positions(const cJSON *it, struct act *a, char *err, size_t n)
{
    const bool all = !it || (cJSON_IsString(it) && !strcmp(it->valuestring, "all"));
    const int cnt = all ? (int)a->n_prompt : cJSON_GetArraySize(it);
    if (!all && (!cJSON_IsArray(it) || cnt < 1 || (size_t)cnt > a->n_prompt))
        return snprintf(err, n, "'positions' must be \"all\" or 1..%zu prompt positions", a->n_prompt), 400;
    if (!(a->rows = malloc((size_t)cnt * sizeof *a->rows))) return snprintf(err, n, "out of memory"), 503;
    if (all) {
        for (int i = 0; i < cnt; i++) a->rows[i] = i;
    } else {
        const cJSON *el;
        cJSON_ArrayForEach(el, it)
        {
            double v;
            if (!api_json_int(el, 0, (double)a->n_prompt - 1, &v))
                return snprintf(err, n, "'positions'[%zu] must be a prompt position in [0, %zu]", a->n_rows,
                                a->n_prompt - 1), 400;
            a->rows[a->n_rows++] = (int32_t)v;
        }
    }
    a->n_rows = (size_t)cnt;
    return 0;
}

/* Everything but the prompt (already in a): sites, positions, encoding, interventions, the size
 * cap, and the capture set with its buffers. Returns 0 or an HTTP status. */
static int prepare(const struct act_req *q, const struct api_engine *e, struct act *a, char *err, size_t n)
{
    const struct model_hparams *hp = &e->model->hp;
    int code;
    if (!cJSON_IsArray(q->sites) || cJSON_GetArraySize(q->sites) < 1 || cJSON_GetArraySize(q->sites) > API_ACT_MAX_SITES)
        return snprintf(err, n, "'sites' must be an array of 1..%d sites", API_ACT_MAX_SITES), 400;
    const cJSON *el;
    cJSON_ArrayForEach(el, q->sites)
    {
        if ((code = parse_site(el, a->n_sites, hp, &a->sites[a->n_sites], err, n))) return code;
        a->n_sites++;
    }
    if ((code = parse_positions(q->positions, a, err, n))) return code;
    const cJSON *en = q->encoding;
    if (en && !(cJSON_IsString(en) && (!strcmp(en->valuestring, "json") || !strcmp(en->valuestring, "base64"))))
        return snprintf(err, n, "'encoding' must be \"json\" or \"base64\""), 400;
    a->b64 = en && !strcmp(en->valuestring, "base64");
    size_t floats = 0;
    for (int i = 0; i < a->n_sites; i++) floats += a->sites[i].width * a->n_rows;
    const double est = (double)floats * (a->b64 ? 16.0 / 3.0 : 16.0) + 128.0 * a->n_sites + 16.0 * a->n_prompt;
    if (est > API_ACT_MAX_BYTES)
        return snprintf(err, n, "the answer would be about %.0f bytes; at most %u (fewer sites or positions, or "
                        "\"encoding\": \"base64\")", est, API_ACT_MAX_BYTES), 413;
    attnd_status st = ATTND_OK;
    if (q->interventions)
        st = iv_parse_json(q->interventions, hp, sched_n_ctx(e->sched), "interventions", &a->iv, err, n);
    if (st) return api_status_code(st, false);
    a->n_interventions = a->iv ? a->iv->n : 0;
    if (!a->iv && iv_create(hp, &a->iv)) return snprintf(err, n, "out of memory"), 503;
    for (int i = 0; i < a->n_sites; i++) {
        struct act_site *s = &a->sites[i];
        if (!(s->buf = calloc(a->n_prompt * s->width, sizeof(float))) ||
            iv_add_capture(a->iv, s->site, s->layer, s->head, s->buf, a->n_prompt))
            return snprintf(err, n, "out of memory"), 503;
    }
    return 0;
}

/* ---- the run ------------------------------------------------------------------------------- */

static void on_event(void *ud, const struct sched_event *ev)
{
    struct act *a = ud;
    if (ev->kind == SCHED_EV_TOKEN) return;
    pthread_mutex_lock(&a->mu);
    if (ev->kind == SCHED_EV_ERROR || (ev->finish_reason && !strcmp(ev->finish_reason, "cancelled"))) {
        a->failed = true;
        a->st = ev->kind == SCHED_EV_ERROR ? ev->status : ATTND_ERR_UNSUPPORTED;
        snprintf(a->msg, sizeof a->msg, "%s", ev->message ? ev->message : "the request was cancelled");
    }
    a->done = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

/* Submits the prompt pass (max_tokens 0) and waits for its end; a client that leaves cancels it
 * (and the wait goes on to the last event, after which the scheduler never touches a). Takes the
 * engine e (acquired) and releases it. Returns 0 or an HTTP status with err. */
static int run(struct api_conn *c, struct api_engine *e, struct act *a, char *err, size_t n)
{
    struct sched_request req = {.prompt = a->prompt, .n_prompt = a->n_prompt, .max_tokens = 0,
                                .sampling = sampler_params_default(), .iv = a->iv,
                                .owner = job_owner(c)}; /* takes turns with the caller's other requests */
    struct sched *s = e->sched;
    uint64_t id = 0;
    attnd_status st = sched_submit(s, &req, on_event, a, &id, err, n);
    api_engine_release(c->srv);
    if (st) return api_status_code(st, false);
    api_inflight_begin(c->srv);
    const int fd = api_conn_fd(c);
    bool cancelled = false;
    pthread_mutex_lock(&a->mu);
    while (!a->done) {
        api_wait_ms(&a->cv, &a->mu, WAIT_SLICE_MS);
        if (!a->done && !cancelled && api_peer_gone(fd)) sched_cancel(s, id), cancelled = true;
    }
    pthread_mutex_unlock(&a->mu);
    api_inflight_end(c->srv);
    if (cancelled) return 499;
    if (a->failed) return snprintf(err, n, "%s", a->msg), api_status_code(a->st, false);
    return 0;
}

/* ---- the answer ---------------------------------------------------------------------------- */

static void put_b64(struct api_buf *b, const unsigned char *p, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char q[4];
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        q[0] = tab[v >> 18 & 63], q[1] = tab[v >> 12 & 63];
        q[2] = i + 1 < n ? tab[v >> 6 & 63] : '=';
        q[3] = i + 2 < n ? tab[v & 63] : '=';
        api_buf_put(b, q, 4);
    }
}

/* One site's rows: nested JSON arrays, or base64 of the float32 rows (little-endian). */
static void put_site(struct api_buf *b, const struct act *a, const struct act_site *s)
{
    api_buf_printf(b, "{\"site\":\"%s\",\"layer\":%d,", iv_site_name(s->site), s->layer);
    if (s->head >= 0) api_buf_printf(b, "\"head\":%d,", s->head);
    api_buf_printf(b, "\"shape\":[%zu,%zu],", a->n_rows, s->width);
    if (a->b64) {
        api_buf_puts(b, "\"data_b64\":\"");
        unsigned char *raw = malloc(a->n_rows * s->width * 4 + 1);
        if (!raw) {
            b->oom = true;
            return;
        }
        for (size_t r = 0; r < a->n_rows; r++)
            for (size_t k = 0; k < s->width; k++) {
                uint32_t u;
                memcpy(&u, &s->buf[(size_t)a->rows[r] * s->width + k], 4);
                unsigned char *o = raw + (r * s->width + k) * 4;
                o[0] = (unsigned char)u, o[1] = (unsigned char)(u >> 8), o[2] = (unsigned char)(u >> 16),
                o[3] = (unsigned char)(u >> 24);
            }
        put_b64(b, raw, a->n_rows * s->width * 4);
        free(raw);
        api_buf_puts(b, "\"}");
        return;
    }
    api_buf_puts(b, "\"data\":[");
    for (size_t r = 0; r < a->n_rows; r++) {
        api_buf_puts(b, r ? ",[" : "[");
        for (size_t k = 0; k < s->width; k++) {
            if (k) api_buf_put(b, ",", 1);
            api_buf_float(b, s->buf[(size_t)a->rows[r] * s->width + k]);
        }
        api_buf_puts(b, "]");
    }
    api_buf_puts(b, "]}");
}

static enum MHD_Result answer(struct api_conn *c, const struct act *a)
{
    struct api_buf b = {0};
    api_buf_puts(&b, "{\"tokens\":[");
    for (size_t i = 0; i < a->n_prompt; i++) api_buf_printf(&b, "%s%d", i ? "," : "", a->prompt[i]);
    api_buf_puts(&b, "],");
    if (a->n_interventions) api_buf_printf(&b, "\"interventions\":%d,", a->n_interventions);
    api_buf_puts(&b, "\"activations\":[");
    for (int i = 0; i < a->n_sites; i++) {
        if (i) api_buf_put(&b, ",", 1);
        put_site(&b, a, &a->sites[i]);
    }
    api_buf_puts(&b, "]}");
    return api_respond_buf(c, &b);
}

enum MHD_Result api_activations(struct api_conn *c)
{
    enum MHD_Result ret;
    struct api_engine e;
    cJSON *root = api_begin(c, &e, &ret);
    if (!root) return ret;
    char err[512] = "";
    struct act a = {0};
    pthread_mutex_init(&a.mu, NULL);
    check_cond_init(&a.cv); /* waited on with api_wait_ms() */
    struct act_req q = {0};
    const char *param = NULL;
    const struct api_field_ctx x = {.c = c, .e = &e, .root = root, .dst = &q};
    int code = api_fields_read(act_tables, &x, &param, err, sizeof err);
    if (!code && !q.prompt) code = 400, snprintf(err, sizeof err, "'prompt' is required");
    if (!code) code = api_gen_prompt(q.prompt, &e, &a.prompt, &a.n_prompt, err, sizeof err);
    if (!code) code = prepare(&q, &e, &a, err, sizeof err);
    if (code) api_engine_release(c->srv);
    else code = run(c, &e, &a, err, sizeof err); /* releases the engine */
    cJSON_Delete(root);
    ret = code == 499 ? MHD_NO : code ? api_error_retry(c, code, "%s", err) : answer(c, &a);
    act_free(&a);
    return ret;
}
