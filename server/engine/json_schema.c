/* json_schema.c - see json_schema.h: a JSON schema to GBNF text, one rule per subschema. */
#include "attnd/json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "attnd/gbnf.h"
#include "attnd/grammar.h"
#include "attnd/regex_gbnf.h"
#include "attnd/utf8.h"

/* The rules every compiled schema may use. */
static const char COMMON[] =
    "ws ::= | \" \" | \"\\n\" [ ]{0,20}\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( string \":\" ws value ( \",\" ws string \":\" ws value )* ws )? \"}\"\n"
    "array ::= \"[\" ws ( value ( \",\" ws value )* ws )? \"]\"\n"
    "string ::= \"\\\"\" jchar* \"\\\"\"\n"
    "jchar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "number ::= integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "nothing ::= [^\\x00-\\U0010FFFF]\n"
    "fmt-year ::= [0-9]{4}\n"
    "fmt-leap ::= [0-9] [0-9] ( \"0\" [48] | [2468] [048] | [13579] [26] ) | ( \"0\" [048] | [2468] [048] | [13579] [26] ) \"00\"\n"
    "fmt-date ::= fmt-year \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )"
    " | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" )"
    " | \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) ) | fmt-leap \"-02-29\"\n"
    "fmt-time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )?"
    " ( [Zz] | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "fmt-date-time ::= fmt-date [Tt] fmt-time\n"
    "fmt-uuid ::= [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}\n";

/* Keyword kinds: what a keyword constrains (or that it is an annotation). */
enum kw_kind { KW_ANNOT, KW_ID, KW_TYPE, KW_ENUM, KW_ANY, KW_REF, KW_OBJ, KW_ARR, KW_STR, KW_NUM, KW_ALL };

static const struct {
    const char *name;
    enum kw_kind kind;
} KEYWORDS[] = {
    {"$schema", KW_ANNOT}, {"$comment", KW_ANNOT}, {"title", KW_ANNOT}, {"description", KW_ANNOT},
    {"default", KW_ANNOT}, {"examples", KW_ANNOT}, {"deprecated", KW_ANNOT}, {"readOnly", KW_ANNOT},
    {"writeOnly", KW_ANNOT}, {"contentMediaType", KW_ANNOT}, {"contentEncoding", KW_ANNOT},
    {"contentSchema", KW_ANNOT}, {"$defs", KW_ANNOT}, {"definitions", KW_ANNOT}, {"$id", KW_ID},
    {"type", KW_TYPE}, {"enum", KW_ENUM}, {"const", KW_ENUM}, {"anyOf", KW_ANY}, {"oneOf", KW_ANY}, {"allOf", KW_ALL},
    {"$ref", KW_REF}, {"properties", KW_OBJ}, {"required", KW_OBJ}, {"additionalProperties", KW_OBJ},
    {"items", KW_ARR}, {"minItems", KW_ARR}, {"maxItems", KW_ARR}, {"minLength", KW_STR},
    {"maxLength", KW_STR}, {"pattern", KW_STR}, {"format", KW_STR}, {"minimum", KW_NUM},
    {"maximum", KW_NUM}, {"exclusiveMinimum", KW_NUM}, {"exclusiveMaximum", KW_NUM},
};

/* The JSON types, in the order their branches are written. */
enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_NUM = 32, T_INT = 64, T_ALL = 127 };

struct memo {
    const cJSON *node;
    unsigned id;
};

struct jc {
    const cJSON *root;
    struct rxg_buf rules; /* the rule definitions written so far */
    struct memo *memo;
    size_t n_memo, cap_memo;
    unsigned next_id;
    int depth;
    attnd_status st;
    char *err;
    size_t errlen;
    cJSON *owned; /* schemas made by merging (allOf, $ref or anyOf with siblings), freed at the end */
};

