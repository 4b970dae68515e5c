/* bwd_prepost.cuh — the small kernels around the main one: preprocess before it, the dQ
 * conversion and the GQA dK/dV conversion after it.
 *
 * bwd_preprocess_kernel — grid (m_blocks, heads_q, batch), FB_NUM_THREADS threads.
 *   Zeroes the fp32 accumulators (all CTAs together, grid-stride), then per query block
 *   writes D = rowsum(dO∘O) and LSE·log2e for BLOCK_M workspace rows. Rows past the
 *   sequence get D = 0 and LSE = +inf, so the main kernel's P is 0 there without a mask; a
 *   forward LSE of -inf (row fully masked) also becomes +inf: zero gradients, never NaN.
 *   Eight lanes share a row, each reading 16-byte chunks of dO and O.
 * bwd_convert_dq_kernel — grid (m_blocks, heads_q, batch): dQ = scale · dq_accum, read in the
 *   main kernel's fragment-interleaved order (warp_layout.cuh) with 16-byte loads.
 * bwd_convert_dkv_kernel — grid (n_blocks, heads_kv, batch), GQA only: dK, dV from their
 *   fp32 group sums (dK already carries the scale).
 */
#pragma once
#include "bwd_config.cuh"
#include "launch.h"
#include "seqinfo.cuh"
#include "tile_io.cuh"

