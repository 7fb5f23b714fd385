/* tokenizer.c - the tokenizer object: loading the vocabulary from GGUF metadata (the model kind,
 * the token texts, types and scores, their decoded pieces, the text -> id hash, the BPE merges and
 * the byte tokens), tok_create / tok_destroy, and the accessors. The rest of the module, over
 * the private struct of tokenizer_internal.h: tok_special.c (special ids, flags, end-of-generation
 * set, the special-token list), tok_encode.c (special-token splitting and dispatch to
 * tok_spm.c / tok_bpe.c, the two algorithms) and tok_decode.c (detokenization, streaming). */
#include "attnd/tokenizer.h"

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

/* ============================================================================================
 * small helpers
 * ========================================================================================== */

void tok_set_err(char *err, size_t errlen, const char *fmt, ...)
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
                    tok_set_err(err, errlen, "token %d has type BYTE but its text is not <0xNN>", id);
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
        tok_set_err(err, errlen, "%s is missing (required for a gpt2 tokenizer)", KEY_MERGES);
        return ATTND_ERR_FORMAT;
    }
    if (gguf_kv_type(g, ki) != GGUF_ARRAY || gguf_arr_type(g, ki) != GGUF_STRING) {
        tok_set_err(err, errlen, "%s is not an array of strings", KEY_MERGES);
        return ATTND_ERR_FORMAT;
    }
    uint64_t n = gguf_arr_n(g, ki);
    if (n > (uint64_t)INT32_MAX / 4) {
        tok_set_err(err, errlen, "%s has %" PRIu64 " entries, too many", KEY_MERGES, n);
        return ATTND_ERR_FORMAT;
    }
    tok->merge_mask = pow2_at_least((size_t)n * 2 + 1) - 1;
    tok->merges = calloc(tok->merge_mask + 1, sizeof *tok->merges);
    char *buf = malloc(2 * TOK_MAX_TEXT + 2);
    if (!tok->merges || !buf) {
        free(buf);
        tok_set_err(err, errlen, "out of memory for %" PRIu64 " merges", n);
        return ATTND_ERR_NOMEM;
    }
    size_t ignored = 0;
    for (uint64_t r = 0; r < n; r++) {
        struct gguf_str s = gguf_arr_str(g, ki, r);
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp) {
            free(buf);
            tok_set_err(err, errlen, "%s[%" PRIu64 "] = \"%.*s\" is not two tokens separated by a space", KEY_MERGES, r,
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

/* Step 1: the tokenizer model (llama = SPM, gpt2 = BPE). */
static attnd_status read_kind(const struct gguf *g, enum tok_kind *kind, char *err, size_t errlen)
{
    struct gguf_str model;
    attnd_status st = gguf_get_str(g, KEY_MODEL, &model);
    if (st != ATTND_OK) {
        tok_set_err(err, errlen, st == ATTND_ERR_NOTFOUND ? "%s is missing" : "%s is not a string", KEY_MODEL);
        return ATTND_ERR_FORMAT;
    }
    if (model.len == 5 && !memcmp(model.ptr, "llama", 5)) *kind = TOK_KIND_SPM;
    else if (model.len == 4 && !memcmp(model.ptr, "gpt2", 4)) *kind = TOK_KIND_BPE;
    else {
        tok_set_err(err, errlen, "unsupported tokenizer model %s = \"%.*s\" (supported: llama, gpt2)", KEY_MODEL,
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
        tok_set_err(err, errlen, floats ? "%s is not an array of floats" : "%s is not an array of integers", key);
        return ATTND_ERR_FORMAT;
    }
    if (gguf_arr_n(g, ki) != n) {
        tok_set_err(err, errlen, "%s has %" PRIu64 " entries but %s has %" PRIu64, key, gguf_arr_n(g, ki), KEY_TOKENS,
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
        tok_set_err(err, errlen, "%s is missing", KEY_TOKENS);
        return ATTND_ERR_FORMAT;
    }
    if (gguf_kv_type(g, vk->tok) != GGUF_ARRAY || gguf_arr_type(g, vk->tok) != GGUF_STRING) {
        tok_set_err(err, errlen, "%s is not an array of strings", KEY_TOKENS);
        return ATTND_ERR_FORMAT;
    }
    vk->n = gguf_arr_n(g, vk->tok);
    if (vk->n == 0 || vk->n > TOK_MAX_VOCAB) {
        tok_set_err(err, errlen, "%s has %" PRIu64 " entries (expected 1..%d)", KEY_TOKENS, vk->n, TOK_MAX_VOCAB);
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
            tok_set_err(err, errlen, "%s[%" PRIu64 "] = %" PRId64 " is not a token type (0..6)", KEY_TYPES, i, t);
            return ATTND_ERR_FORMAT;
        }
        e->type = (uint8_t)t;
    }
    e->score = vk->score >= 0 ? (float)gguf_arr_float(g, vk->score, i) : 0.0f;
    if (tok->kind == TOK_KIND_BPE && !utf8_valid(e->text, e->len)) {
        tok_set_err(err, errlen, "%s[%" PRIu64 "] is not valid UTF-8 (byte %zu)", KEY_TOKENS, i,
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
            tok_set_err(err, errlen, "%s[%" PRIu64 "] is %" PRIu64 " bytes long (limit %u)", KEY_TOKENS, i, s.len,
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
        tok_set_err(err, errlen, "%s is not a string", KEY_PRE);
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

/* Step 7: pieces, EOG, specials. */
static attnd_status finish_tables(struct tokenizer *tok, const struct gguf *g, char *piece_area, char *err,
                                  size_t errlen)
{
    tok_special_infer_eog(tok);
    attnd_status st = build_pieces(tok, piece_area, err, errlen);
    if (st != ATTND_OK) return st;
    for (int id = 0; id < tok->n_vocab; id++)
        if (tok->tok[id].plen > tok->max_piece) tok->max_piece = tok->tok[id].plen;
    return tok_special_list(tok, g);
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
        tok_set_err(err, errlen, "no GGUF handle");
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
        if (!st && !(st = tok_special_load(tok, g, llama3, err, errlen)))
            st = finish_tables(tok, g, piece_area, err, errlen);
    }
    if (st == ATTND_OK) {
        *out = tok;
        return ATTND_OK;
    }
    if (st == ATTND_ERR_NOMEM && (!err || !errlen || !err[0])) tok_set_err(err, errlen, "out of memory loading the tokenizer");
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
