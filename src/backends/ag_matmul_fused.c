/* ag_matmul `fused`: the gather skeleton (gather.h) fills the gathered A chunk by chunk, raising
 * one flag per chunk, while one GEMM walks the output tiles in src/core/schedule.h's order
 * (local rows first, then rank+1's, ...) and waits once per tile on that tile's chunk flag. Tiles
 * of the local shard read A straight from the shard, with no wait and no copy first (kraken's
 * trick, for any M).
 *
 * GPU: the GEMM is the persistent engine of src/kernels/gemm/ (its chunk-flag A source), launched
 * on S as the skeleton's start hook; its producer waits (acquire, bounded by the world's timeout)
 * until flags[chunk] >= 1. The GEMM also copies the local shard into the gathered A (the engine's
 * copy_local: idle warps of every CTA, while it computes), so the copy engine carries only peers'
 * chunks, and at W = 1 the run is the GEMM alone on S. The
 * landed hook raises the chunk's flag to 1 on the copy stream C with cuStreamWriteValue32, whose
 * default memory barrier orders the copied bytes before the flag (a one-thread release kernel
 * where the driver lacks stream memory operations).
 *   Flags: W*S uint32 and the engine's count in this rank's device memory, zeroed at plan time;
 *   raised only by its copy stream, read only by its GEMM. Reset: the GEMM puts them back to 0
 *   when its last CTA has passed its waits, and the next run's copies come after that GEMM (C
 *   waits for ev_in, recorded on S after it). The raised value is a constant, so a run captured
 *   in a CUDA graph raises and resets the same way at every replay (an epoch written from the
 *   host would be frozen into the graph).
 *   SMs: the barrier and flag kernels need an SM while the persistent GEMM holds the others. The
 *   entry barrier is enqueued first, on a high-priority stream; with several ranks the GEMM
 *   leaves one SM free, and where ranks share a GPU it takes at most SMs/ranks - 1, so every
 *   rank's signalling kernels find room.
 *
 * CPU: the rank's thread is the GEMM role: tile i = agmm_sched_tile(i) for i = 0, 1, ...; local
 * tiles (the first tiles_per_rank) at once from the shard, any other after its chunk's flag. The
 * same schedule and flags (raised to 1, reset after the run) as the GPU, so the CPU tests prove
 * the order and the protocol the GPU runs. */
#include <stdlib.h>
#include <string.h>

#include "ag_matmul_fused.h"
#include "../core/clock.h"
#include "gather.h"
#include "../core/schedule.h"

#define WHAT "ag_matmul/fused"

extern const agmm_backend agmm_backend_ag_matmul_fused;

/* ---- CPU world ---- */

/* Tile shape policy, by the rows of the largest chunk: the first entry that covers it. Short
 * chunks get short tiles so the last tile of a chunk wastes little. */
static const struct {
    int64_t max_chunk_rows;
    int bm, bn, group_m;
} tile_table[] = {
    {16, 16, 64, 8},
    {32, 32, 64, 8},
    {INT64_MAX, 64, 64, 8},
};

typedef struct {
    agmm_gather_cpu gather;
    agmm_cpu_gemm_ws ws;
    agmm_sched sched;
    agmm_fused_times *times;  /* per chunk, written by the rank thread */
} fused_cpu;

static void cpu_destroy(agmm_plan *plan)
{
    fused_cpu *x = plan->state;
    if (x == NULL)
        return;
    agmm_gather_cpu_destroy(&x->gather);
    agmm_cpu_gemm_ws_free(&x->ws);
    free(x->times);
    free(x);
    plan->state = NULL;
}

static agmm_status cpu_create(agmm_plan *plan)
{
    agmm_ctx *ctx = plan->ctx;
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    fused_cpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "rank %d: plan allocation failed", ri->rank);
    plan->state = x;
    x->sched = (agmm_sched){.m = d->m, .n = d->n, .nranks = ri->nranks, .rank = ri->rank, .splits = d->splits};
    int64_t chunk_rows = (d->m + d->splits - 1) / d->splits;
    size_t i = 0;
    while (tile_table[i].max_chunk_rows < chunk_rows)
        i++;
    x->sched.bm = tile_table[i].bm;
    x->sched.bn = tile_table[i].bn;
    x->sched.group_m = tile_table[i].group_m;
    agmm_sched_init(&x->sched);
    x->times = calloc((size_t)ri->nranks * (size_t)d->splits, sizeof *x->times);
    if (x->times == NULL)
        return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "rank %d: fused plan state allocation failed",
                         ri->rank);
    agmm_status st = agmm_cpu_gemm_ws_init(&x->ws, d->k, agmm_ctx_err(ctx));
    if (st == AGMM_SUCCESS)
        st = agmm_gather_cpu_create(plan, &x->gather);
    return st;
}

