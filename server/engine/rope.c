/* rope.c - the RoPE angles the forward-pass backends share (see rope.h). */
#include "server/engine/rope.h"

#include <math.h>
#include <stdlib.h>

attnd_status rope_inv_freqs(const struct model *m, double **out)
{
    const struct model_hparams *hp = &m->hp;
    double *f = malloc((size_t)(hp->n_rot / 2 + 1) * sizeof(double));
    *out = f;
    if (!f) return ATTND_ERR_NOMEM;
    for (int i = 0; i < hp->n_rot / 2; i++) {
        double v = pow((double)hp->rope_base, -2.0 * i / hp->n_rot);
        if (m->rope_freqs) v /= m->rope_freqs[i];
        f[i] = v;
    }
    return ATTND_OK;
}

void rope_row(const double *inv_freq, size_t half, int pos, float *cs)
{
    for (size_t j = 0; j < half; j++) {
        const double th = (double)pos * inv_freq[j];
        cs[2 * j] = (float)cos(th);
        cs[2 * j + 1] = (float)sin(th);
    }
}
