/* grammar.c - see grammar.h: the builder, UTF-8 desugaring of code point classes, repetition,
 * and the checks of gram_build (undefined rules, left recursion, empty language). */
#include "attnd/grammar.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/utf8.h"
#include "server/engine/grammar_internal.h"

/* Builder elements use the compiled encoding, with GRAM_E_END standing for "next alternative". */
struct brule {
    char *name;
    uint32_t *el; /* alternatives separated by GRAM_E_END (no trailing one) */
    size_t n, cap;
    size_t alt_start; /* where the current alternative begins in el */
    bool defined;
};

struct gram_builder {
    struct brule *rules;
    size_t n_rules, cap_rules;
    uint32_t *name_hash; /* rule id + 1, open addressing; 0 = empty */
    size_t name_mask;
    uint8_t (*sets)[32];
    size_t n_sets, cap_sets;
    uint32_t *set_hash; /* set index + 1 */
    size_t set_mask;
    size_t total;       /* elements over all rules */
    unsigned fresh;
};

/* ---- hashing ---- */

static uint64_t hash_bytes(const void *p, size_t n)
{
    const uint8_t *u = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ u[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* Doubles a table of uint32 slots (value + 1), rehashing with key(i). */
static bool rehash(uint32_t **tab, size_t *mask, uint64_t (*key)(const struct gram_builder *, uint32_t),
                   const struct gram_builder *b)
{
    size_t nmask = *mask ? *mask * 2 + 1 : 255;
    uint32_t *nt = calloc(nmask + 1, sizeof *nt);
    if (!nt) return false;
    for (size_t i = 0; *tab && i <= *mask; i++) {
        if (!(*tab)[i]) continue;
        size_t h = key(b, (*tab)[i] - 1) & nmask;
        while (nt[h]) h = (h + 1) & nmask;
        nt[h] = (*tab)[i];
    }
    free(*tab);
    *tab = nt;
    *mask = nmask;
    return true;
}

static uint64_t name_key(const struct gram_builder *b, uint32_t id)
{
    return hash_bytes(b->rules[id].name, strlen(b->rules[id].name));
}

static uint64_t set_key(const struct gram_builder *b, uint32_t id)
{
    return hash_bytes(b->sets[id], 32);
}

/* ---- lifecycle ---- */

attnd_status gram_builder_create(struct gram_builder **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? ATTND_OK : ATTND_ERR_NOMEM;
}

void gram_builder_destroy(struct gram_builder *b)
{
    if (!b) return;
    for (size_t i = 0; i < b->n_rules; i++) {
        free(b->rules[i].name);
        free(b->rules[i].el);
    }
    free(b->rules);
    free(b->name_hash);
    free(b->sets);
    free(b->set_hash);
    free(b);
}

/* ---- rules ---- */

static int rule_lookup(const struct gram_builder *b, const char *name, size_t len)
{
    if (!b->name_hash) return -1;
    size_t h = hash_bytes(name, len) & b->name_mask;
    for (; b->name_hash[h]; h = (h + 1) & b->name_mask) {
        const char *n = b->rules[b->name_hash[h] - 1].name;
        if (strlen(n) == len && !memcmp(n, name, len)) return (int)b->name_hash[h] - 1;
    }
    return -1;
}

static int rule_add(struct gram_builder *b, const char *name, size_t len)
{
    if (b->n_rules >= GRAM_MAX_RULES) return -1;
    if ((b->n_rules + 1) * 2 > b->name_mask && !rehash(&b->name_hash, &b->name_mask, name_key, b)) return -1;
    if (b->n_rules == b->cap_rules) {
        size_t nc = b->cap_rules ? b->cap_rules * 2 : 64;
        struct brule *nr = realloc(b->rules, nc * sizeof *nr);
        if (!nr) return -1;
        b->rules = nr;
        b->cap_rules = nc;
    }
    struct brule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    if (!(r->name = malloc(len + 1))) return -1;
    memcpy(r->name, name, len);
    r->name[len] = 0;
    size_t h = hash_bytes(name, len) & b->name_mask;
    while (b->name_hash[h]) h = (h + 1) & b->name_mask;
    b->name_hash[h] = (uint32_t)b->n_rules + 1;
    return (int)b->n_rules++;
}

int gram_rule(struct gram_builder *b, const char *name, size_t len)
{
    int id = rule_lookup(b, name, len);
    return id >= 0 ? id : rule_add(b, name, len);
}

int gram_rule_fresh(struct gram_builder *b, const char *base)
{
    char name[96];
    for (;;) {
        int n = snprintf(name, sizeof name, "%.60s-%u", base, b->fresh++);
        if (rule_lookup(b, name, (size_t)n) < 0) {
            int id = rule_add(b, name, (size_t)n);
            if (id >= 0) b->rules[id].defined = true;
            return id;
        }
    }
}

bool gram_rule_define(struct gram_builder *b, int rule)
{
    if (b->rules[rule].defined) return false;
    b->rules[rule].defined = true;
    return true;
}

const char *gram_rule_name(const struct gram_builder *b, int rule)
{
    return b->rules[rule].name;
}

/* ---- elements ---- */

static attnd_status push(struct gram_builder *b, int rule, uint32_t e)
{
    struct brule *r = &b->rules[rule];
    if (b->total >= GRAM_MAX_ELEMS) return ATTND_ERR_RANGE;
    if (r->n == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 8;
        uint32_t *ne = realloc(r->el, nc * sizeof *ne);
        if (!ne) return ATTND_ERR_NOMEM;
        r->el = ne;
        r->cap = nc;
    }
    r->el[r->n++] = e;
    b->total++;
    return ATTND_OK;
}

/* Index of set s in the builder's table (added if new), or -1 when out of memory. */
static long set_index(struct gram_builder *b, const uint8_t s[32])
{
    if (b->set_hash) {
        for (size_t h = hash_bytes(s, 32) & b->set_mask; b->set_hash[h]; h = (h + 1) & b->set_mask)
            if (!memcmp(b->sets[b->set_hash[h] - 1], s, 32)) return (long)b->set_hash[h] - 1;
    }
    if ((b->n_sets + 1) * 2 > b->set_mask && !rehash(&b->set_hash, &b->set_mask, set_key, b)) return -1;
    if (b->n_sets == b->cap_sets) {
        size_t nc = b->cap_sets ? b->cap_sets * 2 : 64;
        uint8_t(*ns)[32] = realloc(b->sets, nc * sizeof *ns);
        if (!ns) return -1;
        b->sets = ns;
        b->cap_sets = nc;
    }
    memcpy(b->sets[b->n_sets], s, 32);
    size_t h = hash_bytes(s, 32) & b->set_mask;
    while (b->set_hash[h]) h = (h + 1) & b->set_mask;
    b->set_hash[h] = (uint32_t)b->n_sets + 1;
    return (long)b->n_sets++;
}

attnd_status gram_add_byteset(struct gram_builder *b, int rule, const uint8_t set[32])
{
    long i = set_index(b, set);
    if (i < 0) return ATTND_ERR_NOMEM;
    return push(b, rule, GRAM_E_MAKE(GRAM_E_SET, (uint32_t)i));
}

static attnd_status add_byte_range(struct gram_builder *b, int rule, unsigned lo, unsigned hi)
{
    uint8_t s[32] = {0};
    for (unsigned c = lo; c <= hi; c++) s[c >> 3] |= (uint8_t)(1u << (c & 7));
    return gram_add_byteset(b, rule, s);
}

attnd_status gram_add_literal(struct gram_builder *b, int rule, const char *s, size_t n)
{
    attnd_status st = ATTND_OK;
    for (size_t i = 0; i < n && st == ATTND_OK; i++)
        st = add_byte_range(b, rule, (uint8_t)s[i], (uint8_t)s[i]);
    return st;
}

attnd_status gram_add_ref(struct gram_builder *b, int rule, int ref)
{
    return push(b, rule, GRAM_E_MAKE(GRAM_E_REF, (uint32_t)ref));
}

attnd_status gram_add_alt(struct gram_builder *b, int rule)
{
    attnd_status st = push(b, rule, GRAM_E_MAKE(GRAM_E_END, 0));
    if (st == ATTND_OK) b->rules[rule].alt_start = b->rules[rule].n;
    return st;
}

size_t gram_alt_len(const struct gram_builder *b, int rule)
{
    return b->rules[rule].n - b->rules[rule].alt_start;
}

/* ---- code point sets -> UTF-8 byte sequences ---- */

static int cmp_range(const void *a, const void *b)
{
    uint32_t x = ((const uint32_t *)a)[0], y = ((const uint32_t *)b)[0];
    return x < y ? -1 : x > y;
}

/* Sorts and merges the n pairs of r into out, clamped to the code point space; with negate,
 * their complement. Returns the pair count; out and tmp each have room for n + 1 pairs. */
static size_t normalize_ranges(const uint32_t *r, size_t n, bool negate, uint32_t *out, uint32_t *tmp)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t lo = r[2 * i], hi = r[2 * i + 1] > GRAM_MAX_CP ? GRAM_MAX_CP : r[2 * i + 1];
        if (lo > hi) continue;
        out[2 * m] = lo, out[2 * m + 1] = hi, m++;
    }
    qsort(out, m, 2 * sizeof *out, cmp_range);
    size_t k = 0;
    for (size_t i = 0; i < m; i++) {
        if (k && out[2 * i] <= out[2 * k - 1] + 1) {
            if (out[2 * i + 1] > out[2 * k - 1]) out[2 * k - 1] = out[2 * i + 1];
        } else {
            out[2 * k] = out[2 * i], out[2 * k + 1] = out[2 * i + 1], k++;
        }
    }
    if (!negate) return k;
    uint32_t next = 0;
    size_t c = 0;
    for (size_t i = 0; i < k; i++) {
        if (out[2 * i] > next) tmp[2 * c] = next, tmp[2 * c + 1] = out[2 * i] - 1, c++;
        next = out[2 * i + 1] + 1;
    }
    if (next <= GRAM_MAX_CP) tmp[2 * c] = next, tmp[2 * c + 1] = GRAM_MAX_CP, c++;
    memcpy(out, tmp, c * 2 * sizeof *out);
    return c;
}

