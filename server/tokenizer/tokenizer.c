/* tokenizer.c - loading a tokenizer from GGUF metadata, special-token splitting, encode
 * dispatch, detokenization and the streaming detokenizer. The two algorithms live in
 * tok_spm.c (SentencePiece-style) and tok_bpe.c (byte-level BPE and its pre-tokenizers). */
#include "attnd/tokenizer.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/gguf.h"
#include "attnd/log.h"
#include "attnd/utf8.h"
#include "server/tokenizer/tokenizer_internal.h"

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_PRE "tokenizer.ggml.pre"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_TYPES "tokenizer.ggml.token_type"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_MERGES "tokenizer.ggml.merges"

#define TOK_MAX_VOCAB (1 << 24)      /* far above any real vocabulary */
#define TOK_MAX_TEXT (1u << 16)      /* bytes in one token's text */
#define TOK_MAX_INPUT ((size_t)1 << 28) /* bytes of text per tok_encode() call (symbol indices are int) */

/* ============================================================================================
 * small helpers
 * ========================================================================================== */

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
    return h;
}

static size_t pow2_at_least(size_t n)
{
    size_t p = 16;
    while (p < n) p <<= 1;
    return p;
}

int tok_lookup(const struct tokenizer *tok, const char *text, size_t len)
{
    size_t i = (size_t)hash_bytes(text, len) & tok->hash_mask;
    for (;;) {
        uint32_t v = tok->hash[i];
        if (!v) return -1;
        const struct tok_entry *e = &tok->tok[v - 1];
        if (e->len == len && !memcmp(e->text, text, len)) return (int)(v - 1);
        i = (i + 1) & tok->hash_mask;
    }
}

/* Later ids overwrite earlier ones with the same text, as in the reference. */
static void hash_insert(struct tokenizer *tok, int id)
{
    const struct tok_entry *e = &tok->tok[id];
    size_t i = (size_t)hash_bytes(e->text, e->len) & tok->hash_mask;
    for (;;) {
        uint32_t v = tok->hash[i];
        if (!v) break;
        const struct tok_entry *o = &tok->tok[v - 1];
        if (o->len == e->len && !memcmp(o->text, e->text, e->len)) break;
        i = (i + 1) & tok->hash_mask;
    }
    tok->hash[i] = (uint32_t)id + 1;
}

bool tok_ids_push(struct tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) return false;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return true;
}

static bool bigram_before(const struct tok_bigram *a, const struct tok_bigram *b)
{
    return a->prio < b->prio || (a->prio == b->prio && a->left < b->left);
}

bool tok_heap_push(struct tok_heap *h, struct tok_bigram b)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct tok_bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) return false;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(&b, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return true;
}

struct tok_bigram tok_heap_pop(struct tok_heap *h)
{
    struct tok_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bigram_before(&h->v[c + 1], &h->v[c])) c++;
        if (!bigram_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static bool is_int_type(enum gguf_vtype t)
{
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_U16: case GGUF_I16: case GGUF_U32: case GGUF_I32:
    case GGUF_U64: case GGUF_I64:
        return true;
    default:
        return false;
    }
}

/* ============================================================================================
 * loading
 * ========================================================================================== */

/* Optional bool key: *out unchanged if absent. */
static attnd_status get_opt_bool(const struct gguf *g, const char *key, bool *out, bool *present, char *err,
                                 size_t errlen)
{
    bool v;
    attnd_status st = gguf_get_bool(g, key, &v);
    if (present) *present = false;
    if (st == ATTND_ERR_NOTFOUND) return ATTND_OK;
    if (st != ATTND_OK) {
        set_err(err, errlen, "%s is not a bool", key);
        return ATTND_ERR_FORMAT;
    }
    *out = v;
    if (present) *present = true;
    return ATTND_OK;
}

