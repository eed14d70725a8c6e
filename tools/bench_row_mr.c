/* agmm-bench's rows of the row-parallel matmuls, matmul_reduce_scatter and matmul_all_reduce: one
 * cell for both (the inputs and the fp64 reference of bench_mr.h), a row kind for each; rank 0
 * times the plain GEMM of one rank's M x N x K beside them. */
#include <stdlib.h>

#include "bench_cell.h"
#include "bench_mr.h"

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
 * seeds: bench_mr.h), the output poisoned, one run checked against the fp64 sum relative to the
 * scale of the partials (bench_mr_check) and, for matmul_all_reduce, every rank's S compared bit
 * for bit (its hash exchanged: exact_a then means "every rank the same S"), then kept for the
 * row's turns like the other operations. */
static void run_matmul_reduce(cell_job *j)
{
    const bench_options *o = &j->res->opt;
    bench_row *row = &j->res->rows[j->row];
    const int64_t m = row->m, n = row->n, k = row->k;
    int64_t row0, rows = mr_rows(j->res, row, j->rank, &row0);
    const size_t a_bytes = (size_t)(m * k) * 2, b_bytes = (size_t)(k * n) * 2, out_bytes = (size_t)(rows * n) * 2;
    bench_mr_ref ref = {.nranks = j->nranks, .m = m, .n = n, .k = k, .layout = o->b_layout};
    for (int p = 0; p < j->nranks; p++) {
        ref.seed_a[p] = cell_seed(j->row, j->bi, p, 'A');
        ref.seed_b[p] = cell_seed(j->row, j->bi, p, 'B');
    }
    agmm_plan *plan = NULL;
    uint16_t *ha = NULL, *hb = NULL, *hout = NULL;
    void *da = NULL, *db = NULL, *dout = NULL;
    bench_dev *dev = j->dev;
    agmm_status st;
    cell_phase(j, "planning");
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
        cell_fail_plan(j, st);
    cell_solo_begin(j, "allocating and filling inputs");
    if (ok) {
        cell_note_auto(j, plan);
        ha = malloc(a_bytes), hb = malloc(b_bytes), hout = malloc(out_bytes + 2);
        da = cell_alloc(j, a_bytes), db = cell_alloc(j, b_bytes), dout = cell_alloc(j, out_bytes + 16);
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
    cell_solo_end(j);
    void *out = rows > 0 ? dout : NULL;
    ok = cell_agreed_ok(j);
    if (ok)
        cell_phase(j, "running once");
    if (ok && (mr_run(j, plan, da, db, out) != AGMM_SUCCESS || agmm_ctx_sync(j->ctx) != AGMM_SUCCESS ||
               bench_sync(dev) != 0))
        ok = cell_fail(j, CELL_ERROR, cell_why(j, "run failed"));
    cell_solo_begin(j, "checking against the fp64 reference");
    if (ok && bench_download(dev, hout, dout, out_bytes))
        ok = cell_fail(j, CELL_ERROR, dev->err);
    uint64_t mine = ok && cell_ok(j) ? bench_mr_hash(hout, out_bytes) : 0, all[AGMM_MAX_RANKS];
    cell_solo_end(j);
    /* Every rank's hash of its S (0 where it has none), exchanged by all: collective. */
    int same = agmm_ext_exchange(j->ctx, &mine, sizeof mine, all) == AGMM_SUCCESS;
    for (int p = 0; same && o->op == AGMM_OP_MATMUL_ALL_REDUCE && p < j->nranks; p++)
        same = all[p] == all[0];
    cell_solo_begin(j, "checking against the fp64 reference");
    if (ok && cell_ok(j)) {
        int nan_seen = 0;
        double err = bench_mr_check(&ref, hout, row0, rows, &nan_seen);
        cell_record_check(j, err, same);
        if (!same || nan_seen || !(err <= CELL_TOL_BF16)) {
            char what[160];
            snprintf(what, sizeof what, "wrong result: S err %.2e of sum_r |P_r|%s%s (tolerance %.0e)", err,
                     nan_seen ? ", NaN in S" : "", same ? "" : ", ranks' S differ", CELL_TOL_BF16);
            cell_fail(j, CELL_WRONG, what);
        }
    }
    cell_solo_end(j);
    agmm_matmul_reduce_scatter_io rio = {.a = da, .b = db, .out = out};
    agmm_matmul_all_reduce_io aio = {.a = da, .b = db, .c = out};
    const cell_output outs[1] = {{dout, hout, (size_t)(rows * n), AGMM_DTYPE_BF16, 0}};
    if (o->op == AGMM_OP_MATMUL_ALL_REDUCE)
        cell_keep(j, plan, &aio, sizeof aio, outs, rows > 0 ? 1 : 0);
    else
        cell_keep(j, plan, &rio, sizeof rio, outs, rows > 0 ? 1 : 0);
    free(ha);
    free(hb);
    free(hout);
}

static agmm_status launch_rs(agmm_plan *plan, const void *io, void *stream)
{
    return agmm_matmul_reduce_scatter(plan, io, stream);
}

static agmm_status launch_ar(agmm_plan *plan, const void *io, void *stream)
{
    return agmm_matmul_all_reduce(plan, io, stream);
}

static void need(const bench_results *r, int row, uint64_t *host, uint64_t *device)
{
    const bench_row *w = &r->rows[row];
    const uint64_t m = (uint64_t)w->m, n = (uint64_t)w->n, k = (uint64_t)w->k;
    /* A_r, B_r and the output (all of S at most), host and device. */
    *host = (m * k + k * n + m * n) * 2;
    *device = (m * k + k * n + m * n) * 2;
}

/* The local GEMM: this rank's M rows. */
static int64_t gemm_rows(const bench_results *r, const bench_row *row) { return row->m; }

const bench_row_kind bench_row_matmul_reduce_scatter = {AGMM_OP_MATMUL_REDUCE_SCATTER, run_matmul_reduce, launch_rs,
                                                        need, gemm_rows};
const bench_row_kind bench_row_matmul_all_reduce = {AGMM_OP_MATMUL_ALL_REDUCE, run_matmul_reduce, launch_ar, need,
                                                    gemm_rows};
