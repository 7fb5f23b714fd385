/* oai_responses.c - POST /v1/responses (the OpenAI Responses API). See oai_responses.h. */
#include "server/api/oai_responses.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/toolcall.h"
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
    const cJSON *tools;       /* as given: [{"type": "function", "name", "parameters"...}] */
    const cJSON *tool_choice; /* as given */
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

/* A function_call item (a call the model made earlier) as an assistant message with tool_calls. */
static int add_call_item(cJSON *msgs, const cJSON *item, int i, char *err, size_t errlen)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(item, "call_id");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(item, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(item, "arguments");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsString(args))
        return snprintf(err, errlen, "input[%d]: a function_call needs call_id, name and arguments (strings)", i), 400;
    cJSON *m = cJSON_CreateObject(), *calls = cJSON_CreateArray(), *tc = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    if (!m || !calls || !tc || !fn) {
        cJSON_Delete(m), cJSON_Delete(calls), cJSON_Delete(tc), cJSON_Delete(fn);
        return snprintf(err, errlen, "out of memory"), 503;
    }
    cJSON_AddStringToObject(fn, "name", name->valuestring);
    cJSON_AddStringToObject(fn, "arguments", args->valuestring);
    cJSON_AddStringToObject(tc, "id", id->valuestring);
    cJSON_AddStringToObject(tc, "type", "function");
    cJSON_AddItemToObject(tc, "function", fn);
    cJSON_AddItemToArray(calls, tc);
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddNullToObject(m, "content");
    cJSON_AddItemToObject(m, "tool_calls", calls);
    cJSON_AddItemToArray(msgs, m);
    return 0;
}

/* A function_call_output item (a tool's answer) as a tool message. */
static int add_output_item(cJSON *msgs, const cJSON *item, int i, char *err, size_t errlen)
{
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(item, "call_id");
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(item, "output");
    if (!cJSON_IsString(id) || !cJSON_IsString(out))
        return snprintf(err, errlen, "input[%d]: a function_call_output needs call_id and output (strings)", i), 400;
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", "tool") || !cJSON_AddStringToObject(m, "tool_call_id", id->valuestring) ||
        !cJSON_AddStringToObject(m, "content", out->valuestring)) {
        cJSON_Delete(m);
        return snprintf(err, errlen, "out of memory"), 503;
    }
    cJSON_AddItemToArray(msgs, m);
    return 0;
}

/* One item of an input array: {"role", "content"}, {"type": "message", "role", "content"},
 * {"type": "function_call", ...} or {"type": "function_call_output", ...}. */
static int add_item(cJSON *msgs, const cJSON *item, int i, char *err, size_t errlen)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(item, "type");
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(item, "role");
    const char *t = cJSON_IsString(type) ? type->valuestring : type ? "?" : "message";
    if (!strcmp(t, "function_call")) return add_call_item(msgs, item, i, err, errlen);
    if (!strcmp(t, "function_call_output")) return add_output_item(msgs, item, i, err, errlen);
    if (strcmp(t, "message"))
        return snprintf(err, errlen, "input[%d]: items of type '%s' are not supported by attnd", i, t), 400;
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

static int read_tools(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    if (cJSON_IsArray(it) && !cJSON_GetArraySize(it)) return 0; /* no tools */
    if (!cJSON_IsArray(it)) return snprintf(err, errlen, "'tools' must be an array"), 400;
    ((struct resp_seen *)x->route)->tools = it;
    return 0;
}

static int read_tool_choice(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    ((struct resp_seen *)x->route)->tool_choice = it;
    return 0;
}



#define JP(f) offsetof(struct job_params, f)
#define IGNORED(name) {name, FIELD_IGNORED, 0, 0, 0, FIELD_NO_GIVEN, NULL}
#define REFUSED(name) {name, FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_refused}

static const struct api_field resp_fields[] = {
    {"input", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_input},
    {"instructions", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_instructions},
    {"max_output_tokens", FIELD_INT, JP(req.max_tokens), 1, FIELD_HI_MAX_TOKENS, JP(max_given), NULL},
    {"text", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_text},
    {"tools", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_tools},
    {"tool_choice", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, read_tool_choice},
    {"parallel_tool_calls", FIELD_CUSTOM, 0, 0, 0, FIELD_NO_GIVEN, oai_read_parallel_tool_calls},
    IGNORED("store"), IGNORED("metadata"), IGNORED("service_tier"),
    IGNORED("truncation"), IGNORED("reasoning"), IGNORED("include"), IGNORED("prompt_cache_key"),
    IGNORED("safety_identifier"),
    REFUSED("previous_response_id"), REFUSED("conversation"),
    REFUSED("background"), REFUSED("prompt"),
    FIELD_END,
};

