/* Fault injection (AGMM_FAULT, src/core/fault.h): the spec's grammar and messages, rank=any's draw,
 * and the fault matrix: every point of a world of threads (create, plan, run) x every action
 * (delay, hang, exit) in the CPU world, for ag_matmul and all_reduce. The scenario and its checks
 * (fault_scenario.c) serve process worlds too: fault_process.c drives them there, join included. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agmm.h"
#include "core/fault.h"
#include "cpu_tests.h"
#include "fault_scenario.h"
#include "harness.h"

/* ---- the spec ---- */

void test_fault_spec(void)
{
    static const struct {
        const char *spec;
        agmm_fault_action action;
        agmm_fault_at at;
        int rank;
        int64_t ms;
    } good[] = {
        {"rank=1,at=run,action=hang", AGMM_FAULT_HANG, AGMM_FAULT_AT_RUN, 1, -1},
        {"rank=0,at=create,action=exit", AGMM_FAULT_EXIT, AGMM_FAULT_AT_CREATE, 0, -1},
        {"rank=2,at=join,action=hang,ms=10", AGMM_FAULT_HANG, AGMM_FAULT_AT_JOIN, 2, 10},
        {"action=delay,ms=250,at=plan,rank=63", AGMM_FAULT_DELAY, AGMM_FAULT_AT_PLAN, 63, 250},
        {"rank=any,at=run,action=delay,ms=0", AGMM_FAULT_DELAY, AGMM_FAULT_AT_RUN, AGMM_FAULT_ANY_RANK, 0},
        {"rank=2,at=plan,action=hang,ms=3600000", AGMM_FAULT_HANG, AGMM_FAULT_AT_PLAN, 2, 3600000},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        agmm_error err = {0};
        agmm_fault f;
        agmm_status st = agmm_fault_parse(good[i].spec, &f, &err);
        agmm_check(st == AGMM_SUCCESS && f.action == good[i].action && f.at == good[i].at && f.rank == good[i].rank &&
                       f.ms == good[i].ms,
                   "fault spec \"%s\" parses (action %d at %d rank %d ms %lld)%s%s", good[i].spec, (int)f.action,
                   (int)f.at, f.rank, (long long)f.ms, err.msg[0] ? ": " : "", err.msg);
    }
    agmm_error err = {0};
    agmm_fault f;
    agmm_check(agmm_fault_parse("", &f, &err) == AGMM_SUCCESS && f.action == AGMM_FAULT_NONE &&
                   agmm_fault_parse(NULL, &f, &err) == AGMM_SUCCESS && f.action == AGMM_FAULT_NONE,
               "fault spec: empty or absent means no fault");

    /* Each malformed spec: AGMM_ERR_INVALID_ARG, naming what is wrong, with the grammar. */
    static const struct {
        const char *spec, *names;
    } bad[] = {
        {"rank=1,at=run", "action= is missing"},
        {"at=run,action=exit", "rank= is missing"},
        {"rank=1,action=exit", "at= is missing"},
        {"rank=1,at=run,action=delay", "action=delay needs ms=N"},
        {"rank=1,at=run,action=exit,ms=5", "ms= applies to delay and hang"},
        {"rank=64,at=run,action=exit", "rank=64: R must be a rank"},
        {"rank=-1,at=run,action=exit", "rank=-1: R must be"},
        {"rank=,at=run,action=exit", "rank=: R must be"},
        {"rank=1,at=start,action=exit", "at=start: POINT must be join, create, plan or run"},
        {"rank=1,at=joins,action=exit", "at=joins: POINT must be"},
        {"rank=1,at=run,action=crash", "action=crash: ACTION must be delay, hang or exit"},
        {"rank=1,at=run,action=hang,ms=3600001", "ms=3600001: N must be milliseconds"},
        {"rank=1,at=run,action=hang,ms=1e3", "ms=1e3: N must be"},
        {"rank=1,at=run,action=exit,rank=2", "rank=2: given twice"},
        {"rank=1,at=run,action=exit,action=hang", "action=hang: given twice"},
        {"rank=1,at=run,action=exit,", ": not key=value"},
        {"rank=1 ,at=run,action=exit", "rank=1 : R must be"},
        {"rank=1,at=run,action=exit,when=now", "when=now: unknown key"},
        {"hang", "hang: not key=value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        agmm_error e = {0};
        agmm_status st = agmm_fault_parse(bad[i].spec, &f, &e);
        agmm_check(st == AGMM_ERR_INVALID_ARG && f.action == AGMM_FAULT_NONE && strstr(e.msg, bad[i].names) &&
                       strstr(e.msg, "the grammar is rank=R,at=POINT,action=ACTION[,ms=N]"),
                   "fault spec \"%s\" is refused naming \"%s\" and giving the grammar: \"%s\"", bad[i].spec,
                   bad[i].names, e.msg);
    }

    /* From the environment, a rank the world lacks is refused too, naming AGMM_FAULT. */
    setenv("AGMM_FAULT", "rank=4,at=run,action=exit", 1);
    agmm_error e = {0};
    agmm_status st4 = agmm_fault_from_env(4, &f, &e);
    agmm_error e5 = {0};
    agmm_status st5 = agmm_fault_from_env(5, &f, &e5);
    unsetenv("AGMM_FAULT");
    agmm_check(st4 == AGMM_ERR_INVALID_ARG && strstr(e.msg, "AGMM_FAULT=\"rank=4,at=run,action=exit\": rank=4, but the "
                                                             "world has 4 ranks") &&
                   st5 == AGMM_SUCCESS && f.rank == 4,
               "AGMM_FAULT rank=4 is refused in a world of 4 ranks, taken in a world of 5: \"%s\"", e.msg);
}

void test_fault_any_rank(void)
{
    /* rank=any: each occurrence strikes exactly one rank, the same whichever rank asks, and over
     * many occurrences every rank is struck. */
    agmm_fault f = {.action = AGMM_FAULT_DELAY, .at = AGMM_FAULT_AT_RUN, .rank = AGMM_FAULT_ANY_RANK, .ms = 0};
    enum { W = 5, OCCURRENCES = 200 };
    int struck[W] = {0}, one_each = 1;
    for (uint64_t occ = 1; occ <= OCCURRENCES; occ++) {
        int hits = 0;
        for (int r = 0; r < W; r++) {
            /* A delay of 0 ms returns at once; which rank it struck shows in the debug log only, so
             * the draw is observed through a hang of 0 ms, which fails the call it strikes. */
            agmm_fault h = f;
            h.action = AGMM_FAULT_HANG;
            agmm_fault_site site = {.rank = r, .nranks = W, .timeout_s = 0.1, .occurrence = occ};
            agmm_error err = {0};
            if (agmm_fault_point(&h, AGMM_FAULT_AT_RUN, &site, &err) != AGMM_SUCCESS)
                hits++, struck[r]++;
            /* Another point is never struck. */
            if (agmm_fault_point(&h, AGMM_FAULT_AT_PLAN, &site, &err) != AGMM_SUCCESS)
                hits += 100;
        }
        one_each &= hits == 1;
    }
    int all_struck = 1;
    for (int r = 0; r < W; r++)
        all_struck &= struck[r] > OCCURRENCES / W / 3;
    agmm_check(one_each && all_struck,
               "rank=any strikes exactly one of %d ranks per occurrence, only at its point, every rank some time "
               "(%d %d %d %d %d of %d)",
               W, struck[0], struck[1], struck[2], struck[3], struck[4], OCCURRENCES);
}

/* ---- the threads driver ---- */

typedef struct {
    agmm_world *world;
    int rank;
    const fault_case *c;
    pthread_barrier_t *meet;
    fault_outcome *out;
} fault_thread;

static void meet_barrier(void *arg) { pthread_barrier_wait(arg); }

static void *fault_thread_main(void *p)
{
    fault_thread *t = p;
    fault_scenario_rank(t->world, t->rank, t->c, meet_barrier, t->meet, t->out);
    return NULL;
}

static void run_case_threads(const fault_case *c)
{
    char spec[96];
    fault_case_spec(c, spec, sizeof spec);
    setenv("AGMM_FAULT", spec, 1);
    agmm_world *world = test_cpu_world(c->nranks, c->timeout_s);
    fault_outcome *outs = calloc((size_t)c->nranks, sizeof *outs);
    fault_thread t[AGMM_MAX_RANKS];
    pthread_t tid[AGMM_MAX_RANKS];
    pthread_barrier_t meet;
    pthread_barrier_init(&meet, NULL, (unsigned)c->nranks);
    /* The create point's messages go to stderr: read there, but not under a sanitizer, whose
     * report would be swallowed with the captured stderr. */
    const int capture = strcmp(c->point, "create") == 0 && !TEST_SANITIZED;
    FILE *captured = capture ? tmpfile() : NULL;
    int saved = -1;
    if (captured) {
        fflush(stderr);
        saved = dup(2);
        dup2(fileno(captured), 2);
    }
    int started = 0;
    for (int r = 0; world && r < c->nranks; r++) {
        t[r] = (fault_thread){world, r, c, &meet, &outs[r]};
        if (pthread_create(&tid[r], NULL, fault_thread_main, &t[r]) != 0)
            break;
        started++;
    }
    for (int r = 0; r < started; r++)
        pthread_join(tid[r], NULL);
    if (captured) {
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        fault_read_create_messages(captured, outs, c->nranks);
        fclose(captured);
    }
    agmm_world_destroy(world);
    unsetenv("AGMM_FAULT");
    pthread_barrier_destroy(&meet);
    if (started == c->nranks)
        fault_scenario_check(c, outs, !(strcmp(c->point, "create") == 0 && TEST_SANITIZED));
    else
        agmm_check(0, "AGMM_FAULT=%s: could not start %d rank threads", spec, c->nranks);
    free(outs);
}

#define FAULT_TIMEOUT_S 0.25
#define FAULT_DELAY_MS 60

void test_fault_matrix(void)
{
    static const char *const points[] = {"create", "plan", "run"};
    static const char *const actions[] = {"delay", "hang", "exit"};
    for (int op = 0; op < 2; op++)
        for (int p = 0; p < 3; p++)
            for (int a = 0; a < 3; a++) {
                fault_case c = {.point = points[p], .action = actions[a], .faulted = op ? 2 : 1,
                                .delay_ms = FAULT_DELAY_MS, .all_reduce = op, .backend = op ? "two_shot" : "ce",
                                .nranks = 3, .timeout_s = FAULT_TIMEOUT_S};
                run_case_threads(&c);
            }
}
