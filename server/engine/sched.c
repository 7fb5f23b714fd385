/* sched.c - continuous batching over the paged KV cache. See sched.h for the contract.
 *
 * One worker thread runs steps. Each step:
 *   1. ends cancelled requests at once (their blocks go back to the cache);
 *   2. admits waiting requests while the pool has room for their prompt (a new request reuses
 *      every leading prompt block already in the prefix cache), in turns between owners: the
 *      owners below their share of the running set first, then the one served longest ago; an
 *      owner over its share gives its newest request back when another waits below its share;
 *      paused requests (sched_pause) stay out of the running set, their KV kept until needed;
 *   3. builds one batch under a token budget: a decode token for every running request that is
 *      generating, then chunks of prompts still being read (chunked prefill);
 *   4. reserves cache slots; when the pool is full it pre-empts the newest request (frees its
 *      blocks; it is recomputed later from its prompt and the tokens generated so far);
 *   5. runs one forward pass for the whole batch, samples each request that produced logits
 *      and delivers its events; finished requests leave at once.
 *
 * Locking: s->mu guards the waiting queue, the owner table, pending cancels and pauses, attention
 * jobs, flags and stats copies. The running and parked lists, the KV cache and the forward
 * context belong to the worker. Callbacks run on the worker
 * without the lock held.
 */
#include "attnd/sched.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attnd/check.h"
#include "attnd/forward.h"
#include "attnd/genstep.h"
#include "attnd/gram_mask.h"
#include "attnd/grammar.h"
#include "attnd/intervene.h"
#include "attnd/kvcache.h"
#include "attnd/kvevents.h"
#include "attnd/log.h"
#include "attnd/model.h"
#include "attnd/spec.h"
#include "attnd/tokenizer.h"
#include "kernels/cpu/cpu_kernels.h"

enum phase { PH_WAITING = 0, PH_PREFILL = 1, PH_DECODE = 2 };

struct req {
    uint64_t id;
    size_t n_prompt;
    size_t n_cached;  /* prompt tokens the prefix cache held at the first admission */
    int max_tokens;
    struct sampler_params sampling;
    char *stops[SCHED_MAX_STOPS];
    int n_stops;
    bool ignore_eos;
    int logprobs;
    struct iv_set *iv; /* its own copy of the interventions, or NULL */
    struct gram *grammar;                /* retained (gram_retain), or NULL */
    const struct gmask_vocab *gvocab;    /* s->gvocab, with grammar */
    uint64_t kv_key;   /* prefix-cache key (kv_seq_create_keyed): 0 plain, the interventions'
                          fingerprint, or unique to the request with head_mean */
    sched_cb cb;
    void *ud;
    atomic_int cancelled;
    uint64_t owner;    /* sched_request.owner */
    bool paused;       /* sched_pause: under s->mu while waiting, the worker's once taken */
    double t_paused;   /* when it was paused, or last paused again (stall clock) */
    double t_submit, t_start, t_prompt;
    struct req *next; /* waiting queue, or the parked list */
    /* worker state */
    int32_t *toks;    /* (n_prompt + max_tokens) prompt, then generated tokens */
    size_t n_toks;
    int n_gen;
    enum phase phase;
    uint64_t admit_no; /* admission order: the largest is the newest (pre-empted first) */
    struct kv_seq *kv;
    struct gen *gen;   /* sampler, detokenizer, stop strings: made at first admission */
    float *logits;     /* (n_vocab) */
    int started;       /* events sent (so a pre-empted request keeps its stream state) */
    bool spec_on;      /* speculative decoding (prompt lookup) for this request */
    struct spec_state spec;
    int32_t draft[SPEC_K_MAX]; /* the step's draft (its length: the batch entry's n_draft), also at
                                  toks[n_toks..] and in the KV until verified */
};

struct attn_job {
    int lens;          /* 0: attention map, 1: logit lens, 2: prefix-cache block list */
    const int32_t *tokens;
    size_t n;
    int layer, head;   /* lens: layer = position, head = top_k */
    float *weights, *values, *output;
    int *ids;          /* lens: (n_layer, top_k) */
    struct sched_kv_block *blocks; /* block list: (n) filled, n_found counted */
    size_t n_found;
    attnd_status st;
    int done;
    struct attn_job *next;
};

/* One owner with requests waiting, running or parked (an entry leaves when it has none). */
struct owner_ent {
    uint64_t key;
    int queued;    /* waiting */
    int admitted;  /* running or parked */
    uint64_t turn; /* s->turn_counter when it was last served */
};

struct pause_op {
    uint64_t id;
    bool on;
};

struct sched {
    const struct model *m;
    const struct tokenizer *tok;
    struct sched_opts o;
    struct kv_cache *kv;
    struct fwd_ctx *fwd;      /* batched steps (no private cache) */
    struct fwd_ctx *attn_fwd; /* attention maps (private cache), made on first use */
    float *probe_q, *probe_att;
    struct req **running;     /* (max_running) */
    int n_running;
    struct fwd_seq *batch;    /* (max_running) */
    struct req **batch_req;
    struct req **order;       /* (max_running) scratch */
    uint64_t admit_counter;
    struct gmask_vocab *gvocab; /* the vocabulary trie for grammars: built at the first one */

    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* worker waits for work */
    pthread_cond_t idle_cv; /* waiters for idleness and attention jobs */
    struct req *head, *tail; /* waiting */
    int n_queued;
    struct attn_job *jobs;
    int draining, stopping;
    int active;               /* requests taken from the queue and not yet ended */
    uint64_t *cancels;        /* ids asked to stop, applied by the worker */
    int n_cancels, cap_cancels;
    uint64_t next_id;
    struct owner_ent *owners; /* (n_owners) */
    int n_owners, cap_owners;
    uint64_t turn_counter;
    struct pause_op *pauses;  /* sched_pause() calls, applied by the worker in order */
    int n_pauses, cap_pauses;
    struct req *parked;       /* worker: paused requests out of the running set (KV kept or not) */
    double last_publish;      /* worker: when stats were last published (ms) */
    struct sched_stats stats; /* copy published by the worker after each step */
};

static double now_ms(void) { return check_now_s() * 1e3; }

#define IDLE_SLICE_MS 50 /* how often an idle worker looks at its paused requests */