static const struct api_field *const resp_tables[] = {resp_fields, oai_common_fields, api_sampling_fields, NULL};

/* The Responses API's flat tools [{"type": "function", "name", "description", "parameters",
 * "strict"}] in the chat API's shape [{"type": "function", "function": {...}}]; *out NULL when
 * there are none. Returns 0 or an HTTP status. */
static int chat_tools(const cJSON *tools, cJSON **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!tools) return 0;
    cJSON *arr = *out = cJSON_CreateArray();
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, tools)
    {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return snprintf(err, errlen, "tools[%d]: only {\"type\": \"function\", \"name\", ...} tools are supported", i), 400;
        cJSON *w = cJSON_CreateObject(), *fn = cJSON_Duplicate(t, true);
        if (!arr || !w || !fn) {
            cJSON_Delete(w), cJSON_Delete(fn);
            return snprintf(err, errlen, "out of memory"), 503;
        }
        cJSON_DeleteItemFromObjectCaseSensitive(fn, "type");
        cJSON_AddStringToObject(w, "type", "function");
        cJSON_AddItemToObject(w, "function", fn);
        cJSON_AddItemToArray(arr, w);
        i++;
    }
    return oai_tools_check(arr, err, errlen);
}

/* tool_choice {"type": "function", "name"} in the chat API's shape (strings are the same). */
static cJSON *chat_tool_choice(const cJSON *tc)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
    if (!cJSON_IsObject(tc) || !cJSON_IsString(name)) return cJSON_Duplicate(tc, true);
    cJSON *o = cJSON_CreateObject(), *fn = cJSON_CreateObject();
    if (!o || !fn || !cJSON_AddStringToObject(fn, "name", name->valuestring)) {
        cJSON_Delete(o), cJSON_Delete(fn);
        return NULL;
    }
    cJSON_AddStringToObject(o, "type", "function");
    cJSON_AddItemToObject(o, "function", fn);
    return o;
}

static int parse_responses(struct api_conn *c, const struct api_engine *e, const cJSON *root, struct job_params *p,
                           const char **param, char *err, size_t errlen)
{
    struct resp_seen seen = {0};
    struct api_field_ctx x = {.c = c, .e = e, .root = root, .dst = p, .route = &seen, .null_ok = true};
    int code = api_fields_read(resp_tables, &x, param, err, errlen);
    if (code) return code;
    *param = "tools";
    cJSON *msgs = NULL, *tools = NULL, *choice = seen.tool_choice ? chat_tool_choice(seen.tool_choice) : NULL;
    struct oai_tool_use use;
    code = chat_tools(seen.tools, &tools, err, errlen);
    if (!code && seen.tool_choice && !choice) code = 503, snprintf(err, errlen, "out of memory");
    if (!code) *param = "tool_choice", code = oai_tool_choice(tools, choice, &use, err, errlen);
    if (!code) *param = "input", code = seen.input ? 0 : (snprintf(err, errlen, "'input' is required"), 400);
    if (!code) code = input_messages(&seen, &msgs, err, errlen);
    if (!code) code = oai_chat_prompt(c, e, msgs, use.render ? tools : NULL, p, err, errlen);
    if (!code) *param = "tool_choice", code = oai_tools_apply(oai_chat_template(c->srv, e), &use, p, err, errlen);
    cJSON_Delete(msgs);
    cJSON_Delete(tools);
    cJSON_Delete(choice);
    return code;
}

/* ==============================================================================================
 * The answer: a response object, or its events
 * ============================================================================================== */

static const char *status_of(const struct job_choice *ch) { return strcmp(ch->finish, "length") ? "completed" : "incomplete"; }

/* What the answer holds: its text (for the message item) and, with tools, the calls. */
struct resp_out {
    struct toolcall_result r;
    const char *text;
    size_t len;
    bool message; /* a message item: text, or no call */
};

static void out_of(const struct api_job *j, struct resp_out *o)
{
    const struct job_choice *ch = &j->ch[0];
    memset(o, 0, sizeof *o);
    o->text = ch->text.p ? ch->text.p : "";
    o->len = ch->text.len;
    if (j->tool_format && toolcall_parse(j->tool_format, o->text, o->len, &o->r) == ATTND_OK) {
        o->text = o->r.content ? o->r.content : "";
        o->len = strlen(o->text);
        for (; j->tools_single && o->r.n_calls > 1; o->r.n_calls--) { /* parallel_tool_calls false: the first */
            struct toolcall *t = &o->r.calls[o->r.n_calls - 1];
            free(t->name), free(t->arguments), free(t->id);
        }
    }
    o->message = o->len || !o->r.n_calls;
}