namespace fb {

template <class C> __global__ void __launch_bounds__(C::NUM_THREADS) bwd_preprocess_kernel(
    const fb_bwd_params p)
{
    using T = typename C::T;
    constexpr int BM = C::BLOCK_M, NT = C::NUM_THREADS, LANES_PER_ROW = 8;
    const int tid = threadIdx.x;

    /* Zero dq_accum (and dk/dv_accum) cooperatively across the whole grid. */
    {
        const int64_t cta = blockIdx.x + (int64_t)gridDim.x * (blockIdx.y + (int64_t)gridDim.y *
                                                                                blockIdx.z);
        const int64_t ctas = (int64_t)gridDim.x * gridDim.y * gridDim.z;
        float4 *z = reinterpret_cast<float4 *>(p.zero_begin);
        const int64_t n4 = p.zero_floats / 4;
        for (int64_t i = cta * NT + tid; i < n4; i += ctas * NT) z[i] = make_float4(0, 0, 0, 0);
    }

    const int m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const SeqInfo si = seq_info<BM, C::BLOCK_N>(p, b);
    const int m0 = m_block * BM;
    if (m0 >= si.sq) return;
    const int64_t ws = si.ws_q_row0 + (int64_t)h * p.ws_rows_q + m0;
    const T *gO = static_cast<const T *>(p.o) + b * p.o_stride[0] +
                  (si.q_row0 + m0) * p.o_stride[1] + h * p.o_stride[2];
    const T *gdO = static_cast<const T *>(p.dout) + b * p.do_stride[0] +
                   (si.q_row0 + m0) * p.do_stride[1] + h * p.do_stride[2];
    const int sub = tid % LANES_PER_ROW;
    for (int r = tid / LANES_PER_ROW; r < BM; r += NT / LANES_PER_ROW) {
        const bool valid = m0 + r < si.sq;
        float acc = 0.0f;
        if (valid)
            for (int c = sub * 8; c < p.head_dim; c += LANES_PER_ROW * 8) {
                float o[8], d[8];
                unpack8<T>(*reinterpret_cast<const uint4 *>(gO + r * p.o_stride[1] + c), o);
                unpack8<T>(*reinterpret_cast<const uint4 *>(gdO + r * p.do_stride[1] + c), d);
#pragma unroll
                for (int k = 0; k < 8; ++k) acc += o[k] * d[k];
            }
#pragma unroll
        for (int off = LANES_PER_ROW / 2; off > 0; off /= 2)
            acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (sub == 0) {
            float lse_log2 = INFINITY;
            if (valid) {
                const float lse = p.lse[b * p.lse_stride[0] + h * p.lse_stride[1] +
                                        (si.q_row0 + m0 + r) * p.lse_stride[2]];
                lse_log2 = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
            }
            p.dpsum[ws + r] = valid ? acc : 0.0f;
            p.lse_log2[ws + r] = lse_log2;
        }
    }
}

/* Convert one fragment-interleaved fp32 chunk (ROWS x HD, layout L) into 16-bit rows
 * [0, valid_rows), columns [0, head_dim) of `out`, times scale. */
template <class L, int ROWS, int HD, int NT, typename T>
__device__ __forceinline__ void convert_chunk(T *out, int64_t row_stride, const float *chunk,
                                              int valid_rows, int head_dim, float scale, int tid)
{
    const float4 *src = reinterpret_cast<const float4 *>(chunk);
    for (int q = tid; q < ROWS * HD / 4; q += NT) {
        const float4 v = src[q];
        const int t = q % NT, i = (q / NT) * 4; /* inverse of accum_index */
        int r, c;
        L::coord(t / 32, t % 32, i, r, c);
        if (c >= head_dim) continue;
        if (r < valid_rows)
            *reinterpret_cast<uint32_t *>(out + r * row_stride + c) =
                pack2<T>(v.x * scale, v.y * scale);
        if (r + 8 < valid_rows)
            *reinterpret_cast<uint32_t *>(out + (r + 8) * row_stride + c) =
                pack2<T>(v.z * scale, v.w * scale);
    }
}

template <class C> __global__ void __launch_bounds__(C::NUM_THREADS) bwd_convert_dq_kernel(
    const fb_bwd_params p)
{
    using T = typename C::T;
    constexpr int BM = C::BLOCK_M, HD = C::HEAD_DIM;
    const int m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const SeqInfo si = seq_info<BM, C::BLOCK_N>(p, b);
    const int m0 = m_block * BM;
    if (m0 >= si.sq) return;
    const int64_t row = si.ws_q_row0 + (int64_t)h * p.ws_rows_q + m0;
    T *out = static_cast<T *>(p.dq) + b * p.dq_stride[0] + (si.q_row0 + m0) * p.dq_stride[1] +
             h * p.dq_stride[2];
    convert_chunk<typename C::LayoutQ, BM, HD, C::NUM_THREADS>(
        out, p.dq_stride[1], p.dq_accum + row * HD, min(BM, si.sq - m0), p.head_dim, p.scale,
        threadIdx.x);
}

template <class C> __global__ void __launch_bounds__(C::NUM_THREADS) bwd_convert_dkv_kernel(
    const fb_bwd_params p)
{
    using T = typename C::T;
    constexpr int BN = C::BLOCK_N, HD = C::HEAD_DIM;
    const int n_block = blockIdx.x, h_kv = blockIdx.y, b = blockIdx.z;
    const SeqInfo si = seq_info<C::BLOCK_M, BN>(p, b);
    const int n0 = n_block * BN;
    if (n0 >= si.sk) return;
    const int64_t row = si.ws_k_row0 + (int64_t)h_kv * p.ws_rows_k + n0;
    const int rows = min(BN, si.sk - n0);
    T *dk = static_cast<T *>(p.dk) + b * p.dk_stride[0] + (si.k_row0 + n0) * p.dk_stride[1] +
            h_kv * p.dk_stride[2];
    T *dv = static_cast<T *>(p.dv) + b * p.dv_stride[0] + (si.k_row0 + n0) * p.dv_stride[1] +
            h_kv * p.dv_stride[2];
    using L = typename C::LayoutKV;
    convert_chunk<L, BN, HD, C::NUM_THREADS>(dk, p.dk_stride[1], p.dk_accum + row * HD, rows,
                                             p.head_dim, 1.0f, threadIdx.x);
    convert_chunk<L, BN, HD, C::NUM_THREADS>(dv, p.dv_stride[1], p.dv_accum + row * HD, rows,
                                             p.head_dim, 1.0f, threadIdx.x);
}

} // namespace fb
