/* grammar_internal.h - the layout of a built grammar, private to grammar.c and gram_match.c. */
#ifndef ATTND_GRAMMAR_INTERNAL_H
#define ATTND_GRAMMAR_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "attnd/grammar.h"

/* An element is one uint32: the type in the top two bits, the value below. Each alternative
 * of each rule is laid out as its elements followed by one GRAM_E_END. */
#define GRAM_E_END 0u  /* end of an alternative */
#define GRAM_E_REF 1u  /* value: rule id */
#define GRAM_E_SET 2u  /* value: index of a 256-bit byte set */
#define GRAM_E_TYPE(e) ((e) >> 30)
#define GRAM_E_VAL(e) ((e) & 0x3fffffffu)
#define GRAM_E_MAKE(t, v) (((uint32_t)(t) << 30) | (uint32_t)(v))

struct gram {
    uint32_t *elems;     /* (n_elems) */
    uint32_t n_elems;
    uint8_t (*sets)[32]; /* (n_sets) byte sets */
    uint32_t n_sets;
    uint32_t *alt_off;   /* (n_rules + 1): rule r's alternatives are alts[alt_off[r] .. alt_off[r+1]) */
    uint32_t *alts;      /* start positions (into elems) of the live alternatives */
    uint32_t n_rules;
    uint32_t root;       /* rule id of the start rule */
    atomic_int refs;     /* gram_retain / gram_destroy */
};

/* Whether byte c is in set s. */
static inline int gram_set_has(const uint8_t *s, unsigned c)
{
    return (s[c >> 3] >> (c & 7)) & 1;
}

#endif
