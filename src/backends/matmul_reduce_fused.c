/* The fused row-parallel matmuls (matmul_reduce_fused.h): `fused` of matmul_reduce_scatter and of
 * matmul_all_reduce, one protocol. One GEMM of this rank's whole partial whose epilogue stores
 * every tile's rows straight into their owners' symmetric slots and raises a flag per tile at each
 * owner; each owner sums its rows of a tile, in rank order, as soon as every peer's flag for that
 * tile is up. No copy engine, no barrier kernel, one kernel per run on GPUs.
 *
 * Owners: a reduce-scatter row belongs to its block of the row split (rank q owns rows [qR,
 * (q+1)R) clipped to M); an all-reduce row belongs to every rank (the one-shot all-reduce pushed
 * by the GEMM: every rank receives every partial whole and sums all of S).
 *
 * Symmetric memory (per rank, the same sizes everywhere):
 *   slots    W slots of slot_bytes: slot p of rank q's buffer holds rank p's partial of rank q's
 *            rows (reduce-scatter: as `ce`'s, R rows; all-reduce: all M rows).
 *   signals  a tile flag per (tile, source rank), word tile * W + p (tile = row tile * column
 *            tiles + column tile of the GEMM's grid, the same on every rank), then a done word
 *            per owner, word tiles * W + q.
 *
 * One run (epoch e = runs completed + 1, counted by the plan, the same on every rank). The GEMM
 * visits its tiles in core/schedule.h's order: for the reduce-scatter, its reduce-scatter visit
 * (row tiles of all M rows, a tile may straddle two or more blocks; those homed (first row) in
 * block rank+1 first, then rank+2's, ..., its own last); for the all-reduce, a plain GEMM's, the
 * same on every rank, every tile homed everywhere. Per tile:
 *   slot free  before its first store into owner q's slot in this run, the rank waits (bounded)
 *              until its done word q has reached e-1: q has finished reading its slots of run
 *              e-1, so they may be overwritten. q raised it (below); the word is in this rank's
 *              own memory, so the wait polls locally. No wait for its own slot: its own previous
 *              run read it, and that run is over.
 *   store      each of the tile's rows into slot `rank` of each of its owners (remote rows over
 *              NVLink, or the same GPU where ranks share one; its own rows into its own slot)
 *   signal     for each other owner the tile touches: add ARRIVALS to that owner's flag
 *              (tile, rank), with release order after the stores. The flags count: after run e
 *              each reads e * ARRIVALS (wrapping), never reset, so a CUDA graph replays them.
 *   reduce     if the tile is homed here: wait (bounded) until every peer's flag of the tile has
 *              reached e * ARRIVALS (acquire), then out = the sum over p = 0..W-1 of slot p's rows
 *              of the tile that are this rank's, in fp32 in rank order, rounded once (its own
 *              read back from its own slot)
 * After the last tile:
 *   deferred   (reduce-scatter) the tiles homed in an earlier block that reach into this rank's
 *              rows (at most one row of tiles: the block boundary's) are reduced the same way;
 *              their home rank visits them last, so waiting for them at the tile would stall a
 *              GEMM role for a block's worth of time
 *   closing    the rank stores e into its done word of every peer (release, after its last read
 *              of its slots): no wait, one-way. Then the count of runs becomes e.
 * Why no wait is part of a cycle: reduce-scatter: a rank waits only for its peers' tiles of its own
 * block (non-home tiles for them, which every rank visits before any tile of its own home:
 * schedule.h), and for done words of the run before; all-reduce: every rank visits the same tiles
 * in the same order (on GPUs, CTA b the same tiles on every rank: the grid is agreed) and stores a
 * tile before it waits for the peers' copies of it, so the k-th wait needs only the peers' first k
 * stores. Why the caller may rewrite A_r, B_r and the output as soon as the run has completed:
 * only this rank's GEMM and sums read or write them, all before the run's end.
 *
 * GPU: the GEMM engine (src/kernels/gemm/) with its scatter epilogue (epi_scatter.cuh): the
 * epilogue of every consumer warp stores, signals (ARRIVALS = 8: each of a tile's 8 consumer warps
 * adds 1 after its own stores; 4 in a ping-pong config, where one warpgroup stores a whole tile),
 * waits and sums as above; the deferred tiles, the closing and the
 * epoch are in its finish() (the last warp of the grid advances the plan's epoch word). SMs: the
 * waits are for peers' kernels only; with its own GPU the GEMM takes every SM; where ranks share
 * one each takes at most SMs/ranks - 1, so every rank's GEMM finds SMs while others wait. All ranks
 * run the same tile config and grid (the tile grid names the flags; the all-reduce pairs CTAs):
 * rank 0's, agreed at plan time. At W = 1 a plain GEMM writes the output.
 *
 * CPU world: the rank's thread is the GEMM role, in tiles of CPU_BM x CPU_BN in the same visits,
 * with the same slots, flags (ARRIVALS = 1), done words and epochs, so the CPU tests prove the
 * protocol: a late rank's partials must be waited for, a slow owner's slots must not be
 * overwritten, and a frozen epoch would let run 2 read run 1's partials. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "matmul_reduce_fused.h"
#include "all_reduce_cpu.h"
#include "../core/schedule.h"

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

/* Who owns what, for either operation (header comment). */
typedef struct {
    agmm_mr_shape s;
    int all;             /* matmul_all_reduce: every rank owns every row */
    size_t slot_bytes;   /* a slot: R rows (reduce-scatter) or M rows (all-reduce) x N bf16, to 16 */
    int64_t mine0, mine; /* this rank's rows of the output: its block, or all M */
    const char *what;    /* "matmul_reduce_scatter/fused", for messages */
} fused_geom;

