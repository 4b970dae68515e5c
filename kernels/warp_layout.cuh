/* warp_layout.cuh — which part of a GEMM's output tile each warp and lane owns.
 *
 * WARPS warps (the CTA's 8, or one 4-warp group of the split kernel) split an M x N
 * output as WM warps along M by WARPS/WM along N; warp w (counted within its group) owns
 * the contiguous block rows [wm*TM, +TM), columns [wn*TN, +TN) with wm = w % WM and
 * wn = w / WM, or, when ROWS_OUTER, wm = w / WN and wn = w % WN (neighbouring warps share
 * rows: the main kernel uses it so that the warps needing one slice of P and dS are the
 * warps that produced it, and a barrier over that group suffices). Inside it the warp
 * holds MT x NT mma tiles of 16 x 8, so accumulator register i = (mi*NT + nj)*4 + e of a
 * lane sits at
 *   row = wm*TM + 16*mi + lane/4 + 8*(e/2),  col = wn*TN + 8*nj + 2*(lane%4) + e%2.
 * The main kernel (writing fp32 partial sums) and the convert kernels (reading them back)
 * both use this one mapping, so the fp32 accumulator layout stays private and coalesced.
 */
#pragma once

namespace fb {

template <int M, int N, int WM, bool ROWS_OUTER = false, int WARPS = 8> struct WarpLayout {
    static constexpr int WN = WARPS / WM;
    static constexpr int TM = M / WM, TN = N / WN; /* per-warp extent */
    static constexpr int MT = TM / 16, NT = TN / 8; /* mma tiles per warp */
    static constexpr int REGS = MT * NT * 4;        /* accumulator floats per lane */
    static_assert(WM * WN == WARPS, "WM divides WARPS");
    static_assert(TM % 16 == 0 && TN % 8 == 0, "per-warp blocks of whole 16x8 mma tiles");

    __host__ __device__ static constexpr int row_block(int warp)
    {
        return ROWS_OUTER ? warp / WN : warp % WM;
    }
    __host__ __device__ static constexpr int col_block(int warp)
    {
        return ROWS_OUTER ? warp % WN : warp / WM;
    }
    __device__ static __forceinline__ int row0(int warp) { return row_block(warp) * TM; }
    __device__ static __forceinline__ int col0(int warp) { return col_block(warp) * TN; }

    /* Row and column of accumulator register i of (warp, lane). */
    __device__ static __forceinline__ void coord(int warp, int lane, int i, int &row, int &col)
    {
        const int tile = i / 4, e = i % 4, mi = tile / NT, nj = tile % NT;
        row = row0(warp) + 16 * mi + (lane >> 2) + 8 * (e >> 1);
        col = col0(warp) + 8 * nj + 2 * (lane & 3) + (e & 1);
    }
};

/* Columns [8 * NJ0, 8 * (NJ0 + NN)) of each warp's block of L, as a layout for a GEMM
 * over part of a block (the split kernel's dQ shared between its roles); its registers
 * are numbered within the slice, red_add_tiles (tile_io.cuh) maps them back to L's. */
template <class L, int NJ0, int NN> struct ColumnSlice {
    static constexpr int MT = L::MT, NT = NN, TM = L::TM, TN = 8 * NN, REGS = MT * NT * 4;
    static_assert(NJ0 >= 0 && NN > 0 && NJ0 + NN <= L::NT, "a slice of the block");
    __device__ static __forceinline__ int row0(int warp) { return L::row0(warp); }
    __device__ static __forceinline__ int col0(int warp) { return L::col0(warp) + 8 * NJ0; }
};

/* Position of accumulator register i of thread t in a fragment-interleaved fp32 chunk:
 * groups of four registers are 16 bytes apart between neighbouring threads, so a warp's
 * vector reduction covers 512 contiguous bytes. */
template <int THREADS> __device__ __forceinline__ int accum_index(int t, int i)
{
    return (i >> 2) * (THREADS * 4) + t * 4 + (i & 3);
}

} // namespace fb
