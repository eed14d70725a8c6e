/* The sweep one rank runs: for every row and backend, plan, fill fresh random inputs, poison
 * the outputs, run once and check, keeping the plan; then the row's backends and its plain GEMM
 * take turns at being timed (bench_turns.h; docs/design.md, "Benchmark method"). Every rank runs
 * the same sequence, so the collective calls line up. What a cell does is its operation's row kind
 * (bench_cell.h; one file per operation, bench_row_*.c, and a line in row_kinds below); this file
 * walks the rows, checks each fits in memory, and decides whether its backends can be held all at
 * once or must be held one at a time.
 *
 * Rank 0's plain GEMM is a busy spell (agmm_ctx_busy_begin): peers that reach the next meeting
 * first wait for it without the timeout, which bounds only a peer that stopped coming. */
#include <string.h>

#include "bench.h"
#include "bench_cell.h"
#include "bench_mem.h"
#include "bench_progress.h"
#include "bench_sync.h"
#include "bench_turns.h"

/* Every operation's rows: a new operation's are a file (bench_row_*.c) and a line here. */
static const bench_row_kind *const row_kinds[] = {
    &bench_row_ag_matmul,
    &bench_row_all_reduce,
    &bench_row_matmul_reduce_scatter,
    &bench_row_matmul_all_reduce,
    &bench_row_all_reduce_rmsnorm,
};

static const bench_row_kind *row_kind_of(agmm_op op)
{
    for (size_t i = 0; i < sizeof row_kinds / sizeof row_kinds[0]; i++)
        if (row_kinds[i]->op == op)
            return row_kinds[i];
    return NULL;
}

/* A plan holds buffers of its own beside those a cell allocates (a gathered A, staging): a row is
 * held whole only where its cells' buffers fit this many times over. */
#define HOLD_MARGIN 2

/* What row j->row needs on this rank, in bytes: held whole (every cell and the plain GEMM at once),
 * or one at a time (the largest of them). Host buffers are a cell's until it is checked (but for
 * the outputs --graph keeps), and the GEMM's until it is uploaded. */
static void row_need(cell_job *j, int whole, uint64_t *host, uint64_t *device)
{
    const bench_results *res = j->res;
    const bench_row *row = &res->rows[j->row];
    j->kind->need(res, j->row, host, device);
    uint64_t gemm_host = 0, gemm_device = 0;
    if (j->rank == 0 && j->kind->gemm_rows != NULL && !res->opt.check_only) {
        const uint64_t rows = (uint64_t)j->kind->gemm_rows(res, row), n = (uint64_t)row->n, k = (uint64_t)row->k;
        gemm_host = (rows * k + k * n) * 2;
        gemm_device = (rows * k + k * n + rows * n) * 2;
    }
    /* --graph keeps each held cell's checked outputs on the host until its graph is captured. */
    if (whole && res->opt.graph && res->gpu)
        *host *= (uint64_t)res->nbackends;
    *host = *host > gemm_host ? *host : gemm_host;
    if (whole)
        *device = HOLD_MARGIN * (uint64_t)res->nbackends * *device + gemm_device;
    else
        *device = *device > gemm_device ? *device : gemm_device;
}

/* Whether row j->row fits in memory, held whole or one at a time, the same answer on every rank.
 * One at a time, a rank short of memory fails every cell of the row before anything is allocated
 * (an overcommitting kernel would grant the allocation and kill the process on touching it). */
