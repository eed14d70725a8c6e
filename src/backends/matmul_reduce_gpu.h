/* What the row-parallel matmul backends share on GPUs (internal; matmul_reduce_gpu.c): the
 * cuBLASLt plans of the partial, and one plan state holding what any of them allocates (each
 * backend asks for its parts), with the launches of all_reduce's kernels over it. Only for files
 * built with CUDA. */
#ifndef AGMM_BACKENDS_MATMUL_REDUCE_GPU_H
#define AGMM_BACKENDS_MATMUL_REDUCE_GPU_H

#include "matmul_reduce.h"
#include "gemm_lt.h"

typedef struct {
    agmm_gemm_lt *whole;       /* M rows into a 16-byte aligned M x N buffer; NULL if not asked */
    agmm_gemm_lt *block[2];    /* R rows, and the last non-empty block's rows where fewer; into
                                  16-byte aligned slots; NULL if not asked */
    int64_t block_rows[2];
    void *workspace;           /* every GEMM of a run is on one stream: one workspace */
} agmm_mr_gemm;

/* Enqueues rows [row0, row0 + rows) of the partial into dst on s: the whole GEMM when rows = M,
 * else the block plan of that height; nothing for 0 rows. */
agmm_status agmm_mr_gemm_rows(agmm_plan *plan, const agmm_mr_gemm *g, const agmm_mr_io *io, int64_t row0,
                              int64_t rows, void *dst, cudaStream_t s);
/* The whole partial into the W slots at base: one GEMM where they are contiguous, else one per
 * non-empty block. */
agmm_status agmm_mr_gemm_slots(agmm_plan *plan, const agmm_mr_gemm *g, const agmm_mr_io *io, void *base,
                               cudaStream_t s);

/* The parts a backend asks agmm_mr_gpu_create for. */
enum {
    AGMM_MR_GPU_WHOLE = 1u << 0,   /* the GEMM of M rows */
    AGMM_MR_GPU_BLOCKS = 1u << 1,  /* the GEMMs of a block of rows */
    AGMM_MR_GPU_SYM = 1u << 2,     /* the symmetric partial: W slots (reduce-scatter) or M x N */
    AGMM_MR_GPU_PAD = 1u << 3,     /* a signal pad and grid for all_reduce's kernels */
    AGMM_MR_GPU_RES = 1u << 4,     /* two_shot's symmetric result buffer (M x N) */
    AGMM_MR_GPU_STAGE = 1u << 5,   /* ce: local slots for the blocks sent to peers, and events */
    AGMM_MR_GPU_PADDED = 1u << 6,  /* nccl: a local W*R x N partial whose rows M.. are zero, and
                                      an R x N receive block where this rank gets fewer rows */
};

typedef struct {
    agmm_mr_gemm gemm;
    agmm_symm_buf *sym;        /* AGMM_MR_GPU_SYM */
    agmm_symm_buf *pad;        /* AGMM_MR_GPU_PAD: grid * W words per rank */
    agmm_symm_buf *res;        /* AGMM_MR_GPU_RES */
    void *stage;               /* AGMM_MR_GPU_STAGE: W slots, local */
    void *padded, *recv;       /* AGMM_MR_GPU_PADDED (recv NULL where the rank gets R rows) */
    cudaEvent_t ev_in, ev_block, ev_done;  /* AGMM_MR_GPU_STAGE: between the caller's and the copy stream */
    int grid;                  /* blocks of all_reduce's kernels, equal on every rank */
    int sum_grid;              /* blocks of the local slot sum (no barriers: any) */
} agmm_mr_gpu;

/* Fills plan->state with the parts `what` asks for. kernel_elems: the elements one rank's part of
 * a kernel covers (a slot of R rows, the whole M x N, a two_shot slice), which sizes the grids.
 * Where ranks share a device each GEMM is also run once on scratch, so that no kernel is loaded
 * lazily during a run (docs/architecture.md, emulated worlds). Collective (symmetric memory, the
 * agreed SM share). */
agmm_status agmm_mr_gpu_create(agmm_plan *plan, unsigned what, int64_t kernel_elems);
/* Collective; copes with a partly filled state. */
void agmm_mr_gpu_destroy(agmm_plan *plan);
/* What agmm_mr_gpu_create allocates for `what` (GEMM workspaces and scratch always). */
void agmm_mr_gpu_mem_need(const agmm_plan *plan, unsigned what, agmm_mem_need *need);

/* all_reduce's one_shot kernel over the plan's symmetric partials: opening barrier, out = the sum
 * of n elements at in_offset of every rank's sym (n may differ by rank, even be 0), closing
 * barrier. */
agmm_status agmm_mr_gpu_one_shot(agmm_plan *plan, const agmm_mr_gpu *x, size_t in_offset, int64_t n, void *out,
                                 cudaStream_t s);
/* all_reduce's two_shot kernel over the whole M x N partials into out. */
agmm_status agmm_mr_gpu_two_shot(agmm_plan *plan, const agmm_mr_gpu *x, void *out, cudaStream_t s);

#endif
