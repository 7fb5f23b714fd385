/* gram_match.c - see gram_match.h: interned parse stacks, interned state sets, lazy transitions. */
#include "attnd/gram_match.h"

#include <stdlib.h>
#include <string.h>

#include "server/engine/grammar_internal.h"

#define NO_POS UINT32_MAX

/* A stack frame: a grammar position and the frame below it. Frame 0 is the empty stack. At the
 * top of a stack pos is a byte set; below it, where to continue once the rule above ends. */
struct frame {
    uint32_t pos, parent;
};

struct mstate {
    uint32_t off, n; /* its frames (stack tops, sorted) in pool */
    int32_t *row;    /* (256) transitions, or NULL until first asked */
    uint64_t hash;
    uint8_t plain;   /* gmatch_plain_loop: 0 not known yet, 1 yes, 2 no */
};

struct gmatch {
    const struct gram *g;
    struct frame *frames;
    size_t n_frames, cap_frames;
    uint32_t *fhash; /* frame id + 1 */
    size_t fmask;
    struct mstate *states;
    size_t n_states, cap_states;
    uint32_t *shash; /* state id + 1 */
    size_t smask;
    uint32_t *pool;
    size_t n_pool, cap_pool;
    uint32_t *scratch; /* stack tops of the state being computed */
    size_t n_scratch, cap_scratch;
    size_t steps;      /* expansion steps of the transition being computed */
    int32_t cur;
    uint64_t epoch;
    bool failed;
};

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static bool grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, nc * size);
    if (!np) return false;
    *p = np;
    *cap = nc;
    return true;
}

/* ---- frames ---- */

static bool frame_rehash(struct gmatch *m)
{
    size_t nmask = m->fmask ? m->fmask * 2 + 1 : 1023;
    uint32_t *nt = calloc(nmask + 1, sizeof *nt);
    if (!nt) return false;
    for (size_t i = 1; i < m->n_frames; i++) {
        size_t h = mix(((uint64_t)m->frames[i].pos << 32) | m->frames[i].parent) & nmask;
        while (nt[h]) h = (h + 1) & nmask;
        nt[h] = (uint32_t)i + 1;
    }
    free(m->fhash);
    m->fhash = nt;
    m->fmask = nmask;
    return true;
}

/* The id of frame (pos, parent), added if new; 0 (with m->failed) when out of memory. */
static uint32_t frame_intern(struct gmatch *m, uint32_t pos, uint32_t parent)
{
    uint64_t key = ((uint64_t)pos << 32) | parent;
    size_t h = mix(key) & m->fmask;
    for (; m->fhash[h]; h = (h + 1) & m->fmask) {
        const struct frame *f = &m->frames[m->fhash[h] - 1];
        if (f->pos == pos && f->parent == parent) return m->fhash[h] - 1;
    }
    if (!grow((void **)&m->frames, &m->cap_frames, m->n_frames + 1, sizeof *m->frames)) goto oom;
    m->frames[m->n_frames] = (struct frame){pos, parent};
    m->fhash[h] = (uint32_t)m->n_frames + 1;
    m->n_frames++;
    if (m->n_frames * 2 > m->fmask && !frame_rehash(m)) goto oom;
    return (uint32_t)m->n_frames - 1;
oom:
    m->failed = true;
    return 0;
}

/* ---- expansion: from a grammar position to the stack tops (byte sets) it can reach ---- */

static void add_top(struct gmatch *m, uint32_t f)
{
    if (!grow((void **)&m->scratch, &m->cap_scratch, m->n_scratch + 1, sizeof *m->scratch)) {
        m->failed = true;
        return;
    }
    m->scratch[m->n_scratch++] = f;
}

/* Adds to scratch every stack top reachable from position pos over the stack parent without
 * reading input: references are entered (the continuation pushed unless it is the end of the
 * alternative: a tail call), ends of alternatives return to the frame below. */
static void expand(struct gmatch *m, uint32_t pos, uint32_t parent, unsigned depth)
{
    const struct gram *g = m->g;
    if (m->failed) return;
    if (depth > GMATCH_MAX_DEPTH || ++m->steps > (size_t)GMATCH_MAX_STACKS * 16) {
        m->failed = true;
        return;
    }
    uint32_t el = g->elems[pos];
    switch (GRAM_E_TYPE(el)) {
    case GRAM_E_END:
        if (parent == 0) add_top(m, 0);
        else expand(m, m->frames[parent].pos, m->frames[parent].parent, depth + 1);
        break;
    case GRAM_E_SET:
        add_top(m, frame_intern(m, pos, parent));
        break;
    default: {
        uint32_t r = GRAM_E_VAL(el), cont = parent;
        if (GRAM_E_TYPE(g->elems[pos + 1]) != GRAM_E_END) cont = frame_intern(m, pos + 1, parent);
        for (uint32_t a = g->alt_off[r]; a < g->alt_off[r + 1]; a++) expand(m, g->alts[a], cont, depth + 1);
    }
    }
}

