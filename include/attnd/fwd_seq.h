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
    int n_draft;           /* 0, or the last n_draft tokens are speculative (drafted, 0..n-1): their K/V
                              is written but not committed, so no block holding one enters the prefix
                              cache; the caller commits what the model accepts and rolls the rest back
                              (kv_seq_commit, kv_seq_truncate) */
    struct iv_set *iv;     /* NULL, or the request's interventions (intervene.h), applied to this
                              sequence's rows only (the CPU backend; the scheduler keeps them off
                              others) */
};

#endif
