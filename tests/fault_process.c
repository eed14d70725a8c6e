/* agmm-proctest's fault modes: the fault scenario (fault_scenario.h) with one process per rank, in
 * the CPU world of processes, launched by tests/fault_process_test.sh with torchrun's variables.
 *
 *   agmm-proctest --fault-case POINT,ACTION,F,OP [--timeout S]
 *       one rank: sets AGMM_FAULT for the case, joins the world (timing the join: the join point),
 *       runs fault_scenario_rank and prints its outcome on stdout (the library writes nothing
 *       there); exits 0 if every call succeeded with exact results, else 1 (3: the injected exit)
 *   agmm-proctest --fault-case POINT,ACTION,F,OP [--timeout S] --check PREFIX N
 *       the case's checks over N ranks' files: PREFIX.R.out (the outcome), PREFIX.R.err (stderr,
 *       where a failed context creation leaves its detail) and PREFIX.R.rc (the exit status);
 *       PASS/FAIL lines and the summary
 *
 * POINT join, create, plan or run; ACTION delay, hang or exit; OP ag_matmul (backend ce) or
 * all_reduce (two_shot). The processes do not meet before destroying (fault_scenario_rank's meet
 * does nothing here): in the CPU world a process's destroy touches nothing of its peers' (each maps
 * their memory itself, and the kernel keeps it until the last mapping goes), and after a fault the
 * world could not hold a meeting anyway. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "core/clock.h"
#include "cpu/cpu.h"
#include "fault_scenario.h"
#include "harness.h"

#define FAULT_DELAY_MS 100

static const char *const points[] = {"join", "create", "plan", "run"};
static const char *const actions[] = {"delay", "hang", "exit"};

/* The static name equal to the first len characters of s among names, or NULL. */
static const char *name_of(const char *s, size_t len, const char *const *names, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (strlen(names[i]) == len && strncmp(s, names[i], len) == 0)
            return names[i];
    return NULL;
}

/* "POINT,ACTION,F,OP" into c; 0 on success. */
static int parse_case(const char *arg, fault_case *c)
{
    const char *comma1 = strchr(arg, ','), *comma2 = comma1 ? strchr(comma1 + 1, ',') : NULL;
    const char *comma3 = comma2 ? strchr(comma2 + 1, ',') : NULL;
    if (comma3 == NULL)
        return -1;
    char *end;
    long f = strtol(comma2 + 1, &end, 10);
    c->point = name_of(arg, (size_t)(comma1 - arg), points, sizeof points / sizeof *points);
    c->action = name_of(comma1 + 1, (size_t)(comma2 - comma1 - 1), actions, sizeof actions / sizeof *actions);
    c->faulted = (int)f;
    c->all_reduce = strcmp(comma3 + 1, "all_reduce") == 0;
    c->backend = c->all_reduce ? "two_shot" : "ce";
    c->delay_ms = FAULT_DELAY_MS;
    c->processes = 1;
    return c->point && c->action && end == comma3 && f >= 0 && f < AGMM_MAX_RANKS &&
                   (c->all_reduce || strcmp(comma3 + 1, "ag_matmul") == 0)
               ? 0
               : -1;
}

static double now_s(void) { return (double)agmm_mono_ns() * 1e-9; }

static void no_meet(void *arg) {}

/* The outcome as two lines: the numbers, then the message. */
static void write_outcome(FILE *f, const fault_outcome *o)
{
    char msg[sizeof o->msg];
    snprintf(msg, sizeof msg, "%s", o->msg);
    msg[strcspn(msg, "\n")] = '\0';
    fprintf(f, "outcome ran=%d status=%d at=%s elapsed=%.6f point=%.6f exact=%d\n%s\n", o->ran, (int)o->status,
            o->failed_at ? o->failed_at : "-", o->elapsed_s, o->point_s, o->exact, msg);
}

