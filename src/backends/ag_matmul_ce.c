/* ag_matmul `ce`: the copy-engine decomposition (the algorithm of PyTorch symmetric memory's
 * fused all-gather matmul, without its host overhead). The gather skeleton (gather.h) copies the
 * peers' shards chunk by chunk; the local shard's GEMM starts at once, straight from the shard,
 * and each peer chunk gets its own GEMM as soon as its copy has landed.
 *
 * GPU: one cuBLASLt GEMM per chunk on the caller's stream S. Chunk readiness is a local matter
 * (my copy stream to my compute stream), so it is an event, not a flag: nothing there waits for a
 * peer, nothing needs a bound. One event serves every chunk: cudaStreamWaitEvent binds to the
 * record made just before it, so the next record cannot disturb an earlier wait. At W = 1 there
 * are no barriers: the run is the GEMM and, beside it, one device-to-device copy of the shard
 * (after it, on the caller's stream, where that is the legacy default stream: gpu_run).
 * Plan time: the GEMMs' descriptors and algorithms (one for the shard, one or two chunk heights),
 * a workspace, an event; where ranks share a GPU, each GEMM is also run once so its kernel is
 * loaded before any run can spin in a barrier.
 *
 * CPU: the rank's thread multiplies the local chunks from the shard, then each peer chunk after
 * waiting for its flag; every GEMM is src/cpu's, so C is bit for bit that of `nccl`. */
#include <stdlib.h>

#include "gather.h"
#include "../core/schedule.h"

#define WHAT "ag_matmul/ce"

/* ---- CPU world ---- */

typedef struct {
    agmm_gather_cpu gather;
    agmm_cpu_gemm_ws ws;
} ce_cpu;

static void cpu_destroy(agmm_plan *plan)
{
    ce_cpu *x = plan->state;
    if (x == NULL)
        return;
    agmm_gather_cpu_destroy(&x->gather);
    agmm_cpu_gemm_ws_free(&x->ws);
    free(x);
    plan->state = NULL;
}

static agmm_status cpu_create(agmm_plan *plan)
{
    agmm_ctx *ctx = plan->ctx;
    ce_cpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "rank %d: plan allocation failed",
                         agmm_ctx_info(ctx)->rank);
    plan->state = x;
    agmm_status st = agmm_cpu_gemm_ws_init(&x->ws, plan->desc.mm.k, agmm_ctx_err(ctx));
    if (st == AGMM_SUCCESS)
        st = agmm_gather_cpu_create(plan, &x->gather);
    return st;
}

/* GEMM of `rows` rows of A starting at `a` into C rows [c_row0, c_row0 + rows), all columns. */
static void chunk_gemm(agmm_plan *plan, ce_cpu *x, const agmm_ag_matmul_io *io, const uint16_t *a, int64_t c_row0,
                       int64_t rows)
{
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    agmm_cpu_gemm_bf16(&x->ws, a, d->k, rows, io->b, d->b_layout, d->n, 0, d->n, (uint16_t *)io->c + c_row0 * d->n,
                       d->n);
}

static agmm_status cpu_compute(agmm_plan *plan, const agmm_ag_matmul_io *io, void *arg)
{
    ce_cpu *x = arg;
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    agmm_sched s = {.m = d->m, .splits = d->splits};
    /* The local chunks: no wait, the shard is this rank's own memory. */
    for (int sp = 0; sp < d->splits; sp++) {
        int64_t row0, rows;
        agmm_sched_chunk_rows(&s, sp, &row0, &rows);
        chunk_gemm(plan, x, io, (const uint16_t *)agmm_plan_in(plan) + row0 * d->k, (int64_t)ri->rank * d->m + row0,
                   rows);
    }
    /* The peers' chunks, each as soon as its own copy has landed. */
    for (int pos = 1; pos < ri->nranks; pos++) {
        int src = (ri->rank + pos) % ri->nranks;
        for (int sp = 0; sp < d->splits; sp++) {
            agmm_status st = agmm_gather_cpu_wait(plan, &x->gather, src * d->splits + sp, WHAT);
            if (st != AGMM_SUCCESS)
                return st;
            int64_t row0, rows;
            agmm_sched_chunk_rows(&s, sp, &row0, &rows);
            int64_t grow0 = (int64_t)src * d->m + row0;
            chunk_gemm(plan, x, io, (const uint16_t *)io->a_gathered + grow0 * d->k, grow0, rows);
        }
    }
    return AGMM_SUCCESS;
}

static agmm_status cpu_run(agmm_plan *plan, const void *io, void *stream)
{
    ce_cpu *x = plan->state;
    agmm_cpu_gemm_ws_forget_b(&x->ws); /* B may hold new values since the last run */
    return agmm_gather_cpu_run(plan, &x->gather, io, WHAT, cpu_compute, x);
}

static void cpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    need->workspace_bytes += agmm_cpu_gemm_ws_bytes(plan->desc.mm.k) + agmm_gather_cpu_bytes(plan);
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
#include "gemm_lt.h"
#include "../kernels/copy_after.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

