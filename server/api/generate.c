/* generate.c - POST /v1/generate: its fields and its answer's shape; the completion job (job.h)
 * runs it. See generate.h. */
#include "server/api/generate.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/model.h"
#include "attnd/sampler.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "server/api/buf.h"
#include "server/api/errors.h"
#include "server/api/job.h"

#define DEFAULT_MAX_TOKENS 128
#define MAX_SEED 9007199254740992.0 /* 2^53: every integer up to it is exact in a JSON double */

/* ==============================================================================================
 * The answer's shape (job.h renders it)
 * ============================================================================================== */

static void put_usage_timings(struct api_buf *b, const struct job_choice *c)
{
    double pps = c->prompt_ms > 0 ? c->prompt_tokens / (c->prompt_ms / 1e3) : 0;
    double gps = c->generation_ms > 0 ? c->completion_tokens / (c->generation_ms / 1e3) : 0;
    api_buf_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d},", c->prompt_tokens,
                   c->completion_tokens, c->prompt_tokens + c->completion_tokens);
    api_buf_printf(b,
                   "\"timings\":{\"queue_ms\":%.3f,\"prompt_ms\":%.3f,\"generation_ms\":%.3f,"
                   "\"prompt_tokens_per_s\":%.3f,\"generation_tokens_per_s\":%.3f}",
                   c->queue_ms, c->prompt_ms, c->generation_ms, pps, gps);
}

/* {"token":T,"logprob":lp,"top":[[id,lp]...]} */
static void put_logprob(struct api_buf *b, const struct job_tok *t)
{
    api_buf_printf(b, "{\"token\":%d,\"logprob\":", t->id);
    api_buf_float(b, t->lp);
    api_buf_puts(b, ",\"top\":[");
    for (int i = 0; i < t->n_top; i++) {
        api_buf_printf(b, "%s[%d,", i ? "," : "", t->top_ids[i]);
        api_buf_float(b, t->top_lps[i]);
        api_buf_puts(b, "]");
    }
    api_buf_puts(b, "]}");
}

static void put_id_model(struct api_buf *b, const struct api_job *j)
{
    char id[64];
    job_id_str(j, id, sizeof id);
    api_buf_printf(b, "{\"id\":\"%s\",\"model\":", id);
    api_buf_json_str(b, j->model, strlen(j->model));
}

/* data: {"id","token","text","logprobs"?} */
static void stream_token(struct api_job *j, struct job_choice *c, const struct sched_event *ev, size_t i)
{
    struct api_buf *b = &j->sse.out;
    char id[64];
    job_id_str(j, id, sizeof id);
    api_buf_printf(b, "data: {\"id\":\"%s\",\"token\":%d,\"text\":", id, ev->token);
    api_buf_json_str(b, ev->text, ev->text_len);
    if (j->logprobs >= 0) {
        api_buf_puts(b, ",\"logprobs\":");
        put_logprob(b, &c->lps[i]);
    }
    api_buf_puts(b, "}\n\n");
}

/* data: {"id","model","text": the bytes released at the end,"finish_reason","usage","timings"} */
static void stream_choice_end(struct api_job *j, struct job_choice *c, const struct sched_event *ev)
{
    struct api_buf *b = &j->sse.out;
    api_buf_puts(b, "data: ");
    put_id_model(b, j);
    api_buf_puts(b, ",\"text\":");
    api_buf_json_str(b, ev->final_text ? ev->final_text : "", ev->final_text ? ev->final_text_len : 0);
    api_buf_printf(b, ",\"finish_reason\":\"%s\",", c->finish);
    put_usage_timings(b, c);
    api_buf_puts(b, "}\n\n");
}

static void stream_close(struct api_job *j) { api_buf_puts(&j->sse.out, "data: [DONE]\n\n"); }

static void stream_error(struct api_job *j)
{
    api_buf_puts(&j->sse.out, "data: ");
    api_error_json(j->srv, &j->sse.out, j->err_code, j->err_msg);
    api_buf_puts(&j->sse.out, "\n\ndata: [DONE]\n\n");
}

