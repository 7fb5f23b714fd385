/* test_fa2.c - FlashAttention-2 over paged KV (kernels/cpu/fa2.h) against a float64 reference
 * computed from the same f16-rounded inputs.
 *
 * Covered: head dims 64, 80, 128 (and 72, 36, 200 once); GQA ratios 1, 2, 7, 8 (and 4 at head dims
 * 64 and 128) with 1 or 2 KV heads; sequence lengths 1, 15, 16, 17, 63, 65, 1000 as full prefills, as chunks after a cached prefix and as decode
 * steps; all of them batched into one call; shuffled physical blocks out of a pool larger than
 * needed whose unused blocks and tail slots hold NaN; decode split into 1..8 parts and more parts
 * than blocks; scores x30 (online-softmax rescaling); F16 and F32 pools with a padded block
 * stride; fa2_ref, fa2_attend on pools of 1, 2 and 3 threads with every ISA this CPU has, and
 * fa2_run + fa2_reduce as pool jobs; output written in place over q.
 *
 * Pass criteria per sequence: NMSE = sum err^2 / sum ref^2 <= 5e-4, and per element
 * |err| <= 2e-3 + 2e-3 |ref| (a NaN anywhere fails). */
#include "kernels/cpu/fa2.h"

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/threadpool.h"

#include "tests/unit/testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------ */

#include "tests/unit/fa2_cases.h"
}

/* ------------------------------------------------------------------------------------------
 * Running the kernel
 * ------------------------------------------------------------------------------------------ */

static struct tpool *g_pools[4]; /* index = thread count */

/* M_REF: fa2_ref; M_POOL: fa2_attend (dynamic claiming); M_STATIC: fa2_run and fa2_reduce as
 * two pool jobs (the fixed, cost-balanced partition). */
enum mode { M_REF, M_POOL, M_STATIC };

static void static_run_cb(void *arg, int ith, int nth) { fa2_run(arg, ith, nth); }
static void static_reduce_cb(void *arg, int ith, int nth) { fa2_reduce(arg, ith, nth); }

/* Runs the batch once (fresh NaN-filled outputs and scratch) and checks it. in_place: out = q
 * (a copy of it). Returns the number of bad sequences. */
static int run_check(struct batch *b, enum mode mode, int threads, int n_split, int in_place, const char *tag)
{
    float **out = batch_outputs(b, in_place);
    struct fa2_args a = batch_args(b, n_split);
    const size_t ns = fa2_scratch_floats(&a);
    float *scratch = ns ? t_xmalloc(ns * sizeof(float)) : NULL;
    if (scratch) fill_nan(scratch, ns);
    a.scratch = scratch;
    if (mode == M_REF) {
        fa2_ref(&a);
    } else if (mode == M_POOL) {
        fa2_attend(g_pools[threads], &a);
    } else {
        tpool_run(g_pools[threads], static_run_cb, &a);
        if (fa2_needs_reduce(&a)) tpool_run(g_pools[threads], static_reduce_cb, &a);
    }

    char what[160];
    snprintf(what, sizeof what, "%s %s%s thr %d split %d%s", tag,
             mode == M_REF ? "fa2_ref" : cpu_isa_name(cpu_kernels_init()), mode == M_STATIC ? " static" : "",
             threads, n_split, in_place ? " in-place" : "");
    int bad = check_out(b, out, what);
    batch_outputs_free(b, out);
    free(scratch);
    return bad;
}

static enum cpu_isa g_max_isa;

/* fa2_ref, then every ISA through fa2_attend on pools of 1, 2 and 3 threads, and the best ISA
 * through fa2_run's static partition on 2 or 3 threads. The scalar ISA runs the same job kernel
 * as fa2_ref and the partitioning does not depend on the ISA, so it gets one pool size per call
 * (rotating); light: one pool size per ISA (rotating). */
static void run_all_modes(struct batch *b, int n_split, int light, const char *tag)
{
    static int turn = 0;
    run_check(b, M_REF, 1, n_split, 0, tag);
    for (int isa = CPU_ISA_SCALAR; isa <= (int)g_max_isa; isa++) {
        cpu_kernels_set_isa((enum cpu_isa)isa);
        const int one = isa == CPU_ISA_SCALAR || light;
        for (int th = 1; th <= 3; th++)
            if (!one || th == 1 + turn % 3) run_check(b, M_POOL, th, n_split, 0, tag);
        if (isa == (int)g_max_isa) run_check(b, M_STATIC, 2 + turn % 2, n_split, 0, tag);
        turn++;
    }
    cpu_kernels_set_isa(g_max_isa);
}

/* ------------------------------------------------------------------------------------------
 * Cases
 * ------------------------------------------------------------------------------------------ */

static const int g_lens[] = {1, 15, 16, 17, 63, 65, 1000};
#define N_LENS ((int)(sizeof g_lens / sizeof g_lens[0]))

/* Every length as a prefill (without the 1000 one unless long), as a chunk after a cached prefix
 * and as a decode step, all in one batch. */
