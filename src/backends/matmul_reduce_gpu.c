/* The row-parallel matmul backends' shared parts on GPUs (matmul_reduce_gpu.h): cuBLASLt plans
 * for the whole partial and for blocks of rows, made at plan time so that a run only enqueues
 * them; the buffers, pads and events a backend asks for; the launches of all_reduce's kernels. */
#ifdef AGMM_HAVE_CUDA
#include "matmul_reduce_gpu.h"

#include <stdlib.h>

#include "../kernels/all_reduce.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

static void gemm_destroy(agmm_mr_gemm *g)
{
    agmm_gemm_lt_destroy(g->whole);
    agmm_gemm_lt_destroy(g->block[0]);
    agmm_gemm_lt_destroy(g->block[1]);
    cudaFree(g->workspace);
    *g = (agmm_mr_gemm){0};
}

/* Loads every planned GEMM's kernel now, on zeroed scratch operands: where ranks share a device a
 * kernel loaded lazily during a run may wait for the whole context, including a peer's barrier that
 * waits for this rank. All ranks are inside plan creation, so nothing of theirs waits. */
static agmm_status warm(agmm_plan *plan, agmm_mr_gemm *g, const agmm_mr_shape *s)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_error *err = agmm_ctx_err(plan->ctx);
    cudaStream_t cs = agmm_ctx_gpu(plan->ctx)->copy_stream;
    const size_t a_bytes = (size_t)(s->m * s->k) * 2, b_bytes = (size_t)(s->k * s->n) * 2;
    const size_t c_bytes = (size_t)(s->m * s->n) * 2;
    char *scratch = NULL;
    AGMM_CUDA_TRY(st, err, cudaMalloc((void **)&scratch, a_bytes + b_bytes + c_bytes + 64));
    AGMM_CUDA_TRY(st, err, cudaMemsetAsync(scratch, 0, a_bytes + b_bytes + c_bytes + 64, cs));
    char *b = scratch + (a_bytes + 15) / 16 * 16, *c = b + (b_bytes + 15) / 16 * 16;
    const agmm_gemm_lt *all[3] = {g->whole, g->block[0], g->block[1]};
    for (int i = 0; i < 3; i++)
        if (all[i])
            AGMM_TRY(st, agmm_gemm_lt_warm(all[i], scratch, b, c, g->workspace, cs, err));
fail:
    cudaFree(scratch);
    return st;
}

static agmm_status gemm_create(agmm_plan *plan, agmm_mr_gemm *g, unsigned what)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = plan->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    cublasLtHandle_t lt = agmm_ctx_gpu(ctx)->lt;
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    const unsigned flags = agmm_ctx_info(ctx)->ranks_on_device > 1 ? AGMM_GEMM_LT_SHARED_DEVICE : 0;
    /* Every C a plan writes starts 16-byte aligned: an output, a slot, a symmetric buffer. */
    if (what & AGMM_MR_GPU_WHOLE)
        AGMM_TRY(st, agmm_gemm_lt_create(&g->whole, lt, s.m, s.n, s.k, s.layout, 16, AGMM_GEMM_LT_WORKSPACE_BYTES,
                                         flags, err));
    if (what & AGMM_MR_GPU_BLOCKS) {
        g->block_rows[0] = s.block_rows;
        /* The last non-empty block is the only one that may be shorter than R. */
        g->block_rows[1] = s.m - (s.m - 1) / s.block_rows * s.block_rows;
        for (int i = 0; i < 2; i++)
            if (i == 0 || g->block_rows[1] != g->block_rows[0])
                AGMM_TRY(st, agmm_gemm_lt_create(&g->block[i], lt, g->block_rows[i], s.n, s.k, s.layout, 16,
                                                 AGMM_GEMM_LT_WORKSPACE_BYTES, flags, err));
    }
    AGMM_CUDA_TRY(st, err, cudaMalloc(&g->workspace, AGMM_GEMM_LT_WORKSPACE_BYTES));
    if (agmm_ctx_info(ctx)->ranks_on_device > 1)
        AGMM_TRY(st, warm(plan, g, &s));
fail:
    return st;
}

