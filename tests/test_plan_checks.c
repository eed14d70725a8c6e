/* What plan creation settles before it allocates anything (src/api/plan_agree.c): the memory the
 * plan needs against what is available (host memory here: MemAvailable and the memory cgroup,
 * src/core/hostmem.c), and that every rank plans the same thing. Either failure is the same error
 * on every rank, with numbers or both descriptors, and leaves the ranks in step: a correct plan
 * made right after runs exactly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agmm.h"
#include "core/clock.h"
#include "api/api.h"
#include "core/hostmem.h"
#include "core/text.h"
#include "cpu/cpu.h"
#include "cpu/reference.h"
#include "cpu_tests.h"
#include "harness.h"

/* ---- host memory from /proc and the cgroup tree ---- */

static void write_file(const char *root, const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    /* Make every folder on the way. */
    for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        mkdir(path, 0700);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void remove_tree(const char *root)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", root);
}

/* One tree under a fresh folder: proc/meminfo, proc/self/cgroup and a cgroup mount at cgroup/. */
typedef struct {
    const char *what;
    const char *files[8][2];      /* path under the folder, content; NULL ends */
    uint64_t bytes;               /* what must be available */
    const char *source;           /* what must bound it */
} hostmem_case;

static const char *const meminfo = "MemTotal:       4000 kB\nMemFree:         900 kB\nMemAvailable:    1000 kB\n";

static const hostmem_case hostmem_cases[] = {
    {"MemAvailable 1000 kB, cgroup v2 without a limit",
     {{"proc/meminfo", meminfo}, {"proc/self/cgroup", "0::/a/b\n"}, {"cgroup/a/b/memory.max", "max\n"}},
     1000 * 1024, "MemAvailable"},
    {"cgroup v2 memory.max 600000 one level up on /a, 300000 used of which 50000 inactive file",
     {{"proc/meminfo", meminfo}, {"proc/self/cgroup", "0::/a/b\n"}, {"cgroup/a/b/memory.max", "max\n"},
      {"cgroup/a/memory.max", "600000\n"}, {"cgroup/a/memory.current", "300000\n"},
      {"cgroup/a/memory.stat", "anon 250000\ninactive_file 50000\n"}},
     350000, "memory.max of /a"},
    {"cgroup v1 limit 500000 on /x (its child's \"no limit\" the largest value), 200000 used of which 20000 inactive",
     {{"proc/meminfo", meminfo}, {"proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/x/y\n0::/\n"},
      {"cgroup/memory/x/y/memory.limit_in_bytes", "9223372036854771712\n"},
      {"cgroup/memory/x/memory.limit_in_bytes", "500000\n"}, {"cgroup/memory/x/memory.usage_in_bytes", "200000\n"},
      {"cgroup/memory/x/memory.stat", "cache 1\ntotal_inactive_file 20000\n"}},
     320000, "memory.limit_in_bytes of /x"},
    {"cgroup v2 namespace (its path not under the mount): the mount's root limit",
     {{"proc/meminfo", meminfo}, {"proc/self/cgroup", "0::/elsewhere\n"}, {"cgroup/memory.max", "700000\n"},
      {"cgroup/memory.current", "100000\n"}},
     600000, "memory.max of /"},
    {"usage above the cgroup limit: nothing left, not a wrapped-around number",
     {{"proc/meminfo", meminfo}, {"proc/self/cgroup", "0::/\n"}, {"cgroup/memory.max", "700000\n"},
      {"cgroup/memory.current", "900000\n"}},
     0, "memory.max of /"},
};

void test_plan_host_memory(void)
{
    agmm_host_memory m;
    for (size_t i = 0; i < sizeof hostmem_cases / sizeof *hostmem_cases; i++) {
        const hostmem_case *c = &hostmem_cases[i];
        char root[] = "/tmp/agmm-hostmem-XXXXXX", proc[64], cg[64];
        if (mkdtemp(root) == NULL) {
            agmm_check(0, "host memory: cannot make a temporary folder");
            return;
        }
        for (int f = 0; f < 8 && c->files[f][0]; f++)
            write_file(root, c->files[f][0], c->files[f][1]);
        snprintf(proc, sizeof proc, "%s/proc", root);
        snprintf(cg, sizeof cg, "%s/cgroup", root);
        mkdir(cg, 0700);
        agmm_host_memory_available_at(proc, cg, &m);
        remove_tree(root);
        agmm_check(m.bytes == c->bytes && strstr(m.source, c->source),
                   "host memory: %s -> %llu (want %llu, bounded by %s; got \"%s\")", c->what,
                   (unsigned long long)m.bytes, (unsigned long long)c->bytes, c->source, m.source);
    }

    agmm_host_memory_available(&m);
    agmm_check(m.bytes > 0 && m.bytes < UINT64_MAX && m.source[0],
               "host memory of this machine: %s available (%s)", agmm_bytes(m.bytes).s, m.source);

    /* Ranks of one process share its memory: per rank x sharers against what is available. */
    agmm_mem_pool pool = {.avail_bytes = 100, .sharers = 2};
    int two = agmm_mem_fits(50, &pool), over = agmm_mem_fits(51, &pool);
    pool.sharers = 1;
    agmm_check(two && !over && agmm_mem_fits(100, &pool) && !agmm_mem_fits(101, &pool),
               "memory check: 2 ranks x 50 of 100 fit, 2 x 51 do not; 1 x 100 fits, 1 x 101 does not");
}

