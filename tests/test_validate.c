/* Argument validation (src/core/validate.c, src/api): every bad argument gives AGMM_ERR_INVALID_ARG
 * and a message that names the argument, directly and through the public plan API; reserved tails
 * must be zero; a run with the wrong operation's function, no io or a bad io is refused before
 * anything moves. (Backend names are the plan API's business: test_backends.c.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "core/numeric.h"
#include "core/validate.h"
#include "cpu/reference.h"
#include "world/world.h"
#include "cpu_tests.h"
#include "harness.h"

static agmm_ag_matmul_desc good_mm(void)
{
    return (agmm_ag_matmul_desc){.m = 640, .n = 384, .k = 256, .b_layout = AGMM_LAYOUT_COL_MAJOR,
                                 .backend = "fused", .splits = 2};
}

static void expect_mm(const char *what, agmm_ag_matmul_desc d, int nranks, const char *needle)
{
    agmm_error err = {0};
    agmm_status st = agmm_check_ag_matmul(&d, nranks, &err);
    agmm_check(st == AGMM_ERR_INVALID_ARG && err.status == AGMM_ERR_INVALID_ARG && strstr(err.msg, needle) != NULL,
               "validate ag_matmul %s: %s, message names \"%s\": \"%s\"", what, agmm_status_str(st), needle, err.msg);
}

static void expect_ar(const char *what, agmm_all_reduce_desc d, const char *needle)
{
    agmm_error err = {0};
    agmm_status st = agmm_check_all_reduce(&d, &err);
    agmm_check(st == AGMM_ERR_INVALID_ARG && strstr(err.msg, needle) != NULL,
               "validate all_reduce %s: %s, message names \"%s\": \"%s\"", what, agmm_status_str(st), needle, err.msg);
}

void test_validate_ag_matmul(void)
{
    agmm_error err = {0};
    agmm_ag_matmul_desc d = good_mm();
    agmm_check(agmm_check_ag_matmul(&d, 8, &err) == AGMM_SUCCESS && err.msg[0] == '\0',
               "validate ag_matmul W=8 M=640 N=384 K=256 splits=2: accepted");
    d.m = 1, d.n = 1, d.k = 8, d.splits = 0, d.backend = NULL;
    agmm_check(agmm_check_ag_matmul(&d, 1, &err) == AGMM_SUCCESS, "validate ag_matmul M=1 N=1 K=8 splits=0 auto: accepted");

    d = good_mm(), d.k = 100;
    expect_mm("K=100 (K % 8 != 0)", d, 4, "K=100 is not a multiple of 8");
    d = good_mm(), d.k = 0;
    expect_mm("K=0", d, 4, "K=0");
    d = good_mm(), d.m = 0;
    expect_mm("M=0", d, 4, "M=0");
    d = good_mm(), d.m = -5;
    expect_mm("M=-5", d, 4, "M=-5");
    d = good_mm(), d.n = -3;
    expect_mm("N=-3", d, 4, "N=-3");
    d = good_mm(), d.n = 100, d.b_layout = AGMM_LAYOUT_ROW_MAJOR;
    expect_mm("N=100 with row-major B", d, 4, "N=100 is not a multiple of 8");
    d = good_mm(), d.m = (int64_t)1 << 30, d.k = (int64_t)1 << 12, d.splits = 1;
    expect_mm("overflow W*M*K > 2^40", d, 8, "exceed 2^40");
    d = good_mm(), d.n = (int64_t)1 << 30, d.k = (int64_t)1 << 12;
    expect_mm("overflow K*N > 2^40", d, 1, "exceed 2^40");
    d = good_mm(), d.m = INT64_MAX / 2;
    expect_mm("overflow W*M", d, 8, "exceed 2^40");
    d = good_mm(), d.b_layout = (agmm_layout)7;
    expect_mm("b_layout=7", d, 4, "b_layout=7");
    d = good_mm(), d.m = 3, d.splits = 4;
    expect_mm("splits=4 > M=3", d, 4, "splits=4");
    d = good_mm(), d.splits = -1;
    expect_mm("splits=-1", d, 4, "splits=-1");
    d = good_mm(), d.reserved[0] = 1;
    expect_mm("reserved[0]=1", d, 4, "ag_matmul desc: the reserved tail is not zero (byte 0)");
    d = good_mm(), d.reserved[7] = (int64_t)1 << 56;
    expect_mm("reserved[7]=2^56", d, 4, "ag_matmul desc: the reserved tail is not zero");
    /* Backend names are resolved by the plan API (test_backends.c), not here. */
    d = good_mm(), d.backend = "one_shot";
    err = (agmm_error){0};
    agmm_check(agmm_check_ag_matmul(&d, 4, &err) == AGMM_SUCCESS,
               "validate ag_matmul backend=one_shot (an all_reduce backend): accepted by the shape check (\"%s\"); "
               "the plan API refuses it", err.msg);
    err = (agmm_error){0};
    agmm_check(agmm_check_ag_matmul(NULL, 4, &err) == AGMM_ERR_INVALID_ARG && strstr(err.msg, "desc") != NULL,
               "validate ag_matmul desc=NULL: message names desc: \"%s\"", err.msg);
}

