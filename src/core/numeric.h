/* bf16 <-> float conversion (round to nearest even, NaN kept) and a small deterministic RNG for
 * test and benchmark inputs. Header-only so kernels-free C code and tests share one definition. */
#ifndef AGMM_CORE_NUMERIC_H
#define AGMM_CORE_NUMERIC_H

#include <stdint.h>
#include <string.h>

static inline float agmm_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t agmm_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* splitmix64: one 64-bit state, good enough for test data, identical on every platform. */
static inline uint64_t agmm_rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float agmm_rng_uniform(uint64_t *state)
{
    return (float)((double)(agmm_rng_next(state) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* A small integer in [-range, range]: sums of products of these are exact in bf16/fp32, which
 * lets small shapes be compared bit for bit. */
static inline int agmm_rng_small_int(uint64_t *state, int range)
{
    return (int)(agmm_rng_next(state) % (uint64_t)(2 * range + 1)) - range;
}

/* The bf16 pattern written over outputs before a run, so a tile never written reads as NaN. */
#define AGMM_POISON_BF16 ((uint16_t)0x7fc1)

#endif
