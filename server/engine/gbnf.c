/* gbnf.c - see gbnf.h: a recursive-descent parser that feeds a gram_builder. */
#include "attnd/gbnf.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/grammar.h"
#include "attnd/utf8.h"

struct gp {
    const char *start, *p, *end;
    struct gram_builder *b;
    attnd_status st;      /* first failure; ATTND_OK while parsing goes well */
    char *err;
    size_t errlen;
    size_t *first_use;    /* per rule id: offset of its first reference, SIZE_MAX if none */
    size_t cap_use;
    int depth;
};

/* Records a failure at offset at (the first one wins). */
static void fail_at(struct gp *g, const char *at, attnd_status st, const char *fmt, ...)
{
    if (g->st != ATTND_OK) return;
    g->st = st;
    int line = 1, col = 1;
    for (const char *q = g->start; q < at && q < g->end; q++) {
        if (*q == '\n') line++, col = 1;
        else col++;
    }
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g->err && g->errlen) snprintf(g->err, g->errlen, "gbnf: line %d, column %d: %s", line, col, msg);
}

static void check(struct gp *g, attnd_status st)
{
    if (st != ATTND_OK) fail_at(g, g->p, st, st == ATTND_ERR_NOMEM ? "out of memory" : "grammar too large");
}

static bool is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments, and newlines too when newline_ok. */
static void skip_space(struct gp *g, bool newline_ok)
{
    while (g->p < g->end) {
        char c = *g->p;
        if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok)) {
            g->p++;
        } else if (c == '#') {
            while (g->p < g->end && *g->p != '\n') g->p++;
        } else {
            break;
        }
    }
}

static int hex_val(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Reads n hex digits as a code point; -1 (after a failure) when they are not there. */
static long read_hex(struct gp *g, int n)
{
    long v = 0;
    for (int i = 0; i < n; i++) {
        int h = g->p < g->end ? hex_val(*g->p) : -1;
        if (h < 0) {
            fail_at(g, g->p, ATTND_ERR_INVALID, "expected %d hex digits", n);
            return -1;
        }
        v = v * 16 + h;
        g->p++;
    }
    if (v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
        fail_at(g, g->p, ATTND_ERR_INVALID, "escape U+%lX is not a Unicode scalar value", v);
        return -1;
    }
    return v;
}

/* Reads one character of a string or class (an escape or one UTF-8 character) as a code point;
 * -1 after a failure. */
static long read_char(struct gp *g)
{
    if (g->p >= g->end) {
        fail_at(g, g->p, ATTND_ERR_INVALID, "unexpected end of grammar");
        return -1;
    }
    if (*g->p != '\\') {
        size_t l = utf8_seq_len(g->p, (size_t)(g->end - g->p));
        if (!l) {
            fail_at(g, g->p, ATTND_ERR_INVALID, "invalid UTF-8 in the grammar");
            return -1;
        }
        long cp = (long)utf8_decode(g->p, l);
        g->p += l;
        return cp;
    }
    const char *at = g->p++;
    char c = g->p < g->end ? *g->p++ : 0;
    switch (c) {
    case 'x': return read_hex(g, 2);
    case 'u': return read_hex(g, 4);
    case 'U': return read_hex(g, 8);
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '0': return 0;
    default:
        if (c && (unsigned char)c < 0x80 && !is_word(c) && c > ' ') return c;
        fail_at(g, at, ATTND_ERR_INVALID, "unknown escape '\\%c'", c ? c : '?');
        return -1;
    }
}

/* A "..." literal (g->p past the opening quote). */
static void parse_literal(struct gp *g, int rule)
{
    while (g->st == ATTND_OK) {
        if (g->p >= g->end || *g->p == '\n') {
            fail_at(g, g->p, ATTND_ERR_INVALID, "unterminated string");
            return;
        }
        if (*g->p == '"') {
            g->p++;
            return;
        }
        long cp = read_char(g);
        if (cp < 0) return;
        char u[4];
        check(g, gram_add_literal(g->b, rule, u, utf8_encode((uint32_t)cp, u)));
    }
}

/* A [...] class (g->p past the '['). */
static void parse_class(struct gp *g, int rule)
{
    bool negate = g->p < g->end && *g->p == '^';
    if (negate) g->p++;
    uint32_t *r = NULL;
    size_t n = 0, cap = 0;
    while (g->st == ATTND_OK) {
        if (g->p >= g->end || *g->p == '\n') {
            fail_at(g, g->p, ATTND_ERR_INVALID, "unterminated character class");
            break;
        }
        if (*g->p == ']') {
            g->p++;
            check(g, gram_add_cpset(g->b, rule, r, n, negate));
            break;
        }
        const char *at = g->p;
        long lo = read_char(g), hi = lo;
        if (lo >= 0 && g->p + 1 < g->end && g->p[0] == '-' && g->p[1] != ']') {
            g->p++;
            hi = read_char(g);
            if (hi >= 0 && hi < lo) fail_at(g, at, ATTND_ERR_INVALID, "character range is backwards");
        }
        if (g->st != ATTND_OK) break;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            uint32_t *nr = realloc(r, cap * 2 * sizeof *nr);
            if (!nr) {
                fail_at(g, at, ATTND_ERR_NOMEM, "out of memory");
                break;
            }
            r = nr;
        }
        r[2 * n] = (uint32_t)lo, r[2 * n + 1] = (uint32_t)hi, n++;
    }
    free(r);
}

