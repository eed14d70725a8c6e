/* matmul_reduce_scatter `fused`: one GEMM of this rank's whole partial whose epilogue stores every
 * tile's rows straight into their owners' symmetric slots and raises a flag per tile at each
 * owner; each owner sums its rows of a tile, in rank order, as soon as every peer's flag for that
 * tile is up. No copy engine, no barrier kernel, one kernel per run on GPUs.
 *
 * Symmetric memory (per rank, the same sizes everywhere):
 *   slots    W slots of slot_bytes (matmul_reduce.h): slot p of rank q's buffer holds rank p's
 *            partial of rank q's rows (block q of the row split), as for `ce`.
 *   signals  a tile flag per (tile, source rank), word tile * W + p (tile = row tile * column
 *            tiles + column tile of the GEMM's grid, the same on every rank), then a done word
 *            per owner, word tiles * W + q.
 *
 * One run (epoch e = runs completed + 1, counted by the plan, the same on every rank). The GEMM
 * visits its tiles in core/schedule.h's reduce-scatter order: row tiles of all M rows (a tile may
 * straddle two or more blocks), those homed (first row) in block rank+1 first, then rank+2's, ...,
 * its own last. Per tile:
 *   slot free  before its first store into owner q's slot in this run, the rank waits (bounded)
 *              until its done word q has reached e-1: q has finished reading its slots of run
 *              e-1, so they may be overwritten. q raised it (below); the word is in this rank's
 *              own memory, so the wait polls locally. No wait for its own slot: its own previous
 *              run read it, and that run is over.
 *   store      each of the tile's rows into its owner's slot `rank` (remote rows over NVLink, or
 *              the same GPU where ranks share one; rows of its own block too, into its own slot,
 *              when the tile is not homed here: see deferred)
 *   signal     for each other owner the tile touches: add ARRIVALS to that owner's flag
 *              (tile, rank), with release order after the stores. The flags count: after run e
 *              each reads e * ARRIVALS (wrapping), never reset, so a CUDA graph replays them.
 *   reduce     if the tile is homed in this rank's block: wait (bounded) until every peer's flag
 *              of the tile has reached e * ARRIVALS (acquire), then out = the sum over p = 0..W-1
 *              of slot p's rows of the tile that are this rank's, in fp32 in rank order, rounded
 *              once (this rank's own partial straight from the GEMM on GPUs, from its slot on
 *              the CPU: the same bf16 value)
 * After the last tile:
 *   deferred   the tiles homed in an earlier block that reach into this rank's rows (at most one
 *              row of tiles: the block boundary's) are reduced the same way; their home rank
 *              visits them last, so waiting for them at the tile would stall a GEMM role for a
 *              block's worth of time
 *   closing    the rank stores e into its done word of every peer (release, after its last read
 *              of its slots): no wait, one-way. Then the count of runs becomes e.
 * Why no rank waits for itself, and no cycle: a rank waits only for its peers' tiles of its own
 * block (non-home tiles for them, which every rank visits before any tile of its own home:
 * schedule.h), and for done words of the run before; so every wait is for work that needs no wait
 * of this run to happen first. Why the caller may rewrite A_r, B_r and out as soon as the run has
 * completed: only this rank's GEMM and sums read or write them, all before the run's end.
 *
 * GPU: the GEMM engine (src/kernels/gemm/) with its scatter epilogue (epi_scatter.cuh): the
 * epilogue of every consumer warp stores, signals (ARRIVALS = 8: each of a tile's 8 consumer warps
 * adds 1 after its own stores), waits and sums as above; the deferred tiles, the closing and the
 * epoch are in its finish() (the last warp of the grid advances the plan's epoch word). SMs: the
 * waits are for peers' kernels only; with its own GPU the GEMM takes every SM; where ranks share
 * one each takes at most SMs/ranks - 1, so every rank's GEMM finds SMs while others wait. All ranks
 * run the same tile config (the tile grid names the flags): rank 0's, agreed at plan time. At W = 1
 * a plain GEMM writes io->out.
 *
 * CPU world: the rank's thread is the GEMM role, in tiles of CPU_BM x CPU_BN in the same visit,
 * with the same slots, flags (ARRIVALS = 1), done words and epochs, so the CPU tests prove the
 * protocol: a late rank's partials must be waited for, a slow owner's slots must not be
 * overwritten, and a frozen epoch would let run 2 read run 1's partials. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "matmul_reduce_scatter_fused.h"
#include "matmul_reduce.h"
#include "all_reduce_cpu.h"
#include "../core/schedule.h"

#define WHAT "matmul_reduce_scatter/fused"

extern const agmm_backend agmm_backend_matmul_reduce_scatter_fused;

/* Signal words: tile flags, then the done words (header comment). */
static size_t flag_word(int64_t tile, int nranks, int src)
{
    return (size_t)tile * (size_t)nranks + (size_t)src;
}
static size_t done_word(int64_t tiles, int nranks, int owner)
{
    return (size_t)tiles * (size_t)nranks + (size_t)owner;
}
static size_t signal_bytes(int64_t tiles, int nranks)
{
    return done_word(tiles, nranks, nranks) * sizeof(uint32_t);
}

