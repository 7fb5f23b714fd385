/* tokenizer.h - tokenizers built entirely from a GGUF file's `tokenizer.ggml.*` metadata.
 *
 * Two families, chosen by `tokenizer.ggml.model`:
 *   "llama"  SentencePiece-style: score-ordered merges of adjacent pieces, spaces as U+2581,
 *            a dummy prefix space (`add_space_prefix`, default true), byte fallback to
 *            `<0xNN>` tokens, else UNK.
 *   "gpt2"   byte-level BPE: bytes mapped to printable code points, ranked merges
 *            (`tokenizer.ggml.merges`), and a pre-tokenizer chosen by `tokenizer.ggml.pre`
 *            (qwen2, llama-bpe/llama3, gpt-2, deepseek-coder, starcoder, falcon, default and
 *            their aliases). An unknown `pre` falls back to "default" with a logged warning.
 *
 * Behaviour follows the reference engine (llama.cpp) wherever the two can agree; the
 * deliberate differences are:
 *   - Invalid UTF-8 in the input is tokenized byte-exactly (BPE: each invalid byte becomes its
 *     own piece; SPM: byte fallback), so decode(encode(x)) == x for any bytes. The reference
 *     replaces invalid sequences with U+FFFD first.
 *   - A merge that names a token not in the vocabulary (or whose result is not in it) is
 *     ignored and counted in a logged warning; a merge string without a separating space is
 *     a load error.
 *   - Detokenization is exact: no "clean up tokenization spaces" pass.
 *   - BPE defaults: no BOS/EOS unless the metadata names them (the reference guesses id 11).
 *   - Special-token ids of -1 / 0xFFFFFFFF mean "none"; any other out-of-range id is an error.
 *
 * A struct tokenizer is immutable after tok_create() and every function below that takes a
 * const struct tokenizer * is safe to call from several threads at once. A struct tok_stream
 * belongs to one caller at a time.
 */
#ifndef ATTND_TOKENIZER_H
#define ATTND_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

struct gguf;
struct tokenizer;
struct tok_stream;

/* Token types, as numbered in `tokenizer.ggml.token_type`. */
enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6
};

enum tok_kind {
    TOK_KIND_SPM = 0, /* tokenizer.ggml.model = "llama" */
    TOK_KIND_BPE = 1  /* tokenizer.ggml.model = "gpt2" */
};

/* Decode flags (tok_decode, tok_stream_create). */
#define TOK_DECODE_SPECIAL 1u      /* render CONTROL and UNKNOWN tokens as their text (else nothing) */
#define TOK_DECODE_STRIP_PREFIX 2u /* if the tokenizer adds a dummy prefix space (SPM), drop one leading
                                      space from the FIRST token's text, as the reference's detokenize
                                      does (its extra rule - no strip when remove_special drops a
                                      leading BOS - is not modelled). Use it to turn a prompt back into
                                      text; `attnd run` should not use it for generated tokens (their
                                      leading space is real). */

/* Builds a tokenizer from g's metadata. g may be closed afterwards (everything is copied).
 * On success returns ATTND_OK and *out owns the tokenizer (free with tok_destroy()).
 * On failure returns ATTND_ERR_FORMAT (malformed metadata: missing/mistyped arrays, lengths that
 * disagree, token types outside 0..6, ids out of range, invalid UTF-8 in a BPE token, a bad
 * `<0xNN>` byte token, missing or malformed merges), ATTND_ERR_UNSUPPORTED (unknown
 * tokenizer.ggml.model) or ATTND_ERR_NOMEM, leaves *out NULL and writes a one-line reason into
 * err (if err != NULL). Never prints except through the logger (warnings). */
attnd_status tok_create(const struct gguf *g, struct tokenizer **out, char *err, size_t errlen);
/* Frees everything; tok_destroy(NULL) is a no-op. */
void tok_destroy(struct tokenizer *tok);

enum tok_kind tok_kind(const struct tokenizer *tok);
/* Name of the pre-tokenizer in use ("qwen2", "llama3", "default"...; "spm" for SentencePiece). */
const char *tok_pre_name(const struct tokenizer *tok);
int tok_n_vocab(const struct tokenizer *tok);
/* Special ids, or -1 when the vocabulary has none. EOT falls back to a token whose text is a
 * known end-of-turn marker (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>...). */
