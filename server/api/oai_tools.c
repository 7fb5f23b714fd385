/* oai_tools.c - tools and output formats on the OpenAI-compatible routes. See oai_tools.h. */
#include "server/api/oai_tools.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/chat_template.h"
#include "attnd/gbnf.h"
#include "attnd/grammar.h"
#include "attnd/json_schema.h"
#include "attnd/toolcall.h"
#include "server/api/buf.h"

/* ==============================================================================================
 * tools and tool_choice
 * ============================================================================================== */

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (!n || n > 64) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.'))
            return false;
    return true;
}

static const cJSON *tool_fn(const cJSON *t) { return cJSON_GetObjectItemCaseSensitive(t, "function"); }

static const char *tool_name(const cJSON *t)
{
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(tool_fn(t), "name");
    return cJSON_IsString(n) ? n->valuestring : NULL;
}

/* One tool: returns 0 or 400 naming tools[i]'s fault. */
static int check_tool(const cJSON *t, int i, char *err, size_t errlen)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type"), *fn = tool_fn(t);
    if (!cJSON_IsObject(t) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsObject(fn))
        return snprintf(err, errlen, "tools[%d] must be {\"type\": \"function\", \"function\": {...}}", i), 400;
    const char *name = tool_name(t);
    if (!name || !name_ok(name))
        return snprintf(err, errlen, "tools[%d].function.name must be 1..64 of a-z, A-Z, 0-9, _, - and .", i), 400;
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(fn, "description");
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(fn, "strict");
    if (d && !cJSON_IsString(d) && !cJSON_IsNull(d))
        return snprintf(err, errlen, "tools[%d].function.description must be a string", i), 400;
    if (ps && !cJSON_IsObject(ps) && !cJSON_IsNull(ps))
        return snprintf(err, errlen, "tools[%d].function.parameters must be a JSON schema object", i), 400;
    if (st && !cJSON_IsBool(st) && !cJSON_IsNull(st))
        return snprintf(err, errlen, "tools[%d].function.strict must be true or false", i), 400;
    return 0;
}

int oai_tools_check(const cJSON *tools, char *err, size_t errlen)
{
    int n = cJSON_IsArray(tools) ? cJSON_GetArraySize(tools) : -1;
    if (n < 1 || n > OAI_MAX_TOOLS)
        return snprintf(err, errlen, "'tools' must be an array of 1..%d tools", OAI_MAX_TOOLS), 400;
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools)
    {
        int code = check_tool(t, i, err, errlen);
        if (code) return code;
        for (const cJSON *o = tools->child; o != t; o = o->next)
            if (!strcmp(tool_name(o), tool_name(t)))
                return snprintf(err, errlen, "tools[%d]: a second tool named '%s'", i, tool_name(t)), 400;
        i++;
    }
    return 0;
}

static const cJSON *find_tool(const cJSON *tools, const char *name)
{
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) if (!strcmp(tool_name(t), name)) return t;
    return NULL;
}

int oai_tool_choice(const cJSON *tools, const cJSON *tc, struct oai_tool_use *use, char *err, size_t errlen)
{
    *use = (struct oai_tool_use){.tools = tools, .choice = tools ? OAI_TOOLS_AUTO : OAI_TOOLS_NONE};
    if (tc && cJSON_IsString(tc)) {
        const char *s = tc->valuestring;
        if (!strcmp(s, "none")) use->choice = OAI_TOOLS_NONE;
        else if (!strcmp(s, "auto")) use->choice = tools ? OAI_TOOLS_AUTO : OAI_TOOLS_NONE;
        else if (!strcmp(s, "required")) use->choice = OAI_TOOLS_REQUIRED;
        else return snprintf(err, errlen, "'tool_choice' must be none, auto, required or a named function"), 400;
    } else if (tc) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tc, "function"), "name");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name))
            return snprintf(err, errlen, "'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\"}}"), 400;
        use->choice = OAI_TOOLS_NAMED;
        if (!tools || !(use->named = find_tool(tools, name->valuestring)))
            return snprintf(err, errlen, "'tool_choice' names '%s', which is not in 'tools'", name->valuestring), 400;
    }
    if (use->choice == OAI_TOOLS_REQUIRED && !tools)
        return snprintf(err, errlen, "'tool_choice' is required but no 'tools' are given"), 400;
    use->render = tools && use->choice != OAI_TOOLS_NONE;
    return 0;
}