static void sleep_us(int64_t us)
{
    if (us > 0) {
        struct timespec nap = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
        nanosleep(&nap, NULL);
    }
}

/* ---- CPU world ---- */

#define CPU_BM 32
#define CPU_BN 64
#define CPU_GROUP_M 8
#define CPU_ARRIVALS 1 /* each tile signals once per owner */

typedef struct {
    agmm_cpu_gemm_ws ws;
    agmm_sched sched;            /* the reduce-scatter visit in CPU tiles */
    agmm_symm_buf *slots, *signals;
    uint32_t runs;               /* runs completed: the epoch of the next one is runs + 1 */
    int64_t gemm_delay_us, reduce_delay_us; /* test hooks */
} fused_cpu;

/* One run's view, for the helpers below. */
typedef struct {
    agmm_plan *plan;
    fused_cpu *x;
    agmm_mr_shape s;
    agmm_mr_io io;
    uint32_t e;
    uint64_t done_seen;          /* owners whose done word was seen this run */
    int reduced;                 /* a reduce ran (the reduce delay is before the first) */
} cpu_run_state;

static void cpu_destroy(agmm_plan *plan)
{
    fused_cpu *x = plan->state;
    if (x == NULL)
        return;
    agmm_symm_free(plan->ctx, x->signals); /* collective: after every peer's last access */
    agmm_symm_free(plan->ctx, x->slots);
    agmm_cpu_gemm_ws_free(&x->ws);
    free(x);
    plan->state = NULL;
}

static agmm_sched cpu_sched(const agmm_mr_shape *s)
{
    agmm_sched sc = {.m = s->m, .n = s->n, .nranks = s->nranks, .rank = s->rank, .splits = 1, .bm = CPU_BM,
                     .bn = CPU_BN, .group_m = CPU_GROUP_M, .block_rows = s->block_rows};
    agmm_sched_init(&sc);
    return sc;
}

static agmm_status cpu_create(agmm_plan *plan)
{
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    fused_cpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_NO_MEMORY, "rank %d: plan allocation failed", s.rank);
    plan->state = x;
    x->sched = cpu_sched(&s);
    agmm_status st = agmm_cpu_gemm_ws_init(&x->ws, s.k, agmm_ctx_err(plan->ctx));
    if (st == AGMM_SUCCESS)
        st = agmm_symm_alloc(plan->ctx, (size_t)s.nranks * s.slot_bytes, &x->slots);
    if (st == AGMM_SUCCESS)
        st = agmm_symm_alloc(plan->ctx, signal_bytes(agmm_sched_num_tiles(&x->sched), s.nranks), &x->signals);
    return st;
}

static void cpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    const agmm_sched sc = cpu_sched(&s);
    need->workspace_bytes += agmm_cpu_gemm_ws_bytes(s.k);
    need->symmetric_bytes += (uint64_t)s.nranks * s.slot_bytes + signal_bytes(agmm_sched_num_tiles(&sc), s.nranks);
}

static uint32_t *cpu_signals(const cpu_run_state *r, int rank)
{
    return (uint32_t *)r->x->signals->peer[rank];
}

/* The tile index of the flags: its place in the GEMM's grid, the same on every rank. */
static int64_t grid_tile(const agmm_sched *sc, const agmm_tile *t)
{
    return t->row0 / sc->bm * sc->col_tiles + t->col0 / sc->bn;
}

/* Slot free: owner q has finished reading its slots of run e-1. */
static agmm_status cpu_wait_slot_free(cpu_run_state *r, int q)
{
    const agmm_rank_info *ri = agmm_ctx_info(r->plan->ctx);
    const int64_t tiles = agmm_sched_num_tiles(&r->x->sched);
    uint32_t seen = 0;
    if (r->done_seen >> q & 1)
        return AGMM_SUCCESS;
    if (!agmm_cpu_flag_wait(cpu_signals(r, r->s.rank) + done_word(tiles, r->s.nranks, q), r->e - 1, ri->timeout_s,
                            &seen))
        return AGMM_FAIL(agmm_ctx_err(r->plan->ctx), AGMM_ERR_TIMEOUT,
                         "rank %d: %s waited %.2f s for rank %d to finish reading its slots of run %u (its done word "
                         "reads %u): rank %d never finished that run, so this rank may not overwrite its slot there",
                         r->s.rank, WHAT, ri->timeout_s, q, r->e - 1, seen, q);
    r->done_seen |= 1ull << q;
    return AGMM_SUCCESS;
}

