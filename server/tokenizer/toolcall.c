/* toolcall.c - tool calls in a model's answer. See attnd/toolcall.h. */
#include "attnd/toolcall.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define MAX_CALLS 64

static const char *const NAMES[TOOLCALL_FORMAT_COUNT] = {
    "none", "hermes", "llama3", "mistral", "mistral-args", "deepseek-r1", "deepseek-v3", "functionary",
    "command-r", "firefunction",
};

const char *toolcall_format_name(enum toolcall_format f)
{
    return (unsigned)f < TOOLCALL_FORMAT_COUNT ? NAMES[f] : "?";
}

/* DeepSeek's markers (fullwidth bars, U+2581 for the spaces) */
#define DS_CALLS_BEGIN "<\xef\xbd\x9c" "tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9c" "tool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9c" "tool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9c" "tool\xe2\x96\x81" "sep\xef\xbd\x9c>"

enum toolcall_format toolcall_format_for_template(const char *src)
{
    if (!src) return TOOLCALL_NONE;
    if (strstr(src, "<tool_call>")) return TOOLCALL_HERMES;
    if (strstr(src, "[TOOL_CALLS]")) return strstr(src, "[ARGS]") ? TOOLCALL_MISTRAL_ARGS : TOOLCALL_MISTRAL;
    if (strstr(src, DS_CALL_BEGIN))
        return strstr(src, DS_CALL_BEGIN "' + tool['type']") ? TOOLCALL_DEEPSEEK_R1 : TOOLCALL_DEEPSEEK_V3;
    if (strstr(src, "functools[")) return TOOLCALL_FIREFUNCTION;
    if (strstr(src, "<function=")) return TOOLCALL_FUNCTIONARY;
    if (strstr(src, "tool_name") && strstr(src, "Action:")) return TOOLCALL_COMMAND_R;
    if (strstr(src, "<|python_tag|>") || (strstr(src, "<|start_header_id|>") && strstr(src, "\"parameters\"")))
        return TOOLCALL_LLAMA3;
    return TOOLCALL_NONE;
}

/* ==============================================================================================
 * Text helpers: a view is [p, e)
 * ============================================================================================== */

static const char *find(const char *p, const char *e, const char *needle)
{
    size_t n = strlen(needle);
    return e - p >= (ptrdiff_t)n ? memmem(p, (size_t)(e - p), needle, n) : NULL;
}

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) p++;
    return p;
}

static const char *trim_end(const char *p, const char *e)
{
    while (e > p && (e[-1] == ' ' || e[-1] == '\n' || e[-1] == '\t' || e[-1] == '\r')) e--;
    return e;
}

static bool starts(const char *p, const char *e, const char *s)
{
    size_t n = strlen(s);
    return e - p >= (ptrdiff_t)n && !memcmp(p, s, n);
}

/* One JSON value at the start of [p, e) (white space first allowed); *end gets where it stops. */
static cJSON *json_at(const char *p, const char *e, const char **end)
{
    p = skip_ws(p, e);
    const char *stop = NULL;
    cJSON *v = p < e ? cJSON_ParseWithLengthOpts(p, (size_t)(e - p), &stop, false) : NULL;
    if (end) *end = v && stop ? stop : p;
    return v;
}

/* ==============================================================================================
 * The result
 * ============================================================================================== */

static char *dup_n(const char *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s) memcpy(s, p, n), s[n] = 0;
    return s;
}

static char *random_id(void)
{
    static const char alnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char r[24];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        for (size_t i = 0; i < sizeof r; i++) r[i] = (unsigned char)(rand() & 0xff);
    char *s = malloc(5 + sizeof r + 1);
    if (!s) return NULL;
    memcpy(s, "call_", 5);
    for (size_t i = 0; i < sizeof r; i++) s[5 + i] = alnum[r[i] % (sizeof alnum - 1)];
    s[5 + sizeof r] = 0;
    return s;
}

