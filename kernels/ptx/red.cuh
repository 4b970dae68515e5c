/* red.cuh — fire-and-forget fp32 reductions into global memory (PTX ISA 9.7.13.6, red).
 *
 * The main kernel adds its dQ share (and, with GQA, its dK/dV share) this way. The vector
 * form (.v4.f32) exists from sm_90 and cuts the instruction count four-fold; sm_8x issues
 * four scalar reductions instead. The address must be 16-byte aligned for .v4.
 */
#pragma once

namespace fb::ptx {

__device__ __forceinline__ void red_global_add_f32(float *addr, float v)
{
    asm volatile("red.global.add.f32 [%0], %1;\n" ::"l"(addr), "f"(v) : "memory");
}

__device__ __forceinline__ void red_global_add_v4_f32(float *addr, float a, float b, float c,
                                                      float d)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n"
                 ::"l"(addr), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
#else
    red_global_add_f32(addr + 0, a);
    red_global_add_f32(addr + 1, b);
    red_global_add_f32(addr + 2, c);
    red_global_add_f32(addr + 3, d);
#endif
}

} // namespace fb::ptx
