/* chat_template.c - chat prompts through the model's own Jinja template. See chat_template.h.
 *
 * 1. Choosing: chat_tmpl_get resolves file / built-in family / the GGUF's template / ChatML and
 *    keeps every template it parsed in a small process-wide cache (a mutex around a table), so
 *    a request never parses.
 * 2. Rendering: the request's messages are normalised into the shape transformers hands a
 *    template (below), put into one cJSON context with tools, add_generation_prompt and the
 *    special token texts, and rendered by jinja.c, which also reports which output bytes came
 *    from the request ("data").
 * 3. Tokenizing: when no control / user-defined token text overlaps a data span (the usual
 *    case), the prompt is tokenized as one text with special-token parsing on, as the reference
 *    does (so the tokenizer's own rules around special tokens apply). Otherwise (a message that
 *    types a marker) only the occurrences outside the data spans become tokens, and the text
 *    between them is tokenized with special-token parsing off.
 */
#include "attnd/chat_template.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/file.h"
#include "attnd/gguf.h"
#include "attnd/log.h"
#include "attnd/tokenizer.h"
#include "attnd/toolcall.h"

#define MAX_TEMPLATE_FILE ((size_t)4 << 20)
#define CACHE_SLOTS 32

struct chat_tmpl {
    jinja_tpl *main, *tools; /* tools: the tool_use variant, or NULL */
    char *what;
    enum toolcall_format tool_format; /* the format its tool calls are rendered in (toolcall.h) */
};

/* ---- built-in templates ---------------------------------------------------------------------- */

static const char *const g_names[CHAT_FAMILY_COUNT] = {"chatml", "llama3", "mistral", "gemma", "phi3"};

/* The families' published formats. Mistral (v0.1) and Gemma refuse a system role; here it is
 * put before the first user message's text, separated by "\n\n". */
static const char *const g_builtin[CHAT_FAMILY_COUNT] = {
    /* with tools: a system turn listing them and asking for <tool_call> JSON, as Qwen2.5's does */
    [CHAT_CHATML] = "{%- if tools %}{{ '<|im_start|>system\\n' }}{%- if messages[0]['role'] == 'system' %}"
                    "{{ (messages[0]['content'] or '') + '\\n\\n' }}{%- endif %}"
                    "{{ '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
                    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
                    "{%- for t in tools %}{{ '\\n' + (t | tojson) }}{%- endfor %}"
                    "{{ '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
                    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
                    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}{%- endif %}"
                    "{%- for m in messages %}{%- if not (tools and loop.first and m['role'] == 'system') %}"
                    "{{ '<|im_start|>' + m['role'] + '\\n' + (m['content'] or '') }}"
                    "{%- for c in m['tool_calls'] or [] %}{{ '<tool_call>\\n{\"name\": \"' + c['function']['name'] + "
                    "'\", \"arguments\": ' + (c['function']['arguments'] | tojson) + '}\\n</tool_call>' }}{%- endfor %}"
                    "{{ '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
                    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}",
    [CHAT_LLAMA3] = "{{- bos_token }}{%- for m in messages %}{{- '<|start_header_id|>' + m['role'] + "
                    "'<|end_header_id|>\\n\\n' + (m['content'] or '') | trim + '<|eot_id|>' }}{%- endfor %}"
                    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}",
    [CHAT_MISTRAL] = "{{- bos_token }}{%- set ns = namespace(sys='') %}{%- for m in messages %}"
                     "{%- if m['role'] == 'system' %}{%- if not ns.sys %}{%- set ns.sys = m['content'] or '' %}{%- endif %}"
                     "{%- elif m['role'] == 'assistant' %}{{- (m['content'] or '') + eos_token }}"
                     "{%- else %}{{- '[INST] ' + ((ns.sys + '\\n\\n') if ns.sys else '') + (m['content'] or '') + ' [/INST]' }}"
                     "{%- set ns.sys = '' %}{%- endif %}{%- endfor %}",
    [CHAT_GEMMA] = "{{- bos_token }}{%- set ns = namespace(sys='') %}{%- for m in messages %}"
                   "{%- if m['role'] == 'system' %}{%- set ns.sys = (m['content'] or '') | trim %}{%- else %}"
                   "{%- set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
                   "{{- '<start_of_turn>' + role + '\\n' + ((ns.sys + '\\n\\n') if ns.sys and role == 'user' else '') + "
                   "(m['content'] or '') | trim + '<end_of_turn>\\n' }}{%- if role == 'user' %}{%- set ns.sys = '' %}"
                   "{%- endif %}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}"
                   "{%- endif %}",
    [CHAT_PHI3] = ("{%- for m in messages %}{{- '<|' + m['role'] + '|>\\n' + (m['content'] or '') + '<|end|>\\n' }}"
                   "{%- endfor %}{%- if add_generation_prompt %}{{- '<|assistant|>\\n' }}{%- else %}{{- eos_token }}{%- endif %}"),
};

