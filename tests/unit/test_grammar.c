/* test_grammar.c - the GBNF parser, the grammar checks and the byte matcher (issue 34).
 * Grammars are written here after the examples llama.cpp publishes (json, arithmetic, list,
 * chess-like) and checked on strings whose membership is known by hand. */
#include <string.h>

#include "attnd/gbnf.h"
#include "attnd/gram_match.h"
#include "attnd/grammar.h"
#include "testutil.h"

/* The JSON grammar in llama.cpp's grammars/json.gbnf form (our own text of it). */
static const char *JSON_GBNF =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "            value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "\n"
    "# Optional space: by convention, applied in this grammar after literal chars when allowed\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static const char *ARITH_GBNF = "root  ::= (expr \"=\" ws term \"\\n\")+\n"
                                "expr  ::= term ([-+*/] term)*\n"
                                "term  ::= ident | num | \"(\" ws expr \")\" ws\n"
                                "ident ::= [a-z] [a-z0-9_]* ws\n"
                                "num   ::= [0-9]+ ws\n"
                                "ws    ::= [ \\t\\n]*\n";

static const char *LIST_GBNF = "root ::= item+\n"
                               "# Excludes various line break characters\n"
                               "item ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"\n";

static struct gram *parse(const char *text, char *err, size_t errlen)
{
    struct gram *g = NULL;
    attnd_status st = gbnf_parse(text, strlen(text), &g, err, errlen);
    if (st != ATTND_OK) return NULL;
    return g;
}

/* 1 if the whole of s is a sentence of g, 0 if not, -1 on a matcher failure. */
static int matches(const struct gram *g, const char *s, size_t n)
{
    struct gmatch *m = NULL;
    if (gmatch_create(g, &m) != ATTND_OK) return -1;
    bool ok = gmatch_accept_bytes(m, s, n) && gmatch_accepts_end(m);
    gmatch_destroy(m);
    return ok;
}

static void expect(const struct gram *g, const char *s, int want)
{
    int got = matches(g, s, strlen(s));
    T_CHECK(got == want, "'%s': got %d, want %d", s, got, want);
}

static void test_json(void)
{
    char err[256];
    struct gram *g = parse(JSON_GBNF, err, sizeof err);
    T_CHECK(g != NULL, "json.gbnf: %s", err);
    if (!g) return;
    expect(g, "{}", 1);
    expect(g, "{\"a\": 1}", 1);
    expect(g, "{\"a\":[1, 2.5e3, -0.5, true, null, \"x\\u00e9\\n\"], \"b\": {\"c\": {}}}", 1);
    expect(g, "{\"caf\xc3\xa9\": \"\xe2\x82\xac \xf0\x9f\x98\x80\"}", 1);
    expect(g, "{\"a\": 1,}", 0);
    expect(g, "{\"a\" 1}", 0);
    expect(g, "[1]", 0);                 /* root is an object */
    expect(g, "{\"a\": 01x}", 0);
    expect(g, "{\"a\": \"\x01\"}", 0);   /* control characters must be escaped */
    expect(g, "{\"a\": \"\xc3\"}", 0);   /* a truncated UTF-8 character */
    expect(g, "{\"a\": \"\xed\xa0\x80\"}", 0); /* a surrogate */
    expect(g, "{\"a\": \"\xc0\xaf\"}", 0);     /* an overlong form */
    expect(g, "{\"a\": \"\\q\"}", 0);
    expect(g, "{", 0);
    /* a prefix is accepted byte by byte, and rejects leave the state alone */
    struct gmatch *m = NULL;
    T_CHECK(gmatch_create(g, &m) == ATTND_OK, "create");
    if (m) {
        T_CHECK(gmatch_accept_bytes(m, "{\"k\": [tr", 9), "prefix");
        T_CHECK(!gmatch_accepts_end(m), "not complete");
        T_CHECK(!gmatch_accept_byte(m, 'x'), "x after tr");
        struct gmatch *c = NULL;
        T_CHECK(gmatch_clone(m, &c) == ATTND_OK, "clone");
        T_CHECK(gmatch_accept_bytes(m, "ue]}", 4) && gmatch_accepts_end(m), "complete");
        T_CHECK(c && gmatch_accept_bytes(c, "ue, false]}", 11) && gmatch_accepts_end(c), "clone completes alone");
        T_CHECK(c && !gmatch_accept_byte(c, '}'), "clone past the end");
        gmatch_destroy(c);
        gmatch_destroy(m);
    }
    gram_destroy(g);
}

static void test_arith_list(void)
{
    char err[256];
    struct gram *g = parse(ARITH_GBNF, err, sizeof err);
    T_CHECK(g != NULL, "arithmetic: %s", err);
    if (g) {
        expect(g, "x=1\n", 1);
        expect(g, "(a +b) *3 = 12\nz=y\n", 1);
        expect(g, "(a + b) = 1\n", 0); /* no space before a term */
        expect(g, "a = b", 0);
        expect(g, "1+=2\n", 0);
        expect(g, "Ab=1\n", 0);
        gram_destroy(g);
    }
    g = parse(LIST_GBNF, err, sizeof err);
    T_CHECK(g != NULL, "list: %s", err);
    if (g) {
        expect(g, "- milk\n- eggs\n", 1);
        expect(g, "- caf\xc3\xa9 \xe2\x80\xa8\n", 0); /* U+2028 is excluded */
        expect(g, "- \n", 0);
        expect(g, "", 0);
        gram_destroy(g);
    }
}

static void test_syntax(void)
{
    char err[256];
    struct gram *g = parse("root ::= \"a\"{2,3} [^a-c]? . x{2}\nx ::= [\\x41-\\u0042] | \"\\U0001F600\"\n", err,
                           sizeof err);
    T_CHECK(g != NULL, "repetitions: %s", err);
    if (g) {
        expect(g, "aa\xc3\xa9" "AB", 1);
        expect(g, "aaadz\xf0\x9f\x98\x80" "A", 1);
        expect(g, "aaaaZAA", 0);
        expect(g, "aabA", 0); /* [^a-c] skipped, . = b, then only one x */
        expect(g, "aabbAA", 0);
        expect(g, "aa\xe2\x82\xac" "AA", 1);
        gram_destroy(g);
    }
    g = parse("root ::= (\"x\" | \"y\")* \"!\" # comment\n\n# only a comment\n", err, sizeof err);
    T_CHECK(g != NULL, "star: %s", err);
    if (g) {
        expect(g, "xyyx!", 1);
        expect(g, "!", 1);
        expect(g, "xz!", 0);
        gram_destroy(g);
    }
}

/* Each bad grammar is refused with a message that says where and why. */
static void test_errors(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"root ::= foo\n", "line 1, column 10: undefined rule 'foo'"},
        {"root ::= \"a\"\nroot ::= \"b\"\n", "line 2, column 1: rule 'root' is defined twice"},
        {"root ::= \"abc\n", "line 1, column 14: unterminated string"},
        {"root ::= [abc\n", "unterminated character class"},
        {"root ::= (\"a\"\n", "expected ')'"},
        {"root ::= \"a\" ) \n", "line 1, column 14: unexpected ')'"},
        {"root = \"a\"\n", "line 1, column 6: expected '::='"},
        {"root ::= * \"a\"\n", "nothing before it to repeat"},
        {"root ::= \"a\"{3,2}\n", "max below min"},
        {"root ::= \"\\q\"\n", "unknown escape"},
        {"root ::= [z-a]\n", "backwards"},
        {"root ::= expr\nexpr ::= expr \"+\" num | num\nnum ::= [0-9]+\n", "rule 'expr' is left-recursive"},
        {"root ::= a\na ::= b? a \"x\" | \"y\"\nb ::= \"z\"\n", "rule 'a' is left-recursive"},
        {"root ::= \"x\" root\n", "admits no string"},
        {"root ::= [^\\x00-\\U0010FFFF]\n", "admits no string"},
        {"other ::= \"x\"\n", "no rule named 'root'"},
        {"", "no rule named 'root'"},
        {"root ::= \"a\"{10001}\n", "repetition count over"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[256] = "";
        struct gram *g = parse(cases[i].text, err, sizeof err);
        T_CHECK(g == NULL, "case %zu accepted", i);
        T_CHECK(strstr(err, cases[i].want) != NULL, "case %zu: '%s' lacks '%s'", i, err, cases[i].want);
        gram_destroy(g);
    }
    /* dead alternatives are dropped: only "y" survives, and "x" is not even a prefix */
    char err[256];
    struct gram *g = parse("root ::= \"x\" loop | \"y\"\nloop ::= \"x\" loop\n", err, sizeof err);
    T_CHECK(g != NULL, "pruned grammar: %s", err);
    if (g) {
        struct gmatch *m = NULL;
        T_CHECK(gmatch_create(g, &m) == ATTND_OK, "create");
        T_CHECK(m && !gmatch_accept_byte(m, 'x'), "x leads nowhere");
        T_CHECK(m && gmatch_accept_byte(m, 'y') && gmatch_accepts_end(m), "y");
        gmatch_destroy(m);
        gram_destroy(g);
    }
}

