/* matmul_all_reduce `fused`: the one-shot all-reduce pushed by the GEMM. One GEMM of this rank's
 * partial whose epilogue stores each tile into slot `rank` of every rank's symmetric slots and
 * raises a flag per tile at each; every rank sums each tile over all W slots in rank order as soon
 * as every peer's flag of it is up, so every rank gets the same bits. All ranks visit the tiles in
 * the same order, so each tile's wait is for peers at the same point of the same GEMM. Decode
 * (M = 1 .. 256) is its case: one launch and no barrier kernel where `one_shot` runs a GEMM, then a
 * kernel with two barriers; it moves as many bytes (W - 1 copies of the partial per rank, pushed
 * by stores instead of pulled by loads) and holds W partials of M x N per rank.
 *
 * The protocol, its CPU twin and the reasons are in matmul_reduce_fused.c (shared with
 * matmul_reduce_scatter's `fused`); docs/matmul_reduce.md has them with the other backends'. */
#include "matmul_reduce_fused.h"

#ifdef AGMM_HAVE_CUDA
#define FUSED_GPU (&agmm_mr_fused_gpu)
#else
#define FUSED_GPU NULL
#endif

const agmm_backend agmm_backend_matmul_all_reduce_fused = {
    .name = "fused",
    .op = AGMM_OP_MATMUL_ALL_REDUCE,
    .summary = "one persistent GEMM whose epilogue stores each tile into every rank's symmetric slot and raises a "
               "flag per tile; every rank sums each tile over all partials in rank order as it lands (decode)",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 3,
    .cpu = &agmm_mr_fused_cpu,
    .gpu = FUSED_GPU,
};