static void jc_fail(struct jc *c, attnd_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void jc_fail(struct jc *c, attnd_status st, const char *fmt, ...)
{
    if (c->st != ATTND_OK) return;
    c->st = st;
    if (!c->err || !c->errlen) return;
    int n = snprintf(c->err, c->errlen, "json schema: ");
    if (n < 0 || (size_t)n >= c->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

static int kw_kind(const char *name)
{
    for (size_t i = 0; i < sizeof KEYWORDS / sizeof KEYWORDS[0]; i++)
        if (!strcmp(KEYWORDS[i].name, name)) return (int)KEYWORDS[i].kind;
    return -1;
}

static unsigned compile(struct jc *c, const cJSON *node);

/* ---- literal values (enum, const) ---- */

/* The shortest "%.*g" spelling of d that reads back as d (as JSON writers print floats). */
static void put_number(struct rxg_buf *b, double d)
{
    char tmp[40];
    if (d == floor(d) && fabs(d) < 1e16) {
        snprintf(tmp, sizeof tmp, "%.0f", d);
    } else {
        for (int p = 1; p <= 17; p++) {
            snprintf(tmp, sizeof tmp, "%.*g", p, d);
            if (strtod(tmp, NULL) == d) break;
        }
    }
    rxg_lit(b, tmp, strlen(tmp));
}

/* A quoted JSON string literal item for the UTF-8 text s. */
static void put_string(struct jc *c, struct rxg_buf *b, const char *s)
{
    size_t n = strlen(s);
    if (!utf8_valid(s, n)) return jc_fail(c, ATTND_ERR_INVALID, "a string in the schema is not valid UTF-8");
    struct rxg_buf e = {0};
    rxg_put(&e, "\"", 1);
    rxg_json_escape(&e, s, n);
    rxg_put(&e, "\"", 1);
    if (e.oom) b->oom = true;
    else rxg_lit(b, e.p, e.n);
    free(e.p);
}

/* An item matching exactly the JSON value v (whitespace allowed between its tokens). */
static void put_value(struct jc *c, struct rxg_buf *b, const cJSON *v, int depth)
{
    if (depth > JSG_MAX_DEPTH) return jc_fail(c, ATTND_ERR_RANGE, "a const/enum value nested deeper than %d", JSG_MAX_DEPTH);
    if (cJSON_IsNull(v)) rxg_puts(b, "\"null\"");
    else if (cJSON_IsTrue(v)) rxg_puts(b, "\"true\"");
    else if (cJSON_IsFalse(v)) rxg_puts(b, "\"false\"");
    else if (cJSON_IsNumber(v)) put_number(b, v->valuedouble);
    else if (cJSON_IsString(v)) put_string(c, b, v->valuestring);
    else {
        bool obj = cJSON_IsObject(v);
        rxg_puts(b, obj ? "( \"{\" ws " : "( \"[\" ws ");
        for (const cJSON *it = v->child; it; it = it->next) {
            if (obj) {
                put_string(c, b, it->string);
                rxg_puts(b, " \":\" ws ");
            }
            put_value(c, b, it, depth + 1);
            rxg_puts(b, it->next ? " \",\" ws " : " ws ");
        }
        rxg_puts(b, obj ? "\"}\" )" : "\"]\" )");
    }
}

/* The JSON type bit of a value (integers also count as numbers: see enum_body). */
static unsigned value_type(const cJSON *v)
{
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOL;
    if (cJSON_IsObject(v)) return T_OBJ;
    if (cJSON_IsArray(v)) return T_ARR;
    if (cJSON_IsString(v)) return T_STR;
    return v->valuedouble == floor(v->valuedouble) ? T_INT | T_NUM : T_NUM;
}

/* ---- keywords and types ---- */

/* The type bits "type" allows (T_ALL when absent). */
static unsigned schema_types(struct jc *c, const cJSON *node)
{
    static const char *names[] = {"null", "boolean", "object", "array", "string", "number", "integer"};
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(node, "type");
    if (!t) return T_ALL;
    unsigned bits = 0;
    const cJSON *one = cJSON_IsArray(t) ? t->child : t;
    for (; one; one = cJSON_IsArray(t) ? one->next : NULL) {
        size_t i = 0;
        while (i < 7 && !(cJSON_IsString(one) && !strcmp(one->valuestring, names[i]))) i++;
        if (i == 7) {
            jc_fail(c, ATTND_ERR_INVALID, "\"type\" must be one of the seven JSON types or a list of them");
            return 0;
        }
        bits |= 1u << i;
    }
    if (bits & T_NUM) bits |= T_INT; /* a number may be an integer */
    return bits;
}

/* Whether a "$schema" value names one of the published drafts (whose vocabularies we follow). */
static bool known_dialect(const cJSON *v)
{
    if (!cJSON_IsString(v)) return false;
    const char *s = v->valuestring;
    if (!strncmp(s, "https://", 8)) s += 8;
    else if (!strncmp(s, "http://", 7)) s += 7;
    else return false;
    return !strncmp(s, "json-schema.org/draft", 21) && !strchr(s + 21, '?');
}

/* Checks every keyword of node; returns the set of kinds present (bit 1 << kind). */
static unsigned check_keywords(struct jc *c, const cJSON *node)
{
    unsigned kinds = 0;
    for (const cJSON *it = node->child; it; it = it->next) {
        int k = kw_kind(it->string);
        if (k < 0) {
            jc_fail(c, ATTND_ERR_UNSUPPORTED, "keyword \"%s\" is not supported", it->string);
            return 0;
        }
        if (!strcmp(it->string, "$schema") && !known_dialect(it)) {
            jc_fail(c, ATTND_ERR_UNSUPPORTED, "\"$schema\": \"%.80s\" is not a JSON Schema draft (custom meta-schemas "
                    "are not supported)", cJSON_IsString(it) ? it->valuestring : "?");
            return 0;
        }
        if (k == KW_ID && node != c->root) {
            jc_fail(c, ATTND_ERR_UNSUPPORTED, "keyword \"$id\" is supported only at the root");
            return 0;
        }
        kinds |= 1u << k;
    }
    return kinds;
}

/* The first keyword of node whose kind is in mask (for refusals), or "?" */
static const char *first_of(const cJSON *node, unsigned mask)
{
    for (const cJSON *it = node->child; it; it = it->next) {
        int k = kw_kind(it->string);
        if (k >= 0 && (mask >> k) & 1) return it->string;
    }
    return "?";
}

/* A count keyword (non-negative integer) or def when absent; -1 after a failure. */
static long count_kw(struct jc *c, const cJSON *node, const char *name, long def)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(node, name);
    if (!v) return def;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble)) {
        jc_fail(c, ATTND_ERR_INVALID, "\"%s\" must be a non-negative integer", name);
        return -1;
    }
    return v->valuedouble > 1e9 ? 1000000000L : (long)v->valuedouble;
}

/* ---- enum, const, anyOf, $ref ---- */

static void enum_body(struct jc *c, const cJSON *node, unsigned types, struct rxg_buf *b)
{
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(node, "const");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(node, "enum");
    if (cst && en) return jc_fail(c, ATTND_ERR_UNSUPPORTED, "\"enum\" together with \"const\" is not supported");
    if (en && !cJSON_IsArray(en)) return jc_fail(c, ATTND_ERR_INVALID, "\"enum\" must be an array");
    if (en && cJSON_GetArraySize(en) > JSG_MAX_ENUM)
        return jc_fail(c, ATTND_ERR_RANGE, "\"enum\" has more than %d values", JSG_MAX_ENUM);
    bool first = true;
    rxg_puts(b, "( ");
    for (const cJSON *v = cst ? cst : en->child; v; v = cst ? NULL : v->next) {
        if (!(value_type(v) & types)) continue;
        if (!first) rxg_puts(b, " | ");
        put_value(c, b, v, 0);
        first = false;
    }
    rxg_puts(b, first ? "nothing )" : " )");
}

static void any_body(struct jc *c, const cJSON *node, struct rxg_buf *b)
{
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(node, "anyOf");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(node, "oneOf");
    if (any && one) return jc_fail(c, ATTND_ERR_UNSUPPORTED, "\"anyOf\" together with \"oneOf\" is not supported");
    const cJSON *list = any ? any : one;
    if (!cJSON_IsArray(list) || !list->child)
        return jc_fail(c, ATTND_ERR_INVALID, "\"%s\" must be a non-empty array", any ? "anyOf" : "oneOf");
    rxg_puts(b, "( ");
    for (const cJSON *s = list->child; s && c->st == ATTND_OK; s = s->next) {
        unsigned id = compile(c, s);
        rxg_printf(b, "%ss%u", s == list->child ? "" : " | ", id);
    }
    rxg_puts(b, " )");
}

