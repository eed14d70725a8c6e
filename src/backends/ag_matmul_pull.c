/* ag_matmul `pull`: no copy engine and no gather step. The GEMM reads every tile of A straight
 * from the shard of the rank that owns its rows, once that rank has said its shard is written,
 * and writes the gathered A as a by-product of those reads. For the latency-bound shapes, where a
 * copy-engine launch per peer and host-ordered signals cost more than moving the data.
 *
 * One run (W ranks; e = the plan's runs completed + 1, the same on every rank):
 *   entry    each rank raises its ready flag to e: word AGMM_PULL_READY of its signal words, in a
 *            symmetric buffer of the plan (only the owner writes it; release, after the shard)
 *   GEMM     the tiles in core/schedule.h's order (own rows first, then rank+1's, ...): a tile of
 *            rank src's rows reads src's shard after acquiring src's ready flag (bounded); the
 *            own shard needs no wait. The gathered A is written as the tiles read it, every row
 *            once (on the CPU by the tile of the first column of C; on GPUs K block kb of a row
 *            by the tile in column kb % col_tiles, twice with the same bytes where a short
 *            tile's box spills into the next chunk of the same shard).
 *   closing  each rank writes e into its done slot (AGMM_PULL_DONE + rank) of every peer's
 *            signal words once it has read their shards for the last time, then waits
 *            (bounded) until every peer has written its slot of its own: nobody returns while a
 *            peer may still read its shard, so the caller may overwrite it after the run. Then
 *            the count of runs completed becomes e                                  [W > 1]
 * The gathered A is not optional: io.a_gathered is required as for every backend (agmm.h), so
 * that a caller of `auto` never depends on which backend was chosen.
 *
 * GPU: one kernel per run, the GEMM engine (src/kernels/gemm/) in pull mode, with
 * nothing from the host that changes per run, so a run captured in a CUDA graph replays as a new
 * run: the count of runs is a word in the engine plan's device memory, which every CTA reads at
 * its start and the closing barrier's last CTA advances; the kernel raises this rank's ready flag
 * at its start (a system-scope fence first: the work before it on the caller's stream S, which
 * wrote the shard, is complete); the peers' shards are read through a tensor map per rank,
 * kept in device memory per distinct set of shard pointers (the plan's input, each io.input), so
 * a graph keeps the maps it was captured with. The engine's a_peers.cuh has who writes and waits
 * on each word. SMs: every wait is on a peer's GEMM, which raises its flag from any CTA that runs;
 * where ranks share the GPU each rank takes at most SMs/ranks - 1, so every rank's GEMM, and the
 * work before it on its stream, finds SMs while the others spin.
 *
 * CPU: the rank's thread is the GEMM role, with the same schedule, flags, done slots and epochs
 * (the count of runs in the plan's state, advanced after the closing barrier). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ag_matmul_pull.h"
#include "backend.h"
#include "../core/schedule.h"
#include "../cpu/cpu.h"

#define WHAT "ag_matmul/pull"

extern const agmm_backend agmm_backend_ag_matmul_pull;

/* The plan's signal words on every rank: the ready flag, then one done slot per rank
 * (kernels/gemm/gemm_engine.h, AGMM_PULL_READY and AGMM_PULL_DONE). None with one rank, which
 * waits for nobody. */
#define READY_WORD 0
#define DONE_WORD 1
/* The distinct inputs a plan's captures may use: one engine map slot each (gemm_engine.h). */
#define PULL_CAPTURED_INPUTS 16
static agmm_status signals_alloc(agmm_plan *plan, agmm_symm_buf **out)
{
    const int nranks = agmm_ctx_info(plan->ctx)->nranks;
    return nranks > 1 ? agmm_symm_alloc(plan->ctx, (size_t)(1 + nranks) * sizeof(uint32_t), out) : AGMM_SUCCESS;
}

/* ---- CPU world ---- */

/* Tiles of the CPU GEMM role: small enough that a short chunk wastes little. */
#define CPU_BM 32
#define CPU_BN 64
#define CPU_GROUP_M 8

