/* weights.h - reads a file range into memory with io_uring (several large reads in flight,
 * short reads resubmitted), falling back to pread() where io_uring is unavailable (e.g. a
 * container's seccomp profile refuses it). */
#ifndef ATTND_WEIGHTS_H
#define ATTND_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "attnd/status.h"

struct weights_stats {
    const char *method; /* "io_uring" or "pread" (static string) */
    double seconds;     /* wall time of the read */
    uint64_t bytes;
};

/* Reads size bytes at file offset off of path into dst. $ATTND_NO_IO_URING=1 forces the
 * pread path. On failure returns ATTND_ERR_IO with a reason in err; dst may be partly
 * written. Thread-safe (uses its own ring). */
attnd_status weights_read(const char *path, uint64_t off, uint64_t size, void *dst, struct weights_stats *stats,
                          char *err, size_t errlen);

/* Test hook: faults injected into weights_read()'s reads, on the io_uring and the pread path
 * alike. WEIGHTS_FAULT_EIO: the read covering byte `at` of the range fails with EIO;
 * WEIGHTS_FAULT_SHORT: every read returns at most `at` (>= 1) bytes, so the loader must ask
 * for the rest; WEIGHTS_FAULT_NONE: off (the default). Process-wide; for tests only. */
enum weights_fault { WEIGHTS_FAULT_NONE = 0, WEIGHTS_FAULT_EIO = 1, WEIGHTS_FAULT_SHORT = 2 };
void weights_set_fault(enum weights_fault mode, uint64_t at);

/* Allocates size bytes, 64-byte aligned, backed by transparent huge pages where possible.
 * Free with weights_free(ptr, size). Returns NULL on failure. */
void *weights_alloc(size_t size);
void weights_free(void *p, size_t size);

#endif