/* Optional special-token id: -1 / 0xFFFFFFFF mean none; others must be in [0, n). */
static attnd_status get_special_id(const struct gguf *g, const char *key, int n, int *out, char *err, size_t errlen)
{
    int64_t v;
    attnd_status st = gguf_get_int(g, key, &v);
    if (st == ATTND_ERR_NOTFOUND) return ATTND_OK;
    if (st != ATTND_OK) {
        set_err(err, errlen, "%s is not an integer", key);
        return ATTND_ERR_FORMAT;
    }
    if (v == -1 || v == (int64_t)UINT32_MAX) {
        *out = -1;
        return ATTND_OK;
    }
    if (v < 0 || v >= n) {
        set_err(err, errlen, "%s = %" PRId64 " is out of range (the vocabulary has %d tokens)", key, v, n);
        return ATTND_ERR_FORMAT;
    }
    *out = (int)v;
    return ATTND_OK;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const struct tokenizer *tok = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = tok->tok[x].len, ly = tok->tok[y].len;
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Builds the decoded piece of every token into dst (the second half of the arena). */
static attnd_status build_pieces(struct tokenizer *tok, char *dst, char *err, size_t errlen)
{
    for (int id = 0; id < tok->n_vocab; id++) {
        struct tok_entry *e = &tok->tok[id];
        const unsigned char *s = (const unsigned char *)e->text;
        size_t n = e->len, o = 0;
        switch (e->type) {
        case TOK_TYPE_CONTROL:
        case TOK_TYPE_UNKNOWN:
        case TOK_TYPE_USER_DEFINED:
            e->piece = e->text;
            e->plen = e->len;
            continue;
        case TOK_TYPE_UNUSED:
        case TOK_TYPE_UNDEFINED:
            e->piece = dst;
            e->plen = 0;
            continue;
        case TOK_TYPE_BYTE:
            if (tok->kind == TOK_KIND_SPM) {
                int h1, h2;
                if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>' || (h1 = hexval((char)s[3])) < 0 ||
                    (h2 = hexval((char)s[4])) < 0) {
                    set_err(err, errlen, "token %d has type BYTE but its text is not <0xNN>", id);
                    return ATTND_ERR_FORMAT;
                }
                dst[0] = (char)(h1 * 16 + h2);
                e->piece = dst;
                e->plen = 1;
                dst += 2;
                continue;
            }
            /* BPE has no byte tokens; like the reference, render nothing */
            e->piece = dst;
            e->plen = 0;
            continue;
        default: /* NORMAL */
            break;
        }
        if (tok->kind == TOK_KIND_SPM) {
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && s[i] == 0xE2 && s[i + 1] == 0x96 && s[i + 2] == 0x81) {
                    dst[o++] = ' ';
                    i += 3;
                } else dst[o++] = (char)s[i++];
            }
        } else {
            /* texts were checked to be valid UTF-8; code points outside the byte map pass through */
            for (size_t i = 0; i < n;) {
                size_t l = utf8_seq_len((const char *)s + i, n - i);
                uint32_t cp = utf8_decode((const char *)s + i, l);
                int b = tok_bpe_cp_byte(cp);
                if (b >= 0) dst[o++] = (char)b;
                else {
                    memcpy(dst + o, s + i, l);
                    o += l;
                }
                i += l;
            }
        }
        e->piece = dst;
        e->plen = (uint32_t)o;
        dst += o + 1;
    }
    return ATTND_OK;
}

static attnd_status load_merges(struct tokenizer *tok, const struct gguf *g, char *err, size_t errlen)
{
    int64_t ki = gguf_find_key(g, KEY_MERGES);
    if (ki < 0) {
        set_err(err, errlen, "%s is missing (required for a gpt2 tokenizer)", KEY_MERGES);
        return ATTND_ERR_FORMAT;
    }
    if (gguf_kv_type(g, ki) != GGUF_ARRAY || gguf_arr_type(g, ki) != GGUF_STRING) {
        set_err(err, errlen, "%s is not an array of strings", KEY_MERGES);
        return ATTND_ERR_FORMAT;
    }
    uint64_t n = gguf_arr_n(g, ki);
    if (n > (uint64_t)INT32_MAX / 4) {
        set_err(err, errlen, "%s has %" PRIu64 " entries, too many", KEY_MERGES, n);
        return ATTND_ERR_FORMAT;
    }
    tok->merge_mask = pow2_at_least((size_t)n * 2 + 1) - 1;
    tok->merges = calloc(tok->merge_mask + 1, sizeof *tok->merges);
    char *buf = malloc(2 * TOK_MAX_TEXT + 2);
    if (!tok->merges || !buf) {
        free(buf);
        set_err(err, errlen, "out of memory for %" PRIu64 " merges", n);
        return ATTND_ERR_NOMEM;
    }
    size_t ignored = 0;
    for (uint64_t r = 0; r < n; r++) {
        struct gguf_str s = gguf_arr_str(g, ki, r);
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp) {
            free(buf);
            set_err(err, errlen, "%s[%" PRIu64 "] = \"%.*s\" is not two tokens separated by a space", KEY_MERGES, r,
                    (int)(s.len > 40 ? 40 : s.len), s.ptr ? s.ptr : "");
            return ATTND_ERR_FORMAT;
        }
        size_t la = (size_t)(sp - s.ptr), lb = (size_t)s.len - la - 1;
        int a = tok_lookup(tok, s.ptr, la), b = tok_lookup(tok, sp + 1, lb);
        int c = -1;
        if (a >= 0 && b >= 0 && la + lb <= 2 * TOK_MAX_TEXT) {
            memcpy(buf, s.ptr, la);
            memcpy(buf + la, sp + 1, lb);
            c = tok_lookup(tok, buf, la + lb);
        }
        if (c < 0) {
            ignored++;
            continue;
        }
        uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
        size_t i = (size_t)tok_merge_hash(key) & tok->merge_mask;
        while (tok->merges[i].key && tok->merges[i].key != key) i = (i + 1) & tok->merge_mask;
        if (tok->merges[i].key) continue; /* duplicate pair: the first (lowest rank) wins */
        tok->merges[i].key = key;
        tok->merges[i].rank = (int32_t)r;
        tok->merges[i].result = c;
    }
    free(buf);
    if (ignored)
        log_warn("tokenizer: %zu of %" PRIu64 " merges name a token that is not in the vocabulary; ignored", ignored,
                 n);
    return ATTND_OK;
}