typedef struct {
    agmm_symm_buf *signals;
    agmm_cpu_gemm_ws ws;
    agmm_sched sched;
    uint32_t runs;               /* runs completed: the epoch of the next one is runs + 1 */
    int64_t delay_us;            /* test hook: sleep before the GEMM role */
} pull_cpu;

static void cpu_destroy(agmm_plan *plan)
{
    pull_cpu *x = plan->state;
    if (x == NULL)
        return;
    agmm_symm_free(plan->ctx, x->signals); /* collective: after every peer's last read */
    agmm_cpu_gemm_ws_free(&x->ws);
    free(x);
    plan->state = NULL;
}

static agmm_status cpu_create(agmm_plan *plan)
{
    agmm_ctx *ctx = plan->ctx;
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    pull_cpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "rank %d: plan allocation failed", ri->rank);
    plan->state = x;
    x->sched = (agmm_sched){.m = d->m, .n = d->n, .nranks = ri->nranks, .rank = ri->rank, .splits = d->splits,
                            .bm = CPU_BM, .bn = CPU_BN, .group_m = CPU_GROUP_M};
    agmm_sched_init(&x->sched);
    agmm_status st = agmm_cpu_gemm_ws_init(&x->ws, d->k, agmm_ctx_err(ctx));
    if (st == AGMM_SUCCESS)
        st = signals_alloc(plan, &x->signals);
    return st;
}

/* Acquires rank src's ready flag for epoch e (bounded); the shard's rows are readable after. */
static agmm_status cpu_wait_ready(agmm_plan *plan, const pull_cpu *x, int src, uint32_t e)
{
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    uint32_t seen = 0;
    if (agmm_cpu_flag_wait((const uint32_t *)x->signals->peer[src] + READY_WORD, e, ri->timeout_s, &seen))
        return AGMM_SUCCESS;
    return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_TIMEOUT,
                     "rank %d: %s waited %.2f s for rank %d's ready flag at epoch %u (it reads %u): rank %d never "
                     "started this run, so its shard was never said to be written",
                     ri->rank, WHAT, ri->timeout_s, src, e, seen, src);
}

/* The closing barrier for epoch e: this rank has read every peer's shard for the last time in
 * this run; it says so in its slot of every peer's done slots (release), then acquires every
 * peer's slot of its own (bounded), after which no peer reads its shard in this run. */
static agmm_status cpu_close(agmm_plan *plan, const pull_cpu *x, uint32_t e)
{
    const agmm_rank_info *ri = agmm_ctx_info(plan->ctx);
    for (int q = 0; q < ri->nranks; q++)
        if (q != ri->rank)
            agmm_cpu_flag_raise((uint32_t *)x->signals->peer[q] + DONE_WORD + ri->rank, e);
    for (int q = 0; q < ri->nranks; q++) {
        uint32_t seen = 0;
        if (q != ri->rank &&
            !agmm_cpu_flag_wait((const uint32_t *)x->signals->local + DONE_WORD + q, e, ri->timeout_s, &seen))
            return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_TIMEOUT,
                             "rank %d: %s closing barrier waited %.2f s for rank %d's done slot at epoch %u (it reads "
                             "%u): rank %d never arrived (it may still read this rank's shard)",
                             ri->rank, WHAT, ri->timeout_s, q, e, seen, q);
    }
    return AGMM_SUCCESS;
}

