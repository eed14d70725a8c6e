/* agmm-bench output: the seed's table (one time column per backend and the best backend), the
 * extra figures per backend, and every figure as CSV or JSON. An "auto" column shows, next to
 * its time, the backend auto chose (and the rows below, how and at what cost); it is not a
 * backend of its own, so it is never the Best Backend. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

static const char *op_name(const bench_results *r) { return agmm_op_name(r->opt.op); }
/* The matmuls: rows are shapes (M, N, K), times are TFLOP/s; the all-reduces' are bandwidths. */
static int is_matmul(const bench_results *r)
{
    return r->opt.op != AGMM_OP_ALL_REDUCE && r->opt.op != AGMM_OP_ALL_REDUCE_RMSNORM;
}
static const char *dtype_name(const bench_results *r)
{
    return r->opt.op != AGMM_OP_ALL_REDUCE || r->opt.dtype == AGMM_DTYPE_BF16 ? "bf16" : "fp32";
}
/* The last column of the matmul figures: the gathered A exact, or every rank the same S. */
static const char *exact_column(const bench_results *r)
{
    return r->opt.op == AGMM_OP_AG_MATMUL ? "gathered_A" : r->opt.op == AGMM_OP_MATMUL_ALL_REDUCE ? "ranks_same" : "";
}

static const char *state_name(cell_state s)
{
    switch (s) {
    case CELL_OK: return "ok";
    case CELL_WRONG: return "WRONG";
    case CELL_SKIPPED: return "skipped";
    case CELL_ERROR: return "ERROR";
    case CELL_EMPTY: break;
    }
    return "not run";
}

static int timed(const bench_results *r, const bench_cell *c) { return c->state == CELL_OK && !r->opt.check_only; }

static int is_auto(const bench_results *r, int b) { return strcmp(r->backends[b], "auto") == 0; }

/* The seed table's column of backend b: auto's holds "time (choice)". */
static int col_width(const bench_results *r, int b) { return is_auto(r, b) ? 22 : 12; }

int report_best(const bench_results *r, const bench_row *row)
{
    int best = -1;
    for (int b = 0; b < r->nbackends; b++) {
        const bench_cell *c = &row->cell[b];
        if (timed(r, c) && !is_auto(r, b) && (best < 0 || c->mean_us < row->cell[best].mean_us))
            best = b;
    }
    return best;
}

static int baseline_index(const bench_results *r)
{
    for (int b = 0; b < r->nbackends; b++)
        if (strcmp(r->backends[b], "nccl") == 0)
            return b;
    return -1;
}

static void shape_str(const bench_results *r, const bench_row *row, char *buf, size_t len)
{
    if (is_matmul(r))
        snprintf(buf, len, "(%lld, %lld, %lld)", (long long)row->m, (long long)row->n, (long long)row->k);
    else if (r->opt.op == AGMM_OP_ALL_REDUCE_RMSNORM)
        snprintf(buf, len, "%lld x %lld", (long long)row->m, (long long)row->n);
    else
        snprintf(buf, len, "%lld", (long long)row->n);
}

/* The head of the rows' first column. */
static const char *shape_head(const bench_results *r)
{
    return is_matmul(r) ? "shape" : r->opt.op == AGMM_OP_ALL_REDUCE_RMSNORM ? "T x H" : "n";
}

typedef struct {
    double tflops, algbw_gbps, busbw_gbps, speedup, overlap, vs_engine;
} derived;

/* Throughput and ratios of one cell; NAN where they do not apply. */
static derived derive(const bench_results *r, const bench_row *row, int b)
{
    derived d = {NAN, NAN, NAN, NAN, NAN, NAN};
    const bench_cell *c = &row->cell[b];
    if (!timed(r, c) || c->mean_us <= 0)
        return d;
    double t_s = c->mean_us * 1e-6;
    if (is_matmul(r)) {
        /* Per GPU: the gathered GEMM (W*M rows) of ag_matmul, the local M x N x K of the others. */
        const double rows = r->opt.op == AGMM_OP_AG_MATMUL ? (double)r->nranks * (double)row->m : (double)row->m;
        d.tflops = 2.0 * rows * (double)row->n * (double)row->k / t_s * 1e-12;
        /* The plain GEMMs are timed as medians (bench_mem.h): divide like by like. */
        if (row->gemm_us > 0 && c->median_us > 0)
            d.overlap = row->gemm_us / c->median_us;
        if (row->engine_us > 0 && c->median_us > 0)
            d.vs_engine = c->median_us / row->engine_us;
    } else {
        /* all_reduce_rmsnorm: the all-reduced message, x (T x H bf16) */
        double bytes = r->opt.op == AGMM_OP_ALL_REDUCE_RMSNORM ? (double)row->m * (double)row->n * 2
                                                                : (double)row->n * (r->opt.dtype == AGMM_DTYPE_F32 ? 4 : 2);
        d.algbw_gbps = bytes / t_s * 1e-9;
        d.busbw_gbps = d.algbw_gbps * 2.0 * (r->nranks - 1) / r->nranks;
    }
    int base = baseline_index(r);
    if (base >= 0 && timed(r, &row->cell[base]))
        d.speedup = row->cell[base].mean_us / c->mean_us;
    return d;
}