/* Adds to rule aux one alternative per UTF-8 byte-range sequence covering [lo, hi]
 * (lo >= 0x80, no surrogates inside). */
static attnd_status add_utf8_range(struct gram_builder *b, int aux, uint32_t lo, uint32_t hi)
{
    static const uint32_t max_len[3] = {0x7f, 0x7ff, 0xffff};
    for (int i = 0; i < 3; i++)
        if (lo <= max_len[i] && max_len[i] < hi) {
            attnd_status st = add_utf8_range(b, aux, lo, max_len[i]);
            return st ? st : add_utf8_range(b, aux, max_len[i] + 1, hi);
        }
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                attnd_status st = add_utf8_range(b, aux, lo, lo | m);
                return st ? st : add_utf8_range(b, aux, (lo | m) + 1, hi);
            }
            if ((hi & m) != m) {
                attnd_status st = add_utf8_range(b, aux, lo, (hi & ~m) - 1);
                return st ? st : add_utf8_range(b, aux, hi & ~m, hi);
            }
        }
    }
    char a[4], z[4];
    size_t n = utf8_encode(lo, a);
    utf8_encode(hi, z);
    attnd_status st = ATTND_OK;
    if (b->rules[aux].n > 0) st = gram_add_alt(b, aux);
    for (size_t i = 0; i < n && st == ATTND_OK; i++) st = add_byte_range(b, aux, (uint8_t)a[i], (uint8_t)z[i]);
    return st;
}

