/* oai_tools.h - tools on the OpenAI-compatible routes: the request's `tools` checked,
 * `tool_choice` read, and what the job does with them: the answer parsed for calls in the
 * template's format (toolcall.h), and for "required" or a named tool a grammar (grammar.h) that
 * holds the answer to one call whose arguments match the tool's parameter schema, so that even a
 * model that never learned the format returns a valid call. Also `response_format` (json_object,
 * json_schema) as a grammar. Not a public header: only server/api/ includes it.
 */
#ifndef ATTND_API_OAI_TOOLS_H
#define ATTND_API_OAI_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include "server/api/fields.h"
#include "server/api/job.h"

struct cJSON;
struct chat_tmpl;

#define OAI_MAX_TOOLS 128

enum oai_tool_choice { OAI_TOOLS_AUTO = 0, OAI_TOOLS_NONE, OAI_TOOLS_REQUIRED, OAI_TOOLS_NAMED };

struct oai_tool_use {
    const struct cJSON *tools; /* the checked tools array, or NULL */
    enum oai_tool_choice choice;
    const struct cJSON *named; /* OAI_TOOLS_NAMED: that tool's object in tools */
    bool render;               /* the template is given the tools */
};

/* Checks a `tools` array: 1..OAI_MAX_TOOLS objects {"type": "function", "function": {"name"
 * (1..64 of [A-Za-z0-9_.-]), "description"? (string), "parameters"? (object), "strict"? (bool)}},
 * names distinct. Returns 0 or 400 with err naming the element. */
int oai_tools_check(const struct cJSON *tools, char *err, size_t errlen);

/* Reads tool_choice (NULL: absent) against tools (NULL: none): "auto" (the default with tools),
 * "none" (the default without), "required", or {"type": "function", "function": {"name"}} naming
 * one of tools. Returns 0 (use filled) or 400 with err. */
int oai_tool_choice(const struct cJSON *tools, const struct cJSON *tool_choice, struct oai_tool_use *use, char *err,
                    size_t errlen);

/* The field reader of parallel_tool_calls (fields.h): false keeps only the first call. */
int oai_read_parallel_tool_calls(const struct api_field_ctx *x, const struct cJSON *it, char *err, size_t errlen);

/* Sets p's tool format (from template t; its own format, else the Hermes one, which the built-in
 * ChatML template renders) and, for "required" or a named tool, p->grammar. Returns 0 or an HTTP
 * status with err (400: a format a call cannot be forced in, a parameter schema the grammar cannot
 * honour, or a grammar already set by response_format / grammar). */
int oai_tools_apply(const struct chat_tmpl *t, const struct oai_tool_use *use, struct job_params *p, char *err,
                    size_t errlen);

/* `response_format`: {"type": "text"}, {"type": "json_object"}, or {"type": "json_schema",
 * "json_schema": {"name", "schema", "strict"?, "description"?}} compiled into p->grammar (the
 * Responses API's text.format, {"type": "json_schema", "name", "schema", ...}, too).
 * Returns 0 or 400 (with err naming what the schema compiler could not honour). */
int oai_response_format(const struct cJSON *it, struct job_params *p, char *err, size_t errlen);

#endif
