/* Every CPU-world backend against the fp64 reference (src/cpu/reference.h), over repeated runs
 * (epochs), and which backend `auto` picks. The backends come from the library's table
 * (agmm_backend_name): every one available in the CPU world is run; test_cpu_auto_backend checks
 * which those are.
 *
 * (The protocol tests, fused waits and timeouts, are in test_cpu_protocols.c.)
 *
 * Method: outputs poisoned before each run; every plan run 3 times in a row with
 * fresh inputs; small shapes with small-integer inputs compared bit for bit with the reference
 * rounded to bf16 (values in -2..2 and K <= 64 keep every partial sum an integer of magnitude
 * <= 256, exact in fp32 and in bf16); larger ones with uniform inputs within a stated relative
 * Frobenius error. Rank threads record what they saw; only the main thread prints checks. */
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "core/numeric.h"
#include "core/validate.h"
#include "cpu/cpu.h"
#include "cpu/reference.h"
#include "cpu_tests.h"
#include "harness.h"

#define TOL_BF16 1e-2
#define TOL_F32 1e-5
#define RUNS 3

/* ---- helpers shared with test_cpu_protocols.c (cpu_tests.h) ---- */

agmm_world *test_cpu_world(int nranks, double timeout_s)
{
    agmm_world_config cfg = {.kind = AGMM_WORLD_CPU, .nranks = nranks, .timeout_s = timeout_s};
    agmm_world *world = NULL;
    char err[256] = "";
    if (agmm_world_create(&world, &cfg, err, sizeof err) != AGMM_SUCCESS)
        agmm_check(0, "CPU world of %d ranks: %s", nranks, err);
    return world;
}

uint64_t test_seed_of(uint64_t base, int rank, int run, int what)
{
    uint64_t s = base * 0x100000001b3ull ^ ((uint64_t)rank << 24) ^ ((uint64_t)run << 16) ^ (uint64_t)what;
    return agmm_rng_next(&s);
}

/* bf16 values: small integers in -range..range (exact) or uniform in [-1, 1). */
void test_fill_bf16(uint16_t *x, int64_t count, uint64_t seed, int exact_range)
{
    for (int64_t i = 0; i < count; i++)
        x[i] = agmm_f32_to_bf16(exact_range ? (float)agmm_rng_small_int(&seed, exact_range) : agmm_rng_uniform(&seed));
}

static void fill_f32(float *x, int64_t count, uint64_t seed, int exact_range)
{
    for (int64_t i = 0; i < count; i++)
        x[i] = exact_range ? (float)agmm_rng_small_int(&seed, exact_range) : agmm_rng_uniform(&seed);
}

void test_poison_bf16(uint16_t *x, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        x[i] = AGMM_POISON_BF16;
}

static const char *layout_name(agmm_layout l) { return l == AGMM_LAYOUT_COL_MAJOR ? "col" : "row"; }

/* ---- the reference itself ---- */