void test_validate_all_reduce(void)
{
    agmm_error err = {0};
    agmm_all_reduce_desc d = {.n = 4093, .dtype = AGMM_DTYPE_BF16, .backend = "two_shot"};
    agmm_check(agmm_check_all_reduce(&d, &err) == AGMM_SUCCESS, "validate all_reduce n=4093 bf16 two_shot: accepted");
    expect_ar("n=0", (agmm_all_reduce_desc){.n = 0}, "n=0");
    expect_ar("n=-1", (agmm_all_reduce_desc){.n = -1}, "n=-1");
    expect_ar("n=2^41", (agmm_all_reduce_desc){.n = (int64_t)1 << 41}, "n=2199023255552");
    expect_ar("dtype=5", (agmm_all_reduce_desc){.n = 8, .dtype = (agmm_dtype)5}, "dtype=5");
    expect_ar("reserved[0]=1", (agmm_all_reduce_desc){.n = 8, .reserved = {1}}, "all_reduce desc: the reserved tail is not zero");
    expect_ar("reserved[7]=-1", (agmm_all_reduce_desc){.n = 8, .reserved = {[7] = -1}},
              "all_reduce desc: the reserved tail is not zero");
}

typedef struct {
    agmm_status mm_status, ar_status;
    char mm_msg[AGMM_ERROR_LEN], ar_msg[AGMM_ERROR_LEN];
    int plan_null;
    agmm_status null_out_status;
    char null_out_msg[AGMM_ERROR_LEN];
    agmm_status mm_tail_status, ar_tail_status;
    char mm_tail_msg[AGMM_ERROR_LEN], ar_tail_msg[AGMM_ERROR_LEN];
    int tail_plan_null;
} api_result;

static agmm_status api_rank(agmm_ctx *ctx, void *arg)
{
    api_result *res = (api_result *)arg + agmm_ctx_rank(ctx);
    agmm_ag_matmul_desc mm = good_mm();
    mm.k = 100;
    static char sentinel; /* plan starts non-NULL: a failed create must set it to NULL */
    agmm_plan *plan = (agmm_plan *)(void *)&sentinel;
    res->mm_status = agmm_plan_ag_matmul(&plan, ctx, &mm);
    res->plan_null = plan == NULL;
    snprintf(res->mm_msg, sizeof res->mm_msg, "%s", agmm_last_error(ctx));
    agmm_all_reduce_desc ar = {.n = 0, .dtype = AGMM_DTYPE_F32, .backend = "one_shot"};
    res->ar_status = agmm_plan_all_reduce(&plan, ctx, &ar);
    res->plan_null &= plan == NULL;
    snprintf(res->ar_msg, sizeof res->ar_msg, "%s", agmm_last_error(ctx));
    /* No plan pointer: refused before anything collective, and agmm_last_error says so. */
    res->null_out_status = agmm_plan_ag_matmul(NULL, ctx, &mm);
    snprintf(res->null_out_msg, sizeof res->null_out_msg, "%s", agmm_last_error(ctx));
    /* Good descriptors but for a non-zero reserved tail (a program built against a newer header). */
    mm = good_mm();
    mm.reserved[5] = 1;
    plan = (agmm_plan *)(void *)&sentinel;
    res->mm_tail_status = agmm_plan_ag_matmul(&plan, ctx, &mm);
    res->tail_plan_null = plan == NULL;
    snprintf(res->mm_tail_msg, sizeof res->mm_tail_msg, "%s", agmm_last_error(ctx));
    ar = (agmm_all_reduce_desc){.n = 64, .dtype = AGMM_DTYPE_F32, .backend = "one_shot", .reserved = {[2] = 1}};
    plan = (agmm_plan *)(void *)&sentinel;
    res->ar_tail_status = agmm_plan_all_reduce(&plan, ctx, &ar);
    res->tail_plan_null &= plan == NULL;
    snprintf(res->ar_tail_msg, sizeof res->ar_tail_msg, "%s", agmm_last_error(ctx));
    return AGMM_SUCCESS;
}

