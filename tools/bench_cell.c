/* What every operation's rows share (bench_cell.h): seeded inputs, the cell's verdict merged
 * across ranks, busy spells and phases, and what a checked cell keeps for its row's turns (its
 * plan, io, device buffers, and a CUDA graph of one run checked against the eager outputs).
 *
 * Work a rank does alone (allocating, filling, downloading and checking) is a busy spell
 * (agmm_ctx_busy_begin): peers that reach the next meeting first wait for it without the
 * timeout, which bounds only a peer that stopped coming, however long a row's own work is.
 * Rank 0 also names each phase for the progress lines of long rows (bench_progress.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cell.h"
#include "bench_progress.h"
#include "bench_sync.h"

uint64_t cell_seed(int row, int backend, int rank, int what)
{
    uint64_t s = ((uint64_t)row << 40) ^ ((uint64_t)backend << 32) ^ ((uint64_t)rank << 8) ^ (uint64_t)what;
    return agmm_rng_next(&s);
}

void cell_fill_bf16(uint16_t *x, size_t count, uint64_t seed)
{
    for (size_t i = 0; i < count; i++)
        x[i] = agmm_f32_to_bf16(agmm_rng_uniform(&seed));
}

void cell_fill_f32(float *x, size_t count, uint64_t seed)
{
    for (size_t i = 0; i < count; i++)
        x[i] = agmm_rng_uniform(&seed);
}

/* Marks the cell failed (the first failure's note is kept); returns 0 for `ok = cell_fail(...)`. */
int cell_fail(cell_job *j, cell_state state, const char *what)
{
    bench_cell *cell = &j->res->rows[j->row].cell[j->bi];
    bench_sync_lock(j->res);
    if (cell->state == CELL_EMPTY || cell->state == CELL_OK) {
        cell->state = state;
        agmm_format(cell->note, sizeof cell->note, "rank %d: %s", j->rank, what);
    }
    bench_sync_unlock(j->res);
    return 0;
}

void cell_fail_plan(cell_job *j, agmm_status st)
{
    j->short_of_memory |= st == AGMM_ERR_NO_MEMORY;
    cell_fail(j, st == AGMM_ERR_UNSUPPORTED ? CELL_SKIPPED : CELL_ERROR, cell_why(j, agmm_status_str(st)));
}

/* No rank has failed this cell so far. Read after a barrier, every rank sees the same answer. */
int cell_ok(cell_job *j)
{
    bench_sync_lock(j->res);
    cell_state s = j->res->rows[j->row].cell[j->bi].state;
    bench_sync_unlock(j->res);
    return s == CELL_EMPTY || s == CELL_OK;
}

/* Every rank's verdict on the cell, the same on every rank (bench_sync_cell). Deciding
 * collective work on a plain cell_ok() could differ between ranks and leave one at a barrier. */
int cell_agreed_ok(cell_job *j) { return bench_sync_cell(j->res, j->row, j->bi); }

/* Merges one rank's check into the cell: the worst error, exactness on every rank. */
void cell_record_check(cell_job *j, double err, int exact)
{
    bench_sync_lock(j->res);
    bench_cell *cell = &j->res->rows[j->row].cell[j->bi];
    if (cell->state == CELL_EMPTY) {
        cell->state = CELL_OK;
        cell->exact_a = 1;
    }
    if (err > cell->err || isnan(err))
        cell->err = err;
    cell->exact_a = cell->exact_a && exact;
    bench_sync_unlock(j->res);
}

/* Rank 0: what the cell does now, for the progress lines. */
void cell_phase(cell_job *j, const char *what)
{
    if (j->rank == 0)
        bench_progress_phase(j->res, j->res->backends[j->bi], what);
}

/* Work this rank does alone, up to cell_solo_end: no meeting may start inside it. */
void cell_solo_begin(cell_job *j, const char *what)
{
    agmm_ctx_busy_begin(j->ctx, what);
    cell_phase(j, what);
}

void cell_solo_end(cell_job *j) { agmm_ctx_busy_end(j->ctx); }

/* The auto column's plan: what it chose (rank 0's record; every rank chose alike). */
void cell_note_auto(cell_job *j, const agmm_plan *plan)
{
    bench_cell *cell = &j->res->rows[j->row].cell[j->bi];
    if (j->rank == 0 && strcmp(j->res->backends[j->bi], "auto") == 0) {
        cell->chose = agmm_plan_backend(plan);
        agmm_ext_auto_choice(j->ctx, &cell->how, &cell->tune_ms);
    }
}

/* One run of the cell's plan, whatever its operation: the row kind knows its io. */
agmm_status cell_run_once(cell_job *j, agmm_plan *plan, const void *io)
{
    return j->kind->launch(plan, io, j->dev->stream);
}

void *cell_alloc(cell_job *j, size_t bytes)
{
    cell_held *h = j->held;
    if (h->nbufs == CELL_MAX_BUFS) {
        agmm_format(j->dev->err, sizeof j->dev->err, "agmm-bench: a cell holds at most %d device buffers",
                    CELL_MAX_BUFS);
        return NULL;
    }
    void *p = bench_alloc(j->dev, bytes);
    if (p != NULL)
        h->bufs[h->nbufs++] = p;
    j->short_of_memory |= p == NULL;
    return p;
}

static int compare_replay(cell_job *j, const cell_output *outs, int nouts);