int tok_bos(const struct tokenizer *tok);
int tok_eos(const struct tokenizer *tok);
int tok_eot(const struct tokenizer *tok);
int tok_unk(const struct tokenizer *tok);
int tok_pad(const struct tokenizer *tok);
/* Whether encoding with add_special prepends BOS / appends EOS (tokenizer.ggml.add_bos_token,
 * add_eos_token; defaults: BOS true for SPM, false for BPE except llama3; EOS false). */
bool tok_add_bos(const struct tokenizer *tok);
bool tok_add_eos(const struct tokenizer *tok);
/* True if id ends generation: EOS, EOT, EOM, or a token whose text is a known end marker.
 * False for ids out of range. */
bool tok_is_eog(const struct tokenizer *tok, int id);
/* Type of id (TOK_TYPE_UNDEFINED for ids out of range). */
enum tok_type tok_token_type(const struct tokenizer *tok, int id);
/* Id of the token whose vocabulary text is exactly text[0..len), or -1. */
int tok_find(const struct tokenizer *tok, const char *text, size_t len);

/* Tokenizes text[0..len) (any bytes; need not be NUL-terminated or valid UTF-8).
 * add_special: prepend BOS / append EOS as tok_add_bos()/tok_add_eos() say.
 * parse_special: recognise CONTROL (and UNKNOWN) token texts such as "<|im_end|>" in the text;
 * USER_DEFINED tokens are always recognised, as in the reference.
 * On success *ids is a malloc'd array the caller frees (non-NULL even when *n == 0).
 * On failure returns ATTND_ERR_RANGE (len over 256 MiB), ATTND_ERR_NOMEM or ATTND_ERR_INTERNAL (a
 * regex engine failure) and leaves *ids NULL, *n 0. Thread-safe; all scratch is per call. */
attnd_status tok_encode(const struct tokenizer *tok, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t **ids, size_t *n);

/* Raw vocabulary text of id (not NUL-terminated; *len set), or NULL (and *len = 0) if out of range. */
const char *tok_piece(const struct tokenizer *tok, int id, size_t *len);
/* Copies the bytes id stands for into buf (at most cap of them) and returns the full count
 * (like snprintf: a return > cap means truncated). SPM: U+2581 -> space, <0xNN> -> the byte;
 * BPE: code points -> bytes; USER_DEFINED: their text; CONTROL/UNKNOWN: their text only if
 * render_special, else nothing; UNUSED: nothing. Returns 0 for ids out of range. */
size_t tok_decode_token(const struct tokenizer *tok, int id, char *buf, size_t cap, bool render_special);
/* Largest number of bytes tok_decode_token() can return for any id. */
size_t tok_max_piece(const struct tokenizer *tok);
/* Decodes a whole sequence (flags: TOK_DECODE_*) into a malloc'd, NUL-terminated buffer
 * (*len excludes the NUL). Returns ATTND_ERR_RANGE if an id is out of range, ATTND_ERR_NOMEM. */
attnd_status tok_decode(const struct tokenizer *tok, const int32_t *ids, size_t n, unsigned flags, char **out,
                        size_t *len);

/* ---- streaming detokenizer ----
 * Accepts ids one at a time and hands out only complete UTF-8 characters: the bytes of a
 * character split across tokens are held back until it completes. Bytes that can never form
 * a valid character (stray continuation bytes, C0/C1/F5..FF, a lead byte followed by a
 * non-continuation, overlongs, surrogates) are passed through unchanged as soon as that is
 * known (no U+FFFD substitution), so the concatenated output equals tok_decode() exactly. */

/* Creates a stream over tok (which must outlive it). flags: TOK_DECODE_*. */
attnd_status tok_stream_create(const struct tokenizer *tok, unsigned flags, struct tok_stream **out);
/* Frees s; tok_stream_destroy(NULL) is a no-op. */
void tok_stream_destroy(struct tok_stream *s);
/* Feeds id; writes the newly completed bytes to out and their count to *n_out (may be 0).
 * cap >= tok_max_piece() + 4 always suffices. Returns ATTND_ERR_RANGE (id out of range) or
 * ATTND_ERR_INVALID (cap too small), in both cases leaving the stream unchanged. */
attnd_status tok_stream_push(struct tok_stream *s, int id, char *out, size_t cap, size_t *n_out);
/* Writes any held-back bytes (an incomplete character at the end) to out (cap >= 4 suffices)
 * and resets the stream to its initial state. */
attnd_status tok_stream_flush(struct tok_stream *s, char *out, size_t cap, size_t *n_out);

#endif
