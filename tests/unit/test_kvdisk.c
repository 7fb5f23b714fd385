/* test_kvdisk.c - the disk tier of the prefix cache (include/attnd/kvdisk.h): a write/read round
 * trip, every header field's mismatch refused at open, truncated and bit-flipped files refused,
 * the byte budget's oldest-first deletion, a full disk (ENOSPC/EDQUOT through the write fault
 * hook) that stops spilling, the model identity of real model files, and the KV cache's hooks:
 * blocks evicted from one pool and found again by a new pool (a restart), their K/V equal to
 * what was written. */
#include "attnd/kvdisk.h"

#include "attnd/kvcache.h"
#include "attnd/log.h"
#include "attnd/model.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include "testutil.h"

static char g_dir[256];
static const struct kvdisk_layout g_lay = {TENSOR_F16, 2, 2, 8}; /* payload 2*2*2*16*8*2 = 2048 */
#define MODEL_ID 0x1234567890abcdefULL

static struct kvdisk *open_dir(uint64_t model_id, struct kvdisk_layout lay, uint64_t max_bytes)
{
    struct kvdisk_opts o = {.dir = g_dir, .max_bytes = max_bytes, .model_id = model_id, .layout = lay};
    struct kvdisk *d = NULL;
    char err[256];
    attnd_status st = kvdisk_open(&o, &d, err, sizeof err);
    T_CHECK(st == ATTND_OK && d, "open %s: %s", g_dir, err);
    return d;
}

static void block_of(uint64_t n, struct kvdisk_block *b)
{
    b->hash = 0x1000 + n;
    b->parent_hash = n ? 0x1000 + n - 1 : KV_HASH_ROOT;
    for (int i = 0; i < KVDISK_BLOCK_TOKENS; i++) b->tokens[i] = (int32_t)(n * 16 + (uint64_t)i);
}

static void fill_payload(unsigned char *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131u + seed * 7u) ^ (i >> 8));
}

/* Queues block n with its pattern payload; true if it was taken. */
static bool put(struct kvdisk *d, uint64_t n)
{
    struct kvdisk_block b;
    block_of(n, &b);
    unsigned char *p = kvdisk_put_begin(d, b.hash, false);
    if (!p) return false;
    fill_payload(p, kvdisk_payload_bytes(&g_lay), n);
    kvdisk_put_end(d, &b, p);
    return true;
}

static attnd_status get(struct kvdisk *d, uint64_t n, bool *same)
{
    size_t pl = kvdisk_payload_bytes(&g_lay);
    unsigned char *got = t_xmalloc(pl), *want = t_xmalloc(pl);
    struct kvdisk_block b;
    block_of(n, &b);
    attnd_status st = kvdisk_get(d, &b, got);
    fill_payload(want, pl, n);
    *same = st == ATTND_OK && memcmp(got, want, pl) == 0;
    free(got);
    free(want);
    return st;
}

static void file_of(uint64_t n, char *path, size_t len)
{
    snprintf(path, len, "%s/%016" PRIx64 ".kvb", g_dir, (uint64_t)0x1000 + n);
}

static void clear_dir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/*.kvb", g_dir);
    T_CHECK(system(cmd) == 0, "rm");
}

/* Rewrites bytes [off, off + len) of block n's file with val (or XORs one bit if flip). */
static void patch(uint64_t n, long off, const void *val, size_t len, bool flip)
{
    char path[300];
    file_of(n, path, sizeof path);
    int fd = open(path, O_RDWR);
    T_CHECK(fd >= 0, "open %s", path);
    if (fd < 0) return;
    unsigned char b[16];
    if (flip) {
        T_CHECK(pread(fd, b, 1, off) == 1, "read");
        b[0] ^= 0x10;
        val = b, len = 1;
    }
    T_CHECK(pwrite(fd, val, len, off) == (ssize_t)len, "write");
    close(fd);
}

