/* main.c - attnd's entry point: dispatches to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "server/cmd/cmd.h"

struct subcommand {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
};

static const struct subcommand g_cmds[] = {
    {"info", cmd_info, "print a GGUF file's metadata and tensor table"},
    {"mkmodel", cmd_mkmodel, "write a GGUF model with seeded random weights"},
    {"quantize", cmd_quantize, "write a quantized copy of a GGUF model (q8_0, q4_0, q4_k_m, q5_k_m, q6_k)"},
    {"serve", cmd_serve, "serve completions and attention maps over HTTP"},
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "chat with an instruct model in the terminal (streamed, over its chat template)"},
    {"tokenize", cmd_tokenize, "print the tokens of the text on stdin, as JSON"},
    {"score", cmd_score, "print top-k next-token log-probabilities for a token sequence"},
    {"heads", cmd_heads, "print the head census: previous-token, induction, sink, self scores per head"},
    {"grammar", cmd_grammar, "compile a GBNF grammar or JSON schema and check texts against it"},
    {"template", cmd_template, "render a chat template for a list of cases, as JSON (compare with render_chat.py)"},


};

static void usage(FILE *f)
{
    fprintf(f, "usage: attnd COMMAND [options]   (attnd COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        fprintf(f, "  %-10s %s\n", g_cmds[i].name, g_cmds[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof g_cmds / sizeof g_cmds[0]; i++)
        if (!strcmp(argv[1], g_cmds[i].name)) return g_cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "attnd: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
