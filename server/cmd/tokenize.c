/* tokenize.c - `attnd tokenize -m MODEL.gguf [--no-bos] [--special]`: reads UTF-8 text on stdin
 * and prints {"tokens":[ids],"pieces":["..."]} on one line. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "attnd/gguf.h"
#include "attnd/tokenizer.h"
#include "attnd/utf8.h"
#include "server/cmd/cli.h"
#include "server/cmd/cmd.h"

#define MAX_INPUT ((size_t)64 << 20)

static char *read_stdin(size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            if (cap >= MAX_INPUT) {
                fprintf(stderr, "attnd tokenize: input larger than %zu MiB\n", MAX_INPUT >> 20);
                free(buf);
                return NULL;
            }
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n, stdin);
        if (!r) break;
        n += r;
    }
    if (ferror(stdin)) {
        fprintf(stderr, "attnd tokenize: error reading stdin\n");
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* Fills *model, *no_bos and *special from argv; returns CLI_GO or the exit status. */
static int parse_args(int argc, char **argv, const char **model, int *no_bos, int *special)
{
    const struct cli_opt opts[] = {
        {CLI_OPT("--model", "-m", CLI_STR, model, "PATH", "GGUF model whose tokenizer to use (required)")},
        {CLI_OPT("--no-bos", NULL, CLI_FLAG, no_bos, NULL, "do not add BOS/EOS even where the model adds them")},
        {CLI_OPT("--special", NULL, CLI_FLAG, special, NULL, "recognise control tokens such as <|im_end|> in the text")},
        CLI_HELP_OPT,
        {.type = CLI_END},
    };
    const struct cli_cmd cmd = {
        .name = "tokenize", .usage = "attnd tokenize -m MODEL.gguf [--no-bos] [--special] < text", .opts = opts,
        .footer = "  Tokenizes stdin with the model's tokenizer and prints\n"
                  "  {\"tokens\":[ids],\"pieces\":[\"...\"]}.\n"
                  "  Pieces are each token's bytes (control tokens as their text); bytes that are not\n"
                  "  valid UTF-8 on their own (a character split across tokens) are shown as U+FFFD.\n"};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO) return rc;
    if (!*model) {
        cli_usage(&cmd, stderr);
        return 2;
    }
    return CLI_GO;
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL;
    int no_bos = 0, special = 0;
    int parsed = parse_args(argc, argv, &model, &no_bos, &special);
    if (parsed != CLI_GO) return parsed;

    int rc = 1;
    char err[512];
    struct gguf *g = NULL;
    struct tokenizer *tok = NULL;
    char *text = NULL, *piece = NULL, *json = NULL;
    int32_t *ids = NULL;
    cJSON *root = NULL;
    size_t len = 0, n = 0;

    if (gguf_open(model, &g, err, sizeof err) != ATTND_OK) {
        fprintf(stderr, "attnd tokenize: %s: %s\n", model, err);
        goto out;
    }
    if (tok_create(g, &tok, err, sizeof err) != ATTND_OK) {
        fprintf(stderr, "attnd tokenize: %s: tokenizer: %s\n", model, err);
        goto out;
    }
    if (!(text = read_stdin(&len))) goto out;
    attnd_status st = tok_encode(tok, text, len, !no_bos, special, &ids, &n);
    if (st != ATTND_OK) {
        fprintf(stderr, "attnd tokenize: %s\n", attnd_status_str(st));
        goto out;
    }

    root = cJSON_CreateObject();
    cJSON *jt = cJSON_AddArrayToObject(root, "tokens"), *jp = cJSON_AddArrayToObject(root, "pieces");
    if (!root || !jt || !jp) goto oom;
    size_t cap = tok_max_piece(tok) + 1;
    if (!(piece = malloc(cap))) goto oom;
    for (size_t i = 0; i < n; i++) {
        size_t l = tok_decode_token(tok, ids[i], piece, cap, true);
        char *safe = utf8_sanitize_cstr(piece, l);
        cJSON *num = cJSON_CreateNumber(ids[i]), *str = safe ? cJSON_CreateString(safe) : NULL;
        free(safe);
        if (!num || !str) {
            cJSON_Delete(num);
            cJSON_Delete(str);
            goto oom;
        }
        cJSON_AddItemToArray(jt, num);
        cJSON_AddItemToArray(jp, str);
    }
    if (!(json = cJSON_PrintUnformatted(root))) goto oom;
    if (puts(json) == EOF || fflush(stdout) == EOF) {
        fprintf(stderr, "attnd tokenize: error writing stdout\n");
        goto out;
    }
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "attnd tokenize: out of memory\n");
out:
    free(json);
    cJSON_Delete(root);
    free(piece);
    free(ids);
    free(text);
    tok_destroy(tok);
    gguf_close(g);
    return rc;
}
