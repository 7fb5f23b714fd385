/* jinja.c - a Jinja template engine for chat templates. See jinja.h.
 *
 * 1. Lexing (lex_*): the source's newlines are normalised to "\n" and one trailing newline is
 *    dropped (jinja2's keep_trailing_newline=False); text, `{{ }}`, `{% %}` and `{# #}` are cut
 *    with jinja2's whitespace rules: `-` strips all whitespace on its side, trim_blocks drops
 *    the newline after a block or comment tag, lstrip_blocks drops the spaces and tabs before
 *    a block or comment tag that starts its line, and `+` turns either off. Tag contents become
 *    tokens (names, strings with Python escapes, numbers, operators).
 * 2. Parsing (p_*): recursive descent with jinja2's precedence (conditional, or, and, not,
 *    comparisons and `in`, + -, ~, * / // %, **, unary, postfix, then filters and tests) into
 *    an AST of statements (struct node) and expressions (struct expr), allocated in one arena.
 * 3. Rendering (ev_* / ex_*): values follow Python's semantics (int vs float, str() and
 *    repr() as Python prints them, truthiness, Undefined as jinja2's default Undefined). All
 *    render-time memory is one arena freed at the end; output goes to growable buffers that
 *    also record which bytes came from data strings of the context.
 */
#include "attnd/jinja.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARSE_MAX_DEPTH 128
#define DEF_MAX_OUTPUT ((size_t)1 << 20)
#define DEF_MAX_STEPS 5000000u
#define DEF_MAX_DEPTH 64
#define DEF_MAX_MEMORY ((size_t)64 << 20)
#define MAX_RANGE 100000 /* jinja2's sandbox refuses larger ranges */
#define MAX_RDEPTH 400   /* nested evaluations (expressions inside statements inside macros): bounds the C stack */
#define MAX_VDEPTH 1000  /* nesting of a value that is printed, compared or serialised */

/* =============================================================================================
 * Arena
 * =========================================================================================== */

