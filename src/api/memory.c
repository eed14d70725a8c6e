/* Memory known before allocating: the pools a rank allocates from, and how a shortfall reads.
 * Plan creation (plan_agree.c) and agmm-bench (agmm_ext_check_memory) compare what they are about
 * to allocate with what a pool has left, so that "too big" is AGMM_ERR_NO_MEMORY naming both
 * numbers, never an allocation that an overcommitting kernel grants and later kills for. */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "agmm_ext.h"
#include "../core/hostmem.h"
#include "../core/text.h"
#ifdef AGMM_HAVE_CUDA
#include "../world/gpu_headers.h"
#endif

void agmm_mem_pool_of(agmm_ctx *ctx, int device, agmm_mem_pool *pool)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    memset(pool, 0, sizeof *pool);
    pool->gpu = device && (ri->caps & AGMM_CAP_GPU);
    /* The ranks of one host share its memory (threads of this process, or processes of this job
     * on this host); ranks sharing a GPU share its memory. */
    pool->sharers = pool->gpu ? ri->ranks_on_device : ri->ranks_on_host;
#ifdef AGMM_HAVE_CUDA
    if (pool->gpu) {
        size_t free_bytes = 0, total_bytes = 0;
        cudaError_t e = cudaMemGetInfo(&free_bytes, &total_bytes);
        if (e == cudaSuccess) {
            pool->avail_bytes = free_bytes;
            snprintf(pool->source, sizeof pool->source, "free on GPU %d of %s", ri->device,
                     agmm_bytes(total_bytes).s);
        } else {
            cudaGetLastError();
            pool->avail_bytes = UINT64_MAX; /* unknown: the allocation itself will say */
            snprintf(pool->source, sizeof pool->source, "unknown: cudaMemGetInfo: %s", cudaGetErrorString(e));
        }
        return;
    }
#endif
    agmm_host_memory m;
    agmm_host_memory_available(&m);
    pool->avail_bytes = m.bytes;
    snprintf(pool->source, sizeof pool->source, "%s", m.source);
}

int agmm_mem_fits(uint64_t per_rank, const agmm_mem_pool *pool)
{
    return per_rank <= pool->avail_bytes / (uint64_t)(pool->sharers > 0 ? pool->sharers : 1);
}

size_t agmm_mem_shortfall_text(char *buf, size_t len, uint64_t per_rank, const char *parts, const agmm_mem_pool *pool)
{
    const int sharers = pool->sharers > 0 ? pool->sharers : 1;
    char shared[96] = "";
    if (sharers > 1)
        agmm_format(shared, sizeof shared, "%s per rank x %d ranks sharing it", agmm_bytes(per_rank).s, sharers);
    const int both = shared[0] && parts[0], any = shared[0] || parts[0];
    return agmm_format(buf, len, "needs %s of %s%s%s%s%s%s, but %s is available (%s)",
                       agmm_bytes(per_rank * (uint64_t)sharers).s, pool->gpu ? "GPU memory" : "host memory",
                       any ? " (" : "", shared, both ? "; " : "", parts, any ? ")" : "",
                       agmm_bytes(pool->avail_bytes).s, pool->source);
}

agmm_status agmm_ext_check_memory(agmm_ctx *ctx, uint64_t host_bytes, uint64_t device_bytes, char *why,
                                  size_t why_len)
{
    agmm_mem_pool host, dev;
    agmm_mem_pool_of(ctx, 0, &host);
    agmm_mem_pool_of(ctx, 1, &dev);
    /* In the CPU world the device's buffers are host memory too. */
    uint64_t on_host = host_bytes + (dev.gpu ? 0 : device_bytes);
    if (!agmm_mem_fits(on_host, &host)) {
        agmm_mem_shortfall_text(why, why_len, on_host, "", &host);
        return AGMM_ERR_NO_MEMORY;
    }
    if (dev.gpu && !agmm_mem_fits(device_bytes, &dev)) {
        agmm_mem_shortfall_text(why, why_len, device_bytes, "", &dev);
        return AGMM_ERR_NO_MEMORY;
    }
    return AGMM_SUCCESS;
}
