/* tile_io.cuh — moving tiles between global memory, shared memory and fragments.
 *
 * Global rows are head_dim 16-bit values, contiguous, 16-byte aligned (set_tensor checks
 * it), so every transfer is a 16-byte chunk of 8 elements; a chunk is wholly inside or
 * wholly outside the real head_dim because head_dim is a multiple of 8.
 */
#pragma once
#include <stdint.h>

#include "ptx/cp_async.cuh"
#include "ptx/red.cuh"
#include "warp_gemm.cuh"

namespace fb {

/* Start copying rows [0, ROWS) of a global tile into a swizzled shared tile. Rows at or past
 * valid_rows and columns at or past head_dim are filled with zeros instead of read. */
template <class Tile, int ROWS, int COLS, int THREADS, typename T>
__device__ __forceinline__ void cp_async_tile(T *smem, const T *gmem, int64_t row_stride,
                                              int valid_rows, int head_dim, int tid)
{
    constexpr int CHUNKS_PER_ROW = COLS / 8, CHUNKS = ROWS * CHUNKS_PER_ROW;
    const uint32_t base = smem_u32(smem);
    asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
#pragma unroll
    for (int c = tid; c < CHUNKS; c += THREADS) {
        const int r = c / CHUNKS_PER_ROW, col = (c % CHUNKS_PER_ROW) * 8;
        const bool ok = r < valid_rows && col < head_dim;
        const T *src = ok ? gmem + r * row_stride + col : gmem;
        ptx::cp_async_cg_16(base + 2 * Tile::offset(r, col), src, ok);
    }
}

/* Start copying n floats (n a multiple of 4) into shared memory. */
__device__ __forceinline__ void cp_async_floats(float *smem, const float *gmem, int n, int tid)
{
    if (tid < n / 4) ptx::cp_async_cg_16(smem_u32(smem + 4 * tid), gmem + 4 * tid, true);
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

/* Eight 16-bit values (one 16-byte chunk) as floats. */
template <typename T> __device__ __forceinline__ void unpack8(const uint4 &u, float (&f)[8])
{
    const T *h = reinterpret_cast<const T *>(&u);
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = (float)h[i];
}

/* Store a warp's fp32 accumulator block as 16-bit pairs into a swizzled shared tile,
 * multiplied by `scale`. */
template <class L, class Tile, typename T>
__device__ __forceinline__ void store_frags(T *smem, const float (&acc)[L::MT][L::NT][4],
                                            float scale, int warp, int lane)
{
#pragma unroll
    for (int mi = 0; mi < L::MT; ++mi)
#pragma unroll
        for (int nj = 0; nj < L::NT; ++nj) {
            const int r = L::row0(warp) + 16 * mi + (lane >> 2);
            const int c = L::col0(warp) + 8 * nj + 2 * (lane & 3);
            *reinterpret_cast<uint32_t *>(smem + Tile::offset(r, c)) =
                pack2<T>(acc[mi][nj][0] * scale, acc[mi][nj][1] * scale);
            *reinterpret_cast<uint32_t *>(smem + Tile::offset(r + 8, c)) =
                pack2<T>(acc[mi][nj][2] * scale, acc[mi][nj][3] * scale);
        }
}

/* Copy a shared tile to global rows [0, valid_rows), columns [0, head_dim). */
template <class Tile, int ROWS, int COLS, int THREADS, typename T>
__device__ __forceinline__ void store_tile(T *gmem, int64_t row_stride, const T *smem,
                                           int valid_rows, int head_dim, int tid)
{
    constexpr int CHUNKS_PER_ROW = COLS / 8, CHUNKS = ROWS * CHUNKS_PER_ROW;
#pragma unroll
    for (int c = tid; c < CHUNKS; c += THREADS) {
        const int r = c / CHUNKS_PER_ROW, col = (c % CHUNKS_PER_ROW) * 8;
        if (r < valid_rows && col < head_dim)
            *reinterpret_cast<uint4 *>(gmem + r * row_stride + col) =
                *reinterpret_cast<const uint4 *>(smem + Tile::offset(r, col));
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

/* Add a warp's fp32 accumulator block, times `scale`, into a fragment-interleaved chunk
 * of global fp32 (warp_layout.cuh, accum_index) with vector reductions. */
template <class L, int THREADS>
__device__ __forceinline__ void red_add_frags(float *chunk, const float (&acc)[L::MT][L::NT][4],
                                              float scale, int tid)
{
#pragma unroll
    for (int mi = 0; mi < L::MT; ++mi)
#pragma unroll
        for (int nj = 0; nj < L::NT; ++nj) {
            const int i = (mi * L::NT + nj) * 4;
            ptx::red_global_add_v4_f32(chunk + accum_index<THREADS>(tid, i),
                                       acc[mi][nj][0] * scale, acc[mi][nj][1] * scale,
                                       acc[mi][nj][2] * scale, acc[mi][nj][3] * scale);
        }
}

} // namespace fb
