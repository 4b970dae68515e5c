/* dq_zero.cuh — the split kernel zeroes a head's fp32 dQ sums itself, where the plan asks
 * (p.dq_zero_in_main), so that the preprocess does not write them first.
 *
 * Why: the sums are 134 MB at 16k tokens whatever the length. At 512 keys the preprocess's
 * zeroing wrote them to DRAM (~34 us of a 0.5-0.7 ms backward, ncu), and the main kernel's
 * first additions read the lines back. Here the first four P warps of a head's CTAs to
 * start zero that head's sums, a quarter each, while their dS warps load K and V; the
 * lines are then in L2 when the additions come.
 * The protocol runs on one int32 per head, the head's first dq_count slot (zeroed by the
 * preprocess; split plans use dq_count for nothing else, but the overlapped convert pass's
 * count where the sums are not zeroed here: src/launches.c):
 *   ticket   lane 0 of every P warp adds 1; a warp whose old value is s < 4 owns slice s
 *            (a head's first CTA has four P warps, so every slice has an owner);
 *   release  each lane of an owning warp adds 1 << 20 with release semantics after its
 *            stores (the P warps have no copies in flight for the release to wait for);
 *   wait     before a CTA's first addition one of its threads loads the int with acquire
 *            until all 4 x 32 releases are in; the CTA's adders pass a named barrier
 *            after that thread (kernels/bwd_split.cuh).
 * The plan keeps a head's key blocks below 2^17, so its tickets (4 a CTA) never reach bit
 * 20. No CTA waits for one that has not started: the owners took their tickets running.
 */
#pragma once
#include "ptx/atomic.cuh"
#include "smem_tile.cuh"

namespace fb {

constexpr int DQ_ZERO_SLICES = 4;
constexpr int32_t DQ_ZERO_RELEASE = 1 << 20;
constexpr int32_t DQ_ZERO_DONE = DQ_ZERO_SLICES * 32 * DQ_ZERO_RELEASE; /* 2^27 */

/* This warp's ticket (valid in lane 0): issued first, read by dq_zero_slice. */
__device__ __forceinline__ int32_t dq_zero_ticket(int32_t *counter)
{
    return lane_id() == 0 ? atomicAdd(counter, 1) : 0;
}

/* If the warp's ticket owns a slice of the head's sums (rows x HD floats), zero it and
 * release it. Every lane of the warp calls this. */
template <int HD>
__device__ __forceinline__ void dq_zero_slice(int32_t *counter, int32_t ticket, float *sums,
                                              int rows)
{
    const int32_t s = __shfl_sync(0xffffffffu, ticket, 0);
    if (s >= DQ_ZERO_SLICES) return;
    const int n4 = rows * (HD / 4 / DQ_ZERO_SLICES); /* float4s a slice (HD % 32 == 0) */
    float4 *z = reinterpret_cast<float4 *>(sums) + (int64_t)s * n4;
    for (int i = lane_id(); i < n4; i += 32) z[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    ptx::red_release_gpu_add(counter, DQ_ZERO_RELEASE);
}

/* Until every slice of the head's sums is zeroed. */
__device__ __forceinline__ void dq_zero_wait(const int32_t *counter)
{
    while (ptx::ld_acquire_gpu(counter) < DQ_ZERO_DONE) {
    }
}

} // namespace fb