static int hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

/* Decodes one JSON pointer token (~0 ~1 and %XX escapes) of ref[0..n) into out (cap bytes). */
static bool pointer_token(const char *ref, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = ref[i];
        if (ch == '%') {
            int h1 = i + 2 < n ? hex_digit(ref[i + 1]) : -1, h2 = i + 2 < n ? hex_digit(ref[i + 2]) : -1;
            if (h1 < 0 || h2 < 0) return false;
            ch = (char)(h1 * 16 + h2);
            i += 2;
        } else if (ch == '~' && i + 1 < n && (ref[i + 1] == '0' || ref[i + 1] == '1')) {
            ch = ref[++i] == '0' ? '~' : '/';
        }
        if (k + 1 >= cap) return false;
        out[k++] = ch;
    }
    out[k] = 0;
    return true;
}

/* The subschema a local $ref names, or NULL after a failure. */
static const cJSON *resolve_ref(struct jc *c, const char *ref)
{
    if (ref[0] != '#') {
        jc_fail(c, ATTND_ERR_UNSUPPORTED, "\"$ref\": \"%.80s\" names another document (only \"#...\" is supported)", ref);
        return NULL;
    }
    if (ref[1] && ref[1] != '/') {
        jc_fail(c, ATTND_ERR_UNSUPPORTED, "\"$ref\": \"%.80s\" uses an anchor (only JSON pointers are supported)", ref);
        return NULL;
    }
    const cJSON *at = c->root;
    for (const char *p = ref + 1; at && *p == '/';) {
        const char *q = strchr(p + 1, '/');
        size_t n = q ? (size_t)(q - p - 1) : strlen(p + 1);
        char tok[256];
        if (!pointer_token(p + 1, n, tok, sizeof tok)) at = NULL;
        else if (cJSON_IsArray(at)) at = cJSON_GetArrayItem(at, atoi(tok));
        else at = cJSON_GetObjectItemCaseSensitive(at, tok);
        p += 1 + n;
    }
    if (!at) jc_fail(c, ATTND_ERR_INVALID, "\"$ref\": \"%.80s\" names nothing in the schema", ref);
    return at;
}

/* ---- strings ---- */

static void string_body(struct jc *c, const cJSON *node, struct rxg_buf *b)
{
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(node, "pattern");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(node, "format");
    long lo = count_kw(c, node, "minLength", 0), hi = count_kw(c, node, "maxLength", -2);
    if (lo < 0 || hi == -1) return;
    bool lengths = lo > 0 || hi >= 0;
    if ((pat || fmt) && lengths)
        return jc_fail(c, ATTND_ERR_UNSUPPORTED, "\"%s\" together with minLength/maxLength is not supported",
                       pat ? "pattern" : "format");
    if (pat && fmt) return jc_fail(c, ATTND_ERR_UNSUPPORTED, "\"pattern\" together with \"format\" is not supported");
    if (pat) {
        if (!cJSON_IsString(pat)) return jc_fail(c, ATTND_ERR_INVALID, "\"pattern\" must be a string");
        rxg_puts(b, "( \"\\\"\" ");
        char why[160];
        attnd_status st = rxg_regex(b, pat->valuestring, strlen(pat->valuestring), "jchar", why, sizeof why);
        if (st != ATTND_OK) return jc_fail(c, st, "%s", why);
        rxg_puts(b, " \"\\\"\" )");
    } else if (fmt) {
        static const char *known[] = {"date", "time", "date-time", "uuid"};
        size_t i = 0;
        while (i < 4 && !(cJSON_IsString(fmt) && !strcmp(fmt->valuestring, known[i]))) i++;
        if (i == 4)
            return jc_fail(c, ATTND_ERR_UNSUPPORTED, "\"format\": \"%.40s\" is not supported (date, time, date-time, uuid are)",
                           cJSON_IsString(fmt) ? fmt->valuestring : "?");
        rxg_printf(b, "( \"\\\"\" fmt-%s \"\\\"\" )", known[i]);
    } else if (!lengths) {
        rxg_puts(b, "string");
    } else {
        if (lo > JSG_MAX_COUNT) return jc_fail(c, ATTND_ERR_RANGE, "\"minLength\" over %d", JSG_MAX_COUNT);
        if (hi > JSG_MAX_COUNT) hi = -2;
        if (hi >= 0 && hi < lo) rxg_puts(b, "nothing");
        else if (hi >= 0) rxg_printf(b, "( \"\\\"\" jchar{%ld,%ld} \"\\\"\" )", lo, hi);
        else rxg_printf(b, "( \"\\\"\" jchar{%ld,} \"\\\"\" )", lo);
    }
}

/* ---- numbers ---- */

/* Reads one bound keyword into *v; false when absent; a failure for a non-number. */
static bool bound_kw(struct jc *c, const cJSON *node, const char *name, double *v)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(node, name);
    if (!it) return false;
    if (!cJSON_IsNumber(it)) {
        jc_fail(c, ATTND_ERR_INVALID, "\"%s\" must be a number", name);
        return false;
    }
    *v = it->valuedouble;
    return true;
}

/* The integer branch (only integers: numbers with bounds are refused in number_body). */
static void integer_body(struct jc *c, const cJSON *node, struct rxg_buf *b)
{
    double lo = -(double)RXG_MAX_INT, hi = (double)RXG_MAX_INT, v;
    bool any = false;
    if (bound_kw(c, node, "minimum", &v)) lo = fmax(lo, ceil(v)), any = true;
    if (bound_kw(c, node, "exclusiveMinimum", &v)) lo = fmax(lo, floor(v) + 1), any = true;
    if (bound_kw(c, node, "maximum", &v)) hi = fmin(hi, floor(v)), any = true;
    if (bound_kw(c, node, "exclusiveMaximum", &v)) hi = fmin(hi, ceil(v) - 1), any = true;
    if (c->st != ATTND_OK) return;
    if (!any) rxg_puts(b, "integer");
    else if (lo > hi) rxg_puts(b, "nothing");
    else rxg_int_range(b, (int64_t)lo, (int64_t)hi);
}

