/* Fault injection (AGMM_FAULT, src/core/fault.h): the spec's grammar and messages, rank=any's draw,
 * and the fault matrix: every point (create, plan, run) x every action (delay, hang, exit) in the
 * CPU world of threads, for ag_matmul and all_reduce (fault_scenario.h says what must hold). The
 * scenario and its checks are written for any world, so that process worlds reuse them. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agmm.h"
#include "core/fault.h"
#include "core/numeric.h"
#include "cpu/cpu.h"
#include "cpu/reference.h"
#include "cpu_tests.h"
#include "fault_scenario.h"
#include "harness.h"

static double now_s(void) { return (double)agmm_cpu_now_ns() * 1e-9; }

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

/* ---- the scenario (fault_scenario.h) ---- */

void fault_case_spec(const fault_case *c, char *buf, size_t len)
{
    if (strcmp(c->action, "delay") == 0)
        snprintf(buf, len, "rank=%d,at=%s,action=delay,ms=%d", c->faulted, c->point, c->delay_ms);
    else
        snprintf(buf, len, "rank=%d,at=%s,action=%s", c->faulted, c->point, c->action);
}

enum { SC_M = 16, SC_N = 24, SC_K = 32, SC_AR_N = 1000 };

static void fail_at(fault_outcome *out, const char *where, agmm_status st, double t0, agmm_ctx *ctx)
{
    out->status = st;
    out->failed_at = where;
    out->elapsed_s = now_s() - t0;
    snprintf(out->msg, sizeof out->msg, "%s", ctx ? agmm_last_error(ctx) : "");
}

void fault_scenario_rank(agmm_world *world, int rank, const fault_case *c, void (*meet)(void *), void *meet_arg,
                         fault_outcome *out)
{
    memset(out, 0, sizeof *out);
    out->exit_status = -1;
    const int64_t w = c->nranks, rows = w * SC_M;
    agmm_ctx *ctx = NULL;
    agmm_plan *plan = NULL;
    uint16_t *a = malloc(sizeof(uint16_t) * (size_t)(rows * SC_K)), *b = malloc(sizeof(uint16_t) * SC_K * SC_N);
    uint16_t *a_out = malloc(sizeof(uint16_t) * (size_t)(rows * SC_K));
    uint16_t *c_out = malloc(sizeof(uint16_t) * (size_t)(rows * SC_N));
    uint16_t *ref = malloc(sizeof(uint16_t) * (size_t)(rows * SC_N));
    float *sum_out = malloc(sizeof(float) * SC_AR_N);
    double *want = malloc(sizeof(double) * SC_AR_N);

    double t0 = now_s();
    agmm_status st = agmm_ctx_create(&ctx, world, rank);
    if (strcmp(c->point, "create") == 0)
        out->point_s = now_s() - t0;
    if (st != AGMM_SUCCESS) {
        fail_at(out, "create", st, t0, NULL);
        goto done;
    }
    t0 = now_s();
    if (c->all_reduce) {
        agmm_all_reduce_desc d = {.n = SC_AR_N, .dtype = AGMM_DTYPE_F32, .backend = c->backend};
        st = agmm_plan_all_reduce(&plan, ctx, &d);
    } else {
        agmm_ag_matmul_desc d = {.m = SC_M, .n = SC_N, .k = SC_K, .backend = c->backend, .splits = 2};
        st = agmm_plan_ag_matmul(&plan, ctx, &d);
    }
    if (strcmp(c->point, "plan") == 0)
        out->point_s = now_s() - t0;
    if (st != AGMM_SUCCESS) {
        fail_at(out, "plan", st, t0, ctx);
        goto done;
    }
    /* Exact small integers: every rank's input, to know the result. */
    const uint64_t seed = 0xfa017ull + (uint64_t)c->all_reduce;
    if (c->all_reduce) {
        memset(want, 0, sizeof(double) * SC_AR_N);
        for (int r = 0; r < w; r++) {
            uint64_t s = test_seed_of(seed, r, 0, 1);
            for (int i = 0; i < SC_AR_N; i++) {
                float v = (float)agmm_rng_small_int(&s, 100);
                want[i] += v;
                if (r == rank)
                    ((float *)agmm_plan_input(plan))[i] = v;
            }
        }
        for (int i = 0; i < SC_AR_N; i++)
            sum_out[i] = -1e30f;
    } else {
        for (int r = 0; r < w; r++)
            test_fill_bf16(a + r * SC_M * SC_K, SC_M * SC_K, test_seed_of(seed, r, 0, 1), 2);
        test_fill_bf16(b, SC_K * SC_N, test_seed_of(seed, rank, 0, 2), 2);
        agmm_ref_gemm_bf16(a, b, AGMM_LAYOUT_COL_MAJOR, rows, SC_N, SC_K, NULL, ref);
        memcpy(agmm_plan_input(plan), a + rank * SC_M * SC_K, sizeof(uint16_t) * SC_M * SC_K);
        test_poison_bf16(a_out, rows * SC_K);
        test_poison_bf16(c_out, rows * SC_N);
    }
    t0 = now_s();
    if (c->all_reduce) {
        agmm_all_reduce_io io = {.out = sum_out};
        st = agmm_all_reduce(plan, &io, NULL);
    } else {
        agmm_ag_matmul_io io = {.b = b, .a_gathered = a_out, .c = c_out};
        st = agmm_ag_matmul(plan, &io, NULL);
    }
    if (strcmp(c->point, "run") == 0)
        out->point_s = now_s() - t0;
    if (st != AGMM_SUCCESS) {
        fail_at(out, "run", st, t0, ctx);
        goto done;
    }
    out->status = AGMM_SUCCESS;
    if (c->all_reduce) {
        out->exact = 1;
        for (int i = 0; i < SC_AR_N; i++)
            out->exact &= sum_out[i] == (float)want[i];
    } else {
        out->exact = agmm_ref_first_mismatch(a_out, a, rows * SC_K, 2) < 0 &&
                     agmm_ref_first_mismatch(c_out, ref, rows * SC_N, 2) < 0;
    }
done:
    meet(meet_arg);
    agmm_plan_destroy(plan);
    agmm_ctx_destroy(ctx);
    free(a), free(b), free(a_out), free(c_out), free(ref), free(sum_out), free(want);
    out->ran = 1;
}

