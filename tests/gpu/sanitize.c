/* The subset compute-sanitizer runs (bench/sanitize.sh): `agmm-gputest sanitize TOOL`, and its
 * plan, `agmm-gputest sanitize-plan` (no GPU needed; docs/architecture.md holds it verbatim and
 * tests/cli_test.sh compares).
 *
 * Small shapes of every kernel and backend, in groups. Each group runs its W = 1 part, then its
 * cases of emulated worlds of W > 1 ranks (ranks sharing the GPU). Under a tool that cannot run a
 * group at W > 1 (w1_only below: the tools serialise kernels, and ranks that spin on each other on
 * one GPU then never meet), that group's cases of the larger world run at W = 1 instead, once (those
 * its W = 1 part has not run already), and the plan says so: every case runs, only the world
 * changes. The cases come from the library's
 * table (gpu_step_cases), so a new backend or operation is in them without a line here. */
#include <stdio.h>
#include <string.h>

#include "gpu_tests.h"
#include "../harness.h"

enum { MEMCHECK = 1u << 0, RACECHECK = 1u << 1, SYNCCHECK = 1u << 2, INITCHECK = 1u << 3, EVERY_TOOL = 15u };

static const char *const tool_names[] = {"memcheck", "racecheck", "synccheck", "initcheck"};
#define NTOOLS 4

/* Runs the group's cases of a world of `cases_of` ranks in a world of `nranks` (equal unless the
 * tool makes them run at W = 1; then, with only_new, without the cases the group's W = 1 part ran). */
typedef void (*group_fn)(int nranks, int cases_of, int only_new);

static void world_group(int nranks, int cases_of, int only_new) { test_world_small(nranks); }
static void engine_group(int nranks, int cases_of, int only_new) { test_gemm_engine_small(); }
static void graph_group(int nranks, int cases_of, int only_new) { graph_cases(nranks, cases_of, only_new, 2, 2, 1); }
static void steps_group(int nranks, int cases_of, int only_new) { steps_cases(nranks, cases_of, only_new, 4, 0, 1); }
static void streams_group(int nranks, int cases_of, int only_new)
{
    steps_cases(nranks, cases_of, only_new, 4, 1, 1);
}
/* Its own cases, the same at every W: at W = 1 in place of a larger world, nothing new to run. */
static void ar_norm_group(int nranks, int cases_of, int only_new)
{
    if (!only_new)
        test_ar_norm_small(nranks);
}

typedef struct {
    const char *name;
    const char *what;
    int at_w1;                 /* its W = 1 part runs */
    int larger[2];             /* the emulated worlds it runs (0: none) */
    group_fn run;
} san_group;

static const san_group groups[] = {
    {"world", "the symmetric heap, peer reads, pad barriers; signal kernels", 0, {2, 0}, world_group},
    {"gemm_engine", "every config of the GEMM engine, both layouts of B", 1, {0, 0}, engine_group},
    {"graph", "CUDA-graph captures (1 and 2 steps, staged and io.input), 2 replays", 1, {2, 4}, graph_group},
    {"steps", "4 steps back to back, a rank slowed at random", 1, {4, 0}, steps_group},
    {"two_streams", "4 steps on two streams", 0, {2, 0}, streams_group},
    {"ar_norm", "all_reduce_rmsnorm's kernels, two small cases (tests/gpu/test_ar_norm.c)", 1, {2, 0},
     ar_norm_group},
};
#define NGROUPS ((int)(sizeof groups / sizeof groups[0]))

/* Groups a tool cannot run at W > 1, and why (found on the H200, as stated). */
static const struct {
    const char *group;
    unsigned tools;
    const char *why;
} w1_only[] = {
    {"graph", EVERY_TOOL,
     "a graph's cross-rank barrier kernels on one GPU never meet under the tools' serialisation (H200, "
     "2026-12-03: the emulated W = 2 capture of ce timed out under memcheck, racecheck and synccheck)"},
    {"steps", INITCHECK,
     "initcheck checks every copy's source, and the emulated W = 4 steps did not finish within its 3 minutes "
     "(H200, 2026-12-03: its W = 1 part passed, W = 4 still running at 180 s, no report)"},
    {"two_streams", INITCHECK,
     "two ranks' barriers on one GPU did not meet under initcheck (H200, 2026-12-03 and 12-04: ag_matmul/ce at "
     "W = 2 timed out after 60 s waiting for rank 1, both times; every other case passed with 0 errors)"},
};