struct chunk {
    struct chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

struct arena {
    struct chunk *head;
    size_t total, limit;
};

static void *ar_alloc(struct arena *a, size_t n)
{
    if (n > SIZE_MAX / 2) return NULL;
    n = (n + 15) & ~(size_t)15;
    if (!n) n = 16;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 32768 ? n : 32768;
        if (a->total + cap > a->limit) return NULL;
        struct chunk *c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->total += cap;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    return p;
}

static void ar_free(struct arena *a)
{
    struct chunk *c = a->head;
    while (c) {
        struct chunk *nx = c->next;
        free(c);
        c = nx;
    }
    a->head = NULL;
    a->total = 0;
}

/* =============================================================================================
 * Values
 * =========================================================================================== */

enum vtype { V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS, V_MACRO, V_LOOP, V_FUNC };

struct jstr {
    const char *p;
    size_t n;
    const struct jinja_span *sp; /* data spans, relative to p */
    size_t nsp;
};

struct jlist;
struct jdict;
struct macro;
struct loopst;

typedef struct val {
    uint8_t t;
    uint8_t tuple; /* V_LIST: 1 a tuple (printed with parentheses), 2 a generator (what select/map
                    * return in jinja2: iterable once, no len(), not JSON), 3/4/5 a dict's keys() /
                    * values() / items() view; V_STR: 1 Markup (|safe) */
    union {
        bool b;
        int64_t i;
        double f;
        struct jstr s;
        struct jlist *l;
        struct jdict *d;
        struct macro *m;
        struct loopst *lp;
        int fn;
        const char *hint; /* V_UNDEF: the message an error about it gives */
    } u;
} val;

struct jlist {
    val *v;
    size_t n;
};

struct jdict {
    val *k, *v;
    size_t n, cap;
};

static const val UNDEF = {.t = V_UNDEF, .u.hint = NULL};
static const val NONE = {.t = V_NONE};

static val vbool(bool b) { return (val){.t = V_BOOL, .u.b = b}; }
static val vint(int64_t i) { return (val){.t = V_INT, .u.i = i}; }
static val vfloat(double f) { return (val){.t = V_FLOAT, .u.f = f}; }

/* =============================================================================================
 * Tokens and AST
 * =========================================================================================== */

enum ttype { T_EOF, T_TEXT, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP };

struct tok {
    int t, line;
    const char *p; /* T_TEXT, T_NAME, T_OP: source bytes; T_STR: decoded bytes */
    size_t n;
    int64_t i;
    double f;
};

enum ekind {
    E_CONST, E_NAME, E_LIST, E_TUPLE, E_DICT, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST,
    E_NEG, E_POS, E_NOT, E_AND, E_OR, E_BIN, E_CMP, E_IN, E_CONCAT, E_COND
};

enum binop { B_ADD, B_SUB, B_MUL, B_DIV, B_FDIV, B_MOD, B_POW };
enum cmpop { C_EQ, C_NE, C_LT, C_LE, C_GT, C_GE };

struct arg {
    const char *kw; /* keyword argument name, or NULL */
    size_t kwn;
    struct expr *e;
};

struct expr {
    int k, op, line;
    bool neg;             /* E_TEST `is not`, E_IN `not in` */
    struct expr *a, *b, *c, *d;
    val cst;              /* E_CONST */
    const char *name;     /* E_NAME, E_ATTR, E_FILTER, E_TEST */
    size_t nname;
    struct arg *args;     /* E_CALL / E_FILTER / E_TEST arguments, E_LIST / E_TUPLE items, E_DICT k,v pairs */
    int nargs;
};

enum nkind { S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_CALLBLOCK, S_FILTER, S_BREAK, S_CONTINUE, S_SCOPE };

struct param {
    const char *name;
    size_t n;
    struct expr *def;
};

struct node {
    int k, line;
    struct node *next;
    const char *text;     /* S_TEXT bytes, S_MACRO name */
    size_t len;
    struct expr *e;       /* S_OUT value, S_IF condition, S_FOR iterable, S_SET value, S_CALLBLOCK call */
    struct expr *tgt;     /* S_FOR / S_SET / S_SETBLOCK target: a name, a tuple of names, or ns.attr */
    struct expr *cond;    /* S_FOR `if` filter */
    struct expr *filt;    /* S_FILTER / S_SETBLOCK filters: E_FILTER chain whose innermost a is NULL */
    struct node *body, *alt;
    struct param *params; /* S_MACRO, S_CALLBLOCK (the caller's) */
    int nparams;
};

struct jinja_tpl {
    struct arena a;
    struct node *root;
};

struct macro {
    const struct node *def; /* S_MACRO or S_CALLBLOCK */
    struct frame *closure;
    struct macro *caller;   /* the call block's caller, bound as `caller` */
};

struct loopst {
    const struct jlist *items;
    size_t i;
};

/* =============================================================================================
 * Render state, errors, output buffers
 * =========================================================================================== */

struct var {
    const char *name;
    size_t n;
    val v;
};

struct frame {
    struct frame *parent;
    struct var *vars;
    size_t n, cap;
};

struct sb;

struct rs {
    struct arena a;
    struct sb *out; /* where statements write */
    uint64_t steps, max_steps;
    int depth, max_depth; /* macro calls */
    int rdepth;           /* nested ev / ex_list calls */
    size_t byte_acc;      /* bytes touched not yet charged as a step (charge) */
    size_t max_output;
    const struct tm *now;
    attnd_status st;
    bool raised;
    char *err;
    size_t errlen;
    struct frame *root;
};

static void fail(struct rs *R, attnd_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(struct rs *R, attnd_status st, const char *fmt, ...)
{
    if (R->st) return;
    R->st = st;
    if (R->err && R->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(R->err, R->errlen, fmt, ap);
        va_end(ap);
    }
}

static void *ralloc(struct rs *R, size_t n)
{
    void *p = ar_alloc(&R->a, n);
    if (!p) fail(R, ATTND_ERR_RANGE, "the template used more than its %zu bytes of memory", R->a.limit);
    return p;
}

static bool step(struct rs *R)
{
    if (R->st) return false;
    if (++R->steps > R->max_steps) {
        fail(R, ATTND_ERR_RANGE, "the template ran more than %" PRIu64 " steps", R->max_steps);
        return false;
    }
    return true;
}

/* One step (charge_step), or the cost of touching n bytes (charge: one step per 64 bytes). */
static bool charge_step(struct rs *R) { return step(R); }

static bool charge(struct rs *R, size_t n)
{
    if (R->st) return false;
    R->byte_acc += n & 63;
    R->steps += (n >> 6) + (R->byte_acc >> 6);
    R->byte_acc &= 63;
    if (R->steps > R->max_steps) {
        fail(R, ATTND_ERR_RANGE, "the template ran more than %" PRIu64 " steps", R->max_steps);
        return false;
    }
    return true;
}

struct sb {
    struct rs *R;
    char *p;
    size_t n, cap;
    struct jinja_span *sp;
    size_t nsp, capsp;
};

static bool sb_grow(struct sb *b, size_t add)
{
    struct rs *R = b->R;
    if (!charge(R, add + 16)) return false; /* a call costs a quarter step, and 64 bytes one step */
    if (add > R->max_output || b->n + add > R->max_output) {
        fail(R, ATTND_ERR_RANGE, "the template's output is over %zu bytes", R->max_output);
        return false;
    }
    if (b->n + add + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + add + 1) nc *= 2;
        char *t = realloc(b->p, nc);
        if (!t) {
            fail(R, ATTND_ERR_NOMEM, "out of memory");
            return false;
        }
        b->p = t;
        b->cap = nc;
    }
    return true;
}

static void sb_span(struct sb *b, size_t off, size_t len)
{
    if (!len || b->R->st) return;
    if (b->nsp && b->sp[b->nsp - 1].off + b->sp[b->nsp - 1].len == off) {
        b->sp[b->nsp - 1].len += len;
        return;
    }
    if (b->nsp == b->capsp) {
        size_t nc = b->capsp ? b->capsp * 2 : 8;
        struct jinja_span *t = realloc(b->sp, nc * sizeof *t);
        if (!t) {
            fail(b->R, ATTND_ERR_NOMEM, "out of memory");
            return;
        }
        b->sp = t;
        b->capsp = nc;
    }
    b->sp[b->nsp++] = (struct jinja_span){off, len};
}

/* Appends s[0..n); data: the bytes are data. */
static void sb_putd(struct sb *b, const char *s, size_t n, bool data)
{
    if (!n || !sb_grow(b, n)) return;
    memcpy(b->p + b->n, s, n);
    if (data) sb_span(b, b->n, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_put(struct sb *b, const char *s, size_t n) { sb_putd(b, s, n, false); }
static void sb_puts(struct sb *b, const char *s) { sb_putd(b, s, strlen(s), false); }

static void sb_putc(struct sb *b, char c, bool data) { sb_putd(b, &c, 1, data); }

static void sb_jstr(struct sb *b, const struct jstr *s)
{
    size_t base = b->n;
    sb_putd(b, s->p, s->n, false);
    if (b->R->st) return;
    for (size_t i = 0; i < s->nsp; i++) sb_span(b, base + s->sp[i].off, s->sp[i].len);
}

static void sb_free(struct sb *b)
{
    free(b->p);
    free(b->sp);
    b->p = NULL;
    b->sp = NULL;
    b->n = b->nsp = b->cap = b->capsp = 0;
}

static val vstr_raw(struct rs *R, const char *p, size_t n, const struct jinja_span *sp, size_t nsp)
{
    if (!charge(R, n)) return UNDEF;
    char *q = ralloc(R, n + 1);
    struct jinja_span *s = nsp ? ralloc(R, nsp * sizeof *s) : NULL;
    if (!q || (nsp && !s)) return UNDEF;
    if (n) memcpy(q, p, n);
    q[n] = 0;
    if (nsp) memcpy(s, sp, nsp * sizeof *s);
    return (val){.t = V_STR, .u.s = {q, n, s, nsp}};
}

/* The buffer's contents as a string value (in the arena); frees the buffer. */
static val sb_val(struct sb *b)
{
    val v = b->R->st ? UNDEF : vstr_raw(b->R, b->p ? b->p : "", b->n, b->sp, b->nsp);
    sb_free(b);
    return v;
}

static val vstr(struct rs *R, const char *p, size_t n, bool data)
{
    struct jinja_span sp = {0, n};
    return vstr_raw(R, p, n, &sp, data && n ? 1 : 0);
}

/* A string pointing into static or arena bytes (no copy). */
static val vlit(const char *p, size_t n) { return (val){.t = V_STR, .u.s = {p, n, NULL, 0}}; }

/* s[off, off + n) with s's data spans clipped to it. */
static val str_sub(struct rs *R, const struct jstr *s, size_t off, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < s->nsp; i++)
        if (s->sp[i].off < off + n && s->sp[i].off + s->sp[i].len > off) k++;
    if (!k) return vlit(s->p + off, n);
    struct jinja_span *sp = ralloc(R, k * sizeof *sp);
    if (!sp) return UNDEF;
    k = 0;
    for (size_t i = 0; i < s->nsp; i++) {
        size_t a = s->sp[i].off, e = a + s->sp[i].len;
        if (a >= off + n || e <= off) continue;
        if (a < off) a = off;
        if (e > off + n) e = off + n;
        sp[k++] = (struct jinja_span){a - off, e - a};
    }
    return (val){.t = V_STR, .u.s = {s->p + off, n, sp, k}};
}

static bool is_data(const val *v) { return v->t == V_STR && v->u.s.nsp > 0; }

/* =============================================================================================
 * Lexer
 * =========================================================================================== */

struct lexer {
    const char *s; /* normalised source */
    size_t n, pos;
    int line;
    struct arena *a;
    struct tok *t;
    size_t nt, capt;
    char *err;
    size_t errlen;
    bool failed;
};

static void lex_fail(struct lexer *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lex_fail(struct lexer *L, const char *fmt, ...)
{
    if (L->failed) return;
    L->failed = true;
    int k = snprintf(L->err, L->errlen, "line %d: ", L->line);
    if (k < 0 || (size_t)k >= L->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->err + k, L->errlen - (size_t)k, fmt, ap);
    va_end(ap);
}

static struct tok *lex_push(struct lexer *L, int type, const char *p, size_t n)
{
    if (L->failed) return NULL;
    if (L->nt == L->capt) {
        size_t nc = L->capt ? L->capt * 2 : 256;
        struct tok *t = realloc(L->t, nc * sizeof *t);
        if (!t) {
            lex_fail(L, "out of memory");
            return NULL;
        }
        L->t = t;
        L->capt = nc;
    }
    struct tok *t = &L->t[L->nt++];
    *t = (struct tok){.t = type, .line = L->line, .p = p, .n = n};
    return t;
}

static bool is_sp(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

static void lex_count_lines(struct lexer *L, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (L->s[i] == '\n') L->line++;
}

static void put_utf8(char *o, size_t *k, uint32_t cp)
{
    if (cp < 0x80) o[(*k)++] = (char)cp;
    else if (cp < 0x800) {
        o[(*k)++] = (char)(0xC0 | (cp >> 6));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xE0 | (cp >> 12));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*k)++] = (char)(0xF0 | (cp >> 18));
        o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes a Python escape at s[i] (just after the backslash) into o; returns chars consumed,
 * 0 when it is not an escape (the backslash stays), SIZE_MAX for a malformed \x \u \U one. */
static size_t lex_escape(const char *s, size_t i, size_t end, char *o, size_t *k)
{
    static const char from[] = "nrtabfv\\'\"", to[] = "\n\r\t\a\b\f\v\\'\"";
    char c = s[i];
    const char *f = strchr(from, c);
    if (c && f) {
        o[(*k)++] = to[f - from];
        return 1;
    }
    if (c == '\n') return 1;
    if (c >= '0' && c <= '7') {
        uint32_t v = 0;
        size_t j = 0;
        while (j < 3 && i + j < end && s[i + j] >= '0' && s[i + j] <= '7') v = v * 8 + (uint32_t)(s[i + j++] - '0');
        put_utf8(o, k, v);
        return j;
    }
    size_t w = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (!w) return 0;
    if (i + w >= end) return SIZE_MAX; /* Python: a truncated \xXX escape is an error */
    uint32_t v = 0;
    for (size_t j = 1; j <= w; j++) {
        int h = hexval(s[i + j]);
        if (h < 0) return SIZE_MAX;
        v = v * 16 + (uint32_t)h;
    }
    if (v > 0x10FFFF) return SIZE_MAX;
    put_utf8(o, k, v);
    return w + 1;
}

static void lex_string(struct lexer *L)
{
    const char *s = L->s;
    char q = s[L->pos];
    size_t i = L->pos + 1;
    while (i < L->n && s[i] != q) i += s[i] == '\\' && i + 1 < L->n ? 2 : 1;
    if (i >= L->n) {
        lex_fail(L, "unterminated string");
        return;
    }
    char *o = ar_alloc(L->a, i - L->pos + 1);
    if (!o) {
        lex_fail(L, "out of memory");
        return;
    }
    size_t k = 0;
    for (size_t j = L->pos + 1; j < i;) {
        if (s[j] == '\\') {
            size_t used = lex_escape(s, j + 1, i, o, &k);
            if (used == SIZE_MAX) {
                lex_fail(L, "truncated \\%c escape", s[j + 1]);
                return;
            }
            if (used) {
                j += 1 + used;
                continue;
            }
        }
        o[k++] = s[j++];
    }
    o[k] = 0;
    lex_push(L, T_STR, o, k);
    lex_count_lines(L, L->pos, i);
    L->pos = i + 1;
}

static void lex_number(struct lexer *L)
{
    const char *s = L->s;
    size_t i = L->pos;
    char buf[64];
    size_t k = 0;
    bool flt = false;
    while (i < L->n && (is_digit(s[i]) || (s[i] == '_' && i + 1 < L->n && is_digit(s[i + 1])))) {
        if (s[i] != '_' && k < sizeof buf - 8) buf[k++] = s[i];
        i++;
    }
    if (i + 1 < L->n && s[i] == '.' && is_digit(s[i + 1])) {
        flt = true;
        buf[k++] = s[i++];
        while (i < L->n && (is_digit(s[i]) || s[i] == '_'))
            if (s[i++] != '_' && k < sizeof buf - 8) buf[k++] = s[i - 1];
    }
    if (i < L->n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (s[j] == '+' || s[j] == '-')) j++;
        if (j < L->n && is_digit(s[j])) {
            flt = true;
            while (i < j) buf[k++] = s[i++];
            while (i < L->n && is_digit(s[i]))
                if (k < sizeof buf - 1) buf[k++] = s[i++];
                else i++;
        }
    }
    buf[k] = 0;
    struct tok *t = lex_push(L, flt ? T_FLOAT : T_INT, s + L->pos, i - L->pos);
    if (t && flt) t->f = strtod(buf, NULL);
    if (t && !flt) {
        errno = 0;
        unsigned long long u = strtoull(buf, NULL, 10);
        if (errno || u > INT64_MAX) lex_fail(L, "integer literal too large");
        t->i = (int64_t)u;
    }
    L->pos = i;
}

/* Tokens of one tag, up to its end marker ("}}" or "%}"); block: true for {% %}. Returns the
 * position after the end marker and its whitespace handling, or fails. */
static void lex_tag(struct lexer *L, bool block)
{
    static const char *const ops2[] = {"//", "**", "==", "!=", ">=", "<="};
    const char *s = L->s;
    int balance = 0;
    char endc = block ? '%' : '}';
    for (;;) {
        while (L->pos < L->n && is_sp(s[L->pos])) {
            if (s[L->pos] == '\n') L->line++;
            L->pos++;
        }
        if (L->pos >= L->n) {
            lex_fail(L, "unexpected end of template: a tag is not closed");
            return;
        }
        size_t p = L->pos, rest = L->n - p;
        if (!balance) {
            bool minus = rest >= 3 && s[p] == '-' && s[p + 1] == endc && s[p + 2] == '}';
            bool plus = block && rest >= 3 && s[p] == '+' && s[p + 1] == endc && s[p + 2] == '}';
            bool plain = rest >= 2 && s[p] == endc && s[p + 1] == '}';
            if (minus || plus || plain) {
                lex_push(L, block ? T_BEND : T_VEND, NULL, 0);
                L->pos += plain ? 2 : 3;
                if (minus) {
                    while (L->pos < L->n && is_sp(s[L->pos])) {
                        if (s[L->pos] == '\n') L->line++;
                        L->pos++;
                    }
                } else if (plain && block && L->pos < L->n && s[L->pos] == '\n') {
                    L->pos++; /* trim_blocks */
                    L->line++;
                }
                return;
            }
        }
        char c = s[p];
        if (c == '\'' || c == '"') {
            lex_string(L);
        } else if (is_digit(c)) {
            lex_number(L);
        } else if (is_alpha(c)) {
            size_t e = p;
            while (e < L->n && (is_alpha(s[e]) || is_digit(s[e]))) e++;
            lex_push(L, T_NAME, s + p, e - p);
            L->pos = e;
        } else {
            size_t w = 0;
            for (size_t k = 0; k < sizeof ops2 / sizeof *ops2 && rest >= 2; k++)
                if (s[p] == ops2[k][0] && s[p + 1] == ops2[k][1]) w = 2;
            if (!w && strchr("+-/*%~[](){}><=.:|,;", c) && c) w = 1;
            if (!w) {
                lex_fail(L, "unexpected character '%c'", c);
                return;
            }
            if (c == '(' || c == '[' || c == '{') balance++;
            if ((c == ')' || c == ']' || c == '}') && balance > 0) balance--;
            lex_push(L, T_OP, s + p, w);
            L->pos += w;
        }
        if (L->failed) return;
    }
}

static bool line_starting_at(const struct lexer *L, size_t pos) { return pos == 0 || L->s[pos - 1] == '\n'; }

/* Text from L->pos up to the tag at i, with lstrip_blocks / `-` applied; then the tag. */
/* The end of the whitespace-then-word w at s[p] (w followed by a space, '-' or '%'), or 0. */
static size_t word_at(const struct lexer *L, size_t p, const char *w)
{
    while (p < L->n && is_sp(L->s[p])) p++;
    size_t n = strlen(w);
    if (p + n > L->n || memcmp(L->s + p, w, n)) return 0;
    p += n;
    return p < L->n && (is_sp(L->s[p]) || L->s[p] == '-' || L->s[p] == '%') ? p : 0;
}

/* The end of a tag's closing `%}` / `-%}` (minus: with the whitespace after it) from s[p]
 * (spaces first), or 0. */
static size_t tag_end_at(const struct lexer *L, size_t p, bool *minus, bool *plus)
{
    while (p < L->n && is_sp(L->s[p])) p++;
    *plus = p + 2 < L->n && L->s[p] == '+' && L->s[p + 1] == '%' && L->s[p + 2] == '}';
    *minus = p + 2 < L->n && L->s[p] == '-' && L->s[p + 1] == '%' && L->s[p + 2] == '}';
    if (*minus || *plus) p += 3;
    else if (p + 1 < L->n && L->s[p] == '%' && L->s[p + 1] == '}') p += 2;
    else return 0;
    if (*minus)
        while (p < L->n && is_sp(L->s[p])) p++;
    return p;
}

/* {% raw %}...{% endraw %} from L->pos (just past `{%` and its control sign): the text as it
 * is, with jinja2's whitespace rules at both ends. Returns false when this is no raw tag. */
static bool lex_raw(struct lexer *L)
{
    const char *s = L->s;
    bool minus, plus;
    size_t p = word_at(L, L->pos, "raw"), start = p ? tag_end_at(L, p, &minus, &plus) : 0;
    if (!start || plus) return false; /* jinja2's raw begin takes `%}` or `-%}` only */
    for (size_t i = start; i + 1 < L->n; i++) {
        if (s[i] != '{' || s[i + 1] != '%') continue;
        char ctl = i + 2 < L->n ? s[i + 2] : 0;
        size_t w = word_at(L, i + 2 + (ctl == '-' || ctl == '+'), "endraw"), end = w ? tag_end_at(L, w, &minus, &plus) : 0;
        if (!end) continue;
        size_t te = i, l = i;
        if (ctl == '-') {
            while (te > start && is_sp(s[te - 1])) te--;
        } else if (ctl != '+') { /* lstrip_blocks */
            while (l > start && (s[l - 1] == ' ' || s[l - 1] == '\t')) l--;
            if (l > start && s[l - 1] == '\n') te = l;
        }
        if (te > start) lex_push(L, T_TEXT, s + start, te - start);
        if (!minus && !plus && end < L->n && s[end] == '\n') end++; /* trim_blocks */
        lex_count_lines(L, L->pos, end);
        L->pos = end;
        return true;
    }
    lex_fail(L, "unexpected end of template: expected {%% endraw %%}");
    return true;
}

static void lex_text_then_tag(struct lexer *L, size_t i, bool line_starting)
{
    const char *s = L->s;
    char kind = s[i + 1], ctl = i + 2 < L->n ? s[i + 2] : 0;
    size_t te = i;
    if (ctl == '-') {
        while (te > L->pos && is_sp(s[te - 1])) te--;
    } else if (ctl != '+' && kind != '{') {
        size_t l = te;
        while (l > L->pos && (s[l - 1] == ' ' || s[l - 1] == '\t')) l--;
        bool at_nl = l > L->pos ? s[l - 1] == '\n' : line_starting;
        if (at_nl) te = l;
    }
    if (te > L->pos) lex_push(L, T_TEXT, s + L->pos, te - L->pos);
    lex_count_lines(L, L->pos, i);
    L->pos = i + 2 + (ctl == '-' || ctl == '+');
    if (kind == '#') {
        const char *e = L->pos <= L->n ? memmem(s + L->pos, L->n - L->pos, "#}", 2) : NULL;
        if (!e) {
            lex_fail(L, "unclosed comment");
            return;
        }
        size_t j = (size_t)(e - s);
        bool minus = j > L->pos && s[j - 1] == '-', plus = j > L->pos && s[j - 1] == '+';
        lex_count_lines(L, L->pos, j);
        L->pos = j + 2;
        if (minus)
            while (L->pos < L->n && is_sp(s[L->pos])) L->line += s[L->pos++] == '\n';
        else if (!plus && L->pos < L->n && s[L->pos] == '\n') L->pos++, L->line++;
        return;
    }
    if (kind == '%' && lex_raw(L)) return;
    lex_push(L, kind == '%' ? T_BBEGIN : T_VBEGIN, NULL, 0);
    lex_tag(L, kind == '%');
}

static void lex_all(struct lexer *L)
{
    const char *s = L->s;
    bool line_starting = true;
    while (L->pos < L->n && !L->failed) {
        size_t i = L->pos;
        while (i + 1 < L->n && !(s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#'))) i++;
        if (i + 1 >= L->n) {
            lex_push(L, T_TEXT, s + L->pos, L->n - L->pos);
            break;
        }
        lex_text_then_tag(L, i, line_starting);
        line_starting = line_starting_at(L, L->pos);
    }
    lex_push(L, T_EOF, NULL, 0);
}

/* Copies src with "\r\n" and "\r" turned into "\n" and one trailing newline dropped. */
static char *normalise(struct arena *a, const char *src, size_t len, size_t *out_n)
{
    char *o = ar_alloc(a, len + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            o[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            o[k++] = src[i];
        }
    }
    if (k && o[k - 1] == '\n') k--;
    o[k] = 0;
    *out_n = k;
    return o;
}

/* =============================================================================================
 * Parser
 * =========================================================================================== */

struct parser {
    const struct tok *t;
    size_t i, n;
    struct arena *a;
    char *err;
    size_t errlen;
    bool failed;
    int depth;
    bool soft;           /* inside an if or an inline if, where jinja2 lets unknown filters pass */
    int n_unknown;       /* unknown filter / test names outside such places: a syntax error at the end */
    char unknown[160];   /* the first one's message */
};

static void p_fail(struct parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void p_fail(struct parser *P, const char *fmt, ...)
{
    if (P->failed) return;
    P->failed = true;
    int k = snprintf(P->err, P->errlen, "line %d: ", P->t[P->i < P->n ? P->i : P->n - 1].line);
    if (k < 0 || (size_t)k >= P->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->err + k, P->errlen - (size_t)k, fmt, ap);
    va_end(ap);
}

static const struct tok *cur(const struct parser *P) { return &P->t[P->i]; }
static void adv(struct parser *P)
{
    if (P->t[P->i].t != T_EOF) P->i++;
}

static bool tok_is(const struct tok *t, int type, const char *s)
{
    return t->t == type && (!s || (t->n == strlen(s) && !memcmp(t->p, s, t->n)));
}
static bool is_op(const struct parser *P, const char *s) { return tok_is(cur(P), T_OP, s); }
static bool is_name(const struct parser *P, const char *s) { return tok_is(cur(P), T_NAME, s); }
static bool accept_op(struct parser *P, const char *s)
{
    if (!is_op(P, s)) return false;
    adv(P);
    return true;
}
static bool accept_name(struct parser *P, const char *s)
{
    if (!is_name(P, s)) return false;
    adv(P);
    return true;
}
static bool expect_op(struct parser *P, const char *s)
{
    if (accept_op(P, s)) return true;
    p_fail(P, "expected '%s'", s);
    return false;
}

static void *p_alloc(struct parser *P, size_t n)
{
    void *p = ar_alloc(P->a, n);
    if (!p) p_fail(P, "out of memory");
    else memset(p, 0, n);
    return p;
}

static struct expr *mk(struct parser *P, int k)
{
    struct expr *e = p_alloc(P, sizeof *e);
    if (e) {
        e->k = k;
        e->line = cur(P)->line;
    }
    return e;
}

static bool p_enter(struct parser *P)
{
    if (++P->depth > PARSE_MAX_DEPTH) {
        p_fail(P, "the template nests deeper than %d", PARSE_MAX_DEPTH);
        return false;
    }
    return !P->failed;
}

static struct expr *p_expr(struct parser *P);
static struct expr *p_or(struct parser *P);
static struct expr *p_unary(struct parser *P, bool with_filter);
static struct expr *p_primary(struct parser *P);
static struct expr *p_postfix(struct parser *P, struct expr *e);

/* Growable array of call arguments. */
struct argv_b {
    struct arg *v;
    int n, cap;
};

static bool args_push(struct parser *P, struct argv_b *b, const char *kw, size_t kwn, struct expr *e)
{
    if (!e) return false;
    if (b->n == b->cap) {
        int nc = b->cap ? b->cap * 2 : 4;
        struct arg *t = p_alloc(P, (size_t)nc * sizeof *t);
        if (!t) return false;
        if (b->n) memcpy(t, b->v, (size_t)b->n * sizeof *t);
        b->v = t;
        b->cap = nc;
    }
    b->v[b->n++] = (struct arg){kw, kwn, e};
    return true;
}

/* (args) after the opening parenthesis was consumed: positional and name=value. */
static bool p_call_args(struct parser *P, struct expr *e)
{
    struct argv_b b = {0};
    while (!is_op(P, ")")) {
        if (b.n && !expect_op(P, ",")) return false;
        if (is_op(P, ")")) break;
        const struct tok *t = cur(P);
        if (t->t == T_NAME && tok_is(&P->t[P->i + 1], T_OP, "=")) {
            adv(P);
            adv(P);
            if (!args_push(P, &b, t->p, t->n, p_expr(P))) return false;
        } else if (!args_push(P, &b, NULL, 0, p_expr(P))) {
            return false;
        }
    }
    adv(P);
    e->args = b.v;
    e->nargs = b.n;
    return true;
}

/* [a], [a:b], [a:b:c] after '[' */
static struct expr *p_subscript(struct parser *P, struct expr *obj)
{
    struct expr *parts[3] = {0};
    int np = 0;
    bool slice = false;
    for (;;) {
        if (is_op(P, ":")) {
            slice = true;
            adv(P);
            if (++np > 2) {
                p_fail(P, "bad slice");
                return NULL;
            }
            continue;
        }
        if (is_op(P, "]")) break;
        if (parts[np]) {
            p_fail(P, "expected ']'");
            return NULL;
        }
        if (!(parts[np] = p_expr(P))) return NULL;
    }
    adv(P);
    struct expr *e = mk(P, slice ? E_SLICE : E_ITEM);
    if (!e) return NULL;
    e->a = obj;
    if (slice) {
        e->b = parts[0];
        e->c = parts[1];
        e->d = parts[2];
    } else if (!(e->b = parts[0])) {
        p_fail(P, "empty subscript");
        return NULL;
    }
    return e;
}

static struct expr *p_postfix(struct parser *P, struct expr *e)
{
    while (e && !P->failed) {
        if (accept_op(P, ".")) {
            const struct tok *t = cur(P);
            struct expr *x = mk(P, t->t == T_INT ? E_ITEM : E_ATTR);
            if (!x) return NULL;
            x->a = e;
            if (t->t == T_INT) {
                struct expr *c = mk(P, E_CONST);
                if (!c) return NULL;
                c->cst = vint(t->i);
                x->b = c;
            } else if (t->t == T_NAME) {
                x->name = t->p;
                x->nname = t->n;
            } else {
                p_fail(P, "expected an attribute name after '.'");
                return NULL;
            }
            adv(P);
            e = x;
        } else if (accept_op(P, "[")) {
            e = p_subscript(P, e);
        } else if (accept_op(P, "(")) {
            struct expr *x = mk(P, E_CALL);
            if (!x) return NULL;
            x->a = e;
            if (!p_call_args(P, x)) return NULL;
            e = x;
        } else {
            break;
        }
    }
    return P->failed ? NULL : e;
}

static const char *const k_filters[] = {
    "tojson", "length", "count", "default", "d", "items", "list", "string", "safe", "e", "escape", "first", "last",
    "int", "float", "join", "map", "select", "reject", "selectattr", "rejectattr", "sort", "unique", "indent", "trim",
    "lower", "upper", "title", "capitalize", "replace", "reverse", "abs", "wordcount", "center", "sum", "max", "min",
    "round", "attr", "dictsort", "format", "batch", "truncate", "slice", "pprint", "forceescape", NULL};
static const char *const k_tests[] = {
    "defined", "undefined", "none", "string", "mapping", "sequence", "iterable", "number", "integer", "float",
    "boolean", "true", "false", "callable", "lower", "upper", "odd", "even", "divisibleby", "equalto", "eq", "==",
    "ne", "!=", "sameas", "in", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", NULL};

static bool known(const char *const *names, const char *s, size_t n)
{
    for (; *names; names++)
        if (strlen(*names) == n && !memcmp(*names, s, n)) return true;
    return false;
}

/* name, name(args) or name arg after `|` or `is`; kind E_FILTER or E_TEST. */
static struct expr *p_filter_or_test(struct parser *P, struct expr *in, int kind, bool neg)
{
    const struct tok *t = cur(P);
    if (t->t != T_NAME) {
        p_fail(P, "expected a %s name", kind == E_FILTER ? "filter" : "test");
        return NULL;
    }
    /* jinja2 refuses an unknown name when it compiles the template, except inside an if or an
     * inline if, where it fails only if that branch runs (apply_filter / apply_test do that) */
    if (!known(kind == E_FILTER ? k_filters : k_tests, t->p, t->n) && !P->soft && !P->n_unknown++)
        snprintf(P->unknown, sizeof P->unknown, "line %d: TemplateAssertionError: No %s named '%.*s'.", t->line,
                 kind == E_FILTER ? "filter" : "test", (int)(t->n > 64 ? 64 : t->n), t->p);
    struct expr *e = mk(P, kind);
    if (!e) return NULL;
    e->a = in;
    e->neg = neg;
    e->name = t->p;
    e->nname = t->n;
    adv(P);
    if (accept_op(P, "(")) {
        if (!p_call_args(P, e)) return NULL;
    } else if (kind == E_TEST) {
        const struct tok *a = cur(P);
        /* as jinja2: a name, a literal or a bracket after the test is its one argument, but for
         * else / or / and (so `x is defined if y` reads `if` as the argument, and fails) */
        bool arg = a->t == T_STR || a->t == T_INT || a->t == T_FLOAT || tok_is(a, T_OP, "[") || tok_is(a, T_OP, "{") ||
                   tok_is(a, T_OP, "(") ||
                   (a->t == T_NAME && !tok_is(a, T_NAME, "else") && !tok_is(a, T_NAME, "or") && !tok_is(a, T_NAME, "and"));
        if (tok_is(a, T_NAME, "is")) {
            p_fail(P, "You cannot chain multiple tests with is");
            return NULL;
        }
        if (arg) {
            struct argv_b b = {0};
            if (!args_push(P, &b, NULL, 0, p_postfix(P, p_primary(P)))) return NULL;
            e->args = b.v;
            e->nargs = b.n;
        }
    }
    return e;
}

static struct expr *p_filter_expr(struct parser *P, struct expr *e)
{
    while (e && !P->failed) {
        if (accept_op(P, "|")) {
            e = p_filter_or_test(P, e, E_FILTER, false);
        } else if (accept_name(P, "is")) {
            bool neg = accept_name(P, "not");
            e = p_filter_or_test(P, e, E_TEST, neg);
        } else if (accept_op(P, "(")) {
            struct expr *x = mk(P, E_CALL);
            if (!x) return NULL;
            x->a = e;
            if (!p_call_args(P, x)) return NULL;
            e = x;
        } else {
            break;
        }
    }
    return e;
}

static struct expr *p_unary(struct parser *P, bool with_filter)
{
    if (!p_enter(P)) return NULL;
    struct expr *e;
    if (is_op(P, "-") || is_op(P, "+")) {
        e = mk(P, is_op(P, "-") ? E_NEG : E_POS);
        adv(P);
        if (e && !(e->a = p_unary(P, false))) e = NULL;
    } else {
        e = p_primary(P);
    }
    e = p_postfix(P, e);
    if (with_filter) e = p_filter_expr(P, e);
    P->depth--;
    return e;
}

/* A list / tuple / dict literal's items after the opening bracket, up to close. */
static struct expr *p_seq(struct parser *P, int kind, const char *close)
{
    struct expr *e = mk(P, kind);
    struct argv_b b = {0};
    if (!e) return NULL;
    while (!is_op(P, close)) {
        if (b.n && !expect_op(P, ",")) return NULL;
        if (is_op(P, close)) break;
        if (!args_push(P, &b, NULL, 0, p_expr(P))) return NULL;
        if (kind == E_DICT && (!expect_op(P, ":") || !args_push(P, &b, NULL, 0, p_expr(P)))) return NULL;
    }
    adv(P);
    e->args = b.v;
    e->nargs = b.n;
    return e;
}

static struct expr *p_const_name(struct parser *P, const struct tok *t)
{
    static const char *const names[] = {"true", "True", "false", "False", "none", "None"};
    for (int k = 0; k < 6; k++)
        if (tok_is(t, T_NAME, names[k])) {
            struct expr *e = mk(P, E_CONST);
            if (e) e->cst = k < 4 ? vbool(k < 2) : NONE;
            adv(P);
            return e;
        }
    struct expr *e = mk(P, E_NAME);
    if (e) {
        e->name = t->p;
        e->nname = t->n;
    }
    adv(P);
    return e;
}

static struct expr *p_primary(struct parser *P)
{
    const struct tok *t = cur(P);
    if (P->failed) return NULL;
    if (t->t == T_NAME) return p_const_name(P, t);
    if (t->t == T_STR) { /* adjacent strings concatenate */
        size_t n = 0, j = P->i;
        while (P->t[j].t == T_STR) n += P->t[j++].n;
        char *s = p_alloc(P, n + 1);
        struct expr *e = mk(P, E_CONST);
        if (!s || !e) return NULL;
        n = 0;
        while (cur(P)->t == T_STR) {
            memcpy(s + n, cur(P)->p, cur(P)->n);
            n += cur(P)->n;
            adv(P);
        }
        e->cst = vlit(s, n);
        return e;
    }
    if (t->t == T_INT || t->t == T_FLOAT) {
        struct expr *e = mk(P, E_CONST);
        if (e) e->cst = t->t == T_INT ? vint(t->i) : vfloat(t->f);
        adv(P);
        return e;
    }
    if (accept_op(P, "(")) {
        if (accept_op(P, ")")) return mk(P, E_TUPLE);
        struct expr *first = p_expr(P);
        if (!first || accept_op(P, ")")) return first;
        struct expr *e = mk(P, E_TUPLE);
        struct argv_b b = {0};
        if (!e || !args_push(P, &b, NULL, 0, first)) return NULL;
        while (accept_op(P, ",") && !is_op(P, ")"))
            if (!args_push(P, &b, NULL, 0, p_expr(P))) return NULL;
        if (!expect_op(P, ")")) return NULL;
        e->args = b.v;
        e->nargs = b.n;
        return e;
    }
    if (accept_op(P, "[")) return p_seq(P, E_LIST, "]");
    if (accept_op(P, "{")) return p_seq(P, E_DICT, "}");
    p_fail(P, "unexpected %s", t->t == T_OP ? "operator" : t->t == T_VEND || t->t == T_BEND ? "end of tag" : "token");
    return NULL;
}

static struct expr *bin(struct parser *P, int kind, int op, struct expr *a, struct expr *b)
{
    if (!a || !b) return NULL;
    struct expr *e = mk(P, kind);
    if (e) {
        e->op = op;
        e->a = a;
        e->b = b;
    }
    return e;
}

static struct expr *p_pow(struct parser *P)
{
    struct expr *e = p_unary(P, true);
    while (e && accept_op(P, "**")) e = bin(P, E_BIN, B_POW, e, p_unary(P, true));
    return e;
}

static struct expr *p_math2(struct parser *P)
{
    struct expr *e = p_pow(P);
    for (;;) {
        int op = is_op(P, "*") ? B_MUL : is_op(P, "/") ? B_DIV : is_op(P, "//") ? B_FDIV : is_op(P, "%") ? B_MOD : -1;
        if (op < 0 || !e) return e;
        adv(P);
        e = bin(P, E_BIN, op, e, p_pow(P));
    }
}

static struct expr *p_concat(struct parser *P)
{
    struct expr *e = p_math2(P);
    while (e && accept_op(P, "~")) e = bin(P, E_CONCAT, 0, e, p_math2(P));
    return e;
}

static struct expr *p_math1(struct parser *P)
{
    struct expr *e = p_concat(P);
    for (;;) {
        int op = is_op(P, "+") ? B_ADD : is_op(P, "-") ? B_SUB : -1;
        if (op < 0 || !e) return e;
        adv(P);
        e = bin(P, E_BIN, op, e, p_concat(P));
    }
}

static struct expr *p_compare(struct parser *P)
{
    static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
    struct expr *e = p_math1(P), *last = NULL; /* last: the previous comparison of a chain */
    while (e) {
        int op = -1;
        for (int k = 0; k < 6; k++)
            if (is_op(P, ops[k])) op = k;
        if (op >= 0) { /* a < b < c is (a < b) and (b < c), as in Python */
            adv(P);
            struct expr *c = bin(P, E_CMP, op, last ? last->b : e, p_math1(P));
            e = last ? bin(P, E_AND, 0, e, c) : c;
            last = c;
        } else if (accept_name(P, "in")) {
            e = bin(P, E_IN, 0, e, p_math1(P));
        } else if (is_name(P, "not") && tok_is(&P->t[P->i + 1], T_NAME, "in")) {
            adv(P);
            adv(P);
            if ((e = bin(P, E_IN, 0, e, p_math1(P)))) e->neg = true;
        } else {
            break;
        }
    }
    return e;
}

static struct expr *p_not(struct parser *P)
{
    if (!is_name(P, "not")) return p_compare(P);
    if (!p_enter(P)) return NULL;
    adv(P);
    struct expr *e = mk(P, E_NOT);
    if (e && !(e->a = p_not(P))) e = NULL;
    P->depth--;
    return e;
}

static struct expr *p_and(struct parser *P)
{
    struct expr *e = p_not(P);
    while (e && accept_name(P, "and")) e = bin(P, E_AND, 0, e, p_not(P));
    return e;
}

static struct expr *p_or(struct parser *P)
{
    struct expr *e = p_and(P);
    while (e && accept_name(P, "or")) e = bin(P, E_OR, 0, e, p_and(P));
    return e;
}

/* The conditional expression: a if b [else c]. */
static struct expr *p_expr(struct parser *P)
{
    if (!p_enter(P)) return NULL;
    int mark = P->n_unknown;
    struct expr *e = p_or(P);
    while (e && accept_name(P, "if")) {
        struct expr *c = mk(P, E_COND);
        if (!c) return NULL;
        c->a = e;
        bool soft = P->soft;
        P->n_unknown = mark; /* all of an inline if is soft in jinja2: what its first part named is forgiven */
        P->soft = true;
        c->b = p_or(P);
        if (c->b && accept_name(P, "else")) c->c = p_expr(P);
        P->soft = soft;
        if (!c->b || P->failed) return NULL;
        e = c;
    }
    P->depth--;
    return e;
}

/* An expression, or a tuple of them without parentheses (as `{{ a, b }}` and set's values). */
static struct expr *p_tuple_expr(struct parser *P)
{
    struct expr *first = p_expr(P);
    if (!first || !is_op(P, ",")) return first;
    struct expr *e = mk(P, E_TUPLE);
    struct argv_b b = {0};
    if (!e || !args_push(P, &b, NULL, 0, first)) return NULL;
    while (accept_op(P, ",")) {
        if (cur(P)->t == T_BEND || cur(P)->t == T_VEND) break;
        if (!args_push(P, &b, NULL, 0, p_expr(P))) return NULL;
    }
    e->args = b.v;
    e->nargs = b.n;
    return e;
}

/* ---- statements ---------------------------------------------------------------------------- */

static struct node *p_body(struct parser *P, const char *const *ends);

/* The body of a for, macro, call, filter, generation or block set: a frame of its own in jinja2,
 * so not soft even inside an if. */
static struct node *p_inner_body(struct parser *P, const char *const *ends)
{
    bool soft = P->soft;
    P->soft = false;
    struct node *b = p_body(P, ends);
    P->soft = soft;
    return b;
}

static struct node *mknode(struct parser *P, int k)
{
    struct node *n = p_alloc(P, sizeof *n);
    if (n) {
        n->k = k;
        n->line = cur(P)->line;
    }
    return n;
}

static bool expect_bend(struct parser *P)
{
    if (cur(P)->t == T_BEND) {
        adv(P);
        return true;
    }
    p_fail(P, "expected the end of the block tag");
    return false;
}

/* After p_body stopped at `{% NAME`: consumes NAME and the tag end. */
static bool p_end_tag(struct parser *P, const char *name)
{
    if (!accept_name(P, name)) {
        p_fail(P, "expected {%% %s %%}", name);
        return false;
    }
    return expect_bend(P);
}

/* A name, `a, b` or `ns.attr` as an assignment or loop target. */
static struct expr *p_target(struct parser *P, bool allow_attr)
{
    struct argv_b b = {0};
    bool paren = accept_op(P, "(");
    for (;;) {
        const struct tok *t = cur(P);
        if (t->t != T_NAME) {
            p_fail(P, "expected a name to assign to");
            return NULL;
        }
        struct expr *e = mk(P, E_NAME);
        if (!e) return NULL;
        e->name = t->p;
        e->nname = t->n;
        adv(P);
        if (allow_attr && !b.n && accept_op(P, ".")) {
            struct expr *x = mk(P, E_ATTR);
            if (!x || cur(P)->t != T_NAME) {
                p_fail(P, "expected an attribute name");
                return NULL;
            }
            x->a = e;
            x->name = cur(P)->p;
            x->nname = cur(P)->n;
            adv(P);
            return x;
        }
        if (!args_push(P, &b, NULL, 0, e)) return NULL;
        if (!accept_op(P, ",")) break;
    }
    if (paren && !expect_op(P, ")")) return NULL;
    if (b.n == 1 && !paren) return b.v[0].e;
    struct expr *tu = mk(P, E_TUPLE);
    if (!tu) return NULL;
    tu->args = b.v;
    tu->nargs = b.n;
    return tu;
}

static struct node *p_if_soft(struct parser *P);

/* An if statement: its test and branches are soft (see struct parser). */
static struct node *p_if(struct parser *P)
{
    bool soft = P->soft;
    P->soft = true;
    struct node *n = p_if_soft(P);
    P->soft = soft;
    return n;
}

static struct node *p_if_soft(struct parser *P)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    struct node *n = mknode(P, S_IF);
    if (!n || !(n->e = p_expr(P)) || !expect_bend(P) || !(n->body = p_body(P, ends)) || P->failed) return NULL;
    if (n->body == (struct node *)P) n->body = NULL;
    if (accept_name(P, "elif")) {
        if (!(n->alt = p_if_soft(P))) return NULL;
        return n;
    }
    if (accept_name(P, "else")) {
        static const char *const ends2[] = {"endif", NULL};
        if (!expect_bend(P) || !(n->alt = p_body(P, ends2))) return NULL;
        if (n->alt == (struct node *)P) n->alt = NULL;
    }
    return p_end_tag(P, "endif") ? n : NULL;
}

static struct node *p_for(struct parser *P)
{
    static const char *const ends[] = {"else", "endfor", NULL}, *const ends2[] = {"endfor", NULL};
    struct node *n = mknode(P, S_FOR);
    if (!n || !(n->tgt = p_target(P, false))) return NULL;
    if (!accept_name(P, "in")) {
        p_fail(P, "expected 'in'");
        return NULL;
    }
    if (!(n->e = p_tuple_expr(P))) return NULL;
    /* the iterable is parsed without the conditional, as jinja2 does */
    if (n->e->k == E_COND && !n->e->c) {
        n->cond = n->e->b;
        n->e = n->e->a;
    } else if (accept_name(P, "if") && !(n->cond = p_expr(P))) {
        return NULL;
    }
    if (accept_name(P, "recursive")) {
        p_fail(P, "recursive loops are not supported");
        return NULL;
    }
    if (!expect_bend(P) || !(n->body = p_inner_body(P, ends))) return NULL;
    if (n->body == (struct node *)P) n->body = NULL;
    if (accept_name(P, "else")) {
        if (!expect_bend(P) || !(n->alt = p_inner_body(P, ends2))) return NULL;
        if (n->alt == (struct node *)P) n->alt = NULL;
    }
    return p_end_tag(P, "endfor") ? n : NULL;
}

/* Filters of `{% filter a|b(x) %}` or `{% set x | f %}`: a chain whose innermost input is NULL. */
static struct expr *p_filter_chain(struct parser *P)
{
    struct expr *e = p_filter_or_test(P, NULL, E_FILTER, false);
    while (e && accept_op(P, "|")) e = p_filter_or_test(P, e, E_FILTER, false);
    return e;
}

static struct node *p_set(struct parser *P)
{
    static const char *const ends[] = {"endset", NULL};
    struct node *n = mknode(P, S_SET);
    if (!n || !(n->tgt = p_target(P, true))) return NULL;
    if (accept_op(P, "=")) {
        if (!(n->e = p_tuple_expr(P))) return NULL;
        return expect_bend(P) ? n : NULL;
    }
    n->k = S_SETBLOCK;
    if (n->tgt->k != E_NAME && n->tgt->k != E_ATTR) {
        p_fail(P, "a block set takes one name");
        return NULL;
    }
    if (accept_op(P, "|") && !(n->filt = p_filter_chain(P))) return NULL;
    if (!expect_bend(P) || !(n->body = p_inner_body(P, ends))) return NULL;
    if (n->body == (struct node *)P) n->body = NULL;
    return p_end_tag(P, "endset") ? n : NULL;
}

/* (a, b=default, ...) of a macro or a call block's caller. */
static bool p_params(struct parser *P, struct node *n)
{
    int cap = 0;
    if (!accept_op(P, "(")) return true;
    while (!accept_op(P, ")")) {
        if (n->nparams && !expect_op(P, ",")) return false;
        if (accept_op(P, ")")) break;
        if (cur(P)->t != T_NAME) {
            p_fail(P, "expected a parameter name");
            return false;
        }
        if (n->nparams == cap) {
            cap = cap ? cap * 2 : 4;
            struct param *t = p_alloc(P, (size_t)cap * sizeof *t);
            if (!t) return false;
            if (n->nparams) memcpy(t, n->params, (size_t)n->nparams * sizeof *t);
            n->params = t;
        }
        struct param *pp = &n->params[n->nparams++];
        pp->name = cur(P)->p;
        pp->n = cur(P)->n;
        adv(P);
        if (accept_op(P, "=") && !(pp->def = p_expr(P))) return false;
    }
    return true;
}

static struct node *p_macro(struct parser *P)
{
    static const char *const ends[] = {"endmacro", NULL};
    struct node *n = mknode(P, S_MACRO);
    if (!n) return NULL;
    if (cur(P)->t != T_NAME) {
        p_fail(P, "expected a macro name");
        return NULL;
    }
    n->text = cur(P)->p;
    n->len = cur(P)->n;
    adv(P);
    if (!p_params(P, n) || !expect_bend(P) || !(n->body = p_inner_body(P, ends))) return NULL;
    if (n->body == (struct node *)P) n->body = NULL;
    if (!accept_name(P, "endmacro")) {
        p_fail(P, "expected {%% endmacro %%}");
        return NULL;
    }
    if (cur(P)->t == T_NAME) adv(P); /* {% endmacro name %} */
    return expect_bend(P) ? n : NULL;
}

static struct node *p_call_block(struct parser *P)
{
    static const char *const ends[] = {"endcall", NULL};
    struct node *n = mknode(P, S_CALLBLOCK);
    if (!n) return NULL;
    if (is_op(P, "(") && !p_params(P, n)) return NULL;
    if (!(n->e = p_expr(P))) return NULL;
    if (n->e->k != E_CALL) {
        p_fail(P, "expected a call");
        return NULL;
    }
    if (!expect_bend(P) || !(n->body = p_inner_body(P, ends))) return NULL;
    if (n->body == (struct node *)P) n->body = NULL;
    return p_end_tag(P, "endcall") ? n : NULL;
}

static struct node *p_simple_block(struct parser *P, int kind, const char *end)
{
    const char *ends[] = {end, NULL};
    struct node *n = mknode(P, kind);
    if (!n) return NULL;
    if (kind == S_FILTER && !(n->filt = p_filter_chain(P))) return NULL;
    if (!expect_bend(P) || !(n->body = p_inner_body(P, ends))) return NULL;
    if (n->body == (struct node *)P) n->body = NULL;
    return p_end_tag(P, end) ? n : NULL;
}

/* One statement after `{%`. */
static struct node *p_stmt(struct parser *P)
{
    const struct tok *t = cur(P);
    if (t->t != T_NAME) {
        p_fail(P, "expected a statement name");
        return NULL;
    }
    adv(P);
    if (tok_is(t, T_NAME, "if")) return p_if(P);
    if (tok_is(t, T_NAME, "for")) return p_for(P);
    if (tok_is(t, T_NAME, "set")) return p_set(P);
    if (tok_is(t, T_NAME, "macro")) return p_macro(P);
    if (tok_is(t, T_NAME, "call")) return p_call_block(P);
    if (tok_is(t, T_NAME, "filter")) return p_simple_block(P, S_FILTER, "endfilter");
    if (tok_is(t, T_NAME, "generation")) return p_simple_block(P, S_SCOPE, "endgeneration");
    if (tok_is(t, T_NAME, "break") || tok_is(t, T_NAME, "continue")) {
        struct node *n = mknode(P, tok_is(t, T_NAME, "break") ? S_BREAK : S_CONTINUE);
        return n && expect_bend(P) ? n : NULL;
    }
    p_fail(P, "unknown tag '%.*s'", (int)t->n, t->p);
    return NULL;
}

/* Statements up to EOF (ends NULL) or to a `{% NAME` with NAME in ends (left unconsumed after
 * the `{%`). Returns the list, (struct node *)P for an empty list, NULL on error. */
static struct node *p_body(struct parser *P, const char *const *ends)
{
    struct node *head = NULL, **tail = &head;
    if (!p_enter(P)) return NULL;
    while (!P->failed) {
        const struct tok *t = cur(P);
        struct node *n = NULL;
        if (t->t == T_EOF) {
            if (ends) p_fail(P, "unexpected end of template: expected {%% %s %%}", ends[0]);
            break;
        }
        if (t->t == T_TEXT) {
            if ((n = mknode(P, S_TEXT))) {
                n->text = t->p;
                n->len = t->n;
            }
            adv(P);
        } else if (t->t == T_VBEGIN) {
            adv(P);
            if ((n = mknode(P, S_OUT)) && (n->e = p_tuple_expr(P)) && cur(P)->t != T_VEND) p_fail(P, "expected '}}'");
            adv(P);
        } else if (t->t == T_BBEGIN) {
            bool stop = false;
            for (int k = 0; ends && ends[k] && !stop; k++) stop = tok_is(&P->t[P->i + 1], T_NAME, ends[k]);
            adv(P);
            if (stop) break;
            n = p_stmt(P);
        } else {
            p_fail(P, "unexpected token");
        }
        if (!n || P->failed) break;
        *tail = n;
        tail = &n->next;
    }
    P->depth--;
    if (P->failed) return NULL;
    return head ? head : (struct node *)P;
}

attnd_status jinja_parse(const char *src, size_t len, jinja_tpl **out, char *err, size_t errlen)
{
    char dummy[8];
    if (!err || !errlen) err = dummy, errlen = sizeof dummy;
    *out = NULL;
    jinja_tpl *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return ATTND_ERR_NOMEM;
    }
    t->a.limit = SIZE_MAX / 4;
    struct lexer L = {.a = &t->a, .line = 1, .err = err, .errlen = errlen};
    L.s = normalise(&t->a, src ? src : "", src ? len : 0, &L.n);
    if (!L.s) lex_fail(&L, "out of memory");
    else lex_all(&L);
    attnd_status st = ATTND_OK;
    if (!L.failed) {
        struct parser P = {.t = L.t, .n = L.nt, .a = &t->a, .err = err, .errlen = errlen};
        struct node *r = p_body(&P, NULL);
        if (r && P.n_unknown) {
            snprintf(err, errlen, "%s", P.unknown);
            r = NULL;
        }
        if (!r) st = ATTND_ERR_INVALID;
        else t->root = r == (struct node *)&P ? NULL : r;
    } else {
        st = ATTND_ERR_INVALID;
    }
    free(L.t);
    if (st) {
        if (strstr(err, "out of memory")) st = ATTND_ERR_NOMEM;
        jinja_free(t);
        return st;
    }
    *out = t;
    return ATTND_OK;
}

void jinja_free(jinja_tpl *t)
{
    if (!t) return;
    ar_free(&t->a);
    free(t);
}

/* =============================================================================================
 * Value helpers: truth, names, printing (str / repr / JSON), equality, ordering
 * =========================================================================================== */

static bool truthy(const val *v)
{
    switch (v->t) {
    case V_UNDEF: case V_NONE: return false;
    case V_BOOL: return v->u.b;
    case V_INT: return v->u.i != 0;
    case V_FLOAT: return v->u.f != 0.0;
    case V_STR: return v->u.s.n > 0;
    case V_LIST: return v->u.l->n > 0 || v->tuple == 2;
    case V_DICT: return v->u.d->n > 0;
    default: return true;
    }
}

static const char *type_name(const val *v)
{
    static const char *const names[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list",
                                        "dict", "Namespace", "Macro", "LoopContext", "builtin_function_or_method"};
    static const char *const kinds[] = {"list", "tuple", "generator", "dict_keys", "dict_values", "dict_items"};
    if (v->t == V_LIST && v->tuple < 6) return kinds[v->tuple];
    return names[v->t];
}

static bool is_num(const val *v) { return v->t == V_BOOL || v->t == V_INT || v->t == V_FLOAT; }
static double num_f(const val *v) { return v->t == V_FLOAT ? v->u.f : v->t == V_INT ? (double)v->u.i : v->u.b; }
static int64_t num_i(const val *v) { return v->t == V_INT ? v->u.i : v->t == V_BOOL ? v->u.b : (int64_t)v->u.f; }

/* Python's repr of a float: the shortest digits that read back the same, in fixed notation
 * for exponents -4..15, else d.ddde+XX. */
static void fmt_float(double d, char *out, size_t cap)
{
    if (isnan(d)) snprintf(out, cap, "nan");
    else if (isinf(d)) snprintf(out, cap, d < 0 ? "-inf" : "inf");
    else if (d == 0) snprintf(out, cap, signbit(d) ? "-0.0" : "0.0");
    if (isnan(d) || isinf(d) || d == 0) return;
    char tmp[48];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d) break;
    }
    char dig[24];
    int nd = 0, k = 0;
    bool neg = tmp[0] == '-';
    for (k = neg; tmp[k] && tmp[k] != 'e'; k++)
        if (tmp[k] != '.' && nd < 20) dig[nd++] = tmp[k];
    int exp = atoi(tmp + k + 1);
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    size_t o = 0;
#define PUT(c) do { if (o + 1 < cap) out[o++] = (c); } while (0)
    if (neg) PUT('-');
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            PUT('0');
            PUT('.');
            for (int z = 0; z < -exp - 1; z++) PUT('0');
            for (int z = 0; z < nd; z++) PUT(dig[z]);
        } else {
            for (int z = 0; z <= exp; z++) PUT(z < nd ? dig[z] : '0');
            PUT('.');
            if (nd > exp + 1)
                for (int z = exp + 1; z < nd; z++) PUT(dig[z]);
            else
                PUT('0');
        }
    } else {
        PUT(dig[0]);
        if (nd > 1) {
            PUT('.');
            for (int z = 1; z < nd; z++) PUT(dig[z]);
        }
        char e[16];
        snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        for (char *q = e; *q; q++) PUT(*q);
    }
#undef PUT
    out[o] = 0;
}