/* {"id","model","text","tokens","finish_reason","usage","timings","logprobs"?} */
static void whole(struct api_buf *b, const struct api_job *j)
{
    const struct job_choice *c = &j->ch[0];
    put_id_model(b, j);
    api_buf_puts(b, ",\"text\":");
    api_buf_json_str(b, c->text.p ? c->text.p : "", c->text.len);
    api_buf_puts(b, ",\"tokens\":[");
    for (size_t i = 0; i < c->n_toks; i++) api_buf_printf(b, "%s%d", i ? "," : "", c->toks[i]);
    api_buf_printf(b, "],\"finish_reason\":\"%s\",", c->finish);
    put_usage_timings(b, c);
    if (j->logprobs >= 0) {
        api_buf_puts(b, ",\"logprobs\":[");
        for (size_t i = 0; i < c->n_toks; i++) {
            if (i) api_buf_puts(b, ",");
            put_logprob(b, &c->lps[i]);
        }
        api_buf_puts(b, "]");
    }
    api_buf_puts(b, "}\n");
}

static enum MHD_Result render_error(struct api_conn *c, int code, const char *param, const char *msg)
{
    return api_error_retry(c, code, "%s", msg);
}

static const struct job_render gen_render = {
    .id_prefix = "gen", .history_ns = API_HISTORY_GEN, .stream_token = stream_token,
    .stream_choice_end = stream_choice_end, .stream_close = stream_close, .stream_error = stream_error,
    .whole = whole, .error = render_error,
};

/* ==============================================================================================
 * Parsing and validation
 * ============================================================================================== */

bool api_json_repeated(const cJSON *root, const cJSON *it, char *err, size_t errlen)
{
    const char *k = it->string ? it->string : "";
    for (const cJSON *o = root->child; o && o != it; o = o->next)
        if (o->string && !strcmp(o->string, k)) {
            snprintf(err, errlen, "field '%s' appears twice", k);
            return true;
        }
    return false;
}

bool api_json_int(const cJSON *it, double lo, double hi, double *out)
{
    if (!cJSON_IsNumber(it)) return false;
    double v = it->valuedouble;
    if (!isfinite(v) || floor(v) != v || v < lo || v > hi) return false;
    *out = v;
    return true;
}

int api_gen_prompt(const cJSON *it, const struct api_engine *e, int32_t **prompt, size_t *n_prompt, char *err,
                   size_t errlen)
{
    const int V = e->model->hp.n_vocab;
    if (cJSON_IsString(it)) {
        size_t len = strlen(it->valuestring);
        if (!len) {
            snprintf(err, errlen, "'prompt' is empty");
            return 400;
        }
        attnd_status st = tok_encode(e->tok, it->valuestring, len, true, false, prompt, n_prompt);
        if (st) {
            snprintf(err, errlen, "could not tokenize 'prompt': %s", attnd_status_str(st));
            return api_status_code(st, true);
        }
    } else if (cJSON_IsArray(it)) {
        int n = cJSON_GetArraySize(it);
        if (n <= 0) {
            snprintf(err, errlen, "'prompt' is an empty array");
            return 400;
        }
        if (!((*prompt) = malloc((size_t)n * sizeof *(*prompt)))) {
            snprintf(err, errlen, "out of memory");
            return 503;
        }
        const cJSON *el;
        size_t i = 0;
        cJSON_ArrayForEach(el, it)
        {
            double v;
            if (!api_json_int(el, 0, V - 1, &v)) {
                if (cJSON_IsNumber(el) && floor(el->valuedouble) == el->valuedouble)
                    snprintf(err, errlen, "'prompt'[%zu] = %.0f is not a token id (0..%d)", i, el->valuedouble, V - 1);
                else snprintf(err, errlen, "'prompt'[%zu] is not an integer token id (0..%d)", i, V - 1);
                return 400;
            }
            (*prompt)[i++] = (int32_t)v;
        }
        (*n_prompt) = i;
    } else {
        snprintf(err, errlen, "'prompt' must be a string or an array of token ids");
        return 400;
    }
    if ((*n_prompt) == 0) {
        snprintf(err, errlen, "'prompt' gives no tokens");
        return 400;
    }
    int n_ctx = sched_n_ctx(e->sched);
    if ((*n_prompt) > (size_t)n_ctx) {
        snprintf(err, errlen, "the prompt has %zu tokens; the context holds %d", (*n_prompt), n_ctx);
        return 400;
    }
    return 0;
}

