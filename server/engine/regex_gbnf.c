/* regex_gbnf.c - see regex_gbnf.h. */
#include "attnd/regex_gbnf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/utf8.h"

#define MAX_CP 0x10FFFFu
#define MAX_REGEX_DEPTH 64
#define MAX_REGEX_REPEAT 1000

/* ---- text buffer ---- */

void rxg_put(struct rxg_buf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void rxg_puts(struct rxg_buf *b, const char *s)
{
    rxg_put(b, s, strlen(s));
}

void rxg_printf(struct rxg_buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        rxg_put(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    rxg_put(b, big, (size_t)n);
    free(big);
}

void rxg_lit(struct rxg_buf *b, const char *s, size_t n)
{
    rxg_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            rxg_put(b, e, 2);
        } else if (c < 0x20 || c == 0x7f) {
            rxg_printf(b, "\\x%02X", c);
        } else {
            rxg_put(b, (const char *)&c, 1);
        }
    }
    rxg_put(b, "\"", 1);
}

/* The canonical JSON escape of code point c (< 0x20, '"' or '\\') into e; returns its length,
 * or 0 when c needs none. */
static size_t json_escape_cp(uint32_t c, char e[7])
{
    static const char short_esc[] = {'b', 't', 'n', 0, 'f', 'r'}; /* 0x08 .. 0x0d */
    if (c == '"' || c == '\\') {
        e[0] = '\\', e[1] = (char)c;
        return 2;
    }
    if (c >= 0x20) return 0;
    if (c >= 0x08 && c <= 0x0d && short_esc[c - 8]) {
        e[0] = '\\', e[1] = short_esc[c - 8];
        return 2;
    }
    snprintf(e, 7, "\\u%04x", c);
    return 6;
}

void rxg_json_escape(struct rxg_buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char e[7];
        size_t l = json_escape_cp((unsigned char)s[i], e);
        if (l) rxg_put(b, e, l);
        else rxg_put(b, s + i, 1);
    }
}

/* One JSON-encoded code point as a GBNF literal item. */
static void json_cp_item(struct rxg_buf *b, uint32_t c)
{
    char e[7], u[4];
    size_t l = json_escape_cp(c, e);
    if (l) rxg_lit(b, e, l);
    else rxg_lit(b, u, utf8_encode(c, u));
}

/* ---- code point range sets ---- */

struct rset {
    uint32_t *r; /* pairs */
    size_t n, cap;
    bool oom;
};

static void rs_add(struct rset *s, uint32_t lo, uint32_t hi)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        uint32_t *nr = realloc(s->r, nc * 2 * sizeof *nr);
        if (!nr) {
            s->oom = true;
            return;
        }
        s->r = nr;
        s->cap = nc;
    }
    s->r[2 * s->n] = lo, s->r[2 * s->n + 1] = hi, s->n++;
}

static int cmp_pair(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts and merges; with negate, replaces the set by its complement in [0, MAX_CP]. */
static void rs_normalize(struct rset *s, bool negate)
{
    if (s->n) qsort(s->r, s->n, 2 * sizeof *s->r, cmp_pair);
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (k && s->r[2 * i] <= s->r[2 * k - 1] + 1) {
            if (s->r[2 * i + 1] > s->r[2 * k - 1]) s->r[2 * k - 1] = s->r[2 * i + 1];
        } else {
            s->r[2 * k] = s->r[2 * i], s->r[2 * k + 1] = s->r[2 * i + 1], k++;
        }
    }
    s->n = k;
    if (!negate) return;
    struct rset c = {0};
    uint32_t next = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->r[2 * i] > next) rs_add(&c, next, s->r[2 * i] - 1);
        next = s->r[2 * i + 1] + 1;
    }
    if (next <= MAX_CP) rs_add(&c, next, MAX_CP);
    free(s->r);
    *s = c;
}

static bool rs_has(const struct rset *s, uint32_t c)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->r[2 * i] <= c && c <= s->r[2 * i + 1]) return true;
    return false;
}

/* A code point inside a GBNF class. */
static void class_cp(struct rxg_buf *b, uint32_t c)
{
    if (c > 0x20 && c < 0x7f && c != ']' && c != '\\' && c != '^' && c != '-' && c != '"') {
        char ch = (char)c;
        rxg_put(b, &ch, 1);
    } else {
        rxg_printf(b, "\\U%08X", c);
    }
}

