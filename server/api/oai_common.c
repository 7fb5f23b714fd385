/* oai_common.c - the OpenAI-compatible routes' shared machinery: the API's error shape, the body,
 * the fields both routes read, and the two answer shapes (chat and legacy text) the completion
 * job (job.h) renders. See oai_common.h. */
#include "server/api/oai_common.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/chat_template.h"
#include "attnd/model.h"
#include "attnd/sampler.h"
#include "attnd/tokenizer.h"
#include "attnd/toolcall.h"
#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/api/oai_tools.h"

#define PIECE_CAP 512 /* one token's text */

/* ==============================================================================================
 * Errors and the body
 * ============================================================================================== */

enum MHD_Result oai_error(struct api_conn *c, int status, const char *param, const char *code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    struct api_buf b = {0};
    api_error_json_openai(c->srv, &b, status, param, code, msg);
    api_buf_puts(&b, "\n");
    size_t len = b.len;
    char *body = api_buf_take(&b);
    if (!body) return MHD_NO;
    static const char *const retry[] = {"Retry-After", "1", NULL};
    return api_respond(c, status, "application/json", body, len, status == 503 || status == 429 ? retry : NULL);
}

static enum MHD_Result render_error(struct api_conn *c, int code, const char *param, const char *msg)
{
    return oai_error(c, code, param, NULL, "%s", msg);
}

