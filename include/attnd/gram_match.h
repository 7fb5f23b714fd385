/* gram_match.h - an incremental matcher of bytes against a grammar (grammar.h).
 *
 * The matcher is a pushdown automaton run on all parses at once: its state is the set of parse
 * stacks still alive (each a list of grammar positions, the top one a byte set waiting for the
 * next byte). Stacks are interned as shared frames and each distinct set of stacks as a state
 * id, and the transition (state, byte) -> state is computed once and remembered: repeated text
 * (the inside of a string, digits) costs a table lookup. Because the grammar's dead alternatives
 * are pruned at build, every accepted prefix can still be completed to a whole sentence.
 *
 * A struct gmatch belongs to one caller at a time (not thread-safe); the grammar it reads is
 * shared and must outlive it. The remembered tables are bounded: past GMATCH_FLUSH_STATES states
 * or GMATCH_FLUSH_FRAMES frames they are dropped (keeping the current state) at the next
 * gmatch_accept_* or gmatch_compact call, which changes state ids (gmatch_epoch counts this).
 */
#ifndef ATTND_GRAM_MATCH_H
#define ATTND_GRAM_MATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

struct gram;
struct gmatch; /* opaque */

#define GMATCH_DEAD (-1)          /* no parse survives the byte */
#define GMATCH_UNKNOWN (-2)       /* a row entry not computed yet */
#define GMATCH_MAX_STACKS 4096    /* parse stacks in one state (ambiguous grammars): more is an error */
#define GMATCH_MAX_DEPTH 4096     /* nested expansions while computing one transition */
#define GMATCH_FLUSH_STATES 4096
#define GMATCH_FLUSH_FRAMES (1u << 20)

/* Creates a matcher at the start of g. ATTND_OK, ATTND_ERR_NOMEM, or ATTND_ERR_RANGE when the
 * grammar's start needs more than GMATCH_MAX_STACKS stacks. *out NULL on failure. */
attnd_status gmatch_create(const struct gram *g, struct gmatch **out);
/* Frees m; gmatch_destroy(NULL) is a no-op. */
void gmatch_destroy(struct gmatch *m);
/* A new, independent matcher in m's current state (its cost is the size of the current stacks,
 * not of m's tables). ATTND_OK or ATTND_ERR_NOMEM. */
attnd_status gmatch_clone(const struct gmatch *m, struct gmatch **out);
/* Back to the start of the grammar. */
attnd_status gmatch_reset(struct gmatch *m);

/* Advances by byte c; false (state unchanged) if no parse accepts it. */
bool gmatch_accept_byte(struct gmatch *m, uint8_t c);
/* Advances by all of s[0..n), or (false) not at all. */
bool gmatch_accept_bytes(struct gmatch *m, const void *s, size_t n);
/* Whether the input so far is a whole sentence of the grammar. */
bool gmatch_accepts_end(const struct gmatch *m);
/* True once a transition failed for lack of memory or a cap (GMATCH_MAX_STACKS, _DEPTH): such
 * a transition reads as GMATCH_DEAD. Sticky until gmatch_reset. */
bool gmatch_failed(const struct gmatch *m);

/* ---- the automaton, for walks over many byte strings (the token mask) ----
 * States are ids valid until the next gmatch_accept_*, gmatch_compact or gmatch_reset. */
/* Drops the remembered tables if they are over their bounds (keeping the current state). */
attnd_status gmatch_compact(struct gmatch *m);
/* The current state, and a counter that changes whenever state ids are renumbered. */
int32_t gmatch_state(const struct gmatch *m);
uint64_t gmatch_epoch(const struct gmatch *m);
/* The state after byte c from state s, or GMATCH_DEAD. */
int32_t gmatch_next(struct gmatch *m, int32_t s, uint8_t c);
/* The remembered row of s: 256 entries, each a state, GMATCH_DEAD or GMATCH_UNKNOWN (then ask
 * gmatch_next). The pointer stays valid until the ids are renumbered; NULL if out of memory. */
const int32_t *gmatch_row(struct gmatch *m, int32_t s);
/* Whether state s accepts the end of input. */
bool gmatch_final(const struct gmatch *m, int32_t s);
/* Whether state s reads every "plain" character - a code point from U+0020 up other than '"',
 * '\\' and U+007F, in any of its UTF-8 forms - and comes back to s (the inside of a free JSON
 * string). Exact: every byte of every form is tried once (memoized); the answer is kept per state. */
bool gmatch_plain_loop(struct gmatch *m, int32_t s);
/* Number of parse stacks in state s (a cost figure). */
size_t gmatch_n_stacks(const struct gmatch *m, int32_t s);

#endif