static fused_geom geom_of(const agmm_plan *plan)
{
    fused_geom g = {.s = agmm_mr_shape_of(plan), .all = plan->op == AGMM_OP_MATMUL_ALL_REDUCE};
    const int64_t rows = g.all ? g.s.m : g.s.block_rows;
    g.slot_bytes = ((size_t)(rows * g.s.n) * 2 + 15) / 16 * 16;
    g.mine = g.all ? g.s.m : agmm_mr_block(&g.s, g.s.rank, &g.mine0);
    g.what = g.all ? "matmul_all_reduce/fused" : "matmul_reduce_scatter/fused";
    return g;
}

/* The owners of rows [row0, row0 + rows): [*first, *last]. */
static void owners(const fused_geom *g, int64_t row0, int64_t rows, int *first, int *last)
{
    *first = g->all ? 0 : (int)(row0 / g->s.block_rows);
    *last = g->all ? g->s.nranks - 1 : (int)((row0 + rows - 1) / g->s.block_rows);
}

/* Owner q's rows: [*row0, *row0 + returned). */
static int64_t owned(const fused_geom *g, int q, int64_t *row0)
{
    if (g->all) {
        *row0 = 0;
        return g->s.m;
    }
    return agmm_mr_block(&g->s, q, row0);
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
    agmm_sched sched;            /* the visit in CPU tiles */
    agmm_symm_buf *slots, *signals;
    uint32_t runs;               /* runs completed: the epoch of the next one is runs + 1 */
    int64_t sums;                /* tiles this rank sums in a run: homed here, or deferred */
    int64_t gemm_delay_us, reduce_delay_us; /* test hooks */
} fused_cpu;

