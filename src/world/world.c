/* Worlds and contexts: creation for every kind, the host-side rendezvous of local ranks, and
 * the thread-per-rank runner. GPU specifics are delegated to world_gpu.c. */
#include "world.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../symm/symm.h"

#ifndef AGMM_HAVE_CUDA
agmm_status agmm_world_gpu_create(agmm_world *world, const agmm_world_config *config, agmm_error *err)
{
    return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED, "this agmm was built without CUDA (nvcc was not found)");
}
void agmm_world_gpu_destroy(agmm_world *world) {}
agmm_status agmm_ctx_gpu_create(agmm_ctx *ctx)
{
    return AGMM_FAIL(&ctx->err, AGMM_ERR_UNSUPPORTED, "this agmm was built without CUDA");
}
void agmm_ctx_gpu_destroy(agmm_ctx *ctx) {}
agmm_status agmm_ctx_gpu_sync(agmm_ctx *ctx) { return AGMM_SUCCESS; }
#endif

static void copy_err(const agmm_error *err, char *buf, size_t len)
{
    if (buf && len)
        snprintf(buf, len, "%s", err->msg);
}

agmm_status agmm_world_create(agmm_world **out, const agmm_world_config *config, char *errbuf, size_t errbuf_len)
{
    agmm_error err = {0};
    agmm_status st = AGMM_SUCCESS;
    if (out == NULL) {
        AGMM_FAIL(&err, AGMM_ERR_INVALID_ARG, "world is NULL");
        copy_err(&err, errbuf, errbuf_len);
        return AGMM_ERR_INVALID_ARG;
    }
    *out = NULL;
    agmm_world_config cfg = {0};
    if (config)
        cfg = *config;
    if (cfg.nranks < 0 || cfg.nranks > AGMM_MAX_RANKS) {
        AGMM_FAIL(&err, AGMM_ERR_INVALID_ARG, "nranks=%d: must be 0 (automatic) or 1..%d", cfg.nranks, AGMM_MAX_RANKS);
        copy_err(&err, errbuf, errbuf_len);
        return AGMM_ERR_INVALID_ARG;
    }
    if (cfg.timeout_s < 0) {
        AGMM_FAIL(&err, AGMM_ERR_INVALID_ARG, "timeout_s=%g: must be >= 0 (0 means 5 s)", cfg.timeout_s);
        copy_err(&err, errbuf, errbuf_len);
        return AGMM_ERR_INVALID_ARG;
    }
    agmm_world *w = calloc(1, sizeof *w);
    if (w == NULL) {
        AGMM_FAIL(&err, AGMM_ERR_NO_MEMORY, "world allocation failed");
        copy_err(&err, errbuf, errbuf_len);
        return AGMM_ERR_NO_MEMORY;
    }
    w->timeout_s = cfg.timeout_s > 0 ? cfg.timeout_s : 5.0;
    w->log_level = agmm_log_level_from_env();
    pthread_mutex_init(&w->mu, NULL);
    /* Deadlines on the monotonic clock: a wall-clock jump must not stretch or cut a timeout. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);

    if (cfg.kind == AGMM_WORLD_CPU) {
        w->kind = AGMM_WORLD_CPU;
        w->nranks = w->nlocal = cfg.nranks ? cfg.nranks : 4;
        for (int i = 0; i < w->nlocal; i++)
            w->device_of[i] = -1;
        snprintf(w->describe, sizeof w->describe,
                 "device: CPU (no GPU used); %d ranks as threads, host memory as symmetric memory", w->nranks);
    } else {
        st = agmm_world_gpu_create(w, &cfg, &err);
        if (st != AGMM_SUCCESS && cfg.kind == AGMM_WORLD_AUTO) {
            /* AUTO falls back to the CPU world; the banner says why. */
            /* The banner gives the reason without the file:line prefix of the record. */
            char why[AGMM_ERROR_LEN];
            const char *reason = strstr(err.msg, ": ");
            snprintf(why, sizeof why, "%s", reason ? reason + 2 : err.msg);
            agmm_error_clear(&err);
            st = AGMM_SUCCESS;
            w->kind = AGMM_WORLD_CPU;
            w->nranks = w->nlocal = cfg.nranks ? cfg.nranks : 4;
            for (int i = 0; i < w->nlocal; i++)
                w->device_of[i] = -1;
            snprintf(w->describe, sizeof w->describe,
                     "device: CPU (%.300s); %d ranks as threads, host memory as symmetric memory",
                     why, w->nranks);
        }
    }
    if (st == AGMM_SUCCESS) {
        w->xchg_slot = 256;
        w->xchg = calloc((size_t)w->nlocal, w->xchg_slot);
        w->xchg_seq = calloc((size_t)w->nlocal, sizeof *w->xchg_seq);
        if (w->xchg == NULL || w->xchg_seq == NULL)
            st = AGMM_FAIL(&err, AGMM_ERR_NO_MEMORY, "world exchange buffer allocation failed");
    }
    if (st != AGMM_SUCCESS) {
        copy_err(&err, errbuf, errbuf_len);
        agmm_world_destroy(w);
        return st;
    }
    *out = w;
    return AGMM_SUCCESS;
}

