/* fields.c - request fields from tables, the body, the prompt. See fields.h. */
#include "server/api/fields.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/intervene.h"
#include "attnd/gbnf.h"
#include "attnd/model.h"
#include "attnd/sampler.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "server/api/errors.h"
#include "server/api/job.h"

#define MAX_SEED 9007199254740992.0 /* 2^53: every integer up to it is exact in a JSON double */
/* JSON values a body may hold besides its prompt's tokens and stops: chat messages, tools and their
 * schemas, interventions (a cJSON node is ~64 bytes: 8192 cost half a MiB) */
#define BODY_SPARE_VALUES 8192

/* ==============================================================================================
 * Values
 * ============================================================================================== */

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

/* stop: a string or an array of strings, each 1..STOP_MAX_LEN bytes, into the job's stops
 * (they point into the cJSON tree). */
static int read_stop(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    struct job_params *p = x->dst;
    struct sched_request *req = &p->req;
    const char **stops = p->stops;
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

/* interventions: an array of them (intervene.h) for this model into the job's iv. */
static int read_interventions(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    struct job_params *p = x->dst;
    attnd_status st = iv_parse_json(it, &x->e->model->hp, sched_n_ctx(x->e->sched), "interventions", &p->iv, err,
                                    errlen);
    return st ? api_status_code(st, false) : 0;
}

/* Offset of the first NUL in the body, raw or written as the escape \u0000 inside a string, or
 * -1. cJSON keeps strings NUL-terminated, so such a key or value would silently be cut there
 * ("prompt\u0000x" would read as "prompt"). *n_commas gets the commas outside strings (up to
 * the NUL): one less than the values of the largest possible array, before cJSON builds a node
 * (~64 bytes) for each. */
/* grammar: llama.cpp's GBNF (root rule "root"), the answer held to it */
static int read_grammar(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    struct job_params *p = x->dst;
    if (!cJSON_IsString(it)) return snprintf(err, errlen, "'grammar' must be a GBNF text"), 400;
    if (p->grammar) return snprintf(err, errlen, "'grammar' cannot be combined with 'response_format'"), 400;
    char why[256] = "";
    attnd_status st = gbnf_parse(it->valuestring, strlen(it->valuestring), &p->grammar, why, sizeof why);
    if (st == ATTND_ERR_NOMEM) return snprintf(err, errlen, "out of memory"), 503;
    if (st) return snprintf(err, errlen, "'grammar': %s", why), 400;
    return 0;
}

/* "speculative": true / false, the request's choice over the server's --speculative (sched.h). */
static int read_speculative(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    struct job_params *p = x->dst;
    if (!cJSON_IsBool(it)) return snprintf(err, errlen, "'speculative' must be true or false"), 400;
    p->req.speculative = cJSON_IsTrue(it) ? 1 : -1;
    return 0;
}

/* ==============================================================================================
 * The tables
 * ============================================================================================== */

#define JP(f) offsetof(struct job_params, f)
#define SP(f) JP(req.sampling.f)

const struct api_field api_sampling_fields[] = {
    {"max_tokens", FIELD_INT, JP(req.max_tokens), 0, FIELD_HI_MAX_TOKENS, JP(max_given), NULL},
    {"temperature", FIELD_FLOAT, SP(temperature), 0, 0, FIELD_NO_GIVEN, NULL},
    {"top_k", FIELD_INT, SP(top_k), 0, 1 << 30, FIELD_NO_GIVEN, NULL},
    {"top_p", FIELD_FLOAT, SP(top_p), 0, 0, FIELD_NO_GIVEN, NULL},
    {"min_p", FIELD_FLOAT, SP(min_p), 0, 0, FIELD_NO_GIVEN, NULL},
    {"repetition_penalty", FIELD_FLOAT, SP(repetition_penalty), 0, 0, FIELD_NO_GIVEN, NULL},
    {"presence_penalty", FIELD_FLOAT, SP(presence_penalty), 0, 0, FIELD_NO_GIVEN, NULL},
    {"frequency_penalty", FIELD_FLOAT, SP(frequency_penalty), 0, 0, FIELD_NO_GIVEN, NULL},
    {"penalty_last_n", FIELD_INT, SP(penalty_last_n), 0, SAMPLER_MAX_PENALTY_LAST_N, FIELD_NO_GIVEN, NULL},
    {"seed", FIELD_U53, SP(seed), 0, MAX_SEED, JP(seed_given), NULL},
    {"stop", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_stop},
    {"ignore_eos", FIELD_BOOL, JP(req.ignore_eos), 0, 0, FIELD_NO_GIVEN, NULL},
    {"speculative", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_speculative},
    {"grammar", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_grammar},
    {"interventions", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_interventions},
    FIELD_END,
};

static const struct api_field *find(const struct api_field *const *tables, const char *k)
{
    for (; *tables; tables++)
        for (const struct api_field *f = *tables; f->name; f++)
            if (!strcmp(f->name, k)) return f;
    return NULL;
}

static int unknown(const struct api_field *const *tables, const char *k, char *err, size_t errlen)
{
    int n = snprintf(err, errlen, "unknown field '%s' (known:", k);
    const char *sep = " ";
    for (; *tables; tables++)
        for (const struct api_field *f = *tables; f->name; f++) {
            if (n < 0 || (size_t)n >= errlen) return 400;
            n += snprintf(err + n, errlen - (size_t)n, "%s%s", sep, f->name);
            sep = ", ";
        }
    if (n >= 0 && (size_t)n < errlen) snprintf(err + n, errlen - (size_t)n, ")");
    return 400;
}

/* An integer field's range, as the error message writes it. */
static int bad_int(const struct api_field *f, double hi, char *err, size_t errlen)
{
    snprintf(err, errlen, "'%s' must be an integer in [%.0f, %.0f]", f->name, f->lo, hi);
    return 400;
}

/* One typed value of row f into x->dst. Returns 0 or 400. */
static int read_value(const struct api_field *f, const struct api_field_ctx *x, const cJSON *it, char *err,
                      size_t errlen)
{
    char *dst = (char *)x->dst + f->off;
    double v, hi = f->hi == FIELD_HI_MAX_TOKENS ? x->c->srv->cfg.max_tokens_cap : f->hi;
    switch (f->type) {
    case FIELD_FLOAT:
        if (!cJSON_IsNumber(it)) break;
        *(float *)dst = (float)it->valuedouble;
        return 0;
    case FIELD_INT:
        if (!api_json_int(it, f->lo, hi, &v)) return bad_int(f, hi, err, errlen);
        *(int *)dst = (int)v;
        return 0;
    case FIELD_U53:
        if (!api_json_int(it, f->lo, hi, &v)) return bad_int(f, hi, err, errlen);
        *(uint64_t *)dst = (uint64_t)v;
        return 0;
    case FIELD_BOOL:
        if (!cJSON_IsBool(it)) break;
        *(bool *)dst = cJSON_IsTrue(it);
        return 0;
    case FIELD_STRING:
        if (!cJSON_IsString(it)) break;
        return 0;
    case FIELD_IGNORED:
        return 0;
    case FIELD_JSON:
        *(const cJSON **)dst = it;
        return 0;
    case FIELD_CUSTOM:
        return f->read(x, it, err, errlen);
    }
    static const char *const want[] = {[FIELD_FLOAT] = "a number", [FIELD_BOOL] = "true or false",
                                       [FIELD_STRING] = "a string"};
    snprintf(err, errlen, "'%s' must be %s", f->name, want[f->type] ? want[f->type] : "something else");
    return 400;
}

int api_fields_read(const struct api_field *const *tables, const struct api_field_ctx *x, const char **param,
                    char *err, size_t errlen)
{
    if (!cJSON_IsObject(x->root)) {
        snprintf(err, errlen, "the body must be a JSON object");
        return 400;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, x->root)
    {
        const char *k = it->string ? it->string : "";
        *param = k;
        for (const cJSON *o = x->root->child; o != it; o = o->next)
            if (o->string && !strcmp(o->string, k)) {
                snprintf(err, errlen, "field '%s' appears twice", k);
                return 400;
            }
        const struct api_field *f = find(tables, k);
        if (!f) return unknown(tables, k, err, errlen);
        if (x->null_ok && cJSON_IsNull(it)) continue; /* null: the client's way of saying "default" */
        int code = read_value(f, x, it, err, errlen);
        if (code) return code;
        if (f->given != FIELD_NO_GIVEN) *(bool *)((char *)x->dst + f->given) = true;
    }
    *param = NULL;
    return 0;
}

/* ==============================================================================================
 * The body
 * ============================================================================================== */

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
    size_t most = (size_t)sched_n_ctx(e.sched) + SCHED_MAX_STOPS + BODY_SPARE_VALUES;
    api_engine_release(c->srv);
    if (commas < most) return false;
    snprintf(err, errlen, "the body holds more than %zu JSON values (a prompt has at most the context's tokens)", most);
    return true;
}

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

cJSON *api_begin(struct api_conn *c, struct api_engine *e, enum MHD_Result *ret)
{
    char err[512] = "";
    cJSON *root = api_json_body(c, err, sizeof err);
    if (!root) {
        *ret = api_error(c, 400, "%s", err);
        return NULL;
    }
    if (!api_engine_acquire(c->srv, e)) {
        cJSON_Delete(root);
        *ret = api_error_retry(c, 503, "no model is loaded");
        return NULL;
    }
    return root;
}