/* One run's view, for the helpers below. */
typedef struct {
    agmm_plan *plan;
    fused_cpu *x;
    fused_geom g;
    agmm_mr_io io;
    uint32_t e;
    uint64_t done_seen;          /* owners whose done word was seen this run */
    int64_t reduced;             /* sums started this run (the reduce delay is before the last) */
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

/* The reduce-scatter visit, or the all-reduce's plain one (the same on every rank). */
static agmm_sched cpu_sched(const fused_geom *g)
{
    agmm_sched sc = {.m = g->s.m, .n = g->s.n, .nranks = 1, .rank = 0, .splits = 1, .bm = CPU_BM, .bn = CPU_BN,
                     .group_m = CPU_GROUP_M};
    if (!g->all) {
        sc.nranks = g->s.nranks;
        sc.rank = g->s.rank;
        sc.block_rows = g->s.block_rows;
    }
    agmm_sched_init(&sc);
    return sc;
}

/* Deferred (reduce-scatter): tile t is homed in an earlier block and reaches into this rank's rows. */
static int deferred(const fused_geom *g, const agmm_tile *t)
{
    int q0, q1;
    owners(g, t->row0, t->rows, &q0, &q1);
    return !t->local && q0 < g->s.rank && g->s.rank <= q1;
}

static agmm_status cpu_create(agmm_plan *plan)
{
    const fused_geom g = geom_of(plan);
    fused_cpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_NO_MEMORY, "rank %d: plan allocation failed", g.s.rank);
    plan->state = x;
    x->sched = cpu_sched(&g);
    for (int64_t i = 0; i < agmm_sched_num_tiles(&x->sched); i++) {
        agmm_tile t;
        agmm_sched_tile(&x->sched, i, &t);
        x->sums += t.local || deferred(&g, &t);
    }
    agmm_status st = agmm_cpu_gemm_ws_init(&x->ws, g.s.k, agmm_ctx_err(plan->ctx));
    if (st == AGMM_SUCCESS)
        st = agmm_symm_alloc(plan->ctx, (size_t)g.s.nranks * g.slot_bytes, &x->slots);
    if (st == AGMM_SUCCESS)
        st = agmm_symm_alloc(plan->ctx, signal_bytes(agmm_sched_num_tiles(&x->sched), g.s.nranks), &x->signals);
    return st;
}

static void cpu_mem_need(const agmm_plan *plan, agmm_mem_need *need)
{
    const fused_geom g = geom_of(plan);
    const agmm_sched sc = cpu_sched(&g);
    need->workspace_bytes += agmm_cpu_gemm_ws_bytes(g.s.k);
    need->symmetric_bytes += (uint64_t)g.s.nranks * g.slot_bytes + signal_bytes(agmm_sched_num_tiles(&sc), g.s.nranks);
}

static uint32_t *cpu_signals(const cpu_run_state *r, int rank)
{
    return (uint32_t *)r->x->signals->peer[rank];
}

/* Slot `src` of owner q's buffer, at owner-relative row `row`, column col. */
static uint16_t *cpu_slot(const cpu_run_state *r, int q, int src, int64_t row, int64_t col)
{
    return (uint16_t *)((char *)r->x->slots->peer[q] + (size_t)src * r->g.slot_bytes) + row * r->g.s.n + col;
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
    const int me = r->g.s.rank, W = r->g.s.nranks;
    uint32_t seen = 0;
    if (r->done_seen >> q & 1)
        return AGMM_SUCCESS;
    if (!agmm_cpu_flag_wait(cpu_signals(r, me) + done_word(tiles, W, q), r->e - 1, ri->timeout_s, &seen))
        return AGMM_FAIL(agmm_ctx_err(r->plan->ctx), AGMM_ERR_TIMEOUT,
                         "rank %d: %s waited %.2f s for rank %d to finish reading its slots of run %u (its done word "
                         "reads %u): rank %d never finished that run, so this rank may not overwrite its slot there",
                         me, r->g.what, ri->timeout_s, q, r->e - 1, seen, q);
    r->done_seen |= 1ull << q;
    return AGMM_SUCCESS;
}