/* Deep nesting and long inputs keep working after the tables are flushed. */
static void test_deep(void)
{
    char err[256];
    struct gram *g = parse(JSON_GBNF, err, sizeof err);
    if (!g) return;
    enum { DEPTH = 3000 };
    size_t n = 0;
    char *s = t_xmalloc(4 * DEPTH + 64);
    n += (size_t)sprintf(s, "{\"a\":");
    for (int i = 0; i < DEPTH; i++) s[n++] = '[';
    for (int i = 0; i < DEPTH; i++) s[n++] = ']';
    s[n++] = '}';
    T_CHECK(matches(g, s, n) == 1, "deep nesting");
    struct gmatch *m = NULL;
    T_CHECK(gmatch_create(g, &m) == ATTND_OK, "create");
    bool ok = m && gmatch_accept_bytes(m, "{\"a\":[", 6);
    for (int i = 0; ok && i < 20000; i++) {
        char num[32];
        int l = snprintf(num, sizeof num, "%d,", i * 7919);
        ok = gmatch_accept_bytes(m, num, (size_t)l);
    }
    ok = ok && gmatch_accept_bytes(m, "0]}", 3) && gmatch_accepts_end(m);
    T_CHECK(ok, "long array");
    T_CHECK(m && !gmatch_failed(m), "no failure");
    gmatch_destroy(m);
    free(s);
    gram_destroy(g);
}

int main(void)
{
    test_json();
    test_arith_list();
    test_syntax();
    test_errors();
    test_deep();
    printf("test_grammar: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
