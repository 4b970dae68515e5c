/* global.cuh — a 16-byte global load that bypasses L1 (PTX ISA 9.7.9.8 ld, .cg).
 *
 * The fp32 dQ sums are formed by red.global from many CTAs, which L1 never sees; reading
 * them back at L2 (.cg, "cache global") cannot return a stale L1 line.
 */
#pragma once

namespace fb::ptx {

__device__ __forceinline__ float4 ld_global_cg_v4(const float *addr)
{
    float4 v;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(addr)
                 : "memory");
    return v;
}

} // namespace fb::ptx
