/* The knob table (src/core/knobs.h):
 *   table    every entry complete and its variable unique; every number's default parses inside
 *            its own range; unset and empty read as the default
 *   values   good values are read, bad ones refused naming the variable and what it allows
 *   worlds   a bad knob fails world creation naming it; AGMM_TIMEOUT_S and AGMM_LOG reach the
 *            ranks; a config's timeout_s wins over AGMM_TIMEOUT_S; AGMM_TUNE_RUNS bounds auto's
 *            timed runs
 * Every test restores the variables it sets. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "api/tune.h"
#include "core/knobs.h"
#include "cpu_tests.h"
#include "harness.h"
#include "world/world.h"

void test_knobs_table(void)
{
    int complete = 1, unique = 1, defaults = 1;
    char bad[160] = "";
    for (int i = 0; i < AGMM_KNOB_COUNT; i++) {
        const agmm_knob *k = agmm_knob_at((agmm_knob_id)i);
        if (strncmp(k->var, "AGMM_", 5) != 0 || !k->def[0] || !k->allowed[0] || !k->doc[0]) {
            complete = 0;
            snprintf(bad, sizeof bad, "%s is incomplete", k->var);
        }
        for (int j = 0; j < i; j++)
            unique &= strcmp(agmm_knob_at((agmm_knob_id)j)->var, k->var) != 0;
        /* Unset, then empty: the default either way (an empty TEXT knob is the caller's). */
        for (int empty = 0; empty < 2; empty++) {
            if (empty)
                setenv(k->var, "", 1);
            else
                unsetenv(k->var);
            agmm_error err = {0};
            agmm_knob_value v;
            agmm_status st = agmm_knob_read((agmm_knob_id)i, &v, &err);
            int ok = st == AGMM_SUCCESS;
            if (k->kind == AGMM_KNOB_NUMBER || k->kind == AGMM_KNOB_INTEGER)
                ok &= v.text == NULL && v.number == strtod(k->def, NULL) && v.number >= k->min && v.number <= k->max;
            else if (k->kind == AGMM_KNOB_CHOICE)
                ok &= v.text == NULL && v.choice >= -1;
            else
                ok &= empty ? v.text != NULL && v.text[0] == '\0' : v.text == NULL;
            if (!ok) {
                defaults = 0;
                snprintf(bad, sizeof bad, "%s %s reads as text %s, number %g, choice %d", k->var,
                         empty ? "empty" : "unset", v.text ? v.text : "NULL", v.number, v.choice);
            }
            unsetenv(k->var);
        }
    }
    agmm_check(complete && unique && defaults,
               "knobs: %d entries, each AGMM_* with a default, what it allows and a line of doc, each variable once; "
               "unset or empty reads as the default, inside its own range%s%s",
               AGMM_KNOB_COUNT, bad[0] ? ": " : "", bad);
}

typedef struct {
    agmm_knob_id id;
    const char *value;
    int ok;              /* 1: accepted */
    double number;       /* accepted NUMBER/INTEGER: the value read */
    int choice;          /* accepted CHOICE: the index read */
    const char *needle;  /* refused: what the message must say */
} knob_case;