/* ---- a plan too big for memory: the same error on every rank, nothing allocated ---- */

enum { MEM_W = 3 };

typedef struct {
    agmm_status status[MEM_W], after[MEM_W];
    char msg[MEM_W][AGMM_ERROR_LEN];
    double elapsed_s[MEM_W];
    int exact[MEM_W];
    int all_reduce;
} mem_job;

/* A correct plan after a refused one: the ranks are in step, and its result is exact. */
static agmm_status plan_after(agmm_ctx *ctx, int *exact)
{
    const int rank = agmm_ctx_rank(ctx);
    agmm_all_reduce_desc d = {.n = 64, .dtype = AGMM_DTYPE_F32, .backend = "one_shot"};
    agmm_plan *plan = NULL;
    agmm_status st = agmm_plan_all_reduce(&plan, ctx, &d);
    float out[64];
    if (st == AGMM_SUCCESS) {
        for (int i = 0; i < 64; i++)
            ((float *)agmm_plan_input(plan))[i] = (float)(rank * 100 + i);
        agmm_all_reduce_io io = {.out = out};
        st = agmm_all_reduce(plan, &io, NULL);
    }
    *exact = st == AGMM_SUCCESS;
    for (int i = 0; *exact && i < 64; i++)
        *exact = out[i] == (float)(100 * (MEM_W * (MEM_W - 1) / 2) + MEM_W * i);
    agmm_plan_destroy(plan);
    return st;
}

static agmm_status mem_rank(agmm_ctx *ctx, void *arg)
{
    mem_job *job = arg;
    const int r = agmm_ctx_rank(ctx);
    agmm_plan *plan = NULL;
    int64_t t0 = agmm_mono_ns();
    if (job->all_reduce) {
        agmm_all_reduce_desc d = {.n = (int64_t)1 << 40, .dtype = AGMM_DTYPE_BF16, .backend = "one_shot"};
        job->status[r] = agmm_plan_all_reduce(&plan, ctx, &d);
    } else {
        /* W * M * K = 3 * 2^27 * 2^11 < 2^40: valid, and 512 GiB of input per rank. */
        agmm_ag_matmul_desc d = {.m = (int64_t)1 << 27, .n = 64, .k = (int64_t)1 << 11, .backend = "ce"};
        job->status[r] = agmm_plan_ag_matmul(&plan, ctx, &d);
    }
    job->elapsed_s[r] = (double)(agmm_mono_ns() - t0) * 1e-9;
    snprintf(job->msg[r], sizeof job->msg[r], "%s", agmm_last_error(ctx));
    agmm_plan_destroy(plan);
    job->after[r] = plan_after(ctx, &job->exact[r]);
    return AGMM_SUCCESS;
}

static void run_mem_case(int all_reduce, const char *needle)
{
    mem_job *job = calloc(1, sizeof *job);
    job->all_reduce = all_reduce;
    agmm_world *world = test_cpu_world(MEM_W, 0.5);
    if (world) {
        agmm_world_run(world, mem_rank, job);
        agmm_world_destroy(world);
    }
    int ok = world != NULL, same = 1, after = 1;
    double worst = 0;
    for (int r = 0; r < MEM_W; r++) {
        ok &= job->status[r] == AGMM_ERR_NO_MEMORY && strstr(job->msg[r], needle) && strstr(job->msg[r], "available");
        same &= strcmp(job->msg[r], job->msg[0]) == 0;
        after &= job->after[r] == AGMM_SUCCESS && job->exact[r];
        if (job->elapsed_s[r] > worst)
            worst = job->elapsed_s[r];
    }
    agmm_check(ok && same && worst < 0.4,
               "%s too big for memory: AGMM_ERR_NO_MEMORY on all %d ranks, the same message, in %.3f s (nothing "
               "allocated): \"%s\"",
               all_reduce ? "all_reduce/one_shot n=2^40 bf16" : "ag_matmul/ce M=2^27 N=64 K=2^11", MEM_W, worst,
               job->msg[0]);
    agmm_check(after, "after the refused plan, a correct all_reduce plan on the same contexts runs exactly");
    free(job);
}

void test_plan_memory_check(void)
{
    run_mem_case(0, "needs 1.5 TiB of host memory (512.0 GiB per rank x 3 ranks sharing it; symmetric 512.0 GiB");
    run_mem_case(1, "staging 2.0 TiB), but");
}

/* ---- ranks that disagree on the plan ---- */

enum { AG_W = 3 };

