/* info.c - `attnd info FILE`: dumps a GGUF file's header (a debugging aid). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "attnd/gguf.h"
#include "attnd/tensor.h"
#include "server/cmd/cmd.h"

static void print_str(struct gguf_str s, size_t max)
{
    putchar('"');
    for (uint64_t i = 0; i < s.len && i < max; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        if (ch < 0x20 || ch == '"' || ch == '\\') printf("\\x%02x", ch);
        else putchar(ch);
    }
    if (s.len > max) printf("...");
    putchar('"');
}

int cmd_info(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout, "usage: attnd info FILE.gguf\n");
        return argc < 2 ? 2 : 0;
    }
    char err[512];
    struct gguf *g;
    if (gguf_open(argv[1], &g, err, sizeof err) != ATTND_OK) {
        fprintf(stderr, "attnd info: %s: %s\n", argv[1], err);
        return 1;
    }
    printf("GGUF v%u, %" PRIu64 " bytes, alignment %u, data at %" PRIu64 "\n", gguf_version(g), gguf_file_size(g),
           gguf_alignment(g), gguf_data_offset(g));
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        enum gguf_vtype t = gguf_kv_type(g, i);
        printf("  %-44s %-6s ", gguf_kv_key(g, i), gguf_vtype_name(t));
        if (t == GGUF_STRING) print_str(gguf_kv_str(g, i), 60);
        else if (t == GGUF_F32 || t == GGUF_F64) printf("%g", gguf_kv_float(g, i));
        else if (t == GGUF_ARRAY) {
            enum gguf_vtype et = gguf_arr_type(g, i);
            uint64_t n = gguf_arr_n(g, i);
            printf("[%" PRIu64 " x %s]", n, gguf_vtype_name(et));
            for (uint64_t j = 0; j < n && j < 4; j++) {
                putchar(' ');
                if (et == GGUF_STRING) print_str(gguf_arr_str(g, i, j), 20);
                else if (et == GGUF_F32 || et == GGUF_F64) printf("%g", gguf_arr_float(g, i, j));
                else printf("%" PRId64, gguf_arr_int(g, i, j));
            }
        } else printf("%" PRId64, gguf_kv_int(g, i));
        putchar('\n');
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const struct gguf_tensor *t = gguf_tensor(g, i);
        printf("  tensor %-32s %-5s [", t->name, tensor_type_name(t->type));
        for (uint32_t d = 0; d < t->n_dims; d++) printf("%s%" PRIu64, d ? ", " : "", t->ne[d]);
        printf("] @%" PRIu64 " (%" PRIu64 " bytes)\n", t->offset, t->nbytes);
    }
    gguf_close(g);
    return 0;
}
