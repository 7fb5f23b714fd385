/* oai_chat.c - POST /v1/chat/completions (OpenAI-compatible). See oai_chat.h. */
#include "server/api/oai_chat.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/chat_template.h"
#include "attnd/model.h"
#include "attnd/tokenizer.h"
#include "server/api/fields.h"
#include "server/api/oai_common.h"
#include "server/api/oai_tools.h"
#include "server/api/reply.h"

#define MAX_MESSAGES 1024

/* A message's content: a string, or an array of {"type":"text","text":...} parts, joined.
 * Returns 0 or 400 with err; *out is malloc'd. */
static int content_text(const cJSON *m, int i, char **out, size_t *len, char *err, size_t errlen)
{
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(m, "content");
    struct api_buf b = {0};
    if (cJSON_IsString(ct)) api_buf_puts(&b, ct->valuestring);
    else if (cJSON_IsArray(ct)) {
        const cJSON *part;
        cJSON_ArrayForEach(part, ct)
        {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
                api_buf_free(&b);
                snprintf(err, errlen, "messages[%d].content: only parts {\"type\":\"text\",\"text\":...} are supported", i);
                return 400;
            }
            api_buf_puts(&b, text->valuestring);
        }
    } else if (!cJSON_IsNull(ct) || !ct) {
        snprintf(err, errlen, "messages[%d].content must be a string or an array of text parts", i);
        return 400;
    }
    if (b.oom) {
        api_buf_free(&b);
        snprintf(err, errlen, "out of memory");
        return 503;
    }
    *len = b.len;
    *out = b.p ? b.p : calloc(1, 1);
    return 0;
}

/* An assistant message's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}]
 * (arguments a string, as the API sends them). Returns 0 or 400 with err. */
static int check_tool_calls(const cJSON *m, int i, char *err, size_t errlen)
{
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *tc;
    if (!calls || cJSON_IsNull(calls)) return 0;
    if (!cJSON_IsArray(calls)) return snprintf(err, errlen, "messages[%d].tool_calls must be an array", i), 400;
    int k = 0;
    cJSON_ArrayForEach(tc, calls)
    {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsObject(fn) || !cJSON_IsString(name) || !(cJSON_IsString(args) || cJSON_IsObject(args))) {
            snprintf(err, errlen, "messages[%d].tool_calls[%d] must be {\"id\", \"type\": \"function\", \"function\": "
                     "{\"name\", \"arguments\"}}", i, k);
            return 400;
        }
        k++;
    }
    return 0;
}

/* Checks one message: an object with a known role, its tool_calls and its content. */
static int check_message(const cJSON *m, int i, char *err, size_t errlen)
{
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
    if (!cJSON_IsObject(m) || !cJSON_IsString(role))
        return snprintf(err, errlen, "messages[%d] must be an object with a string 'role'", i), 400;
    const char *r = role->valuestring; /* "developer" (the newer name of "system") the template gets as system */
    if (strcmp(r, "system") && strcmp(r, "developer") && strcmp(r, "user") && strcmp(r, "assistant") &&
        strcmp(r, "tool"))
        return snprintf(err, errlen, "messages[%d].role '%s' is not supported (system, developer, user, assistant, tool)",
                        i, r), 400;
    int code = check_tool_calls(m, i, err, errlen);
    char *text = NULL;
    size_t len;
    if (!code) code = content_text(m, i, &text, &len, err, errlen);
    free(text);
    return code;
}

static int check_messages(const cJSON *msgs, char *err, size_t errlen)
{
    int n = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : -1;
    if (n <= 0 || n > MAX_MESSAGES)
        return snprintf(err, errlen, "'messages' must be an array of 1..%d messages", MAX_MESSAGES), 400;
    int i = 0, code = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) if ((code = check_message(m, i++, err, errlen))) break;
    return code;
}

/* Renders messages (and tools, NULL: none) with the server's template and tokenizes them into
 * p->prompts[0]. */
static int parse_messages(const cJSON *msgs, const cJSON *tools, const cJSON *kwargs, const struct api_engine *e,
                          const struct http_server *srv, struct job_params *p, char *err, size_t errlen)
{
    int code = check_messages(msgs, err, errlen);
    if (code) return code;
    attnd_status st = chat_encode_json(e->tok, oai_chat_template(srv, e), msgs, tools, kwargs, true, &p->prompts[0],
                                       &p->n_prompt[0], err, errlen);
    if (st) return st == ATTND_ERR_NOMEM ? 503 : 400;
    p->n_prompts = 1;
    int n_ctx = sched_n_ctx(e->sched);
    if (p->n_prompt[0] > (size_t)n_ctx)
        return snprintf(err, errlen, "the chat is %zu tokens; the context holds %d", p->n_prompt[0], n_ctx), 400;
    return 0;
}