/* Decodes one UTF-8 code point at s[i] (n bytes); invalid bytes decode as themselves. */
static uint32_t u8_at(const char *s, size_t n, size_t i, size_t *len)
{
    unsigned char c = (unsigned char)s[i];
    int need = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    *len = 1;
    if (need <= 0 || i + (size_t)need >= n) return c;
    uint32_t cp = c & (0x3Fu >> need);
    for (int k = 1; k <= need; k++) {
        unsigned char d = (unsigned char)s[i + (size_t)k];
        if ((d & 0xC0) != 0x80) return c;
        cp = (cp << 6) | (d & 0x3F);
    }
    *len = (size_t)need + 1;
    return cp;
}

/* Code points in s[0..n) (valid UTF-8: the bytes that do not continue a character). */
static size_t u8_count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* The first occurrence of nd[0..nn) (nn > 0) in h[0..hn), or NULL. (memchr + memcmp rather than
 * memmem: its cost is what it reads up to the match, also under the sanitizers.) */
static const char *find_bytes(const char *h, size_t hn, const char *nd, size_t nn)
{
    const char *end = h + hn;
    while (nn <= (size_t)(end - h)) {
        const char *f = memchr(h, nd[0], (size_t)(end - h) - nn + 1);
        if (!f) return NULL;
        if (!memcmp(f, nd, nn)) return f;
        h = f + 1;
    }
    return NULL;
}