/* Every peer's partial of tile t has landed in this rank's slots (acquire). */
static agmm_status cpu_wait_tile(cpu_run_state *r, const agmm_tile *t)
{
    const agmm_rank_info *ri = agmm_ctx_info(r->plan->ctx);
    const int64_t tile = grid_tile(&r->x->sched, t);
    const uint32_t want = r->e * CPU_ARRIVALS;
    if (!r->reduced++)
        sleep_us(r->x->reduce_delay_us);
    for (int p = 0; p < r->s.nranks; p++) {
        uint32_t seen = 0;
        if (p != r->s.rank &&
            !agmm_cpu_flag_wait(cpu_signals(r, r->s.rank) + flag_word(tile, r->s.nranks, p), want, ri->timeout_s, &seen))
            return AGMM_FAIL(agmm_ctx_err(r->plan->ctx), AGMM_ERR_TIMEOUT,
                             "rank %d: %s waited %.2f s for rank %d's partial of tile %lld (rows %lld.., columns "
                             "%lld..) in run %u (its flag reads %u, wants %u): rank %d never stored it",
                             r->s.rank, WHAT, ri->timeout_s, p, (long long)tile, (long long)t->row0,
                             (long long)t->col0, r->e, seen, want, p);
    }
    return AGMM_SUCCESS;
}

/* out = this rank's rows of tile t, summed over its W slots in rank order. */
static void cpu_sum_tile(const cpu_run_state *r, const agmm_tile *t)
{
    const agmm_mr_shape *s = &r->s;
    int64_t mine0, mine = agmm_mr_block(s, s->rank, &mine0);
    int64_t lo = t->row0 > mine0 ? t->row0 : mine0, hi = t->row0 + t->rows < mine0 + mine ? t->row0 + t->rows : mine0 + mine;
    for (int64_t row = lo; row < hi; row++) {
        void *in[AGMM_MAX_RANKS];
        for (int p = 0; p < s->nranks; p++)
            in[p] = (char *)r->x->slots->local + (size_t)p * s->slot_bytes + (size_t)((row - mine0) * s->n) * 2;
        agmm_ar_cpu_sum(in, s->nranks, AGMM_DTYPE_BF16, t->col0, t->col0 + t->cols,
                        r->io.out + (row - mine0) * s->n + t->col0);
    }
}

/* The owners of tile t's rows: blocks [*first, *last]. */
static void tile_owners(const agmm_mr_shape *s, const agmm_tile *t, int *first, int *last)
{
    *first = (int)(t->row0 / s->block_rows);
    *last = (int)((t->row0 + t->rows - 1) / s->block_rows);
}

/* One tile: slot-free waits, stores, signals, and its reduce if it is homed here. */
static agmm_status cpu_tile(cpu_run_state *r, const agmm_tile *t)
{
    const agmm_mr_shape *s = &r->s;
    const int64_t tile = grid_tile(&r->x->sched, t);
    int q0, q1;
    agmm_status st = AGMM_SUCCESS;
    tile_owners(s, t, &q0, &q1);
    for (int q = q0; q <= q1 && st == AGMM_SUCCESS; q++)
        if (q != s->rank)
            st = cpu_wait_slot_free(r, q);
    if (st != AGMM_SUCCESS)
        return st;
    for (int q = q0; q <= q1; q++) {
        int64_t row0, rows = agmm_mr_block(s, q, &row0);
        int64_t lo = t->row0 > row0 ? t->row0 : row0, hi = t->row0 + t->rows < row0 + rows ? t->row0 + t->rows : row0 + rows;
        uint16_t *dst = (uint16_t *)((char *)r->x->slots->peer[q] + (size_t)s->rank * s->slot_bytes) +
                        (lo - row0) * s->n + t->col0;
        agmm_cpu_gemm_bf16(&r->x->ws, r->io.a + lo * s->k, s->k, hi - lo, r->io.b, s->layout, s->n, t->col0, t->cols,
                           dst, s->n);
    }
    /* Release: the rows stored above are visible to the owner once it sees the count. */
    for (int q = q0; q <= q1; q++)
        if (q != s->rank)
            agmm_cpu_flag_add(cpu_signals(r, q) + flag_word(tile, s->nranks, s->rank), CPU_ARRIVALS);
    if (t->local) {
        st = cpu_wait_tile(r, t);
        if (st == AGMM_SUCCESS)
            cpu_sum_tile(r, t);
    }
    return st;
}