/* Adds the non-ASCII part [lo, hi] of a class to aux, leaving out the surrogates. */
static attnd_status add_wide_range(struct gram_builder *b, int aux, uint32_t lo, uint32_t hi)
{
    if (lo < 0x80) lo = 0x80;
    attnd_status st = ATTND_OK;
    if (lo <= hi && lo <= 0xd7ff) st = add_utf8_range(b, aux, lo, hi < 0xd7ff ? hi : 0xd7ff);
    if (st == ATTND_OK && hi >= 0xe000) st = add_utf8_range(b, aux, lo > 0xe000 ? lo : 0xe000, hi);
    return st;
}

attnd_status gram_add_cpset(struct gram_builder *b, int rule, const uint32_t *r, size_t n, bool negate)
{
    uint32_t *buf = malloc((n + 2) * 4 * sizeof *buf);
    if (!buf) return ATTND_ERR_NOMEM;
    size_t k = normalize_ranges(r, n, negate, buf, buf + 2 * (n + 2));
    uint8_t ascii[32] = {0};
    bool wide = false, any_ascii = false;
    for (size_t i = 0; i < k; i++) {
        for (uint32_t c = buf[2 * i]; c <= buf[2 * i + 1] && c < 0x80; c++) {
            ascii[c >> 3] |= (uint8_t)(1u << (c & 7));
            any_ascii = true;
        }
        if (buf[2 * i + 1] >= 0x80 && !(buf[2 * i] >= 0xd800 && buf[2 * i + 1] <= 0xdfff)) wide = true;
    }
    attnd_status st = ATTND_OK;
    if (!wide) {
        st = gram_add_byteset(b, rule, ascii);
        goto out;
    }
    int aux = gram_rule_fresh(b, "class");
    if (aux < 0) {
        st = ATTND_ERR_NOMEM;
        goto out;
    }
    if (any_ascii) st = gram_add_byteset(b, aux, ascii);
    for (size_t i = 0; i < k && st == ATTND_OK; i++)
        if (buf[2 * i + 1] >= 0x80) st = add_wide_range(b, aux, buf[2 * i], buf[2 * i + 1]);
    if (st == ATTND_OK) st = gram_add_ref(b, rule, aux);
out:
    free(buf);
    return st;
}