static void test_round_trip(void)
{
    clear_dir();
    struct kvdisk *d = open_dir(MODEL_ID, g_lay, 1 << 20);
    for (uint64_t n = 0; n < 4; n++) T_CHECK(put(d, n), "put %" PRIu64, n);
    T_CHECK(!put(d, 2), "a block already queued or written is not taken twice");
    kvdisk_flush(d);
    struct kvdisk_stats s;
    kvdisk_get_stats(d, &s);
    T_CHECK(s.writes == 4 && s.files == 4 && s.bytes == 4 * (KVDISK_HEADER_BYTES + 2048), "4 files, %" PRIu64, s.bytes);
    bool same = false;
    T_CHECK(get(d, 3, &same) == ATTND_OK && same, "block 3 reads back equal");
    struct kvdisk_block b;
    block_of(9, &b);
    unsigned char buf[2048];
    T_CHECK(kvdisk_get(d, &b, buf) == ATTND_ERR_NOTFOUND, "unknown block");
    block_of(1, &b);
    b.tokens[5]++;
    T_CHECK(kvdisk_get(d, &b, buf) == ATTND_ERR_FORMAT, "other token ids refused");
    T_CHECK(!kvdisk_has(d, b.hash), "and the file forgotten");
    block_of(2, &b);
    b.parent_hash ^= 1;
    T_CHECK(kvdisk_get(d, &b, buf) == ATTND_ERR_FORMAT, "another parent hash refused");
    kvdisk_close(d);
    /* a restart finds the two files left */
    d = open_dir(MODEL_ID, g_lay, 1 << 20);
    kvdisk_get_stats(d, &s);
    T_CHECK(s.files == 2 && kvdisk_has(d, 0x1000) && kvdisk_has(d, 0x1003), "2 files found again: %" PRIu64, s.files);
    T_CHECK(get(d, 0, &same) == ATTND_OK && same, "block 0 after the restart");
    kvdisk_get_stats(d, &s);
    T_CHECK(s.reads == 1 && s.read_bytes == KVDISK_HEADER_BYTES + 2048 && s.read_seconds > 0, "read counters");
    /* another model's file put in place of block 3 after the scan: refused, forgotten, kept */
    uint32_t other = 0x77;
    patch(3, 16, &other, 4, false);
    char path[300];
    file_of(3, path, sizeof path);
    T_CHECK(get(d, 3, &same) == ATTND_ERR_FORMAT && !same && !kvdisk_has(d, 0x1003), "foreign since the scan: refused");
    T_CHECK(access(path, F_OK) == 0, "and left in place");
    kvdisk_close(d);
}

/* Each header field changed in one file: the open refuses that file only. */
static void test_header_fields(void)
{
    struct field {
        long off;
        uint32_t val;
        const char *name;
    } fields[] = {{0, 0x4e545441 ^ 1, "magic"},  {8, 2, "version"},     {12, 128, "header size"},
                  {16, 0x90abcdee, "model id"}, {24, 0, "element type"}, {28, 3, "layers"},
                  {32, 1, "KV heads"},          {36, 16, "head dim"},    {40, 32, "block size"},
                  {48, 0x1005, "block hash (not the file name)"},       {128, 1024, "payload bytes"}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        clear_dir();
        struct kvdisk *d = open_dir(MODEL_ID, g_lay, 1 << 20);
        put(d, 0);
        put(d, 1);
        kvdisk_close(d);
        patch(1, fields[i].off, &fields[i].val, 4, false);
        d = open_dir(MODEL_ID, g_lay, 1 << 20);
        struct kvdisk_stats s;
        kvdisk_get_stats(d, &s);
        T_CHECK(s.files == 1 && s.rejected == 1 && kvdisk_has(d, 0x1000) && !kvdisk_has(d, 0x1001),
                "%s changed: refused at open (files %" PRIu64 ", rejected %" PRIu64 ")", fields[i].name, s.files,
                s.rejected);
        kvdisk_close(d);
    }
    /* a whole directory of another model's or layout's files is ignored */
    clear_dir();
    struct kvdisk *d = open_dir(MODEL_ID, g_lay, 1 << 20);
    put(d, 0);
    kvdisk_close(d);
    struct kvdisk_layout f32 = g_lay, more = g_lay;
    f32.type = TENSOR_F32, more.n_layer = 3;
    const struct {
        uint64_t id;
        struct kvdisk_layout lay;
    } others[] = {{MODEL_ID + 1, g_lay}, {MODEL_ID, f32}, {MODEL_ID, more}};
    for (size_t i = 0; i < 3; i++) {
        d = open_dir(others[i].id, others[i].lay, 1 << 20);
        struct kvdisk_stats s;
        kvdisk_get_stats(d, &s);
        T_CHECK(s.files == 0 && s.rejected == 1 && !kvdisk_has(d, 0x1000), "foreign %zu ignored", i);
        kvdisk_close(d);
    }
}