static agmm_status cpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    fused_cpu *x = plan->state;
    cpu_run_state r = {.plan = plan, .x = x, .s = agmm_mr_shape_of(plan), .io = agmm_mr_io_of(plan, vio),
                       .e = x->runs + 1};
    const agmm_sched *sc = &x->sched;
    const int64_t ntiles = agmm_sched_num_tiles(sc);
    agmm_status st = AGMM_SUCCESS;
    agmm_cpu_gemm_ws_forget_b(&x->ws); /* B may hold new values since the last run */
    sleep_us(x->gemm_delay_us);
    for (int64_t i = 0; i < ntiles && st == AGMM_SUCCESS; i++) {
        agmm_tile t;
        agmm_sched_tile(sc, i, &t);
        st = cpu_tile(&r, &t);
    }
    /* Deferred: tiles homed in an earlier block that reach into this rank's rows. */
    for (int64_t i = 0; i < ntiles && st == AGMM_SUCCESS; i++) {
        agmm_tile t;
        int q0, q1;
        agmm_sched_tile(sc, i, &t);
        tile_owners(&r.s, &t, &q0, &q1);
        if (!t.local && q0 < r.s.rank && r.s.rank <= q1) {
            st = cpu_wait_tile(&r, &t);
            if (st == AGMM_SUCCESS)
                cpu_sum_tile(&r, &t);
        }
    }
    if (st != AGMM_SUCCESS)
        return st;
    /* Closing: this rank's slots are read for the last time in this run (release). */
    for (int q = 0; q < r.s.nranks; q++)
        if (q != r.s.rank)
            agmm_cpu_flag_raise(cpu_signals(&r, q) + done_word(ntiles, r.s.nranks, r.s.rank), r.e);
    x->runs = r.e;
    return AGMM_SUCCESS;
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
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"

typedef struct {
    agmm_gemm_plan *gemm;
    agmm_symm_buf *slots, *signals; /* NULL at W = 1 */
} fused_gpu;

static void gpu_destroy(agmm_plan *plan)
{
    fused_gpu *x = plan->state;
    if (x == NULL)
        return;
    /* Collective: no rank frees while a peer's run may still store into its slots or signals. */
    agmm_host_barrier(plan->ctx);
    agmm_gemm_plan_destroy(x->gemm);
    agmm_symm_free(plan->ctx, x->signals);
    agmm_symm_free(plan->ctx, x->slots);
    cudaGetLastError();
    free(x);
    plan->state = NULL;
}

/* The GEMM's SM budget (header comment): 0 is the whole GPU. */
static int gemm_ctas(const agmm_ctx *ctx)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    if (ri->ranks_on_device <= 1)
        return 0;
    int share = agmm_ctx_gpu(ctx)->num_sms / ri->ranks_on_device - 1;
    return share > 0 ? share : 1;
}

/* The tile config every rank runs: the engine's policy on rank 0 (whole tiles: the scatter
 * epilogue has no split tail), sent to all, since the tile grid names the flags. Collective. */
static agmm_status agreed_config(agmm_plan *plan, const agmm_mr_shape *s, int *config)
{
    const int sms = agmm_ctx_gpu(plan->ctx)->num_sms, ctas = gemm_ctas(plan->ctx);
    const agmm_gemm_problem pb = {.m = s->m, .n = s->n, .k = s->k, .nranks = 1, .rank = 0, .splits = 1,
                                  .ctas = ctas ? ctas : sms, .sms = sms};
    int mine = agmm_gemm_whole_tiles(agmm_gemm_policy_choose(&pb)), all[AGMM_MAX_RANKS];
    agmm_status st = agmm_host_exchange(plan->ctx, &mine, sizeof mine, all);
    *config = all[0];
    return st;
}