/* ---- repetition ---- */

static attnd_status append_elems(struct gram_builder *b, int rule, const uint32_t *x, size_t n)
{
    attnd_status st = ATTND_OK;
    for (size_t i = 0; i < n && st == ATTND_OK; i++) st = push(b, rule, x[i]);
    return st;
}

/* Appends X{0,max-min} (or X* when max is GRAM_INF) to rule as a reference to a new rule. */
static attnd_status append_optional_tail(struct gram_builder *b, int rule, const uint32_t *x, size_t nx, int min,
                                         int max)
{
    if (max == GRAM_INF) {
        int s = gram_rule_fresh(b, "star");
        if (s < 0) return ATTND_ERR_NOMEM;
        attnd_status st = append_elems(b, s, x, nx);
        if (st == ATTND_OK) st = gram_add_ref(b, s, s);
        if (st == ATTND_OK) st = gram_add_alt(b, s);
        return st ? st : gram_add_ref(b, rule, s);
    }
    int prev = -1;
    for (int i = min; i < max; i++) {
        int s = gram_rule_fresh(b, "opt");
        if (s < 0) return ATTND_ERR_NOMEM;
        attnd_status st = append_elems(b, s, x, nx);
        if (st == ATTND_OK && prev >= 0) st = gram_add_ref(b, s, prev);
        if (st == ATTND_OK) st = gram_add_alt(b, s);
        if (st != ATTND_OK) return st;
        prev = s;
    }
    return prev >= 0 ? gram_add_ref(b, rule, prev) : ATTND_OK;
}