struct parse {
    struct toolcall_result *r;
    bool oom, bad; /* bad: a call that does not parse */
};

/* Adds a call: name[0..n), args (an object, or a string holding one; not consumed), id (may be NULL). */
static void add_call(struct parse *ps, const char *name, size_t n, const cJSON *args, const char *id)
{
    struct toolcall_result *r = ps->r;
    cJSON *parsed = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
    const cJSON *obj = parsed ? parsed : args;
    while (n && (name[n - 1] == ' ' || name[n - 1] == '\n')) n--;
    if (!n || !cJSON_IsObject(obj) || r->n_calls == MAX_CALLS) {
        ps->bad = true;
        cJSON_Delete(parsed);
        return;
    }
    struct toolcall *c = realloc(r->calls, (r->n_calls + 1) * sizeof *c);
    if (!c) {
        ps->oom = true;
        cJSON_Delete(parsed);
        return;
    }
    r->calls = c;
    c = &c[r->n_calls++];
    c->name = dup_n(name, n);
    c->arguments = cJSON_PrintUnformatted(obj);
    c->id = id && *id ? strdup(id) : random_id();
    if (!c->name || !c->arguments || !c->id) ps->oom = true;
    cJSON_Delete(parsed);
}

/* Adds {"name": N, <args_key>: {...}, "id"?: I} (args_key, else "arguments"). */
static void add_object(struct parse *ps, const cJSON *o, const char *name_key, const char *args_key)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, name_key);
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, args_key);
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    if (!cJSON_IsString(name) || !args) {
        ps->bad = true;
        return;
    }
    add_call(ps, name->valuestring, strlen(name->valuestring), args, cJSON_IsString(id) ? id->valuestring : NULL);
}

/* Adds each object of a JSON array (or a single object) v. */
static void add_all(struct parse *ps, const cJSON *v, const char *name_key, const char *args_key)
{
    if (cJSON_IsObject(v)) add_object(ps, v, name_key, args_key);
    else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0) {
        const cJSON *o;
        cJSON_ArrayForEach(o, v) add_object(ps, o, name_key, args_key);
    } else ps->bad = true;
}

/* ==============================================================================================
 * The formats: each returns where the content before the calls ends (NULL: no call found)
 * ============================================================================================== */

static const char *parse_hermes(struct parse *ps, const char *p, const char *e)
{
    const char *first = find(p, e, "<tool_call>");
    for (const char *q = first; q; q = find(q, e, "<tool_call>")) {
        q += strlen("<tool_call>");
        const char *close = find(q, e, "</tool_call>");
        cJSON *v = json_at(q, close ? close : e, NULL);
        add_all(ps, v, "name", "arguments");
        cJSON_Delete(v);
        if (!close) break;
        q = close;
    }
    return first;
}

/* N.call(k="v", k2=3): Llama 3.1's built-in tools. */
static void add_builtin(struct parse *ps, const char *p, const char *e)
{
    const char *dot = find(p, e, ".call(");
    const char *close = trim_end(p, e);
    if (!dot || close <= dot || close[-1] != ')') {
        ps->bad = true;
        return;
    }
    cJSON *args = cJSON_CreateObject();
    for (const char *q = dot + 6; args && q < close - 1;) {
        const char *eq = memchr(q, '=', (size_t)(close - 1 - q));
        if (!eq) break;
        const char *k = skip_ws(q, eq);
        const char *v_end = NULL;
        cJSON *v = json_at(eq + 1, close - 1, &v_end);
        if (!v) {
            ps->bad = true;
            break;
        }
        char *key = dup_n(k, (size_t)(trim_end(k, eq) - k));
        if (key) cJSON_AddItemToObject(args, key, v);
        else cJSON_Delete(v), ps->oom = true;
        free(key);
        q = skip_ws(v_end, close - 1);
        if (q < close - 1 && *q == ',') q++;
    }
    if (!args) ps->oom = true;
    else if (!ps->bad) add_call(ps, p, (size_t)(dot - p), args, NULL);
    cJSON_Delete(args);
}