/* EOT by text when the metadata names none; EOG = EOS, EOT, EOM and the known end markers.
 * As in the reference, a token picked this way is made CONTROL. */
static void infer_eog(struct tokenizer *tok)
{
    static const char *const eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                            "<|endoftext|>", "<EOT>", "_<EOT>",
                                            "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                            "<end_of_utterance>"};
    static const char *const eog_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                                            "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
                                            "<|end_of_text|>", "<end_of_utterance>"};
    if (tok->eot < 0) {
        for (size_t i = 0; i < sizeof eot_texts / sizeof *eot_texts && tok->eot < 0; i++)
            tok->eot = tok_lookup(tok, eot_texts[i], strlen(eot_texts[i]));
        if (tok->eot >= 0 && tok->tok[tok->eot].type != TOK_TYPE_CONTROL) tok->tok[tok->eot].type = TOK_TYPE_CONTROL;
    }
    if (tok->eom < 0) tok->eom = tok_lookup(tok, "<|eom_id|>", 10);
    for (size_t i = 0; i < sizeof eog_texts / sizeof *eog_texts; i++) {
        int id = tok_lookup(tok, eog_texts[i], strlen(eog_texts[i]));
        if (id < 0) continue;
        tok->tok[id].attr |= TOK_A_EOG;
        if (tok->tok[id].type != TOK_TYPE_CONTROL) tok->tok[id].type = TOK_TYPE_CONTROL;
    }
    if (tok->eos >= 0) tok->tok[tok->eos].attr |= TOK_A_EOG;
    if (tok->eot >= 0) tok->tok[tok->eot].attr |= TOK_A_EOG;
    if (tok->eom >= 0) tok->tok[tok->eom].attr |= TOK_A_EOG;
}

/* The reference's per-model attribute rule: Phi-3's special tokens swallow the whitespace after them. */
static void model_quirks(struct tokenizer *tok, const struct gguf *g)
{
    struct gguf_str name;
    if (gguf_get_str(g, "general.name", &name) != ATTND_OK) return;
    char low[128];
    size_t n = name.len < sizeof low - 1 ? (size_t)name.len : sizeof low - 1;
    for (size_t i = 0; i < n; i++) low[i] = (char)tolower((unsigned char)name.ptr[i]);
    low[n] = 0;
    if (!strstr(low, "phi-3") && !strstr(low, "phi3")) return;
    for (size_t i = 0; i < tok->n_special; i++) tok->tok[tok->special[i]].attr |= TOK_A_RSTRIP;
    int id = tok_lookup(tok, "</s>", 4);
    if (id >= 0) tok->tok[id].attr |= TOK_A_RSTRIP;
    static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t i = 0; i < 3; i++)
        if ((id = tok_lookup(tok, keep[i], strlen(keep[i]))) >= 0) tok->tok[id].attr &= (uint8_t)~TOK_A_RSTRIP;
}

static attnd_status build_specials(struct tokenizer *tok)
{
    size_t n = 0;
    for (int id = 0; id < tok->n_vocab; id++) {
        uint8_t t = tok->tok[id].type;
        if ((t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN) && tok->tok[id].len) n++;
    }
    tok->special = malloc((n ? n : 1) * sizeof *tok->special);
    if (!tok->special) return ATTND_ERR_NOMEM;
    tok->n_special = 0;
    for (int id = 0; id < tok->n_vocab; id++) {
        uint8_t t = tok->tok[id].type;
        if ((t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN) && tok->tok[id].len)
            tok->special[tok->n_special++] = id;
    }
    qsort_r(tok->special, tok->n_special, sizeof *tok->special, cmp_special, tok);
    return ATTND_OK;
}

/* Step 1: the tokenizer model (llama = SPM, gpt2 = BPE). */
static attnd_status read_kind(const struct gguf *g, enum tok_kind *kind, char *err, size_t errlen)
{
    struct gguf_str model;
    attnd_status st = gguf_get_str(g, KEY_MODEL, &model);
    if (st != ATTND_OK) {
        set_err(err, errlen, st == ATTND_ERR_NOTFOUND ? "%s is missing" : "%s is not a string", KEY_MODEL);
        return ATTND_ERR_FORMAT;
    }
    if (model.len == 5 && !memcmp(model.ptr, "llama", 5)) *kind = TOK_KIND_SPM;
    else if (model.len == 4 && !memcmp(model.ptr, "gpt2", 4)) *kind = TOK_KIND_BPE;
    else {
        set_err(err, errlen, "unsupported tokenizer model %s = \"%.*s\" (supported: llama, gpt2)", KEY_MODEL,
                (int)(model.len > 40 ? 40 : model.len), model.ptr);
        return ATTND_ERR_UNSUPPORTED;
    }
    return ATTND_OK;
}

