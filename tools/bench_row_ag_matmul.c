/* agmm-bench's ag_matmul rows: every rank's A shard and B fresh per cell, the gathered A and C
 * poisoned, one run checked (the gathered A bit for bit against every rank's shard, C against an
 * fp64 reference: every row of small shapes, sampled rows of each rank's block of larger ones),
 * then kept for the row's turns; rank 0 times the plain GEMM on the gathered shape beside it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cell.h"

/* Shapes whose gathered GEMM is at most this many multiply-adds get a full fp64 reference;
 * larger ones a sample of rows from every rank block (first, last and spread rows). */
#define FULL_CHECK_MACS ((int64_t)1 << 27)
#define SAMPLE_ROWS_PER_RANK 6

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
        /* B's contiguous dimension innermost: a sampled row of a long product reads all of B, and
         * strided reads of a column-major B made that ~30 s a backend at 8192 x 28672 x 8192. */
        if (layout == AGMM_LAYOUT_COL_MAJOR) {
            for (int64_t nn = 0; nn < n; nn++)
                for (int64_t kk = 0; kk < k; kk++)
                    acc[nn] += (double)agmm_bf16_to_f32(a[r * k + kk]) * agmm_bf16_to_f32(b[nn * k + kk]);
        } else {
            for (int64_t kk = 0; kk < k; kk++) {
                double av = agmm_bf16_to_f32(a[r * k + kk]);
                for (int64_t nn = 0; nn < n; nn++)
                    acc[nn] += av * agmm_bf16_to_f32(b[kk * n + nn]);
            }
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

static void run_ag_matmul(cell_job *j)
{
    const bench_options *o = &j->res->opt;
    bench_row *row = &j->res->rows[j->row];
    int64_t m = row->m, n = row->n, k = row->k, rows = (int64_t)j->nranks * m;
    agmm_ag_matmul_desc desc = {.m = m, .n = n, .k = k, .b_layout = o->b_layout, .splits = o->splits,
                                .backend = j->res->backends[j->bi]};
    agmm_plan *plan = NULL;
    uint16_t *ha = NULL, *hb = NULL, *hag = NULL, *hc = NULL;
    void *db = NULL, *dag = NULL, *dc = NULL; /* the cell's: cell_release frees them */
    bench_dev *dev = j->dev;
    /* A rank whose plan failed still walks the whole cell, so every rank meets the same barriers. */
    cell_phase(j, "planning");
    agmm_status st = agmm_plan_ag_matmul(&plan, j->ctx, &desc);
    int ok = st == AGMM_SUCCESS;
    if (!ok)
        cell_fail_plan(j, st);
    cell_solo_begin(j, "allocating and filling inputs");
    if (ok) {
        cell_note_auto(j, plan);
        ha = malloc((size_t)(m * k) * 2);
        hb = malloc((size_t)(k * n) * 2);
        hag = malloc((size_t)(rows * k) * 2);
        hc = malloc((size_t)(rows * n) * 2);
        db = cell_alloc(j, (size_t)(k * n) * 2);
        dag = cell_alloc(j, (size_t)(rows * k) * 2);
        dc = cell_alloc(j, (size_t)(rows * n) * 2);
        if (!ha || !hb || !hag || !hc || !db || !dag || !dc)
            ok = cell_fail(j, CELL_ERROR, dev->err[0] ? dev->err : "host allocation failed");
    }
    if (ok) {
        /* Fresh inputs per row and backend; B differs per rank like column-parallel weights. */
        cell_fill_bf16(ha, (size_t)(m * k), cell_seed(j->row, j->bi, j->rank, 'A'));
        cell_fill_bf16(hb, (size_t)(k * n), cell_seed(j->row, j->bi, j->rank, 'B'));
        if (bench_upload(dev, agmm_plan_input(plan), ha, (size_t)(m * k) * 2) ||
            bench_upload(dev, db, hb, (size_t)(k * n) * 2) || bench_poison_bf16(dev, dag, (size_t)(rows * k)) ||
            bench_poison_bf16(dev, dc, (size_t)(rows * n)) || bench_sync(dev))
            ok = cell_fail(j, CELL_ERROR, dev->err);
    }
    cell_solo_end(j);
    /* Every rank reaches the same barriers whatever failed, so nobody is left waiting; the
     * agreement also orders every rank's shard upload before anyone runs. */
    agmm_ag_matmul_io io = {.b = db, .a_gathered = dag, .c = dc};
    ok = cell_agreed_ok(j);
    if (ok)
        cell_phase(j, "running once");
    if (ok &&
        (agmm_ag_matmul(plan, &io, dev->stream) != AGMM_SUCCESS || agmm_ctx_sync(j->ctx) != AGMM_SUCCESS ||
         bench_sync(dev) != 0))
        ok = cell_fail(j, CELL_ERROR, cell_why(j, "run failed"));
    cell_solo_begin(j, "checking against the fp64 reference");
    if (ok && cell_ok(j) &&
        (bench_download(dev, hag, dag, (size_t)(rows * k) * 2) || bench_download(dev, hc, dc, (size_t)(rows * n) * 2)))
        ok = cell_fail(j, CELL_ERROR, dev->err);
    if (ok && cell_ok(j)) {
        /* The gathered A must equal every rank's shard bit for bit. */
        int exact = 1;
        for (int r = 0; r < j->nranks && exact; r++) {
            cell_fill_bf16(ha, (size_t)(m * k), cell_seed(j->row, j->bi, r, 'A'));
            exact = memcmp(ha, hag + (size_t)r * (size_t)(m * k), (size_t)(m * k) * 2) == 0;
        }
        int nan_seen = 0;
        double err = check_c(hag, hb, hc, rows, m, n, k, o->b_layout, &nan_seen);
        cell_record_check(j, err, exact);
        if (!exact || nan_seen || !(err <= CELL_TOL_BF16)) {
            char what[160];
            snprintf(what, sizeof what, "wrong result: gathered A %s, C rel err %.2e%s (tolerance %.0e)",
                     exact ? "exact" : "DIFFERS", err, nan_seen ? ", NaN in C" : "", CELL_TOL_BF16);
            cell_fail(j, CELL_WRONG, what);
        }
    }
    cell_solo_end(j);
    const cell_output outs[2] = {{dag, hag, (size_t)(rows * k), AGMM_DTYPE_BF16, 1},
                                 {dc, hc, (size_t)(rows * n), AGMM_DTYPE_BF16, 0}};
    cell_keep(j, plan, &io, sizeof io, outs, 2);
    free(ha);
    free(hb);
    free(hag);
    free(hc);
}

static agmm_status launch(agmm_plan *plan, const void *io, void *stream) { return agmm_ag_matmul(plan, io, stream); }

static void need(const bench_results *r, int row, uint64_t *host, uint64_t *device)
{
    const bench_row *w = &r->rows[row];
    const uint64_t nr = (uint64_t)r->nranks, m = (uint64_t)w->m, n = (uint64_t)w->n, k = (uint64_t)w->k;
    *host = (m * k + k * n + nr * m * k + nr * m * n) * 2 + n * sizeof(double);
    *device = (k * n + nr * m * k + nr * m * n + m * k) * 2;
}

/* The gathered GEMM: every rank's M rows. */
static int64_t gemm_rows(const bench_results *r, const bench_row *row) { return (int64_t)r->nranks * row->m; }

const bench_row_kind bench_row_ag_matmul = {AGMM_OP_AG_MATMUL, run_ag_matmul, launch, need, gemm_rows};
