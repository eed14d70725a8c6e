/* The fault scenario and its checks (fault_scenario.h), shared by the threads driver
 * (test_fault.c, in agmm-test) and the process driver (fault_process.c, in agmm-proctest). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "core/clock.h"
#include "core/numeric.h"
#include "core/text.h"
#include "cpu/cpu.h"
#include "cpu/reference.h"
#include "cpu_tests.h"
#include "fault_scenario.h"
#include "harness.h"

static double now_s(void) { return (double)agmm_mono_ns() * 1e-9; }

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

/* Ranks other than the faulted one: each call at the point fails with AGMM_ERR_TIMEOUT naming
 * rank F, within the timeout + 1 s, and not before the timeout unless the faulted process is gone
 * (a process world notices an exited peer at once). A process that exited after joining is named
 * as exited, not only as late, wherever the peers waited for it (a run's barrier too). */
static void check_peers(const fault_case *c, const fault_outcome *outs, int messages, int ran, const char *what)
{
    char names[48];
    snprintf(names, sizeof names, "rank %d never arrived", c->faulted);
    const char *died = "has exited without leaving the world";
    const int gone = c->processes && strcmp(c->action, "exit") == 0;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    /* A sanitizer's _exit runs its own checks first (leaks, races): the process may outlive the
     * peers' timeout, so they cannot yet know it died. */
    const int joined = 0;
#else
    const int joined = strcmp(c->point, "join") != 0;
#endif
    int peers_ok = ran;
    double worst = 0, least = 1e9;
    const char *example = "", *bad = "";
    char exits[64] = "";
    size_t used = 0;
    for (int r = 0; r < c->nranks; r++) {
        if (r == c->faulted)
            continue;
        const fault_outcome *o = &outs[r];
        int ok = o->status == AGMM_ERR_TIMEOUT && o->failed_at && strcmp(o->failed_at, c->point) == 0 &&
                 (!messages || strstr(o->msg, names)) && (!messages || !gone || !joined || strstr(o->msg, died)) &&
                 (!c->processes || o->exit_status == 1);
        if (!ok && !bad[0])
            bad = o->msg[0] ? o->msg : agmm_status_str(o->status);
        peers_ok &= ok;
        if (o->elapsed_s > worst)
            worst = o->elapsed_s;
        if (o->elapsed_s < least)
            least = o->elapsed_s;
        if (!example[0])
            example = o->msg;
        if (c->processes)
            used += agmm_format(exits + used, sizeof exits - used, " %d", o->exit_status);
    }
    agmm_check(peers_ok && worst < c->timeout_s + 1.0 && (gone || least >= c->timeout_s * 0.9),
               "%s: every other rank's %s call returns AGMM_ERR_TIMEOUT naming rank %d%s after %.2f..%.2f s%s%s%s: "
               "\"%s\"%s%s",
               what, c->point, c->faulted, gone && joined ? " and its process as exited" : "", least, worst,
               messages ? "" : " (its message not read: under a sanitizer stderr is not captured)",
               c->processes ? ", exit statuses" : "", exits, example, bad[0] ? "; wrong: " : "", bad);
}

void fault_scenario_check(const fault_case *c, const fault_outcome *outs, int messages)
{
    char spec[96], what[200];
    fault_case_spec(c, spec, sizeof spec);
    snprintf(what, sizeof what, "AGMM_FAULT=%s, %s/%s W=%d %s, timeout %.2f s", spec,
             c->all_reduce ? "all_reduce" : "ag_matmul", c->backend, c->nranks, c->processes ? "processes" : "threads",
             c->timeout_s);
    const fault_outcome *f = &outs[c->faulted];
    /* In a process world `exit` leaves no outcome: the process is gone. */
    const int gone = c->processes && strcmp(c->action, "exit") == 0;
    int ran = 1;
    for (int r = 0; r < c->nranks; r++)
        ran &= outs[r].ran || (gone && r == c->faulted);
    if (strcmp(c->action, "delay") == 0) {
        int ok = ran;
        const char *msg = "";
        for (int r = 0; r < c->nranks; r++) {
            ok &= outs[r].status == AGMM_SUCCESS && outs[r].exact && (!c->processes || outs[r].exit_status == 0);
            if (outs[r].status != AGMM_SUCCESS && !msg[0])
                msg = outs[r].msg;
        }
        agmm_check(ok && f->point_s >= c->delay_ms * 0.9e-3,
                   "%s: every rank succeeds with exact results%s; rank %d's %s call took %.3f s (delayed %d ms)%s%s",
                   what, c->processes ? " and exits 0" : "", c->faulted, c->point, f->point_s, c->delay_ms,
                   msg[0] ? ": " : "", msg);
        return;
    }
    const int hang = strcmp(c->action, "hang") == 0;
    int faulted_ok;
    if (gone)
        faulted_ok = f->exit_status == 3;
    else
        faulted_ok = f->status == AGMM_ERR_INTERNAL && f->failed_at && strcmp(f->failed_at, c->point) == 0 &&
                     (!messages || strcmp(c->point, "create") == 0 || strstr(f->msg, "injected fault")) &&
                     (!hang || f->elapsed_s >= 3 * c->timeout_s * 0.9) && (!c->processes || f->exit_status == 1);
    if (gone) {
        agmm_check(ran && faulted_ok, "%s: rank %d's process ends in its %s call with exit status 3 (got %d)", what,
                   c->faulted, c->point, f->exit_status);
    } else {
        char exit_text[32] = "";
        if (c->processes)
            snprintf(exit_text, sizeof exit_text, ", exit status %d", f->exit_status);
        agmm_check(ran && faulted_ok, "%s: rank %d's %s call fails without arriving%s (after %.2f s%s): %s \"%s\"",
                   what, c->faulted, c->point, hang ? ", held 3 x the timeout" : "", f->elapsed_s, exit_text,
                   agmm_status_str(f->status), f->msg);
    }
    check_peers(c, outs, messages, ran, what);
}

void fault_read_create_messages(FILE *captured, fault_outcome *outs, int nranks)
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

