/* tok_special.c - the special tokens of a tokenizer loaded from GGUF (tokenizer.c calls these
 * while it loads): the special ids and the add_bos / add_eos / add_space_prefix flags, the
 * end-of-generation set (inferred by text where the metadata names none), and the list of special
 * tokens that tok_encode splits out of the text, longest first. */
#include "server/tokenizer/tokenizer_internal.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/gguf.h"

/* Optional bool key: *out unchanged if absent. */
static attnd_status get_opt_bool(const struct gguf *g, const char *key, bool *out, bool *present, char *err,
                                 size_t errlen)
{
    bool v;
    attnd_status st = gguf_get_bool(g, key, &v);
    if (present) *present = false;
    if (st == ATTND_ERR_NOTFOUND) return ATTND_OK;
    if (st != ATTND_OK) {
        tok_set_err(err, errlen, "%s is not a bool", key);
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
        tok_set_err(err, errlen, "%s is not an integer", key);
        return ATTND_ERR_FORMAT;
    }
    if (v == -1 || v == (int64_t)UINT32_MAX) {
        *out = -1;
        return ATTND_OK;
    }
    if (v < 0 || v >= n) {
        tok_set_err(err, errlen, "%s = %" PRId64 " is out of range (the vocabulary has %d tokens)", key, v, n);
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

/* EOT by text when the metadata names none; EOG = EOS, EOT, EOM and the known end markers.
 * As in the reference, a token picked this way is made CONTROL. */
void tok_special_infer_eog(struct tokenizer *tok)
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

/* The special ids (defaults by kind, overridden by the tokenizer.ggml.*_token_id keys). */
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

/* The add_bos / add_eos / add_space_prefix flags, checked against the special ids. */
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
            tok_set_err(err, errlen, "tokenizer.ggml.add_bos_token is true but there is no BOS token");
            return ATTND_ERR_FORMAT;
        }
        tok->add_bos = false;
    }
    if (tok->add_eos && tok->eos < 0) {
        tok_set_err(err, errlen, "tokenizer.ggml.add_eos_token is true but there is no EOS token");
        return ATTND_ERR_FORMAT;
    }
    return ATTND_OK;
}

attnd_status tok_special_load(struct tokenizer *tok, const struct gguf *g, bool llama3, char *err, size_t errlen)
{
    attnd_status st = read_special_ids(tok, g, err, errlen);
    return st ? st : read_flags(tok, g, llama3, err, errlen);
}

attnd_status tok_special_list(struct tokenizer *tok, const struct gguf *g)
{
    attnd_status st = build_specials(tok);
    if (st == ATTND_OK) model_quirks(tok, g);
    return st;
}
