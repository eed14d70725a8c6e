/* Meeting points of the benchmark's ranks (bench_sync.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench_sync.h"

int bench_sync_init(bench_results *r, int nlocal)
{
    if (pthread_mutex_init(&r->mu, NULL) != 0)
        return -1;
    return pthread_barrier_init(&r->barrier, NULL, (unsigned)nlocal) != 0 ? -1 : 0;
}

void bench_sync_fini(bench_results *r)
{
    pthread_barrier_destroy(&r->barrier);
    pthread_mutex_destroy(&r->mu);
}

void bench_sync_attach(bench_results *r, agmm_ctx *ctx) { r->proc_ctx = ctx; }

/* A failed meeting of processes (a peer died or timed out) leaves the world unusable: the sweep
 * stops (r->world_failed, with the reason in r->world_why) and the cell being merged carries the
 * reason too. */
static void world_fails(bench_results *r)
{
    if (!r->world_failed)
        agmm_format(r->world_why, sizeof r->world_why, "%s", agmm_error_detail(agmm_last_error(r->proc_ctx)));
    r->world_failed = 1;
}

void bench_sync_barrier(bench_results *r)
{
    if (r->proc_ctx && agmm_ext_barrier(r->proc_ctx) != AGMM_SUCCESS)
        world_fails(r);
    else if (!r->proc_ctx)
        pthread_barrier_wait(&r->barrier);
}

void bench_sync_lock(bench_results *r) { pthread_mutex_lock(&r->mu); }
void bench_sync_unlock(bench_results *r) { pthread_mutex_unlock(&r->mu); }

static int cell_failed(cell_state s) { return s != CELL_EMPTY && s != CELL_OK; }

/* What one process knows of a cell, as its peers get it. */
typedef struct {
    int32_t state;
    int32_t exact_a;
    double err;
    char note[sizeof(((bench_cell *)0)->note)];
} cell_view;

static int merge_cell(bench_results *r, bench_cell *cell)
{
    cell_view mine = {.state = (int32_t)cell->state, .exact_a = cell->exact_a, .err = cell->err}, all[AGMM_MAX_RANKS];
    snprintf(mine.note, sizeof mine.note, "%s", cell->note);
    if (agmm_ext_exchange(r->proc_ctx, &mine, sizeof mine, all) != AGMM_SUCCESS) {
        world_fails(r);
        if (!cell_failed(cell->state)) {
            cell->state = CELL_ERROR;
            agmm_format(cell->note, sizeof cell->note, "%s", agmm_last_error(r->proc_ctx));
        }
        return 0;
    }
    /* Every process merges the same views in rank order, so every copy ends alike. */
    bench_cell merged = *cell;
    merged.state = CELL_EMPTY;
    merged.exact_a = 1;
    merged.err = 0;
    int checked = 0;
    for (int p = 0; p < r->nranks; p++) {
        const cell_view *v = &all[p];
        if (cell_failed((cell_state)v->state) && !cell_failed(merged.state)) {
            merged.state = (cell_state)v->state;
            snprintf(merged.note, sizeof merged.note, "%s", v->note);
        } else if (v->state == CELL_OK && merged.state == CELL_EMPTY) {
            merged.state = CELL_OK;
        }
        if (v->state == CELL_OK || v->state == CELL_WRONG) {
            checked = 1;
            merged.exact_a = merged.exact_a && v->exact_a;
            if (v->err > merged.err || isnan(v->err))
                merged.err = v->err;
        }
    }
    merged.exact_a = merged.exact_a && checked;
    *cell = merged;
    return !cell_failed(merged.state);
}

int bench_sync_cell(bench_results *r, int row, int b)
{
    bench_cell *cell = &r->rows[row].cell[b];
    if (r->proc_ctx)
        return merge_cell(r, cell);
    pthread_barrier_wait(&r->barrier);
    bench_sync_lock(r);
    int ok = !cell_failed(cell->state);
    bench_sync_unlock(r);
    pthread_barrier_wait(&r->barrier);
    return ok;
}

int bench_sync_all_ok(bench_results *r, int ok)
{
    if (r->proc_ctx) {
        int32_t mine = ok, all[AGMM_MAX_RANKS];
        if (agmm_ext_exchange(r->proc_ctx, &mine, sizeof mine, all) != AGMM_SUCCESS) {
            fprintf(stderr, "agmm-bench: rank %d: %s\n", agmm_ctx_rank(r->proc_ctx), agmm_last_error(r->proc_ctx));
            return 0;
        }
        for (int p = 0; p < r->nranks; p++)
            ok &= all[p] != 0;
        return ok;
    }
    bench_sync_lock(r);
    r->init_failed |= !ok;
    bench_sync_unlock(r);
    pthread_barrier_wait(&r->barrier);
    bench_sync_lock(r);
    ok = !r->init_failed;
    bench_sync_unlock(r);
    return ok;
}
