/* oai_responses.c - POST /v1/responses (the OpenAI Responses API). See oai_responses.h. */
#include "server/api/oai_responses.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "server/api/errors.h"
#include "server/api/fields.h"
#include "server/api/oai_chat.h"
#include "server/api/oai_common.h"
#include "server/api/oai_tools.h"

/* ==============================================================================================
 * The input, as chat messages
 * ============================================================================================== */

struct resp_seen {
    const cJSON *input;
    const cJSON *instructions;
};

/* An item's content: a string, or parts {"type": "input_text" | "output_text" | "text", "text"},
 * joined. Returns a new string item, or NULL with the reason in err. */
static cJSON *content_of(const cJSON *ct, int i, char *err, size_t errlen)
{
    if (cJSON_IsString(ct)) return cJSON_CreateString(ct->valuestring);
    struct api_buf b = {0};
    const cJSON *part;
    if (!cJSON_IsArray(ct)) goto bad;
    cJSON_ArrayForEach(part, ct)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || !cJSON_IsString(text) ||
            (strcmp(type->valuestring, "input_text") && strcmp(type->valuestring, "output_text") &&
             strcmp(type->valuestring, "text"))) {
            api_buf_free(&b);
            goto bad;
        }
        api_buf_puts(&b, text->valuestring);
    }
    cJSON *s = b.oom ? NULL : cJSON_CreateString(b.p ? b.p : "");
    api_buf_free(&b);
    if (!s) snprintf(err, errlen, "out of memory");
    return s;
bad:
    snprintf(err, errlen, "input[%d].content must be a string or an array of input_text parts", i);
    return NULL;
}

static bool add_message(cJSON *msgs, const char *role, cJSON *content)
{
    cJSON *m = cJSON_CreateObject();
    if (!m || !content || !cJSON_AddStringToObject(m, "role", role)) {
        cJSON_Delete(m);
        cJSON_Delete(content);
        return false;
    }
    cJSON_AddItemToObject(m, "content", content);
    cJSON_AddItemToArray(msgs, m);
    return true;
}

/* One item of an input array: {"role", "content"} or {"type": "message", "role", "content"}. */
static int add_item(cJSON *msgs, const cJSON *item, int i, char *err, size_t errlen)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "type");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(item, "role");
    if (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "message"))) {
        snprintf(err, errlen, "input[%d]: items of type '%s' are not supported by attnd", i,
                 cJSON_IsString(type) ? type->valuestring : "?");
        return 400;
    }
    if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant") &&
                                  strcmp(role->valuestring, "system") && strcmp(role->valuestring, "developer"))) {
        snprintf(err, errlen, "input[%d].role must be user, assistant, system or developer", i);
        return 400;
    }
    cJSON *ct = content_of(cJSON_GetObjectItemCaseSensitive(item, "content"), i, err, errlen);
    if (!ct) return 400;
    const char *r = !strcmp(role->valuestring, "developer") ? "system" : role->valuestring;
    if (!add_message(msgs, r, ct)) return snprintf(err, errlen, "out of memory"), 503;
    return 0;
}

/* instructions + input as chat messages into *out (a new array). Returns 0 or an HTTP status. */
static int input_messages(const struct resp_seen *s, cJSON **out, char *err, size_t errlen)
{
    cJSON *msgs = *out = cJSON_CreateArray();
    if (!msgs) return snprintf(err, errlen, "out of memory"), 503;
    if (s->instructions && !add_message(msgs, "system", cJSON_CreateString(s->instructions->valuestring)))
        return snprintf(err, errlen, "out of memory"), 503;
    if (cJSON_IsString(s->input)) {
        if (!add_message(msgs, "user", cJSON_CreateString(s->input->valuestring)))
            return snprintf(err, errlen, "out of memory"), 503;
        return 0;
    }
    if (!cJSON_IsArray(s->input) || !cJSON_GetArraySize(s->input)) {
        snprintf(err, errlen, "'input' must be a string or a non-empty array of messages");
        return 400;
    }
    const cJSON *item;
    int i = 0;
    cJSON_ArrayForEach(item, s->input)
    {
        int code = add_item(msgs, item, i++, err, errlen);
        if (code) return code;
    }
    return 0;
}

/* ==============================================================================================
 * Fields
 * ============================================================================================== */

static int read_input(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    ((struct resp_seen *)x->route)->input = it;
    return 0;
}

static int read_instructions(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    if (!cJSON_IsString(it)) return snprintf(err, errlen, "'instructions' must be a string"), 400;
    ((struct resp_seen *)x->route)->instructions = it;
    return 0;
}

