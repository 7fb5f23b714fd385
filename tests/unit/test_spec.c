/* test_spec.c - speculative decoding's parts below the scheduler: prompt lookup (spec.h), the draft
 * length policy, and the KV rollback (kv_seq_truncate) with the prefix cache's invariants checked
 * by kv_validate. (The end-to-end checks, greedy identity and the sampling distribution through
 * the daemon, are tests/integration/test_speculative.py.) */
#include <string.h>

#include "attnd/kvcache.h"
#include "attnd/spec.h"
#include "tests/unit/testutil.h"

static void test_lookup(void)
{
    int32_t d[SPEC_K_MAX];
    const int32_t a[] = {5, 6, 7, 8, 9, 1, 2, 5, 6, 7};
    /* suffix 5 6 7 occurs at 0..2: the draft is what followed it */
    int n = spec_lookup(a, 10, 4, d);
    T_CHECK(n == 4 && d[0] == 8 && d[1] == 9 && d[2] == 1 && d[3] == 2, "lookup: %d %d", n, d[0]);
    T_CHECK(spec_lookup(a, 10, 2, d) == 2, "lookup: k caps the draft");
    const int32_t b[] = {1, 2, 3, 4, 5, 6};
    T_CHECK(spec_lookup(b, 6, 4, d) == 0, "lookup: no earlier n-gram, no draft");
    /* a single-token match is below SPEC_NGRAM_MIN */
    const int32_t c[] = {3, 9, 4, 5, 3};
    T_CHECK(spec_lookup(c, 5, 4, d) == 0, "lookup: a 1-gram does not draft");
    /* the most recent of two occurrences, the longest suffix first */
    const int32_t e[] = {1, 2, 10, 7, 1, 2, 11, 9, 1, 2};
    n = spec_lookup(e, 10, 1, d);
    T_CHECK(n == 1 && d[0] == 11, "lookup: most recent occurrence (%d)", d[0]);
    const int32_t f[] = {4, 1, 2, 20, 1, 2, 30, 4, 1, 2};
    n = spec_lookup(f, 10, 1, d);
    T_CHECK(n == 1 && d[0] == 20, "lookup: longest suffix wins (%d)", d[0]);
}

static void test_policy(void)
{
    struct spec_state st;
    spec_init(&st);
    T_CHECK(spec_want(&st, 100) == SPEC_K_START && spec_want(&st, 2) == 2 && spec_want(&st, 0) == 0, "want");
    spec_update(&st, 4, 4);
    T_CHECK(st.k == SPEC_K_START + 2, "grows on a whole accept (%d)", st.k);
    for (int i = 0; i < 4; i++) spec_update(&st, 8, 8);
    T_CHECK(st.k == SPEC_K_MAX, "capped at SPEC_K_MAX (%d)", st.k);
    spec_update(&st, 8, 2);
    T_CHECK(st.k == 3, "shrinks to accepted + 1 (%d)", st.k);
    for (int i = 0; i < 3; i++) spec_update(&st, 3, 0);
    T_CHECK(st.cool > 0 && spec_want(&st, 100) == 0, "pauses after repeated misses");
    int steps = 1;
    while (spec_want(&st, 100) == 0 && steps < 1000) steps++;
    T_CHECK(steps > 1 && steps < 1000, "drafts again after the pause (%d steps)", steps);
}

static void test_truncate(void)
{
    struct kv_opts o = kv_opts_default(2, 1, 8, 16);
    struct kv_cache *c;
    struct kv_seq *s, *s2;
    size_t cached;
    char err[256];
    int32_t t[64];
    for (int i = 0; i < 64; i++) t[i] = 100 + i;
    T_CHECK(!kv_create(&o, &c), "create");
    T_CHECK(!kv_seq_create(c, NULL, 0, 64, &s, &cached), "seq");
    T_CHECK(!kv_seq_append(s, t, 15) && !kv_seq_commit(s, 15), "prompt");
    /* one committed token plus 8 drafted ones, 2 of them accepted: the block past 16 goes back */
    T_CHECK(!kv_seq_append(s, t + 15, 9) && !kv_seq_commit(s, 16), "draft");
    T_CHECK(kv_seq_n_blocks(s) == 2, "two blocks with the draft");
    T_CHECK(kv_seq_truncate(s, 15) == ATTND_ERR_RANGE, "below the committed length: refused");
    T_CHECK(kv_seq_truncate(s, 25) == ATTND_ERR_RANGE, "past the length: refused");
    T_CHECK(!kv_seq_truncate(s, 18) && kv_seq_len(s) == 18 && kv_seq_n_blocks(s) == 2, "rollback to 18");
    T_CHECK(!kv_seq_commit(s, 18) && !kv_validate(c, err, sizeof err), "valid: %s", err);
    T_CHECK(!kv_seq_truncate(s, 18) && !kv_seq_append(s, t + 18, 14), "append after the rollback");
    T_CHECK(!kv_seq_truncate(s, 20) && kv_seq_n_blocks(s) == 2 && !kv_validate(c, err, sizeof err),
            "a drafted full block is freed, never cached: %s", err);
    /* only the first block (committed) is in the prefix cache: a second sequence finds 16 tokens,
     * not the rolled-back ones */
    T_CHECK(!kv_seq_append(s, t + 20, 12) && !kv_seq_commit(s, 32), "the real tokens");
    int32_t p[40];
    memcpy(p, t, sizeof p);
    p[20] = 1; /* differs from what was drafted there */
    T_CHECK(!kv_seq_create(c, p, 40, 64, &s2, &cached) && cached == 16, "prefix hit %zu", cached);
    kv_seq_destroy(s2);
    kv_seq_destroy(s);
    T_CHECK(!kv_validate(c, err, sizeof err), "valid at the end: %s", err);
    kv_destroy(c);
}

int main(void)
{
    test_lookup();
    test_policy();
    test_truncate();
    return t_finish("test_spec");
}