/* Folds one bound keyword into *bd (the tighter bound wins; at equal values the exclusive one).
 * upper: a maximum. Only whole numbers within RXG_MAX_INT can be honoured exactly. */
static void fold_bound(struct jc *c, const cJSON *node, const char *name, bool excl, bool upper, struct rxg_bound *bd)
{
    double v;
    if (!bound_kw(c, node, name, &v)) return;
    if (v != floor(v) || fabs(v) > (double)RXG_MAX_INT)
        return jc_fail(c, ATTND_ERR_UNSUPPORTED,
                       "\"%s\": %g on a number: only whole-number bounds up to 16 digits can be expressed exactly",
                       name, v);
    int64_t iv = (int64_t)v;
    bool tighter = !bd->has || (upper ? iv < bd->v : iv > bd->v) || (iv == bd->v && excl);
    if (tighter) *bd = (struct rxg_bound){true, excl, iv};
}

/* A number, with bounds when given (then written without an exponent). */
static void number_body(struct jc *c, const cJSON *node, struct rxg_buf *b)
{
    struct rxg_bound lo = {0}, hi = {0};
    fold_bound(c, node, "minimum", false, false, &lo);
    fold_bound(c, node, "exclusiveMinimum", true, false, &lo);
    fold_bound(c, node, "maximum", false, true, &hi);
    fold_bound(c, node, "exclusiveMaximum", true, true, &hi);
    if (c->st != ATTND_OK) return;
    if (!lo.has && !hi.has) rxg_puts(b, "number");
    else rxg_number_range(b, lo, hi);
}

/* ---- arrays ---- */

static void array_body(struct jc *c, const cJSON *node, struct rxg_buf *b)
{
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(node, "items");
    long lo = count_kw(c, node, "minItems", 0), hi = count_kw(c, node, "maxItems", -2);
    if (lo < 0 || hi == -1) return;
    if (lo > JSG_MAX_COUNT) return jc_fail(c, ATTND_ERR_RANGE, "\"minItems\" over %d", JSG_MAX_COUNT);
    if (hi > JSG_MAX_COUNT) hi = -2;
    if (items && cJSON_IsArray(items))
        return jc_fail(c, ATTND_ERR_UNSUPPORTED, "\"items\" as an array (draft 2019 tuples) is not supported");
    if (cJSON_IsFalse(items)) hi = 0;
    if (hi >= 0 && hi < lo) return rxg_puts(b, "nothing");
    if (hi == 0) return rxg_puts(b, "( \"[\" ws \"]\" )");
    char item[24] = "value";
    if (items && !cJSON_IsTrue(items)) snprintf(item, sizeof item, "s%u", compile(c, items));
    rxg_printf(b, "( \"[\" ws ( %s ( \",\" ws %s )", item, item);
    long rlo = lo > 0 ? lo - 1 : 0;
    if (hi < 0) rxg_printf(b, "{%ld,}", rlo);
    else rxg_printf(b, "{%ld,%ld}", rlo, hi - 1);
    rxg_printf(b, " ws )%s \"]\" )", lo == 0 ? "?" : "");
}

/* ---- objects ---- */

struct prop {
    const char *key;
    char val[24];    /* the value's rule */
    bool impossible; /* no value can satisfy it */
};

/* The value rule of a property schema s (NULL: additionalProperties absent = any value). */
static void prop_value(struct jc *c, const cJSON *s, struct prop *p)
{
    if (!s || cJSON_IsTrue(s)) snprintf(p->val, sizeof p->val, "value");
    else if (cJSON_IsFalse(s)) p->impossible = true;
    else snprintf(p->val, sizeof p->val, "s%u", compile(c, s));
}

/* One "key": value item. */
static void put_kv(struct jc *c, struct rxg_buf *b, const struct prop *p)
{
    rxg_puts(b, "( ");
    put_string(c, b, p->key);
    rxg_printf(b, " \":\" ws %s )", p->val);
}

static bool in_required(const cJSON *req, const char *key)
{
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (cJSON_IsString(r) && !strcmp(r->valuestring, key)) return true;
    return false;
}

/* Fills v with the required properties (in "properties" order, then the required keys that
 * have no schema there, valued by additionalProperties), *n_req of them, then the optional ones. */
static size_t split_props(struct jc *c, const cJSON *props, const cJSON *req, const cJSON *add, struct prop *v,
                          size_t *n_req)
{
    size_t n = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next)
        if (in_required(req, p->string)) {
            v[n] = (struct prop){.key = p->string};
            prop_value(c, p, &v[n++]);
        }
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) return jc_fail(c, ATTND_ERR_INVALID, "\"required\" must list strings"), 0;
        if (props && cJSON_GetObjectItemCaseSensitive(props, r->valuestring)) continue;
        bool dup = false;
        for (size_t i = 0; i < n; i++) dup |= !strcmp(v[i].key, r->valuestring);
        if (dup) continue;
        v[n] = (struct prop){.key = r->valuestring};
        prop_value(c, add, &v[n++]);
    }
    *n_req = n;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next)
        if (!in_required(req, p->string)) {
            v[n] = (struct prop){.key = p->string};
            prop_value(c, p, &v[n++]);
        }
    return n;
}

/* The extra-property item ("key not in properties": additional schema). */
static void put_additional(struct jc *c, struct rxg_buf *b, const cJSON *props, const char *val)
{
    size_t n = (size_t)cJSON_GetArraySize(props), i = 0;
    const char **keys = malloc((n ? n : 1) * sizeof *keys);
    size_t *lens = malloc((n ? n : 1) * sizeof *lens);
    if (!keys || !lens) {
        b->oom = true;
    } else {
        for (const cJSON *p = props ? props->child : NULL; p; p = p->next, i++) keys[i] = p->string, lens[i] = strlen(p->string);
        rxg_puts(b, "( \"\\\"\" ");
        rxg_not_strings(b, keys, lens, i, "jchar");
        rxg_printf(b, " \"\\\"\" \":\" ws %s )", val);
    }
    free(keys);
    free(lens);
}