void rxg_json_class(struct rxg_buf *b, const uint32_t *r, size_t n, bool negate)
{
    struct rset s = {0};
    for (size_t i = 0; i < n; i++) rs_add(&s, r[2 * i], r[2 * i + 1] > MAX_CP ? MAX_CP : r[2 * i + 1]);
    rs_normalize(&s, negate);
    struct rset plain = {0}; /* s without the characters JSON escapes */
    for (size_t i = 0; i < s.n; i++) {
        uint32_t lo = s.r[2 * i] < 0x20 ? 0x20 : s.r[2 * i], hi = s.r[2 * i + 1];
        for (uint32_t x = lo; x <= hi;) { /* cut out '"' and '\\' */
            uint32_t stop = x <= '"' && '"' <= hi ? '"' : (x <= '\\' && '\\' <= hi ? '\\' : hi + 1);
            if (stop > x) rs_add(&plain, x, stop - 1);
            x = stop + 1;
            if (stop > hi) break;
        }
    }
    rxg_puts(b, "(");
    bool first = true;
    if (plain.n) {
        rxg_puts(b, "[");
        for (size_t i = 0; i < plain.n; i++) {
            class_cp(b, plain.r[2 * i]);
            if (plain.r[2 * i + 1] != plain.r[2 * i]) {
                rxg_puts(b, "-");
                class_cp(b, plain.r[2 * i + 1]);
            }
        }
        rxg_puts(b, "]");
        first = false;
    }
    for (uint32_t c = 0; c <= '\\'; c = c == 0x1f ? '"' : c == '"' ? '\\' : c + 1) {
        if (!rs_has(&s, c)) continue;
        if (!first) rxg_puts(b, " | ");
        json_cp_item(b, c);
        first = false;
    }
    if (first) rxg_puts(b, "[^\\x00-\\U0010FFFF]"); /* the empty set: matches nothing */
    rxg_puts(b, ")");
    if (s.oom || plain.oom) b->oom = true;
    free(s.r);
    free(plain.r);
}

/* ---- regular expressions ---- */

struct rx {
    const char *p, *end;
    struct rxg_buf *out;
    attnd_status st;
    char *err;
    size_t errlen;
    int depth;
};

