/* scratch.h - each thread's working buffer for the packed GEMM kernels (activations and weight
 * panels packed per call): on the heap, made on the thread's first call that needs one, grown
 * when a call needs more, and freed when the thread exits, so threads that never multiply many
 * tokens (the HTTP server's) carry none of it and no thread carries it as TLS or on its stack.
 * A buffer is the caller's until its next scratch_get on the same thread: kernels do not nest. */
#ifndef ATTND_SCRATCH_H
#define ATTND_SCRATCH_H

#include <stddef.h>

/* This thread's buffer of at least `bytes` (64-byte aligned, contents undefined), or NULL when it
 * cannot be had (the caller then leaves the product to a kernel that needs none). */
void *scratch_get(size_t bytes);

#endif
