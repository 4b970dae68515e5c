/* bwd_prepost.cuh — the small kernels around the main one, and the fp32-to-16-bit
 * conversion the main kernel and the GQA pass share.
 *
 * bwd_preprocess_kernel — grid (m_blocks, heads_q, batch), FB_NUM_THREADS threads.
 *   Per query block writes D = rowsum(dO∘O) and LSE·log2e for BLOCK_M workspace rows, and
 *   zeroes the block's fp32 dQ sums while its loads are in flight (the GQA accumulators and
 *   the counters: all CTAs together, grid-stride). Rows past the sequence get D = 0 and
 *   LSE = +inf, so the main kernel's P is 0 there without a mask; a forward LSE of -inf
 *   (row fully masked) also becomes +inf: zero gradients, never NaN. Eight lanes share a
 *   row, each reading 16-byte chunks of dO and O. A query block that no key block sees
 *   (Mask::adders is 0) gets its dQ rows zeroed here, since a main kernel that converts dQ
 *   never visits it.
 * convert_chunk — dQ = scale · dq_accum (and the GQA group sums), read in the main kernel's
 *   fragment-interleaved order (warp_layout.cuh) with 16-byte L2 loads. The main kernel
 *   calls it when the plan folds the dQ conversion in (config table, FOLD); otherwise
 * bwd_convert_dq_kernel — grid (m_blocks, heads_q, batch) converts dQ after the main kernel,
 *   through convert_chunk_staged (the same, with whole-sector stores from shared memory).
 * Both passes take their blocks in the reverse of the grid's order (pass_block): the main
 *   kernel starts with the first batch entries and heads, so the sums the preprocess zeroes
 *   last are still in L2 when the main kernel's first additions reach them, and the sums
 *   the main kernel adds last are still there when the convert pass starts (at 512 keys
 *   the sums are 134 MB at 16k tokens, against 50 MB of L2).
 *   Overlapped (p.dq_overlap, split plans of FB_SPLIT_DQ_OVERLAP rows) the convert pass
 *   starts once every split CTA has started, behind a programmatic edge of the plan's graph,
 *   and converts a head once all its CTAs have counted in (kernels/bwd_split.cuh), so the
 *   SMs that the split kernel's last wave leaves idle convert the heads already done. It
 *   takes the heads that wave may still run (p.dq_tail_blocks) last, in grid order.
 * bwd_convert_dkv_kernel — grid (n_blocks, heads_kv, batch), GQA only: dK, dV from their
 *   fp32 group sums (dK already carries the scale).
 */
#pragma once
#include "bwd_config.cuh"
#include "launch.h"
#include "mask.cuh"
#include "ptx/atomic.cuh"
#include "ptx/global.cuh"
#include "seqinfo.cuh"
#include "tile_io.cuh"