agmm_status agmm_mr_gemm_rows(agmm_plan *plan, const agmm_mr_gemm *g, const agmm_mr_io *io, int64_t row0,
                              int64_t rows, void *dst, cudaStream_t s)
{
    agmm_error *err = agmm_ctx_err(plan->ctx);
    const agmm_mr_shape sh = agmm_mr_shape_of(plan);
    const agmm_gemm_lt *lt = rows == sh.m && g->whole                         ? g->whole
                             : rows == g->block_rows[0]                      ? g->block[0]
                             : rows == g->block_rows[1] && g->block[1] != NULL ? g->block[1]
                                                                              : NULL;
    if (rows == 0)
        return AGMM_SUCCESS;
    if (lt == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INTERNAL, "%s: no GEMM planned for %lld rows (M=%lld, blocks of %lld)",
                         agmm_op_name(plan->op), (long long)rows, (long long)sh.m, (long long)g->block_rows[0]);
    return agmm_gemm_lt_run(lt, io->a + row0 * sh.k, io->b, dst, g->workspace, s, err);
}

agmm_status agmm_mr_gemm_slots(agmm_plan *plan, const agmm_mr_gemm *g, const agmm_mr_io *io, void *base,
                               cudaStream_t s)
{
    const agmm_mr_shape sh = agmm_mr_shape_of(plan);
    if (agmm_mr_slots_contiguous(&sh) && g->whole)
        return agmm_mr_gemm_rows(plan, g, io, 0, sh.m, base, s);
    for (int q = 0; q < sh.nranks; q++) {
        int64_t row0, rows = agmm_mr_block(&sh, q, &row0);
        agmm_status st = agmm_mr_gemm_rows(plan, g, io, row0, rows, (char *)base + (size_t)q * sh.slot_bytes, s);
        if (st != AGMM_SUCCESS)
            return st;
    }
    return AGMM_SUCCESS;
}

/* ---- the plan state ---- */

void agmm_mr_gpu_destroy(agmm_plan *plan)
{
    agmm_mr_gpu *x = plan->state;
    if (x == NULL)
        return;
    /* Every rank is here before any frees: cudaFree may synchronise a shared device, which must
     * not meet a peer's run still waiting for this rank. */
    agmm_host_barrier(plan->ctx);
    gemm_destroy(&x->gemm);
    cudaFree(x->stage);
    cudaFree(x->padded);
    cudaFree(x->recv);
    if (x->ev_in)
        cudaEventDestroy(x->ev_in);
    if (x->ev_block)
        cudaEventDestroy(x->ev_block);
    if (x->ev_done)
        cudaEventDestroy(x->ev_done);
    cudaGetLastError();
    agmm_symm_free(plan->ctx, x->res);
    agmm_symm_free(plan->ctx, x->pad);
    agmm_symm_free(plan->ctx, x->sym);
    free(x);
    plan->state = NULL;
}

/* Blocks of AGMM_AR_THREADS threads for one vector each of `elems` bf16 elements, 1..cap. */
static int grid_for(int64_t elems, int cap)
{
    const int64_t vecs = (elems + 7) / 8, want = (vecs + AGMM_AR_THREADS - 1) / AGMM_AR_THREADS;
    return want < 1 ? 1 : want < cap ? (int)want : cap;
}

agmm_status agmm_mr_gpu_create(agmm_plan *plan, unsigned what, int64_t kernel_elems)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = plan->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    agmm_mr_gpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: plan state allocation failed", s.rank);
    plan->state = x;
    /* Collective parts first, in the same order on every rank. */
    if (what & AGMM_MR_GPU_SYM)
        AGMM_TRY(st, agmm_symm_alloc(ctx, agmm_mr_sym_bytes(plan), &x->sym));
    if (what & AGMM_MR_GPU_RES)
        AGMM_TRY(st, agmm_symm_alloc(ctx, agmm_mr_sym_bytes(plan), &x->res));
    if (what & AGMM_MR_GPU_PAD) {
        int max_blocks = 1;
        AGMM_TRY(st, agmm_gpu_agreed_sm_share(ctx, &max_blocks));
        x->grid = grid_for(kernel_elems, max_blocks);
        AGMM_TRY(st, agmm_symm_alloc(ctx, (size_t)x->grid * (size_t)s.nranks * sizeof(uint32_t), &x->pad));
    }
    x->sum_grid = grid_for(kernel_elems, 4 * agmm_ctx_gpu(ctx)->num_sms);
    if (what & AGMM_MR_GPU_STAGE) {
        AGMM_CUDA_TRY(st, err, cudaMalloc(&x->stage, (size_t)s.nranks * s.slot_bytes));
        /* Each run's GEMM writes a block before its copy reads it. Zeroed once only for
         * compute-sanitizer: initcheck does not see the stores of cuBLASLt's larger kernels and
         * flags the copy (docs/architecture.md, "Sanitizers"). */
        AGMM_CUDA_TRY(st, err, cudaMemset(x->stage, 0, (size_t)s.nranks * s.slot_bytes));
        AGMM_CUDA_TRY(st, err, cudaEventCreateWithFlags(&x->ev_in, cudaEventDisableTiming));
        AGMM_CUDA_TRY(st, err, cudaEventCreateWithFlags(&x->ev_block, cudaEventDisableTiming));
        AGMM_CUDA_TRY(st, err, cudaEventCreateWithFlags(&x->ev_done, cudaEventDisableTiming));
    }
    if (what & AGMM_MR_GPU_PADDED) {
        const size_t block_bytes = (size_t)(s.block_rows * s.n) * 2;
        AGMM_CUDA_TRY(st, err, cudaMalloc(&x->padded, (size_t)s.nranks * block_bytes));
        AGMM_CUDA_TRY(st, err, cudaMemset(x->padded, 0, (size_t)s.nranks * block_bytes));
        if (agmm_mr_block(&s, s.rank, NULL) < s.block_rows)
            AGMM_CUDA_TRY(st, err, cudaMalloc(&x->recv, block_bytes));
    }
    AGMM_TRY(st, gemm_create(plan, &x->gemm, what));