/* Where the vocabulary arrays are: key indices (-1 = absent; tokens is required) and the size. */
struct vocab_keys {
    int64_t tok, type, score;
    uint64_t n;
};

/* Checks that the optional per-token array at key ki (if present) has the right element kind and
 * n entries. */
static attnd_status check_parallel_array(const struct gguf *g, int64_t ki, const char *key, bool floats,
                                         uint64_t n, char *err, size_t errlen)
{
    if (ki < 0) return ATTND_OK;
    enum gguf_vtype et = gguf_arr_type(g, ki);
    if (gguf_kv_type(g, ki) != GGUF_ARRAY || (floats ? et != GGUF_F32 && et != GGUF_F64 : !is_int_type(et))) {
        set_err(err, errlen, floats ? "%s is not an array of floats" : "%s is not an array of integers", key);
        return ATTND_ERR_FORMAT;
    }
    if (gguf_arr_n(g, ki) != n) {
        set_err(err, errlen, "%s has %" PRIu64 " entries but %s has %" PRIu64, key, gguf_arr_n(g, ki), KEY_TOKENS,
                n);
        return ATTND_ERR_FORMAT;
    }
    return ATTND_OK;
}

/* Step 2: the arrays tokens, token_type, scores. */
static attnd_status find_arrays(const struct gguf *g, struct vocab_keys *vk, char *err, size_t errlen)
{
    vk->tok = gguf_find_key(g, KEY_TOKENS);
    if (vk->tok < 0) {
        set_err(err, errlen, "%s is missing", KEY_TOKENS);
        return ATTND_ERR_FORMAT;
    }
    if (gguf_kv_type(g, vk->tok) != GGUF_ARRAY || gguf_arr_type(g, vk->tok) != GGUF_STRING) {
        set_err(err, errlen, "%s is not an array of strings", KEY_TOKENS);
        return ATTND_ERR_FORMAT;
    }
    vk->n = gguf_arr_n(g, vk->tok);
    if (vk->n == 0 || vk->n > TOK_MAX_VOCAB) {
        set_err(err, errlen, "%s has %" PRIu64 " entries (expected 1..%d)", KEY_TOKENS, vk->n, TOK_MAX_VOCAB);
        return ATTND_ERR_FORMAT;
    }
    vk->type = gguf_find_key(g, KEY_TYPES);
    vk->score = gguf_find_key(g, KEY_SCORES);
    attnd_status st = check_parallel_array(g, vk->type, KEY_TYPES, false, vk->n, err, errlen);
    return st ? st : check_parallel_array(g, vk->score, KEY_SCORES, true, vk->n, err, errlen);
}

/* Fills token i's type and score from the arrays, and checks a BPE text is UTF-8. */
static attnd_status fill_entry(struct tokenizer *tok, const struct gguf *g, const struct vocab_keys *vk, uint64_t i,
                               char *err, size_t errlen)
{
    struct tok_entry *e = &tok->tok[i];
    e->type = TOK_TYPE_NORMAL;
    if (vk->type >= 0) {
        int64_t t = gguf_arr_int(g, vk->type, i);
        if (t < TOK_TYPE_UNDEFINED || t > TOK_TYPE_BYTE) {
            set_err(err, errlen, "%s[%" PRIu64 "] = %" PRId64 " is not a token type (0..6)", KEY_TYPES, i, t);
            return ATTND_ERR_FORMAT;
        }
        e->type = (uint8_t)t;
    }
    e->score = vk->score >= 0 ? (float)gguf_arr_float(g, vk->score, i) : 0.0f;
    if (tok->kind == TOK_KIND_BPE && !utf8_valid(e->text, e->len)) {
        set_err(err, errlen, "%s[%" PRIu64 "] is not valid UTF-8 (byte %zu)", KEY_TOKENS, i,
                utf8_valid_prefix(e->text, e->len));
        return ATTND_ERR_FORMAT;
    }
    return ATTND_OK;
}

/* Step 3: copies the texts into the arena (texts, then pieces: each at most as long as its text);
 * *piece_area = where the pieces go. */
