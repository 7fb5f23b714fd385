/* cli.c - see cli.h. */
#include "server/cmd/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/chat_template.h"
#include "attnd/check.h"
#include "attnd/forward.h"

int cli_int(const char *flag, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < lo || v > hi) {
        fprintf(stderr, "attnd: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

int cli_float(const char *flag, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "attnd: %s expects a number in [%g, %g], got '%s'\n", flag, lo, hi, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

int cli_int_list(const char *flag, const char *s, int32_t **out, size_t *n)
{
    size_t cap = 16, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (p && *p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "attnd: %s expects comma-separated token ids, got '%s'\n", flag, s);
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    if (k == 0) {
        fprintf(stderr, "attnd: %s needs at least one token id\n", flag);
        free(v);
        return -1;
    }
    *out = v;
    *n = k;
    return 0;
}

int cli_parse_backend(const char *flag, const char *v, void *dest)
{
    enum fwd_backend b;
    if (fwd_backend_parse(v, &b)) {
        fprintf(stderr, "attnd: %s expects auto, vulkan or cpu, got '%s'\n", flag, v);
        return -1;
    }
    *(int *)dest = (int)b;
    return 0;
}

int cli_parse_vk_device(const char *flag, const char *v, void *dest)
{
    long n;
    if (cli_int(flag, v, 0, 63, &n)) return -1;
    *(int *)dest = (int)n + 1;
    return 0;
}

int cli_parse_chat_template(const char *flag, const char *v, void *dest)
{
    enum chat_family f;
    if (chat_family_parse(v, &f)) {
        fprintf(stderr, "attnd: %s expects chatml, llama3, mistral, gemma or phi3, got '%s'\n", flag, v);
        return -1;
    }
    *(int *)dest = (int)f;
    return 0;
}

/* ---- the table-driven parser ----------------------------------------------------------------- */

static const struct cli_opt *find_opt(const struct cli_opt *opts, const char *a)
{
    for (const struct cli_opt *o = opts; o->type != CLI_END; o++)
        if (!strcmp(a, o->name) || (o->short_name && !strcmp(a, o->short_name)) || (o->alias && !strcmp(a, o->alias)))
            return o;
    return NULL;
}

static int parse_choice(const struct cli_opt *o, const char *flag, const char *v)
{
    for (const struct cli_choice *c = o->choices; c->name; c++)
        if (!strcmp(v, c->name)) {
            *(int *)o->dest = c->value;
            return 0;
        }
    fprintf(stderr, "attnd: %s expects ", flag);
    for (const struct cli_choice *c = o->choices; c->name; c++)
        fprintf(stderr, "%s%s", c->name, !c[1].name ? "" : !c[2].name ? " or " : ", ");
    fprintf(stderr, ", got '%s'\n", v);
    return -1;
}

/* Stores value v of option o (spelt flag on the command line); 0 or -1 after a message. */
static int store(const struct cli_opt *o, const char *flag, const char *v)
{
    long l;
    double d;
    switch (o->type) {
    case CLI_STR: *(const char **)o->dest = v; return 0;
    case CLI_CHOICE: return parse_choice(o, flag, v);
    case CLI_CUSTOM: return o->parse(flag, v, o->dest);
    case CLI_FLOAT:
        if (cli_float(flag, v, o->lo, o->hi, &d)) return -1;
        *(float *)o->dest = (float)d;
        return 0;
    default: break;
    }
    if (cli_int(flag, v, (long)o->lo, (long)o->hi, &l)) return -1;
    switch (o->type) {
    case CLI_LONG: *(long *)o->dest = l; break;
    case CLI_INT: *(int *)o->dest = (int)l; break;
    case CLI_U64: *(uint64_t *)o->dest = (uint64_t)l; break;
    case CLI_SIZE: *(size_t *)o->dest = (size_t)l; break;
    default: ATTND_CHECK(0 && "cli: option type without a parser"); return -1;
    }
    return 0;
}

int cli_parse(const struct cli_cmd *cmd, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const struct cli_opt *o = find_opt(cmd->opts, a);
        if (!o && cmd->positional && !*cmd->positional && a[0] != '-') {
            *cmd->positional = a;
            continue;
        }
        if (!o) {
            fprintf(stderr, "attnd %s: unknown option '%s'\n", cmd->name, a);
            cli_usage(cmd, stderr);
            return 2;
        }
        if (o->type == CLI_FLAG && !o->dest) { /* --help */
            cli_usage(cmd, stdout);
            return 0;
        }
        if (o->type == CLI_FLAG) {
            *(int *)o->dest = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "attnd %s: %s needs a value\n", cmd->name, a);
            cli_usage(cmd, stderr);
            return 2;
        }
        if (store(o, a, argv[++i])) return 2;
    }
    return CLI_GO;
}

/* Prints text with each '\n' followed by an indent of col spaces. */
static void print_indented(FILE *f, const char *text, int col)
{
    for (const char *p = text; *p; p++) {
        fputc(*p, f);
        if (*p == '\n') fprintf(f, "%*s", col, "");
    }
}

void cli_usage(const struct cli_cmd *cmd, FILE *f)
{
    enum { COL = 30 };
    fprintf(f, "usage: %s\n", cmd->usage);
    for (const struct cli_opt *o = cmd->opts; o->type != CLI_END; o++) {
        int n = fprintf(f, "  %s%s%s%s%s", o->short_name ? o->short_name : "", o->short_name ? ", " : "", o->name,
                        o->arg ? " " : "", o->arg ? o->arg : "");
        fprintf(f, "%*s", n < COL - 1 ? COL - n : 2, "");
        print_indented(f, o->help ? o->help : "", COL);
        fputc('\n', f);
    }
    if (cmd->footer) fputs(cmd->footer, f);
}