/* The GEMM role: every tile of the schedule, in its order, each after its chunk's flag. */
static agmm_status cpu_compute(agmm_plan *plan, const agmm_ag_matmul_io *io, void *arg)
{
    fused_cpu *x = arg;
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    const agmm_sched *s = &x->sched;
    const uint16_t *shard = agmm_plan_in(plan), *a = io->a_gathered;
    uint16_t *c = io->c;
    int64_t ntiles = agmm_sched_num_tiles(s);
    for (int64_t i = 0; i < ntiles; i++) {
        agmm_tile t;
        agmm_sched_tile(s, i, &t);
        const uint16_t *a_tile;
        if (t.local) {
            a_tile = shard + t.shard_row0 * d->k; /* this rank's own rows: nothing to wait for */
        } else {
            agmm_status st = agmm_gather_cpu_wait(plan, &x->gather, t.chunk, WHAT);
            if (st != AGMM_SUCCESS)
                return st;
            a_tile = a + t.row0 * d->k;
        }
        agmm_fused_times *tm = &x->times[t.chunk];
        int64_t t0 = agmm_mono_ns();
        if (tm->tiles == 0)
            tm->first_tile_ns = t0;
        agmm_cpu_gemm_bf16(&x->ws, a_tile, d->k, t.rows, io->b, d->b_layout, d->n, t.col0, t.cols,
                           c + t.row0 * d->n + t.col0, d->n);
        tm->last_tile_ns = agmm_mono_ns();
        tm->tiles++;
    }
    return AGMM_SUCCESS;
}

static agmm_status cpu_run(agmm_plan *plan, const void *io, void *stream)
{
    fused_cpu *x = plan->state;
    memset(x->times, 0, (size_t)x->gather.chunks * sizeof *x->times);
    agmm_cpu_gemm_ws_forget_b(&x->ws); /* B may hold new values since the last run */
    agmm_status st = agmm_gather_cpu_run(plan, &x->gather, io, WHAT, cpu_compute, x);
    for (int ch = 0; st == AGMM_SUCCESS && ch < x->gather.chunks; ch++)
        x->times[ch].copy_done_ns = x->gather.copy_done_ns[ch];
    return st;
}

static void cpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    uint64_t chunks = (uint64_t)agmm_ctx_info(plan->ctx)->nranks * (uint64_t)plan->desc.mm.splits;
    need->workspace_bytes += agmm_cpu_gemm_ws_bytes(plan->desc.mm.k) + agmm_gather_cpu_bytes(plan) +
                             chunks * sizeof(agmm_fused_times);
}

static const agmm_backend_impl fused_cpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = cpu_create,
    .run = cpu_run,
    .destroy = cpu_destroy,
    .mem_need = cpu_mem_need,
};

/* ---- GPUs ---- */
#ifdef AGMM_HAVE_CUDA
#include "../kernels/gemm/gemm_engine.h"
#include "../kernels/signal.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

typedef struct {
    agmm_gather_gpu gather;
    agmm_gemm_plan *gemm;
    uint32_t *flags;             /* nranks * splits chunk flags, then the engine's count */
} fused_gpu;

static void gpu_destroy(agmm_plan *plan)
{
    fused_gpu *x = plan->state;
    if (x == NULL)
        return;
    /* Collective: no rank frees while a peer's run may still read its shard (plan.c frees the
     * shard after this). */
    agmm_host_barrier(plan->ctx);
    agmm_gemm_plan_destroy(x->gemm);
    cudaFree(x->flags);
    agmm_gather_gpu_destroy(&x->gather);
    cudaGetLastError();
    free(x);
    plan->state = NULL;
}

/* The GEMM's SM budget (see the header comment). */
static int gemm_ctas(const agmm_ctx *ctx)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const int sms = agmm_ctx_gpu(ctx)->num_sms;
    if (ri->ranks_on_device > 1) {
        int share = sms / ri->ranks_on_device - 1;
        return share > 0 ? share : 1;
    }
    return ri->nranks > 1 ? sms - 1 : 0;
}