fail:
    return st;
}

void agmm_mr_gpu_mem_need(const agmm_plan *plan, unsigned what, agmm_mem_need *need)
{
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    need->workspace_bytes += AGMM_GEMM_LT_WORKSPACE_BYTES;
    if (ri->ranks_on_device > 1) /* the warm-up's scratch operands */
        need->workspace_bytes += (uint64_t)(s.m * s.k + s.k * s.n + s.m * s.n) * 2 + 64;
    if (what & AGMM_MR_GPU_SYM)
        need->symmetric_bytes += agmm_mr_sym_bytes(plan);
    if (what & AGMM_MR_GPU_RES)
        need->symmetric_bytes += agmm_mr_sym_bytes(plan);
    if (what & AGMM_MR_GPU_PAD)
        need->symmetric_bytes += (uint64_t)agmm_ctx_gpu(plan->ctx)->num_sms * (uint64_t)s.nranks * sizeof(uint32_t);
    if (what & AGMM_MR_GPU_STAGE)
        need->workspace_bytes += (uint64_t)s.nranks * s.slot_bytes;
    if (what & AGMM_MR_GPU_PADDED)
        need->workspace_bytes += (uint64_t)(s.nranks + 1) * (uint64_t)(s.block_rows * s.n) * 2;
}

/* The arguments every all_reduce kernel launch of these plans shares. */
static agmm_all_reduce_args ar_args(agmm_plan *plan, const agmm_mr_gpu *x, void *out)
{
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    const agmm_gpu_rank *g = agmm_ctx_gpu(plan->ctx);
    agmm_all_reduce_args a = {0};
    a.in = x->sym->d_peer;
    a.pad = x->pad->d_peer;
    a.out = out;
    a.rank = ri->rank;
    a.nranks = ri->nranks;
    a.grid = x->grid;
    a.stage = AGMM_AR_STAGE_NONE; /* out is the caller's, never the symmetric partial */
    a.err = g->err_dev;
    a.timeout_ns = g->timeout_ns; /* the world's, never 0 (world_common.c) */
    return a;
}

agmm_status agmm_mr_gpu_one_shot(agmm_plan *plan, const agmm_mr_gpu *x, size_t in_offset, int64_t n, void *out,
                                 cudaStream_t s)
{
    agmm_all_reduce_args a = ar_args(plan, x, out);
    a.in_offset = in_offset;
    a.n = n;
    cudaError_t ce = agmm_all_reduce_one_shot_launch(&a, AGMM_DTYPE_BF16, s);
    if (ce != cudaSuccess)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_CUDA, "%s: one_shot launch (grid %d, n=%lld): %s",
                         agmm_op_name(plan->op), x->grid, (long long)n, cudaGetErrorString(ce));
    return AGMM_SUCCESS;
}

agmm_status agmm_mr_gpu_two_shot(agmm_plan *plan, const agmm_mr_gpu *x, void *out, cudaStream_t s)
{
    const agmm_mr_shape sh = agmm_mr_shape_of(plan);
    agmm_all_reduce_args a = ar_args(plan, x, out);
    a.res = x->res->d_peer;
    a.n = sh.m * sh.n;
    cudaError_t ce = agmm_all_reduce_two_shot_launch(&a, AGMM_DTYPE_BF16, s);
    if (ce != cudaSuccess)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_CUDA, "%s: two_shot launch (grid %d, n=%lld): %s",
                         agmm_op_name(plan->op), x->grid, (long long)a.n, cudaGetErrorString(ce));
    return AGMM_SUCCESS;
}
#endif /* AGMM_HAVE_CUDA */
