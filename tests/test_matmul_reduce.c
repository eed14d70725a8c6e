/* The row-parallel matmuls in the CPU world: matmul_reduce_scatter and matmul_all_reduce, every
 * backend of the table the CPU world runs, against two references:
 *   - bits: each rank's partial computed by the CPU world's GEMM (which every CPU backend uses,
 *     src/cpu), the partials added in fp32 in rank order 0..W-1 and rounded once (agmm.h): every
 *     backend must give exactly these bits, on any input, for every rank and every run;
 *   - fp64: sum over r of A_r * B_r in fp64, exact when the inputs are small integers (so the
 *     bits above must equal it rounded to bf16), within 1e-2 relative Frobenius on uniform inputs.
 * Fresh inputs for each of 3 back-to-back runs, outputs poisoned before every run. A rank that
 * gets no rows of a reduce-scatter passes out = NULL. And the descriptor and io checks, and the
 * row split. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "core/numeric.h"
#include "core/row_split.h"
#include "core/validate.h"
#include "api/agmm_ext.h"
#include "cpu/cpu.h"
#include "cpu/reference.h"
#include "cpu_tests.h"
#include "harness.h"

#define RUNS 3
#define TOL_BF16 1e-2
#define MAX_NB 8

typedef struct {
    agmm_op op;
    int nranks;
    int64_t m, n, k;
    agmm_layout layout;
    int exact; /* inputs: 1 small integers (range 2: |partial| <= 4K <= 256 for K <= 64), 0 uniform */
} mr_case;

typedef struct {
    uint16_t *a[AGMM_MAX_RANKS], *b[AGMM_MAX_RANKS];
    uint16_t *bits;  /* M x N: the rank-ordered fp32 sum of the CPU GEMM's partials, rounded once */
    double *sum;     /* M x N: the fp64 sum of the products */
} mr_data;

typedef struct {
    agmm_status status;
    char msg[AGMM_ERROR_LEN];
    int runs, bad_bits;
    double worst;
    char detail[160];
} mr_result;

typedef struct {
    mr_case c;
    int nb;
    const char *backends[MAX_NB];
    mr_data data[RUNS];
    mr_result res[AGMM_MAX_RANKS][MAX_NB];
} mr_job;

static const char *layout_name(agmm_layout l) { return l == AGMM_LAYOUT_COL_MAJOR ? "col" : "row"; }

/* The references of one run: every rank's inputs, its partial by the CPU GEMM, the sums. */
static int make_data(const mr_case *c, uint64_t seed, mr_data *d)
{
    const int64_t mn = c->m * c->n;
    d->bits = malloc((size_t)mn * 2);
    d->sum = calloc((size_t)mn, sizeof(double));
    float *acc = calloc((size_t)mn, sizeof(float));
    uint16_t *partial = malloc((size_t)mn * 2);
    double *prod = malloc((size_t)mn * sizeof(double));
    agmm_cpu_gemm_ws ws;
    agmm_error err = {0};
    int ok = d->bits && d->sum && acc && partial && prod && agmm_cpu_gemm_ws_init(&ws, c->k, &err) == AGMM_SUCCESS;
    for (int r = 0; ok && r < c->nranks; r++) {
        d->a[r] = malloc((size_t)(c->m * c->k) * 2);
        d->b[r] = malloc((size_t)(c->k * c->n) * 2);
        if (!(ok = d->a[r] && d->b[r]))
            break;
        test_fill_bf16(d->a[r], c->m * c->k, test_seed_of(seed, r, 0, 'a'), c->exact ? 2 : 0);
        test_fill_bf16(d->b[r], c->k * c->n, test_seed_of(seed, r, 0, 'b'), c->exact ? 2 : 0);
        agmm_cpu_gemm_ws_forget_b(&ws);
        agmm_cpu_gemm_bf16(&ws, d->a[r], c->k, c->m, d->b[r], c->layout, c->n, 0, c->n, partial, c->n);
        ok = agmm_ref_gemm_bf16(d->a[r], d->b[r], c->layout, c->m, c->n, c->k, prod, NULL) == AGMM_SUCCESS;
        for (int64_t i = 0; ok && i < mn; i++) {
            acc[i] = r == 0 ? agmm_bf16_to_f32(partial[i]) : acc[i] + agmm_bf16_to_f32(partial[i]);
            d->sum[i] += prod[i];
        }
    }
    for (int64_t i = 0; ok && i < mn; i++)
        d->bits[i] = agmm_f32_to_bf16(acc[i]);
    if (ok)
        agmm_cpu_gemm_ws_free(&ws);
    free(acc), free(partial), free(prod);
    return ok;
}

