/* agmm-soak: a long run of random steps on one world, every step checked (issue 23; bench/soak.sh).
 *
 *   agmm-soak [--world auto|cpu|gpu|emulated] [--ranks N] [--steps N] [--seed S] [--timeout SEC]
 *             [--max-delay-us U] [--plans K]
 *
 * Every step draws, the same on every rank, an operation of the library (every one it has:
 * agmm_ext_op_count, each with its case in soak_ops.c), one of its backends that run in the world
 * or auto, and a random shape; it reuses a plan of that kind from a cache of K (default 6) or
 * makes one, destroying the least recently used, so plans come and go all along. It draws a
 * delay for every rank (0 .. U us, default 2000, a quarter of them 0) and whether the run reads
 * the plan's own input or a slot of a symmetric buffer (io.input). Each rank then writes fresh
 * small-integer inputs, poisons the outputs, sleeps its delay, runs, and at once (the earliest
 * agmm.h allows) overwrites its input and operands with NaN: a peer still reading them would get
 * NaN. The outputs are checked exactly on every rank. After a warm-up (a tenth of the steps, at
 * least 200 or half the run, at most 1000) and at the end every cached plan is destroyed and the
 * process's resident memory, mappings and descriptors and the device's memory in use are read:
 * they must not grow between the two (beyond an allocator's slack, below).
 * Under a launcher's variables each process is one rank (agmm_world_join); else one process
 * runs --ranks threads. Rank 0 prints one summary line; every rank exits 0 only if every step
 * on every rank was right and nothing grew. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agmm.h"
#include "api/agmm_ext.h"
#include "harness.h"
#include "soak.h"

#define MAX_OPS 16
#define MAX_BACKENDS 17        /* a table's backends and auto */
#define MAX_PLANS 32
/* What may grow between the two readings: allocator and driver noise, not a leak per step. */
#define RSS_SLACK_KB 8192
#define MAPS_SLACK 16
#define DEVICE_SLACK_BYTES ((uint64_t)4 << 20)

typedef struct {
    agmm_world_kind world;
    int nranks, steps, plans;
    uint64_t seed;
    double timeout_s;
    int max_delay_us;
} soak_options;

typedef struct {
    agmm_op op;
    const soak_op *kind;
    int nbackends;
    const char *backends[MAX_BACKENDS];
} soak_op_entry;

/* A cached plan: its kind (operation, backend, shape), the step it last ran. */
typedef struct {
    int live, op, backend;
    soak_shape shape;
    agmm_plan *plan;
    int last;
} soak_slot;

/* One rank's account, exchanged at the end (fits a host exchange). */
typedef struct {
    int32_t steps, wrong, failed, plans_made;
    int32_t op_steps[MAX_OPS];
    int64_t rss_kb, maps, fds, device_bytes;   /* growth between the two readings */
    char first[560];                           /* the first wrong or failed step */
} soak_account;

typedef struct {
    soak_options opt;
    agmm_world *world;
    int nops;
    soak_op_entry ops[MAX_OPS];
    size_t max_input, max_buf[SOAK_BUFS];
    soak_account all[AGMM_MAX_RANKS];          /* rank 0's copy of every account */
    int naccounts;                             /* how many it holds (1: the ranks could not meet) */
    atomic_int failed;                         /* the verdict (the same on every rank that met) */
    double took_s;
} soak_job;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sleep_us(int us)
{
    struct timespec t = {us / 1000000, (long)(us % 1000000) * 1000};
    nanosleep(&t, NULL);
}

/* Every operation with its case and the backends that run here (and auto); 0, or -1 after
 * printing what is missing. */