/* Python's str.isspace() for one code point. */
static bool py_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

static bool py_printable(uint32_t c)
{
    if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0xa0) || c == 0xad) return false;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x2064))
        return false;
    return c != 0x3000 && c != 0xfeff && !(c >= 0xd800 && c <= 0xdfff);
}

static void repr_str(struct sb *b, const struct jstr *s)
{
    bool data = s->nsp > 0;
    bool sq = memchr(s->p, '\'', s->n) != NULL, dq = memchr(s->p, '"', s->n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    sb_putc(b, q, data);
    size_t l;
    for (size_t i = 0; i < s->n; i += l) {
        uint32_t c = u8_at(s->p, s->n, i, &l);
        char e[16];
        if (c == (uint32_t)q || c == '\\') snprintf(e, sizeof e, "\\%c", (char)c);
        else if (c == '\n') snprintf(e, sizeof e, "\\n");
        else if (c == '\r') snprintf(e, sizeof e, "\\r");
        else if (c == '\t') snprintf(e, sizeof e, "\\t");
        else if (py_printable(c)) {
            sb_putd(b, s->p + i, l, data);
            continue;
        } else if (c < 0x100) snprintf(e, sizeof e, "\\x%02x", c);
        else snprintf(e, sizeof e, "\\u%04x", c);
        sb_putd(b, e, strlen(e), data);
    }
    sb_putc(b, q, data);
}

static void put_val(struct sb *b, const val *v, bool repr);

static void put_seq(struct sb *b, const val *v)
{
    if (v->t == V_LIST && v->tuple == 2) {
        sb_puts(b, "<generator object select_or_reject>");
        return;
    }
    if (v->t == V_LIST && v->tuple >= 3) { /* dict_keys(['a']) */
        val l = *v;
        l.tuple = 0;
        sb_puts(b, type_name(v));
        sb_puts(b, "(");
        put_seq(b, &l);
        sb_puts(b, ")");
        return;
    }
    if (v->t == V_LIST) {
        sb_puts(b, v->tuple ? "(" : "[");
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) sb_puts(b, ", ");
            put_val(b, &v->u.l->v[i], true);
        }
        sb_puts(b, v->tuple ? (v->u.l->n == 1 ? ",)" : ")") : "]");
        return;
    }
    const struct jdict *d = v->u.d;
    sb_puts(b, v->t == V_NS ? "<Namespace {" : "{");
    for (size_t i = 0; i < d->n; i++) {
        if (i) sb_puts(b, ", ");
        put_val(b, &d->k[i], true);
        sb_puts(b, ": ");
        put_val(b, &d->v[i], true);
    }
    sb_puts(b, v->t == V_NS ? "}>" : "}");
}

/* str(v) (repr: repr(v)) as Python prints it. */
static void put_val(struct sb *b, const val *v, bool repr)
{
    char buf[64];
    if (b->R->st) return;
    if ((v->t == V_LIST || v->t == V_DICT || v->t == V_NS) && b->R->rdepth + 1 > MAX_RDEPTH) {
        fail(b->R, ATTND_ERR_RANGE, "a printed value nests deeper than %d", MAX_RDEPTH);
        return;
    }
    switch (v->t) {
    case V_UNDEF: break;
    case V_NONE: sb_puts(b, "None"); break;
    case V_BOOL: sb_puts(b, v->u.b ? "True" : "False"); break;
    case V_INT:
        snprintf(buf, sizeof buf, "%" PRId64, v->u.i);
        sb_puts(b, buf);
        break;
    case V_FLOAT:
        fmt_float(v->u.f, buf, sizeof buf);
        sb_puts(b, buf);
        break;
    case V_STR:
        if (repr) repr_str(b, &v->u.s);
        else sb_jstr(b, &v->u.s);
        break;
    case V_LIST: case V_DICT: case V_NS:
        b->R->rdepth++;
        put_seq(b, v);
        b->R->rdepth--;
        break;
    case V_MACRO: sb_puts(b, "<Macro>"); break;
    case V_LOOP: sb_puts(b, "<LoopContext>"); break;
    default: sb_puts(b, "<built-in function>"); break;
    }
}

struct jopt {
    int indent;           /* < 0: none */
    const char *isep, *ksep;
    bool sort_keys, ascii;
};

static void json_str(struct sb *b, const char *s, size_t n, bool data, bool ascii)
{
    sb_putc(b, '"', data);
    size_t l, run = 0;
    for (size_t i = 0; i < n; i += l) {
        uint32_t c = u8_at(s, n, i, &l);
        char e[16] = "";
        if (c == '"' || c == '\\') snprintf(e, sizeof e, "\\%c", (char)c);
        else if (c == '\n') snprintf(e, sizeof e, "\\n");
        else if (c == '\r') snprintf(e, sizeof e, "\\r");
        else if (c == '\t') snprintf(e, sizeof e, "\\t");
        else if (c == '\b') snprintf(e, sizeof e, "\\b");
        else if (c == '\f') snprintf(e, sizeof e, "\\f");
        else if (c < 0x20 || (ascii && c >= 0x7f && c < 0x10000)) snprintf(e, sizeof e, "\\u%04x", c);
        else if (ascii && c >= 0x10000) {
            uint32_t x = c - 0x10000;
            snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + (x >> 10), 0xDC00 + (x & 0x3FF));
        }
        if (!e[0]) {
            run += l;
            continue;
        }
        sb_putd(b, s + i - run, run, data);
        run = 0;
        sb_putd(b, e, strlen(e), data);
    }
    sb_putd(b, s + n - run, run, data);
    sb_putc(b, '"', data);
}

static void json_nl(struct sb *b, const struct jopt *o, int level)
{
    if (o->indent < 0) return;
    sb_putc(b, '\n', false);
    for (int i = 0; i < o->indent * level && !b->R->st; i++) sb_putc(b, ' ', false);
}

static int cmp_keys(const val *a, const val *b);

static void put_json(struct sb *b, const val *v, const struct jopt *o, int level);

static void json_dict(struct sb *b, const struct jdict *d, const struct jopt *o, int level)
{
    struct rs *R = b->R;
    if (!d->n) {
        sb_puts(b, "{}");
        return;
    }
    size_t *ord = ralloc(R, d->n * sizeof *ord);
    if (!ord) return;
    for (size_t i = 0; i < d->n; i++) ord[i] = i;
    for (size_t i = 1; o->sort_keys && i < d->n; i++) /* insertion sort: stable, dicts are small */
        for (size_t j = i; j > 0 && cmp_keys(&d->k[ord[j - 1]], &d->k[ord[j]]) > 0; j--) {
            size_t t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    sb_putc(b, '{', false);
    for (size_t i = 0; i < d->n && !R->st; i++) {
        const val *k = &d->k[ord[i]];
        if (i) sb_puts(b, o->isep);
        json_nl(b, o, level + 1);
        if (k->t == V_STR) {
            json_str(b, k->u.s.p, k->u.s.n, is_data(k), o->ascii);
        } else if (k->t == V_INT || k->t == V_FLOAT || k->t == V_BOOL || k->t == V_NONE) {
            struct sb t = {.R = R};
            put_json(&t, k, o, 0);
            sb_putc(b, '"', false);
            if (t.p) sb_put(b, t.p, t.n);
            sb_putc(b, '"', false);
            sb_free(&t);
        } else {
            fail(R, ATTND_ERR_INVALID, "TypeError: keys must be str, int, float, bool or None, not %s", type_name(k));
        }
        sb_puts(b, o->ksep);
        put_json(b, &d->v[ord[i]], o, level + 1);
    }
    json_nl(b, o, level);
    sb_putc(b, '}', false);
}

/* json.dumps(v) with o's settings. */
static void put_json(struct sb *b, const val *v, const struct jopt *o, int level)
{
    struct rs *R = b->R;
    char buf[64];
    if (!step(R)) return;
    if (level > MAX_VDEPTH) {
        fail(R, ATTND_ERR_RANGE, "tojson: the value nests too deep");
        return;
    }
    switch (v->t) {
    case V_NONE: sb_puts(b, "null"); return;
    case V_BOOL: sb_puts(b, v->u.b ? "true" : "false"); return;
    case V_INT: case V_FLOAT:
        if (v->t == V_FLOAT && (isnan(v->u.f) || isinf(v->u.f)))
            snprintf(buf, sizeof buf, "%s", isnan(v->u.f) ? "NaN" : v->u.f < 0 ? "-Infinity" : "Infinity");
        else if (v->t == V_FLOAT) fmt_float(v->u.f, buf, sizeof buf);
        else snprintf(buf, sizeof buf, "%" PRId64, v->u.i);
        sb_puts(b, buf);
        return;
    case V_STR: json_str(b, v->u.s.p, v->u.s.n, is_data(v), o->ascii); return;
    case V_LIST:
        if (v->tuple >= 2) break;
        if (!v->u.l->n) {
            sb_puts(b, "[]");
            return;
        }
        sb_putc(b, '[', false);
        for (size_t i = 0; i < v->u.l->n && !R->st; i++) {
            if (i) sb_puts(b, o->isep);
            json_nl(b, o, level + 1);
            put_json(b, &v->u.l->v[i], o, level + 1);
        }
        json_nl(b, o, level);
        sb_putc(b, ']', false);
        return;
    case V_DICT: json_dict(b, v->u.d, o, level); return;
    default: break;
    }
    fail(R, ATTND_ERR_INVALID, "TypeError: Object of type %s is not JSON serializable", type_name(v));
}

static bool eq_d(struct rs *R, const val *a, const val *b, int depth);
static bool eq(struct rs *R, const val *a, const val *b) { return eq_d(R, a, b, 0); }

/* Python's ==; nesting deeper than 1000 compares unequal, and each element compared is a step. */
static bool eq_d(struct rs *R, const val *a, const val *b, int depth)
{
    if (depth > MAX_VDEPTH || (R && !charge_step(R))) return false;
    if (is_num(a) && is_num(b)) {
        if (a->t == V_FLOAT || b->t == V_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a->t != b->t) return false;
    switch (a->t) {
    case V_UNDEF: case V_NONE: return true;
    case V_STR: return a->u.s.n == b->u.s.n && !memcmp(a->u.s.p, b->u.s.p, a->u.s.n);
    case V_LIST:
        if (a->tuple != b->tuple || a->u.l->n != b->u.l->n) return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!eq_d(R, &a->u.l->v[i], &b->u.l->v[i], depth + 1)) return false;
        return true;
    case V_DICT: {
        const struct jdict *x = a->u.d, *y = b->u.d;
        if (x->n != y->n) return false;
        for (size_t i = 0; i < x->n; i++) {
            size_t j = 0;
            while (j < y->n && !eq_d(R, &x->k[i], &y->k[j], depth + 1)) j++;
            if (j == y->n || !eq_d(R, &x->v[i], &y->v[j], depth + 1)) return false;
        }
        return true;
    }
    case V_NS: return a->u.d == b->u.d;
    case V_MACRO: return a->u.m == b->u.m;
    default: return false;
    }
}

static int cmp_bytes(const struct jstr *a, const struct jstr *b)
{
    size_t n = a->n < b->n ? a->n : b->n;
    int c = memcmp(a->p, b->p, n);
    return c ? c : a->n < b->n ? -1 : a->n > b->n;
}

/* Orders a, b as Python's < does; *ok false (and R failed) when they do not compare. */
static int order(struct rs *R, const val *a, const val *b, const char *op)
{
    if (!step(R)) return 0;
    if (R->rdepth > MAX_RDEPTH) {
        fail(R, ATTND_ERR_RANGE, "compared values nest deeper than %d", MAX_RDEPTH);
        return 0;
    }
    if (is_num(a) && is_num(b)) {
        if (a->t == V_FLOAT || b->t == V_FLOAT) {
            double x = num_f(a), y = num_f(b);
            return x < y ? -1 : x > y;
        }
        int64_t x = num_i(a), y = num_i(b);
        return x < y ? -1 : x > y;
    }
    if (a->t == V_STR && b->t == V_STR) return cmp_bytes(&a->u.s, &b->u.s);
    if (a->t == V_LIST && b->t == V_LIST && a->tuple == b->tuple && a->tuple != 2) {
        size_t n = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (eq(R, &a->u.l->v[i], &b->u.l->v[i])) continue;
            R->rdepth++;
            int c = order(R, &a->u.l->v[i], &b->u.l->v[i], op);
            R->rdepth--;
            return c;
        }
        return a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
    }
    fail(R, ATTND_ERR_INVALID, "TypeError: '%s' not supported between instances of '%s' and '%s'", op, type_name(a),
         type_name(b));
    return 0;
}

static int cmp_keys(const val *a, const val *b)
{
    if (a->t == V_STR && b->t == V_STR) return cmp_bytes(&a->u.s, &b->u.s);
    if (is_num(a) && is_num(b)) return num_f(a) < num_f(b) ? -1 : num_f(a) > num_f(b);
    return a->t - b->t;
}

/* =============================================================================================
 * Frames, lists, dicts, undefined
 * =========================================================================================== */

static struct frame *frame_new(struct rs *R, struct frame *parent)
{
    struct frame *f = ralloc(R, sizeof *f);
    if (f) *f = (struct frame){.parent = parent};
    return f;
}

static val *frame_find(struct frame *F, const char *name, size_t n)
{
    for (; F; F = F->parent)
        for (size_t i = 0; i < F->n; i++)
            if (F->vars[i].n == n && !memcmp(F->vars[i].name, name, n)) return &F->vars[i].v;
    return NULL;
}

static void frame_set(struct rs *R, struct frame *F, const char *name, size_t n, val v)
{
    for (size_t i = 0; i < F->n; i++)
        if (F->vars[i].n == n && !memcmp(F->vars[i].name, name, n)) {
            F->vars[i].v = v;
            return;
        }
    if (F->n == F->cap) {
        size_t nc = F->cap ? F->cap * 2 : 8;
        struct var *t = ralloc(R, nc * sizeof *t);
        if (!t) return;
        if (F->n) memcpy(t, F->vars, F->n * sizeof *t);
        F->vars = t;
        F->cap = nc;
    }
    F->vars[F->n++] = (struct var){name, n, v};
}

struct lb {
    struct rs *R;
    val *v;
    size_t n, cap;
};

static void lb_push(struct lb *b, val v)
{
    if (!step(b->R)) return;
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 8;
        val *t = realloc(b->v, nc * sizeof *t);
        if (!t) {
            fail(b->R, ATTND_ERR_NOMEM, "out of memory");
            return;
        }
        b->v = t;
        b->cap = nc;
    }
    b->v[b->n++] = v;
}

static val lb_val(struct lb *b, int tuple)
{
    struct rs *R = b->R;
    val out = UNDEF;
    struct jlist *l = R->st ? NULL : ralloc(R, sizeof *l);
    val *items = l && b->n ? ralloc(R, b->n * sizeof *items) : NULL;
    if (l && (items || !b->n)) {
        if (b->n) memcpy(items, b->v, b->n * sizeof *items);
        *l = (struct jlist){items, b->n};
        out = (val){.t = V_LIST, .tuple = (uint8_t)tuple, .u.l = l};
    }
    free(b->v);
    b->v = NULL;
    b->n = b->cap = 0;
    return out;
}

static val list_of(struct rs *R, const val *items, size_t n, int tuple)
{
    struct lb b = {.R = R};
    for (size_t i = 0; i < n; i++) lb_push(&b, items[i]);
    return lb_val(&b, tuple);
}

static val dict_new(struct rs *R, int type)
{
    struct jdict *d = ralloc(R, sizeof *d);
    if (!d) return UNDEF;
    *d = (struct jdict){0};
    return (val){.t = (uint8_t)type, .u.d = d};
}

static val *dict_get(struct rs *R, const struct jdict *d, const val *k)
{
    for (size_t i = 0; i < d->n; i++)
        if (eq(R, &d->k[i], k)) return &d->v[i];
    return NULL;
}

static val *dict_get_s(const struct jdict *d, const char *name, size_t n)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == V_STR && d->k[i].u.s.n == n && !memcmp(d->k[i].u.s.p, name, n)) return &d->v[i];
    return NULL;
}

static void dict_set(struct rs *R, struct jdict *d, val k, val v, bool check)
{
    val *old = check ? dict_get(R, d, &k) : NULL;
    if (old) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 8;
        val *nk = ralloc(R, nc * sizeof *nk), *nv = ralloc(R, nc * sizeof *nv);
        if (!nk || !nv) return;
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}