void test_cpu_reference(void)
{
    /* A = [1 2 3; 4 5 6] (2 x 3), B = [1 0; 0 1; 1 1] (3 x 2) -> C = [4 5; 10 11]. K is 3 here:
     * the reference has no alignment rule. */
    uint16_t a[6], b_row[6], b_col[6], c16[4];
    const float av[6] = {1, 2, 3, 4, 5, 6}, bv[6] = {1, 0, 0, 1, 1, 1};
    for (int i = 0; i < 6; i++)
        a[i] = agmm_f32_to_bf16(av[i]), b_row[i] = agmm_f32_to_bf16(bv[i]);
    for (int kk = 0; kk < 3; kk++)
        for (int nn = 0; nn < 2; nn++)
            b_col[nn * 3 + kk] = b_row[kk * 2 + nn];
    double c[4], c2[4];
    agmm_status st = agmm_ref_gemm_bf16(a, b_row, AGMM_LAYOUT_ROW_MAJOR, 2, 2, 3, c, c16);
    agmm_status st2 = agmm_ref_gemm_bf16(a, b_col, AGMM_LAYOUT_COL_MAJOR, 2, 2, 3, c2, NULL);
    agmm_check(st == AGMM_SUCCESS && st2 == AGMM_SUCCESS && c[0] == 4 && c[1] == 5 && c[2] == 10 && c[3] == 11 &&
                   memcmp(c, c2, sizeof c) == 0 && agmm_bf16_to_f32(c16[3]) == 11.0f,
               "reference GEMM 2x3 * 3x2 = [4 5; 10 11] in both B layouts, and rounded to bf16");

    /* Rounding in one step: 1 + 2^-8 + 2^-30 is just above the tie between bf16 1.0 and 1 + 2^-7;
     * through float it would round to the tie and then to even (1.0). */
    double above_tie = 1.0 + 1.0 / 256 + 1.0 / (1 << 30);
    agmm_check(agmm_ref_f64_to_bf16(above_tie) == 0x3f81 && agmm_ref_f64_to_bf16(1.0 + 1.0 / 256) == 0x3f80 &&
                   agmm_ref_f64_to_bf16(-3.0) == 0xc040 && agmm_ref_f64_to_bf16(1e300) == 0x7f80,
               "reference f64->bf16: one rounding (1+2^-8+2^-30 -> 0x3f81, tie 1+2^-8 -> even 0x3f80), -3, overflow -> inf");

    uint16_t got[3] = {agmm_f32_to_bf16(1.0f), agmm_f32_to_bf16(2.0f), AGMM_POISON_BF16};
    double want[3] = {1.0, 2.0, 3.0};
    double fro_ok = agmm_ref_rel_frobenius(got, AGMM_DTYPE_BF16, want, 2);
    double fro_nan = agmm_ref_rel_frobenius(got, AGMM_DTYPE_BF16, want, 3);
    double maxabs = agmm_ref_max_abs_error(got, AGMM_DTYPE_BF16, want, 3);
    agmm_check(fro_ok == 0.0 && !(fro_nan <= TOL_BF16) && !(maxabs <= 1.0),
               "reference error measures: 0 when equal; a poisoned (NaN) element fails any tolerance");

    float x0[3] = {1, 2, 3}, x1[3] = {10, 20, 30};
    const void *ins[2] = {x0, x1};
    double sum[3];
    agmm_ref_all_reduce(ins, 2, 3, AGMM_DTYPE_F32, sum);
    uint16_t p[4] = {1, 2, 3, 4}, q[4] = {1, 2, 9, 4};
    agmm_check(sum[0] == 11 && sum[2] == 33 && agmm_ref_first_mismatch(p, q, 4, 2) == 2 &&
                   agmm_ref_first_mismatch(p, p, 4, 2) == -1,
               "reference all-reduce sums ranks; first_mismatch finds element 2");
}

/* ---- all-gather matmul ---- */

enum { MAX_NB = 8 };

/* The backends of `op` the table lists and `world` can run, in table order; returns how many. */
static int cpu_backends(const agmm_world *world, agmm_op op, const char **names)
{
    int nb = 0;
    for (int i = 0; agmm_backend_name(op, i) != NULL && nb < MAX_NB; i++)
        if (agmm_backend_available(world, op, agmm_backend_name(op, i), NULL, 0))
            names[nb++] = agmm_backend_name(op, i);
    return nb;
}

typedef struct {
    int nranks;
    int64_t m, n, k;
    int splits;
    agmm_layout layout;
    int exact;      /* 1: small integers, compared bit for bit; 0: uniform, within TOL_BF16 */
} mm_case;

typedef struct {
    agmm_status status;
    char msg[AGMM_ERROR_LEN];
    int runs;                 /* runs completed */
    int a_bad, c_bad, same_bad;
    double worst_err;
    char detail[200];         /* the first mismatch */
} mm_result;

