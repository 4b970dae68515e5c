/* barrier.cuh — a barrier over some of the CTA's warps (PTX ISA 9.7.13.4 bar.sync).
 *
 * bar.sync with a barrier id and a thread count waits for that many threads (whole warps)
 * at barrier `id`; like __syncthreads (barrier 0, every thread) it also orders the
 * participants' shared-memory accesses. The main kernel gives each group of warps its own
 * id from 1 up, leaving 0 to __syncthreads.
 */
#pragma once

namespace fb::ptx {

__device__ __forceinline__ void bar_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

} // namespace fb::ptx