void test_knobs_values(void)
{
    static const knob_case cases[] = {
        {AGMM_KNOB_LOG, "debug", 1, 0, 3, NULL},
        {AGMM_KNOB_LOG, "error", 1, 0, 0, NULL},
        {AGMM_KNOB_LOG, "verbose", 0, 0, 0, "AGMM_LOG=verbose: must be one of error, warn, info, debug (unset: warn)"},
        {AGMM_KNOB_LOG, "WARN", 0, 0, 0, "AGMM_LOG=WARN: must be one of"},
        {AGMM_KNOB_TUNE, "1", 1, 0, 1, NULL},
        {AGMM_KNOB_TUNE, "yes", 0, 0, 0, "AGMM_TUNE=yes: must be one of 0, 1"},
        {AGMM_KNOB_NCCL_BLOCKING, "0", 1, 0, 0, NULL},
        {AGMM_KNOB_NCCL_BLOCKING, "2", 0, 0, 0, "AGMM_NCCL_BLOCKING=2: must be one of 0, 1 (unset: 1)"},
        {AGMM_KNOB_TIMEOUT_S, "0.25", 1, 0.25, 0, NULL},
        {AGMM_KNOB_TIMEOUT_S, "0", 0, 0, 0, "AGMM_TIMEOUT_S=0: must be a number in 0.001..86400 (seconds) (unset: 5)"},
        {AGMM_KNOB_TIMEOUT_S, "5s", 0, 0, 0, "AGMM_TIMEOUT_S=5s: must be a number"},
        {AGMM_KNOB_TIMEOUT_S, "nan", 0, 0, 0, "AGMM_TIMEOUT_S=nan: must be a number"},
        {AGMM_KNOB_TUNE_RUNS, "7", 1, 7, 0, NULL},
        {AGMM_KNOB_TUNE_RUNS, "2.5", 0, 0, 0, "AGMM_TUNE_RUNS=2.5: must be a whole number in 1..1000"},
        {AGMM_KNOB_TUNE_RUNS, "0", 0, 0, 0, "AGMM_TUNE_RUNS=0: must be a whole number in 1..1000"},
        {AGMM_KNOB_TUNE_BUDGET_MS, "12.5", 1, 12.5, 0, NULL},
        {AGMM_KNOB_TUNE_BUDGET_MS, "1e9", 0, 0, 0, "AGMM_TUNE_BUDGET_MS=1e9: must be a number in 1..60000"},
        {AGMM_KNOB_JOB_ID, "any text at all", 1, 0, -1, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const knob_case *c = &cases[i];
        const agmm_knob *k = agmm_knob_at(c->id);
        setenv(k->var, c->value, 1);
        agmm_error err = {0};
        agmm_knob_value v;
        agmm_status st = agmm_knob_read(c->id, &v, &err);
        agmm_error all = {0};
        agmm_status st_all = agmm_knobs_check(&all);
        unsetenv(k->var);
        int ok;
        if (c->ok)
            ok = st == AGMM_SUCCESS && st_all == AGMM_SUCCESS && v.text && strcmp(v.text, c->value) == 0 &&
                 (k->kind == AGMM_KNOB_CHOICE ? v.choice == c->choice
                  : k->kind == AGMM_KNOB_TEXT ? 1
                                              : v.number == c->number);
        else
            ok = st == AGMM_ERR_INVALID_ARG && st_all == AGMM_ERR_INVALID_ARG && strstr(err.msg, c->needle) &&
                 strstr(all.msg, c->needle) && v.text == NULL;
        agmm_check(ok, "knobs: %s=%s is %s (%s)", k->var, c->value, c->ok ? "read" : "refused, naming it",
                   c->ok ? "its value" : agmm_error_detail(err.msg));
    }
}

typedef struct {
    double timeout_s;
    int log_level;
    int runs;
    int how;
} knob_world_job;

static agmm_status knob_world_rank(agmm_ctx *ctx, void *arg)
{
    knob_world_job *j = arg;
    if (agmm_ctx_rank(ctx) != 0)
        return AGMM_SUCCESS;
    j->timeout_s = agmm_ctx_info(ctx)->timeout_s;
    j->log_level = agmm_ctx_info(ctx)->log_level;
    return AGMM_SUCCESS;
}

static agmm_status knob_tune_rank(agmm_ctx *ctx, void *arg)
{
    knob_world_job *j = arg;
    agmm_ag_matmul_desc d = {.m = 16, .n = 16, .k = 16};
    agmm_plan *p = NULL;
    agmm_status st = agmm_plan_ag_matmul(&p, ctx, &d);
    if (st == AGMM_SUCCESS && agmm_ctx_rank(ctx) == 0) {
        j->runs = agmm_tune_last(ctx)->runs;
        j->how = (int)agmm_tune_last(ctx)->how;
    }
    agmm_plan_destroy(p);
    return st;
}

void test_knobs_worlds(void)
{
    char errbuf[512] = "";
    agmm_world *w = NULL;
    setenv("AGMM_LOG", "verbose", 1);
    agmm_world_config cfg = {.kind = AGMM_WORLD_CPU, .nranks = 2};
    agmm_status st = agmm_world_create(&w, &cfg, errbuf, sizeof errbuf);
    unsetenv("AGMM_LOG");
    agmm_check(st == AGMM_ERR_INVALID_ARG && w == NULL && strstr(errbuf, "AGMM_LOG=verbose: must be one of") != NULL,
               "knobs: AGMM_LOG=verbose fails world creation naming it (%s)", errbuf);
    agmm_world_destroy(w);

    /* The environment's timeout where the config says 0, the config's where it says one. */
    const double want[2] = {0.25, 2.0};
    for (int c = 0; c < 2; c++) {
        setenv("AGMM_TIMEOUT_S", "0.25", 1);
        setenv("AGMM_LOG", "error", 1);
        knob_world_job j = {0};
        w = test_cpu_world(2, c == 0 ? 0 : 2.0);
        unsetenv("AGMM_TIMEOUT_S");
        unsetenv("AGMM_LOG");
        if (w == NULL)
            continue;
        agmm_world_run(w, knob_world_rank, &j);
        agmm_world_destroy(w);
        agmm_check(fabs(j.timeout_s - want[c]) < 1e-12 && j.log_level == AGMM_LOG_ERROR,
                   "knobs: AGMM_TIMEOUT_S=0.25 with config timeout_s=%g: the ranks wait %g s (want %g); AGMM_LOG=error "
                   "reaches them (%d)",
                   c == 0 ? 0.0 : 2.0, j.timeout_s, want[c], j.log_level);
    }

    /* auto's timed runs are bounded by AGMM_TUNE_RUNS (the CPU world's runs of 16^3 take far less
     * than the budget, so without the bound there would be 20). */
    setenv("AGMM_TUNE", "1", 1);
    setenv("AGMM_TUNE_CACHE", "", 1);
    setenv("AGMM_TUNE_RUNS", "3", 1);
    knob_world_job j = {0};
    w = test_cpu_world(2, 0);
    if (w != NULL) {
        st = agmm_world_run(w, knob_tune_rank, &j);
        agmm_world_destroy(w);
        agmm_check(st == AGMM_SUCCESS && j.how == AGMM_TUNE_MEASURED && j.runs >= 1 && j.runs <= 3,
                   "knobs: AGMM_TUNE_RUNS=3: auto measured (how %d) with %d timed runs per candidate at most", j.how,
                   j.runs);
    }
    unsetenv("AGMM_TUNE");
    unsetenv("AGMM_TUNE_CACHE");
    unsetenv("AGMM_TUNE_RUNS");
}