static void free_data(mr_data *d)
{
    for (int r = 0; r < AGMM_MAX_RANKS; r++)
        free(d->a[r]), free(d->b[r]);
    free(d->bits), free(d->sum);
}

static agmm_status plan_mr(agmm_plan **plan, agmm_ctx *ctx, const mr_case *c, const char *backend)
{
    if (c->op == AGMM_OP_MATMUL_ALL_REDUCE) {
        agmm_matmul_all_reduce_desc d = {.m = c->m, .n = c->n, .k = c->k, .b_layout = c->layout, .backend = backend};
        return agmm_plan_matmul_all_reduce(plan, ctx, &d);
    }
    agmm_matmul_reduce_scatter_desc d = {.m = c->m, .n = c->n, .k = c->k, .b_layout = c->layout, .backend = backend};
    return agmm_plan_matmul_reduce_scatter(plan, ctx, &d);
}

static agmm_status run_mr(agmm_plan *plan, const mr_case *c, const uint16_t *a, const uint16_t *b, uint16_t *out)
{
    if (c->op == AGMM_OP_MATMUL_ALL_REDUCE) {
        agmm_matmul_all_reduce_io io = {.a = a, .b = b, .c = out};
        return agmm_matmul_all_reduce(plan, &io, NULL);
    }
    agmm_matmul_reduce_scatter_io io = {.a = a, .b = b, .out = out};
    return agmm_matmul_reduce_scatter(plan, &io, NULL);
}

static agmm_status mr_rank(agmm_ctx *ctx, void *arg)
{
    mr_job *job = arg;
    const mr_case *c = &job->c;
    const int rank = agmm_ctx_rank(ctx);
    int64_t row0 = 0, rows = c->m;
    if (c->op == AGMM_OP_MATMUL_REDUCE_SCATTER)
        rows = agmm_matmul_reduce_scatter_rows(c->m, c->nranks, rank, &row0);
    const int64_t count = rows * c->n;
    uint16_t *out = count > 0 ? malloc((size_t)count * 2) : NULL;
    agmm_plan *plans[MAX_NB] = {0};
    /* Collective: every rank plans every backend in the same order. */
    for (int bi = 0; bi < job->nb; bi++) {
        mr_result *rr = &job->res[rank][bi];
        rr->status = plan_mr(&plans[bi], ctx, c, job->backends[bi]);
        if (rr->status != AGMM_SUCCESS)
            snprintf(rr->msg, sizeof rr->msg, "plan: %s", agmm_last_error(ctx));
    }
    for (int bi = 0; bi < job->nb; bi++) {
        mr_result *rr = &job->res[rank][bi];
        for (int run = 0; plans[bi] && rr->status == AGMM_SUCCESS && run < RUNS; run++) {
            const mr_data *d = &job->data[run];
            if (out)
                test_poison_bf16(out, count);
            agmm_status st = run_mr(plans[bi], c, d->a[rank], d->b[rank], out);
            if (st != AGMM_SUCCESS) {
                rr->status = st;
                snprintf(rr->msg, sizeof rr->msg, "run %d: %s", run, agmm_last_error(ctx));
                break;
            }
            rr->runs++;
            int64_t bad = count ? agmm_ref_first_mismatch(out, d->bits + row0 * c->n, count, 2) : -1;
            if (bad >= 0 && rr->bad_bits++ == 0)
                snprintf(rr->detail, sizeof rr->detail, ": run %d rank %d: row %lld col %lld is %#x, want %#x", run,
                         rank, (long long)(row0 + bad / c->n), (long long)(bad % c->n), out[bad],
                         d->bits[row0 * c->n + bad]);
            double err = count ? agmm_ref_rel_frobenius(out, AGMM_DTYPE_BF16, d->sum + row0 * c->n, count) : 0;
            if (!(err <= rr->worst))
                rr->worst = err; /* NaN sticks */
        }
    }
    for (int bi = 0; bi < job->nb; bi++)
        agmm_plan_destroy(plans[bi]);
    free(out);
    return AGMM_SUCCESS;
}

