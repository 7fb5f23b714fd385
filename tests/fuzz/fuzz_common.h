/* fuzz_common.h - helpers shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c).
 * A harness aborts (a finding) only when a documented contract is broken; bad input that is
 * refused with a status is the expected outcome. */
#ifndef ATTND_FUZZ_COMMON_H
#define ATTND_FUZZ_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "attnd/log.h"

/* A broken contract: print it and abort, so libFuzzer keeps the input. */
#define FZ_REQUIRE(cond, what)                                                                  \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "%s:%d: contract broken: %s (%s)\n", __FILE__, __LINE__, what, #cond); \
            abort();                                                                            \
        }                                                                                       \
    } while (0)

/* The shared test data folder ($SHARED, default ../shared). */
static inline const char *fz_shared(void)
{
    const char *s = getenv("SHARED");
    return s && *s ? s : "../shared";
}

/* Quiet logs: a harness runs millions of inputs. */
static inline void fz_quiet(void)
{
    if (!getenv("ATTND_LOG")) log_set_level(LOG_OFF);
}

#endif
