/* test_vk_fa2.c - the Vulkan FlashAttention-2 shaders (kernels/vulkan/vk_fa2.h) against a float64
 * reference computed from the same f16-rounded inputs (the batch builder of test_fa2.c).
 *
 * Covered: head dims 64, 80, 128 (and 36, 200 once, first pass only); GQA ratios 1, 2, 7, 8 with 1 or 2 KV heads;
 * lengths 1, 15, 16, 17, 63, 65, 1000 as full prefills (1000 in two combinations), as chunks after a
 * cached prefix and as decode steps, batched into one call; shuffled physical blocks whose unused
 * blocks and tail slots hold NaN; F16 and F32 pools (F32 with a padded block stride); decode split
 * into 1..8 parts and more parts than blocks; scores x30.
 *
 * Runs with the validation layer on (ATTND_VK_VALIDATION=1) and requires zero validation errors.
 * Runs once with lavapipe's default settings, then re-executes itself with
 * LP_NATIVE_VECTOR_WIDTH=128 (subgroup size 4 instead of 8 on lavapipe) on a subset: head dims
 * 64 and 128, GQA 1 and 7 (the shaders are compiled again for it, which dominates the time). No Vulkan device is a FAIL:
 * lavapipe (mesa-vulkan-drivers) is a build dependency.
 *
 * Under ASan the test re-executes itself with detect_leaks=0 (a leak inside the driver stack).
 *
 * Pass criteria per sequence: NMSE <= 5e-4 and |err| <= 2e-3 + 2e-3 |ref| (a NaN fails). */
#include "kernels/vulkan/vk_fa2.h"

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/vulkan/vk_device.h"

#include "tests/unit/testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------ */

static uint64_t g_rng = 0x2545f4914f6cdd1dULL;

