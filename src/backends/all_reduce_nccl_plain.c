/* all_reduce `nccl_plain`: ncclAllReduce from a plain cudaMalloc buffer that NCCL knows nothing
 * about, as a framework calling NCCL on ordinary tensors would. Each run first copies the input
 * there (one device-to-device copy of n elements, included in its time). GPUs only. */
#include "backend.h"

#ifdef AGMM_HAVE_CUDA
#include "../core/validate.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

ncclDataType_t agmm_nccl_type(agmm_dtype dtype); /* all_reduce_nccl.c */

static agmm_status gpu_create(agmm_plan *plan)
{
    agmm_status st = AGMM_SUCCESS;
    void *plain = NULL;
    const agmm_all_reduce_desc *d = &plan->desc.ar;
    AGMM_CUDA_TRY(st, agmm_ctx_err(plan->ctx), cudaMalloc(&plain, (size_t)d->n * agmm_dtype_bytes(d->dtype)));
    plan->state = plain;
fail:
    return st;
}

static void gpu_destroy(agmm_plan *plan)
{
    cudaFree(plan->state);
    plan->state = NULL;
}

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_all_reduce_io *io = vio;
    const agmm_all_reduce_desc *d = &plan->desc.ar;
    agmm_error *err = agmm_ctx_err(plan->ctx);
    ncclComm_t comm = agmm_ctx_gpu(plan->ctx)->nccl_comm;
    cudaStream_t s = (cudaStream_t)stream;
    size_t bytes = (size_t)d->n * agmm_dtype_bytes(d->dtype);
    AGMM_CUDA_TRY(st, err, cudaMemcpyAsync(plan->state, agmm_plan_in(plan), bytes, cudaMemcpyDeviceToDevice, s));
    AGMM_TRY(st, agmm_gpu_nccl_settle(plan->ctx,
                                      ncclAllReduce(plan->state, io->out, (size_t)d->n, agmm_nccl_type(d->dtype),
                                                    ncclSum, comm, s),
                                      "ncclAllReduce"));
    AGMM_TRY(st, agmm_gpu_note_run(plan->ctx, s));
fail:
    return st;
}

static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    need->staging_bytes += (uint64_t)plan->desc.ar.n * agmm_dtype_bytes(plan->desc.ar.dtype);
}

static const agmm_backend_impl plain_gpu_impl = {
    .needs = AGMM_CAP_NCCL,
    .create = gpu_create,
    .run = gpu_run,
    .destroy = gpu_destroy,
    .mem_need = gpu_mem_need,
};
#define PLAIN_GPU (&plain_gpu_impl)
#else
#define PLAIN_GPU NULL
#endif

const agmm_backend agmm_backend_all_reduce_nccl_plain = {
    .name = "nccl_plain",
    .op = AGMM_OP_ALL_REDUCE,
    .summary = "ncclAllReduce from a plain buffer NCCL knows nothing about, as frameworks call it (a copy in first)",
    .devices = AGMM_DEVICE_GPU,
    .auto_order = -1,
    .cpu = NULL,
    .gpu = PLAIN_GPU,
};
