/* The sweep one rank runs: for every row and backend, plan, fill fresh random inputs, poison
 * the outputs, run once and check, then warm up and time (docs/design.md, "Benchmark method").
 * Every rank runs the same sequence, so the collective calls line up.
 *
 * Work a rank does alone (allocating, filling, downloading and checking, rank 0's plain GEMM) is
 * a busy spell (agmm_ctx_busy_begin): peers that reach the next meeting first wait for it without
 * the timeout, which bounds only a peer that stopped coming, however long a row's own work is.
 * Rank 0 also names each phase for the progress lines of long rows (bench_progress.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_mem.h"
#include "bench_mr.h"
#include "bench_progress.h"
#include "bench_sync.h"

/* Tolerances: bf16 outputs carry ~2^-9 relative rounding; fp32 sums only reordering. */
#define TOL_BF16 1e-2
#define TOL_F32 1e-5
/* Shapes whose gathered GEMM is at most this many multiply-adds get a full fp64 reference;
 * larger ones a sample of rows from every rank block (first, last and spread rows). */
#define FULL_CHECK_MACS ((int64_t)1 << 27)
#define SAMPLE_ROWS_PER_RANK 6

static uint64_t seed_of(int row, int backend, int rank, int what)
{
    uint64_t s = ((uint64_t)row << 40) ^ ((uint64_t)backend << 32) ^ ((uint64_t)rank << 8) ^ (uint64_t)what;
    return agmm_rng_next(&s);
}

static void fill_bf16(uint16_t *x, size_t count, uint64_t seed)
{
    for (size_t i = 0; i < count; i++)
        x[i] = agmm_f32_to_bf16(agmm_rng_uniform(&seed));
}

static void fill_f32(float *x, size_t count, uint64_t seed)
{
    for (size_t i = 0; i < count; i++)
        x[i] = agmm_rng_uniform(&seed);
}

static double b_at(const uint16_t *b, agmm_layout layout, int64_t n, int64_t k, int64_t kk, int64_t nn)
{
    return agmm_bf16_to_f32(layout == AGMM_LAYOUT_COL_MAJOR ? b[nn * k + kk] : b[kk * n + nn]);
}