/* The worker's timed wait on s->cv (mu held, cv made by check_cond_init). */
static int worker_wait(struct sched *s, int ms)
{
    struct timespec ts;
    check_deadline(&ts, ms);
    return pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

/* ---- owners (s->mu held) --------------------------------------------------------------------- */

static struct owner_ent *owner_find(struct sched *s, uint64_t key)
{
    for (int i = 0; i < s->n_owners; i++)
        if (s->owners[i].key == key) return &s->owners[i];
    return NULL;
}

/* key's entry, made if new: a newcomer goes before the owner served last, after those that have
 * waited longer. NULL when out of memory. */
static struct owner_ent *owner_get(struct sched *s, uint64_t key)
{
    struct owner_ent *o = owner_find(s, key);
    if (o) return o;
    if (s->n_owners == s->cap_owners) {
        int nc = s->cap_owners ? s->cap_owners * 2 : 16;
        struct owner_ent *n = realloc(s->owners, (size_t)nc * sizeof *n);
        if (!n) return NULL;
        s->owners = n;
        s->cap_owners = nc;
    }
    o = &s->owners[s->n_owners++];
    *o = (struct owner_ent){.key = key, .turn = s->turn_counter ? s->turn_counter - 1 : 0};
    return o;
}

/* Moves one of key's requests between its counts (dq waiting, da admitted); the entry leaves
 * when both are 0. The entry exists while any of its requests does. */
static void owner_move(struct sched *s, uint64_t key, int dq, int da)
{
    struct owner_ent *o = owner_find(s, key);
    if (!o) return;
    o->queued += dq;
    o->admitted += da;
    if (o->queued <= 0 && o->admitted <= 0) *o = s->owners[--s->n_owners];
}

/* The running set's share of one owner: max_running over the owners with requests (>= 1). */
static int owner_share(const struct sched *s)
{
    int share = s->o.max_running / (s->n_owners > 0 ? s->n_owners : 1);
    return share > 0 ? share : 1;
}

static void req_free(struct req *r)
{
    if (!r) return;
    kv_seq_destroy(r->kv);
    gen_destroy(r->gen);
    free(r->toks);
    free(r->logits);
    iv_destroy(r->iv);
    gram_destroy(r->grammar);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    free(r);
}

static void send_done(struct req *r, const char *reason, const char *text, size_t len)
{
    double t = now_ms();
    struct sched_event ev = {.kind = SCHED_EV_DONE, .id = r->id, .finish_reason = reason, .final_text = text,
                             .final_text_len = len, .prompt_tokens = (int)r->n_prompt, .completion_tokens = r->n_gen,
                             .cached_tokens = (int)r->n_cached, .drafted_tokens = (int)r->spec.drafted,
                             .accepted_tokens = (int)r->spec.accepted};
    double start = r->t_start > 0 ? r->t_start : t;
    ev.queue_ms = start - r->t_submit;
    ev.prompt_ms = r->t_prompt > 0 ? r->t_prompt - start : 0;
    ev.generation_ms = r->t_prompt > 0 ? t - r->t_prompt : 0;
    r->cb(r->ud, &ev);
}

static void send_error(struct req *r, attnd_status st, const char *msg)
{
    struct sched_event ev = {.kind = SCHED_EV_ERROR, .id = r->id, .status = st, .message = msg,
                             .prompt_tokens = (int)r->n_prompt};
    r->cb(r->ud, &ev);
}

static int idx_of(const struct sched *s, const struct req *r)
{
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i] == r) return i;
    return -1;
}

/* Removes running[idx] from the running set and from the active count (the caller frees or
 * requeues it). */
