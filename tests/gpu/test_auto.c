/* GPU tests of `auto` (src/api/tune.c): on GPUs it measures unless AGMM_TUNE=0.
 *   W = 1 (NCCL)   ag_matmul measures nccl, ce, fused and pull, all_reduce and
 *                  all_reduce_rmsnorm nccl, one_shot and two_shot; the choice is the fastest figure; the same plan again comes from
 *                  memory, and the file holds it
 *   emulated W=4   every rank measures the same candidates (no nccl there) and chooses alike
 *   AGMM_TUNE=0    the static rule: ce, one_shot
 * Each line prints the figures and the cost of measuring (the "tuning cost per new
 * shape" on this GPU). The cache file is a private temporary one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/tune.h"
#include "gpu_tests.h"
#include "../harness.h"

typedef struct {
    agmm_op op;
    int64_t m, n, k;           /* ag_matmul; all_reduce: n; all_reduce_rmsnorm: T = m, H = n */
    agmm_status status[AGMM_MAX_RANKS];
    char msg[AGMM_MAX_RANKS][512];
    agmm_tune_result last[AGMM_MAX_RANKS][2];
} auto_job;

static agmm_status auto_rank(agmm_ctx *ctx, void *arg)
{
    auto_job *j = arg;
    int rank = agmm_ctx_rank(ctx);
    for (int i = 0; i < 2; i++) {
        agmm_plan *p = NULL;
        agmm_status st;
        if (j->op == AGMM_OP_AG_MATMUL) {
            agmm_ag_matmul_desc d = {.m = j->m, .n = j->n, .k = j->k, .backend = "auto"};
            st = agmm_plan_ag_matmul(&p, ctx, &d);
        } else if (j->op == AGMM_OP_ALL_REDUCE) {
            agmm_all_reduce_desc d = {.n = j->n, .dtype = AGMM_DTYPE_BF16};
            st = agmm_plan_all_reduce(&p, ctx, &d);
        } else {
            agmm_all_reduce_rmsnorm_desc d = {.tokens = j->m, .hidden = j->n, .eps = 1e-6};
            st = agmm_plan_all_reduce_rmsnorm(&p, ctx, &d);
        }
        j->status[rank] = st;
        if (st != AGMM_SUCCESS) {
            snprintf(j->msg[rank], sizeof j->msg[rank], "plan %d: %s", i, agmm_last_error(ctx));
            return AGMM_SUCCESS;
        }
        j->last[rank][i] = *agmm_tune_last(ctx);
        agmm_plan_destroy(p);
    }
    return AGMM_SUCCESS;
}

/* Runs j in w and checks: measured first (over `want` candidates, every figure > 0, the fastest
 * chosen, every rank alike), from memory second; or, with want == NULL, the static `rule`. */
static void check_job(agmm_world *w, auto_job *j, const char *want, const char *rule, const char *what)
{
    int W = agmm_world_nranks(w);
    agmm_status st = agmm_world_run(w, auto_rank, j);
    char figures[512] = "", names[128] = "";
    int ok = st == AGMM_SUCCESS, used = 0, nused = 0;
    for (int r = 0; r < W; r++)
        if (j->status[r] != AGMM_SUCCESS) {
            agmm_check(0, "%s: rank %d: %s", what, r, j->msg[r]);
            return;
        }
    const agmm_tune_result *r0 = &j->last[0][0];
    int best = -1;
    for (int c = 0; c < r0->ncand; c++) {
        used += snprintf(figures + used, sizeof figures - (size_t)used, "%s%s %.1f us", c ? ", " : "",
                         r0->cand[c]->name, r0->cand_us[c]);
        nused += snprintf(names + nused, sizeof names - (size_t)nused, "%s%s", c ? " " : "", r0->cand[c]->name);
        ok &= r0->cand_us[c] > 0;
        if (best < 0 || r0->cand_us[c] < r0->cand_us[best])
            best = c;
    }
    if (want) {
        ok &= r0->how == AGMM_TUNE_MEASURED && best >= 0 && r0->choice == r0->cand[best] && strcmp(names, want) == 0;
    } else {
        ok &= r0->how == AGMM_TUNE_STATIC && r0->choice && strcmp(r0->choice->name, rule) == 0;
    }
    for (int r = 0; r < W; r++)
        ok &= j->last[r][0].choice == r0->choice && j->last[r][0].how == r0->how &&
              memcmp(j->last[r][0].cand_us, r0->cand_us, sizeof r0->cand_us) == 0 &&
              j->last[r][1].choice == r0->choice &&
              j->last[r][1].how == (want ? AGMM_TUNE_MEMORY : AGMM_TUNE_STATIC);
    agmm_check(ok, "%s: %s%s%s -> %s on every rank (%d ranks), %s in %.1f ms (%d runs each); again: %s", what,
               want ? "measured " : "static rule", want ? want : "", want ? ": " : "",
               r0->choice ? r0->choice->name : "(none)", W, figures[0] ? figures : "nothing measured", r0->tune_ms,
               r0->runs, j->last[0][1].how == AGMM_TUNE_MEMORY ? "from memory" : "not from memory");
}

