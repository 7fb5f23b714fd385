/* test_json_schema.c - the JSON-schema compiler (issue 34): texts a schema must accept and
 * refuse, the refusals of keywords it cannot honour (by name), and the caps against schema
 * bombs. The wide check against the JSON Schema Test Suite is
 * tests/integration/test_json_schema_suite.py. */
#include <string.h>

#include "attnd/gram_match.h"
#include "attnd/grammar.h"
#include "attnd/json_schema.h"
#include "testutil.h"

static int accepts(const struct gram *g, const char *s)
{
    struct gmatch *m = NULL;
    if (gmatch_create(g, &m) != ATTND_OK) return -1;
    int ok = gmatch_accept_bytes(m, s, strlen(s)) && gmatch_accepts_end(m);
    gmatch_destroy(m);
    return ok;
}

/* Compiles schema and checks each of the texts (NULL-ended) for want. */
static void check(const char *schema, const char *const *yes, const char *const *no)
{
    char err[512] = "";
    struct gram *g = NULL;
    attnd_status st = jsg_compile(schema, strlen(schema), &g, err, sizeof err);
    T_CHECK(st == ATTND_OK, "%s: %s", schema, err);
    if (!g) return;
    for (; yes && *yes; yes++) T_CHECK(accepts(g, *yes) == 1, "%s should accept %s", schema, *yes);
    for (; no && *no; no++) T_CHECK(accepts(g, *no) == 0, "%s should refuse %s", schema, *no);
    gram_destroy(g);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_accepts(void)
{
    check("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":4},"
          "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},\"required\":[\"name\"],"
          "\"additionalProperties\":false}",
          L("{\"name\": \"Jo\"}", "{\"name\":\"Jo\",\"age\":150}", "{\"name\": \"\\u00e9\", \"age\": 0}",
            "{\n  \"name\": \"abcd\",\n  \"age\": 7\n}"),
          L("{}", "{\"name\": \"abcde\"}", "{\"name\": \"Jo\", \"age\": 151}", "{\"name\": \"Jo\", \"age\": -1}",
            "{\"name\": \"Jo\", \"x\": 1}", "{\"name\": \"Jo\", \"age\": 01}", "{\"name\":  \"Jo\"}"));
    check("{\"type\":[\"integer\",\"null\"],\"minimum\":-20,\"exclusiveMaximum\":1000}",
          L("-20", "0", "999", "null", "-7"), L("-21", "1000", "1.5", "-0", "\"1\""));
    check("{\"type\":\"array\",\"items\":{\"enum\":[\"red\",[1,{\"a\":null}],3]},\"minItems\":1,\"maxItems\":2}",
          L("[\"red\"]", "[3, [1, {\"a\": null}]]", "[[1,{\"a\":null}],\"red\"]"),
          L("[]", "[\"red\", 3, 3]", "[\"blue\"]", "[4]"));
    check("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
          "\"next\":{\"$ref\":\"#/$defs/node\"}},\"required\":[\"v\"],\"additionalProperties\":false}},"
          "\"$ref\":\"#/$defs/node\"}",
          L("{\"v\": 1}", "{\"v\": 1, \"next\": {\"v\": 2, \"next\": {\"v\": 3}}}"),
          L("{\"v\": 1, \"next\": {}}", "{\"next\": {\"v\": 1}}"));
    check("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}(x|yz)?$\"}", L("\"AB-123\"", "\"ZZ-000yz\""),
          L("\"AB-12\"", "\"ab-123\"", "\"AB-123x \""));
    check("{\"type\":\"string\",\"pattern\":\"b+\"}", L("\"b\"", "\"abba\"", "\"\\\"b\\\"\""), L("\"a\"", "\"\""));
    check("{\"type\":\"string\",\"format\":\"date-time\"}",
          L("\"2024-02-29T12:00:00Z\"", "\"1999-12-31t23:59:59.5+05:30\""),
          L("\"2023-02-29T12:00:00Z\"", "\"2024-04-31T00:00:00Z\"", "\"2024-01-01T24:00:00Z\""));
    check("{\"type\":\"string\",\"format\":\"uuid\"}", L("\"123e4567-e89b-12d3-a456-426614174000\""),
          L("\"123e4567e89b12d3a456426614174000\""));
    check("{\"anyOf\":[{\"type\":\"boolean\"},{\"const\":\"x\\ny\"}]}", L("true", "\"x\\ny\""), L("\"x\"", "null"));
    check("{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"boolean\"}}",
          L("{\"a\": 1, \"b\": true}", "{\"ab\": false}", "{\"a\": 1}", "[1]", "\"s\"", "{}"),
          L("{\"a\": true}", "{\"b\": 1}"));
    /* merging: pydantic-v1 style allOf around a $ref, type next to anyOf, $ref next to keywords */
    check("{\"definitions\":{\"Pet\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"string\"}},"
          "\"required\":[\"n\"],\"additionalProperties\":false}},\"type\":\"object\",\"properties\":{\"pet\":"
          "{\"allOf\":[{\"$ref\":\"#/definitions/Pet\"}],\"description\":\"the pet\"}},\"required\":[\"pet\"],"
          "\"additionalProperties\":false}",
          L("{\"pet\": {\"n\": \"Rex\"}}"), L("{\"pet\": {}}", "{\"pet\": {\"n\": 1}}", "{}"));
    check("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},"
          "\"additionalProperties\":false,\"anyOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}",
          L("{\"a\": 1}", "{\"b\": 2}", "{\"a\": 1, \"b\": 2}"), L("{}", "[]", "{\"a\": \"x\"}"));
    check("{\"$defs\":{\"s\":{\"type\":[\"string\",\"integer\"]}},\"$ref\":\"#/$defs/s\",\"type\":\"string\","
          "\"maxLength\":2}",
          L("\"ab\""), L("\"abc\"", "1"));
    check("{\"allOf\":[{\"type\":\"integer\",\"minimum\":2},{\"maximum\":5},{\"minimum\":3}]}",
          L("3", "5"), L("2", "6", "4.5"));
    check("{\"type\":\"object\",\"required\":[\"k\"]}", L("{\"k\": [1, {}]}", "{\"k\": 1, \"z\": 2}"), L("{\"z\": 2}"));
}

