/* fwd_kernels.h - struct fwd_kernels: which CPU kernel variants a forward context runs (filled by
 * fwd_kernels() in forward.h; its own header so the backends can name it without including
 * forward.h). */
#ifndef ATTND_FWD_KERNELS_H
#define ATTND_FWD_KERNELS_H

/* Which CPU kernels run (the cpu backend): per weight type of the model's matrices, the variant
 * of each matrix-product family, and how they were chosen. */
#define FWD_KERNEL_TYPES 8
#define FWD_KERNEL_FAMILIES 3 /* matvec (1 token), batch (2-32), gemm (more) */
struct fwd_kernels {
    char cpu[64], isa[16], chosen_by[16]; /* chosen_by: "measured", "cached" or "rules" */
    char fa2_prefill[16], fa2_decode[16]; /* the attention kernel of each phase */
    const char *family[FWD_KERNEL_FAMILIES];
    int n_types;
    struct {
        char type[16];
        char variant[FWD_KERNEL_FAMILIES][16];
    } types[FWD_KERNEL_TYPES];
};

#endif
