/* The symmetric heap's front door and its host-memory implementation (CPU world). */
#include "symm_impl.h"

#include <stdlib.h>
#include <string.h>

#ifndef AGMM_HAVE_CUDA
agmm_status agmm_symm_local_gpu_alloc(agmm_ctx *ctx, agmm_symm_buf *buf) { return AGMM_ERR_UNSUPPORTED; }
void agmm_symm_local_gpu_free(agmm_ctx *ctx, agmm_symm_buf *buf) {}
agmm_status agmm_symm_nccl_alloc(agmm_ctx *ctx, agmm_symm_buf *buf) { return AGMM_ERR_UNSUPPORTED; }
void agmm_symm_nccl_free(agmm_ctx *ctx, agmm_symm_buf *buf) {}
int agmm_symm_uses_nccl(const agmm_ctx *ctx) { return 0; }
#endif

static agmm_status host_alloc(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    /* 64-byte alignment: the CPU kernels use it for vector-friendly rows, and it keeps flags
     * of different buffers off shared cache lines. */
    size_t rounded = (buf->bytes + 63) / 64 * 64;
    void *mem = aligned_alloc(64, rounded);
    if (mem == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "rank %d: host symmetric allocation of %zu bytes failed",
                         ctx->rank, buf->bytes);
    memset(mem, 0, rounded);
    buf->local = mem;
    agmm_status st = agmm_world_exchange(ctx, &mem, sizeof mem, buf->peer);
    if (st != AGMM_SUCCESS) {
        free(mem);
        buf->local = NULL;
    }
    return st;
}

agmm_status agmm_symm_alloc(agmm_ctx *ctx, size_t bytes, agmm_symm_buf **out)
{
    *out = NULL;
    if (bytes == 0)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_INVALID_ARG, "symmetric allocation of 0 bytes");
    agmm_symm_buf *buf = calloc(1, sizeof *buf);
    if (buf == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "symmetric buffer record allocation failed");
    buf->bytes = bytes;
    agmm_status st;
    if (ctx->world->kind == AGMM_WORLD_CPU)
        st = host_alloc(ctx, buf);
    else if (agmm_symm_uses_nccl(ctx))
        st = agmm_symm_nccl_alloc(ctx, buf);
    else
        st = agmm_symm_local_gpu_alloc(ctx, buf);
    if (st != AGMM_SUCCESS) {
        free(buf);
        return st;
    }
    *out = buf;
    return AGMM_SUCCESS;
}

void agmm_symm_free(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    if (buf == NULL)
        return;
    if (ctx->world->kind == AGMM_WORLD_CPU) {
        /* Peers may still be reading this rank's buffer: meet first. A timeout here only means a
         * peer is gone, and then nobody reads. */
        agmm_world_barrier(ctx);
        free(buf->local);
    } else if (agmm_symm_uses_nccl(ctx)) {
        agmm_symm_nccl_free(ctx, buf);
    } else {
        agmm_symm_local_gpu_free(ctx, buf);
    }
    free(buf);
}
