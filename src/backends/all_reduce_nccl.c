/* all_reduce `nccl`: ncclAllReduce straight from the plan's symmetric input, which lives in an
 * NCCL window registered NCCL_WIN_COLL_SYMMETRIC: with io->out == agmm_plan_input (in place) both
 * buffers are windows and NCCL may pick its symmetric kernels (the seed's nccl column).
 * CPU world (no NCCL there): the plain one-pass sum an ncclAllReduce is checked against
 * (all_reduce_cpu.h). */
#include "all_reduce_cpu.h"

#define WHAT "all_reduce/nccl"

static agmm_status cpu_run(agmm_plan *plan, const void *io, void *stream)
{
    return agmm_ar_cpu_sum_run(plan, io, WHAT);
}

/* Like NCCL it needs no peer memory: a CPU world's ranks all run on one host and map each
 * other's host memory, even where they claim different hosts (a world spanning nodes, tested). */
static const agmm_backend_impl nccl_cpu_impl = {
    .needs = 0,
    .create = agmm_ar_cpu_sum_create,
    .run = cpu_run,
    .destroy = agmm_ar_cpu_sum_destroy,
    .mem_need = agmm_ar_cpu_sum_mem_need,
};

#ifdef AGMM_HAVE_CUDA
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

ncclDataType_t agmm_nccl_type(agmm_dtype dtype)
{
    return dtype == AGMM_DTYPE_F32 ? ncclFloat32 : ncclBfloat16;
}

static agmm_status gpu_create(agmm_plan *plan)
{
    plan->state = NULL;
    return AGMM_SUCCESS;
}

static void gpu_destroy(agmm_plan *plan) {}

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_all_reduce_io *io = vio;
    const agmm_all_reduce_desc *d = &plan->desc.ar;
    ncclComm_t comm = agmm_ctx_gpu(plan->ctx)->nccl_comm;
    cudaStream_t s = (cudaStream_t)stream;
    AGMM_TRY(st, agmm_gpu_nccl_settle(plan->ctx,
                                      ncclAllReduce(agmm_plan_in(plan), io->out, (size_t)d->n,
                                                    agmm_nccl_type(d->dtype), ncclSum, comm, s),
                                      "ncclAllReduce"));
    AGMM_TRY(st, agmm_gpu_note_run(plan->ctx, s));
fail:
    return st;
}

static const agmm_backend_impl nccl_gpu_impl = {
    .needs = AGMM_CAP_NCCL,
    .create = gpu_create,
    .run = gpu_run,
    .destroy = gpu_destroy,
};
#define NCCL_GPU (&nccl_gpu_impl)
#else
#define NCCL_GPU NULL
#endif

const agmm_backend agmm_backend_all_reduce_nccl = {
    .name = "nccl",
    .op = AGMM_OP_ALL_REDUCE,
    .summary = "ncclAllReduce on the plan's symmetric buffer (an NCCL window: NCCL may use its symmetric kernels)",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 2,
    .cpu = &nccl_cpu_impl,
    .gpu = NCCL_GPU,
};
