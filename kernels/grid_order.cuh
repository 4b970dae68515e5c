/* grid_order.cuh — which key block, head and batch entry a CTA of the main grid works on.
 *
 * The hardware starts CTAs in x, then y, then z order, so the grid's shape is the schedule
 * (src/launches.c chooses it, p.head_group):
 *   head_group 0   grid (key blocks, heads, batch): one head's key blocks after the other,
 *                  so the CTAs running at once share a head's Q and dO in L2 (no mask);
 *   head_group G   grid (G, key blocks, batch x heads / G): heads in groups of G, and
 *                  within a group every head's first key block, then every head's second,
 *                  and so on. Under a causal mask the first key blocks are the longest, so
 *                  they start first (G = heads: a batch entry's every head); a smaller G
 *                  keeps the Q and dO rows that the running CTAs stream (G heads' worth)
 *                  within L2 at long sequences.
 */
#pragma once
#include "launch.h"

namespace fb {

struct GridPos {
    int n_index; /* the key block in launch order (bwd_main reverses it when deterministic) */
    int n_blocks;
    int h, b;
};

template <bool GROUPS> __device__ __forceinline__ GridPos grid_pos(const fb_bwd_params &p)
{
    GridPos g;
    const int G = p.head_group;
    if constexpr (!GROUPS) { /* head_group is 0 or heads_q: (heads, key blocks, batch) */
        const bool heads_x = G > 0;
        g.n_index = heads_x ? blockIdx.y : blockIdx.x;
        g.n_blocks = heads_x ? gridDim.y : gridDim.x;
        g.h = heads_x ? blockIdx.x : blockIdx.y, g.b = blockIdx.z;
    } else if (G > 0) {
        const int groups = p.heads_q / G;
        g.n_index = blockIdx.y, g.n_blocks = gridDim.y;
        g.b = blockIdx.z / groups;
        g.h = (blockIdx.z - g.b * groups) * G + blockIdx.x;
    } else {
        g.n_index = blockIdx.x, g.n_blocks = gridDim.x;
        g.h = blockIdx.y, g.b = blockIdx.z;
    }
    return g;
}

/* The same head and batch entry for the plain orders (grid_pos<false>), derived from the
 * CTA's linear block index with divisions by the grid's extents: the split kernel's refill
 * recomputes them at every step where FB_SPLIT_REFILL_DERIVED (config_table.h), so that no
 * pointer into Q or dO stays live across the dS warps' loop (at hd128 ptxas allocates that
 * loop better so; measured). */
template <int BN>
__device__ __forceinline__ void grid_head_batch(const fb_bwd_params &p, int &h, int &b)
{
    const int n_blocks = (p.seqlen_k + BN - 1) / BN;
    const bool heads_x = p.head_group > 0; /* then head_group is heads_q */
    const int x_dim = heads_x ? p.heads_q : n_blocks;
    const int y_dim = heads_x ? n_blocks : p.heads_q;
    const int t = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int x = t % x_dim, rest = t / x_dim;
    const int y = rest % y_dim;
    b = rest / y_dim;
    h = heads_x ? x : y;
}

} // namespace fb