/* Writes the rules s<self>-t<k>: the optional properties k.. (each at most once, in order), then
 * any extra properties. */
static void write_tails(struct jc *c, unsigned self, const struct prop *opt, size_t m, const char *addkv)
{
    for (size_t k = 0; k <= m; k++) {
        rxg_printf(&c->rules, "s%u-t%zu ::= ", self, k);
        if (k < m && !opt[k].impossible) {
            rxg_puts(&c->rules, "( \",\" ws ");
            put_kv(c, &c->rules, &opt[k]);
            rxg_puts(&c->rules, " )? ");
        }
        if (k < m) rxg_printf(&c->rules, "s%u-t%zu\n", self, k + 1);
        else if (addkv) rxg_printf(&c->rules, "( \",\" ws %s )*\n", addkv);
        else rxg_puts(&c->rules, "\"\"\n");
    }
}

static void object_body(struct jc *c, const cJSON *node, unsigned self, struct rxg_buf *b)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(node, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(node, "required");
    const cJSON *add = cJSON_GetObjectItemCaseSensitive(node, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return jc_fail(c, ATTND_ERR_INVALID, "\"properties\" must be an object");
    if (req && !cJSON_IsArray(req)) return jc_fail(c, ATTND_ERR_INVALID, "\"required\" must be an array");
    if (add && !cJSON_IsObject(add) && !cJSON_IsBool(add))
        return jc_fail(c, ATTND_ERR_INVALID, "\"additionalProperties\" must be a schema or a boolean");
    size_t cap = (size_t)cJSON_GetArraySize(props) + (size_t)cJSON_GetArraySize(req), n_req = 0;
    if (cJSON_GetArraySize(props) > JSG_MAX_PROPS || cJSON_GetArraySize(req) > JSG_MAX_PROPS)
        return jc_fail(c, ATTND_ERR_RANGE, "more than %d properties in one object", JSG_MAX_PROPS);
    struct prop *v = calloc(cap ? cap : 1, sizeof *v);
    struct rxg_buf addkv = {0};
    if (!v) return jc_fail(c, ATTND_ERR_NOMEM, "out of memory");
    size_t n = split_props(c, props, req, add, v, &n_req);
    struct prop extra = {0};
    prop_value(c, add, &extra);
    if (!extra.impossible) put_additional(c, &addkv, props, extra.val);
    bool impossible = false;
    for (size_t i = 0; i < n_req; i++) impossible |= v[i].impossible;
    if (c->st != ATTND_OK || impossible) {
        rxg_puts(b, "nothing");
        goto out;
    }
    write_tails(c, self, v + n_req, n - n_req, addkv.p);
    if (n_req) {
        rxg_puts(b, "( \"{\" ws ");
        for (size_t i = 0; i < n_req; i++) {
            if (i) rxg_puts(b, " \",\" ws ");
            put_kv(c, b, &v[i]);
        }
        rxg_printf(b, " s%u-t%zu ws \"}\" )", self, (size_t)0);
        goto out;
    }
    bool any = false;
    rxg_puts(b, "( \"{\" ws ( ( ");
    for (size_t k = 0; k + n_req < n; k++) {
        if (v[n_req + k].impossible) continue;
        rxg_puts(b, any ? " | " : "");
        put_kv(c, b, &v[n_req + k]);
        rxg_printf(b, " s%u-t%zu", self, k + 1);
        any = true;
    }
    if (addkv.p) rxg_printf(b, "%s%s s%u-t%zu", any ? " | " : "", addkv.p, self, n - n_req);
    if (!any && !addkv.p) rxg_puts(b, "\"\"");
    rxg_puts(b, " ) ws )? \"}\" )");
out:
    free(v);
    free(addkv.p);
}

/* ---- merging (allOf; $ref or anyOf next to other keywords) ----
 * allOf [A, B] is compiled as one schema holding the keywords of both, where that is exact:
 * keywords only one side has are taken as they are; both sides' "type" are intersected,
 * "required" joined, "properties" joined (a property in both: allOf of its two schemas),
 * "items" and "additionalProperties" (same property names on both sides) become allOf of the
 * two, bounds take the tighter one. An anyOf is distributed over the rest: X and anyOf [B, C]
 * = anyOf [X and B, X and C]. Anything else in both branches is refused by name. */

#define JSG_MAX_MERGE 32    /* $ref / allOf nesting followed while merging */
#define JSG_MAX_BRANCHES 64 /* anyOf branches after distribution */

/* A new object owned by c (freed with it), or NULL after a failure. */
static cJSON *owned_object(struct jc *c)
{
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddItemToArray(c->owned, o)) {
        cJSON_Delete(o);
        jc_fail(c, ATTND_ERR_NOMEM, "out of memory");
        return NULL;
    }
    return o;
}

/* Adds key: a reference to v (not a copy) to o. */
static void add_ref(struct jc *c, cJSON *o, const char *key, const cJSON *v)
{
    if (!cJSON_AddItemReferenceToObject(o, key, (cJSON *)v)) jc_fail(c, ATTND_ERR_NOMEM, "out of memory");
}

/* {"allOf": [x, y]} as an item of o under key (or of the array o when key is NULL). */
static void add_allof(struct jc *c, cJSON *o, const char *key, const cJSON *x, const cJSON *y)
{
    cJSON *w = cJSON_CreateObject(), *l = cJSON_AddArrayToObject(w, "allOf");
    if (!w || !l || !cJSON_AddItemReferenceToArray(l, (cJSON *)x) || !cJSON_AddItemReferenceToArray(l, (cJSON *)y) ||
        !(key ? cJSON_AddItemToObject(o, key, w) : cJSON_AddItemToArray(o, w))) {
        cJSON_Delete(w);
        jc_fail(c, ATTND_ERR_NOMEM, "out of memory");
    }
}