/* ---- states ---- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static bool state_rehash(struct gmatch *m)
{
    size_t nmask = m->smask ? m->smask * 2 + 1 : 255;
    uint32_t *nt = calloc(nmask + 1, sizeof *nt);
    if (!nt) return false;
    for (size_t i = 0; i < m->n_states; i++) {
        size_t h = m->states[i].hash & nmask;
        while (nt[h]) h = (h + 1) & nmask;
        nt[h] = (uint32_t)i + 1;
    }
    free(m->shash);
    m->shash = nt;
    m->smask = nmask;
    return true;
}

/* Sorts and dedupes scratch and returns the id of that set of stacks (added if new), or
 * GMATCH_DEAD when it is empty or on failure. */
static int32_t state_intern(struct gmatch *m)
{
    if (m->failed || !m->n_scratch) return GMATCH_DEAD;
    qsort(m->scratch, m->n_scratch, sizeof *m->scratch, cmp_u32);
    size_t n = 1;
    for (size_t i = 1; i < m->n_scratch; i++)
        if (m->scratch[i] != m->scratch[n - 1]) m->scratch[n++] = m->scratch[i];
    if (n > GMATCH_MAX_STACKS) {
        m->failed = true;
        return GMATCH_DEAD;
    }
    uint64_t hash = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < n; i++) hash = mix(hash ^ m->scratch[i]) + i;
    size_t h = hash & m->smask;
    for (; m->shash[h]; h = (h + 1) & m->smask) {
        const struct mstate *s = &m->states[m->shash[h] - 1];
        if (s->hash == hash && s->n == n && !memcmp(m->pool + s->off, m->scratch, n * sizeof *m->scratch))
            return (int32_t)m->shash[h] - 1;
    }
    if (!grow((void **)&m->pool, &m->cap_pool, m->n_pool + n, sizeof *m->pool) ||
        !grow((void **)&m->states, &m->cap_states, m->n_states + 1, sizeof *m->states)) {
        m->failed = true;
        return GMATCH_DEAD;
    }
    memcpy(m->pool + m->n_pool, m->scratch, n * sizeof *m->scratch);
    m->states[m->n_states] = (struct mstate){(uint32_t)m->n_pool, (uint32_t)n, NULL, hash, 0};
    m->n_pool += n;
    m->shash[h] = (uint32_t)m->n_states + 1;
    m->n_states++;
    if (m->n_states * 2 > m->smask && !state_rehash(m)) {
        m->failed = true;
        return GMATCH_DEAD;
    }
    return (int32_t)m->n_states - 1;
}

/* Computes the transition of s on byte c (not remembered here). */
static int32_t transition(struct gmatch *m, int32_t s, uint8_t c)
{
    const struct gram *g = m->g;
    m->n_scratch = 0;
    m->steps = 0;
    const struct mstate st = m->states[s];
    for (uint32_t i = 0; i < st.n; i++) {
        uint32_t f = m->pool[st.off + i];
        if (f == 0) continue;
        struct frame fr = m->frames[f];
        if (gram_set_has(g->sets[GRAM_E_VAL(g->elems[fr.pos])], c)) expand(m, fr.pos + 1, fr.parent, 0);
    }
    return state_intern(m);
}

/* ---- tables: create, clear, export and import of the current stacks ---- */

/* Empties every table (keeping their memory) and leaves frame 0, the empty stack. */
static void clear_tables(struct gmatch *m)
{
    for (size_t i = 0; i < m->n_states; i++) free(m->states[i].row);
    m->n_states = 0;
    m->n_pool = 0;
    memset(m->shash, 0, (m->smask + 1) * sizeof *m->shash);
    memset(m->fhash, 0, (m->fmask + 1) * sizeof *m->fhash);
    m->frames[0] = (struct frame){NO_POS, 0};
    m->n_frames = 1;
    m->epoch++;
}

/* Writes state s's stacks to a malloc'd array: per stack its length, then its positions from
 * the top down. NULL when out of memory. */
static uint32_t *export_stacks(const struct gmatch *m, int32_t s, size_t *len)
{
    const struct mstate *st = &m->states[s];
    size_t n = 0, cap = 0;
    uint32_t *out = NULL;
    for (uint32_t i = 0; i < st->n; i++) {
        size_t at = n;
        if (!grow((void **)&out, &cap, n + 1, sizeof *out)) goto oom;
        out[n++] = 0;
        for (uint32_t f = m->pool[st->off + i]; f; f = m->frames[f].parent) {
            if (!grow((void **)&out, &cap, n + 1, sizeof *out)) goto oom;
            out[n++] = m->frames[f].pos;
            out[at]++;
        }
    }
    *len = n;
    return out ? out : calloc(1, sizeof *out);
oom:
    free(out);
    return NULL;
}