const char *chat_family_name(enum chat_family f)
{
    return (unsigned)f < CHAT_FAMILY_COUNT ? g_names[f] : "?";
}

attnd_status chat_family_parse(const char *name, enum chat_family *out)
{
    for (int f = 0; f < CHAT_FAMILY_COUNT; f++)
        if (name && !strcmp(name, g_names[f])) {
            *out = (enum chat_family)f;
            return ATTND_OK;
        }
    return ATTND_ERR_INVALID;
}

/* ---- templates and the cache ------------------------------------------------------------------ */

attnd_status chat_tmpl_create(const char *src, size_t len, const char *tool_src, size_t tool_len, const char *what,
                              struct chat_tmpl **out, char *err, size_t errlen)
{
    *out = NULL;
    struct chat_tmpl *t = calloc(1, sizeof *t);
    if (!t || !(t->what = strdup(what ? what : "a chat template"))) {
        free(t);
        snprintf(err, errlen, "out of memory");
        return ATTND_ERR_NOMEM;
    }
    attnd_status st = jinja_parse(src, len, &t->main, err, errlen);
    if (!st && tool_src) st = jinja_parse(tool_src, tool_len, &t->tools, err, errlen);
    t->tool_format = tool_src ? toolcall_format_for_template(tool_src) : TOOLCALL_NONE;
    if (!t->tool_format) t->tool_format = toolcall_format_for_template(src);
    if (st) {
        chat_tmpl_destroy(t);
        return st;
    }
    *out = t;
    return ATTND_OK;
}

void chat_tmpl_destroy(struct chat_tmpl *t)
{
    if (!t) return;
    jinja_free(t->main);
    jinja_free(t->tools);
    free(t->what);
    free(t);
}

const char *chat_tmpl_describe(const struct chat_tmpl *t)
{
    return t ? t->what : "none";
}

enum toolcall_format chat_tmpl_tool_format(const struct chat_tmpl *t)
{
    return t ? t->tool_format : TOOLCALL_NONE;
}

