/* all_reduce `nccl` and `nccl_plain` (the seed's nccl column, two ways):
 *   nccl        ncclAllReduce straight from the plan's symmetric input, which lives in an NCCL
 *               window registered NCCL_WIN_COLL_SYMMETRIC: with io->out == agmm_plan_input (in
 *               place) both buffers are windows and NCCL may pick its symmetric kernels.
 *   nccl_plain  ncclAllReduce from a plain cudaMalloc buffer that NCCL knows nothing about,
 *               as a framework calling NCCL on ordinary tensors would. Each run first copies the
 *               input there (one device-to-device copy of n elements, included in its time). */
#include <stdlib.h>

#include "backend.h"
#include "../core/validate.h"
#include "../world/ctx_gpu.h"
#include "../world/gpu_check.h"

static ncclDataType_t nccl_type(agmm_dtype dtype)
{
    return dtype == AGMM_DTYPE_F32 ? ncclFloat32 : ncclBfloat16;
}

static agmm_status create_nccl(agmm_plan *p)
{
    p->impl = NULL;
    return AGMM_SUCCESS;
}

static void destroy_nccl(agmm_plan *p) {}

static agmm_status run_nccl(agmm_plan *p, const agmm_io *io, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = p->ctx;
    ncclComm_t comm = (ncclComm_t)ctx->nccl_comm;
    cudaStream_t s = (cudaStream_t)stream;
    AGMM_NCCL_TRY(st, &ctx->err, comm,
                  ncclAllReduce(p->input->local, io->out, (size_t)p->ar.n, nccl_type(p->ar.dtype), ncclSum, comm, s));
    AGMM_TRY(st, agmm_ctx_gpu_note_run(ctx, s));
fail:
    return st;
}

static agmm_status create_plain(agmm_plan *p)
{
    agmm_status st = AGMM_SUCCESS;
    void *plain = NULL;
    AGMM_CUDA_TRY(st, &p->ctx->err, cudaMalloc(&plain, (size_t)p->ar.n * agmm_dtype_bytes(p->ar.dtype)));
    p->impl = plain;
fail:
    return st;
}

static void destroy_plain(agmm_plan *p)
{
    cudaFree(p->impl);
    p->impl = NULL;
}

static agmm_status run_plain(agmm_plan *p, const agmm_io *io, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = p->ctx;
    ncclComm_t comm = (ncclComm_t)ctx->nccl_comm;
    cudaStream_t s = (cudaStream_t)stream;
    size_t bytes = (size_t)p->ar.n * agmm_dtype_bytes(p->ar.dtype);
    AGMM_CUDA_TRY(st, &ctx->err, cudaMemcpyAsync(p->impl, p->input->local, bytes, cudaMemcpyDeviceToDevice, s));
    AGMM_NCCL_TRY(st, &ctx->err, comm,
                  ncclAllReduce(p->impl, io->out, (size_t)p->ar.n, nccl_type(p->ar.dtype), ncclSum, comm, s));
    AGMM_TRY(st, agmm_ctx_gpu_note_run(ctx, s));
fail:
    return st;
}

const agmm_backend_ops agmm_gpu_all_reduce_nccl_ops = {
    .id = AGMM_BACKEND_NCCL,
    .op = AGMM_OP_ALL_REDUCE,
    .cpu = 0,
    .nccl = 1,
    .create = create_nccl,
    .run = run_nccl,
    .destroy = destroy_nccl,
};

const agmm_backend_ops agmm_gpu_all_reduce_nccl_plain_ops = {
    .id = AGMM_BACKEND_NCCL_PLAIN,
    .op = AGMM_OP_ALL_REDUCE,
    .cpu = 0,
    .nccl = 1,
    .create = create_plain,
    .run = run_plain,
    .destroy = destroy_plain,
};