static agmm_status gpu_create(agmm_plan *plan)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = plan->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    const agmm_gpu_rank *g = agmm_ctx_gpu(ctx);
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    fused_gpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: plan state allocation failed", s.rank);
    plan->state = x;
    agmm_gemm_desc d = {.b_layout = s.layout, .m = s.m, .n = s.n, .k = s.k, .nranks = 1, .rank = 0, .splits = 1,
                        .max_ctas = gemm_ctas(ctx), .config = -1};
    if (s.nranks > 1) {
        /* W > 1: the scatter epilogue over the plan's slots and signals. */
        AGMM_TRY(st, agreed_config(plan, &s, &d.config));
        AGMM_TRY(st, agmm_symm_alloc(ctx, (size_t)s.nranks * s.slot_bytes, &x->slots));
        AGMM_TRY(st, agmm_symm_alloc(ctx, signal_bytes(agmm_gemm_grid_tiles(d.config, s.m, s.n), s.nranks),
                                     &x->signals));
        d.nranks = s.nranks;
        d.rank = s.rank;
        d.dev_error = g->err_dev;
        d.timeout_ns = g->timeout_ns;
        d.scatter = (agmm_gemm_scatter){.on = 1, .slots = x->slots->d_peer,
                                        .signals = (uint32_t *const *)x->signals->d_peer,
                                        .slot_bytes = s.slot_bytes};
    }
    /* W = 1: a plain GEMM of all rows into io->out. */
    AGMM_TRY(st, agmm_gemm_plan_create(&x->gemm, &d, err));
    /* Everyone leaves plan time together: a rank's first run must not meet a peer still in
     * cudaMalloc, which may synchronise a shared device. */
    AGMM_TRY(st, agmm_host_barrier(ctx));
fail:
    return st;
}

static agmm_status gpu_run(agmm_plan *plan, const void *vio, void *stream)
{
    agmm_status st = AGMM_SUCCESS;
    fused_gpu *x = plan->state;
    const agmm_mr_io io = agmm_mr_io_of(plan, vio);
    cudaStream_t s = (cudaStream_t)stream;
    agmm_error *err = agmm_ctx_err(plan->ctx);
    /* A rank with no rows may pass out = NULL: the engine never writes c then, but wants one. */
    void *out = io.out ? (void *)io.out : x->slots->local;
    AGMM_TRY(st, agmm_gemm_plan_set_ptrs(x->gemm, io.a, NULL, io.b, out, err));
    /* Its epoch, flags and done words are on the device; the engine records why it refused or
     * failed to launch. */
    AGMM_TRY(st, agmm_gemm_run(x->gemm, 0, s, err));
    AGMM_TRY(st, agmm_gpu_note_run(plan->ctx, s));
fail:
    return st;
}

static void gpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    const agmm_mr_shape s = agmm_mr_shape_of(plan);
    if (s.nranks > 1) /* signals for the smallest tiles (64 x 64): an upper bound */
        need->symmetric_bytes += (uint64_t)s.nranks * s.slot_bytes +
                                 signal_bytes((s.m + 63) / 64 * ((s.n + 63) / 64), s.nranks);
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

const agmm_backend agmm_backend_matmul_reduce_scatter_fused = {
    .name = "fused",
    .op = AGMM_OP_MATMUL_REDUCE_SCATTER,
    .summary = "one persistent GEMM whose epilogue stores each tile's rows into their owners' symmetric slots and "
               "raises a flag per tile; each owner sums its rows of a tile in rank order as the tile lands",
    .devices = AGMM_DEVICE_CPU | AGMM_DEVICE_GPU,
    .auto_order = 3,
    .cpu = &fused_cpu_impl,
    .gpu = FUSED_GPU,
};

/* ---- test hook ---- */

agmm_status agmm_mr_fused_set_delay(agmm_plan *plan, int64_t gemm_delay_ns, int64_t reduce_delay_ns)
{
    if (plan == NULL)
        return AGMM_ERR_INVALID_ARG;
    if (plan->backend != &agmm_backend_matmul_reduce_scatter_fused || plan->state == NULL || gemm_delay_ns < 0 ||
        reduce_delay_ns < 0)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_INVALID_ARG,
                         "plan runs %s/%s, gemm_delay_ns=%lld, reduce_delay_ns=%lld: the delay hook needs a fused "
                         "matmul_reduce_scatter plan and delays >= 0",
                         agmm_op_name(plan->op), plan->backend->name, (long long)gemm_delay_ns,
                         (long long)reduce_delay_ns);
    if (plan->impl == &fused_cpu_impl) {
        fused_cpu *x = plan->state;
        x->gemm_delay_us = (gemm_delay_ns + 999) / 1000;
        x->reduce_delay_us = (reduce_delay_ns + 999) / 1000;
        return AGMM_SUCCESS;
    }
    if (reduce_delay_ns != 0)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_UNSUPPORTED,
                         "reduce_delay_ns=%lld: on GPUs the sums are in the GEMM's epilogue; only its start can be "
                         "delayed (gemm_delay_ns)",
                         (long long)reduce_delay_ns);
#ifdef AGMM_HAVE_CUDA
    agmm_gemm_plan_set_delay(((fused_gpu *)plan->state)->gemm, (uint64_t)gemm_delay_ns);
#endif
    return AGMM_SUCCESS;
}