static attnd_status copy_texts(struct tokenizer *tok, const struct gguf *g, const struct vocab_keys *vk,
                               char **piece_area, char *err, size_t errlen)
{
    size_t total = 0;
    for (uint64_t i = 0; i < vk->n; i++) {
        struct gguf_str s = gguf_arr_str(g, vk->tok, i);
        if (s.len > TOK_MAX_TEXT) {
            set_err(err, errlen, "%s[%" PRIu64 "] is %" PRIu64 " bytes long (limit %u)", KEY_TOKENS, i, s.len,
                    TOK_MAX_TEXT);
            return ATTND_ERR_FORMAT;
        }
        total += (size_t)s.len + 2; /* NUL, and room for a 1-byte piece of an empty text */
    }
    tok->arena = malloc(2 * total);
    if (!tok->arena) return ATTND_ERR_NOMEM;
    char *p = tok->arena;
    for (uint64_t i = 0; i < vk->n; i++) {
        struct gguf_str s = gguf_arr_str(g, vk->tok, i);
        struct tok_entry *e = &tok->tok[i];
        if (s.len) memcpy(p, s.ptr, (size_t)s.len);
        p[s.len] = 0;
        e->text = p;
        e->len = (uint32_t)s.len;
        p += s.len + 1;
        attnd_status st = fill_entry(tok, g, vk, i, err, errlen);
        if (st) return st;
    }
    *piece_area = tok->arena + total;
    return ATTND_OK;
}

/* Step 4: text -> id. */
static attnd_status build_hash(struct tokenizer *tok)
{
    tok->hash_mask = pow2_at_least((size_t)tok->n_vocab * 2) - 1;
    tok->hash = calloc(tok->hash_mask + 1, sizeof *tok->hash);
    if (!tok->hash) return ATTND_ERR_NOMEM;
    for (int id = 0; id < tok->n_vocab; id++) hash_insert(tok, id);
    return ATTND_OK;
}

/* Step 5 (BPE): the pre-tokenizer, the merges and the byte tokens; *llama3 set for llama3's rules. */
static attnd_status init_bpe(struct tokenizer *tok, const struct gguf *g, bool *llama3, char *err, size_t errlen)
{
    struct gguf_str pre = {NULL, 0};
    attnd_status ps = gguf_get_str(g, KEY_PRE, &pre);
    if (ps != ATTND_OK && ps != ATTND_ERR_NOTFOUND) {
        set_err(err, errlen, "%s is not a string", KEY_PRE);
        return ATTND_ERR_FORMAT;
    }
    bool known = true;
    attnd_status st = tok_bpe_init(tok, pre.ptr, (size_t)pre.len, &known, err, errlen);
    if (st != ATTND_OK) return st;
    if (!known)
        log_warn("tokenizer: unknown pre-tokenizer %s = \"%.*s\"; using \"default\"", KEY_PRE,
                 (int)(pre.len > 40 ? 40 : pre.len), pre.ptr);
    *llama3 = !strcmp(tok->pre_name, "llama3");
    tok->ignore_merges = *llama3;
    st = load_merges(tok, g, err, errlen);
    if (st != ATTND_OK) return st;
    for (unsigned b = 0; b < 256; b++) {
        char u[4];
        size_t l = utf8_encode(tok_bpe_byte_cp(b), u);
        tok->byte_tok[b] = tok_lookup(tok, u, l);
    }
    return ATTND_OK;
}

/* Step 5 (SPM): the byte tokens <0xNN> (or the byte itself as a token). */
static void init_spm_bytes(struct tokenizer *tok)
{
    for (unsigned b = 0; b < 256; b++) {
        char h[7];
        snprintf(h, sizeof h, "<0x%02X>", b);
        int id = tok_lookup(tok, h, 6);
        if (id < 0) {
            char c = (char)b;
            id = tok_lookup(tok, &c, 1);
        }
        tok->byte_tok[b] = id;
    }
}