/* Truncated and bit-flipped files: refused at open (size) or on read (checksum), never used. */
static void test_damage(void)
{
    clear_dir();
    struct kvdisk *d = open_dir(MODEL_ID, g_lay, 1 << 20);
    for (uint64_t n = 0; n < 6; n++) put(d, n);
    kvdisk_close(d);
    char path[300];
    file_of(0, path, sizeof path);
    T_CHECK(truncate(path, KVDISK_HEADER_BYTES + 2047) == 0, "truncate");
    file_of(1, path, sizeof path);
    T_CHECK(truncate(path, 100) == 0, "truncate to less than a header");
    patch(2, KVDISK_HEADER_BYTES + 1000, NULL, 0, true); /* a payload bit */
    patch(3, 64 + 4 * 7, NULL, 0, true);                 /* a token id bit */
    patch(4, 137, NULL, 0, true);                        /* a checksum bit */
    d = open_dir(MODEL_ID, g_lay, 1 << 20);
    struct kvdisk_stats s;
    kvdisk_get_stats(d, &s);
    T_CHECK(s.files == 4 && s.rejected == 2, "two truncated files refused at open: %" PRIu64, s.files);
    bool same;
    for (uint64_t n = 2; n < 5; n++) {
        T_CHECK(get(d, n, &same) == ATTND_ERR_FORMAT && !same, "damaged block %" PRIu64 " refused on read", n);
        file_of(n, path, sizeof path);
        T_CHECK(access(path, F_OK) != 0, "and deleted");
    }
    T_CHECK(get(d, 5, &same) == ATTND_OK && same, "the intact one still reads");
    /* damaged after the open: truncated under the index */
    file_of(5, path, sizeof path);
    T_CHECK(truncate(path, 500) == 0, "truncate");
    T_CHECK(get(d, 5, &same) == ATTND_ERR_FORMAT, "truncated after the scan: refused on read");
    kvdisk_close(d);
}

static void test_budget_and_full(void)
{
    clear_dir();
    uint64_t fb = KVDISK_HEADER_BYTES + 2048;
    struct kvdisk *d = open_dir(MODEL_ID, g_lay, 3 * fb + 10);
    for (uint64_t n = 0; n < 5; n++) {
        put(d, n);
        kvdisk_flush(d);
    }
    struct kvdisk_stats s;
    kvdisk_get_stats(d, &s);
    T_CHECK(s.files == 3 && s.deleted == 2 && s.bytes <= 3 * fb, "budget of 3 files: %" PRIu64, s.files);
    T_CHECK(!kvdisk_has(d, 0x1000) && !kvdisk_has(d, 0x1001) && kvdisk_has(d, 0x1004), "oldest deleted first");
    bool same;
    T_CHECK(get(d, 2, &same) == ATTND_OK && same, "block 2 restored: now the most recently used");
    put(d, 5);
    kvdisk_flush(d);
    T_CHECK(kvdisk_has(d, 0x1002) && !kvdisk_has(d, 0x1003) && kvdisk_has(d, 0x1005), "the least recently used deleted");
    T_CHECK(!put(d, 4), "block 4 evicted again: not rewritten, but renewed");
    put(d, 6);
    kvdisk_flush(d);
    T_CHECK(kvdisk_has(d, 0x1004) && !kvdisk_has(d, 0x1002) && kvdisk_has(d, 0x1006), "the renewed one kept");
    kvdisk_close(d);
    d = open_dir(MODEL_ID, g_lay, 2 * fb); /* a smaller budget at open trims the oldest */
    kvdisk_get_stats(d, &s);
    T_CHECK(s.files == 2 && kvdisk_has(d, 0x1006) && !kvdisk_has(d, 0x1002), "trimmed at open to 2");
    int errs[] = {ENOSPC, EDQUOT};
    for (int i = 0; i < 2; i++) {
        kvdisk_close(d);
        d = open_dir(MODEL_ID, g_lay, 1 << 20);
        kvdisk_set_write_fault(errs[i]);
        T_CHECK(put(d, 10), "taken");
        kvdisk_flush(d);
        kvdisk_get_stats(d, &s);
        T_CHECK(s.full && s.dropped == 1 && !kvdisk_has(d, 0x100a), "%s: spilling stops", strerror(errs[i]));
        kvdisk_set_write_fault(0);
        T_CHECK(!put(d, 11), "no more blocks taken once full");
        kvdisk_get_stats(d, &s);
        T_CHECK(s.files == 2, "the files already there stay usable");
    }
    kvdisk_close(d);
    struct kvdisk_opts o = {.dir = g_dir, .max_bytes = fb - 1, .model_id = 1, .layout = g_lay};
    char err[256];
    T_CHECK(kvdisk_open(&o, &d, err, sizeof err) == ATTND_ERR_INVALID, "a budget under one file");
    o.max_bytes = fb, o.layout.type = TENSOR_Q8_0;
    T_CHECK(kvdisk_open(&o, &d, err, sizeof err) == ATTND_ERR_INVALID, "a bad layout");
}