void test_validate_plan_api(void)
{
    agmm_world_config cfg = {.kind = AGMM_WORLD_CPU, .nranks = 2};
    agmm_world *world = NULL;
    char err[256] = "";
    agmm_status st = agmm_world_create(&world, &cfg, err, sizeof err);
    if (!agmm_check(st == AGMM_SUCCESS, "validate: CPU world of 2 ranks created (%s)", err))
        return;
    api_result res[2] = {0};
    st = agmm_world_run(world, api_rank, res);
    agmm_world_destroy(world);
    int ok = st == AGMM_SUCCESS;
    for (int r = 0; r < 2; r++)
        ok &= res[r].mm_status == AGMM_ERR_INVALID_ARG && strstr(res[r].mm_msg, "K=100") != NULL &&
              res[r].ar_status == AGMM_ERR_INVALID_ARG && strstr(res[r].ar_msg, "n=0") != NULL && res[r].plan_null;
    agmm_check(ok, "validate plan API W=2: agmm_plan_ag_matmul K=100 and agmm_plan_all_reduce n=0 give %s, plan NULL, "
                   "agmm_last_error \"%s\" / \"%s\"",
               agmm_status_str(res[0].mm_status), res[0].mm_msg, res[0].ar_msg);
    ok = st == AGMM_SUCCESS;
    for (int r = 0; r < 2; r++)
        ok &= res[r].null_out_status == AGMM_ERR_INVALID_ARG && strstr(res[r].null_out_msg, "plan is NULL") != NULL;
    agmm_check(ok, "validate plan API: agmm_plan_ag_matmul(NULL, ...) gives %s, agmm_last_error \"%s\"",
               agmm_status_str(res[0].null_out_status), res[0].null_out_msg);
    ok = st == AGMM_SUCCESS;
    for (int r = 0; r < 2; r++)
        ok &= res[r].mm_tail_status == AGMM_ERR_INVALID_ARG && strstr(res[r].mm_tail_msg, "ag_matmul desc: the reserved tail") &&
              res[r].ar_tail_status == AGMM_ERR_INVALID_ARG && strstr(res[r].ar_tail_msg, "all_reduce desc: the reserved tail") &&
              res[r].tail_plan_null;
    agmm_check(ok, "validate plan API W=2: descriptors with a non-zero reserved tail give %s / %s, plan NULL: \"%s\" / \"%s\"",
               agmm_status_str(res[0].mm_tail_status), agmm_status_str(res[0].ar_tail_status), res[0].mm_tail_msg,
               res[0].ar_tail_msg);

    cfg.nranks = AGMM_MAX_RANKS + 1;
    err[0] = '\0';
    st = agmm_world_create(&world, &cfg, err, sizeof err);
    agmm_check(st == AGMM_ERR_INVALID_ARG && world == NULL && strstr(err, "nranks=65") != NULL,
               "validate world nranks=65: %s, \"%s\"", agmm_status_str(st), err);

    /* A timeout beyond a day would overflow the waits' nanosecond deadlines; NaN and infinity bound
     * nothing. The join checks it the same way, before it looks for peers. */
    const double bad_timeouts[] = {-1, 0.0005, 86401, 1e10, 1e300, INFINITY, NAN};
    for (size_t i = 0; i < sizeof bad_timeouts / sizeof *bad_timeouts; i++) {
        cfg = (agmm_world_config){.kind = AGMM_WORLD_CPU, .nranks = 2, .timeout_s = bad_timeouts[i]};
        err[0] = '\0';
        st = agmm_world_create(&world, &cfg, err, sizeof err);
        agmm_check(st == AGMM_ERR_INVALID_ARG && world == NULL && strstr(err, "timeout_s=") && strstr(err, "86400"),
                   "validate world timeout_s=%g: %s, \"%s\"", bad_timeouts[i], agmm_status_str(st), err);
        if (st == AGMM_SUCCESS)
            agmm_world_destroy(world);
        agmm_join_config jc = {.kind = AGMM_WORLD_CPU, .rank = 0, .nranks = 1, .device = -1,
                               .timeout_s = bad_timeouts[i]};
        err[0] = '\0';
        st = agmm_world_join(&world, &jc, err, sizeof err);
        agmm_check(st == AGMM_ERR_INVALID_ARG && world == NULL && strstr(err, "timeout_s="),
                   "validate join timeout_s=%g: %s, \"%s\"", bad_timeouts[i], agmm_status_str(st), err);
        if (st == AGMM_SUCCESS)
            agmm_world_destroy(world);
    }
    cfg = (agmm_world_config){.kind = AGMM_WORLD_CPU, .nranks = 2, .timeout_s = 86400};
    st = agmm_world_create(&world, &cfg, err, sizeof err);
    agmm_check(st == AGMM_SUCCESS, "validate world timeout_s=86400 (a day) is allowed: %s, \"%s\"",
               agmm_status_str(st), st == AGMM_SUCCESS ? "" : err);
    if (st == AGMM_SUCCESS)
        agmm_world_destroy(world);

    for (int i = 0; i < 2; i++) {
        cfg = (agmm_world_config){.kind = AGMM_WORLD_CPU, .nranks = 2};
        cfg.reserved[i ? 10 : 0] = i ? -1 : 1;
        err[0] = '\0';
        world = (agmm_world *)(void *)err; /* must come back NULL */
        st = agmm_world_create(&world, &cfg, err, sizeof err);
        agmm_check(st == AGMM_ERR_INVALID_ARG && world == NULL && strstr(err, "world config: the reserved tail is not zero"),
                   "validate world config reserved[%d]=%d: %s, world NULL, \"%s\"", i ? 10 : 0, i ? -1 : 1,
                   agmm_status_str(st), err);
        if (st == AGMM_SUCCESS)
            agmm_world_destroy(world);
    }
}