namespace fb {

/* The query block, head and batch entry of a pass CTA: blockIdx read backwards. */
struct PassBlock {
    int m_block, h, b;
};
__device__ __forceinline__ PassBlock pass_block()
{
    return {(int)(gridDim.x - 1 - blockIdx.x), (int)(gridDim.y - 1 - blockIdx.y),
            (int)(gridDim.z - 1 - blockIdx.z)};
}

template <class C> __global__ void __launch_bounds__(C::NUM_THREADS) bwd_preprocess_kernel(
    const fb_bwd_params p)
{
    using T = typename C::T;
    constexpr int BM = C::BLOCK_M, HD = C::HEAD_DIM, NT = C::NUM_THREADS, LANES_PER_ROW = 8;
    constexpr int ROW_STEP = NT / LANES_PER_ROW;            /* rows per pass of the CTA */
    constexpr int PASSES = BM / ROW_STEP;                    /* rows per thread */
    constexpr int CHUNKS = (HD + 8 * LANES_PER_ROW - 1) / (8 * LANES_PER_ROW); /* per lane, row */
    static_assert(BM % ROW_STEP == 0, "whole row passes");
    const int tid = threadIdx.x;
    const auto [m_block, h, b] = pass_block();
    const SeqInfo si = seq_info<BM, C::BLOCK_N>(p, b);
    const int m0 = m_block * BM;
    const int64_t ws = si.ws_q_row0 + (int64_t)h * p.ws_rows_q + m0;
    const T *gO = static_cast<const T *>(p.o) + b * p.o_stride[0] +
                  (si.q_row0 + m0) * p.o_stride[1] + h * p.o_stride[2];
    const T *gdO = static_cast<const T *>(p.dout) + b * p.do_stride[0] +
                   (si.q_row0 + m0) * p.do_stride[1] + h * p.do_stride[2];
    const int sub = tid % LANES_PER_ROW, r0 = tid / LANES_PER_ROW;

    /* Every load of the thread first (its rows' O and dO chunks and their LSE), so that one
     * memory latency covers the block; the zeroing stores go out while they are in flight.
     * (ncu, H200, hd128 512 keys: 75 us with the loads a row and a chunk at a time, against
     * FlashAttention-2's 67 for the same bytes.) */
    uint4 o[PASSES][CHUNKS], d[PASSES][CHUNKS];
    float lse[PASSES];
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
        const int r = r0 + i * ROW_STEP;
        const bool valid = m0 + r < si.sq;
        lse[i] = valid ? p.lse[b * p.lse_stride[0] + h * p.lse_stride[1] +
                               (si.q_row0 + m0 + r) * p.lse_stride[2]]
                       : 0.0f;
#pragma unroll
        for (int j = 0; j < CHUNKS; ++j) {
            const int c = sub * 8 + j * 8 * LANES_PER_ROW;
            const bool in = valid && c < HD && c < p.head_dim;
            o[i][j] = in ? *reinterpret_cast<const uint4 *>(gO + r * p.o_stride[1] + c)
                         : make_uint4(0, 0, 0, 0);
            d[i][j] = in ? *reinterpret_cast<const uint4 *>(gdO + r * p.do_stride[1] + c)
                         : make_uint4(0, 0, 0, 0);
        }
    }

    /* Zero the block's dQ sums (whole rows of the kernel head dim: past the sequence too,
     * which the main kernel adds to as well), then the rest of the zeroed range (GQA sums,
     * counters) cooperatively across the whole grid. */
    if (m0 < si.sq && !p.dq_zero_in_main) { /* else the split kernel does (dq_zero.cuh) */
        float4 *z = reinterpret_cast<float4 *>(p.dq_accum + ws * HD);
#pragma unroll
        for (int i = tid; i < BM * HD / 4; i += NT) z[i] = make_float4(0, 0, 0, 0);
    }
    {
        const int64_t cta = blockIdx.x + (int64_t)gridDim.x * (blockIdx.y + (int64_t)gridDim.y *
                                                                                blockIdx.z);
        const int64_t ctas = (int64_t)gridDim.x * gridDim.y * gridDim.z;
        float4 *z = reinterpret_cast<float4 *>(p.zero_begin);
        const int64_t n4 = p.zero_floats / 4;
        for (int64_t i = cta * NT + tid; i < n4; i += ctas * NT) z[i] = make_float4(0, 0, 0, 0);
    }

    if (m0 >= si.sq) return;
    const Mask mask{si.sk, (int64_t)si.sk - si.sq, p.window_left, p.window_right};
    if (mask.adders(m_block, BM, C::BLOCK_N, (si.sk + C::BLOCK_N - 1) / C::BLOCK_N) == 0)
        zero_rows<BM, HD, NT>(static_cast<T *>(p.dq) + b * p.dq_stride[0] +
                                  (si.q_row0 + m0) * p.dq_stride[1] + h * p.dq_stride[2],
                              p.dq_stride[1], min(BM, si.sq - m0), p.head_dim, tid);
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
        const int r = r0 + i * ROW_STEP;
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < CHUNKS; ++j) {
            float fo[8], fd[8];
            unpack8<T>(o[i][j], fo);
            unpack8<T>(d[i][j], fd);
#pragma unroll
            for (int k = 0; k < 8; ++k) acc += fo[k] * fd[k];
        }
