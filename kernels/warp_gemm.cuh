/* warp_gemm.cuh — one warp's share of a GEMM whose operands both sit in shared memory.
 *
 * acc[MT][NT] += A · B over a depth of K, for the warp's block of a WarpLayout. Each operand
 * is a swizzled SmemTile stored one of two ways, chosen at compile time:
 *   A_KMAJOR = false: A is stored [out rows][K]   → ldmatrix      (Q in S = Q·Kᵀ)
 *   A_KMAJOR = true:  A is stored [K][out rows]   → ldmatrix.trans (P in dV = Pᵀ·dO)
 *   B_KMAJOR = false: B is stored [out cols][K]   → ldmatrix      (K in S = Q·Kᵀ)
 *   B_KMAJOR = true:  B is stored [K][out cols]   → ldmatrix.trans (dO in dV = Pᵀ·dO)
 * so the transposed operands of the backward (Pᵀ, dSᵀ, Qᵀ, dOᵀ, Kᵀ) are views of the one
 * copy in shared memory. Lane addresses follow the fragment layouts in ptx/mma.cuh and
 * ptx/ldmatrix.cuh: an x4 load fills one 16x16 A fragment or two 8-column B fragments.
 */
#pragma once
#include <stdint.h>

#include "ptx/ldmatrix.cuh"
#include "ptx/mma.cuh"

namespace fb {

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

template <class L, class TileA, class TileB, bool A_KMAJOR, bool B_KMAJOR, int K, typename T>
__device__ __forceinline__ void warp_gemm(float (&acc)[L::MT][L::NT][4], const T *sA,
                                          const T *sB, int warp, int lane)
{
    asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(lane));
    const int r0 = L::row0(warp), c0 = L::col0(warp);
    const uint32_t a_base = smem_u32(sA), b_base = smem_u32(sB);
#pragma unroll
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a[L::MT][4];
#pragma unroll
        for (int mi = 0; mi < L::MT; ++mi) {
            const int row = r0 + 16 * mi;
            if constexpr (!A_KMAJOR) {
                const int off = TileA::offset(row + (lane & 15), k0 + 8 * (lane >> 4));
                ptx::ldmatrix_x4(a[mi], a_base + 2 * off);
            } else {
                const int off = TileA::offset(k0 + (lane & 7) + 8 * (lane >> 4),
                                              row + 8 * ((lane >> 3) & 1));
                ptx::ldmatrix_x4_trans(a[mi], a_base + 2 * off);
            }
        }
        /* B two 8-column tiles at a time, each used at once, to keep few fragments live. */
#pragma unroll
        for (int nj = 0; nj < L::NT; nj += 2) {
            const int col = c0 + 8 * nj;
            uint32_t b[4];
            if constexpr (!B_KMAJOR) {
                const int off = TileB::offset(col + (lane & 7) + 8 * (lane >> 4),
                                              k0 + 8 * ((lane >> 3) & 1));
                ptx::ldmatrix_x4(b, b_base + 2 * off);
            } else {
                const int off = TileB::offset(k0 + (lane & 7) + 8 * ((lane >> 3) & 1),
                                              col + 8 * (lane >> 4));
                ptx::ldmatrix_x4_trans(b, b_base + 2 * off);
            }
#pragma unroll
            for (int mi = 0; mi < L::MT; ++mi) {
                ptx::mma_m16n8k16<T>(acc[mi][nj], a[mi], b[0], b[1]);
                ptx::mma_m16n8k16<T>(acc[mi][nj + 1], a[mi], b[2], b[3]);
            }
        }
    }
}

/* Zero an accumulator. */
template <int MT, int NT> __device__ __forceinline__ void zero(float (&acc)[MT][NT][4])
{
#pragma unroll
    for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int nj = 0; nj < NT; ++nj)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;
}

} // namespace fb
