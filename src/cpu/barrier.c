/* Signals of the CPU world: epoch flags on plain uint32 words, bounded waits on them, and the
 * cross-rank barrier on the signal pads (design.md §4).
 *
 * The pads and flags are ordinary memory (the symmetric heap's host buffers, a plan's arrays);
 * every access that synchronises goes through a cast to _Atomic uint32_t, which is what the GPU
 * does with ld.acquire / st.release on the same words. */
#include "cpu.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "../symm/symm.h"

/* Waiting policy: spin this many loads, then yield the core, and after NAP_AFTER_NS of waiting
 * sleep in naps of NAP_NS: up to 8 rank threads and 8 copy threads may share two cores, and a
 * spinner must not starve the thread it waits for. */
#define SPIN_LOADS 128
#define NAP_AFTER_NS 200000
#define NAP_NS 20000

int64_t agmm_cpu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static _Atomic uint32_t *atomic_word(const uint32_t *p)
{
    /* The word is never accessed non-atomically while it is shared; the cast is how C11 lets
     * plain memory (calloc'd, memset) take part in atomic synchronisation. */
    return (_Atomic uint32_t *)(uintptr_t)p;
}

static int reached(uint32_t value, uint32_t epoch) { return (int32_t)(value - epoch) >= 0; }

void agmm_cpu_flag_raise(uint32_t *flag, uint32_t value)
{
    atomic_store_explicit(atomic_word(flag), value, memory_order_release);
}

int agmm_cpu_flag_wait(const uint32_t *flag, uint32_t epoch, double timeout_s, uint32_t *seen)
{
    _Atomic uint32_t *w = atomic_word(flag);
    uint32_t v = atomic_load_explicit(w, memory_order_acquire);
    for (int i = 0; i < SPIN_LOADS && !reached(v, epoch); i++)
        v = atomic_load_explicit(w, memory_order_acquire);
    if (reached(v, epoch))
        return 1;
    int64_t start = agmm_cpu_now_ns();
    int64_t limit = (int64_t)(timeout_s * 1e9);
    for (;;) {
        int64_t waited = agmm_cpu_now_ns() - start;
        if (waited > limit) {
            /* One last look: the flag may have come while the clock was read. */
            v = atomic_load_explicit(w, memory_order_acquire);
            if (reached(v, epoch))
                return 1;
            if (seen)
                *seen = v;
            return 0;
        }
        if (waited < NAP_AFTER_NS) {
            sched_yield();
        } else {
            struct timespec nap = {0, NAP_NS};
            nanosleep(&nap, NULL);
        }
        v = atomic_load_explicit(w, memory_order_acquire);
        if (reached(v, epoch))
            return 1;
    }
}

/* Records the timeout of a barrier: the first peer that never arrived (at slot `first`, last
 * seen at `seen`) and any later one still missing. */
static agmm_status barrier_timeout(agmm_ctx *ctx, const char *what, uint32_t epoch, int first, uint32_t seen)
{
    char others[160] = "";
    size_t used = 0;
    const uint32_t *mine = ctx->pad->local;
    for (int p = first + 1; p < ctx->world->nranks && used + 16 < sizeof others; p++) {
        uint32_t v = atomic_load_explicit(atomic_word(mine + p), memory_order_acquire);
        if (!reached(v, epoch))
            used += (size_t)snprintf(others + used, sizeof others - used, ", rank %d", p);
    }
    return AGMM_FAIL(&ctx->err, AGMM_ERR_TIMEOUT,
                     "rank %d: %s (barrier epoch %u) timed out after %.2f s: rank %d never arrived (its slot reads "
                     "%u)%s%s",
                     ctx->rank, what, epoch, ctx->world->timeout_s, first, seen, used ? "; missing too: " : "",
                     used ? others + 2 : "");
}

agmm_status agmm_cpu_barrier(agmm_ctx *ctx, const char *what)
{
    int nranks = ctx->world->nranks;
    agmm_symm_buf *pad = ctx->pad;
    uint32_t epoch = ++ctx->barrier_epoch;

    /* Arrive: slot[rank] of every pad, mine included. The release orders every write this rank
     * made before (its shard, its scratch) before the arrival that peers acquire. */
    for (int p = 0; p < nranks; p++)
        agmm_cpu_flag_raise((uint32_t *)pad->peer[p] + ctx->rank, epoch);

    /* Wait: every slot of my pad. A peer already in a later barrier has written a later epoch,
     * which also counts ("reached" is >=). Peers are waited for in turn, each with what is left
     * of the timeout, so the whole barrier is bounded by it. */
    const uint32_t *mine = pad->local;
    int64_t deadline = agmm_cpu_now_ns() + (int64_t)(ctx->world->timeout_s * 1e9);
    for (int p = 0; p < nranks; p++) {
        double left = (double)(deadline - agmm_cpu_now_ns()) * 1e-9;
        uint32_t seen = 0;
        if (!agmm_cpu_flag_wait(mine + p, epoch, left > 0 ? left : 0, &seen))
            return barrier_timeout(ctx, what, epoch, p, seen);
    }
    return AGMM_SUCCESS;
}
