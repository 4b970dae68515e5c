/* mma.cuh — warp-level tensor-core multiply-accumulate (PTX ISA 9.7.14.5.8, mma.m16n8k16).
 *
 * d[16x8] += a[16x16] * b[16x8], fp32 accumulate, 16-bit inputs. With g = lane / 4 and
 * t = lane % 4, each lane holds
 *   a: a[0] = A(g, 2t..2t+1)    a[1] = A(g+8, 2t..2t+1)
 *      a[2] = A(g, 2t+8..+9)    a[3] = A(g+8, 2t+8..+9)
 *   b: b[0] = B(2t..2t+1, g)    b[1] = B(2t+8..+9, g)
 *   d: d[0..1] = D(g, 2t..2t+1) d[2..3] = D(g+8, 2t..2t+1)
 * Registers of a and b pack two 16-bit values, the lower column (or row) in the low half.
 */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace fb::ptx {


template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t b0, const uint32_t b1);

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                            const uint32_t b0, const uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const uint32_t (&a)[4],
                                                     const uint32_t b0, const uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

} // namespace fb::ptx
