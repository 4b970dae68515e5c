/* shared.cuh — plain shared-memory loads and stores by shared-state address
 * (PTX ISA 9.7.9.8 ld, 9.7.9.10 st, .shared state space).
 *
 * The kernels address shared memory as 32-bit byte offsets (see LaneAddr) so that an
 * access is a base register plus an immediate; these helpers take such an address. The
 * "memory" clobber keeps the compiler from reordering them across other shared accesses
 * that it cannot see through the asm.
 */
#pragma once
#include <stdint.h>

namespace fb::ptx {

__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v)
{
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void st_shared_b16(uint32_t addr, uint16_t v)
{
    asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(addr), "h"(v) : "memory");
}

__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr)
{
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

} // namespace fb::ptx