cJSON *oai_parse_body(struct api_conn *c, enum MHD_Result *ret)
{
    char err[256];
    cJSON *root = api_json_body(c, err, sizeof err);
    if (!root) {
        *ret = oai_error(c, 400, NULL, NULL, "%s", err);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        *ret = oai_error(c, 400, NULL, NULL, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

void oai_params_init(struct job_params *p)
{
    job_params_init(p);
    struct sampler_params *sp = &p->req.sampling;
    sp->temperature = 1.0f;
    sp->top_p = 1.0f;
    sp->top_k = 0;
    sp->min_p = 0.0f;
}

static int read_stream_options(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(it, "include_usage");
    if (!cJSON_IsObject(it) || (u && !cJSON_IsBool(u))) {
        snprintf(err, errlen, "'stream_options' must be an object like {\"include_usage\":true}");
        return 400;
    }
    ((struct job_params *)x->dst)->include_usage = cJSON_IsTrue(u);
    return 0;
}

static int read_logit_bias(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    if (cJSON_IsObject(it) && !it->child) return 0;
    snprintf(err, errlen, "'logit_bias' is not supported by attnd");
    return 400;
}

static int read_response_format(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    return oai_response_format(it, x->dst, err, errlen);
}

const struct api_field oai_common_fields[] = {
    {"response_format", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_response_format},
    {"stream", FIELD_BOOL, offsetof(struct job_params, stream), 0, 0, FIELD_NO_GIVEN, NULL},
    {"stream_options", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_stream_options},
    {"logit_bias", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_logit_bias},
    {"model", FIELD_IGNORED, 0, 0, 0, FIELD_NO_GIVEN, NULL},
    {"user", FIELD_IGNORED, 0, 0, 0, FIELD_NO_GIVEN, NULL},
    FIELD_END,
};

cJSON *oai_begin(struct api_conn *c, struct api_engine *e, enum MHD_Result *ret)
{
    cJSON *root = oai_parse_body(c, ret);
    if (!root) return NULL;
    if (!api_engine_acquire(c->srv, e)) {
        cJSON_Delete(root);
        *ret = oai_error(c, 503, NULL, NULL, "no model is loaded");
        return NULL;
    }
    return root;
}

enum MHD_Result oai_route(struct api_conn *c, const struct job_render *render, oai_parse_fn parse)
{
    enum MHD_Result ret;
    struct api_engine e;
    cJSON *root = oai_begin(c, &e, &ret);
    if (!root) return ret;
    struct job_params p;
    oai_params_init(&p);
    char err[512] = "", pbuf[64] = "";
    const char *param = NULL;
    int code = parse(c, &e, root, &p, &param, err, sizeof err);
    if (code) {
        api_engine_release(c->srv);
        job_params_free(&p);
        if (param) snprintf(pbuf, sizeof pbuf, "%s", param); /* param points into root */
        cJSON_Delete(root);
        return oai_error(c, code, param ? pbuf : NULL, NULL, "%s", err);
    }
    ret = job_run(c, &e, &p, render); /* releases the engine */
    cJSON_Delete(root); /* it held the stop strings until then */
    return ret;
}

const struct chat_tmpl *oai_chat_template(const struct http_server *srv, const struct api_engine *e)
{
    const struct chat_tmpl *t = NULL;
    char err[256];
    chat_tmpl_get(e->model->gguf, srv->cfg.chat_template_file, srv->cfg.chat_template, false, &t, err, sizeof err);
    return t; /* NULL (a file that went away since startup): chat_encode_json refuses with a 400 */
}

/* ==============================================================================================
 * JSON pieces of both shapes
 * ============================================================================================== */

static bool is_chat(const struct api_job *j) { return j->render == &oai_chat_render; }

static void put_head(struct api_buf *b, const struct api_job *j, bool chunk)
{
    const char *obj = is_chat(j) ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    char id[64];
    job_id_str(j, id, sizeof id);
    api_buf_printf(b, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", id, obj, j->created);
    api_buf_json_str(b, j->model, strlen(j->model));
    api_buf_puts(b, ",\"system_fingerprint\":\"attnd\",\"choices\":[");
}

static void put_usage(struct api_buf *b, const struct api_job *j)
{
    int comp = 0, cached = 0, n = j->n_prompts > 0 && j->n_choices >= j->n_prompts ? j->n_choices / j->n_prompts : 1;
    for (int i = 0; i < j->n_choices; i++) {
        comp += j->ch[i].completion_tokens;
        if (i % n == 0) cached += j->ch[i].cached_tokens; /* a prompt's first choice (its others share it) */
    }
    api_buf_printf(b, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d", j->prompt_tokens,
                   comp, j->prompt_tokens + comp);
    api_buf_printf(b, ",\"prompt_tokens_details\":{\"cached_tokens\":%d}", cached);
    if (j->n_interventions) api_buf_printf(b, ",\"interventions\":%d", j->n_interventions);
    api_buf_puts(b, "}");
}

/* A token's text (special tokens rendered, so EOS shows) into buf; returns its length. */
static size_t piece(const struct api_job *j, int id, char *buf)
{
    size_t n = tok_decode_token(j->tok, id, buf, PIECE_CAP, true);
    return n > PIECE_CAP ? PIECE_CAP : n;
}

static void put_bytes(struct api_buf *b, const char *s, size_t n)
{
    api_buf_puts(b, "[");
    for (size_t i = 0; i < n; i++) api_buf_printf(b, "%s%u", i ? "," : "", (unsigned char)s[i]);
    api_buf_puts(b, "]");
}

/* Chat: {"token","logprob","bytes","top_logprobs":[{"token","logprob","bytes"}...]} */
static void put_chat_lp(struct api_buf *b, const struct api_job *j, const struct job_tok *t)
{
    char buf[PIECE_CAP];
    for (int k = -1; k < j->logprobs; k++) {
        int id = k < 0 ? t->id : t->top_ids[k];
        float lp = k < 0 ? t->lp : t->top_lps[k];
        size_t n = piece(j, id, buf);
        api_buf_puts(b, k < 0 ? "{\"token\":" : k ? ",{\"token\":" : "{\"token\":");
        api_buf_json_str(b, buf, n);
        api_buf_puts(b, ",\"logprob\":");
        api_buf_float(b, lp);
        api_buf_puts(b, ",\"bytes\":");
        put_bytes(b, buf, n);
        if (k < 0) api_buf_puts(b, j->logprobs ? ",\"top_logprobs\":[" : ",\"top_logprobs\":[]}");
        else api_buf_puts(b, k == j->logprobs - 1 ? "}]}" : "}");
    }
}

/* Chat: {"content":[...tokens [from, to) of c...],"refusal":null} */
static void put_chat_lps(struct api_buf *b, const struct api_job *j, const struct job_choice *c, size_t from, size_t to)
{
    api_buf_puts(b, "{\"content\":[");
    for (size_t i = from; i < to; i++) {
        if (i > from) api_buf_puts(b, ",");
        put_chat_lp(b, j, &c->lps[i]);
    }
    api_buf_puts(b, "],\"refusal\":null}");
}

/* Legacy: the four parallel arrays of tokens [from, to) of choice c. */
static void put_text_lps(struct api_buf *b, const struct api_job *j, const struct job_choice *c, size_t from, size_t to,
                         size_t text_off)
{
    char buf[PIECE_CAP];
    api_buf_puts(b, "{\"tokens\":[");
    for (size_t i = from; i < to; i++) {
        if (i > from) api_buf_puts(b, ",");
        api_buf_json_str(b, buf, piece(j, c->lps[i].id, buf));
    }
    api_buf_puts(b, "],\"token_logprobs\":[");
    for (size_t i = from; i < to; i++) {
        if (i > from) api_buf_puts(b, ",");
        api_buf_float(b, c->lps[i].lp);
    }
    api_buf_puts(b, "],\"top_logprobs\":[");
    for (size_t i = from; i < to; i++) {
        api_buf_puts(b, i > from ? ",{" : "{");
        for (int k = 0; k < j->logprobs; k++) {
            if (k) api_buf_puts(b, ",");
            api_buf_json_str(b, buf, piece(j, c->lps[i].top_ids[k], buf));
            api_buf_puts(b, ":");
            api_buf_float(b, c->lps[i].top_lps[k]);
        }
        api_buf_puts(b, "}");
    }
    api_buf_puts(b, "],\"text_offset\":[");
    for (size_t i = from; i < to; i++) {
        api_buf_printf(b, "%s%zu", i > from ? "," : "", text_off);
        text_off += piece(j, c->lps[i].id, buf);
    }
    api_buf_puts(b, "]}");
}

/* ==============================================================================================
 * Streams (scheduler thread, job.mu held)
 * ============================================================================================== */

/* The delta (chat) or text (legacy) of one chunk of choice c: text[0..n) (NULL: none). */
static void put_chunk_text(struct api_buf *b, const struct api_job *j, struct job_choice *c, const char *text, size_t n)
{
    if (is_chat(j)) {
        api_buf_puts(b, "\"delta\":{");
        if (!c->started) api_buf_puts(b, "\"role\":\"assistant\"");
        if (text) {
            api_buf_puts(b, c->started ? "\"content\":" : ",\"content\":");
            api_buf_json_str(b, text, n);
        }
        api_buf_puts(b, "},");
    } else {
        struct api_buf t = {0}; /* the first chunk carries the echoed prompt */
        if (c->echo && !c->started) api_buf_put(&t, c->echo, c->echo_len);
        api_buf_put(&t, text ? text : "", text ? n : 0);
        api_buf_puts(b, "\"text\":");
        api_buf_json_str(b, t.p ? t.p : "", t.len);
        api_buf_puts(b, ",");
        if (t.oom) b->oom = true;
        api_buf_free(&t);
    }
    c->started = true;
}

/* One chunk of choice c: text[0..n) as its content, the logprobs of tokens [from, to) of c,
 * finish (NULL while running). */
static void put_chunk(struct api_job *j, struct job_choice *c, const char *text, size_t n, size_t from, size_t to,
                      const char *finish)
{
    struct api_buf *b = &j->sse.out;
    api_buf_puts(b, "data: ");
    put_head(b, j, true);
    api_buf_printf(b, "{\"index\":%d,", c->index);
    put_chunk_text(b, j, c, text, n);
    api_buf_puts(b, "\"logprobs\":");
    if (j->logprobs < 0 || from == to) api_buf_puts(b, "null");
    else if (!is_chat(j)) put_text_lps(b, j, c, from, to, c->text_off);
    else put_chat_lps(b, j, c, from, to);
    api_buf_puts(b, ",\"finish_reason\":");
    api_buf_json_str_or_null(b, finish);
    api_buf_puts(b, "}]");
    if (j->include_usage) api_buf_puts(b, ",\"usage\":null");
    api_buf_puts(b, "}\n\n");
}

/* ---- tool calls: the answer is held back and parsed at its end --------------------------------- */

/* Parses choice c's text for tool calls in the job's format (none: n_calls 0, content the text). */
static attnd_status tool_calls_of(const struct api_job *j, const struct job_choice *c, struct toolcall_result *r)
{
    attnd_status st = toolcall_parse(j->tool_format, c->text.p ? c->text.p : "", c->text.len, r);
    if (!st && j->tools_single && r->n_calls > 1) { /* parallel_tool_calls false: the first call only */
        for (size_t i = 1; i < r->n_calls; i++) free(r->calls[i].name), free(r->calls[i].arguments), free(r->calls[i].id);
        r->n_calls = 1;
    }
    return st;
}

/* [{"index"?,"id","type":"function","function":{"name","arguments"}}...] */
static void put_tool_calls(struct api_buf *b, const struct toolcall_result *r, bool indexed)
{
    api_buf_puts(b, "[");
    for (size_t i = 0; i < r->n_calls; i++) {
        const struct toolcall *t = &r->calls[i];
        api_buf_puts(b, i ? ",{" : "{");
        if (indexed) api_buf_printf(b, "\"index\":%zu,", i);
        api_buf_puts(b, "\"id\":");
        api_buf_json_str(b, t->id, strlen(t->id));
        api_buf_puts(b, ",\"type\":\"function\",\"function\":{\"name\":");
        api_buf_json_str(b, t->name, strlen(t->name));
        api_buf_puts(b, ",\"arguments\":");
        api_buf_json_str(b, t->arguments, strlen(t->arguments));
        api_buf_puts(b, "}}");
    }
    api_buf_puts(b, "]");
}

/* The end of a held-back choice: its content, its calls as one delta, the finish. */
static void stream_tool_end(struct api_job *j, struct job_choice *c)
{
    struct toolcall_result r;
    if (tool_calls_of(j, c, &r)) {
        j->oom = true;
        return;
    }
    if (r.content || !r.n_calls) put_chunk(j, c, r.content ? r.content : "", r.content ? strlen(r.content) : 0, 0, 0, NULL);
    if (r.n_calls) {
        struct api_buf *b = &j->sse.out;
        api_buf_puts(b, "data: ");
        put_head(b, j, true);
        api_buf_printf(b, "{\"index\":%d,\"delta\":{%s\"tool_calls\":", c->index,
                       c->started ? "" : "\"role\":\"assistant\",\"content\":null,");
        put_tool_calls(b, &r, true);
        api_buf_puts(b, "},\"logprobs\":null,\"finish_reason\":null}]");
        if (j->include_usage) api_buf_puts(b, ",\"usage\":null");
        api_buf_puts(b, "}\n\n");
        c->started = true;
        snprintf(c->finish, sizeof c->finish, "tool_calls");
    }
    put_chunk(j, c, NULL, 0, 0, 0, c->finish);
    toolcall_result_free(&r);
}

static void stream_token(struct api_job *j, struct job_choice *c, const struct sched_event *ev, size_t i)
{
    if (j->tool_format) return; /* held back: the calls are parsed at the end */
    if (!ev->text_len && j->logprobs < 0) return;
    bool lp = j->logprobs >= 0;
    put_chunk(j, c, ev->text, ev->text_len, lp ? i : 0, lp ? i + 1 : 0, NULL);
    if (lp) {
        char buf[PIECE_CAP];
        c->text_off += piece(j, ev->token, buf);
    }
}

static void stream_choice_end(struct api_job *j, struct job_choice *c, const struct sched_event *ev)
{
    if (j->tool_format) {
        stream_tool_end(j, c);
        return;
    }
    if (ev->final_text_len) put_chunk(j, c, ev->final_text, ev->final_text_len, 0, 0, NULL);
    put_chunk(j, c, NULL, 0, 0, 0, c->finish);
}

static void stream_close(struct api_job *j)
{
    if (j->include_usage) {
        api_buf_puts(&j->sse.out, "data: ");
        put_head(&j->sse.out, j, true);
        api_buf_puts(&j->sse.out, "],");
        put_usage(&j->sse.out, j);
        api_buf_puts(&j->sse.out, "}\n\n");
    }
    api_buf_puts(&j->sse.out, "data: [DONE]\n\n");
}

static void stream_error(struct api_job *j)
{
    api_buf_puts(&j->sse.out, "data: ");
    api_error_json_openai(j->srv, &j->sse.out, j->err_code, NULL, NULL, j->err_msg);
    api_buf_puts(&j->sse.out, "\n\ndata: [DONE]\n\n");
}

/* ==============================================================================================
 * Whole answers (connection thread, every choice done)
 * ============================================================================================== */

/* "message":{"role","content","tool_calls"?,"refusal"} of a chat choice; *finish gets
 * "tool_calls" where the answer made calls. */
static void put_message(struct api_buf *b, const struct api_job *j, const struct job_choice *c, const char **finish)
{
    struct toolcall_result r = {0};
    const char *text = c->text.p ? c->text.p : "";
    size_t len = c->text.len;
    if (j->tool_format) {
        if (tool_calls_of(j, c, &r)) b->oom = true;
        text = r.content, len = r.content ? strlen(r.content) : 0;
    }
    api_buf_puts(b, "\"message\":{\"role\":\"assistant\",\"content\":");
    if (text || !r.n_calls) api_buf_json_str(b, text ? text : "", len);
    else api_buf_puts(b, "null");
    if (r.n_calls) {
        api_buf_puts(b, ",\"tool_calls\":");
        put_tool_calls(b, &r, false);
        *finish = "tool_calls";
    }
    api_buf_puts(b, ",\"refusal\":null},");
    toolcall_result_free(&r);
}

static void put_choice(struct api_buf *b, const struct api_job *j, const struct job_choice *c)
{
    api_buf_printf(b, "%s{\"index\":%d,", c->index ? "," : "", c->index);
    const char *text = c->text.p ? c->text.p : "";
    const char *finish = c->finish;
    if (is_chat(j)) {
        put_message(b, j, c, &finish);
    } else {
        api_buf_puts(b, "\"text\":");
        api_buf_json_str(b, text, c->text.len);
        api_buf_puts(b, ",");
    }
    api_buf_puts(b, "\"logprobs\":");
    if (j->logprobs < 0) api_buf_puts(b, "null");
    else if (!is_chat(j)) put_text_lps(b, j, c, 0, c->n_toks, c->text_off);
    else put_chat_lps(b, j, c, 0, c->n_toks);
    api_buf_printf(b, ",\"finish_reason\":\"%s\"}", finish);
}

static void whole(struct api_buf *b, const struct api_job *j)
{
    put_head(b, j, false);
    for (int i = 0; i < j->n_choices; i++) put_choice(b, j, &j->ch[i]);
    api_buf_puts(b, "],");
    put_usage(b, j);
    api_buf_puts(b, "}\n");
}

const struct job_render oai_chat_render = {
    .id_prefix = "chatcmpl", .stream_token = stream_token,
    .stream_choice_end = stream_choice_end, .stream_close = stream_close, .stream_error = stream_error,
    .whole = whole, .error = render_error,
};

const struct job_render oai_text_render = {
    .id_prefix = "cmpl", .stream_token = stream_token,
    .stream_choice_end = stream_choice_end, .stream_close = stream_close, .stream_error = stream_error,
    .whole = whole, .error = render_error,
};
