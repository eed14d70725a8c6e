/* matmul_all_reduce `nccl`: one cuBLASLt GEMM of the partial, then ncclAllReduce (the baseline).
 *
 * GPU: the GEMM writes the partial into the plan's symmetric buffer (an NCCL window in GPU
 * worlds, so NCCL may use its symmetric kernels, as all_reduce's `nccl` does), and ncclAllReduce
 * sums every rank's into io->c. NCCL adds in its own order, so this backend is checked against
 * the reference with a tolerance, not bit for bit.
 *
 * CPU world (no NCCL there): the pull protocol of matmul_reduce.h, in agmm's rank order. */
#include "matmul_reduce.h"

#define WHAT "matmul_all_reduce/nccl"

static agmm_status cpu_run(agmm_plan *plan, const void *io, void *stream)
{
    return agmm_mr_cpu_pull_run(plan, io, WHAT);
}

/* Like NCCL it needs no peer memory: a CPU world's ranks all run on one host and map each
 * other's host memory, even where they claim different hosts. */
static const agmm_backend_impl nccl_cpu_impl = {
    .needs = 0,
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
    return agmm_mr_gpu_create(plan, AGMM_MR_GPU_WHOLE | AGMM_MR_GPU_SYM, 0);
}

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_mr_gpu *x = plan->state;
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    const agmm_mr_io io = agmm_mr_io_of(plan, vio);
    cudaStream_t cs = (cudaStream_t)stream;
    AGMM_TRY(st, agmm_mr_gemm_rows(plan, &x->gemm, &io, 0, s.m, x->sym->local, cs));
    AGMM_TRY(st, agmm_gpu_nccl_settle(plan->ctx,
                                      ncclAllReduce(x->sym->local, io.out, (size_t)(s.m * s.n), ncclBfloat16, ncclSum,
                                                    agmm_ctx_gpu(plan->ctx)->nccl_comm, cs),
                                      "ncclAllReduce"));
    AGMM_TRY(st, agmm_gpu_note_run(plan->ctx, cs));
fail:
    return st;
}

static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    agmm_mr_gpu_mem_need(plan, AGMM_MR_GPU_SYM, need);
}

static const agmm_backend_impl nccl_gpu_impl = {
    .needs = AGMM_CAP_NCCL,
    .create = gpu_create,
    .run = gpu_run,
    .destroy = agmm_mr_gpu_destroy,
    .mem_need = gpu_mem_need,
};
#define NCCL_GPU (&nccl_gpu_impl)
#else
#define NCCL_GPU NULL
#endif /* AGMM_HAVE_CUDA */

const agmm_backend agmm_backend_matmul_all_reduce_nccl = {
    .name = "nccl",
    .op = AGMM_OP_MATMUL_ALL_REDUCE,
    .summary = "one cuBLASLt GEMM into an NCCL window, then ncclAllReduce (the baseline; NCCL's sum order)",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 2,
    .cpu = &nccl_cpu_impl,
    .gpu = NCCL_GPU,
};