static int parse_stop(const cJSON *it, struct sched_request *req, const char **stops, char *err, size_t errlen)
{
    if (cJSON_IsString(it)) {
        if (!it->valuestring[0] || strlen(it->valuestring) > STOP_MAX_LEN) {
            snprintf(err, errlen, "'stop' must be 1..%d bytes", STOP_MAX_LEN);
            return 400;
        }
        stops[0] = it->valuestring;
        req->n_stops = 1;
        return 0;
    }
    if (!cJSON_IsArray(it)) {
        snprintf(err, errlen, "'stop' must be a string or an array of strings");
        return 400;
    }
    if (cJSON_GetArraySize(it) > SCHED_MAX_STOPS) {
        snprintf(err, errlen, "'stop' has more than %d strings", SCHED_MAX_STOPS);
        return 400;
    }
    const cJSON *el;
    int n = 0;
    cJSON_ArrayForEach(el, it)
    {
        if (!cJSON_IsString(el) || !el->valuestring[0] || strlen(el->valuestring) > STOP_MAX_LEN) {
            snprintf(err, errlen, "'stop'[%d] must be a string of 1..%d bytes", n, STOP_MAX_LEN);
            return 400;
        }
        stops[n++] = el->valuestring;
    }
    req->n_stops = n;
    return 0;
}

/* Offset of the first NUL in the body, raw or written as the escape \u0000 inside a string, or
 * -1. cJSON keeps strings NUL-terminated, so such a key or value would silently be cut there
 * ("prompt\u0000x" would read as "prompt"). *n_commas gets the commas outside strings (up to
 * the NUL): one less than the values of the largest possible array, before cJSON builds a node
 * (~64 bytes) for each. */
static long body_nul_at(const char *b, size_t n, size_t *n_commas)
{
    bool in_str = false;
    *n_commas = 0;
    for (size_t i = 0; i < n; i++) {
        if (!b[i]) return (long)i;
        if (!in_str && b[i] == ',') ++*n_commas;
        if (b[i] == '"') in_str = !in_str;
        else if (in_str && b[i] == '\\' && i + 1 < n) {
            if (b[i + 1] == 'u' && i + 5 < n && !memcmp(b + i + 2, "0000", 4)) return (long)i;
            i++; /* the escaped byte: \" does not end the string */
        }
    }
    return -1;
}

/* Checks done on the raw body before cJSON sees it: a NUL, or more values than any valid body
 * has (a 1 MiB "[0,0,...]" would cost cJSON ~32 MiB of nodes). Returns true with the reason in err. */
static bool body_refused(const struct api_conn *c, char *err, size_t errlen)
{
    size_t commas;
    long nul = body_nul_at(c->body, c->body_len, &commas);
    if (nul >= 0) {
        snprintf(err, errlen, "the body holds a NUL character (byte %ld); keys and strings may not", nul);
        return true;
    }
    struct api_engine e;
    if (!api_engine_acquire(c->srv, &e)) return false; /* answered 503 after the parse */
    size_t most = (size_t)sched_n_ctx(e.sched) + SCHED_MAX_STOPS + 32;
    api_engine_release(c->srv);
    if (commas < most) return false;
    snprintf(err, errlen, "the body holds more than %zu JSON values (a prompt has at most the context's tokens)", most);
    return true;
}

/* A sampling field k (temperature ... seed) into sp: returns false if k is none of them, else
 * sets *ok (the value has the right type and range) and *want (what it must be). */