struct slot {
    char kind; /* 'f' file path, 'b' built-in, 'g' GGUF text */
    char *key;
    size_t key_len;
    struct chat_tmpl *t;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct slot g_cache[CACHE_SLOTS];
static int g_n_cache;

/* The cached template for (kind, key), or NULL. Caller holds g_mu. */
static struct chat_tmpl *cache_find(char kind, const char *key, size_t key_len)
{
    for (int i = 0; i < g_n_cache; i++)
        if (g_cache[i].kind == kind && g_cache[i].key_len == key_len && !memcmp(g_cache[i].key, key, key_len))
            return g_cache[i].t;
    return NULL;
}

/* Keeps t under (kind, key); on failure (table full, no memory) t stays the caller's. Caller
 * holds g_mu. */
static bool cache_put(char kind, const char *key, size_t key_len, struct chat_tmpl *t)
{
    if (g_n_cache == CACHE_SLOTS) return false;
    char *k = malloc(key_len + 1);
    if (!k) return false;
    memcpy(k, key, key_len);
    k[key_len] = 0;
    g_cache[g_n_cache++] = (struct slot){kind, k, key_len, t};
    return true;
}


/* Finds or makes the template of (kind, key) from src (and tool_src). Caller holds g_mu. */
static attnd_status cached(char kind, const char *key, size_t key_len, const char *src, size_t len, const char *tool_src,
                           size_t tool_len, const char *what, const struct chat_tmpl **out, char *err, size_t errlen)
{
    struct chat_tmpl *t = cache_find(kind, key, key_len);
    if (t) {
        *out = t;
        return ATTND_OK;
    }
    attnd_status st = chat_tmpl_create(src, len, tool_src, tool_len, what, &t, err, errlen);
    if (st) return st;
    if (!cache_put(kind, key, key_len, t)) {
        chat_tmpl_destroy(t);
        snprintf(err, errlen, "too many different chat templates (at most %d)", CACHE_SLOTS);
        return ATTND_ERR_RANGE;
    }
    *out = t;
    return ATTND_OK;
}

static attnd_status get_file(const char *file, bool log_choice, const struct chat_tmpl **out, char *err, size_t errlen)
{
    struct chat_tmpl *t = cache_find('f', file, strlen(file));
    if (t) {
        *out = t;
        if (log_choice) log_info("chat template: %s", t->what);
        return ATTND_OK;
    }
    size_t len = 0;
    char *src = file_read_all(file, MAX_TEMPLATE_FILE, &len), what[512], perr[400];
    if (!src) {
        snprintf(err, errlen, "cannot read the chat template file %s", file);
        return ATTND_ERR_IO;
    }
    snprintf(what, sizeof what, "%s (--chat-template-file)", file);
    attnd_status st = cached('f', file, strlen(file), src, len, NULL, 0, what, out, perr, sizeof perr);
    free(src);
    if (st) snprintf(err, errlen, "chat template %s: %s", file, perr);
    else if (log_choice) log_info("chat template: %s", what);
    return st;
}

/* The model's template (or ChatML when it has none or it does not parse). Caller holds g_mu. */
static attnd_status get_model(const struct gguf *g, bool log_choice, const struct chat_tmpl **out, char *err,
                              size_t errlen)
{
    struct gguf_str s = {0}, tu = {0};
    if (!g || gguf_get_str(g, "tokenizer.chat_template", &s) != ATTND_OK || !s.ptr) {
        if (log_choice) log_info("chat template: the model file has none; using ChatML");
        return cached('b', "chatml", 6, g_builtin[CHAT_CHATML], strlen(g_builtin[CHAT_CHATML]), NULL, 0,
                      "ChatML (the model file has no tokenizer.chat_template)", out, err, errlen);
    }
    if (gguf_get_str(g, "tokenizer.chat_template.tool_use", &tu) != ATTND_OK) tu = (struct gguf_str){0};
    size_t n = (size_t)s.len, nt = tu.ptr ? (size_t)tu.len : 0;
    char *key = malloc(n + nt + 2), perr[400];
    if (!key) {
        snprintf(err, errlen, "out of memory");
        return ATTND_ERR_NOMEM;
    }
    memcpy(key, s.ptr, n);
    key[n] = 0;
    key[n + 1] = tu.ptr ? 1 : 0; /* so that "a" + no variant differs from "a" + an empty one */
    if (nt) memcpy(key + n + 2, tu.ptr, nt);
    attnd_status st = cached('g', key, n + nt + 2, s.ptr, n, tu.ptr, nt,
                             tu.ptr ? "the model's tokenizer.chat_template (and .tool_use)"
                                    : "the model's tokenizer.chat_template", out, perr, sizeof perr);
    free(key);
    if (st == ATTND_ERR_INVALID) {
        if (log_choice) log_warn("chat template: the model's tokenizer.chat_template does not parse (%s); using ChatML", perr);
        return cached('b', "chatml", 6, g_builtin[CHAT_CHATML], strlen(g_builtin[CHAT_CHATML]), NULL, 0,
                      "ChatML (the model's template does not parse)", out, err, errlen);
    }
    if (st) snprintf(err, errlen, "%s", perr);
    else if (log_choice) log_info("chat template: %s (%zu bytes)", (*out)->what, n);
    return st;
}

attnd_status chat_tmpl_get(const struct gguf *g, const char *file, int family, bool log_choice,
                           const struct chat_tmpl **out, char *err, size_t errlen)
{
    *out = NULL;
    pthread_mutex_lock(&g_mu);
    attnd_status st;
    if (file && *file) {
        st = get_file(file, log_choice, out, err, errlen);
    } else if (family >= 0 && family < CHAT_FAMILY_COUNT) {
        char what[64];
        snprintf(what, sizeof what, "%s (--chat-template)", g_names[family]);
        st = cached('b', g_names[family], strlen(g_names[family]), g_builtin[family], strlen(g_builtin[family]), NULL, 0,
                    what, out, err, errlen);
        if (!st && log_choice) log_info("chat template: %s", what);
    } else {
        st = get_model(g, log_choice, out, err, errlen);
    }
    pthread_mutex_unlock(&g_mu);
    return st;
}

/* ---- rendering -------------------------------------------------------------------------------- */

/* content as a template expects it: a string stays, a list of parts becomes their texts joined. */
static attnd_status norm_content(cJSON *m, int i, char *err, size_t errlen)
{
    cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsArray(c)) return ATTND_OK;
    size_t len = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, c)
    {
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (cJSON_IsString(tx)) len += strlen(tx->valuestring);
    }
    char *s = malloc(len + 1);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return ATTND_ERR_NOMEM;
    }
    len = 0;
    cJSON_ArrayForEach(p, c)
    {
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(p, "text");
        if (!cJSON_IsString(tx)) continue;
        size_t k = strlen(tx->valuestring);
        memcpy(s + len, tx->valuestring, k);
        len += k;
    }
    s[len] = 0;
    cJSON *str = cJSON_CreateString(s);
    free(s);
    if (!str || !cJSON_ReplaceItemInObjectCaseSensitive(m, "content", str)) {
        cJSON_Delete(str);
        snprintf(err, errlen, "messages[%d]: out of memory", i);
        return ATTND_ERR_NOMEM;
    }
    return ATTND_OK;
}

