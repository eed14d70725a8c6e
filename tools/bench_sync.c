/* Meeting points of the benchmark's ranks (bench_sync.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

int bench_sync_and(bench_results *r, int ok)
{
    if (r->proc_ctx) {
        int32_t mine = ok, all[AGMM_MAX_RANKS];
        if (agmm_ext_exchange(r->proc_ctx, &mine, sizeof mine, all) != AGMM_SUCCESS) {
            world_fails(r);
            return 0;
        }
        for (int p = 0; p < r->nranks; p++)
            ok &= all[p] != 0;
        return ok;
    }
    /* Threads: each adds its answer between the first two barriers and reads the verdict before
     * the third; one thread clears it after the third, before any of them can reach the first
     * barrier of the next call. */
    pthread_barrier_wait(&r->barrier);
    bench_sync_lock(r);
    r->and_failed |= !ok;
    bench_sync_unlock(r);
    pthread_barrier_wait(&r->barrier);
    bench_sync_lock(r);
    ok = !r->and_failed;
    bench_sync_unlock(r);
    if (pthread_barrier_wait(&r->barrier) == PTHREAD_BARRIER_SERIAL_THREAD) {
        bench_sync_lock(r);
        r->and_failed = 0;
        bench_sync_unlock(r);
    }
    return ok;
}

/* ---- the ranks' arguments (bench_sync_args) ---- */

typedef struct {
    uint32_t len;                /* of all the arguments (text holds the first bytes) */
    uint32_t hash;               /* FNV-1a of all of them */
    char text[1016];             /* the arguments, each ended by '\0' */
} bench_args;

static void args_of(bench_args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->hash = 2166136261u;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "--csv") || !strcmp(argv[i], "--json")) && i + 1 < argc) {
            i++;
            continue;
        }
        for (const char *c = argv[i];; c++) {
            if (a->len < sizeof a->text)
                a->text[a->len] = *c;
            a->len++;
            a->hash = (a->hash ^ (unsigned char)*c) * 16777619u;
            if (*c == '\0')
                break;
        }
    }
}

/* The i-th argument in a's text, or NULL past its end. */
static const char *arg_at(const bench_args *a, int i)
{
    size_t at = 0, end = a->len < sizeof a->text ? a->len : sizeof a->text;
    for (; i > 0 && at < end; i--)
        at += strnlen(a->text + at, end - at) + 1;
    return at < end ? a->text + at : NULL;
}

int bench_sync_args(bench_results *r, int argc, char **argv)
{
    agmm_ctx *ctx = r->proc_ctx;
    const int me = agmm_ctx_rank(ctx);
    bench_args mine, *all = calloc(AGMM_MAX_RANKS, sizeof *all);
    args_of(&mine, argc, argv);
    if (all == NULL || agmm_ext_exchange(ctx, &mine, sizeof mine, all) != AGMM_SUCCESS) {
        fprintf(stderr, "agmm-bench: rank %d: comparing the ranks' options: %s\n", me,
                all ? agmm_last_error(ctx) : "out of memory");
        free(all);
        return -1;
    }
    int verdict = 0;
    for (int p = 1; p < r->nranks; p++) {
        if (all[p].len == all[0].len && all[p].hash == all[0].hash &&
            !memcmp(all[p].text, all[0].text, sizeof all[0].text))
            continue;
        int i = 0;
        const char *x, *y;
        while ((x = arg_at(&all[p], i)) != NULL && (y = arg_at(&all[0], i)) != NULL && !strcmp(x, y))
            i++;
        x = arg_at(&all[p], i), y = arg_at(&all[0], i);
        const char *before = i > 0 ? arg_at(&all[0], i - 1) : NULL;
        if (x == NULL && y == NULL)
            fprintf(stderr, "agmm-bench: rank %d: rank %d was given other options than rank 0 (they differ past "
                            "their first %zu bytes): every process must get the same options (the --csv and --json "
                            "paths aside)\n",
                    me, p, sizeof all[0].text);
        else
            fprintf(stderr, "agmm-bench: rank %d: rank %d was given other options than rank 0: '%s' where rank 0 "
                            "has '%s'%s%s%s: every process must get the same options (the --csv and --json paths "
                            "aside)\n",
                    me, p, x ? x : "(nothing)", y ? y : "(nothing)", before ? " (after '" : "",
                    before ? before : "", before ? "')" : "");
        verdict = -1;
        break;
    }
    free(all);
    return verdict;
}
