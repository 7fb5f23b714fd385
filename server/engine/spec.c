/* spec.c - the prompt-lookup drafter and the adaptive draft length (see spec.h). */
#include "attnd/spec.h"

#include <string.h>

#define SPEC_MISS_LIMIT 3  /* drafts rejected at their first token before drafting pauses */
#define SPEC_COOL_STEPS 16 /* the first pause, doubled for each further miss (up to 16x) */

void spec_init(struct spec_state *st) { *st = (struct spec_state){.k = SPEC_K_START}; }

int spec_want(struct spec_state *st, int room)
{
    if (st->cool > 0) {
        st->cool--;
        return 0;
    }
    int k = st->k < room ? st->k : room;
    return k > 0 ? k : 0;
}

/* Length of the common suffix of toks[0..a] and toks[0..b] (a < b), at most SPEC_NGRAM_MAX. */
static int suffix_match(const int32_t *toks, size_t a, size_t b)
{
    int m = 0;
    while (m < SPEC_NGRAM_MAX && m <= (int)a && toks[a - (size_t)m] == toks[b - (size_t)m]) m++;
    return m;
}

int spec_lookup(const int32_t *toks, size_t n, int k, int32_t *draft)
{
    if (n < SPEC_NGRAM_MIN + 1 || k <= 0) return 0;
    const size_t last = n - 1;
    size_t best = 0;
    int best_len = 0;
    /* the most recent occurrence of the longest suffix: scan back from the end */
    for (size_t j = last; j-- > 0 && best_len < SPEC_NGRAM_MAX;) {
        int m = suffix_match(toks, j, last);
        if (m > best_len) best_len = m, best = j;
    }
    if (best_len < SPEC_NGRAM_MIN) return 0;
    int nd = 0;
    for (size_t p = best + 1; nd < k && p < n; p++) draft[nd++] = toks[p];
    return nd;
}

void spec_update(struct spec_state *st, int drafted, int accepted)
{
    if (drafted <= 0) return;
    if (accepted == drafted) {
        st->k = st->k + 2 < SPEC_K_MAX ? st->k + 2 : SPEC_K_MAX;
        st->misses = 0;
        return;
    }
    st->k = accepted + 1;
    if (accepted > 0) {
        st->misses = 0;
        return;
    }
    if (++st->misses >= SPEC_MISS_LIMIT) {
        int extra = st->misses - SPEC_MISS_LIMIT;
        st->cool = SPEC_COOL_STEPS << (extra < 4 ? extra : 4);
    }
}

int spec_mode_parse(const char *name, enum spec_mode *mode)
{
    if (!strcmp(name, "off")) *mode = SPEC_OFF;
    else if (!strcmp(name, "lookup")) *mode = SPEC_LOOKUP;
    else return -1;
    return 0;
}

const char *spec_mode_name(enum spec_mode mode) { return mode == SPEC_LOOKUP ? "lookup" : "off"; }
