/* matmul_reduce_scatter `fused`: one GEMM of this rank's whole partial whose epilogue stores each
 * tile's rows straight into their owners' symmetric slots (the row split's blocks) and raises a
 * flag per tile at each owner; each owner sums its rows of a tile in rank order as soon as every
 * peer's flag of it is up. The tiles are a plain GEMM's over all M rows (any M), visited from
 * block rank+1's to the rank's own, so remote rows leave first and a rank waits only for tiles its
 * peers compute before their own. One kernel per run on GPUs (the GEMM engine's scatter epilogue),
 * nothing from the host per run; no copy engine, no barrier kernel: a writer waits, per owner, for
 * that owner's done word of the run before it overwrites its slot.
 *
 * The protocol, its CPU twin and the reasons are in matmul_reduce_fused.c (shared with
 * matmul_all_reduce's `fused`); docs/matmul_reduce.md has them with the other backends'. */
#include "matmul_reduce_fused.h"

#ifdef AGMM_HAVE_CUDA
#define FUSED_GPU (&agmm_mr_fused_gpu)
#else
#define FUSED_GPU NULL
#endif

const agmm_backend agmm_backend_matmul_reduce_scatter_fused = {
    .name = "fused",
    .op = AGMM_OP_MATMUL_REDUCE_SCATTER,
    .summary = "one persistent GEMM whose epilogue stores each tile's rows into their owners' symmetric slots and "
               "raises a flag per tile; each owner sums its rows of a tile in rank order as the tile lands",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 3,
    .cpu = &agmm_mr_fused_cpu,
    .gpu = FUSED_GPU,
};