static uint64_t rnd_u64(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

static double rnd_unit(void) { return (double)(rnd_u64() >> 11) * 0x1.0p-53; }

static float rnd_sym(void) { return (float)(2.0 * rnd_unit() - 1.0); }

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static void fill_nan(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = NAN;
}

/* ------------------------------------------------------------------------------------------
 * A test batch: pools, sequences, reference
 * ------------------------------------------------------------------------------------------ */

struct seqdef {
    int pos0, n_q;
};

struct batch {
    int n_head, n_head_kv, D;
    enum tensor_type kv_type;
    size_t esz, block_stride; /* bytes; padded beyond the dense size */
    int n_blocks;
    unsigned char *k, *v;     /* pools */
    int n_seqs;
    struct fa2_seq *seqs;
    struct seqdef *def;
    float **qv;               /* per sequence (n_q, n_head, D) */
    double **ref;             /* per sequence (n_q, n_head, D) */
    float *kf, *vf;           /* per sequence: the values stored, by logical position */
    size_t *kv_off;           /* per sequence: offset into kf/vf (floats) */
    float scale;
};

static size_t elem_off(const struct batch *b, int phys, int kvh, int slot, int d)
{
    return (size_t)phys * b->block_stride + (((size_t)kvh * FA2_BLOCK + (size_t)slot) * b->D + (size_t)d) * b->esz;
}

static void store_kv(const struct batch *b, unsigned char *pool, size_t off, float x)
{
    if (b->kv_type == TENSOR_F16) {
        uint16_t h = cpu_f32_to_f16(x);
        memcpy(pool + off, &h, 2);
    } else {
        memcpy(pool + off, &x, 4);
    }
}

/* Builds the pools (every slot NaN first), shuffled block tables, queries, float64 reference. */
static void batch_init(struct batch *b, int D, int n_head_kv, int group, enum tensor_type kvt, const struct seqdef *defs,
                       int n_seqs, float logit_mul)
{
    memset(b, 0, sizeof *b);
    b->D = D;
    b->n_head_kv = n_head_kv;
    b->n_head = n_head_kv * group;
    b->kv_type = kvt;
    b->esz = kvt == TENSOR_F16 ? 2 : 4;
    b->block_stride = (size_t)n_head_kv * FA2_BLOCK * D * b->esz + (kvt == TENSOR_F32 ? 64 : 0);
    b->n_seqs = n_seqs;
    b->scale = logit_mul / sqrtf((float)D);

    int need = 0;
    for (int s = 0; s < n_seqs; s++) need += (defs[s].pos0 + defs[s].n_q + FA2_BLOCK - 1) / FA2_BLOCK;
    b->n_blocks = need + 3 + (int)(rnd_u64() % 5);
    int *perm = xmalloc((size_t)b->n_blocks * sizeof(int));
    for (int i = 0; i < b->n_blocks; i++) perm[i] = i;
    for (int i = b->n_blocks - 1; i > 0; i--) {
        int j = (int)(rnd_u64() % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }

    const size_t pool_bytes = (size_t)b->n_blocks * b->block_stride;
    b->k = xmalloc(pool_bytes);
    b->v = xmalloc(pool_bytes);
    if (kvt == TENSOR_F16) {
        const uint16_t nanh = 0x7e00;
        for (size_t i = 0; i < pool_bytes / 2; i++) {
            memcpy(b->k + 2 * i, &nanh, 2);
            memcpy(b->v + 2 * i, &nanh, 2);
        }
    } else {
        fill_nan((float *)b->k, pool_bytes / 4);
        fill_nan((float *)b->v, pool_bytes / 4);
    }

    b->seqs = xmalloc((size_t)n_seqs * sizeof *b->seqs);
    b->def = xmalloc((size_t)n_seqs * sizeof *b->def);
    b->qv = xmalloc((size_t)n_seqs * sizeof *b->qv);
    b->ref = xmalloc((size_t)n_seqs * sizeof *b->ref);
    b->kv_off = xmalloc((size_t)n_seqs * sizeof *b->kv_off);
    size_t kv_total = 0;
    for (int s = 0; s < n_seqs; s++) {
        b->kv_off[s] = kv_total;
        kv_total += (size_t)(defs[s].pos0 + defs[s].n_q) * n_head_kv * D;
    }
    b->kf = xmalloc(kv_total * sizeof(float));
    b->vf = xmalloc(kv_total * sizeof(float));

    int next = 0;
    for (int s = 0; s < n_seqs; s++) {
        const struct seqdef *sd = &defs[s];
        const int len = sd->pos0 + sd->n_q, nb = (len + FA2_BLOCK - 1) / FA2_BLOCK;
        int32_t *bt = xmalloc((size_t)(nb ? nb : 1) * sizeof(int32_t));
        for (int i = 0; i < nb; i++) bt[i] = perm[next++];
        /* keys and values, f16-rounded: the reference sees exactly what the pool holds */
        float *kf = b->kf + b->kv_off[s], *vf = b->vf + b->kv_off[s]; /* (len, n_head_kv, D) */
        for (int p = 0; p < len; p++)
            for (int h = 0; h < n_head_kv; h++)
                for (int d = 0; d < D; d++) {
                    const size_t i = ((size_t)p * n_head_kv + h) * D + d;
                    kf[i] = cpu_f16_to_f32(cpu_f32_to_f16(rnd_sym()));
                    vf[i] = cpu_f16_to_f32(cpu_f32_to_f16(rnd_sym()));
                    const size_t off = elem_off(b, bt[p / FA2_BLOCK], h, p % FA2_BLOCK, d);
                    store_kv(b, b->k, off, kf[i]);
                    store_kv(b, b->v, off, vf[i]);
                }
        const size_t nqf = (size_t)sd->n_q * b->n_head * D;
        float *q = xmalloc(nqf * sizeof(float));
        for (size_t i = 0; i < nqf; i++) q[i] = cpu_f16_to_f32(cpu_f32_to_f16(rnd_sym()));
        b->qv[s] = q;
        b->def[s] = *sd;
        b->seqs[s] = (struct fa2_seq){.q = q, .out = NULL, .n_q = sd->n_q, .pos0 = sd->pos0, .block_table = bt};

        /* float64 reference: plain softmax over keys 0..pos0+i */
        double *ref = xmalloc((nqf ? nqf : 1) * sizeof(double));
        double *w = xmalloc((size_t)(len ? len : 1) * sizeof(double));
        for (int i = 0; i < sd->n_q; i++) {
            for (int h = 0; h < b->n_head; h++) {
                const int kvh = h / group, nk = sd->pos0 + i + 1;
                const float *qr = q + ((size_t)i * b->n_head + h) * D;
                double mx = -INFINITY, sum = 0.0;
                for (int p = 0; p < nk; p++) {
                    const float *kr = kf + ((size_t)p * n_head_kv + kvh) * D;
                    double acc = 0.0;
                    for (int d = 0; d < D; d++) acc += (double)qr[d] * (double)kr[d];
                    w[p] = acc * (double)b->scale;
                    if (w[p] > mx) mx = w[p];
                }
                for (int p = 0; p < nk; p++) {
                    w[p] = exp(w[p] - mx);
                    sum += w[p];
                }
                double *o = ref + ((size_t)i * b->n_head + h) * D;
                for (int d = 0; d < D; d++) o[d] = 0.0;
                for (int p = 0; p < nk; p++) {
                    const float *vr = vf + ((size_t)p * n_head_kv + kvh) * D;
                    for (int d = 0; d < D; d++) o[d] += w[p] / sum * (double)vr[d];
                }
            }
        }
        free(w);
        b->ref[s] = ref;
    }
    free(perm);
}

static void batch_free(struct batch *b)
{
    for (int s = 0; s < b->n_seqs; s++) {
        free((void *)b->seqs[s].block_table);
        free(b->qv[s]);
        free(b->ref[s]);
    }
    free(b->seqs);
    free(b->def);
    free(b->qv);
    free(b->ref);
    free(b->kv_off);
    free(b->kf);
    free(b->vf);
    free(b->k);
    free(b->v);
}

/* Compares every sequence's output with the reference; returns the number of bad sequences. */
static int check_out(const struct batch *b, float *const *out, const char *what)
{
    int bad_seqs = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const size_t n = (size_t)b->def[s].n_q * b->n_head * b->D;
        double se = 0.0, sr = 0.0;
        size_t first_bad = SIZE_MAX, n_bad = 0;
        for (size_t i = 0; i < n; i++) {
            const double r = b->ref[s][i], g = (double)out[s][i], e = g - r;
            if (!(fabs(e) <= 2e-3 + 2e-3 * fabs(r))) {
                if (first_bad == SIZE_MAX) first_bad = i;
                n_bad++;
            }
            se += e * e;
            sr += r * r;
        }
        const double nmse = sr > 0 ? se / sr : se;
        const int ok = n_bad == 0 && nmse <= 5e-4;
        if (!ok) {
            bad_seqs++;
            if (bad_seqs <= 3) {
                const size_t i = first_bad == SIZE_MAX ? 0 : first_bad;
                const size_t per_tok = (size_t)b->n_head * b->D;
                T_CHECK(ok,
                        "%s: seq %d (pos0 %d, n_q %d) D %d heads %d/%d %s: nmse %.3g, %zu bad elements; "
                        "first at tok %zu head %zu d %zu: got %.7g want %.7g",
                        what, s, b->def[s].pos0, b->def[s].n_q, b->D, b->n_head, b->n_head_kv,
                        tensor_type_name(b->kv_type), nmse, n_bad, i / per_tok, i % per_tok / b->D, i % b->D,
                        (double)out[s][i], b->ref[s][i]);
            }
        } else {
            T_CHECK(ok, "ok");
        }
    }
    return bad_seqs;
}

/* ------------------------------------------------------------------------------------------
 * Running the shaders
 * ------------------------------------------------------------------------------------------ */

static struct vkb_device *g_dev;
static int g_light; /* second pass: a subset (every pipeline is compiled again for it) */
static struct vkb_fa2 *g_fa2;

/* Runs the batch once on the device (NaN-filled outputs, or in place over a copy of q) and
 * checks it. Returns the number of bad sequences. */
static int run_check(struct batch *b, int n_split, int in_place, const char *tag)
{
    float **out = xmalloc((size_t)b->n_seqs * sizeof *out);
    for (int s = 0; s < b->n_seqs; s++) {
        const size_t n = (size_t)b->def[s].n_q * b->n_head * b->D;
        out[s] = xmalloc(n * sizeof(float));
        if (in_place)
            memcpy(out[s], b->qv[s], n * sizeof(float));
        else
            fill_nan(out[s], n);
        b->seqs[s].out = out[s];
        b->seqs[s].q = in_place ? out[s] : b->qv[s];
    }
    struct fa2_args a = {
        .n_head = b->n_head,
        .n_head_kv = b->n_head_kv,
        .head_dim = b->D,
        .kv_type = b->kv_type,
        .k = b->k,
        .v = b->v,
        .block_stride = b->kv_type == TENSOR_F32 ? b->block_stride : 0,
        .n_blocks = b->n_blocks,
        .scale = b->scale,
        .seqs = b->seqs,
        .n_seqs = b->n_seqs,
        .n_split = n_split,
    };
    char what[160];
    snprintf(what, sizeof what, "%s vulkan split %d%s", tag, n_split, in_place ? " in-place" : "");
    attnd_status st = vkb_fa2_attend(g_fa2, &a, NULL);
    int bad;
    if (st != ATTND_OK) {
        T_CHECK(st == ATTND_OK, "%s: vkb_fa2_attend: %s: %s", what, attnd_status_str(st), vkb_last_error());
        bad = b->n_seqs;
    } else {
        bad = check_out(b, out, what);
    }
    for (int s = 0; s < b->n_seqs; s++) {
        free(out[s]);
        b->seqs[s].q = b->qv[s];
        b->seqs[s].out = NULL;
    }
    free(out);
    return bad;
}

/* ------------------------------------------------------------------------------------------
 * Cases
 * ------------------------------------------------------------------------------------------ */

static const int g_lens[] = {1, 15, 16, 17, 63, 65, 1000};
#define N_LENS ((int)(sizeof g_lens / sizeof g_lens[0]))

/* Every length as a prefill (the 1000 one only if long), as a chunk after a cached prefix and as
 * a decode step, all in one batch, plus an empty entry. */
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
    defs[n++] = (struct seqdef){5, 0};
    return n;
}