/* tool_calls[].function.arguments given as JSON text of an object become that object. */
static void norm_tool_calls(cJSON *m)
{
    cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *tc;
    cJSON_ArrayForEach(tc, calls)
    {
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsString(args)) continue;
        cJSON *obj = cJSON_Parse(args->valuestring);
        if (!cJSON_IsObject(obj) || !cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj)) cJSON_Delete(obj);
    }
}

/* A copy of the request's messages in the shape chat templates expect. */
static attnd_status norm_messages(const cJSON *messages, cJSON **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!cJSON_IsArray(messages)) {
        snprintf(err, errlen, "'messages' must be an array");
        return ATTND_ERR_INVALID;
    }
    cJSON *ms = cJSON_Duplicate(messages, 1), *m;
    if (!ms) {
        snprintf(err, errlen, "out of memory");
        return ATTND_ERR_NOMEM;
    }
    int i = 0;
    cJSON_ArrayForEach(m, ms)
    {
        cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            snprintf(err, errlen, "messages[%d] must be an object with a string 'role'", i);
            cJSON_Delete(ms);
            return ATTND_ERR_INVALID;
        }
        if (!strcmp(role->valuestring, "developer")) cJSON_SetValuestring(role, "system");
        attnd_status st = norm_content(m, i, err, errlen);
        if (st) {
            cJSON_Delete(ms);
            return st;
        }
        norm_tool_calls(m);
        i++;
    }
    *out = ms;
    return ATTND_OK;
}

