/* Argument validation (src/core/validate.c): every bad argument gives AGMM_ERR_INVALID_ARG and a
 * message that names the argument, directly and through the public plan API. */
#include <string.h>

#include "agmm.h"
#include "core/validate.h"
#include "world/world.h"
#include "cpu_tests.h"
#include "harness.h"

static agmm_ag_matmul_desc good_mm(void)
{
    return (agmm_ag_matmul_desc){.m = 640, .n = 384, .k = 256, .b_layout = AGMM_LAYOUT_COL_MAJOR,
                                 .backend = AGMM_BACKEND_FUSED, .splits = 2};
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
    d.m = 1, d.n = 1, d.k = 8, d.splits = 0, d.backend = AGMM_BACKEND_AUTO;
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
    d = good_mm(), d.backend = AGMM_BACKEND_ONE_SHOT;
    expect_mm("backend=one_shot", d, 4, "backend=one_shot");
    d = good_mm(), d.backend = (agmm_backend)99;
    expect_mm("backend=99", d, 4, "backend=?");
    d = good_mm(), d.m = 3, d.splits = 4;
    expect_mm("splits=4 > M=3", d, 4, "splits=4");
    d = good_mm(), d.splits = -1;
    expect_mm("splits=-1", d, 4, "splits=-1");
    err = (agmm_error){0};
    agmm_check(agmm_check_ag_matmul(NULL, 4, &err) == AGMM_ERR_INVALID_ARG && strstr(err.msg, "desc") != NULL,
               "validate ag_matmul desc=NULL: message names desc: \"%s\"", err.msg);
}

void test_validate_all_reduce(void)
{
    agmm_error err = {0};
    agmm_all_reduce_desc d = {.n = 4093, .dtype = AGMM_DTYPE_BF16, .backend = AGMM_BACKEND_TWO_SHOT};
    agmm_check(agmm_check_all_reduce(&d, &err) == AGMM_SUCCESS, "validate all_reduce n=4093 bf16 two_shot: accepted");
    expect_ar("n=0", (agmm_all_reduce_desc){.n = 0}, "n=0");
    expect_ar("n=-1", (agmm_all_reduce_desc){.n = -1}, "n=-1");
    expect_ar("n=2^41", (agmm_all_reduce_desc){.n = (int64_t)1 << 41}, "n=2199023255552");
    expect_ar("dtype=5", (agmm_all_reduce_desc){.n = 8, .dtype = (agmm_dtype)5}, "dtype=5");
    expect_ar("backend=ce", (agmm_all_reduce_desc){.n = 8, .backend = AGMM_BACKEND_CE}, "backend=ce");
    expect_ar("backend=fused", (agmm_all_reduce_desc){.n = 8, .backend = AGMM_BACKEND_FUSED}, "backend=fused");
}

typedef struct {
    agmm_status mm_status, ar_status;
    char mm_msg[AGMM_ERROR_LEN], ar_msg[AGMM_ERROR_LEN];
    int plan_null;
    agmm_status null_out_status;
    char null_out_msg[AGMM_ERROR_LEN];
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
    agmm_all_reduce_desc ar = {.n = 0, .dtype = AGMM_DTYPE_F32, .backend = AGMM_BACKEND_ONE_SHOT};
    res->ar_status = agmm_plan_all_reduce(&plan, ctx, &ar);
    res->plan_null &= plan == NULL;
    snprintf(res->ar_msg, sizeof res->ar_msg, "%s", agmm_last_error(ctx));
    /* No plan pointer: refused before anything collective, and agmm_last_error says so. */
    res->null_out_status = agmm_plan_ag_matmul(NULL, ctx, &mm);
    snprintf(res->null_out_msg, sizeof res->null_out_msg, "%s", agmm_last_error(ctx));
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

    cfg.nranks = AGMM_MAX_RANKS + 1;
    err[0] = '\0';
    st = agmm_world_create(&world, &cfg, err, sizeof err);
    agmm_check(st == AGMM_ERR_INVALID_ARG && world == NULL && strstr(err, "nranks=65") != NULL,
               "validate world nranks=65: %s, \"%s\"", agmm_status_str(st), err);
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
    agmm_all_reduce_desc d = {.n = 64, .dtype = AGMM_DTYPE_F32, .backend = AGMM_BACKEND_ONE_SHOT};
    agmm_plan *plan = NULL;
    if (agmm_plan_all_reduce(&plan, ctx, &d) != AGMM_SUCCESS)
        return AGMM_ERR_INTERNAL;
    float *in = agmm_plan_input(plan);
    for (int i = 0; i < 64; i++)
        in[i] = (float)(agmm_ctx_rank(ctx) + 1);
    agmm_io overlap = {.out = in + 3};
    res->overlap_status = agmm_plan_run(plan, &overlap, NULL);
    snprintf(res->overlap_msg, sizeof res->overlap_msg, "%s", agmm_last_error(ctx));
    agmm_io none = {0};
    res->null_status = agmm_plan_run(plan, &none, NULL);
    float out[64];
    agmm_io good = {.out = out};
    res->good_status = agmm_plan_run(plan, &good, NULL);
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

/* Host collectives that fall out of step (a rank repeats one) are refused, not paired. */
typedef struct {
    agmm_status st;
    char msg[AGMM_ERROR_LEN];
} step_result;

static agmm_status step_rank(agmm_ctx *ctx, void *arg)
{
    step_result *res = (step_result *)arg + agmm_ctx_rank(ctx);
    int mine = 100 + agmm_ctx_rank(ctx), all[AGMM_MAX_RANKS] = {0};
    agmm_world_barrier(ctx);
    if (agmm_ctx_rank(ctx) == 0)
        agmm_world_barrier(ctx); /* one collective too many */
    res->st = agmm_world_exchange(ctx, &mine, sizeof mine, all);
    snprintf(res->msg, sizeof res->msg, "%s", agmm_last_error(ctx));
    return AGMM_SUCCESS;
}

void test_validate_host_collective_order(void)
{
    agmm_world *world = test_cpu_world(2, 0.3);
    if (world == NULL)
        return;
    step_result res[2] = {0};
    agmm_world_run(world, step_rank, res);
    agmm_world_destroy(world);
    agmm_check(res[1].st == AGMM_ERR_INTERNAL && strstr(res[1].msg, "out of step") &&
                   res[0].st != AGMM_SUCCESS,
               "host collectives W=2, rank 0 repeats a barrier: rank 1's exchange -> %s (\"%s\"); rank 0's -> %s "
               "(\"%s\")", agmm_status_str(res[1].st), res[1].msg, agmm_status_str(res[0].st), res[0].msg);
}
