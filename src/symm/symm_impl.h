/* The implementations behind symm.h (internal to src/symm). symm.c picks one per world:
 *   CPU world                    -> host memory (symm.c)
 *   ranks with NCCL windows      -> symm_nccl.c
 *   emulated / in-process GPUs   -> symm_local_gpu.c (cudaMalloc, pointers exchanged in-process) */
#ifndef AGMM_SYMM_IMPL_H
#define AGMM_SYMM_IMPL_H

#include "symm.h"
#include "../world/world.h"

agmm_status agmm_symm_local_gpu_alloc(agmm_ctx *ctx, agmm_symm_buf *buf);
void agmm_symm_local_gpu_free(agmm_ctx *ctx, agmm_symm_buf *buf);
agmm_status agmm_symm_nccl_alloc(agmm_ctx *ctx, agmm_symm_buf *buf);
void agmm_symm_nccl_free(agmm_ctx *ctx, agmm_symm_buf *buf);
/* Which implementation serves this context's world (1: NCCL windows). */
int agmm_symm_uses_nccl(const agmm_ctx *ctx);

#endif
