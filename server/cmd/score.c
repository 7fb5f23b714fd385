/* score.c - `attnd score -m MODEL.gguf --tokens 1,2,3 [--top-k 8]`: teacher-forced scoring.
 * Prints {"tokens":[...],"positions":[{"top":[[id,logprob],...]},...]} where entry i is the
 * log-softmax distribution of the token that follows tokens[0..i], top-k by probability. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/forward.h"
#include "attnd/model.h"
#include "server/cmd/cli.h"
#include "server/cmd/cmd.h"

/* Writes the top k (id, logprob) of one logits row, in descending order. */
static void print_top(const float *lg, int V, int k)
{
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++)
        if (lg[i] > mx) mx = lg[i];
    for (int i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
    double lse = mx + log(sum);
    int *best = malloc((size_t)k * sizeof *best);
    int nb = 0;
    if (!best) return;
    for (int i = 0; i < V; i++) { /* insertion into a short sorted list */
        if (nb == k && lg[i] <= lg[best[nb - 1]]) continue;
        int j = nb < k ? nb++ : k - 1;
        while (j > 0 && lg[best[j - 1]] < lg[i]) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = i;
    }
    printf("{\"top\":[");
    for (int j = 0; j < nb; j++) printf("%s[%d,%.7g]", j ? "," : "", best[j], (double)lg[best[j]] - lse);
    printf("]}");
    free(best);
}

int cmd_score(int argc, char **argv)
{
    const char *model_path = NULL, *tokens_arg = NULL;
    long top_k = 8, threads = 0;
    int backend = FWD_BACKEND_AUTO, vk_device = 0;
    const struct cli_opt opts[] = {
        {CLI_OPT("--model", "-m", CLI_STR, &model_path, "PATH", "GGUF model (required)")},
        {CLI_OPT("--tokens", NULL, CLI_STR, &tokens_arg, "ID,ID,...", "the token sequence to score (required)")},
        {CLI_OPT("--top-k", NULL, CLI_LONG, &top_k, "K", "log-probabilities printed per position (default 8)"),
         CLI_RANGE(1, 1000)},
        CLI_THREADS_OPT(CLI_LONG, &threads, 256),
        CLI_BACKEND_OPTS(&backend, &vk_device),
        CLI_HELP_OPT,
        {.type = CLI_END},
    };
    const struct cli_cmd cmd = {
        .name = "score", .usage = "attnd score -m MODEL.gguf --tokens ID,ID,... [options]", .opts = opts,
        .footer = "  prints the top-K next-token log-probabilities after every prefix, as JSON\n"};
    int parsed = cli_parse(&cmd, argc, argv);
    if (parsed != CLI_GO) return parsed;
    if (!model_path || !tokens_arg) {
        cli_usage(&cmd, stderr);
        return 2;
    }
    int32_t *toks;
    size_t n;
    if (cli_int_list("--tokens", tokens_arg, &toks, &n)) return 2;
    char err[512];
    struct model *m;
    if (model_load(model_path, &m, err, sizeof err)) {
        fprintf(stderr, "attnd score: %s\n", err);
        free(toks);
        return 1;
    }
    int rc = 1;
    const int V = m->hp.n_vocab;
    float *logits = NULL;
    struct fwd_ctx *c = NULL;
    for (size_t i = 0; i < n; i++)
        if (toks[i] >= V) {
            fprintf(stderr, "attnd score: token id %d is outside the vocabulary (%d entries)\n", toks[i], V);
            goto out;
        }
    struct fwd_opts o = {.n_ctx = (int)n, .n_threads = (int)threads, .backend = (enum fwd_backend)backend,
                         .vk_device = vk_device};
    if (fwd_create(m, &o, &c)) {
        fprintf(stderr, "attnd score: cannot create a forward context for %zu tokens%s%s\n", n,
                fwd_backend_error()[0] ? ": " : "", fwd_backend_error());
        goto out;
    }
    logits = malloc(n * (size_t)V * sizeof(float));
    if (!logits) {
        fprintf(stderr, "attnd score: out of memory\n");
        goto out;
    }
    if (fwd_eval(c, toks, (int)n, true, logits)) {
        fprintf(stderr, "attnd score: evaluation failed\n");
        goto out;
    }
    printf("{\"tokens\":[");
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", toks[i]);
    printf("],\"positions\":[");
    for (size_t i = 0; i < n; i++) {
        if (i) putchar(',');
        print_top(logits + i * (size_t)V, V, (int)(top_k < V ? top_k : V));
    }
    printf("],\"backend\":\"%s\",\"validation_errors\":%u}\n", fwd_backend_name(c), fwd_validation_errors(c));
    rc = 0;
out:
    free(logits);
    fwd_destroy(c);
    model_destroy(m);
    free(toks);
    return rc;
}
