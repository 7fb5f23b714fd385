/* test_stopstr.c - the streaming stop-string matcher (stopstr.h): hand-made cases with their
 * expected output, argument errors and limits, and random texts split at random points against
 * a naive search. */
#include "attnd/stopstr.h"

#include "tests/unit/testutil.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint64_t g_rng = 0x1234567887654321ULL;

static double rnd_unit(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * 0x1.0p-53;
}

struct feed_result {
    char text[512]; /* everything emitted, feeds and flush */
    size_t len;
    int stop;
    int err;
};

/* Feeds the pieces (NULL-terminated list), then flushes, collecting what is emitted. */
static struct feed_result feed_all(struct stop_matcher *m, const char *const *pieces)
{
    struct feed_result r = {.stop = -1};
    struct stop_out o;
    for (int i = 0; pieces[i]; i++) {
        if (stop_feed(m, pieces[i], strlen(pieces[i]), &o) != ATTND_OK) r.err++;
        if (o.text == NULL || r.len + o.len >= sizeof r.text) {
            r.err++;
            continue;
        }
        memcpy(r.text + r.len, o.text, o.len);
        r.len += o.len;
        if (o.stop >= 0) r.stop = o.stop;
    }
    if (stop_flush(m, &o) != ATTND_OK || !o.text) r.err++;
    else if (r.len + o.len < sizeof r.text) {
        memcpy(r.text + r.len, o.text, o.len);
        r.len += o.len;
    }
    r.text[r.len] = '\0';
    return r;
}

static void expect_stop(const char *const *stops, int n, const char *const *pieces,
                        const char *want, int want_stop, const char *what)
{
    struct stop_matcher *m = NULL;
    T_CHECK(stop_create(stops, n, &m) == ATTND_OK, "%s: create", what);
    if (!m) return;
    struct feed_result r = feed_all(m, pieces);
    T_CHECK(r.err == 0, "%s: errors", what);
    T_CHECK(strcmp(r.text, want) == 0, "%s: emitted '%s', want '%s'", what, r.text, want);
    T_CHECK(r.stop == want_stop, "%s: stop %d, want %d", what, r.stop, want_stop);
    /* The same matcher after reset gives the same answer. */
    stop_reset(m);
    struct feed_result r2 = feed_all(m, pieces);
    T_CHECK(strcmp(r2.text, want) == 0 && r2.stop == want_stop, "%s: after reset", what);
    stop_destroy(m);
}