/* {"type":"output_text","text":...,"annotations":[]} */
static void put_part(struct api_buf *b, const char *text, size_t len)
{
    api_buf_puts(b, "{\"type\":\"output_text\",\"text\":");
    api_buf_json_str(b, text, len);
    api_buf_puts(b, ",\"annotations\":[]}");
}

/* The message item; done: with its text (text[0..len)). */
static void put_message_item(struct api_buf *b, const struct api_job *j, const char *text, size_t len, bool done)
{
    char id[64];
    job_id_str(j, id, sizeof id);
    api_buf_printf(b, "{\"type\":\"message\",\"id\":\"msg-%s\",\"status\":\"%s\",\"role\":\"assistant\",\"content\":[",
                   id, done ? status_of(&j->ch[0]) : "in_progress");
    if (done) put_part(b, text, len);
    api_buf_puts(b, "]}");
}

/* A function_call item; done: with its arguments. */
static void put_call_item(struct api_buf *b, const struct api_job *j, const struct toolcall *t, size_t k, bool done)
{
    char id[64];
    job_id_str(j, id, sizeof id);
    api_buf_printf(b, "{\"type\":\"function_call\",\"id\":\"fc-%s-%zu\",\"call_id\":", id, k);
    api_buf_json_str(b, t->id, strlen(t->id));
    api_buf_puts(b, ",\"name\":");
    api_buf_json_str(b, t->name, strlen(t->name));
    api_buf_puts(b, ",\"arguments\":");
    api_buf_json_str(b, done ? t->arguments : "", done ? strlen(t->arguments) : 0);
    api_buf_printf(b, ",\"status\":\"%s\"}", done ? "completed" : "in_progress");
}

static void put_output(struct api_buf *b, const struct api_job *j, const struct resp_out *o)
{
    api_buf_puts(b, "[");
    if (o->message) put_message_item(b, j, o->text, o->len, true);
    for (size_t k = 0; k < o->r.n_calls; k++) {
        if (o->message || k) api_buf_puts(b, ",");
        put_call_item(b, j, &o->r.calls[k], k, true);
    }
    api_buf_puts(b, "]");
}

/* The response object; o (NULL while it runs): its output and usage. */
static void put_response(struct api_buf *b, const struct api_job *j, const struct resp_out *o)
{
    char id[64];
    job_id_str(j, id, sizeof id);
    const struct job_choice *ch = &j->ch[0];
    const char *status = o ? status_of(ch) : "in_progress";
    api_buf_printf(b, "{\"id\":\"%s\",\"object\":\"response\",\"created_at\":%lld,\"status\":\"%s\",\"model\":", id,
                   j->created, status);
    api_buf_json_str(b, j->model, strlen(j->model));
    api_buf_puts(b, ",\"output\":");
    if (o) put_output(b, j, o);
    else api_buf_puts(b, "[]");
    api_buf_puts(b, ",\"error\":null,\"incomplete_details\":");
    api_buf_puts(b, o && !strcmp(status, "incomplete") ? "{\"reason\":\"max_output_tokens\"}" : "null");
    api_buf_printf(b, ",\"parallel_tool_calls\":%s,\"tool_choice\":\"auto\",\"tools\":[],"
                      "\"text\":{\"format\":{\"type\":\"text\"}},\"usage\":", j->tools_single ? "false" : "true");
    if (!o) {
        api_buf_puts(b, "null}");
        return;
    }
    api_buf_printf(b,
                   "{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":%d,"
                   "\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":%d",
                   j->prompt_tokens, ch->completion_tokens, j->prompt_tokens + ch->completion_tokens);
    if (j->n_interventions) api_buf_printf(b, ",\"interventions\":%d", j->n_interventions);
    api_buf_puts(b, "}}");
}

static void whole(struct api_buf *b, const struct api_job *j)
{
    struct resp_out o;
    out_of(j, &o);
    put_response(b, j, &o);
    api_buf_puts(b, "\n");
    toolcall_result_free(&o.r);
}

/* ---- events (scheduler thread, job.mu held) ---------------------------------------------------- */

/* Opens an event: "event: TYPE\ndata: {"type":TYPE,"sequence_number":N," */
static void event_open(struct api_job *j, const char *type)
{
    api_buf_printf(&j->sse.out, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d,", type, type,
                   j->n_events++);
}

static void event_close(struct api_job *j) { api_buf_puts(&j->sse.out, "}\n\n"); }

static void put_item_ref(struct api_job *j)
{
    char id[64];
    job_id_str(j, id, sizeof id);
    api_buf_printf(&j->sse.out, "\"item_id\":\"msg-%s\",\"output_index\":0,\"content_index\":0,", id);
}

