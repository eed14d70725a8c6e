/* matmul_all_reduce `one_shot`: the GEMM writes the partial straight into symmetric memory
 * (cuBLASLt's output is the plan's symmetric buffer: no copy), then every rank loads all W
 * partials and sums them in rank order: one pass, two barriers. Decode (M = 1 .. 256) is its
 * case: the message is small and latency is what counts.
 *
 * GPU: the GEMM, then all_reduce's one_shot kernel (kernels/all_reduce.h) over the plans'
 * symmetric partials into io->c:
 *   opening barrier   every rank's partial is written (its GEMM is before it on its stream)
 *   sum               all of S from every partial, fp32 in rank order, rounded once: every rank
 *                     computes the same bits
 *   closing barrier   nobody reads my partial any more: my next run's GEMM may overwrite it
 * Signal pad: grid * W words, epoch-valued, never reset. At W = 1 the GEMM writes io->c.
 *
 * CPU world: the same pull protocol on the rank's thread (matmul_reduce.h). */
#include "matmul_reduce.h"

#define WHAT "matmul_all_reduce/one_shot"

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

static agmm_status gpu_create(agmm_plan *plan)
{
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    if (s.nranks == 1)
        return agmm_mr_gpu_create(plan, AGMM_MR_GPU_WHOLE, 0);
    return agmm_mr_gpu_create(plan, AGMM_MR_GPU_WHOLE | AGMM_MR_GPU_SYM | AGMM_MR_GPU_PAD, s.m * s.n);
}

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
        AGMM_TRY(st, agmm_mr_gemm_rows(plan, &x->gemm, &io, 0, s.m, x->sym->local, cs));
        AGMM_TRY(st, agmm_mr_gpu_one_shot(plan, x, 0, s.m * s.n, io.out, cs));
    }
    AGMM_TRY(st, agmm_gpu_note_run(plan->ctx, cs));
fail:
    return st;
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

const agmm_backend agmm_backend_matmul_all_reduce_one_shot = {
    .name = "one_shot",
    .op = AGMM_OP_MATMUL_ALL_REDUCE,
    .summary = "GEMM straight into symmetric memory; every rank loads all partials and sums them in rank order: one "
               "pass, two barriers (decode)",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 0,
    .cpu = &one_shot_cpu_impl,
    .gpu = ONE_SHOT_GPU,
};