/* One replay with the outputs poisoned first; 1 if it reproduces the eager run, else the cell fails. */
static int replay_matches(cell_job *j, void *exec, const cell_output *outs, int nouts)
{
    bench_dev *dev = j->dev;
    int ok = 1;
    for (int i = 0; i < nouts && ok; i++)
        ok = bench_poison_bf16(dev, outs[i].dev, outs[i].count * agmm_dtype_bytes(outs[i].dtype) / 2) == 0;
    if (!ok || bench_graph_launch(dev, exec) != 0 || bench_sync(dev) != 0 || agmm_ctx_sync(j->ctx) != AGMM_SUCCESS)
        return cell_fail(j, CELL_ERROR, cell_why(j, "graph replay failed"));
    cell_solo_begin(j, "checking a graph replay against the run");
    ok = compare_replay(j, outs, nouts);
    cell_solo_end(j);
    return ok;
}

/* The replay's outputs (on the device) against the eager run's (on the host). */
static int compare_replay(cell_job *j, const cell_output *outs, int nouts)
{
    bench_dev *dev = j->dev;
    for (int i = 0; i < nouts; i++) {
        size_t es = agmm_dtype_bytes(outs[i].dtype);
        void *got = malloc(outs[i].count * es);
        if (got == NULL || bench_download(dev, got, outs[i].dev, outs[i].count * es) != 0) {
            free(got);
            return cell_fail(j, CELL_ERROR, got ? dev->err : "host allocation failed");
        }
        double num = 0, den = 0;
        int same = memcmp(got, outs[i].host, outs[i].count * es) == 0;
        for (size_t e = 0; !same && e < outs[i].count; e++) {
            double a, b;
            if (outs[i].dtype == AGMM_DTYPE_F32) {
                a = ((const float *)got)[e];
                b = ((const float *)outs[i].host)[e];
            } else {
                a = agmm_bf16_to_f32(((const uint16_t *)got)[e]);
                b = agmm_bf16_to_f32(((const uint16_t *)outs[i].host)[e]);
            }
            num += (a - b) * (a - b);
            den += b * b;
        }
        free(got);
        double err = den > 0 ? sqrt(num / den) : sqrt(num);
        double tol = outs[i].dtype == AGMM_DTYPE_F32 ? CELL_TOL_F32 : CELL_TOL_BF16;
        if (!same && (outs[i].exact || !(err <= tol))) {
            char what[160];
            snprintf(what, sizeof what, "graph replay: output %d differs from the run's (rel err %.2e, tolerance %s)",
                     i, err, outs[i].exact ? "exact" : tol == CELL_TOL_F32 ? "1e-5" : "1e-2");
            return cell_fail(j, CELL_WRONG, what);
        }
    }
    return 1;
}

/* The host copies of the kept outputs, freed. */
static void drop_outputs(cell_held *h)
{
    for (int i = 0; i < h->nouts; i++)
        free((void *)h->outs[i].host);
    h->nouts = 0;
}

void cell_keep(cell_job *j, agmm_plan *plan, const void *io, size_t io_bytes, const cell_output *outs, int nouts)
{
    cell_held *h = j->held;
    h->plan = plan;
    /* Both the same on every rank: a row kind's io or outputs outgrew cell_held's slots. */
    if (io_bytes > sizeof h->io || nouts > CELL_MAX_OUTS)
        cell_fail(j, CELL_ERROR, "agmm-bench: the operation's io or outputs outgrew cell_held's copies");
    else
        memcpy(h->io, io, io_bytes);
    for (int i = 0; j->res->opt.graph && j->dev->gpu && cell_ok(j) && i < nouts; i++) {
        const size_t bytes = outs[i].count * agmm_dtype_bytes(outs[i].dtype);
        void *copy = malloc(bytes ? bytes : 1);
        if (copy == NULL) {
            cell_fail(j, CELL_ERROR, "host allocation failed");
            break;
        }
        memcpy(copy, outs[i].host, bytes);
        h->outs[h->nouts] = outs[i];
        h->outs[h->nouts++].host = copy;
    }
    h->ok = cell_agreed_ok(j);
}

void cell_graph(cell_job *j)
{
    cell_held *h = j->held;
    bench_dev *dev = j->dev;
    if (!h->ok || !j->res->opt.graph || !dev->gpu)
        return;
    cell_phase(j, "capturing a CUDA graph");
    if (bench_graph_begin(dev) != 0) {
        cell_fail(j, CELL_ERROR, dev->err);
    } else {
        int ran = cell_run_once(j, h->plan, h->io) == AGMM_SUCCESS;
        if (!ran)
            cell_fail(j, CELL_ERROR, cell_why(j, "graph capture: the run failed"));
        if (bench_graph_end(dev, ran, &h->exec) != 0 && ran)
            cell_fail(j, CELL_ERROR, dev->err);
    }
    /* Instantiation may synchronise the device: every rank has its graph before any replays. */
    if (cell_agreed_ok(j))
        replay_matches(j, h->exec, h->outs, h->nouts);
    drop_outputs(h);
    /* Every rank has its graph or none: a rank whose capture or replay failed failed the cell. */
    h->replays = cell_agreed_ok(j) && !j->res->opt.check_only;
}

void cell_release(cell_job *j)
{
    cell_held *h = j->held;
    bench_graph_free(h->exec);
    drop_outputs(h);
    for (int i = 0; i < h->nbufs; i++)
        bench_free(j->dev, h->bufs[i]);
    agmm_plan_destroy(h->plan);
    memset(h, 0, sizeof *h);
}

const char *cell_why(cell_job *j, const char *fallback)
{
    const char *e = agmm_last_error(j->ctx);
    if (e[0])
        return e;
    return j->dev->err[0] ? j->dev->err : fallback;
}