/* Bad io is refused before the run's epoch moves: the same plan then runs correctly. */
typedef struct {
    agmm_status overlap_status, null_status, good_status;
    char overlap_msg[AGMM_ERROR_LEN];
    float sum0;
} io_result;

static agmm_status io_rank(agmm_ctx *ctx, void *arg)
{
    io_result *res = (io_result *)arg + agmm_ctx_rank(ctx);
    agmm_all_reduce_desc d = {.n = 64, .dtype = AGMM_DTYPE_F32, .backend = "one_shot"};
    agmm_plan *plan = NULL;
    if (agmm_plan_all_reduce(&plan, ctx, &d) != AGMM_SUCCESS)
        return AGMM_ERR_INTERNAL;
    float *in = agmm_plan_input(plan);
    for (int i = 0; i < 64; i++)
        in[i] = (float)(agmm_ctx_rank(ctx) + 1);
    agmm_all_reduce_io overlap = {.out = in + 3};
    res->overlap_status = agmm_all_reduce(plan, &overlap, NULL);
    snprintf(res->overlap_msg, sizeof res->overlap_msg, "%s", agmm_last_error(ctx));
    agmm_all_reduce_io none = {0};
    res->null_status = agmm_all_reduce(plan, &none, NULL);
    float out[64];
    agmm_all_reduce_io good = {.out = out};
    res->good_status = agmm_all_reduce(plan, &good, NULL);
    res->sum0 = out[0];
    agmm_plan_destroy(plan);
    return AGMM_SUCCESS;
}

void test_validate_run_io(void)
{
    agmm_world *world = test_cpu_world(2, 1.0);
    if (world == NULL)
        return;
    io_result res[2] = {0};
    agmm_status st = agmm_world_run(world, io_rank, res);
    agmm_world_destroy(world);
    int ok = st == AGMM_SUCCESS;
    for (int r = 0; r < 2; r++)
        ok &= res[r].overlap_status == AGMM_ERR_INVALID_ARG && strstr(res[r].overlap_msg, "io->out") != NULL &&
              res[r].null_status == AGMM_ERR_INVALID_ARG && res[r].good_status == AGMM_SUCCESS && res[r].sum0 == 3.0f;
    agmm_check(ok, "validate run io W=2: io->out overlapping the input -> %s (\"%s\"), io->out NULL -> %s, then a good "
                   "run on the same plan -> %s with sum %g (want 3: the refused calls did not move the epoch)",
               agmm_status_str(res[0].overlap_status), res[0].overlap_msg, agmm_status_str(res[0].null_status),
               agmm_status_str(res[0].good_status), (double)res[0].sum0);
}

/* ag_matmul's outputs must not overlap each other, B or the input: each overlap is refused naming
 * both buffers, before the epoch moves; then the same plan gathers and multiplies exactly. */
enum { MM_IO_M = 3, MM_IO_N = 8, MM_IO_K = 8, MM_IO_W = 2, MM_IO_CASES = 3 };

typedef struct {
    agmm_status status[MM_IO_CASES], good_status;
    char msg[MM_IO_CASES][AGMM_ERROR_LEN];
    int64_t a_wrong, c_wrong;
} mm_io_result;