/* Relative Frobenius error of C's checked rows against fp64, and whether any element is NaN. */
static double check_c(const uint16_t *a, const uint16_t *b, const uint16_t *c, int64_t rows, int64_t m,
                      int64_t n, int64_t k, agmm_layout layout, int *nan_seen)
{
    int full = (double)rows * (double)n * (double)k <= (double)FULL_CHECK_MACS;
    int64_t nranks = rows / m;
    int64_t count = full ? rows : nranks * SAMPLE_ROWS_PER_RANK;
    double num = 0, den = 0;
    /* Sampled rows leave most of C unread: scan all of it for the poison, so a tile that was
     * never written fails the check even where the error is not computed. */
    for (int64_t i = 0; !full && i < rows * n; i++)
        if (isnan(agmm_bf16_to_f32(c[i]))) {
            *nan_seen = 1;
            break;
        }
    double *acc = malloc((size_t)n * sizeof *acc);
    if (acc == NULL)
        return INFINITY;
    for (int64_t idx = 0; idx < count; idx++) {
        int64_t r = idx;
        if (!full) {
            int64_t blk = idx / SAMPLE_ROWS_PER_RANK, j = idx % SAMPLE_ROWS_PER_RANK;
            r = blk * m + (j == 0 ? 0 : j == 1 ? m - 1 : (m * j) / SAMPLE_ROWS_PER_RANK);
        }
        memset(acc, 0, (size_t)n * sizeof *acc);
        for (int64_t kk = 0; kk < k; kk++) {
            double av = agmm_bf16_to_f32(a[r * k + kk]);
            for (int64_t nn = 0; nn < n; nn++)
                acc[nn] += av * b_at(b, layout, n, k, kk, nn);
        }
        for (int64_t nn = 0; nn < n; nn++) {
            double got = agmm_bf16_to_f32(c[r * n + nn]);
            if (isnan(got))
                *nan_seen = 1;
            num += (got - acc[nn]) * (got - acc[nn]);
            den += acc[nn] * acc[nn];
        }
    }
    free(acc);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

typedef struct {
    agmm_ctx *ctx;
    bench_results *res;
    bench_dev *dev;
    int rank, nranks, row, bi;
} cell_job;

/* Marks the cell failed (the first failure's note is kept); returns 0 for `ok = cell_fail(...)`. */
static int cell_fail(cell_job *j, cell_state state, const char *what)
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

/* No rank has failed this cell so far. Read after a barrier, every rank sees the same answer. */
static int cell_ok(cell_job *j)
{
    bench_sync_lock(j->res);
    cell_state s = j->res->rows[j->row].cell[j->bi].state;
    bench_sync_unlock(j->res);
    return s == CELL_EMPTY || s == CELL_OK;
}

/* Every rank's verdict on the cell, the same on every rank (bench_sync_cell). Deciding
 * collective work on a plain cell_ok() could differ between ranks and leave one at a barrier. */
static int cell_agreed_ok(cell_job *j) { return bench_sync_cell(j->res, j->row, j->bi); }

/* Merges one rank's check into the cell: the worst error, exactness on every rank. */
static void record_check(cell_job *j, double err, int exact)
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

static const char *why(cell_job *j, const char *fallback);

/* Rank 0: what the cell does now, for the progress lines. */
static void phase(cell_job *j, const char *what)
{
    if (j->rank == 0)
        bench_progress_phase(j->res, j->res->backends[j->bi], what);
}

/* Work this rank does alone, up to solo_end: no meeting may start inside it. */
static void solo_begin(cell_job *j, const char *what)
{
    agmm_ctx_busy_begin(j->ctx, what);
    phase(j, what);
}

static void solo_end(cell_job *j) { agmm_ctx_busy_end(j->ctx); }

/* The auto column's plan: what it chose (rank 0's record; every rank chose alike). */
static void note_auto(cell_job *j, const agmm_plan *plan)
{
    bench_cell *cell = &j->res->rows[j->row].cell[j->bi];
    if (j->rank == 0 && strcmp(j->res->backends[j->bi], "auto") == 0) {
        cell->chose = agmm_plan_backend(plan);
        agmm_ext_auto_choice(j->ctx, &cell->how, &cell->tune_ms);
    }
}

/* One run of the cell's plan, whatever its operation. */
static agmm_status run_once(cell_job *j, agmm_plan *plan, const void *io)
{
    switch (j->res->opt.op) {
    case AGMM_OP_AG_MATMUL: return agmm_ag_matmul(plan, io, j->dev->stream);
    case AGMM_OP_MATMUL_REDUCE_SCATTER: return agmm_matmul_reduce_scatter(plan, io, j->dev->stream);
    case AGMM_OP_MATMUL_ALL_REDUCE: return agmm_matmul_all_reduce(plan, io, j->dev->stream);
    case AGMM_OP_ALL_REDUCE_RMSNORM: return agmm_all_reduce_rmsnorm(plan, io, j->dev->stream);
    case AGMM_OP_ALL_REDUCE:
    case AGMM_OP_NONE: break;
    }
    return agmm_all_reduce(plan, io, j->dev->stream);
}

/* One timed call: an eager run of the plan, or a replay of its graph `exec`. 0 on success. */
typedef int (*cell_call)(cell_job *j, agmm_plan *plan, const void *io, void *exec);

static int call_run(cell_job *j, agmm_plan *plan, const void *io, void *exec)
{
    return run_once(j, plan, io) == AGMM_SUCCESS ? 0 : -1;
}

static int call_replay(cell_job *j, agmm_plan *plan, const void *io, void *exec)
{
    return bench_graph_launch(j->dev, exec);
}

/* Warm-up, agreement, timed loop of `call`; rank 0's times go to *out (returns 1 then). `go` (the
 * same on every rank) says whether to time at all; every rank meets the agreement either way. */
static int time_calls(cell_job *j, cell_call call, agmm_plan *plan, const void *io, void *exec, int go,
                      agmm_stats *out)
{
    const bench_options *o = &j->res->opt;
    bench_dev *dev = j->dev;
    if (go)
        phase(j, call == call_run ? "warming up and timing runs" : "warming up and timing graph replays");
    for (int i = 0; go && i < o->warmup; i++)
        if (call(j, plan, io, exec) != 0)
            go = cell_fail(j, CELL_ERROR, why(j, "warm-up run failed"));
    if (go && (agmm_ctx_sync(j->ctx) != AGMM_SUCCESS || bench_sync(dev) != 0))
        go = cell_fail(j, CELL_ERROR, why(j, "warm-up sync failed"));
    if (!cell_agreed_ok(j) || !go)
        return 0;
    for (int i = 0; i < o->iters; i++) {
        if (bench_flush(dev) || bench_timer_start(dev, i) || call(j, plan, io, exec) != 0 ||
            bench_timer_stop(dev, i)) {
            cell_fail(j, CELL_ERROR, why(j, "timed run failed"));
            return 0;
        }
    }
    double *us = malloc((size_t)o->iters * sizeof *us);
    if (us == NULL || bench_timer_collect(dev, o->iters, us) != 0 || agmm_ctx_sync(j->ctx) != AGMM_SUCCESS) {
        cell_fail(j, CELL_ERROR, why(j, "timed run failed"));
        free(us);
        return 0;
    }
    if (j->rank == 0)
        agmm_stats_compute(us, o->iters, out);
    free(us);
    return j->rank == 0;
}

static void time_plan(cell_job *j, agmm_plan *plan, const void *io, int go)
{
    agmm_stats s;
    if (time_calls(j, call_run, plan, io, NULL, go, &s)) {
        bench_cell *cell = &j->res->rows[j->row].cell[j->bi];
        cell->mean_us = s.mean;
        cell->median_us = s.median;
        cell->min_us = s.min;
        cell->max_us = s.max;
    }
}

/* An output a graph replay must reproduce: its device buffer, and the eager run's result on the
 * host (already checked against the reference). */
typedef struct {
    void *dev;
    const void *host;
    size_t count;      /* elements */
    agmm_dtype dtype;
    int exact;         /* 1: bit for bit (the gathered A); 0: within the cell's tolerance (a sum may
                          be added in another order by NCCL inside a graph) */
} cell_output;

static int compare_replay(cell_job *j, const cell_output *outs, int nouts);

/* One replay with the outputs poisoned first; 1 if it reproduces the eager run, else the cell fails. */
static int replay_matches(cell_job *j, void *exec, const cell_output *outs, int nouts)
{
    bench_dev *dev = j->dev;
    int ok = 1;
    for (int i = 0; i < nouts && ok; i++)
        ok = bench_poison_bf16(dev, outs[i].dev, outs[i].count * agmm_dtype_bytes(outs[i].dtype) / 2) == 0;
    if (!ok || bench_graph_launch(dev, exec) != 0 || bench_sync(dev) != 0 || agmm_ctx_sync(j->ctx) != AGMM_SUCCESS)
        return cell_fail(j, CELL_ERROR, why(j, "graph replay failed"));
    solo_begin(j, "checking a graph replay against the run");
    ok = compare_replay(j, outs, nouts);
    solo_end(j);
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
        double tol = outs[i].dtype == AGMM_DTYPE_F32 ? TOL_F32 : TOL_BF16;
        if (!same && (outs[i].exact || !(err <= tol))) {
            char what[160];
            snprintf(what, sizeof what, "graph replay: output %d differs from the run's (rel err %.2e, tolerance %s)",
                     i, err, outs[i].exact ? "exact" : tol == TOL_F32 ? "1e-5" : "1e-2");
            return cell_fail(j, CELL_WRONG, what);
        }
    }
    return 1;
}

