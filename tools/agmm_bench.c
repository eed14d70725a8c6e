/* agmm-bench: runs every backend of an operation over a sweep of shapes, checks each against a
 * reference, times it and prints the seed's table (docs/design.md, "Benchmark method"). On a
 * machine without a GPU it runs the CPU world and says so. The command line is bench_args.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_progress.h"
#include "bench_sync.h"

static const int64_t seed_sizes[] = {4093, 4096, 5000, 8192, 8193, 16384, 16380, 16387, 1 << 15, 1 << 16,
                                     1 << 17, 1 << 18, 1 << 19, 1 << 20};
static const int64_t gpu_large_sizes[] = {1 << 22, 1 << 24, 1 << 27};
static const int64_t cpu_sizes[] = {1, 7, 4093, 16387, 65536};
/* all_reduce_rmsnorm's T x H (issue 22: decode to prefill token counts, Llama hidden sizes). */
static const int64_t arn_gpu_tokens[] = {1, 8, 32, 128, 512, 2048}, arn_gpu_hidden[] = {4096, 8192};
static const int64_t arn_cpu_tokens[] = {1, 7, 33}, arn_cpu_hidden[] = {264, 1032};

/* Fills the default sweep, counts and backends for the world that was created. */
static void apply_defaults(bench_results *r, agmm_world *world)
{
    bench_options *o = &r->opt;
    int gpu = r->gpu;
    if (o->warmup < 0)
        o->warmup = gpu ? 50 : 2;
    if (o->iters < 0)
        o->iters = gpu ? 100 : 5;
    if (o->turns == 0)
        o->turns = o->iters < 5 ? o->iters : 5;
    if (o->nrows == 0 && o->op == AGMM_OP_ALL_REDUCE_RMSNORM) {
        const int64_t *t = gpu ? arn_gpu_tokens : arn_cpu_tokens, *h = gpu ? arn_gpu_hidden : arn_cpu_hidden;
        const int nt = gpu ? 6 : 3;
        for (int i = 0; i < nt; i++)
            for (int k = 0; k < 2; k++) {
                o->shapes[o->nrows][0] = t[i];
                o->shapes[o->nrows++][1] = h[k];
            }
    } else if (o->nrows == 0 && o->op != AGMM_OP_ALL_REDUCE) {
        /* matmul_all_reduce's case first: decode, M tokens of a 70B model's row-parallel layer at TP 8. */
        for (int i = 0; gpu && o->op == AGMM_OP_MATMUL_ALL_REDUCE && i < 4; i++) {
            o->shapes[o->nrows][0] = (int64_t[]){1, 8, 32, 128}[i];
            o->shapes[o->nrows][1] = 8192, o->shapes[o->nrows][2] = 3584;
            o->nrows++;
        }
        for (int64_t s = gpu ? 256 : 64; s <= (gpu ? 4096 : 256); s += gpu ? 128 : 64) {
            o->shapes[o->nrows][0] = o->shapes[o->nrows][1] = o->shapes[o->nrows][2] = s;
            o->nrows++;
        }
        /* LLaMA-3 70B at TP 8, 8192 tokens: the MLP's down projection (K = 28672/8) and attention's
         * output projection (K = 8192/8). */
        for (int i = 0; gpu && o->op != AGMM_OP_AG_MATMUL && i < 2; i++) {
            o->shapes[o->nrows][0] = o->shapes[o->nrows][1] = 8192;
            o->shapes[o->nrows][2] = i == 0 ? 3584 : 1024;
            o->nrows++;
        }
    } else if (o->nrows == 0) {
        const int64_t *list = gpu ? seed_sizes : cpu_sizes;
        int n = gpu ? (int)(sizeof seed_sizes / sizeof *seed_sizes) : (int)(sizeof cpu_sizes / sizeof *cpu_sizes);
        for (int i = 0; i < n; i++)
            o->sizes[o->nrows++] = list[i];
        for (int i = 0; gpu && i < (int)(sizeof gpu_large_sizes / sizeof *gpu_large_sizes); i++)
            o->sizes[o->nrows++] = gpu_large_sizes[i];
    }
    if (o->nbackends == 0)
        for (int i = 0; agmm_backend_name(o->op, i) != NULL && o->nbackends < BENCH_MAX_BACKENDS; i++)
            if (agmm_backend_available(world, o->op, agmm_backend_name(o->op, i), NULL, 0))
                o->backends[o->nbackends++] = agmm_backend_name(o->op, i);
    memcpy(r->backends, o->backends, sizeof r->backends);
    r->nbackends = o->nbackends;
    r->nrows = o->nrows;
    for (int i = 0; i < o->nrows; i++) {
        if (o->op != AGMM_OP_ALL_REDUCE) { /* the matmuls' M, N, K; all_reduce_rmsnorm's T, H */
            r->rows[i].m = o->shapes[i][0];
            r->rows[i].n = o->shapes[i][1];
            r->rows[i].k = o->shapes[i][2];
        } else {
            r->rows[i].n = o->sizes[i];
        }
    }
}