/* Every peer's partial of tile t has landed in this rank's slots (acquire). */
static agmm_status cpu_wait_tile(cpu_run_state *r, const agmm_tile *t)
{
    const agmm_rank_info *ri = agmm_ctx_info(r->plan->ctx);
    const int64_t tile = grid_tile(&r->x->sched, t);
    const uint32_t want = r->e * CPU_ARRIVALS;
    const int me = r->g.s.rank, W = r->g.s.nranks;
    if (++r->reduced == r->x->sums)
        sleep_us(r->x->reduce_delay_us);
    for (int p = 0; p < W; p++) {
        uint32_t seen = 0;
        if (p != me && !agmm_cpu_flag_wait(cpu_signals(r, me) + flag_word(tile, W, p), want, ri->timeout_s, &seen))
            return AGMM_FAIL(agmm_ctx_err(r->plan->ctx), AGMM_ERR_TIMEOUT,
                             "rank %d: %s waited %.2f s for rank %d's partial of tile %lld (rows %lld.., columns "
                             "%lld..) in run %u (its flag reads %u, wants %u): rank %d never stored it",
                             me, r->g.what, ri->timeout_s, p, (long long)tile, (long long)t->row0, (long long)t->col0,
                             r->e, seen, want, p);
    }
    return AGMM_SUCCESS;
}

/* The output's rows of tile t, summed over this rank's W slots in rank order. */
static void cpu_sum_tile(const cpu_run_state *r, const agmm_tile *t)
{
    const fused_geom *g = &r->g;
    const int64_t lo = t->row0 > g->mine0 ? t->row0 : g->mine0;
    const int64_t hi = t->row0 + t->rows < g->mine0 + g->mine ? t->row0 + t->rows : g->mine0 + g->mine;
    for (int64_t row = lo; row < hi; row++) {
        void *in[AGMM_MAX_RANKS];
        for (int p = 0; p < g->s.nranks; p++)
            in[p] = cpu_slot(r, g->s.rank, p, row - g->mine0, 0);
        agmm_ar_cpu_sum(in, g->s.nranks, AGMM_DTYPE_BF16, t->col0, t->col0 + t->cols,
                        r->io.out + (row - g->mine0) * g->s.n + t->col0);
    }
}

/* One tile: slot-free waits, stores, signals, and its reduce if it is homed here. */
static agmm_status cpu_tile(cpu_run_state *r, const agmm_tile *t)
{
    const fused_geom *g = &r->g;
    const int me = g->s.rank;
    const int64_t tile = grid_tile(&r->x->sched, t), n = g->s.n;
    int q0, q1;
    agmm_status st = AGMM_SUCCESS;
    owners(g, t->row0, t->rows, &q0, &q1);
    for (int q = q0; q <= q1 && st == AGMM_SUCCESS; q++)
        if (q != me)
            st = cpu_wait_slot_free(r, q);
    if (st != AGMM_SUCCESS)
        return st;
    const uint16_t *done = NULL; /* the all-reduce computes the tile once, then copies it */
    int64_t done_row0 = 0;
    for (int q = q0; q <= q1; q++) {
        int64_t row0, rows = owned(g, q, &row0);
        const int64_t lo = t->row0 > row0 ? t->row0 : row0;
        const int64_t hi = t->row0 + t->rows < row0 + rows ? t->row0 + t->rows : row0 + rows;
        uint16_t *dst = cpu_slot(r, q, me, lo - row0, t->col0);
        if (done == NULL) {
            agmm_cpu_gemm_bf16(&r->x->ws, r->io.a + lo * g->s.k, g->s.k, hi - lo, r->io.b, g->s.layout, n, t->col0,
                               t->cols, dst, n);
            if (g->all)
                done = dst, done_row0 = lo;
        } else {
            for (int64_t row = lo; row < hi; row++)
                memcpy(dst + (row - lo) * n, done + (row - done_row0) * n, (size_t)t->cols * 2);
        }
    }
    /* Release: the rows stored above are visible to the owner once it sees the count. */
    for (int q = q0; q <= q1; q++)
        if (q != me)
            agmm_cpu_flag_add(cpu_signals(r, q) + flag_word(tile, g->s.nranks, me), CPU_ARRIVALS);
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
    cpu_run_state r = {.plan = plan, .x = x, .g = geom_of(plan), .io = agmm_mr_io_of(plan, vio), .e = x->runs + 1};
    const agmm_sched *sc = &x->sched;
    const int64_t ntiles = agmm_sched_num_tiles(sc);
    const int me = r.g.s.rank, W = r.g.s.nranks;
    agmm_status st = AGMM_SUCCESS;
    agmm_cpu_gemm_ws_forget_b(&x->ws); /* B may hold new values since the last run */
    sleep_us(x->gemm_delay_us);
    for (int64_t i = 0; i < ntiles && st == AGMM_SUCCESS; i++) {
        agmm_tile t;
        agmm_sched_tile(sc, i, &t);
        st = cpu_tile(&r, &t);
    }
    /* Deferred (reduce-scatter): tiles homed in an earlier block that reach into this rank's rows;
     * every all-reduce tile is homed here. */
    for (int64_t i = 0; i < ntiles && st == AGMM_SUCCESS; i++) {
        agmm_tile t;
        agmm_sched_tile(sc, i, &t);
        if (deferred(&r.g, &t)) {
            st = cpu_wait_tile(&r, &t);
            if (st == AGMM_SUCCESS)
                cpu_sum_tile(&r, &t);
        }
    }
    if (st != AGMM_SUCCESS)
        return st;
    /* Closing: this rank's slots are read for the last time in this run (release). */
    for (int q = 0; q < W; q++)
        if (q != me)
            agmm_cpu_flag_raise(cpu_signals(&r, q) + done_word(ntiles, W, me), r.e);
    x->runs = r.e;
    return AGMM_SUCCESS;
}

