/* agmm-bench's all_reduce_rmsnorm rows: every rank's x and the shared residual, bias and gamma
 * fresh per cell (regenerated row by row for the check), y and r' poisoned, one run checked
 * against fp64, then kept for the row's turns. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cell.h"

/* Rows checked against fp64: all of them up to 2^22 elements, else 64 spread over T (the first and
 * the last among them), with every output scanned for the poison. */
#define ARN_FULL_CHECK_ELEMS ((int64_t)1 << 22)
#define ARN_SAMPLE_ROWS 64

/* Row t of `what` ('X': rank r's input; 'R' residual, 'B' bias, 'G' gamma: the same on every
 * rank, r = -1), uniform in [-1, 1): regenerated row by row, so a check needs no copy of every
 * rank's input. */
static void arn_row(cell_job *j, int r, int what, int64_t t, int64_t h, uint16_t *dst)
{
    uint64_t s = cell_seed(j->row, j->bi, r + 1, what) ^ ((uint64_t)(t + 1) * 0x9e3779b97f4a7c15ull);
    cell_fill_bf16(dst, (size_t)h, agmm_rng_next(&s));
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
    cell_phase(j, "planning");
    agmm_status st = agmm_plan_all_reduce_rmsnorm(&plan, j->ctx, &desc);
    int ok = st == AGMM_SUCCESS;
    if (!ok)
        cell_fail_plan(j, st);
    cell_solo_begin(j, "allocating and filling inputs");
    if (ok) {
        cell_note_auto(j, plan);
        hx = malloc(rows), hres = malloc(rows), hy = malloc(rows), hr = malloc(rows);
        hg = malloc(vec), hb = malloc(vec);
        dy = cell_alloc(j, rows), dr = cell_alloc(j, rows), dres = cell_alloc(j, rows);
        dg = cell_alloc(j, vec), db = cell_alloc(j, vec);
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
    cell_solo_end(j);
    agmm_all_reduce_rmsnorm_io io = {.y = dy, .residual_out = dr, .gamma = dg, .bias = db, .residual = dres};
    ok = cell_agreed_ok(j);
    if (ok)
        cell_phase(j, "running once");
    if (ok &&
        (agmm_all_reduce_rmsnorm(plan, &io, dev->stream) != AGMM_SUCCESS || agmm_ctx_sync(j->ctx) != AGMM_SUCCESS ||
         bench_sync(dev) != 0))
        ok = cell_fail(j, CELL_ERROR, cell_why(j, "run failed"));
    cell_solo_begin(j, "checking against the fp64 reference");
    if (ok && cell_ok(j) && (bench_download(dev, hy, dy, rows) || bench_download(dev, hr, dr, rows)))
        ok = cell_fail(j, CELL_ERROR, dev->err);
    if (ok && cell_ok(j)) {
        double err_r = 0, err_y = 0;
        int nan_seen = 0;
        arn_check(j, hy, hr, hg, hb, &err_r, &err_y, &nan_seen);
        cell_record_check(j, fmax(err_r, err_y), 1);
        if (nan_seen || !(err_r <= CELL_TOL_BF16) || !(err_y <= CELL_TOL_BF16)) {
            char what[160];
            snprintf(what, sizeof what, "wrong result: rel err r' %.2e, y %.2e%s (tolerance %.0e)", err_r, err_y,
                     nan_seen ? ", NaN" : "", CELL_TOL_BF16);
            cell_fail(j, CELL_WRONG, what);
        }
    }
    cell_solo_end(j);
    /* A replay of a fused backend repeats its run bit for bit; NCCL may sum in another order. */
    const int exact = plan && strcmp(agmm_plan_backend(plan), "nccl") != 0;
    const cell_output outs[2] = {{dy, hy, (size_t)(t_all * h), AGMM_DTYPE_BF16, exact},
                                 {dr, hr, (size_t)(t_all * h), AGMM_DTYPE_BF16, exact}};
    cell_keep(j, plan, &io, sizeof io, outs, 2);
    free(hx), free(hres), free(hy), free(hr), free(hg), free(hb);
}

static agmm_status launch(agmm_plan *plan, const void *io, void *stream)
{
    return agmm_all_reduce_rmsnorm(plan, io, stream);
}

static void need(const bench_results *r, int row, uint64_t *host, uint64_t *device)
{
    const uint64_t m = (uint64_t)r->rows[row].m, n = (uint64_t)r->rows[row].n;
    /* x, residual and the downloads of y and r' on the host (and a row of the check); the
     * input, residual, y and r' on the device; bias and gamma on both */
    *host = 4 * m * n * 2 + 2 * n * 2 + n * (sizeof(double) + 2);
    *device = 4 * m * n * 2 + 2 * n * 2;
}

const bench_row_kind bench_row_all_reduce_rmsnorm = {AGMM_OP_ALL_REDUCE_RMSNORM, run_all_reduce_rmsnorm, launch, need,
                                                     NULL};