/* Each schema is refused with a message naming the cause. */
static void test_refusals(void)
{
    static const struct {
        const char *schema, *want;
        attnd_status st;
    } cases[] = {
        {"{\"type\":\"string\",\"minLength\":2,\"pattern\":\"a\"}", "\"pattern\" together with minLength", ATTND_ERR_UNSUPPORTED},
        {"{\"type\":\"object\",\"patternProperties\":{}}", "keyword \"patternProperties\" is not supported", ATTND_ERR_UNSUPPORTED},
        {"{\"not\":{}}", "keyword \"not\"", ATTND_ERR_UNSUPPORTED},
        {"{\"type\":\"number\",\"minimum\":1.5}", "\"minimum\": 1.5 on a number", ATTND_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"format\":\"email\"}", "\"format\": \"email\" is not supported", ATTND_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "escape \\1", ATTND_ERR_UNSUPPORTED},
        {"{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", "(?...)", ATTND_ERR_UNSUPPORTED},
        {"{\"$ref\":\"http://example.com/s.json\"}", "another document", ATTND_ERR_UNSUPPORTED},
        {"{\"$ref\":\"#/$defs/missing\"}", "names nothing", ATTND_ERR_INVALID},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "never reaches an object or array", ATTND_ERR_INVALID},
        {"{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"a\"]}", "no JSON value satisfies", ATTND_ERR_INVALID},
        {"{\"type\":\"strin\"}", "\"type\" must be", ATTND_ERR_INVALID},
        {"{\"type\":", "not valid JSON", ATTND_ERR_INVALID},
        {"{\"type\":\"array\",\"minItems\":5000}", "\"minItems\" over", ATTND_ERR_RANGE},
        {"false", "no JSON value satisfies", ATTND_ERR_INVALID},
        {"{\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", "allOf: \"pattern\" in more than one branch", ATTND_ERR_UNSUPPORTED},
        {"{\"allOf\":[{\"properties\":{\"a\":{}},\"additionalProperties\":false},{\"properties\":{\"b\":{}}}]}",
         "\"additionalProperties\" in one branch", ATTND_ERR_UNSUPPORTED},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\",\"type\":\"object\"}},\"$ref\":\"#/$defs/a\"}", "while merging", ATTND_ERR_RANGE},
        {"{\"type\":\"string\",\"allOf\":[{\"type\":\"integer\"}]}", "no JSON value satisfies", ATTND_ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        struct gram *g = NULL;
        attnd_status st = jsg_compile(cases[i].schema, strlen(cases[i].schema), &g, err, sizeof err);
        T_CHECK(st == cases[i].st, "case %zu: status %s", i, attnd_status_str(st));
        T_CHECK(strstr(err, cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i, err, cases[i].want);
        gram_destroy(g);
    }
}