const agmm_backend_impl agmm_mr_fused_cpu = {
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

/* The tile config and grid every rank runs: rank 0's (the engine's policy, whole tiles: the
 * scatter epilogue has no split tail), sent to all, since the tile grid names the flags and the
 * all-reduce pairs CTA b of every rank. Collective. */
static agmm_status agreed_grid(agmm_plan *plan, const agmm_mr_shape *s, int *config, int *ctas)
{
    const int sms = agmm_ctx_gpu(plan->ctx)->num_sms, budget = gemm_ctas(plan->ctx);
    const agmm_gemm_problem pb = {.m = s->m, .n = s->n, .k = s->k, .nranks = 1, .rank = 0, .splits = 1,
                                  .ctas = budget ? budget : sms, .sms = sms,
                                  .b_row_major = s->layout == AGMM_LAYOUT_ROW_MAJOR,
                                  .device = agmm_gemm_current_device()};
    int mine[2] = {agmm_gemm_scatter_config(agmm_gemm_policy_choose(&pb)), budget ? budget : sms};
    int all[2 * AGMM_MAX_RANKS];
    agmm_status st = agmm_host_exchange(plan->ctx, mine, sizeof mine, all);
    *config = all[0];
    *ctas = all[1];
    return st;
}

/* The engine plan of tile config `config` (-1: rank 0's policy choice) and, with W > 1, the signals
 * its tile grid needs. Collective. */
static agmm_status gpu_engine(agmm_plan *plan, fused_gpu *x, int config)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = plan->ctx;
    const agmm_gpu_rank *gr = agmm_ctx_gpu(ctx);
    const fused_geom g = geom_of(plan);
    agmm_gemm_desc d = {.b_layout = g.s.layout, .m = g.s.m, .n = g.s.n, .k = g.s.k, .nranks = 1, .rank = 0,
                        .splits = 1, .max_ctas = gemm_ctas(ctx), .config = config};
    if (g.s.nranks > 1) {
        /* W > 1: the scatter epilogue over the plan's slots and signals. */
        int agreed = -1;
        AGMM_TRY(st, agreed_grid(plan, &g.s, &agreed, &d.max_ctas));
        if (config < 0)
            d.config = agreed;
        AGMM_TRY(st, agmm_symm_alloc(ctx, signal_bytes(agmm_gemm_grid_tiles(d.config, g.s.m, g.s.n), g.s.nranks),
                                     &x->signals));
        d.nranks = g.s.nranks;
        d.rank = g.s.rank;
        d.dev_error = gr->err_dev;
        d.timeout_ns = gr->timeout_ns;
        d.scatter = (agmm_gemm_scatter){.on = 1, .all = g.all, .slots = x->slots->d_peer,
                                        .signals = (uint32_t *const *)x->signals->d_peer,
                                        .slot_bytes = g.slot_bytes};
    }
    /* W = 1: a plain GEMM of all rows into the output. */
    AGMM_TRY(st, agmm_gemm_plan_create(&x->gemm, &d, agmm_ctx_err(ctx)));
fail:
    return st;
}