static void test_mixed(void)
{
    static const int dims[] = {64, 80, 128};
    static const int cfg[][2] = {{2, 1}, {1, 2}, {1, 7}, {2, 8}}; /* n_head_kv, group */
    struct seqdef defs[3 * N_LENS + 1];
    int combo = 0;
    for (int di = 0; di < 3; di++) {
        for (int ci = 0; ci < 4; ci++, combo++) {
            if (g_light && (di == 1 || ci == 1 || ci == 3)) continue;
            const enum tensor_type kvt = combo % 3 == 2 ? TENSOR_F32 : TENSOR_F16;
            const int long_prefill = (di == 2 && ci == 2) || (di == 1 && ci == 0);
            const float mul = combo % 3 == 1 || (long_prefill && di == 2) ? 30.0f : 1.0f;
            const int n = mixed_defs(defs, long_prefill);
            struct batch b;
            batch_init(&b, dims[di], cfg[ci][0], cfg[ci][1], kvt, defs, n, mul);
            char tag[64];
            snprintf(tag, sizeof tag, "mixed x%g", (double)mul);
            run_check(&b, 1 + combo % 4, combo % 5 == 0, tag);
            batch_free(&b);
        }
    }
}

/* Decode steps only, split into 1..8 parts and into more parts than blocks. */
static void test_decode_splits(void)
{
    static const int dims[] = {64, 80, 128};
    static const int cfg[][2] = {{2, 1}, {1, 2}, {1, 7}, {2, 8}};
    static const int splits[] = {1, 2, 3, 5, 8, 100};
    struct seqdef defs[N_LENS];
    for (int i = 0; i < N_LENS; i++) defs[i] = (struct seqdef){g_lens[i] - 1, 1};
    int combo = 0;
    for (int di = 0; di < 3; di++) {
        for (int ci = 0; ci < 4; ci++, combo++) {
            if (g_light && (di == 1 || ci == 1 || ci == 3)) continue;
            const enum tensor_type kvt = combo % 2 ? TENSOR_F32 : TENSOR_F16;
            const float mul = combo % 2 ? 30.0f : 1.0f;
            struct batch b;
            batch_init(&b, dims[di], cfg[ci][0], cfg[ci][1], kvt, defs, N_LENS, mul);
            char tag[64];
            snprintf(tag, sizeof tag, "decode x%g", (double)mul);
            for (size_t si = 0; si < sizeof splits / sizeof splits[0]; si++)
                if ((si + (size_t)combo) % 2 == 0 || si == 0 || splits[si] == 100) run_check(&b, splits[si], 0, tag);
            batch_free(&b);
        }
    }
}