static int mixed_defs(struct seqdef *defs, int long_prefill)
{
    int n = 0;
    for (int i = 0; i < N_LENS; i++) {
        const int L = g_lens[i];
        if (L < 1000 || long_prefill) defs[n++] = (struct seqdef){0, L};
        if (L > 1) {
            const int chunk = L >= 1000 ? 9 : 1 + L / 3;
            defs[n++] = (struct seqdef){L - chunk, chunk};
        }
        defs[n++] = (struct seqdef){L - 1, 1};
    }
    defs[n++] = (struct seqdef){5, 0}; /* an empty entry is skipped */
    return n;
}

static void test_mixed(void)
{
    static const int dims[] = {64, 80, 128};
    static const int cfg[][2] = {{2, 1}, {1, 2}, {1, 7}, {2, 8}}; /* n_head_kv, group */
    struct seqdef defs[3 * N_LENS + 1];
    int combo = 0;
    for (int di = 0; di < 3; di++) {
        for (int ci = 0; ci < 4; ci++) {
            for (int ti = 0; ti < 2; ti++, combo++) {
                const enum tensor_type kvt = ti ? TENSOR_F32 : TENSOR_F16;
                /* the 1000-token prefill only in two combinations: it dominates the run time */
                const int long_prefill = (di == 2 && ci == 2 && ti == 0) || (di == 1 && ci == 0 && ti == 1);
                const float mul = combo % 3 == 1 || (long_prefill && di == 2) ? 30.0f : 1.0f;
                const int n = mixed_defs(defs, long_prefill);
                struct batch b;
                batch_init(&b, dims[di], cfg[ci][0], cfg[ci][1], kvt, defs, n, mul);
                char tag[64];
                snprintf(tag, sizeof tag, "mixed x%g", (double)mul);
                run_all_modes(&b, 1 + combo % 4, long_prefill, tag);
                if (combo % 5 == 0) run_check(&b, M_POOL, 2, 2, 1, tag);
                batch_free(&b);
            }
        }
    }
}

/* Decode steps only, split into 1..8 parts and into more parts than blocks. */
static void test_decode_splits(void)
{
    static const int dims[] = {64, 80, 128};
    static const int cfg[][2] = {{2, 1}, {1, 2}, {1, 7}, {2, 8}, {1, 4}};
    static const int splits[] = {1, 2, 3, 4, 5, 6, 7, 8, 100};
    struct seqdef defs[N_LENS];
    for (int i = 0; i < N_LENS; i++) defs[i] = (struct seqdef){g_lens[i] - 1, 1};
    int combo = 0;
    for (int di = 0; di < 3; di++) {
        for (int ci = 0; ci < 5; ci++, combo++) {
            const enum tensor_type kvt = combo % 2 ? TENSOR_F32 : TENSOR_F16;
            const float mul = combo % 2 ? 30.0f : 1.0f;
            struct batch b;
            batch_init(&b, dims[di], cfg[ci][0], cfg[ci][1], kvt, defs, N_LENS, mul);
            char tag[64];
            snprintf(tag, sizeof tag, "decode x%g", (double)mul);
            for (size_t si = 0; si < sizeof splits / sizeof splits[0]; si++)
                run_all_modes(&b, splits[si], si % 3 != 0, tag);
            batch_free(&b);
        }
    }
}

/* One mixed batch per head shape {D, n_head_kv, group, f32 KV, x30 values}, through every mode. */
struct dims_case {
    int D, n_head_kv, group, f32, big;
};

static void run_dims(const struct dims_case *c, int n_cases, const char *tag)
{
    struct seqdef defs[3 * N_LENS + 1];
    for (int i = 0; i < n_cases; i++) {
        const int n = mixed_defs(defs, 0);
        struct batch b;
        batch_init(&b, c[i].D, c[i].n_head_kv, c[i].group, c[i].f32 ? TENSOR_F32 : TENSOR_F16, defs, n,
                   c[i].big ? 30.0f : 1.0f);
        run_all_modes(&b, 1 + i, 1, tag);
        batch_free(&b);
    }
}

/* Head dims that are not multiples of 16 (AVX-512: masked last chunk) or of 8 (AVX2: scalar
 * fallback). */
static void test_odd_dims(void)
{
    static const struct dims_case c[] = {{72, 1, 4, 0, 0}, {36, 2, 1, 1, 0}, {200, 1, 2, 0, 1}};
    run_dims(c, 3, "odd dims");
}

/* The ends of the AVX-512 outer-product path (16 rows or more, head_dim % 16 == 0): head_dim 16
 * with GQA 8, 32 without GQA (rows are tokens), and 256 with a group of 16 (one token fills a
 * job: decode steps, split ones included, take the path too). */
static void test_outer_dims(void)
{
    static const struct dims_case c[] = {{16, 2, 8, 0, 0}, {32, 1, 1, 0, 1}, {256, 1, 16, 1, 0}};
    run_dims(c, 3, "outer dims");
}

/* GQA 4:1 (a decode step's 4 query rows fill one 4-row block: the 4 rows x 3 keys score path of
 * the AVX2 kernel) at the head dims of real models, F16 pools, decode split 1 and 3. */