/* The GEMM role of epoch e: every tile of the schedule, in its order, reading A where it lives. */
static agmm_status cpu_compute(agmm_plan *plan, pull_cpu *x, const agmm_ag_matmul_io *io, uint32_t e)
{
    const agmm_ag_matmul_desc *d = &plan->desc.mm;
    const agmm_sched *s = &x->sched;
    uint16_t *a_gathered = io->a_gathered, *c = io->c;
    uint64_t ready = 1ull << s->rank; /* ranks whose ready flag was seen in this run */
    int64_t ntiles = agmm_sched_num_tiles(s);
    for (int64_t i = 0; i < ntiles; i++) {
        agmm_tile t;
        agmm_sched_tile(s, i, &t);
        if (!(ready >> t.src_rank & 1)) {
            agmm_status st = cpu_wait_ready(plan, x, t.src_rank, e);
            if (st != AGMM_SUCCESS)
                return st;
            ready |= 1ull << t.src_rank;
        }
        const uint16_t *shard = t.local ? agmm_plan_in(plan) : agmm_plan_in_peer(plan, t.src_rank);
        const uint16_t *a_tile = shard + t.shard_row0 * d->k;
        agmm_cpu_gemm_bf16(&x->ws, a_tile, d->k, t.rows, io->b, d->b_layout, d->n, t.col0, t.cols,
                           c + t.row0 * d->n + t.col0, d->n);
        if (t.col0 == 0) /* the gathered A, as a by-product: each row tile once */
            memcpy(a_gathered + t.row0 * d->k, a_tile, (size_t)t.rows * (size_t)d->k * sizeof(uint16_t));
    }
    return AGMM_SUCCESS;
}

static agmm_status cpu_run(agmm_plan *plan, const void *io, void *stream)
{
    pull_cpu *x = plan->state;
    const uint32_t e = x->runs + 1;
    agmm_cpu_gemm_ws_forget_b(&x->ws); /* B may hold new values since the last run */
    /* Entry: the caller wrote the shard on this thread before the call; the release publishes it
     * to every peer that acquires the flag. */
    if (x->signals)
        agmm_cpu_flag_raise((uint32_t *)x->signals->local + READY_WORD, e);
    if (x->delay_us > 0) {
        struct timespec nap = {(time_t)(x->delay_us / 1000000), (long)(x->delay_us % 1000000) * 1000};
        nanosleep(&nap, NULL);
    }
    agmm_status st = cpu_compute(plan, x, io, e);
    if (st == AGMM_SUCCESS && x->signals)
        st = cpu_close(plan, x, e);
    if (st == AGMM_SUCCESS)
        x->runs = e;
    return st;
}

static const agmm_backend_impl pull_cpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = cpu_create,
    .run = cpu_run,
    .destroy = cpu_destroy,
};

/* ---- GPUs ---- */
#ifdef AGMM_HAVE_CUDA
#include "../kernels/gemm/gemm_engine.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

_Static_assert(READY_WORD == AGMM_PULL_READY && DONE_WORD == AGMM_PULL_DONE,
               "the CPU world's signal words are where the engine reads them");
_Static_assert(AGMM_GEMM_MAP_SLOTS == PULL_CAPTURED_INPUTS, "the table's limit of pull's captures is the engine's map "
               "slots");

typedef struct {
    agmm_symm_buf *signals;
    agmm_gemm_plan *gemm;
    const void *peers[AGMM_MAX_RANKS]; /* this run's shards, as this rank addresses them */
} pull_gpu;

static void gpu_destroy(agmm_plan *plan)
{
    pull_gpu *x = plan->state;
    if (x == NULL)
        return;
    /* Collective: no rank frees while a peer's run may still read its shard or signal words. */
    agmm_host_barrier(plan->ctx);
    agmm_gemm_plan_destroy(x->gemm);
    agmm_symm_free(plan->ctx, x->signals);
    cudaGetLastError();
    free(x);
    plan->state = NULL;
}

/* The GEMM's SM budget (see the header comment): 0 is the whole GPU. */
static int gemm_ctas(const agmm_ctx *ctx)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    if (ri->ranks_on_device <= 1)
        return 0;
    int share = agmm_ctx_gpu(ctx)->num_sms / ri->ranks_on_device - 1;
    return share > 0 ? share : 1;
}

/* The shards of this run (the plan's input, or the caller's io.input), every rank's. */
static agmm_status set_peers(agmm_plan *plan, pull_gpu *x, cudaStream_t s)
{
    const int nranks = agmm_ctx_info(plan->ctx)->nranks;
    for (int r = 0; r < nranks; r++)
        x->peers[r] = agmm_plan_in_peer(plan, r);
    return agmm_gemm_plan_set_peers(x->gemm, x->peers, s, agmm_ctx_err(plan->ctx));
}

