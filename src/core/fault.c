/* Fault injection (fault.h): the spec's parser and the hook every fault point calls. */
#include "fault.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "knobs.h"
#include "numeric.h"

static const char *const point_name[] = {"create", "plan", "run", "join"}; /* agmm_fault_at's order */
static const char *const action_name[] = {"none", "delay", "hang", "exit"};

#define MAX_MS 3600000 /* an hour */

/* "AGMM_FAULT="SPEC": PART: PROBLEM; the grammar is ..." (without the first part where source is
 * NULL: the caller names the spec itself). */
static agmm_status bad_spec(agmm_error *err, const char *source, const char *spec, const char *part, int part_len,
                            const char *problem)
{
    return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "%s%s%s%s%.*s%s%s; the grammar is " AGMM_FAULT_GRAMMAR,
                     source ? source : "", source ? "=\"" : "", source ? spec : "", source ? "\": " : "", part_len,
                     part, part_len ? ": " : "", problem);
}

/* The value of `key` among `names` (count entries), or -1. */
static int lookup(const char *v, int len, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if ((int)strlen(names[i]) == len && strncmp(v, names[i], (size_t)len) == 0)
            return i;
    return -1;
}

/* A whole decimal number in [0, max] of exactly len characters, or -1. */
static int64_t number(const char *v, int len, int64_t max)
{
    if (len == 0 || len > 10)
        return -1;
    int64_t x = 0;
    for (int i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    return x <= max ? x : -1;
}

static agmm_status parse_as(const char *source, const char *spec, agmm_fault *f, agmm_error *err)
{
    *f = (agmm_fault){.action = AGMM_FAULT_NONE, .ms = -1};
    if (spec == NULL || spec[0] == '\0')
        return AGMM_SUCCESS;
    agmm_fault g = {.action = AGMM_FAULT_NONE, .ms = -1};
    int seen_rank = 0, seen_at = 0, seen_ms = 0;
    for (const char *p = spec;;) {
        const char *end = strchr(p, ',');
        int len = end ? (int)(end - p) : (int)strlen(p);
        const char *eq = memchr(p, '=', (size_t)len);
        if (eq == NULL)
            return bad_spec(err, source, spec, p, len, "not key=value");
        int klen = (int)(eq - p), vlen = len - klen - 1;
        const char *v = eq + 1;
        int *seen = NULL;
        if (klen == 4 && strncmp(p, "rank", 4) == 0) {
            seen = &seen_rank;
            int64_t r = number(v, vlen, AGMM_MAX_RANKS - 1);
            if (vlen == 3 && strncmp(v, "any", 3) == 0)
                g.rank = AGMM_FAULT_ANY_RANK;
            else if (r >= 0)
                g.rank = (int)r;
            else
                return bad_spec(err, source, spec, p, len, "R must be a rank (0..63) or any");
        } else if (klen == 2 && strncmp(p, "at", 2) == 0) {
            seen = &seen_at;
            int at = lookup(v, vlen, point_name, (int)(sizeof point_name / sizeof *point_name));
            if (at < 0)
                return bad_spec(err, source, spec, p, len, "POINT must be join, create, plan or run");
            g.at = (agmm_fault_at)at;
        } else if (klen == 6 && strncmp(p, "action", 6) == 0) {
            int a = lookup(v, vlen, action_name + 1, 3);
            if (a < 0)
                return bad_spec(err, source, spec, p, len, "ACTION must be delay, hang or exit");
            if (g.action != AGMM_FAULT_NONE)
                return bad_spec(err, source, spec, p, len, "given twice");
            g.action = (agmm_fault_action)(a + 1);
        } else if (klen == 2 && strncmp(p, "ms", 2) == 0) {
            seen = &seen_ms;
            g.ms = number(v, vlen, MAX_MS);
            if (g.ms < 0)
                return bad_spec(err, source, spec, p, len, "N must be milliseconds in 0..3600000");
        } else {
            return bad_spec(err, source, spec, p, len, "unknown key (rank, at, action, ms)");
        }
        if (seen && (*seen)++)
            return bad_spec(err, source, spec, p, len, "given twice");
        if (end == NULL)
            break;
        p = end + 1;
    }
    if (!seen_rank || !seen_at || g.action == AGMM_FAULT_NONE)
        return bad_spec(err, source, spec, "", 0,
                        !seen_rank ? "rank= is missing" : !seen_at ? "at= is missing" : "action= is missing");
    if (g.action == AGMM_FAULT_DELAY && !seen_ms)
        return bad_spec(err, source, spec, "", 0, "action=delay needs ms=N");
    if (g.action == AGMM_FAULT_EXIT && seen_ms)
        return bad_spec(err, source, spec, "", 0, "ms= applies to delay and hang, not exit");
    *f = g;
    return AGMM_SUCCESS;
}

agmm_status agmm_fault_parse(const char *spec, agmm_fault *f, agmm_error *err)
{
    return parse_as(NULL, spec, f, err);
}

agmm_status agmm_fault_from_env(int nranks, agmm_fault *f, agmm_error *err)
{
    agmm_knob_value v;
    agmm_knob_read(AGMM_KNOB_FAULT, &v, err); /* text: parse_as says what is wrong with it */
    const char *spec = v.text;
    agmm_status st = parse_as("AGMM_FAULT", spec, f, err);
    if (st == AGMM_SUCCESS && f->action != AGMM_FAULT_NONE && f->rank >= nranks) {
        st = AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "AGMM_FAULT=\"%s\": rank=%d, but the world has %d rank%s (0..%d)",
                       spec, f->rank, nranks, nranks == 1 ? "" : "s", nranks - 1);
        f->action = AGMM_FAULT_NONE;
    }
    return st;
}

