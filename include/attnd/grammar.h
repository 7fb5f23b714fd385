/* grammar.h - the one grammar form that output constraints compile to (GBNF text, JSON schemas).
 *
 * A grammar is a set of rules; each rule is a list of alternatives; each alternative a sequence
 * of elements, where an element is a set of bytes (one byte of input) or a reference to a rule.
 * Everything else is desugared by the builder: a literal string becomes one byte set per byte,
 * a character class over code points becomes a rule whose alternatives are the UTF-8 byte
 * sequences of its ranges (so the matcher works on bytes and only ever accepts valid UTF-8),
 * and a repetition X{m,n} becomes m copies of X followed by a chain of optional rules.
 *
 * Build with a struct gram_builder (one owner, not thread-safe), then gram_build() checks the
 * grammar (every referenced rule defined, no left recursion, the root rule can derive at least
 * one string, size caps) and returns an immutable struct gram, safe to share between threads.
 * Alternatives that can never complete (they reference a rule that derives nothing) are dropped,
 * so every prefix a matcher accepts can be completed to a whole sentence of the grammar.
 * Nothing here prints, logs or exits.
 */
#ifndef ATTND_GRAMMAR_H
#define ATTND_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

#define GRAM_MAX_RULES 65536         /* rules in one grammar (auxiliary ones included) */
#define GRAM_MAX_ELEMS (1u << 21)    /* elements over all rules */
#define GRAM_MAX_REPEAT 10000        /* the largest m or n of X{m,n} */
#define GRAM_INF (-1)                /* X{m,}: no upper bound */
#define GRAM_MAX_CP 0x10FFFFu

struct gram;         /* a checked grammar: immutable, thread-safe */
struct gram_builder; /* opaque */

/* Creates an empty builder. ATTND_OK or ATTND_ERR_NOMEM (*out NULL). */
attnd_status gram_builder_create(struct gram_builder **out);
/* Frees b; gram_builder_destroy(NULL) is a no-op. */
void gram_builder_destroy(struct gram_builder *b);

/* The id of the rule named name[0..len), created (undefined, no alternatives) on first use.
 * Returns -1 when out of memory or past GRAM_MAX_RULES. */
int gram_rule(struct gram_builder *b, const char *name, size_t len);
/* A new rule with a unique name derived from base ("base-N"); -1 on failure as gram_rule. */
int gram_rule_fresh(struct gram_builder *b, const char *base);
/* Marks rule as defined; returns false if it already was (a duplicate definition). */
bool gram_rule_define(struct gram_builder *b, int rule);
/* The rule's name (owned by b). */
const char *gram_rule_name(const struct gram_builder *b, int rule);

/* Element appenders: each adds to the end of rule's current (last) alternative. They return
 * ATTND_OK, ATTND_ERR_NOMEM or ATTND_ERR_RANGE (past GRAM_MAX_ELEMS / GRAM_MAX_RULES); on
 * failure the builder is unusable except for gram_builder_destroy. */
/* One byte out of set (256 bits, bit b of set[b >> 3] is byte b). */
attnd_status gram_add_byteset(struct gram_builder *b, int rule, const uint8_t set[32]);
/* The bytes of s[0..n) in order. */
attnd_status gram_add_literal(struct gram_builder *b, int rule, const char *s, size_t n);
/* One code point out of the union of the n inclusive ranges [r[2i], r[2i+1]] (or, if negate,
 * any code point outside them), surrogates never included. An empty set is allowed (it matches
 * nothing: its alternative is dropped at build). */
attnd_status gram_add_cpset(struct gram_builder *b, int rule, const uint32_t *r, size_t n, bool negate);
/* A reference to rule ref. */
attnd_status gram_add_ref(struct gram_builder *b, int rule, int ref);
/* Ends rule's current alternative and starts an empty one. */
attnd_status gram_add_alt(struct gram_builder *b, int rule);
/* Number of elements in rule's current alternative (a mark for gram_repeat). */
size_t gram_alt_len(const struct gram_builder *b, int rule);
/* Replaces the elements [from, end) of rule's current alternative (call them X) with
 * X{min,max} (max GRAM_INF: unbounded); 0 <= min <= max <= GRAM_MAX_REPEAT or ATTND_ERR_RANGE. */
attnd_status gram_repeat(struct gram_builder *b, int rule, size_t from, int min, int max);

/* Checks the grammar whose start rule is named root and freezes it into *out.
 * Returns ATTND_OK, or ATTND_ERR_INVALID with a one-line reason in err (a referenced rule that
 * is never defined, no rule named root, left recursion naming the rule, a root that derives
 * no string at all), ATTND_ERR_RANGE (size caps) or ATTND_ERR_NOMEM. b stays owned by the
 * caller and may be destroyed right after. */
attnd_status gram_build(const struct gram_builder *b, const char *root, struct gram **out, char *err,
                        size_t errlen);
/* Drops one reference to g (gram_build's, or one gram_retain added) and frees it with the last;
 * gram_destroy(NULL) is a no-op. Thread-safe. */
void gram_destroy(struct gram *g);
/* Adds a reference to g (so a request can keep the grammar its submitter drops) and returns g.
 * Thread-safe. */
struct gram *gram_retain(const struct gram *g);

/* Size figures of a built grammar (rules after desugaring, elements). */
size_t gram_n_rules(const struct gram *g);
size_t gram_n_elems(const struct gram *g);

#endif