static const char *parse_llama3(struct parse *ps, const char *p, const char *e)
{
    const char *s = skip_ws(p, e);
    if (starts(s, e, "<|python_tag|>")) {
        s = skip_ws(s + strlen("<|python_tag|>"), e);
        if (s < e && *s != '{') {
            add_builtin(ps, s, e);
            return p;
        }
    } else if (s == e || *s != '{') return NULL;
    while (s < e) {
        const char *end = NULL;
        cJSON *v = json_at(s, e, &end);
        if (!cJSON_IsObject(v) || !cJSON_GetObjectItemCaseSensitive(v, "name")) {
            cJSON_Delete(v);
            if (!ps->r->n_calls) return NULL; /* plain JSON text, not a call */
            ps->bad = true;
            break;
        }
        add_object(ps, v, "name", "parameters");
        cJSON_Delete(v);
        s = skip_ws(end, e);
        if (s < e && *s == ';') s = skip_ws(s + 1, e);
    }
    return p;
}

static const char *parse_mistral(struct parse *ps, const char *p, const char *e)
{
    const char *at = find(p, e, "[TOOL_CALLS]");
    if (!at) return NULL;
    cJSON *v = json_at(at + strlen("[TOOL_CALLS]"), e, NULL);
    add_all(ps, v, "name", "arguments");
    cJSON_Delete(v);
    return at;
}

static const char *parse_mistral_args(struct parse *ps, const char *p, const char *e)
{
    const char *first = find(p, e, "[TOOL_CALLS]");
    for (const char *q = first; q; q = find(q, e, "[TOOL_CALLS]")) {
        q += strlen("[TOOL_CALLS]");
        const char *args = find(q, e, "[ARGS]");
        if (!args) {
            ps->bad = true;
            break;
        }
        const char *end = NULL;
        cJSON *v = json_at(args + strlen("[ARGS]"), e, &end);
        add_call(ps, q, (size_t)(args - q), v, NULL);
        if (!v) ps->bad = true;
        cJSON_Delete(v);
        q = end;
    }
    return first;
}

/* DeepSeek: <call begin>[type<sep>]NAME ... <call end>; R1 wraps the arguments in ```json fences. */
static const char *parse_deepseek(struct parse *ps, const char *p, const char *e, bool r1)
{
    const char *first = find(p, e, DS_CALL_BEGIN);
    if (!first) return NULL;
    const char *content_end = find(p, first, DS_CALLS_BEGIN);
    for (const char *q = first; q; q = find(q, e, DS_CALL_BEGIN)) {
        q += strlen(DS_CALL_BEGIN);
        const char *end = find(q, e, DS_CALL_END);
        const char *stop = end ? end : e;
        const char *sep = find(q, stop, DS_SEP);
        if (!sep) {
            ps->bad = true;
            break;
        }
        const char *name = r1 ? sep + strlen(DS_SEP) : q;
        const char *name_end = r1 ? find(name, stop, "\n") : sep;
        const char *args = r1 && name_end ? find(name_end, stop, "```json") : sep + strlen(DS_SEP);
        if (!name_end || !args) {
            ps->bad = true;
            break;
        }
        if (r1) args += strlen("```json");
        cJSON *v = json_at(args, stop, NULL);
        add_call(ps, name, (size_t)(name_end - name), v, NULL);
        if (!v) ps->bad = true;
        cJSON_Delete(v);
        q = stop;
    }
    return content_end ? content_end : first;
}