static void test_stop_basic(void)
{
    const char *hash[] = {"###"};
    expect_stop(hash, 1, (const char *[]){"hello ### world", NULL}, "hello ", 0, "single piece");
    expect_stop(hash, 1, (const char *[]){"hello #", "## world", NULL}, "hello ", 0, "2 pieces");
    const char *eos[] = {"</s>"};
    expect_stop(eos, 1, (const char *[]){"abc<", "/s", ">def", NULL}, "abc", 0, "3 pieces");
    expect_stop(eos, 1, (const char *[]){"<", "/", "s", ">", NULL}, "", 0, "4 one-byte pieces");
    expect_stop(hash, 1, (const char *[]){"###x", NULL}, "", 0, "at the very beginning");
    expect_stop(hash, 1, (const char *[]){"#", "##", NULL}, "", 0, "beginning, spanning");
    const char *abc[] = {"abc"};
    expect_stop(abc, 1, (const char *[]){"ab", "d", NULL}, "abd", -1, "false start released");
    expect_stop(abc, 1, (const char *[]){"xab", NULL}, "xab", -1, "flush releases the tail");
    expect_stop(abc, 1, (const char *[]){"aab", "abab", "c!", NULL}, "aabab", 0, "restart inside");
    const char *aab[] = {"aab"};
    expect_stop(aab, 1, (const char *[]){"aaab", NULL}, "a", 0, "self-overlap (KMP)");
    expect_stop(aab, 1, (const char *[]){"a", "a", "a", "a", "b", NULL}, "aa", 0, "self-overlap, bytes");
    const char *two[] = {"\n\n", "User:"};
    expect_stop(two, 2, (const char *[]){"Hi\nUs", "er: yo", NULL}, "Hi\n", 1, "multiple: second");
    expect_stop(two, 2, (const char *[]){"Hi\nUs", "\n\nUser:", NULL}, "Hi\nUs", 0, "multiple: first");
    /* The stop that completes first wins, independent of the split. */
    const char *nest[] = {"abcd", "bc"};
    expect_stop(nest, 2, (const char *[]){"abcd", NULL}, "a", 1, "first to complete");
    expect_stop(nest, 2, (const char *[]){"a", "bcd", NULL}, "a", 1, "first to complete, split");
    /* Same end byte: the one starting earlier wins. */
    const char *same_end[] = {"cd", "bcd"};
    expect_stop(same_end, 2, (const char *[]){"abcde", NULL}, "a", 1, "same end, earlier start");
    /* No stops: everything passes through at once. */
    expect_stop(NULL, 0, (const char *[]){"a", "", "bc", NULL}, "abc", -1, "no stops");
    /* Empty pieces and UTF-8 stop strings. */
    const char *utf[] = {"\xe2\x80\x94" "END"};
    expect_stop(utf, 1, (const char *[]){"x\xe2", "", "\x80", "\x94", "EN", "D tail", NULL}, "x", 0,
                "utf-8 stop split mid-character");

    /* Emission is immediate when nothing can start a stop string. */
    struct stop_matcher *m = NULL;
    T_CHECK(stop_create(eos, 1, &m) == ATTND_OK, "create");
    struct stop_out o;
    T_CHECK(stop_feed(m, "hello", 5, &o) == ATTND_OK && o.len == 5 && memcmp(o.text, "hello", 5) == 0 &&
                o.stop == -1,
            "immediate emission");
    T_CHECK(stop_feed(m, "x<", 2, &o) == ATTND_OK && o.len == 1 && o.text[0] == 'x', "withhold '<'");
    T_CHECK(stop_feed(m, "/", 1, &o) == ATTND_OK && o.len == 0, "withhold '</'");
    T_CHECK(stop_feed(m, "b>", 2, &o) == ATTND_OK && o.len == 4 && memcmp(o.text, "</b>", 4) == 0,
            "release '</b>'");
    T_CHECK(stop_feed(m, NULL, 0, &o) == ATTND_OK && o.len == 0 && o.text != NULL, "empty piece");
    T_CHECK(stop_feed(m, "</s>more", 8, &o) == ATTND_OK && o.len == 0 && o.stop == 0, "hit");
    T_CHECK(stop_feed(m, "after", 5, &o) == ATTND_OK && o.len == 0 && o.stop == 0, "sticky hit");
    T_CHECK(stop_flush(m, &o) == ATTND_OK && o.len == 0 && o.stop == 0, "flush after hit");
    T_CHECK(stop_feed(m, NULL, 3, &o) == ATTND_ERR_INVALID, "NULL piece with len");
    T_CHECK(stop_feed(NULL, "a", 1, &o) == ATTND_ERR_INVALID, "NULL matcher");
    T_CHECK(stop_feed(m, "a", 1, NULL) == ATTND_ERR_INVALID, "NULL out");
    stop_destroy(m);

    /* A long piece grows the buffer. */
    static char big[100000];
    memset(big, 'z', sizeof big - 1);
    memcpy(big + 50000, "</s>", 4);
    T_CHECK(stop_create(eos, 1, &m) == ATTND_OK, "create");
    T_CHECK(stop_feed(m, "<", 1, &o) == ATTND_OK && o.len == 0, "withhold before big");
    T_CHECK(stop_feed(m, big, strlen(big), &o) == ATTND_OK && o.len == 50001 && o.stop == 0 &&
                o.text[0] == '<',
            "big piece: len %zu", o.len);
    stop_destroy(m);
}