#pragma unroll
        for (int off = LANES_PER_ROW / 2; off > 0; off /= 2)
            acc += __shfl_xor_sync(0xffffffffu, acc, off);
        if (sub == 0) {
            const bool valid = m0 + r < si.sq;
            /* Rows past the sequence get D = 0 and LSE = +inf (so P = 0); a forward LSE of
             * -inf (a fully masked row) becomes +inf too: zero gradients, never NaN. */
            p.dpsum[ws + r] = valid ? acc : 0.0f;
            p.lse_log2[ws + r] =
                valid && lse[i] != -INFINITY ? lse[i] * 1.4426950408889634f : INFINITY;
        }
    }
}

/* The largest of 4, 3, 2, 1 that divides n: how many 16-byte loads convert_chunk keeps in
 * flight per thread. */
__host__ __device__ constexpr int load_batch(int n)
{
    return n % 4 == 0 ? 4 : n % 3 == 0 ? 3 : n % 2 == 0 ? 2 : 1;
}

/* Convert one fragment-interleaved fp32 chunk (ROWS x HD, layout L) into 16-bit rows
 * [0, valid_rows), columns [0, head_dim) of `out`, times scale. Thread t owns float4s t,
 * t + NT, ...; a batch of them is loaded before any is stored, so the L2 latency is paid
 * once per batch rather than once per float4 (the main kernel converts inside its loop). */
template <class L, int ROWS, int HD, int NT, typename T>
__device__ __forceinline__ void convert_chunk(T *out, int64_t row_stride, const float *chunk,
                                              int valid_rows, int head_dim, float scale, int tid)
{
    constexpr int PASSES = ROWS * HD / 4 / NT, BATCH = load_batch(PASSES);
    static_assert(ROWS * HD % (4 * NT) == 0, "a chunk is whole float4 passes of the CTA");
    const int warp = tid / 32, lane = tid % 32;
#pragma unroll
    for (int p0 = 0; p0 < PASSES; p0 += BATCH) {
        float4 v[BATCH];
#pragma unroll
        for (int i = 0; i < BATCH; ++i)
            v[i] = ptx::ld_global_cg_v4(chunk + 4 * ((p0 + i) * NT + tid));
#pragma unroll
        for (int i = 0; i < BATCH; ++i) {
            int r, c; /* inverse of accum_index */
            L::coord(warp, lane, (p0 + i) * 4, r, c);
            if (c >= head_dim) continue;
            if (r < valid_rows)
                *reinterpret_cast<uint32_t *>(out + r * row_stride + c) =
                    pack2<T>(v[i].x * scale, v[i].y * scale);
            if (r + 8 < valid_rows)
                *reinterpret_cast<uint32_t *>(out + (r + 8) * row_stride + c) =
                    pack2<T>(v[i].z * scale, v[i].w * scale);
        }
    }
}

/* convert_chunk for the convert kernels, which have shared memory to spare: every float4
 * of the thread is loaded first, the 16-bit pairs go to a row-major tile in shared memory
 * (rows padded by 16 bytes, so a warp's pair stores hit 32 different banks), and the rows
 * leave as 16-byte stores that fill whole sectors, where convert_chunk's 4-byte stores
 * fill half of each. (ncu, H200, hd128 512 keys: the convert pass took 72 us with
 * convert_chunk against FlashAttention-2's 58.) The caller syncs before reusing it. */
