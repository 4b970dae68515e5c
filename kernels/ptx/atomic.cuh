/* atomic.cuh — the counters that order and complete the fp32 reductions (PTX ISA 9.7.13.4
 * ld with .acquire, 9.7.13.5 atom, 9.7.13.6 red with .release; memory consistency model, §8).
 *
 * Deterministic mode: a CTA adds its share of a sum only once the semaphore of that sum
 * says it is its turn: one thread spins on ld.acquire, the CTA synchronizes, adds,
 * synchronizes again, and the same thread publishes with red.release. Release/acquire at
 * gpu scope order the earlier CTA's reductions before the later CTA's, so the fp32 sum is
 * formed in a fixed order.
 * Otherwise a CTA counts itself in with atom.release once its share is added; the CTA that
 * sees the count one short of complete knows every share is in, and a fence.acq_rel (the
 * acquire half of the pattern, taken only then) orders its reads of the sum after them.
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

/* Add v to *addr with no ordering of its own: after a fence_acq_rel_gpu, a run of these
 * publishes what the fence ordered without a fence each. */
__device__ __forceinline__ void red_relaxed_gpu_add(int32_t *addr, int32_t v)
{
    asm volatile("red.relaxed.gpu.global.add.s32 [%0], %1;\n" ::"l"(addr), "r"(v) : "memory");
}

/* Atomically add v to *addr and return the old value, after the thread's earlier writes. */
__device__ __forceinline__ int32_t atom_add_release_gpu(int32_t *addr, int32_t v)
{
    int32_t old;
    asm volatile("atom.release.gpu.global.add.s32 %0, [%1], %2;\n"
                 : "=r"(old)
                 : "l"(addr), "r"(v)
                 : "memory");
    return old;
}

/* Order the thread's later reads after what its earlier reads observed (acquire). */
__device__ __forceinline__ void fence_acq_rel_gpu()
{
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
}

} // namespace fb::ptx
