/* oai_chat.c - POST /v1/chat/completions (OpenAI-compatible). See oai_chat.h. */
#include "server/api/oai_chat.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/chat_template.h"
#include "attnd/model.h"
#include "attnd/tokenizer.h"
#include "server/api/generate.h"
#include "server/api/oai_common.h"

#define MAX_MESSAGES 1024

/* Fields the API defines that attnd accepts and ignores (they change nothing in the answer). */
static const char *const IGNORED[] = {"model", "user", "store", "metadata", "service_tier", "parallel_tool_calls", NULL};
/* Fields that would change the answer in ways attnd cannot honour. */
static const char *const REFUSED[] = {"tools", "tool_choice", "functions", "function_call", "audio", "modalities",
                                      "prediction", "web_search_options", NULL};

static bool in(const char *const *list, const char *k)
{
    for (; *list; list++)
        if (!strcmp(*list, k)) return true;
    return false;
}

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
        attnd_status st = chat_encode(e->tok, (enum chat_family)oai_chat_family(srv, e), cm, (size_t)n, true, &p->prompts[0], &p->n_prompt[0], err,
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

/* The fields only the chat API has. Returns 0, -1 (not one of them) or 400. */
static int chat_field(const struct api_conn *c, const cJSON *it, struct job_params *p, int *top, char *err,
                      size_t errlen)
{
    const char *k = it->string;
    double v;
    if (!strcmp(k, "max_completion_tokens")) {
        if (!api_json_int(it, 0, c->srv->cfg.max_tokens_cap, &v)) goto bad_int;
        p->req.max_tokens = (int)v;
        p->max_given = true;
    } else if (!strcmp(k, "n")) {
        if (!api_json_int(it, 1, 8, &v)) goto bad_int;
        p->n = (int)v;
    } else if (!strcmp(k, "logprobs")) {
        if (!cJSON_IsBool(it) && !cJSON_IsNull(it)) goto bad_bool;
        if (cJSON_IsTrue(it) && p->logprobs < 0) p->logprobs = 0;
    } else if (!strcmp(k, "top_logprobs")) {
        if (!api_json_int(it, 0, SCHED_MAX_LOGPROBS, &v)) goto bad_int;
        *top = (int)v;
    } else return -1;
    return 0;
bad_int:
    snprintf(err, errlen, "'%s' must be an integer in range (n: 1..8, top_logprobs: 0..20, max_completion_tokens: "
             "0..%d)", k, c->srv->cfg.max_tokens_cap);
    return 400;
bad_bool:
    snprintf(err, errlen, "'%s' must be true or false", k);
    return 400;
}

/* The sampling-affecting fields the API has but attnd cannot honour fully. */
static int refused_field(const cJSON *it, char *err, size_t errlen)
{
    const char *k = it->string;
    if (in(REFUSED, k) && !cJSON_IsNull(it) && !(cJSON_IsArray(it) && !cJSON_GetArraySize(it)) &&
        !(!strcmp(k, "tool_choice") && cJSON_IsString(it) && !strcmp(it->valuestring, "none"))) {
        snprintf(err, errlen, "'%s' is not supported by attnd", k);
        return 400;
    }
    if (!strcmp(k, "response_format")) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(it, "type");
        if (!cJSON_IsNull(it) && !(cJSON_IsString(t) && !strcmp(t->valuestring, "text"))) {
            snprintf(err, errlen, "'response_format' other than {\"type\":\"text\"} is not supported by attnd");
            return 400;
        }
    }
    if (!strcmp(k, "logit_bias") && !cJSON_IsNull(it) && !(cJSON_IsObject(it) && !it->child)) {
        snprintf(err, errlen, "'logit_bias' is not supported by attnd");
        return 400;
    }
    return 0;
}

/* Reads every field into p. Returns 0 or an HTTP status; *param names the field at fault. */
static int parse_chat(struct api_conn *c, const struct api_engine *e, const cJSON *root, struct job_params *p,
                      const char **param, char *err, size_t errlen)
{
    const cJSON *msgs = NULL, *it;
    int top = -1;
    cJSON_ArrayForEach(it, root)
    {
        const char *k = it->string ? it->string : "";
        *param = k;
        int code = oai_common_field(root, it, p, err, errlen);
        if (code >= 0) {
            if (code) return code;
            continue;
        }
        if (!strcmp(k, "messages")) {
            msgs = it;
            continue;
        }
        if (in(IGNORED, k)) continue;
        code = refused_field(it, err, errlen);
        if (code) return code;
        if (in(REFUSED, k) || !strcmp(k, "response_format") || !strcmp(k, "logit_bias")) continue;
        if (cJSON_IsNull(it)) continue; /* the client's way of saying "default" */
        if ((code = chat_field(c, it, p, &top, err, errlen)) >= 0) {
            if (code) return code;
            continue;
        }
        if ((code = api_gen_field(c->srv, it, &p->req, p->stops, &p->max_given, err, errlen)) >= 0) {
            if (code) return code;
            if (!strcmp(k, "seed")) p->seed_given = true;
            continue;
        }
        snprintf(err, errlen, "unknown field '%s'", k);
        return 400;
    }
    *param = "top_logprobs";
    if (top >= 0 && p->logprobs < 0) {
        snprintf(err, errlen, "'top_logprobs' needs \"logprobs\": true");
        return 400;
    }
    if (top > 0) p->logprobs = top;
    *param = "messages";
    if (!msgs) {
        snprintf(err, errlen, "'messages' is required");
        return 400;
    }
    return parse_messages(msgs, e, c->srv, p, err, errlen);
}

enum MHD_Result oai_chat(struct api_conn *c) { return oai_route(c, OAI_CHAT, parse_chat); }
