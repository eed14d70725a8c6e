/* The sweep one rank runs: for every row and backend, plan, fill fresh random inputs, poison
 * the outputs, run once and check, then warm up and time (docs/design.md, "Benchmark method").
 * Every rank runs the same sequence, so the collective calls line up. What a cell does is its
 * operation's row kind (bench_cell.h; one file per operation, bench_row_*.c, and a line in
 * row_kinds below); this file walks the rows, checks each fits in memory, and times the plain
 * GEMM beside the backends of an operation with one.
 *
 * Rank 0's plain GEMM is a busy spell (agmm_ctx_busy_begin): peers that reach the next meeting
 * first wait for it without the timeout, which bounds only a peer that stopped coming. */
#include "bench.h"
#include "bench_cell.h"
#include "bench_mem.h"
#include "bench_progress.h"
#include "bench_sync.h"

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

/* Whether row j->row fits in memory, the same answer on every rank: a rank short of memory fails
 * every cell of the row before anything is allocated (an overcommitting kernel would grant the
 * allocation and kill the process on touching it). */
static int row_fits(cell_job *j)
{
    bench_results *res = j->res;
    bench_row *row = &res->rows[j->row];
    uint64_t host = 0, device = 0;
    j->kind->need(res, j->row, j->rank == 0 && j->kind->gemm_rows != NULL && !res->opt.check_only, &host, &device);
    char why[AGMM_ERROR_LEN], what[AGMM_ERROR_LEN + 32];
    const int bi = j->bi;
    j->bi = 0;
    if (agmm_ext_check_memory(j->ctx, host, device, why, sizeof why) != AGMM_SUCCESS) {
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

/* Every cell the sweep never reached says why it was not run. */
static void mark_not_run(bench_results *res, const char *why)
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
        mark_not_run(res, "agmm-bench has no rows for this operation (row_kinds in tools/bench_run.c)");
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
    if (!bench_sync_all_ok(res, init_ok)) {
        mark_not_run(res, "a rank could not set up its device (its message is on stderr)");
        bench_dev_fini(&dev);
        return init_ok ? AGMM_SUCCESS : AGMM_ERR_CUDA;
    }
    cell_job j = {ctx, res, &dev, kind, agmm_ctx_rank(ctx), res->nranks, 0, 0};
    for (j.row = 0; j.row < res->nrows && !res->world_failed; j.row++) {
        if (j.rank == 0)
            bench_progress_row(res, j.row);
        if (!row_fits(&j)) {
            if (j.rank == 0)
                bench_progress_done(res, j.row);
            continue;
        }
        if (kind->gemm_rows != NULL && res->opt.check_only == 0) {
            /* The GEMM each rank runs: the gathered one, or the local M x N x K of a row-parallel one. */
            bench_row *row = &res->rows[j.row];
            const int64_t rows = kind->gemm_rows(res, row);
            if (j.rank == 0) {
                /* Rank 0's alone: the others wait for it at the barrier below, without the bound. */
                agmm_ctx_busy_begin(ctx, "timing the plain GEMM");
                bench_progress_phase(res, NULL, "timing the plain GEMM");
                bench_time_plain_gemm(&dev, ctx, rows, row->n, row->k, res->opt.b_layout, res->opt.warmup,
                                      res->opt.iters, &row->gemm_us, &row->engine_us);
                agmm_ctx_busy_end(ctx);
            }
            bench_sync_barrier(res);
        }
        for (j.bi = 0; j.bi < res->nbackends && !res->world_failed; j.bi++) {
            dev.err[0] = '\0';
            kind->run(&j);
            /* Ranks leave a cell together, so one rank's failure cannot skew the next cell. */
            bench_sync_barrier(res);
        }
        if (j.rank == 0)
            bench_progress_done(res, j.row);
    }
    if (res->world_failed) {
        char why[sizeof res->world_why + 64];
        agmm_format(why, sizeof why, "the sweep stopped when the world failed: %s", res->world_why);
        mark_not_run(res, why);
    }
    bench_dev_fini(&dev);
    return AGMM_SUCCESS;
}