/* Odd head dims (not multiples of the 4 threads per row) and the largest one. */
static void test_odd_dims(void)
{
    static const int dims[][3] = {{36, 2, 1}, {200, 1, 4}}; /* D, n_head_kv, group */
    struct seqdef defs[3 * N_LENS + 1];
    for (int i = 0; i < 2; i++) {
        const int n = mixed_defs(defs, 0);
        struct batch b;
        batch_init(&b, dims[i][0], dims[i][1], dims[i][2], i == 1 ? TENSOR_F32 : TENSOR_F16, defs, n,
                   i == 2 ? 30.0f : 1.0f);
        run_check(&b, 1 + i, 0, "odd dims");
        batch_free(&b);
    }
}

/* Bad arguments are statuses, not crashes. */
static void test_bad_args(void)
{
    int32_t bt[1] = {5};
    float q[64] = {0}, o[64];
    uint16_t pool[16 * 64] = {0};
    struct fa2_seq s = {.q = q, .out = o, .n_q = 1, .pos0 = 0, .block_table = bt};
    struct fa2_args a = {.n_head = 1, .n_head_kv = 1, .head_dim = 64, .kv_type = TENSOR_F16, .k = pool, .v = pool,
                         .n_blocks = 1, .scale = 1, .seqs = &s, .n_seqs = 1, .n_split = 1};
    T_CHECK(vkb_fa2_attend(g_fa2, &a, NULL) == ATTND_ERR_INVALID, "block id outside the pool");
    bt[0] = 0;
    a.n_head = 3;
    a.n_head_kv = 2;
    T_CHECK(vkb_fa2_attend(g_fa2, &a, NULL) == ATTND_ERR_INVALID, "heads not a multiple");
    a.n_head = 1;
    a.n_head_kv = 1;
    a.head_dim = 300;
    T_CHECK(vkb_fa2_attend(g_fa2, &a, NULL) == ATTND_ERR_INVALID, "head_dim too large");
    a.head_dim = 64;
    T_CHECK(vkb_fa2_attend(g_fa2, &a, NULL) == ATTND_OK, "valid call: %s", vkb_last_error());
}