static val undef_hint(struct rs *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static val undef_hint(struct rs *R, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t n = strlen(buf);
    char *h = ralloc(R, n + 1);
    if (h) memcpy(h, buf, n + 1);
    return (val){.t = V_UNDEF, .u.hint = h};
}

static void undef_fail(struct rs *R, const val *v)
{
    fail(R, ATTND_ERR_INVALID, "UndefinedError: %s", v->u.hint ? v->u.hint : "the value is undefined");
}

/* jinja2's object_type_repr: "dict object", "None", ... */
static const char *obj_repr(const val *v)
{
    switch (v->t) {
    case V_NONE: return "None";
    case V_DICT: return "dict object";
    case V_LIST: return v->tuple ? "tuple object" : "list object";
    case V_STR: return "str object";
    case V_INT: return "int object";
    case V_FLOAT: return "float object";
    case V_BOOL: return "bool object";
    case V_NS: return "jinja2.utils.Namespace object";
    default: return "object";
    }
}

static val loop_attr(struct rs *R, const struct loopst *lp, const char *name, size_t n)
{
    size_t len = lp->items->n, i = lp->i;
#define IS(s) (n == sizeof s - 1 && !memcmp(name, s, n))
    if (IS("index")) return vint((int64_t)i + 1);
    if (IS("index0")) return vint((int64_t)i);
    if (IS("revindex")) return vint((int64_t)(len - i));
    if (IS("revindex0")) return vint((int64_t)(len - i - 1));
    if (IS("first")) return vbool(i == 0);
    if (IS("last")) return vbool(i + 1 == len);
    if (IS("length")) return vint((int64_t)len);
    if (IS("depth")) return vint(1);
    if (IS("depth0")) return vint(0);
    if (IS("previtem")) return i ? lp->items->v[i - 1] : undef_hint(R, "there is no previous item");
    if (IS("nextitem")) return i + 1 < len ? lp->items->v[i + 1] : undef_hint(R, "there is no next item");
#undef IS
    return undef_hint(R, "'LoopContext object' has no attribute '%.*s'", (int)n, name);
}

static val get_attr(struct rs *R, const val *o, const char *name, size_t n)
{
    if (o->t == V_UNDEF) {
        undef_fail(R, o);
        return UNDEF;
    }
    if (o->t == V_DICT || o->t == V_NS) {
        val *v = dict_get_s(o->u.d, name, n);
        if (v) return *v;
    }
    if (o->t == V_LOOP) return loop_attr(R, o->u.lp, name, n);
    return undef_hint(R, "'%s' has no attribute '%.*s'", obj_repr(o), (int)n, name);
}

/* Code point index k of s (negative from the end) as a byte offset; false out of range. */
static bool str_index(const struct jstr *s, int64_t k, size_t *off, size_t *len)
{
    size_t cnt = u8_count(s->p, s->n), i = 0;
    if (k < 0) k += (int64_t)cnt;
    if (k < 0 || (uint64_t)k >= cnt) return false;
    for (int64_t c = -1; i < s->n; i++) /* the k-th byte that starts a character */
        if (((unsigned char)s->p[i] & 0xC0) != 0x80 && ++c == k) break;
    size_t e = i + 1;
    while (e < s->n && ((unsigned char)s->p[e] & 0xC0) == 0x80) e++;
    *off = i;
    *len = e - i;
    return true;
}

static val get_item(struct rs *R, const val *o, const val *k)
{
    if (o->t == V_UNDEF) {
        undef_fail(R, o);
        return UNDEF;
    }
    if (o->t == V_LIST && o->tuple >= 2) {
        fail(R, ATTND_ERR_INVALID, "TypeError: '%s' object is not subscriptable", type_name(o));
        return UNDEF;
    }
    if (o->t == V_DICT || o->t == V_NS) {
        val *v = dict_get(R, o->u.d, k);
        if (v) return *v;
    } else if ((o->t == V_LIST || o->t == V_STR) && (k->t == V_INT || k->t == V_BOOL)) {
        int64_t i = num_i(k);
        if (o->t == V_LIST) {
            if (i < 0) i += (int64_t)o->u.l->n;
            if (i >= 0 && (uint64_t)i < o->u.l->n) return o->u.l->v[i];
        } else {
            size_t off, len;
            if (!charge(R, o->u.s.n)) return UNDEF;
            if (str_index(&o->u.s, i, &off, &len)) return str_sub(R, &o->u.s, off, len);
        }
        return undef_hint(R, "%s has no element %" PRId64, obj_repr(o), i);
    }
    if (k->t == V_STR) return get_attr(R, o, k->u.s.p, k->u.s.n);
    return undef_hint(R, "'%s' has no attribute", obj_repr(o));
}

/* The items a `for` walks: a list's items, a dict's keys, a string's characters. */
static bool iter_list(struct rs *R, const val *v, val *out)
{
    if (v->t == V_LIST) {
        *out = *v;
        return true;
    }
    struct lb b = {.R = R};
    if (v->t == V_DICT) {
        for (size_t i = 0; i < v->u.d->n; i++) lb_push(&b, v->u.d->k[i]);
    } else if (v->t == V_STR) {
        size_t l;
        for (size_t i = 0; i < v->u.s.n && !R->st; i += l) {
            u8_at(v->u.s.p, v->u.s.n, i, &l);
            lb_push(&b, str_sub(R, &v->u.s, i, l));
        }
    } else if (v->t != V_UNDEF) {
        fail(R, ATTND_ERR_INVALID, "TypeError: '%s' object is not iterable", type_name(v));
        free(b.v);
        return false;
    }
    *out = lb_val(&b, false);
    return !R->st;
}

static val to_str(struct rs *R, const val *v)
{
    if (v->t == V_STR) return *v;
    struct sb b = {.R = R};
    put_val(&b, v, false);
    return sb_val(&b);
}

/* =============================================================================================
 * Operators
 * =========================================================================================== */

static val f_escape(struct rs *R, const val *in);
static val py_format(struct rs *R, const val *fmt, const val *args);

static val concat2(struct rs *R, const struct jstr *a, const struct jstr *b)
{
    if (a->n > R->max_output || b->n > R->max_output - a->n) {
        fail(R, ATTND_ERR_RANGE, "a string is over %zu bytes", R->max_output);
        return UNDEF;
    }
    size_t n = a->n + b->n, ns = a->nsp + b->nsp;
    if (!charge(R, n)) return UNDEF;
    char *p = ralloc(R, n + 1);
    struct jinja_span *sp = ns ? ralloc(R, ns * sizeof *sp) : NULL;
    if (!p || (ns && !sp)) return UNDEF;
    memcpy(p, a->p, a->n);
    memcpy(p + a->n, b->p, b->n);
    p[n] = 0;
    size_t k = 0;
    for (size_t i = 0; i < a->nsp; i++) sp[k++] = a->sp[i];
    for (size_t i = 0; i < b->nsp; i++) {
        struct jinja_span s = {b->sp[i].off + a->n, b->sp[i].len};
        if (k && sp[k - 1].off + sp[k - 1].len == s.off) sp[k - 1].len += s.len;
        else sp[k++] = s;
    }
    return (val){.t = V_STR, .u.s = {p, n, sp, k}};
}

static val repeat(struct rs *R, const val *s, int64_t times)
{
    if (times <= 0) return s->t == V_STR ? vlit("", 0) : list_of(R, NULL, 0, s->tuple);
    size_t unit = s->t == V_STR ? s->u.s.n : s->u.l->n * 8;
    if (unit && (uint64_t)times > R->max_output / unit) {
        fail(R, ATTND_ERR_RANGE, "a repeated value is over %zu bytes", R->max_output);
        return UNDEF;
    }
    if (s->t == V_STR) { /* one allocation; the result is data if any of s is */
        size_t n = s->u.s.n * (size_t)times;
        char *p = charge(R, n) ? ralloc(R, n + 1) : NULL;
        if (!p) return UNDEF;
        for (int64_t i = 0; i < times; i++) memcpy(p + (size_t)i * s->u.s.n, s->u.s.p, s->u.s.n);
        p[n] = 0;
        val r = vlit(p, n);
        if (s->u.s.nsp && n) {
            struct jinja_span *sp = ralloc(R, sizeof *sp);
            if (!sp) return UNDEF;
            *sp = (struct jinja_span){0, n};
            r.u.s.sp = sp;
            r.u.s.nsp = 1;
        }
        return r;
    }
    struct lb b = {.R = R};
    for (int64_t i = 0; i < times && step(R); i++)
        for (size_t j = 0; j < s->u.l->n; j++) lb_push(&b, s->u.l->v[j]);
    return lb_val(&b, s->tuple);
}

static val float_arith(struct rs *R, int op, double x, double y, bool ints);

static val int_arith(struct rs *R, int op, int64_t x, int64_t y)
{
    int64_t r = 0;
    bool ovf = false;
    switch (op) {
    case B_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
    case B_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
    case B_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
    case B_FDIV: case B_MOD:
        if (!y) {
            fail(R, ATTND_ERR_INVALID, "ZeroDivisionError: integer division or modulo by zero");
            return UNDEF;
        }
        if (x == INT64_MIN && y == -1) {
            ovf = true;
            break;
        }
        r = op == B_FDIV ? x / y : x % y;
        if (op == B_FDIV && (x % y) && ((x < 0) != (y < 0))) r--;
        if (op == B_MOD && r && ((r < 0) != (y < 0))) r += y;
        break;
    case B_POW:
        if (y < 0) return float_arith(R, B_POW, (double)x, (double)y, false);
        r = 1;
        for (int64_t i = 0; i < y && !ovf; i++) ovf = __builtin_mul_overflow(r, x, &r);
        break;
    default: break;
    }
    if (ovf) {
        fail(R, ATTND_ERR_RANGE, "OverflowError: integer overflow");
        return UNDEF;
    }
    return vint(r);
}

static val float_arith(struct rs *R, int op, double x, double y, bool ints)
{
    if ((op == B_DIV || op == B_FDIV || op == B_MOD) && y == 0) {
        fail(R, ATTND_ERR_INVALID, "ZeroDivisionError: %s", ints ? "division by zero" : op == B_DIV ? "float division by zero"
                                                            : op == B_FDIV ? "float floor division by zero" : "float modulo");
        return UNDEF;
    }
    switch (op) {
    case B_ADD: return vfloat(x + y);
    case B_SUB: return vfloat(x - y);
    case B_MUL: return vfloat(x * y);
    case B_DIV: return vfloat(x / y);
    case B_FDIV: return vfloat(floor(x / y));
    case B_MOD: {
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return vfloat(m);
    }
    default:
        if (x == 0 && y < 0) {
            fail(R, ATTND_ERR_INVALID, "ZeroDivisionError: 0.0 cannot be raised to a negative power");
            return UNDEF;
        }
        return vfloat(pow(x, y));
    }
}

static val arith(struct rs *R, int op, const val *a, const val *b)
{
    static const char *const sym[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (a->t == V_UNDEF || b->t == V_UNDEF) {
        undef_fail(R, a->t == V_UNDEF ? a : b);
        return UNDEF;
    }
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT && op != B_DIV) return int_arith(R, op, num_i(a), num_i(b));
        return float_arith(R, op, num_f(a), num_f(b), a->t != V_FLOAT && b->t != V_FLOAT);
    }
    if (op == B_MOD && a->t == V_STR) return py_format(R, a, b);
    if (op == B_ADD && a->t == V_STR && b->t == V_STR && (a->tuple == 1 || b->tuple == 1)) { /* Markup escapes str */
        val x = f_escape(R, a), y = f_escape(R, b);
        if (R->st) return UNDEF;
        val r = concat2(R, &x.u.s, &y.u.s);
        r.tuple = 1;
        return r;
    }
    if (op == B_ADD && a->t == V_STR && b->t == V_STR) return concat2(R, &a->u.s, &b->u.s);
    if (op == B_ADD && a->t == V_LIST && b->t == V_LIST && a->tuple == b->tuple) {
        struct lb l = {.R = R};
        for (size_t i = 0; i < a->u.l->n; i++) lb_push(&l, a->u.l->v[i]);
        for (size_t i = 0; i < b->u.l->n; i++) lb_push(&l, b->u.l->v[i]);
        return lb_val(&l, a->tuple);
    }
    if (op == B_MUL && (a->t == V_STR || a->t == V_LIST) && (b->t == V_INT || b->t == V_BOOL)) return repeat(R, a, num_i(b));
    if (op == B_MUL && (b->t == V_STR || b->t == V_LIST) && (a->t == V_INT || a->t == V_BOOL)) return repeat(R, b, num_i(a));
    if (op == B_ADD && a->t == V_STR)
        fail(R, ATTND_ERR_INVALID, "TypeError: can only concatenate str (not \"%s\") to str", type_name(b));
    else
        fail(R, ATTND_ERR_INVALID, "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", sym[op], type_name(a),
             type_name(b));
    return UNDEF;
}

static bool contains(struct rs *R, const val *needle, const val *hay)
{
    if (hay->t == V_STR) {
        if (needle->t != V_STR) {
            fail(R, ATTND_ERR_INVALID, "TypeError: 'in <string>' requires string as left operand, not %s", type_name(needle));
            return false;
        }
        return charge(R, hay->u.s.n) && (!needle->u.s.n || find_bytes(hay->u.s.p, hay->u.s.n, needle->u.s.p, needle->u.s.n));
    }
    if (hay->t == V_LIST) {
        for (size_t i = 0; i < hay->u.l->n; i++)
            if (eq(R, needle, &hay->u.l->v[i])) return true;
        return false;
    }
    if (hay->t == V_DICT || hay->t == V_NS) return dict_get(R, hay->u.d, needle) != NULL;
    if (hay->t == V_UNDEF) return false;
    fail(R, ATTND_ERR_INVALID, "TypeError: argument of type '%s' is not iterable", type_name(hay));
    return false;
}

static bool compare(struct rs *R, int op, const val *a, const val *b)
{
    static const char *const sym[] = {"==", "!=", "<", "<=", ">", ">="};
    if (op == C_EQ) return eq(R, a, b);
    if (op == C_NE) return !eq(R, a, b);
    if (a->t == V_UNDEF || b->t == V_UNDEF) {
        undef_fail(R, a->t == V_UNDEF ? a : b);
        return false;
    }
    int c = order(R, a, b, sym[op]);
    return op == C_LT ? c < 0 : op == C_LE ? c <= 0 : op == C_GT ? c > 0 : c >= 0;
}

/* Python's slice index adjustment for a sequence of n items. */
static void slice_idx(int64_t n, const val *s0, const val *s1, int64_t step_, int64_t *start, int64_t *stop)
{
    bool neg = step_ < 0;
    int64_t lo = neg ? -1 : 0, hi = neg ? n - 1 : n;
    int64_t a = neg ? hi : lo, b = neg ? lo : hi;
    if (s0->t == V_INT || s0->t == V_BOOL) {
        a = num_i(s0);
        if (a < 0) a = a + n < lo ? lo : a + n;
        else if (a > hi) a = hi;
    }
    if (s1->t == V_INT || s1->t == V_BOOL) {
        b = num_i(s1);
        if (b < 0) b = b + n < lo ? lo : b + n;
        else if (b > hi) b = hi;
    }
    *start = a;
    *stop = b;
}

static val do_slice(struct rs *R, const val *o, const val *s0, const val *s1, const val *s2)
{
    int64_t st = s2->t == V_INT ? s2->u.i : 1, a, b;
    if (!st) {
        fail(R, ATTND_ERR_INVALID, "ValueError: slice step cannot be zero");
        return UNDEF;
    }
    if (o->t == V_UNDEF) {
        undef_fail(R, o);
        return UNDEF;
    }
    if ((o->t != V_LIST && o->t != V_STR) || (o->t == V_LIST && o->tuple >= 2)) {
        fail(R, ATTND_ERR_INVALID, "TypeError: '%s' object is not subscriptable", type_name(o));
        return UNDEF;
    }
    bool ascii = true;
    if (o->t == V_STR)
        for (size_t i = 0; i < o->u.s.n && ascii; i++) ascii = (unsigned char)o->u.s.p[i] < 0x80;
    val items = *o;
    if (o->t == V_STR && !ascii && !iter_list(R, o, &items)) return UNDEF;
    int64_t n = o->t == V_STR && ascii ? (int64_t)o->u.s.n : (int64_t)items.u.l->n;
    slice_idx(n, s0, s1, st, &a, &b);
    if (o->t == V_STR && ascii && st == 1) return str_sub(R, &o->u.s, (size_t)a, b > a ? (size_t)(b - a) : 0);
    struct lb l = {.R = R};
    struct sb sbuf = {.R = R};
    for (int64_t i = a; (st > 0 ? i < b : i > b) && step(R); i += st) {
        if (o->t == V_LIST) lb_push(&l, items.u.l->v[i]);
        else if (ascii) sb_putd(&sbuf, o->u.s.p + i, 1, is_data(o));
        else sb_jstr(&sbuf, &items.u.l->v[i].u.s);
    }
    if (o->t == V_STR) return sb_val(&sbuf);
    return lb_val(&l, o->tuple);
}

/* =============================================================================================
 * String functions (Python's str methods; the filters share them)
 * =========================================================================================== */

struct av {
    const char *kw;
    size_t kwn;
    val v;
};

/* Argument pos (positional) or keyword kw; NULL when absent. */
static const val *argp(const struct av *a, int n, int pos, const char *kw)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!a[i].kw && k++ == pos) return &a[i].v;
        if (a[i].kw && kw && a[i].kwn == strlen(kw) && !memcmp(a[i].kw, kw, a[i].kwn)) return &a[i].v;
    }
    return NULL;
}

static bool arg_true(const struct av *a, int n, int pos, const char *kw)
{
    const val *v = argp(a, n, pos, kw);
    return v && truthy(v);
}

static bool need_str(struct rs *R, const val *v, const char *what)
{
    if (v->t == V_STR) return true;
    if (v->t == V_UNDEF) undef_fail(R, v);
    else fail(R, ATTND_ERR_INVALID, "TypeError: %s must be str, not %s", what, type_name(v));
    return false;
}

static bool in_chars(uint32_t c, const val *chars)
{
    if (!chars || chars->t != V_STR) return py_space(c);
    size_t l;
    for (size_t i = 0; i < chars->u.s.n; i += l)
        if (u8_at(chars->u.s.p, chars->u.s.n, i, &l) == c) return true;
    return false;
}

/* strip (mode 3), lstrip (1), rstrip (2) of the characters in chars (NULL/None: whitespace). */
static val s_strip(struct rs *R, const val *s, const val *chars, int mode)
{
    if (chars && chars->t == V_NONE) chars = NULL;
    if (chars && !need_str(R, chars, "strip arg")) return UNDEF;
    size_t a = 0, b = s->u.s.n, l;
    const char *p = s->u.s.p;
    while ((mode & 1) && a < b && in_chars(u8_at(p, b, a, &l), chars)) a += l;
    while ((mode & 2) && b > a) {
        size_t st = b - 1;
        while (st > a && ((unsigned char)p[st] & 0xC0) == 0x80 && b - st < 4) st--;
        uint32_t c = u8_at(p, b, st, &l);
        if (st + l != b) st = b - 1, c = (unsigned char)p[st];
        if (!in_chars(c, chars)) break;
        b = st;
    }
    return str_sub(R, &s->u.s, a, b - a);
}

static val s_split(struct rs *R, const val *s, const val *sep, const val *maxv)
{
    if (!charge(R, s->u.s.n)) return UNDEF;
    int64_t max = maxv && maxv->t == V_INT ? maxv->u.i : -1;
    struct lb b = {.R = R};
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, i = 0, l;
    if (!sep || sep->t == V_NONE) {
        while (i < n && !R->st) {
            while (i < n && py_space(u8_at(p, n, i, &l))) i += l;
            if (i >= n) break;
            size_t st = i;
            if (max >= 0 && (int64_t)b.n >= max) {
                size_t e = n;
                while (e > st && py_space((unsigned char)p[e - 1])) e--;
                lb_push(&b, str_sub(R, &s->u.s, st, e - st));
                break;
            }
            while (i < n && !py_space(u8_at(p, n, i, &l))) i += l;
            lb_push(&b, str_sub(R, &s->u.s, st, i - st));
        }
        return lb_val(&b, false);
    }
    if (!need_str(R, sep, "separator")) return UNDEF;
    if (!sep->u.s.n) {
        fail(R, ATTND_ERR_INVALID, "ValueError: empty separator");
        return UNDEF;
    }
    for (;;) {
        const char *f = max >= 0 && (int64_t)b.n >= max ? NULL : find_bytes(p + i, n - i, sep->u.s.p, sep->u.s.n);
        if (!f || R->st) break;
        lb_push(&b, str_sub(R, &s->u.s, i, (size_t)(f - p) - i));
        i = (size_t)(f - p) + sep->u.s.n;
    }
    lb_push(&b, str_sub(R, &s->u.s, i, n - i));
    return lb_val(&b, false);
}

static val s_rsplit(struct rs *R, const val *s, const val *sep, const val *maxv)
{
    int64_t max = maxv && maxv->t == V_INT ? maxv->u.i : -1;
    if (max < 0 || !sep || sep->t == V_NONE) return s_split(R, s, sep, maxv);
    if (!need_str(R, sep, "separator")) return UNDEF;
    if (!sep->u.s.n) {
        fail(R, ATTND_ERR_INVALID, "ValueError: empty separator");
        return UNDEF;
    }
    val parts[64];
    int np = 0;
    size_t end = s->u.s.n, m = sep->u.s.n;
    while (np < max && np < 62 && end >= m) {
        size_t k = end - m + 1, found = SIZE_MAX;
        while (k-- > 0)
            if (!memcmp(s->u.s.p + k, sep->u.s.p, m)) {
                found = k;
                break;
            }
        if (found == SIZE_MAX) break;
        parts[np++] = str_sub(R, &s->u.s, found + m, end - found - m);
        end = found;
    }
    parts[np++] = str_sub(R, &s->u.s, 0, end);
    for (int i = 0; i < np / 2; i++) {
        val t = parts[i];
        parts[i] = parts[np - 1 - i];
        parts[np - 1 - i] = t;
    }
    return list_of(R, parts, (size_t)np, false);
}

/* Python's splitlines() boundaries at p[i]: returns the boundary's length, 0 when none. */
static size_t line_break(const char *p, size_t n, size_t i)
{
    unsigned char c = (unsigned char)p[i];
    if (c == '\r') return i + 1 < n && p[i + 1] == '\n' ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e)) return 1;
    if (c == 0xC2 && i + 1 < n && (unsigned char)p[i + 1] == 0x85) return 2;
    if (c == 0xE2 && i + 2 < n && (unsigned char)p[i + 1] == 0x80 && ((unsigned char)p[i + 2] & 0xFE) == 0xA8) return 3;
    return 0;
}

static val s_splitlines(struct rs *R, const struct jstr *s)
{
    struct lb b = {.R = R};
    size_t st = 0, i = 0;
    while (i < s->n && !R->st) {
        size_t k = line_break(s->p, s->n, i);
        if (!k) {
            i++;
            continue;
        }
        lb_push(&b, str_sub(R, s, st, i - st));
        i += k;
        st = i;
    }
    if (st < s->n) lb_push(&b, str_sub(R, s, st, s->n - st));
    return lb_val(&b, false);
}

static val s_replace(struct rs *R, const val *s, const val *old, const val *nw, const val *countv)
{
    if (!need_str(R, old, "replace() argument 1") || !need_str(R, nw, "replace() argument 2")) return UNDEF;
    int64_t count = countv && countv->t == V_INT ? countv->u.i : -1;
    bool data = is_data(s) || is_data(nw);
    struct sb b = {.R = R};
    const char *p = s->u.s.p;
    size_t n = s->u.s.n, i = 0, m = old->u.s.n;
    int64_t done = 0;
    if (!m) {
        size_t l;
        for (; i < n && (count < 0 || done < count) && !R->st; i += l, done++) {
            sb_putd(&b, nw->u.s.p, nw->u.s.n, data);
            u8_at(p, n, i, &l);
            sb_putd(&b, p + i, l, data);
        }
        if (count < 0 || done < count) sb_putd(&b, nw->u.s.p, nw->u.s.n, data);
        sb_putd(&b, p + i, n - i, data);
        return sb_val(&b);
    }
    while (!R->st && (count < 0 || done < count)) {
        const char *f = find_bytes(p + i, n - i, old->u.s.p, m);
        if (!f) break;
        sb_putd(&b, p + i, (size_t)(f - p) - i, data);
        sb_putd(&b, nw->u.s.p, nw->u.s.n, data);
        i = (size_t)(f - p) + m;
        done++;
    }
    sb_putd(&b, p + i, n - i, data);
    if (!b.p && !R->st) return vlit("", 0);
    return sb_val(&b);
}

static bool is_lower_c(unsigned char c) { return c >= 'a' && c <= 'z'; }
static bool is_upper_c(unsigned char c) { return c >= 'A' && c <= 'Z'; }

/* Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (what chat text
 * mostly holds); other code points have no case here. up: the upper case of c, else the lower. */
