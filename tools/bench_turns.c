/* A row's figures taking turns (bench_turns.h).
 *
 * A cell's calls are collective: every rank makes them, in the same order, and agrees after each
 * block whether the cell is still good, so that a rank whose call failed never leaves the others
 * waiting. The plain GEMMs are rank 0's alone: it times them in a busy spell (its peers wait for it
 * at the barrier without the timeout) and the others only meet it there. */
#include <stdlib.h>

#include "bench_progress.h"
#include "bench_sync.h"
#include "bench_turns.h"

typedef enum { FIG_RUN, FIG_REPLAY, FIG_LIB, FIG_ENGINE } fig_kind;

typedef struct {
    fig_kind kind;
    int bi;                      /* the cell's backend (FIG_RUN, FIG_REPLAY) */
    int live;                    /* still timed: the same on every rank for a cell; rank 0's for a GEMM */
    double *us;                  /* the times of its calls so far (rank 0's are recorded) */
    int n;
} figure;

static const char *fig_name(fig_kind k)
{
    return k == FIG_RUN ? "timing runs" : k == FIG_REPLAY ? "timing graph replays" : "timing the plain GEMM";
}

/* One call of the figure; 0 on success. */
static int call(cell_job *j, const figure *f, const cell_held *held, const bench_gemm *g)
{
    const cell_held *h = &held[f->bi];
    switch (f->kind) {
    case FIG_RUN:
        return cell_run_once(j, h->plan, h->io) == AGMM_SUCCESS ? 0 : -1;
    case FIG_REPLAY:
        return bench_graph_launch(j->dev, h->exec);
    case FIG_LIB:
        return agmm_ext_gemm_run(g->lib, j->dev->stream) == AGMM_SUCCESS ? 0 : -1;
    case FIG_ENGINE:
        return agmm_ext_gemm_run(g->engine, j->dev->stream) == AGMM_SUCCESS ? 0 : -1;
    }
    return -1;
}

/* `calls` calls of f, untimed (warm-up) or each timed after a flush; 0 if all ran and, timed, were
 * collected into f->us. */
static int calls_of(cell_job *j, figure *f, const cell_held *held, const bench_gemm *g, int calls, int timed)
{
    bench_dev *dev = j->dev;
    if (timed && f->us == NULL)
        return -1;
    for (int c = 0; c < calls; c++) {
        if (!timed && call(j, f, held, g) != 0)
            return -1;
        if (timed && (bench_flush(dev) || bench_timer_start(dev, c) || call(j, f, held, g) != 0 ||
                      bench_timer_stop(dev, c)))
            return -1;
    }
    if (!timed)
        return bench_sync(dev);
    if (bench_timer_collect(dev, calls, f->us + f->n) != 0)
        return -1;
    f->n += calls;
    return 0;
}

/* A block of f's calls: every rank's for a cell, then their verdict; rank 0's for a GEMM, then a
 * barrier. */
static void block(cell_job *j, figure *f, const cell_held *held, const bench_gemm *g, int calls, int timed,
                  const char *what)
{
    if (f->kind == FIG_LIB || f->kind == FIG_ENGINE) {
        if (j->rank == 0) {
            agmm_ctx_busy_begin(j->ctx, what);
            bench_progress_phase(j->res, NULL, what);
            if (f->live && calls_of(j, f, held, g, calls, timed) != 0)
                f->live = 0;
            agmm_ctx_busy_end(j->ctx);
        }
        bench_sync_barrier(j->res);
        return;
    }
    if (!f->live)
        return;
    j->bi = f->bi;
    cell_phase(j, what);
    if (calls_of(j, f, held, g, calls, timed) != 0 || agmm_ctx_sync(j->ctx) != AGMM_SUCCESS)
        cell_fail(j, CELL_ERROR, cell_why(j, timed ? "timed run failed" : "warm-up run failed"));
    f->live = cell_agreed_ok(j);
}

/* Rank 0: f's figures into the row (only a figure timed in every round has them). */
static void record(cell_job *j, const figure *f)
{
    const int iters = j->res->opt.iters;
    if (j->rank != 0 || !f->live || f->n != iters)
        return;
    agmm_stats s;
    agmm_stats_compute(f->us, iters, &s);
    bench_row *row = &j->res->rows[j->row];
    if (f->kind == FIG_LIB || f->kind == FIG_ENGINE) {
        *(f->kind == FIG_LIB ? &row->gemm_us : &row->engine_us) = s.median;
        return;
    }
    bench_cell *cell = &row->cell[f->bi];
    if (f->kind == FIG_RUN)
        cell->mean_us = s.mean, cell->median_us = s.median, cell->min_us = s.min, cell->max_us = s.max;
    else
        cell->graph_mean_us = s.mean, cell->graph_median_us = s.median;
}

int bench_turns(cell_job *j, cell_held *held, int b0, int nb, const bench_gemm *gemm, int replays)
{
    const bench_options *o = &j->res->opt;
    figure fig[2 * BENCH_MAX_BACKENDS + 2];
    int nf = 0;
    /* The same list on every rank: the GEMMs are named alike, cells' flags are agreed (cell_keep).
     * The yardsticks first: the first round starts with them. */
    if (gemm != NULL) {
        fig[nf++] = (figure){FIG_LIB, -1, j->rank == 0 && gemm->lib != NULL, NULL, 0};
        if (j->dev->gpu)
            fig[nf++] = (figure){FIG_ENGINE, -1, j->rank == 0 && gemm->engine != NULL, NULL, 0};
    }
    for (int b = b0; b < b0 + nb; b++)
        if (replays ? held[b].replays : held[b].ok && !o->check_only)
            fig[nf++] = (figure){replays ? FIG_REPLAY : FIG_RUN, b, 1, NULL, 0};
    for (int i = 0; i < nf; i++) {
        fig[i].us = malloc((size_t)o->iters * sizeof *fig[i].us);
        /* A cell's failure reaches every rank at its warm-up's verdict, where live changes alike;
         * a GEMM's live is rank 0's own. */
        if (fig[i].us == NULL && (fig[i].kind == FIG_RUN || fig[i].kind == FIG_REPLAY)) {
            j->bi = fig[i].bi;
            cell_fail(j, CELL_ERROR, "host allocation failed");
        } else if (fig[i].us == NULL) {
            fig[i].live = 0;
        }
    }
    for (int i = 0; i < nf; i++)
        block(j, &fig[i], held, gemm, o->warmup, 0, "warming up");
    const int rounds = o->turns;
    for (int r = 0; r < rounds; r++) {
        const int calls = o->iters / rounds + (r < o->iters % rounds);
        for (int i = 0; i < nf; i++) {
            figure *f = &fig[(r + i) % nf];
            char what[80];
            agmm_format(what, sizeof what, "%s, round %d of %d", fig_name(f->kind), r + 1, rounds);
            block(j, f, held, gemm, calls, 1, what);
        }
    }
    for (int i = 0; i < nf; i++) {
        record(j, &fig[i]);
        free(fig[i].us);
    }
    return nf > 0 ? rounds : 0;
}