static int run_all(void)
{
    struct vkb_device_opts opts = {.device_index = -1, .validation = 1, .timestamps = 1};
    attnd_status st = vkb_device_create(&opts, &g_dev);
    if (st != ATTND_OK) {
        fprintf(stderr,
                "test_vk_fa2: FAIL: no usable Vulkan device with validation (%s: %s). lavapipe comes with "
                "mesa-vulkan-drivers and the layer with vulkan-validationlayers (deploy/install-deps.sh).\n",
                attnd_status_str(st), vkb_last_error());
        return 1;
    }
    const struct vkb_limits *l = vkb_device_limits(g_dev);
    fprintf(stderr, "test_vk_fa2: %s, subgroup %u, shared %u B, storage range %u B, f16 storage %d, LP_NATIVE_VECTOR_WIDTH=%s\n",
            l->name, l->subgroup_size, l->max_shared_bytes, l->max_storage_range, l->has_f16_storage,
            getenv("LP_NATIVE_VECTOR_WIDTH") ? getenv("LP_NATIVE_VECTOR_WIDTH") : "(default)");
    if (vkb_fa2_create(g_dev, &g_fa2) != ATTND_OK) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    test_bad_args();
    test_mixed();
    test_decode_splits();
    if (!g_light) test_odd_dims();
    vkb_fa2_destroy(g_fa2);
    const unsigned verr = vkb_validation_errors(g_dev);
    T_CHECK(verr == 0, "%u Vulkan validation errors (see the log above)", verr);
    vkb_device_destroy(g_dev);
    return t_finish("test_vk_fa2");
}

int main(int argc, char **argv)
{
    (void)argc;
#if defined(__SANITIZE_ADDRESS__)
    /* lavapipe or the validation layer leaks 128 bytes from a library it unloads (LeakSanitizer
     * cannot even name it): leak checking off for this test only, through a re-exec because
     * ASAN_OPTIONS is read at start-up. ASan's other checks stay on. */
    if (!getenv("ATTND_VK_TEST_NOLEAK")) {
        const char *old_opts = getenv("ASAN_OPTIONS");
        char opts[512];
        snprintf(opts, sizeof opts, "%s%sdetect_leaks=0", old_opts ? old_opts : "", old_opts && *old_opts ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
        setenv("ATTND_VK_TEST_NOLEAK", "1", 1);
        execv("/proc/self/exe", argv);
        perror("execv /proc/self/exe");
        return 1;
    }
#endif
    const int child = getenv("LP_NATIVE_VECTOR_WIDTH") != NULL;
    g_light = child;
    int rc = run_all();
    if (child) return rc;
    /* second pass: lavapipe with 128-bit vectors (subgroup size 4 instead of 8) */
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        setenv("LP_NATIVE_VECTOR_WIDTH", "128", 1);
        execv("/proc/self/exe", argv);
        perror("execv /proc/self/exe");
        _exit(1);
    }
    int ws = 0;
    if (waitpid(pid, &ws, 0) != pid || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
        fprintf(stderr, "test_vk_fa2: the LP_NATIVE_VECTOR_WIDTH=128 pass failed\n");
        return 1;
    }
    return rc;
}