static int collect_ops(soak_job *job)
{
    job->nops = agmm_ext_op_count();
    if (job->nops > MAX_OPS) {
        fprintf(stderr, "agmm-soak: the library has %d operations, the soak room for %d\n", job->nops, MAX_OPS);
        return -1;
    }
    for (int o = 0; o < job->nops; o++) {
        soak_op_entry *e = &job->ops[o];
        e->op = (agmm_op)o;
        e->kind = soak_op_find(agmm_op_name(e->op));
        if (e->kind == NULL) {
            fprintf(stderr, "FAIL soak: operation %s has no soak case: add one to tests/soak_ops.c\n",
                    agmm_op_name(e->op));
            return -1;
        }
        for (int i = 0; agmm_backend_name(e->op, i) != NULL && e->nbackends < MAX_BACKENDS - 1; i++)
            if (agmm_backend_available(job->world, e->op, agmm_backend_name(e->op, i), NULL, 0))
                e->backends[e->nbackends++] = agmm_backend_name(e->op, i);
        e->backends[e->nbackends++] = "auto";
        soak_shape big;
        size_t bytes[SOAK_BUFS] = {0};
        soak_role role[SOAK_BUFS];
        int nbufs = 0;
        e->kind->largest(&big);
        size_t in = e->kind->sizes(&big, agmm_world_nranks(job->world), bytes, role, &nbufs);
        job->max_input = in > job->max_input ? in : job->max_input;
        for (int b = 0; b < nbufs; b++)
            job->max_buf[b] = bytes[b] > job->max_buf[b] ? bytes[b] : job->max_buf[b];
    }
    return 0;
}

/* What one rank holds through the run. */
typedef struct {
    soak_job *job;
    agmm_ctx *ctx;
    soak_dev dev;
    int rank, nranks;
    void *sym;                       /* the symmetric buffer runs may read as io.input */
    void *h_in, *h_buf[SOAK_BUFS];   /* pinned host staging */
    void *d_buf[SOAK_BUFS];
    soak_slot slot[MAX_PLANS];
    soak_account acc;
} soak_rank;

/* Records the rank's first failure ("rank 1, step 212: ..."; step -1: the set-up); returns 0. */
static int rank_fail(soak_rank *sr, int step, const char *fmt, const char *detail)
{
    if (!sr->acc.first[0]) {
        char what[520], where[32] = "set-up";
        agmm_format(what, sizeof what, fmt, detail);
        if (step >= 0)
            snprintf(where, sizeof where, "step %d", step);
        agmm_format(sr->acc.first, sizeof sr->acc.first, "rank %d, %s: %s", sr->rank, where, what);
    }
    return 0;
}

/* Destroys every cached plan, in slot order on every rank (destroy is collective). */
static void flush_plans(soak_rank *sr)
{
    for (int i = 0; i < sr->job->opt.plans; i++)
        if (sr->slot[i].live) {
            agmm_plan_destroy(sr->slot[i].plan);
            sr->slot[i].live = 0;
        }
}

/* The process and device after every plan is gone and every rank got there, read by the
 * process's first rank alone (reading /proc opens a descriptor, as a peer thread's next plan
 * would); nobody goes on before it has read. */
static void read_usage(soak_rank *sr, agmm_proc_usage *u, uint64_t *device)
{
    flush_plans(sr);
    agmm_ext_barrier(sr->ctx);
    memset(u, 0, sizeof *u);
    *device = 0;
    if (sr->rank == agmm_world_first_rank(sr->job->world)) {
        agmm_proc_usage_now(u);
        *device = soak_dev_used(&sr->dev);
    }
    agmm_ext_barrier(sr->ctx);
}

/* The step's plan: a cached one (same draw on every rank), or a new one in the least recently
 * used slot. Returns the slot, or -1 after recording a failure. */
static int step_plan(soak_rank *sr, uint64_t *rng, int step)
{
    soak_job *job = sr->job;
    int live = 0;
    for (int i = 0; i < job->opt.plans; i++)
        live += sr->slot[i].live;
    if (live > 0 && agmm_rng_next(rng) % 4 != 0) {
        int pick = (int)(agmm_rng_next(rng) % (uint64_t)live);
        for (int i = 0; i < job->opt.plans; i++)
            if (sr->slot[i].live && pick-- == 0)
                return i;
    }
    soak_slot fresh = {.live = 1, .last = step};
    fresh.op = (int)(agmm_rng_next(rng) % (uint64_t)job->nops);
    const soak_op_entry *e = &job->ops[fresh.op];
    fresh.backend = (int)(agmm_rng_next(rng) % (uint64_t)e->nbackends);
    e->kind->draw(rng, sr->nranks, &fresh.shape);
    int victim = 0;
    for (int i = 0; i < job->opt.plans; i++) {
        if (!sr->slot[i].live) {
            victim = i;
            break;
        }
        if (sr->slot[i].last < sr->slot[victim].last)
            victim = i;
    }
    if (sr->slot[victim].live)
        agmm_plan_destroy(sr->slot[victim].plan);
    sr->slot[victim].live = 0;
    agmm_status st = e->kind->plan(&fresh.plan, sr->ctx, &fresh.shape, e->backends[fresh.backend]);
    if (st != AGMM_SUCCESS) {
        char detail[AGMM_ERROR_LEN + 64];
        agmm_format(detail, sizeof detail, "%s/%s: plan: %s", agmm_op_name(e->op), e->backends[fresh.backend],
                 agmm_last_error(sr->ctx));
        rank_fail(sr, step, "%s", detail);
        return -1;
    }
    sr->slot[victim] = fresh;
    sr->acc.plans_made++;
    return victim;
}

