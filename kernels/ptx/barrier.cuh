/* barrier.cuh — a barrier over some of the CTA's warps (PTX ISA 9.7.13.4 bar.sync,
 * bar.arrive).
 *
 * bar.sync with a barrier id and a thread count waits for that many threads (whole warps)
 * at barrier `id`; like __syncthreads (barrier 0, every thread) it also orders the
 * participants' shared-memory accesses. bar.arrive counts the calling warp in without
 * waiting: a producer arrives, its consumers sync, and the consumers see what the producer
 * stored before it arrived (the count covers both sides; one instruction may arrive and
 * another sync in the same generation). The kernels give each group of
 * warps its own id from 1 up, leaving 0 to __syncthreads.
 */
#pragma once

namespace fb::ptx {

__device__ __forceinline__ void bar_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* barrier.sync without .aligned (bar.sync is the aligned form): for a barrier that warps
 * reach from different instructions (the split kernel's two roles). With the aligned form
 * the waiting warps of one barrier generation must execute the same instruction
 * (compute-sanitizer's synccheck reports the others as divergent). */
__device__ __forceinline__ void barrier_sync_unaligned(int id, int threads)
{
    asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void bar_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

} // namespace fb::ptx
