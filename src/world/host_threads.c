/* Host collectives of a world whose ranks are threads of one process: a mutex, a condition
 * variable and a slot per rank. Every wait has the world's timeout as its deadline, on the
 * monotonic clock (a wall-clock jump must not stretch or cut it), except while a rank it waits for
 * is busy with work of its own (agmm_ctx_busy_begin): then the wait has no bound, and a whole
 * timeout starts when that rank ends its busy spell. A thread cannot die alone, so nothing else
 * needs watching. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "world_impl.h"
#include "../core/text.h"

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned generation;
    int arrived;
    uint64_t came;             /* bit i: local rank i came to this generation (if only to give up) */
    uint64_t busy;             /* bit i: local rank i is busy with work of its own */
    unsigned char *slots;      /* nlocal slots of AGMM_HOST_SLOT_BYTES */
    uint32_t *tags;            /* nlocal: the tag of the host collective each rank is in */
    size_t *sizes;             /* nlocal: the bytes each rank's exchange carries */
} threads_state;

/* *t = now + timeout_s on the monotonic clock. */
static void arm(struct timespec *t, double timeout_s)
{
    clock_gettime(CLOCK_MONOTONIC, t);
    double whole = (double)(long)timeout_s;
    t->tv_sec += (time_t)whole;
    t->tv_nsec += (long)((timeout_s - whole) * 1e9);
    if (t->tv_nsec >= 1000000000L) {
        t->tv_sec++;
        t->tv_nsec -= 1000000000L;
    }
}

/* Waits until every local rank has arrived at this generation, up to the world's timeout; `tag`
 * names the call in a timeout's message. Called with s->mu held. */
static agmm_status rendezvous_locked(agmm_ctx *ctx, threads_state *s, uint32_t tag)
{
    agmm_world *w = ctx->world;
    unsigned gen = s->generation;
    const uint64_t me = (uint64_t)1 << ctx->info.local_rank;
    s->came |= me;
    if (++s->arrived == w->nlocal) {
        s->arrived = 0;
        s->came = 0;
        s->generation++;
        pthread_cond_broadcast(&s->cv);
        return AGMM_SUCCESS;
    }
    const uint64_t all = w->nlocal == 64 ? ~(uint64_t)0 : ((uint64_t)1 << w->nlocal) - 1;
    struct timespec deadline;
    arm(&deadline, w->timeout_s);
    /* held: a rank still missing was busy at the last look. While one is, every wake re-arms the
     * deadline; the first wake after it ends (threads_busy broadcasts) arms a whole timeout. A wait
     * that began while one was busy never times out: its deadline was armed during the spell, and
     * may pass just after the spell ends, before this thread has looked again (seen: a timeout
     * 0.3 s early, when a 0.6 s spell ended as the second 0.3 s deadline it had re-armed passed). */
    int held = 0;
    while (s->generation == gen) {
        const int busy_now = (all & ~s->came & s->busy) != 0;
        if (busy_now || held)
            arm(&deadline, w->timeout_s);
        held = busy_now;
        if (pthread_cond_timedwait(&s->cv, &s->mu, &deadline) == ETIMEDOUT && s->generation == gen && !held &&
            (all & ~s->came & s->busy) == 0) {
            /* Name the ranks that never came (global numbers: local rank i is first_rank + i); a
             * peer that came and gave up a moment earlier is not one of them. */
            uint64_t missing = (all & ~s->came) << w->first_rank;
            char who[200];
            agmm_format_ranks(who, sizeof who, missing);
            s->arrived--; /* leave the count as if we never came, so a late peer cannot complete it */
            return AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                             "rank %d: host %s #%u timed out after %.2f s: %s never arrived", ctx->info.rank,
                             tag & 1 ? "exchange" : "barrier", tag >> 1, w->timeout_s, who);
        }
    }
    return AGMM_SUCCESS;
}