/* 1 if any cell is wrong or could not run. */
static int cells_failed(const bench_results *r)
{
    int failed = 0;
    for (int i = 0; i < r->nrows; i++)
        for (int b = 0; b < r->nbackends; b++)
            failed |= r->rows[i].cell[b].state == CELL_WRONG || r->rows[i].cell[b].state == CELL_ERROR ||
                      r->rows[i].cell[b].state == CELL_EMPTY;
    return failed;
}

/* Under a launcher each process runs one rank: its cells are merged with its peers' as the sweep
 * goes (bench_sync.h), and at the end the ranks agree on the verdict, so that every process
 * exits with the same status. */
typedef struct {
    bench_results *res;
    int failed;                  /* any rank saw a failure, or the ranks could not agree */
    int bad_args;                /* the ranks were given different options */
} proc_run;

/* main's arguments, for proc_rank_main's comparison across ranks. */
static int bench_argc;
static char **bench_argv;

static agmm_status proc_rank_main(agmm_ctx *ctx, void *arg)
{
    proc_run *run = arg;
    bench_sync_attach(run->res, ctx);
    if (bench_sync_args(run->res, bench_argc, bench_argv) != 0) {
        run->failed = run->bad_args = 1;
        return AGMM_ERR_INVALID_ARG;
    }
    agmm_status st = bench_rank_main(ctx, run->res);
    int32_t mine = st != AGMM_SUCCESS || cells_failed(run->res), all[AGMM_MAX_RANKS];
    run->failed = mine;
    if (agmm_ext_exchange(ctx, &mine, sizeof mine, all) != AGMM_SUCCESS) {
        fprintf(stderr, "%s: %s\n", bench_who, agmm_last_error(ctx));
        run->failed = 1;
        return st;
    }
    for (int p = 0; p < run->res->nranks; p++)
        run->failed |= all[p] != 0;
    return st;
}

/* The world: the launcher's processes (agmm_world_join) when a launcher's variables are there,
 * else the ranks of this process. */
static agmm_status make_world(const bench_options *o, int launched, agmm_world **world, char *err, size_t len)
{
    if (!launched) {
        agmm_world_config cfg = {.kind = o->world, .nranks = o->nranks, .timeout_s = o->timeout_s};
        return agmm_world_create(world, &cfg, err, len);
    }
    agmm_join_config jc = {.kind = o->world, .rank = -1, .nranks = -1, .device = -1, .timeout_s = o->timeout_s};
    agmm_status st = agmm_world_join(world, &jc, err, len);
    if (st == AGMM_SUCCESS && o->nranks && o->nranks != agmm_world_nranks(*world)) {
        snprintf(err, len, "--ranks %d: the launcher started %d processes, one rank each", o->nranks,
                 agmm_world_nranks(*world));
        agmm_world_destroy(*world);
        *world = NULL;
        return AGMM_ERR_INVALID_ARG;
    }
    return st;
}