void agmm_world_destroy(agmm_world *w)
{
    if (w == NULL)
        return;
    if (w->gpu)
        agmm_world_gpu_destroy(w);
    free(w->xchg);
    free(w->xchg_seq);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

agmm_world_kind agmm_world_kind_of(const agmm_world *w) { return w->kind; }
int agmm_world_nranks(const agmm_world *w) { return w->nranks; }
int agmm_world_local_ranks(const agmm_world *w) { return w->nlocal; }
int agmm_world_first_rank(const agmm_world *w) { return w->first_rank; }
const char *agmm_world_describe(const agmm_world *w) { return w ? w->describe : "(no world)"; }

/* Waits until every local rank has arrived at this generation, up to the world's timeout.
 * Called with w->mu held. */
static agmm_status rendezvous_locked(agmm_ctx *ctx)
{
    agmm_world *w = ctx->world;
    unsigned gen = w->generation;
    if (++w->arrived == w->nlocal) {
        w->arrived = 0;
        w->generation++;
        pthread_cond_broadcast(&w->cv);
        return AGMM_SUCCESS;
    }
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    double whole = (double)(long)w->timeout_s;
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((w->timeout_s - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    while (w->generation == gen) {
        if (pthread_cond_timedwait(&w->cv, &w->mu, &deadline) == ETIMEDOUT && w->generation == gen) {
            int missing = w->nlocal - w->arrived;
            w->arrived--; /* leave the count as if we never came, so a late peer cannot complete it */
            return AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                             "rank %d: host rendezvous timed out after %.1f s: %d of %d ranks never arrived",
                             ctx->rank, w->timeout_s, missing, w->nlocal);
        }
    }
    return AGMM_SUCCESS;
}

/* Every host collective numbers itself (ctx->host_seq) and publishes the number, with its kind
 * in the low bit, in its rank's slot, under w->mu. Ranks that skipped or repeated one (an error
 * path, a late rank after a timeout) would otherwise pair an exchange with some other call and
 * hand back stale slots: exchange compares the tags after meeting and refuses such data.
 * Returns this call's tag. */
static uint32_t publish_tag_locked(agmm_ctx *ctx, int exchange)
{
    uint32_t tag = (++ctx->host_seq << 1) | (uint32_t)exchange;
    ctx->world->xchg_seq[ctx->local_rank] = tag;
    return tag;
}

agmm_status agmm_world_barrier(agmm_ctx *ctx)
{
    pthread_mutex_lock(&ctx->world->mu);
    publish_tag_locked(ctx, 0);
    agmm_status st = rendezvous_locked(ctx);
    pthread_mutex_unlock(&ctx->world->mu);
    return st;
}

agmm_status agmm_world_exchange(agmm_ctx *ctx, const void *mine, size_t bytes, void *all)
{
    agmm_world *w = ctx->world;
    if (bytes > w->xchg_slot)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_INTERNAL, "exchange of %zu bytes exceeds the %zu-byte slot", bytes,
                         w->xchg_slot);
    /* Write my slot, meet, read all slots, meet again so nobody overwrites a slot still read. */
    pthread_mutex_lock(&w->mu);
    uint32_t tag = publish_tag_locked(ctx, 1);
    memcpy(w->xchg + (size_t)ctx->local_rank * w->xchg_slot, mine, bytes);
    agmm_status st = rendezvous_locked(ctx);
    if (st == AGMM_SUCCESS) {
        int odd = -1;
        for (int r = 0; r < w->nlocal && odd < 0; r++)
            if (w->xchg_seq[r] != tag)
                odd = r;
        if (odd >= 0)
            AGMM_FAIL(&ctx->err, AGMM_ERR_INTERNAL,
                      "rank %d: host exchange #%u met rank %d in its host %s #%u: the ranks are out of step "
                      "(one skipped or repeated a collective call)",
                      ctx->rank, tag >> 1, w->first_rank + odd, w->xchg_seq[odd] & 1 ? "exchange" : "barrier",
                      w->xchg_seq[odd] >> 1);
        else
            for (int r = 0; r < w->nlocal; r++)
                memcpy((unsigned char *)all + (size_t)(w->first_rank + r) * bytes,
                       w->xchg + (size_t)r * w->xchg_slot, bytes);
        /* Meet again either way, so that nobody overwrites a slot still being read and the
         * peers' pairing is what it would have been. */
        agmm_status st2 = rendezvous_locked(ctx);
        st = odd >= 0 ? AGMM_ERR_INTERNAL : st2;
    }
    pthread_mutex_unlock(&w->mu);
    return st;
}

agmm_status agmm_ctx_create(agmm_ctx **out, agmm_world *w, int rank)
{
    if (out == NULL || w == NULL)
        return AGMM_ERR_INVALID_ARG;
    *out = NULL;
    if (rank < w->first_rank || rank >= w->first_rank + w->nlocal)
        return AGMM_ERR_INVALID_ARG;
    agmm_ctx *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL)
        return AGMM_ERR_NO_MEMORY;
    ctx->world = w;
    ctx->rank = rank;
    ctx->local_rank = rank - w->first_rank;
    ctx->device = w->device_of[ctx->local_rank];
    agmm_status st = AGMM_SUCCESS;
    if (w->kind != AGMM_WORLD_CPU)
        AGMM_TRY(st, agmm_ctx_gpu_create(ctx));
    AGMM_TRY(st, agmm_symm_alloc(ctx, AGMM_PAD_SLOTS * sizeof(uint32_t), &ctx->pad));
    *out = ctx;
    return AGMM_SUCCESS;
fail:
    agmm_log(w->log_level, AGMM_LOG_ERROR, rank, "context creation failed: %s", ctx->err.msg);
    agmm_ctx_destroy(ctx);
    return st;
}