static agmm_status threads_barrier(agmm_ctx *ctx, uint32_t tag)
{
    threads_state *s = ctx->world->host_state;
    pthread_mutex_lock(&s->mu);
    s->tags[ctx->info.local_rank] = tag;
    agmm_status st = rendezvous_locked(ctx, s, tag);
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* Write my slot, meet, check that every rank is in this same call (tags, and sizes: ranks that
 * took different paths can meet in exchanges of one number, and a slot read as another call's
 * struct is garbage), read all slots, meet again so that nobody overwrites a slot still being
 * read. */
static agmm_status threads_exchange(agmm_ctx *ctx, uint32_t tag, const void *mine, size_t bytes, void *all)
{
    agmm_world *w = ctx->world;
    threads_state *s = w->host_state;
    pthread_mutex_lock(&s->mu);
    s->tags[ctx->info.local_rank] = tag;
    s->sizes[ctx->info.local_rank] = bytes;
    memcpy(s->slots + (size_t)ctx->info.local_rank * AGMM_HOST_SLOT_BYTES, mine, bytes);
    agmm_status st = rendezvous_locked(ctx, s, tag);
    if (st == AGMM_SUCCESS) {
        int odd = -1;
        for (int r = 0; r < w->nlocal && odd < 0; r++)
            if (s->tags[r] != tag || s->sizes[r] != bytes)
                odd = r;
        if (odd >= 0)
            AGMM_FAIL(&ctx->err, AGMM_ERR_INTERNAL,
                      "rank %d: host exchange #%u (%zu bytes) met rank %d in its host %s #%u (%zu bytes): the ranks "
                      "are out of step (one skipped or repeated a collective call, or they made different calls)",
                      ctx->info.rank, tag >> 1, bytes, w->first_rank + odd, s->tags[odd] & 1 ? "exchange" : "barrier",
                      s->tags[odd] >> 1, s->tags[odd] & 1 ? s->sizes[odd] : 0);
        else
            for (int r = 0; r < w->nlocal; r++)
                memcpy((unsigned char *)all + (size_t)(w->first_rank + r) * bytes, s->slots + (size_t)r * AGMM_HOST_SLOT_BYTES,
                       bytes);
        /* Meet again either way, so that nobody overwrites a slot still being read and the
         * peers' pairing is what it would have been. */
        agmm_status st2 = rendezvous_locked(ctx, s, tag);
        st = odd >= 0 ? AGMM_ERR_INTERNAL : st2;
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

static void threads_busy(agmm_ctx *ctx, int busy, const char *what)
{
    threads_state *s = ctx->world->host_state;
    const uint64_t me = (uint64_t)1 << ctx->info.local_rank;
    pthread_mutex_lock(&s->mu);
    s->busy = busy ? s->busy | me : s->busy & ~me;
    /* Waiters re-arm their deadline now: a whole timeout from the end of the busy spell. */
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void threads_fini(agmm_world *w)
{
    threads_state *s = w->host_state;
    if (s == NULL)
        return;
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s->slots);
    free(s->tags);
    free(s->sizes);
    free(s);
    w->host_state = NULL;
}

/* Threads pass no descriptors and need no abandon notice: they share the world's record. */
static const agmm_host_ops threads_ops = {threads_exchange, threads_barrier, NULL, NULL, threads_busy, NULL,
                                           threads_fini};

agmm_status agmm_host_threads_init(agmm_world *w, agmm_error *err)
{
    threads_state *s = calloc(1, sizeof *s);
    if (s == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "world rendezvous allocation failed");
    w->host = &threads_ops;
    w->host_state = s;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->slots = calloc((size_t)w->nlocal, AGMM_HOST_SLOT_BYTES);
    s->tags = calloc((size_t)w->nlocal, sizeof *s->tags);
    s->sizes = calloc((size_t)w->nlocal, sizeof *s->sizes);
    if (s->slots == NULL || s->tags == NULL || s->sizes == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "world exchange buffer allocation failed");
    return AGMM_SUCCESS;
}