int main(int argc, char **argv)
{
    static bench_results res; /* large: rows x backends of cells */
    int launch_rank = agmm_ext_launch_rank();
    if (launch_rank >= 0)
        snprintf(bench_who, sizeof bench_who, "agmm-bench: rank %d", launch_rank);
    bench_argc = argc, bench_argv = argv;
    int rc = bench_parse(argc, argv, &res.opt);
    if (rc)
        return rc == 1 ? 0 : rc;

    agmm_world *world = NULL;
    char err[768] = "";
    agmm_status st = make_world(&res.opt, launch_rank >= 0, &world, err, sizeof err);
    if (st != AGMM_SUCCESS) {
        fprintf(stderr, "%s: cannot %s the world: %s: %s\n", bench_who, launch_rank >= 0 ? "join" : "create",
                agmm_status_str(st), err);
        return st == AGMM_ERR_INVALID_ARG ? 2 : 1;
    }
    /* Rank 0 prints the banner, the table and the files; other processes only their errors. */
    const int lead = agmm_world_first_rank(world) == 0;
    res.nranks = agmm_world_nranks(world);
    res.world_desc = agmm_world_describe(world);
    res.gpu = agmm_world_kind_of(world) != AGMM_WORLD_CPU;
    if (!res.gpu && lead)
        printf("==================================================================\n"
               "  agmm-bench is running on the CPU: no GPU is used.\n"
               "  Ranks are %s, memory is host memory; times are CPU times.\n"
               "==================================================================\n",
               launch_rank >= 0 ? "processes" : "threads");
    if (lead)
        printf("# %s\n", res.world_desc);
    fflush(stdout);
    apply_defaults(&res, world);
    if (res.opt.turns > res.opt.iters) { /* --turns given, --iters left at this world's default */
        fprintf(stderr, "%s: --turns %d: must be at most --iters (%d, this world's default): every round times each "
                        "figure at least once (see --help)\n",
                bench_who, res.opt.turns, res.opt.iters);
        agmm_world_destroy(world);
        return 2;
    }
    /* The default sweep is only known now: --splits must still fit each of its shapes. */
    for (int i = 0; res.opt.op == AGMM_OP_AG_MATMUL && res.opt.splits > 0 && i < res.opt.nrows; i++) {
        char val[24];
        snprintf(val, sizeof val, "%d", res.opt.splits);
        if (bench_check_shape(&res.opt, res.opt.shapes[i], "--splits", val)) {
            agmm_world_destroy(world);
            return 2;
        }
    }
    if (res.nbackends == 0) {
        fprintf(stderr, "%s: no backend of this build runs in this world\n", bench_who);
        agmm_world_destroy(world);
        return 1;
    }
    if (bench_sync_init(&res, agmm_world_local_ranks(world)) != 0) {
        fprintf(stderr, "%s: cannot set up rank threads\n", bench_who);
        agmm_world_destroy(world);
        return 1;
    }
    proc_run run = {&res, 0, 0};
    if (lead && bench_progress_start(&res) != 0)
        fprintf(stderr, "%s: cannot start the progress thread: long rows will not say what they do\n", bench_who);
    st = launch_rank >= 0 ? agmm_world_run(world, proc_rank_main, &run) : agmm_world_run(world, bench_rank_main, &res);
    bench_progress_stop(&res);
    if (run.bad_args) { /* each rank said which option differs; there is no table */
        bench_sync_fini(&res);
        agmm_world_destroy(world);
        return 2;
    }
    if (st != AGMM_SUCCESS) {
        fprintf(stderr, "%s: a rank failed: %s\n", bench_who, agmm_status_str(st));
        char why[96];
        agmm_format(why, sizeof why, "a rank failed (%s; its message is on stderr)", agmm_status_str(st));
        bench_mark_not_run(&res, why);
    }
    if (lead)
        report_print(&res, stdout);
    if (lead && res.opt.csv_path && report_csv(&res, res.opt.csv_path) != 0) {
        fprintf(stderr, "%s: --csv %s: cannot write: %s\n", bench_who, res.opt.csv_path, strerror(errno));
        rc = 1;
    }
    if (lead && res.opt.json_path && report_json(&res, res.opt.json_path) != 0) {
        fprintf(stderr, "%s: --json %s: cannot write: %s\n", bench_who, res.opt.json_path, strerror(errno));
        rc = 1;
    }
    int failed = st != AGMM_SUCCESS || cells_failed(&res) || run.failed;
    if (failed)
        fprintf(stderr, "%s: FAILED: some cells are wrong or could not run (see %s)\n", bench_who,
                lead ? "the table" : "rank 0's table");
    bench_sync_fini(&res);
    agmm_world_destroy(world);
    return failed || rc ? 1 : 0;
}