/* created and in_progress */
static void stream_start(struct api_job *j)
{
    static const char *const states[] = {"response.created", "response.in_progress"};
    for (int k = 0; k < 2; k++) {
        event_open(j, states[k]);
        api_buf_puts(&j->sse.out, "\"response\":");
        put_response(&j->sse.out, j, NULL);
        event_close(j);
    }
    j->ch[0].started = true;
}

/* The message item added, with its empty text part. */
static void message_open(struct api_job *j)
{
    event_open(j, "response.output_item.added");
    api_buf_puts(&j->sse.out, "\"output_index\":0,\"item\":");
    put_message_item(&j->sse.out, j, "", 0, false);
    event_close(j);
    event_open(j, "response.content_part.added");
    put_item_ref(j);
    api_buf_puts(&j->sse.out, "\"part\":");
    put_part(&j->sse.out, "", 0);
    event_close(j);
}

static void put_delta(struct api_job *j, const char *text, size_t n)
{
    if (!n) return;
    event_open(j, "response.output_text.delta");
    put_item_ref(j);
    api_buf_puts(&j->sse.out, "\"delta\":");
    api_buf_json_str(&j->sse.out, text, n);
    event_close(j);
}

/* The message item's text done, its part done, the item done. */
static void message_close(struct api_job *j, const char *text, size_t len)
{
    event_open(j, "response.output_text.done");
    put_item_ref(j);
    api_buf_puts(&j->sse.out, "\"text\":");
    api_buf_json_str(&j->sse.out, text, len);
    event_close(j);
    event_open(j, "response.content_part.done");
    put_item_ref(j);
    api_buf_puts(&j->sse.out, "\"part\":");
    put_part(&j->sse.out, text, len);
    event_close(j);
    event_open(j, "response.output_item.done");
    api_buf_puts(&j->sse.out, "\"output_index\":0,\"item\":");
    put_message_item(&j->sse.out, j, text, len, true);
    event_close(j);
}

/* A function_call item at output index at: added, its arguments as one delta, done. */
static void call_events(struct api_job *j, const struct toolcall *t, size_t k, size_t at)
{
    char id[64];
    job_id_str(j, id, sizeof id);
    event_open(j, "response.output_item.added");
    api_buf_printf(&j->sse.out, "\"output_index\":%zu,\"item\":", at);
    put_call_item(&j->sse.out, j, t, k, false);
    event_close(j);
    static const char *const steps[] = {"response.function_call_arguments.delta", "response.function_call_arguments.done"};
    for (int s = 0; s < 2; s++) {
        event_open(j, steps[s]);
        api_buf_printf(&j->sse.out, "\"item_id\":\"fc-%s-%zu\",\"output_index\":%zu,\"%s\":", id, k, at,
                       s ? "arguments" : "delta");
        api_buf_json_str(&j->sse.out, t->arguments, strlen(t->arguments));
        event_close(j);
    }
    event_open(j, "response.output_item.done");
    api_buf_printf(&j->sse.out, "\"output_index\":%zu,\"item\":", at);
    put_call_item(&j->sse.out, j, t, k, true);
    event_close(j);
}

static void stream_token(struct api_job *j, struct job_choice *c, const struct sched_event *ev, size_t i)
{
    if (j->tool_format || !ev->text_len) return; /* with tools: held back, the calls are parsed at the end */
    if (!c->started) stream_start(j), message_open(j);
    put_delta(j, ev->text, ev->text_len);
}

static void stream_choice_end(struct api_job *j, struct job_choice *c, const struct sched_event *ev)
{
    struct resp_out o;
    bool held = j->tool_format;
    if (!c->started) stream_start(j), held = true; /* nothing streamed yet: everything goes now */
    if (!held) {
        put_delta(j, ev->final_text, ev->final_text_len);
        message_close(j, c->text.p ? c->text.p : "", c->text.len);
        return;
    }
    out_of(j, &o);
    if (o.message) {
        message_open(j);
        put_delta(j, o.text, o.len);
        message_close(j, o.text, o.len);
    }
    for (size_t k = 0; k < o.r.n_calls; k++) call_events(j, &o.r.calls[k], k, k + (o.message ? 1 : 0));
    toolcall_result_free(&o.r);
}

static void stream_close(struct api_job *j)
{
    struct resp_out o;
    out_of(j, &o);
    event_open(j, strcmp(j->ch[0].finish, "length") ? "response.completed" : "response.incomplete");
    api_buf_puts(&j->sse.out, "\"response\":");
    put_response(&j->sse.out, j, &o);
    event_close(j);
    toolcall_result_free(&o.r);
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