static void run_case_with(const mr_case *c, uint64_t seed, int with_auto)
{
    mr_job *job = calloc(1, sizeof *job);
    job->c = *c;
    int ok = 1;
    for (int run = 0; run < RUNS && ok; run++)
        ok = make_data(c, seed * 16 + (uint64_t)run, &job->data[run]);
    agmm_world *world = ok ? test_cpu_world(c->nranks, 0) : NULL;
    if (world) {
        for (int i = 0; agmm_backend_name(c->op, i) != NULL && job->nb < MAX_NB; i++)
            if (agmm_backend_available(world, c->op, agmm_backend_name(c->op, i), NULL, 0))
                job->backends[job->nb++] = agmm_backend_name(c->op, i);
        if (with_auto)
            job->backends[job->nb++] = "auto";
        agmm_world_run(world, mr_rank, job);
        agmm_world_destroy(world);
    }
    int64_t ref_bad = 0;
    for (int run = 0; ok && c->exact && run < RUNS; run++)
        for (int64_t i = 0; i < c->m * c->n; i++)
            ref_bad += job->data[run].bits[i] != agmm_ref_f64_to_bf16(job->data[run].sum[i]);
    if (c->exact)
        agmm_check(ok && ref_bad == 0, "%s W=%d M=%lld N=%lld K=%lld: on small integers the rank-ordered bits are the "
                   "fp64 sum rounded once (%lld differ)", agmm_op_name(c->op), c->nranks, (long long)c->m,
                   (long long)c->n, (long long)c->k, (long long)ref_bad);
    agmm_check(world != NULL && job->nb >= 3, "%s W=%d: the CPU world runs %d backends (want >= 3)", agmm_op_name(c->op),
               c->nranks, job->nb);
    for (int bi = 0; bi < job->nb; bi++) {
        int runs = RUNS, bad = 0;
        double worst = 0;
        const char *msg = "", *detail = "";
        for (int r = 0; r < c->nranks; r++) {
            const mr_result *rr = &job->res[r][bi];
            if (rr->status != AGMM_SUCCESS && msg[0] == '\0')
                msg = rr->msg;
            runs = rr->runs < runs ? rr->runs : runs;
            bad += rr->bad_bits;
            if (!(rr->worst <= worst))
                worst = rr->worst;
            if (detail[0] == '\0')
                detail = rr->detail;
        }
        /* Small integers: the bits are the exact sum rounded once (checked below), so matching them
         * is exactness; the error then is bf16's rounding of sums above 256, within the tolerance. */
        agmm_check(runs == RUNS && bad == 0 && worst <= TOL_BF16,
                   "%s/%s W=%d M=%lld N=%lld K=%lld B=%s %s: rank-ordered bits on every rank, rel_fro=%.1e vs fp64 "
                   "(%d runs)%s%s%s",
                   agmm_op_name(c->op), job->backends[bi], c->nranks, (long long)c->m, (long long)c->n,
                   (long long)c->k, layout_name(c->layout), c->exact ? "small integers" : "uniform", worst, RUNS,
                   msg[0] ? ": " : "", msg, bad ? detail : "");
    }
    for (int run = 0; run < RUNS; run++)
        free_data(&job->data[run]);
    free(job);
}

