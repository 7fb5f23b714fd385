/* chat.c - `attnd chat`: an interactive terminal chat with an instruct model.
 *   attnd chat -m MODEL.gguf [--chat-template NAME] [--system TEXT] [-n N] [--temp T] [--seed S]
 *              [--threads N] [--ctx N] [--backend ...]
 * Reads one user message per line from stdin, renders the whole conversation with the model's
 * chat template (chat_template.h) and streams the reply to stdout as it is generated. The
 * conversation's earlier turns are found in the scheduler's prefix cache, so only the new turn
 * is read. "/reset" starts over, "/quit" (or end of input) leaves.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/chat_template.h"
#include "attnd/forward.h"
#include "attnd/log.h"
#include "attnd/model.h"
#include "attnd/sampler.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "server/cmd/cli.h"
#include "server/cmd/cmd.h"

#define MAX_TURNS 512

struct opts {
    const char *model, *system, *template_file;
    int family;           /* enum chat_family, or -1: from the model */
    long max_tokens, threads, ctx, seed;
    float temp;
    int backend, vk_device;
};

/* One reply being generated: the scheduler's callback appends, the main thread waits. */
struct reply {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *text;
    size_t len, cap;
    bool done, failed;
    char finish[16];
};

/* Returns 0, 1 (--help shown) or 2 (usage error, message on stderr). */
static int parse_opts(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.family = -1, .max_tokens = 512, .seed = -1, .temp = 0.7f};
    const struct cli_opt opts[] = {
        {CLI_OPT("--model", "-m", CLI_STR, &o->model, "PATH", "GGUF instruct model (required)")},
        {CLI_OPT("--chat-template", NULL, CLI_CUSTOM, &o->family, "NAME",
                 "chatml|llama3|mistral|gemma|phi3 (default: from the model file)"),
         .parse = cli_parse_chat_template},
        {CLI_OPT("--chat-template-file", NULL, CLI_STR, &o->template_file, "PATH", "a Jinja chat template file (over the model's own)")},
        {CLI_OPT("--system", NULL, CLI_STR, &o->system, "TEXT", "a system message to start the conversation with")},
        {CLI_OPT("-n", NULL, CLI_LONG, &o->max_tokens, "N", "longest reply, tokens (default 512)"), CLI_RANGE(1, 1 << 20)},
        {CLI_OPT("--temp", NULL, CLI_FLOAT, &o->temp, "T", "temperature, 0 = greedy (default 0.7)"), CLI_RANGE(0, 100)},
        {CLI_OPT("--seed", NULL, CLI_LONG, &o->seed, "S", "sampling seed (turn t uses S + t)"), CLI_RANGE(0, 1L << 53)},
        CLI_THREADS_OPT(CLI_LONG, &o->threads, 1024),
        {CLI_OPT("--ctx", NULL, CLI_LONG, &o->ctx, "N", "context, tokens (default 0 = min(model's, 4096))"),
         CLI_RANGE(0, 1 << 22)},
        CLI_BACKEND_OPTS(&o->backend, &o->vk_device),
        CLI_HELP_OPT,
        {.type = CLI_END},
    };
    const struct cli_cmd cmd = {
        .name = "chat", .usage = "attnd chat -m MODEL.gguf [options]", .opts = opts,
        .footer = "Type a message and Enter; /reset starts over, /quit or end of input leaves.\n"};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO) return rc == 0 ? 1 : 2;
    if (!o->model) {
        fprintf(stderr, "attnd chat: need -m MODEL.gguf\n");
        return 2;
    }
    return 0;
}

