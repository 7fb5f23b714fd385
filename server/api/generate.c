/* generate.c - POST /v1/generate: its fields and its answer's shape; the completion job (job.h)
 * runs it. See generate.h. */
#include "server/api/generate.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/model.h"
#include "attnd/sampler.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "server/api/buf.h"
#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/api/job.h"

#define DEFAULT_MAX_TOKENS 128

/* ==============================================================================================
 * The answer's shape (job.h renders it)
 * ============================================================================================== */

static void put_usage_timings(struct api_buf *b, const struct job_choice *c)
{
    double pps = c->prompt_ms > 0 ? c->prompt_tokens / (c->prompt_ms / 1e3) : 0;
    double gps = c->generation_ms > 0 ? c->completion_tokens / (c->generation_ms / 1e3) : 0;
    api_buf_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d", c->prompt_tokens,
                   c->completion_tokens, c->prompt_tokens + c->completion_tokens);
    if (c->job->n_interventions) api_buf_printf(b, ",\"interventions\":%d", c->job->n_interventions);
    if (c->drafted_tokens) /* speculative decoding drafted (API.md: only then) */
        api_buf_printf(b, ",\"drafted_tokens\":%d,\"accepted_tokens\":%d", c->drafted_tokens, c->accepted_tokens);
    api_buf_puts(b, "},");
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
    .id_prefix = "gen", .stream_token = stream_token,
    .stream_choice_end = stream_choice_end, .stream_close = stream_close, .stream_error = stream_error,
    .whole = whole, .error = render_error,
};

/* ==============================================================================================
 * Fields
 * ============================================================================================== */

struct gen_seen {
    const cJSON *prompt; /* read last: it needs the tokenizer */
};

static int read_prompt(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    ((struct gen_seen *)x->route)->prompt = it;
    return 0;
}

/* logprobs: the top alternatives per token, 0 (none) .. 20 */
static int read_logprobs(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    double v;
    if (!api_json_int(it, 0, SCHED_MAX_LOGPROBS, &v)) {
        snprintf(err, errlen, "'logprobs' must be an integer in [0, %d]", SCHED_MAX_LOGPROBS);
        return 400;
    }
    ((struct job_params *)x->dst)->logprobs = v ? (int)v : -1;
    return 0;
}

static const struct api_field gen_fields[] = {
    {"prompt", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_prompt},
    {"logprobs", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_logprobs},
    {"stream", FIELD_BOOL, offsetof(struct job_params, stream), 0, 0, FIELD_NO_GIVEN, NULL},
    {"model", FIELD_STRING, 0, 0, 0, FIELD_NO_GIVEN, NULL},
    FIELD_END,
};

static const struct api_field *const gen_tables[] = {gen_fields, api_sampling_fields, NULL};

/* Checks every field of the body against its row. Returns 0 or an HTTP status. */
static int parse_body(struct api_conn *c, const struct api_engine *e, cJSON *root, struct job_params *p, char *err,
                      size_t errlen)
{
    p->req.max_tokens = DEFAULT_MAX_TOKENS;
    if (p->req.max_tokens > c->srv->cfg.max_tokens_cap) p->req.max_tokens = c->srv->cfg.max_tokens_cap;
    struct gen_seen seen = {0};
    struct api_field_ctx x = {.c = c, .e = e, .root = root, .dst = p, .route = &seen, .null_ok = false};
    const char *param;
    int code = api_fields_read(gen_tables, &x, &param, err, errlen);
    if (code) return code;
    if (!seen.prompt) {
        snprintf(err, errlen, "'prompt' is required");
        return 400;
    }
    if (sampler_params_validate(&p->req.sampling, err, errlen)) return 400;
    p->n_prompts = 1;
    code = api_gen_prompt(seen.prompt, e, &p->prompts[0], &p->n_prompt[0], err, errlen);
    if (code) return code;
    /* the default never overflows the context; an explicit max_tokens that does is a 400 */
    size_t room = (size_t)sched_n_ctx(e->sched) - p->n_prompt[0];
    if (!p->max_given && (size_t)p->req.max_tokens > room) p->req.max_tokens = (int)room;
    p->max_given = true;  /* the job keeps max_tokens as computed here */
    p->seed_given = true; /* the sampler's default seed when the body gives none */
    return 0;
}

/* ==============================================================================================
 * The route
 * ============================================================================================== */

enum MHD_Result api_generate(struct api_conn *c)
{
    struct http_server *srv = c->srv;
    enum MHD_Result ret;
    struct api_engine e;
    cJSON *root = api_begin(c, &e, &ret);
    if (!root) return ret;
    char err[512] = "";
    struct job_params p;
    job_params_init(&p);
    int code = parse_body(c, &e, root, &p, err, sizeof err);
    if (code) {
        api_engine_release(srv);
        cJSON_Delete(root);
        job_params_free(&p);
        return api_error_retry(c, code, "%s", err);
    }
    ret = job_run(c, &e, &p, &gen_render); /* releases the engine */
    cJSON_Delete(root); /* it held the stop strings until then */
    return ret;
}