static void test_stop_create_errors(void)
{
    struct stop_matcher *m = (struct stop_matcher *)1;
    const char *empty[] = {"ok", ""};
    T_CHECK(stop_create(empty, 2, &m) == ATTND_ERR_INVALID && m == NULL, "empty stop string");
    const char *nul[] = {NULL};
    T_CHECK(stop_create(nul, 1, &m) == ATTND_ERR_INVALID, "NULL stop string");
    T_CHECK(stop_create(NULL, 1, &m) == ATTND_ERR_INVALID, "NULL array");
    T_CHECK(stop_create(NULL, -1, &m) == ATTND_ERR_INVALID, "negative n");
    T_CHECK(stop_create(NULL, 0, NULL) == ATTND_ERR_INVALID, "NULL out");
    const char *many[STOP_MAX_STRINGS + 1];
    for (int i = 0; i <= STOP_MAX_STRINGS; i++) many[i] = "x";
    T_CHECK(stop_create(many, STOP_MAX_STRINGS + 1, &m) == ATTND_ERR_RANGE, "too many");
    T_CHECK(stop_create(many, STOP_MAX_STRINGS, &m) == ATTND_OK, "the maximum count");
    stop_destroy(m);
    static char longs[STOP_MAX_LEN + 2];
    memset(longs, 'q', STOP_MAX_LEN + 1);
    const char *lp[] = {longs};
    T_CHECK(stop_create(lp, 1, &m) == ATTND_ERR_RANGE, "too long");
    longs[STOP_MAX_LEN] = '\0';
    T_CHECK(stop_create(lp, 1, &m) == ATTND_OK, "the maximum length");
    stop_destroy(m);
    stop_destroy(NULL);
    stop_reset(NULL);
    T_CHECK(stop_flush(NULL, NULL) == ATTND_ERR_INVALID, "flush NULL");
}

/* Random texts over a small alphabet, split at random points: the result must match a naive
 * search for the first stop string to complete, whatever the split. */
static void test_stop_random(void)
{
    const char *stops[] = {"abca", "bb", "cab", "acacb"};
    const int ns = 4;
    int bad = 0;
    for (int iter = 0; iter < 3000; iter++) {
        char text[64];
        int tl = 1 + (int)(rnd_unit() * 60);
        for (int i = 0; i < tl; i++) text[i] = "abc"[(int)(rnd_unit() * 3)];
        text[tl] = '\0';
        /* Reference: the earliest end; ties by earliest start. */
        int want_stop = -1;
        size_t want_len = (size_t)tl;
        for (int e = 1; e <= tl && want_stop < 0; e++) {
            for (int j = 0; j < ns; j++) {
                int sl = (int)strlen(stops[j]);
                if (sl <= e && memcmp(text + e - sl, stops[j], (size_t)sl) == 0 &&
                    (want_stop < 0 || (size_t)(e - sl) < want_len)) {
                    want_stop = j;
                    want_len = (size_t)(e - sl);
                }
            }
        }
        char pieces_buf[64 * 2];
        const char *pieces[65];
        int np = 0;
        size_t off = 0, pb = 0;
        while ((int)off < tl) {
            size_t pl = (size_t)(rnd_unit() * 6); /* 0..5 bytes: empty pieces too */
            if (off + pl > (size_t)tl) pl = (size_t)tl - off;
            memcpy(pieces_buf + pb, text + off, pl);
            pieces_buf[pb + pl] = '\0';
            pieces[np++] = pieces_buf + pb;
            pb += pl + 1;
            off += pl;
            if (np == 64) break;
        }
        if ((int)off < tl) continue;
        pieces[np] = NULL;
        struct stop_matcher *m = NULL;
        if (stop_create(stops, ns, &m) != ATTND_OK) {
            bad++;
            break;
        }
        struct feed_result r = feed_all(m, pieces);
        stop_destroy(m);
        if (r.err || r.stop != want_stop || r.len != want_len || memcmp(r.text, text, want_len)) {
            if (bad++ < 5)
                fprintf(stderr, "text '%s': got stop %d len %zu, want %d %zu\n", text, r.stop, r.len,
                        want_stop, want_len);
        }
    }
    T_CHECK(bad == 0, "random stop tests: %d wrong", bad);
}

int main(void)
{
    test_stop_basic();
    test_stop_create_errors();
    test_stop_random();
    return t_finish("test_stopstr");
}