/* K/V of prompt block b, layer l, K (kv 0) or V, element i: a value exact in f32. */
static float kv_val(int b, int l, int kv, int i) { return (float)(b * 1000 + l * 100 + kv * 50) + (float)i / 64.0f; }

static void write_prompt(struct kv_seq *s, int n_tok, int n_layer, int width)
{
    float *k = t_xmalloc((size_t)width * sizeof *k), *v = t_xmalloc((size_t)width * sizeof *v);
    for (int p = 0; p < n_tok; p++)
        for (int l = 0; l < n_layer; l++) {
            for (int i = 0; i < width; i++) k[i] = kv_val(p, l, 0, i), v[i] = kv_val(p, l, 1, i);
            kv_write(s, l, (size_t)p, k, v);
        }
    free(k);
    free(v);
}

/* Pool -> disk on eviction -> a new pool (a restart) restores the prompt's blocks. */
static void test_cache_hooks(void)
{
    clear_dir();
    const struct kvdisk_layout lay = {TENSOR_F32, 2, 2, 4};
    const int width = 2 * 4, n_tok = 5 * 16 + 3;
    int32_t prompt[5 * 16 + 3], other[10 * 16];
    for (int i = 0; i < n_tok; i++) prompt[i] = 7 + i;
    for (int i = 0; i < 10 * 16; i++) other[i] = 500 + i;
    struct kvdisk *d = open_dir(MODEL_ID, lay, 1 << 20);
    struct kv_opts ko = kv_opts_default(2, 2, 4, 10);
    ko.type = TENSOR_F32, ko.disk = d;
    struct kv_cache *c = NULL;
    T_CHECK(kv_create(&ko, &c) == ATTND_OK, "cache");
    struct kv_seq *s;
    size_t cached;
    T_CHECK(!kv_seq_create(c, prompt, (size_t)n_tok, (size_t)n_tok, &s, &cached) && cached == 0, "cold");
    T_CHECK(!kv_seq_append(s, prompt, (size_t)n_tok), "append");
    write_prompt(s, n_tok, 2, width);
    kv_seq_commit(s, (size_t)n_tok);
    kv_seq_destroy(s);
    /* another request takes all 10 blocks: the prompt's 5 cached ones are evicted */
    T_CHECK(!kv_seq_create(c, other, 160, 160, &s, &cached) && !kv_seq_append(s, other, 160), "other");
    kv_seq_destroy(s);
    kvdisk_flush(d);
    struct kvdisk_stats st;
    kvdisk_get_stats(d, &st);
    T_CHECK(st.writes == 5, "the 5 evicted prompt blocks spilled: %" PRIu64, st.writes);
    kv_destroy(c); /* the restart: no more spills (the other request's blocks were never registered) */
    kvdisk_close(d);

    d = open_dir(MODEL_ID, lay, 1 << 20);
    ko.disk = d;
    T_CHECK(kv_create(&ko, &c) == ATTND_OK, "new cache");
    T_CHECK(!kv_seq_create(c, prompt, (size_t)n_tok, (size_t)n_tok, &s, &cached) && cached == 80,
            "after the restart 80 tokens come from disk: %zu", cached);
    struct kv_stats ks;
    kv_get_stats(c, &ks);
    T_CHECK(ks.disk_hit_blocks == 5 && ks.hit_blocks == 5, "5 disk hits");
    const int32_t *tab = kv_seq_block_table(s);
    int bad = 0;
    for (int p = 0; p < 80; p++)
        for (int l = 0; l < 2; l++) {
            const float *kb = (const float *)((const char *)kv_k_base(c, l) + (size_t)tab[p / 16] * kv_block_stride(c));
            const float *vb = (const float *)((const char *)kv_v_base(c, l) + (size_t)tab[p / 16] * kv_block_stride(c));
            for (int h = 0; h < 2; h++)
                for (int i = 0; i < 4; i++) {
                    size_t off = ((size_t)h * 16 + (size_t)(p % 16)) * 4 + (size_t)i;
                    bad += kb[off] != kv_val(p, l, 0, h * 4 + i) || vb[off] != kv_val(p, l, 1, h * 4 + i);
                }
        }
    T_CHECK(bad == 0, "restored K/V equal what was written (%d differ)", bad);
    char err[256];
    T_CHECK(kv_validate(c, err, sizeof err) == ATTND_OK, "cache invariants: %s", err);
    kv_seq_destroy(s);
    kv_destroy(c); /* spills the 5 registered blocks: already on disk, nothing new */
    kvdisk_get_stats(d, &st);
    T_CHECK(st.writes == 0 && st.reads == 5, "no rewrite of blocks already there");
    kvdisk_close(d);
}