static void print_num(FILE *f, int width, double v, int prec)
{
    if (isnan(v))
        fprintf(f, " %*s", width, "-");
    else
        fprintf(f, " %*.*f", width, prec, v);
}

void report_print(const bench_results *r, FILE *f)
{
    fprintf(f, "\n# agmm-bench: %s, %s, W=%d ranks\n# %s\n", op_name(r), dtype_name(r), r->nranks, r->world_desc);
    if (r->opt.check_only)
        fprintf(f, "# --check: correctness only, nothing timed\n");
    if (r->opt.graph)
        fprintf(f, "# --graph: %s\n", r->gpu ? "graph_us = median us of replays of one captured run, timed as the runs"
                                              : "CUDA graphs need GPUs: no graph figures in the CPU world");
    else
        fprintf(f, "# time: mean us of %d calls after %d warm-up calls, %s%s\n", r->opt.iters, r->opt.warmup,
                r->gpu ? "rank 0's CUDA events" : "rank 0's wall clock",
                !r->opt.flush ? ", no cache flush" : r->gpu ? ", L2 flushed before each call" : ", 64 MB written before each call");
    if (!r->opt.check_only)
        fprintf(f, "# a row's backends and plain GEMMs take turns: %d round%s of %s%d call%s each, the first rotating%s%s\n",
                r->opt.turns, r->opt.turns > 1 ? "s" : "", r->opt.iters % r->opt.turns ? "about " : "",
                r->opt.iters / r->opt.turns, r->opt.iters / r->opt.turns > 1 ? "s" : "",
                r->opt.alone ? "; --alone: each backend held and timed by itself" : "",
                r->opt.graph && r->gpu ? "; graph replays: each backend's after its runs, on their own" : "");
    if (r->opt.world == AGMM_WORLD_EMULATED && !r->opt.check_only)
        fprintf(f, "# emulated: the ranks share one GPU's SMs, memory and copy engines, so these times say what "
                   "is correct and what costs more, not what a world of GPUs over NVLink takes\n");
    if (r->opt.op == AGMM_OP_ALL_REDUCE_RMSNORM)
        fprintf(f, "# every row with bias and residual, eps=%.9g; algbw = x's T*H*2 bytes / time; err = the larger "
                   "of r' and y's rel. error vs fp64\n", r->opt.eps);
    fprintf(f, "\nBenchmarking results for %s on %dx %s (time_us).\n", op_name(r), r->nranks,
            r->gpu ? "devices" : r->proc_ctx ? "CPU process-ranks" : "CPU thread-ranks");
    fprintf(f, "%-22s %-6s", shape_head(r), "dtype");
    for (int b = 0; b < r->nbackends; b++)
        fprintf(f, " %*s", col_width(r, b), r->backends[b]);
    fprintf(f, "  Best Backend\n");
    for (int i = 0; i < r->nrows; i++) {
        const bench_row *row = &r->rows[i];
        char shape[64];
        shape_str(r, row, shape, sizeof shape);
        fprintf(f, "%-22s %-6s", shape, dtype_name(r));
        for (int b = 0; b < r->nbackends; b++) {
            const bench_cell *c = &row->cell[b];
            char text[48];
            if (timed(r, c) && c->chose)
                snprintf(text, sizeof text, "%.1f (%s)", c->mean_us, c->chose);
            else if (timed(r, c))
                snprintf(text, sizeof text, "%.1f", c->mean_us);
            else
                snprintf(text, sizeof text, "%s", state_name(c->state));
            fprintf(f, " %*s", col_width(r, b), text);
        }
        int best = report_best(r, row);
        fprintf(f, "  %s%s\n", best >= 0 ? r->backends[best] : "-",
                row->alone && !r->opt.alone && row->turns ? "  (timed alone: too big to hold every backend at once)"
                                                          : "");
    }

    fprintf(f, "\n%-22s %-10s %10s %10s", shape_head(r), "backend", "mean_us", "median_us");
    if (r->opt.graph)
        fprintf(f, " %9s", "graph_us");
    if (is_matmul(r))
        fprintf(f, " %9s %8s %8s %9s %9s %10s\n", "TFLOP/s", "vs_nccl", "overlap", "t/engine", "err", exact_column(r));
    else
        fprintf(f, " %10s %10s %8s %9s\n", "algbw_GB/s", "busbw_GB/s", "vs_nccl", "err");
    for (int i = 0; i < r->nrows; i++) {
        const bench_row *row = &r->rows[i];
        char shape[64];
        shape_str(r, row, shape, sizeof shape);
        for (int b = 0; b < r->nbackends; b++) {
            const bench_cell *c = &row->cell[b];
            derived d = derive(r, row, b);
            fprintf(f, "%-22s %-10s", shape, r->backends[b]);
            if (c->state != CELL_OK) {
                fprintf(f, " %s: %s\n", state_name(c->state), c->note);
                continue;
            }
            print_num(f, 10, timed(r, c) ? c->mean_us : NAN, 1);
            print_num(f, 10, timed(r, c) ? c->median_us : NAN, 1);
            if (r->opt.graph)
                print_num(f, 9, timed(r, c) && c->graph_median_us > 0 ? c->graph_median_us : NAN, 1);
            if (is_matmul(r)) {
                print_num(f, 9, d.tflops, d.tflops < 10 ? 3 : 1);
                print_num(f, 8, d.speedup, 2);
                print_num(f, 8, d.overlap, 2);
                print_num(f, 9, d.vs_engine, 3);
                fprintf(f, " %9.2e %10s", c->err,
                        r->opt.op == AGMM_OP_MATMUL_REDUCE_SCATTER ? "" : c->exact_a ? "exact" : "DIFFERS");
            } else {
                print_num(f, 10, d.algbw_gbps, 2);
                print_num(f, 10, d.busbw_gbps, 2);
                print_num(f, 8, d.speedup, 2);
                fprintf(f, " %9.2e", c->err);
            }
            if (c->chose)
                fprintf(f, "  -> %s, %s%s", c->chose, c->how ? c->how : "?",
                        c->how && strcmp(c->how, "measured") == 0 ? "" : " (no measuring)");
            if (c->chose && c->tune_ms > 0)
                fprintf(f, " in %.1f ms", c->tune_ms);
            fputc('\n', f);
        }
    }
    if (is_matmul(r))
        fprintf(f, "# overlap = median time of the plain GEMM (%s) on the %s shape / median time of the backend\n"
                   "#   (1.0: communication hidden); t/engine = median time of the backend / median time of agmm's GEMM\n"
                   "#   engine alone on that shape%s\n",
                r->gpu ? "cuBLASLt" : "the CPU GEMM", r->opt.op == AGMM_OP_AG_MATMUL ? "gathered" : "local (M, N, K)",
                r->opt.op == AGMM_OP_AG_MATMUL ? ""
                                               : "\n# M = rows of S before the scatter; TFLOP/s per GPU = 2MNK / time;"
                                                 " err = |S - fp64 sum| / |sum_r |P_r||\n#   (Frobenius norms; P_r:"
                                                 " rank r's A_r B_r)");
}

