/* gram_mask.h - which tokens of a vocabulary a grammar allows next: the token mask.
 *
 * A struct gmask_vocab is built once per tokenizer: every token's bytes (tok_decode_token:
 * SentencePiece's U+2581 is a space and <0xNN> one byte; byte-level BPE code points map back
 * through the GPT-2 byte table) stored in a trie laid out in depth-first order. Filling a mask
 * walks the trie with the matcher's automaton (gram_match.h): a byte no parse accepts cuts off
 * the whole subtree below it. CONTROL, UNKNOWN and UNUSED tokens are never allowed; the
 * end-of-generation tokens (tok_is_eog: EOS, EOT...) are allowed exactly when the grammar
 * accepts the end of the text. A gmask_vocab is immutable after creation and thread-safe.
 *
 * A struct gmask_seq is one sequence's constraint: a matcher plus a small cache of masks by
 * automaton state (inside a free string the state repeats, and its mask with it). It belongs
 * to one caller at a time.
 *
 * A mask is an array of gmask_words() uint64_t: token id i is allowed when bit (i & 63) of
 * word i >> 6 is set.
 */
#ifndef ATTND_GRAM_MASK_H
#define ATTND_GRAM_MASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

struct gram;
struct gmatch;
struct tokenizer;
struct gmask_vocab; /* opaque */
struct gmask_seq;   /* opaque */

#define GMASK_CACHE 8 /* masks a gmask_seq remembers */

/* Builds the trie of tok's vocabulary (tok must outlive nothing: the bytes are copied).
 * ATTND_OK, ATTND_ERR_NOMEM or ATTND_ERR_INVALID (empty vocabulary); *out NULL on failure. */
attnd_status gmask_vocab_create(const struct tokenizer *tok, struct gmask_vocab **out);
/* Frees v; gmask_vocab_destroy(NULL) is a no-op. */
void gmask_vocab_destroy(struct gmask_vocab *v);
/* The vocabulary size, and the number of uint64_t words in one mask. */
int gmask_n_vocab(const struct gmask_vocab *v);
size_t gmask_words(const struct gmask_vocab *v);
/* Trie nodes (a size figure). */
size_t gmask_n_nodes(const struct gmask_vocab *v);
/* The bytes token id stands for (owned by v), or NULL for an id out of range; *len may be 0. */
const uint8_t *gmask_token_bytes(const struct gmask_vocab *v, int id, size_t *len);
/* Whether id may ever be allowed (not CONTROL/UNKNOWN/UNUSED, not empty), EOG tokens aside. */
bool gmask_token_usable(const struct gmask_vocab *v, int id);

/* Writes into mask the tokens allowed from m's current state; *n_allowed (may be NULL) gets
 * their count. May grow m's tables. Returns ATTND_OK, ATTND_ERR_NOMEM, or ATTND_ERR_RANGE when
 * the matcher hit one of its caps (gmatch_failed). */
attnd_status gmask_fill(const struct gmask_vocab *v, struct gmatch *m, uint64_t *mask, size_t *n_allowed);
/* Advances m by token id's bytes. An EOG token advances nothing and is accepted only where the
 * grammar accepts the end. ATTND_OK, or ATTND_ERR_INVALID (the token is not allowed here: m
 * unchanged), ATTND_ERR_RANGE (id out of range). */
attnd_status gmask_accept(const struct gmask_vocab *v, struct gmatch *m, int id);

/* ---- one sequence ---- */

/* A sequence constrained by g over v (both shared; they must outlive it). ATTND_OK,
 * ATTND_ERR_NOMEM or ATTND_ERR_RANGE (the grammar's start exceeds the matcher's caps). */
attnd_status gmask_seq_create(const struct gmask_vocab *v, const struct gram *g, struct gmask_seq **out);
/* Frees s; gmask_seq_destroy(NULL) is a no-op. */
void gmask_seq_destroy(struct gmask_seq *s);
/* The mask of the current state (gmask_fill, or a copy of a remembered one). */
attnd_status gmask_seq_fill(struct gmask_seq *s, uint64_t *mask, size_t *n_allowed);
/* Sets every logit (n_vocab floats) of a token the grammar does not allow to -INFINITY.
 * ATTND_OK, or ATTND_ERR_INVALID when no token at all is allowed (the caller should end the
 * sequence), or a gmask_fill failure. */
attnd_status gmask_seq_apply(struct gmask_seq *s, float *logits);
/* Advances by the chosen token (gmask_accept). */
attnd_status gmask_seq_accept(struct gmask_seq *s, int id);
/* Whether the text so far is a whole sentence of the grammar. */
bool gmask_seq_accepts_end(const struct gmask_seq *s);
/* The sequence's matcher (for byte-level checks). */
struct gmatch *gmask_seq_matcher(struct gmask_seq *s);

#endif