void agmm_ctx_destroy(agmm_ctx *ctx)
{
    if (ctx == NULL)
        return;
    agmm_symm_free(ctx, ctx->pad);
    if (ctx->gpu)
        agmm_ctx_gpu_destroy(ctx);
    free(ctx);
}

int agmm_ctx_rank(const agmm_ctx *ctx) { return ctx->rank; }
int agmm_ctx_device(const agmm_ctx *ctx) { return ctx->device; }
const char *agmm_last_error(const agmm_ctx *ctx) { return ctx ? ctx->err.msg : "(no context)"; }

agmm_status agmm_ctx_sync(agmm_ctx *ctx)
{
    agmm_error_clear(&ctx->err);
    if (ctx->world->kind == AGMM_WORLD_CPU)
        return AGMM_SUCCESS;
    return agmm_ctx_gpu_sync(ctx);
}

/* What the rank threads of one agmm_world_run share: they call fn only once every rank has its
 * context, so that no rank enters fn's collectives while a peer never will (its context failed,
 * or its thread could not start). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int expected;     /* threads that will report; lowered if a thread could not start */
    int reported;
    int failed;
} run_gate;

typedef struct {
    agmm_world *world;
    int rank;
    agmm_rank_fn fn;
    void *arg;
    run_gate *gate;
    agmm_status status;
} rank_thread;

/* Reports whether this rank has its context; returns 1 when every rank has one. */
static int gate_pass(run_gate *g, int ok)
{
    pthread_mutex_lock(&g->mu);
    g->reported++;
    g->failed |= !ok;
    pthread_cond_broadcast(&g->cv);
    while (g->reported < g->expected)
        pthread_cond_wait(&g->cv, &g->mu);
    int all = !g->failed;
    pthread_mutex_unlock(&g->mu);
    return all;
}

static void *rank_main(void *p)
{
    rank_thread *t = p;
    agmm_ctx *ctx = NULL;
    t->status = agmm_ctx_create(&ctx, t->world, t->rank);
    if (gate_pass(t->gate, t->status == AGMM_SUCCESS) && t->status == AGMM_SUCCESS)
        t->status = t->fn(ctx, t->arg);
    else if (t->status == AGMM_SUCCESS)
        t->status = AGMM_ERR_INTERNAL; /* a peer has no context: fn would wait for it */
    agmm_ctx_destroy(ctx);
    return NULL;
}

agmm_status agmm_world_run(agmm_world *w, agmm_rank_fn fn, void *arg)
{
    if (w == NULL || fn == NULL)
        return AGMM_ERR_INVALID_ARG;
    rank_thread t[AGMM_MAX_RANKS];
    pthread_t tid[AGMM_MAX_RANKS];
    run_gate gate = {.expected = w->nlocal};
    pthread_mutex_init(&gate.mu, NULL);
    pthread_cond_init(&gate.cv, NULL);
    int started = 0;
    for (int i = 0; i < w->nlocal; i++) {
        t[i] = (rank_thread){w, w->first_rank + i, fn, arg, &gate, AGMM_SUCCESS};
        if (pthread_create(&tid[i], NULL, rank_main, &t[i]) != 0)
            break;
        started++;
    }
    if (started < w->nlocal) {
        /* The started ranks' context creation times out waiting for the missing ones; the gate
         * then keeps them out of fn. */
        pthread_mutex_lock(&gate.mu);
        gate.expected = started;
        gate.failed = 1;
        pthread_cond_broadcast(&gate.cv);
        pthread_mutex_unlock(&gate.mu);
    }
    agmm_status st = started == w->nlocal ? AGMM_SUCCESS : AGMM_ERR_INTERNAL;
    for (int i = 0; i < started; i++) {
        pthread_join(tid[i], NULL);
        if (st == AGMM_SUCCESS && t[i].status != AGMM_SUCCESS)
            st = t[i].status;
    }
    pthread_cond_destroy(&gate.cv);
    pthread_mutex_destroy(&gate.mu);
    return st;
}