static agmm_status gpu_create(agmm_plan *plan)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = plan->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    const agmm_ag_matmul_desc *md = &plan->desc.mm;
    pull_gpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: plan state allocation failed", ri->rank);
    plan->state = x;
    AGMM_TRY(st, signals_alloc(plan, &x->signals));
    agmm_gemm_desc d = {
        .a_local = plan->input->local,
        .b_layout = md->b_layout,
        .m = md->m,
        .n = md->n,
        .k = md->k,
        .nranks = ri->nranks,
        .rank = ri->rank,
        .splits = md->splits,
        .dev_error = g->err_dev,
        .timeout_ns = g->timeout_ns,
        .pull = 1,
        .signals = x->signals ? (uint32_t *const *)x->signals->d_peer : NULL,
        .max_ctas = gemm_ctas(ctx),
        .config = -1,
    };
    AGMM_TRY(st, agmm_gemm_plan_create(&x->gemm, &d, err));
    /* The maps of the plan's own input now, so runs from it fill nothing. */
    AGMM_TRY(st, set_peers(plan, x, g->copy_stream));
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(g->copy_stream));
    /* Everyone leaves plan time together: a rank's first run must not meet a peer still in
     * cudaMalloc, which may synchronise a shared device. */
    AGMM_TRY(st, agmm_host_barrier(ctx));
fail:
    return st;
}

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    pull_gpu *x = plan->state;
    const agmm_ag_matmul_io *io = vio;
    cudaStream_t s = (cudaStream_t)stream;
    agmm_ctx *ctx = plan->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    AGMM_TRY(st, agmm_gemm_plan_set_ptrs(x->gemm, io->a_gathered, agmm_plan_in(plan), io->b, io->c, err));
    AGMM_TRY(st, set_peers(plan, x, s));
    /* Its epoch, ready flag and closing barrier are on the device; the engine records why it
     * refused or failed to launch. */
    AGMM_TRY(st, agmm_gemm_run(x->gemm, 0, s, err));
    AGMM_TRY(st, agmm_gpu_note_run(ctx, s));
fail:
    return st;
}

static const agmm_backend_impl pull_gpu_impl = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = gpu_create,
    .run = gpu_run,
    .destroy = gpu_destroy,
};
#define PULL_GPU (&pull_gpu_impl)
#else
#define PULL_GPU NULL
#endif /* AGMM_HAVE_CUDA */

const agmm_backend agmm_backend_ag_matmul_pull = {
    .name = "pull",
    .op = AGMM_OP_AG_MATMUL,
    .summary = "one GEMM kernel reads every tile of A straight from its owner's shard once that rank's ready flag "
               "is up, and writes the gathered A as it goes; no copy engine",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 3,
    .cpu = &pull_cpu_impl,
    .gpu = PULL_GPU,
    .captured_inputs = PULL_CAPTURED_INPUTS,
};

/* ---- test hook ---- */

agmm_status agmm_pull_set_delay(agmm_plan *plan, int64_t delay_ns)
{
    if (plan == NULL)
        return AGMM_ERR_INVALID_ARG;
    if (plan->backend != &agmm_backend_ag_matmul_pull || plan->state == NULL || delay_ns < 0)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_INVALID_ARG,
                         "plan runs %s, delay_ns=%lld: the delay hook needs a pull plan and delay_ns >= 0",
                         plan->backend->name, (long long)delay_ns);
    if (plan->impl == &pull_cpu_impl) {
        ((pull_cpu *)plan->state)->delay_us = (delay_ns + 999) / 1000;
        return AGMM_SUCCESS;
    }
#ifdef AGMM_HAVE_CUDA
    agmm_gemm_plan_set_delay(((pull_gpu *)plan->state)->gemm, (uint64_t)delay_ns);
#endif
    return AGMM_SUCCESS;
}
