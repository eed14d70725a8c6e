/* The CPU world's all_reduce_rmsnorm pieces shared by several backends (all_reduce_rmsnorm_cpu.h). */
#include <stdio.h>
#include <stdlib.h>

#include "all_reduce_rmsnorm_cpu.h"
#include "../core/numeric.h"
#include "../core/rmsnorm.h"

void agmm_arn_cpu_rows(const agmm_plan *plan, const agmm_all_reduce_rmsnorm_io *io, void *const *x, int nx,
                       int64_t lo, int64_t hi, float *acc, uint16_t *y, uint16_t *r_out)
{
    const int64_t h = plan->desc.arn.hidden;
    const float eps = (float)plan->desc.arn.eps;
    for (int64_t t = lo; t < hi; t++) {
        for (int p = 0; p < nx; p++) {
            const uint16_t *row = (const uint16_t *)x[p] + t * h;
            for (int64_t i = 0; i < h; i++)
                acc[i] = p == 0 ? agmm_bf16_to_f32(row[i]) : acc[i] + agmm_bf16_to_f32(row[i]);
        }
        const uint16_t *residual = io->residual ? (const uint16_t *)io->residual + t * h : NULL;
        agmm_rmsnorm_row(acc, io->bias, residual, io->gamma, h, eps, r_out + t * h, y + t * h);
    }
}

agmm_status agmm_arn_cpu_scratch_create(agmm_plan *plan)
{
    const size_t bytes = (size_t)plan->desc.arn.hidden * sizeof(float);
    plan->state = malloc(bytes);
    if (plan->state == NULL)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_NO_MEMORY,
                         "rank %d: all_reduce_rmsnorm row scratch of %zu bytes: allocation failed",
                         agmm_ctx_info(plan->ctx)->rank, bytes);
    return AGMM_SUCCESS;
}

void agmm_arn_cpu_scratch_destroy(agmm_plan *plan)
{
    free(plan->state);
    plan->state = NULL;
}

void agmm_arn_cpu_scratch_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    need->workspace_bytes += (uint64_t)plan->desc.arn.hidden * sizeof(float);
}

agmm_status agmm_arn_cpu_one_pass(agmm_plan *plan, const agmm_all_reduce_rmsnorm_io *io, const char *what)
{
    char name[96];
    snprintf(name, sizeof name, "%s opening barrier", what);
    agmm_status st = agmm_symm_barrier_host(plan->ctx, name);
    if (st != AGMM_SUCCESS)
        return st;
    void *in[AGMM_MAX_RANKS];
    const int nranks = agmm_ctx_info(plan->ctx)->nranks;
    for (int r = 0; r < nranks; r++)
        in[r] = agmm_plan_in_peer(plan, r);
    agmm_arn_cpu_rows(plan, io, in, nranks, 0, plan->desc.arn.tokens, plan->state, io->y, io->residual_out);
    snprintf(name, sizeof name, "%s closing barrier", what);
    return agmm_symm_barrier_host(plan->ctx, name);
}
