/* atomic.cuh — the acquire/release pair behind deterministic mode's ordered reductions
 * (PTX ISA 9.7.13.4 ld with .acquire, 9.7.13.6 red with .release; memory consistency
 * model, §8).
 *
 * A CTA adds its share of a sum only once the semaphore of that sum says it is its turn:
 * one thread spins on ld.acquire, the CTA synchronizes, adds, synchronizes again, and the
 * same thread publishes with red.release. Release/acquire at gpu scope order the earlier
 * CTA's reductions before the later CTA's, so the fp32 sum is formed in a fixed order.
 */
#pragma once
#include <stdint.h>

namespace fb::ptx {

__device__ __forceinline__ int32_t ld_acquire_gpu(const int32_t *addr)
{
    int32_t v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(addr) : "memory");
    return v;
}

__device__ __forceinline__ void red_release_gpu_add(int32_t *addr, int32_t v)
{
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(addr), "r"(v) : "memory");
}

} // namespace fb::ptx