static struct req *drop_running(struct sched *s, int idx)
{
    struct req *r = s->running[idx];
    s->running[idx] = s->running[--s->n_running];
    pthread_mutex_lock(&s->mu);
    s->active--;
    owner_move(s, r->owner, 0, -1);
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* Ends a running request: flushes held-back text, sends DONE, frees it (blocks return to the
 * cache, full ones stay findable by their prefix hash). */
static void finish_running(struct sched *s, int idx, const char *reason)
{
    struct req *r = s->running[idx];
    const char *tail = "";
    size_t tail_len = 0;
    if (r->gen) gen_finish(r->gen, &tail, &tail_len);
    send_done(r, reason, tail, tail_len);
    drop_running(s, idx);
    req_free(r);
}

/* Puts r (out of the running set) back at the head of the waiting queue without its blocks. */
static void requeue(struct sched *s, struct req *r, bool fair)
{
    kv_seq_destroy(r->kv);
    r->kv = NULL;
    r->phase = PH_WAITING;
    pthread_mutex_lock(&s->mu);
    s->active--;
    owner_move(s, r->owner, 1, -1);
    r->next = s->head;
    s->head = r;
    if (!s->tail) s->tail = r;
    s->n_queued++;
    s->stats.preemptions++;
    if (fair) s->stats.fair_preemptions++;
    pthread_mutex_unlock(&s->mu);
    log_debug("request %llu pre-empted (%s)", (unsigned long long)r->id, fair ? "another owner's turn" : "KV pool full");
}

/* Frees running[idx]'s cache blocks and puts it back at the head of the waiting queue; it is
 * recomputed from its prompt and generated tokens when readmitted. fair: to give another owner
 * its turn (else the pool was full). */
static void preempt(struct sched *s, int idx, bool fair)
{
    struct req *r = s->running[idx];
    s->running[idx] = s->running[--s->n_running];
    requeue(s, r, fair);
}

static int newest_running(const struct sched *s)
{
    int best = -1;
    for (int i = 0; i < s->n_running; i++)
        if (best < 0 || s->running[i]->admit_no > s->running[best]->admit_no) best = i;
    return best;
}

/* Frees a request taken from the queue that never joined the running set. */
static void retire(struct sched *s, struct req *r)
{
    pthread_mutex_lock(&s->mu);
    s->active--;
    owner_move(s, r->owner, 0, -1);
    pthread_mutex_unlock(&s->mu);
    req_free(r);
}

/* The waiting request whose turn it is (mu held): a cancelled one at once; else, of those not
 * paused whose owner is below its running limit, the first of the owner below its share that was
 * served longest ago (then of the owners at or over it). *prev: its predecessor. NULL if none. */
static struct req *next_in_turn(struct sched *s, struct req **prev)
{
    struct req *best = NULL, *p = NULL;
    const int share = owner_share(s);
    uint64_t best_key = UINT64_MAX;
    *prev = NULL;
    for (struct req *q = s->head; q; p = q, q = q->next) {
        if (atomic_load(&q->cancelled)) {
            *prev = p;
            return q;
        }
        const struct owner_ent *o = owner_find(s, q->owner);
        if (q->paused || !o || o->admitted >= s->o.max_running_per_owner) continue;
        uint64_t key = (o->admitted >= share ? 1ull << 63 : 0) | (o->turn & ((1ull << 63) - 1));
        if (key < best_key) best = q, *prev = p, best_key = key;
    }
    return best;
}

/* When r's owner holds less than its share of the full running set: the newest running request
 * of the owner holding the most, if that is more than its share (mu held); -1 if none. */
static int fair_victim(struct sched *s, const struct req *r)
{
    const int share = owner_share(s);
    const struct owner_ent *mine = owner_find(s, r->owner);
    if (!mine || mine->admitted >= share) return -1;
    const struct owner_ent *most = NULL;
    for (int i = 0; i < s->n_running; i++) {
        const struct owner_ent *o = owner_find(s, s->running[i]->owner);
        if (o && o->admitted > share && (!most || o->admitted > most->admitted)) most = o;
    }
    int v = -1;
    for (int i = 0; most && i < s->n_running; i++)
        if (s->running[i]->owner == most->key && (v < 0 || s->running[i]->admit_no > s->running[v]->admit_no)) v = i;
    return v;
}

/* Frees the KV blocks of the longest-parked request that holds any (it is recomputed when
 * resumed). Returns false if none does. */
static bool evict_parked_kv(struct sched *s)
{
    struct req *victim = NULL;
    for (struct req *p = s->parked; p; p = p->next)
        if (p->kv && (!victim || p->t_paused < victim->t_paused)) victim = p;
    if (!victim) return false;
    kv_seq_destroy(victim->kv);
    victim->kv = NULL;
    victim->phase = PH_WAITING;
    return true;
}

/* Removes r (after prev) from the waiting queue (mu held) and counts it admitted. */
static void take_waiting(struct sched *s, struct req *prev, struct req *r)
{
    if (prev) prev->next = r->next;
    else s->head = r->next;
    if (s->tail == r) s->tail = prev;
    r->next = NULL;
    s->n_queued--;
    s->active++;
    owner_move(s, r->owner, -1, 1);
    struct owner_ent *o = owner_find(s, r->owner);
    if (o) o->turn = ++s->turn_counter;
}

/* Whether the next waiting request r may join now (mu held, which *unlocked says this returns
 * without): 1 yes; 0 not yet; -1 after making room (pre-empted a request, freed parked blocks). */
static int may_admit(struct sched *s, struct req *r, bool *unlocked)
{
    *unlocked = false;
    if (atomic_load(&r->cancelled)) return 1;
    if (s->n_running >= s->o.max_running) {
        int v = fair_victim(s, r);
        if (v < 0) return 0;
        pthread_mutex_unlock(&s->mu);
        *unlocked = true;
        preempt(s, v, true);
        return -1;
    }
    if (kv_can_allocate(s->kv, kv_blocks_for_tokens(r->n_toks) + 1)) return 1;
    pthread_mutex_unlock(&s->mu);
    *unlocked = true;
    if (evict_parked_kv(s)) return -1;
    return s->n_running > 0 ? 0 : 1; /* wait for blocks to come back; alone, it takes its chance */
}

/* Takes waiting requests into the running set, in turns, while the pool can hold their prompts. */
static void admit(struct sched *s)
{
    for (;;) {
        pthread_mutex_lock(&s->mu);
        struct req *prev, *r = next_in_turn(s, &prev);
        bool unlocked = false;
        int ok = r ? may_admit(s, r, &unlocked) : 0;
        if (ok > 0 && unlocked) { /* the queue may have changed meanwhile: look again */
            pthread_mutex_lock(&s->mu);
            struct req *r2 = next_in_turn(s, &prev);
            if (r2 != r) {
                pthread_mutex_unlock(&s->mu);
                continue;
            }
            unlocked = false;
        }
        if (ok <= 0) {
            if (!unlocked) pthread_mutex_unlock(&s->mu);
            if (ok < 0) continue;
            return;
        }
        take_waiting(s, prev, r);
        pthread_mutex_unlock(&s->mu);

        if (atomic_load(&r->cancelled)) {
            send_done(r, "cancelled", "", 0);
            retire(s, r);
            continue;
        }
        if (!r->gen) { /* first admission (a pre-empted request keeps its state) */
            r->t_start = now_ms();
            const struct gen_opts go = {.sampling = r->sampling, .stops = (const char *const *)r->stops,
                                        .n_stops = r->n_stops, .ignore_eos = r->ignore_eos,
                                        .max_tokens = r->max_tokens, .grammar = r->grammar,
                                        .grammar_vocab = r->gvocab};
            if (gen_create(s->tok, s->m->hp.n_vocab, &go, &r->gen) ||
                !(r->logits = malloc((r->spec_on ? SPEC_K_MAX + 1 : 1) * (size_t)s->m->hp.n_vocab * sizeof(float)))) {
                send_error(r, ATTND_ERR_NOMEM, "out of memory");
                retire(s, r);
                continue;
            }
            gen_accept_context(r->gen, r->toks, r->n_toks);
        }
        size_t cached = 0;
        attnd_status st = kv_seq_create_keyed(s->kv, r->kv_key, r->toks, r->n_toks, r->n_prompt + (size_t)r->max_tokens,
                                              &r->kv, &cached);
        if (st) {
            send_error(r, st, st == ATTND_ERR_RANGE ? "the request needs more KV cache than the whole pool"
                                                    : "out of memory");
            retire(s, r);
            continue;
        }
        pthread_mutex_lock(&s->mu);
        s->stats.prefix_lookup_tokens += r->n_toks;
        s->stats.prefix_hit_tokens += cached;
        pthread_mutex_unlock(&s->mu);
        if (!r->admit_no) r->n_cached = cached < r->n_prompt ? cached : r->n_prompt; /* first admission */
        r->phase = PH_PREFILL;
        r->admit_no = ++s->admit_counter;
        s->running[s->n_running++] = r;
    }
}

/* Index of the first NaN or infinite value of x[0..n), or -1 if all are finite. */
static int first_nonfinite(const float *x, int n)
{
    const size_t i = cpu_find_nonfinite(x, (size_t)n);
    return i < (size_t)n ? (int)i : -1;
}

/* One generation step for a request from a row of logits (genstep.h), delivered as a TOKEN event
 * (with log-probabilities when asked); ends the request on stop or length. A token equal to expect
 * (a drafted token; -1: none) counts as accepted. Returns 1 if it finished. */
static int sample_and_emit(struct sched *s, int idx, const float *logits, int expect)
{
    struct req *r = s->running[idx];
    const int V = s->m->hp.n_vocab;
    int top_ids[SCHED_MAX_LOGPROBS];
    float top_lp[SCHED_MAX_LOGPROBS];
    if (!r->t_prompt) r->t_prompt = now_ms();
    if (r->n_gen >= r->max_tokens) { /* max_tokens 0: the prompt is read (for /attention), nothing sampled */
        finish_running(s, idx, "length");
        return 1;
    }
    int bad = first_nonfinite(logits, V);
    if (bad >= 0) { /* a broken model: never sample around it */
        char msg[160];
        snprintf(msg, sizeof msg, "the model produced a non-finite logit (%g for token %d at position %zu)",
                 (double)logits[bad], bad, r->n_toks);
        send_error(r, ATTND_ERR_NUMERIC, msg);
        req_free(drop_running(s, idx));
        return 1;
    }
    struct gen_token gt;
    attnd_status gst = gen_step(r->gen, logits, &gt);
    if (gst) {
        send_error(r, gst == ATTND_ERR_INTERNAL ? gst : ATTND_ERR_UNSUPPORTED,
                   gst == ATTND_ERR_INTERNAL ? "the sampler found no token to pick"
                                             : "the grammar allows no token of this vocabulary here");
        req_free(drop_running(s, idx));
        return 1;
    }
    r->toks[r->n_toks++] = gt.id;
    r->n_gen++;
    if (gt.id == expect) {
        r->spec.accepted++;
        pthread_mutex_lock(&s->mu);
        s->stats.spec_accepted++;
        pthread_mutex_unlock(&s->mu);
    }
    struct sched_event ev = {.kind = SCHED_EV_TOKEN, .id = r->id, .token = gt.id, .text = gt.text,
                             .text_len = gt.len};
    if (r->logprobs > 0) { /* a full-vocabulary log-softmax: only when the client asked */
        attnd_status st = sampler_token_logprob(logits, V, gt.id, &ev.logprob);
        if (!st) st = sampler_top_logprobs(logits, V, r->logprobs, top_ids, top_lp);
        if (st) { /* never send the arrays unfilled */
            send_error(r, ATTND_ERR_INTERNAL, "could not compute log-probabilities");
            req_free(drop_running(s, idx));
            return 1;
        }
        ev.n_top = r->logprobs;
        ev.top_ids = top_ids;
        ev.top_logprobs = top_lp;
    }
    r->cb(r->ud, &ev);
    r->started = 1;
    if (gt.end != GEN_MORE) {
        finish_running(s, idx, gen_end_str(gt.end));
        return 1;
    }
    r->phase = PH_DECODE;
    return 0;
}

/* A verification step's logits (row i: after the step's token and the first i drafted ones): the
 * tokens sampled row by row as without speculation while each equals the draft (spec.h: that is
 * rejection sampling for a drafted point mass), then the drafted tokens not accepted leave the KV.
 * Returns 1 if the request finished. */
static int verify_and_emit(struct sched *s, int idx, int nd)
{
    struct req *r = s->running[idx];
    const size_t V = (size_t)s->m->hp.n_vocab, base = r->n_toks;
    int acc = 0;
    r->spec.drafted += (uint64_t)nd; /* before the rows: a request that ends on one reports them */
    pthread_mutex_lock(&s->mu);
    s->stats.spec_drafted += (uint64_t)nd;
    s->stats.spec_steps++;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i <= nd; i++) {
        const int expect = i < nd ? r->draft[i] : -1;
        if (sample_and_emit(s, idx, r->logits + (size_t)i * V, expect)) return 1;
        if (r->toks[r->n_toks - 1] != expect) break;
        acc++;
    }
    spec_update(&r->spec, nd, acc);
    /* the KV holds the step's token and the nd drafts: keep those accepted, commit them */
    kv_seq_truncate(r->kv, base + (size_t)acc);
    kv_seq_commit(r->kv, base + (size_t)acc);
    return 0;
}