/* ==============================================================================================
 * Fields
 * ============================================================================================== */

struct chat_seen {
    const cJSON *msgs;  /* read last: the template needs the whole body */
    int top;            /* top_logprobs, or -1 */
    const cJSON *tools; /* checked (tools.h) */
    const cJSON *tool_choice;
    const cJSON *template_kwargs; /* chat_template_kwargs */
    const char *effort;           /* reasoning_effort */
};

/* chat_template_kwargs: an object of variables for the template (vLLM's and llama.cpp's name) */
static int read_template_kwargs(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    if (!cJSON_IsObject(it)) return snprintf(err, errlen, "'chat_template_kwargs' must be an object"), 400;
    ((struct chat_seen *)x->route)->template_kwargs = it;
    return 0;
}

static int read_reasoning_effort(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high"};
    for (size_t i = 0; cJSON_IsString(it) && i < sizeof efforts / sizeof efforts[0]; i++)
        if (!strcmp(it->valuestring, efforts[i])) {
            ((struct chat_seen *)x->route)->effort = efforts[i];
            return 0;
        }
    return snprintf(err, errlen, "'reasoning_effort' must be none, minimal, low, medium or high"), 400;
}

/* The template's extra variables: chat_template_kwargs, and reasoning_effort both as itself and as
 * the thinking switch templates such as Qwen3's read (enable_thinking: false for none and
 * minimal); templates without either ignore them. A new object in *out, or NULL. */
static int template_kwargs(const struct chat_seen *s, cJSON **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!s->template_kwargs && !s->effort) return 0;
    cJSON *kw = s->template_kwargs ? cJSON_Duplicate(s->template_kwargs, 1) : cJSON_CreateObject();
    if (kw && s->effort) {
        bool think = strcmp(s->effort, "none") && strcmp(s->effort, "minimal");
        if (!cJSON_HasObjectItem(kw, "reasoning_effort")) cJSON_AddStringToObject(kw, "reasoning_effort", s->effort);
        if (!cJSON_HasObjectItem(kw, "enable_thinking")) cJSON_AddBoolToObject(kw, "enable_thinking", think);
    }
    if (!kw) return snprintf(err, errlen, "out of memory"), 503;
    *out = kw;
    return 0;
}

static int read_tools(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    if (cJSON_IsArray(it) && !cJSON_GetArraySize(it)) return 0; /* no tools */
    int code = oai_tools_check(it, err, errlen);
    if (!code) ((struct chat_seen *)x->route)->tools = it;
    return code;
}

static int read_tool_choice(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    ((struct chat_seen *)x->route)->tool_choice = it;
    return 0;
}



static int read_messages(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    ((struct chat_seen *)x->route)->msgs = it;
    return 0;
}

static int read_logprobs(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    struct job_params *p = x->dst;
    if (!cJSON_IsBool(it)) {
        snprintf(err, errlen, "'logprobs' must be true or false");
        return 400;
    }
    if (cJSON_IsTrue(it) && p->logprobs < 0) p->logprobs = 0;
    return 0;
}

static int read_top_logprobs(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    double v;
    if (!api_json_int(it, 0, SCHED_MAX_LOGPROBS, &v)) {
        snprintf(err, errlen, "'top_logprobs' must be an integer in [0, %d]", SCHED_MAX_LOGPROBS);
        return 400;
    }
    ((struct chat_seen *)x->route)->top = (int)v;
    return 0;
}

/* A field that would change the answer in a way attnd cannot honour: refused unless it asks for
 * nothing (an empty list, tool_choice "none"). */
static int read_refused(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    if (cJSON_IsArray(it) && !cJSON_GetArraySize(it)) return 0;
    if (!strcmp(it->string, "tool_choice") && cJSON_IsString(it) && !strcmp(it->valuestring, "none")) return 0;
    snprintf(err, errlen, "'%s' is not supported by attnd", it->string);
    return 400;
}

#define JP(f) offsetof(struct job_params, f)
#define IGNORED(name) {name, FIELD_IGNORED, 0, 0, 0, FIELD_NO_GIVEN, NULL}
#define REFUSED(name) {name, FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_refused}

/* The fields only the chat API has. */
static const struct api_field chat_fields[] = {
    {"messages", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_messages},
    {"max_completion_tokens", FIELD_INT, JP(req.max_tokens), 0, FIELD_HI_MAX_TOKENS, JP(max_given), NULL},
    {"n", FIELD_INT, JP(n), 1, 8, FIELD_NO_GIVEN, NULL},
    {"logprobs", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_logprobs},
    {"top_logprobs", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_top_logprobs},
    {"tools", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_tools},
    {"tool_choice", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_tool_choice},
    {"parallel_tool_calls", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, oai_read_parallel_tool_calls},
    {"chat_template_kwargs", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_template_kwargs},
    {"reasoning_effort", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_reasoning_effort},
    IGNORED("store"), IGNORED("metadata"), IGNORED("service_tier"),
    REFUSED("functions"), REFUSED("function_call"), REFUSED("audio"),
    REFUSED("modalities"), REFUSED("prediction"), REFUSED("web_search_options"),
    FIELD_END,
};