static int row_fits(cell_job *j, int whole)
{
    bench_results *res = j->res;
    bench_row *row = &res->rows[j->row];
    uint64_t host = 0, device = 0;
    row_need(j, whole, &host, &device);
    char why[AGMM_ERROR_LEN], what[AGMM_ERROR_LEN + 32];
    const int fits = agmm_ext_check_memory(j->ctx, host, device, why, sizeof why) == AGMM_SUCCESS;
    if (whole) /* every rank's answer; nothing is recorded */
        return bench_sync_and(res, fits);
    const int bi = j->bi;
    j->bi = 0;
    if (!fits) {
        agmm_format(what, sizeof what, "not run: for this row's buffers agmm-bench %s", why);
        cell_fail(j, CELL_ERROR, what);
    }
    /* Every rank's verdict, merged into cell 0 alike on every rank (threads or processes); a row
     * that does not fit anywhere is not run anywhere, and all its cells say why. */
    int ok = bench_sync_cell(res, j->row, 0);
    j->bi = bi;
    if (!ok) {
        bench_sync_lock(res);
        for (int b = 1; b < res->nbackends; b++)
            row->cell[b] = row->cell[0];
        bench_sync_unlock(res);
    }
    return ok;
}

/* Cell j->bi of the row: planned, checked and kept in held[j->bi]. Ranks leave a cell together, so
 * one rank's failure cannot skew the next cell. */
static void stage(cell_job *j, cell_held *held)
{
    j->dev->err[0] = '\0';
    j->held = &held[j->bi];
    j->kind->run(j);
    bench_sync_barrier(j->res);
}

/* --graph, once cell j->bi's eager runs are timed: its graph captured and checked, then its
 * replays timed on their own (the plan's eager runs all come before its graph). */
static void graph_turns(cell_job *j, cell_held *held)
{
    j->held = &held[j->bi];
    cell_graph(j);
    bench_turns(j, held, j->bi, 1, NULL, 1);
}

static void release(cell_job *j, cell_held *held)
{
    j->held = &held[j->bi];
    cell_release(j);
}

/* Rank 0 holds the plain GEMM of the row's shape (a busy spell); every rank meets it after. */
static void hold_gemm(cell_job *j, bench_gemm *gemm)
{
    bench_results *res = j->res;
    const bench_row *row = &res->rows[j->row];
    if (j->rank == 0) {
        agmm_ctx_busy_begin(j->ctx, "setting up the plain GEMM");
        bench_progress_phase(res, NULL, "setting up the plain GEMM");
        bench_gemm_hold(j->dev, j->ctx, j->kind->gemm_rows(res, row), row->n, row->k, res->opt.b_layout, gemm);
        agmm_ctx_busy_end(j->ctx);
    }
    bench_sync_barrier(res);
}

/* Every cell of the row as before it ran, on every rank's copy: what a row held whole found, before
 * it is run again one backend at a time. */
static void reset_row(cell_job *j)
{
    bench_results *res = j->res;
    bench_sync_barrier(res);
    bench_sync_lock(res);
    if (res->proc_ctx != NULL || j->rank == 0)
        memset(res->rows[j->row].cell, 0, sizeof res->rows[j->row].cell);
    bench_sync_unlock(res);
    bench_sync_barrier(res);
}

/* The row held whole: every backend staged beside the plain GEMM, then all take turns. 0 where a
 * rank found no memory for a plan or buffer (the estimate missed what plans hold of their own):
 * then nothing was timed and the row's cells are reset for a run one backend at a time. */
static int run_whole(cell_job *j, int *rounds)
{
    bench_results *res = j->res;
    cell_held held[BENCH_MAX_BACKENDS] = {{0}};
    bench_gemm gemm = {0};
    const int with_gemm = j->kind->gemm_rows != NULL && !res->opt.check_only;
    if (with_gemm)
        hold_gemm(j, &gemm);
    for (j->bi = 0; j->bi < res->nbackends && !res->world_failed; j->bi++)
        stage(j, held);
    const int fits = !res->world_failed && bench_sync_and(res, !j->short_of_memory);
    if (fits)
        *rounds = bench_turns(j, held, 0, res->nbackends, with_gemm ? &gemm : NULL, 0);
    /* --graph: each cell's graph once every eager run is done, its replays timed on their own. */
    for (j->bi = 0; fits && j->bi < res->nbackends && !res->world_failed; j->bi++)
        graph_turns(j, held);
    /* Every rank releases in the same order (a plan's release may meet its peers). */
    for (j->bi = 0; j->bi < res->nbackends; j->bi++)
        release(j, held);
    bench_gemm_release(j->dev, &gemm);
    if (!fits && !res->world_failed)
        reset_row(j);
    return fits || res->world_failed;
}

