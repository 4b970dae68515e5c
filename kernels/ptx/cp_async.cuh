/* cp_async.cuh — asynchronous global-to-shared copies (PTX ISA 9.7.9.25, cp.async).
 *
 * cp.async.cg copies 16 bytes, bypassing L1. The src-size operand makes a predicated-off
 * copy write zeros instead of reading, which is how out-of-range rows and head-dim columns
 * become zero tiles. Copies are grouped by commit_group; wait_group<N> waits until at most
 * N groups are still in flight. The "memory" clobber keeps the compiler from moving shared
 * memory accesses across the wait.
 */
#pragma once
#include <stdint.h>

namespace fb::ptx {

__device__ __forceinline__ void cp_async_cg_16(uint32_t smem_addr, const void *gmem, bool valid)
{
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :
                 : "r"(smem_addr), "l"(gmem), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

} // namespace fb::ptx
