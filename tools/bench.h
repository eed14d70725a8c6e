/* agmm-bench internals: options, the per-cell results, the device-memory shim and the report.
 * The top layer (docs/architecture.md): it drives the public API (agmm.h) and reads results; the
 * one internal header it includes is src/api/agmm_ext.h, for the plain GEMM behind the
 * overlap-efficiency column and the checks shared with the library. */
#ifndef AGMM_TOOLS_BENCH_H
#define AGMM_TOOLS_BENCH_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "agmm.h"
#include "api/agmm_ext.h"

#define BENCH_MAX_ROWS 256
#define BENCH_MAX_BACKENDS 8

typedef struct {
    agmm_op op;
    agmm_world_kind world;
    int nranks;                  /* 0: the world's default */
    int64_t shapes[BENCH_MAX_ROWS][3];  /* M, N, K (ag_matmul); T, H, 0 (all_reduce_rmsnorm) */
    int64_t sizes[BENCH_MAX_ROWS];      /* n (all_reduce) */
    int nrows;                   /* 0: the default sweep for the world */
    const char *backends[BENCH_MAX_BACKENDS]; /* names from the library's table, or "auto" */
    int nbackends;               /* 0: every backend of the op that runs in the world */
    int warmup, iters;           /* -1: default (50/100 on GPUs, 2/5 on the CPU) */
    int turns;                   /* rounds in which a row's timed figures take turns; 0: default
                                    (5, at most iters) */
    int alone;                   /* --alone: each backend planned, checked, timed and released in
                                    turn, never held beside the others */
    int flush;
    int check_only;
    int graph;                   /* --graph: also time replays of a CUDA graph of one run */
    int splits;
    agmm_layout b_layout;
    agmm_dtype dtype;
    double eps;                  /* all_reduce_rmsnorm's */
    double timeout_s;
    const char *csv_path, *json_path;
    const char *fault;           /* --fault SPEC (exported as AGMM_FAULT), or NULL */
} bench_options;

typedef enum { CELL_EMPTY = 0, CELL_OK, CELL_WRONG, CELL_SKIPPED, CELL_ERROR } cell_state;

typedef struct {
    cell_state state;
    char note[AGMM_ERROR_LEN + 32]; /* why skipped / what failed: "rank R: " and the library's message */
    double mean_us, median_us, min_us, max_us;
    double graph_mean_us, graph_median_us;  /* --graph: replays of one captured run; 0: none */
    double err;                  /* rel. Frobenius error of C or of the sum (max over ranks; all_reduce_rmsnorm:
                                    the larger of r' and y's) */
    int exact_a;                 /* gathered A equal bit for bit on every rank */
    /* The "auto" column: the backend auto chose, how, and what measuring cost (rank 0's). */
    const char *chose, *how;
    double tune_ms;
} bench_cell;

typedef struct {
    int64_t m, n, k;             /* ag_matmul shape; all_reduce: n only; all_reduce_rmsnorm: T = m, H = n */
    double gemm_us;              /* plain GEMM on the gathered shape, cuBLASLt/CPU (<= 0: not measured) */
    double engine_us;            /* the same with agmm's GEMM engine (<= 0: not measured) */
    int turns;                   /* rounds its timed figures took turns in; 0: nothing timed */
    int alone;                   /* its backends were held one at a time (--alone, or the row too
                                    big to hold them all): each took turns only with its own graph
                                    replays, the plain GEMMs only with each other */
    bench_cell cell[BENCH_MAX_BACKENDS];
} bench_row;

typedef struct {
    bench_options opt;
    int nranks;
    const char *world_desc;
    int gpu;                     /* the world runs on GPUs */
    const char *backends[BENCH_MAX_BACKENDS];
    int nbackends;
    bench_row rows[BENCH_MAX_ROWS];
    int nrows;
    pthread_barrier_t barrier;   /* rank threads meet here (bench_sync.h) */
    pthread_mutex_t mu;          /* guards the cells while ranks merge their checks */
    int and_failed;              /* a rank answered 0 to the bench_sync_and under way (guarded by mu) */
    agmm_ctx *proc_ctx;          /* a process world: this process's rank, whose host collectives
                                    merge the cells across processes (bench_sync.h); else NULL */
    int world_failed;            /* a process world's meeting failed: the world is unusable, the
                                    sweep stops (its remaining cells say so) */
    char world_why[AGMM_ERROR_LEN]; /* why it failed */
    struct bench_progress_state *progress; /* rank 0's progress lines (bench_progress.h), or NULL */
} bench_results;

/* Parses argv into *opt. Returns 0, or 2 after printing the problem (or 1 after --help or
 * --list-backends, which print and succeed). */
int bench_parse(int argc, char **argv, bench_options *opt);
/* Every message to stderr starts with this: "agmm-bench", and under a launcher the rank too
 * (bench_args.c). */
extern char bench_who[40];
/* 0 where the options' operation takes shape (m, n, k); else prints why, naming opt and val, and
 * returns 2 (bench_args.c). */
int bench_check_shape(const bench_options *o, const int64_t shape[3], const char *opt, const char *val);
void bench_usage(FILE *f);

/* Runs the sweep on one rank (the agmm_world_run callback); `arg` is the bench_results. */
agmm_status bench_rank_main(agmm_ctx *ctx, void *arg);
/* Every cell the sweep never reached says why it was not run (bench_run.c). */
void bench_mark_not_run(bench_results *res, const char *why);

/* Output: the seed's table and the extra columns to stdout; CSV and JSON files. */
void report_print(const bench_results *r, FILE *f);
int report_csv(const bench_results *r, const char *path);
int report_json(const bench_results *r, const char *path);
/* The backend with the smallest mean time among correct cells, or -1. */
int report_best(const bench_results *r, const bench_row *row);

#endif