static void run_case(const mr_case *c, uint64_t seed) { run_case_with(c, seed, 0); }

/* W = 1..8, odd M (M < W, M not divisible by W, M divisible by W), odd N, K odd multiples of 8,
 * both B layouts; both operations on every shape. */
void test_matmul_reduce_exact(void)
{
    static const mr_case shapes[] = {
        {0, 1, 5, 9, 8, AGMM_LAYOUT_COL_MAJOR, 1},    {0, 2, 7, 24, 24, AGMM_LAYOUT_ROW_MAJOR, 1},
        {0, 3, 2, 13, 16, AGMM_LAYOUT_COL_MAJOR, 1},  {0, 4, 5, 11, 40, AGMM_LAYOUT_COL_MAJOR, 1},
        {0, 5, 33, 16, 56, AGMM_LAYOUT_ROW_MAJOR, 1}, {0, 6, 18, 7, 8, AGMM_LAYOUT_COL_MAJOR, 1},
        {0, 7, 3, 40, 24, AGMM_LAYOUT_ROW_MAJOR, 1},  {0, 8, 61, 33, 40, AGMM_LAYOUT_COL_MAJOR, 1},
        {0, 8, 64, 64, 64, AGMM_LAYOUT_ROW_MAJOR, 1}, {0, 3, 100, 1, 8, AGMM_LAYOUT_COL_MAJOR, 1},
    };
    const agmm_op ops[2] = {AGMM_OP_MATMUL_REDUCE_SCATTER, AGMM_OP_MATMUL_ALL_REDUCE};
    for (int o = 0; o < 2; o++)
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            mr_case c = shapes[i];
            c.op = ops[o];
            run_case(&c, 100 * (uint64_t)o + i);
        }
}

void test_matmul_reduce_random(void)
{
    static const mr_case shapes[] = {
        {0, 4, 96, 200, 256, AGMM_LAYOUT_COL_MAJOR, 0},
        {0, 3, 130, 136, 128, AGMM_LAYOUT_ROW_MAJOR, 0},
        {0, 8, 37, 70, 192, AGMM_LAYOUT_COL_MAJOR, 0},
    };
    const agmm_op ops[2] = {AGMM_OP_MATMUL_REDUCE_SCATTER, AGMM_OP_MATMUL_ALL_REDUCE};
    for (int o = 0; o < 2; o++)
        for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
            mr_case c = shapes[i];
            c.op = ops[o];
            run_case(&c, 500 + 100 * (uint64_t)o + i);
        }
}

/* auto measuring in the CPU world (AGMM_TUNE=1, no cache file): every rank plans and times every
 * candidate through the operation's hooks (api.h), all take the same, and its runs give the bits
 * every backend gives (an "auto" column beside the backends in run_case). */