static void csv_num(FILE *f, double v)
{
    /* %g, not a fixed number of decimals: CPU-world TFLOP/s are ~1e-6 and would print as 0. */
    if (isnan(v))
        fputs(",", f);
    else
        fprintf(f, ",%.6g", v);
}

int report_csv(const bench_results *r, const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fprintf(f, "op,world,nranks,m,n,k,dtype,backend,state,mean_us,median_us,min_us,max_us,tflops,algbw_gbps,"
               "busbw_gbps,speedup_vs_nccl,overlap,gemm_us,engine_us,err,exact_a,best,graph_mean_us,graph_median_us,"
               "note,chose,how,tune_ms,turns,alone\n");
    for (int i = 0; i < r->nrows; i++) {
        const bench_row *row = &r->rows[i];
        int best = report_best(r, row);
        for (int b = 0; b < r->nbackends; b++) {
            const bench_cell *c = &row->cell[b];
            derived d = derive(r, row, b);
            int t = timed(r, c);
            fprintf(f, "%s,%s,%d,%lld,%lld,%lld,%s,%s,%s", op_name(r), r->gpu ? "gpu" : "cpu", r->nranks,
                    (long long)row->m, (long long)row->n, (long long)row->k, dtype_name(r),
                    r->backends[b], state_name(c->state));
            csv_num(f, t ? c->mean_us : NAN);
            csv_num(f, t ? c->median_us : NAN);
            csv_num(f, t ? c->min_us : NAN);
            csv_num(f, t ? c->max_us : NAN);
            csv_num(f, d.tflops);
            csv_num(f, d.algbw_gbps);
            csv_num(f, d.busbw_gbps);
            csv_num(f, d.speedup);
            csv_num(f, d.overlap);
            csv_num(f, row->gemm_us > 0 ? row->gemm_us : NAN);
            csv_num(f, row->engine_us > 0 ? row->engine_us : NAN);
            /* An error figure only where the cell was checked, as in the JSON. */
            csv_num(f, c->state == CELL_OK || c->state == CELL_WRONG ? c->err : NAN);
            fprintf(f, ",%d,%d", c->exact_a, best == b);
            csv_num(f, t && c->graph_mean_us > 0 ? c->graph_mean_us : NAN);
            csv_num(f, t && c->graph_median_us > 0 ? c->graph_median_us : NAN);
            fputs(",\"", f);
            for (const char *p = c->note; *p; p++)
                fputc(*p == '"' ? '\'' : *p, f);
            fprintf(f, "\",%s,%s", c->chose ? c->chose : "", c->how ? c->how : "");
            csv_num(f, c->chose ? c->tune_ms : NAN);
            fprintf(f, ",%d,%d\n", row->turns, row->alone);
        }
    }
    return fclose(f) == 0 ? 0 : -1;
}