static void mm_io_fill(uint16_t *shard, uint16_t *b, int rank)
{
    test_fill_bf16(shard, MM_IO_M * MM_IO_K, 700 + (uint64_t)rank, 4);
    test_fill_bf16(b, MM_IO_K * MM_IO_N, 799, 4); /* the same B on every rank */
}

static agmm_status mm_io_rank(agmm_ctx *ctx, void *arg)
{
    const int rank = agmm_ctx_rank(ctx);
    mm_io_result *res = (mm_io_result *)arg + rank;
    agmm_ag_matmul_desc d = {.m = MM_IO_M, .n = MM_IO_N, .k = MM_IO_K, .backend = "ce"};
    agmm_plan *plan = NULL;
    if (agmm_plan_ag_matmul(&plan, ctx, &d) != AGMM_SUCCESS)
        return AGMM_ERR_INTERNAL;
    enum { ROWS = MM_IO_W * MM_IO_M };
    uint16_t shards[MM_IO_W][MM_IO_M * MM_IO_K], b[MM_IO_K * MM_IO_N], ag[ROWS * MM_IO_K], c[ROWS * MM_IO_N];
    for (int r = 0; r < MM_IO_W; r++)
        mm_io_fill(shards[r], b, r);
    memcpy(agmm_plan_input(plan), shards[rank], sizeof shards[rank]);
    const agmm_ag_matmul_io bad[MM_IO_CASES] = {
        {.b = b, .a_gathered = c, .c = c},                      /* the two outputs in one buffer */
        {.b = b, .a_gathered = ag, .c = b + 8},                 /* C over B */
        {.b = b, .a_gathered = agmm_plan_input(plan), .c = c},  /* the gathered A over the input */
    };
    for (int i = 0; i < MM_IO_CASES; i++) {
        res->status[i] = agmm_ag_matmul(plan, &bad[i], NULL);
        snprintf(res->msg[i], sizeof res->msg[i], "%s", agmm_last_error(ctx));
    }
    test_poison_bf16(ag, ROWS * MM_IO_K);
    test_poison_bf16(c, ROWS * MM_IO_N);
    res->good_status = agmm_ag_matmul(plan, &(agmm_ag_matmul_io){.b = b, .a_gathered = ag, .c = c}, NULL);
    for (int i = 0; i < ROWS; i++)
        for (int j = 0; j < MM_IO_N; j++) {
            double sum = 0; /* small integers: exact in fp32 and bf16 */
            for (int k = 0; k < MM_IO_K; k++) {
                const uint16_t a = shards[i / MM_IO_M][(i % MM_IO_M) * MM_IO_K + k];
                res->a_wrong += j == 0 && ag[i * MM_IO_K + k] != a;
                sum += (double)agmm_bf16_to_f32(a) * agmm_bf16_to_f32(b[j * MM_IO_K + k]);
            }
            res->c_wrong += agmm_bf16_to_f32(c[i * MM_IO_N + j]) != sum;
        }
    agmm_plan_destroy(plan);
    return AGMM_SUCCESS;
}

void test_validate_mm_io(void)
{
    static const char *const what[MM_IO_CASES][2] = {{"c == a_gathered", "io->a_gathered"},
                                                    {"c over b", "overlaps io->b"},
                                                    {"a_gathered over the input", "overlaps the run's input"}};
    agmm_world *world = test_cpu_world(MM_IO_W, 1.0);
    if (world == NULL)
        return;
    mm_io_result res[MM_IO_W] = {0};
    const agmm_status st = agmm_world_run(world, mm_io_rank, res);
    agmm_world_destroy(world);
    for (int i = 0; i < MM_IO_CASES; i++) {
        int ok = st == AGMM_SUCCESS;
        for (int r = 0; r < MM_IO_W; r++)
            ok &= res[r].status[i] == AGMM_ERR_INVALID_ARG && strstr(res[r].msg[i], what[i][1]) != NULL;
        agmm_check(ok, "validate ag_matmul io W=2, %s: %s, message names \"%s\": \"%s\"", what[i][0],
                   agmm_status_str(res[0].status[i]), what[i][1], res[0].msg[i]);
    }
    int ok = st == AGMM_SUCCESS;
    for (int r = 0; r < MM_IO_W; r++)
        ok &= res[r].good_status == AGMM_SUCCESS && res[r].a_wrong == 0 && res[r].c_wrong == 0;
    agmm_check(ok, "validate ag_matmul io W=2: after the refused runs a good run gives %s, gathered A and C exact "
                   "(wrong elements on rank 0: %lld, %lld)",
               agmm_status_str(res[0].good_status), (long long)res[0].a_wrong, (long long)res[0].c_wrong);
}

