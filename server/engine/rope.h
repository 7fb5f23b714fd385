/* rope.h - private to server/engine: the rotation angles of rotary position embeddings (RoPE),
 * shared by the forward-pass backends (forward_cpu.c, forward_vk.c). A backend makes its model's
 * inverse frequencies once (rope_inv_freqs) and, per step, one row of cos/sin pairs per token
 * (rope_row) that every layer's rotation of q and k reads. Pure functions: thread-safe. */
#ifndef ATTND_ROPE_H
#define ATTND_ROPE_H

#include <stddef.h>

#include "attnd/model.h"
#include "attnd/status.h"

/* The n_rot / 2 inverse frequencies of m's RoPE into a new array *out (n_rot / 2 + 1 doubles, so
 * never a zero-size allocation; the caller frees it): inv_freq[i] = rope_base^(-2i / n_rot),
 * divided by rope_freqs[i] where the model has them. Returns ATTND_ERR_NOMEM (*out NULL) or
 * ATTND_OK. */
attnd_status rope_inv_freqs(const struct model *m, double **out);

/* One token's rotations: cs[2j], cs[2j + 1] = cos, sin of pos * inv_freq[j] for j < half (computed
 * in double, as the reference's float64 evaluation). cs holds 2 * half floats. */
void rope_row(const double *inv_freq, size_t half, int pos, float *cs);

#endif