/* Applies the ids sched_cancel() collected to the running set and the parked list. */
static void apply_cancels(struct sched *s)
{
    pthread_mutex_lock(&s->mu);
    for (int c = 0; c < s->n_cancels; c++) {
        for (int i = 0; i < s->n_running; i++)
            if (s->running[i]->id == s->cancels[c]) atomic_store(&s->running[i]->cancelled, 1);
        for (struct req *p = s->parked; p; p = p->next)
            if (p->id == s->cancels[c]) atomic_store(&p->cancelled, 1);
    }
    s->n_cancels = 0;
    pthread_mutex_unlock(&s->mu);
}

/* ---- paused requests ------------------------------------------------------------------------- */

/* Takes running[idx] out of the running set onto the parked list, its KV kept; it keeps its
 * owner's slot (admitted) and the active count. */
static void park(struct sched *s, int idx)
{
    struct req *r = s->running[idx];
    s->running[idx] = s->running[--s->n_running];
    r->paused = true;
    r->t_paused = now_ms();
    r->next = s->parked;
    s->parked = r;
}

/* Unlinks r from the parked list. */
static void unpark(struct sched *s, struct req *r)
{
    for (struct req **pp = &s->parked; *pp; pp = &(*pp)->next)
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    r->next = NULL;
    r->paused = false;
}

/* A parked request resumes: back into the running set with its KV when it has both a slot and
 * its blocks, else to the head of the waiting queue (recomputed from its tokens). */
static void resume(struct sched *s, struct req *r)
{
    unpark(s, r);
    if (r->kv && s->n_running < s->o.max_running) s->running[s->n_running++] = r;
    else requeue(s, r, false);
}

/* Ends a parked request (cancelled, or stalled) with DONE. */
static void finish_parked(struct sched *s, struct req *r, const char *reason)
{
    unpark(s, r);
    const char *tail = "";
    size_t tail_len = 0;
    if (r->gen) gen_finish(r->gen, &tail, &tail_len);
    send_done(r, reason, tail, tail_len);
    pthread_mutex_lock(&s->mu);
    s->active--;
    owner_move(s, r->owner, 0, -1);
    pthread_mutex_unlock(&s->mu);
    req_free(r);
}

static struct req *parked_by_id(struct sched *s, uint64_t id)
{
    for (struct req *p = s->parked; p; p = p->next)
        if (p->id == id) return p;
    return NULL;
}

/* One sched_pause() call: the running set, the parked list, or a waiting request (mu held,
 * released and taken again around moves that lock it). */
static void apply_pause(struct sched *s, uint64_t id, bool on)
{
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i]->id == id) {
            if (on) park(s, i);
            return;
        }
    struct req *p = parked_by_id(s, id);
    if (p) {
        if (on) p->t_paused = now_ms(); /* paused again: the stall clock restarts */
        else {
            pthread_mutex_unlock(&s->mu);
            resume(s, p);
            pthread_mutex_lock(&s->mu);
        }
        return;
    }
    for (struct req *q = s->head; q; q = q->next)
        if (q->id == id) {
            if (on) q->t_paused = now_ms();
            q->paused = on;
            return;
        }
}

/* Applies the pending sched_pause() calls in order, then cancels what has been paused longer
 * than the stall timeout (parked requests end here, waiting ones when next taken). */
static void apply_pauses(struct sched *s)
{
    pthread_mutex_lock(&s->mu);
    for (int k = 0; k < s->n_pauses; k++) apply_pause(s, s->pauses[k].id, s->pauses[k].on);
    s->n_pauses = 0;
    const double limit = now_ms() - s->o.stall_timeout_ms;
    int stalled = 0;
    for (struct req *q = s->head; q; q = q->next)
        if (q->paused && q->t_paused < limit && !atomic_exchange(&q->cancelled, 1)) stalled++;
    s->stats.stall_cancels += (uint64_t)stalled;
    pthread_mutex_unlock(&s->mu);
    for (struct req *p = s->parked, *n; p; p = n) {
        n = p->next;
        bool stall = p->t_paused < limit;
        if (!stall && !atomic_load(&p->cancelled)) continue;
        if (stall) {
            log_info("request %llu cancelled: its client took no output for %d ms", (unsigned long long)p->id,
                     s->o.stall_timeout_ms);
            pthread_mutex_lock(&s->mu);
            s->stats.stall_cancels++;
            pthread_mutex_unlock(&s->mu);
        }
        finish_parked(s, p, "cancelled");
    }
}

