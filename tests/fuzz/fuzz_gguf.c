/* fuzz_gguf.c - the GGUF reader and the model binder on arbitrary bytes.
 * Input: a whole GGUF file. gguf_open_mem() must accept or refuse it with a status; an accepted
 * header's tensors must lie inside the file; then the bytes are loaded as a model from a memfd
 * (the weights loader, hyper-parameter checks and the tensor binder) and the tokenizer is built
 * from the header. Seeds: small models written by `attnd mkmodel` (tests/fuzz/seeds.sh). */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attnd/gguf.h"
#include "attnd/model.h"
#include "attnd/tokenizer.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int g_fd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fz_quiet();
    g_fd = memfd_create("fuzz-gguf", 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    struct gguf *g = NULL;
    if (gguf_open_mem(data, size, &g, err, sizeof err) != ATTND_OK) {
        FZ_REQUIRE(g == NULL, "a refused file leaves *out NULL");
        return 0;
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        FZ_REQUIRE(t->offset <= size && t->nbytes <= size - t->offset, "tensor data inside the file");
    }
    struct tokenizer *tok = NULL;
    if (tok_create(g, &tok, err, sizeof err) == ATTND_OK) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(tok, "Hello world <s>", 15, true, true, &ids, &n) == ATTND_OK) free(ids);
        tok_destroy(tok);
    }
    gguf_close(g);

    /* the same bytes as a model file */
    if (g_fd < 0 || ftruncate(g_fd, 0) || pwrite(g_fd, data, size, 0) != (ssize_t)size) return 0;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", g_fd);
    struct model *m = NULL;
    if (model_load(path, &m, err, sizeof err) == ATTND_OK) {
        FZ_REQUIRE(m->hp.n_vocab > 0 && m->hp.n_layer > 0, "a loaded model has a vocabulary and layers");
        model_destroy(m);
    } else {
        FZ_REQUIRE(m == NULL, "a refused model leaves *out NULL");
    }
    return 0;
}