/* Misuse of the run functions: a plan run with the other operation's function, no plan, no io, io
 * missing a pointer, io with a non-zero reserved tail. Each is refused with AGMM_ERR_INVALID_ARG
 * naming what is wrong, before the epoch moves: both plans then run correctly. */
enum { MISUSE_MM_AS_AR, MISUSE_AR_AS_MM, MISUSE_NULL_PLAN_MM, MISUSE_NULL_PLAN_AR, MISUSE_NULL_IO_MM,
       MISUSE_NULL_IO_AR, MISUSE_MM_NO_C, MISUSE_MM_TAIL, MISUSE_AR_TAIL, MISUSE_COUNT };

static const struct {
    const char *what;
    const char *needle[2]; /* what agmm_last_error must contain (NULL: nothing; no context to hold it) */
} misuse_cases[MISUSE_COUNT] = {
    [MISUSE_MM_AS_AR] = {"agmm_all_reduce on an ag_matmul plan", {"agmm_ag_matmul", "agmm_all_reduce"}},
    [MISUSE_AR_AS_MM] = {"agmm_ag_matmul on an all_reduce plan", {"agmm_all_reduce", "agmm_ag_matmul"}},
    [MISUSE_NULL_PLAN_MM] = {"agmm_ag_matmul with plan NULL", {NULL, NULL}},
    [MISUSE_NULL_PLAN_AR] = {"agmm_all_reduce with plan NULL", {NULL, NULL}},
    [MISUSE_NULL_IO_MM] = {"agmm_ag_matmul with io NULL", {"io is NULL", NULL}},
    [MISUSE_NULL_IO_AR] = {"agmm_all_reduce with io NULL", {"io is NULL", NULL}},
    [MISUSE_MM_NO_C] = {"agmm_ag_matmul with io->c NULL", {"io->c", NULL}},
    [MISUSE_MM_TAIL] = {"agmm_ag_matmul with io.reserved[3] set", {"ag_matmul io: the reserved tail is not zero", NULL}},
    [MISUSE_AR_TAIL] = {"agmm_all_reduce with io.reserved[5] set", {"all_reduce io: the reserved tail is not zero", NULL}},
};

enum { MIS_W = 2, MIS_M = 5, MIS_N = 24, MIS_K = 16, MIS_AR_N = 37 };

typedef struct {
    agmm_status plan_status;
    char plan_msg[AGMM_ERROR_LEN];
    agmm_status status[MISUSE_COUNT];
    char msg[MISUSE_COUNT][AGMM_ERROR_LEN];
    agmm_status mm_good, ar_good;
    int a_bad, c_bad, ar_bad; /* the good runs after the refused calls: mismatches */
} misuse_result;