void test_auto_gpu(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/agmm-gputest-tune-%d.txt", (int)getpid());
    unlink(path);
    setenv("AGMM_TUNE_CACHE", path, 1);
    unsetenv("AGMM_TUNE"); /* the default on GPUs: measure */
    agmm_world *w = gpu_test_world(AGMM_WORLD_GPU, 1, 0);
    if (w) {
        auto_job mm = {.op = AGMM_OP_AG_MATMUL, .m = 256, .n = 256, .k = 256};
        check_job(w, &mm, "nccl ce fused pull", NULL, "auto ag_matmul W=1 (256, 256, 256)");
        auto_job big = {.op = AGMM_OP_AG_MATMUL, .m = 2048, .n = 2048, .k = 2048};
        check_job(w, &big, "nccl ce fused pull", NULL, "auto ag_matmul W=1 (2048, 2048, 2048)");
        auto_job ar = {.op = AGMM_OP_ALL_REDUCE, .n = 1 << 20};
        check_job(w, &ar, "nccl one_shot two_shot", NULL, "auto all_reduce W=1 n=2^20 bf16");
        auto_job arn = {.op = AGMM_OP_ALL_REDUCE_RMSNORM, .m = 8, .n = 8192};
        check_job(w, &arn, "nccl one_shot two_shot", NULL, "auto all_reduce_rmsnorm W=1 T=8 H=8192");
        agmm_world_destroy(w);
    }
    FILE *f = fopen(path, "r");
    int lines = 0;
    char line[2048];
    while (f && fgets(line, sizeof line, f))
        lines += line[0] != '#';
    if (f)
        fclose(f);
    agmm_check(lines == 4, "auto: the cache file %s holds the 4 choices measured at W=1 (%d lines)", path, lines);

    w = gpu_test_world(AGMM_WORLD_EMULATED, 4, 0);
    if (w) {
        auto_job mm = {.op = AGMM_OP_AG_MATMUL, .m = 255, .n = 384, .k = 136};
        check_job(w, &mm, "ce fused pull", NULL, "auto ag_matmul emulated W=4 (255, 384, 136)");
        auto_job ar = {.op = AGMM_OP_ALL_REDUCE, .n = 16387};
        check_job(w, &ar, "one_shot two_shot", NULL, "auto all_reduce emulated W=4 n=16387 bf16");
        auto_job arn = {.op = AGMM_OP_ALL_REDUCE_RMSNORM, .m = 33, .n = 4096};
        check_job(w, &arn, "one_shot two_shot", NULL, "auto all_reduce_rmsnorm emulated W=4 T=33 H=4096");
        agmm_world_destroy(w);
    }

    setenv("AGMM_TUNE", "0", 1);
    w = gpu_test_world(AGMM_WORLD_GPU, 1, 0);
    if (w) {
        auto_job mm = {.op = AGMM_OP_AG_MATMUL, .m = 384, .n = 384, .k = 384};
        check_job(w, &mm, NULL, "ce", "auto ag_matmul W=1 with AGMM_TUNE=0");
        auto_job ar = {.op = AGMM_OP_ALL_REDUCE, .n = 4093};
        check_job(w, &ar, NULL, "one_shot", "auto all_reduce W=1 with AGMM_TUNE=0");
        agmm_world_destroy(w);
    }
    unsetenv("AGMM_TUNE");
    unsetenv("AGMM_TUNE_CACHE");
    unlink(path);
}
