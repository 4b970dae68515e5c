/* bwd_config.cuh — the compile-time tile configuration every backward kernel is built for:
 * one row of src/config_table.h plus the element type. Derived shapes live here so the
 * kernels and their launcher agree on them.
 */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../src/config_table.h"
#include "smem_tile.cuh"
#include "warp_layout.cuh"

namespace fb {

/* The warps along M (of 4) that make a 4-warp group's M x N blocks the least operand bytes
 * per mma: the smallest TM + TN (ties: more warps along M), with whole tiles and an even
 * number of 8-column tiles (the split kernel reads P back two tiles at a time). */
constexpr int split_warps_m(int m, int n)
{
    int best = 0;
    for (int wm = 1; wm <= 4; wm *= 2) {
        const int tm = m / wm, tn = n / (4 / wm);
        if (tm % 16 || tn % 16) continue;
        if (!best || tm + tn <= m / best + n / (4 / best)) best = wm;
    }
    return best;
}

template <typename T_, int ARCH_, int HD_, int BM_, int BN_, int ST_, int WS_, int WK_, int WQ_,
          int LAG_, int SST_ = 0>
struct BwdConfig {
    using T = T_;
    static constexpr int ARCH = ARCH_;    /* config-table class: 80, 86 or 90 */
    static constexpr int HEAD_DIM = HD_;  /* kernel head dim */
    static constexpr int BLOCK_M = BM_, BLOCK_N = BN_, STAGES = ST_;
    static constexpr bool DQ_LAG = LAG_ != 0; /* dQ one step late, two dS buffers */
    static constexpr int NUM_THREADS = FB_NUM_THREADS;

    using TileQ = SmemTile<BM_, HD_>;  /* Q, dO stages */
    using TileK = SmemTile<BN_, HD_>;  /* K, V (and the dK, dV epilogue) */
    using TileP = SmemTile<BM_, BN_>;  /* P, dS */
    using LayoutS = WarpLayout<BM_, BN_, WS_>;  /* S = Q Kᵀ and dP = dO Vᵀ */
    using LayoutKV = WarpLayout<BN_, HD_, WK_, true>; /* dV = Pᵀ dO and dK = dSᵀ Q */
    using LayoutQ = WarpLayout<BM_, HD_, WQ_>;  /* dQ = dS K */

    /* The split kernel (bwd_split.cuh): each group's 4-warp layouts of S/dP and dV/dK (dQ
     * keeps LayoutQ, so the fp32 sums have one layout), its ring depth and shared memory. */
    static constexpr int SPLIT_STAGES = SST_;
    using SplitLayoutS = WarpLayout<BM_, BN_, split_warps_m(BM_, BN_), false, 4>;
    using SplitLayoutKV = WarpLayout<BN_, HD_, split_warps_m(BN_, HD_), false, 4>;
    static constexpr int SPLIT_SMEM_BYTES = FB_SMEM_SPLIT_BYTES(BM_, BN_, HD_, SST_);

    static constexpr int DS_BUFFERS = 1 + LAG_;
    static constexpr int SMEM_BYTES = FB_SMEM_MAIN_BYTES(BM_, BN_, HD_, ST_, LAG_);
    static_assert(SMEM_BYTES == 2 * TileK::BYTES + 2 * ST_ * TileQ::BYTES +
                                    (1 + DS_BUFFERS) * TileP::BYTES + 2 * ST_ * BM_ * 4,
                  "config_table.h's shared-memory formula disagrees with the kernel's layout");

    /* The dV and dK GEMMs of a warp read the P and dS columns of its key rows. Warps
     * w / PDS_GROUP (a group of PDS_GROUP neighbours) both write and read the same column
     * slice, so a barrier over the group is enough between writing P/dS and reading them;
     * 8 means the layouts do not nest and the whole CTA must sync. */
    static constexpr int pds_group()
    {
        using LS = LayoutS;
        using LK = LayoutKV;
        const int g = WS_ > 8 / WK_ ? WS_ : 8 / WK_;
        for (int w = 0; w < 8; ++w) { /* consumer w: key rows [k0, k0 + TM) of LayoutKV */
            const int k0 = LK::row_block(w) * LK::TM;
            for (int q = 0; q < 8; ++q) { /* producer q: columns [c0, c0 + TN) of LayoutS */
                const int c0 = LS::col_block(q) * LS::TN;
                if (c0 < k0 + LK::TM && k0 < c0 + LS::TN && q / g != w / g) return 8;
            }
        }
        return g;
    }
    static constexpr int PDS_GROUP = pds_group();
    static_assert(HD_ % 16 == 0 && BM_ % 16 == 0 && BN_ % 16 == 0, "GEMM depths of 16");
};

/* Whether this compilation pass (__CUDA_ARCH__) carries the body of a row's kernels:
 * sm_90 rows only in sm_90+ passes, sm_80 rows only in sm_8x passes, sm_86 rows (the small
 * shared-memory fallback) everywhere. Elsewhere the kernels are empty stubs that
 * fb_kernel_prepare refuses to run. */
template <int ARCH> __host__ __device__ constexpr bool arch_compiled()
{
#if defined(__CUDA_ARCH__)
    return ARCH == 90 ? __CUDA_ARCH__ >= 900 : ARCH == 80 ? __CUDA_ARCH__ < 900 : true;
#else
    return true;
#endif
}

} // namespace fb