typedef struct {
    agmm_gather_gpu gather;
    agmm_gemm_lt *local;        /* rows = m: the shard itself */
    agmm_gemm_lt *chunk[2];     /* rows = floor(m/S) and floor(m/S) + 1: peers' chunks */
    int64_t chunk_rows[2];
    void *workspace;            /* every GEMM runs on S, one after another: one workspace */
    cudaEvent_t ev_chunk;
} ce_gpu;

static void gpu_destroy(agmm_plan *plan)
{
    ce_gpu *x = plan->state;
    if (x == NULL)
        return;
    /* Collective: no rank frees while a peer's run may still use it (peers only read the shard,
     * which plan.c frees after this with its own meeting; this one covers cudaFree's device sync). */
    agmm_host_barrier(plan->ctx);
    agmm_gemm_lt_destroy(x->local);
    agmm_gemm_lt_destroy(x->chunk[0]);
    agmm_gemm_lt_destroy(x->chunk[1]);
    cudaFree(x->workspace);
    if (x->ev_chunk)
        cudaEventDestroy(x->ev_chunk);
    agmm_gather_gpu_destroy(&x->gather);
    cudaGetLastError();
    free(x);
    plan->state = NULL;
}

/* Where ranks share a device, each GEMM's kernel is loaded now (lazy loading may synchronise the
 * context, which a peer's barrier spinning in a run would turn into a timeout). Scratch B and C,
 * zeroed; A is the shard. All ranks are inside this collective call, so nothing of theirs waits. */
static agmm_status warm_gemms(agmm_plan *plan, ce_gpu *x)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_error *err = agmm_ctx_err(plan->ctx);
    cudaStream_t s = agmm_ctx_gpu(plan->ctx)->copy_stream;
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    size_t b_elems = (size_t)(d->k * d->n), c_elems = (size_t)(d->m * d->n);
    char *scratch = NULL;
    AGMM_CUDA_TRY(st, err, cudaMalloc((void **)&scratch, (b_elems + c_elems) * 2 + 16));
    AGMM_CUDA_TRY(st, err, cudaMemsetAsync(scratch, 0, (b_elems + c_elems) * 2 + 16, s));
    /* B at offset 0, C 16-byte aligned after it. */
    char *c = scratch + (b_elems * 2 + 15) / 16 * 16;
    const agmm_gemm_lt *all[3] = {x->local, x->chunk[0], x->chunk[1]};
    for (int i = 0; i < 3; i++)
        if (all[i])
            AGMM_TRY(st, agmm_gemm_lt_warm(all[i], plan->input->local, scratch, c, x->workspace, s, err));
fail:
    cudaFree(scratch);
    return st;
}

static agmm_status gpu_create(agmm_plan *plan)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = plan->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    cublasLtHandle_t lt = agmm_ctx_gpu(ctx)->lt;
    ce_gpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: plan state allocation failed", ri->rank);
    plan->state = x;
    AGMM_TRY(st, agmm_gather_gpu_create(plan, &x->gather));

    /* Alignment of the C rows each GEMM writes (A rows are 16-byte aligned: k % 8 == 0). */
    unsigned align_local = agmm_gemm_lt_align((uint64_t)(ri->rank * d->m * d->n * 2));
    unsigned align_chunk = 16;
    agmm_sched s = {.m = d->m, .splits = d->splits};
    for (int src = 0; src < ri->nranks; src++) {
        for (int sp = 0; sp < d->splits; sp++) {
            int64_t r0, rows;
            agmm_sched_chunk_rows(&s, sp, &r0, &rows);
            unsigned a = agmm_gemm_lt_align((uint64_t)((src * d->m + r0) * d->n * 2));
            if (a < align_chunk)
                align_chunk = a;
        }
    }
    const unsigned flags = ri->ranks_on_device > 1 ? AGMM_GEMM_LT_SHARED_DEVICE : 0;
    AGMM_TRY(st, agmm_gemm_lt_create(&x->local, lt, d->m, d->n, d->k, d->b_layout, align_local,
                                     AGMM_GEMM_LT_WORKSPACE_BYTES, flags, err));
    if (ri->nranks > 1) {
        x->chunk_rows[0] = d->m / d->splits;
        x->chunk_rows[1] = x->chunk_rows[0] + 1;
        for (int i = 0; i < 2; i++)
            if (x->chunk_rows[i] >= 1 && (i == 0 || d->m % d->splits != 0))
                AGMM_TRY(st, agmm_gemm_lt_create(&x->chunk[i], lt, x->chunk_rows[i], d->n, d->k, d->b_layout,
                                                 align_chunk, AGMM_GEMM_LT_WORKSPACE_BYTES, flags, err));
    }
    AGMM_CUDA_TRY(st, err, cudaMalloc(&x->workspace, AGMM_GEMM_LT_WORKSPACE_BYTES));
    AGMM_CUDA_TRY(st, err, cudaEventCreateWithFlags(&x->ev_chunk, cudaEventDisableTiming));
    if (ri->ranks_on_device > 1 && ri->nranks > 1)
        AGMM_TRY(st, warm_gemms(plan, x));
    /* Where ranks share a device, a rank's first barrier must not meet a peer still inside
     * cudaMalloc (which may synchronise the device): everyone leaves plan time together. */
    AGMM_TRY(st, agmm_host_barrier(ctx));
