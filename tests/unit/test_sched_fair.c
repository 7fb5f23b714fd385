/* test_sched_fair.c - the scheduler's turns between owners, pauses and per-owner limits
 * (issue 38, finding 2), on a real model:
 *  - one slot (max_running 1): owner A's three requests and owner B's two, queued while A's
 *    first runs, finish A1 B1 A2 B2 A3 (turns), not A1 A2 A3 B1 B2 (arrival order);
 *  - a full running set of owner A and a request of owner B: B's pre-empts A's newest at once
 *    (fair_preemptions) and finishes first; every A request still gives the tokens it gives alone;
 *  - a request paused after its first token computes nothing while paused (no token, steps stop,
 *    stats.paused 1), gives the same greedy tokens as an unpaused run once resumed, also after its
 *    KV blocks were taken by another request meanwhile;
 *  - a paused request left alone past stall_timeout_ms ends "cancelled" (stall_cancels 1);
 *  - max_queued_per_owner: past it ATTND_ERR_BUSY for that owner, another owner still queues. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnd/model.h"
#include "attnd/sched.h"
#include "attnd/tokenizer.h"
#include "testutil.h"

#define MAXT 64

struct out {
    pthread_mutex_t mu;
    int done, n;
    int tok[MAXT];
    char reason[16];
    int order;                /* finishing position */
    struct sched *s;          /* pause_at: sched_pause(true) at this token (0: never) */
    int pause_at;
    uint64_t id;
};

static int g_finished;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_ev(void *ud, const struct sched_event *ev)
{
    struct out *o = ud;
    pthread_mutex_lock(&o->mu);
    if (ev->kind == SCHED_EV_TOKEN && o->n < MAXT) {
        o->tok[o->n++] = ev->token;
        if (o->pause_at && o->n == o->pause_at) sched_pause(o->s, ev->id, true);
    } else if (ev->kind != SCHED_EV_TOKEN) {
        snprintf(o->reason, sizeof o->reason, "%s", ev->kind == SCHED_EV_DONE ? ev->finish_reason : "error");
        pthread_mutex_lock(&g_mu);
        o->order = g_finished++;
        pthread_mutex_unlock(&g_mu);
        o->done = 1;
    }
    pthread_mutex_unlock(&o->mu);
}

static int get(struct out *o, int which) /* 0: done, 1: tokens */
{
    pthread_mutex_lock(&o->mu);
    int v = which ? o->n : o->done;
    pthread_mutex_unlock(&o->mu);
    return v;
}

static int wait_until(struct out *o, int which, int at_least, int ms)
{
    for (int t = 0; t < ms && get(o, which) < at_least; t++) usleep(1000);
    return get(o, which) >= at_least;
}

static attnd_status submit(struct sched *s, uint64_t owner, int first, int n_gen, struct out *o)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    o->s = s;
    int32_t prompt[8];
    for (int i = 0; i < 8; i++) prompt[i] = 1 + (first * 7 + i * 3) % 200;
    struct sched_request r = {.prompt = prompt, .n_prompt = 8, .max_tokens = n_gen,
                              .sampling = sampler_params_default(), .ignore_eos = true, .owner = owner};
    r.sampling.temperature = 0;
    char err[256];
    return sched_submit(s, &r, on_ev, o, &o->id, err, sizeof err);
}

static void check_turns(const struct model *m, const struct tokenizer *tok, struct sched_opts so)
{
    struct sched *s;
    so.max_running = 1;
    T_CHECK(sched_create(m, tok, &so, &s) == ATTND_OK, "sched_create (one slot)");
    static struct out o[5]; /* A1 A2 A3 B1 B2 */
    g_finished = 0;
    T_CHECK(submit(s, 1, 0, 24, &o[0]) == ATTND_OK, "A1");
    wait_until(&o[0], 1, 1, 10000);
    for (int i = 1; i < 5; i++) T_CHECK(submit(s, i < 3 ? 1 : 2, i, 4, &o[i]) == ATTND_OK, "request %d", i);
    for (int i = 0; i < 5; i++) wait_until(&o[i], 0, 1, 20000);
    static const int want[5] = {0, 2, 4, 1, 3}; /* finishing order of A1 A2 A3 B1 B2 */
    int same = 1;
    for (int i = 0; i < 5; i++) same &= o[i].order == want[i];
    T_CHECK(same, "turns: A1 B1 A2 B2 A3 (finishing positions A1 %d A2 %d A3 %d B1 %d B2 %d)", o[0].order, o[1].order,
            o[2].order, o[3].order, o[4].order);
    sched_destroy(s, 0);
}