/* Interns the stacks written by export_stacks and returns their state (GMATCH_DEAD on failure). */
static int32_t import_stacks(struct gmatch *m, const uint32_t *v, size_t len)
{
    m->n_scratch = 0;
    for (size_t i = 0; i < len;) {
        uint32_t n = v[i], parent = 0;
        for (uint32_t k = n; k > 0; k--) parent = frame_intern(m, v[i + k], parent);
        add_top(m, parent);
        i += 1 + n;
    }
    return state_intern(m);
}

static attnd_status tables_init(struct gmatch *m)
{
    m->fmask = 1023;
    m->smask = 255;
    m->fhash = calloc(m->fmask + 1, sizeof *m->fhash);
    m->shash = calloc(m->smask + 1, sizeof *m->shash);
    if (!m->fhash || !m->shash || !grow((void **)&m->frames, &m->cap_frames, 1, sizeof *m->frames))
        return ATTND_ERR_NOMEM;
    clear_tables(m);
    return ATTND_OK;
}

/* The start state: every alternative of the root expanded over the empty stack. */
static int32_t start_state(struct gmatch *m)
{
    const struct gram *g = m->g;
    m->n_scratch = 0;
    m->steps = 0;
    for (uint32_t a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++) expand(m, g->alts[a], 0, 0);
    return state_intern(m);
}

attnd_status gmatch_create(const struct gram *g, struct gmatch **out)
{
    *out = NULL;
    struct gmatch *m = calloc(1, sizeof *m);
    if (!m) return ATTND_ERR_NOMEM;
    m->g = g;
    attnd_status st = tables_init(m);
    if (st == ATTND_OK && (m->cur = start_state(m)) < 0) st = m->failed ? ATTND_ERR_RANGE : ATTND_ERR_INVALID;
    if (st != ATTND_OK) {
        gmatch_destroy(m);
        return st;
    }
    *out = m;
    return ATTND_OK;
}

void gmatch_destroy(struct gmatch *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n_states; i++) free(m->states[i].row);
    free(m->frames);
    free(m->fhash);
    free(m->states);
    free(m->shash);
    free(m->pool);
    free(m->scratch);
    free(m);
}

attnd_status gmatch_clone(const struct gmatch *m, struct gmatch **out)
{
    *out = NULL;
    struct gmatch *c = calloc(1, sizeof *c);
    size_t len = 0;
    uint32_t *v = export_stacks(m, m->cur, &len);
    attnd_status st = c && v ? ATTND_OK : ATTND_ERR_NOMEM;
    if (st == ATTND_OK) {
        c->g = m->g;
        st = tables_init(c);
    }
    if (st == ATTND_OK && (c->cur = import_stacks(c, v, len)) < 0) st = ATTND_ERR_NOMEM;
    free(v);
    if (st != ATTND_OK) {
        gmatch_destroy(c);
        return st;
    }
    c->failed = m->failed;
    *out = c;
    return ATTND_OK;
}

attnd_status gmatch_reset(struct gmatch *m)
{
    clear_tables(m);
    m->failed = false;
    m->cur = start_state(m);
    return m->cur < 0 ? ATTND_ERR_NOMEM : ATTND_OK;
}

attnd_status gmatch_compact(struct gmatch *m)
{
    if (m->n_states <= GMATCH_FLUSH_STATES && m->n_frames <= GMATCH_FLUSH_FRAMES) return ATTND_OK;
    size_t len = 0;
    uint32_t *v = export_stacks(m, m->cur, &len);
    if (!v) return ATTND_ERR_NOMEM;
    clear_tables(m);
    m->cur = import_stacks(m, v, len);
    free(v);
    return m->cur < 0 ? ATTND_ERR_NOMEM : ATTND_OK;
}

/* ---- the automaton ---- */

const int32_t *gmatch_row(struct gmatch *m, int32_t s)
{
    struct mstate *st = &m->states[s];
    if (!st->row) {
        if (!(st->row = malloc(256 * sizeof *st->row))) return NULL;
        for (int i = 0; i < 256; i++) st->row[i] = GMATCH_UNKNOWN;
    }
    return st->row;
}

int32_t gmatch_next(struct gmatch *m, int32_t s, uint8_t c)
{
    if (!gmatch_row(m, s)) return GMATCH_DEAD;
    int32_t t = m->states[s].row[c];
    if (t != GMATCH_UNKNOWN) return t;
    t = transition(m, s, c);
    m->states[s].row[c] = t;
    return t;
}

