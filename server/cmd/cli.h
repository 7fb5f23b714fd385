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

#endif