static bool parse_sampling(const char *k, const cJSON *it, struct sampler_params *sp, bool *ok, const char **want)
{
    double v;
    if (!strcmp(k, "temperature") || !strcmp(k, "top_p") || !strcmp(k, "min_p") || !strcmp(k, "repetition_penalty") ||
        !strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty")) {
        *want = "a number";
        if (!(*ok = cJSON_IsNumber(it))) return true;
        float f = (float)it->valuedouble;
        if (!strcmp(k, "temperature")) sp->temperature = f;
        else if (!strcmp(k, "top_p")) sp->top_p = f;
        else if (!strcmp(k, "min_p")) sp->min_p = f;
        else if (!strcmp(k, "repetition_penalty")) sp->repetition_penalty = f;
        else if (!strcmp(k, "presence_penalty")) sp->presence_penalty = f;
        else sp->frequency_penalty = f;
    } else if (!strcmp(k, "top_k")) {
        *want = "an integer >= 0";
        if ((*ok = api_json_int(it, 0, 1 << 30, &v))) sp->top_k = (int)v;
    } else if (!strcmp(k, "penalty_last_n")) {
        *want = "an integer in [0, 65536]";
        if ((*ok = api_json_int(it, 0, SAMPLER_MAX_PENALTY_LAST_N, &v))) sp->penalty_last_n = (int)v;
    } else if (!strcmp(k, "seed")) {
        *want = "an integer in [0, 2^53]";
        if ((*ok = api_json_int(it, 0, MAX_SEED, &v))) sp->seed = (uint64_t)v;
    } else {
        return false;
    }
    return true;
}

/* What parse_field() found besides what it wrote into p. */
struct body_seen {
    const cJSON *prompt; /* the prompt field, checked last (it needs the tokenizer) */
    bool max_given;      /* max_tokens was in the body */
};

int api_gen_field(const struct http_server *srv, const cJSON *it, struct sched_request *req, const char **stops,
                  bool *max_given, char *err, size_t errlen)
{
    const char *k = it->string ? it->string : "";
    double v;
    bool ok = true;
    const char *want = NULL;
    if (!strcmp(k, "max_tokens")) {
        want = "an integer in [0, max-tokens-cap]";
        if ((ok = api_json_int(it, 0, srv->cfg.max_tokens_cap, &v))) req->max_tokens = (int)v, *max_given = true;
        else if (cJSON_IsNumber(it) && floor(it->valuedouble) == it->valuedouble) {
            snprintf(err, errlen, "'max_tokens' must be in [0, %d]", srv->cfg.max_tokens_cap);
            return 400;
        }
    } else if (parse_sampling(k, it, &req->sampling, &ok, &want)) {
    } else if (!strcmp(k, "stop")) return parse_stop(it, req, stops, err, errlen);
    else if (!strcmp(k, "ignore_eos")) {
        want = "true or false";
        if ((ok = cJSON_IsBool(it))) req->ignore_eos = cJSON_IsTrue(it);
    } else return -1;
    if (ok) return 0;
    snprintf(err, errlen, "'%s' must be %s", k, want);
    return 400;
}

/* One field of the body (key k) into p. Returns 0 or an HTTP status, with the message in err. */
static int parse_field(const struct http_server *srv, const char *k, const cJSON *it, struct job_params *p,
                       struct body_seen *seen, char *err, size_t errlen)
{
    double v;
    bool ok = true;
    const char *want = NULL;
    int code = api_gen_field(srv, it, &p->req, p->stops, &seen->max_given, err, errlen);
    if (code >= 0) return code;
    if (!strcmp(k, "prompt")) seen->prompt = it;
    else if (!strcmp(k, "model")) ok = cJSON_IsString(it), want = "a string";
    else if (!strcmp(k, "stream")) {
        want = "true or false";
        if ((ok = cJSON_IsBool(it))) p->stream = cJSON_IsTrue(it);
    } else if (!strcmp(k, "logprobs")) {
        want = "an integer in [0, 20]";
        if ((ok = api_json_int(it, 0, SCHED_MAX_LOGPROBS, &v))) p->logprobs = v ? (int)v : -1;
    } else {
        snprintf(err, errlen,
                 "unknown field '%s' (known: prompt, max_tokens, temperature, top_k, top_p, min_p, "
                 "repetition_penalty, presence_penalty, frequency_penalty, penalty_last_n, seed, stop, "
                 "ignore_eos, logprobs, stream, model)",
                 k);
        return 400;
    }
    if (ok) return 0;
    snprintf(err, errlen, "'%s' must be %s", k, want);
    return 400;
}

