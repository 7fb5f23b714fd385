/* heads.c - `attnd heads -m MODEL [--json] [--threads N] [--backend ...]`: the head census
 * (census.h) of a model, as a table (one row per layer and head, strongest heads listed at the
 * end) or as the JSON that GET /heads answers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/census.h"
#include "attnd/forward.h"
#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "server/cmd/cli.h"
#include "server/cmd/cmd.h"

static void print_table(const struct census *c)
{
    printf("layer head kv  prev-token induction first-token   self  entropy  role\n");
    for (int i = 0; i < c->n_layer * c->n_head; i++) {
        const struct census_head *h = &c->heads[i];
        printf("%5d %4d %2d  %10.3f %9.3f %11.3f %6.3f %8.3f  %s\n", h->layer, h->head, h->kv_head, h->prev,
               h->induction, h->sink, h->self, h->entropy, h->role);
    }
    const struct census_head *p = &c->heads[c->best_prev], *q = &c->heads[c->best_induction];
    printf("strongest previous-token head: L%d H%d %.3f\nstrongest induction head: L%d H%d %.3f\n", p->layer,
           p->head, p->prev, q->layer, q->head, q->induction);
}

int cmd_heads(int argc, char **argv)
{
    const char *model_path = NULL;
    int json = 0, backend = FWD_BACKEND_AUTO, vk_device = 0;
    long threads = 0;
    const struct cli_opt opts[] = {
        {CLI_OPT("--model", "-m", CLI_STR, &model_path, "PATH", "GGUF model (required)")},
        {CLI_OPT("--json", NULL, CLI_FLAG, &json, NULL, "print the JSON of GET /heads instead of a table")},
        CLI_THREADS_OPT(CLI_LONG, &threads, 256),
        CLI_BACKEND_OPTS(&backend, &vk_device),
        CLI_HELP_OPT,
        {.type = CLI_END},
    };
    const struct cli_cmd cmd = {
        .name = "heads", .usage = "attnd heads -m MODEL.gguf [options]", .opts = opts,
        .footer = "  prints every layer's and head's previous-token, induction, first-token and self scores and\n"
                  "  mean attention entropy, measured on the model's own attention maps (see GET /heads)\n"};
    int parsed = cli_parse(&cmd, argc, argv);
    if (parsed != CLI_GO) return parsed;
    if (!model_path) {
        cli_usage(&cmd, stderr);
        return 2;
    }
    char err[512];
    int rc = 1;
    struct model *m = NULL;
    struct tokenizer *tok = NULL;
    struct sched *s = NULL;
    struct census *c = NULL;
    char *out = NULL;
    size_t len = 0;
    attnd_status st;
    if (model_load(model_path, &m, err, sizeof err)) {
        fprintf(stderr, "attnd heads: %s\n", err);
        goto done;
    }
    if (tok_create(m->gguf, &tok, err, sizeof err)) {
        fprintf(stderr, "attnd heads: %s: tokenizer: %s\n", model_path, err);
        goto done;
    }
    struct sched_opts so = {.n_threads = (int)threads, .backend = backend, .vk_device = vk_device,
                            .kv_type = TENSOR_F32};
    if ((st = sched_create(m, tok, &so, &s))) {
        fprintf(stderr, "attnd heads: cannot start the scheduler: %s\n", attnd_status_str(st));
        goto done;
    }
    if ((st = census_run(s, m, tok, &c)) || (json && (st = census_json(c, m->name, &out, &len)))) {
        fprintf(stderr, "attnd heads: census failed: %s\n", attnd_status_str(st));
        goto done;
    }
    if (json) {
        fwrite(out, 1, len, stdout);
        fputc('\n', stdout);
    } else {
        print_table(c);
    }
    rc = 0;
done:
    free(out);
    census_destroy(c);
    sched_destroy(s, 0);
    tok_destroy(tok);
    model_destroy(m);
    return rc;
}