/* The running requests in admission order (oldest first) into s->order; returns their count. */
static int running_by_admission(struct sched *s)
{
    struct req **order = s->order;
    int n_order = s->n_running;
    memcpy(order, s->running, (size_t)n_order * sizeof *order);
    for (int a = 1; a < n_order; a++) /* insertion sort: the set is small */
        for (int b = a; b > 0 && order[b - 1]->admit_no > order[b]->admit_no; b--) {
            struct req *t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    return n_order;
}

/* Reserves cache slots for r's next n tokens; a full pool pre-empts the newest request not
 * already among the nb in the batch (r itself included). Returns ATTND_ERR_NOMEM when r must
 * wait (or was pre-empted), another error when r has been ended. */
static attnd_status reserve(struct sched *s, struct req *r, size_t done, int n, int nb)
{
    attnd_status st;
    while ((st = kv_seq_append(r->kv, r->toks + done, (size_t)n)) == ATTND_ERR_NOMEM) {
        if (evict_parked_kv(s)) continue; /* paused requests give their blocks first */
        int victim = newest_running(s);
        int in_batch = 0;
        for (int b = 0; b < nb; b++) in_batch |= s->batch_req[b] == s->running[victim];
        if (in_batch) break;
        int self = s->running[victim] == r;
        preempt(s, victim, false);
        if (self) break;
    }
    if (st && st != ATTND_ERR_NOMEM) {
        send_error(r, st, "could not reserve KV cache slots");
        req_free(drop_running(s, idx_of(s, r)));
    }
    return st;
}

/* Whether this step may speculate: few enough requests decode that it is not compute-bound. */
static bool spec_step(const struct sched *s)
{
    int n_dec = 0;
    for (int i = 0; i < s->n_running; i++) n_dec += s->running[i]->phase == PH_DECODE;
    return n_dec <= s->o.spec_max_seqs;
}

/* This step's draft for decoding request r (prompt lookup, spec.h), into r->draft and after its
 * tokens: none when it does not speculate (or not this step), may generate one token at most, or
 * when the pool lacks a block the draft would need (a draft never pre-empts anyone). budget: the
 * step's tokens left (>= 1). Returns its length. */
static int draft_for(struct sched *s, struct req *r, int budget, bool spec)
{
    if (!spec || !r->spec_on) return 0;
    int room = r->max_tokens - r->n_gen - 1; /* the step makes up to nd + 1 tokens */
    int want = spec_want(&r->spec, room < budget - 1 ? room : budget - 1);
    int nd = want > 0 ? spec_lookup(r->toks, r->n_toks, want, r->draft) : 0;
    if (nd > 0 && !kv_can_allocate(s->kv, kv_seq_blocks_needed(r->kv, (size_t)nd + 1))) nd = 0;
    memcpy(r->toks + r->n_toks, r->draft, (size_t)nd * sizeof *r->toks);
    return nd;
}

/* Steps 3./4.: the batch, decode tokens first, then prompt chunks (oldest first), under the
 * token budget, with cache slots reserved. Returns the batch size; *budget gets what is left. */
static int build_batch(struct sched *s, int *budget)
{
    int nb = 0;
    const int n_order = running_by_admission(s);
    const bool spec = spec_step(s);
    for (int pass = 0; pass < 2; pass++) {
        for (int k = 0; k < n_order && *budget > 0; k++) {
            struct req *r = s->order[k];
            if (idx_of(s, r) < 0) continue; /* pre-empted meanwhile */
            int decode = r->phase == PH_DECODE;
            if (decode != (pass == 0)) continue;
            size_t done = kv_seq_len(r->kv);
            size_t todo = r->n_toks - done;
            if (todo == 0) continue;
            int n = decode ? 1 : (int)(todo < (size_t)*budget ? todo : (size_t)*budget);
            if (r->iv && (size_t)n < todo && !iv_means_ready(r->iv)) continue; /* head_mean: one chunk */
            bool last_chunk = done + (size_t)n == r->n_toks;
            const int nd = decode ? draft_for(s, r, *budget, spec) : 0;
            if (reserve(s, r, done, n + nd, nb)) continue;
            s->batch[nb] = (struct fwd_seq){.kv = r->kv, .tokens = r->toks + done, .n = n + nd,
                                            .logits = last_chunk ? r->logits : NULL, .all_logits = nd > 0,
                                            .n_draft = nd, .iv = r->iv};
            s->batch_req[nb++] = r;
            *budget -= n + nd;
        }
    }
    return nb;
}

/* Step 5.: one forward pass for the batch, then a generation step for every request whose
 * prompt is done; a failed pass ends the batch's requests with an error. */
static void run_batch(struct sched *s, int nb, int n_tokens)
{
    attnd_status st = fwd_eval_batch(s->fwd, s->kv, s->batch, nb);
    if (st) {
        for (int b = 0; b < nb; b++) {
            int i = idx_of(s, s->batch_req[b]);
            send_error(s->batch_req[b], st, "evaluation failed");
            req_free(drop_running(s, i));
        }
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->stats.steps++;
    s->stats.last_batch_tokens = (uint64_t)n_tokens;
    s->stats.last_batch_seqs = (uint64_t)nb;
    s->stats.batch_tokens_total += (uint64_t)n_tokens;
    pthread_mutex_unlock(&s->mu);
    for (int b = 0; b < nb; b++) {
        if (!s->batch[b].logits) continue;
        int i = idx_of(s, s->batch_req[b]);
        if (i < 0) continue;
        if (s->batch[b].n_draft) verify_and_emit(s, i, s->batch[b].n_draft);
        else sample_and_emit(s, i, s->batch_req[b]->logits, -1);
    }
}

/* One continuous-batching step (see the top of this file). Returns 1 if it did any work. */
static int step(struct sched *s)
{
    /* 1. cancelled requests leave at once; pauses and resumptions, stalled requests end */
    apply_cancels(s);
    apply_pauses(s);
    for (int i = 0; i < s->n_running;)
        if (atomic_load(&s->running[i]->cancelled)) finish_running(s, i, "cancelled");
        else i++;
    /* 2. admission */
    admit(s);
    if (s->n_running == 0) return 0;
    int budget = s->o.n_batch;
    const int nb = build_batch(s, &budget);
    if (nb == 0) return s->n_running > 0;
    run_batch(s, nb, s->o.n_batch - budget);
    return 1;
}

static void publish_stats(struct sched *s)
{
    struct kv_stats ks;
    kv_get_stats(s->kv, &ks);
    uint64_t used_tokens = 0;
    int paused = 0;
    for (int i = 0; i < s->n_running; i++)
        if (s->running[i]->kv) used_tokens += kv_seq_len(s->running[i]->kv);
    for (const struct req *p = s->parked; p; p = p->next) {
        paused++;
        if (p->kv) used_tokens += kv_seq_len(p->kv);
    }
    pthread_mutex_lock(&s->mu);
    for (const struct req *q = s->head; q; q = q->next) paused += q->paused;
    s->stats.paused = paused;
    s->stats.running = s->n_running;
    s->stats.kv_tokens_used = used_tokens;
    s->stats.kv_blocks_total = ks.n_blocks;
    s->stats.kv_blocks_used = ks.used;
    s->stats.kv_blocks_free = ks.free;
    s->stats.kv_blocks_cached = ks.cached;
    s->stats.kv_waste_pct = ks.waste_pct;
    pthread_mutex_unlock(&s->mu);
}

static attnd_status ensure_attn_fwd(struct sched *s)
{
    const struct model_hparams *hp = &s->m->hp;
    const size_t nq = (size_t)hp->n_head * hp->head_dim;
    if (s->attn_fwd) return ATTND_OK;
    /* the backend the step context resolved to (auto already decided there) */
    const bool vk = strcmp(fwd_backend_name(s->fwd), "vulkan") == 0;
    struct fwd_opts fo = {.n_ctx = s->o.n_ctx, .n_threads = s->o.n_threads, .kv_type = s->o.kv_type,
                          .backend = vk ? FWD_BACKEND_VULKAN : FWD_BACKEND_CPU, .vk_device = s->o.vk_device};
    attnd_status st = fwd_create(s->m, &fo, &s->attn_fwd);
    if (st) return st;
    s->probe_q = malloc((size_t)s->o.n_ctx * nq * sizeof(float));
    s->probe_att = malloc((size_t)s->o.n_ctx * nq * sizeof(float));
    if (!s->probe_q || !s->probe_att) { /* undo all: a later call must not find a context without buffers */
        free(s->probe_q);
        free(s->probe_att);
        s->probe_q = s->probe_att = NULL;
        fwd_destroy(s->attn_fwd);
        s->attn_fwd = NULL;
        return ATTND_ERR_NOMEM;
    }
    return ATTND_OK;
}

static void run_logit_lens(struct sched *s, struct attn_job *j)
{
    const struct model_hparams *hp = &s->m->hp;
    const size_t d = (size_t)hp->n_embd, V = (size_t)hp->n_vocab, L = (size_t)hp->n_layer;
    int pos = j->layer, k = j->head;
    if ((j->st = ensure_attn_fwd(s))) return;
    float *resid = malloc(L * d * sizeof(float)), *logits = malloc(L * V * sizeof(float));
    if (!resid || !logits) {
        j->st = ATTND_ERR_NOMEM;
        goto out;
    }
    fwd_reset(s->attn_fwd);
    fwd_set_resid_probe(s->attn_fwd, pos, resid);
    j->st = fwd_eval(s->attn_fwd, j->tokens, pos + 1, false, NULL);
    fwd_set_resid_probe(s->attn_fwd, -1, NULL);
    fwd_reset(s->attn_fwd);
    if (j->st) goto out;
    fwd_project(s->attn_fwd, resid, (int)L, logits);
    if (first_nonfinite(logits, (int)(L * V)) >= 0) j->st = ATTND_ERR_NUMERIC;
    for (size_t l = 0; l < L && !j->st; l++) {
        j->st = sampler_top_logprobs(logits + l * V, (int)V, k, j->ids + l * (size_t)k, j->weights + l * (size_t)k);
        for (int i = 0; i < k; i++) j->weights[l * (size_t)k + (size_t)i] = expf(j->weights[l * (size_t)k + (size_t)i]);
    }
out:
    free(resid);
    free(logits);
}

/* The registered blocks of the prefix cache into j->blocks (the first j->n), counted in n_found. */
static void run_kv_blocks(struct sched *s, struct attn_job *j)
{
    j->n_found = 0;
    struct kv_block_info bi;
    for (size_t b = 0; b < kv_n_blocks(s->kv); b++) {
        if (kv_block_get_info(s->kv, (int32_t)b, &bi) || !bi.registered) continue;
        if (j->n_found < j->n)
            j->blocks[j->n_found] = (struct sched_kv_block){.hash = bi.hash, .parent_hash = bi.parent_hash,
                                                            .block = (int32_t)b, .parent = bi.parent,
                                                            .ref = bi.ref};
        j->n_found++;
    }
    j->st = ATTND_OK;
}

static void run_attention(struct sched *s, struct attn_job *j)
{
    const struct model_hparams *hp = &s->m->hp;
    const size_t hd = (size_t)hp->head_dim, nq = (size_t)hp->n_head * hd;
    if (j->lens == 2) {
        run_kv_blocks(s, j);
        return;
    }
    if (j->lens) {
        run_logit_lens(s, j);
        return;
    }
    if ((j->st = ensure_attn_fwd(s))) return;
    fwd_reset(s->attn_fwd);
    fwd_set_probe(s->attn_fwd, j->layer, s->probe_q, s->probe_att);
    j->st = fwd_eval(s->attn_fwd, j->tokens, (int)j->n, false, NULL);
    fwd_set_probe(s->attn_fwd, -1, NULL, NULL);
    if (j->st) return;
    fwd_attention_weights(s->attn_fwd, j->layer, j->head, s->probe_q, (int)j->n, j->weights);
    if (first_nonfinite(j->weights, (int)(j->n * (j->n + 1) / 2)) >= 0) j->st = ATTND_ERR_NUMERIC;
    int kvh = j->head / (hp->n_head / hp->n_head_kv);
    for (size_t i = 0; i < j->n; i++) {
        if (j->values) fwd_cache_v(s->attn_fwd, j->layer, (int)i, kvh, j->values + i * hd);
        if (j->output) memcpy(j->output + i * hd, s->probe_att + i * nq + (size_t)j->head * hd, hd * sizeof(float));
    }
    fwd_reset(s->attn_fwd);
}

static void *worker(void *arg)
{
    struct sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        /* parked requests only: wake now and then for their stall clocks */
        while (!s->head && !s->jobs && s->n_running == 0 && !s->stopping && !s->n_pauses &&
               !(s->parked && s->n_cancels)) {
            if (s->parked) {
                if (worker_wait(s, IDLE_SLICE_MS) == ETIMEDOUT) break;
            } else {
                pthread_cond_wait(&s->cv, &s->mu);
            }
        }
        if (s->stopping) {
            for (struct attn_job *j = s->jobs; j; j = j->next) {
                j->st = ATTND_ERR_UNSUPPORTED;
                j->done = 1;
            }
            s->jobs = NULL;
            pthread_cond_broadcast(&s->idle_cv);
            pthread_mutex_unlock(&s->mu);
            break;
        }
        struct attn_job *j = s->jobs;
        if (j) s->jobs = j->next;
        pthread_mutex_unlock(&s->mu);
        if (j) {
            run_attention(s, j);
            pthread_mutex_lock(&s->mu);
            j->done = 1;
            pthread_cond_broadcast(&s->idle_cv);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        if (!step(s)) { /* nothing could run (waiting requests paused or at their owner's limit) */
            pthread_mutex_lock(&s->mu);
            if (!s->n_pauses && !s->n_cancels && !s->jobs && !s->stopping) worker_wait(s, IDLE_SLICE_MS);
            pthread_mutex_unlock(&s->mu);
        }
        /* kv_get_stats walks the whole pool: publish at most every 20 ms, and when idle */
        double t = now_ms();
        if (t - s->last_publish > 20.0 || s->n_running == 0) {
            publish_stats(s);
            s->last_publish = t;
        }
        pthread_mutex_lock(&s->mu);
        if (!s->head && s->active == 0) pthread_cond_broadcast(&s->idle_cv);
        pthread_mutex_unlock(&s->mu);
    }
    /* what is left at stop time ends as cancelled */
    while (s->n_running > 0) finish_running(s, s->n_running - 1, "cancelled");
    while (s->parked) finish_parked(s, s->parked, "cancelled");
    return NULL;
}

/* One forward pass over a 2-token scratch sequence (not committed, so never a cached prefix) before
 * the first request. The first pass after a model load runs several times slower than the next
 * ones, the same work at the same places, whatever the thread (on the Xeon of the README, 2 tokens
 * of the 0.5B Q8_0 model: 89 ms, then 21; the server's first request took 350 ms, then 21), and a
 * pass after seconds of idling does not: that cost is paid here, not by a client. */
static void warm_up(struct sched *s)
{
    static const int32_t toks[2] = {0, 0};
    float *logits = malloc((size_t)s->m->hp.n_vocab * sizeof(float));
    struct kv_seq *seq = NULL;
    size_t cached;
    if (logits && !kv_seq_create(s->kv, NULL, 0, 2, &seq, &cached) && !kv_seq_append(seq, toks, 2)) {
        const struct fwd_seq fs = {.kv = seq, .tokens = toks, .n = 2, .logits = logits};
        if (fwd_eval_batch(s->fwd, s->kv, &fs, 1)) log_warn("scheduler: the warm-up pass failed");
    }
    kv_seq_destroy(seq);
    free(logits);
}

/* ---- public -------------------------------------------------------------------------------- */

attnd_status sched_create(const struct model *m, const struct tokenizer *tok, const struct sched_opts *opts,
                          struct sched **out)
{
    *out = NULL;
    const struct model_hparams *hp = &m->hp;
    struct sched *s = calloc(1, sizeof *s);
    if (!s) return ATTND_ERR_NOMEM;
    s->m = m;
    s->tok = tok;
    s->o = opts ? *opts : (struct sched_opts){0};
    if (s->o.max_queue <= 0) s->o.max_queue = 64;
    if (s->o.max_running <= 0) s->o.max_running = 32;
    if (s->o.n_batch <= 0) s->o.n_batch = 256;
    if (s->o.n_ctx <= 0) s->o.n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (s->o.kv_type != TENSOR_F16 && s->o.kv_type != TENSOR_F32) s->o.kv_type = TENSOR_F16;
    if (s->o.n_batch < s->o.max_running) s->o.n_batch = s->o.max_running;
    if (s->o.max_running_per_owner <= 0 || s->o.max_running_per_owner > s->o.max_running)
        s->o.max_running_per_owner = s->o.max_running;
    if (s->o.max_queued_per_owner <= 0 || s->o.max_queued_per_owner > s->o.max_queue)
        s->o.max_queued_per_owner = s->o.max_queue;
    if (s->o.stall_timeout_ms <= 0) s->o.stall_timeout_ms = 30000;
    if (s->o.spec_max_seqs <= 0) s->o.spec_max_seqs = 4;
    s->next_id = 1;
    pthread_mutex_init(&s->mu, NULL);
    check_cond_init(&s->cv); /* the worker's timed waits take check_deadline deadlines */
    check_cond_init(&s->idle_cv); /* sched_wait_idle waits on it with a check_deadline */
    attnd_status st;
    size_t blocks = s->o.kv_blocks;
    if (!blocks) {
        size_t mib = s->o.kv_mib ? s->o.kv_mib : 256;
        if ((st = kv_blocks_from_mib(mib, hp->n_layer, hp->n_head_kv, hp->head_dim, s->o.kv_type, &blocks))) goto fail;
    }
    /* the pool must hold at least one full-context request */
    if (blocks < kv_blocks_for_tokens((size_t)s->o.n_ctx)) blocks = kv_blocks_for_tokens((size_t)s->o.n_ctx);
    struct fwd_opts fo = {.n_ctx = -1, .n_threads = s->o.n_threads, .n_batch = s->o.n_batch,
                          .backend = s->o.backend, .vk_device = s->o.vk_device};
    if ((st = fwd_create(m, &fo, &s->fwd))) goto fail;
    struct kv_opts ko = kv_opts_default(hp->n_layer, hp->n_head_kv, hp->head_dim, blocks);
    ko.type = s->o.kv_type;
    ko.events = s->o.kv_events;
    ko.disk = s->o.kv_disk;
    ko.no_storage = strcmp(fwd_backend_name(s->fwd), "vulkan") == 0; /* the K/V live on the device */
    if (ko.disk && ko.no_storage) log_warn("kv-disk: unused: with the Vulkan backend the K/V live on the device");
    if ((st = kv_create(&ko, &s->kv))) goto fail;
    s->o.n_threads = fwd_n_threads(s->fwd);
    s->running = calloc((size_t)s->o.max_running, sizeof *s->running);
    s->batch = calloc((size_t)s->o.max_running, sizeof *s->batch);
    s->batch_req = calloc((size_t)s->o.max_running, sizeof *s->batch_req);
    s->order = calloc((size_t)s->o.max_running, sizeof *s->order);
    if (!s->running || !s->batch || !s->batch_req || !s->order) {
        st = ATTND_ERR_NOMEM;
        goto fail;
    }
    warm_up(s);
    publish_stats(s);
    if (pthread_create(&s->thread, NULL, worker, s)) {
        st = ATTND_ERR_NOMEM;
        goto fail;
    }
    s->thread_started = 1;
    log_info("scheduler: %zu KV blocks of %d tokens (%s, %.1f MiB), up to %d requests per step, %d tokens per step",
             blocks, KV_BLOCK_SIZE, tensor_type_name(s->o.kv_type),
             (double)blocks * (double)kv_bytes_per_block(hp->n_layer, hp->n_head_kv, hp->head_dim, s->o.kv_type) /
                 (1024.0 * 1024.0),
             s->o.max_running, s->o.n_batch);
    *out = s;
    return ATTND_OK;
fail:
    sched_destroy(s, 0);
    return st;
}

void sched_destroy(struct sched *s, int grace_ms)
{
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->draining = 1;
        struct req *q = s->head;
        s->head = s->tail = NULL;
        s->n_queued = 0;
        pthread_mutex_unlock(&s->mu);
        while (q) { /* queued requests end at once (pre-empted ones keep their partial output) */
            struct req *n = q->next;
            send_done(q, "cancelled", "", 0);
            req_free(q);
            q = n;
        }
        sched_wait_idle(s, grace_ms);
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        /* the worker ends what is still running as cancelled */
        pthread_join(s->thread, NULL);
    }
    fwd_destroy(s->fwd);
    fwd_destroy(s->attn_fwd);
    kv_destroy(s->kv);
    gmask_vocab_destroy(s->gvocab);
    free(s->probe_q);
    free(s->probe_att);
    free(s->running);
    free(s->batch);
    free(s->batch_req);
    free(s->order);
    free(s->cancels);
    free(s->pauses);
    free(s->owners);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->idle_cv);
    free(s);
}