static uint32_t cp_case(uint32_t c, bool up)
{
    if (c < 0x80) return up ? (c >= 'a' && c <= 'z' ? c - 32 : c) : (c >= 'A' && c <= 'Z' ? c + 32 : c);
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return up ? c : c + 32;
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return up ? c - 32 : c;
    if (c == 0xFF || c == 0x178) return up ? 0x178 : 0xFF;
    if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return up ? c & ~1u : c | 1u;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return up ? (c & 1u ? c : c - 1) : (c & 1u ? c + 1 : c);
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return up ? c : c + 32;
    if (c >= 0x3B1 && c <= 0x3C9) return up ? (c == 0x3C2 ? 0x3A3 : c - 32) : c;
    if (c >= 0x410 && c <= 0x42F) return up ? c : c + 32;
    if (c >= 0x430 && c <= 0x44F) return up ? c - 32 : c;
    if (c >= 0x400 && c <= 0x40F) return up ? c : c + 80;
    if (c >= 0x450 && c <= 0x45F) return up ? c - 80 : c;
    return c;
}

static bool cp_cased(uint32_t c) { return cp_case(c, true) != c || cp_case(c, false) != c; }

/* mode: 'l' lower, 'u' upper, 't' str.title, 'c' capitalize, 'T' jinja's title filter. */
static val s_case(struct rs *R, const val *s, char mode)
{
    struct sb b = {.R = R};
    bool prev_cased = false, data = is_data(s);
    size_t l;
    sb_put(&b, "", 0);
    for (size_t i = 0; i < s->u.s.n && !R->st; i += l) {
        uint32_t c = u8_at(s->u.s.p, s->u.s.n, i, &l);
        bool up;
        if (mode == 'l') up = false;
        else if (mode == 'u') up = true;
        else if (mode == 'c') up = i == 0;
        else if (mode == 't') up = !prev_cased;
        else up = i == 0 || strchr("- \t\n\r\f\v({[<", s->u.s.p[i - 1]);
        uint32_t d = l == 1 && c >= 0x80 ? c : cp_case(c, up); /* a stray byte stays itself */
        prev_cased = cp_cased(c) || c == 0xDF;
        if (c == 0xDF && up) { /* ß has no single upper case: "SS" ("Ss" in title case) */
            sb_putd(&b, mode == 'u' || mode == 'T' ? "SS" : "Ss", 2, data);
        } else if (d == c) {
            sb_putd(&b, s->u.s.p + i, l, data);
        } else {
            char o[4];
            size_t k = 0;
            put_utf8(o, &k, d);
            sb_putd(&b, o, k, data);
        }
    }
    return sb_val(&b);
}

/* Python's str.islower() (lower) / isupper(): some cased character, none of the other case. */
static bool s_is_case(const val *s, bool lower)
{
    bool cased = false;
    size_t l;
    for (size_t i = 0; i < s->u.s.n; i += l) {
        uint32_t c = u8_at(s->u.s.p, s->u.s.n, i, &l);
        if (!cp_cased(c) && c != 0xDF) continue;
        bool upper_c = c != 0xDF && cp_case(c, true) == c; /* cased and already upper case (ß is lower) */
        if (upper_c == lower) return false;   /* of the other case */
        cased = true;
    }
    return cased;
}

static bool s_affix(struct rs *R, const val *s, const val *x, bool end)
{
    if (x && x->t == V_LIST) {
        for (size_t i = 0; i < x->u.l->n; i++)
            if (s_affix(R, s, &x->u.l->v[i], end)) return true;
        return false;
    }
    if (!x || !need_str(R, x, end ? "endswith arg" : "startswith arg")) return false;
    size_t m = x->u.s.n;
    if (m > s->u.s.n) return false;
    return !memcmp(s->u.s.p + (end ? s->u.s.n - m : 0), x->u.s.p, m);
}

static val s_join(struct rs *R, const val *sep, const val *seq, const val *attr, bool any_type);
static val get_path(struct rs *R, const val *o, const val *attr);

/* A str method; *found false when name is none of them. */
static val str_method(struct rs *R, const val *s, const char *name, size_t n, const struct av *a, int na, bool *found)
{
    *found = true;
    const val *a0 = argp(a, na, 0, NULL), *a1 = argp(a, na, 1, NULL), *a2 = argp(a, na, 2, NULL);
#define IS(x) (n == sizeof x - 1 && !memcmp(name, x, n))
    if (IS("strip")) return s_strip(R, s, a0, 3);
    if (IS("lstrip")) return s_strip(R, s, a0, 1);
    if (IS("rstrip")) return s_strip(R, s, a0, 2);
    if (IS("split")) return s_split(R, s, argp(a, na, 0, "sep"), argp(a, na, 1, "maxsplit"));
    if (IS("rsplit")) return s_rsplit(R, s, argp(a, na, 0, "sep"), argp(a, na, 1, "maxsplit"));
    if (IS("splitlines")) return s_splitlines(R, &s->u.s);
    if (IS("startswith")) return vbool(s_affix(R, s, a0, false));
    if (IS("endswith")) return vbool(s_affix(R, s, a0, true));
    if (IS("replace")) return a0 && a1 ? s_replace(R, s, a0, a1, a2) : (fail(R, ATTND_ERR_INVALID, "TypeError: replace expected 2 arguments"), UNDEF);
    if (IS("lower")) return s_case(R, s, 'l');
    if (IS("upper")) return s_case(R, s, 'u');
    if (IS("title")) return s_case(R, s, 't');
    if (IS("capitalize")) return s_case(R, s, 'c');
    if (IS("join")) return a0 ? s_join(R, s, a0, NULL, false) : UNDEF;
    if (IS("find") || IS("rfind") || IS("count") || IS("index")) {
        if (!a0 || !need_str(R, a0, "must be str") || !charge(R, s->u.s.n * (a0->u.s.n > 16 ? 16 : a0->u.s.n + 1))) return UNDEF;
        const char *p = s->u.s.p, *f = NULL;
        size_t m = a0->u.s.n, cnt = 0, last = SIZE_MAX;
        for (size_t i = 0; i + m <= s->u.s.n;) {
            if (!memcmp(p + i, a0->u.s.p, m)) {
                if (!f) f = p + i;
                last = i;
                cnt++;
                i += m ? m : 1;
            } else {
                i++;
            }
        }
        if (IS("count")) return vint((int64_t)(m ? cnt : u8_count(p, s->u.s.n) + 1));
        if (IS("rfind")) return vint(last == SIZE_MAX ? -1 : (int64_t)u8_count(p, last));
        if (!f && IS("index")) fail(R, ATTND_ERR_INVALID, "ValueError: substring not found");
        return vint(f ? (int64_t)u8_count(p, (size_t)(f - p)) : -1);
    }
    if (IS("isdigit") || IS("isspace") || IS("isalpha") || IS("isalnum") || IS("islower") || IS("isupper")) {
        bool ok = s->u.s.n > 0;
        for (size_t i = 0; i < s->u.s.n && ok; i++) {
            unsigned char c = (unsigned char)s->u.s.p[i];
            if (IS("isdigit")) ok = c >= '0' && c <= '9';
            else if (IS("isspace")) ok = py_space(c);
            else if (IS("isalpha")) ok = is_lower_c(c) || is_upper_c(c);
            else if (IS("isalnum")) ok = is_lower_c(c) || is_upper_c(c) || (c >= '0' && c <= '9');
            else ok = true;
        }
        if (IS("islower") || IS("isupper")) return vbool(s_is_case(s, IS("islower")));
        return vbool(ok);
    }
#undef IS
    *found = false;
    return UNDEF;
}

static val dict_method(struct rs *R, const val *d, const char *name, size_t n, const struct av *a, int na, bool *found)
{
    *found = true;
#define IS(x) (n == sizeof x - 1 && !memcmp(name, x, n))
    if (IS("get")) {
        const val *k = argp(a, na, 0, NULL), *def = argp(a, na, 1, NULL);
        val *v = k ? dict_get(R, d->u.d, k) : NULL;
        return v ? *v : def ? *def : NONE;
    }
    if (IS("items") || IS("keys") || IS("values")) {
        struct lb b = {.R = R};
        for (size_t i = 0; i < d->u.d->n; i++) {
            if (IS("keys")) lb_push(&b, d->u.d->k[i]);
            else if (IS("values")) lb_push(&b, d->u.d->v[i]);
            else {
                val kv[2] = {d->u.d->k[i], d->u.d->v[i]};
                lb_push(&b, list_of(R, kv, 2, true));
            }
        }
        return lb_val(&b, IS("keys") ? 3 : IS("values") ? 4 : 5);
    }
#undef IS
    *found = false;
    return UNDEF;
}

/* =============================================================================================
 * Filters and tests
 * =========================================================================================== */

static val apply_filter(struct rs *R, const char *name, size_t n, const val *in, const struct av *a, int na);
static bool apply_test(struct rs *R, const char *name, size_t n, const val *in, const struct av *a, int na);

static val s_join(struct rs *R, const val *sep, const val *seq, const val *attr, bool any_type)
{
    val items;
    if (!iter_list(R, seq, &items)) return UNDEF;
    struct sb b = {.R = R};
    sb_put(&b, "", 0);
    for (size_t i = 0; i < items.u.l->n && step(R); i++) {
        val it = attr ? get_path(R, &items.u.l->v[i], attr) : items.u.l->v[i];
        if (i && sep) sb_jstr(&b, &sep->u.s);
        if (!any_type && it.t != V_STR) {
            fail(R, ATTND_ERR_INVALID, "TypeError: sequence item %zu: expected str instance, %s found", i, type_name(&it));
            break;
        }
        put_val(&b, &it, false);
    }
    return sb_val(&b);
}

/* o.attr where attr is "a.b.0" (jinja2's attribute paths), for map/selectattr/sort/join. */
static val get_path(struct rs *R, const val *o, const val *attr)
{
    if (attr->t != V_STR) return get_item(R, o, attr);
    val cur_ = *o;
    const char *p = attr->u.s.p, *end = p + attr->u.s.n;
    while (p <= end && !R->st) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t n = dot ? (size_t)(dot - p) : (size_t)(end - p);
        bool digits = n > 0;
        for (size_t i = 0; i < n; i++) digits &= is_digit(p[i]);
        if (cur_.t == V_UNDEF) return cur_;
        if (digits && cur_.t == V_LIST) {
            val k = vint(strtoll(p, NULL, 10));
            cur_ = get_item(R, &cur_, &k);
        } else {
            val k = vlit(p, n);
            cur_ = get_item(R, &cur_, &k);
        }
        if (!dot) break;
        p = dot + 1;
    }
    return cur_;
}

static val f_tojson(struct rs *R, const val *in, const struct av *a, int na)
{
    const val *asc = argp(a, na, 0, "ensure_ascii"), *ind = argp(a, na, 1, "indent"), *sep = argp(a, na, 2, "separators");
    struct jopt o = {.indent = -1, .isep = ", ", .ksep = ": ", .sort_keys = arg_true(a, na, 3, "sort_keys")};
    o.ascii = asc && truthy(asc);
    if (ind && ind->t == V_INT) {
        o.indent = ind->u.i < 0 ? 0 : ind->u.i > 64 ? 64 : (int)ind->u.i;
        o.isep = ",";
    }
    if (sep && sep->t == V_LIST && sep->u.l->n == 2 && sep->u.l->v[0].t == V_STR && sep->u.l->v[1].t == V_STR) {
        val s0 = sep->u.l->v[0], s1 = sep->u.l->v[1];
        char *x = ralloc(R, s0.u.s.n + 1), *y = ralloc(R, s1.u.s.n + 1);
        if (!x || !y) return UNDEF;
        memcpy(x, s0.u.s.p, s0.u.s.n);
        x[s0.u.s.n] = 0;
        memcpy(y, s1.u.s.p, s1.u.s.n);
        y[s1.u.s.n] = 0;
        o.isep = x;
        o.ksep = y;
    }
    struct sb b = {.R = R};
    put_json(&b, in, &o, 0);
    return sb_val(&b);
}

static val f_length(struct rs *R, const val *in)
{
    switch (in->t) {
    case V_UNDEF: return vint(0);
    case V_STR: return charge(R, in->u.s.n) ? vint((int64_t)u8_count(in->u.s.p, in->u.s.n)) : UNDEF;
    case V_LIST:
        if (in->tuple == 2) break;
        return vint((int64_t)in->u.l->n);
    case V_DICT: case V_NS: return vint((int64_t)in->u.d->n);
    default: break;
    }
    fail(R, ATTND_ERR_INVALID, "TypeError: object of type '%s' has no len()", type_name(in));
    return UNDEF;
}

static val f_indent(struct rs *R, const val *in, const struct av *a, int na)
{
    const val *w = argp(a, na, 0, "width");
    bool first = arg_true(a, na, 1, "first"), blank = arg_true(a, na, 2, "blank");
    val ind = w && w->t == V_STR ? *w : vlit("    ", (size_t)(w && w->t == V_INT ? (w->u.i < 0 ? 0 : w->u.i > 4 ? 4 : w->u.i) : 4));
    struct sb pad = {.R = R};
    if (w && w->t == V_INT && w->u.i > 4) {
        for (int64_t i = 0; i < w->u.i && i < 256; i++) sb_put(&pad, " ", 1);
        ind = sb_val(&pad);
    }
    if (in->t == V_UNDEF) return undef_fail(R, in), UNDEF;
    if (in->t != V_STR)
        return fail(R, ATTND_ERR_INVALID, "TypeError: unsupported operand type(s) for +=: '%s' and 'str'", type_name(in)), UNDEF;
    val s = *in, nl = vlit("\n", 1);
    s = concat2(R, &s.u.s, &nl.u.s);
    val lines = s_splitlines(R, &s.u.s);
    if (R->st) return UNDEF;
    struct sb b = {.R = R};
    sb_put(&b, "", 0);
    if (first) sb_jstr(&b, &ind.u.s);
    for (size_t i = 0; i < lines.u.l->n && !R->st; i++) {
        const val *ln = &lines.u.l->v[i];
        if (i) {
            sb_put(&b, "\n", 1);
            if (blank || ln->u.s.n) sb_jstr(&b, &ind.u.s);
        }
        sb_jstr(&b, &ln->u.s);
    }
    return sb_val(&b);
}

static val f_select(struct rs *R, const val *in, const struct av *a, int na, bool attr, bool keep)
{
    val items;
    if (!truthy(in)) return list_of(R, NULL, 0, 2); /* jinja2: `if value:` before iterating */
    if (!iter_list(R, in, &items)) return UNDEF;
    int skip = attr ? 1 : 0;
    const val *an = attr ? argp(a, na, 0, NULL) : NULL, *tn = argp(a, na, skip, NULL);
    if (attr && !an) {
        fail(R, ATTND_ERR_INVALID, "TypeError: selectattr needs an attribute name");
        return UNDEF;
    }
    if (tn && tn->t != V_STR) {
        fail(R, ATTND_ERR_INVALID, "TypeError: the test name must be a string");
        return UNDEF;
    }
    int extra = na - skip - (tn ? 1 : 0);
    const struct av *ea = a && extra > 0 ? a + skip + (tn ? 1 : 0) : NULL;
    struct lb b = {.R = R};
    for (size_t i = 0; i < items.u.l->n && step(R); i++) {
        val x = attr ? get_path(R, &items.u.l->v[i], an) : items.u.l->v[i];
        bool t = tn ? apply_test(R, tn->u.s.p, tn->u.s.n, &x, ea, extra < 0 ? 0 : extra) : truthy(&x);
        if (t == keep) lb_push(&b, items.u.l->v[i]);
    }
    return lb_val(&b, 2);
}

static val f_map(struct rs *R, const val *in, const struct av *a, int na)
{
    val items;
    if (!truthy(in)) return list_of(R, NULL, 0, 2);
    if (!iter_list(R, in, &items)) return UNDEF;
    const val *attr = argp(a, na, -1, "attribute"), *def = argp(a, na, -1, "default"), *fn = argp(a, na, 0, NULL);
    if (!attr && (!fn || fn->t != V_STR)) {
        fail(R, ATTND_ERR_INVALID, "FilterArgumentError: map requires a filter argument");
        return UNDEF;
    }
    struct lb b = {.R = R};
    for (size_t i = 0; i < items.u.l->n && step(R); i++) {
        const val *x = &items.u.l->v[i];
        if (attr) {
            val v = get_path(R, x, attr);
            lb_push(&b, v.t == V_UNDEF && def ? *def : v);
        } else {
            lb_push(&b, apply_filter(R, fn->u.s.p, fn->u.s.n, x, a + 1, na - 1));
        }
    }
    return lb_val(&b, 2);
}

static int sort_cmp(struct rs *R, const val *x, const val *y, bool cs)
{
    if (!cs && x->t == V_STR && y->t == V_STR) {
        val lx = s_case(R, x, 'l'), ly = s_case(R, y, 'l');
        return order(R, &lx, &ly, "<");
    }
    return order(R, x, y, "<");
}

static val f_sort(struct rs *R, const val *in, const struct av *a, int na, bool uniq)
{
    val items;
    if (!iter_list(R, in, &items)) return UNDEF;
    bool rev = !uniq && arg_true(a, na, 0, "reverse"), cs = arg_true(a, na, uniq ? 0 : 1, "case_sensitive");
    const val *attr = argp(a, na, uniq ? 1 : 2, "attribute");
    size_t n = items.u.l->n;
    val *v = ralloc(R, (n + 1) * sizeof *v), *k = ralloc(R, (n + 1) * sizeof *k);
    if (!v || !k) return UNDEF;
    size_t m = 0;
    for (size_t i = 0; i < n && step(R); i++) {
        val key = attr ? get_path(R, &items.u.l->v[i], attr) : items.u.l->v[i];
        bool dup = false;
        val ukey = uniq && !cs && key.t == V_STR ? s_case(R, &key, 'l') : key;
        for (size_t j = 0; uniq && j < m && !dup && !R->st; j++) {
            val uk = !cs && k[j].t == V_STR ? s_case(R, &k[j], 'l') : k[j];
            dup = eq(R, &uk, &ukey);
        }
        if (dup) continue;
        v[m] = items.u.l->v[i];
        k[m++] = key;
        if (uniq) continue;
        for (size_t j = m - 1; j > 0 && step(R); j--) { /* insertion sort: stable */
            int c = sort_cmp(R, &k[j - 1], &k[j], cs);
            if (R->st || (rev ? c >= 0 : c <= 0)) break;
            val t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
            t = k[j]; k[j] = k[j - 1]; k[j - 1] = t;
        }
    }
    return list_of(R, v, m, false);
}

static val f_default(const val *in, const struct av *a, int na)
{
    const val *d = argp(a, na, 0, "default_value");
    bool boolean = arg_true(a, na, 1, "boolean");
    if (in->t == V_UNDEF || (boolean && !truthy(in))) return d ? *d : vlit("", 0);
    return *in;
}

static val f_first_last(struct rs *R, const val *in, bool last)
{
    val items;
    if (last && in->t == V_LIST && in->tuple == 2) {
        fail(R, ATTND_ERR_INVALID, "TypeError: 'generator' object is not reversible");
        return UNDEF;
    }
    if (!iter_list(R, in, &items)) return UNDEF;
    if (!items.u.l->n) return undef_hint(R, "No %s item, sequence was empty.", last ? "last" : "first");
    return items.u.l->v[last ? items.u.l->n - 1 : 0];
}

static val f_int(struct rs *R, const val *in, const struct av *a, int na, bool flt)
{
    const val *d = argp(a, na, 0, "default");
    val def = d ? *d : flt ? vfloat(0.0) : vint(0);
    if (in->t == V_INT || in->t == V_BOOL) return flt ? vfloat((double)num_i(in)) : vint(num_i(in));
    if (in->t == V_FLOAT) return flt ? *in : (isfinite(in->u.f) ? vint((int64_t)in->u.f) : def);
    if (in->t != V_STR) return def;
    val s = s_strip(R, in, NULL, 3);
    char buf[64];
    if (R->st || s.u.s.n >= sizeof buf || !s.u.s.n) return def;
    memcpy(buf, s.u.s.p, s.u.s.n);
    buf[s.u.s.n] = 0;
    char *end;
    if (!flt) {
        long long x = strtoll(buf, &end, 10);
        if (!*end) return vint(x);
    }
    double f = strtod(buf, &end);
    if (*end || (!flt && !isfinite(f))) return def;
    return flt ? vfloat(f) : vint((int64_t)f);
}

static val f_escape(struct rs *R, const val *in)
{
    if (in->t == V_STR && in->tuple == 1) return *in;
    val s = to_str(R, in);
    struct sb b = {.R = R};
    bool data = is_data(&s);
    sb_put(&b, "", 0);
    for (size_t i = 0; i < s.u.s.n && !R->st; i++) {
        char c = s.u.s.p[i];
        const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
        if (e) sb_putd(&b, e, strlen(e), data);
        else sb_putc(&b, c, data);
    }
    val r = sb_val(&b);
    r.tuple = 1;
    return r;
}