template <class L, int ROWS, int HD, int NT, typename T>
__device__ __forceinline__ void convert_chunk_staged(T *out, int64_t row_stride,
                                                     const float *chunk, int valid_rows,
                                                     int head_dim, float scale, int tid)
{
    constexpr int PASSES = ROWS * HD / 4 / NT, PITCH = HD + 8, CPR = HD / 8;
    static_assert(ROWS * HD % (4 * NT) == 0, "a chunk is whole float4 passes of the CTA");
    __shared__ __align__(16) uint16_t tile[ROWS * PITCH];
    const int warp = tid / 32, lane = tid % 32;
    float4 v[PASSES];
#pragma unroll
    for (int i = 0; i < PASSES; ++i) v[i] = ptx::ld_global_cg_v4(chunk + 4 * (i * NT + tid));
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
        int r, c; /* inverse of accum_index */
        L::coord(warp, lane, i * 4, r, c);
        *reinterpret_cast<uint32_t *>(&tile[r * PITCH + c]) =
            pack2<T>(v[i].x * scale, v[i].y * scale);
        *reinterpret_cast<uint32_t *>(&tile[(r + 8) * PITCH + c]) =
            pack2<T>(v[i].z * scale, v[i].w * scale);
    }
    __syncthreads();
#pragma unroll
    for (int k = tid; k < ROWS * CPR; k += NT) {
        const int r = k / CPR, c = (k % CPR) * 8;
        if (r < valid_rows && c < head_dim)
            *reinterpret_cast<uint4 *>(out + r * row_stride + c) =
                *reinterpret_cast<const uint4 *>(&tile[r * PITCH + c]);
    }
}

template <class C> __global__ void __launch_bounds__(C::NUM_THREADS) bwd_convert_dq_kernel(
    const fb_bwd_params p)
{
    using T = typename C::T;
    constexpr int BM = C::BLOCK_M, BN = C::BLOCK_N, HD = C::HEAD_DIM;
    /* Overlapped (p.dq_overlap), the pass runs beside the split kernel's last CTAs and
     * waits for its head's count, so it takes the blocks those CTAs may still add into
     * (the last dq_tail_blocks of the grid) last, in grid order, and the rest first,
     * backwards as without the overlap. A block that no key block adds into was written
     * by the preprocess and its sums are not read. */
    PassBlock pb = pass_block();
    if (p.dq_overlap) {
        const int64_t nx = gridDim.x, nxy = nx * gridDim.y, total = nxy * gridDim.z;
        const int64_t i = blockIdx.x + nx * blockIdx.y + nxy * blockIdx.z;
        const int64_t tail = p.dq_tail_blocks < total ? p.dq_tail_blocks : total;
        const int64_t at = i < total - tail ? total - tail - 1 - i : i;
        pb = PassBlock{(int)(at % nx), (int)(at % nxy / nx), (int)(at / nxy)};
    }
    const auto [m_block, h, b] = pb;
    const SeqInfo si = seq_info<BM, BN>(p, b);
    const int m0 = m_block * BM;
    if (m0 >= si.sq) return;
    const int64_t row = si.ws_q_row0 + (int64_t)h * p.ws_rows_q + m0;
    if (p.dq_overlap) {
        const Mask mask{si.sk, (int64_t)si.sk - si.sq, p.window_left, p.window_right};
        const int n_blocks = (si.sk + BN - 1) / BN;
        if (mask.adders(m_block, BM, BN, n_blocks) == 0) return;
        if (threadIdx.x == 0) /* every CTA of the head counts in (kernels/bwd_split.cuh) */
            while (ptx::ld_acquire_gpu(p.dq_count + (row - m0) / BM) < n_blocks) {
            }
        __syncthreads();
    }
    T *out = static_cast<T *>(p.dq) + b * p.dq_stride[0] + (si.q_row0 + m0) * p.dq_stride[1] +
             h * p.dq_stride[2];
    convert_chunk_staged<typename C::LayoutQ, BM, HD, C::NUM_THREADS>(
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
    convert_chunk_staged<L, BN, HD, C::NUM_THREADS>(dk, p.dk_stride[1], p.dk_accum + row * HD,
                                                    rows, p.head_dim, 1.0f, threadIdx.x);
    __syncthreads(); /* every thread done reading the staged dK */
    convert_chunk_staged<L, BN, HD, C::NUM_THREADS>(dv, p.dv_stride[1], p.dv_accum + row * HD,
                                                    rows, p.head_dim, 1.0f, threadIdx.x);
}

} // namespace fb