/* The engine's plan of a fused plan, tile config `config` (-1: the engine's policy). Operand
 * pointers come with each run (set_ptrs re-encodes only what changed); the waits are bounded by
 * the world's timeout. */
static agmm_status engine_plan(agmm_plan *plan, fused_gpu *x, int config, agmm_gemm_plan **out)
{
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    const agmm_gpu_rank *g = agmm_ctx_gpu(plan->ctx);
    const agmm_ag_matmul_desc *md = &plan->desc.mm;
    agmm_gemm_desc d = {
        .a_local = plan->input->local,
        .b_layout = md->b_layout,
        .m = md->m,
        .n = md->n,
        .k = md->k,
        .nranks = ri->nranks,
        .rank = ri->rank,
        .splits = md->splits,
        .chunk_flags = x->flags, /* at W = 1 no tile waits; the chunk-flag kernel copies the shard */
        .dev_error = g->err_dev,
        .timeout_ns = g->timeout_ns,
        .max_ctas = gemm_ctas(plan->ctx),
        .copy_local = 1,
        .config = config,
    };
    return agmm_gemm_plan_create(out, &d, agmm_ctx_err(plan->ctx));
}

static agmm_status gpu_create(agmm_plan *plan)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = plan->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const agmm_ag_matmul_desc *md = &plan->desc.mm;
    fused_gpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: plan state allocation failed", ri->rank);
    plan->state = x;
    AGMM_TRY(st, agmm_gather_gpu_create(plan, &x->gather));
    size_t flag_bytes = ((size_t)ri->nranks * (size_t)md->splits + 1) * sizeof(uint32_t);
    AGMM_CUDA_TRY(st, err, cudaMalloc((void **)&x->flags, flag_bytes));
    AGMM_CUDA_TRY(st, err, cudaMemset(x->flags, 0, flag_bytes));
    AGMM_TRY(st, engine_plan(plan, x, -1, &x->gemm));
    /* Everyone leaves plan time together: a rank's first barrier must not meet a peer still in
     * cudaMalloc, which may synchronise a shared device. */
    AGMM_TRY(st, agmm_host_barrier(ctx));
fail:
    return st;
}

/* The engine records why it refused or failed to launch. */
static agmm_status gpu_start(agmm_plan *plan, const agmm_ag_matmul_io *io, cudaStream_t s, void *arg)
{
    fused_gpu *x = arg;
    return agmm_gemm_run(x->gemm, 1, s, agmm_ctx_err(plan->ctx));
}

/* The flag goes up (to 1) only after the copy completes; the write's default memory barrier (or
 * the kernel's release fence) makes the copied rows visible first. */
static agmm_status gpu_landed(agmm_plan *plan, const agmm_ag_matmul_io *io, int chunk, int64_t row0, int64_t rows,
                              cudaStream_t s, cudaStream_t c, void *arg)
{
    agmm_status st = AGMM_SUCCESS;
    fused_gpu *x = arg;
    agmm_error *err = agmm_ctx_err(plan->ctx);
    const agmm_gpu_rank *g = agmm_ctx_gpu(plan->ctx);
    if (g->write_value32) {
        if (g->write_value32(c, (uintptr_t)(x->flags + chunk), 1, 0) != 0)
            return AGMM_FAIL(err, AGMM_ERR_CUDA, "rank %d: cuStreamWriteValue32 of chunk %d's flag failed",
                             agmm_ctx_info(plan->ctx)->rank, chunk);
    } else {
        AGMM_CUDA_TRY(st, err, agmm_launch_flag_raise(x->flags + chunk, 1, c));
    }
fail:
    return st;
}

static const agmm_gather_gpu_hooks fused_hooks = {gpu_start, gpu_landed, 1};

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    fused_gpu *x = plan->state;
    const agmm_ag_matmul_io *io = vio;
    agmm_status st =
        agmm_gemm_plan_set_ptrs(x->gemm, io->a_gathered, agmm_plan_in(plan), io->b, io->c, agmm_ctx_err(plan->ctx));
    if (st != AGMM_SUCCESS)
        return st;
    return agmm_gather_gpu_run(plan, &x->gather, io, (cudaStream_t)stream, &fused_hooks, x);
}

