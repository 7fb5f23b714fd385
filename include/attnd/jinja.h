/* jinja.h - a Jinja template engine for chat templates: the subset real models'
 * `tokenizer.chat_template` texts use, rendered byte for byte as Python's jinja2 renders them
 * under Hugging Face transformers (sandboxed environment, trim_blocks + lstrip_blocks,
 * loopcontrols, a `generation` block tag, tojson keeping non-ASCII, raise_exception,
 * strftime_now).
 *
 * A template is parsed once (jinja_parse) into an immutable handle that any number of threads
 * may render at the same time (jinja_render keeps all its state per call). Rendering is capped:
 * output bytes, evaluation steps (each loop iteration, expression, element compared and 64 bytes
 * copied or scanned is a step), call/nesting depth and memory, each ending with an error status
 * and a message, never a crash or a hang. Nothing here prints or exits.
 *
 * Known differences from jinja2: integers are 64-bit (an overflow is an error); a whole JSON
 * number (1.0) is an int (cJSON keeps no spelling); filters that are lazy generators in jinja2
 * (select, map, items, ...) are evaluated at once, so their errors come earlier and they print
 * without an address; case mapping covers ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic.
 *
 * Values come from a cJSON object (the context). Strings of the context that sit inside an
 * array or an object (message contents, tool schemas) are "data": the output records where
 * their bytes ended up (struct jinja_output.data), so that a tokenizer can refuse to turn them
 * into special tokens. Top-level strings of the context (bos_token, eos_token) and the
 * template's own text are not data.
 */
#ifndef ATTND_JINJA_H
#define ATTND_JINJA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "attnd/status.h"

typedef struct jinja_tpl jinja_tpl;

/* Render limits and settings; a zero field takes its default. */
struct jinja_opts {
    size_t max_output;      /* bytes of output (and of any one string value); default 1 MiB */
    uint64_t max_steps;     /* loop iterations + node evaluations; default 5,000,000 */
    int max_depth;          /* nested macro calls; default 64 (evaluation nesting as a whole is
                               capped at 400 levels, so a render needs under 192 KiB of stack) */
    size_t max_memory;      /* bytes of scratch memory for values; default 64 MiB */
    const struct tm *now;   /* strftime_now's clock (local broken-down time); NULL: now */
};

/* A span of the output: bytes [off, off + len). */
struct jinja_span {
    size_t off, len;
};

/* What jinja_render produced: text[0..len) (NUL-terminated, malloc'd), and the spans of it
 * that came from data strings of the context (in order, not overlapping, malloc'd). */
struct jinja_output {
    char *text;
    size_t len;
    struct jinja_span *data;
    size_t n_data;
};

/* Parses src[0..len) (any bytes). Nesting deeper than 128 blocks/parentheses is an error.
 * Returns ATTND_OK and *out (free with jinja_free), or ATTND_ERR_INVALID (a syntax error;
 * "line N: reason" in err) or ATTND_ERR_NOMEM, with *out NULL. */
attnd_status jinja_parse(const char *src, size_t len, jinja_tpl **out, char *err, size_t errlen);
/* Frees a template; NULL is a no-op. */
void jinja_free(jinja_tpl *t);

/* Renders t with the variables of ctx (a cJSON object; NULL: none), under opts (NULL: the
 * defaults). Returns ATTND_OK and fills *out (free with jinja_output_free), or, with *out
 * zeroed and the reason in err: ATTND_ERR_INVALID (the template raised an error: for
 * raise_exception(msg) err is exactly msg; otherwise a message in the style of jinja2's, e.g.
 * "UndefinedError: 'x' is undefined"), ATTND_ERR_RANGE (a cap was hit; err names it) or
 * ATTND_ERR_NOMEM. raised (may be NULL) is set true when the error came from
 * raise_exception. Thread-safe. */
attnd_status jinja_render(const jinja_tpl *t, const cJSON *ctx, const struct jinja_opts *opts, struct jinja_output *out,
                          bool *raised, char *err, size_t errlen);
/* Frees what jinja_render allocated and zeroes *o; NULL or a zeroed output is fine. */
void jinja_output_free(struct jinja_output *o);

#endif