/* One step of the cached plan in slot s: 1 if it ran and was right; 0 (recorded) if wrong; -1 if it
 * failed (the ranks are then out of step: the run stops). */
static int step_run(soak_rank *sr, soak_slot *s, int delay_us, int use_sym, uint64_t seed, int step)
{
    const soak_op_entry *e = &sr->job->ops[s->op];
    soak_dev *d = &sr->dev;
    size_t bytes[SOAK_BUFS] = {0};
    soak_role role[SOAK_BUFS];
    int nbufs = 0;
    const size_t in_bytes = e->kind->sizes(&s->shape, sr->nranks, bytes, role, &nbufs);
    /* An operation without a symmetric input (the row-parallel matmuls) takes none. */
    use_sym = use_sym && in_bytes > 0;
    void *in = use_sym ? sr->sym : agmm_plan_input(s->plan);
    char what[400], why[320];
    e->kind->describe(&s->shape, why, sizeof why);
    agmm_format(what, sizeof what, "%s/%s %s%s", agmm_op_name(e->op), e->backends[s->backend], why,
             use_sym ? " io.input" : "");
    /* Fresh inputs, outputs poisoned, on the stream before the run. */
    e->kind->fill(&s->shape, sr->nranks, sr->rank, seed, sr->h_in, sr->h_buf);
    int ok = in_bytes == 0 || soak_dev_upload(d, in, sr->h_in, in_bytes) == 0;
    for (int b = 0; b < nbufs && ok; b++)
        ok = (role[b] == SOAK_OPERAND ? soak_dev_upload(d, sr->d_buf[b], sr->h_buf[b], bytes[b])
                                      : soak_dev_poison(d, sr->d_buf[b], bytes[b])) == 0;
    if (!ok)
        return rank_fail(sr, step, "%s", d->err), -1;
    sleep_us(delay_us);
    agmm_status st = e->kind->run(s->plan, &s->shape, in, use_sym, sr->d_buf, d);
    /* At once: the input and operands are the caller's again (agmm.h, "Steps back to back"). */
    ok = st == AGMM_SUCCESS && (in_bytes == 0 || soak_dev_poison(d, in, in_bytes) == 0);
    for (int b = 0; b < nbufs && ok; b++)
        ok = role[b] != SOAK_OPERAND || soak_dev_poison(d, sr->d_buf[b], bytes[b]) == 0;
    for (int b = 0; b < nbufs && ok; b++)
        ok = role[b] != SOAK_OUTPUT || soak_dev_download(d, sr->h_buf[b], sr->d_buf[b], bytes[b]) == 0;
    ok = ok && soak_dev_sync(d) == 0;
    if (ok)
        st = agmm_ctx_sync(sr->ctx);
    if (st != AGMM_SUCCESS || !ok) {
        snprintf(why, sizeof why, "%s", st != AGMM_SUCCESS ? agmm_last_error(sr->ctx) : d->err);
        char detail[600];
        agmm_format(detail, sizeof detail, "%s: %s", what, why);
        return rank_fail(sr, step, "%s", detail), -1;
    }
    if (!e->kind->check(&s->shape, sr->nranks, sr->rank, seed, agmm_plan_backend(s->plan), d->gpu, sr->h_buf, why,
                        sizeof why)) {
        char detail[600];
        agmm_format(detail, sizeof detail, "%s: wrong: %s", what, why);
        return rank_fail(sr, step, "%s", detail);
    }
    return 1;
}

