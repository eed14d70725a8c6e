/* Hopper PTX wrappers used by the GEMM engine (internal, device code only): shared-memory
 * addresses, mbarriers, TMA loads (plain and cluster-multicast) and stores, cluster barriers, and
 * wgmma (fence/commit/wait, shared-memory descriptors, m64nNk16 bf16 -> fp32). Each wrapper is one
 * instruction or a fixed pattern of them; the protocols that use them are in src/kernels/gemm/. */
#ifndef AGMM_KERNELS_HOPPER_PTX_CUH
#define AGMM_KERNELS_HOPPER_PTX_CUH

#include <cuda.h>
#include <stdint.h>

/* ---- PTX wrappers ------------------------------------------------------------------------ */

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

/* 2-D tile load; c0 is the inner (contiguous) coordinate, in elements. Out-of-bounds parts of
 * the box are zero-filled and still count toward the barrier's transaction bytes. */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                 "l"(map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}

/* The same, multicast: the box lands at this smem offset in every CTA of the cluster named in
 * mask, and complete_tx goes to the barrier at this offset in each of them. */
__device__ __forceinline__ void tma_load_2d_mc(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar,
                                               uint16_t mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
                 "l"(map), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
                 : "memory");
}

/* Arrive on the barrier at the same offset in CTA `cta` of the cluster. The default (CTA-scope)
 * semantics, not .release.cluster: the callers are consumers giving back a slot whose reads by
 * wgmma have completed (wait_group), so there is nothing left to order before the partner's TMA
 * refill, and a cluster-scope release costs a fence on every call. Measured on the H200
 * (2026-12-03): with .release.cluster, 32% of the warps' cycles stalled on that fence and the
 * B-multicast pairs ran 1.5-2.6x slower than the same tile without a cluster; without it, 1.00-1.07x. */
__device__ __forceinline__ void mbar_arrive_remote(uint32_t bar, uint32_t cta)
{
    asm volatile("{\n.reg .b32 r;\nmapa.shared::cluster.u32 r, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [r];\n}\n" ::"r"(bar),
                 "r"(cta)
                 : "memory");
}

/* Closes this thread's bulk stores issued since the last commit into one bulk group (what
 * bulk_wait waits for). */
__device__ __forceinline__ void bulk_commit(void)
{
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* Stores one tile from shared memory through a 3-D map (a bulk tensor store); the bulk group is
 * committed. */
__device__ __forceinline__ void tma_store_3d(uint32_t src, const CUtensorMap *map, int c0, int c1, int c2)
{
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];" ::"l"(map),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
    bulk_commit();
}

/* Stores one box from shared memory through a 2-D map (a bulk tensor store), uncommitted: the
 * caller commits its stores as one bulk group (bulk_commit). */
__device__ __forceinline__ void tma_store_2d(uint32_t src, const CUtensorMap *map, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];" ::"l"(map), "r"(src),
                 "r"(c0), "r"(c1)
                 : "memory");
}

/* This thread's shared-memory writes, before the async proxy (a bulk store) reads them. */
__device__ __forceinline__ void fence_proxy_async_smem(void)
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* Waits until this thread's bulk stores have read their shared memory (READ = 1: the source may be
 * rewritten) or are complete (READ = 0). */
template <int READ>
__device__ __forceinline__ void bulk_wait(void)
{
    if (READ)
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    else
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

/* All threads of both CTAs (exited threads do not count, so every thread stays to the end). */
__device__ __forceinline__ void cluster_sync(void)
{
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

__device__ __forceinline__ void wgmma_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

template <int N>
__device__ __forceinline__ void wgmma_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/* Keeps the compiler from moving accumulator reads or writes across this point (the wgmma
 * asm statements write them asynchronously, which the compiler cannot see). */
template <int R>
__device__ __forceinline__ void acc_fence(float (&d)[R])
{
#pragma unroll
    for (int i = 0; i < R; i++)
        asm volatile("" : "+f"(d[i])::"memory");
}

/* wgmma shared-memory matrix descriptor for a 128B-swizzled tile (layout type 1 in bits 62-63).
 * lbo/sbo in bytes: K-major tiles use sbo = 1024 (8 rows of 128 B; lbo unused, set to 16);
 * MN-major tiles use lbo = bytes between 64-element MN blocks, sbo = 1024 between 8-row K
 * groups. The start address must sit in a 1024-aligned swizzle atom; advancing it by 32 B
 * steps K by 16 inside a K-major atom (the swizzle is applied to the final address). */
__device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3ffff) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32) |
           (1ull << 62);
}

/* ---- wgmma m64nNk16 bf16 -> fp32, both operands from shared memory ---------------------- */

/* A thread's N/2 accumulators are the instruction's first operands, 8 at a time ("+f"(d[i]) ...),
 * and their numbers its text's first list ("%i, ..."; the preprocessor cannot count, so that text
 * comes in literal pieces of 8 and 32). */
#define WG_D8(i)                                                                                                      \
    "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]),         \
        "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define WG_D16(i) WG_D8(i), WG_D8((i) + 8)
