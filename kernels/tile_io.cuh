/* tile_io.cuh — moving tiles between global memory, shared memory and fragments.
 *
 * Global rows are head_dim 16-bit values, contiguous, 16-byte aligned (set_tensor checks
 * it), so every transfer is a 16-byte chunk of 8 elements; a chunk is wholly inside or
 * wholly outside the real head_dim because head_dim is a multiple of 8. A thread always
 * handles the same column chunk, in rows r0, r0 + RPP, ... (RPP = threads per row pass), so
 * its addresses are one base plus constant strides: no index arithmetic per chunk.
 */
#pragma once
#include <stdint.h>

#include "ptx/cp_async.cuh"
#include "ptx/red.cuh"
#include "ptx/shared.cuh"
#include "warp_gemm.cuh"
#include "warp_layout.cuh"

namespace fb {

/* Which chunks thread tid moves in a ROWS x COLS tile. When the threads cover whole rows
 * per pass (COLS/8 divides THREADS) a thread keeps one column chunk and walks rows r0,
 * r0 + RPP, ...: its addresses are one base plus constant strides. Otherwise (head dims
 * 96 and 192) each pass recomputes row and column of chunk tid + i·THREADS. */
template <class Tile, int COLS, int THREADS> struct ChunkWalk {
    static constexpr int CPR = COLS / 8; /* chunks per row */
    static constexpr int CHUNKS = Tile::NUM_ROWS * CPR;
    static constexpr bool ROWWISE = THREADS % CPR == 0 && (THREADS / CPR) % 8 == 0 &&
                                    Tile::NUM_ROWS % (THREADS / CPR) == 0;
    static constexpr int RPP = ROWWISE ? THREADS / CPR : 0; /* rows per pass */
    static constexpr int PASSES = (CHUNKS + THREADS - 1) / THREADS;
    int r0, col, tid;
    uint32_t tile, smem; /* smem: byte address of (r0, col) */

    __device__ __forceinline__ ChunkWalk(uint32_t tile_, int tid_)
        : r0(tid_ / CPR), col((tid_ % CPR) * 8), tid(tid_), tile(tile_),
          smem(tile_ + 2 * Tile::offset(tid_ / CPR, (tid_ % CPR) * 8)) {}

    /* Row, column (elements) and byte address of pass i; false if the pass has no chunk
     * for this thread. RPP rows further keeps the swizzle (RPP % 8 == 0). */
    __device__ __forceinline__ bool at(int i, int &row, int &column, uint32_t &addr) const
    {
        if constexpr (ROWWISE) {
            row = r0 + i * RPP, column = col, addr = smem + 2 * i * RPP * Tile::PANEL;
            return true;
        } else {
            const int c = tid + i * THREADS;
            row = c / CPR, column = (c % CPR) * 8, addr = tile + 2 * Tile::offset(row, column);
            return CHUNKS % THREADS == 0 || c < CHUNKS;
        }
    }
};

/* Start copying a global tile into a swizzled shared tile. Rows at or past valid_rows and
 * columns at or past head_dim are filled with zeros instead of read. */
template <class Tile, int COLS, int THREADS, typename T>
__device__ __forceinline__ void cp_async_tile(uint32_t smem, const T *gmem, int64_t row_stride,
                                              int valid_rows, int head_dim, int tid)
{
    const ChunkWalk<Tile, COLS, THREADS> w(smem, tid);
    if (w.ROWWISE && valid_rows >= Tile::NUM_ROWS && head_dim == COLS) {
        /* A whole tile (the main loop's common case; a uniform branch): one row pointer
         * per thread, RPP rows further each pass, no bounds and no per-row multiply. */
        const T *src = gmem + w.r0 * row_stride + w.col;
        const int64_t pass_stride = w.RPP * row_stride;
#pragma unroll
        for (int i = 0; i < w.PASSES; ++i)
            ptx::cp_async_cg_16(w.smem + 2 * i * w.RPP * Tile::PANEL, src + i * pass_stride,
                                true);
        return;
    }
#pragma unroll
    for (int i = 0; i < w.PASSES; ++i) {
        int row, col;
        uint32_t addr;
        if (!w.at(i, row, col, addr)) continue;
        const bool ok = col < head_dim && row < valid_rows;
        ptx::cp_async_cg_16(addr, ok ? gmem + row * row_stride + col : gmem, ok);
    }
}

/* Start copying n floats (n a multiple of 4) into shared memory. */
__device__ __forceinline__ void cp_async_floats(uint32_t smem, const float *gmem, int n, int tid)
{
    if (tid < n / 4) ptx::cp_async_cg_16(smem + 16 * tid, gmem + 4 * tid, true);
}

/* Copy a shared tile to global rows [0, valid_rows), columns [0, head_dim). */
template <class Tile, int COLS, int THREADS, typename T>
__device__ __forceinline__ void store_tile(T *gmem, int64_t row_stride, uint32_t smem,
                                           int valid_rows, int head_dim, int tid)
{
    const ChunkWalk<Tile, COLS, THREADS> w(smem, tid);
#pragma unroll
    for (int i = 0; i < w.PASSES; ++i) {
        int row, col;
        uint32_t addr;
        if (w.at(i, row, col, addr) && col < head_dim && row < valid_rows)
            *reinterpret_cast<uint4 *>(gmem + row * row_stride + col) = ptx::ld_shared_v4(addr);
    }
}

/* Write zeros to global rows [0, valid_rows), columns [0, head_dim). */
template <int ROWS, int COLS, int THREADS, typename T>
__device__ __forceinline__ void zero_rows(T *gmem, int64_t row_stride, int valid_rows,
                                          int head_dim, int tid)
{
    constexpr int CHUNKS_PER_ROW = COLS / 8, CHUNKS = ROWS * CHUNKS_PER_ROW;
    for (int c = tid; c < CHUNKS; c += THREADS) {
        const int r = c / CHUNKS_PER_ROW, col = (c % CHUNKS_PER_ROW) * 8;
        if (r < valid_rows && col < head_dim)
            *reinterpret_cast<uint4 *>(gmem + r * row_stride + col) = make_uint4(0, 0, 0, 0);
    }
}

/* Two floats as one 32-bit pair of 16-bit values, the first in the low half. */
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

/* A 32-bit pair of 16-bit values as two floats, the low half first. */
template <typename T> __device__ __forceinline__ float2 unpack2(uint32_t v)
{
    const T *h = reinterpret_cast<const T *>(&v);
    return make_float2((float)h[0], (float)h[1]);
}

/* Eight 16-bit values (one 16-byte chunk) as floats. */
template <typename T> __device__ __forceinline__ void unpack8(const uint4 &u, float (&f)[8])
{
    const T *h = reinterpret_cast<const T *>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = (float)h[i];
}

/* Store a warp's fp32 accumulator block, times scale, as 16-bit pairs into a swizzled
 * shared tile (32-bit stores: conflict-free, see SmemTile). */
template <class L, class Tile, typename T>
__device__ __forceinline__ void store_frags(uint32_t smem, const float (&acc)[L::MT][L::NT][4],
                                            float scale, int warp, int lane)
{
    const LaneAddr<Tile, 8> a(smem, L::row0(warp) + (lane >> 2), L::col0(warp) + 2 * (lane & 3));
#pragma unroll
    for (int mi = 0; mi < L::MT; ++mi)
#pragma unroll
        for (int nj = 0; nj < L::NT; ++nj) {
            ptx::st_shared_b32(a.at(16 * mi, 8 * nj),
                               pack2<T>(acc[mi][nj][0] * scale, acc[mi][nj][1] * scale));
            ptx::st_shared_b32(a.at(16 * mi + 8, 8 * nj),
                               pack2<T>(acc[mi][nj][2] * scale, acc[mi][nj][3] * scale));
        }
}

/* Add 8-column tiles [NJ0, NJ0 + NN) of a warp's fp32 accumulator block of layout L, times
 * scale, into a fragment-interleaved chunk of global fp32 (warp_layout.cuh, accum_index)
 * with vector reductions, at the places of thread tid of L (which need not be the
 * caller: the split kernel's dS warps add part of the P warps' dQ). */
template <class L, int NJ0, int NN, int THREADS>
__device__ __forceinline__ void red_add_tiles(float *chunk, const float (&acc)[L::MT][NN][4],
                                              float scale, int tid)
{
    /* accum_index(tid, i) = accum_index(tid, 0) + accum_index(0, i) for i % 4 == 0: one
     * pointer per thread, and each reduction's offset a constant the instruction carries. */
    float *mine = chunk + accum_index<THREADS>(tid, 0);
#pragma unroll
    for (int mi = 0; mi < L::MT; ++mi)
#pragma unroll
        for (int nj = 0; nj < NN; ++nj) {
            const int i = (mi * L::NT + NJ0 + nj) * 4;
            ptx::red_global_add_v4_f32(mine + accum_index<THREADS>(0, i),
                                       acc[mi][nj][0] * scale, acc[mi][nj][1] * scale,
                                       acc[mi][nj][2] * scale, acc[mi][nj][3] * scale);
        }
}

/* The whole block. */
template <class L, int THREADS>
__device__ __forceinline__ void red_add_frags(float *chunk, const float (&acc)[L::MT][L::NT][4],
                                              float scale, int tid)
{
    red_add_tiles<L, 0, L::NT, THREADS>(chunk, acc, scale, tid);
}

/* The same for RT row tiles of the block from mi0 on (warp_gemm_by_row_tiles' output). */
template <class L, int RT, int THREADS>
__device__ __forceinline__ void red_add_row_tiles(float *chunk, int mi0,
                                                  const float (&acc)[RT][L::NT][4], int tid)
{
    float *mine = chunk + accum_index<THREADS>(tid, 0);
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int nj = 0; nj < L::NT; ++nj)
            ptx::red_global_add_v4_f32(
                mine + accum_index<THREADS>(0, ((mi0 + r) * L::NT + nj) * 4), acc[r][nj][0],
                acc[r][nj][1], acc[r][nj][2], acc[r][nj][3]);
}

} // namespace fb