bool gmatch_final(const struct gmatch *m, int32_t s)
{
    const struct mstate *st = &m->states[s];
    return st->n && m->pool[st->off] == 0;
}

size_t gmatch_n_stacks(const struct gmatch *m, int32_t s)
{
    return m->states[s].n;
}

int32_t gmatch_state(const struct gmatch *m)
{
    return m->cur;
}

uint64_t gmatch_epoch(const struct gmatch *m)
{
    return m->epoch;
}

bool gmatch_failed(const struct gmatch *m)
{
    return m->failed;
}

bool gmatch_accept_byte(struct gmatch *m, uint8_t c)
{
    if (gmatch_compact(m) != ATTND_OK) return false;
    int32_t t = gmatch_next(m, m->cur, c);
    if (t < 0) return false;
    m->cur = t;
    return true;
}

bool gmatch_accept_bytes(struct gmatch *m, const void *s, size_t n)
{
    if (gmatch_compact(m) != ATTND_OK) return false;
    const uint8_t *u = s;
    int32_t t = m->cur;
    for (size_t i = 0; i < n && t >= 0; i++) t = gmatch_next(m, t, u[i]);
    if (t < 0) return false;
    m->cur = t;
    return true;
}

bool gmatch_accepts_end(const struct gmatch *m)
{
    return gmatch_final(m, m->cur);
}

/* The UTF-8 forms of the characters from U+0080 up: lead bytes and the ranges of the
 * continuation bytes after them (RFC 3629: no overlongs, no surrogates). */
static const struct {
    uint8_t lead_lo, lead_hi, n;
    uint8_t lo[3], hi[3];
} UTF8_FORMS[] = {
    {0xc2, 0xdf, 1, {0x80}, {0xbf}},
    {0xe0, 0xe0, 2, {0xa0, 0x80}, {0xbf, 0xbf}},
    {0xe1, 0xec, 2, {0x80, 0x80}, {0xbf, 0xbf}},
    {0xed, 0xed, 2, {0x80, 0x80}, {0x9f, 0xbf}},
    {0xee, 0xef, 2, {0x80, 0x80}, {0xbf, 0xbf}},
    {0xf0, 0xf0, 3, {0x90, 0x80, 0x80}, {0xbf, 0xbf, 0xbf}},
    {0xf1, 0xf3, 3, {0x80, 0x80, 0x80}, {0xbf, 0xbf, 0xbf}},
    {0xf4, 0xf4, 3, {0x80, 0x80, 0x80}, {0x8f, 0xbf, 0xbf}},
};

#define PLAIN_SET_MAX 16

/* Whether every byte c in [lo, hi] leads each state of set (n states) to a live state; the
 * distinct results replace set. False when one dies or there are more than PLAIN_SET_MAX. */
static bool step_set(struct gmatch *m, int32_t *set, size_t *n, unsigned lo, unsigned hi)
{
    int32_t out[PLAIN_SET_MAX];
    size_t k = 0;
    for (size_t i = 0; i < *n; i++)
        for (unsigned c = lo; c <= hi; c++) {
            int32_t t = gmatch_next(m, set[i], (uint8_t)c);
            if (t < 0) return false;
            size_t j = 0;
            while (j < k && out[j] != t) j++;
            if (j == k) {
                if (k == PLAIN_SET_MAX) return false;
                out[k++] = t;
            }
        }
    memcpy(set, out, k * sizeof *out);
    *n = k;
    return true;
}

/* The check behind gmatch_plain_loop. */
static bool plain_loop(struct gmatch *m, int32_t s)
{
    for (unsigned c = 0x20; c < 0x7f; c++)
        if (c != '"' && c != '\\' && gmatch_next(m, s, (uint8_t)c) != s) return false;
    for (size_t f = 0; f < sizeof UTF8_FORMS / sizeof UTF8_FORMS[0]; f++) {
        int32_t set[PLAIN_SET_MAX] = {s};
        size_t n = 1;
        if (!step_set(m, set, &n, UTF8_FORMS[f].lead_lo, UTF8_FORMS[f].lead_hi)) return false;
        for (unsigned k = 0; k < UTF8_FORMS[f].n; k++)
            if (!step_set(m, set, &n, UTF8_FORMS[f].lo[k], UTF8_FORMS[f].hi[k])) return false;
        if (n != 1 || set[0] != s) return false;
    }
    return true;
}

bool gmatch_plain_loop(struct gmatch *m, int32_t s)
{
    if (!m->states[s].plain) {
        bool yes = plain_loop(m, s);
        m->states[s].plain = yes ? 1 : 2;
    }
    return m->states[s].plain == 1;
}