/* --graph: capture one run of the plan into a CUDA graph on every rank, check that a replay
 * reproduces the eager run's outputs, then (unless --check) time replays as the graph figures.
 * `go` is the same on every rank; so is every collective step below. */
static void time_graph(cell_job *j, agmm_plan *plan, const void *io, const cell_output *outs, int nouts, int go)
{
    bench_dev *dev = j->dev;
    void *exec = NULL;
    if (!go || !dev->gpu)
        return;
    phase(j, "capturing a CUDA graph");
    if (bench_graph_begin(dev) != 0) {
        cell_fail(j, CELL_ERROR, dev->err);
    } else {
        int ran = run_once(j, plan, io) == AGMM_SUCCESS;
        if (!ran)
            cell_fail(j, CELL_ERROR, why(j, "graph capture: the run failed"));
        if (bench_graph_end(dev, ran, &exec) != 0 && ran)
            cell_fail(j, CELL_ERROR, dev->err);
    }
    /* Instantiation may synchronise the device: every rank has its graph before any replays. */
    if (cell_agreed_ok(j))
        replay_matches(j, exec, outs, nouts);
    agmm_stats s;
    if (time_calls(j, call_replay, plan, io, exec, cell_agreed_ok(j) && !j->res->opt.check_only, &s)) {
        bench_cell *cell = &j->res->rows[j->row].cell[j->bi];
        cell->graph_mean_us = s.mean;
        cell->graph_median_us = s.median;
    }
    bench_graph_free(exec);
}

static const char *why(cell_job *j, const char *fallback)
{
    const char *e = agmm_last_error(j->ctx);
    if (e[0])
        return e;
    return j->dev->err[0] ? j->dev->err : fallback;
}

static void run_ag_matmul(cell_job *j)
{
    const bench_options *o = &j->res->opt;
    bench_row *row = &j->res->rows[j->row];
    int64_t m = row->m, n = row->n, k = row->k, rows = (int64_t)j->nranks * m;
    agmm_ag_matmul_desc desc = {.m = m, .n = n, .k = k, .b_layout = o->b_layout, .splits = o->splits,
                                .backend = j->res->backends[j->bi]};
    agmm_plan *plan = NULL;
    uint16_t *ha = NULL, *hb = NULL, *hag = NULL, *hc = NULL;
    void *db = NULL, *dag = NULL, *dc = NULL;
    bench_dev *dev = j->dev;
    /* A rank whose plan failed still walks the whole cell, so every rank meets the same barriers. */
    phase(j, "planning");
    agmm_status st = agmm_plan_ag_matmul(&plan, j->ctx, &desc);
    int ok = st == AGMM_SUCCESS;
    if (!ok)
        cell_fail(j, st == AGMM_ERR_UNSUPPORTED ? CELL_SKIPPED : CELL_ERROR, why(j, agmm_status_str(st)));
    solo_begin(j, "allocating and filling inputs");
    if (ok) {
        note_auto(j, plan);
        ha = malloc((size_t)(m * k) * 2);
        hb = malloc((size_t)(k * n) * 2);
        hag = malloc((size_t)(rows * k) * 2);
        hc = malloc((size_t)(rows * n) * 2);
        db = bench_alloc(dev, (size_t)(k * n) * 2);
        dag = bench_alloc(dev, (size_t)(rows * k) * 2);
        dc = bench_alloc(dev, (size_t)(rows * n) * 2);
        if (!ha || !hb || !hag || !hc || !db || !dag || !dc)
            ok = cell_fail(j, CELL_ERROR, dev->err[0] ? dev->err : "host allocation failed");
    }
    if (ok) {
        /* Fresh inputs per row and backend; B differs per rank like column-parallel weights. */
        fill_bf16(ha, (size_t)(m * k), seed_of(j->row, j->bi, j->rank, 'A'));
        fill_bf16(hb, (size_t)(k * n), seed_of(j->row, j->bi, j->rank, 'B'));
        if (bench_upload(dev, agmm_plan_input(plan), ha, (size_t)(m * k) * 2) ||
            bench_upload(dev, db, hb, (size_t)(k * n) * 2) || bench_poison_bf16(dev, dag, (size_t)(rows * k)) ||
            bench_poison_bf16(dev, dc, (size_t)(rows * n)) || bench_sync(dev))
            ok = cell_fail(j, CELL_ERROR, dev->err);
    }
    solo_end(j);
    /* Every rank reaches the same barriers whatever failed, so nobody is left waiting; the
     * agreement also orders every rank's shard upload before anyone runs. */
    agmm_ag_matmul_io io = {.b = db, .a_gathered = dag, .c = dc};
    ok = cell_agreed_ok(j);
    if (ok)
        phase(j, "running once");
    if (ok &&
        (agmm_ag_matmul(plan, &io, dev->stream) != AGMM_SUCCESS || agmm_ctx_sync(j->ctx) != AGMM_SUCCESS ||
         bench_sync(dev) != 0))
        ok = cell_fail(j, CELL_ERROR, why(j, "run failed"));
    solo_begin(j, "checking against the fp64 reference");
    if (ok && cell_ok(j) &&
        (bench_download(dev, hag, dag, (size_t)(rows * k) * 2) || bench_download(dev, hc, dc, (size_t)(rows * n) * 2)))
        ok = cell_fail(j, CELL_ERROR, dev->err);
    if (ok && cell_ok(j)) {
        /* The gathered A must equal every rank's shard bit for bit. */
        int exact = 1;
        for (int r = 0; r < j->nranks && exact; r++) {
            fill_bf16(ha, (size_t)(m * k), seed_of(j->row, j->bi, r, 'A'));
            exact = memcmp(ha, hag + (size_t)r * (size_t)(m * k), (size_t)(m * k) * 2) == 0;
        }
        int nan_seen = 0;
        double err = check_c(hag, hb, hc, rows, m, n, k, o->b_layout, &nan_seen);
        record_check(j, err, exact);
        if (!exact || nan_seen || !(err <= TOL_BF16)) {
            char what[160];
            snprintf(what, sizeof what, "wrong result: gathered A %s, C rel err %.2e%s (tolerance %.0e)",
                     exact ? "exact" : "DIFFERS", err, nan_seen ? ", NaN in C" : "", TOL_BF16);
            cell_fail(j, CELL_WRONG, what);
        }
    }
    solo_end(j);
    time_plan(j, plan, &io, cell_agreed_ok(j) && !o->check_only);
    const cell_output outs[2] = {{dag, hag, (size_t)(rows * k), AGMM_DTYPE_BF16, 1},
                                 {dc, hc, (size_t)(rows * n), AGMM_DTYPE_BF16, 0}};
    time_graph(j, plan, &io, outs, 2, o->graph && cell_agreed_ok(j));
    bench_free(dev, db);
    bench_free(dev, dag);
    bench_free(dev, dc);
    free(ha);
    free(hb);
    free(hag);
    free(hc);
    agmm_plan_destroy(plan);
}