void test_matmul_reduce_auto(void)
{
    setenv("AGMM_TUNE", "1", 1);
    setenv("AGMM_TUNE_CACHE", "", 1);
    const mr_case cases[] = {{AGMM_OP_MATMUL_REDUCE_SCATTER, 3, 10, 24, 32, AGMM_LAYOUT_COL_MAJOR, 1},
                             {AGMM_OP_MATMUL_ALL_REDUCE, 4, 3, 40, 16, AGMM_LAYOUT_ROW_MAJOR, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run_case_with(&cases[i], 900 + i, 1);
    unsetenv("AGMM_TUNE");
    unsetenv("AGMM_TUNE_CACHE");
}

/* ---- the row split ---- */

void test_matmul_reduce_rows(void)
{
    static const struct {
        int64_t m;
        int w;
        int64_t rows[8];
    } cases[] = {
        {8, 4, {2, 2, 2, 2}}, {5, 4, {2, 2, 1, 0}}, {3, 8, {1, 1, 1, 0, 0, 0, 0, 0}}, {9, 8, {2, 2, 2, 2, 1, 0, 0, 0}},
        {1, 1, {1}},          {7, 3, {3, 3, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int ok = 1;
        int64_t next = 0;
        for (int q = 0; q < cases[i].w; q++) {
            int64_t first = -1, rows = agmm_matmul_reduce_scatter_rows(cases[i].m, cases[i].w, q, &first);
            ok &= rows == cases[i].rows[q] && first == next;
            next += rows;
        }
        agmm_check(ok && next == cases[i].m, "matmul_reduce_scatter rows: M=%lld W=%d split as R = ceil(M/W) blocks in "
                   "rank order (the last ranks short or empty), covering M",
                   (long long)cases[i].m, cases[i].w);
    }
    /* Their limits (agmm_backend_limit), the same for every backend and auto, as the check enforces. */
    const agmm_op ops[2] = {AGMM_OP_MATMUL_REDUCE_SCATTER, AGMM_OP_MATMUL_ALL_REDUCE};
    for (int o = 0; o < 2; o++) {
        int64_t km = 0, nm = 0, v = 0, sp = -1;
        int same = agmm_backend_limit(ops[o], NULL, AGMM_LIMIT_K_MULTIPLE, &km) == AGMM_SUCCESS &&
                   agmm_backend_limit(ops[o], NULL, AGMM_LIMIT_N_MULTIPLE_ROW_B, &nm) == AGMM_SUCCESS &&
                   agmm_backend_limit(ops[o], NULL, AGMM_LIMIT_MAX_SPLITS, &sp) == AGMM_SUCCESS && sp == 0;
        for (int i = 0; agmm_backend_name(ops[o], i) != NULL; i++)
            same &= agmm_backend_limit(ops[o], agmm_backend_name(ops[o], i), AGMM_LIMIT_K_MULTIPLE, &v) == AGMM_SUCCESS &&
                    v == km;
        char why[AGMM_ERROR_LEN];
        const agmm_layout col = AGMM_LAYOUT_COL_MAJOR, row = AGMM_LAYOUT_ROW_MAJOR;
        int enforced = km > 1 && nm > 1 &&
                       agmm_ext_check_matmul_reduce(ops[o], 8, 8, 3 * km, col, why, sizeof why) == AGMM_SUCCESS &&
                       agmm_ext_check_matmul_reduce(ops[o], 8, 8, 3 * km - 1, col, why, sizeof why) != AGMM_SUCCESS &&
                       agmm_ext_check_matmul_reduce(ops[o], 8, 3 * nm, 8, row, why, sizeof why) == AGMM_SUCCESS &&
                       agmm_ext_check_matmul_reduce(ops[o], 8, 3 * nm - 1, 8, row, why, sizeof why) != AGMM_SUCCESS &&
                       agmm_ext_check_matmul_reduce(ops[o], 8, 3 * nm - 1, 8, col, why, sizeof why) == AGMM_SUCCESS;
        agmm_check(same && enforced, "%s's limits, the same for every backend and auto: K a multiple of %lld, N of %lld "
                   "with a row-major B, no splits; the shape check accepts each bound and refuses one past it",
                   agmm_op_name(ops[o]), (long long)km, (long long)nm);
    }
    agmm_check(agmm_matmul_reduce_scatter_rows(0, 4, 0, NULL) == -1 && agmm_matmul_reduce_scatter_rows(8, 4, 4, NULL) == -1 &&
                   agmm_matmul_reduce_scatter_rows(8, 0, 0, NULL) == -1 &&
                   agmm_matmul_reduce_scatter_rows(8, AGMM_MAX_RANKS + 1, 0, NULL) == -1 &&
                   agmm_matmul_reduce_scatter_rows(INT64_MAX, 2, 0, NULL) == -1 &&
                   agmm_matmul_reduce_scatter_rows(((int64_t)1 << 40) + 1, 64, 0, NULL) == -1,
               "matmul_reduce_scatter rows: M=0, rank=W, W=0, W > AGMM_MAX_RANKS, M=INT64_MAX, M=2^40+1 give -1");
    int64_t first = -1;
    const int64_t most = agmm_matmul_reduce_scatter_rows((int64_t)1 << 40, 3, 2, &first);
    const int64_t block = (((int64_t)1 << 40) + 2) / 3;
    agmm_check(most == ((int64_t)1 << 40) - 2 * block && first == 2 * block,
               "matmul_reduce_scatter rows: M=2^40 (the most a descriptor allows), W=3, rank 2: %lld rows from %lld "
               "(want %lld from %lld)",
               (long long)most, (long long)first, (long long)(((int64_t)1 << 40) - 2 * block), (long long)(2 * block));
}

/* ---- bad descriptors and io ---- */

typedef struct {
    agmm_status st[16];
    char msg[16][AGMM_ERROR_LEN];
} bad_result;

static agmm_status bad_rank(agmm_ctx *ctx, void *arg)
{
    bad_result *res = (bad_result *)arg + agmm_ctx_rank(ctx);
    int i = 0;
    agmm_plan *p = NULL;
#define NOTE(call)                                                                          \
    do {                                                                                    \
        res->st[i] = (call);                                                                \
        snprintf(res->msg[i], sizeof res->msg[i], "%s", agmm_last_error(ctx));              \
        i++;                                                                                \
    } while (0)
    agmm_matmul_reduce_scatter_desc rs = {.m = 16, .n = 24, .k = 32, .backend = "ce"};
    agmm_matmul_all_reduce_desc ar = {.m = 4, .n = 24, .k = 32, .backend = "one_shot"};
    rs.k = 12;
    NOTE(agmm_plan_matmul_reduce_scatter(&p, ctx, &rs)); /* 0 */
    rs.k = 32, rs.m = 0;
    NOTE(agmm_plan_matmul_reduce_scatter(&p, ctx, &rs)); /* 1 */
    rs.m = 16, rs.n = 20, rs.b_layout = AGMM_LAYOUT_ROW_MAJOR;
    NOTE(agmm_plan_matmul_reduce_scatter(&p, ctx, &rs)); /* 2 */
    rs.n = 24, rs.b_layout = AGMM_LAYOUT_COL_MAJOR, rs.reserved[3] = 1;
    NOTE(agmm_plan_matmul_reduce_scatter(&p, ctx, &rs)); /* 3 */
    rs.reserved[3] = 0, rs.backend = "fancy";
    NOTE(agmm_plan_matmul_reduce_scatter(&p, ctx, &rs)); /* 4 */
    rs.backend = "auto", rs.m = 16, rs.n = 24, rs.k = 32;
    NOTE(agmm_plan_matmul_reduce_scatter(&p, ctx, &rs)); /* 5: auto, the static rule in the CPU world */
    snprintf(res->msg[5], sizeof res->msg[5], "chose %s", agmm_plan_backend(p));
    agmm_plan_destroy(p);
    p = NULL;
    ar.backend = "ce";
    NOTE(agmm_plan_matmul_all_reduce(&p, ctx, &ar)); /* 6: a reduce-scatter backend */
    ar.backend = "one_shot", ar.b_layout = (agmm_layout)5;
    NOTE(agmm_plan_matmul_all_reduce(&p, ctx, &ar)); /* 7 */
    ar.b_layout = AGMM_LAYOUT_COL_MAJOR;
    /* A good plan, then bad runs: no out on a rank that gets rows, reserved io, the wrong op. */
    agmm_plan *ok = NULL;
    rs.backend = "one_shot";
    NOTE(agmm_plan_matmul_reduce_scatter(&ok, ctx, &rs)); /* 8 */
    uint16_t *a = calloc(16 * 32, 2), *b = calloc(32 * 24, 2), *out = calloc(16 * 24, 2);
    agmm_matmul_reduce_scatter_io io = {.a = a, .b = b, .out = NULL};
    NOTE(agmm_matmul_reduce_scatter(ok, &io, NULL)); /* 9 */
    io.out = out, io.reserved[0] = out;
    NOTE(agmm_matmul_reduce_scatter(ok, &io, NULL)); /* 10 */
    agmm_matmul_all_reduce_io aio = {.a = a, .b = b, .c = out};
    NOTE(agmm_matmul_all_reduce(ok, &aio, NULL)); /* 11 */
    io.reserved[0] = NULL, io.out = a;
    NOTE(agmm_matmul_reduce_scatter(ok, &io, NULL)); /* 12: out overlaps A */
    io.out = (char *)out + 1;
    NOTE(agmm_matmul_reduce_scatter(ok, &io, NULL)); /* 13: out at an odd address */
    agmm_plan_destroy(ok);
    ar.backend = NULL, p = NULL;
    NOTE(agmm_plan_matmul_all_reduce(&p, ctx, &ar)); /* 14: auto (NULL), the static rule */
    snprintf(res->msg[14], sizeof res->msg[14], "chose %s", agmm_plan_backend(p));
    agmm_plan_destroy(p);
    free(a), free(b), free(out);
#undef NOTE
    return AGMM_SUCCESS;
}

void test_matmul_reduce_bad_args(void)
{
    agmm_world *world = test_cpu_world(2, 0);
    if (world == NULL)
        return;
    bad_result res[2];
    memset(res, 0, sizeof res);
    agmm_world_run(world, bad_rank, res);
    agmm_world_destroy(world);
    static const struct {
        int i;
        agmm_status st;
        const char *what, *needle;
    } want[] = {
        {0, AGMM_ERR_INVALID_ARG, "K=12", "K=12 is not a positive multiple of 8"},
        {1, AGMM_ERR_INVALID_ARG, "M=0", "M=0"},
        {2, AGMM_ERR_INVALID_ARG, "N=20 with a row-major B", "N=20 is not a multiple of 8"},
        {3, AGMM_ERR_INVALID_ARG, "reserved[3]=1", "matmul_reduce_scatter desc: the reserved tail is not zero"},
        {4, AGMM_ERR_INVALID_ARG, "backend=fancy", "matmul_reduce_scatter takes auto, nccl, ce, one_shot or fused"},
        {5, AGMM_SUCCESS, "matmul_reduce_scatter backend=auto in the CPU world: the static rule", "chose one_shot"},
        {14, AGMM_SUCCESS, "matmul_all_reduce backend=NULL in the CPU world: the static rule", "chose one_shot"},
        {6, AGMM_ERR_INVALID_ARG, "matmul_all_reduce backend=ce", "matmul_all_reduce takes auto, nccl, one_shot, two_shot or fused"},
        {7, AGMM_ERR_INVALID_ARG, "b_layout=5", "b_layout=5"},
        {8, AGMM_SUCCESS, "a good plan", ""},
        {9, AGMM_ERR_INVALID_ARG, "run with out=NULL on a rank that gets 8 rows", "out may be NULL only on a rank that gets no rows"},
        {10, AGMM_ERR_INVALID_ARG, "run with reserved io", "matmul_reduce_scatter io: the reserved tail is not zero"},
        {11, AGMM_ERR_INVALID_ARG, "run of a reduce-scatter plan with agmm_matmul_all_reduce", "run it with agmm_matmul_reduce_scatter"},
        {12, AGMM_ERR_INVALID_ARG, "run with out overlapping A", "overlaps io->a"},
        {13, AGMM_ERR_INVALID_ARG, "run with out at an odd address", "must be 2-byte aligned"},
    };
    for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
        int i = want[w].i;
        agmm_check(res[0].st[i] == want[w].st && res[1].st[i] == want[w].st && strstr(res[0].msg[i], want[w].needle) != NULL,
                   "row-parallel matmul checks: %s gives %s on every rank, naming \"%s\": \"%s\"", want[w].what,
                   agmm_status_str(res[0].st[i]), want[w].needle, res[0].msg[i]);
    }
}