attnd_status gram_repeat(struct gram_builder *b, int rule, size_t from, int min, int max)
{
    if (min < 0 || min > GRAM_MAX_REPEAT || (max != GRAM_INF && (max < min || max > GRAM_MAX_REPEAT)))
        return ATTND_ERR_RANGE;
    struct brule *r = &b->rules[rule];
    size_t start = r->alt_start + from, nx = r->n - start;
    if (nx == 0 || (min == 1 && max == 1)) return ATTND_OK;
    uint32_t x[1];
    if (nx == 1) {
        x[0] = r->el[start];
    } else { /* wrap X in a rule of its own, so each copy is one reference */
        int t = gram_rule_fresh(b, "group");
        if (t < 0) return ATTND_ERR_NOMEM;
        r = &b->rules[rule];
        attnd_status st = append_elems(b, t, r->el + start, nx);
        if (st != ATTND_OK) return st;
        x[0] = GRAM_E_MAKE(GRAM_E_REF, (uint32_t)t);
    }
    r = &b->rules[rule];
    b->total -= r->n - start;
    r->n = start;
    for (int i = 0; i < min; i++) {
        attnd_status st = push(b, rule, x[0]);
        if (st != ATTND_OK) return st;
    }
    return append_optional_tail(b, rule, x, 1, min, max);
}

/* ---- build and checks ---- */

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Lays out every rule's alternatives (each ending in GRAM_E_END) into g. */
static attnd_status layout(const struct gram_builder *b, struct gram *g)
{
    size_t n_el = 0, n_alt = 0;
    for (size_t r = 0; r < b->n_rules; r++) {
        n_el += b->rules[r].n + 1;
        n_alt += 1;
        for (size_t i = 0; i < b->rules[r].n; i++) n_alt += b->rules[r].el[i] == GRAM_E_MAKE(GRAM_E_END, 0);
    }
    if (n_el > GRAM_MAX_ELEMS + GRAM_MAX_RULES) return ATTND_ERR_RANGE;
    g->elems = malloc(n_el * sizeof *g->elems);
    g->alts = malloc(n_alt * sizeof *g->alts);
    g->alt_off = malloc((b->n_rules + 1) * sizeof *g->alt_off);
    g->sets = malloc((b->n_sets ? b->n_sets : 1) * sizeof *g->sets);
    if (!g->elems || !g->alts || !g->alt_off || !g->sets) return ATTND_ERR_NOMEM;
    if (b->n_sets) memcpy(g->sets, b->sets, b->n_sets * sizeof *g->sets);
    g->n_sets = (uint32_t)b->n_sets;
    g->n_rules = (uint32_t)b->n_rules;
    uint32_t e = 0, a = 0;
    for (size_t r = 0; r < b->n_rules; r++) {
        g->alt_off[r] = a;
        g->alts[a++] = e;
        for (size_t i = 0; i < b->rules[r].n; i++) {
            g->elems[e++] = b->rules[r].el[i];
            if (b->rules[r].el[i] == GRAM_E_MAKE(GRAM_E_END, 0)) g->alts[a++] = e;
        }
        g->elems[e++] = GRAM_E_MAKE(GRAM_E_END, 0);
    }
    g->alt_off[b->n_rules] = a;
    g->n_elems = e;
    return ATTND_OK;
}

static bool set_empty(const struct gram *g, uint32_t s)
{
    for (int i = 0; i < 32; i++)
        if (g->sets[s][i]) return false;
    return true;
}

/* Fixpoint over the rules: flag[r] = 1 when some alternative has every element "good", where
 * a set is good if (productive ? non-empty : never) and a reference if its rule's flag is set.
 * productive: the rule derives some string; !productive: the rule derives the empty string. */