int oai_read_parallel_tool_calls(const struct api_field_ctx *x, const cJSON *it, char *err, size_t errlen)
{
    if (!cJSON_IsBool(it)) return snprintf(err, errlen, "'parallel_tool_calls' must be true or false"), 400;
    ((struct job_params *)x->dst)->tools_single = cJSON_IsFalse(it);
    return 0;
}

/* ==============================================================================================
 * Forcing a call: a grammar for the template's format
 * ============================================================================================== */

/* {"type":"object","properties":{"name":{"const":N},KEY:PARAMS},"required":["name",KEY],
 * "additionalProperties":false} for tool t, added to schemas. */
static bool add_call_schema(cJSON *schemas, const cJSON *t, const char *key)
{
    const cJSON *ps = cJSON_GetObjectItemCaseSensitive(tool_fn(t), "parameters");
    cJSON *o = cJSON_CreateObject(), *props = cJSON_CreateObject(), *name = cJSON_CreateObject();
    cJSON *req = cJSON_CreateArray();
    cJSON *params = cJSON_IsObject(ps) ? cJSON_Duplicate(ps, true) : cJSON_CreateObject();
    if (params && !cJSON_IsObject(ps)) cJSON_AddStringToObject(params, "type", "object");
    bool ok = o && props && name && req && params && cJSON_AddStringToObject(name, "const", tool_name(t));
    if (!ok) {
        cJSON_Delete(o), cJSON_Delete(props), cJSON_Delete(name), cJSON_Delete(req), cJSON_Delete(params);
        return false;
    }
    cJSON_AddItemToObject(props, "name", name);
    cJSON_AddItemToObject(props, key, params);
    cJSON_AddStringToObject(o, "type", "object");
    cJSON_AddItemToObject(o, "properties", props);
    cJSON_AddItemToArray(req, cJSON_CreateString("name"));
    cJSON_AddItemToArray(req, cJSON_CreateString(key));
    cJSON_AddItemToObject(o, "required", req);
    cJSON_AddBoolToObject(o, "additionalProperties", false);
    cJSON_AddItemToArray(schemas, o);
    return true;
}

/* The schema of one call object: of the named tool, or anyOf every tool's. */
static char *call_schema(const struct oai_tool_use *use, const char *key)
{
    cJSON *any = cJSON_CreateArray();
    bool ok = !!any;
    const cJSON *t;
    if (use->named) ok = ok && add_call_schema(any, use->named, key);
    else cJSON_ArrayForEach(t, use->tools) ok = ok && add_call_schema(any, t, key);
    cJSON *root = NULL;
    if (ok && cJSON_GetArraySize(any) == 1) root = cJSON_DetachItemFromArray(any, 0);
    else if (ok && (root = cJSON_CreateObject())) cJSON_AddItemToObject(root, "anyOf", any), any = NULL;
    char *s = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    cJSON_Delete(any);
    return s;
}

/* The text around one call in format f, as GBNF: before and after the call's JSON object. */
static bool call_frame(enum toolcall_format f, const char **key, const char **pre, const char **post)
{
    switch (f) {
    case TOOLCALL_HERMES: *key = "arguments", *pre = "\"<tool_call>\\n\" ", *post = " \"\\n</tool_call>\""; return true;
    case TOOLCALL_LLAMA3: *key = "parameters", *pre = "", *post = ""; return true;
    case TOOLCALL_MISTRAL: *key = "arguments", *pre = "\"[TOOL_CALLS][\" ", *post = " \"]\""; return true;
    default: return false;
    }
}