static cJSON *make_ctx(cJSON *msgs, const cJSON *tools, const cJSON *kwargs, bool add_generation_prompt,
                       const char *bos, const char *eos)
{
    cJSON *ctx = cJSON_Duplicate(kwargs && cJSON_IsObject(kwargs) ? kwargs : NULL, 1);
    if (!ctx) ctx = cJSON_CreateObject();
    static const char *const own[] = {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"};
    for (size_t i = 0; ctx && i < sizeof own / sizeof own[0]; i++) cJSON_DeleteItemFromObjectCaseSensitive(ctx, own[i]);
    if (!ctx) {
        cJSON_Delete(msgs);
        return NULL;
    }
    cJSON_AddItemToObject(ctx, "messages", msgs);
    if (tools && !cJSON_IsNull(tools)) {
        cJSON *t = cJSON_Duplicate(tools, 1);
        if (!t) goto oom;
        cJSON_AddItemToObject(ctx, "tools", t);
    }
    if (!cJSON_AddBoolToObject(ctx, "add_generation_prompt", add_generation_prompt)) goto oom;
    if (bos && !cJSON_AddStringToObject(ctx, "bos_token", bos)) goto oom;
    if (eos && !cJSON_AddStringToObject(ctx, "eos_token", eos)) goto oom;
    return ctx;
oom:
    cJSON_Delete(ctx);
    return NULL;
}

attnd_status chat_render(const struct chat_tmpl *t, const cJSON *messages, const cJSON *tools, const cJSON *kwargs,
                         bool add_generation_prompt, const char *bos, const char *eos, struct chat_prompt *out, char *err,
                         size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!t) {
        snprintf(err, errlen, "no chat template");
        return ATTND_ERR_INVALID;
    }
    cJSON *msgs;
    attnd_status st = norm_messages(messages, &msgs, err, errlen);
    if (st) return st;
    bool has_tools = cJSON_IsArray(tools) && cJSON_GetArraySize(tools) > 0;
    cJSON *ctx = make_ctx(msgs, tools, kwargs, add_generation_prompt, bos, eos);
    if (!ctx) {
        snprintf(err, errlen, "out of memory");
        return ATTND_ERR_NOMEM;
    }
    struct jinja_output o;
    /* caps for long chats: a 128k-token context is ~0.5 MB of text, and templates copy it a few times */
    struct jinja_opts opts = {.max_output = (size_t)8 << 20, .max_memory = (size_t)256 << 20, .max_steps = 50000000};
    st = jinja_render(has_tools && t->tools ? t->tools : t->main, ctx, &opts, &o, NULL, err, errlen);
    cJSON_Delete(ctx);
    if (st) return st;
    *out = (struct chat_prompt){o.text, o.len, o.data, o.n_data};
    return ATTND_OK;
}

void chat_prompt_free(struct chat_prompt *p)
{
    if (!p) return;
    free(p->text);
    free(p->data);
    memset(p, 0, sizeof *p);
}

/* ---- tokenizing ------------------------------------------------------------------------------- */

struct special {
    int id;
    const char *p;
    size_t n;
    bool always; /* user-defined: the tokenizer finds it even with special-token parsing off */
};

/* The vocabulary's control / user-defined / unknown token texts, sorted by first byte and then
 * longest first; first[b] .. first[b + 1] is the range starting with byte b. */
struct specials {
    struct special *v;
    size_t n;
    size_t first[257];
};

static int special_cmp(const void *a, const void *b)
{
    const struct special *x = a, *y = b;
    unsigned char cx = (unsigned char)x->p[0], cy = (unsigned char)y->p[0];
    if (cx != cy) return cx < cy ? -1 : 1;
    return x->n > y->n ? -1 : x->n < y->n;
}

static attnd_status collect_specials(const struct tokenizer *tok, struct specials *s)
{
    memset(s, 0, sizeof *s);
    int nv = tok_n_vocab(tok);
    size_t k = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int id = 0; id < nv; id++) {
            enum tok_type ty = tok_token_type(tok, id);
            if (ty != TOK_TYPE_CONTROL && ty != TOK_TYPE_USER_DEFINED && ty != TOK_TYPE_UNKNOWN) continue;
            size_t len = 0;
            const char *p = tok_piece(tok, id, &len);
            if (!p || !len) continue;
            if (pass) s->v[k] = (struct special){id, p, len, ty == TOK_TYPE_USER_DEFINED};
            k++;
        }
        if (pass) break;
        if (k && !(s->v = malloc(k * sizeof *s->v))) return ATTND_ERR_NOMEM;
        s->n = k;
        k = 0;
    }
    if (s->n) qsort(s->v, s->n, sizeof *s->v, special_cmp);
    size_t j = 0;
    for (int b = 0; b <= 256; b++) {
        while (j < s->n && (unsigned char)s->v[j].p[0] < b) j++;
        s->first[b] = j;
    }
    return ATTND_OK;
}

