/* gbnf.h - a parser of llama.cpp's GBNF grammar notation into the grammar form (grammar.h).
 *
 * Syntax: rules `name ::= alternatives`, one per line (a rule continues over newlines after
 * `::=`, after `|` and inside parentheses); names are letters, digits, '-' and '_'; the start
 * rule is `root`. Elements: "string" literals, [a-z] character classes ([^...] negated), `.` (any
 * character), rule names, ( groups ), each optionally followed by `*`, `+`, `?`, `{m}`, `{m,}`
 * or `{m,n}`; `|` between alternatives; `#` comments to the end of the line. Escapes in strings
 * and classes: \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH (code points, written as UTF-8), and
 * a backslash before any other punctuation stands for that character. Classes and `.` match
 * whole UTF-8 characters.
 *
 * Thread-safe (no shared state); never prints.
 */
#ifndef ATTND_GBNF_H
#define ATTND_GBNF_H

#include <stddef.h>

#include "attnd/status.h"

struct gram;

#define GBNF_MAX_TEXT ((size_t)1 << 22) /* bytes of grammar text */
#define GBNF_MAX_NESTING 256            /* nested parentheses */

/* Parses text[0..len) and builds the grammar (gram_build: undefined rules, left recursion and an
 * empty language are refused). Returns ATTND_OK with *out owned by the caller (gram_destroy), or
 * ATTND_ERR_INVALID with "gbnf: line L, column C: reason" (or the grammar check's reason) in
 * err, ATTND_ERR_RANGE (size caps) or ATTND_ERR_NOMEM; *out NULL on failure. */
attnd_status gbnf_parse(const char *text, size_t len, struct gram **out, char *err, size_t errlen);

#endif