/* The row one backend at a time: the plain GEMMs alone, then each backend with its graph. */
static void run_alone(cell_job *j, int *rounds)
{
    bench_results *res = j->res;
    cell_held held[BENCH_MAX_BACKENDS] = {{0}};
    if (j->kind->gemm_rows != NULL && !res->opt.check_only) {
        bench_gemm gemm = {0};
        hold_gemm(j, &gemm);
        *rounds = bench_turns(j, held, 0, 0, &gemm, 0);
        bench_gemm_release(j->dev, &gemm);
    }
    for (j->bi = 0; j->bi < res->nbackends && !res->world_failed; j->bi++) {
        stage(j, held);
        if (!res->world_failed) {
            int r = bench_turns(j, held, j->bi, 1, NULL, 0);
            *rounds = r > *rounds ? r : *rounds;
            graph_turns(j, held);
        }
        release(j, held);
    }
}

static void run_row(cell_job *j, int whole)
{
    int rounds = 0;
    j->short_of_memory = 0;
    whole = whole && run_whole(j, &rounds);
    if (!whole)
        run_alone(j, &rounds);
    if (j->rank == 0) {
        j->res->rows[j->row].turns = rounds;
        j->res->rows[j->row].alone = !whole;
    }
    bench_sync_barrier(j->res);
}

void bench_mark_not_run(bench_results *res, const char *why)
{
    bench_sync_lock(res);
    for (int i = 0; i < res->nrows; i++)
        for (int b = 0; b < res->nbackends; b++) {
            bench_cell *cell = &res->rows[i].cell[b];
            if (cell->state == CELL_EMPTY && !cell->note[0])
                agmm_format(cell->note, sizeof cell->note, "%s", why);
        }
    bench_sync_unlock(res);
}

agmm_status bench_rank_main(agmm_ctx *ctx, void *arg)
{
    bench_results *res = arg;
    const bench_row_kind *kind = row_kind_of(res->opt.op);
    if (kind == NULL) {
        /* Every rank alike, before any meeting: an operation bench_args.c accepts lacks its line. */
        bench_mark_not_run(res, "agmm-bench has no rows for this operation (row_kinds in tools/bench_run.c)");
        return AGMM_ERR_UNSUPPORTED;
    }
    bench_dev dev;
    int timed = res->opt.iters > 0 ? res->opt.iters : 1;
    agmm_ctx_busy_begin(ctx, "setting up its device");
    int init_ok = bench_dev_init(&dev, ctx, res->opt.flush, timed) == 0;
    agmm_ctx_busy_end(ctx);
    if (!init_ok)
        fprintf(stderr, "agmm-bench: rank %d: %s\n", agmm_ctx_rank(ctx), dev.err);
    /* If any rank cannot run, none does: the others would wait for it at the first barrier. */
    if (!bench_sync_and(res, init_ok)) {
        bench_mark_not_run(res, "a rank could not set up its device (its message is on stderr)");
        bench_dev_fini(&dev);
        return init_ok ? AGMM_SUCCESS : AGMM_ERR_CUDA;
    }
    cell_job j = {.ctx = ctx, .res = res, .dev = &dev, .kind = kind, .rank = agmm_ctx_rank(ctx), .nranks = res->nranks};
    for (j.row = 0; j.row < res->nrows && !res->world_failed; j.row++) {
        if (j.rank == 0)
            bench_progress_row(res, j.row);
        const int whole = !res->opt.alone && row_fits(&j, 1);
        if (whole || row_fits(&j, 0))
            run_row(&j, whole);
        if (j.rank == 0)
            bench_progress_done(res, j.row);
    }
    if (res->world_failed) {
        char why[sizeof res->world_why + 64];
        agmm_format(why, sizeof why, "the sweep stopped when the world failed: %s", res->world_why);
        bench_mark_not_run(res, why);
    }
    bench_dev_fini(&dev);
    return AGMM_SUCCESS;
}
