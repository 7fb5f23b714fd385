/* chat_template.c - chat prompt rendering per template family. See chat_template.h.
 *
 * A family is a table of strings: what opens and closes each role's turn, and what opens the
 * assistant's turn for the generation prompt. The few rules a table cannot say (Jinja's
 * `| trim`, Gemma's "model" role, Mistral's user-only [INST] wrapping, folding a system
 * message into the first user turn) are flags.
 */
#include "attnd/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/gguf.h"
#include "attnd/log.h"
#include "attnd/tokenizer.h"

/* A template string: literal text where `{` / `}` enclose a marker (a special-token candidate),
 * e.g. "{<|im_start|>}user\n". `{B}` and `{E}` stand for the BOS and EOS texts. */
struct family {
    const char *name;
    const char *begin;          /* written once, before the first message */
    const char *open[3];        /* system, user, assistant: before the content */
    const char *close[3];       /* after the content */
    const char *gen_prompt;     /* add_generation_prompt */
    const char *no_gen_end;     /* written at the end without add_generation_prompt */
    bool trim;                  /* content | trim */
    bool fold_system;           /* the system message goes before the first user message's text */
    bool writes_bos;            /* the published template writes bos_token */
};

static const struct family g_fam[CHAT_FAMILY_COUNT] = {
    [CHAT_CHATML] = {"chatml", "",
                     {"{<|im_start|>}system\n", "{<|im_start|>}user\n", "{<|im_start|>}assistant\n"},
                     {"{<|im_end|>}\n", "{<|im_end|>}\n", "{<|im_end|>}\n"},
                     "{<|im_start|>}assistant\n", "", false, false, false},
    [CHAT_LLAMA3] = {"llama3", "{B}",
                     {"{<|start_header_id|>}system{<|end_header_id|>}\n\n",
                      "{<|start_header_id|>}user{<|end_header_id|>}\n\n",
                      "{<|start_header_id|>}assistant{<|end_header_id|>}\n\n"},
                     {"{<|eot_id|>}", "{<|eot_id|>}", "{<|eot_id|>}"},
                     "{<|start_header_id|>}assistant{<|end_header_id|>}\n\n", "", true, false, true},
    [CHAT_MISTRAL] = {"mistral", "{B}", {"", "{[INST]} ", ""}, {"", " {[/INST]}", "{E}"}, "", "", false, true, true},
    [CHAT_GEMMA] = {"gemma", "{B}",
                    {"", "{<start_of_turn>}user\n", "{<start_of_turn>}model\n"},
                    {"", "{<end_of_turn>}\n", "{<end_of_turn>}\n"},
                    "{<start_of_turn>}model\n", "", true, true, true},
    [CHAT_PHI3] = {"phi3", "",
                   {"{<|system|>}\n", "{<|user|>}\n", "{<|assistant|>}\n"},
                   {"{<|end|>}\n", "{<|end|>}\n", "{<|end|>}\n"},
                   "{<|assistant|>}\n", "{E}", false, false, false},
};

const char *chat_family_name(enum chat_family f)
{
    return (unsigned)f < CHAT_FAMILY_COUNT ? g_fam[f].name : "?";
}

attnd_status chat_family_parse(const char *name, enum chat_family *out)
{
    for (int f = 0; f < CHAT_FAMILY_COUNT; f++)
        if (name && !strcmp(name, g_fam[f].name)) {
            *out = (enum chat_family)f;
            return ATTND_OK;
        }
    return ATTND_ERR_INVALID;
}

static bool has(const char *t, size_t len, const char *needle)
{
    return memmem(t, len, needle, strlen(needle)) != NULL;
}

bool chat_family_detect(const char *tmpl, size_t len, enum chat_family *out)
{
    *out = CHAT_CHATML;
    if (!tmpl) return false;
    /* most specific markers first: a Llama 3 template never writes <|im_start|>, but some
     * ChatML templates mention [INST] in comments, so ChatML is tested before Mistral */
    if (has(tmpl, len, "<|start_header_id|>") && has(tmpl, len, "<|eot_id|>")) *out = CHAT_LLAMA3;
    else if (has(tmpl, len, "<start_of_turn>")) *out = CHAT_GEMMA;
    else if (has(tmpl, len, "<|user|>") && has(tmpl, len, "<|end|>")) *out = CHAT_PHI3;
    else if (has(tmpl, len, "<|im_start|>")) *out = CHAT_CHATML;
    else if (has(tmpl, len, "[INST]")) *out = CHAT_MISTRAL;
    else return false;
    return true;
}