static void json_num(FILE *f, const char *key, double v)
{
    if (isnan(v) || isinf(v))
        fprintf(f, ", \"%s\": null", key);
    else
        fprintf(f, ", \"%s\": %.6g", key, v);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", *s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

int report_json(const bench_results *r, const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fprintf(f, "{\"op\": \"%s\", \"dtype\": \"%s\", \"nranks\": %d, \"world\": ", op_name(r), dtype_name(r), r->nranks);
    json_str(f, r->world_desc);
    fprintf(f, ", \"warmup\": %d, \"iters\": %d, \"turns\": %d, \"flush\": %s, \"rows\": [", r->opt.warmup,
            r->opt.iters, r->opt.turns, r->opt.flush ? "true" : "false");
    for (int i = 0; i < r->nrows; i++) {
        const bench_row *row = &r->rows[i];
        int best = report_best(r, row);
        fprintf(f, "%s\n  {\"m\": %lld, \"n\": %lld, \"k\": %lld, \"best\": \"%s\"", i ? "," : "", (long long)row->m,
                (long long)row->n, (long long)row->k, best >= 0 ? r->backends[best] : "");
        json_num(f, "gemm_us", row->gemm_us > 0 ? row->gemm_us : NAN);
        json_num(f, "engine_us", row->engine_us > 0 ? row->engine_us : NAN);
        fprintf(f, ", \"turns\": %d, \"alone\": %s, \"backends\": {", row->turns, row->alone ? "true" : "false");
        for (int b = 0; b < r->nbackends; b++) {
            const bench_cell *c = &row->cell[b];
            derived d = derive(r, row, b);
            int t = timed(r, c);
            fprintf(f, "%s\"%s\": {\"state\": \"%s\"", b ? ", " : "", r->backends[b],
                    state_name(c->state));
            json_num(f, "mean_us", t ? c->mean_us : NAN);
            json_num(f, "median_us", t ? c->median_us : NAN);
            json_num(f, "min_us", t ? c->min_us : NAN);
            json_num(f, "max_us", t ? c->max_us : NAN);
            json_num(f, "tflops", d.tflops);
            json_num(f, "algbw_gbps", d.algbw_gbps);
            json_num(f, "busbw_gbps", d.busbw_gbps);
            json_num(f, "speedup_vs_nccl", d.speedup);
            json_num(f, "overlap", d.overlap);
            json_num(f, "err", c->state == CELL_OK || c->state == CELL_WRONG ? c->err : NAN);
            json_num(f, "graph_mean_us", t && c->graph_mean_us > 0 ? c->graph_mean_us : NAN);
            json_num(f, "graph_median_us", t && c->graph_median_us > 0 ? c->graph_median_us : NAN);
            fprintf(f, ", \"exact_a\": %s, \"note\": ", c->exact_a ? "true" : "false");
            json_str(f, c->note);
            if (c->chose) {
                fprintf(f, ", \"chose\": \"%s\", \"how\": \"%s\"", c->chose, c->how ? c->how : "");
                json_num(f, "tune_ms", c->tune_ms);
            }
            fputc('}', f);
        }
        fprintf(f, "}}");
    }
    fprintf(f, "\n]}\n");
    return fclose(f) == 0 ? 0 : -1;
}