static void fixpoint(const struct gram *g, uint8_t *flag, bool productive)
{
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < g->n_rules; r++) {
            if (flag[r]) continue;
            for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1] && !flag[r]; a++) {
                bool ok = true;
                for (uint32_t p = g->alts[a]; ok && GRAM_E_TYPE(g->elems[p]) != GRAM_E_END; p++) {
                    uint32_t el = g->elems[p];
                    if (GRAM_E_TYPE(el) == GRAM_E_SET) ok = productive && !set_empty(g, GRAM_E_VAL(el));
                    else ok = flag[GRAM_E_VAL(el)];
                }
                if (ok) flag[r] = 1, changed = true;
            }
        }
    }
}

/* The next rule that rule r can start with, walking its alternatives from (*a, *p) (positions
 * kept between calls; start with *a = alt_off[r], *p = alts[*a]); -1 when there is none left. */
static long next_left_ref(const struct gram *g, const uint8_t *nullable, uint32_t r, uint32_t *a, uint32_t *p)
{
    while (*a < g->alt_off[r + 1]) {
        uint32_t el = g->elems[*p];
        if (GRAM_E_TYPE(el) == GRAM_E_REF) {
            uint32_t q = GRAM_E_VAL(el);
            if (nullable[q]) (*p)++;
            else if (++*a < g->alt_off[r + 1]) *p = g->alts[*a];
            return q;
        }
        if (++*a < g->alt_off[r + 1]) *p = g->alts[*a];
    }
    return -1;
}

struct lr_frame {
    uint32_t r, a, p;
};

/* Depth-first search for a cycle of "can start with" edges; returns the rule on one, or -1.
 * Iterative, so deep grammars cannot overflow the C stack. */
static long find_left_recursion(const struct gram *g, const uint8_t *nullable, const uint8_t *reach)
{
    uint8_t *color = calloc(g->n_rules, 1);
    struct lr_frame *st = malloc(g->n_rules * sizeof *st);
    long found = -2;
    if (!color || !st) goto out;
    found = -1;
    for (uint32_t s = 0; s < g->n_rules && found < 0; s++) {
        if (!reach[s] || color[s]) continue;
        size_t top = 0;
        st[top++] = (struct lr_frame){s, g->alt_off[s], g->alts[g->alt_off[s]]};
        color[s] = 1;
        while (top && found < 0) {
            struct lr_frame *f = &st[top - 1];
            long q = next_left_ref(g, nullable, f->r, &f->a, &f->p);
            if (q < 0) {
                color[f->r] = 2;
                top--;
            } else if (color[q] == 1) {
                found = q;
            } else if (!color[q]) {
                color[q] = 1;
                st[top++] = (struct lr_frame){(uint32_t)q, g->alt_off[q], g->alts[g->alt_off[q]]};
            }
        }
    }
out:
    free(color);
    free(st);
    return found;
}

/* reach[r] = 1 for every rule reachable from g->root. */
static bool reachable(const struct gram *g, uint8_t *reach)
{
    uint32_t *queue = malloc(g->n_rules * sizeof *queue);
    if (!queue) return false;
    size_t head = 0, tail = 0;
    queue[tail++] = g->root;
    reach[g->root] = 1;
    while (head < tail) {
        uint32_t r = queue[head++];
        for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++)
            for (uint32_t p = g->alts[a]; GRAM_E_TYPE(g->elems[p]) != GRAM_E_END; p++) {
                uint32_t el = g->elems[p];
                if (GRAM_E_TYPE(el) == GRAM_E_REF && !reach[GRAM_E_VAL(el)]) {
                    reach[GRAM_E_VAL(el)] = 1;
                    queue[tail++] = GRAM_E_VAL(el);
                }
            }
    }
    free(queue);
    return true;
}

