/* forward_cpu.h - private to server/engine: the forward pass on the SIMD CPU kernels, the "cpu"
 * implementation of forward_backend.h (kernels/cpu: GEMM, FA2 over the paged cache, thread pool).
 * Its state also serves fwd_project() for every context, whichever backend runs the steps. */
#ifndef ATTND_FORWARD_CPU_H
#define ATTND_FORWARD_CPU_H

#include "server/engine/forward_backend.h"

extern const struct fwd_backend_ops fwd_cpu_backend;

/* Threads of the state's pool (the caller included). */
int fwd_cpu_n_threads(const void *state);
/* Final RMSNorm and output layer over n rows of residual stream x (n_embd floats each) into n
 * rows of n_vocab logits, in chunks of the state's n_batch rows. Not thread-safe per state. */
void fwd_cpu_project(void *state, const float *x, int n, float *logits);

#endif