/* Whether every property name of a is one of b's. */
static bool names_within(const cJSON *a, const cJSON *b)
{
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(a, "properties");
    const cJSON *pb = cJSON_GetObjectItemCaseSensitive(b, "properties");
    for (const cJSON *p = pa ? pa->child : NULL; p; p = p->next)
        if (!pb || !cJSON_GetObjectItemCaseSensitive(pb, p->string)) return false;
    return true;
}

/* The type names of both sides' "type" that agree (number and integer: integer). */
static void merge_type(struct jc *c, cJSON *dst, const cJSON *x, const cJSON *y)
{
    static const char *names[] = {"null", "boolean", "object", "array", "string", "number", "integer"};
    cJSON wx = {.child = (cJSON *)x, .string = "type"}, wy = {.child = (cJSON *)y, .string = "type"};
    wx.type = wy.type = cJSON_Object;
    unsigned t = schema_types(c, &wx) & schema_types(c, &wy);
    if (t & T_NUM) t &= ~(unsigned)T_INT; /* number already admits the integers */
    cJSON *l = cJSON_AddArrayToObject(dst, "type");
    for (int i = 0; l && i < 7; i++)
        if ((t >> i) & 1) cJSON_AddItemToArray(l, cJSON_CreateString(names[i]));
    if (!l) jc_fail(c, ATTND_ERR_NOMEM, "out of memory");
}

/* Both sides hold keyword k (values x, y): their conjunction into dst. */
static void merge_keyword(struct jc *c, cJSON *dst, const char *k, const cJSON *x, const cJSON *y)
{
    if (kw_kind(k) == KW_ANNOT || kw_kind(k) == KW_ID) return add_ref(c, dst, k, x);
    if (!strcmp(k, "type")) return merge_type(c, dst, x, y);
    if (!strcmp(k, "items") || !strcmp(k, "additionalProperties")) return add_allof(c, dst, k, x, y);
    bool lower = !strcmp(k, "minimum") || !strcmp(k, "exclusiveMinimum") || !strcmp(k, "minLength") ||
                 !strcmp(k, "minItems");
    bool upper = !strcmp(k, "maximum") || !strcmp(k, "exclusiveMaximum") || !strcmp(k, "maxLength") ||
                 !strcmp(k, "maxItems");
    if ((lower || upper) && cJSON_IsNumber(x) && cJSON_IsNumber(y))
        return add_ref(c, dst, k, (x->valuedouble > y->valuedouble) == lower ? x : y);
    if ((!strcmp(k, "format") || !strcmp(k, "pattern")) && cJSON_IsString(x) && cJSON_IsString(y) &&
        !strcmp(x->valuestring, y->valuestring))
        return add_ref(c, dst, k, x);
    if (!strcmp(k, "required") && cJSON_IsArray(x) && cJSON_IsArray(y)) {
        cJSON *l = cJSON_AddArrayToObject(dst, k);
        for (const cJSON *v = x->child; l && v; v = v->next) cJSON_AddItemReferenceToArray(l, (cJSON *)v);
        for (const cJSON *v = y->child; l && v; v = v->next) cJSON_AddItemReferenceToArray(l, (cJSON *)v);
        return;
    }
    if (!strcmp(k, "properties") && cJSON_IsObject(x) && cJSON_IsObject(y)) {
        cJSON *o = cJSON_AddObjectToObject(dst, k);
        for (const cJSON *p = x->child; o && p; p = p->next) {
            const cJSON *q = cJSON_GetObjectItemCaseSensitive(y, p->string);
            if (q) add_allof(c, o, p->string, p, q);
            else add_ref(c, o, p->string, p);
        }
        for (const cJSON *q = y->child; o && q; q = q->next)
            if (!cJSON_GetObjectItemCaseSensitive(x, q->string)) add_ref(c, o, q->string, q);
        return;
    }
    jc_fail(c, ATTND_ERR_UNSUPPORTED, "allOf: \"%s\" in more than one branch is not supported", k);
}

static const cJSON *merge2(struct jc *c, const cJSON *a, const cJSON *b);

/* x and anyOf [branches]: anyOf [x and each branch]. */
static const cJSON *distribute(struct jc *c, const cJSON *x, const cJSON *any)
{
    cJSON *o = owned_object(c), *l = o ? cJSON_AddArrayToObject(o, "anyOf") : NULL;
    if (!l) return NULL;
    int n = 0;
    for (const cJSON *br = any->child; br && c->st == ATTND_OK; br = br->next) {
        if (++n > JSG_MAX_BRANCHES)
            return jc_fail(c, ATTND_ERR_RANGE, "more than %d anyOf branches after merging", JSG_MAX_BRANCHES), NULL;
        const cJSON *m = merge2(c, x, br);
        if (m && !cJSON_AddItemReferenceToArray(l, (cJSON *)m)) jc_fail(c, ATTND_ERR_NOMEM, "out of memory");
    }
    return c->st == ATTND_OK ? o : NULL;
}

/* The conjunction of two normalized schemas (no $ref, no allOf; an anyOf only alone). */
static const cJSON *merge2(struct jc *c, const cJSON *a, const cJSON *b)
{
    if (!a || !b || c->st != ATTND_OK) return NULL;
    if (cJSON_IsTrue(a) || cJSON_IsFalse(b)) return b;
    if (cJSON_IsTrue(b) || cJSON_IsFalse(a)) return a;
    const cJSON *any_a = cJSON_GetObjectItemCaseSensitive(a, "anyOf");
    const cJSON *any_b = cJSON_GetObjectItemCaseSensitive(b, "anyOf");
    if (any_a) return distribute(c, b, any_a);
    if (any_b) return distribute(c, a, any_b);
    bool add_a = cJSON_GetObjectItemCaseSensitive(a, "additionalProperties") != NULL;
    bool add_b = cJSON_GetObjectItemCaseSensitive(b, "additionalProperties") != NULL;
    if ((add_a && !names_within(b, a)) || (add_b && !names_within(a, b)))
        return jc_fail(c, ATTND_ERR_UNSUPPORTED,
                       "allOf: \"additionalProperties\" in one branch and other property names in another is not "
                       "supported"), NULL;
    cJSON *o = owned_object(c);
    for (const cJSON *k = a->child; o && k && c->st == ATTND_OK; k = k->next) {
        const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, k->string);
        if (y) merge_keyword(c, o, k->string, k, y);
        else if (kw_kind(k->string) != KW_ID) add_ref(c, o, k->string, k);
    }
    for (const cJSON *k = b->child; o && k && c->st == ATTND_OK; k = k->next)
        if (!cJSON_GetObjectItemCaseSensitive(a, k->string) && kw_kind(k->string) != KW_ID) add_ref(c, o, k->string, k);
    return c->st == ATTND_OK ? o : NULL;
}