typedef struct {
    const char *what;
    int all_reduce;
    agmm_ag_matmul_desc mm[AG_W];
    agmm_all_reduce_desc ar[AG_W];
    const char *needle;           /* what every rank's message must contain; NULL: they agree */
    int own;                      /* >= 0: this rank's own check failed: it keeps its message, the
                                     others name it ("rank R: ..."); -1: every message is the same */
    agmm_status status[AG_W], after[AG_W];
    char msg[AG_W][AGMM_ERROR_LEN];
    int exact[AG_W];
} agree_job;

static agmm_status agree_rank(agmm_ctx *ctx, void *arg)
{
    agree_job *job = arg;
    const int r = agmm_ctx_rank(ctx);
    agmm_plan *plan = NULL;
    job->status[r] = job->all_reduce ? agmm_plan_all_reduce(&plan, ctx, &job->ar[r])
                                     : agmm_plan_ag_matmul(&plan, ctx, &job->mm[r]);
    snprintf(job->msg[r], sizeof job->msg[r], "%s", agmm_last_error(ctx));
    agmm_plan_destroy(plan);
    job->after[r] = plan_after(ctx, &job->exact[r]);
    return AGMM_SUCCESS;
}

void test_plan_agreement(void)
{
    const agmm_ag_matmul_desc mm = {.m = 16, .n = 24, .k = 32, .backend = "ce"};
    const agmm_all_reduce_desc ar = {.n = 100, .dtype = AGMM_DTYPE_F32, .backend = "one_shot"};
    agree_job cases[] = {
        {.what = "rank 1 has M=32, the others M=16", .mm = {mm, mm, mm},
         .needle = "rank 0 ag_matmul/ce M=16 N=24 K=32 b_layout=col splits=1, rank 1 ag_matmul/ce M=32"},
        {.what = "rank 0 names ce, the others fused", .mm = {mm, mm, mm},
         .needle = "rank 1 ag_matmul/fused M=16 N=24 K=32 b_layout=col splits=1 (ranks 1 and 2 differ"},
        {.what = "rank 2 has a row-major B", .mm = {mm, mm, mm}, .needle = "b_layout=row splits=1 (rank 2 differs"},
        {.what = "rank 1 has splits=2", .mm = {mm, mm, mm}, .needle = "rank 1 ag_matmul/ce M=16 N=24 K=32 b_layout=col splits=2"},
        {.what = "rank 2 has bf16, the others fp32", .all_reduce = 1, .ar = {ar, ar, ar},
         .needle = "rank 2 all_reduce/one_shot n=100 dtype=bf16"},
        {.what = "rank 1 has two_shot", .all_reduce = 1, .ar = {ar, ar, ar}, .needle = "rank 1 all_reduce/two_shot"},
        {.what = "rank 1 names auto, the others ce", .mm = {mm, mm, mm},
         .needle = "rank 1 ag_matmul/auto M=16 N=24 K=32 b_layout=col splits=1 (rank 1 differs"},
        {.what = "rank 2 has K=7 (invalid)", .mm = {mm, mm, mm}, .needle = "K=7 is not a multiple of 8", .own = 2},
    };
    for (size_t i = 0; i + 1 < sizeof cases / sizeof *cases; i++)
        cases[i].own = -1;
    cases[0].mm[1].m = 32;
    cases[1].mm[1].backend = cases[1].mm[2].backend = "fused";
    cases[2].mm[2].b_layout = AGMM_LAYOUT_ROW_MAJOR;
    cases[3].mm[1].splits = 2;
    cases[4].ar[2].dtype = AGMM_DTYPE_BF16;
    cases[5].ar[1].backend = "two_shot";
    cases[6].mm[1].backend = "auto";
    cases[7].mm[2].k = 7;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        agree_job *job = &cases[i];
        agmm_world *world = test_cpu_world(AG_W, 0.5);
        if (world) {
            agmm_world_run(world, agree_rank, job);
            agmm_world_destroy(world);
        }
        int ok = world != NULL, after = 1;
        for (int r = 0; r < AG_W; r++) {
            char named[16];
            snprintf(named, sizeof named, "rank %d: ", job->own);
            ok &= job->needle ? job->status[r] == AGMM_ERR_INVALID_ARG && strstr(job->msg[r], job->needle) &&
                                    (job->own < 0 ? strcmp(job->msg[r], job->msg[0]) == 0
                                                  : (r == job->own) == (strstr(job->msg[r], named) == NULL))
                              : job->status[r] == AGMM_SUCCESS;
            after &= job->after[r] == AGMM_SUCCESS && job->exact[r];
        }
        agmm_check(ok && after, "%s %s: %s on every rank%s%s; a correct plan afterwards runs exactly",
                   job->all_reduce ? "all_reduce" : "ag_matmul", job->what,
                   !job->needle ? "the plan is made"
                   : job->own < 0 ? "AGMM_ERR_INVALID_ARG, the same message"
                                  : "AGMM_ERR_INVALID_ARG, the failing rank's own message, the others naming it",
                   job->needle ? ": " : "", job->needle ? job->msg[0] : "");
    }
}