/* Step 6a: the special ids (defaults by kind, overridden by the tokenizer.ggml.*_token_id keys). */
static attnd_status read_special_ids(struct tokenizer *tok, const struct gguf *g, char *err, size_t errlen)
{
    if (tok->kind == TOK_KIND_SPM) {
        tok->unk = 0;
        tok->bos = tok->n_vocab > 1 ? 1 : -1;
        tok->eos = tok->n_vocab > 2 ? 2 : -1;
    }
    static const struct {
        const char *key;
        size_t off;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(struct tokenizer, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(struct tokenizer, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(struct tokenizer, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(struct tokenizer, eom)},
        {"tokenizer.ggml.unknown_token_id", offsetof(struct tokenizer, unk)},
        {"tokenizer.ggml.padding_token_id", offsetof(struct tokenizer, pad)},
        {"tokenizer.ggml.seperator_token_id", offsetof(struct tokenizer, sep)},
    };
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        attnd_status st = get_special_id(g, ids[i].key, tok->n_vocab, (int *)((char *)tok + ids[i].off), err, errlen);
        if (st != ATTND_OK) return st;
    }
    return ATTND_OK;
}

/* Step 6b: the add_bos / add_eos / add_space_prefix flags, checked against the special ids. */
static attnd_status read_flags(struct tokenizer *tok, const struct gguf *g, bool llama3, char *err, size_t errlen)
{
    attnd_status st;
    tok->add_bos = tok->kind == TOK_KIND_SPM || llama3;
    tok->add_eos = false;
    tok->add_space_prefix = tok->kind == TOK_KIND_SPM;
    bool bos_key = false, eos_key = false;
    if ((st = get_opt_bool(g, "tokenizer.ggml.add_bos_token", &tok->add_bos, &bos_key, err, errlen)) ||
        (st = get_opt_bool(g, "tokenizer.ggml.add_eos_token", &tok->add_eos, &eos_key, err, errlen)) ||
        (st = get_opt_bool(g, "tokenizer.ggml.add_space_prefix", &tok->add_space_prefix, NULL, err, errlen)))
        return st;
    if (tok->kind == TOK_KIND_BPE) tok->add_space_prefix = false;
    if (tok->add_bos && tok->bos < 0) {
        if (bos_key) {
            set_err(err, errlen, "tokenizer.ggml.add_bos_token is true but there is no BOS token");
            return ATTND_ERR_FORMAT;
        }
        tok->add_bos = false;
    }
    if (tok->add_eos && tok->eos < 0) {
        set_err(err, errlen, "tokenizer.ggml.add_eos_token is true but there is no EOS token");
        return ATTND_ERR_FORMAT;
    }
    return ATTND_OK;
}

/* Step 7: pieces, EOG, specials. */
static attnd_status finish_tables(struct tokenizer *tok, const struct gguf *g, char *piece_area, char *err,
                                  size_t errlen)
{
    infer_eog(tok);
    attnd_status st = build_pieces(tok, piece_area, err, errlen);
    if (st != ATTND_OK) return st;
    for (int id = 0; id < tok->n_vocab; id++)
        if (tok->tok[id].plen > tok->max_piece) tok->max_piece = tok->tok[id].plen;
    if ((st = build_specials(tok)) != ATTND_OK) return st;
    model_quirks(tok, g);
    return ATTND_OK;
}

/* Allocates an empty tokenizer of kind for n tokens, or NULL. */
static struct tokenizer *tok_alloc(enum tok_kind kind, uint64_t n)
{
    struct tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return NULL;
    tok->kind = kind;
    tok->n_vocab = (int)n;
    tok->bos = tok->eos = tok->eot = tok->eom = tok->unk = tok->pad = tok->sep = -1;
    tok->pre_name = "spm";
    tok->tok = calloc((size_t)n, sizeof *tok->tok);
    if (!tok->tok) {
        free(tok);
        return NULL;
    }
    return tok;
}

attnd_status tok_create(const struct gguf *g, struct tokenizer **out, char *err, size_t errlen)
{
    if (err && errlen) err[0] = 0;
    if (!out) return ATTND_ERR_INVALID;
    *out = NULL;
    if (!g) {
        set_err(err, errlen, "no GGUF handle");
        return ATTND_ERR_INVALID;
    }
    enum tok_kind kind;
    struct vocab_keys vk;
    attnd_status st;
    if ((st = read_kind(g, &kind, err, errlen)) || (st = find_arrays(g, &vk, err, errlen))) return st;
    struct tokenizer *tok = tok_alloc(kind, vk.n);
    char *piece_area = NULL;
    bool llama3 = false;
    if (!tok) st = ATTND_ERR_NOMEM;
    else if (!(st = copy_texts(tok, g, &vk, &piece_area, err, errlen)) && !(st = build_hash(tok))) {
        if (kind == TOK_KIND_BPE) st = init_bpe(tok, g, &llama3, err, errlen);
        else init_spm_bytes(tok);
        if (!st && !(st = read_special_ids(tok, g, err, errlen)) && !(st = read_flags(tok, g, llama3, err, errlen)))
            st = finish_tables(tok, g, piece_area, err, errlen);
    }
    if (st == ATTND_OK) {
        *out = tok;
        return ATTND_OK;
    }
    if (st == ATTND_ERR_NOMEM && (!err || !errlen || !err[0])) set_err(err, errlen, "out of memory loading the tokenizer");
    tok_destroy(tok);
    return st;
}

void tok_destroy(struct tokenizer *tok)
{
    if (!tok) return;
    tok_bpe_free(tok);
    free(tok->special);
    free(tok->merges);
    free(tok->hash);
    free(tok->arena);
    free(tok->tok);
    free(tok);
}

/* ============================================================================================
 * accessors
 * ========================================================================================== */

enum tok_kind tok_kind(const struct tokenizer *tok) { return tok->kind; }
const char *tok_pre_name(const struct tokenizer *tok) { return tok->pre_name; }
int tok_n_vocab(const struct tokenizer *tok) { return tok->n_vocab; }
int tok_bos(const struct tokenizer *tok) { return tok->bos; }
int tok_eos(const struct tokenizer *tok) { return tok->eos; }
int tok_eot(const struct tokenizer *tok) { return tok->eot; }
int tok_unk(const struct tokenizer *tok) { return tok->unk; }
int tok_pad(const struct tokenizer *tok) { return tok->pad; }
bool tok_add_bos(const struct tokenizer *tok) { return tok->add_bos; }
bool tok_add_eos(const struct tokenizer *tok) { return tok->add_eos; }
size_t tok_max_piece(const struct tokenizer *tok) { return tok->max_piece; }

bool tok_is_eog(const struct tokenizer *tok, int id)
{
    return id >= 0 && id < tok->n_vocab && (tok->tok[id].attr & TOK_A_EOG);
}

enum tok_type tok_token_type(const struct tokenizer *tok, int id)
{
    return id >= 0 && id < tok->n_vocab ? (enum tok_type)tok->tok[id].type : TOK_TYPE_UNDEFINED;
}

int tok_find(const struct tokenizer *tok, const char *text, size_t len) { return tok_lookup(tok, text, len); }

const char *tok_piece(const struct tokenizer *tok, int id, size_t *len)
{
    if (id < 0 || id >= tok->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = tok->tok[id].len;
    return tok->tok[id].text;
}

/* ============================================================================================
 * encoding: split out special tokens, then run the algorithm on each raw-text fragment
 * ========================================================================================== */

struct frag {
    int32_t id; /* -1: raw text */
    size_t off, len;
};

struct frags {
    struct frag *v;
    size_t n, cap;
};

static bool frags_push(struct frags *f, int32_t id, size_t off, size_t len)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        struct frag *v = realloc(f->v, cap * sizeof *v);
        if (!v) return false;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = (struct frag){id, off, len};
    return true;
}

static bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Splits the raw fragments of *cur at every occurrence of special token id, as the reference
 * does: tokens are taken longest first, each over the fragments the longer ones left. */
static attnd_status split_on(const struct tokenizer *tok, const char *text, int id, struct frags *cur,
                             struct frags *next)
{
    const struct tok_entry *e = &tok->tok[id];
    bool any = false;
    for (size_t i = 0; i < cur->n && !any; i++)
        if (cur->v[i].id < 0 && cur->v[i].len >= e->len && memmem(text + cur->v[i].off, cur->v[i].len, e->text, e->len))
            any = true;
    if (!any) return ATTND_OK;
    next->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        struct frag f = cur->v[i];
        if (f.id >= 0) {
            if (!frags_push(next, f.id, 0, 0)) return ATTND_ERR_NOMEM;
            continue;
        }
        size_t off = f.off, end = f.off + f.len;
        while (off < end) {
            const char *m = end - off >= e->len ? memmem(text + off, end - off, e->text, e->len) : NULL;
            if (!m) {
                if (!frags_push(next, -1, off, end - off)) return ATTND_ERR_NOMEM;
                break;
            }
            size_t mo = (size_t)(m - text), left = mo - off;
            if (e->attr & TOK_A_LSTRIP)
                while (left > 0 && is_space(text[off + left - 1])) left--;
            if (left && !frags_push(next, -1, off, left)) return ATTND_ERR_NOMEM;
            if (!frags_push(next, id, 0, 0)) return ATTND_ERR_NOMEM;
            off = mo + e->len;
            if (e->attr & TOK_A_RSTRIP)
                while (off < end && is_space(text[off])) off++;
        }
    }
    struct frags t = *cur;
    *cur = *next;
    *next = t;
    return ATTND_OK;
}