/* Reads a decimal count of a {m,n} repetition. */
static int read_count(struct gp *g)
{
    long v = 0;
    const char *at = g->p;
    while (g->p < g->end && *g->p >= '0' && *g->p <= '9') {
        v = v * 10 + (*g->p++ - '0');
        if (v > GRAM_MAX_REPEAT) {
            fail_at(g, at, ATTND_ERR_RANGE, "repetition count over %d", GRAM_MAX_REPEAT);
            return 0;
        }
    }
    if (g->p == at) fail_at(g, at, ATTND_ERR_INVALID, "expected a number");
    return (int)v;
}

/* The {m}, {m,} or {m,n} after an item (g->p past the '{'). */
static void parse_braces(struct gp *g, int *min, int *max)
{
    skip_space(g, true);
    *min = *max = read_count(g);
    skip_space(g, true);
    if (g->st == ATTND_OK && g->p < g->end && *g->p == ',') {
        g->p++;
        skip_space(g, true);
        *max = (g->p < g->end && *g->p == '}') ? GRAM_INF : read_count(g);
        skip_space(g, true);
        if (g->st == ATTND_OK && *max != GRAM_INF && *max < *min)
            fail_at(g, g->p, ATTND_ERR_INVALID, "repetition {%d,%d}: max below min", *min, *max);
    }
    if (g->st == ATTND_OK && (g->p >= g->end || *g->p != '}')) fail_at(g, g->p, ATTND_ERR_INVALID, "expected '}'");
    else if (g->st == ATTND_OK) g->p++;
}

static void parse_alternates(struct gp *g, int rule, bool nested);

/* Remembers where rule id is first referenced, for the "undefined rule" message. */
static void note_use(struct gp *g, int id, const char *at)
{
    if ((size_t)id >= g->cap_use) {
        size_t nc = g->cap_use ? g->cap_use : 64;
        while (nc <= (size_t)id) nc *= 2;
        size_t *nu = realloc(g->first_use, nc * sizeof *nu);
        if (!nu) {
            fail_at(g, at, ATTND_ERR_NOMEM, "out of memory");
            return;
        }
        for (size_t i = g->cap_use; i < nc; i++) nu[i] = SIZE_MAX;
        g->first_use = nu;
        g->cap_use = nc;
    }
    if (g->first_use[id] == SIZE_MAX) g->first_use[id] = (size_t)(at - g->start);
}

/* One item (literal, class, '.', name or group) appended to rule; false if there is none here. */
static bool parse_item(struct gp *g, int rule)
{
    const char *at = g->p;
    char c = *g->p;
    if (c == '"') {
        g->p++;
        parse_literal(g, rule);
    } else if (c == '[') {
        g->p++;
        parse_class(g, rule);
    } else if (c == '.') {
        g->p++;
        check(g, gram_add_cpset(g->b, rule, NULL, 0, true));
    } else if (c == '(') {
        if (++g->depth > GBNF_MAX_NESTING) {
            fail_at(g, at, ATTND_ERR_RANGE, "parentheses nested deeper than %d", GBNF_MAX_NESTING);
            return false;
        }
        g->p++;
        int aux = gram_rule_fresh(g->b, "group");
        if (aux < 0) return check(g, ATTND_ERR_NOMEM), false;
        skip_space(g, true);
        parse_alternates(g, aux, true);
        if (g->st == ATTND_OK && (g->p >= g->end || *g->p != ')'))
            fail_at(g, g->p, ATTND_ERR_INVALID, "expected ')' to close the '(' at offset %zu", (size_t)(at - g->start));
        if (g->st == ATTND_OK) g->p++;
        g->depth--;
        check(g, gram_add_ref(g->b, rule, aux));
    } else if (is_word(c)) {
        while (g->p < g->end && is_word(*g->p)) g->p++;
        int id = gram_rule(g->b, at, (size_t)(g->p - at));
        if (id < 0) return check(g, ATTND_ERR_NOMEM), false;
        note_use(g, id, at);
        check(g, gram_add_ref(g->b, rule, id));
    } else {
        return false;
    }
    return true;
}