static int rank_setup(soak_rank *sr)
{
    soak_job *job = sr->job;
    if (soak_dev_init(&sr->dev, sr->ctx) != 0)
        return rank_fail(sr, -1, "%s", sr->dev.err);
    int ok = agmm_symmetric_alloc(sr->ctx, job->max_input, &sr->sym) == AGMM_SUCCESS;
    if (!ok)
        return rank_fail(sr, -1, "agmm_symmetric_alloc: %s", agmm_last_error(sr->ctx));
    sr->h_in = soak_host_alloc(&sr->dev, job->max_input);
    ok = sr->h_in != NULL;
    for (int b = 0; b < SOAK_BUFS && ok; b++)
        if (job->max_buf[b])
            ok = (sr->h_buf[b] = soak_host_alloc(&sr->dev, job->max_buf[b])) != NULL &&
                 (sr->d_buf[b] = soak_dev_alloc(&sr->dev, job->max_buf[b])) != NULL;
    return ok ? 1 : rank_fail(sr, -1, "%s", sr->dev.err);
}

static void rank_teardown(soak_rank *sr)
{
    flush_plans(sr);
    if (sr->sym)
        agmm_symmetric_free(sr->ctx, sr->sym);
    soak_host_free(&sr->dev, sr->h_in);
    for (int b = 0; b < SOAK_BUFS; b++) {
        if (sr->h_buf[b])
            soak_host_free(&sr->dev, sr->h_buf[b]);
        if (sr->d_buf[b])
            soak_dev_free(&sr->dev, sr->d_buf[b]);
    }
    soak_dev_fini(&sr->dev);
}

/* The step after which the first reading is taken: a tenth of the run, at least 200 steps (or
 * half a short run: the allocator's per-thread pools grow for a while), at most 1000. */
static int warm_steps(int steps)
{
    int warm = steps / 10 > 200 ? steps / 10 : 200;
    if (warm > steps / 2)
        warm = steps / 2;
    return warm < 1000 ? warm : 1000;
}

/* The steps of one rank; its account, and the verdict (every rank's accounts, exchanged). */
static void soak_steps(soak_rank *sr)
{
    soak_job *job = sr->job;
    agmm_proc_usage u0 = {0}, u1 = {0};
    uint64_t dev0 = 0, dev1 = 0;
    const int warm = warm_steps(job->opt.steps);
    uint64_t rng = job->opt.seed;
    const double t0 = now_s();
    for (int step = 0; step < job->opt.steps; step++) {
        if (step == warm)
            read_usage(sr, &u0, &dev0);
        /* Every draw is made on every rank in the same order, whatever this rank's part. */
        const int s = step_plan(sr, &rng, step);
        int delay_us = 0;
        for (int r = 0; r < sr->nranks; r++) {
            uint64_t x = agmm_rng_next(&rng);
            if (r == sr->rank && job->opt.max_delay_us > 0 && x % 4 != 0)
                delay_us = (int)((x >> 8) % (uint64_t)job->opt.max_delay_us);
        }
        const int use_sym = agmm_rng_next(&rng) % 3 == 0;
        const uint64_t seed = agmm_rng_next(&rng);
        const int r = s < 0 ? -1 : step_run(sr, &sr->slot[s], delay_us, use_sym, seed, step);
        if (s >= 0) {
            sr->slot[s].last = step;
            sr->acc.steps++;
            sr->acc.op_steps[sr->slot[s].op]++;
        }
        sr->acc.wrong += r == 0;
        if (r < 0) {
            sr->acc.failed++;
            return;
        }
        if (sr->rank == 0 && (step + 1) % 1000 == 0)
            fprintf(stderr, "agmm-soak: step %d/%d, %d wrong so far, %.0f s\n", step + 1, job->opt.steps,
                    sr->acc.wrong, now_s() - t0);
    }
    read_usage(sr, &u1, &dev1);
    sr->acc.rss_kb = u1.rss_kb - u0.rss_kb;
    sr->acc.maps = u1.maps - u0.maps;
    sr->acc.fds = u1.fds - u0.fds;
    sr->acc.device_bytes = (int64_t)(dev1 - dev0);
    if (sr->rank == 0)
        job->took_s = now_s() - t0;
}

static int account_bad(const soak_account *a)
{
    return a->wrong || a->failed || a->fds > 0 || a->rss_kb > RSS_SLACK_KB || a->maps > MAPS_SLACK ||
           a->device_bytes > (int64_t)DEVICE_SLACK_BYTES;
}

