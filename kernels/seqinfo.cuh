/* seqinfo.cuh — where batch b's rows live, for padded batches and packed varlen tensors.
 *
 * Varlen lengths come from device memory the caller filled; they are clamped so that no
 * access leaves the bound tensors or the workspace, whatever they hold (the contract in
 * flashbwd.h: contradictory lengths give unspecified values, never out-of-bounds access).
 */
#pragma once
#include "launch.h"

namespace fb {

struct SeqInfo {
    int sq, sk;         /* this batch's lengths */
    int64_t q_row0;     /* first packed row of Q (0 when padded) */
    int64_t k_row0;
    int64_t ws_q_row0;  /* workspace row of (batch b, head 0); head h adds h * ws_rows_q */
    int64_t ws_k_row0;  /* the same on the k side (GQA accumulators) */
};

__device__ __forceinline__ int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

template <int BM, int BN>
__device__ __forceinline__ SeqInfo seq_info(const fb_bwd_params &p, int b)
{
    SeqInfo s;
    if (!p.varlen) {
        s.sq = p.seqlen_q, s.sk = p.seqlen_k;
        s.q_row0 = s.k_row0 = 0;
        s.ws_q_row0 = (int64_t)b * p.heads_q * p.ws_rows_q;
        s.ws_k_row0 = (int64_t)b * p.heads_kv * p.ws_rows_k;
        return s;
    }
    const int64_t q0 = clamp64(p.cu_seqlens_q[b], 0, p.total_q);
    const int64_t k0 = clamp64(p.cu_seqlens_k[b], 0, p.total_k);
    int64_t lq = p.seqused_q ? (int64_t)p.seqused_q[b] : p.cu_seqlens_q[b + 1] - q0;
    int64_t lk = p.seqused_k ? (int64_t)p.seqused_k[b] : p.cu_seqlens_k[b + 1] - k0;
    lq = clamp64(lq, 0, p.total_q - q0 < p.seqlen_q ? p.total_q - q0 : p.seqlen_q);
    lk = clamp64(lk, 0, p.total_k - k0 < p.seqlen_k ? p.total_k - k0 : p.seqlen_k);
    s.sq = (int)lq, s.sk = (int)lk;
    s.q_row0 = q0, s.k_row0 = k0;
    /* Sequences start tile-aligned in the workspace: floor((cu + b*tile) / tile) * tile. */
    s.ws_q_row0 = (q0 + (int64_t)b * BM) / BM * BM;
    s.ws_k_row0 = (k0 + (int64_t)b * BN) / BN * BN;
    return s;
}

/* Row `row` (the sequence's packed offset included) of batch b, head h of a (batch, seq,
 * head, dim) tensor with these element strides. */
template <typename T, typename Base>
__device__ __forceinline__ T *tensor_rows(Base *base, const int64_t *stride, int b, int64_t row,
                                          int h)
{
    return static_cast<T *>(base) + b * stride[0] + row * stride[1] + h * stride[2];
}

} // namespace fb
