/* quantize.c - `attnd quantize IN.gguf OUT.gguf --type PRESET [--threads N]`: writes a quantized
 * copy of a model in the reference quantizer's per-tensor mixes (attnd/quantize.h). */
#include <stdio.h>
#include <unistd.h>

#include "attnd/quantize.h"
#include "kernels/cpu/cpu_kernels.h"
#include "server/cmd/cli.h"
#include "server/cmd/cmd.h"

/* CLI_CUSTOM parser of --type (int *dest = enum quantize_preset). */
static int parse_preset(const char *flag, const char *v, void *dest)
{
    enum quantize_preset p;
    if (quantize_preset_parse(v, &p)) {
        fprintf(stderr, "attnd: %s expects q8_0, q4_0, q4_k_m, q5_k_m or q6_k, got '%s'\n", flag, v);
        return -1;
    }
    *(int *)dest = (int)p;
    return 0;
}

/* One line per tensor on stderr. */
static void progress(void *ud, int64_t i, int64_t n, const char *name, enum tensor_type from, enum tensor_type to)
{
    (void)ud;
    fprintf(stderr, "[%4lld/%4lld] %-40s %-6s -> %s\n", (long long)i + 1, (long long)n, name, tensor_type_name(from),
            tensor_type_name(to));
}

int cmd_quantize(int argc, char **argv)
{
    const char *paths[2] = {NULL, NULL};
    int preset = -1;
    long threads = 0;
    const struct cli_opt opts[] = {
        {CLI_OPT("--type", NULL, CLI_CUSTOM, &preset, "PRESET",
                 "q8_0, q4_0, q4_k_m, q5_k_m or q6_k: the reference quantizer's\nper-tensor mix to write (required)"),
         .parse = parse_preset},
        {CLI_OPT("--threads", NULL, CLI_LONG, &threads, "N", "worker threads (default: one per CPU)"),
         CLI_RANGE(1, 256)},
        CLI_HELP_OPT,
        {.type = CLI_END},
    };
    const struct cli_cmd cmd = {.name = "quantize",
                                .usage = "attnd quantize IN.gguf OUT.gguf --type PRESET [--threads N]",
                                .opts = opts,
                                .positional = paths,
                                .n_positional = 2};
    int parsed = cli_parse(&cmd, argc, argv);
    if (parsed != CLI_GO) return parsed;
    if (!paths[0] || !paths[1] || preset < 0) {
        cli_usage(&cmd, stderr);
        return 2;
    }
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 && n <= 256 ? n : 1;
    }
    cpu_kernels_init();
    char err[512];
    enum quantize_preset p = (enum quantize_preset)preset;
    attnd_status st = quantize_file(paths[0], paths[1], p, (int)threads, progress, NULL, err, sizeof err);
    if (st) {
        fprintf(stderr, "attnd quantize: %s\n", err);
        return 1;
    }
    fprintf(stderr, "attnd quantize: wrote %s (%s)\n", paths[1], quantize_preset_name(p));
    return 0;
}