/* A sequence of items with their repetition operators, until '|', ')' or (outside parentheses)
 * the end of the line. */
static void parse_sequence(struct gp *g, int rule, bool nested)
{
    size_t last = SIZE_MAX; /* where the last item began in the alternative */
    while (g->st == ATTND_OK && g->p < g->end) {
        char c = *g->p;
        int min = -1, max = -1;
        if (c == '*') min = 0, max = GRAM_INF;
        else if (c == '+') min = 1, max = GRAM_INF;
        else if (c == '?') min = 0, max = 1;
        if (min >= 0 || c == '{') {
            const char *at = g->p++;
            if (c == '{') parse_braces(g, &min, &max);
            if (g->st != ATTND_OK) return;
            if (last == SIZE_MAX) {
                fail_at(g, at, ATTND_ERR_INVALID, "'%c' with nothing before it to repeat", c);
                return;
            }
            check(g, gram_repeat(g->b, rule, last, min, max));
            last = SIZE_MAX;
        } else {
            size_t mark = gram_alt_len(g->b, rule);
            if (!parse_item(g, rule)) return;
            last = mark;
        }
        skip_space(g, nested);
    }
}

static void parse_alternates(struct gp *g, int rule, bool nested)
{
    parse_sequence(g, rule, nested);
    while (g->st == ATTND_OK && g->p < g->end && *g->p == '|') {
        g->p++;
        skip_space(g, true);
        check(g, gram_add_alt(g->b, rule));
        parse_sequence(g, rule, nested);
    }
}

/* name ::= alternatives, then the end of its line. */
static void parse_rule(struct gp *g)
{
    const char *at = g->p;
    while (g->p < g->end && is_word(*g->p)) g->p++;
    if (g->p == at) {
        fail_at(g, at, ATTND_ERR_INVALID, "expected a rule name");
        return;
    }
    int name_len = (int)(g->p - at);
    int id = gram_rule(g->b, at, (size_t)name_len);
    if (id < 0) return check(g, ATTND_ERR_NOMEM);
    skip_space(g, false);
    if (g->end - g->p < 3 || memcmp(g->p, "::=", 3)) {
        fail_at(g, g->p, ATTND_ERR_INVALID, "expected '::=' after rule name '%.*s'", name_len, at);
        return;
    }
    if (!gram_rule_define(g->b, id)) {
        fail_at(g, at, ATTND_ERR_INVALID, "rule '%.*s' is defined twice", name_len, at);
        return;
    }
    g->p += 3;
    skip_space(g, true);
    parse_alternates(g, id, false);
    if (g->st == ATTND_OK && g->p < g->end && *g->p != '\n' && *g->p != '\r')
        fail_at(g, g->p, ATTND_ERR_INVALID, "unexpected '%c'", *g->p);
}

/* After parsing: the first reference to a rule that was never defined, as a positioned error. */
static void check_defined(struct gp *g)
{
    for (size_t id = 0; id < g->cap_use && g->st == ATTND_OK; id++) {
        if (g->first_use[id] == SIZE_MAX) continue;
        struct gram_builder *b = g->b;
        if (gram_rule_define(b, (int)id)) {
            fail_at(g, g->start + g->first_use[id], ATTND_ERR_INVALID, "undefined rule '%s'",
                    gram_rule_name(b, (int)id));
        }
    }
}

attnd_status gbnf_parse(const char *text, size_t len, struct gram **out, char *err, size_t errlen)
{
    *out = NULL;
    if (err && errlen) err[0] = 0;
    if (len > GBNF_MAX_TEXT) {
        if (err && errlen) snprintf(err, errlen, "gbnf: grammar text over %zu bytes", GBNF_MAX_TEXT);
        return ATTND_ERR_RANGE;
    }
    struct gp g = {.start = text, .p = text, .end = text + len, .err = err, .errlen = errlen};
    g.st = gram_builder_create(&g.b);
    if (g.st != ATTND_OK) return g.st;
    skip_space(&g, true);
    while (g.st == ATTND_OK && g.p < g.end) {
        parse_rule(&g);
        skip_space(&g, true);
    }
    check_defined(&g);
    if (g.st == ATTND_OK) g.st = gram_build(g.b, "root", out, err, errlen);
    free(g.first_use);
    gram_builder_destroy(g.b);
    return g.st;
}