static agmm_status misuse_rank(agmm_ctx *ctx, void *arg)
{
    misuse_result *res = (misuse_result *)arg + agmm_ctx_rank(ctx);
    const int rank = agmm_ctx_rank(ctx);
    const int64_t rows = MIS_W * MIS_M;
    agmm_plan *mm = NULL, *ar = NULL;
    agmm_ag_matmul_desc md = {.m = MIS_M, .n = MIS_N, .k = MIS_K, .backend = "ce", .splits = 2};
    agmm_all_reduce_desc ad = {.n = MIS_AR_N, .dtype = AGMM_DTYPE_F32, .backend = "one_shot"};
    res->plan_status = agmm_plan_ag_matmul(&mm, ctx, &md);
    if (res->plan_status == AGMM_SUCCESS)
        res->plan_status = agmm_plan_all_reduce(&ar, ctx, &ad);
    if (res->plan_status != AGMM_SUCCESS) {
        snprintf(res->plan_msg, sizeof res->plan_msg, "%s", agmm_last_error(ctx));
        agmm_plan_destroy(ar);
        agmm_plan_destroy(mm);
        return AGMM_SUCCESS;
    }
    uint16_t a[MIS_W * MIS_M * MIS_K], b[MIS_K * MIS_N], a_out[MIS_W * MIS_M * MIS_K], c[MIS_W * MIS_M * MIS_N],
        ref16[MIS_W * MIS_M * MIS_N];
    float ar_out[MIS_AR_N];
    for (int r = 0; r < MIS_W; r++)
        test_fill_bf16(a + r * MIS_M * MIS_K, MIS_M * MIS_K, test_seed_of(4242, r, 0, 1), 2);
    test_fill_bf16(b, MIS_K * MIS_N, test_seed_of(4242, rank, 0, 2), 2);
    agmm_ref_gemm_bf16(a, b, AGMM_LAYOUT_COL_MAJOR, rows, MIS_N, MIS_K, NULL, ref16);
    memcpy(agmm_plan_input(mm), a + rank * MIS_M * MIS_K, sizeof(uint16_t) * MIS_M * MIS_K);
    float *ar_in = agmm_plan_input(ar);
    for (int i = 0; i < MIS_AR_N; i++)
        ar_in[i] = (float)((rank + 1) * (i + 1)); /* sum over 2 ranks: 3 * (i + 1) */

    agmm_ag_matmul_io mio = {.b = b, .a_gathered = a_out, .c = c};
    agmm_all_reduce_io aio = {.out = ar_out};
    for (int i = 0; i < MISUSE_COUNT; i++) {
        agmm_ag_matmul_io m2 = mio;
        agmm_all_reduce_io a2 = aio;
        agmm_status st = AGMM_SUCCESS;
        switch (i) {
        case MISUSE_MM_AS_AR: st = agmm_all_reduce(mm, &aio, NULL); break;
        case MISUSE_AR_AS_MM: st = agmm_ag_matmul(ar, &mio, NULL); break;
        case MISUSE_NULL_PLAN_MM: st = agmm_ag_matmul(NULL, &mio, NULL); break;
        case MISUSE_NULL_PLAN_AR: st = agmm_all_reduce(NULL, &aio, NULL); break;
        case MISUSE_NULL_IO_MM: st = agmm_ag_matmul(mm, NULL, NULL); break;
        case MISUSE_NULL_IO_AR: st = agmm_all_reduce(ar, NULL, NULL); break;
        case MISUSE_MM_NO_C: m2.c = NULL, st = agmm_ag_matmul(mm, &m2, NULL); break;
        case MISUSE_MM_TAIL: m2.reserved[3] = c, st = agmm_ag_matmul(mm, &m2, NULL); break;
        case MISUSE_AR_TAIL: a2.reserved[5] = ar_out, st = agmm_all_reduce(ar, &a2, NULL); break;
        }
        res->status[i] = st;
        snprintf(res->msg[i], sizeof res->msg[i], "%s", agmm_last_error(ctx));
    }

    test_poison_bf16(a_out, rows * MIS_K);
    test_poison_bf16(c, rows * MIS_N);
    memset(ar_out, 0xff, sizeof ar_out); /* NaN */
    res->mm_good = agmm_ag_matmul(mm, &mio, NULL);
    res->ar_good = agmm_all_reduce(ar, &aio, NULL);
    res->a_bad = agmm_ref_first_mismatch(a_out, a, rows * MIS_K, 2) >= 0;
    res->c_bad = agmm_ref_first_mismatch(c, ref16, rows * MIS_N, 2) >= 0;
    for (int i = 0; i < MIS_AR_N; i++)
        res->ar_bad += ar_out[i] != (float)(3 * (i + 1));
    agmm_plan_destroy(ar);
    agmm_plan_destroy(mm);
    return AGMM_SUCCESS;
}

void test_validate_run_misuse(void)
{
    agmm_world *world = test_cpu_world(MIS_W, 1.0);
    if (world == NULL)
        return;
    misuse_result *res = calloc(MIS_W, sizeof *res);
    agmm_status st = agmm_world_run(world, misuse_rank, res);
    agmm_world_destroy(world);
    int planned = st == AGMM_SUCCESS;
    for (int r = 0; r < MIS_W; r++)
        planned &= res[r].plan_status == AGMM_SUCCESS;
    if (!agmm_check(planned, "validate run misuse W=%d: ag_matmul/ce and all_reduce/one_shot planned (%s: %s)", MIS_W,
                    agmm_status_str(res[0].plan_status), res[0].plan_msg)) {
        free(res);
        return;
    }
    for (int i = 0; i < MISUSE_COUNT; i++) {
        int ok = 1;
        for (int r = 0; r < MIS_W; r++) {
            ok &= res[r].status[i] == AGMM_ERR_INVALID_ARG;
            for (int j = 0; j < 2; j++)
                ok &= misuse_cases[i].needle[j] == NULL || strstr(res[r].msg[i], misuse_cases[i].needle[j]) != NULL;
        }
        char names[160] = "";
        if (misuse_cases[i].needle[0])
            snprintf(names, sizeof names, ", message names \"%s\"%s%s%s", misuse_cases[i].needle[0],
                     misuse_cases[i].needle[1] ? " and \"" : "", misuse_cases[i].needle[1] ? misuse_cases[i].needle[1] : "",
                     misuse_cases[i].needle[1] ? "\"" : "");
        agmm_check(ok, "validate run misuse W=%d: %s -> %s%s%s%s%s", MIS_W, misuse_cases[i].what,
                   agmm_status_str(res[0].status[i]), names, misuse_cases[i].needle[0] ? ": \"" : "",
                   misuse_cases[i].needle[0] ? res[0].msg[i] : "", misuse_cases[i].needle[0] ? "\"" : "");
    }
    int ok = 1;
    for (int r = 0; r < MIS_W; r++)
        ok &= res[r].mm_good == AGMM_SUCCESS && res[r].ar_good == AGMM_SUCCESS && !res[r].a_bad && !res[r].c_bad &&
              res[r].ar_bad == 0;
    agmm_check(ok, "validate run misuse W=%d: then ag_matmul M=%d N=%d K=%d (%s) and all_reduce n=%d (%s) on the same plans: "
                   "gathered A and C exact, sums exact (the refused calls did not move the epoch)",
               MIS_W, MIS_M, MIS_N, MIS_K, agmm_status_str(res[0].mm_good), MIS_AR_N, agmm_status_str(res[0].ar_good));
    free(res);
}