static agmm_status soak_rank_main(agmm_ctx *ctx, void *arg)
{
    soak_job *job = arg;
    soak_rank *sr = calloc(1, sizeof *sr);
    if (sr == NULL)
        return AGMM_ERR_NO_MEMORY; /* its peers time out at the first exchange, naming it */
    sr->job = job, sr->ctx = ctx, sr->rank = agmm_ctx_rank(ctx), sr->nranks = agmm_world_nranks(job->world);
    int32_t ok = rank_setup(sr), all_ok[AGMM_MAX_RANKS];
    /* Every rank set up, or none runs: a rank that cannot would leave its peers at a barrier. */
    if (agmm_ext_exchange(ctx, &ok, sizeof ok, all_ok) != AGMM_SUCCESS)
        ok = rank_fail(sr, -1, "%s", agmm_last_error(ctx));
    for (int r = 0; r < sr->nranks && ok; r++)
        ok = all_ok[r];
    if (ok)
        soak_steps(sr);
    else
        sr->acc.failed++;
    /* After a failed run the ranks are out of step and cannot meet: each judges itself then. */
    soak_account tmp[AGMM_MAX_RANKS];
    const int met = !sr->acc.failed && agmm_ext_exchange(ctx, &sr->acc, sizeof sr->acc, tmp) == AGMM_SUCCESS;
    int bad = !met;
    for (int r = 0; r < (met ? sr->nranks : 1); r++)
        bad |= account_bad(met ? &tmp[r] : &sr->acc);
    atomic_fetch_or(&job->failed, bad);
    if (sr->rank == 0) {
        job->naccounts = met ? sr->nranks : 1;
        memcpy(job->all, met ? tmp : &sr->acc, (size_t)job->naccounts * sizeof sr->acc);
    } else if (!met && sr->acc.first[0]) {
        fprintf(stderr, "agmm-soak: %s\n", sr->acc.first);
    }
    rank_teardown(sr);
    free(sr);
    return AGMM_SUCCESS;
}

static int usage(const char *why)
{
    fprintf(stderr,
            "agmm-soak: %s\nusage: agmm-soak [--world auto|cpu|gpu|emulated] [--ranks N] [--steps N] [--seed S]\n"
            "                 [--timeout SEC] [--max-delay-us U] [--plans K]   (tests/soak.c says what it does)\n",
            why);
    return 2;
}

static int parse(int argc, char **argv, soak_options *o)
{
    *o = (soak_options){.world = AGMM_WORLD_AUTO, .steps = 10000, .plans = 6, .seed = 0x50a4, .max_delay_us = 2000};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (v == NULL)
            return usage("every option takes a value");
        i++;
        if (strcmp(a, "--world") == 0) {
            static const char *const kinds[] = {"auto", "cpu", "gpu", "emulated"};
            static const agmm_world_kind values[] = {AGMM_WORLD_AUTO, AGMM_WORLD_CPU, AGMM_WORLD_GPU,
                                                     AGMM_WORLD_EMULATED};
            int k = 0;
            while (k < 4 && strcmp(v, kinds[k]) != 0)
                k++;
            if (k == 4)
                return usage("--world: auto, cpu, gpu or emulated");
            o->world = values[k];
            continue;
        }
        long long n = strtoll(v, &end, 0);
        if (strcmp(a, "--timeout") == 0)
            o->timeout_s = strtod(v, &end);
        else if (strcmp(a, "--ranks") == 0 && n >= 1 && n <= AGMM_MAX_RANKS)
            o->nranks = (int)n;
        else if (strcmp(a, "--steps") == 0 && n >= 1 && n <= 100000000)
            o->steps = (int)n;
        else if (strcmp(a, "--seed") == 0)
            o->seed = (uint64_t)n;
        else if (strcmp(a, "--max-delay-us") == 0 && n >= 0 && n <= 1000000)
            o->max_delay_us = (int)n;
        else if (strcmp(a, "--plans") == 0 && n >= 1 && n <= MAX_PLANS)
            o->plans = (int)n;
        else
            return usage("an unknown option or a value out of range");
        if (end == v || *end != '\0')
            return usage("a number is malformed");
    }
    return 0;
}

