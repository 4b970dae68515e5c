/* warp_gemm.cuh — one warp's share of a GEMM whose operands both sit in shared memory.
 *
 * acc[MT][NT] += A · B over a depth of K, for the warp's block of a WarpLayout. Each operand
 * is a swizzled SmemTile stored one of two ways, chosen at compile time:
 *   A_KMAJOR = false: A is stored [out rows][K]   → ldmatrix      (Q in S = Q·Kᵀ)
 *   A_KMAJOR = true:  A is stored [K][out rows]   → ldmatrix.trans (P in dV = Pᵀ·dO)
 *   B_KMAJOR = false: B is stored [out cols][K]   → ldmatrix      (K in S = Q·Kᵀ)
 *   B_KMAJOR = true:  B is stored [K][out cols]   → ldmatrix.trans (dO in dV = Pᵀ·dO)
 * so the transposed operands of the backward (Pᵀ, dSᵀ, Qᵀ, dOᵀ, Kᵀ) are views of the one
 * copy in shared memory. An x4 load fills one 16x16 A fragment or two 8-column B fragments
 * (lane layouts in ptx/mma.cuh and ptx/ldmatrix.cuh).
 *
 * Addresses: operand_addr() builds a lane's LaneAddr once; warp_gemm then issues every
 * ldmatrix as a base register plus an immediate. Two GEMMs over same-shaped tiles (S and
 * dP, dV and dK) share one pair of LaneAddrs and differ only by a byte offset.
 */
#pragma once
#include <stdint.h>

#include "ptx/ldmatrix.cuh"
#include "ptx/mma.cuh"
#include "smem_tile.cuh"