static void run_all_reduce(cell_job *j)
{
    const bench_options *o = &j->res->opt;
    bench_row *row = &j->res->rows[j->row];
    int64_t n = row->n;
    size_t esz = o->dtype == AGMM_DTYPE_F32 ? 4 : 2;
    agmm_all_reduce_desc desc = {.n = n, .dtype = o->dtype, .backend = j->res->backends[j->bi]};
    agmm_plan *plan = NULL;
    void *hin = NULL, *hout = NULL, *dout = NULL;
    float *acc = NULL, *tmp = NULL;
    bench_dev *dev = j->dev;
    /* A rank whose plan failed still walks the whole cell, so every rank meets the same barriers. */
    phase(j, "planning");
    agmm_status st = agmm_plan_all_reduce(&plan, j->ctx, &desc);
    int ok = st == AGMM_SUCCESS;
    if (!ok)
        cell_fail(j, st == AGMM_ERR_UNSUPPORTED ? CELL_SKIPPED : CELL_ERROR, why(j, agmm_status_str(st)));
    solo_begin(j, "allocating and filling inputs and the reference");
    if (ok) {
        note_auto(j, plan);
        hin = malloc((size_t)n * esz);
        hout = malloc((size_t)n * esz);
        acc = calloc((size_t)n, sizeof *acc);
        tmp = malloc((size_t)n * sizeof *tmp);
        dout = bench_alloc(dev, (size_t)n * esz);
        if (!hin || !hout || !acc || !tmp || !dout)
            ok = cell_fail(j, CELL_ERROR, dev->err[0] ? dev->err : "host allocation failed");
    }
    if (ok) {
        /* Reference: every rank's input regenerated, summed in rank order in fp32 (as our
         * backends sum), compared with a tolerance since NCCL may sum in another order. */
        for (int r = 0; r < j->nranks; r++) {
            fill_f32(tmp, (size_t)n, seed_of(j->row, j->bi, r, 'V'));
            for (int64_t i = 0; i < n; i++) {
                float v = o->dtype == AGMM_DTYPE_F32 ? tmp[i] : agmm_bf16_to_f32(agmm_f32_to_bf16(tmp[i]));
                acc[i] += v;
                if (r != j->rank)
                    continue;
                if (o->dtype == AGMM_DTYPE_F32)
                    ((float *)hin)[i] = v;
                else
                    ((uint16_t *)hin)[i] = agmm_f32_to_bf16(v);
            }
        }
        if (bench_upload(dev, agmm_plan_input(plan), hin, (size_t)n * esz) ||
            bench_poison_bf16(dev, dout, (size_t)n * esz / 2) || bench_sync(dev))
            ok = cell_fail(j, CELL_ERROR, dev->err);
    }
    solo_end(j);
    agmm_all_reduce_io io = {.out = dout};
    ok = cell_agreed_ok(j);
    if (ok)
        phase(j, "running once");
    if (ok &&
        (agmm_all_reduce(plan, &io, dev->stream) != AGMM_SUCCESS || agmm_ctx_sync(j->ctx) != AGMM_SUCCESS ||
         bench_sync(dev) != 0))
        ok = cell_fail(j, CELL_ERROR, why(j, "run failed"));
    solo_begin(j, "checking against the reference");
    if (ok && cell_ok(j) && bench_download(dev, hout, dout, (size_t)n * esz))
        ok = cell_fail(j, CELL_ERROR, dev->err);
    if (ok && cell_ok(j)) {
        double num = 0, den = 0;
        int nan_seen = 0;
        for (int64_t i = 0; i < n; i++) {
            double got = o->dtype == AGMM_DTYPE_F32 ? ((float *)hout)[i] : agmm_bf16_to_f32(((uint16_t *)hout)[i]);
            double want = o->dtype == AGMM_DTYPE_F32 ? acc[i] : agmm_bf16_to_f32(agmm_f32_to_bf16(acc[i]));
            nan_seen |= isnan(got);
            num += (got - want) * (got - want);
            den += want * want;
        }
        double err = den > 0 ? sqrt(num / den) : sqrt(num);
        double tol = o->dtype == AGMM_DTYPE_F32 ? TOL_F32 : TOL_BF16;
        record_check(j, err, 1);
        if (nan_seen || !(err <= tol)) {
            char what[160];
            snprintf(what, sizeof what, "wrong result: rel err %.2e%s (tolerance %.0e)", err, nan_seen ? ", NaN" : "",
                     tol);
            cell_fail(j, CELL_WRONG, what);
        }
    }
    solo_end(j);
    time_plan(j, plan, &io, cell_agreed_ok(j) && !o->check_only);
    const cell_output outs[1] = {{dout, hout, (size_t)n, o->dtype, 0}};
    time_graph(j, plan, &io, outs, 1, o->graph && cell_agreed_ok(j));
    bench_free(dev, dout);
    free(hin);
    free(hout);
    free(acc);
    free(tmp);
    agmm_plan_destroy(plan);
}