static void rx_fail(struct rx *x, attnd_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void rx_fail(struct rx *x, attnd_status st, const char *fmt, ...)
{
    if (x->st != ATTND_OK) return;
    x->st = st;
    if (!x->err || !x->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->err, x->errlen, fmt, ap);
    va_end(ap);
}

static int hexv(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static uint32_t rx_hex(struct rx *x, int n)
{
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        int h = x->p < x->end ? hexv(*x->p) : -1;
        if (h < 0) {
            rx_fail(x, ATTND_ERR_INVALID, "pattern: expected %d hex digits", n);
            return 0;
        }
        v = v * 16 + (uint32_t)h;
        x->p++;
    }
    return v;
}

/* Adds the class named by a \d \w \s (upper case: negated) escape letter to s. */
static void add_named_class(struct rset *s, char c)
{
    struct rset t = {0};
    char lc = (char)(c | 0x20);
    if (lc == 'd') rs_add(&t, '0', '9');
    if (lc == 'w') rs_add(&t, '0', '9'), rs_add(&t, 'A', 'Z'), rs_add(&t, 'a', 'z'), rs_add(&t, '_', '_');
    if (lc == 's') rs_add(&t, '\t', '\r'), rs_add(&t, ' ', ' '), rs_add(&t, 0xa0, 0xa0), rs_add(&t, 0xfeff, 0xfeff),
        rs_add(&t, 0x2000, 0x200a), rs_add(&t, 0x2028, 0x2029);
    rs_normalize(&t, c != lc);
    for (size_t i = 0; i < t.n; i++) rs_add(s, t.r[2 * i], t.r[2 * i + 1]);
    if (t.oom) s->oom = true;
    free(t.r);
}

/* Reads an escape (x->p past the backslash). Returns the code point, or -1 after adding a
 * named class to cls (when cls is given; else that is an error), or -2 after a failure. */
static long rx_escape(struct rx *x, struct rset *cls)
{
    if (x->p >= x->end) return rx_fail(x, ATTND_ERR_INVALID, "pattern: ends with a backslash"), -2;
    char c = *x->p++;
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        if (!cls) return -2;
        add_named_class(cls, c);
        return -1;
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'x': return (long)rx_hex(x, 2);
    case 'u': return (long)rx_hex(x, 4);
    default:
        if ((unsigned char)c < 0x80 && !(c >= '0' && c <= '9') && !(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z'))
            return c;
        rx_fail(x, ATTND_ERR_UNSUPPORTED, "pattern: the escape \\%c is not supported", c);
        return -2;
    }
}

/* One literal character of the pattern (UTF-8), or -2 after a failure. */
static long rx_literal(struct rx *x)
{
    size_t l = utf8_seq_len(x->p, (size_t)(x->end - x->p));
    if (!l) return rx_fail(x, ATTND_ERR_INVALID, "pattern: invalid UTF-8"), -2;
    long c = (long)utf8_decode(x->p, l);
    x->p += l;
    return c;
}

/* A [...] class (x->p past the '['), written as a JSON character item. */
static void rx_class(struct rx *x)
{
    struct rset s = {0};
    bool negate = x->p < x->end && *x->p == '^';
    if (negate) x->p++;
    bool first = true;
    while (x->st == ATTND_OK) {
        if (x->p >= x->end) {
            rx_fail(x, ATTND_ERR_INVALID, "pattern: unterminated [");
            break;
        }
        if (*x->p == ']' && !first) {
            x->p++;
            break;
        }
        first = false;
        long lo = *x->p == '\\' ? (x->p++, rx_escape(x, &s)) : rx_literal(x);
        if (lo == -1) continue;
        if (lo < 0) break;
        long hi = lo;
        if (x->end - x->p >= 2 && x->p[0] == '-' && x->p[1] != ']') {
            x->p++;
            hi = *x->p == '\\' ? (x->p++, rx_escape(x, NULL)) : rx_literal(x);
            if (hi < 0 || hi < lo) {
                rx_fail(x, ATTND_ERR_INVALID, "pattern: bad range in [...]");
                break;
            }
        }
        rs_add(&s, (uint32_t)lo, (uint32_t)hi);
    }
    if (x->st == ATTND_OK) rxg_json_class(x->out, s.r, s.n, negate);
    free(s.r);
}

static void rx_alt(struct rx *x);

/* One atom: a group, a class, '.', an escape or a literal character. */
static void rx_atom(struct rx *x)
{
    char c = *x->p;
    if (c == '(') {
        x->p++;
        if (x->p < x->end && *x->p == '?') {
            if (x->end - x->p >= 2 && x->p[1] == ':') x->p += 2;
            else return rx_fail(x, ATTND_ERR_UNSUPPORTED, "pattern: (?...) groups other than (?:...) are not supported");
        }
        if (++x->depth > MAX_REGEX_DEPTH) return rx_fail(x, ATTND_ERR_RANGE, "pattern: groups nested too deep");
        rxg_puts(x->out, "(");
        rx_alt(x);
        rxg_puts(x->out, ")");
        x->depth--;
        if (x->st == ATTND_OK && (x->p >= x->end || *x->p != ')')) rx_fail(x, ATTND_ERR_INVALID, "pattern: missing )");
        else x->p++;
    } else if (c == '[') {
        x->p++;
        rx_class(x);
    } else if (c == '.') {
        x->p++;
        uint32_t nl[2] = {'\n', '\n'};
        rxg_json_class(x->out, nl, 1, true);
    } else if (c == '\\') {
        x->p++;
        struct rset s = {0};
        long cp = rx_escape(x, &s);
        if (cp == -1) rxg_json_class(x->out, s.r, s.n, false);
        else if (cp >= 0) json_cp_item(x->out, (uint32_t)cp);
        free(s.r);
    } else if (c == '^' || c == '$') {
        rx_fail(x, ATTND_ERR_UNSUPPORTED, "pattern: '%c' is supported only at the very start or end", c);
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        rx_fail(x, ATTND_ERR_INVALID, "pattern: '%c' with nothing to repeat", c);
    } else {
        long cp = rx_literal(x);
        if (cp >= 0) json_cp_item(x->out, (uint32_t)cp);
    }
}

/* Reads {m}, {m,} or {m,n} (x->p at the '{') into GBNF. */
static void rx_braces(struct rx *x)
{
    const char *q = x->p + 1;
    long m = 0, n = -2;
    while (q < x->end && *q >= '0' && *q <= '9' && m <= MAX_REGEX_REPEAT) m = m * 10 + (*q++ - '0');
    if (q < x->end && *q == ',') {
        q++;
        n = -1;
        if (q < x->end && *q >= '0' && *q <= '9')
            for (n = 0; q < x->end && *q >= '0' && *q <= '9' && n <= MAX_REGEX_REPEAT; q++) n = n * 10 + (*q - '0');
    }
    if (q >= x->end || *q != '}' || q == x->p + 1) return rx_fail(x, ATTND_ERR_UNSUPPORTED, "pattern: a literal '{' is not supported");
    if (m > MAX_REGEX_REPEAT || n > MAX_REGEX_REPEAT)
        return rx_fail(x, ATTND_ERR_RANGE, "pattern: repetition count over %d", MAX_REGEX_REPEAT);
    if (n >= 0 && n < m) return rx_fail(x, ATTND_ERR_INVALID, "pattern: {%ld,%ld} has max below min", m, n);
    if (n == -2) rxg_printf(x->out, "{%ld}", m);
    else if (n == -1) rxg_printf(x->out, "{%ld,}", m);
    else rxg_printf(x->out, "{%ld,%ld}", m, n);
    x->p = q + 1;
}

/* A sequence of atoms with their quantifiers, up to '|', ')' or the end. */
static void rx_seq(struct rx *x)
{
    bool empty = true;
    while (x->st == ATTND_OK && x->p < x->end && *x->p != '|' && *x->p != ')') {
        rxg_puts(x->out, empty ? "" : " ");
        rx_atom(x);
        empty = false;
        if (x->st != ATTND_OK || x->p >= x->end) break;
        char c = *x->p;
        if (c == '*' || c == '+' || c == '?') {
            char op[2] = {c, 0};
            rxg_puts(x->out, op);
            x->p++;
        } else if (c == '{') {
            rx_braces(x);
        } else {
            continue;
        }
        if (x->p < x->end && *x->p == '?') x->p++; /* lazy: the same language */
        else if (x->p < x->end && (*x->p == '+' || *x->p == '*' || *x->p == '{'))
            rx_fail(x, ATTND_ERR_UNSUPPORTED, "pattern: a quantifier after a quantifier is not supported");
    }
    if (empty) rxg_puts(x->out, "\"\"");
}

static void rx_alt(struct rx *x)
{
    rx_seq(x);
    while (x->st == ATTND_OK && x->p < x->end && *x->p == '|') {
        x->p++;
        rxg_puts(x->out, " | ");
        rx_seq(x);
    }
}

attnd_status rxg_regex(struct rxg_buf *b, const char *pattern, size_t len, const char *jchar, char *err,
                       size_t errlen)
{
    if (len > RXG_MAX_PATTERN) {
        if (err && errlen) snprintf(err, errlen, "pattern: longer than %d bytes", RXG_MAX_PATTERN);
        return ATTND_ERR_RANGE;
    }
    bool start = len && pattern[0] == '^';
    size_t end = len;
    if (end > (size_t)start && pattern[end - 1] == '$') {
        size_t bs = 0; /* an escaped '$' is a literal */
        while (end - 1 - bs > (size_t)start && pattern[end - 2 - bs] == '\\') bs++;
        if (!(bs & 1)) end--;
    }
    bool anchored_end = end < len;
    struct rx x = {.p = pattern + start, .end = pattern + end, .out = b, .err = err, .errlen = errlen};
    rxg_puts(b, "(");
    if (!start) rxg_printf(b, "%s* ", jchar);
    rxg_puts(b, "(");
    rx_alt(&x);
    rxg_puts(b, ")");
    if (x.st == ATTND_OK && x.p < x.end) rx_fail(&x, ATTND_ERR_INVALID, "pattern: unbalanced )");
    if (!anchored_end) rxg_printf(b, " %s*", jchar);
    rxg_puts(b, ")");
    return x.st;
}

/* ---- integer ranges ---- */

static bool all_digit(const char *s, size_t n, char d)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != d) return false;
    return true;
}