static void test_gqa4(void)
{
    static const int dims[] = {64, 128};
    struct seqdef defs[3 * N_LENS + 1];
    for (int i = 0; i < 2; i++) {
        const int n = mixed_defs(defs, 0);
        struct batch b;
        batch_init(&b, dims[i], 2, 4, TENSOR_F16, defs, n, i ? 30.0f : 1.0f);
        run_all_modes(&b, 1, 1, "gqa 4");
        run_all_modes(&b, 3, 1, "gqa 4");
        batch_free(&b);
    }
}

/* The scratch size and the reduce flag follow the parts actually used. */
static void test_scratch_size(void)
{
    struct fa2_seq seqs[3] = {
        {.n_q = 1, .pos0 = 40},  /* 3 blocks */
        {.n_q = 5, .pos0 = 100}, /* prefill chunk: never split */
        {.n_q = 1, .pos0 = 0},   /* 1 block: never split */
    };
    struct fa2_args a = {.n_head = 8, .n_head_kv = 2, .head_dim = 64, .kv_type = TENSOR_F16, .seqs = seqs, .n_seqs = 3};
    a.n_split = 1;
    T_CHECK(fa2_scratch_floats(&a) == 0 && !fa2_needs_reduce(&a), "no split");
    a.n_split = 2;
    T_CHECK(fa2_scratch_floats(&a) == 2 * 8 * 66 && fa2_needs_reduce(&a), "split 2: %zu", fa2_scratch_floats(&a));
    a.n_split = 8;
    T_CHECK(fa2_scratch_floats(&a) == 3 * 8 * 66, "split 8 capped at 3 blocks: %zu", fa2_scratch_floats(&a));
}

/* The measured choice: fa2_tune picks an available variant and fa2_run then uses it; an ISA cap
 * below it falls back to the rule; fa2_forget restores the rule. The variants' results are the
 * ISA loops' concern above (each against fa2_ref). */
static void test_tune_choice(void)
{
    fa2_forget();
    const enum fa2_variant rule64 = fa2_variant_of(64, FA2_PREFILL);
    T_CHECK(rule64 == (g_max_isa >= CPU_ISA_AVX512 ? FA2_VAR_AVX512 : g_max_isa >= CPU_ISA_AVX2 ? FA2_VAR_AVX2 : FA2_VAR_SCALAR),
            "rule for head 64: %s", fa2_variant_str(rule64));
    T_CHECK(fa2_variant_of(64, FA2_DECODE) == rule64, "the rule is the same for both phases");
    T_CHECK(fa2_variant_of(60, FA2_PREFILL) != FA2_VAR_AVX2, "avx2 never for a head size not a multiple of 8");
    fa2_tune(64, 8, 2);
    enum fa2_variant v[FA2_N_PHASES];
    for (int ph = 0; ph < FA2_N_PHASES; ph++) {
        v[ph] = fa2_variant_of(64, (enum fa2_phase)ph);
        T_CHECK(fa2_variant_available(v[ph], 64), "tuned variant %s is available", fa2_variant_str(v[ph]));
        T_CHECK(!strcmp(fa2_variant_name(64, (enum fa2_phase)ph), fa2_variant_str(v[ph])), "fa2_run uses the choice");
    }
    fa2_tune(64, 8, 2);
    T_CHECK(fa2_variant_of(64, FA2_PREFILL) == v[FA2_PREFILL] && fa2_variant_of(64, FA2_DECODE) == v[FA2_DECODE],
            "a second tune keeps the first choice");
    fa2_tune(0, 8, 2);
    fa2_tune(48, 8, 3);
    T_CHECK(fa2_variant_of(48, FA2_PREFILL) == fa2_variant_of(48, FA2_DECODE), "bad shapes: no measurement");
    cpu_kernels_set_isa(CPU_ISA_SCALAR);
    T_CHECK(fa2_variant_of(64, FA2_PREFILL) == FA2_VAR_SCALAR && fa2_variant_of(64, FA2_DECODE) == FA2_VAR_SCALAR,
            "the ISA cap wins over the choice");
    cpu_kernels_set_isa(g_max_isa);
    fa2_forget();
    T_CHECK(fa2_variant_of(64, FA2_PREFILL) == rule64 && fa2_variant_of(64, FA2_DECODE) == rule64, "forget: the rule again");
    T_CHECK(!strcmp(fa2_variant_str((enum fa2_variant)9), "unknown"), "names");
}

int main(void)
{
    g_max_isa = cpu_kernels_set_isa(CPU_ISA_AMX);
    fprintf(stderr, "test_fa2: ISAs scalar..%s\n", cpu_isa_name(g_max_isa));
    for (int t = 1; t <= 3; t++) {
        if (tpool_create(t, &g_pools[t]) != ATTND_OK) {
            fprintf(stderr, "tpool_create(%d) failed\n", t);
            return 1;
        }
    }
    test_scratch_size();
    test_mixed();
    test_decode_splits();
    test_odd_dims();
    test_outer_dims();
    test_gqa4();
    test_tune_choice();
    for (int t = 1; t <= 3; t++) tpool_destroy(g_pools[t]);
    return t_finish("test_fa2");
}