enum chat_family chat_family_for_model(const struct gguf *g, bool log_choice)
{
    struct gguf_str s = {0};
    enum chat_family f = CHAT_CHATML;
    if (!g || gguf_get_str(g, "tokenizer.chat_template", &s) != ATTND_OK || !s.ptr) {
        if (log_choice) log_info("chat template: the model file has none; using ChatML");
    } else if (!chat_family_detect(s.ptr, (size_t)s.len, &f)) {
        if (log_choice) log_info("chat template: the model's template is not one attnd knows; using ChatML");
    } else if (log_choice) {
        log_info("chat template: %s (recognised from tokenizer.chat_template)", chat_family_name(f));
    }
    return f;
}

/* ---- rendering --------------------------------------------------------------------------------- */

struct out {
    struct chat_prompt *p;
    size_t cap, cap_spans;
    bool oom;
};

static void put(struct out *o, const char *s, size_t n)
{
    struct chat_prompt *p = o->p;
    if (o->oom) return;
    if (p->len + n + 1 > o->cap) {
        size_t nc = o->cap ? o->cap : 256;
        while (nc < p->len + n + 1) nc *= 2;
        char *t = realloc(p->text, nc);
        if (!t) {
            o->oom = true;
            return;
        }
        p->text = t;
        o->cap = nc;
    }
    if (n) memcpy(p->text + p->len, s, n);
    p->len += n;
    p->text[p->len] = 0;
}

static void put_marker(struct out *o, const char *s, size_t n)
{
    struct chat_prompt *p = o->p;
    if (o->oom || !n) return;
    if (p->n_spans == o->cap_spans) {
        size_t nc = o->cap_spans ? o->cap_spans * 2 : 16;
        struct chat_span *t = realloc(p->spans, nc * sizeof *t);
        if (!t) {
            o->oom = true;
            return;
        }
        p->spans = t;
        o->cap_spans = nc;
    }
    p->spans[p->n_spans++] = (struct chat_span){p->len, n};
    put(o, s, n);
}