/* Host collectives that fall out of step (a rank repeats one) are refused, not paired. */
typedef struct {
    agmm_status st;
    char msg[AGMM_ERROR_LEN];
} step_result;

static agmm_status step_rank(agmm_ctx *ctx, void *arg)
{
    step_result *res = (step_result *)arg + agmm_ctx_rank(ctx);
    int mine = 100 + agmm_ctx_rank(ctx), all[AGMM_MAX_RANKS] = {0};
    agmm_host_barrier(ctx);
    if (agmm_ctx_rank(ctx) == 0)
        agmm_host_barrier(ctx); /* one collective too many */
    res->st = agmm_host_exchange(ctx, &mine, sizeof mine, all);
    snprintf(res->msg, sizeof res->msg, "%s", agmm_last_error(ctx));
    return AGMM_SUCCESS;
}

/* Runs fn on a CPU world of 2 ranks with a short timeout: 1, res filled; 0 without a world. */
static int run_out_of_step(agmm_rank_fn fn, step_result res[2])
{
    agmm_world *world = test_cpu_world(2, 0.3);
    if (world == NULL)
        return 0;
    memset(res, 0, 2 * sizeof *res);
    agmm_world_run(world, fn, res);
    agmm_world_destroy(world);
    return 1;
}

void test_validate_host_collective_order(void)
{
    step_result res[2];
    if (!run_out_of_step(step_rank, res))
        return;
    agmm_check(res[1].st == AGMM_ERR_INTERNAL && strstr(res[1].msg, "out of step") &&
                   res[0].st != AGMM_SUCCESS,
               "host collectives W=2, rank 0 repeats a barrier: rank 1's exchange -> %s (\"%s\"); rank 0's -> %s "
               "(\"%s\")", agmm_status_str(res[1].st), res[1].msg, agmm_status_str(res[0].st), res[0].msg);
}

/* Ranks that make different collective calls at the same point (rank 0 plans, rank 1 allocates
 * symmetric memory) meet in host exchanges of different sizes: both fail, saying the ranks are out
 * of step, and nobody reads the other call's struct (rank 1 used to crash on rank 0's plan). */
static agmm_status other_call_rank(agmm_ctx *ctx, void *arg)
{
    step_result *res = (step_result *)arg + agmm_ctx_rank(ctx);
    if (agmm_ctx_rank(ctx) == 0) {
        agmm_plan *plan = NULL;
        res->st = agmm_plan_matmul_all_reduce(&plan, ctx, &(agmm_matmul_all_reduce_desc){.m = 8, .n = 8, .k = 8});
        agmm_plan_destroy(plan);
    } else {
        void *p = NULL;
        res->st = agmm_symmetric_alloc(ctx, 4096, &p);
        agmm_symmetric_free(ctx, p);
    }
    snprintf(res->msg, sizeof res->msg, "%s", agmm_last_error(ctx));
    return AGMM_SUCCESS;
}

void test_validate_host_other_call(void)
{
    step_result res[2];
    if (!run_out_of_step(other_call_rank, res))
        return;
    agmm_check(res[0].st != AGMM_SUCCESS && res[1].st != AGMM_SUCCESS && strstr(res[0].msg, "out of step") &&
                   strstr(res[1].msg, "out of step"),
               "host collectives W=2, rank 0 plans while rank 1 allocates symmetric memory: %s (\"%s\") and %s "
               "(\"%s\")",
               agmm_status_str(res[0].st), res[0].msg, agmm_status_str(res[1].st), res[1].msg);
}