/* Checks every field of the body against its type and range. Returns 0 or an HTTP status. */
static int parse_body(struct api_conn *c, const struct api_engine *e, cJSON *root, struct job_params *p, char *err,
                      size_t errlen)
{
    if (!cJSON_IsObject(root)) {
        snprintf(err, errlen, "the body must be a JSON object");
        return 400;
    }
    struct body_seen seen = {0};
    p->req.max_tokens = DEFAULT_MAX_TOKENS;
    if (p->req.max_tokens > c->srv->cfg.max_tokens_cap) p->req.max_tokens = c->srv->cfg.max_tokens_cap;
    const cJSON *it;
    cJSON_ArrayForEach(it, root)
    {
        const char *k = it->string ? it->string : "";
        if (api_json_repeated(root, it, err, errlen)) return 400;
        int code = parse_field(c->srv, k, it, p, &seen, err, errlen);
        if (code) return code;
    }
    if (!seen.prompt) {
        snprintf(err, errlen, "'prompt' is required");
        return 400;
    }
    if (sampler_params_validate(&p->req.sampling, err, errlen)) return 400;
    p->n_prompts = 1;
    int code = api_gen_prompt(seen.prompt, e, &p->prompts[0], &p->n_prompt[0], err, errlen);
    if (code) return code;
    /* the default never overflows the context; an explicit max_tokens that does is a 400 */
    size_t room = (size_t)sched_n_ctx(e->sched) - p->n_prompt[0];
    if (!seen.max_given && (size_t)p->req.max_tokens > room) p->req.max_tokens = (int)room;
    p->max_given = true;  /* the job keeps max_tokens as computed here */
    p->seed_given = true; /* the sampler's default seed when the body gives none */
    return 0;
}

/* ==============================================================================================
 * The route
 * ============================================================================================== */

cJSON *api_json_body(const struct api_conn *c, char *err, size_t errlen)
{
    if (!c->body_len) {
        snprintf(err, errlen, "the body is empty; send a JSON object");
        return NULL;
    }
    if (body_refused(c, err, errlen)) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(c->body, c->body_len, &end, false);
    if (!root) {
        size_t at = end && end >= c->body ? (size_t)(end - c->body) : 0;
        snprintf(err, errlen, "the body is not valid JSON (error near byte %zu)", at);
        return NULL;
    }
    for (const char *q = end; q < c->body + c->body_len; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
            cJSON_Delete(root);
            snprintf(err, errlen, "the body has bytes after the JSON value (at byte %zu)", (size_t)(q - c->body));
            return NULL;
        }
    return root;
}

enum MHD_Result api_generate(struct api_conn *c)
{
    struct http_server *srv = c->srv;
    char err[512] = "";
    cJSON *root = api_json_body(c, err, sizeof err);
    if (!root) return api_error(c, 400, "%s", err);
    struct api_engine e;
    if (!api_engine_acquire(srv, &e)) {
        cJSON_Delete(root);
        return api_error_hdr(c, 503, "Retry-After", "1", "no model is loaded");
    }
    struct job_params p;
    job_params_init(&p);
    int code = parse_body(c, &e, root, &p, err, sizeof err);
    if (code) {
        api_engine_release(srv);
        cJSON_Delete(root);
        job_params_free(&p);
        return api_error_retry(c, code, "%s", err);
    }
    enum MHD_Result ret = job_run(c, &e, &p, &gen_render); /* releases the engine */
    cJSON_Delete(root); /* it held the stop strings until then */
    return ret;
}