#define WG_D32(i) WG_D16(i), WG_D16((i) + 16)
#define WG_D64(i) WG_D32(i), WG_D32((i) + 32)
#define WG_R8_0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define WG_R8_8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define WG_R8_16 ", %16, %17, %18, %19, %20, %21, %22, %23"
#define WG_R8_24 ", %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_R8_32 ", %32, %33, %34, %35, %36, %37, %38, %39"
#define WG_R8_40 ", %40, %41, %42, %43, %44, %45, %46, %47"
#define WG_R8_48 ", %48, %49, %50, %51, %52, %53, %54, %55"
#define WG_R8_56 ", %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_R8_64 ", %64, %65, %66, %67, %68, %69, %70, %71"
#define WG_R8_72 ", %72, %73, %74, %75, %76, %77, %78, %79"
#define WG_R8_80 ", %80, %81, %82, %83, %84, %85, %86, %87"
#define WG_R8_88 ", %88, %89, %90, %91, %92, %93, %94, %95"
#define WG_R8_96 ", %96, %97, %98, %99, %100, %101, %102, %103"
#define WG_R8_104 ", %104, %105, %106, %107, %108, %109, %110, %111"
#define WG_R8_112 ", %112, %113, %114, %115, %116, %117, %118, %119"
#define WG_R8_120 ", %120, %121, %122, %123, %124, %125, %126, %127"
#define WG_R32_0 WG_R8_0 WG_R8_8 WG_R8_16 WG_R8_24
#define WG_R32_32 WG_R8_32 WG_R8_40 WG_R8_48 WG_R8_56
#define WG_R32_64 WG_R8_64 WG_R8_72 WG_R8_80 WG_R8_88
#define WG_R32_96 WG_R8_96 WG_R8_104 WG_R8_112 WG_R8_120
#define WG_STR(x) #x

/* wgmma_m64n<N>k16: D(64 x N, fp32) += A(64 x 16, smem desc) * B(16 x N, smem desc); scale_d = 0
 * zeroes D first. ACC = N/2 accumulators numbered by REGS; the descriptors, the scale and TRANS_B
 * are operands DA, DB, S and T (ACC to ACC + 3). */
#define WG_WRAPPER(N, ACC, DA, DB, S, T, REGS, ...)                                                                   \
    template <int TRANS_B>                                                                                         \
    __device__ __forceinline__ void wgmma_m64n##N##k16(float (&d)[ACC], uint64_t desc_a, uint64_t desc_b,          \
                                                       uint32_t scale_d)                                           \
    {                                                                                                              \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" WG_STR(S) ", 0;\n"                                       \
                     "wgmma.mma_async.sync.aligned.m64n" WG_STR(N) "k16.f32.bf16.bf16 {" REGS "}, %" WG_STR(DA) ", %" \
                     WG_STR(DB) ", p, 1, 1, 0, %" WG_STR(T) ";\n}\n"                                                  \
                     : __VA_ARGS__                                                                                 \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_B));                                     \
    }
WG_WRAPPER(64, 32, 32, 33, 34, 35, WG_R32_0, WG_D32(0))
WG_WRAPPER(96, 48, 48, 49, 50, 51, WG_R32_0 WG_R8_32 WG_R8_40, WG_D32(0), WG_D16(32))
WG_WRAPPER(112, 56, 56, 57, 58, 59, WG_R32_0 WG_R8_32 WG_R8_40 WG_R8_48, WG_D32(0), WG_D16(32), WG_D8(48))
WG_WRAPPER(128, 64, 64, 65, 66, 67, WG_R32_0 WG_R32_32, WG_D64(0))
WG_WRAPPER(144, 72, 72, 73, 74, 75, WG_R32_0 WG_R32_32 WG_R8_64, WG_D64(0), WG_D8(64))
WG_WRAPPER(160, 80, 80, 81, 82, 83, WG_R32_0 WG_R32_32 WG_R8_64 WG_R8_72, WG_D64(0), WG_D16(64))
WG_WRAPPER(176, 88, 88, 89, 90, 91, WG_R32_0 WG_R32_32 WG_R8_64 WG_R8_72 WG_R8_80, WG_D64(0), WG_D16(64), WG_D8(80))
WG_WRAPPER(192, 96, 96, 97, 98, 99, WG_R32_0 WG_R32_32 WG_R32_64, WG_D64(0), WG_D32(64))
WG_WRAPPER(256, 128, 128, 129, 130, 131, WG_R32_0 WG_R32_32 WG_R32_64 WG_R32_96, WG_D64(0), WG_D64(64))

/* The wrapper of a consumer's width (192 x 192's consumers are 96 wide, gemm_configs.h). */
template <int BN, int TRANS_B>
__device__ __forceinline__ void wgmma_tile(float (&d)[BN / 2], uint64_t desc_a, uint64_t desc_b, uint32_t scale_d)
{
    static_assert(BN == 64 || BN == 96 || BN == 112 || BN == 128 || BN == 144 || BN == 160 || BN == 176 ||
                      BN == 192 || BN == 256,
                  "a wgmma width with a wrapper here");
    if constexpr (BN == 256)
        wgmma_m64n256k16<TRANS_B>(d, desc_a, desc_b, scale_d);
    else if constexpr (BN == 192)
        wgmma_m64n192k16<TRANS_B>(d, desc_a, desc_b, scale_d);
    else if constexpr (BN == 128)
        wgmma_m64n128k16<TRANS_B>(d, desc_a, desc_b, scale_d);
    else if constexpr (BN == 96)
        wgmma_m64n96k16<TRANS_B>(d, desc_a, desc_b, scale_d);
    else if constexpr (BN == 112)
        wgmma_m64n112k16<TRANS_B>(d, desc_a, desc_b, scale_d);
    else if constexpr (BN == 144)
        wgmma_m64n144k16<TRANS_B>(d, desc_a, desc_b, scale_d);
    else if constexpr (BN == 160)
        wgmma_m64n160k16<TRANS_B>(d, desc_a, desc_b, scale_d);
    else if constexpr (BN == 176)
        wgmma_m64n176k16<TRANS_B>(d, desc_a, desc_b, scale_d);
    else
        wgmma_m64n64k16<TRANS_B>(d, desc_a, desc_b, scale_d);
}

#endif /* AGMM_KERNELS_HOPPER_PTX_CUH */
