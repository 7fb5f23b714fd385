/* cli.h - helpers shared by the subcommands: strict number parsing. */
#ifndef ATTND_CLI_H
#define ATTND_CLI_H

#include <stddef.h>
#include <stdint.h>

/* Parses a whole decimal integer in [lo, hi]; returns 0 or -1 (with a message on stderr naming flag). */
int cli_int(const char *flag, const char *s, long lo, long hi, long *out);
/* Parses a whole finite float in [lo, hi]. */
int cli_float(const char *flag, const char *s, double lo, double hi, double *out);
/* Parses "1,2,3" into a malloc'd array; returns 0 or -1 (message on stderr). */
int cli_int_list(const char *flag, const char *s, int32_t **out, size_t *n);

/* --backend auto|vulkan|cpu and --vk-device N, shared by serve, run and score. If flag is one of
 * them, parses v into *backend (enum fwd_backend) or *vk_device (N + 1: fwd_opts convention) and
 * returns 1; returns 0 for any other flag, -1 (message on stderr) for a bad value. */
int cli_backend_flag(const char *flag, const char *v, int *backend, int *vk_device);
#define CLI_BACKEND_HELP                                                                                  \
    "  --backend auto|vulkan|cpu   where the model runs (default auto: a Vulkan GPU if one is usable,\n" \
    "                              else the CPU kernels; vulkan: any Vulkan device, lavapipe included)\n" \
    "  --vk-device N               Vulkan device index (enumeration order; default: the best one)\n"

#endif