attnd_status tok_encode(const struct tokenizer *tok, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t **ids, size_t *n)
{
    attnd_status st = ATTND_OK;
    struct tok_ids out = {0};
    struct frags cur = {0}, next = {0};
    *ids = NULL;
    *n = 0;
    if (!text) len = 0;
    if (len > TOK_MAX_INPUT) return ATTND_ERR_RANGE;

    if (len) {
        if (!frags_push(&cur, -1, 0, len)) goto nomem;
        for (size_t i = 0; i < tok->n_special; i++) {
            int id = tok->special[i];
            if (!parse_special && tok->tok[id].type != TOK_TYPE_USER_DEFINED) continue;
            if (tok->tok[id].len > len) continue;
            if ((st = split_on(tok, text, id, &cur, &next)) != ATTND_OK) goto out;
        }
    }

    if (add_special && tok->add_bos && !tok_ids_push(&out, tok->bos)) goto nomem;
    bool prev_special = true; /* SPM: the first fragment gets the dummy prefix space */
    for (size_t i = 0; i < cur.n; i++) {
        const struct frag *f = &cur.v[i];
        if (f->id >= 0) {
            if (!tok_ids_push(&out, f->id)) goto nomem;
            prev_special = true;
            continue;
        }
        if (tok->kind == TOK_KIND_SPM) {
            st = tok_spm_encode(tok, text + f->off, f->len, tok->add_space_prefix && prev_special, &out);
        } else {
            st = tok_bpe_encode(tok, text + f->off, f->len, &out);
        }
        if (st != ATTND_OK) goto out;
        prev_special = false;
    }
    if (add_special && tok->add_eos && !tok_ids_push(&out, tok->eos)) goto nomem;
    if (!out.v && !(out.v = malloc(sizeof *out.v))) goto nomem;
    *ids = out.v;
    *n = out.n;
    out.v = NULL;
    goto out;
nomem:
    st = ATTND_ERR_NOMEM;
out:
    free(out.v);
    free(cur.v);
    free(next.v);
    return st;
}