/* f32 K (kv 0) or V of a token at a position, element i: exact, and different for another token
 * or position, so a block spliced in the wrong place shows. */
static float tok_val(int pos, int tok, int kv, int i) { return (float)(pos * 4096 + tok * 4 + kv) + (float)i / 8.0f; }

/* Checks the n_cached leading positions of s against tok_val; returns how many differ. */
static int check_cached(struct kv_cache *c, struct kv_seq *s, const int32_t *toks, size_t n_cached)
{
    int bad = 0;
    const int32_t *tab = kv_seq_block_table(s);
    for (size_t p = 0; p < n_cached; p++) {
        size_t off = (size_t)tab[p / 16] * kv_block_stride(c) + (p % 16) * 4 * sizeof(float);
        const float *k = (const float *)((const char *)kv_k_base(c, 0) + off);
        const float *v = (const float *)((const char *)kv_v_base(c, 0) + off);
        for (int i = 0; i < 4; i++)
            bad += k[i] != tok_val((int)p, toks[p], 0, i) || v[i] != tok_val((int)p, toks[p], 1, i);
    }
    return bad;
}

/* Random requests on shared prefixes over a 12-block pool with the tier, and restarts: every
 * reused position holds its own token's K/V, and the cache's invariants hold throughout. */
static void test_stress(void)
{
    clear_dir();
    const struct kvdisk_layout lay = {TENSOR_F32, 1, 1, 4};
    struct kvdisk *d = open_dir(MODEL_ID, lay, 40 * (KVDISK_HEADER_BYTES + 512));
    struct kv_opts ko = kv_opts_default(1, 1, 4, 12);
    ko.type = TENSOR_F32, ko.disk = d;
    struct kv_cache *c = NULL;
    T_CHECK(kv_create(&ko, &c) == ATTND_OK, "cache");
    uint64_t rng = 37;
    int32_t base[4][64], toks[128];
    for (int b = 0; b < 4; b++)
        for (int i = 0; i < 64; i++) base[b][i] = b * 100 + i;
    int bad = 0, invalid = 0, restarts = 0;
    size_t reused = 0;
    uint64_t from_disk = 0;
    struct kv_stats ks;
    for (int op = 0; op < 3000 && c; op++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        int b = (int)((rng >> 33) % 4), keep = 17 + (int)((rng >> 40) % 48), extra = (int)((rng >> 50) % 60);
        size_t n = (size_t)keep + (size_t)extra;
        memcpy(toks, base[b], (size_t)keep * sizeof *toks);
        for (int i = 0; i < extra; i++) toks[keep + i] = 1000 + (int)((rng >> (i % 24)) % 7);
        struct kv_seq *s;
        size_t cached;
        if (kv_seq_create(c, toks, n, n, &s, &cached)) continue;
        bad += check_cached(c, s, toks, cached);
        reused += cached;
        if (!kv_seq_append(s, toks + cached, n - cached)) {
            float k[4], v[4];
            for (size_t p = cached; p < n; p++) {
                for (int i = 0; i < 4; i++) k[i] = tok_val((int)p, toks[p], 0, i), v[i] = tok_val((int)p, toks[p], 1, i);
                kv_write(s, 0, p, k, v);
            }
            kv_seq_commit(s, n);
        }
        kv_seq_destroy(s);
        kvdisk_flush(d); /* a writer that keeps up: the run does not depend on its timing */
        if (op % 50 == 0) invalid += kv_validate(c, NULL, 0) != ATTND_OK;
        if (op % 700 == 699) { /* a restart */
            kv_get_stats(c, &ks);
            from_disk += ks.disk_hit_blocks;
            kv_destroy(c);
            kvdisk_close(d);
            d = open_dir(MODEL_ID, lay, 40 * (KVDISK_HEADER_BYTES + 512));
            ko.disk = d;
            if (kv_create(&ko, &c)) c = NULL;
            restarts++;
        }
    }
    if (c) kv_get_stats(c, &ks), from_disk += ks.disk_hit_blocks;
    T_CHECK(c && bad == 0 && invalid == 0, "stress: %d wrong values, %d invalid states", bad, invalid);
    T_CHECK(from_disk > 100 && reused > 1000, "stress: %" PRIu64 " blocks from disk, %zu tokens reused", from_disk, reused);
    printf("stress: 3000 requests, %zu tokens reused, %" PRIu64 " blocks of them from disk, 4 restarts\n", reused, from_disk);
    T_CHECK(restarts == 4, "4 restarts");
    kv_destroy(c);
    kvdisk_close(d);
}

