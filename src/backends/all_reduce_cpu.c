/* The CPU world's all-reduce pieces shared by several backends (all_reduce_cpu.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "all_reduce_cpu.h"
#include "../core/numeric.h"
#include "../core/validate.h"

#define SUM_BLOCK 1024

void agmm_ar_cpu_sum(void *const *in, int nranks, agmm_dtype dtype, int64_t lo, int64_t hi, void *dst)
{
    float acc[SUM_BLOCK];
    for (int64_t b = lo; b < hi; b += SUM_BLOCK) {
        int64_t len = hi - b < SUM_BLOCK ? hi - b : SUM_BLOCK;
        if (dtype == AGMM_DTYPE_F32) {
            memcpy(acc, (const float *)in[0] + b, (size_t)len * sizeof(float));
            for (int r = 1; r < nranks; r++) {
                const float *x = (const float *)in[r] + b;
                for (int64_t i = 0; i < len; i++)
                    acc[i] += x[i];
            }
            memcpy((float *)dst + (b - lo), acc, (size_t)len * sizeof(float));
        } else {
            const uint16_t *x0 = (const uint16_t *)in[0] + b;
            for (int64_t i = 0; i < len; i++)
                acc[i] = agmm_bf16_to_f32(x0[i]);
            for (int r = 1; r < nranks; r++) {
                const uint16_t *x = (const uint16_t *)in[r] + b;
                for (int64_t i = 0; i < len; i++)
                    acc[i] += agmm_bf16_to_f32(x[i]);
            }
            uint16_t *out = (uint16_t *)dst + (b - lo);
            for (int64_t i = 0; i < len; i++)
                out[i] = agmm_f32_to_bf16(acc[i]);
        }
    }
}

agmm_status agmm_ar_cpu_sum_create(agmm_plan *plan)
{
    size_t bytes = (size_t)plan->desc.ar.n * agmm_dtype_bytes(plan->desc.ar.dtype);
    plan->state = malloc(bytes);
    if (plan->state == NULL)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_NO_MEMORY,
                         "rank %d: all_reduce staging of %zu bytes allocation failed", agmm_ctx_info(plan->ctx)->rank,
                         bytes);
    return AGMM_SUCCESS;
}

void agmm_ar_cpu_sum_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    need->staging_bytes += (uint64_t)plan->desc.ar.n * agmm_dtype_bytes(plan->desc.ar.dtype);
}

void agmm_ar_cpu_sum_destroy(agmm_plan *plan)
{
    free(plan->state);
    plan->state = NULL;
}

agmm_status agmm_ar_cpu_sum_run(agmm_plan *plan, const agmm_all_reduce_io *io, const char *what)
{
    const agmm_all_reduce_desc *d = &plan->desc.ar;
    int in_place = io->out == agmm_plan_in(plan);
    char name[96];
    snprintf(name, sizeof name, "%s opening barrier", what);
    agmm_status st = agmm_symm_barrier_host(plan->ctx, name);
    if (st != AGMM_SUCCESS)
        return st;
    void *in[AGMM_MAX_RANKS];
    const int nranks = agmm_ctx_info(plan->ctx)->nranks;
    for (int r = 0; r < nranks; r++)
        in[r] = agmm_plan_in_peer(plan, r);
    agmm_ar_cpu_sum(in, nranks, d->dtype, 0, d->n, in_place ? plan->state : io->out);
    snprintf(name, sizeof name, "%s closing barrier", what);
    st = agmm_symm_barrier_host(plan->ctx, name);
    if (st != AGMM_SUCCESS)
        return st;
    if (in_place)
        memcpy(io->out, plan->state, (size_t)d->n * agmm_dtype_bytes(d->dtype));
    return AGMM_SUCCESS;
}
