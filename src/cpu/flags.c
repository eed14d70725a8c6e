/* Signals of the CPU world: epoch flags on plain uint32 words and bounded waits on them (the
 * protocol of docs/design.md, "Protocols").
 *
 * Flags are ordinary memory (the symmetric heap's host buffers, a plan's arrays);
 * every access that synchronises goes through a cast to _Atomic uint32_t, which is what the GPU
 * does with ld.acquire / st.release on the same words. */
#include "cpu.h"

#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "../core/clock.h"

/* Waiting policy: spin this many loads, then yield the core, and after NAP_AFTER_NS of waiting
 * sleep in naps of NAP_NS: up to 8 rank threads and 8 copy threads may share two cores, and a
 * spinner must not starve the thread it waits for. Internal, not knobs (core/knobs.h): the CPU
 * world is a test device, and what these buy is the tests' speed on a small machine; the bound
 * of every wait is the world's timeout, which is a knob. */
#define SPIN_LOADS 128
#define NAP_AFTER_NS 200000
#define NAP_NS 20000

static _Atomic uint32_t *atomic_word(const uint32_t *p)
{
    /* The word is never accessed non-atomically while it is shared; the cast is how C11 lets
     * plain memory (calloc'd, memset) take part in atomic synchronisation. */
    return (_Atomic uint32_t *)(uintptr_t)p;
}

int agmm_cpu_reached(uint32_t value, uint32_t epoch) { return (int32_t)(value - epoch) >= 0; }

uint32_t agmm_cpu_flag_load(const uint32_t *flag)
{
    return atomic_load_explicit(atomic_word(flag), memory_order_acquire);
}

void agmm_cpu_flag_raise(uint32_t *flag, uint32_t value)
{
    atomic_store_explicit(atomic_word(flag), value, memory_order_release);
}

void agmm_cpu_flag_add(uint32_t *flag, uint32_t value)
{
    atomic_fetch_add_explicit(atomic_word(flag), value, memory_order_release);
}

int agmm_cpu_flag_wait(const uint32_t *flag, uint32_t epoch, double timeout_s, uint32_t *seen)
{
    _Atomic uint32_t *w = atomic_word(flag);
    uint32_t v = atomic_load_explicit(w, memory_order_acquire);
    for (int i = 0; i < SPIN_LOADS && !agmm_cpu_reached(v, epoch); i++)
        v = atomic_load_explicit(w, memory_order_acquire);
    if (agmm_cpu_reached(v, epoch))
        return 1;
    int64_t start = agmm_mono_ns();
    int64_t limit = (int64_t)(timeout_s * 1e9);
    for (;;) {
        int64_t waited = agmm_mono_ns() - start;
        if (waited > limit) {
            /* One last look: the flag may have come while the clock was read. */
            v = atomic_load_explicit(w, memory_order_acquire);
            if (agmm_cpu_reached(v, epoch))
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
        if (agmm_cpu_reached(v, epoch))
            return 1;
    }
}
