/* matmul_reduce_scatter `ce`: the copy-engine decomposition (PyTorch symmetric memory's fused
 * matmul + reduce-scatter, pushing instead of pulling): one GEMM per destination block, each
 * block's partial copied by the copy engine into its owner's symmetric slot as soon as its GEMM is
 * done, while the next block's GEMM runs; then every owner sums its W slots in rank order.
 *
 * Symmetric memory: W slots per rank (matmul_reduce.h); slot p of rank q's buffer receives rank
 * p's partial of rank q's rows. One run on rank r (epoch e):
 *   opening barrier   every peer has finished summing its slots in run e-1, so my copies may
 *                     overwrite them                                                     [W > 1]
 *   for q = r+1, r+2, ..., r-1 (mod W): GEMM of block q into my local staging slot q, then the
 *                     copy engine copies it into slot r of rank q's buffer
 *   GEMM of my own block straight into slot r of my own buffer (nobody else writes it)
 *   landed barrier    every copy into my slots has completed (each rank arrives after its own
 *                     copies; the barrier's release orders them before the arrival)     [W > 1]
 *   sum               io->out = sum over p of my slot p, fp32 in rank order, rounded once
 * No closing barrier: my slots are next written by peers after the next run's opening barrier,
 * which I enter only after this run's sum (stream order); A_r and B_r are read only by my GEMMs,
 * done before the sum; the staging slots are only mine. So once the run has completed the caller
 * may rewrite A_r, B_r and out.
 *
 * GPU: GEMMs and the sum on the caller's stream S, copies and barriers on the context's copy
 * stream C; block q's copy waits for its GEMM through an event (one event serves every block:
 * a wait binds to the record just before it), S waits for C's landed barrier through another.
 * Every cross-rank wait is a bounded barrier kernel on C. At W = 1 the GEMM writes io->out.
 *
 * CPU world: the same, with the plan's copy thread as the copy engine (src/cpu): the rank's
 * thread runs each GEMM and queues its copy, drains the copies before the landed barrier. */
#include <stdio.h>
#include <stdlib.h>

#include "matmul_reduce.h"
#include "all_reduce_cpu.h"

#define WHAT "matmul_reduce_scatter/ce"

/* ---- CPU world ---- */

typedef struct {
    agmm_cpu_gemm_ws ws;
    agmm_symm_buf *sym;         /* my W slots: slot p holds rank p's partial of my rows */
    uint16_t *stage;            /* local W slots: my partial of each peer's rows, before its copy */
    agmm_cpu_copy_engine *ce;
} ce_cpu;

static void cpu_destroy(agmm_plan *plan)
{
    ce_cpu *x = plan->state;
    if (x == NULL)
        return;
    agmm_cpu_ce_destroy(x->ce);
    agmm_symm_free(plan->ctx, x->sym);
    agmm_cpu_gemm_ws_free(&x->ws);
    free(x->stage);
    free(x);
    plan->state = NULL;
}

static agmm_status cpu_create(agmm_plan *plan)
{
    agmm_error *err = agmm_ctx_err(plan->ctx);
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    ce_cpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: plan allocation failed", s.rank);
    plan->state = x;
    x->stage = aligned_alloc(64, ((size_t)s.nranks * s.slot_bytes + 63) / 64 * 64);
    if (x->stage == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: %s staging of %zu bytes allocation failed", s.rank, WHAT,
                         (size_t)s.nranks * s.slot_bytes);
    agmm_status st = agmm_cpu_gemm_ws_init(&x->ws, s.k, err);
    if (st == AGMM_SUCCESS)
        st = agmm_symm_alloc(plan->ctx, (size_t)s.nranks * s.slot_bytes, &x->sym);
    if (st == AGMM_SUCCESS)
        st = agmm_cpu_ce_create(s.rank, err, s.nranks, &x->ce);
    return st;
}

static agmm_status cpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    ce_cpu *x = plan->state;
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    const agmm_mr_io io = agmm_mr_io_of(plan, vio);
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    agmm_cpu_gemm_ws_forget_b(&x->ws); /* B may hold new values since the last run */
    agmm_status st = agmm_symm_barrier_host(plan->ctx, WHAT " opening barrier");
    if (st != AGMM_SUCCESS)
        return st;
    for (int step = 1; step < s.nranks && st == AGMM_SUCCESS; step++) {
        const int q = (s.rank + step) % s.nranks;
        int64_t row0, rows = agmm_mr_block(&s, q, &row0);
        if (rows == 0)
            continue;
        uint16_t *staged = (uint16_t *)((char *)x->stage + (size_t)q * s.slot_bytes);
        agmm_mr_cpu_gemm(&x->ws, &s, &io, row0, rows, staged);
        agmm_cpu_copy_job job = {
            .dst = (char *)x->sym->peer[q] + (size_t)s.rank * s.slot_bytes,
            .src = staged,
            .bytes = (size_t)(rows * s.n) * 2,
        };
        st = agmm_cpu_ce_submit(x->ce, &job);
    }
    int64_t row0, rows = agmm_mr_block(&s, s.rank, &row0);
    if (st == AGMM_SUCCESS)
        agmm_mr_cpu_gemm(&x->ws, &s, &io, row0, rows, (uint16_t *)((char *)x->sym->local + (size_t)s.rank * s.slot_bytes));
    /* Even after a failure no copy may still write a peer's slot once we return. The copies never
     * wait for a peer, so the world's timeout bounds them. */
    agmm_status drained = agmm_cpu_ce_drain(x->ce, ri->timeout_s);
    if (st == AGMM_SUCCESS)
        st = drained;
    if (st == AGMM_SUCCESS)
        st = agmm_symm_barrier_host(plan->ctx, WHAT " landed barrier");
    if (st != AGMM_SUCCESS)
        return st;
    void *in[AGMM_MAX_RANKS];
    for (int p = 0; p < s.nranks; p++)
        in[p] = (char *)x->sym->local + (size_t)p * s.slot_bytes;
    agmm_ar_cpu_sum(in, s.nranks, AGMM_DTYPE_BF16, 0, rows * s.n, io.out);
    return AGMM_SUCCESS;
}