/* What interventions need of the scheduler: the CPU backend, this model, and for head_mean a
 * prompt that fits one step. Returns ATTND_OK or ATTND_ERR_INVALID with the reason in err. */
static attnd_status iv_check(const struct sched *s, const struct sched_request *r, char *err, size_t errlen)
{
    if (!r->iv) return ATTND_OK;
    if (strcmp(fwd_backend_name(s->fwd), "cpu") != 0) {
        snprintf(err, errlen, "interventions and activation captures need the CPU backend (this server runs on %s)",
                 fwd_backend_name(s->fwd));
        return ATTND_ERR_INVALID;
    }
    if (!iv_matches(r->iv, &s->m->hp)) {
        snprintf(err, errlen, "the interventions were made for a model of other dimensions");
        return ATTND_ERR_INVALID;
    }
    if (iv_has_head_mean(r->iv) && r->n_prompt > (size_t)s->o.n_batch) {
        snprintf(err, errlen, "head_mean needs the whole prompt in one step: at most %d tokens (it has %zu)",
                 s->o.n_batch, r->n_prompt);
        return ATTND_ERR_INVALID;
    }
    return ATTND_OK;
}

/* q's own copy of r's interventions and its prefix-cache key (q->id is set). */
static attnd_status iv_take(struct req *q, const struct sched_request *r)
{
    if (!r->iv) return ATTND_OK;
    if (iv_clone(r->iv, &q->iv)) return ATTND_ERR_NOMEM;
    q->iv->n_prompt = r->n_prompt;
    q->kv_key = iv_kv_key(q->iv);
    return ATTND_OK;
}

