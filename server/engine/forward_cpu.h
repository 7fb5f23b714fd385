/* forward_cpu.h - private to server/engine: the forward pass on the SIMD CPU kernels, the "cpu"
 * implementation of forward_backend.h (kernels/cpu: GEMM, FA2 over the paged cache, thread pool).
 * Its table, fwd_cpu_backend, is declared in forward_backend.h (the one header the chooser,
 * forward.c, reads); forward_vk.c gets it as cfg->host for the logit lens' projection. */
#ifndef ATTND_FORWARD_CPU_H
#define ATTND_FORWARD_CPU_H

#include "server/engine/forward_backend.h"

#endif