static void cpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    need->symmetric_bytes += (uint64_t)s.nranks * s.slot_bytes;
    need->workspace_bytes += agmm_cpu_gemm_ws_bytes(s.k) + (uint64_t)s.nranks * s.slot_bytes + 64;
}

static const agmm_backend_impl ce_cpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = cpu_create,
    .run = cpu_run,
    .destroy = cpu_destroy,
    .mem_need = cpu_mem_need,
};

/* ---- GPUs ---- */
#ifdef AGMM_HAVE_CUDA
#include "matmul_reduce_gpu.h"
#include "../kernels/all_reduce.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

static agmm_status gpu_create(agmm_plan *plan)
{
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    /* W = 1: the whole GEMM into io->out, nothing else. */
    if (s.nranks == 1)
        return agmm_mr_gpu_create(plan, AGMM_MR_GPU_WHOLE, 0);
    return agmm_mr_gpu_create(plan, AGMM_MR_GPU_BLOCKS | AGMM_MR_GPU_SYM | AGMM_MR_GPU_STAGE, s.block_rows * s.n);
}

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = plan->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    agmm_mr_gpu *x = plan->state;
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    const agmm_mr_io io = agmm_mr_io_of(plan, vio);
    cudaStream_t cs = (cudaStream_t)stream, cc = agmm_ctx_gpu(ctx)->copy_stream;
    int64_t row0, rows;
    if (s.nranks == 1) {
        AGMM_TRY(st, agmm_mr_gemm_rows(plan, &x->gemm, &io, 0, s.m, io.out, cs));
        AGMM_TRY(st, agmm_gpu_note_run(ctx, cs));
        return st;
    }
    AGMM_CUDA_TRY(st, err, cudaEventRecord(x->ev_in, cs));
    AGMM_CUDA_TRY(st, err, cudaStreamWaitEvent(cc, x->ev_in, 0));
    AGMM_TRY(st, agmm_symm_barrier_stream(ctx, cc));
    for (int step = 1; step < s.nranks; step++) {
        const int q = (s.rank + step) % s.nranks;
        if ((rows = agmm_mr_block(&s, q, &row0)) == 0)
            continue;
        char *staged = (char *)x->stage + (size_t)q * s.slot_bytes;
        AGMM_TRY(st, agmm_mr_gemm_rows(plan, &x->gemm, &io, row0, rows, staged, cs));
        AGMM_CUDA_TRY(st, err, cudaEventRecord(x->ev_block, cs));
        AGMM_CUDA_TRY(st, err, cudaStreamWaitEvent(cc, x->ev_block, 0));
        AGMM_CUDA_TRY(st, err, cudaMemcpyAsync((char *)x->sym->peer[q] + (size_t)s.rank * s.slot_bytes, staged,
                                               (size_t)(rows * s.n) * 2, cudaMemcpyDeviceToDevice, cc));
    }
    rows = agmm_mr_block(&s, s.rank, &row0);
    AGMM_TRY(st, agmm_mr_gemm_rows(plan, &x->gemm, &io, row0, rows,
                                   (char *)x->sym->local + (size_t)s.rank * s.slot_bytes, cs));
    AGMM_TRY(st, agmm_symm_barrier_stream(ctx, cc));
    AGMM_CUDA_TRY(st, err, cudaEventRecord(x->ev_done, cc));
    AGMM_CUDA_TRY(st, err, cudaStreamWaitEvent(cs, x->ev_done, 0));
    if (rows > 0)
        AGMM_CUDA_TRY(st, err, agmm_sum_slots_launch(x->sym->local, s.slot_bytes, s.nranks, rows * s.n, io.out,
                                                     x->sum_grid, cs));
    AGMM_TRY(st, agmm_gpu_note_run(ctx, cs));
fail:
    return st;
}

static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    agmm_mr_gpu_mem_need(plan, AGMM_MR_GPU_SYM | AGMM_MR_GPU_STAGE, need);
}

static const agmm_backend_impl ce_gpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = gpu_create,
    .run = gpu_run,
    .destroy = agmm_mr_gpu_destroy,
    .mem_need = gpu_mem_need,
};
#define CE_GPU (&ce_gpu_impl)
#else
#define CE_GPU NULL
#endif /* AGMM_HAVE_CUDA */

const agmm_backend agmm_backend_matmul_reduce_scatter_ce = {
    .name = "ce",
    .op = AGMM_OP_MATMUL_REDUCE_SCATTER,
    .summary = "one GEMM per destination block; the copy engine pushes each into its owner's symmetric slot as it is "
               "done; each owner sums its slots",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 1,
    .cpu = &ce_cpu_impl,
    .gpu = CE_GPU,
};
