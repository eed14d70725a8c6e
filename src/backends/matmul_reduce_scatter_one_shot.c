/* matmul_reduce_scatter `one_shot`: the GEMM writes the partial into symmetric memory, cut into
 * one slot per owner; then every rank loads its slot from all W partials and sums them in rank
 * order: one pass over NVLink, two barriers, no copy engine. Latency-bound shapes (small M) are
 * its case; each rank reads (W-1)/W of a partial's size from its peers.
 *
 * GPU: the GEMM (one where the slots are back to back, else one per block) into the plan's
 * symmetric slots, then all_reduce's one_shot kernel (kernels/all_reduce.h) over this rank's slot
 * of every peer's buffer (the same offset on every rank) into io->out:
 *   opening barrier   every rank's partial is written (the GEMM before it on each stream)
 *   sum               my rows from every partial, fp32 in rank order, rounded once, to io->out
 *   closing barrier   nobody reads my partial any more: my next run's GEMM may overwrite it
 * The kernel's blocks meet block by block, so every rank launches the same grid, sized for a slot
 * of R rows (a rank with fewer rows, or none, still takes part in every barrier). Signal pad:
 * grid * W words, epoch-valued, never reset (all_reduce.h). At W = 1 the GEMM writes io->out.
 *
 * CPU world: the same pull protocol on the rank's thread (matmul_reduce.h). */
#include <stdlib.h>

#include "matmul_reduce.h"

#define WHAT "matmul_reduce_scatter/one_shot"

static agmm_status cpu_run(agmm_plan *plan, const void *io, void *stream)
{
    return agmm_mr_cpu_pull_run(plan, io, WHAT);
}

static const agmm_backend_impl one_shot_cpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = agmm_mr_cpu_pull_create,
    .run = cpu_run,
    .destroy = agmm_mr_cpu_pull_destroy,
    .mem_need = agmm_mr_cpu_pull_mem_need,
};

#ifdef AGMM_HAVE_CUDA
#include "matmul_reduce_gpu.h"
#include "../world/rank_gpu.h"

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_mr_gpu *x = plan->state;
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    const agmm_mr_io io = agmm_mr_io_of(plan, vio);
    cudaStream_t cs = (cudaStream_t)stream;
    if (s.nranks == 1) {
        AGMM_TRY(st, agmm_mr_gemm_rows(plan, &x->gemm, &io, 0, s.m, io.out, cs));
    } else {
        AGMM_TRY(st, agmm_mr_gemm_slots(plan, &x->gemm, &io, x->sym->local, cs));
        AGMM_TRY(st, agmm_mr_gpu_one_shot(plan, x, (size_t)s.rank * s.slot_bytes,
                                          agmm_mr_block(&s, s.rank, NULL) * s.n, io.out, cs));
    }
    AGMM_TRY(st, agmm_gpu_note_run(plan->ctx, cs));
fail:
    return st;
}

static agmm_status gpu_create(agmm_plan *plan)
{
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    if (s.nranks == 1)
        return agmm_mr_gpu_create(plan, AGMM_MR_GPU_WHOLE, 0);
    /* The whole GEMM serves where the slots are back to back, the block GEMMs elsewhere. */
    const unsigned gemms = agmm_mr_slots_contiguous(&s) ? AGMM_MR_GPU_WHOLE : AGMM_MR_GPU_BLOCKS;
    return agmm_mr_gpu_create(plan, gemms | AGMM_MR_GPU_SYM | AGMM_MR_GPU_PAD, s.block_rows * s.n);
}

static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    agmm_mr_gpu_mem_need(plan, AGMM_MR_GPU_SYM | AGMM_MR_GPU_PAD, need);
}

static const agmm_backend_impl one_shot_gpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = gpu_create,
    .run = gpu_run,
    .destroy = agmm_mr_gpu_destroy,
    .mem_need = gpu_mem_need,
};
#define ONE_SHOT_GPU (&one_shot_gpu_impl)
#else
#define ONE_SHOT_GPU NULL
#endif /* AGMM_HAVE_CUDA */

const agmm_backend agmm_backend_matmul_reduce_scatter_one_shot = {
    .name = "one_shot",
    .op = AGMM_OP_MATMUL_REDUCE_SCATTER,
    .summary = "GEMM into symmetric memory; every rank loads its rows from all partials and sums them: one pass, two "
               "barriers (small M)",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 0,
    .cpu = &one_shot_cpu_impl,
    .gpu = ONE_SHOT_GPU,
};
