/* grammar_check.c - `attnd grammar`: compile a GBNF grammar or a JSON schema and check texts against
 * it (issue 34). `--print` writes the GBNF a schema compiles to; `--check TEXT` prints 1 or 0;
 * `--check-file F` prints 1 or 0 for each line of F (the JSON Schema suite test drives this). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/file.h"
#include "attnd/gbnf.h"
#include "attnd/gram_match.h"
#include "attnd/grammar.h"
#include "attnd/json_schema.h"
#include "server/cmd/cli.h"
#include "server/cmd/cmd.h"

struct gargs {
    const char *gbnf, *schema, *check, *check_file;
    int json_object, print;
};

static int parse_args(int argc, char **argv, struct gargs *a)
{
    const struct cli_opt opts[] = {
        {CLI_OPT("--gbnf", "-g", CLI_STR, &a->gbnf, "FILE", "a GBNF grammar (start rule `root`)")},
        {CLI_OPT("--schema", "-s", CLI_STR, &a->schema, "FILE", "a JSON schema")},
        {CLI_OPT("--json-object", NULL, CLI_FLAG, &a->json_object, NULL, "the grammar of any JSON object")},
        {CLI_OPT("--print", NULL, CLI_FLAG, &a->print, NULL, "print the GBNF the schema compiles to")},
        {CLI_OPT("--check", NULL, CLI_STR, &a->check, "TEXT", "print 1 if TEXT is a sentence of the grammar, else 0")},
        {CLI_OPT("--check-file", NULL, CLI_STR, &a->check_file, "FILE", "the same for each line of FILE")},
        CLI_HELP_OPT,
        {.type = CLI_END},
    };
    const struct cli_cmd cmd = {
        .name = "grammar",
        .usage = "attnd grammar (--gbnf FILE | --schema FILE | --json-object) [--print] [--check TEXT] [--check-file FILE]",
        .opts = opts,
        .footer = "  Compiles the grammar (a refused schema or a bad grammar: the reason on stderr, exit 1)\n"
                  "  and checks texts against it: 1 = the whole text is a sentence, 0 = it is not.\n"};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_GO) return rc;
    if (!!a->gbnf + !!a->schema + !!a->json_object != 1) {
        cli_usage(&cmd, stderr);
        return 2;
    }
    return CLI_GO;
}

static int check_text(const struct gram *g, const char *s, size_t n)
{
    struct gmatch *m = NULL;
    if (gmatch_create(g, &m) != ATTND_OK) return -1;
    int ok = gmatch_accept_bytes(m, s, n) && gmatch_accepts_end(m);
    gmatch_destroy(m);
    return ok;
}

static int check_file(const struct gram *g, const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "attnd grammar: cannot open %s\n", path);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    while ((n = getline(&line, &cap, f)) >= 0) {
        if (n > 0 && line[n - 1] == '\n') n--;
        int r = check_text(g, line, (size_t)n);
        if (r < 0) rc = 1;
        printf("%d\n", r > 0);
    }
    free(line);
    fclose(f);
    return rc;
}


/* Builds the grammar the options name; prints the reason and returns NULL on failure. */
static struct gram *load(const struct gargs *a)
{
    char err[512] = "", *text = NULL, *gbnf = NULL;
    size_t len = 0;
    struct gram *g = NULL;
    attnd_status st;
    const char *path = a->gbnf ? a->gbnf : a->schema;
    if (path && !(text = file_read_all(path, (size_t)64 << 20, &len))) {
        fprintf(stderr, "attnd grammar: cannot read %s\n", path);
        return NULL;
    }
    if (a->json_object) st = jsg_json_object(&g, err, sizeof err);
    else if (a->gbnf) st = gbnf_parse(text, len, &g, err, sizeof err);
    else if ((st = jsg_to_gbnf(text, len, &gbnf, err, sizeof err)) == ATTND_OK) {
        if (a->print) fputs(gbnf, stdout);
        st = jsg_compile(text, len, &g, err, sizeof err);
    }
    if (st != ATTND_OK) fprintf(stderr, "attnd grammar: %s (%s)\n", err, attnd_status_str(st));
    free(text);
    free(gbnf);
    return g;
}

int cmd_grammar(int argc, char **argv)
{
    struct gargs a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_GO) return rc;
    struct gram *g = load(&a);
    if (!g) return 1;
    rc = 0;
    if (a.check) {
        int r = check_text(g, a.check, strlen(a.check));
        printf("%d\n", r > 0);
        rc = r < 0;
    }
    if (a.check_file) rc |= check_file(g, a.check_file);
    if (fflush(stdout) == EOF) rc = 1;
    gram_destroy(g);
    return rc;
}
