/* ivrun.h - runs many prompt-only requests of the scheduler at once (POST /v1/embeddings,
 * POST /v1/patching): each a prompt pass (max_tokens 0) whose interventions and captures
 * (intervene.h) do the work, all submitted together so the batched engine runs them in the same
 * steps, and waited for together, under the caller's owner (job_owner: the tenant or the client
 * address, the scheduler's unit of turns). A full queue, or the owner's full share of it, takes
 * the rest as earlier ones end; a failure or a client that leaves cancels the others. Not a
 * public header. */
#ifndef ATTND_API_IVRUN_H
#define ATTND_API_IVRUN_H

#include <stddef.h>
#include <stdint.h>

#include "server/api/api.h"

struct iv_set;

/* One prompt pass: its tokens and its set (captures, patches), both kept by the caller until
 * ivrun_all returns. */
struct ivrun_job {
    const int32_t *prompt;
    size_t n_prompt;
    const struct iv_set *iv;
};

/* Submits jobs[0..n) and waits for every one's last event. Takes the engine e acquired and
 * releases it (re-acquiring it around later submissions). Returns 0, 499 (the client left: the
 * jobs were cancelled, answer nothing) or an HTTP status with the reason in err. */
int ivrun_all(struct api_conn *c, struct api_engine *e, const struct ivrun_job *jobs, int n, char *err, size_t errlen);

#endif