/* Gives q the request's grammar (retained) and the vocabulary trie, built at the first grammar
 * (outside the lock: it takes a while on a large vocabulary; a race keeps one of two). */
static attnd_status grammar_take(struct sched *s, struct req *q, const struct sched_request *r)
{
    if (!r->grammar) return ATTND_OK;
    pthread_mutex_lock(&s->mu);
    struct gmask_vocab *v = s->gvocab;
    pthread_mutex_unlock(&s->mu);
    if (!v) {
        if (gmask_vocab_create(s->tok, &v)) return ATTND_ERR_NOMEM;
        pthread_mutex_lock(&s->mu);
        if (s->gvocab) gmask_vocab_destroy(v);
        else s->gvocab = v;
        v = s->gvocab;
        pthread_mutex_unlock(&s->mu);
    }
    q->gvocab = v;
    q->grammar = gram_retain(r->grammar);
    return ATTND_OK;
}

/* Puts q at the tail of the waiting queue and gives it its id, or frees it when the queue, or its
 * owner's share of it, is full or the scheduler is draining (sched_submit's statuses). */
static attnd_status enqueue(struct sched *s, struct req *q, uint64_t *id, char *err, size_t errlen)
{
    pthread_mutex_lock(&s->mu);
    struct owner_ent *o = NULL;
    attnd_status st = ATTND_OK;
    if (s->draining || s->n_queued >= s->o.max_queue) {
        st = ATTND_ERR_UNSUPPORTED;
        snprintf(err, errlen, s->draining ? "the server is shutting down" : "the request queue is full");
    } else if (!(o = owner_get(s, q->owner))) {
        st = ATTND_ERR_NOMEM;
        snprintf(err, errlen, "out of memory");
    } else if (o->queued >= s->o.max_queued_per_owner) {
        st = ATTND_ERR_BUSY;
        snprintf(err, errlen,
                 "this tenant (without keys: this client address) already has %d requests waiting, the most "
                 "allowed (--max-queued-per-tenant); retry later",
                 o->queued);
    }
    if (st) {
        pthread_mutex_unlock(&s->mu);
        req_free(q);
        return st;
    }
    o->queued++;
    q->id = s->next_id++;
    if (iv_own_blocks(q->iv)) q->kv_key ^= q->id * 0x9e3779b97f4a7c15ULL | 1; /* its blocks: its own */
    if (s->tail) s->tail->next = q;
    else s->head = q;
    s->tail = q;
    s->n_queued++;
    if (id) *id = q->id;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return ATTND_OK;
}

