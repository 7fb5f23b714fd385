/* fuzz_grammar.c - the grammar compilers and the matcher on hostile input (issue 34).
 * Input: byte 0 picks the front end (even: GBNF text, odd: a JSON schema); the rest up to the
 * first 0xFF byte is the grammar or schema, and what follows is a text to match. Contracts
 * (gbnf.h, json_schema.h, gram_match.h):
 *  - a refusal always comes with a message, and a success with a grammar;
 *  - the GBNF a schema compiles to is always well-formed: jsg_compile may refuse it only as an
 *    empty language or a $ref cycle, never as a syntax error;
 *  - a rejected byte leaves the matcher as it was (accepts_end unchanged, the next bytes judged
 *    the same), and a clone judges the rest of the text like the original. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "attnd/gbnf.h"
#include "attnd/gram_match.h"
#include "attnd/grammar.h"
#include "attnd/json_schema.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_quiet();
    return 0;
}

/* Feeds text to m byte by byte, checking that a rejection changes nothing; returns how many
 * bytes were accepted. */
static size_t feed(struct gmatch *m, const uint8_t *t, size_t n)
{
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        bool end = gmatch_accepts_end(m);
        int32_t st = gmatch_state(m);
        uint64_t epoch = gmatch_epoch(m);
        if (gmatch_accept_byte(m, t[i])) {
            ok++;
        } else {
            FZ_REQUIRE(gmatch_accepts_end(m) == end, "a rejected byte changed the end flag");
            FZ_REQUIRE(gmatch_state(m) == st || gmatch_epoch(m) != epoch, "a rejected byte changed the state");
        }
    }
    return ok;
}

static void check_text(const struct gram *g, const uint8_t *t, size_t n)
{
    struct gmatch *m = NULL, *c = NULL;
    if (gmatch_create(g, &m) != ATTND_OK) return;
    size_t half = n / 2;
    feed(m, t, half);
    if (gmatch_clone(m, &c) == ATTND_OK) {
        size_t a = feed(m, t + half, n - half), b = feed(c, t + half, n - half);
        FZ_REQUIRE(a == b, "a clone judges the text differently");
        FZ_REQUIRE(gmatch_accepts_end(m) == gmatch_accepts_end(c), "a clone ends differently");
    }
    gmatch_destroy(c);
    gmatch_destroy(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const uint8_t *src = data + 1, *sep = memchr(src, 0xff, size - 1);
    size_t n_src = sep ? (size_t)(sep - src) : size - 1;
    const uint8_t *text = sep ? sep + 1 : data + size;
    size_t n_text = (size_t)(data + size - text);
    char err[512] = "";
    struct gram *g = NULL;
    attnd_status st;
    if (data[0] & 1) {
        st = jsg_compile((const char *)src, n_src, &g, err, sizeof err);
        FZ_REQUIRE(st != ATTND_ERR_INVALID || (strncmp(err, "json schema: gbnf:", 18) &&
                                               strncmp(err, "json schema: grammar:", 21)),
                   "the schema's GBNF is malformed");
    } else {
        st = gbnf_parse((const char *)src, n_src, &g, err, sizeof err);
    }
    FZ_REQUIRE((st == ATTND_OK) == (g != NULL), "status and grammar disagree");
    FZ_REQUIRE(st == ATTND_OK || err[0], "a refusal without a message");
    if (g) check_text(g, text, n_text > 4096 ? 4096 : n_text);
    gram_destroy(g);
    return 0;
}