static val f_items(struct rs *R, const val *in)
{
    if (in->t == V_UNDEF) return list_of(R, NULL, 0, false);
    if (in->t != V_DICT && in->t != V_NS) {
        fail(R, ATTND_ERR_INVALID, "TypeError: Can only get item pairs from a mapping.");
        return UNDEF;
    }
    bool found;
    val r = dict_method(R, in, "items", 5, NULL, 0, &found);
    if (r.t == V_LIST) r.tuple = 2; /* jinja2's items filter is a generator */
    return r;
}

static val f_misc(struct rs *R, const char *name, size_t n, const val *in, const struct av *a, int na, bool *found)
{
    *found = true;
#define IS(x) (n == sizeof x - 1 && !memcmp(name, x, n))
    if (IS("reverse")) {
        if (in->t == V_STR) {
            val m1 = vint(-1);
            return do_slice(R, in, &UNDEF, &UNDEF, &m1);
        }
        val items;
        if (!iter_list(R, in, &items)) return UNDEF;
        struct lb b = {.R = R};
        for (size_t i = items.u.l->n; i-- > 0;) lb_push(&b, items.u.l->v[i]);
        return lb_val(&b, 2); /* reversed(): an iterator in jinja2 */
    }
    if (IS("abs")) {
        if (in->t == V_FLOAT) return vfloat(fabs(in->u.f));
        if (is_num(in)) return num_i(in) == INT64_MIN ? UNDEF : vint(num_i(in) < 0 ? -num_i(in) : num_i(in));
        fail(R, ATTND_ERR_INVALID, "TypeError: bad operand type for abs(): '%s'", type_name(in));
        return UNDEF;
    }
    if (IS("wordcount")) {
        val s = to_str(R, in), w = s_split(R, &s, NULL, NULL);
        return R->st ? UNDEF : vint((int64_t)w.u.l->n);
    }
    if (IS("center")) {
        const val *w = argp(a, na, 0, "width");
        val s = to_str(R, in);
        int64_t width = w && w->t == V_INT ? w->u.i : 80, len = (int64_t)u8_count(s.u.s.p, s.u.s.n);
        if (width <= len || width > 4096) return s;
        int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
        struct sb b = {.R = R};
        for (int64_t i = 0; i < left; i++) sb_put(&b, " ", 1);
        sb_jstr(&b, &s.u.s);
        for (int64_t i = 0; i < pad - left; i++) sb_put(&b, " ", 1);
        return sb_val(&b);
    }
    if (IS("sum") || IS("max") || IS("min")) {
        val items, acc = IS("sum") ? vint(0) : UNDEF;
        if (!iter_list(R, in, &items)) return UNDEF;
        for (size_t i = 0; i < items.u.l->n && !R->st; i++) {
            const val *x = &items.u.l->v[i];
            if (IS("sum")) acc = arith(R, B_ADD, &acc, x);
            else if (acc.t == V_UNDEF || (order(R, x, &acc, "<") < 0) == IS("min")) acc = *x;
        }
        return acc;
    }
    if (IS("round")) { /* Python's round(): half to even; an int stays an int */
        const val *p = argp(a, na, 0, "precision"), *meth = argp(a, na, 1, "method");
        int64_t prec = p && p->t == V_INT ? p->u.i : 0;
        if (!is_num(in)) return fail(R, ATTND_ERR_INVALID, "TypeError: type %s doesn't define __round__ method", type_name(in)), UNDEF;
        if (in->t != V_FLOAT && prec >= 0 && !meth) return vint(num_i(in));
        double m = pow(10, (double)(prec > 300 ? 300 : prec < -300 ? -300 : prec)), x = num_f(in) * m;
        bool floor_ = meth && meth->t == V_STR && meth->u.s.n == 5 && !memcmp(meth->u.s.p, "floor", 5);
        bool ceil_ = meth && meth->t == V_STR && meth->u.s.n == 4 && !memcmp(meth->u.s.p, "ceil", 4);
        return vfloat((floor_ ? floor(x) : ceil_ ? ceil(x) : meth ? round(x) : nearbyint(x)) / m);
    }
#undef IS
    *found = false;
    return UNDEF;
}

/* Python's printf-style fmt % args for %s %r %d %i %f %% (with an optional .N precision for %f);
 * args: a tuple (its items, in order) or one value. */
static val py_format(struct rs *R, const val *fmt, const val *args)
{
    const val *items = args->t == V_LIST && args->tuple == 1 ? args->u.l->v : args;
    size_t n_items = args->t == V_LIST && args->tuple == 1 ? args->u.l->n : 1, used = 0;
    struct sb b = {.R = R};
    sb_put(&b, "", 0);
    const char *p = fmt->u.s.p, *end = p + fmt->u.s.n;
    while (p < end && !R->st) {
        const char *q = memchr(p, '%', (size_t)(end - p));
        sb_putd(&b, p, (size_t)((q ? q : end) - p), is_data(fmt));
        if (!q) break;
        int prec = -1;
        p = q + 1;
        if (p < end && *p == '.' && p + 1 < end && is_digit(p[1])) prec = (int)strtol(p + 1, (char **)&p, 10) % 100;
        char c = p < end ? *p++ : 0;
        if (c == '%') {
            sb_put(&b, "%", 1);
            continue;
        }
        if (!strchr("srdif", c) || !c || used >= n_items) {
            fail(R, ATTND_ERR_INVALID, "TypeError: not enough arguments for format string");
            break;
        }
        const val *x = &items[used++];
        char buf[64];
        if (c == 's' || c == 'r') put_val(&b, x, c == 'r');
        else if (!is_num(x)) fail(R, ATTND_ERR_INVALID, "TypeError: %%%c format: a real number is required, not %s", c, type_name(x));
        else if (c == 'f') snprintf(buf, sizeof buf, "%.*f", prec < 0 ? 6 : prec, num_f(x)), sb_puts(&b, buf);
        else snprintf(buf, sizeof buf, "%" PRId64, x->t == V_FLOAT ? (int64_t)x->u.f : num_i(x)), sb_puts(&b, buf);
    }
    if (!R->st && used < n_items && args->t != V_DICT && !(args->t == V_LIST && args->tuple != 1)) /* Python lets a mapping-like pass */
        fail(R, ATTND_ERR_INVALID, "TypeError: not all arguments converted during string formatting");
    return sb_val(&b);
}

/* truncate(length=255, killwords=false, end='...', leeway=5), as jinja2's (lengths in code points). */
static val f_truncate(struct rs *R, const val *in, const struct av *a, int na)
{
    const val *lv = argp(a, na, 0, "length"), *kw = argp(a, na, 1, "killwords"), *ev_ = argp(a, na, 2, "end"),
              *lw = argp(a, na, 3, "leeway");
    val s = to_str(R, in), end = ev_ && ev_->t == V_STR ? *ev_ : vlit("...", 3);
    int64_t len = lv && lv->t == V_INT ? lv->u.i : 255, leeway = lw && lw->t == V_INT ? lw->u.i : 5;
    int64_t n = (int64_t)u8_count(s.u.s.p, s.u.s.n), ne = (int64_t)u8_count(end.u.s.p, end.u.s.n);
    if (R->st) return UNDEF;
    if (len < ne || leeway < 0) return fail(R, ATTND_ERR_INVALID, "AssertionError: expected length >= %" PRId64 ", got %" PRId64, ne, len), UNDEF;
    if (n <= len + leeway) return s;
    size_t off = 0, l = 0;
    for (int64_t k = 0; k < len - ne && off < s.u.s.n; k++, off += l) u8_at(s.u.s.p, s.u.s.n, off, &l);
    size_t cut = off;
    if (!(kw && truthy(kw))) { /* rsplit(" ", 1)[0] */
        const char *sp = NULL;
        for (size_t k = off; k-- > 0;)
            if (s.u.s.p[k] == ' ') {
                sp = s.u.s.p + k;
                break;
            }
        if (sp) cut = (size_t)(sp - s.u.s.p);
    }
    val head = str_sub(R, &s.u.s, 0, cut);
    return concat2(R, &head.u.s, &end.u.s);
}

/* slice(slices, fill_with=None): the items in that many columns (a generator in jinja2). */
static val f_slice(struct rs *R, const val *in, const struct av *a, int na)
{
    const val *sv = argp(a, na, 0, "slices"), *fill = argp(a, na, 1, "fill_with");
    val items;
    if (!sv || sv->t != V_INT || sv->u.i <= 0 || sv->u.i > 10000)
        return fail(R, ATTND_ERR_INVALID, "TypeError: slice needs a positive count"), UNDEF;
    if (!iter_list(R, in, &items)) return UNDEF;
    int64_t n = (int64_t)items.u.l->n, per = n / sv->u.i, extra = n % sv->u.i, offset = 0;
    struct lb out = {.R = R};
    for (int64_t k = 0; k < sv->u.i && !R->st; k++) {
        int64_t st = offset + k * per;
        if (k < extra) offset++;
        int64_t e = offset + (k + 1) * per;
        struct lb col = {.R = R};
        for (int64_t i = st; i < e && i < n; i++) lb_push(&col, items.u.l->v[i]);
        if (fill && fill->t != V_NONE && k >= extra) lb_push(&col, *fill);
        lb_push(&out, lb_val(&col, 0));
    }
    return lb_val(&out, 2);
}

/* dictsort(case_sensitive=false, by='key', reverse=false): the (key, value) pairs, sorted. */
static val f_dictsort(struct rs *R, const val *in, const struct av *a, int na)
{
    if (in->t != V_DICT) return fail(R, ATTND_ERR_INVALID, "TypeError: dictsort needs a mapping"), UNDEF;
    bool cs = arg_true(a, na, 0, "case_sensitive"), rev = arg_true(a, na, 2, "reverse");
    const val *by = argp(a, na, 1, "by");
    int pos = by && by->t == V_STR && by->u.s.n == 5 && !memcmp(by->u.s.p, "value", 5) ? 1 : 0;
    size_t n = in->u.d->n;
    val *v = ralloc(R, (n + 1) * sizeof *v);
    if (!v) return UNDEF;
    for (size_t i = 0; i < n && !R->st; i++) {
        val kv[2] = {in->u.d->k[i], in->u.d->v[i]};
        v[i] = list_of(R, kv, 2, 1);
        for (size_t j = i; j > 0 && step(R); j--) {
            int c = sort_cmp(R, &v[j - 1].u.l->v[pos], &v[j].u.l->v[pos], cs);
            if (R->st || (rev ? c >= 0 : c <= 0)) break;
            val t = v[j]; v[j] = v[j - 1]; v[j - 1] = t;
        }
    }
    return list_of(R, v, n, 0);
}

static val f_batch(struct rs *R, const val *in, const struct av *a, int na)
{
    const val *cnt = argp(a, na, 0, "linecount"), *fill = argp(a, na, 1, "fill_with");
    val items;
    if (!cnt || cnt->t != V_INT || cnt->u.i <= 0) return fail(R, ATTND_ERR_INVALID, "TypeError: batch needs a count"), UNDEF;
    if (!iter_list(R, in, &items)) return UNDEF;
    struct lb out = {.R = R}, cur_ = {.R = R};
    for (size_t i = 0; i < items.u.l->n && !R->st; i++) {
        lb_push(&cur_, items.u.l->v[i]);
        if ((int64_t)cur_.n == cnt->u.i) lb_push(&out, lb_val(&cur_, 0));
    }
    if (cur_.n) {
        while (fill && (int64_t)cur_.n < cnt->u.i && !R->st) lb_push(&cur_, *fill);
        lb_push(&out, lb_val(&cur_, 0));
    }
    free(cur_.v);
    return lb_val(&out, 2);
}

/* "%s" % args: the format filter, positional arguments only */
static val f_format(struct rs *R, const val *in, const struct av *a, int na)
{
    if (in->t != V_STR) return fail(R, ATTND_ERR_INVALID, "TypeError: format needs a string"), UNDEF;
    struct lb l = {.R = R};
    for (int i = 0; i < na; i++)
        if (!a[i].kw) lb_push(&l, a[i].v);
    val args = lb_val(&l, 1);
    return R->st ? UNDEF : py_format(R, in, &args);
}

static val apply_filter(struct rs *R, const char *name, size_t n, const val *in, const struct av *a, int na)
{
    if (!step(R)) return UNDEF;
#define IS(x) (n == sizeof x - 1 && !memcmp(name, x, n))
    if (IS("tojson")) return f_tojson(R, in, a, na);
    if (IS("length") || IS("count")) return f_length(R, in);
    if (IS("default") || IS("d")) return f_default(in, a, na);
    if (IS("items")) return f_items(R, in);
    if (IS("list")) {
        val l;
        return iter_list(R, in, &l) ? (in->t == V_LIST ? list_of(R, l.u.l->v, l.u.l->n, false) : l) : UNDEF;
    }
    if (IS("string")) return to_str(R, in);
    if (IS("safe")) {
        val s = to_str(R, in);
        s.tuple = 1;
        return s;
    }
    if (IS("e") || IS("escape")) return f_escape(R, in);
    if (IS("first") || IS("last")) return f_first_last(R, in, IS("last"));
    if (IS("int") || IS("float")) return f_int(R, in, a, na, IS("float"));
    if (IS("join")) {
        const val *sep = argp(a, na, 0, "d");
        if (sep && sep->t != V_STR) sep = NULL;
        return s_join(R, sep, in, argp(a, na, 1, "attribute"), true);
    }
    if (IS("map")) return f_map(R, in, a, na);
    if (IS("select") || IS("reject")) return f_select(R, in, a, na, false, IS("select"));
    if (IS("selectattr") || IS("rejectattr")) return f_select(R, in, a, na, true, IS("selectattr"));
    if (IS("sort") || IS("unique")) {
        val r = f_sort(R, in, a, na, IS("unique"));
        if (r.t == V_LIST && IS("unique")) r.tuple = 2; /* a generator in jinja2 */
        return r;
    }
    if (IS("indent")) return f_indent(R, in, a, na);
    if (IS("dictsort")) return f_dictsort(R, in, a, na);
    if (IS("truncate")) return f_truncate(R, in, a, na);
    if (IS("slice")) return f_slice(R, in, a, na);
    if (IS("pprint")) {
        struct sb b = {.R = R};
        put_val(&b, in, true);
        return sb_val(&b);
    }
    if (IS("forceescape")) {
        val plain = *in;
        if (plain.t == V_STR) plain.tuple = 0;
        return f_escape(R, &plain);
    }
    if (IS("batch")) return f_batch(R, in, a, na);
    if (IS("attr")) { /* Python attributes only: a dict's keys are not */
        const val *nm = argp(a, na, 0, "name");
        if (in->t == V_LOOP && nm && nm->t == V_STR) return loop_attr(R, in->u.lp, nm->u.s.p, nm->u.s.n);
        return undef_hint(R, "'%s' has no attribute", obj_repr(in));
    }
    if (IS("format")) return f_format(R, in, a, na);
    if (in->t == V_UNDEF && (IS("trim") || IS("lower") || IS("upper") || IS("title") || IS("capitalize") || IS("replace")))
        return vlit("", 0);
    val s = (IS("trim") || IS("lower") || IS("upper") || IS("title") || IS("capitalize") || IS("replace")) ? to_str(R, in) : *in;
    if (IS("trim")) return s_strip(R, &s, argp(a, na, 0, "chars"), 3);
    if (IS("lower")) return s_case(R, &s, 'l');
    if (IS("upper")) return s_case(R, &s, 'u');
    if (IS("title")) return s_case(R, &s, 'T');
    if (IS("capitalize")) return s_case(R, &s, 'c');
    if (IS("replace")) {
        const val *o = argp(a, na, 0, "old"), *nw = argp(a, na, 1, "new");
        if (!o || !nw) return fail(R, ATTND_ERR_INVALID, "TypeError: replace needs old and new"), UNDEF;
        val os = to_str(R, o), ns = to_str(R, nw);
        return s_replace(R, &s, &os, &ns, argp(a, na, 2, "count"));
    }
#undef IS
    bool found;
    val r = f_misc(R, name, n, in, a, na, &found);
    if (!found) fail(R, ATTND_ERR_INVALID, "TemplateRuntimeError: No filter named '%.*s' found.", (int)n, name);
    return r;
}

static bool apply_test(struct rs *R, const char *name, size_t n, const val *in, const struct av *a, int na)
{
    const val *x = argp(a, na, 0, NULL);
    int t = in->t;
    if (!step(R)) return false;
#define IS(s) (n == sizeof s - 1 && !memcmp(name, s, n))
    if (IS("defined")) return t != V_UNDEF;
    if (IS("undefined")) return t == V_UNDEF;
    if (IS("none")) return t == V_NONE;
    if (IS("string")) return t == V_STR;
    if (IS("mapping")) return t == V_DICT;
    if (IS("sequence")) return t == V_STR || (t == V_LIST && in->tuple < 2) || t == V_DICT;
    if (IS("iterable")) return t == V_STR || t == V_LIST || t == V_DICT || t == V_UNDEF;
    if (IS("number")) return t == V_INT || t == V_FLOAT || t == V_BOOL;
    if (IS("integer")) return t == V_INT;
    if (IS("float")) return t == V_FLOAT;
    if (IS("boolean")) return t == V_BOOL;
    if (IS("true")) return t == V_BOOL && in->u.b;
    if (IS("false")) return t == V_BOOL && !in->u.b;
    if (IS("callable")) return t == V_MACRO || t == V_FUNC;
    if (IS("lower") || IS("upper")) { /* str(value).islower() */
        val sv = to_str(R, in);
        return !R->st && s_is_case(&sv, IS("lower"));
    }
    if (IS("odd") || IS("even") || IS("divisibleby")) { /* value % 2 == 1, value % 2 == 0, value % num == 0 */
        val d = IS("divisibleby") ? (x ? *x : UNDEF) : vint(2), r = arith(R, B_MOD, in, &d), one = vint(IS("odd") ? 1 : 0);
        return !R->st && eq(R, &r, &one);
    }
    if (!x) return fail(R, ATTND_ERR_INVALID, "TypeError: test '%.*s' needs an argument", (int)n, name), false;
    if (IS("equalto") || IS("eq") || IS("==")) return eq(R, in, x);
    if (IS("ne") || IS("!=")) return !eq(R, in, x);
    if (IS("sameas")) return in->t == x->t && (t == V_NONE || t == V_UNDEF || (t == V_BOOL && in->u.b == x->u.b) || eq(R, in, x));
    if (IS("in")) return contains(R, in, x);
    if (IS("lt") || IS("lessthan") || IS("<")) return compare(R, C_LT, in, x);
    if (IS("le") || IS("<=")) return compare(R, C_LE, in, x);
    if (IS("gt") || IS("greaterthan") || IS(">")) return compare(R, C_GT, in, x);
    if (IS("ge") || IS(">=")) return compare(R, C_GE, in, x);
#undef IS
    fail(R, ATTND_ERR_INVALID, "TemplateRuntimeError: No test named '%.*s' found.", (int)n, name);
    return false;
}

/* =============================================================================================
 * Evaluation
 * =========================================================================================== */

enum { FN_RANGE = 1, FN_DICT, FN_NAMESPACE, FN_RAISE, FN_STRFTIME, FN_CYCLE };

static val ev(struct rs *R, struct frame *F, const struct expr *e);
static int ex_list(struct rs *R, struct frame *F, const struct node *n);

static bool ev_args(struct rs *R, struct frame *F, const struct expr *e, struct av **out)
{
    *out = NULL;
    if (!e->nargs) return true;
    struct av *a = ralloc(R, (size_t)e->nargs * sizeof *a);
    if (!a) return false;
    for (int i = 0; i < e->nargs && !R->st; i++) a[i] = (struct av){e->args[i].kw, e->args[i].kwn, ev(R, F, e->args[i].e)};
    *out = a;
    return !R->st;
}

/* A macro's varargs (positional arguments past its parameters) and kwargs (keyword arguments
 * none of its parameters takes), as jinja2 binds them. */
static void bind_extras(struct rs *R, struct frame *F, const struct node *d, const struct av *a, int na)
{
    struct lb va = {.R = R};
    val kw = dict_new(R, V_DICT);
    int pos = 0;
    for (int k = 0; k < na && !R->st; k++) {
        if (!a[k].kw) {
            if (pos++ >= d->nparams) lb_push(&va, a[k].v);
            continue;
        }
        bool named = false;
        for (int i = 0; i < d->nparams && !named; i++) named = a[k].kwn == d->params[i].n && !memcmp(a[k].kw, d->params[i].name, a[k].kwn);
        if (!named && kw.t == V_DICT) dict_set(R, kw.u.d, vlit(a[k].kw, a[k].kwn), a[k].v, true);
    }
    frame_set(R, F, "varargs", 7, lb_val(&va, 1));
    frame_set(R, F, "kwargs", 6, kw);
}

