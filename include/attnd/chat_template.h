/* chat_template.h - renders a chat (a list of role/content messages) into an instruct model's
 * prompt, for the template families attnd knows, and tokenizes it so that only the template's
 * own markers can become special tokens.
 *
 * attnd does not run Jinja: it recognises the family from the GGUF's `tokenizer.chat_template`
 * text (chat_family_detect) and renders that family's published format in C:
 *   chatml   <|im_start|>ROLE\nCONTENT<|im_end|>\n ...      (Qwen2/2.5/3, SmolLM2, ...)
 *            generation prompt: <|im_start|>assistant\n
 *   llama3   BOS <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT(trimmed)<|eot_id|> ...
 *            generation prompt: <|start_header_id|>assistant<|end_header_id|>\n\n
 *   mistral  BOS [INST] USER [/INST]ASSISTANT</s>[INST] USER [/INST]   (Mistral-7B-Instruct v0.1;
 *            a system message, which that template refuses, is put before the first user
 *            message's text, separated by "\n\n"); no generation prompt exists
 *   gemma    BOS <start_of_turn>ROLE\nCONTENT(trimmed)<end_of_turn>\n ...  (assistant is "model";
 *            a system message, which the template refuses, is put before the first user
 *            message's text, separated by "\n\n"); generation prompt: <start_of_turn>model\n
 *   phi3     <|ROLE|>\nCONTENT<|end|>\n ...   generation prompt: <|assistant|>\n, else EOS
 * ChatML-specific extras of some templates (Qwen2.5's default system message, tool calls) are
 * not rendered.
 *
 * Everything here is pure and thread-safe; nothing prints except chat_family_for_model's log line.
 */
#ifndef ATTND_CHAT_TEMPLATE_H
#define ATTND_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

struct gguf;
struct tokenizer;

enum chat_family { CHAT_CHATML = 0, CHAT_LLAMA3, CHAT_MISTRAL, CHAT_GEMMA, CHAT_PHI3, CHAT_FAMILY_COUNT };

/* One message. role is "system", "user" or "assistant"; content[0..len) is any bytes. */
struct chat_msg {
    const char *role;
    const char *content;
    size_t len;
};

/* A rendered prompt: text[0..len) (NUL-terminated), and the spans of it that are the template's
 * markers (candidates for special tokens), in order, not overlapping. */
struct chat_span {
    size_t off, len;
};
struct chat_prompt {
    char *text;
    size_t len;
    struct chat_span *spans;
    size_t n_spans;
};

/* The family's name ("chatml", "llama3", "mistral", "gemma", "phi3"); "?" out of range. */
const char *chat_family_name(enum chat_family f);
/* Parses a name as chat_family_name() writes it. ATTND_ERR_INVALID for an unknown name. */
attnd_status chat_family_parse(const char *name, enum chat_family *out);
/* Recognises a Jinja chat template text by the markers it writes. Returns true and sets *out,
 * or false (and *out = CHAT_CHATML) when no known family's markers are in it. */
bool chat_family_detect(const char *tmpl, size_t len, enum chat_family *out);
/* The family for a model file: from its tokenizer.chat_template, else ChatML. With log_choice,
 * logs (info) which one was picked and why. */
enum chat_family chat_family_for_model(const struct gguf *g, bool log_choice);

/* Renders msgs[0..n) in family f. bos / eos: the texts the template writes for its BOS / EOS
 * tokens (NULL: write nothing there). add_generation_prompt: end with the opening of an
 * assistant turn. Returns ATTND_OK and fills *out (free with chat_prompt_free), or
 * ATTND_ERR_INVALID (a role other than system/user/assistant, no messages; reason in err) or
 * ATTND_ERR_NOMEM, with *out zeroed. */
attnd_status chat_render(enum chat_family f, const struct chat_msg *msgs, size_t n, bool add_generation_prompt,
                         const char *bos, const char *eos, struct chat_prompt *out, char *err, size_t errlen);
/* Frees what chat_render allocated; zeroes *p. NULL or a zeroed prompt is fine. */
void chat_prompt_free(struct chat_prompt *p);

/* Renders and tokenizes: BOS first if the vocabulary has one and the family's template writes
 * it or the tokenizer adds it; every marker span whose text is one token of the vocabulary
 * becomes that token; all other text (message content included) is tokenized with special-token
 * parsing off, so a message cannot forge a marker. A marker the vocabulary lacks is plain text.
 * On success *ids is malloc'd (caller frees), *n its length. Errors as chat_render, plus
 * tok_encode's. */
attnd_status chat_encode(const struct tokenizer *tok, enum chat_family f, const struct chat_msg *msgs, size_t n,
                         bool add_generation_prompt, int32_t **ids, size_t *n_ids, char *err, size_t errlen);

#endif