static const struct api_field *const chat_tables[] = {chat_fields, oai_common_fields, api_sampling_fields, NULL};

/* Reads every field but the messages into p and seen, and the tool choice into use. Returns 0
 * or an HTTP status; *param names the field at fault. */
static int read_chat_fields(struct api_conn *c, const struct api_engine *e, const cJSON *root, struct job_params *p,
                            struct chat_seen *seen, struct oai_tool_use *use, const char **param, char *err,
                            size_t errlen)
{
    struct api_field_ctx x = {.c = c, .e = e, .root = root, .dst = p, .route = seen, .null_ok = true};
    int code = api_fields_read(chat_tables, &x, param, err, errlen);
    if (code) return code;
    *param = "top_logprobs";
    if (seen->top >= 0 && p->logprobs < 0) {
        snprintf(err, errlen, "'top_logprobs' needs \"logprobs\": true");
        return 400;
    }
    if (seen->top > 0) p->logprobs = seen->top;
    *param = "tool_choice";
    if ((code = oai_tool_choice(seen->tools, seen->tool_choice, use, err, errlen))) return code;
    *param = "messages";
    if (!seen->msgs) return snprintf(err, errlen, "'messages' is required"), 400;
    return 0;
}

static int parse_chat(struct api_conn *c, const struct api_engine *e, const cJSON *root, struct job_params *p,
                      const char **param, char *err, size_t errlen)
{
    struct chat_seen seen = {.top = -1};
    struct oai_tool_use use;
    int code = read_chat_fields(c, e, root, p, &seen, &use, param, err, errlen);
    if (code) return code;
    cJSON *kw = NULL;
    if (!(code = template_kwargs(&seen, &kw, err, errlen)))
        code = parse_messages(seen.msgs, use.render ? seen.tools : NULL, kw, e, c->srv, p, err, errlen);
    cJSON_Delete(kw);
    if (code) return code;
    *param = "tool_choice";
    return oai_tools_apply(oai_chat_template(c->srv, e), &use, p, err, errlen);
}

/* POST /apply-template: the body's chat rendered with the template, as text. */
static int render_text(struct api_conn *c, const struct api_engine *e, const cJSON *root, struct chat_prompt *out,
                       const char **param, char *err, size_t errlen)
{
    struct job_params p;
    oai_params_init(&p);
    struct chat_seen seen = {.top = -1};
    struct oai_tool_use use;
    int code = read_chat_fields(c, e, root, &p, &seen, &use, param, err, errlen);
    job_params_free(&p);
    if (!code) code = check_messages(seen.msgs, err, errlen);
    cJSON *kw = NULL;
    if (!code) code = template_kwargs(&seen, &kw, err, errlen);
    if (code) return code;
    attnd_status st = chat_render_vocab(e->tok, oai_chat_template(c->srv, e), seen.msgs, use.render ? seen.tools : NULL,
                                        kw, true, out, err, errlen);
    cJSON_Delete(kw);
    return st ? (st == ATTND_ERR_NOMEM ? 503 : 400) : 0;
}

enum MHD_Result oai_apply_template(struct api_conn *c)
{
    enum MHD_Result ret;
    struct api_engine e;
    cJSON *root = oai_begin(c, &e, &ret);
    if (!root) return ret;
    struct chat_prompt out = {0};
    char err[512] = "", pbuf[64] = "";
    const char *param = NULL;
    int code = render_text(c, &e, root, &out, &param, err, sizeof err);
    api_engine_release(c->srv);
    if (param) snprintf(pbuf, sizeof pbuf, "%s", param); /* param points into root */
    cJSON_Delete(root);
    if (code) return oai_error(c, code, param ? pbuf : NULL, NULL, "%s", err);
    cJSON *o = cJSON_CreateObject();
    cJSON *s = o ? cJSON_AddStringToObject(o, "prompt", out.text ? out.text : "") : NULL;
    chat_prompt_free(&out);
    if (!s) {
        cJSON_Delete(o);
        return oai_error(c, 503, NULL, NULL, "out of memory");
    }
    return api_respond_json(c, 200, o);
}

int oai_chat_prompt(struct api_conn *c, const struct api_engine *e, const cJSON *msgs, const cJSON *tools,
                    struct job_params *p, char *err, size_t errlen)
{
    return parse_messages(msgs, tools, NULL, e, c->srv, p, err, errlen);
}

enum MHD_Result oai_chat(struct api_conn *c) { return oai_route(c, &oai_chat_render, parse_chat); }
