/* test_gram_mask.c - the token mask on real vocabularies (issue 34): Qwen2's byte-level BPE
 * (151,936 tokens) and the shipped KJV SentencePiece model (byte fallback). At several points of
 * JSON texts, every allowed token's bytes must be accepted by a fresh copy of the matcher, every
 * disallowed token's bytes rejected (all of them are tried), control tokens never allowed, and
 * end-of-generation tokens allowed exactly where the grammar accepts the end. */
#include <string.h>

#include "attnd/gbnf.h"
#include "attnd/gguf.h"
#include "attnd/gram_mask.h"
#include "attnd/gram_match.h"
#include "attnd/grammar.h"
#include "attnd/tokenizer.h"
#include "testutil.h"

static const char *GBNF =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,3})? ws\n"
    "ws ::= | \" \" | \"\\n\" [ ]{0,8}\n";

/* The prefixes at which the mask is checked (each a prefix of a JSON object text). */
static const char *PREFIXES[] = {
    "",                    /* structural: only '{' (and whitespace-free object starts) */
    "{",                   /* a key or '}' */
    "{\"na",               /* inside a key */
    "{\"name\": \"Jo",     /* inside free string content */
    "{\"name\": \"caf\xc3", /* in the middle of a UTF-8 character */
    "{\"n\": 12",          /* a number, which may go on */
    "{\"n\": [true, ",     /* an array element */
    "{\"a\": {}}",         /* complete: only whitespace and EOS */
};

static struct tokenizer *load_tok(const char *path)
{
    char err[256];
    struct gguf *g = NULL;
    struct tokenizer *tok = NULL;
    if (gguf_open(path, &g, err, sizeof err) != ATTND_OK) {
        fprintf(stderr, "%s: %s\n", path, err);
        return NULL;
    }
    if (tok_create(g, &tok, err, sizeof err) != ATTND_OK) fprintf(stderr, "%s: %s\n", path, err);
    gguf_close(g);
    return tok;
}

/* Whether a fresh copy of m accepts token id's bytes (EOG: whether m accepts the end). */
static bool copy_accepts(const struct gmask_vocab *v, const struct gmatch *m, int id)
{
    struct gmatch *c = NULL;
    if (gmatch_clone(m, &c) != ATTND_OK) return false;
    bool ok = gmask_accept(v, c, id) == ATTND_OK;
    gmatch_destroy(c);
    return ok;
}

/* Checks the mask at one prefix; returns the number of allowed tokens. */
static size_t check_prefix(const struct tokenizer *tok, const struct gmask_vocab *v, const struct gram *g,
                           const char *prefix)
{
    struct gmatch *m = NULL;
    T_CHECK(gmatch_create(g, &m) == ATTND_OK, "create");
    if (!m) return 0;
    T_CHECK(gmatch_accept_bytes(m, prefix, strlen(prefix)), "prefix '%s'", prefix);
    int n = gmask_n_vocab(v);
    uint64_t *mask = t_xmalloc(gmask_words(v) * sizeof *mask);
    size_t n_allowed = 0;
    T_CHECK(gmask_fill(v, m, mask, &n_allowed) == ATTND_OK, "fill at '%s'", prefix);
    size_t counted = 0, bad_in = 0, bad_out = 0;
    for (int id = 0; id < n; id++) {
        bool allowed = (mask[id >> 6] >> (id & 63)) & 1;
        counted += allowed;
        enum tok_type t = tok_token_type(tok, id);
        if (allowed && (t == TOK_TYPE_CONTROL || t == TOK_TYPE_UNKNOWN) && !tok_is_eog(tok, id)) bad_in++;
        bool want = tok_is_eog(tok, id) ? gmatch_accepts_end(m)
                                        : gmask_token_usable(v, id) && copy_accepts(v, m, id);
        if (allowed && !want) bad_in++;
        if (!allowed && want) bad_out++;
    }
    T_CHECK(counted == n_allowed, "'%s': count %zu vs %zu", prefix, counted, n_allowed);
    T_CHECK(bad_in == 0, "'%s': %zu allowed tokens the matcher rejects", prefix, bad_in);
    T_CHECK(bad_out == 0, "'%s': %zu rejected tokens the matcher accepts", prefix, bad_out);
    T_CHECK(n_allowed > 0, "'%s': nothing allowed", prefix);
    int eos = tok_eos(tok);
    if (eos >= 0) {
        bool eos_ok = (mask[eos >> 6] >> (eos & 63)) & 1;
        T_CHECK(eos_ok == gmatch_accepts_end(m), "'%s': EOS %d", prefix, eos_ok);
    }
    free(mask);
    gmatch_destroy(m);
    return n_allowed;
}