/* ---- the row-parallel matmuls ---- */

static int is_row_parallel(agmm_op op)
{
    return op == AGMM_OP_MATMUL_REDUCE_SCATTER || op == AGMM_OP_MATMUL_ALL_REDUCE;
}

/* An operation with a GEMM in it (its rows time the plain GEMM beside the backends). */
static int has_gemm(agmm_op op) { return op == AGMM_OP_AG_MATMUL || is_row_parallel(op); }

/* The rows of S this rank's output holds: its block (reduce-scatter) or all of S. */
static int64_t mr_rows(const bench_results *r, const bench_row *row, int rank, int64_t *row0)
{
    *row0 = 0;
    if (r->opt.op == AGMM_OP_MATMUL_REDUCE_SCATTER)
        return agmm_matmul_reduce_scatter_rows(row->m, r->nranks, rank, row0);
    return row->m;
}

static agmm_status mr_run(cell_job *j, agmm_plan *plan, const void *a, const void *b, void *out)
{
    if (j->res->opt.op == AGMM_OP_MATMUL_ALL_REDUCE) {
        agmm_matmul_all_reduce_io io = {.a = a, .b = b, .c = out};
        return agmm_matmul_all_reduce(plan, &io, j->dev->stream);
    }
    agmm_matmul_reduce_scatter_io io = {.a = a, .b = b, .out = out};
    return agmm_matmul_reduce_scatter(plan, &io, j->dev->stream);
}

/* matmul_reduce_scatter and matmul_all_reduce: fresh A_r and B_r per rank (every rank's from
 * seeds: bench_mr.h), the output poisoned, one run checked against the fp64 sum (bench_mr_check)
 * and, for matmul_all_reduce, every rank's S compared bit for bit (its hash exchanged: exact_a
 * then means "every rank the same S"), then timed like the other operations. */
