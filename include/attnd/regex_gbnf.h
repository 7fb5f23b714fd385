/* regex_gbnf.h - GBNF text for the parts of JSON schemas that are languages of their own: a
 * regular expression over a string's characters, a bounded integer range, a set of code points,
 * and "any string but these". Everything is written as GBNF expressions into a growable text
 * buffer (json_schema.c puts them into rules); each expression is one GBNF item (parenthesized
 * when it is more than one). The text inside a JSON string is matched in its JSON-encoded
 * form: a character that must be escaped is matched as its one canonical escape (\" \\ \b \f
 * \n \r \t, else \u00xx), any other character as itself.
 *
 * Regex subset (ECMA-262 syntax): literals, escapes \d \w \s \D \W \S \n \r \t \f \v \0 \xHH
 * \uHHHH and escaped punctuation, classes [...] with ranges and negation, '.', groups (...) and
 * (?:...), '|', and the quantifiers * + ? {m} {m,} {m,n} (a lazy '?' after them changes nothing
 * about the language). '^' and '$' only at the very start and end; without them the pattern
 * may match anywhere (JSON Schema semantics: `jchar*` is put around it). Refused with a reason:
 * backreferences, lookaround, \b, \p{...}, anchors elsewhere.
 *
 * Thread-safe; never prints.
 */
#ifndef ATTND_REGEX_GBNF_H
#define ATTND_REGEX_GBNF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

#define RXG_MAX_PATTERN 4096        /* bytes of one pattern */
#define RXG_MAX_INT 9999999999999999LL /* integers have at most 16 digits */

/* A growable text buffer; {0} is empty; free(.p) releases it. After an allocation failure
 * .oom is set and further writes are dropped. */
struct rxg_buf {
    char *p;
    size_t n, cap;
    bool oom;
};

void rxg_put(struct rxg_buf *b, const char *s, size_t n);
void rxg_puts(struct rxg_buf *b, const char *s);
void rxg_printf(struct rxg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A GBNF string literal for the bytes s[0..n) (valid UTF-8). */
void rxg_lit(struct rxg_buf *b, const char *s, size_t n);
/* The canonical JSON encoding (inside the quotes) of the UTF-8 text s[0..n) into b (raw bytes). */
void rxg_json_escape(struct rxg_buf *b, const char *s, size_t n);

/* An item matching one JSON-encoded character whose code point is in the union of the n
 * inclusive ranges r[2i]..r[2i+1] (or, negate, outside them). */
void rxg_json_class(struct rxg_buf *b, const uint32_t *r, size_t n, bool negate);

/* An item matching the JSON-encoded content of the strings that pattern[0..len) matches;
 * jchar names the rule of one JSON string character (for the unanchored ends). Returns ATTND_OK,
 * or ATTND_ERR_UNSUPPORTED / ATTND_ERR_INVALID with a reason in err (a feature outside the
 * subset / a malformed pattern), ATTND_ERR_RANGE (too long, repetition counts over limits). */
attnd_status rxg_regex(struct rxg_buf *b, const char *pattern, size_t len, const char *jchar, char *err,
                       size_t errlen);

/* An item matching the decimal integers in [lo, hi] (no leading zeros, no "-0");
 * -RXG_MAX_INT <= lo <= hi <= RXG_MAX_INT. */
void rxg_int_range(struct rxg_buf *b, int64_t lo, int64_t hi);

/* Bounds of a number range: a side is absent (has = false), inclusive or exclusive. */
struct rxg_bound {
    bool has, excl;
    int64_t v; /* |v| <= RXG_MAX_INT */
};
/* An item matching the JSON numbers (no exponent; at most 16 integer and 16 fraction digits,
 * more digits where a fraction must not be zero) between lo and hi. "nothing" when empty. */
void rxg_number_range(struct rxg_buf *b, struct rxg_bound lo, struct rxg_bound hi);

/* An item matching the JSON-encoded content of any string except the n strings keys[i]
 * (UTF-8, lens[i] bytes); jchar names the rule of one JSON string character. The exclusion is
 * on the canonical encoding: a key spelled with a needless \u escape is not excluded. */
void rxg_not_strings(struct rxg_buf *b, const char *const *keys, const size_t *lens, size_t n, const char *jchar);

#endif