/* Writes template string t (see struct family) with bos/eos substituted. */
static void put_tmpl(struct out *o, const char *t, const char *bos, const char *eos)
{
    while (*t) {
        if (*t != '{') {
            size_t n = strcspn(t, "{");
            put(o, t, n);
            t += n;
            continue;
        }
        const char *end = strchr(t, '}');
        if (!end) return; /* the tables are well formed */
        size_t n = (size_t)(end - t - 1);
        if (n == 1 && t[1] == 'B') {
            if (bos) put_marker(o, bos, strlen(bos));
        } else if (n == 1 && t[1] == 'E') {
            if (eos) put_marker(o, eos, strlen(eos));
        } else {
            put_marker(o, t + 1, n);
        }
        t = end + 1;
    }
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static void put_content(struct out *o, const struct family *fam, const char *s, size_t n)
{
    if (fam->trim) {
        while (n && is_ws(*s)) s++, n--;
        while (n && is_ws(s[n - 1])) n--;
    }
    put(o, s, n);
}

static int role_index(const char *role)
{
    if (!role) return -1;
    if (!strcmp(role, "system")) return 0;
    if (!strcmp(role, "user")) return 1;
    if (!strcmp(role, "assistant")) return 2;
    return -1;
}

attnd_status chat_render(enum chat_family f, const struct chat_msg *msgs, size_t n, bool add_generation_prompt,
                         const char *bos, const char *eos, struct chat_prompt *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if ((unsigned)f >= CHAT_FAMILY_COUNT || !n) {
        snprintf(err, errlen, "%s", (unsigned)f >= CHAT_FAMILY_COUNT ? "unknown chat template" : "there are no messages");
        return ATTND_ERR_INVALID;
    }
    for (size_t i = 0; i < n; i++)
        if (role_index(msgs[i].role) < 0) {
            snprintf(err, errlen, "message %zu: role must be system, user or assistant", i);
            return ATTND_ERR_INVALID;
        }
    const struct family *fam = &g_fam[f];
    struct out o = {.p = out};
    put(&o, "", 0); /* text is never NULL */
    put_tmpl(&o, fam->begin, bos, eos);
    const struct chat_msg *sys = NULL; /* folded into the first user message */
    for (size_t i = 0; i < n; i++) {
        int r = role_index(msgs[i].role);
        if (r == 0 && fam->fold_system) {
            if (!sys) sys = &msgs[i];
            continue;
        }
        put_tmpl(&o, fam->open[r], bos, eos);
        if (r == 1 && sys) {
            put_content(&o, fam, sys->content, sys->len);
            put(&o, "\n\n", 2);
            sys = NULL;
        }
        put_content(&o, fam, msgs[i].content, msgs[i].len);
        put_tmpl(&o, fam->close[r], bos, eos);
    }
    if (sys) { /* a system message and no user message after it: it becomes the user's turn */
        put_tmpl(&o, fam->open[1], bos, eos);
        put_content(&o, fam, sys->content, sys->len);
        put_tmpl(&o, fam->close[1], bos, eos);
    }
    put_tmpl(&o, add_generation_prompt ? fam->gen_prompt : fam->no_gen_end, bos, eos);
    if (o.oom) {
        chat_prompt_free(out);
        return ATTND_ERR_NOMEM;
    }
    return ATTND_OK;
}

void chat_prompt_free(struct chat_prompt *p)
{
    if (!p) return;
    free(p->text);
    free(p->spans);
    memset(p, 0, sizeof *p);
}

/* ---- tokenizing -------------------------------------------------------------------------------- */

struct idv {
    int32_t *v;
    size_t n, cap;
};

static bool idv_put(struct idv *d, const int32_t *ids, size_t n)
{
    if (d->n + n > d->cap) {
        size_t nc = d->cap ? d->cap : 64;
        while (nc < d->n + n) nc *= 2;
        int32_t *t = realloc(d->v, nc * sizeof *t);
        if (!t) return false;
        d->v = t;
        d->cap = nc;
    }
    if (n) memcpy(d->v + d->n, ids, n * sizeof *ids);
    d->n += n;
    return true;
}

/* Appends the tokens of plain text s[0..n) (special-token parsing off). */
static attnd_status put_text_ids(const struct tokenizer *tok, struct idv *d, const char *s, size_t n)
{
    if (!n) return ATTND_OK;
    int32_t *ids = NULL;
    size_t k = 0;
    attnd_status st = tok_encode(tok, s, n, false, false, &ids, &k);
    if (st == ATTND_OK && !idv_put(d, ids, k)) st = ATTND_ERR_NOMEM;
    free(ids);
    return st;
}

static const char *piece_text(const struct tokenizer *tok, int id, char *buf, size_t cap)
{
    size_t len = 0;
    const char *p = id >= 0 ? tok_piece(tok, id, &len) : NULL;
    if (!p || len >= cap) return NULL;
    memcpy(buf, p, len);
    buf[len] = 0;
    return buf;
}

attnd_status chat_encode(const struct tokenizer *tok, enum chat_family f, const struct chat_msg *msgs, size_t n,
                         bool add_generation_prompt, int32_t **ids, size_t *n_ids, char *err, size_t errlen)
{
    *ids = NULL;
    *n_ids = 0;
    char eos_buf[64];
    const char *eos = piece_text(tok, tok_eos(tok), eos_buf, sizeof eos_buf);
    struct chat_prompt p;
    attnd_status st = chat_render(f, msgs, n, add_generation_prompt, NULL, eos, &p, err, errlen);
    if (st) return st;
    struct idv d = {0};
    int32_t bos = tok_bos(tok);
    if (bos >= 0 && ((unsigned)f < CHAT_FAMILY_COUNT && (g_fam[f].writes_bos || tok_add_bos(tok))) && !idv_put(&d, &bos, 1))
        st = ATTND_ERR_NOMEM;
    size_t text_from = 0; /* start of the plain text not yet tokenized */
    for (size_t i = 0; i < p.n_spans && !st; i++) {
        const struct chat_span *s = &p.spans[i];
        int32_t id = tok_find(tok, p.text + s->off, s->len);
        if (id < 0) continue; /* not a token here: it stays part of the surrounding text */
        st = put_text_ids(tok, &d, p.text + text_from, s->off - text_from);
        if (!st && !idv_put(&d, &id, 1)) st = ATTND_ERR_NOMEM;
        text_from = s->off + s->len;
    }
    if (!st) st = put_text_ids(tok, &d, p.text + text_from, p.len - text_from);
    chat_prompt_free(&p);
    if (st) {
        free(d.v);
        snprintf(err, errlen, "could not tokenize the chat: %s", attnd_status_str(st));
        return st;
    }
    if (!d.v && !(d.v = malloc(sizeof *d.v))) {
        snprintf(err, errlen, "out of memory");
        return ATTND_ERR_NOMEM;
    }
    *ids = d.v;
    *n_ids = d.n;
    return ATTND_OK;
}