static void run_matmul_reduce(cell_job *j)
{
    const bench_options *o = &j->res->opt;
    bench_row *row = &j->res->rows[j->row];
    const int64_t m = row->m, n = row->n, k = row->k;
    int64_t row0, rows = mr_rows(j->res, row, j->rank, &row0);
    const size_t a_bytes = (size_t)(m * k) * 2, b_bytes = (size_t)(k * n) * 2, out_bytes = (size_t)(rows * n) * 2;
    bench_mr_ref ref = {.nranks = j->nranks, .m = m, .n = n, .k = k, .layout = o->b_layout};
    for (int p = 0; p < j->nranks; p++) {
        ref.seed_a[p] = seed_of(j->row, j->bi, p, 'A');
        ref.seed_b[p] = seed_of(j->row, j->bi, p, 'B');
    }
    agmm_plan *plan = NULL;
    uint16_t *ha = NULL, *hb = NULL, *hout = NULL;
    void *da = NULL, *db = NULL, *dout = NULL;
    bench_dev *dev = j->dev;
    agmm_status st;
    phase(j, "planning");
    if (o->op == AGMM_OP_MATMUL_ALL_REDUCE) {
        agmm_matmul_all_reduce_desc d = {.m = m, .n = n, .k = k, .b_layout = o->b_layout,
                                         .backend = j->res->backends[j->bi]};
        st = agmm_plan_matmul_all_reduce(&plan, j->ctx, &d);
    } else {
        agmm_matmul_reduce_scatter_desc d = {.m = m, .n = n, .k = k, .b_layout = o->b_layout,
                                             .backend = j->res->backends[j->bi]};
        st = agmm_plan_matmul_reduce_scatter(&plan, j->ctx, &d);
    }
    /* A rank whose plan failed still walks the whole cell, so every rank meets the same barriers. */
    int ok = st == AGMM_SUCCESS;
    if (!ok)
        cell_fail(j, st == AGMM_ERR_UNSUPPORTED ? CELL_SKIPPED : CELL_ERROR, why(j, agmm_status_str(st)));
    solo_begin(j, "allocating and filling inputs");
    if (ok) {
        note_auto(j, plan);
        ha = malloc(a_bytes), hb = malloc(b_bytes), hout = malloc(out_bytes + 2);
        da = bench_alloc(dev, a_bytes), db = bench_alloc(dev, b_bytes), dout = bench_alloc(dev, out_bytes + 16);
        if (!ha || !hb || !hout || !da || !db || !dout)
            ok = cell_fail(j, CELL_ERROR, dev->err[0] ? dev->err : "host allocation failed");
    }
    if (ok) {
        bench_mr_fill(ha, a_bytes / 2, ref.seed_a[j->rank]);
        bench_mr_fill(hb, b_bytes / 2, ref.seed_b[j->rank]);
        if (bench_upload(dev, da, ha, a_bytes) || bench_upload(dev, db, hb, b_bytes) ||
            bench_poison_bf16(dev, dout, out_bytes / 2) || bench_sync(dev))
            ok = cell_fail(j, CELL_ERROR, dev->err);
    }
    solo_end(j);
    void *out = rows > 0 ? dout : NULL;
    ok = cell_agreed_ok(j);
    if (ok)
        phase(j, "running once");
    if (ok && (mr_run(j, plan, da, db, out) != AGMM_SUCCESS || agmm_ctx_sync(j->ctx) != AGMM_SUCCESS ||
               bench_sync(dev) != 0))
        ok = cell_fail(j, CELL_ERROR, why(j, "run failed"));
    solo_begin(j, "checking against the fp64 reference");
    if (ok && bench_download(dev, hout, dout, out_bytes))
        ok = cell_fail(j, CELL_ERROR, dev->err);
    uint64_t mine = ok && cell_ok(j) ? bench_mr_hash(hout, out_bytes) : 0, all[AGMM_MAX_RANKS];
    solo_end(j);
    /* Every rank's hash of its S (0 where it has none), exchanged by all: collective. */
    int same = agmm_ext_exchange(j->ctx, &mine, sizeof mine, all) == AGMM_SUCCESS;
    for (int p = 0; same && o->op == AGMM_OP_MATMUL_ALL_REDUCE && p < j->nranks; p++)
        same = all[p] == all[0];
    solo_begin(j, "checking against the fp64 reference");
    if (ok && cell_ok(j)) {
        int nan_seen = 0;
        double err = bench_mr_check(&ref, hout, row0, rows, &nan_seen);
        record_check(j, err, same);
        if (!same || nan_seen || !(err <= TOL_BF16)) {
            char what[160];
            snprintf(what, sizeof what, "wrong result: S rel err %.2e%s%s (tolerance %.0e)", err,
                     nan_seen ? ", NaN in S" : "", same ? "" : ", ranks' S differ", TOL_BF16);
            cell_fail(j, CELL_WRONG, what);
        }
    }
    solo_end(j);
    agmm_matmul_reduce_scatter_io rio = {.a = da, .b = db, .out = out};
    agmm_matmul_all_reduce_io aio = {.a = da, .b = db, .c = out};
    const void *io = o->op == AGMM_OP_MATMUL_ALL_REDUCE ? (const void *)&aio : (const void *)&rio;
    time_plan(j, plan, io, cell_agreed_ok(j) && !o->check_only);
    const cell_output outs[1] = {{dout, hout, (size_t)(rows * n), AGMM_DTYPE_BF16, 0}};
    time_graph(j, plan, io, outs, rows > 0 ? 1 : 0, o->graph && cell_agreed_ok(j));
    bench_free(dev, da);
    bench_free(dev, db);
    bench_free(dev, dout);
    free(ha);
    free(hb);
    free(hout);
    agmm_plan_destroy(plan);
}

/* ---- all_reduce_rmsnorm rows ---- */

/* Rows checked against fp64: all of them up to 2^22 elements, else 64 spread over T (the first and
 * the last among them), with every output scanned for the poison. */
#define ARN_FULL_CHECK_ELEMS ((int64_t)1 << 22)
#define ARN_SAMPLE_ROWS 64

/* Row t of `what` ('X': rank r's input; 'R' residual, 'B' bias, 'G' gamma: the same on every
 * rank, r = -1), uniform in [-1, 1): regenerated row by row, so a check needs no copy of every
 * rank's input. */
static void arn_row(cell_job *j, int r, int what, int64_t t, int64_t h, uint16_t *dst)
{
    uint64_t s = seed_of(j->row, j->bi, r + 1, what) ^ ((uint64_t)(t + 1) * 0x9e3779b97f4a7c15ull);
    fill_bf16(dst, (size_t)h, agmm_rng_next(&s));
}

/* The relative Frobenius errors of r' and y over the checked rows against fp64 (the sum of every
 * rank's row, bias and residual; the norm of it rounded to bf16, as the backends take it), and
 * whether any output element is NaN. */
