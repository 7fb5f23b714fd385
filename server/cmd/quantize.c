/* quantize.c - `attnd quantize IN.gguf OUT.gguf --type PRESET [--threads N]`: writes a quantized
 * copy of a model in the reference quantizer's per-tensor mixes (attnd/quantize.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/quantize.h"
#include "kernels/cpu/cpu_kernels.h"
#include "server/cmd/cmd.h"

#define USAGE "usage: attnd quantize IN.gguf OUT.gguf --type q8_0|q4_0|q4_k_m|q5_k_m|q6_k [--threads N]\n"

/* One line per tensor on stderr. */
static void progress(void *ud, int64_t i, int64_t n, const char *name, enum tensor_type from, enum tensor_type to)
{
    (void)ud;
    fprintf(stderr, "[%4lld/%4lld] %-40s %-6s -> %s\n", (long long)i + 1, (long long)n, name, tensor_type_name(from),
            tensor_type_name(to));
}

int cmd_quantize(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *type = NULL;
    long threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf(USAGE);
            return 0;
        } else if (!strcmp(argv[i], "--type") && i + 1 < argc) {
            type = argv[++i];
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            char *end;
            threads = strtol(argv[++i], &end, 10);
            if (*end || threads < 1 || threads > 256) {
                fprintf(stderr, "attnd quantize: --threads must be 1..256\n");
                return 2;
            }
        } else if (argv[i][0] != '-' && !in) {
            in = argv[i];
        } else if (argv[i][0] != '-' && !out) {
            out = argv[i];
        } else {
            fprintf(stderr, "attnd quantize: unexpected argument '%s'\n" USAGE, argv[i]);
            return 2;
        }
    }
    enum quantize_preset p;
    if (!in || !out || !type) {
        fprintf(stderr, USAGE);
        return 2;
    }
    if (quantize_preset_parse(type, &p)) {
        fprintf(stderr, "attnd quantize: unknown --type '%s'\n" USAGE, type);
        return 2;
    }
    if (threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 && n <= 256 ? n : 1;
    }
    cpu_kernels_init();
    char err[512];
    attnd_status st = quantize_file(in, out, p, (int)threads, progress, NULL, err, sizeof err);
    if (st) {
        fprintf(stderr, "attnd quantize: %s\n", err);
        return 1;
    }
    fprintf(stderr, "attnd quantize: wrote %s (%s)\n", out, quantize_preset_name(p));
    return 0;
}
