/* chat_template.h - renders a chat (the OpenAI request's messages, and its tools) into an
 * instruct model's prompt with the model's own Jinja chat template (jinja.h), and tokenizes it
 * so that only the template's own text can become special tokens.
 *
 * Which template (chat_tmpl_get): a file given by the operator (--chat-template-file), else a
 * built-in one named by --chat-template (chatml, llama3, mistral, gemma, phi3: the families'
 * published formats written as small Jinja templates), else the model file's
 * `tokenizer.chat_template` (and `tokenizer.chat_template.tool_use`, used when the request
 * offers tools), else ChatML. Templates are parsed once and kept for the life of the process.
 *
 * The template sees what transformers' apply_chat_template passes: messages (role, content,
 * tool_calls, tool_call_id, name; "developer" is given as "system", content parts are joined
 * into one string, tool call arguments that are a JSON object text are given as that object),
 * tools, add_generation_prompt, and bos_token / eos_token (the vocabulary's BOS / EOS texts).
 * A template that calls raise_exception() fails with ATTND_ERR_INVALID and its message.
 *
 * Everything here is thread-safe; nothing prints except chat_tmpl_get's log line.
 */
#ifndef ATTND_CHAT_TEMPLATE_H
#define ATTND_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "attnd/jinja.h"
#include "attnd/toolcall.h"
#include "attnd/status.h"

struct gguf;
struct tokenizer;

/* The built-in templates --chat-template can name. */
enum chat_family { CHAT_CHATML = 0, CHAT_LLAMA3, CHAT_MISTRAL, CHAT_GEMMA, CHAT_PHI3, CHAT_FAMILY_COUNT };

/* One message of a plain chat (attnd chat): role "system", "user", "assistant" or "tool";
 * content[0..len) is any bytes. */
struct chat_msg {
    const char *role;
    const char *content;
    size_t len;
};

/* A rendered prompt: text[0..len) (NUL-terminated), and the spans of it whose bytes came from the
 * request (message contents, tool schemas): in order, not overlapping. */
struct chat_prompt {
    char *text;
    size_t len;
    struct jinja_span *data;
    size_t n_data;
};

/* A parsed chat template (the default one and, optionally, the tool_use one). */
struct chat_tmpl;

/* The family's name ("chatml", "llama3", "mistral", "gemma", "phi3"); "?" out of range. */
const char *chat_family_name(enum chat_family f);
/* Parses a name as chat_family_name() writes it. ATTND_ERR_INVALID for an unknown name. */
attnd_status chat_family_parse(const char *name, enum chat_family *out);

/* Parses a template from source text (tool_src may be NULL: no tool_use variant). what: how
 * logs and chat_tmpl_describe name it (copied). Returns ATTND_OK and *out (free with
 * chat_tmpl_destroy), or jinja_parse's errors with the reason in err. */
attnd_status chat_tmpl_create(const char *src, size_t len, const char *tool_src, size_t tool_len, const char *what,
                              struct chat_tmpl **out, char *err, size_t errlen);
/* Frees a template made by chat_tmpl_create; NULL is a no-op. */
void chat_tmpl_destroy(struct chat_tmpl *t);
/* How the template was chosen, e.g. "the model's tokenizer.chat_template". */
const char *chat_tmpl_describe(const struct chat_tmpl *t);
/* The format the template renders assistants' tool calls in (toolcall.h: what a model taught by
 * it emits), from its tool_use variant first; TOOLCALL_NONE if it shows none. */
enum toolcall_format chat_tmpl_tool_format(const struct chat_tmpl *t);

/* The template chat requests of model g use: file (not NULL: that file), else family (>= 0: the
 * built-in one), else g's tokenizer.chat_template, else ChatML. The result is cached for the
 * process (the same choice returns the same pointer; never freed). A model template that does
 * not parse falls back to ChatML (with a warning when log_choice). With log_choice, logs (info)
 * which template was chosen and why. Returns ATTND_OK and *out, or (only for a file that cannot
 * be read or parsed, or out of memory) an error with the reason in err. */
attnd_status chat_tmpl_get(const struct gguf *g, const char *file, int family, bool log_choice,
                           const struct chat_tmpl **out, char *err, size_t errlen);

/* Renders messages (a cJSON array of message objects) and tools (NULL or a cJSON array) with t;
 * kwargs (NULL or an object): more variables for the template, as transformers'
 * apply_chat_template(**kwargs) passes them (enable_thinking, reasoning_effort, ...; the names
 * above always win); bos / eos: the texts given to the template as bos_token / eos_token (NULL:
 * not defined).
 * Returns ATTND_OK and fills *out (free with chat_prompt_free), or ATTND_ERR_INVALID (not an
 * array, a message without a string role, or the template refused: err holds raise_exception's
 * message or the template's error), ATTND_ERR_RANGE (a render cap: 8 MiB of output, 256 MiB of
 * scratch, 50M steps) or ATTND_ERR_NOMEM, with
 * *out zeroed. */
attnd_status chat_render(const struct chat_tmpl *t, const cJSON *messages, const cJSON *tools, const cJSON *kwargs,
                         bool add_generation_prompt, const char *bos, const char *eos, struct chat_prompt *out, char *err,
                         size_t errlen);
/* Frees what chat_render allocated; zeroes *p. NULL or a zeroed prompt is fine. */
void chat_prompt_free(struct chat_prompt *p);

/* chat_render with bos_token / eos_token the texts of tok's BOS / EOS tokens: the prompt the model
 * reads, as text (POST /apply-template). */
attnd_status chat_render_vocab(const struct tokenizer *tok, const struct chat_tmpl *t, const cJSON *messages,
                               const cJSON *tools, const cJSON *kwargs, bool add_generation_prompt,
                               struct chat_prompt *out, char *err, size_t errlen);
/* Renders (bos_token / eos_token from tok's vocabulary) and tokenizes: every control or
 * user-defined token text the template itself wrote becomes that token; all other text
 * (everything from the request included) is tokenized with special-token parsing off, so a
 * message cannot forge a marker. BOS is put first when the tokenizer adds BOS and the template
 * did not write it. On success *ids is malloc'd (caller frees), *n_ids its length. Errors as
 * chat_render, plus tok_encode's. */
attnd_status chat_encode_json(const struct tokenizer *tok, const struct chat_tmpl *t, const cJSON *messages,
                              const cJSON *tools, const cJSON *kwargs, bool add_generation_prompt, int32_t **ids,
                              size_t *n_ids, char *err, size_t errlen);
/* chat_encode_json for a plain chat msgs[0..n) (no tools). */
attnd_status chat_encode(const struct tokenizer *tok, const struct chat_tmpl *t, const struct chat_msg *msgs, size_t n,
                         bool add_generation_prompt, int32_t **ids, size_t *n_ids, char *err, size_t errlen);

#endif