/* The token whose bytes are exactly s, or -1. */
static int find_bytes(const struct gmask_vocab *v, const char *s)
{
    for (int id = 0; id < gmask_n_vocab(v); id++) {
        size_t l = 0;
        const uint8_t *b = gmask_token_bytes(v, id, &l);
        if (gmask_token_usable(v, id) && l == strlen(s) && !memcmp(b, s, l)) return id;
    }
    return -1;
}

static void check_vocab(const char *path, const struct gram *g)
{
    struct tokenizer *tok = load_tok(path);
    T_CHECK(tok != NULL, "load %s", path);
    if (!tok) return;
    struct gmask_vocab *v = NULL;
    T_CHECK(gmask_vocab_create(tok, &v) == ATTND_OK, "vocab");
    if (!v) {
        tok_destroy(tok);
        return;
    }
    printf("%s: %d tokens, %zu trie nodes\n", path, gmask_n_vocab(v), gmask_n_nodes(v));
    for (size_t i = 0; i < sizeof PREFIXES / sizeof PREFIXES[0]; i++) {
        size_t n = check_prefix(tok, v, g, PREFIXES[i]);
        printf("  after '%s': %zu allowed\n", PREFIXES[i], n);
    }
    /* a whole generation through gmask_seq: greedy over the mask, lowest id first */
    struct gmask_seq *s = NULL;
    T_CHECK(gmask_seq_create(v, g, &s) == ATTND_OK, "seq");
    int brace = find_bytes(v, "{");
    T_CHECK(brace >= 0, "a token for '{'");
    float *logits = t_xmalloc((size_t)gmask_n_vocab(v) * sizeof *logits);
    for (int i = 0; i < gmask_n_vocab(v); i++) logits[i] = 0;
    T_CHECK(s && gmask_seq_apply(s, logits) == ATTND_OK, "apply");
    T_CHECK(brace >= 0 && logits[brace] == 0, "'{' allowed at the start");
    int quote = find_bytes(v, "\"");
    T_CHECK(quote >= 0 && logits[quote] < 0, "'\"' not allowed at the start");
    T_CHECK(s && gmask_seq_accept(s, quote) == ATTND_ERR_INVALID, "accepting a disallowed token fails");
    T_CHECK(s && gmask_seq_accept(s, brace) == ATTND_OK, "accept '{'");
    int close = find_bytes(v, "}");
    T_CHECK(s && close >= 0 && gmask_seq_accept(s, close) == ATTND_OK && gmask_seq_accepts_end(s), "{}");
    /* gmask_seq_apply sets -inf exactly where gmask_fill leaves a bit clear, in a string and after it */
    static const char *more[] = {"{\"na", "me\": \"x\"", ", \"n\": [1"};
    uint64_t *mask = t_xmalloc(gmask_words(v) * sizeof *mask);
    struct gmask_seq *s2 = NULL;
    T_CHECK(gmask_seq_create(v, g, &s2) == ATTND_OK, "seq");
    for (size_t k = 0; s2 && k < 3; k++) {
        T_CHECK(gmatch_accept_bytes(gmask_seq_matcher(s2), more[k], strlen(more[k])), "advance by '%s'", more[k]);
        struct gmatch *c = NULL;
        T_CHECK(gmatch_clone(gmask_seq_matcher(s2), &c) == ATTND_OK && gmask_fill(v, c, mask, NULL) == ATTND_OK, "fill");
        gmatch_destroy(c);
        for (int i = 0; i < gmask_n_vocab(v); i++) logits[i] = 1;
        T_CHECK(gmask_seq_apply(s2, logits) == ATTND_OK, "apply");
        int wrong = 0;
        for (int i = 0; i < gmask_n_vocab(v); i++) wrong += (logits[i] == 1) != (int)((mask[i >> 6] >> (i & 63)) & 1);
        T_CHECK(wrong == 0, "after '%s': %d logits disagree with the mask", more[k], wrong);
    }
    free(mask);
    free(logits);
    gmask_seq_destroy(s2);
    gmask_seq_destroy(s);
    gmask_vocab_destroy(v);
    tok_destroy(tok);
}

int main(void)
{
    char err[256], path[512];
    struct gram *g = NULL;
    if (gbnf_parse(GBNF, strlen(GBNF), &g, err, sizeof err) != ATTND_OK) {
        fprintf(stderr, "grammar: %s\n", err);
        return 1;
    }
    snprintf(path, sizeof path, "%s/models/tiny-qwen2-f32.gguf", t_shared());
    check_vocab(path, g);
    check_vocab("models/kjv.gguf", g);
    gram_destroy(g);
    printf("test_gram_mask: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