static val call_macro(struct rs *R, struct macro *m, const struct av *a, int na, struct macro *caller)
{
    const struct node *d = m->def;
    if (++R->depth > R->max_depth) {
        fail(R, ATTND_ERR_RANGE, "macro calls nest deeper than %d", R->max_depth);
        R->depth--;
        return UNDEF;
    }
    struct frame *F = frame_new(R, m->closure);
    if (!F) return UNDEF;
    for (int i = 0; i < d->nparams && !R->st; i++) {
        const struct param *p = &d->params[i];
        const val *v = argp(a, na, i, NULL);
        for (int k = 0; k < na && !v; k++)
            if (a[k].kw && a[k].kwn == p->n && !memcmp(a[k].kw, p->name, p->n)) v = &a[k].v;
        val x = v ? *v : p->def ? ev(R, F, p->def) : undef_hint(R, "parameter '%.*s' was not provided", (int)p->n, p->name);
        frame_set(R, F, p->name, p->n, x);
    }
    bind_extras(R, F, d, a, na);
    if (caller) frame_set(R, F, "caller", 6, (val){.t = V_MACRO, .u.m = caller});
    struct sb b = {.R = R}, *saved = R->out;
    sb_put(&b, "", 0);
    R->out = &b;
    ex_list(R, F, d->body);
    R->out = saved;
    R->depth--;
    return sb_val(&b);
}

static val fn_strftime(struct rs *R, const val *fmt)
{
    if (!fmt || !need_str(R, fmt, "strftime_now format")) return UNDEF;
    struct tm tm;
    if (R->now) tm = *R->now;
    else {
        time_t t = time(NULL);
        localtime_r(&t, &tm);
    }
    char f[256], out[512];
    if (fmt->u.s.n >= sizeof f) return fail(R, ATTND_ERR_RANGE, "strftime_now: the format is too long"), UNDEF;
    memcpy(f, fmt->u.s.p, fmt->u.s.n);
    f[fmt->u.s.n] = 0;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral" /* the template's format, as Python's strftime */
    size_t n = strftime(out, sizeof out, f, &tm);
#pragma GCC diagnostic pop
    return vstr(R, out, n, false);
}

static val fn_range(struct rs *R, const struct av *a, int na)
{
    const val *x = argp(a, na, 0, NULL), *y = argp(a, na, 1, NULL), *z = argp(a, na, 2, NULL);
    if (!x || !is_num(x) || x->t == V_FLOAT || (y && (!is_num(y) || y->t == V_FLOAT)) || (z && (!is_num(z) || z->t == V_FLOAT)))
        return fail(R, ATTND_ERR_INVALID, "TypeError: range() takes integer arguments"), UNDEF;
    int64_t lo = y ? num_i(x) : 0, hi = y ? num_i(y) : num_i(x), st = z ? num_i(z) : 1;
    if (!st) return fail(R, ATTND_ERR_INVALID, "ValueError: range() arg 3 must not be zero"), UNDEF;
    double cnt = st > 0 ? ceil(((double)hi - (double)lo) / (double)st) : ceil(((double)lo - (double)hi) / (double)-st);
    if (cnt > MAX_RANGE)
        return fail(R, ATTND_ERR_RANGE, "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                    MAX_RANGE), UNDEF;
    struct lb b = {.R = R};
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) lb_push(&b, vint(i));
    return lb_val(&b, false);
}

static val call_builtin(struct rs *R, int fn, const struct av *a, int na)
{
    if (fn == FN_RANGE) return fn_range(R, a, na);
    if (fn == FN_RAISE) {
        const val *m = argp(a, na, 0, "message");
        val s = m ? to_str(R, m) : vlit("", 0);
        if (!R->st) {
            fail(R, ATTND_ERR_INVALID, "%.*s", (int)s.u.s.n, s.u.s.p);
            R->raised = true;
        }
        return UNDEF;
    }
    if (fn == FN_STRFTIME) return fn_strftime(R, argp(a, na, 0, NULL));
    val d = dict_new(R, fn == FN_NAMESPACE ? V_NS : V_DICT);
    if (R->st) return UNDEF;
    for (int i = 0; i < na; i++) {
        if (!a[i].kw && (a[i].v.t == V_DICT || a[i].v.t == V_NS)) {
            for (size_t k = 0; k < a[i].v.u.d->n; k++) dict_set(R, d.u.d, a[i].v.u.d->k[k], a[i].v.u.d->v[k], true);
        } else if (a[i].kw) {
            dict_set(R, d.u.d, vlit(a[i].kw, a[i].kwn), a[i].v, true);
        } else {
            return fail(R, ATTND_ERR_INVALID, "TypeError: %s() takes keyword arguments", fn == FN_DICT ? "dict" : "namespace"),
                   UNDEF;
        }
    }
    return d;
}

static val call_val(struct rs *R, const val *f, const struct av *a, int na, struct macro *caller)
{
    if (f->t == V_MACRO) return call_macro(R, f->u.m, a, na, caller);
    if (f->t == V_FUNC) return call_builtin(R, f->u.fn, a, na);
    if (f->t == V_UNDEF) undef_fail(R, f);
    else fail(R, ATTND_ERR_INVALID, "TypeError: '%s' object is not callable", type_name(f));
    return UNDEF;
}

/* The methods that change a list or dict: the immutable sandbox refuses them. */
static bool unsafe_method(const char *name, size_t n)
{
    static const char *const m[] = {"append", "pop", "insert", "extend", "remove", "clear", "sort", "reverse",
                                    "update", "setdefault", "popitem"};
    for (size_t i = 0; i < sizeof m / sizeof *m; i++)
        if (n == strlen(m[i]) && !memcmp(name, m[i], n)) return true;
    return false;
}

static val ev_call(struct rs *R, struct frame *F, const struct expr *e, struct macro *caller)
{
    struct av *a;
    if (e->a->k == E_ATTR) {
        val o = ev(R, F, e->a->a);
        if (!ev_args(R, F, e, &a)) return UNDEF;
        bool found = false;
        val r = UNDEF;
        if (o.t == V_STR) r = str_method(R, &o, e->a->name, e->a->nname, a, e->nargs, &found);
        else if (o.t == V_DICT) r = dict_method(R, &o, e->a->name, e->a->nname, a, e->nargs, &found);
        else if (o.t == V_LOOP && e->a->nname == 5 && !memcmp(e->a->name, "cycle", 5)) {
            if (!e->nargs) return fail(R, ATTND_ERR_INVALID, "TypeError: no items for cycling given"), UNDEF;
            return a[o.u.lp->i % (size_t)e->nargs].v;
        } else if ((o.t == V_LIST || o.t == V_DICT) && unsafe_method(e->a->name, e->a->nname)) {
            return fail(R, ATTND_ERR_INVALID, "SecurityError: access to attribute '%.*s' of '%s' object is unsafe.",
                        (int)e->a->nname, e->a->name, type_name(&o)), UNDEF;
        }
        if (found || R->st) return r;
        val f = get_attr(R, &o, e->a->name, e->a->nname);
        return R->st ? UNDEF : call_val(R, &f, a, e->nargs, caller);
    }
    val f = ev(R, F, e->a);
    if (!ev_args(R, F, e, &a)) return UNDEF;
    return call_val(R, &f, a, e->nargs, caller);
}

static val ev_name(struct rs *R, struct frame *F, const struct expr *e)
{
    static const char *const fns[] = {"range", "dict", "namespace", "raise_exception", "strftime_now"};
    val *v = frame_find(F, e->name, e->nname);
    if (v) return *v;
    for (int i = 0; i < 5; i++)
        if (e->nname == strlen(fns[i]) && !memcmp(e->name, fns[i], e->nname)) return (val){.t = V_FUNC, .u.fn = i + 1};
    return undef_hint(R, "'%.*s' is undefined", (int)e->nname, e->name);
}

static val ev_seq(struct rs *R, struct frame *F, const struct expr *e)
{
    if (e->k == E_DICT) {
        val d = dict_new(R, V_DICT);
        for (int i = 0; i + 1 < e->nargs && !R->st; i += 2) {
            val k = ev(R, F, e->args[i].e), v = ev(R, F, e->args[i + 1].e);
            dict_set(R, d.u.d, k, v, true);
        }
        return d;
    }
    struct lb b = {.R = R};
    for (int i = 0; i < e->nargs && !R->st; i++) lb_push(&b, ev(R, F, e->args[i].e));
    return lb_val(&b, e->k == E_TUPLE);
}

static val ev_filter(struct rs *R, struct frame *F, const struct expr *e, const val *in)
{
    struct av *a;
    if (!ev_args(R, F, e, &a)) return UNDEF;
    return apply_filter(R, e->name, e->nname, in, a, e->nargs);
}

static val ev_ops(struct rs *R, struct frame *F, const struct expr *e)
{
    val a = ev(R, F, e->a);
    if (R->st) return UNDEF;
    if (e->k == E_AND) return truthy(&a) ? ev(R, F, e->b) : a;
    if (e->k == E_OR) return truthy(&a) ? a : ev(R, F, e->b);
    val b = ev(R, F, e->b);
    if (R->st) return UNDEF;
    if (e->k == E_BIN) return arith(R, e->op, &a, &b);
    if (e->k == E_CMP) return vbool(compare(R, e->op, &a, &b));
    if (e->k == E_IN) return vbool(contains(R, &a, &b) != e->neg);
    val x = to_str(R, &a), y = to_str(R, &b);
    return R->st ? UNDEF : concat2(R, &x.u.s, &y.u.s);
}

static val ev_unary(struct rs *R, struct frame *F, const struct expr *e)
{
    val a = ev(R, F, e->a);
    if (e->k == E_NOT) return vbool(!truthy(&a));
    if (a.t == V_UNDEF) return undef_fail(R, &a), UNDEF;
    if (!is_num(&a)) return fail(R, ATTND_ERR_INVALID, "TypeError: bad operand type for unary -: '%s'", type_name(&a)), UNDEF;
    if (e->k == E_POS) return a.t == V_BOOL ? vint(a.u.b) : a;
    if (a.t == V_FLOAT) return vfloat(-a.u.f);
    if (num_i(&a) == INT64_MIN) return fail(R, ATTND_ERR_RANGE, "OverflowError: integer overflow"), UNDEF;
    return vint(-num_i(&a));
}

static val ev_node(struct rs *R, struct frame *F, const struct expr *e);

static val ev(struct rs *R, struct frame *F, const struct expr *e)
{
    if (!step(R)) return UNDEF;
    if (++R->rdepth > MAX_RDEPTH) {
        fail(R, ATTND_ERR_RANGE, "the template nests evaluations deeper than %d", MAX_RDEPTH);
        R->rdepth--;
        return UNDEF;
    }
    val v = ev_node(R, F, e);
    R->rdepth--;
    return R->st ? UNDEF : v;
}

static val ev_node(struct rs *R, struct frame *F, const struct expr *e)
{
    switch (e->k) {
    case E_CONST: return e->cst;
    case E_NAME: return ev_name(R, F, e);
    case E_LIST: case E_TUPLE: case E_DICT: return ev_seq(R, F, e);
    case E_ATTR: {
        val o = ev(R, F, e->a);
        return R->st ? UNDEF : get_attr(R, &o, e->name, e->nname);
    }
    case E_ITEM: {
        val o = ev(R, F, e->a), k = ev(R, F, e->b);
        return R->st ? UNDEF : get_item(R, &o, &k);
    }
    case E_SLICE: {
        val o = ev(R, F, e->a), s0 = e->b ? ev(R, F, e->b) : NONE, s1 = e->c ? ev(R, F, e->c) : NONE,
            s2 = e->d ? ev(R, F, e->d) : NONE;
        return R->st ? UNDEF : do_slice(R, &o, &s0, &s1, &s2);
    }
    case E_CALL: return ev_call(R, F, e, NULL);
    case E_FILTER: {
        val in = ev(R, F, e->a);
        return R->st ? UNDEF : ev_filter(R, F, e, &in);
    }
    case E_TEST: {
        val in = ev(R, F, e->a);
        struct av *a;
        if (!ev_args(R, F, e, &a)) return UNDEF;
        return vbool(apply_test(R, e->name, e->nname, &in, a, e->nargs) != e->neg);
    }
    case E_NEG: case E_POS: case E_NOT: return ev_unary(R, F, e);
    case E_COND: {
        val c = ev(R, F, e->b);
        if (truthy(&c)) return ev(R, F, e->a);
        return e->c ? ev(R, F, e->c) : undef_hint(R, "the inline if-expression evaluated to false and no else section was defined.");
    }
    default: return ev_ops(R, F, e);
    }
}

/* =============================================================================================
 * Statements
 * =========================================================================================== */

enum { X_OK, X_BREAK, X_CONT };

static void assign(struct rs *R, struct frame *F, const struct expr *t, val v)
{
    if (R->st) return;
    if (t->k == E_NAME) {
        frame_set(R, F, t->name, t->nname, v);
    } else if (t->k == E_ATTR) {
        val ns = ev(R, F, t->a);
        if (ns.t != V_NS) fail(R, ATTND_ERR_INVALID, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        else dict_set(R, ns.u.d, vlit(t->name, t->nname), v, true);
    } else {
        val l;
        if (v.t != V_LIST && v.t != V_STR && v.t != V_DICT) {
            fail(R, ATTND_ERR_INVALID, "TypeError: cannot unpack non-iterable %s object", type_name(&v));
            return;
        }
        if (!iter_list(R, &v, &l)) return;
        if (l.u.l->n != (size_t)t->nargs) {
            fail(R, ATTND_ERR_INVALID, "ValueError: %s values to unpack (expected %d, got %zu)",
                 l.u.l->n < (size_t)t->nargs ? "not enough" : "too many", t->nargs, l.u.l->n);
            return;
        }
        for (int i = 0; i < t->nargs; i++) assign(R, F, t->args[i].e, l.u.l->v[i]);
    }
}

static int ex_for(struct rs *R, struct frame *F, const struct node *n)
{
    val it = ev(R, F, n->e), items;
    if (R->st || !iter_list(R, &it, &items)) return X_OK;
    struct frame *LF = frame_new(R, F);
    if (!LF) return X_OK;
    if (n->cond) {
        struct lb b = {.R = R};
        for (size_t i = 0; i < items.u.l->n && step(R); i++) {
            assign(R, LF, n->tgt, items.u.l->v[i]);
            val c = ev(R, LF, n->cond);
            if (truthy(&c)) lb_push(&b, items.u.l->v[i]);
        }
        items = lb_val(&b, false);
        if (R->st) return X_OK;
    }
    struct loopst *lp = ralloc(R, sizeof *lp);
    if (!lp) return X_OK;
    *lp = (struct loopst){items.u.l, 0};
    for (size_t i = 0; i < items.u.l->n && step(R); i++) { /* each iteration is a scope of its own, as in jinja2 */
        struct frame *IF = frame_new(R, F);
        if (!IF) break;
        lp->i = i;
        frame_set(R, IF, "loop", 4, (val){.t = V_LOOP, .u.lp = lp});
        assign(R, IF, n->tgt, items.u.l->v[i]);
        if (ex_list(R, IF, n->body) == X_BREAK) break;
    }
    if (!items.u.l->n && n->alt) ex_list(R, LF, n->alt);
    return X_OK;
}

static val apply_chain(struct rs *R, struct frame *F, const struct expr *f, const val *in)
{
    val x = f->a ? apply_chain(R, F, f->a, in) : *in;
    return R->st ? UNDEF : ev_filter(R, F, f, &x);
}

/* Renders body into a string value, in a scope of its own (sets inside do not leak, as in jinja2). */
static val capture(struct rs *R, struct frame *F, const struct node *body)
{
    struct sb b = {.R = R}, *saved = R->out;
    struct frame *S = frame_new(R, F);
    sb_put(&b, "", 0);
    R->out = &b;
    if (S) ex_list(R, S, body);
    R->out = saved;
    return sb_val(&b);
}

static int ex_node(struct rs *R, struct frame *F, const struct node *n)
{
    switch (n->k) {
    case S_TEXT: sb_put(R->out, n->text, n->len); return X_OK;
    case S_OUT: {
        val v = ev(R, F, n->e);
        put_val(R->out, &v, false);
        return X_OK;
    }
    case S_IF: {
        val c = ev(R, F, n->e);
        if (R->st) return X_OK;
        return ex_list(R, F, truthy(&c) ? n->body : n->alt);
    }
    case S_FOR: return ex_for(R, F, n);
    case S_SET: assign(R, F, n->tgt, ev(R, F, n->e)); return X_OK;
    case S_SETBLOCK: {
        val v = capture(R, F, n->body);
        if (n->filt && !R->st) v = apply_chain(R, F, n->filt, &v);
        assign(R, F, n->tgt, v);
        return X_OK;
    }
    case S_MACRO: {
        struct macro *m = ralloc(R, sizeof *m);
        if (m) *m = (struct macro){n, F, NULL};
        if (m) frame_set(R, F, n->text, n->len, (val){.t = V_MACRO, .u.m = m});
        return X_OK;
    }
    case S_CALLBLOCK: {
        struct macro *m = ralloc(R, sizeof *m);
        if (!m) return X_OK;
        *m = (struct macro){n, F, NULL};
        val v = ev_call(R, F, n->e, m);
        put_val(R->out, &v, false);
        return X_OK;
    }
    case S_FILTER: {
        val v = capture(R, F, n->body);
        if (!R->st) v = apply_chain(R, F, n->filt, &v);
        put_val(R->out, &v, false);
        return X_OK;
    }
    case S_BREAK: return X_BREAK;
    case S_CONTINUE: return X_CONT;
    default: {
        struct frame *S = frame_new(R, F);
        return S ? ex_list(R, S, n->body) : X_OK;
    }
    }
}

static int ex_list(struct rs *R, struct frame *F, const struct node *n)
{
    if (++R->rdepth > MAX_RDEPTH) {
        fail(R, ATTND_ERR_RANGE, "the template nests evaluations deeper than %d", MAX_RDEPTH);
        R->rdepth--;
        return X_OK;
    }
    int r = X_OK;
    for (; n && r == X_OK && step(R); n = n->next) r = ex_node(R, F, n);
    R->rdepth--;
    return r;
}

/* =============================================================================================
 * Context and entry points
 * =========================================================================================== */

static val from_json(struct rs *R, const cJSON *j, int depth)
{
    if (!step(R)) return UNDEF;
    if (cJSON_IsNull(j)) return NONE;
    if (cJSON_IsBool(j)) return vbool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9007199254740992.0) return vint((int64_t)d);
        return vfloat(d);
    }
    if (cJSON_IsString(j)) return vstr(R, j->valuestring, strlen(j->valuestring), depth > 0);
    if (cJSON_IsArray(j)) {
        struct lb b = {.R = R};
        for (const cJSON *c = j->child; c && !R->st; c = c->next) lb_push(&b, from_json(R, c, depth + 1));
        return lb_val(&b, false);
    }
    if (cJSON_IsObject(j)) {
        val d = dict_new(R, V_DICT);
        int n = 0;
        for (const cJSON *c = j->child; c && !R->st; c = c->next, n++) {
            val k = vstr(R, c->string ? c->string : "", c->string ? strlen(c->string) : 0, depth > 0);
            dict_set(R, d.u.d, k, from_json(R, c, depth + 1), n < 256);
        }
        return d;
    }
    return UNDEF;
}

attnd_status jinja_render(const jinja_tpl *t, const cJSON *ctx, const struct jinja_opts *opts, struct jinja_output *out,
                          bool *raised, char *err, size_t errlen)
{
    struct jinja_opts o = opts ? *opts : (struct jinja_opts){0};
    char dummy[8];
    memset(out, 0, sizeof *out);
    if (raised) *raised = false;
    struct rs R = {.max_steps = o.max_steps ? o.max_steps : DEF_MAX_STEPS,
                   .max_depth = o.max_depth ? o.max_depth : DEF_MAX_DEPTH,
                   .max_output = o.max_output ? o.max_output : DEF_MAX_OUTPUT,
                   .now = o.now,
                   .err = err && errlen ? err : dummy,
                   .errlen = err && errlen ? errlen : sizeof dummy};
    R.a.limit = o.max_memory ? o.max_memory : DEF_MAX_MEMORY;
    R.err[0] = 0;
    struct sb b = {.R = &R};
    R.out = &b;
    R.root = frame_new(&R, NULL);
    for (const cJSON *c = ctx ? ctx->child : NULL; c && R.root && !R.st; c = c->next)
        if (c->string) frame_set(&R, R.root, c->string, strlen(c->string), from_json(&R, c, 0));
    sb_put(&b, "", 0);
    if (!R.st && t) ex_list(&R, R.root, t->root);
    if (!R.st) {
        if (!b.p && !(b.p = calloc(1, 1))) fail(&R, ATTND_ERR_NOMEM, "out of memory");
        out->text = b.p;
        out->len = b.n;
        out->data = b.sp;
        out->n_data = b.nsp;
    } else {
        sb_free(&b);
        if (raised) *raised = R.raised;
    }
    ar_free(&R.a);
    return R.st;
}

void jinja_output_free(struct jinja_output *o)
{
    if (!o) return;
    free(o->text);
    free(o->data);
    memset(o, 0, sizeof *o);
}