static const char *parse_functionary(struct parse *ps, const char *p, const char *e)
{
    const char *first = find(p, e, "<function=");
    const char *py = find(p, e, "<|python_tag|>");
    if (py && (!first || py < first)) {
        cJSON *args = cJSON_CreateObject();
        const char *code = py + strlen("<|python_tag|>");
        char *s = dup_n(code, (size_t)(trim_end(code, e) - code));
        if (!args || !s || !cJSON_AddStringToObject(args, "code", s)) ps->oom = true;
        else add_call(ps, "python", 6, args, NULL);
        free(s);
        cJSON_Delete(args);
        return py;
    }
    for (const char *q = first; q; q = find(q, e, "<function=")) {
        q += strlen("<function=");
        const char *gt = find(q, e, ">");
        const char *close = gt ? find(gt, e, "</function>") : NULL;
        cJSON *v = gt ? json_at(gt + 1, close ? close : e, NULL) : NULL;
        if (!v) ps->bad = true;
        else add_call(ps, q, (size_t)(gt - q), v, NULL);
        cJSON_Delete(v);
        if (!close) break;
        q = close;
    }
    return first;
}

static const char *parse_command_r(struct parse *ps, const char *p, const char *e)
{
    const char *at = find(p, e, "Action:");
    const char *fence = at ? find(at, e, "```json") : NULL;
    if (!fence) return NULL;
    const char *close = find(fence + 7, e, "```");
    cJSON *v = json_at(fence + 7, close ? close : e, NULL);
    add_all(ps, v, "tool_name", "parameters");
    cJSON_Delete(v);
    return at;
}

static const char *parse_firefunction(struct parse *ps, const char *p, const char *e)
{
    const char *at = find(p, e, "functools[");
    if (!at) return NULL;
    cJSON *v = json_at(at + strlen("functools"), e, NULL);
    add_all(ps, v, "name", "arguments");
    cJSON_Delete(v);
    return at;
}

static const char *parse_format(struct parse *ps, enum toolcall_format f, const char *p, const char *e)
{
    switch (f) {
    case TOOLCALL_HERMES: return parse_hermes(ps, p, e);
    case TOOLCALL_LLAMA3: return parse_llama3(ps, p, e);
    case TOOLCALL_MISTRAL: return parse_mistral(ps, p, e);
    case TOOLCALL_MISTRAL_ARGS: return parse_mistral_args(ps, p, e);
    case TOOLCALL_DEEPSEEK_R1: return parse_deepseek(ps, p, e, true);
    case TOOLCALL_DEEPSEEK_V3: return parse_deepseek(ps, p, e, false);
    case TOOLCALL_FUNCTIONARY: return parse_functionary(ps, p, e);
    case TOOLCALL_COMMAND_R: return parse_command_r(ps, p, e);
    case TOOLCALL_FIREFUNCTION: return parse_firefunction(ps, p, e);
    default: return NULL;
    }
}

void toolcall_result_free(struct toolcall_result *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n_calls; i++) {
        free(r->calls[i].name);
        free(r->calls[i].arguments);
        free(r->calls[i].id);
    }
    free(r->calls);
    free(r->content);
    memset(r, 0, sizeof *r);
}

attnd_status toolcall_parse(enum toolcall_format f, const char *text, size_t len, struct toolcall_result *out)
{
    memset(out, 0, sizeof *out);
    struct parse ps = {.r = out};
    const char *e = text + len;
    const char *content_end = text ? parse_format(&ps, f, text, e) : NULL;
    if (ps.oom) {
        toolcall_result_free(out);
        return ATTND_ERR_NOMEM;
    }
    if (!content_end || ps.bad || !out->n_calls) { /* text, never a broken call */
        toolcall_result_free(out);
        content_end = e;
    }
    const char *s = skip_ws(text ? text : "", content_end ? content_end : e);
    const char *t = trim_end(s, content_end ? content_end : s);
    if (t > s && !(out->content = dup_n(s, (size_t)(t - s)))) {
        toolcall_result_free(out);
        return ATTND_ERR_NOMEM;
    }
    return ATTND_OK;
}
