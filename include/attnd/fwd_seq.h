/* fwd_seq.h - one sequence's share of a forward step: the type the public forward API
 * (forward.h), the scheduler and the backends behind it (server/engine/forward_backend.h) all
 * pass, in a header of its own so the backends need not include forward.h (which names them). */
#ifndef ATTND_FWD_SEQ_H
#define ATTND_FWD_SEQ_H

#include <stdbool.h>
#include <stdint.h>

struct kv_seq;
struct iv_set;

/* One sequence's share of a step. */
struct fwd_seq {
    struct kv_seq *kv;     /* its paged-cache sequence; the n tokens below must be its last n
                              appended (kv_seq_append) and not yet computed */
    const int32_t *tokens; /* n new tokens */
    int n;
    float *logits;         /* NULL, or n_vocab floats for the last token (n * n_vocab if all_logits) */
    bool all_logits;
    struct iv_set *iv;     /* NULL, or the request's interventions (intervene.h), applied to this
                              sequence's rows only (the CPU backend; the scheduler keeps them off
                              others) */
};

#endif