namespace fb {

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* The LaneAddr of operand A (IS_A) or B of layout L in tile Tile at smem. */
template <class L, class Tile, bool IS_A, bool KMAJOR>
__device__ __forceinline__ LaneAddr<Tile, 16> operand_addr(uint32_t smem, int warp, int lane)
{
    if constexpr (IS_A) {
        const int row0 = L::row0(warp);
        if constexpr (!KMAJOR) return LaneAddr<Tile, 16>(smem, row0 + (lane & 15), 8 * (lane >> 4));
        else return LaneAddr<Tile, 16>(smem, (lane & 7) + 8 * (lane >> 4), row0 + 8 * ((lane >> 3) & 1));
    } else {
        const int col0 = L::col0(warp);
        if constexpr (!KMAJOR)
            return LaneAddr<Tile, 16>(smem, col0 + (lane & 7) + 8 * (lane >> 4), 8 * ((lane >> 3) & 1));
        else return LaneAddr<Tile, 16>(smem, (lane & 7) + 8 * ((lane >> 3) & 1), col0 + 8 * (lane >> 4));
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

/* One depth step's mma of MT A fragments against NT 8-column tiles of B at b: B two tiles
 * at a time, each used at once, to keep few fragments live; an odd last tile takes an x2
 * load. */
template <int MT, int NT, class TileB, bool B_KMAJOR, typename T>
__device__ __forceinline__ void mma_b_tiles(float (&acc)[MT][NT][4], const uint32_t (&af)[MT][4],
                                            const LaneAddr<TileB, 16> &b, uint32_t b_off, int k0)
{
#pragma unroll
    for (int nj = 0; nj < NT; nj += 2) {
        if (nj + 1 < NT) {
            uint32_t bf[4];
            if constexpr (!B_KMAJOR) ptx::ldmatrix_x4(bf, b.at(8 * nj, k0) + b_off);
            else ptx::ldmatrix_x4_trans(bf, b.at(k0, 8 * nj) + b_off);
#pragma unroll
            for (int mi = 0; mi < MT; ++mi) {
                ptx::mma_m16n8k16<T>(acc[mi][nj], af[mi], bf[0], bf[1]);
                ptx::mma_m16n8k16<T>(acc[mi][nj + 1], af[mi], bf[2], bf[3]);
            }
        } else {
            uint32_t bf[2];
            if constexpr (!B_KMAJOR) ptx::ldmatrix_x2(bf, b.at(8 * nj, k0) + b_off);
            else ptx::ldmatrix_x2_trans(bf, b.at(k0, 8 * nj) + b_off);
#pragma unroll
            for (int mi = 0; mi < MT; ++mi) ptx::mma_m16n8k16<T>(acc[mi][nj], af[mi], bf[0], bf[1]);
        }
    }
}

/* The MT A fragments of depth step k0. */
template <int MT, class TileA, bool A_KMAJOR>
__device__ __forceinline__ void load_a_frags(uint32_t (&af)[MT][4], const LaneAddr<TileA, 16> &a,
                                             uint32_t a_off, int k0)
{
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
        if constexpr (!A_KMAJOR) ptx::ldmatrix_x4(af[mi], a.at(16 * mi, k0) + a_off);
        else ptx::ldmatrix_x4_trans(af[mi], a.at(k0, 16 * mi) + a_off);
    }
}

template <class L, class TileA, class TileB, bool A_KMAJOR, bool B_KMAJOR, int K, typename T>
__device__ __forceinline__ void warp_gemm(float (&acc)[L::MT][L::NT][4],
                                          const LaneAddr<TileA, 16> &a, uint32_t a_off,
                                          const LaneAddr<TileB, 16> &b, uint32_t b_off)
{
#pragma unroll
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t af[L::MT][4];
        load_a_frags<L::MT, TileA, A_KMAJOR>(af, a, a_off, k0);
        mma_b_tiles<L::MT, L::NT, TileB, B_KMAJOR, T>(acc, af, b, b_off, k0);
    }
}

/* warp_gemm for the warp's block and, with the same A rows, NT2 more 8-column tiles of B
 * at b2 (another warp's columns: the split kernel's dS warps take part of the P warps'
 * dQ), each A fragment loaded once for both. */
template <class L, int NT2, class TileA, class TileB, bool A_KMAJOR, bool B_KMAJOR, int K,
          typename T>
__device__ __forceinline__ void warp_gemm_two_b(float (&acc)[L::MT][L::NT][4],
                                                float (&acc2)[L::MT][NT2][4],
                                                const LaneAddr<TileA, 16> &a, uint32_t a_off,
                                                const LaneAddr<TileB, 16> &b,
                                                const LaneAddr<TileB, 16> &b2)
{
#pragma unroll
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t af[L::MT][4];
        load_a_frags<L::MT, TileA, A_KMAJOR>(af, a, a_off, k0);
        mma_b_tiles<L::MT, L::NT, TileB, B_KMAJOR, T>(acc, af, b, 0, k0);
        mma_b_tiles<L::MT, NT2, TileB, B_KMAJOR, T>(acc2, af, b2, 0, k0);
    }
}

/* A GEMM whose output goes straight into fp32 sums in global memory (dQ = dS·K), in
 * groups of RT 16-row tiles of the warp's block: each group's NT x RT vector reductions
 * are issued (by `emit(mi0, acc)`) while the next group's mma run, so the reductions
 * drain behind work instead of stalling the warp in one burst of MT x NT. B's fragments
 * are loaded once per group. */
template <class L, int RT, class TileA, class TileB, bool B_KMAJOR, int K, typename T,
          class Emit>
__device__ __forceinline__ void warp_gemm_by_row_tiles(const LaneAddr<TileA, 16> &a,
                                                       uint32_t a_off,
                                                       const LaneAddr<TileB, 16> &b,
                                                       uint32_t b_off, Emit emit)
{
    static_assert(L::MT % RT == 0 && L::NT % 2 == 0, "whole groups, B tiles in pairs");
#pragma unroll
    for (int mi0 = 0; mi0 < L::MT; mi0 += RT) {
        float acc[RT][L::NT][4];
        zero(acc);
#pragma unroll
        for (int k0 = 0; k0 < K; k0 += 16) {
            uint32_t af[RT][4];
#pragma unroll
            for (int r = 0; r < RT; ++r) ptx::ldmatrix_x4(af[r], a.at(16 * (mi0 + r), k0) + a_off);
            mma_b_tiles<RT, L::NT, TileB, B_KMAJOR, T>(acc, af, b, b_off, k0);
        }
        emit(mi0, acc);
    }
}


} // namespace fb