/* ============================================================================================
 * decoding
 * ========================================================================================== */

/* The bytes id renders as (before any prefix strip). */
static const char *render(const struct tokenizer *tok, int id, bool special, size_t *len)
{
    const struct tok_entry *e = &tok->tok[id];
    if (!special && (e->type == TOK_TYPE_CONTROL || e->type == TOK_TYPE_UNKNOWN)) {
        *len = 0;
        return e->piece;
    }
    *len = e->plen;
    return e->piece;
}

size_t tok_decode_token(const struct tokenizer *tok, int id, char *buf, size_t cap, bool render_special)
{
    if (id < 0 || id >= tok->n_vocab) return 0;
    size_t l;
    const char *s = render(tok, id, render_special, &l);
    if (buf && cap) memcpy(buf, s, l < cap ? l : cap);
    return l;
}

attnd_status tok_decode(const struct tokenizer *tok, const int32_t *ids, size_t n, unsigned flags, char **out,
                        size_t *len)
{
    *out = NULL;
    if (len) *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->n_vocab) return ATTND_ERR_RANGE;
        total += tok->tok[ids[i]].plen;
    }
    char *buf = malloc(total + 1);
    if (!buf) return ATTND_ERR_NOMEM;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *s = render(tok, ids[i], flags & TOK_DECODE_SPECIAL, &l);
        if (i == 0 && (flags & TOK_DECODE_STRIP_PREFIX) && tok->add_space_prefix && l && s[0] == ' ') {
            s++;
            l--;
        }
        memcpy(buf + o, s, l);
        o += l;
    }
    buf[o] = 0;
    *out = buf;
    if (len) *len = o;
    return ATTND_OK;
}

/* ============================================================================================
 * streaming detokenizer
 * ========================================================================================== */

struct tok_stream {
    const struct tokenizer *tok;
    unsigned flags;
    bool first;
    unsigned char pend[4]; /* the start of a character that may still complete */
    size_t npend;
};

attnd_status tok_stream_create(const struct tokenizer *tok, unsigned flags, struct tok_stream **out)
{
    *out = NULL;
    if (!tok) return ATTND_ERR_INVALID;
    struct tok_stream *s = calloc(1, sizeof *s);
    if (!s) return ATTND_ERR_NOMEM;
    s->tok = tok;
    s->flags = flags;
    s->first = true;
    *out = s;
    return ATTND_OK;
}

void tok_stream_destroy(struct tok_stream *s) { free(s); }

/* How many leading bytes of b[0..n) can be handed out: everything except a trailing prefix of a
 * valid character that more bytes could complete. */
static size_t complete_prefix(const unsigned char *b, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = b[i];
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            i++; /* can never start a character */
            continue;
        }
        size_t k = 1;
        for (; k <= need; k++) {
            if (i + k >= n) return i; /* valid so far, incomplete: hold back */
            unsigned d = b[i + k];
            if (d < (k == 1 ? lo : 0x80) || d > (k == 1 ? hi : 0xBF)) break;
        }
        i += k; /* a whole character, or an invalid prefix (passed through; resume at the bad byte) */
    }
    return n;
}

attnd_status tok_stream_push(struct tok_stream *s, int id, char *out, size_t cap, size_t *n_out)
{
    *n_out = 0;
    const struct tokenizer *tok = s->tok;
    if (id < 0 || id >= tok->n_vocab) return ATTND_ERR_RANGE;
    size_t l;
    const char *p = render(tok, id, s->flags & TOK_DECODE_SPECIAL, &l);
    if (s->first && (s->flags & TOK_DECODE_STRIP_PREFIX) && tok->add_space_prefix && l && p[0] == ' ') {
        p++;
        l--;
    }
    if (cap < s->npend + l) return ATTND_ERR_INVALID;
    s->first = false;
    memcpy(out, s->pend, s->npend);
    memcpy(out + s->npend, p, l);
    size_t total = s->npend + l;
    size_t done = complete_prefix((const unsigned char *)out, total);
    s->npend = total - done; /* at most 3 */
    memcpy(s->pend, out + done, s->npend);
    *n_out = done;
    return ATTND_OK;
}

attnd_status tok_stream_flush(struct tok_stream *s, char *out, size_t cap, size_t *n_out)
{
    *n_out = 0;
    if (cap < s->npend) return ATTND_ERR_INVALID;
    memcpy(out, s->pend, s->npend);
    *n_out = s->npend;
    s->npend = 0;
    s->first = true;
    return ATTND_OK;
}