/* text: {"format": {"type": "text" | "json_object" | "json_schema", ...}} */
static int read_text(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(it, "format");
    if (!cJSON_IsObject(it) || (fmt && !cJSON_IsObject(fmt)))
        return snprintf(err, errlen, "'text' must be {\"format\": {\"type\": ...}}"), 400;
    return fmt ? oai_response_format(fmt, x->dst, err, errlen) : 0;
}

static int read_refused(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    if (cJSON_IsArray(it) && !cJSON_GetArraySize(it)) return 0;
    if (!strcmp(it->string, "tool_choice") && cJSON_IsString(it) && !strcmp(it->valuestring, "none")) return 0;
    snprintf(err, errlen, "'%s' is not supported by attnd on /v1/responses", it->string);
    return 400;
}

#define JP(f) offsetof(struct job_params, f)
#define IGNORED(name) {name, FIELD_IGNORED, 0, 0, 0, FIELD_NO_GIVEN, NULL}
#define REFUSED(name) {name, FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_refused}

static const struct api_field resp_fields[] = {
    {"input", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_input},
    {"instructions", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_instructions},
    {"max_output_tokens", FIELD_INT, JP(req.max_tokens), 1, FIELD_HI_MAX_TOKENS, JP(max_given), NULL},
    {"text", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_text},
    IGNORED("store"), IGNORED("metadata"), IGNORED("service_tier"), IGNORED("parallel_tool_calls"),
    IGNORED("truncation"), IGNORED("reasoning"), IGNORED("include"), IGNORED("prompt_cache_key"),
    IGNORED("safety_identifier"),
    REFUSED("tools"), REFUSED("tool_choice"), REFUSED("previous_response_id"), REFUSED("conversation"),
    REFUSED("background"), REFUSED("prompt"),
    FIELD_END,
};

static const struct api_field *const resp_tables[] = {resp_fields, oai_common_fields, api_sampling_fields, NULL};

static int parse_responses(struct api_conn *c, const struct api_engine *e, const cJSON *root, struct job_params *p,
                           const char **param, char *err, size_t errlen)
{
    struct resp_seen seen = {0};
    struct api_field_ctx x = {.c = c, .e = e, .root = root, .dst = p, .route = &seen, .null_ok = true};
    int code = api_fields_read(resp_tables, &x, param, err, errlen);
    if (code) return code;
    *param = "input";
    if (!seen.input) return snprintf(err, errlen, "'input' is required"), 400;
    cJSON *msgs = NULL;
    code = input_messages(&seen, &msgs, err, errlen);
    if (!code) code = oai_chat_prompt(c, e, msgs, p, err, errlen);
    cJSON_Delete(msgs);
    return code;
}

/* ==============================================================================================
 * The answer: a response object, or its events
 * ============================================================================================== */

static const char *status_of(const struct job_choice *ch) { return strcmp(ch->finish, "length") ? "completed" : "incomplete"; }

/* {"type":"output_text","text":...,"annotations":[]} */
static void put_part(struct api_buf *b, const struct job_choice *ch, bool done)
{
    api_buf_puts(b, "{\"type\":\"output_text\",\"text\":");
    if (done) api_buf_json_str(b, ch->text.p ? ch->text.p : "", ch->text.len);
    else api_buf_puts(b, "\"\"");
    api_buf_puts(b, ",\"annotations\":[]}");
}

static void put_item(struct api_buf *b, const struct api_job *j, bool done)
{
    char id[64];
    job_id_str(j, id, sizeof id);
    const struct job_choice *ch = &j->ch[0];
    api_buf_printf(b, "{\"type\":\"message\",\"id\":\"msg-%s\",\"status\":\"%s\",\"role\":\"assistant\",\"content\":[", id,
                   done ? status_of(ch) : "in_progress");
    if (done) put_part(b, ch, true);
    api_buf_puts(b, "]}");
}

/* The response object; done: with its output and usage. */
static void put_response(struct api_buf *b, const struct api_job *j, bool done)
{
    char id[64];
    job_id_str(j, id, sizeof id);
    const struct job_choice *ch = &j->ch[0];
    const char *status = done ? status_of(ch) : "in_progress";
    api_buf_printf(b, "{\"id\":\"%s\",\"object\":\"response\",\"created_at\":%lld,\"status\":\"%s\",\"model\":", id,
                   j->created, status);
    api_buf_json_str(b, j->model, strlen(j->model));
    api_buf_puts(b, ",\"output\":[");
    if (done) put_item(b, j, true);
    api_buf_puts(b, "],\"error\":null,\"incomplete_details\":");
    api_buf_puts(b, done && !strcmp(status, "incomplete") ? "{\"reason\":\"max_output_tokens\"}" : "null");
    api_buf_puts(b, ",\"parallel_tool_calls\":true,\"tool_choice\":\"auto\",\"tools\":[],"
                    "\"text\":{\"format\":{\"type\":\"text\"}},\"usage\":");
    if (!done) api_buf_puts(b, "null}");
    else api_buf_printf(b,
                        "{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":%d,"
                        "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":%d",
                        j->prompt_tokens, ch->completion_tokens, j->prompt_tokens + ch->completion_tokens);
    if (done && j->n_interventions) api_buf_printf(b, ",\"interventions\":%d", j->n_interventions);
    if (done) api_buf_puts(b, "}}");
}