typedef struct {
    mm_case c;
    uint64_t seed;
    int nb;
    const char *backends[MAX_NB];   /* backends[0] is the one the others must equal bit for bit */
    mm_result res[AGMM_MAX_RANKS][MAX_NB];
} mm_job;

static void note(char *detail, size_t len, const char *fmt, int run, int64_t idx, int64_t cols)
{
    if (detail[0] == '\0')
        snprintf(detail, len, fmt, run, (long long)(idx / cols), (long long)(idx % cols));
}

/* The data of one run, the same for every backend: all shards (= the gathered A), this rank's B
 * and the reference C. */
typedef struct {
    uint16_t *a, *b, *ref16;
    double *ref;
} mm_data;

static agmm_status mm_rank(agmm_ctx *ctx, void *arg)
{
    mm_job *job = arg;
    const mm_case *cs = &job->c;
    int rank = agmm_ctx_rank(ctx), nranks = cs->nranks;
    int64_t m = cs->m, n = cs->n, k = cs->k, rows = nranks * m;
    mm_result *res = job->res[rank];
    const int nb = job->nb;
    agmm_plan *plans[MAX_NB] = {0};

    mm_data data[RUNS] = {{0}};
    uint16_t *a_out = malloc(sizeof(uint16_t) * (size_t)(rows * k));
    uint16_t *c_out = malloc(sizeof(uint16_t) * (size_t)(rows * n));
    uint16_t *c_first[RUNS] = {0};
    int ok = a_out && c_out;
    for (int run = 0; run < RUNS; run++) {
        mm_data *dt = &data[run];
        dt->a = malloc(sizeof(uint16_t) * (size_t)(rows * k));
        dt->b = malloc(sizeof(uint16_t) * (size_t)(k * n));
        dt->ref16 = malloc(sizeof(uint16_t) * (size_t)(rows * n));
        dt->ref = malloc(sizeof(double) * (size_t)(rows * n));
        c_first[run] = malloc(sizeof(uint16_t) * (size_t)(rows * n));
        ok &= dt->a && dt->b && dt->ref16 && dt->ref && c_first[run];
        if (!ok)
            break;
        /* Fresh inputs per run: every shard (to know the gathered A) and this rank's own B. */
        for (int r = 0; r < nranks; r++)
            test_fill_bf16(dt->a + r * m * k, m * k, test_seed_of(job->seed, r, run, 1), cs->exact ? 2 : 0);
        test_fill_bf16(dt->b, k * n, test_seed_of(job->seed, rank, run, 2), cs->exact ? 2 : 0);
        ok &= agmm_ref_gemm_bf16(dt->a, dt->b, cs->layout, rows, n, k, dt->ref, dt->ref16) == AGMM_SUCCESS;
    }
    for (int bi = 0; bi < nb; bi++)
        res[bi].status = ok ? AGMM_SUCCESS : AGMM_ERR_NO_MEMORY;

    /* Collective: every rank creates the plans in the same order, even after a failure. */
    for (int bi = 0; bi < nb; bi++) {
        agmm_ag_matmul_desc d = {.m = m, .n = n, .k = k, .b_layout = cs->layout, .backend = job->backends[bi],
                                 .splits = cs->splits};
        agmm_status st = agmm_plan_ag_matmul(&plans[bi], ctx, &d);
        if (st != AGMM_SUCCESS) {
            res[bi].status = st;
            snprintf(res[bi].msg, sizeof res[bi].msg, "plan: %s", agmm_last_error(ctx));
            ok = 0;
        }
    }

    /* Each plan RUNS times back to back: the next input is written as soon as a run returns, so
     * a run that returned while a peer still read this rank's shard shows up (wrong A or C here,
     * a race under ThreadSanitizer). */
    for (int bi = 0; ok && bi < nb; bi++) {
        mm_result *rr = &res[bi];
        for (int run = 0; run < RUNS; run++) {
            const mm_data *dt = &data[run];
            memcpy(agmm_plan_input(plans[bi]), dt->a + rank * m * k, sizeof(uint16_t) * (size_t)(m * k));
            test_poison_bf16(a_out, rows * k);
            test_poison_bf16(c_out, rows * n);
            agmm_ag_matmul_io io = {.b = dt->b, .a_gathered = a_out, .c = c_out};
            agmm_status st = agmm_ag_matmul(plans[bi], &io, NULL);
            if (st != AGMM_SUCCESS) {
                rr->status = st;
                snprintf(rr->msg, sizeof rr->msg, "run %d: %s", run, agmm_last_error(ctx));
                ok = 0;
                break;
            }
            rr->runs++;
            int64_t bad = agmm_ref_first_mismatch(a_out, dt->a, rows * k, 2);
            if (bad >= 0) {
                rr->a_bad++;
                note(rr->detail, sizeof rr->detail, "run %d: gathered A differs at (%lld, %lld)", run, bad, k);
            }
            if (cs->exact) {
                bad = agmm_ref_first_mismatch(c_out, dt->ref16, rows * n, 2);
                if (bad >= 0) {
                    rr->c_bad++;
                    note(rr->detail, sizeof rr->detail, "run %d: C differs from the reference at (%lld, %lld)", run,
                         bad, n);
                }
            } else {
                double err = agmm_ref_rel_frobenius(c_out, AGMM_DTYPE_BF16, dt->ref, rows * n);
                if (!(err <= rr->worst_err))
                    rr->worst_err = err; /* NaN sticks */
                if (!(err <= TOL_BF16))
                    rr->c_bad++;
            }
            if (bi == 0) {
                memcpy(c_first[run], c_out, sizeof(uint16_t) * (size_t)(rows * n));
            } else if ((bad = agmm_ref_first_mismatch(c_out, c_first[run], rows * n, 2)) >= 0) {
                rr->same_bad++;
                char fmt[96];
                snprintf(fmt, sizeof fmt, "run %%d: C differs from %s's at (%%lld, %%lld)", job->backends[0]);
                note(rr->detail, sizeof rr->detail, fmt, run, bad, n);
            }
        }
    }
    for (int bi = 0; bi < nb; bi++)
        agmm_plan_destroy(plans[bi]);
    for (int run = 0; run < RUNS; run++) {
        free(data[run].a), free(data[run].b), free(data[run].ref16), free(data[run].ref);
        free(c_first[run]);
    }
    free(a_out), free(c_out);
    return AGMM_SUCCESS;
}