static void arn_check(cell_job *j, const uint16_t *hy, const uint16_t *hr, const uint16_t *gamma, const uint16_t *bias,
                      double *err_r, double *err_y, int *nan_seen)
{
    const int64_t t_all = j->res->rows[j->row].m, h = j->res->rows[j->row].n;
    const int full = t_all * h <= ARN_FULL_CHECK_ELEMS;
    const int64_t count = full || t_all <= ARN_SAMPLE_ROWS ? t_all : ARN_SAMPLE_ROWS;
    for (int64_t i = 0; !full && i < t_all * h && !*nan_seen; i++)
        *nan_seen = isnan(agmm_bf16_to_f32(hy[i])) || isnan(agmm_bf16_to_f32(hr[i]));
    double *r64 = malloc((size_t)h * sizeof *r64), nr = 0, dr = 0, ny = 0, dy = 0;
    uint16_t *x = malloc((size_t)h * 2);
    for (int64_t c = 0; c < count && r64 && x; c++) {
        const int64_t t = count == t_all ? c : c * (t_all - 1) / (count - 1);
        for (int64_t i = 0; i < h; i++)
            r64[i] = (double)agmm_bf16_to_f32(bias[i]);
        for (int r = -1; r < j->nranks; r++) {
            arn_row(j, r, r < 0 ? 'R' : 'X', t, h, x); /* the residual first: fp64 sums any order */
            for (int64_t i = 0; i < h; i++)
                r64[i] += agmm_bf16_to_f32(x[i]);
        }
        double ss = 0;
        for (int64_t i = 0; i < h; i++) {
            const double q = agmm_bf16_to_f32(agmm_f32_to_bf16((float)r64[i]));
            ss += q * q;
        }
        const double rstd = 1.0 / sqrt(ss / (double)h + (double)(float)j->res->opt.eps);
        for (int64_t i = 0; i < h; i++) {
            const double gr = agmm_bf16_to_f32(hr[t * h + i]), gy = agmm_bf16_to_f32(hy[t * h + i]);
            const double wy = agmm_bf16_to_f32(agmm_f32_to_bf16((float)r64[i])) * rstd * agmm_bf16_to_f32(gamma[i]);
            *nan_seen |= isnan(gr) || isnan(gy);
            nr += (gr - r64[i]) * (gr - r64[i]), dr += r64[i] * r64[i];
            ny += (gy - wy) * (gy - wy), dy += wy * wy;
        }
    }
    *err_r = r64 && x ? (dr > 0 ? sqrt(nr / dr) : sqrt(nr)) : INFINITY;
    *err_y = r64 && x ? (dy > 0 ? sqrt(ny / dy) : sqrt(ny)) : INFINITY;
    free(r64);
    free(x);
}

static void run_all_reduce_rmsnorm(cell_job *j)
{
    const bench_options *o = &j->res->opt;
    const bench_row *row = &j->res->rows[j->row];
    const int64_t t_all = row->m, h = row->n;
    const size_t rows = (size_t)(t_all * h) * 2, vec = (size_t)h * 2;
    agmm_all_reduce_rmsnorm_desc desc = {.tokens = t_all, .hidden = h, .eps = o->eps,
                                         .backend = j->res->backends[j->bi]};
    agmm_plan *plan = NULL;
    uint16_t *hx = NULL, *hres = NULL, *hg = NULL, *hb = NULL, *hy = NULL, *hr = NULL;
    void *dy = NULL, *dr = NULL, *dres = NULL, *dg = NULL, *db = NULL;
    bench_dev *dev = j->dev;
    /* A rank whose plan failed still walks the whole cell, so every rank meets the same barriers. */
    phase(j, "planning");
    agmm_status st = agmm_plan_all_reduce_rmsnorm(&plan, j->ctx, &desc);
    int ok = st == AGMM_SUCCESS;
    if (!ok)
        cell_fail(j, st == AGMM_ERR_UNSUPPORTED ? CELL_SKIPPED : CELL_ERROR, why(j, agmm_status_str(st)));
    solo_begin(j, "allocating and filling inputs");
    if (ok) {
        note_auto(j, plan);
        hx = malloc(rows), hres = malloc(rows), hy = malloc(rows), hr = malloc(rows);
        hg = malloc(vec), hb = malloc(vec);
        dy = bench_alloc(dev, rows), dr = bench_alloc(dev, rows), dres = bench_alloc(dev, rows);
        dg = bench_alloc(dev, vec), db = bench_alloc(dev, vec);
        if (!hx || !hres || !hy || !hr || !hg || !hb || !dy || !dr || !dres || !dg || !db)
            ok = cell_fail(j, CELL_ERROR, dev->err[0] ? dev->err : "host allocation failed");
    }
    if (ok) {
        /* Fresh inputs per row and backend: x per rank; residual, bias, gamma the same on every rank. */
        for (int64_t t = 0; t < t_all; t++) {
            arn_row(j, j->rank, 'X', t, h, hx + t * h);
            arn_row(j, -1, 'R', t, h, hres + t * h);
        }
        arn_row(j, -1, 'B', 0, h, hb);
        arn_row(j, -1, 'G', 0, h, hg);
        if (bench_upload(dev, agmm_plan_input(plan), hx, rows) || bench_upload(dev, dres, hres, rows) ||
            bench_upload(dev, db, hb, vec) || bench_upload(dev, dg, hg, vec) || bench_poison_bf16(dev, dy, rows / 2) ||
            bench_poison_bf16(dev, dr, rows / 2) || bench_sync(dev))
            ok = cell_fail(j, CELL_ERROR, dev->err);
    }
    solo_end(j);
    agmm_all_reduce_rmsnorm_io io = {.y = dy, .residual_out = dr, .gamma = dg, .bias = db, .residual = dres};
    ok = cell_agreed_ok(j);
    if (ok)
        phase(j, "running once");
    if (ok &&
        (agmm_all_reduce_rmsnorm(plan, &io, dev->stream) != AGMM_SUCCESS || agmm_ctx_sync(j->ctx) != AGMM_SUCCESS ||
         bench_sync(dev) != 0))
        ok = cell_fail(j, CELL_ERROR, why(j, "run failed"));
    solo_begin(j, "checking against the fp64 reference");
    if (ok && cell_ok(j) && (bench_download(dev, hy, dy, rows) || bench_download(dev, hr, dr, rows)))
        ok = cell_fail(j, CELL_ERROR, dev->err);
    if (ok && cell_ok(j)) {
        double err_r = 0, err_y = 0;
        int nan_seen = 0;
        arn_check(j, hy, hr, hg, hb, &err_r, &err_y, &nan_seen);
        record_check(j, fmax(err_r, err_y), 1);
        if (nan_seen || !(err_r <= TOL_BF16) || !(err_y <= TOL_BF16)) {
            char what[160];
            snprintf(what, sizeof what, "wrong result: rel err r' %.2e, y %.2e%s (tolerance %.0e)", err_r, err_y,
                     nan_seen ? ", NaN" : "", TOL_BF16);
            cell_fail(j, CELL_WRONG, what);
        }
    }
    solo_end(j);
    time_plan(j, plan, &io, cell_agreed_ok(j) && !o->check_only);
    /* A replay of a fused backend repeats its run bit for bit; NCCL may sum in another order. */
    const int exact = plan && strcmp(agmm_plan_backend(plan), "nccl") != 0;
    const cell_output outs[2] = {{dy, hy, (size_t)(t_all * h), AGMM_DTYPE_BF16, exact},
                                 {dr, hr, (size_t)(t_all * h), AGMM_DTYPE_BF16, exact}};
    time_graph(j, plan, &io, outs, 2, o->graph && cell_agreed_ok(j));
    bench_free(dev, dy), bench_free(dev, dr), bench_free(dev, dres), bench_free(dev, dg), bench_free(dev, db);
    free(hx), free(hres), free(hy), free(hr), free(hg), free(hb);
    agmm_plan_destroy(plan);
}

