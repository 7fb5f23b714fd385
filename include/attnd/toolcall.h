/* toolcall.h - the tool calls in a model's answer, in the format its chat template taught it,
 * parsed into what the OpenAI API returns (name, arguments as a JSON string, id). Implemented in
 * server/tokenizer/toolcall.c; needs nothing but cJSON, thread-safe.
 *
 * The formats (each as its template renders an assistant's tool_calls, which is what the model
 * learned to emit):
 *   TOOLCALL_HERMES      Hermes 2 Pro / 3, Qwen2.5 / QwQ / Qwen3:
 *                        <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call> (several)
 *   TOOLCALL_LLAMA3      Llama 3.1-3.3: {"name": N, "parameters": {...}} as the whole answer
 *                        (several separated by ';'), or <|python_tag|>N.call(k="v", ...)
 *   TOOLCALL_MISTRAL     Mistral Nemo: [TOOL_CALLS][{"name": N, "arguments": {...}, "id": I}, ...]
 *   TOOLCALL_MISTRAL_ARGS  Mistral Small 3.2: [TOOL_CALLS]N[ARGS]{...} (several)
 *   TOOLCALL_DEEPSEEK_R1 DeepSeek R1 distills: <｜tool▁call▁begin｜>function<｜tool▁sep｜>N\n```json\n{...}\n```<｜tool▁call▁end｜>
 *   TOOLCALL_DEEPSEEK_V3 DeepSeek V3.1: <｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
 *   TOOLCALL_FUNCTIONARY functionary v3.1: <function=N>{...}</function>, <|python_tag|>code (name "python")
 *   TOOLCALL_COMMAND_R   Command R+: Action: ```json\n[{"tool_name": N, "parameters": {...}}]\n```
 *   TOOLCALL_FIREFUNCTION firefunction v2:  functools[{"name": N, "arguments": {...}}]
 * Text before the first call is the message's content. An answer whose calls do not all parse is
 * returned as text with no calls: never a broken tool_calls.
 */
#ifndef ATTND_TOOLCALL_H
#define ATTND_TOOLCALL_H

#include <stddef.h>

#include "attnd/status.h"

enum toolcall_format {
    TOOLCALL_NONE = 0, /* the template shows no tool-call format: the answer is text */
    TOOLCALL_HERMES,
    TOOLCALL_LLAMA3,
    TOOLCALL_MISTRAL,
    TOOLCALL_MISTRAL_ARGS,
    TOOLCALL_DEEPSEEK_R1,
    TOOLCALL_DEEPSEEK_V3,
    TOOLCALL_FUNCTIONARY,
    TOOLCALL_COMMAND_R,
    TOOLCALL_FIREFUNCTION,
    TOOLCALL_FORMAT_COUNT
};

/* The format's name ("hermes", "llama3", ...). */
const char *toolcall_format_name(enum toolcall_format f);

/* The format a chat template's source teaches (by the markers it renders tool calls with), or
 * TOOLCALL_NONE. src may be NULL. */
enum toolcall_format toolcall_format_for_template(const char *src);

struct toolcall {
    char *name;      /* malloc'd */
    char *arguments; /* malloc'd: a JSON object as compact text */
    char *id;        /* malloc'd: the model's own id where the format has one, else "call_" + 24 random chars */
};

struct toolcall_result {
    char *content;          /* malloc'd text outside the calls (trimmed), NULL if none */
    struct toolcall *calls; /* (n_calls) malloc'd */
    size_t n_calls;
};

/* Parses text[0..len) in format f into *out (zeroed first). A text without calls, or whose calls
 * do not all parse, gives n_calls 0 and the whole text as content. Returns ATTND_OK or
 * ATTND_ERR_NOMEM (then *out holds nothing). */
attnd_status toolcall_parse(enum toolcall_format f, const char *text, size_t len, struct toolcall_result *out);

/* Frees what toolcall_parse put in r and zeroes it; NULL or an empty result is a no-op. */
void toolcall_result_free(struct toolcall_result *r);

#endif