static unsigned tool_bit(const char *tool)
{
    for (int t = 0; t < NTOOLS; t++)
        if (tool && strcmp(tool, tool_names[t]) == 0)
            return 1u << t;
    return 0;
}

/* Why group g runs at W = 1 only under `tool` (bit), or NULL. */
static const char *only_w1(const san_group *g, unsigned tool)
{
    for (size_t i = 0; i < sizeof w1_only / sizeof w1_only[0]; i++)
        if (strcmp(w1_only[i].group, g->name) == 0 && (w1_only[i].tools & tool))
            return w1_only[i].why;
    return NULL;
}

/* "W=1, 2, 4" or "W=1; its W=2, 4 cases at W=1" for group g under `tool`. */
static void worlds_text(const san_group *g, unsigned tool, char *buf, size_t len)
{
    char larger[32] = "";
    size_t used = 0;
    for (int i = 0; i < 2 && g->larger[i]; i++)
        used += (size_t)snprintf(larger + used, sizeof larger - used, "%s%d", i ? ", " : "", g->larger[i]);
    if (!g->larger[0])
        snprintf(buf, len, "W=1");
    else if (only_w1(g, tool))
        snprintf(buf, len, "%sits W=%s cases at W=1", g->at_w1 ? "W=1; " : "", larger);
    else
        snprintf(buf, len, "W=%s%s", g->at_w1 ? "1, " : "", larger);
}

int sanitize_known_tool(const char *tool) { return tool_bit(tool) != 0; }

void sanitize_plan_print(FILE *f)
{
    fprintf(f, "| group | what | %s | %s | %s | %s |\n|---|---|---|---|---|---|\n", tool_names[0], tool_names[1],
            tool_names[2], tool_names[3]);
    for (int i = 0; i < NGROUPS; i++) {
        fprintf(f, "| %s | %s |", groups[i].name, groups[i].what);
        for (int t = 0; t < NTOOLS; t++) {
            char worlds[64];
            worlds_text(&groups[i], 1u << t, worlds, sizeof worlds);
            fprintf(f, " %s |", worlds);
        }
        fputc('\n', f);
    }
    fputs("\nRun at W = 1 only, and why:\n\n", f);
    for (size_t i = 0; i < sizeof w1_only / sizeof w1_only[0]; i++) {
        char tools[64] = "";
        size_t used = 0;
        for (int t = 0; t < NTOOLS; t++)
            if (w1_only[i].tools & (1u << t))
                used += (size_t)snprintf(tools + used, sizeof tools - used, "%s%s", used ? ", " : "", tool_names[t]);
        fprintf(f, "- %s under %s: %s\n", w1_only[i].group, tools, w1_only[i].why);
    }
}

void test_sanitize(const char *tool)
{
    const unsigned bit = tool_bit(tool);
    for (int i = 0; i < NGROUPS; i++) {
        const san_group *g = &groups[i];
        const char *why = only_w1(g, bit);
        char worlds[64];
        worlds_text(g, bit, worlds, sizeof worlds);
        printf("== sanitize %s: group %s, %s%s%s\n", tool ? tool : "(no tool)", g->name, worlds, why ? ": " : "",
               why ? why : "");
        fflush(stdout);
        if (g->at_w1)
            g->run(1, 1, 0);
        if (why && g->larger[0])
            g->run(1, g->larger[0], g->at_w1); /* every larger world offers the same backends: one list */
        for (int w = 0; !why && w < 2 && g->larger[w]; w++)
            g->run(g->larger[w], g->larger[w], 0);
    }
}
