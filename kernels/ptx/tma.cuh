/* tma.cuh — the tensor copy engine (PTX ISA 9.7.9.25.5 cp.async.bulk.tensor, 9.7.9.25.4
 * cp.async.bulk; 9.7.13.15.11 mbarrier.arrive with .expect_tx). sm_90.
 *
 * One thread asks for a whole box of a tensor (described by a CUtensorMap the host
 * encoded) or a contiguous byte range to be copied into shared memory; the copy engine
 * does the addressing, fills what lies outside the tensor with zeros, applies the map's
 * swizzle, and reports the bytes on an mbarrier. The thread first tells the barrier how
 * many bytes to expect (arrive.expect_tx: one arrival plus the transaction count), so the
 * barrier's phase completes when that thread has arrived and every byte has landed.
 * The split kernel's ring refill uses it on FB_SPLIT_TMA rows; bench/tma_probe.cu checks
 * that a SWIZZLE_128B box lands exactly as SmemTile lays out a 64-column panel.
 */
#pragma once
#include <stdint.h>

namespace fb::ptx {

/* Make this thread's mbarrier.init visible to the copy engine (and the rest of the
 * cluster) before the barriers are used; a CTA barrier follows it. */
__device__ __forceinline__ void fence_mbarrier_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* Arrive on the mbarrier at `bar` and add `bytes` to the transactions its phase waits for. */
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}

/* Copy the box at coordinates (c0, c1, c2, c3) (innermost first) of the 4-d tensor that
 * `tmap` (a CUtensorMap in parameter, constant or global memory) describes to `dst`,
 * completing `bar`'s transactions. */
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void *tmap, int c0, int c1,
                                            int c2, int c3, uint32_t bar)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
                 "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
}

/* Copy `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory to
 * `dst`, completing `bar`'s transactions. */
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes,
                                          uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

} // namespace fb::ptx
