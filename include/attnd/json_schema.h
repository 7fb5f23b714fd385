/* json_schema.h - JSON schemas (draft 2020-12 subset) compiled into the grammar form, so that
 * generation can be held to them (`response_format` json_schema / json_object).
 *
 * The compiler writes GBNF text (gbnf.h) and parses it: one rule per subschema, memoized by
 * subschema, so a recursive $ref becomes a recursive rule (allowed when the recursion goes
 * through an object or an array; a $ref cycle that consumes nothing is refused as left
 * recursion) and a $ref used many times is compiled once.
 *
 * Supported: type (object, array, string, number, integer, boolean, null, and lists of them; a
 *   schema without "type" admits every type, each held to the keywords that concern it),
 *   properties, required, additionalProperties (false / true / a schema; absent means true),
 *   enum, const, items (a schema or boolean), minItems, maxItems, anyOf, oneOf (as anyOf: the
 *   grammar cannot express "exactly one"), allOf (merged into one schema where that is exact:
 *   see the merging section of json_schema.c; also how $ref and anyOf next to other keywords
 *   are compiled), $ref to "#" and JSON pointers into the same
 *   document (so #/$defs/x and #/definitions/x), minLength, maxLength, pattern (regex_gbnf.h),
 *   format date / time / date-time / uuid (RFC 3339 / RFC 4122 forms; no leap seconds), and
 *   minimum / maximum / exclusiveMinimum / exclusiveMaximum (exact: digit ranges on integers; on
 *   numbers, whole-number bounds, the integer part ranged and the fraction checked at the ends;
 *   such numbers are written without an exponent).
 *   Annotations are ignored: $schema (one of the published drafts), $id (root only), $comment,
 *   title, description, default, examples, deprecated, readOnly, writeOnly, contentMediaType,
 *   contentEncoding, contentSchema, $defs, definitions.
 * Refused (ATTND_ERR_UNSUPPORTED, the message names the keyword): every other keyword; fractional
 *   bounds on numbers; pattern or format together with length bounds; enum/const next to other
 *   assertions; allOf branches that cannot be merged exactly (the same keyword on both sides
 *   other than those merge knows, additionalProperties against other property names); other
 *   formats; custom meta-schemas; strings holding \u0000.
 *
 * What the grammar generates (its one spelling of each value): objects with their properties in
 * schema order (required ones first, in the order of "properties"), extra properties after them;
 * numbers with at most 16 integer digits, 16 fraction digits and 3 exponent digits; strings as
 * canonical JSON (an escape only where JSON needs one, though free strings accept every
 * escape); between tokens at most one space, or a newline and up to 20 spaces of indentation.
 * maxItems/maxLength above JSG_MAX_COUNT mean unbounded (no generation gets there).
 *
 * Thread-safe; never prints.
 */
#ifndef ATTND_JSON_SCHEMA_H
#define ATTND_JSON_SCHEMA_H

#include <stddef.h>

#include "attnd/status.h"

struct gram;

#define JSG_MAX_SCHEMA ((size_t)1 << 20) /* bytes of schema text */
#define JSG_MAX_DEPTH 128                /* subschemas nested in one another ($ref targets count) */
#define JSG_MAX_ENUM 4096                /* values of one enum */
#define JSG_MAX_PROPS 1000               /* properties of one object schema */
#define JSG_MAX_COUNT 1000               /* the largest minItems/minLength honoured as a count */
#define JSG_MAX_GBNF ((size_t)1 << 22)   /* bytes of the grammar written */

/* Compiles the schema text schema[0..len) to GBNF text (*gbnf malloc'd, NUL-terminated; the
 * start rule is `root`). Returns ATTND_OK; ATTND_ERR_INVALID (not JSON, or a malformed keyword
 * value), ATTND_ERR_UNSUPPORTED (a keyword or combination the grammar cannot honour) or
 * ATTND_ERR_RANGE (a cap above) with a one-line reason in err; ATTND_ERR_NOMEM. */
attnd_status jsg_to_gbnf(const char *schema, size_t len, char **gbnf, char *err, size_t errlen);
/* jsg_to_gbnf, then gbnf_parse: *out is the grammar (gram_destroy). A schema no value can
 * satisfy is refused here (ATTND_ERR_INVALID). */
attnd_status jsg_compile(const char *schema, size_t len, struct gram **out, char *err, size_t errlen);
/* The grammar of `{"type":"json_object"}`: any JSON object. */
attnd_status jsg_json_object(struct gram **out, char *err, size_t errlen);

#endif