static void run_mm_case(const mm_case *cs, uint64_t seed)
{
    mm_job *job = calloc(1, sizeof *job);
    job->c = *cs;
    job->seed = seed;
    agmm_world *world = test_cpu_world(cs->nranks, 0);
    if (world) {
        job->nb = cpu_backends(world, AGMM_OP_AG_MATMUL, job->backends);
        if (job->nb == 0)
            agmm_check(0, "ag_matmul: the CPU world can run no backend of the table");
        agmm_world_run(world, mm_rank, job);
        agmm_world_destroy(world);
    }
    for (int bi = 0; bi < job->nb; bi++) {
        const char *name = job->backends[bi];
        agmm_status st = world ? AGMM_SUCCESS : AGMM_ERR_INTERNAL;
        const char *msg = "";
        int runs = RUNS, a_bad = 0, c_bad = 0, same_bad = 0;
        double worst = 0;
        const char *detail = "";
        for (int r = 0; r < cs->nranks; r++) {
            const mm_result *rr = &job->res[r][bi];
            if (rr->status != AGMM_SUCCESS && st == AGMM_SUCCESS)
                st = rr->status, msg = rr->msg;
            if (rr->runs < runs)
                runs = rr->runs;
            a_bad += rr->a_bad, c_bad += rr->c_bad, same_bad += rr->same_bad;
            if (!(rr->worst_err <= worst))
                worst = rr->worst_err;
            if (detail[0] == '\0' && rr->detail[0] != '\0')
                detail = rr->detail;
        }
        char shape[160], why[AGMM_ERROR_LEN + 40] = "";
        snprintf(shape, sizeof shape, "ag_matmul/%s W=%d M=%lld N=%lld K=%lld splits=%d B=%s", name, cs->nranks,
                 (long long)cs->m, (long long)cs->n, (long long)cs->k, cs->splits, layout_name(cs->layout));
        int ran = st == AGMM_SUCCESS && runs == RUNS;
        if (!ran)
            snprintf(why, sizeof why, ": %s: %s", agmm_status_str(st), msg);
        else if (detail[0])
            snprintf(why, sizeof why, ": %s", detail);
        agmm_check(ran && a_bad == 0, "%s gathered A exact (%d runs x %d ranks)%s", shape, RUNS, cs->nranks,
                   a_bad || !ran ? why : "");
        char same[64] = "";
        if (bi)
            snprintf(same, sizeof same, "%s bit-equal to %s", cs->exact ? " and" : ",", job->backends[0]);
        if (cs->exact)
            agmm_check(ran && c_bad == 0 && same_bad == 0, "%s exact vs fp64 reference%s (%d runs x %d ranks)%s",
                       shape, same, RUNS, cs->nranks, why);
        else
            agmm_check(ran && c_bad == 0 && same_bad == 0 && worst <= TOL_BF16,
                       "%s rel_fro=%.1e <= %.0e vs fp64 reference%s (%d runs x %d ranks)%s", shape, worst, TOL_BF16,
                       same, RUNS, cs->nranks, why);
    }
    free(job);
}