/* node without the keywords that normalize resolves. */
static const cJSON *strip(struct jc *c, const cJSON *node)
{
    static const char *drop[] = {"$ref", "allOf", "anyOf", "oneOf", "$id"};
    cJSON *o = owned_object(c);
    for (const cJSON *k = node->child; o && k; k = k->next) {
        bool keep = true;
        for (int i = 0; i < 5; i++) keep &= strcmp(k->string, drop[i]) != 0;
        if (keep) add_ref(c, o, k->string, k);
    }
    return o;
}

/* node as one schema without $ref and allOf, and with an anyOf only on its own. */
static const cJSON *normalize(struct jc *c, const cJSON *node, int depth)
{
    if (!cJSON_IsObject(node)) return node;
    if (depth > JSG_MAX_MERGE)
        return jc_fail(c, ATTND_ERR_RANGE, "$ref/allOf nested deeper than %d while merging (a cycle?)", JSG_MAX_MERGE),
               NULL;
    check_keywords(c, node);
    if (c->st != ATTND_OK) return NULL;
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(node, "$ref");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(node, "allOf");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(node, "anyOf");
    if (!any) any = cJSON_GetObjectItemCaseSensitive(node, "oneOf");
    if (any && cJSON_GetObjectItemCaseSensitive(node, "anyOf") && cJSON_GetObjectItemCaseSensitive(node, "oneOf"))
        return jc_fail(c, ATTND_ERR_UNSUPPORTED, "\"anyOf\" together with \"oneOf\" is not supported"), NULL;
    if ((all && (!cJSON_IsArray(all) || !all->child)) || (any && (!cJSON_IsArray(any) || !any->child)))
        return jc_fail(c, ATTND_ERR_INVALID, "allOf/anyOf/oneOf must be non-empty arrays"), NULL;
    if (ref && !cJSON_IsString(ref)) return jc_fail(c, ATTND_ERR_INVALID, "\"$ref\" must be a string"), NULL;
    const cJSON *acc = strip(c, node);
    if (ref) acc = merge2(c, acc, normalize(c, resolve_ref(c, ref->valuestring), depth + 1));
    for (const cJSON *s = all ? all->child : NULL; s && acc; s = s->next) acc = merge2(c, acc, normalize(c, s, depth + 1));
    if (any && acc) {
        cJSON *o = owned_object(c), *l = o ? cJSON_AddArrayToObject(o, "anyOf") : NULL;
        for (const cJSON *s = any->child; l && s; s = s->next) {
            const cJSON *n = normalize(c, s, depth + 1);
            if (n && !cJSON_AddItemReferenceToArray(l, (cJSON *)n)) jc_fail(c, ATTND_ERR_NOMEM, "out of memory");
        }
        acc = merge2(c, acc, o);
    }
    return c->st == ATTND_OK ? acc : NULL;
}

/* ---- one subschema ---- */

/* The branches of the types node allows, each held to its keywords. */
static void typed_body(struct jc *c, const cJSON *node, unsigned self, unsigned types, struct rxg_buf *b)
{
    bool first = true;
    rxg_puts(b, "( ");
    for (unsigned t = 1; t <= T_INT && c->st == ATTND_OK; t <<= 1) {
        if (!(types & t) || (t == T_INT && (types & T_NUM))) continue;
        rxg_puts(b, first ? "" : " | ");
        first = false;
        switch (t) {
        case T_NULL: rxg_puts(b, "\"null\""); break;
        case T_BOOL: rxg_puts(b, "\"true\" | \"false\""); break;
        case T_OBJ: object_body(c, node, self, b); break;
        case T_ARR: array_body(c, node, b); break;
        case T_STR: string_body(c, node, b); break;
        case T_NUM: number_body(c, node, b); break;
        default: integer_body(c, node, b); break;
        }
    }
    rxg_puts(b, first ? "nothing )" : " )");
}

static void body_of(struct jc *c, const cJSON *node, unsigned self, struct rxg_buf *b)
{
    unsigned kinds = check_keywords(c, node);
    if (c->st != ATTND_OK) return;
    unsigned asserts = kinds & ~((1u << KW_ANNOT) | (1u << KW_ID));
    unsigned ref_any = (1u << KW_REF) | (1u << KW_ANY);
    if ((kinds & (1u << KW_ALL)) || ((kinds & ref_any) && (asserts & ~ref_any)) ||
        ((kinds & (1u << KW_REF)) && (kinds & (1u << KW_ANY)))) {
        const cJSON *flat = normalize(c, node, 0);
        if (!flat || c->st != ATTND_OK) return;
        if (cJSON_IsBool(flat)) return rxg_puts(b, cJSON_IsTrue(flat) ? "value" : "nothing");
        return body_of(c, flat, self, b);
    }
    if (kinds & (1u << KW_REF)) {
        if (asserts & ~(1u << KW_REF))
            return jc_fail(c, ATTND_ERR_UNSUPPORTED, "\"$ref\" together with \"%s\" is not supported",
                           first_of(node, asserts & ~(1u << KW_REF)));
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(node, "$ref");
        if (!cJSON_IsString(ref)) return jc_fail(c, ATTND_ERR_INVALID, "\"$ref\" must be a string");
        const cJSON *target = resolve_ref(c, ref->valuestring);
        if (target) rxg_printf(b, "s%u", compile(c, target));
        return;
    }
    if (kinds & (1u << KW_ENUM)) {
        unsigned other = asserts & ~((1u << KW_ENUM) | (1u << KW_TYPE));
        if (other)
            return jc_fail(c, ATTND_ERR_UNSUPPORTED, "\"enum\"/\"const\" together with \"%s\" is not supported",
                           first_of(node, other));
        unsigned types = schema_types(c, node);
        if (c->st == ATTND_OK) enum_body(c, node, types, b);
        return;
    }
    if (kinds & (1u << KW_ANY)) {
        if (asserts & ~(1u << KW_ANY))
            return jc_fail(c, ATTND_ERR_UNSUPPORTED, "\"anyOf\"/\"oneOf\" together with \"%s\" is not supported",
                           first_of(node, asserts & ~(1u << KW_ANY)));
        return any_body(c, node, b);
    }
    unsigned types = schema_types(c, node);
    unsigned specific = (1u << KW_OBJ) | (1u << KW_ARR) | (1u << KW_STR) | (1u << KW_NUM);
    if (c->st != ATTND_OK) return;
    if (types == T_ALL && !(asserts & specific)) rxg_puts(b, "value");
    else typed_body(c, node, self, types, b);
}