static agmm_status gpu_create(agmm_plan *plan)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_ctx *ctx = plan->ctx;
    const fused_geom g = geom_of(plan);
    fused_gpu *x = calloc(1, sizeof *x);
    if (x == NULL)
        return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "rank %d: plan state allocation failed", g.s.rank);
    plan->state = x;
    if (g.s.nranks > 1)
        AGMM_TRY(st, agmm_symm_alloc(ctx, (size_t)g.s.nranks * g.slot_bytes, &x->slots));
    AGMM_TRY(st, gpu_engine(plan, x, -1));
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
    if (x->gemm == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "%s: the plan has no GEMM engine plan (agmm_mr_fused_set_gemm_config failed): destroy it",
                         geom_of(plan).what);
    /* A reduce-scatter rank with no rows may pass out = NULL: the engine never writes c then, but
     * wants one. */
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
    const fused_geom g = geom_of(plan);
    if (g.s.nranks > 1) /* signals for the smallest tiles (64 x 64): an upper bound */
        need->symmetric_bytes += (uint64_t)g.s.nranks * g.slot_bytes +
                                 signal_bytes((g.s.m + 63) / 64 * ((g.s.n + 63) / 64), g.s.nranks);
}

const agmm_backend_impl agmm_mr_fused_gpu = {
    .needs = AGMM_CAP_PEER_MEMORY,
    .create = gpu_create,
    .run = gpu_run,
    .destroy = gpu_destroy,
    .mem_need = gpu_mem_need,
};
#endif /* AGMM_HAVE_CUDA */

/* ---- test hook ---- */

agmm_status agmm_mr_fused_set_delay(agmm_plan *plan, int64_t gemm_delay_ns, int64_t reduce_delay_ns)
{
    if (plan == NULL)
        return AGMM_ERR_INVALID_ARG;
    const int fused = plan->state != NULL && (plan->impl == &agmm_mr_fused_cpu
#ifdef AGMM_HAVE_CUDA
                                              || plan->impl == &agmm_mr_fused_gpu
#endif
                                              );
    if (!fused || gemm_delay_ns < 0 || reduce_delay_ns < 0)
        return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_INVALID_ARG,
                         "plan runs %s/%s, gemm_delay_ns=%lld, reduce_delay_ns=%lld: the delay hook needs a fused "
                         "matmul_reduce_scatter or matmul_all_reduce plan and delays >= 0",
                         agmm_op_name(plan->op), plan->backend->name, (long long)gemm_delay_ns,
                         (long long)reduce_delay_ns);
    if (plan->impl == &agmm_mr_fused_cpu) {
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

agmm_status agmm_mr_fused_set_gemm_config(agmm_plan *plan, int config)
{
    if (plan == NULL)
        return AGMM_ERR_INVALID_ARG;
#ifdef AGMM_HAVE_CUDA
    if (plan->impl == &agmm_mr_fused_gpu && plan->state != NULL) {
        fused_gpu *x = plan->state;
        agmm_status st = agmm_host_barrier(plan->ctx); /* every rank is between runs */
        agmm_gemm_plan_destroy(x->gemm);
        x->gemm = NULL;
        agmm_symm_free(plan->ctx, x->signals);
        x->signals = NULL;
        if (st == AGMM_SUCCESS)
            st = gpu_engine(plan, x, config); /* the engine names a refused config */
        if (st == AGMM_SUCCESS)
            st = agmm_host_barrier(plan->ctx);
        return st;
    }
#endif
    return AGMM_FAIL(agmm_ctx_err(plan->ctx), AGMM_ERR_UNSUPPORTED,
                     "plan runs %s/%s%s: only a GPU fused row-parallel plan has a GEMM engine to give config=%d",
                     agmm_op_name(plan->op), plan->backend->name,
                     plan->impl == &agmm_mr_fused_cpu ? " in the CPU world" : "", config);
}