/* Schema bombs: huge enums, deep nesting, self-referencing fan-out stay bounded. */
static void test_caps(void)
{
    char err[512];
    size_t cap = 1u << 20, n = 0;
    char *s = t_xmalloc(cap);
    n += (size_t)snprintf(s, cap, "{\"enum\":[");
    for (int i = 0; i < 100000; i++) n += (size_t)snprintf(s + n, cap - n, "%s%d", i ? "," : "", i);
    n += (size_t)snprintf(s + n, cap - n, "]}");
    struct gram *g = NULL;
    T_CHECK(jsg_compile(s, n, &g, err, sizeof err) == ATTND_ERR_RANGE && strstr(err, "more than"), "enum: %s", err);
    gram_destroy(g);
    n = 0;
    for (int i = 0; i < 200; i++) n += (size_t)snprintf(s + n, cap - n, "{\"type\":\"array\",\"items\":");
    n += (size_t)snprintf(s + n, cap - n, "true");
    for (int i = 0; i < 200; i++) s[n++] = '}';
    g = NULL;
    T_CHECK(jsg_compile(s, n, &g, err, sizeof err) == ATTND_ERR_RANGE && strstr(err, "deeper"), "depth: %s", err);
    gram_destroy(g);
    /* 30 definitions, each referring twice to the next: compiled once each (memoized), not 2^30 times */
    n = (size_t)snprintf(s, cap, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
    for (int i = 0; i < 30; i++) {
        char next[80];
        snprintf(next, sizeof next, "{\"$ref\":\"#/$defs/d%d\"}", i + 1);
        n += (size_t)snprintf(s + n, cap - n, "%s\"d%d\":{\"type\":\"array\",\"items\":{\"anyOf\":[%s,%s]}}",
                              i ? "," : "", i, next, next);
    }
    n += (size_t)snprintf(s + n, cap - n, ",\"d30\":{\"type\":\"null\"}}}");
    g = NULL;
    T_CHECK(jsg_compile(s, n, &g, err, sizeof err) == ATTND_OK, "fan-out: %s", err);
    if (g) {
        T_CHECK(gram_n_rules(g) < 2000, "fan-out: %zu rules", gram_n_rules(g));
        n = 0;
        for (int i = 0; i < 30; i++) s[n++] = '[';
        n += (size_t)snprintf(s + n, cap - n, "null");
        for (int i = 0; i < 30; i++) s[n++] = ']';
        s[n] = 0;
        T_CHECK(accepts(g, s) == 1, "fan-out: 30 nested arrays");
        gram_destroy(g);
    }
    free(s);
}

/* Number bounds against arithmetic: every bound pair in -3..3 (absent, inclusive, exclusive)
 * and numbers -12.5 .. 12.5 in several spellings; "-0" spellings are never generated. */
static void test_number_bounds(void)
{
    static const char *fracs[] = {"", ".0", ".5", ".000", ".001", ".999"};
    int bad = 0, cases = 0;
    for (int lk = 0; lk < 3; lk++)
        for (int hk = 0; hk < 3; hk++)
            for (int lo = -3; lo <= 3; lo++)
                for (int hi = -3; hi <= 3; hi++) {
                    if ((lk == 0 && lo != 0) || (hk == 0 && hi != 0) || (lk == 0 && hk == 0)) continue;
                    char schema[256], err[256];
                    int n = snprintf(schema, sizeof schema, "{\"type\":\"number\"");
                    if (lk) n += snprintf(schema + n, sizeof schema - (size_t)n, ",\"%s\":%d", lk == 1 ? "minimum" : "exclusiveMinimum", lo);
                    if (hk) n += snprintf(schema + n, sizeof schema - (size_t)n, ",\"%s\":%d", hk == 1 ? "maximum" : "exclusiveMaximum", hi);
                    snprintf(schema + n, sizeof schema - (size_t)n, "}");
                    struct gram *g = NULL;
                    if (jsg_compile(schema, strlen(schema), &g, err, sizeof err) != ATTND_OK) {
                        /* only an empty range may be refused (as admitting no value) */
                        T_CHECK(strstr(err, "no JSON value"), "%s: %s", schema, err);
                        continue;
                    }
                    for (int ip = 0; ip <= 12; ip++)
                        for (size_t f = 0; f < 6; f++)
                            for (int neg = 0; neg < 2; neg++) {
                                char text[32];
                                snprintf(text, sizeof text, "%s%d%s", neg ? "-" : "", ip, fracs[f]);
                                double v = strtod(text, NULL);
                                bool want = (!lk || (lk == 1 ? v >= lo : v > lo)) && (!hk || (hk == 1 ? v <= hi : v < hi));
                                if (v == 0 && neg) want = false;
                                cases++;
                                if ((accepts(g, text) == 1) != want && bad++ < 10)
                                    fprintf(stderr, "%s: '%s' accepted=%d want=%d\n", schema, text, !want, want);
                            }
                    gram_destroy(g);
                }
    T_CHECK(bad == 0, "number bounds: %d of %d cases wrong", bad, cases);
}

int main(void)
{
    test_number_bounds();
    test_accepts();
    test_refusals();
    test_caps();
    printf("test_json_schema: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
