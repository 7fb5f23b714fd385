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

/* Renders messages with the server's template and tokenizes them into p->prompts[0]. */
static int parse_messages(const cJSON *msgs, const struct api_engine *e, const struct http_server *srv,
                          struct job_params *p, char *err, size_t errlen)
{
    int n = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : -1;
    if (n <= 0 || n > MAX_MESSAGES) {
        snprintf(err, errlen, "'messages' must be an array of 1..%d messages", MAX_MESSAGES);
        return 400;
    }
    struct chat_msg *cm = calloc((size_t)n, sizeof *cm);
    char **texts = calloc((size_t)n, sizeof *texts);
    int code = cm && texts ? 0 : 503;
    if (code) snprintf(err, errlen, "out of memory");
    int i = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs)
    {
        if (code) break;
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            snprintf(err, errlen, "messages[%d] must be an object with a string 'role'", i);
            code = 400;
            break;
        }
        const char *r = role->valuestring;
        if (!strcmp(r, "developer")) r = "system"; /* the newer name of the system role */
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant")) {
            snprintf(err, errlen, "messages[%d].role '%s' is not supported (system, developer, user, assistant)", i, r);
            code = 400;
            break;
        }
        if ((code = content_text(m, i, &texts[i], &cm[i].len, err, errlen))) break;
        cm[i].role = r;
        cm[i].content = texts[i];
        i++;
    }
    if (!code) {
        attnd_status st = chat_encode_json(e->tok, oai_chat_template(srv, e), msgs, NULL, true, &p->prompts[0], &p->n_prompt[0], err,
                                           errlen);
        if (st) code = st == ATTND_ERR_NOMEM ? 503 : 400;
        else p->n_prompts = 1;
        int n_ctx = sched_n_ctx(e->sched);
        if (!code && p->n_prompt[0] > (size_t)n_ctx) {
            snprintf(err, errlen, "the chat is %zu tokens; the context holds %d", p->n_prompt[0], n_ctx);
            code = 400;
        }
    }
    for (int k = 0; texts && k < n; k++) free(texts[k]);
    free(texts);
    free(cm);
    return code;
}

/* ==============================================================================================
 * Fields
 * ============================================================================================== */

struct chat_seen {
    const cJSON *msgs; /* read last: the template needs the whole body */
    int top;           /* top_logprobs, or -1 */
};

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

static int read_response_format(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(it, "type");
    if (cJSON_IsString(t) && !strcmp(t->valuestring, "text")) return 0;
    snprintf(err, errlen, "'response_format' other than {\"type\":\"text\"} is not supported by attnd");
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
    {"response_format", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_response_format},
    IGNORED("store"), IGNORED("metadata"), IGNORED("service_tier"), IGNORED("parallel_tool_calls"),
    REFUSED("tools"), REFUSED("tool_choice"), REFUSED("functions"), REFUSED("function_call"), REFUSED("audio"),
    REFUSED("modalities"), REFUSED("prediction"), REFUSED("web_search_options"),
    FIELD_END,
};

static const struct api_field *const chat_tables[] = {chat_fields, oai_common_fields, api_sampling_fields, NULL};

/* Reads every field into p. Returns 0 or an HTTP status; *param names the field at fault. */
static int parse_chat(struct api_conn *c, const struct api_engine *e, const cJSON *root, struct job_params *p,
                      const char **param, char *err, size_t errlen)
{
    struct chat_seen seen = {.top = -1};
    struct api_field_ctx x = {.c = c, .e = e, .root = root, .dst = p, .route = &seen, .null_ok = true};
    int code = api_fields_read(chat_tables, &x, param, err, errlen);
    if (code) return code;
    *param = "top_logprobs";
    if (seen.top >= 0 && p->logprobs < 0) {
        snprintf(err, errlen, "'top_logprobs' needs \"logprobs\": true");
        return 400;
    }
    if (seen.top > 0) p->logprobs = seen.top;
    *param = "messages";
    if (!seen.msgs) {
        snprintf(err, errlen, "'messages' is required");
        return 400;
    }
    return parse_messages(seen.msgs, e, c->srv, p, err, errlen);
}

int oai_chat_prompt(struct api_conn *c, const struct api_engine *e, const cJSON *msgs, struct job_params *p, char *err,
                    size_t errlen)
{
    return parse_messages(msgs, e, c->srv, p, err, errlen);
}

enum MHD_Result oai_chat(struct api_conn *c) { return oai_route(c, &oai_chat_render, parse_chat); }
