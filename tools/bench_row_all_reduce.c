/* agmm-bench's all_reduce rows: every rank's vector fresh per cell (bf16 or fp32), the output
 * poisoned, one run checked against the fp32 sum in rank order (within a tolerance: NCCL may sum
 * in another order), then kept for the row's turns. */
#include <math.h>
#include <stdlib.h>

#include "bench_cell.h"

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
    cell_phase(j, "planning");
    agmm_status st = agmm_plan_all_reduce(&plan, j->ctx, &desc);
    int ok = st == AGMM_SUCCESS;
    if (!ok)
        cell_fail_plan(j, st);
    cell_solo_begin(j, "allocating and filling inputs and the reference");
    if (ok) {
        cell_note_auto(j, plan);
        hin = malloc((size_t)n * esz);
        hout = malloc((size_t)n * esz);
        acc = calloc((size_t)n, sizeof *acc);
        tmp = malloc((size_t)n * sizeof *tmp);
        dout = cell_alloc(j, (size_t)n * esz);
        if (!hin || !hout || !acc || !tmp || !dout)
            ok = cell_fail(j, CELL_ERROR, dev->err[0] ? dev->err : "host allocation failed");
    }
    if (ok) {
        /* Reference: every rank's input regenerated, summed in rank order in fp32 (as our
         * backends sum), compared with a tolerance since NCCL may sum in another order. */
        for (int r = 0; r < j->nranks; r++) {
            cell_fill_f32(tmp, (size_t)n, cell_seed(j->row, j->bi, r, 'V'));
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
    cell_solo_end(j);
    agmm_all_reduce_io io = {.out = dout};
    ok = cell_agreed_ok(j);
    if (ok)
        cell_phase(j, "running once");
    if (ok &&
        (agmm_all_reduce(plan, &io, dev->stream) != AGMM_SUCCESS || agmm_ctx_sync(j->ctx) != AGMM_SUCCESS ||
         bench_sync(dev) != 0))
        ok = cell_fail(j, CELL_ERROR, cell_why(j, "run failed"));
    cell_solo_begin(j, "checking against the reference");
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
        double tol = o->dtype == AGMM_DTYPE_F32 ? CELL_TOL_F32 : CELL_TOL_BF16;
        cell_record_check(j, err, 1);
        if (nan_seen || !(err <= tol)) {
            char what[160];
            snprintf(what, sizeof what, "wrong result: rel err %.2e%s (tolerance %.0e)", err, nan_seen ? ", NaN" : "",
                     tol);
            cell_fail(j, CELL_WRONG, what);
        }
    }
    cell_solo_end(j);
    const cell_output outs[1] = {{dout, hout, (size_t)n, o->dtype, 0}};
    cell_keep(j, plan, &io, sizeof io, outs, 1);
    free(hin);
    free(hout);
    free(acc);
    free(tmp);
}

static agmm_status launch(agmm_plan *plan, const void *io, void *stream) { return agmm_all_reduce(plan, io, stream); }

static void need(const bench_results *r, int row, uint64_t *host, uint64_t *device)
{
    const uint64_t n = (uint64_t)r->rows[row].n, esz = r->opt.dtype == AGMM_DTYPE_F32 ? 4 : 2;
    *host = n * (2 * esz + 2 * sizeof(float));
    *device = 2 * n * esz;
}

const bench_row_kind bench_row_all_reduce = {AGMM_OP_ALL_REDUCE, run_all_reduce, launch, need, NULL};