/* The special token whose text starts p[0..avail) (longest), or -1; *len its length, *always
 * (may be NULL) whether it is user-defined. */
static int special_at(const struct specials *s, const char *p, size_t avail, size_t *len, bool *always)
{
    unsigned char b = (unsigned char)p[0];
    for (size_t i = s->first[b]; i < s->first[b + 1]; i++)
        if (s->v[i].n <= avail && !memcmp(s->v[i].p, p, s->v[i].n)) {
            *len = s->v[i].n;
            if (always) *always = s->v[i].always;
            return s->v[i].id;
        }
    return -1;
}

struct idv {
    int32_t *v;
    size_t n, cap;
};

static bool idv_put(struct idv *d, const int32_t *ids, size_t n)
{
    if (d->n + n > d->cap) {
        size_t nc = d->cap ? d->cap : 64;
        while (nc < d->n + n) nc *= 2;
        int32_t *t = realloc(d->v, nc * sizeof *t);
        if (!t) return false;
        d->v = t;
        d->cap = nc;
    }
    if (n) memcpy(d->v + d->n, ids, n * sizeof *ids);
    d->n += n;
    return true;
}

/* Appends the tokens of plain text s[0..n) (special-token parsing off). */
static attnd_status put_text_ids(const struct tokenizer *tok, struct idv *d, const char *s, size_t n)
{
    if (!n) return ATTND_OK;
    int32_t *ids = NULL;
    size_t k = 0;
    attnd_status st = tok_encode(tok, s, n, false, false, &ids, &k);
    if (st == ATTND_OK && !idv_put(d, ids, k)) st = ATTND_ERR_NOMEM;
    free(ids);
    return st;
}

static const char *piece_text(const struct tokenizer *tok, int id, char *buf, size_t cap)
{
    size_t len = 0;
    const char *p = id >= 0 ? tok_piece(tok, id, &len) : NULL;
    if (!p || len >= cap) return NULL;
    memcpy(buf, p, len);
    buf[len] = 0;
    return buf;
}

/* Whether a control token text, matched left to right as the tokenizer would, overlaps a data
 * span. (User-defined tokens are found in any text, by the reference too: they do not count.) */
static bool forged(const struct specials *sp, const struct chat_prompt *p)
{
    size_t ds = 0, len = 0;
    bool always = false;
    for (size_t i = 0; i < p->len;) {
        if (special_at(sp, p->text + i, p->len - i, &len, &always) < 0) {
            i++;
            continue;
        }
        while (ds < p->n_data && p->data[ds].off + p->data[ds].len <= i) ds++;
        if (!always && ds < p->n_data && p->data[ds].off < i + len) return true;
        i += len;
    }
    return false;
}

/* The forged case: special tokens only outside the data spans, plain text between them. */
static attnd_status encode_split(const struct tokenizer *tok, const struct specials *sp, const struct chat_prompt *p,
                                 struct idv *d)
{
    attnd_status st = ATTND_OK;
    size_t from = 0, ds = 0; /* start of the text not yet tokenized; the next data span */
    for (size_t i = 0; i < p->len && !st;) {
        while (ds < p->n_data && p->data[ds].off + p->data[ds].len <= i) ds++;
        if (ds < p->n_data && p->data[ds].off <= i) { /* inside request bytes: skip the span */
            i = p->data[ds].off + p->data[ds].len;
            continue;
        }
        size_t limit = ds < p->n_data ? p->data[ds].off : p->len, len = 0;
        int id = special_at(sp, p->text + i, limit - i, &len, NULL);
        if (id < 0) {
            i++;
            continue;
        }
        int32_t id32 = id;
        st = put_text_ids(tok, d, p->text + from, i - from);
        if (!st && !idv_put(d, &id32, 1)) st = ATTND_ERR_NOMEM;
        i += len;
        from = i;
    }
    return st ? st : put_text_ids(tok, d, p->text + from, p->len - from);
}

