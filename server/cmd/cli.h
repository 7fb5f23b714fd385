/* cli.h - the subcommands' one option parser, table-driven, and its strict number parsing.
 *
 * Each subcommand declares a table of struct cli_opt (names, type, destination, help) ended by
 * CLI_END, and a struct cli_cmd around it; cli_parse() walks argv against the table and --help
 * prints the text generated from it. Messages go to stderr ("attnd: FLAG expects ..."), --help to
 * stdout. Not thread-safe (it writes through the table's destinations). */
#ifndef ATTND_CLI_H
#define ATTND_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum cli_type {
    CLI_END = 0, /* ends a table */
    CLI_FLAG,    /* no value; sets int *dest to 1 */
    CLI_STR,     /* const char **dest = the value (argv's own string) */
    CLI_LONG,    /* long *dest, an integer in [lo, hi] */
    CLI_INT,     /* int *dest, an integer in [lo, hi] */
    CLI_U64,     /* uint64_t *dest, an integer in [lo, hi] (lo >= 0) */
    CLI_SIZE,    /* size_t *dest, an integer in [lo, hi] (lo >= 0) */
    CLI_FLOAT,   /* float *dest, a finite number in [lo, hi] */
    CLI_CHOICE,  /* int *dest = the value of the entry of choices whose name is the value */
    CLI_CUSTOM,  /* parse(flag, value, dest): 0, or -1 after its own message on stderr */
};

/* One name a CLI_CHOICE accepts and the value it stores; a list ends with {NULL, 0}. */
struct cli_choice {
    const char *name;
    int value;
};

struct cli_opt {
    const char *name;       /* "--model" */
    const char *short_name; /* "-m", or NULL */
    enum cli_type type;
    void *dest;             /* what type says */
    const char *arg;        /* the value's name in --help ("N", "PATH"); NULL for CLI_FLAG */
    const char *help;       /* text for --help; '\n' starts an indented continuation line */
    double lo, hi;          /* the range of CLI_LONG, CLI_INT, CLI_U64, CLI_SIZE, CLI_FLOAT */
    const struct cli_choice *choices;                         /* CLI_CHOICE */
    int (*parse)(const char *flag, const char *v, void *dest); /* CLI_CUSTOM */
    const char *alias;      /* another long spelling ("--temperature"), not shown in --help */
};

struct cli_cmd {
    const char *name;             /* "serve": messages say "attnd serve: ..." */
    const char *usage;            /* the first --help line(s), after "usage: " */
    const struct cli_opt *opts;   /* ended by an entry of type CLI_END */
    const char *footer;           /* printed after the options, or NULL */
    const char **positional;      /* where arguments not starting with '-' go, in order; NULL: none taken */
    int n_positional;             /* how many slots positional has (0: one) */
};

/* cli_parse's "carry on" answer; any other value is the exit status the subcommand returns. */
#define CLI_GO (-1)

/* Parses argv[1..argc) (argv[0] is the subcommand) into cmd's destinations. Returns CLI_GO when
 * the subcommand should run; 0 after printing --help / -h to stdout; 2 after a message (and, for
 * an unknown option, the usage) on stderr. Destinations of options not given keep their values. */
int cli_parse(const struct cli_cmd *cmd, int argc, char **argv);
/* Prints cmd's --help text (generated from its table) to f. */
void cli_usage(const struct cli_cmd *cmd, FILE *f);

/* Parses a whole decimal integer in [lo, hi]; returns 0 or -1 (with a message on stderr naming flag). */
int cli_int(const char *flag, const char *s, long lo, long hi, long *out);
/* Parses a whole finite float in [lo, hi]; returns 0 or -1 (message on stderr). */
int cli_float(const char *flag, const char *s, double lo, double hi, double *out);
/* Parses "1,2,3" into a malloc'd array; returns 0 or -1 (message on stderr). */
int cli_int_list(const char *flag, const char *s, int32_t **out, size_t *n);

/* CLI_CUSTOM parsers of --backend auto|vulkan|cpu (int *dest = enum fwd_backend) and
 * --vk-device N (int *dest = N + 1: the fwd_opts convention). 0, or -1 with a message. */
int cli_parse_backend(const char *flag, const char *v, void *dest);
int cli_parse_vk_device(const char *flag, const char *v, void *dest);

/* CLI_CUSTOM parser of --chat-template chatml|llama3|mistral|gemma|phi3 (int *dest = enum
 * chat_family). 0, or -1 with a message. */
int cli_parse_chat_template(const char *flag, const char *v, void *dest);

/* A table entry's common fields, and the range of a number: {CLI_OPT(...), CLI_RANGE(lo, hi)}. */
#define CLI_OPT(long_name, short_name_, type_, dest_, arg_, help_)                                        \
    .name = (long_name), .short_name = (short_name_), .type = (type_), .dest = (dest_), .arg = (arg_),     \
    .help = (help_)
#define CLI_RANGE(lo_, hi_) .lo = (lo_), .hi = (hi_)

/* The two table entries of --backend and --vk-device, shared by serve, run and score. */
/* --threads N for the commands that run the model (type CLI_INT or CLI_LONG, 0..max). */
#define CLI_THREADS_OPT(type, dest, max)                                                                   \
    {CLI_OPT("--threads", NULL, (type), (dest), "N", "compute threads (default 0 = all online CPUs)"),     \
     CLI_RANGE(0, (max))}

#define CLI_BACKEND_OPTS(backend, vk_device)                                                               \
    {.name = "--backend", .type = CLI_CUSTOM, .dest = (backend), .parse = cli_parse_backend,               \
     .arg = "auto|vulkan|cpu",                                                                             \
     .help = "where the model runs (default auto: a Vulkan GPU if one is usable,\n"                        \
             "else the CPU kernels; vulkan: any Vulkan device, lavapipe included)"},                       \
    {.name = "--vk-device", .type = CLI_CUSTOM, .dest = (vk_device), .parse = cli_parse_vk_device,         \
     .arg = "N", .help = "Vulkan device index (enumeration order; default: the best one)"}

/* The --help / -h entry every table ends with (before CLI_END). */
#define CLI_HELP_OPT {.name = "--help", .short_name = "-h", .type = CLI_FLAG, .help = "this text"}

#endif