/* The id of node's rule s<id>, compiled on first use (memoized: recursion refers to the rule
 * being written). Returns 0 after a failure (the caller's text is discarded then). */
static unsigned compile(struct jc *c, const cJSON *node)
{
    for (size_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].node == node) return c->memo[i].id;
    if (c->st != ATTND_OK) return 0;
    if (c->depth >= JSG_MAX_DEPTH) {
        jc_fail(c, ATTND_ERR_RANGE, "subschemas nested deeper than %d", JSG_MAX_DEPTH);
        return 0;
    }
    if (c->n_memo == c->cap_memo) {
        size_t nc = c->cap_memo ? c->cap_memo * 2 : 32;
        struct memo *nm = realloc(c->memo, nc * sizeof *nm);
        if (!nm) {
            jc_fail(c, ATTND_ERR_NOMEM, "out of memory");
            return 0;
        }
        c->memo = nm;
        c->cap_memo = nc;
    }
    unsigned id = c->next_id++;
    c->memo[c->n_memo++] = (struct memo){node, id};
    struct rxg_buf body = {0};
    c->depth++;
    if (cJSON_IsBool(node)) rxg_puts(&body, cJSON_IsTrue(node) ? "value" : "nothing");
    else if (!cJSON_IsObject(node)) jc_fail(c, ATTND_ERR_INVALID, "a schema must be an object or a boolean");
    else body_of(c, node, id, &body);
    c->depth--;
    if (body.oom || c->rules.oom) jc_fail(c, ATTND_ERR_NOMEM, "out of memory");
    if (c->rules.n + body.n > JSG_MAX_GBNF)
        jc_fail(c, ATTND_ERR_RANGE, "the schema's grammar is larger than %zu bytes", JSG_MAX_GBNF);
    if (c->st == ATTND_OK) rxg_printf(&c->rules, "s%u ::= %s\n", id, body.p);
    free(body.p);
    return id;
}

/* ---- entry points ---- */

/* Whether the JSON text holds a \u0000 escape (cJSON's strings end at a NUL, so such a string
 * cannot be read whole). */
static bool has_nul_escape(const char *s, size_t n)
{
    for (size_t i = 0; i + 6 <= n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && !memcmp(s + i + 2, "0000", 4)) return true;
        i++; /* skip the escaped character, so "\\\\u0000" is not taken for one */
    }
    return false;
}

attnd_status jsg_to_gbnf(const char *schema, size_t len, char **gbnf, char *err, size_t errlen)
{
    *gbnf = NULL;
    struct jc c = {.err = err, .errlen = errlen};
    if (len > JSG_MAX_SCHEMA) {
        jc_fail(&c, ATTND_ERR_RANGE, "schema text over %zu bytes", JSG_MAX_SCHEMA);
        return c.st;
    }
    if (has_nul_escape(schema, len)) {
        jc_fail(&c, ATTND_ERR_UNSUPPORTED, "strings holding a NUL character (\\u0000) are not supported");
        return c.st;
    }
    cJSON *root = cJSON_ParseWithLength(schema, len);
    if (!root) {
        jc_fail(&c, ATTND_ERR_INVALID, "the schema is not valid JSON");
        return c.st;
    }
    c.root = root;
    c.owned = cJSON_CreateArray();
    unsigned id = c.owned ? compile(&c, root) : (jc_fail(&c, ATTND_ERR_NOMEM, "out of memory"), 0);
    if (c.st == ATTND_OK) {
        rxg_printf(&c.rules, "root ::= s%u\n", id);
        rxg_put(&c.rules, COMMON, sizeof COMMON - 1);
        if (c.rules.oom) jc_fail(&c, ATTND_ERR_NOMEM, "out of memory");
    }
    cJSON_Delete(c.owned);
    cJSON_Delete(root);
    free(c.memo);
    if (c.st != ATTND_OK) {
        free(c.rules.p);
        return c.st;
    }
    *gbnf = c.rules.p;
    return ATTND_OK;
}

attnd_status jsg_compile(const char *schema, size_t len, struct gram **out, char *err, size_t errlen)
{
    *out = NULL;
    char *text = NULL, why[256] = "";
    attnd_status st = jsg_to_gbnf(schema, len, &text, err, errlen);
    if (st != ATTND_OK) return st;
    st = gbnf_parse(text, strlen(text), out, why, sizeof why);
    free(text);
    if (st == ATTND_OK || !err || !errlen) return st;
    if (strstr(why, "admits no string")) snprintf(err, errlen, "json schema: no JSON value satisfies the schema");
    else if (strstr(why, "left-recursive"))
        snprintf(err, errlen, "json schema: a $ref cycle that never reaches an object or array (%s)", why);
    else snprintf(err, errlen, "json schema: %s", why);
    return st;
}

attnd_status jsg_json_object(struct gram **out, char *err, size_t errlen)
{
    static const char head[] = "root ::= object\n";
    char *text = malloc(sizeof head + sizeof COMMON);
    if (!text) return ATTND_ERR_NOMEM;
    memcpy(text, head, sizeof head - 1);
    memcpy(text + sizeof head - 1, COMMON, sizeof COMMON);
    attnd_status st = gbnf_parse(text, strlen(text), out, err, errlen);
    free(text);
    return st;
}