/* What one rank of row `row` allocates at most, in bytes: host buffers (inputs, downloads, the
 * reference's scratch) and device buffers (outputs, and the plan's symmetric input, which the
 * library checks on its own too); rank 0's plain GEMM first allocates the gathered shape. */
static void row_need(const bench_results *r, int row, int plain_gemm, uint64_t *host, uint64_t *device)
{
    const bench_row *w = &r->rows[row];
    const uint64_t nr = (uint64_t)r->nranks, m = (uint64_t)w->m, n = (uint64_t)w->n, k = (uint64_t)w->k;
    if (is_row_parallel(r->opt.op)) {
        /* A_r, B_r and the output (all of S at most), host and device; the plain GEMM's operands. */
        *host = (m * k + k * n + m * n) * 2;
        *device = (m * k + k * n + m * n) * 2;
        if (plain_gemm) {
            *host = *host > (m * k + k * n) * 2 ? *host : (m * k + k * n) * 2;
            *device = *device > (m * k + k * n + m * n) * 2 ? *device : (m * k + k * n + m * n) * 2;
        }
    } else if (r->opt.op == AGMM_OP_AG_MATMUL) {
        *host = (m * k + k * n + nr * m * k + nr * m * n) * 2 + n * sizeof(double);
        *device = (k * n + nr * m * k + nr * m * n + m * k) * 2;
        if (plain_gemm) {
            const uint64_t gemm_host = (nr * m * k + k * n) * 2, gemm_device = (nr * m * k + k * n + nr * m * n) * 2;
            *host = *host > gemm_host ? *host : gemm_host;
            *device = *device > gemm_device ? *device : gemm_device;
        }
    } else if (r->opt.op == AGMM_OP_ALL_REDUCE_RMSNORM) {
        /* x, residual and the downloads of y and r' on the host (and a row of the check); the
         * input, residual, y and r' on the device; bias and gamma on both */
        *host = 4 * m * n * 2 + 2 * n * 2 + n * (sizeof(double) + 2);
        *device = 4 * m * n * 2 + 2 * n * 2;
    } else {
        const uint64_t esz = r->opt.dtype == AGMM_DTYPE_F32 ? 4 : 2;
        *host = n * (2 * esz + 2 * sizeof(float));
        *device = 2 * n * esz;
    }
}

/* Whether row j->row fits in memory, the same answer on every rank: a rank short of memory fails
 * every cell of the row before anything is allocated (an overcommitting kernel would grant the
 * allocation and kill the process on touching it). */
static int row_fits(cell_job *j)
{
    bench_results *res = j->res;
    bench_row *row = &res->rows[j->row];
    uint64_t host = 0, device = 0;
    row_need(res, j->row, j->rank == 0 && has_gemm(res->opt.op) && !res->opt.check_only, &host, &device);
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
    cell_job j = {ctx, res, &dev, agmm_ctx_rank(ctx), res->nranks, 0, 0};
    for (j.row = 0; j.row < res->nrows && !res->world_failed; j.row++) {
        if (j.rank == 0)
            bench_progress_row(res, j.row);
        if (!row_fits(&j)) {
            if (j.rank == 0)
                bench_progress_done(res, j.row);
            continue;
        }
        if (has_gemm(res->opt.op) && res->opt.check_only == 0) {
            /* The GEMM each rank runs: the gathered one, or the local M x N x K of a row-parallel one. */
            bench_row *row = &res->rows[j.row];
            const int64_t rows = is_row_parallel(res->opt.op) ? row->m : (int64_t)res->nranks * row->m;
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
            if (res->opt.op == AGMM_OP_AG_MATMUL)
                run_ag_matmul(&j);
            else if (is_row_parallel(res->opt.op))
                run_matmul_reduce(&j);
            else if (res->opt.op == AGMM_OP_ALL_REDUCE_RMSNORM)
                run_all_reduce_rmsnorm(&j);
            else
                run_all_reduce(&j);
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
