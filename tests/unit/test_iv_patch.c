/* test_iv_patch.c - the patch intervention and one-position captures (intervene.h) below the
 * HTTP layer: the JSON form (each member checked, errors naming the field path, the vector's
 * width the site's), iv_add_patch equal to the parsed form (same fingerprint), fingerprints that
 * tell positions and vectors apart, a clone that keeps the vector, iv_apply_patch writing that
 * position only (z with a head: that head's slice only), and iv_add_capture_at copying one row.
 * Exits 0 pass, 1 fail. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnd/intervene.h"
#include "attnd/model.h"
#include "tests/unit/testutil.h"

static const struct model_hparams HP = {.n_embd = 4, .n_layer = 2, .n_head = 2, .n_head_kv = 1, .head_dim = 2};

static attnd_status parse(const char *js, struct iv_set **out, char *err, size_t n)
{
    cJSON *a = cJSON_Parse(js);
    attnd_status st = iv_parse_json(a, &HP, 64, "interventions", out, err, n);
    cJSON_Delete(a);
    return st;
}

static void test_json(void)
{
    char err[256] = "";
    struct iv_set *s = NULL, *t = NULL, *u = NULL;
    const char *ok = "[{\"kind\":\"patch\",\"site\":\"mlp_out\",\"layer\":1,\"position\":3,\"vector\":[1,2,3,4]},"
                     "{\"kind\":\"patch\",\"site\":\"z\",\"layer\":0,\"head\":1,\"position\":0,\"vector\":[5,6]}]";
    T_CHECK(parse(ok, &s, err, sizeof err) == ATTND_OK && s && s->n == 2, "parse: %s", err);
    if (!s) return;
    const struct fwd_intervention *v = s->items;
    T_CHECK(v[0].kind == IV_PATCH && v[0].site == IV_SITE_MLP_OUT && v[0].head == -1 && v[0].position == 3 &&
                v[0].width == 4 && v[0].vector[3] == 4.0f, "mlp_out patch");
    T_CHECK(v[1].site == IV_SITE_Z && v[1].head == 1 && v[1].width == 2 && v[1].vector[1] == 6.0f, "z patch");
    T_CHECK(iv_layer_hooks(s, 1) == IV_AT_MLP_OUT && iv_layer_hooks(s, 0) == IV_AT_Z, "hooks");
    /* the same two built by hand */
    const float a[4] = {1, 2, 3, 4}, b[2] = {5, 6}, c[4] = {1, 2, 3, 5};
    T_CHECK(iv_create(&HP, &t) == ATTND_OK && !iv_add_patch(t, IV_SITE_MLP_OUT, 1, -1, 3, a) &&
                !iv_add_patch(t, IV_SITE_Z, 0, 1, 0, b) && t->fingerprint == s->fingerprint,
            "iv_add_patch == the JSON form");
    T_CHECK(iv_clone(s, &u) == ATTND_OK && u && u->fingerprint == s->fingerprint && u->items[1].vector[1] == 6.0f,
            "clone keeps the vector");
    iv_destroy(u);
    u = NULL;
    T_CHECK(iv_create(&HP, &u) == ATTND_OK && !iv_add_patch(u, IV_SITE_MLP_OUT, 1, -1, 3, c) &&
                !iv_add_patch(u, IV_SITE_Z, 0, 1, 0, b) && u->fingerprint != s->fingerprint, "vector in the fingerprint");
    iv_destroy(u);
    u = NULL;
    T_CHECK(iv_create(&HP, &u) == ATTND_OK && !iv_add_patch(u, IV_SITE_MLP_OUT, 1, -1, 2, a) &&
                !iv_add_patch(u, IV_SITE_Z, 0, 1, 0, b) && u->fingerprint != s->fingerprint, "position in the fingerprint");
    T_CHECK(iv_add_patch(u, IV_SITE_RESID_PRE, 0, 1, 0, a) == ATTND_ERR_INVALID &&
                iv_add_patch(u, IV_SITE_Z, 2, -1, 0, a) == ATTND_ERR_INVALID, "iv_add_patch: bad head, layer");
    iv_destroy(s), iv_destroy(t), iv_destroy(u);
    static const struct {
        const char *js, *field;
    } bad[] = {
        {"[{\"kind\":\"patch\",\"site\":\"resid\",\"layer\":0,\"position\":0,\"vector\":[1,2,3,4]}]", "[0].site"},
        {"[{\"kind\":\"patch\",\"site\":\"attn_out\",\"layer\":0,\"position\":0,\"vector\":[1,2]}]", "[0].vector"},
        {"[{\"kind\":\"patch\",\"site\":\"attn_out\",\"layer\":0,\"head\":0,\"position\":0,\"vector\":[1,2,3,4]}]",
         "[0].head"},
        {"[{\"kind\":\"patch\",\"site\":\"z\",\"layer\":0,\"position\":64,\"vector\":[1,2,3,4]}]", "[0].position"},
        {"[{\"kind\":\"patch\",\"site\":\"z\",\"layer\":0,\"vector\":[1,2,3,4]}]", "[0].position"},
        {"[{\"kind\":\"patch\",\"site\":\"z\",\"layer\":0,\"head\":2,\"position\":0,\"vector\":[1,2]}]", "[0].head"},
        {"[{\"kind\":\"patch\",\"site\":\"z\",\"layer\":0,\"position\":0,\"vector\":[1,2,3,4],\"scale\":1}]",
         "[0].scale"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        s = NULL;
        err[0] = 0;
        T_CHECK(parse(bad[i].js, &s, err, sizeof err) == ATTND_ERR_INVALID && !s && strstr(err, bad[i].field),
                "bad %zu: %s", i, err);
    }
}

static void test_apply(void)
{
    struct iv_set *s = NULL;
    const float v4[4] = {9, 9, 9, 9}, v2[2] = {7, 8};
    float rows[3 * 4], z[3 * 4], cap[4] = {0};
    const int32_t pos[3] = {4, 5, 6};
    for (int i = 0; i < 12; i++) rows[i] = z[i] = (float)i;
    T_CHECK(iv_create(&HP, &s) == ATTND_OK && !iv_add_patch(s, IV_SITE_ATTN_OUT, 1, -1, 5, v4) &&
                !iv_add_patch(s, IV_SITE_Z, 1, 1, 6, v2) && !iv_add_capture_at(s, IV_SITE_ATTN_OUT, 1, -1, cap, 5),
            "set");
    if (!s) return;
    iv_apply_patch(s, IV_SITE_ATTN_OUT, 0, rows, 4, pos, 3); /* another layer: nothing */
    iv_apply_patch(s, IV_SITE_ATTN_OUT, 1, rows, 4, pos, 3);
    iv_capture(s, IV_SITE_ATTN_OUT, 1, rows, 4, pos, 3);
    int ok = 1;
    for (int i = 0; i < 12; i++) ok &= rows[i] == (i >= 4 && i < 8 ? 9.0f : (float)i);
    T_CHECK(ok, "attn_out patched at position 5 only");
    T_CHECK(cap[0] == 9.0f && cap[3] == 9.0f, "capture of position 5: %g", cap[0]);
    iv_apply_z(s, 1, z, 4, pos, 3);
    ok = 1;
    for (int i = 0; i < 12; i++) ok &= z[i] == (i == 10 ? 7.0f : i == 11 ? 8.0f : (float)i);
    T_CHECK(ok, "z patched at head 1 of position 6 only");
    iv_destroy(s);
}

int main(void)
{
    test_json();
    test_apply();
    printf("test_iv_patch: %d checks, %d failed\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