void fault_scenario_check(const fault_case *c, const fault_outcome *outs, int messages)
{
    char spec[96], what[200];
    fault_case_spec(c, spec, sizeof spec);
    snprintf(what, sizeof what, "AGMM_FAULT=%s, %s/%s W=%d timeout %.2f s", spec,
             c->all_reduce ? "all_reduce" : "ag_matmul", c->backend, c->nranks, c->timeout_s);
    const fault_outcome *f = &outs[c->faulted];
    int ran = 1;
    for (int r = 0; r < c->nranks; r++)
        ran &= outs[r].ran;
    if (strcmp(c->action, "delay") == 0) {
        int ok = ran;
        const char *msg = "";
        for (int r = 0; r < c->nranks; r++) {
            ok &= outs[r].status == AGMM_SUCCESS && outs[r].exact;
            if (outs[r].status != AGMM_SUCCESS && !msg[0])
                msg = outs[r].msg;
        }
        agmm_check(ok && f->point_s >= c->delay_ms * 0.9e-3,
                   "%s: every rank succeeds with exact results; rank %d's %s call took %.3f s (delayed %d ms)%s%s", what,
                   c->faulted, c->point, f->point_s, c->delay_ms, msg[0] ? ": " : "", msg);
        return;
    }
    const int hang = strcmp(c->action, "hang") == 0;
    int faulted_ok;
    if (f->exit_status >= 0)
        faulted_ok = f->exit_status == 3; /* a process world: the process is gone */
    else
        faulted_ok = f->status == AGMM_ERR_INTERNAL && f->failed_at && strcmp(f->failed_at, c->point) == 0 &&
                     (!messages || strcmp(c->point, "create") == 0 || strstr(f->msg, "injected fault")) &&
                     (!hang || f->elapsed_s >= 3 * c->timeout_s * 0.9);
    agmm_check(ran && faulted_ok, "%s: rank %d's %s call fails without arriving%s (after %.2f s): %s \"%s\"", what,
               c->faulted, c->point, hang ? ", held 3 x the timeout" : "", f->elapsed_s, agmm_status_str(f->status),
               f->msg);
    char names[48];
    snprintf(names, sizeof names, "rank %d never arrived", c->faulted);
    int peers_ok = ran;
    double worst = 0, least = 1e9;
    const char *example = "", *bad = "";
    for (int r = 0; r < c->nranks; r++) {
        if (r == c->faulted)
            continue;
        const fault_outcome *o = &outs[r];
        int ok = o->status == AGMM_ERR_TIMEOUT && o->failed_at && strcmp(o->failed_at, c->point) == 0 &&
                 (!messages || strstr(o->msg, names));
        if (!ok && !bad[0])
            bad = o->msg[0] ? o->msg : agmm_status_str(o->status);
        peers_ok &= ok;
        if (o->elapsed_s > worst)
            worst = o->elapsed_s;
        if (o->elapsed_s < least)
            least = o->elapsed_s;
        if (!example[0])
            example = o->msg;
    }
    agmm_check(peers_ok && worst < c->timeout_s + 1.0 && least >= c->timeout_s * 0.9,
               "%s: every other rank's %s call returns AGMM_ERR_TIMEOUT naming rank %d after %.2f..%.2f s%s: \"%s\"%s%s",
               what, c->point, c->faulted, least, worst,
               messages ? "" : " (its message not read: under a sanitizer stderr is not captured)", example,
               bad[0] ? "; wrong: " : "", bad);
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

/* A failed context creation has no context to hold its detail: the library logs it to stderr
 * ("[agmm rank R] context creation failed: ..."), and that is where the test reads it. Not under
 * a sanitizer, whose report would be swallowed with the captured stderr. */
static void read_create_messages(FILE *captured, fault_outcome *outs, int nranks)
{
    char line[2048];
    rewind(captured);
    while (fgets(line, sizeof line, captured)) {
        int r = -1, at = 0;
        if (sscanf(line, "[agmm rank %d] context creation failed: %n", &r, &at) == 1 && at > 0 && r >= 0 &&
            r < nranks && outs[r].msg[0] == '\0') {
            line[strcspn(line, "\n")] = '\0';
            snprintf(outs[r].msg, sizeof outs[r].msg, "%s", line + at);
        }
    }
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
        read_create_messages(captured, outs, c->nranks);
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