void test_cpu_ag_matmul_exact(void)
{
    static const mm_case fixed[] = {
        {1, 1, 1, 8, 1, AGMM_LAYOUT_COL_MAJOR, 1},    {1, 70, 72, 64, 3, AGMM_LAYOUT_ROW_MAJOR, 1},
        {3, 7, 9, 16, 3, AGMM_LAYOUT_COL_MAJOR, 1},   {3, 33, 100, 24, 2, AGMM_LAYOUT_COL_MAJOR, 1},
        {5, 1, 1, 8, 1, AGMM_LAYOUT_COL_MAJOR, 1},    {5, 130, 72, 64, 3, AGMM_LAYOUT_ROW_MAJOR, 1},
        {8, 17, 33, 40, 2, AGMM_LAYOUT_COL_MAJOR, 1}, {8, 64, 64, 64, 1, AGMM_LAYOUT_ROW_MAJOR, 1},
        {2, 100, 130, 48, 3, AGMM_LAYOUT_COL_MAJOR, 1},
        /* With those above, every W from 1 to 8: odd M and N, K an odd multiple of 8. */
        {4, 45, 77, 56, 4, AGMM_LAYOUT_COL_MAJOR, 1}, {6, 21, 19, 40, 5, AGMM_LAYOUT_COL_MAJOR, 1},
        {7, 13, 40, 24, 2, AGMM_LAYOUT_ROW_MAJOR, 1},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        run_mm_case(&fixed[i], 1000 + i);

    /* Random shapes: W in {1, 3, 5, 8}, M and N up to 150 (row-major N a multiple of 8). */
    static const int ws[] = {1, 3, 5, 8};
    uint64_t rng = 0xa11ea7;
    for (int i = 0; i < 6; i++) {
        mm_case c = {.exact = 1};
        c.nranks = ws[agmm_rng_next(&rng) % 4];
        c.m = 1 + (int64_t)(agmm_rng_next(&rng) % 150);
        c.n = 1 + (int64_t)(agmm_rng_next(&rng) % 150);
        c.k = 8 * (1 + (int64_t)(agmm_rng_next(&rng) % 8));
        c.layout = agmm_rng_next(&rng) % 2 ? AGMM_LAYOUT_ROW_MAJOR : AGMM_LAYOUT_COL_MAJOR;
        if (c.layout == AGMM_LAYOUT_ROW_MAJOR)
            c.n = (c.n + 7) / 8 * 8;
        c.splits = 1 + (int)(agmm_rng_next(&rng) % (uint64_t)(c.m < 3 ? c.m : 3));
        run_mm_case(&c, 2000 + (uint64_t)i);
    }
}

void test_cpu_ag_matmul_random(void)
{
    static const mm_case cases[] = {
        {4, 96, 200, 256, 2, AGMM_LAYOUT_COL_MAJOR, 0},
        {3, 150, 136, 384, 3, AGMM_LAYOUT_ROW_MAJOR, 0},
        {2, 257, 96, 128, 1, AGMM_LAYOUT_COL_MAJOR, 0},
        {8, 40, 70, 192, 2, AGMM_LAYOUT_COL_MAJOR, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        run_mm_case(&cases[i], 3000 + i);
}

/* ---- all-reduce ---- */

enum { AR_MAX_CONFIGS = MAX_NB * 2 * 2 * 5 };

typedef struct {
    const char *backend;
    agmm_dtype dtype;
    int in_place;
    int64_t n;
} ar_config;

typedef struct {
    agmm_status status;
    char msg[AGMM_ERROR_LEN];
    int runs;
    int exact_bad;            /* run 0 (small integers) not bit-equal to the reference */
    double worst_err;         /* runs 1.. (uniform), rel. Frobenius */
    uint64_t hash[RUNS];      /* of the output bits */
} ar_result;

typedef struct {
    int nranks;
    int nconfigs;
    ar_config cfg[AR_MAX_CONFIGS];
    ar_result res[AGMM_MAX_RANKS][AR_MAX_CONFIGS];
} ar_job;

static uint64_t fnv(const void *p, size_t bytes)
{
    const unsigned char *c = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

static void ar_one(agmm_ctx *ctx, const ar_job *job, int ci, ar_result *res)
{
    const ar_config *cf = &job->cfg[ci];
    int rank = agmm_ctx_rank(ctx), nranks = job->nranks;
    size_t es = agmm_dtype_bytes(cf->dtype), bytes = (size_t)cf->n * es;
    agmm_plan *plan = NULL;
    agmm_all_reduce_desc d = {.n = cf->n, .dtype = cf->dtype, .backend = cf->backend};
    res->status = agmm_plan_all_reduce(&plan, ctx, &d);
    if (res->status != AGMM_SUCCESS) {
        snprintf(res->msg, sizeof res->msg, "plan: %s", agmm_last_error(ctx));
        return;
    }
    void *ins[AGMM_MAX_RANKS] = {0};
    for (int r = 0; r < nranks; r++)
        ins[r] = malloc(bytes);
    void *out = cf->in_place ? agmm_plan_input(plan) : malloc(bytes);
    void *want = malloc(bytes);
    double *ref = malloc(sizeof(double) * (size_t)cf->n);
    for (int run = 0; run < RUNS; run++) {
        int exact = run == 0 ? 8 : 0; /* |sum| <= 64: exact in bf16 and fp32 */
        for (int r = 0; r < nranks; r++) {
            uint64_t seed = test_seed_of((uint64_t)ci * 131 + (uint64_t)nranks, r, run, 3);
            if (cf->dtype == AGMM_DTYPE_F32)
                fill_f32(ins[r], cf->n, seed, exact);
            else
                test_fill_bf16(ins[r], cf->n, seed, exact);
        }
        agmm_ref_all_reduce((const void *const *)ins, nranks, cf->n, cf->dtype, ref);
        memcpy(agmm_plan_input(plan), ins[rank], bytes);
        if (!cf->in_place && cf->dtype == AGMM_DTYPE_BF16)
            test_poison_bf16(out, cf->n);
        else if (!cf->in_place)
            memset(out, 0xff, bytes); /* an fp32 NaN */
        agmm_all_reduce_io io = {.out = out};
        agmm_status st = agmm_all_reduce(plan, &io, NULL);
        if (st != AGMM_SUCCESS) {
            res->status = st;
            snprintf(res->msg, sizeof res->msg, "run %d: %s", run, agmm_last_error(ctx));
            break;
        }
        res->runs++;
        res->hash[run] = fnv(out, bytes);
        if (exact) {
            for (int64_t i = 0; i < cf->n; i++) {
                if (cf->dtype == AGMM_DTYPE_F32)
                    ((float *)want)[i] = agmm_ref_f64_to_f32(ref[i]);
                else
                    ((uint16_t *)want)[i] = agmm_ref_f64_to_bf16(ref[i]);
            }
            res->exact_bad += agmm_ref_first_mismatch(out, want, cf->n, es) >= 0;
        } else {
            double err = agmm_ref_rel_frobenius(out, cf->dtype, ref, cf->n);
            if (!(err <= res->worst_err))
                res->worst_err = err;
        }
    }
    agmm_plan_destroy(plan);
    for (int r = 0; r < nranks; r++)
        free(ins[r]);
    if (!cf->in_place)
        free(out);
    free(want);
    free(ref);
}

static agmm_status ar_rank(agmm_ctx *ctx, void *arg)
{
    ar_job *job = arg;
    for (int ci = 0; ci < job->nconfigs; ci++)
        ar_one(ctx, job, ci, &job->res[agmm_ctx_rank(ctx)][ci]);
    return AGMM_SUCCESS;
}

void test_cpu_all_reduce(void)
{
    static const int ws[] = {1, 3, 5, 8};
    for (size_t wi = 0; wi < sizeof ws / sizeof *ws; wi++) {
        ar_job *job = calloc(1, sizeof *job);
        job->nranks = ws[wi];
        int64_t ns[5] = {1, 7, 4093, 16387, ws[wi] - 1};
        int nn = ws[wi] >= 3 ? 5 : 4; /* n = W-1 < W, n > 1 */
        agmm_world *world = test_cpu_world(job->nranks, 0);
        if (world) {
            const char *backends[MAX_NB];
            int nb = cpu_backends(world, AGMM_OP_ALL_REDUCE, backends);
            if (nb == 0)
                agmm_check(0, "all_reduce: the CPU world can run no backend of the table");
            for (int bi = 0; bi < nb; bi++)
                for (int dt = 0; dt < 2; dt++)
                    for (int ip = 0; ip < 2; ip++)
                        for (int ni = 0; ni < nn; ni++)
                            job->cfg[job->nconfigs++] = (ar_config){backends[bi], dt ? AGMM_DTYPE_F32 : AGMM_DTYPE_BF16,
                                                                    ip, ns[ni]};
            agmm_world_run(world, ar_rank, job);
            agmm_world_destroy(world);
        }
        for (int ci = 0; ci < job->nconfigs; ci++) {
            const ar_config *cf = &job->cfg[ci];
            double tol = cf->dtype == AGMM_DTYPE_F32 ? TOL_F32 : TOL_BF16;
            int ok = world != NULL, equal = 1, exact_bad = 0;
            double worst = 0;
            const char *msg = "";
            for (int r = 0; r < job->nranks; r++) {
                const ar_result *rr = &job->res[r][ci];
                if (rr->status != AGMM_SUCCESS || rr->runs != RUNS) {
                    ok = 0;
                    if (msg[0] == '\0')
                        msg = rr->msg;
                }
                exact_bad += rr->exact_bad;
                if (!(rr->worst_err <= worst))
                    worst = rr->worst_err;
                for (int run = 0; run < RUNS; run++)
                    equal &= rr->hash[run] == job->res[0][ci].hash[run];
            }
            agmm_check(ok && exact_bad == 0 && worst <= tol && equal,
                       "all_reduce/%s W=%d n=%lld %s %s: exact on small integers, rel_fro=%.1e <= %.0e on uniform, "
                       "every rank bitwise equal (%d runs)%s%s",
                       cf->backend, job->nranks, (long long)cf->n, agmm_dtype_name(cf->dtype),
                       cf->in_place ? "in-place" : "out-of-place", worst, tol, RUNS, msg[0] ? ": " : "", msg);
        }
        free(job);
    }
}

/* ---- auto and unavailable backends ---- */

typedef struct {
    char mm[32], ar[32];   /* agmm_plan_backend of the auto plans ("" if planning failed) */
    agmm_status plain_status;
    char plain_msg[AGMM_ERROR_LEN];
} auto_result;

static agmm_status auto_rank(agmm_ctx *ctx, void *arg)
{
    auto_result *res = (auto_result *)arg + agmm_ctx_rank(ctx);
    agmm_plan *mm = NULL, *ar = NULL, *plain = NULL;
    agmm_ag_matmul_desc md = {.m = 8, .n = 8, .k = 8, .backend = NULL};
    agmm_all_reduce_desc ad = {.n = 8, .dtype = AGMM_DTYPE_BF16, .backend = "auto"};
    if (agmm_plan_ag_matmul(&mm, ctx, &md) == AGMM_SUCCESS)
        snprintf(res->mm, sizeof res->mm, "%s", agmm_plan_backend(mm));
    if (agmm_plan_all_reduce(&ar, ctx, &ad) == AGMM_SUCCESS)
        snprintf(res->ar, sizeof res->ar, "%s", agmm_plan_backend(ar));
    ad.backend = "nccl_plain";
    res->plain_status = agmm_plan_all_reduce(&plain, ctx, &ad);
    snprintf(res->plain_msg, sizeof res->plain_msg, "%s", agmm_last_error(ctx));
    agmm_plan_destroy(plain);
    agmm_plan_destroy(ar);
    agmm_plan_destroy(mm);
    return AGMM_SUCCESS;
}

/* "nccl ce fused": the backends of op the CPU world runs (what the tests above run). */
static void cpu_list(const agmm_world *world, agmm_op op, char *buf, size_t len)
{
    const char *names[MAX_NB];
    int nb = cpu_backends(world, op, names);
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < nb && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? " " : "", names[i]);
}

void test_cpu_auto_backend(void)
{
    agmm_world *world = test_cpu_world(2, 0);
    if (world == NULL)
        return;
    auto_result res[2] = {0};
    agmm_world_run(world, auto_rank, res);
    char mm_list[128], ar_list[128];
    cpu_list(world, AGMM_OP_AG_MATMUL, mm_list, sizeof mm_list);
    cpu_list(world, AGMM_OP_ALL_REDUCE, ar_list, sizeof ar_list);
    agmm_check(strcmp(mm_list, "nccl ce fused pull") == 0 && strcmp(ar_list, "nccl one_shot two_shot") == 0 &&
                   !agmm_backend_available(world, AGMM_OP_ALL_REDUCE, "nccl_plain", NULL, 0),
               "CPU world runs ag_matmul \"%s\" (want \"nccl ce fused pull\") and all_reduce \"%s\" (want \"nccl "
               "one_shot two_shot\"): the backends tested above; nccl_plain not available",
               mm_list, ar_list);
    agmm_world_destroy(world);
    agmm_check(strcmp(res[0].mm, "ce") == 0 && strcmp(res[1].mm, "ce") == 0 && strcmp(res[0].ar, "one_shot") == 0 &&
                   strcmp(res[1].ar, "one_shot") == 0,
               "CPU world W=2: auto resolves to ag_matmul/%s and all_reduce/%s on every rank (want ce, one_shot)",
               res[0].mm, res[0].ar);
    agmm_check(res[0].plain_status == AGMM_ERR_UNSUPPORTED && strstr(res[0].plain_msg, "nccl_plain") != NULL &&
                   res[1].plain_status == AGMM_ERR_UNSUPPORTED,
               "CPU world: all_reduce/nccl_plain gives %s: \"%s\"", agmm_status_str(res[0].plain_status),
               res[0].plain_msg);
}