attnd_status sched_submit(struct sched *s, const struct sched_request *r, sched_cb cb, void *ud, uint64_t *id,
                          char *err, size_t errlen)
{
    const int V = s->m->hp.n_vocab;
    if (!r || !cb || !r->prompt || r->n_prompt == 0) {
        snprintf(err, errlen, "the prompt is empty");
        return ATTND_ERR_INVALID;
    }
    for (size_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= V) {
            snprintf(err, errlen, "token id %d at position %zu is outside the vocabulary (0..%d)", r->prompt[i], i,
                     V - 1);
            return ATTND_ERR_INVALID;
        }
    if (r->max_tokens < 0 || r->logprobs < 0 || r->logprobs > SCHED_MAX_LOGPROBS || r->n_stops < 0 ||
        r->n_stops > SCHED_MAX_STOPS) {
        snprintf(err, errlen, "max_tokens (>= 0), logprobs (0..%d) or stop (at most %d) out of range",
                 SCHED_MAX_LOGPROBS, SCHED_MAX_STOPS);
        return ATTND_ERR_INVALID;
    }
    if (sampler_params_validate(&r->sampling, err, errlen) || iv_check(s, r, err, errlen)) return ATTND_ERR_INVALID;
    if (r->n_prompt > (size_t)s->o.n_ctx || (size_t)r->max_tokens > (size_t)s->o.n_ctx - r->n_prompt) {
        snprintf(err, errlen, "the prompt (%zu tokens) plus max_tokens (%d) exceeds the context of %d tokens",
                 r->n_prompt, r->max_tokens, s->o.n_ctx);
        return ATTND_ERR_RANGE;
    }
    struct req *q = calloc(1, sizeof *q);
    if (!q) return ATTND_ERR_NOMEM;
    q->toks = malloc((r->n_prompt + (size_t)r->max_tokens) * sizeof *q->toks);
    if (!q->toks) goto oom;
    memcpy(q->toks, r->prompt, r->n_prompt * sizeof *q->toks);
    if (iv_take(q, r) || grammar_take(s, q, r)) goto oom;
    q->n_toks = q->n_prompt = r->n_prompt;
    q->max_tokens = r->max_tokens;
    q->sampling = r->sampling;
    q->ignore_eos = r->ignore_eos;
    q->logprobs = r->logprobs < V ? r->logprobs : V; /* a vocabulary smaller than the ask has V alternatives */
    q->cb = cb;
    q->ud = ud;
    for (int i = 0; i < r->n_stops; i++) {
        if (!r->stops[i] || !r->stops[i][0] || strlen(r->stops[i]) > STOP_MAX_LEN) {
            req_free(q);
            snprintf(err, errlen, "stop strings must be 1..%d bytes", STOP_MAX_LEN);
            return ATTND_ERR_INVALID;
        }
        if (!(q->stops[i] = strdup(r->stops[i]))) goto oom;
        q->n_stops = i + 1;
    }
    q->t_submit = now_ms();
    q->owner = r->owner;
    q->spec_on = !q->iv && (r->speculative > 0 || (r->speculative == 0 && s->o.speculative == SPEC_LOOKUP));
    spec_init(&q->spec);
    return enqueue(s, q, id, err, errlen);
oom:
    req_free(q);
    snprintf(err, errlen, "out of memory");
    return ATTND_ERR_NOMEM;
}

void sched_cancel(struct sched *s, uint64_t id)
{
    pthread_mutex_lock(&s->mu);
    for (struct req *q = s->head; q; q = q->next)
        if (q->id == id) atomic_store(&q->cancelled, 1); /* ends with "cancelled" when dequeued */
    /* the running set belongs to the worker: leave the id for it */
    if (s->n_cancels == s->cap_cancels) {
        int nc = s->cap_cancels ? s->cap_cancels * 2 : 16;
        uint64_t *n = realloc(s->cancels, (size_t)nc * sizeof *n);
        if (n) {
            s->cancels = n;
            s->cap_cancels = nc;
        }
    }
    if (s->n_cancels < s->cap_cancels) s->cancels[s->n_cancels++] = id;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sched_pause(struct sched *s, uint64_t id, bool paused)
{
    pthread_mutex_lock(&s->mu);
    if (s->n_pauses == s->cap_pauses) {
        int nc = s->cap_pauses ? s->cap_pauses * 2 : 16;
        struct pause_op *n = realloc(s->pauses, (size_t)nc * sizeof *n);
        if (n) {
            s->pauses = n;
            s->cap_pauses = nc;
        }
    }
    if (s->n_pauses < s->cap_pauses) s->pauses[s->n_pauses++] = (struct pause_op){.id = id, .on = paused};
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sched_drain(struct sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
}

bool sched_wait_idle(struct sched *s, int timeout_ms)
{
    struct timespec ts;
    check_deadline(&ts, timeout_ms);
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    while ((s->head || s->active || s->jobs) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&s->idle_cv, &s->mu, &ts);
    bool idle = !s->head && !s->active && !s->jobs;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

void sched_get_stats(struct sched *s, struct sched_stats *st)
{
    const struct model_hparams *hp = &s->m->hp;
    pthread_mutex_lock(&s->mu);
    *st = s->stats;
    st->queued = s->n_queued;
    pthread_mutex_unlock(&s->mu);
    st->kv_tokens_capacity = (uint64_t)st->kv_blocks_total * KV_BLOCK_SIZE;
    st->kv_events_dropped = kvev_dropped(s->o.kv_events);
    st->kv_bytes_capacity = (uint64_t)st->kv_blocks_total *
                            kv_bytes_per_block(hp->n_layer, hp->n_head_kv, hp->head_dim, s->o.kv_type);
}

const char *sched_backend(const struct sched *s) { return fwd_backend_name(s->fwd); }
const char *sched_device(const struct sched *s) { return fwd_device_name(s->fwd); }
int sched_kernels(const struct sched *s, struct fwd_kernels *out) { return fwd_kernels(s->fwd, out); }

int sched_n_ctx(const struct sched *s) { return s->o.n_ctx; }

/* Queues a job for the worker (it runs between steps) and waits for it. */
static attnd_status run_job(struct sched *s, struct attn_job *j)
{
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return ATTND_ERR_UNSUPPORTED;
    }
    struct attn_job **pp = &s->jobs;
    while (*pp) pp = &(*pp)->next;
    *pp = j;
    pthread_cond_signal(&s->cv);
    while (!j->done) pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return j->st;
}

attnd_status sched_attention(struct sched *s, const int32_t *tokens, size_t n, int layer, int head, float *weights,
                             float *values, float *output)
{
    const struct model_hparams *hp = &s->m->hp;
    if (layer < 0 || layer >= hp->n_layer || head < 0 || head >= hp->n_head || !weights) return ATTND_ERR_INVALID;
    if (n == 0 || n > (size_t)s->o.n_ctx) return ATTND_ERR_RANGE;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab) return ATTND_ERR_INVALID;
    struct attn_job j = {.tokens = tokens, .n = n, .layer = layer, .head = head, .weights = weights,
                         .values = values, .output = output};
    return run_job(s, &j);
}

attnd_status sched_logit_lens(struct sched *s, const int32_t *tokens, size_t n, int pos, int top_k, int *ids,
                              float *probs)
{
    const struct model_hparams *hp = &s->m->hp;
    if (!tokens || !ids || !probs || pos < 0 || (size_t)pos >= n || top_k < 1 || top_k > SCHED_MAX_LOGPROBS ||
        top_k > hp->n_vocab)
        return ATTND_ERR_INVALID;
    if (n > (size_t)s->o.n_ctx) return ATTND_ERR_RANGE;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab) return ATTND_ERR_INVALID;
    struct attn_job j = {.lens = 1, .tokens = tokens, .n = n, .layer = pos, .head = top_k, .weights = probs,
                         .ids = ids};
    return run_job(s, &j);
}

attnd_status sched_kv_blocks(struct sched *s, struct sched_kv_block *out, size_t cap, size_t *n)
{
    if (!n || (cap && !out)) return ATTND_ERR_INVALID;
    struct attn_job j = {.lens = 2, .blocks = out, .n = cap};
    attnd_status st = run_job(s, &j);
    *n = j.n_found;
    return st;
}
