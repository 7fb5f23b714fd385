/* tokenizer_internal.h - private to the tokenizer: the struct every file of the module reads
 * (tokenizer.c loads it; tok_special.c, tok_encode.c, tok_decode.c, tok_spm.c, tok_bpe.c). */
#ifndef ATTND_TOKENIZER_INTERNAL_H
#define ATTND_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/tokenizer.h"

#define TOK_MAX_REGEX 6

/* Token attributes beyond the type. */
#define TOK_A_EOG 1u    /* ends generation */
#define TOK_A_LSTRIP 2u /* a match in the text swallows the whitespace before it */
#define TOK_A_RSTRIP 4u /* ... and after it */

struct tok_entry {
    const char *text;  /* raw vocabulary text, NUL-terminated copy */
    const char *piece; /* decoded bytes (see tok_decode_token) */
    uint32_t len;      /* of text */
    uint32_t plen;     /* of piece */
    float score;       /* SPM merge score */
    uint8_t type;      /* enum tok_type */
    uint8_t attr;      /* TOK_A_* */
};

struct tok_merge {
    uint64_t key;   /* (left id << 32 | right id) + 1; 0 = empty slot */
    int32_t rank;   /* index in tokenizer.ggml.merges; lower merges first */
    int32_t result; /* id of the concatenation */
};

struct tokenizer {
    enum tok_kind kind;
    int n_vocab;
    struct tok_entry *tok; /* (n_vocab) */
    char *arena;           /* all texts and pieces */

    uint32_t *hash;  /* text -> id + 1 (0 empty), open addressing, (hash_mask + 1) slots */
    size_t hash_mask;
    struct tok_merge *merges; /* (merge_mask + 1) slots; BPE only */
    size_t merge_mask;

    int32_t byte_tok[256]; /* SPM: id of <0xNN>; BPE: id of the byte's mapped code point; -1 none */

    int32_t *special; /* CONTROL/USER_DEFINED/UNKNOWN ids with non-empty text, longest text first */
    size_t n_special;

    int bos, eos, eot, eom, unk, pad, sep;
    bool add_bos, add_eos, add_space_prefix;
    bool ignore_merges; /* llama3: a pre-token that is itself a token is not merged */
    size_t max_piece;

    const char *pre_name;
    int n_regex;
    void *regex[TOK_MAX_REGEX]; /* pcre2_code *, applied in sequence */
};

/* Slot hash of a merge key (tok_merge.key). */
static inline uint64_t tok_merge_hash(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    key ^= key >> 33;
    return key;
}

/* Id of text[0..len), or -1. */
int tok_lookup(const struct tokenizer *tok, const char *text, size_t len);

/* printf into err[0..errlen) (a no-op when err is NULL or errlen 0): the load errors' message. */
void tok_set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

struct gguf;

/* Loading, step 6 (tok_special.c): the special ids (defaults by kind, overridden by the
 * tokenizer.ggml.*_token_id keys), then the add_bos / add_eos / add_space_prefix flags checked
 * against them (llama3: BOS added by default). Returns ATTND_ERR_FORMAT with a message in err. */
attnd_status tok_special_load(struct tokenizer *tok, const struct gguf *g, bool llama3, char *err, size_t errlen);
/* Loading, step 7, before the pieces are built: EOT by text when the metadata names none, and the
 * end-of-generation set (EOS, EOT, EOM and the known end markers); a token picked this way is
 * made CONTROL, as in the reference. */
void tok_special_infer_eog(struct tokenizer *tok);
/* Loading, step 7, last: the special-token list tok_encode splits out (CONTROL, USER_DEFINED and
 * UNKNOWN tokens with text, longest first) and the per-model attribute rules. Returns
 * ATTND_ERR_NOMEM or ATTND_OK. */
attnd_status tok_special_list(struct tokenizer *tok, const struct gguf *g);

/* A growable id vector. */
struct tok_ids {
    int32_t *v;
    size_t n, cap;
};
bool tok_ids_push(struct tok_ids *ids, int32_t id);

/* A candidate merge of two adjacent symbols, for both tokenizers' merge loops. */
struct tok_bigram {
    double prio;          /* lower pops first (BPE: merge rank; SPM: -score); ties: lower left */
    int left, right;      /* symbol indices */
    int32_t lid, rid;     /* BPE: the symbols' ids when queued (a stale entry has others) */
    int32_t result;       /* BPE: id of the merged token */
    size_t size;          /* SPM: bytes of the pair when queued */
};
/* A binary min-heap of bigrams; {0} is empty; free(.v) releases it. */
struct tok_heap {
    struct tok_bigram *v;
    size_t n, cap;
};
/* Adds b; false (heap unchanged) if out of memory. */
bool tok_heap_push(struct tok_heap *h, struct tok_bigram b);
/* Removes and returns the first bigram; h->n must be > 0. */
struct tok_bigram tok_heap_pop(struct tok_heap *h);

/* SPM: tokenizes one raw-text fragment, after a dummy space if prefix_space. */
attnd_status tok_spm_encode(const struct tokenizer *tok, const char *text, size_t len, bool prefix_space,
                            struct tok_ids *out);

/* BPE: compiles the pre-tokenizer for name (NULL = default); *known false if name was unknown. */
attnd_status tok_bpe_init(struct tokenizer *tok, const char *name, size_t name_len, bool *known, char *err,
                          size_t errlen);
void tok_bpe_free(struct tokenizer *tok);
/* BPE: the code point byte b is mapped to. */
uint32_t tok_bpe_byte_cp(unsigned b);
/* BPE: the byte code point cp stands for, or -1 if cp is not one of the 256 mapped code points. */
int tok_bpe_cp_byte(uint32_t cp);
/* BPE: tokenizes one raw-text fragment. */
attnd_status tok_bpe_encode(const struct tokenizer *tok, const char *text, size_t len, struct tok_ids *out);

#endif
