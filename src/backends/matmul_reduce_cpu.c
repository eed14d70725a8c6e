/* The row-parallel matmul backends' shared parts in the CPU world (matmul_reduce.h). */
#include <stdio.h>
#include <stdlib.h>

#include "matmul_reduce.h"
#include "all_reduce_cpu.h"

agmm_mr_shape agmm_mr_shape_of(const agmm_plan *plan)
{
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    agmm_mr_shape s = {.nranks = ri->nranks, .rank = ri->rank};
    if (plan->op == AGMM_OP_MATMUL_ALL_REDUCE) {
        const agmm_matmul_all_reduce_desc *d = &plan->desc.mar;
        s.m = d->m, s.n = d->n, s.k = d->k, s.layout = d->b_layout;
    } else {
        const agmm_matmul_reduce_scatter_desc *d = &plan->desc.rs;
        s.m = d->m, s.n = d->n, s.k = d->k, s.layout = d->b_layout;
    }
    s.block_rows = agmm_split_block_rows(s.m, s.nranks);
    s.slot_bytes = ((size_t)(s.block_rows * s.n) * 2 + 15) / 16 * 16;
    return s;
}

agmm_mr_io agmm_mr_io_of(const agmm_plan *plan, const void *io)
{
    if (plan->op == AGMM_OP_MATMUL_ALL_REDUCE) {
        const agmm_matmul_all_reduce_io *x = io;
        return (agmm_mr_io){x->a, x->b, x->c};
    }
    const agmm_matmul_reduce_scatter_io *x = io;
    return (agmm_mr_io){x->a, x->b, x->out};
}

uint64_t agmm_mr_sym_bytes(const agmm_plan *plan)
{
    agmm_mr_shape s = agmm_mr_shape_of(plan);
    if (plan->op == AGMM_OP_MATMUL_ALL_REDUCE)
        return ((uint64_t)(s.m * s.n) * 2 + 15) / 16 * 16;
    return (uint64_t)s.nranks * s.slot_bytes;
}

void agmm_mr_cpu_gemm(agmm_cpu_gemm_ws *ws, const agmm_mr_shape *s, const agmm_mr_io *io, int64_t row0, int64_t rows,
                      uint16_t *dst)
{
    if (rows > 0)
        agmm_cpu_gemm_bf16(ws, io->a + row0 * s->k, s->k, rows, io->b, s->layout, s->n, 0, s->n, dst, s->n);
}

void agmm_mr_cpu_gemm_slots(agmm_cpu_gemm_ws *ws, const agmm_mr_shape *s, const agmm_mr_io *io, void *base)
{
    for (int q = 0; q < s->nranks; q++) {
        int64_t row0, rows = agmm_mr_block(s, q, &row0);
        agmm_mr_cpu_gemm(ws, s, io, row0, rows, (uint16_t *)((char *)base + (size_t)q * s->slot_bytes));
    }
}

/* ---- the pull protocol ---- */

agmm_status agmm_mr_cpu_pull_create(agmm_plan *plan)
{
    agmm_mr_cpu_pull *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_NO_MEMORY, "rank %d: plan allocation failed",
                         agmm_ctx_info(plan->ctx)->rank);
    plan->state = x;
    agmm_mr_shape s = agmm_mr_shape_of(plan);
    agmm_status st = agmm_cpu_gemm_ws_init(&x->ws, s.k, agmm_ctx_err(plan->ctx));
    if (st == AGMM_SUCCESS)
        st = agmm_symm_alloc(plan->ctx, agmm_mr_sym_bytes(plan), &x->sym);
    return st;
}

void agmm_mr_cpu_pull_destroy(agmm_plan *plan)
{
    agmm_mr_cpu_pull *x = plan->state;
    if (x == NULL)
        return;
    agmm_symm_free(plan->ctx, x->sym);
    agmm_cpu_gemm_ws_free(&x->ws);
    free(x);
    plan->state = NULL;
}

void agmm_mr_cpu_pull_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    need->workspace_bytes += agmm_cpu_gemm_ws_bytes(agmm_mr_shape_of(plan).k);
    need->symmetric_bytes += agmm_mr_sym_bytes(plan);
}

agmm_status agmm_mr_cpu_pull_run(agmm_plan *plan, const void *vio, const char *what)
{
    agmm_mr_cpu_pull *x = plan->state;
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    const agmm_mr_io io = agmm_mr_io_of(plan, vio);
    const int all = plan->op == AGMM_OP_MATMUL_ALL_REDUCE;
    agmm_cpu_gemm_ws_forget_b(&x->ws); /* B may hold new values since the last run */
    if (all)
        agmm_mr_cpu_gemm(&x->ws, &s, &io, 0, s.m, x->sym->local);
    else
        agmm_mr_cpu_gemm_slots(&x->ws, &s, &io, x->sym->local);

    char name[96];
    snprintf(name, sizeof name, "%s opening barrier", what);
    agmm_status st = agmm_symm_barrier_host(plan->ctx, name);
    if (st != AGMM_SUCCESS)
        return st;
    /* My rows (or all of S) from every rank's partial, at the same offset in each. */
    const size_t offset = all ? 0 : (size_t)s.rank * s.slot_bytes;
    const int64_t count = all ? s.m * s.n : agmm_mr_block(&s, s.rank, NULL) * s.n;
    void *in[AGMM_MAX_RANKS];
    for (int p = 0; p < s.nranks; p++)
        in[p] = (char *)x->sym->peer[p] + offset;
    agmm_ar_cpu_sum(in, s.nranks, AGMM_DTYPE_BF16, 0, count, io.out);
    snprintf(name, sizeof name, "%s closing barrier", what);
    return agmm_symm_barrier_host(plan->ctx, name);
}