/* Sleeps until `ms` milliseconds from now have passed (on the monotonic clock, whatever signals
 * interrupt). */
static void sleep_ms(int64_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += (time_t)(ms / 1000);
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L)
        t.tv_sec++, t.tv_nsec -= 1000000000L;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
        ;
}

agmm_status agmm_fault_point(const agmm_fault *f, agmm_fault_at at, const agmm_fault_site *site, agmm_error *err)
{
    if (f == NULL || f->action == AGMM_FAULT_NONE || f->at != at)
        return AGMM_SUCCESS;
    int victim = f->rank;
    if (victim == AGMM_FAULT_ANY_RANK) {
        uint64_t s = site->occurrence * 0x9e3779b97f4a7c15ull ^ (uint64_t)at;
        victim = (int)(agmm_rng_next(&s) % (uint64_t)site->nranks);
    }
    if (victim != site->rank)
        return AGMM_SUCCESS;
    const int log_level = agmm_log_level_from_env();
    switch (f->action) {
    case AGMM_FAULT_DELAY:
        agmm_log(log_level, AGMM_LOG_DEBUG, site->rank, "injected fault: %s delayed %lld ms", point_name[at],
                 (long long)f->ms);
        sleep_ms(f->ms);
        return AGMM_SUCCESS;
    case AGMM_FAULT_HANG: {
        int64_t hold_ms = f->ms >= 0 ? f->ms : (int64_t)(3000.0 * site->timeout_s);
        agmm_log(log_level, AGMM_LOG_INFO, site->rank, "injected fault: hangs at %s (held %lld ms, never arriving)",
                 point_name[at], (long long)hold_ms);
        sleep_ms(hold_ms);
        return AGMM_FAIL(err, AGMM_ERR_INTERNAL,
                         "rank %d: injected fault (AGMM_FAULT): hung at %s for %lld ms and left without arriving",
                         site->rank, point_name[at], (long long)hold_ms);
    }
    case AGMM_FAULT_EXIT:
        if (site->process_world) {
            agmm_log(log_level, AGMM_LOG_ERROR, site->rank, "injected fault (AGMM_FAULT): exit at %s: status 3",
                     point_name[at]);
            _exit(3);
        }
        return AGMM_FAIL(err, AGMM_ERR_INTERNAL,
                         "rank %d: injected fault (AGMM_FAULT): exit at %s: the rank left without arriving",
                         site->rank, point_name[at]);
    case AGMM_FAULT_NONE: break;
    }
    return AGMM_SUCCESS;
}