static void whole(struct api_buf *b, const struct api_job *j)
{
    put_response(b, j, true);
    api_buf_puts(b, "\n");
}

/* Opens an event: "event: TYPE\ndata: {"type":TYPE,"sequence_number":N," */
static void event_open(struct api_job *j, const char *type)
{
    api_buf_printf(&j->sse.out, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d,", type, type,
                   j->n_events++);
    j->ch[0].started = true;
}

static void event_close(struct api_job *j) { api_buf_puts(&j->sse.out, "}\n\n"); }

static void put_item_ref(struct api_job *j)
{
    char id[64];
    job_id_str(j, id, sizeof id);
    api_buf_printf(&j->sse.out, "\"item_id\":\"msg-%s\",\"output_index\":0,\"content_index\":0,", id);
}

/* The events before the first delta: created, in_progress, the item and its part added. */
static void stream_open(struct api_job *j)
{
    static const char *const states[] = {"response.created", "response.in_progress"};
    for (int k = 0; k < 2; k++) {
        event_open(j, states[k]);
        api_buf_puts(&j->sse.out, "\"response\":");
        put_response(&j->sse.out, j, false);
        event_close(j);
    }
    event_open(j, "response.output_item.added");
    api_buf_puts(&j->sse.out, "\"output_index\":0,\"item\":");
    put_item(&j->sse.out, j, false);
    event_close(j);
    event_open(j, "response.content_part.added");
    put_item_ref(j);
    api_buf_puts(&j->sse.out, "\"part\":");
    put_part(&j->sse.out, &j->ch[0], false);
    event_close(j);
}

static void put_delta(struct api_job *j, const char *text, size_t n)
{
    if (!j->ch[0].started) stream_open(j);
    if (!n) return;
    event_open(j, "response.output_text.delta");
    put_item_ref(j);
    api_buf_puts(&j->sse.out, "\"delta\":");
    api_buf_json_str(&j->sse.out, text, n);
    event_close(j);
}

static void stream_token(struct api_job *j, struct job_choice *c, const struct sched_event *ev, size_t i)
{
    put_delta(j, ev->text, ev->text_len);
}

static void stream_choice_end(struct api_job *j, struct job_choice *c, const struct sched_event *ev)
{
    put_delta(j, ev->final_text, ev->final_text_len);
    event_open(j, "response.output_text.done");
    put_item_ref(j);
    api_buf_puts(&j->sse.out, "\"text\":");
    api_buf_json_str(&j->sse.out, c->text.p ? c->text.p : "", c->text.len);
    event_close(j);
    event_open(j, "response.content_part.done");
    put_item_ref(j);
    api_buf_puts(&j->sse.out, "\"part\":");
    put_part(&j->sse.out, c, true);
    event_close(j);
    event_open(j, "response.output_item.done");
    api_buf_puts(&j->sse.out, "\"output_index\":0,\"item\":");
    put_item(&j->sse.out, j, true);
    event_close(j);
}

static void stream_close(struct api_job *j)
{
    event_open(j, strcmp(j->ch[0].finish, "length") ? "response.completed" : "response.incomplete");
    api_buf_puts(&j->sse.out, "\"response\":");
    put_response(&j->sse.out, j, true);
    event_close(j);
}

static void stream_error(struct api_job *j)
{
    event_open(j, "error");
    api_buf_printf(&j->sse.out, "\"code\":\"%s\",\"message\":", api_error_type(j->err_code));
    api_buf_json_str(&j->sse.out, j->err_msg, strlen(j->err_msg));
    api_buf_puts(&j->sse.out, ",\"param\":null");
    event_close(j);
}

static enum MHD_Result render_error(struct api_conn *c, int code, const char *param, const char *msg)
{
    return oai_error(c, code, param, NULL, "%s", msg);
}

static const struct job_render resp_render = {
    .id_prefix = "resp", .stream_token = stream_token, .stream_choice_end = stream_choice_end,
    .stream_close = stream_close, .stream_error = stream_error, .whole = whole, .error = render_error,
};

enum MHD_Result oai_responses(struct api_conn *c) { return oai_route(c, &resp_render, parse_responses); }