static void test_identity(void)
{
    const char *names[] = {"stories260K.gguf", "tiny-llama-spm-f32.gguf", "tiny-llama-spm-q8_0.gguf"};
    uint64_t ids[3];
    for (int i = 0; i < 3; i++) {
        char path[512], err[256];
        snprintf(path, sizeof path, "%s/models/%s", t_shared(), names[i]);
        struct model *m = NULL;
        if (model_load(path, &m, err, sizeof err)) {
            fprintf(stderr, "skip identity: %s\n", err);
            return;
        }
        ids[i] = kvdisk_model_identity(m);
        T_CHECK(ids[i] == kvdisk_model_identity(m), "stable");
        model_destroy(m);
    }
    T_CHECK(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2], "three models, three identities");
}

int main(void)
{
    log_set_level(LOG_ERROR);
    snprintf(g_dir, sizeof g_dir, "/tmp/test_kvdisk.%d", (int)getpid());
    T_CHECK(mkdir(g_dir, 0755) == 0, "mkdir %s", g_dir);
    uint64_t a = kvdisk_checksum(0, "abcdefgh", 8), b = kvdisk_checksum(0, "abcdefgi", 8);
    T_CHECK(a != b && a == kvdisk_checksum(0, "abcdefgh", 8) && a != kvdisk_checksum(1, "abcdefgh", 8), "checksum");
    test_round_trip();
    test_header_fields();
    test_damage();
    test_budget_and_full();
    test_cache_hooks();
    test_stress();
    test_identity();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
    printf("test_kvdisk: %d checks, %d failed\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