static void summary(const soak_job *job)
{
    const soak_account *a = job->all;
    soak_account sum = {0};
    int worst = 0;
    for (int r = 0; r < job->naccounts; r++) {
        sum.wrong += a[r].wrong, sum.failed += a[r].failed;
        sum.rss_kb = a[r].rss_kb > sum.rss_kb ? a[r].rss_kb : sum.rss_kb;
        sum.maps = a[r].maps > sum.maps ? a[r].maps : sum.maps;
        sum.fds = a[r].fds > sum.fds ? a[r].fds : sum.fds;
        sum.device_bytes = a[r].device_bytes > sum.device_bytes ? a[r].device_bytes : sum.device_bytes;
        if (!a[worst].first[0] && a[r].first[0])
            worst = r;
    }
    char ops[256] = "";
    size_t used = 0;
    for (int o = 0; o < job->nops; o++)
        used += agmm_format(ops + used, sizeof ops - used, "%s%s %d", o ? ", " : "", agmm_op_name(job->ops[o].op),
                            a[0].op_steps[o]);
    const int processes = agmm_world_local_ranks(job->world) < agmm_world_nranks(job->world);
    const agmm_world_kind kind = agmm_world_kind_of(job->world);
    char growth[200];
    agmm_format(growth, sizeof growth,
                "rss %+lld KiB (slack %d), mappings %+lld (slack %d), fds %+lld, device %+.1f MiB (slack %.0f)",
                (long long)sum.rss_kb, RSS_SLACK_KB, (long long)sum.maps, MAPS_SLACK, (long long)sum.fds,
                (double)sum.device_bytes / (1 << 20), (double)DEVICE_SLACK_BYTES / (1 << 20));
    agmm_check(!job->failed,
               "soak %s W=%d (%s): %d steps (%s) of random shapes, backends and plans, per-rank delays up to %d us, "
               "inputs overwritten right after each run; every step checked on every rank: %d wrong, %d failed; "
               "%d plans made; from step %d to the end: %s; %.1f s%s%s",
               kind == AGMM_WORLD_CPU ? "CPU" : kind == AGMM_WORLD_GPU ? "GPU" : "emulated",
               agmm_world_nranks(job->world), processes ? "processes" : "threads", a[0].steps, ops,
               job->opt.max_delay_us, sum.wrong, sum.failed, a[0].plans_made,
               warm_steps(job->opt.steps), growth, job->took_s,
               a[worst].first[0] ? "; first: " : "", a[worst].first);
}

int main(int argc, char **argv)
{
    static soak_job job;
    int rc = parse(argc, argv, &job.opt);
    if (rc)
        return rc;
    /* auto measures on GPUs: keep its choices out of the user's cache file. */
    setenv("AGMM_TUNE_CACHE", "", 0);
    char err[768] = "";
    agmm_status st;
    const int launched = agmm_ext_launch_rank() >= 0;
    if (launched) {
        agmm_join_config jc = {.kind = job.opt.world, .rank = -1, .nranks = -1, .device = -1,
                               .timeout_s = job.opt.timeout_s};
        st = agmm_world_join(&job.world, &jc, err, sizeof err);
    } else {
        agmm_world_config cfg = {.kind = job.opt.world, .nranks = job.opt.nranks, .timeout_s = job.opt.timeout_s};
        st = agmm_world_create(&job.world, &cfg, err, sizeof err);
    }
    if (st != AGMM_SUCCESS) {
        fprintf(stderr, "agmm-soak: cannot %s the world: %s: %s\n", launched ? "join" : "create", agmm_status_str(st),
                err);
        return 1;
    }
    if (collect_ops(&job) != 0) {
        agmm_world_destroy(job.world);
        return 1;
    }
    st = agmm_world_run(job.world, soak_rank_main, &job);
    if (st != AGMM_SUCCESS) {
        fprintf(stderr, "agmm-soak: %s\n", agmm_status_str(st));
        job.failed = 1;
    }
    const int lead = agmm_world_first_rank(job.world) == 0;
    if (lead && job.naccounts > 0)
        summary(&job);
    agmm_world_destroy(job.world);
    if (!lead)
        return job.failed ? 1 : 0;
    if (job.naccounts == 0)
        agmm_check(0, "soak: rank 0 never ran");
    return agmm_test_summary();
}