/* Tokenizes a rendered prompt (see the top of the file), BOS first where the tokenizer adds it. */
static attnd_status encode_prompt(const struct tokenizer *tok, const struct chat_prompt *p, struct idv *d)
{
    struct specials sp;
    attnd_status st = collect_specials(tok, &sp);
    if (!st && forged(&sp, p)) {
        st = encode_split(tok, &sp, p, d);
    } else if (!st) {
        int32_t *ids = NULL;
        size_t k = 0;
        st = tok_encode(tok, p->text, p->len, false, true, &ids, &k);
        if (!st && !idv_put(d, ids, k)) st = ATTND_ERR_NOMEM;
        free(ids);
    }
    free(sp.v);
    int32_t bos = tok_bos(tok);
    if (!st && bos >= 0 && tok_add_bos(tok) && (!d->n || d->v[0] != bos)) {
        if (!idv_put(d, &bos, 1)) return ATTND_ERR_NOMEM;
        memmove(d->v + 1, d->v, (d->n - 1) * sizeof *d->v);
        d->v[0] = bos;
    }
    return st;
}

attnd_status chat_render_vocab(const struct tokenizer *tok, const struct chat_tmpl *t, const cJSON *messages,
                               const cJSON *tools, const cJSON *kwargs, bool add_generation_prompt,
                               struct chat_prompt *out, char *err, size_t errlen)
{
    char bos_buf[128], eos_buf[128];
    const char *bos = piece_text(tok, tok_bos(tok), bos_buf, sizeof bos_buf);
    const char *eos = piece_text(tok, tok_eos(tok), eos_buf, sizeof eos_buf);
    return chat_render(t, messages, tools, kwargs, add_generation_prompt, bos, eos, out, err, errlen);
}

attnd_status chat_encode_json(const struct tokenizer *tok, const struct chat_tmpl *t, const cJSON *messages,
                              const cJSON *tools, const cJSON *kwargs, bool add_generation_prompt, int32_t **ids,
                              size_t *n_ids, char *err, size_t errlen)
{
    *ids = NULL;
    *n_ids = 0;
    struct chat_prompt p;
    attnd_status st = chat_render_vocab(tok, t, messages, tools, kwargs, add_generation_prompt, &p, err, errlen);
    if (st) return st;
    struct idv d = {0};
    st = encode_prompt(tok, &p, &d);
    chat_prompt_free(&p);
    if (st) {
        free(d.v);
        snprintf(err, errlen, "could not tokenize the chat: %s", attnd_status_str(st));
        return st;
    }
    if (!d.v && !(d.v = malloc(sizeof *d.v))) {
        snprintf(err, errlen, "out of memory");
        return ATTND_ERR_NOMEM;
    }
    *ids = d.v;
    *n_ids = d.n;
    return ATTND_OK;
}

attnd_status chat_encode(const struct tokenizer *tok, const struct chat_tmpl *t, const struct chat_msg *msgs, size_t n,
                         bool add_generation_prompt, int32_t **ids, size_t *n_ids, char *err, size_t errlen)
{
    *ids = NULL;
    *n_ids = 0;
    cJSON *arr = cJSON_CreateArray();
    bool ok = arr != NULL;
    for (size_t i = 0; i < n && ok; i++) {
        cJSON *m = cJSON_CreateObject();
        char *c = malloc(msgs[i].len + 1);
        ok = m && c && msgs[i].role;
        if (ok) {
            memcpy(c, msgs[i].content, msgs[i].len);
            c[msgs[i].len] = 0;
            ok = cJSON_AddStringToObject(m, "role", msgs[i].role) && cJSON_AddStringToObject(m, "content", c);
        }
        free(c);
        if (m && !cJSON_AddItemToArray(arr, m)) cJSON_Delete(m), ok = false;
    }
    attnd_status st = ATTND_ERR_NOMEM;
    if (ok) st = chat_encode_json(tok, t, arr, NULL, NULL, add_generation_prompt, ids, n_ids, err, errlen);
    else snprintf(err, errlen, "out of memory");
    cJSON_Delete(arr);
    return st;
}