static void on_event(void *ud, const struct sched_event *ev)
{
    struct reply *r = ud;
    const char *s = ev->kind == SCHED_EV_TOKEN ? ev->text : ev->kind == SCHED_EV_DONE ? ev->final_text : NULL;
    size_t n = ev->kind == SCHED_EV_TOKEN ? ev->text_len : ev->kind == SCHED_EV_DONE ? ev->final_text_len : 0;
    pthread_mutex_lock(&r->mu);
    if (s && n) {
        fwrite(s, 1, n, stdout);
        fflush(stdout);
        if (r->len + n + 1 > r->cap) {
            size_t nc = (r->len + n + 1) * 2;
            char *t = realloc(r->text, nc);
            if (t) r->text = t, r->cap = nc;
        }
        if (r->len + n + 1 <= r->cap) memcpy(r->text + r->len, s, n), r->len += n, r->text[r->len] = 0;
    }
    if (ev->kind == SCHED_EV_ERROR) {
        r->failed = true;
        fprintf(stderr, "\nattnd chat: generation failed: %s\n", ev->message ? ev->message : attnd_status_str(ev->status));
    }
    if (ev->kind == SCHED_EV_DONE) snprintf(r->finish, sizeof r->finish, "%s", ev->finish_reason ? ev->finish_reason : "");
    if (ev->kind != SCHED_EV_TOKEN) {
        r->done = true;
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Generates the assistant's reply to msgs[0..n); returns it (malloc'd) or NULL. */
static char *reply_to(struct sched *s, const struct tokenizer *tok, const struct chat_tmpl *f, const struct chat_msg *msgs,
                      size_t n, const struct opts *o, int turn)
{
    char err[256];
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (chat_encode(tok, f, msgs, n, true, &ids, &n_ids, err, sizeof err)) {
        fprintf(stderr, "attnd chat: %s\n", err);
        return NULL;
    }
    size_t room = (size_t)sched_n_ctx(s) > n_ids ? (size_t)sched_n_ctx(s) - n_ids : 0;
    struct sched_request req = {.prompt = ids, .n_prompt = n_ids, .sampling = sampler_params_default()};
    req.max_tokens = (size_t)o->max_tokens < room ? (int)o->max_tokens : (int)room;
    req.sampling.temperature = (float)o->temp;
    if (o->seed >= 0) req.sampling.seed = (uint64_t)o->seed + (uint64_t)turn;
    struct reply r = {.text = NULL};
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    uint64_t id;
    attnd_status st = room ? sched_submit(s, &req, on_event, &r, &id, err, sizeof err) : ATTND_ERR_RANGE;
    free(ids);
    if (st) {
        fprintf(stderr, "attnd chat: %s (/reset starts over)\n", room ? err : "the conversation fills the context");
    } else {
        pthread_mutex_lock(&r.mu);
        while (!r.done) pthread_cond_wait(&r.cv, &r.mu);
        pthread_mutex_unlock(&r.mu);
        fputc('\n', stdout);
        if (!strcmp(r.finish, "length")) fprintf(stderr, "(reply cut at %ld tokens)\n", o->max_tokens);
    }
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
    if (st || r.failed) {
        free(r.text);
        return NULL;
    }
    return r.text ? r.text : calloc(1, 1);
}

/* The read-reply loop over stdin. */
static void converse(struct sched *s, const struct tokenizer *tok, const struct chat_tmpl *f, const struct opts *o)
{
    struct chat_msg msgs[MAX_TURNS];
    char *owned[MAX_TURNS];
    size_t n = 0, n_owned = 0;
    if (o->system) msgs[n++] = (struct chat_msg){"system", o->system, strlen(o->system)};
    size_t first = n;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    for (int turn = 0;; turn++) {
        fputs("> ", stderr);
        if ((len = getline(&line, &cap, stdin)) < 0) break;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (!strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset") || n + 2 > MAX_TURNS) {
            while (n_owned) free(owned[--n_owned]);
            n = first;
            fprintf(stderr, "(new conversation)\n");
            if (!strcmp(line, "/reset")) continue;
        }
        if (!len) continue;
        char *user = strdup(line), *answer = NULL;
        if (!user) break;
        owned[n_owned++] = user;
        msgs[n++] = (struct chat_msg){"user", user, (size_t)len};
        if (!(answer = reply_to(s, tok, f, msgs, n, o, turn))) {
            n--, free(owned[--n_owned]); /* the turn did not happen */
            continue;
        }
        owned[n_owned++] = answer;
        msgs[n++] = (struct chat_msg){"assistant", answer, strlen(answer)};
    }
    free(line);
    while (n_owned) free(owned[--n_owned]);
}

int cmd_chat(int argc, char **argv)
{
    struct opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : 2;
    char err[512];
    struct model *m = NULL;
    struct tokenizer *tok = NULL;
    struct sched *s = NULL;
    rc = 1;
    if (model_load(o.model, &m, err, sizeof err)) {
        fprintf(stderr, "attnd chat: cannot load %s: %s\n", o.model, err);
        goto out;
    }
    if (tok_create(m->gguf, &tok, err, sizeof err)) {
        fprintf(stderr, "attnd chat: tokenizer: %s\n", err);
        goto out;
    }
    struct sched_opts so = {.n_threads = (int)o.threads, .n_ctx = (int)o.ctx, .backend = o.backend, .vk_device = o.vk_device,
                            .kv_type = m->hp.n_layer > 0 && m->layers[0].wq.type == TENSOR_F32 ? TENSOR_F32 : TENSOR_F16};
    attnd_status st = sched_create(m, tok, &so, &s);
    if (st) {
        fprintf(stderr, "attnd chat: cannot start the scheduler: %s\n", attnd_status_str(st));
        goto out;
    }
    const struct chat_tmpl *f = NULL;
    if (chat_tmpl_get(m->gguf, o.template_file, o.family, true, &f, err, sizeof err)) {
        fprintf(stderr, "attnd chat: %s\n", err);
        goto out;
    }
    fprintf(stderr, "attnd chat: %s, template %s, context %d tokens\n", m->name ? m->name : o.model,
            chat_tmpl_describe(f), sched_n_ctx(s));
    converse(s, tok, f, &o);
    rc = 0;
out:
    sched_destroy(s, 0);
    tok_destroy(tok);
    model_destroy(m);
    return rc;
}