/* GBNF text: root ::= PRE tcall POST, where tcall is the call schema's grammar. */
static int forced_grammar(enum toolcall_format f, const struct oai_tool_use *use, struct gram **out, char *err,
                          size_t errlen)
{
    const char *key, *pre, *post;
    if (!call_frame(f, &key, &pre, &post))
        return snprintf(err, errlen, "a tool call cannot be forced in this model's tool-call format (%s); use "
                        "tool_choice auto", toolcall_format_name(f)), 400;
    char *schema = call_schema(use, key), *text = NULL, why[256] = "";
    if (!schema) return snprintf(err, errlen, "out of memory"), 503;
    attnd_status st = jsg_to_gbnf(schema, strlen(schema), &text, why, sizeof why);
    free(schema);
    if (st) return snprintf(err, errlen, "a tool's parameters cannot be held to: %s", why), st == ATTND_ERR_NOMEM ? 503 : 400;
    char *root = strstr(text, "root ::= "); /* the call's start rule becomes tcall */
    struct api_buf b = {0};
    api_buf_printf(&b, "root ::= %stcall%s\n", pre, post);
    if (root) {
        api_buf_put(&b, text, (size_t)(root - text));
        api_buf_puts(&b, "tcall ::= ");
        api_buf_puts(&b, root + strlen("root ::= "));
    }
    free(text);
    st = root && !b.oom ? gbnf_parse(b.p, b.len, out, why, sizeof why) : ATTND_ERR_NOMEM;
    api_buf_free(&b);
    if (st) return snprintf(err, errlen, "the forced tool call's grammar: %s", why), st == ATTND_ERR_NOMEM ? 503 : 400;
    return 0;
}

int oai_tools_apply(const struct chat_tmpl *t, const struct oai_tool_use *use, struct job_params *p, char *err,
                    size_t errlen)
{
    if (!use->render) return 0;
    enum toolcall_format f = chat_tmpl_tool_format(t);
    p->tool_format = f ? f : TOOLCALL_HERMES;
    if (use->choice != OAI_TOOLS_REQUIRED && use->choice != OAI_TOOLS_NAMED) return 0;
    if (p->grammar)
        return snprintf(err, errlen, "a forced tool_choice cannot be combined with response_format or grammar"), 400;
    if (use->choice == OAI_TOOLS_NAMED || cJSON_GetArraySize(use->tools) == 1) p->tools_single = true;
    return forced_grammar(p->tool_format, use, &p->grammar, err, errlen);
}

/* ==============================================================================================
 * response_format
 * ============================================================================================== */

static int schema_grammar(const cJSON *js, struct job_params *p, char *err, size_t errlen)
{
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(js, "name");
    if (!cJSON_IsObject(js) || (name && !cJSON_IsString(name)) || !cJSON_IsObject(schema))
        return snprintf(err, errlen, "'response_format.json_schema' must be {\"name\", \"schema\": {...}}"), 400;
    char *text = cJSON_PrintUnformatted(schema), why[256] = "";
    if (!text) return snprintf(err, errlen, "out of memory"), 503;
    attnd_status st = jsg_compile(text, strlen(text), &p->grammar, why, sizeof why);
    free(text);
    if (st == ATTND_ERR_NOMEM) return snprintf(err, errlen, "out of memory"), 503;
    if (st) return snprintf(err, errlen, "response_format.json_schema.schema: %s", why), 400;
    return 0;
}

int oai_response_format(const cJSON *it, struct job_params *p, char *err, size_t errlen)
{
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
    const char *t = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(t, "text")) return 0;
    if (p->grammar) return snprintf(err, errlen, "'response_format' cannot be combined with 'grammar'"), 400;
    if (!strcmp(t, "json_object")) {
        char why[256] = "";
        attnd_status st = jsg_json_object(&p->grammar, why, sizeof why);
        return st ? (snprintf(err, errlen, "response_format: %s", why), st == ATTND_ERR_NOMEM ? 503 : 400) : 0;
    }
    if (!strcmp(t, "json_schema")) { /* chat: {"json_schema": {"name", "schema"}}; responses: flat */
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(it, "json_schema");
        return schema_grammar(js || !cJSON_GetObjectItemCaseSensitive(it, "schema") ? js : it, p, err, errlen);
    }
    return snprintf(err, errlen, "'response_format.type' must be text, json_object or json_schema"), 400;
}