static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    need->workspace_bytes += (uint64_t)agmm_ctx_info(plan->ctx)->nranks * (uint64_t)plan->desc.mm.splits * 4;
}

static const agmm_backend_impl fused_gpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = gpu_create,
    .run = gpu_run,
    .destroy = gpu_destroy,
    .mem_need = gpu_mem_need,
};
#define FUSED_GPU (&fused_gpu_impl)
#else
#define FUSED_GPU NULL
#endif /* AGMM_HAVE_CUDA */

const agmm_backend agmm_backend_ag_matmul_fused = {
    .name = "fused",
    .op = AGMM_OP_AG_MATMUL,
    .summary = "copy engine fills peers' rows of A chunk by chunk, raising a flag per chunk; one persistent GEMM "
               "waits per tile, reads local tiles straight from the shard and copies it into A (GPU)",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 1,
    .cpu = &fused_cpu_impl,
    .gpu = FUSED_GPU,
};

/* ---- test hooks ---- */

static int is_fused(const agmm_plan *plan)
{
    return plan != NULL && plan->backend == &agmm_backend_ag_matmul_fused && plan->state != NULL;
}

agmm_status agmm_fused_set_copy_delay(agmm_plan *plan, int chunk, int64_t delay_ns)
{
    if (plan == NULL)
        return AGMM_ERR_INVALID_ARG;
    if (!is_fused(plan))
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_INVALID_ARG, "plan runs %s, not fused: no copy delay hook",
                         plan->backend->name);
    const int chunks = agmm_ctx_info(plan->ctx)->nranks * plan->desc.mm.splits;
    if (chunk < -1 || chunk >= chunks || delay_ns < 0)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_INVALID_ARG,
                         "chunk=%d, delay_ns=%lld: chunk must be -1 (none) or 0..%d, delay >= 0", chunk,
                         (long long)delay_ns, chunks - 1);
    if (plan->impl == &fused_cpu_impl) {
        fused_cpu *x = plan->state;
        for (int c = 0; c < chunks; c++)
            x->gather.delay_us[c] = c == chunk ? (delay_ns + 999) / 1000 : 0;
        return AGMM_SUCCESS;
    }
#ifdef AGMM_HAVE_CUDA
    fused_gpu *x = plan->state;
    x->gather.delay_chunk = chunk;
    x->gather.delay_ns = (uint64_t)delay_ns;
#endif
    return AGMM_SUCCESS;
}

agmm_status agmm_fused_chunk_times(agmm_plan *plan, int chunk, agmm_fused_times *out)
{
    if (plan == NULL)
        return AGMM_ERR_INVALID_ARG;
    if (!is_fused(plan) || plan->impl != &fused_cpu_impl || out == NULL)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_INVALID_ARG,
                         "chunk times are kept by CPU-world fused plans only (this plan runs %s%s), and out must "
                         "not be NULL",
                         plan->backend->name, plan->impl == &fused_cpu_impl ? "" : " on a GPU");
    fused_cpu *x = plan->state;
    if (chunk < 0 || chunk >= x->gather.chunks)
        return AGMM_ERR_INVALID_ARG;
    *out = x->times[chunk];
    return AGMM_SUCCESS;
}

agmm_status agmm_fused_set_gemm_config(agmm_plan *plan, int config)
{
    if (plan == NULL)
        return AGMM_ERR_INVALID_ARG;
    if (!is_fused(plan) || plan->impl == &fused_cpu_impl)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_UNSUPPORTED,
                         "plan runs %s%s: only a GPU fused plan has a GEMM engine to give config=%d",
                         plan->backend->name, plan->impl == &fused_cpu_impl ? " in the CPU world" : "", config);
#ifdef AGMM_HAVE_CUDA
    fused_gpu *x = plan->state;
    agmm_gemm_plan *gemm = NULL;
    agmm_status st = engine_plan(plan, x, config, &gemm);
    if (st != AGMM_SUCCESS)
        return st; /* the engine says which argument; the plan keeps its engine plan */
    agmm_gemm_plan_destroy(x->gemm);
    x->gemm = gemm;
#endif
    return AGMM_SUCCESS;
}

const char *agmm_fused_describe(const agmm_plan *plan)
{
#ifdef AGMM_HAVE_CUDA
    if (is_fused(plan) && plan->impl == &fused_gpu_impl)
        return agmm_gemm_plan_describe(((const fused_gpu *)plan->state)->gemm);
#endif
    return "";
}
