/* A public context is the world's rank plus its symmetric heap: the two layers below meet here,
 * so neither needs to know the other. Also the thread-per-rank runner of one-process worlds. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "tune.h"
#include "../core/knobs.h"

agmm_status agmm_api_fault_point(agmm_ctx *ctx, const agmm_fault *f, agmm_fault_at at, uint64_t occurrence)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    /* A joined world of one process is a process world too: its faults exit the process. */
    agmm_fault_site site = {.rank = ri->rank, .nranks = ri->nranks, .timeout_s = ri->timeout_s,
                            .process_world = ri->processes, .occurrence = occurrence};
    return agmm_fault_point(f, at, &site, agmm_ctx_err(ctx));
}

agmm_status agmm_ctx_create(agmm_ctx **out, agmm_world *world, int rank)
{
    if (out == NULL)
        return AGMM_ERR_INVALID_ARG;
    agmm_status st = agmm_rank_create(out, world, rank);
    if (st != AGMM_SUCCESS)
        return st;
    /* AGMM_FAULT's create point: after the rank's own set-up, before it meets any peer. */
    agmm_fault fault;
    st = agmm_fault_from_env(agmm_world_nranks(world), &fault, agmm_ctx_err(*out));
    if (st == AGMM_SUCCESS)
        st = agmm_api_fault_point(*out, &fault, AGMM_FAULT_AT_CREATE, 0);
    if (st == AGMM_SUCCESS)
        st = agmm_symm_attach(*out);
    if (st != AGMM_SUCCESS) {
        agmm_log(agmm_ctx_info(*out)->log_level, AGMM_LOG_ERROR, rank, "context creation failed: %s",
                 agmm_last_error(*out));
        agmm_rank_destroy(*out);
        *out = NULL;
    }
    return st;
}

void agmm_ctx_destroy(agmm_ctx *ctx)
{
    if (ctx == NULL)
        return;
    agmm_tune_release(ctx);
    agmm_symm_detach(ctx);
    agmm_rank_destroy(ctx);
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
    int own;          /* status is this rank's own failure, not a peer's missing context */
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
    t->own = t->status != AGMM_SUCCESS;
    if (gate_pass(t->gate, t->status == AGMM_SUCCESS) && t->status == AGMM_SUCCESS)
        t->status = t->fn(ctx, t->arg), t->own = 1;
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
    const int nlocal = agmm_world_local_ranks(w), first = agmm_world_first_rank(w);
    run_gate gate = {.expected = nlocal};
    pthread_mutex_init(&gate.mu, NULL);
    pthread_cond_init(&gate.cv, NULL);
    int started = 0;
    for (int i = 0; i < nlocal; i++) {
        t[i] = (rank_thread){w, first + i, fn, arg, &gate, AGMM_SUCCESS, 0};
        int e = pthread_create(&tid[i], NULL, rank_main, &t[i]);
        if (e != 0) {
            /* No context holds a message yet: say it where the caller's user sees it. */
            agmm_log(agmm_log_level_from_env(), AGMM_LOG_ERROR, first + i, "agmm_world_run: cannot start the rank's "
                     "thread: %s", strerror(e));
            break;
        }
        started++;
    }
    if (started < nlocal) {
        /* The started ranks' context creation times out waiting for the missing ones; the gate
         * then keeps them out of fn. */
        pthread_mutex_lock(&gate.mu);
        gate.expected = started;
        gate.failed = 1;
        pthread_cond_broadcast(&gate.cv);
        pthread_mutex_unlock(&gate.mu);
    }
    agmm_status st = started == nlocal ? AGMM_SUCCESS : AGMM_ERR_INTERNAL;
    /* The first rank's own failure, before a peer's missing context (AGMM_ERR_INTERNAL), which
     * only follows from it. */
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    for (int pass = 0; pass < 2 && st == AGMM_SUCCESS; pass++)
        for (int i = 0; i < started && st == AGMM_SUCCESS; i++)
            if (t[i].status != AGMM_SUCCESS && (t[i].own || pass == 1))
                st = t[i].status;
    pthread_cond_destroy(&gate.cv);
    pthread_mutex_destroy(&gate.mu);
    return st;
}

agmm_status agmm_symmetric_alloc(agmm_ctx *ctx, size_t bytes, void **ptr)
{
    if (ctx == NULL)
        return AGMM_ERR_INVALID_ARG;
    agmm_error *err = agmm_ctx_err(ctx);
    agmm_error_clear(err);
    if (ptr == NULL)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "ptr is NULL");
    *ptr = NULL;
    /* The ranks agree on the size first: a rank asking for another size (or none) fails every
     * rank alike, instead of leaving buffers of different sizes that runs would read past. */
    const uint64_t mine = bytes;
    uint64_t all[AGMM_MAX_RANKS];
    agmm_status st = agmm_host_exchange(ctx, &mine, sizeof mine, all);
    if (st != AGMM_SUCCESS)
        return st;
    const int nranks = agmm_ctx_info(ctx)->nranks;
    for (int r = 1; r < nranks; r++)
        if (all[r] != all[0])
            return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                             "bytes=%zu: rank %d asks for %llu bytes and rank 0 for %llu: every rank allocates the "
                             "same size, in the same order",
                             bytes, r, (unsigned long long)all[r], (unsigned long long)all[0]);
    if (bytes == 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "bytes=0: a symmetric buffer needs at least one byte");
    agmm_symm_buf *buf = NULL;
    st = agmm_symm_user_alloc(ctx, bytes, &buf);
    if (st == AGMM_SUCCESS)
        *ptr = buf->local;
    return st;
}

void agmm_symmetric_free(agmm_ctx *ctx, void *ptr)
{
    if (ctx == NULL || ptr == NULL)
        return;
    agmm_error_clear(agmm_ctx_err(ctx));
    agmm_symm_user_free(ctx, ptr);
}