/* Drops every alternative that references a rule deriving nothing (or holds an empty set). */
static void prune(struct gram *g, const uint8_t *productive)
{
    uint32_t w = 0;
    for (uint32_t r = 0; r < g->n_rules; r++) {
        uint32_t a0 = g->alt_off[r], a1 = g->alt_off[r + 1];
        g->alt_off[r] = w;
        for (uint32_t a = a0; a < a1; a++) {
            bool ok = true;
            for (uint32_t p = g->alts[a]; ok && GRAM_E_TYPE(g->elems[p]) != GRAM_E_END; p++) {
                uint32_t el = g->elems[p];
                ok = GRAM_E_TYPE(el) == GRAM_E_SET ? !set_empty(g, GRAM_E_VAL(el)) : productive[GRAM_E_VAL(el)];
            }
            if (ok) g->alts[w++] = g->alts[a];
        }
    }
    g->alt_off[g->n_rules] = w;
}

/* The checks of gram_build on a laid-out grammar. */
static attnd_status check(const struct gram_builder *b, struct gram *g, char *err, size_t errlen)
{
    attnd_status st = ATTND_ERR_NOMEM;
    uint8_t *reach = calloc(g->n_rules, 1), *nullable = calloc(g->n_rules, 1), *prod = calloc(g->n_rules, 1);
    if (!reach || !nullable || !prod || !reachable(g, reach)) goto out;
    st = ATTND_ERR_INVALID;
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (reach[r] && !b->rules[r].defined) {
            set_err(err, errlen, "grammar: undefined rule '%s'", b->rules[r].name);
            goto out;
        }
    fixpoint(g, nullable, false);
    long lr = find_left_recursion(g, nullable, reach);
    if (lr == -2) {
        st = ATTND_ERR_NOMEM;
        goto out;
    }
    if (lr >= 0) {
        set_err(err, errlen, "grammar: rule '%s' is left-recursive (it can derive itself before any input)",
                b->rules[lr].name);
        goto out;
    }
    fixpoint(g, prod, true);
    if (!prod[g->root]) {
        set_err(err, errlen, "grammar: rule '%s' admits no string at all (the language is empty)",
                b->rules[g->root].name);
        goto out;
    }
    prune(g, prod);
    st = ATTND_OK;
out:
    free(reach);
    free(nullable);
    free(prod);
    return st;
}

attnd_status gram_build(const struct gram_builder *b, const char *root, struct gram **out, char *err,
                        size_t errlen)
{
    *out = NULL;
    int rid = rule_lookup(b, root, strlen(root));
    if (rid < 0 || !b->rules[rid].defined) {
        set_err(err, errlen, "grammar: no rule named '%s' (the start rule)", root);
        return ATTND_ERR_INVALID;
    }
    struct gram *g = calloc(1, sizeof *g);
    if (!g) return ATTND_ERR_NOMEM;
    g->root = (uint32_t)rid;
    atomic_init(&g->refs, 1);
    attnd_status st = layout(b, g);
    if (st == ATTND_ERR_RANGE) set_err(err, errlen, "grammar: more than %u elements", GRAM_MAX_ELEMS);
    if (st == ATTND_OK) st = check(b, g, err, errlen);
    if (st != ATTND_OK) {
        if (st == ATTND_ERR_NOMEM) set_err(err, errlen, "grammar: out of memory");
        gram_destroy(g);
        return st;
    }
    *out = g;
    return ATTND_OK;
}

void gram_destroy(struct gram *g)
{
    if (!g || atomic_fetch_sub(&g->refs, 1) > 1) return;
    free(g->elems);
    free(g->sets);
    free(g->alt_off);
    free(g->alts);
    free(g);
}

struct gram *gram_retain(const struct gram *g)
{
    struct gram *w = (struct gram *)g; /* the count is the one mutable field */
    atomic_fetch_add(&w->refs, 1);
    return w;
}

size_t gram_n_rules(const struct gram *g)
{
    return g->n_rules;
}

size_t gram_n_elems(const struct gram *g)
{
    return g->n_elems;
}
