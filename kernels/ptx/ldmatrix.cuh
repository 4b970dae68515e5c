/* ldmatrix.cuh — load 8x8 16-bit matrices from shared memory into fragments
 * (PTX ISA 9.7.14.5.15, ldmatrix).
 *
 * x4: lanes 8i..8i+7 give the row addresses (16 bytes each) of matrix i; every lane gets one
 * register per matrix. Without .trans, lane l receives row l/4, columns 2(l%4)..+1 of each
 * matrix; with .trans it receives column l/4, rows 2(l%4)..+1, i.e. the transposed matrix.
 * `addr` is a shared-state-space address (__cvta_generic_to_shared).
 */
#pragma once
#include <stdint.h>

namespace fb::ptx {

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* x2: only lanes 0..15 give addresses (matrices 0 and 1); for the last, odd 8-column B
 * fragment of a warp's block. */
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
}

} // namespace fb::ptx
