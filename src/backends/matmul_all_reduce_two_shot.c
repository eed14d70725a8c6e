/* matmul_all_reduce `two_shot`: the GEMM writes the partial into symmetric memory; then a
 * reduce-scatter by loads (rank q sums its slice of S from all W partials) and an all-gather by
 * loads (every rank pulls the other slices from their owners). Each rank moves 2(W-1)/W of S
 * instead of one_shot's (W-1): larger M is its case.
 *
 * GPU: the GEMM, then all_reduce's two_shot kernel (kernels/all_reduce.h) over the plan's
 * symmetric partials, with a symmetric result buffer for the reduced slices:
 *   opening barrier   every partial is written, and every peer has finished pulling my result
 *                     buffer in the previous run
 *   reduce-scatter    my slice from every partial, fp32 in rank order, into my result buffer
 *                     and io->c
 *   middle barrier    every slice is reduced, and nobody reads my partial any more (so my next
 *                     run's GEMM may overwrite it once this run is over)
 *   all-gather        the other slices from their owners' result buffers into io->c
 * No closing barrier: my result buffer is next written after the next run's opening barrier.
 * Every element is summed by one rank in rank order, so all ranks get the same bits. At W = 1 the
 * GEMM writes io->c.
 *
 * CPU world: the same steps with element slices (rank q: [q*MN/W, (q+1)*MN/W)) and host
 * barriers. */
#include <stdlib.h>
#include <string.h>

#include "matmul_reduce.h"
#include "all_reduce_cpu.h"

#define WHAT "matmul_all_reduce/two_shot"

/* ---- CPU world ---- */

typedef struct {
    agmm_mr_cpu_pull pull;   /* the GEMM's workspace and the symmetric partial */
    agmm_symm_buf *res;      /* the reduced slices: rank q's slice in rank q's buffer */
} two_shot_cpu;

static void cpu_destroy(agmm_plan *plan)
{
    two_shot_cpu *x = plan->state;
    if (x == NULL)
        return;
    agmm_symm_free(plan->ctx, x->res);
    agmm_symm_free(plan->ctx, x->pull.sym);
    agmm_cpu_gemm_ws_free(&x->pull.ws);
    free(x);
    plan->state = NULL;
}

static agmm_status cpu_create(agmm_plan *plan)
{
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    two_shot_cpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_NO_MEMORY, "rank %d: plan allocation failed", s.rank);
    plan->state = x;
    agmm_status st = agmm_cpu_gemm_ws_init(&x->pull.ws, s.k, agmm_ctx_err(plan->ctx));
    if (st == AGMM_SUCCESS)
        st = agmm_symm_alloc(plan->ctx, agmm_mr_sym_bytes(plan), &x->pull.sym);
    if (st == AGMM_SUCCESS)
        st = agmm_symm_alloc(plan->ctx, agmm_mr_sym_bytes(plan), &x->res);
    return st;
}

static agmm_status cpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    two_shot_cpu *x = plan->state;
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    const agmm_mr_io io = agmm_mr_io_of(plan, vio);
    const int64_t total = s.m * s.n;
    agmm_cpu_gemm_ws_forget_b(&x->pull.ws); /* B may hold new values since the last run */
    agmm_mr_cpu_gemm(&x->pull.ws, &s, &io, 0, s.m, x->pull.sym->local);
    agmm_status st = agmm_symm_barrier_host(plan->ctx, WHAT " opening barrier");
    if (st != AGMM_SUCCESS)
        return st;
    void *in[AGMM_MAX_RANKS];
    for (int p = 0; p < s.nranks; p++)
        in[p] = x->pull.sym->peer[p];
    const int64_t lo = (int64_t)s.rank * total / s.nranks, hi = (int64_t)(s.rank + 1) * total / s.nranks;
    uint16_t *res = x->res->local;
    agmm_ar_cpu_sum(in, s.nranks, AGMM_DTYPE_BF16, lo, hi, res + lo);
    st = agmm_symm_barrier_host(plan->ctx, WHAT " middle barrier");
    if (st != AGMM_SUCCESS)
        return st;
    /* Every slice from its owner, mine first and then round the ranks, so ranks spread their loads. */
    for (int pos = 0; pos < s.nranks; pos++) {
        const int q = (s.rank + pos) % s.nranks;
        const int64_t q_lo = (int64_t)q * total / s.nranks, q_hi = (int64_t)(q + 1) * total / s.nranks;
        memcpy(io.out + q_lo, (const uint16_t *)x->res->peer[q] + q_lo, (size_t)(q_hi - q_lo) * 2);
    }
    return AGMM_SUCCESS;
}

static void cpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    need->workspace_bytes += agmm_cpu_gemm_ws_bytes(agmm_mr_shape_of(plan).k);
    need->symmetric_bytes += 2 * agmm_mr_sym_bytes(plan);
}

static const agmm_backend_impl two_shot_cpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = cpu_create,
    .run = cpu_run,
    .destroy = cpu_destroy,
    .mem_need = cpu_mem_need,
};

/* ---- GPUs ---- */
#ifdef AGMM_HAVE_CUDA
#include "matmul_reduce_gpu.h"
#include "../world/rank_gpu.h"

static agmm_status gpu_create(agmm_plan *plan)
{
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    if (s.nranks == 1)
        return agmm_mr_gpu_create(plan, AGMM_MR_GPU_WHOLE, 0);
    /* The kernel's grid covers one rank's slice: ceil(vectors / W) vectors of 8 elements. */
    const int64_t nvec = (s.m * s.n + 7) / 8, slice = (nvec + s.nranks - 1) / s.nranks;
    return agmm_mr_gpu_create(plan, AGMM_MR_GPU_WHOLE | AGMM_MR_GPU_SYM | AGMM_MR_GPU_PAD | AGMM_MR_GPU_RES,
                              slice * 8);
}

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_mr_gpu *x = plan->state;
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    const agmm_mr_io io = agmm_mr_io_of(plan, vio);
    cudaStream_t cs = (cudaStream_t)stream;
    if (s.nranks == 1) {
        AGMM_TRY(st, agmm_mr_gemm_rows(plan, &x->gemm, &io, 0, s.m, io.out, cs));
    } else {
        AGMM_TRY(st, agmm_mr_gemm_rows(plan, &x->gemm, &io, 0, s.m, x->sym->local, cs));
        AGMM_TRY(st, agmm_mr_gpu_two_shot(plan, x, io.out, cs));
    }
    AGMM_TRY(st, agmm_gpu_note_run(plan->ctx, cs));
fail:
    return st;
}

static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    agmm_mr_gpu_mem_need(plan, AGMM_MR_GPU_SYM | AGMM_MR_GPU_PAD | AGMM_MR_GPU_RES, need);
}

static const agmm_backend_impl two_shot_gpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = gpu_create,
    .run = gpu_run,
    .destroy = agmm_mr_gpu_destroy,
    .mem_need = gpu_mem_need,
};
#define TWO_SHOT_GPU (&two_shot_gpu_impl)
#else
#define TWO_SHOT_GPU NULL
#endif /* AGMM_HAVE_CUDA */

const agmm_backend agmm_backend_matmul_all_reduce_two_shot = {
    .name = "two_shot",
    .op = AGMM_OP_MATMUL_ALL_REDUCE,
    .summary = "GEMM into symmetric memory; reduce-scatter by loads, then all-gather by loads: 2(W-1)/W of S per rank "
               "(larger M)",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 1,
    .cpu = &two_shot_cpu_impl,
    .gpu = TWO_SHOT_GPU,
};
