/* mbarrier.cuh — shared-memory transaction barriers (PTX ISA 9.7.13.15, mbarrier; 9.7.9.25.3
 * cp.async.mbarrier.arrive).
 *
 * An mbarrier counts arrivals; when the expected count is reached its phase completes and
 * the next phase begins with the same count. Waiting names the phase by its parity, so a
 * barrier that guards ring stage s is waited on with parity (use of s) % 2. The split
 * kernel's ring uses two per stage: `full` (the refill's copies have landed: each copying
 * thread's cp.async.mbarrier.arrive fires once its earlier cp.async are done) and `empty`
 * (every thread is done reading the stage). Arrive releases and a completed wait acquires at
 * CTA scope, so shared-memory writes before an arrive are visible after the wait.
 * mbarrier.try_wait is sm_90's (the split kernel is compiled for sm_90 rows only).
 */
#pragma once
#include <stdint.h>

namespace fb::ptx {

__device__ __forceinline__ void mbarrier_init(uint32_t addr, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count) : "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint32_t addr)
{
    asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.shared::cta.b64 state, [%0];\n}\n"
                 ::"r"(addr)
                 : "memory");
}

/* Arrive once the calling thread's earlier cp.async have completed. .noinc: the arrival is
 * one of the barrier's expected count (it does not add one first). */
__device__ __forceinline__ void cp_async_mbarrier_arrive(uint32_t addr)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(addr) : "memory");
}

/* Spin until the phase of parity `parity` has completed. */
__device__ __forceinline__ void mbarrier_wait(uint32_t addr, uint32_t parity)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("{\n"
                 " .reg .pred done;\n"
                 "WAIT_%=:\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra WAIT_%=;\n"
                 "}\n" ::"r"(addr),
                 "r"(parity)
                 : "memory");
#else
    asm volatile("{\n"
                 " .reg .pred done;\n"
                 "WAIT_%=:\n"
                 " mbarrier.test_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra WAIT_%=;\n"
                 "}\n" ::"r"(addr),
                 "r"(parity)
                 : "memory");
#endif
}

} // namespace fb::ptx