static void check_share(const struct model *m, const struct tokenizer *tok, struct sched_opts so)
{
    struct sched *s;
    so.max_running = 4;
    T_CHECK(sched_create(m, tok, &so, &s) == ATTND_OK, "sched_create (4 slots)");
    static struct out alone[4], a[4], b;
    for (int i = 0; i < 4; i++) { /* each alone, for the reference tokens */
        submit(s, 1, 10 + i, 40, &alone[i]);
        wait_until(&alone[i], 0, 1, 20000);
    }
    g_finished = 0;
    for (int i = 0; i < 4; i++) submit(s, 1, 10 + i, 40, &a[i]);
    for (int i = 0; i < 4; i++) wait_until(&a[i], 1, 2, 10000);
    T_CHECK(submit(s, 2, 20, 2, &b) == ATTND_OK, "B");
    for (int i = 0; i < 4; i++) wait_until(&a[i], 0, 1, 30000);
    wait_until(&b, 0, 1, 30000);
    struct sched_stats st;
    sched_get_stats(s, &st);
    T_CHECK(b.order == 0 && st.fair_preemptions >= 1, "B's request goes first by pre-empting one of A's (B finished "
                                                      "%d-th, %llu fair pre-emptions)", b.order,
            (unsigned long long)st.fair_preemptions);
    for (int i = 0; i < 4; i++)
        T_CHECK(a[i].n == 40 && !memcmp(a[i].tok, alone[i].tok, sizeof a[i].tok), "A%d: the tokens it gives alone", i);
    sched_destroy(s, 0);
}

static void check_pause(const struct model *m, const struct tokenizer *tok, struct sched_opts so)
{
    struct sched *s;
    so.kv_blocks = 4; /* 64 tokens: a second request takes the paused one's blocks */
    so.n_ctx = 64;
    so.stall_timeout_ms = 300;
    T_CHECK(sched_create(m, tok, &so, &s) == ATTND_OK, "sched_create (small pool)");
    static struct out ref, p, other, stall;
    submit(s, 1, 30, 40, &ref);
    wait_until(&ref, 0, 1, 20000);
    submit(s, 1, 30, 40, &p);
    p.pause_at = 3;
    wait_until(&p, 1, 3, 10000);
    usleep(100 * 1000);
    struct sched_stats st0, st1;
    sched_get_stats(s, &st0);
    int n0 = get(&p, 1);
    usleep(150 * 1000); /* under the stall timeout */
    sched_get_stats(s, &st1);
    T_CHECK(get(&p, 1) == n0 && n0 <= 4 && st1.steps == st0.steps && st1.paused == 1,
            "paused: no token (%d then %d), no step (%llu then %llu), paused %d", n0, get(&p, 1),
            (unsigned long long)st0.steps, (unsigned long long)st1.steps, st1.paused);
    sched_pause(s, p.id, true); /* paused again: the stall clock restarts */
    submit(s, 2, 31, 52, &other); /* 60 tokens, the whole pool: the paused one's blocks go */
    wait_until(&other, 0, 1, 20000);
    T_CHECK(!strcmp(other.reason, "length") && other.n == 52, "the other request ran beside the paused one (%s)",
            other.reason);
    sched_pause(s, p.id, false);
    wait_until(&p, 0, 1, 20000);
    sched_get_stats(s, &st1);
    T_CHECK(!strcmp(p.reason, "length") && p.n == 40 && !memcmp(p.tok, ref.tok, sizeof p.tok),
            "resumed: the tokens of the unpaused run (%s, %d tokens)", p.reason, p.n);
    T_CHECK(st1.preemptions >= 1, "the paused request lost its blocks and was recomputed (%llu pre-emptions)",
            (unsigned long long)st1.preemptions);
    submit(s, 1, 32, 40, &stall);
    stall.pause_at = 2;
    int ended = wait_until(&stall, 0, 1, 3000);
    sched_get_stats(s, &st1);
    T_CHECK(ended && !strcmp(stall.reason, "cancelled") && st1.stall_cancels == 1,
            "a paused request left alone ends cancelled after the stall timeout (%s, %llu)", stall.reason,
            (unsigned long long)st1.stall_cancels);
    sched_destroy(s, 0);
}

static void check_busy(const struct model *m, const struct tokenizer *tok, struct sched_opts so)
{
    struct sched *s;
    so.max_running = 1;
    so.max_queued_per_owner = 1;
    T_CHECK(sched_create(m, tok, &so, &s) == ATTND_OK, "sched_create (1 waiting per owner)");
    static struct out o[4];
    submit(s, 1, 40, 48, &o[0]);
    wait_until(&o[0], 1, 1, 10000);
    T_CHECK(submit(s, 1, 41, 2, &o[1]) == ATTND_OK, "owner 1's first waiting request");
    T_CHECK(submit(s, 1, 42, 2, &o[2]) == ATTND_ERR_BUSY, "owner 1's second waiting request: ATTND_ERR_BUSY");
    T_CHECK(submit(s, 2, 43, 2, &o[3]) == ATTND_OK, "owner 2 still queues");
    wait_until(&o[1], 0, 1, 20000);
    wait_until(&o[3], 0, 1, 20000);
    sched_destroy(s, 0);
}

int main(void)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/models/tiny-llama-spm-f32.gguf", t_shared());
    struct model *m;
    if (model_load(path, &m, err, sizeof err)) {
        T_CHECK(0, "load: %s", err);
        return t_finish("test_sched_fair");
    }
    struct tokenizer *tok;
    T_CHECK(tok_create(m->gguf, &tok, err, sizeof err) == ATTND_OK, "tokenizer");
    struct sched_opts so = {.n_threads = 2, .n_ctx = 128, .kv_type = TENSOR_F32, .n_batch = 64};
    check_turns(m, tok, so);
    check_share(m, tok, so);
    check_pause(m, tok, so);
    check_busy(m, tok, so);
    tok_destroy(tok);
    model_destroy(m);
    return t_finish("test_sched_fair");
}