/* 0 when `path` held an outcome. */
static int read_outcome(const char *path, fault_outcome *o)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char line[AGMM_ERROR_LEN + 128], at[16] = "";
    int status = 0, ok = fgets(line, sizeof line, f) != NULL &&
                         sscanf(line, "outcome ran=%d status=%d at=%15s elapsed=%lf point=%lf exact=%d", &o->ran,
                                &status, at, &o->elapsed_s, &o->point_s, &o->exact) == 6;
    if (ok && fgets(o->msg, sizeof o->msg, f) != NULL)
        o->msg[strcspn(o->msg, "\n")] = '\0';
    fclose(f);
    o->status = (agmm_status)status;
    o->failed_at = name_of(at, strlen(at), points, sizeof points / sizeof *points);
    return ok ? 0 : -1;
}

/* One rank: its outcome on stdout, its exit status returned. */
static int run_rank(fault_case *c)
{
    char spec[96];
    fault_case_spec(c, spec, sizeof spec);
    setenv("AGMM_FAULT", spec, 1);
    agmm_join_config jc = {.kind = AGMM_WORLD_CPU, .rank = -1, .nranks = -1, .device = -1, .timeout_s = c->timeout_s};
    agmm_world *world = NULL;
    char err[AGMM_ERROR_LEN] = "";
    fault_outcome out;
    double t0 = now_s();
    agmm_status st = agmm_world_join(&world, &jc, err, sizeof err);
    double join_s = now_s() - t0;
    if (st == AGMM_SUCCESS) {
        c->nranks = agmm_world_nranks(world);
        fault_scenario_rank(world, agmm_world_first_rank(world), c, no_meet, NULL, &out);
    } else {
        out = (fault_outcome){.ran = 1, .status = st, .failed_at = "join", .elapsed_s = join_s};
        snprintf(out.msg, sizeof out.msg, "%s", err);
    }
    if (strcmp(c->point, "join") == 0)
        out.point_s = join_s;
    agmm_world_destroy(world);
    write_outcome(stdout, &out);
    return out.status == AGMM_SUCCESS && out.exact ? 0 : 1;
}

/* The checks, from every rank's files. */
static int check_ranks(fault_case *c, const char *prefix, int nranks)
{
    c->nranks = nranks;
    fault_outcome outs[AGMM_MAX_RANKS];
    char path[4096];
    for (int r = 0; r < nranks; r++) {
        memset(&outs[r], 0, sizeof outs[r]);
        outs[r].exit_status = -1;
        snprintf(path, sizeof path, "%s.%d.rc", prefix, r);
        FILE *f = fopen(path, "r");
        if (f == NULL || fscanf(f, "%d", &outs[r].exit_status) != 1)
            agmm_check(0, "rank %d's exit status in %s", r, path);
        if (f)
            fclose(f);
        snprintf(path, sizeof path, "%s.%d.out", prefix, r);
        if (read_outcome(path, &outs[r]) != 0)
            memset(&outs[r], 0, offsetof(fault_outcome, exit_status)); /* no outcome: ran stays 0 */
        snprintf(path, sizeof path, "%s.%d.err", prefix, r);
        if ((f = fopen(path, "r")) != NULL) {
            fault_read_create_messages(f, outs, nranks);
            fclose(f);
        }
    }
    fault_scenario_check(c, outs, 1);
    return agmm_test_summary();
}

int fault_process_main(int argc, char **argv)
{
    fault_case c = {.timeout_s = 0.5};
    const char *prefix = NULL;
    int nranks = 0, ok = argc > 2 && parse_case(argv[2], &c) == 0;
    for (int i = 3; ok && i < argc; i++) {
        if (!strcmp(argv[i], "--timeout") && i + 1 < argc && atof(argv[i + 1]) > 0)
            c.timeout_s = atof(argv[++i]);
        else if (!strcmp(argv[i], "--check") && i + 2 < argc) {
            prefix = argv[++i];
            nranks = atoi(argv[++i]);
            ok = nranks >= 1 && nranks <= AGMM_MAX_RANKS;
        } else
            ok = 0;
    }
    if (!ok) {
        fprintf(stderr, "usage: agmm-proctest --fault-case POINT,ACTION,F,OP [--timeout S] [--check PREFIX N]\n"
                        "  POINT join|create|plan|run, ACTION delay|hang|exit, F the faulted rank, OP "
                        "ag_matmul|all_reduce\n");
        return 2;
    }
    return prefix ? check_ranks(&c, prefix, nranks) : run_rank(&c);
}