/* Digit strings x..y of the same length n (x <= y), as one item. */
static void same_len(struct rxg_buf *b, const char *x, const char *y, size_t n)
{
    if (n == 1) {
        rxg_printf(b, "[%c-%c]", x[0], y[0]);
        return;
    }
    if (x[0] == y[0]) {
        rxg_printf(b, "(\"%c\" ", x[0]);
        same_len(b, x + 1, y + 1, n - 1);
        rxg_puts(b, ")");
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', n - 1);
    memset(zeros, '0', n - 1);
    char lo = x[0], hi = y[0];
    bool first = true;
    rxg_puts(b, "(");
    if (!all_digit(x + 1, n - 1, '0')) {
        rxg_printf(b, "\"%c\" ", x[0]);
        same_len(b, x + 1, nines, n - 1);
        lo++;
        first = false;
    }
    bool tail = !all_digit(y + 1, n - 1, '9');
    if (tail) hi--;
    if (lo <= hi) {
        rxg_printf(b, "%s[%c-%c] [0-9]{%zu}", first ? "" : " | ", lo, hi, n - 1);
        first = false;
    }
    if (tail) {
        rxg_printf(b, "%s\"%c\" ", first ? "" : " | ", y[0]);
        same_len(b, zeros, y + 1, n - 1);
    }
    rxg_puts(b, ")");
}

/* Non-negative integers in [a, b], as one item. */
static void pos_range(struct rxg_buf *b, int64_t a, int64_t z)
{
    rxg_puts(b, "(");
    bool first = true;
    int64_t lo_of_len = 0, hi_of_len = 9;
    for (size_t len = 1; len <= 17 && lo_of_len <= z; len++) {
        int64_t lo = a > lo_of_len ? a : lo_of_len, hi = z < hi_of_len ? z : hi_of_len;
        if (lo <= hi) {
            char x[24], y[24];
            snprintf(x, sizeof x, "%0*lld", (int)len, (long long)lo);
            snprintf(y, sizeof y, "%0*lld", (int)len, (long long)hi);
            if (!first) rxg_puts(b, " | ");
            same_len(b, x, y, len);
            first = false;
        }
        lo_of_len = hi_of_len + 1;
        hi_of_len = hi_of_len * 10 + 9;
    }
    rxg_puts(b, ")");
}

void rxg_int_range(struct rxg_buf *b, int64_t lo, int64_t hi)
{
    rxg_puts(b, "(");
    if (lo < 0) {
        rxg_puts(b, "\"-\" ");
        pos_range(b, hi < 0 ? -hi : 1, -lo);
        if (hi >= 0) rxg_puts(b, " | ");
    }
    if (hi >= 0) pos_range(b, lo > 0 ? lo : 0, hi);
    rxg_puts(b, ")");
}

/* ---- numbers with bounds ---- */

#define FRAC_ANY "( \".\" [0-9]{1,16} )?"
#define FRAC_ZERO "( \".\" \"0\"{1,16} )?"
#define FRAC_NONZERO "( \".\" \"0\"{0,15} [1-9] [0-9]{0,15} )"

/* Appends one alternative "integer part in [a, z], then frac" to b (nothing when a > z). */
static void num_piece(struct rxg_buf *b, bool *first, int64_t a, int64_t z, const char *frac)
{
    if (a > z) return;
    rxg_puts(b, *first ? "" : " | ");
    *first = false;
    rxg_puts(b, "( ");
    pos_range(b, a, z);
    rxg_printf(b, " %s )", frac);
}

/* The non-negative numbers u = I + f (f the fraction) with lo < / <= u < / <= hi, as
 * alternatives appended to b. lo.v >= 0 when lo.has. */
static void nonneg_numbers(struct rxg_buf *b, bool *first, struct rxg_bound lo, struct rxg_bound hi)
{
    if (hi.has && (hi.v < 0 || (hi.v == 0 && hi.excl))) return;
    int64_t a = lo.has ? (lo.excl ? lo.v + 1 : lo.v) : 0;   /* I from here: any fraction */
    int64_t z = hi.has ? hi.v - 1 : RXG_MAX_INT;             /* I up to here: any fraction */
    num_piece(b, first, a, z, FRAC_ANY);
    if (lo.has && lo.excl && (!hi.has || lo.v <= hi.v - 1)) /* u = lo + a non-zero fraction */
        num_piece(b, first, lo.v, lo.v, FRAC_NONZERO);
    if (hi.has && !hi.excl && hi.v >= a && hi.v >= 0) /* u = hi exactly */
        num_piece(b, first, hi.v, hi.v, FRAC_ZERO);
}

void rxg_number_range(struct rxg_buf *b, struct rxg_bound lo, struct rxg_bound hi)
{
    bool first = true;
    rxg_puts(b, "( ");
    /* v >= 0: lower bounds below zero say nothing */
    struct rxg_bound plo = lo;
    if (plo.has && plo.v < 0) plo.has = false;
    nonneg_numbers(b, &first, plo, hi);
    /* v < 0, written "-" u with u = -v > 0: v >= lo is u <= -lo, v <= hi is u >= -hi */
    if (!lo.has || lo.v < 0) {
        struct rxg_bound ulo = {true, true, 0}, uhi = {lo.has, lo.excl, lo.has ? -lo.v : 0};
        if (hi.has && hi.v < 0) ulo = (struct rxg_bound){true, hi.excl, -hi.v};
        struct rxg_buf neg = {0};
        bool nfirst = true;
        nonneg_numbers(&neg, &nfirst, ulo, uhi);
        if (!nfirst) {
            rxg_printf(b, "%s\"-\" ( %s )", first ? "" : " | ", neg.p);
            first = false;
        }
        if (neg.oom) b->oom = true;
        free(neg.p);
    }
    rxg_puts(b, first ? "nothing )" : " )");
}

/* ---- any string but some ---- */

/* The keys in [from, to) (sorted, sharing their first depth bytes) as the item "content that
 * continues none of them into a whole key". at_key: the prefix itself is one of the keys. */
static void not_node(struct rxg_buf *b, const char *const *k, const size_t *l, const size_t *ord, size_t from,
                     size_t to, size_t depth, const char *jchar)
{
    bool at_key = false;
    struct rset next = {0};
    rxg_puts(b, "(");
    size_t i = from;
    while (i < to && l[ord[i]] == depth) at_key = true, i++;
    bool first = true;
    if (!at_key) {
        rxg_puts(b, "\"\"");
        first = false;
    }
    while (i < to) { /* one branch per distinct next character */
        size_t cl = utf8_seq_len(k[ord[i]] + depth, l[ord[i]] - depth);
        if (!cl) cl = 1;
        uint32_t c = cl > 1 ? utf8_decode(k[ord[i]] + depth, cl) : (unsigned char)k[ord[i]][depth];
        size_t j = i;
        while (j < to && l[ord[j]] >= depth + cl && !memcmp(k[ord[j]] + depth, k[ord[i]] + depth, cl)) j++;
        rxg_puts(b, first ? "" : " | ");
        first = false;
        json_cp_item(b, c);
        rxg_puts(b, " ");
        not_node(b, k, l, ord, i, j, depth + cl, jchar);
        rs_add(&next, c, c);
        i = j;
    }
    /* a character that leaves every key, then anything */
    rxg_puts(b, first ? "" : " | ");
    rxg_json_class(b, next.r, next.n, true);
    rxg_printf(b, " %s*)", jchar);
    if (next.oom) b->oom = true;
    free(next.r);
}

/* a < b in byte order (a prefix first) */
static bool key_less(const char *const *k, const size_t *l, size_t a, size_t b)
{
    size_t n = l[a] < l[b] ? l[a] : l[b];
    int c = memcmp(k[a], k[b], n);
    return c ? c < 0 : l[a] < l[b];
}

void rxg_not_strings(struct rxg_buf *b, const char *const *keys, const size_t *lens, size_t n, const char *jchar)
{
    size_t *ord = malloc((n ? n : 1) * sizeof *ord);
    if (!ord) {
        b->oom = true;
        return;
    }
    for (size_t i = 0; i < n; i++) { /* insertion sort: key lists are short (json_schema caps them) */
        size_t j = i;
        while (j > 0 && key_less(keys, lens, i, ord[j - 1])) ord[j] = ord[j - 1], j--;
        ord[j] = i;
    }
    not_node(b, keys, lens, ord, 0, n, 0, jchar);
    free(ord);
}