fail:
    return st;
}

static agmm_status gpu_start(agmm_plan *plan, const agmm_ag_matmul_io *io, cudaStream_t s, void *arg)
{
    ce_gpu *x = arg;
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    size_t c_row = (size_t)d->n * 2;
    char *c = (char *)io->c + (size_t)(agmm_ctx_info(plan->ctx)->rank * d->m) * c_row;
    return agmm_gemm_lt_run(x->local, agmm_plan_in(plan), io->b, c, x->workspace, s, agmm_ctx_err(plan->ctx));
}

static agmm_status gpu_landed(agmm_plan *plan, const agmm_ag_matmul_io *io, int chunk, int64_t row0, int64_t rows,
                              cudaStream_t s, cudaStream_t c, void *arg)
{
    agmm_status st = AGMM_SUCCESS;
    ce_gpu *x = arg;
    agmm_error *err = agmm_ctx_err(plan->ctx);
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    const agmm_gemm_lt *g = rows == x->chunk_rows[0] ? x->chunk[0] : x->chunk[1];
    AGMM_CUDA_TRY(st, err, cudaEventRecord(x->ev_chunk, c));
    AGMM_CUDA_TRY(st, err, cudaStreamWaitEvent(s, x->ev_chunk, 0));
    AGMM_TRY(st, agmm_gemm_lt_run(g, (const char *)io->a_gathered + (size_t)row0 * (size_t)d->k * 2, io->b,
                                  (char *)io->c + (size_t)row0 * (size_t)d->n * 2, x->workspace, s, err));
fail:
    return st;
}

/* W = 1 on the legacy default stream: the GEMM, then the shard's copy into the gathered A on the
 * same stream (copy_after.h). Elsewhere the copy runs on the copy stream beside the GEMM, ordered
 * by two events; on the legacy stream each costs ~0.9 us, more than a copy of a small shard after
 * the GEMM does (cuBLASLt's kernels do not let a dependent start early, so the copy follows the
 * GEMM). Measured on an H100 (docs/results, twenty-sixth session), ce at W = 1 on the legacy
 * stream with the copy after / with the events: 256^3 7.8 / 9.4 us, 1024^3 11.8 / 13.2, 1536^3
 * (a 4.5 MiB shard) 19.1 / 19.5, 2048^3 (8 MiB) 34.0 / 33.1; on a created stream the events won
 * everywhere (256^3 7.2 against 7.9). */
#define CE_COPY_AFTER_MAX_BYTES (6u << 20)

static agmm_status gpu_start_alone(agmm_plan *plan, const agmm_ag_matmul_io *io, cudaStream_t s, void *arg)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    AGMM_TRY(st, gpu_start(plan, io, s, arg));
    AGMM_CUDA_TRY(st, agmm_ctx_err(plan->ctx),
                  agmm_launch_copy_after(io->a_gathered, agmm_plan_in(plan), (size_t)(d->m * d->k) * 2, s));
fail:
    return st;
}

static const agmm_gather_gpu_hooks ce_hooks = {gpu_start, gpu_landed, 0};
static const agmm_gather_gpu_hooks ce_hooks_alone = {gpu_start_alone, gpu_landed, 1};

static agmm_status gpu_run(agmm_plan *plan, const void *io, void *stream)
{
    ce_gpu *x = plan->state;
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    cudaStream_t s = (cudaStream_t)stream;
    const int legacy = s == NULL || s == cudaStreamLegacy;
    const int alone = agmm_ctx_info(plan->ctx)->nranks == 1 && legacy &&
                      (uint64_t)(d->m * d->k) * 2 <= CE_COPY_AFTER_MAX_BYTES;
    const agmm_gather_gpu_hooks *h = alone ? &ce_hooks_alone : &ce_hooks;
    return agmm_gather_gpu_run(plan, &x->gather, io, s, h, x);
}

/* The GEMMs' workspace, and where ranks share a device the scratch B and C of warm_gemms. */
static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    need->workspace_bytes += AGMM_GEMM_LT_WORKSPACE_BYTES;
    if (ri->ranks_on_device > 1 && ri->nranks > 1)
        need->workspace_bytes += (uint64_t)(d->k * d->n + d->m * d->n) * 2 + 16;
}

static const agmm_backend_impl ce_gpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = gpu_create,
    .run = gpu_run,
    .destroy = gpu_destroy,
    .mem_need = gpu_mem_need,
};
#define CE_GPU (&ce_gpu_impl)
#else
#define CE_GPU NULL
#endif /* AGMM_HAVE_CUDA */

const agmm_backend agmm_backend_ag_matmul_ce = {
    .name = "ce",
    .op = AGMM_OP_AG_MATMUL,
    .summary = "copy engine gathers peers' shards chunk by chunk; one GEMM per chunk as it lands, the local "
               "shard's first",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 0,
    .cpu = &ce_cpu_impl,
    .gpu = CE_GPU,
};
