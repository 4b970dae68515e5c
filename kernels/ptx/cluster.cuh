/* cluster.cuh — thread-block clusters (sm_90): a CTA's rank in its cluster, the cluster
 * barrier, and a bulk copy from global memory multicast into several CTAs of the cluster.
 * Only bench/gemm_probe uses them so far (the step+cl and step+mc cases, next-levers item
 * (39a) in docs/performance.md); the kernels run without clusters. */
#pragma once
#include <stdint.h>

namespace fb::ptx {

/* This CTA's rank in its cluster (0 without a cluster launch). */
__device__ __forceinline__ uint32_t cluster_ctarank()
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}

/* Every thread of every CTA of the cluster: arrive (release), then wait (acquire), so that
 * shared-memory writes and mbarrier inits before it are visible cluster-wide after it. */
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::
                     : "memory");
}

/* Copy `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory to the
 * shared address `dst` of every CTA in `cta_mask` (bit i: rank i), completing the mbarrier
 * at the same offset `bar` in each. Multicast is sm_90a's: elsewhere this traps. */
__device__ __forceinline__ void bulk_load_multicast(uint32_t dst, const void *src, uint32_t bytes,
                                                    uint32_t bar, uint16_t cta_mask)
{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar), "h"(cta_mask)
                 : "memory");
#else
    (void)dst, (void)src, (void)bytes, (void)bar, (void)cta_mask;
    __trap();
#endif
}

} // namespace fb::ptx
