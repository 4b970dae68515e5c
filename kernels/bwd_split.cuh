/* bwd_split.cuh — the main backward kernel with its warps in two roles (sm_90 rows).
 *
 * The work of bwd_main.cuh (one CTA per key block, every query block that sees it, last to
 * first), split between two groups of four warps that run side by side:
 *   P warps  (0-3): S = Q·Kᵀ, P = exp2(S·scale·log2e − LSE·log2e) → sP,  dV += Pᵀ·dO,
 *                   dQ = dS·K for their columns of LayoutQ (hd64, hd96: the previous step's)
 *   dS warps (4-7): dP = dO·Vᵀ, dS = P∘(dP − D) with P read back from sP → sdS,
 *                   dK += dSᵀ·Q, dQ_m for the other columns (and, at hd128/hd192, the
 *                   last tiles of the P warps' blocks: FB_SPLIT_DQ_SHIFT), and the Q/dO
 *                   ring's refill
 * Why (docs/performance.md): in bwd_main all eight warps are in one phase at a time, so the
 * tensor cores idle while every warp computes exponentials or waits at a barrier, and each
 * warp's GEMM blocks are small (32 x 32 of S at hd128), so operands are re-read from shared
 * memory about 250 bytes per mma, more than its 128 B/clk can feed at the mma rate. Here
 * every scheduler holds one warp of each role, so one computes while the other's GEMM
 * runs, and the blocks of S/dP (32 x 64) and dV/dK (64 x 64) are larger: at hd128 a step
 * reads ~464 KB instead of ~576 KB. Same-run A/B on the H200 against bwd_main: hd128
 * +6..+14%, hd256 +12..+28%, hd96 +3..+9%, hd192 +16..+27%, hd64 +0..+4%.
 * At hd64 and hd96 (FB_SPLIT_DQ_LATE) the P warps' dQ is a step late so that they need not
 * wait for dS: they sync on block m's dS at the top of the next step (block m-1), long
 * after it was stored, and multiply it after that step's dV GEMM, while the dS warps store
 * block m-1's dS in the other buffer. Elsewhere they sync right after their dV GEMM and
 * multiply the step's own dS (one dS buffer).
 * At hd64 (FB_SPLIT_PEEL) the P warps run the steps that need no mask in a loop with one
 * variant of the exponentials. Where a causal CTA's one masked step has the diagonal
 * through its corner, that loop runs it too and then stores zeros over what the bound
 * masks (zero_band_stored): the four-variant loop's code and spills, fetched cold once
 * per CTA, cost a 512-key causal backward ~6% (docs/performance.md).
 * Synchronisation in the loop (no CTA barrier):
 *   BAR_P_READY   the P warps arrive once P is stored; the dS warps sync before reading it
 *   BAR_DS_READY  the dS warps arrive once dS is stored (and they are done reading P); the
 *                 P warps sync before their dQ (late dQ: a step later, before the next P)
 *   BAR_P_GROUP, BAR_DS_GROUP  a group's own barrier before its dV (dK) GEMM
 *   full[s], empty[s]  mbarriers of ring stage s: the refill's copies arrive on full[s];
 *                 every thread arrives on empty[s] when done reading the stage, and the dS
 *                 warps refill it once that phase completes.
 * The two barriers alternate: a side reaches BAR_P_READY (BAR_DS_READY) of the next step
 * only after syncing on the other side's barrier of this one, so the P warps are at most a
 * step ahead. One buffer for P is then enough (its next store waits for the dS warps'
 * arrival, which follows their reads), and for dS one, or two with the late dQ: the dS
 * warps store into buffer it % 2 after BAR_P_READY of step it, which the P warps reach
 * only after their dQ of step it - 2 read that buffer. Within a group, the group barrier
 * or the other side's barrier (whose count covers every thread of both groups) separates
 * a warp's reads from its neighbours' next stores. tests/split_barriers_model.py replays
 * this protocol under random schedules; a change to the barriers changes it too.
 * Not served (the plan takes bwd_main.cuh): deterministic mode, softcap (its 1 − tanh²
 * factor of dS needs the score, which the dS warps never see) and the folded dQ
 * conversion; the launch, grid and workspace are bwd_main's, dQ's fp32 layout too.
 * Where the row overlaps the convert pass (FB_SPLIT_DQ_OVERLAP), every CTA runs
 * launch_dependents at its start and counts itself in on its head before its dV stores
 * (count_in in split_role).
 */
#pragma once
#include <type_traits>

#include "bwd_config.cuh"
#include "cta_trace.cuh"
#include "dq_zero.cuh"
#include "grid_order.cuh"
#include "launch.h"
#include "mask.cuh"
#include "ptx/atomic.cuh"
#include "ptx/barrier.cuh"
#include "ptx/griddep.cuh"
#include "ptx/mbarrier.cuh"
#include "ptx/tma.cuh"
#include "seqinfo.cuh"
#include "softmax_grad.cuh"
#include "tile_io.cuh"
#include "warp_gemm.cuh"

namespace fb {

/* Named barriers of the split kernel: BAR_CTA is every thread's, reached by the two roles
 * from different instructions (so neither __syncthreads nor bar.sync, which are aligned). */
constexpr int BAR_P_READY = 1, BAR_DS_READY = 2, BAR_P_GROUP = 3, BAR_DS_GROUP = 4, BAR_CTA = 5;

/* One role's whole program: P_WARPS for warps 0-3, else warps 4-7. Everything is derived
 * inside from the parameters and the thread index, so that no value is live into both
 * roles' code: with the preamble shared, ptxas spilled 150-200 B of the two loops (their
 * live ranges overlap in its linear order), each of which alone spills nothing. */
template <class C, bool P_WARPS, bool GROUPED, bool FULL>
__device__ __forceinline__ void split_role(const fb_bwd_params &p)
{
    using T = typename C::T;
    using TileQ = typename C::TileQ;
    using TileK = typename C::TileK;
    using TileP = typename C::TileP;
    using LS = typename C::SplitLayoutS;   /* S and dP, per group */
    using LKV = typename C::SplitLayoutKV; /* dV and dK, per group */
    using LQ = typename C::LayoutQ;        /* dQ over all 8 warps: the fp32 sums' layout */
    constexpr int BM = C::BLOCK_M, BN = C::BLOCK_N, HD = C::HEAD_DIM, ST = C::SPLIT_STAGES;
    constexpr int NT = C::NUM_THREADS, GT = NT / 2; /* threads of the CTA, of a group */
    static_assert(NT == 256, "two groups of four warps");

    /* Shared memory: sK | sV | sQ[ST] | sdO[ST] | sP | sdS[1 + LATE] | sP16 | sLSE[ST] |
     * sD[ST] | full[ST] | empty[ST] (config_table.h, FB_SMEM_SPLIT_BYTES). sP16: P as fp16
     * for the dS warps, with bf16 inputs (FB_SPLIT_P16); fp16 inputs read sP itself. */
    constexpr int P16 = FB_SPLIT_P16(HD) ? 1 : 0;
    constexpr int LATE = FB_SPLIT_DQ_LATE(HD) ? 1 : 0; /* the P warps' dQ a step late */
    constexpr bool P_COPY = P16 && !std::is_same<T, __half>::value;
    using TP = std::conditional_t<P16 != 0, __half, T>; /* the type the dS warps read P in */
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sK = smem_u32(smem);
    const uint32_t sV = sK + TileK::BYTES;
    const uint32_t sQ = sV + TileK::BYTES;
    const uint32_t sdO = sQ + ST * TileQ::BYTES;
    const uint32_t sP = sdO + ST * TileQ::BYTES;
    const uint32_t sdS = sP + TileP::BYTES; /* late dQ: step `it` writes buffer it % 2 */
    const uint32_t sP16 = P_COPY ? sdS + (1 + LATE) * TileP::BYTES : sP;
    float *sLSE = reinterpret_cast<float *>(smem + 2 * TileK::BYTES + 2 * ST * TileQ::BYTES +
                                            (2 + LATE + P16) * TileP::BYTES);
    float *sD = sLSE + ST * BM;
    const uint32_t full = smem_u32(sD + ST * BM), empty = full + 8 * ST; /* 8 bytes each */

    /* The refill derives its rows from the block index where grid_head_batch can: in the
     * plain orders only. */
    constexpr bool DERIVED = FB_SPLIT_REFILL_DERIVED(HD) && !GROUPED;
    const GridPos gp = grid_pos<GROUPED>(p);
    const int n_block = gp.n_index, h = gp.h, b = gp.b;
    const int tid = threadIdx.x, warp = tid / 32;
    const int gw = warp % 4, gtid = tid % GT; /* warp and thread within the group */
    const SeqInfo si = seq_info<BM, BN>(p, b);
    const int n0 = n_block * BN;
    /* Where the plan asks, the head's fp32 dQ sums are zeroed by the first P warps of its
     * CTAs to start, not by the preprocess (dq_zero.cuh), while the dS warps load K and V:
     * the P warps then have no copies in flight for their release to wait for. Every CTA
     * takes its tickets, even one with nothing to add, so that a head whose CTAs all
     * return still gets its sums. */
    const int64_t ws_q = si.ws_q_row0 + (int64_t)h * p.ws_rows_q; /* this head's row 0 */
    int32_t *const zero_counter = p.dq_count + ws_q / BM;
    constexpr bool ZERO_ROW = FB_SPLIT_DQ_ZERO_BYTES(HD) > 0; /* else main's prologue */
    const bool zeroes = ZERO_ROW && P_WARPS && p.dq_zero_in_main;
    const int32_t zero_ticket = zeroes ? dq_zero_ticket(zero_counter) : 0;
    auto zero_slice = [&] {
        if (zeroes)
            dq_zero_slice<HD>(zero_counter, zero_ticket, p.dq_accum + ws_q * HD,
                              (si.sq + BM - 1) / BM * BM);
    };
    /* The overlapped convert pass (p.dq_overlap) converts a head's dQ once every CTA of the
     * head with keys (n0 < sk) has counted itself in on the head's first dq_count slot:
     * one that adds nothing when it returns, an adder after the CTA barrier that follows
     * every adder's last addition (in finish), where one thread's fence orders them all
     * before its count (the release half; the convert pass's ld.acquire is the other).
     * Before that thread's own dV stores, so the fence has none to wait for. */
    constexpr bool OVERLAP = FB_SPLIT_DQ_OVERLAP(HD);
    auto count_in = [&] { ptx::red_relaxed_gpu_add(p.dq_count + ws_q / BM, 1); };
    if (n0 >= si.sk) { /* varlen: this sequence has fewer keys */
        zero_slice();
        return;
    }
    const int h_kv = h / p.group;
    const int kv_rows = min(BN, si.sk - n0);
    const bool gqa = p.group > 1;

    const Mask mask{si.sk, (int64_t)si.sk - si.sq, p.window_left, p.window_right};
    int m_begin, m_end;
    mask.m_block_range(n0, BN, BM, si.sq, m_begin, m_end);
    if constexpr (FULL) m_begin = 0; /* as m_block_range gives without a window; a constant
                                        bound keeps the P loop's exit off local memory */
    auto out_rows = [&](void *base, const int64_t *stride) {
        return tensor_rows<T>(base, stride, b, si.k_row0 + n0, h_kv);
    };
    if (m_begin >= m_end) { /* no query sees these keys: zero gradients (GQA: zero sums) */
        zero_slice();
        if (OVERLAP && tid == 0 && p.dq_overlap) count_in();
        if (!gqa) {
            zero_rows<BN, HD, NT>(out_rows(p.dk, p.dk_stride), p.dk_stride[1], kv_rows,
                                  p.head_dim, tid);
            zero_rows<BN, HD, NT>(out_rows(p.dv, p.dv_stride), p.dv_stride[1], kv_rows,
                                  p.head_dim, tid);
        }
        return;
    }

    /* (The preamble repeats bwd_main's: gathered into one helper struct, ptxas moved 10
     * accesses of bwd_main's hd256 loop to local memory.) */
    const T *gK = tensor_rows<const T>(p.k, p.k_stride, b, si.k_row0 + n0, h_kv);
    const T *gV = tensor_rows<const T>(p.v, p.v_stride, b, si.k_row0 + n0, h_kv);
    const T *gQ = tensor_rows<const T>(p.q, p.q_stride, b, si.q_row0, h);
    const T *gdO = tensor_rows<const T>(p.dout, p.do_stride, b, si.q_row0, h);

    /* The refill through the tensor copy engine (FB_SPLIT_TMA rows, where execute encoded
     * Q's and dO's maps: p.tma_on) needs every panel 1024-byte aligned for SWIZZLE_128B
     * (512 for hd96's SWIZZLE_64B); the panels sit at multiples of 4 KB from the base,
     * which the hardware places there unless static shared memory (a trace build's) comes
     * first. */
    auto use_tma = [&]() {
        return FB_SPLIT_TMA(HD) && p.tma_on && smem_u32(smem) % 1024 == 0;
    };

    /* Query block m into ring stage s, by the dS warps; each thread's arrival on full[s]
     * fires when its copies have landed. The chunk coordinates come from an opaque thread
     * index, as in bwd_main: held across the loop, ptxas kept (and spilled) every pass's
     * 64-bit source offset. Through TMA only the group's first thread issues the copies,
     * and full[s] (count 1) completes when its arrival and all the stage's bytes are in. */
    auto load_stage = [&](int m, int s) {
        const int t = thread_id<NT>() % GT;
        if constexpr (FB_SPLIT_TMA(HD)) {
            if (use_tma()) {
                /* one box per panel: 64 columns (SWIZZLE_128B), or 32 at hd96 (SWIZZLE_64B) */
                constexpr int PANEL = TileQ::PANEL, PANEL_BYTES = BM * PANEL * 2;
                if (t == 0) {
                    int hs = h, bs = b; /* where the cp.async refill derives them, so here */
                    if constexpr (DERIVED)
                        grid_head_batch<BN>(p, hs, bs);
                    const SeqInfo ss = seq_info<BM, BN>(p, bs);
                    const int m0 = m * BM;
                    const int64_t ws = ss.ws_q_row0 + (int64_t)hs * p.ws_rows_q + m0;
                    const uint32_t bar = full + 8 * s;
                    ptx::mbarrier_arrive_expect_tx(bar, 2 * TileQ::BYTES + 2 * BM * 4);
#pragma unroll
                    for (int c = 0; c < HD / PANEL; ++c) {
                        ptx::tma_load_4d(sQ + s * TileQ::BYTES + c * PANEL_BYTES, &p.tma_q,
                                         c * PANEL, hs, m0, bs, bar);
                        ptx::tma_load_4d(sdO + s * TileQ::BYTES + c * PANEL_BYTES, &p.tma_do,
                                         c * PANEL, hs, m0, bs, bar);
                    }
                    ptx::bulk_load(smem_u32(sLSE + s * BM), p.lse_log2 + ws, BM * 4, bar);
                    ptx::bulk_load(smem_u32(sD + s * BM), p.dpsum + ws, BM * 4, bar);
                }
                return;
            }
        }
        if constexpr (DERIVED) {
            int hs, bs;
            grid_head_batch<BN>(p, hs, bs);
            const SeqInfo ss = seq_info<BM, BN>(p, bs);
            const int m0 = m * BM, rows = min(BM, ss.sq - m0);
            const int64_t ws = ss.ws_q_row0 + (int64_t)hs * p.ws_rows_q + m0;
            cp_async_tile<TileQ, HD, GT>(
                sQ + s * TileQ::BYTES,
                tensor_rows<const T>(p.q, p.q_stride, bs, ss.q_row0 + m0, hs), p.q_stride[1],
                rows, p.head_dim, t);
            cp_async_tile<TileQ, HD, GT>(
                sdO + s * TileQ::BYTES,
                tensor_rows<const T>(p.dout, p.do_stride, bs, ss.q_row0 + m0, hs),
                p.do_stride[1], rows, p.head_dim, t);
            cp_async_floats(smem_u32(sLSE + s * BM), p.lse_log2 + ws, BM, t);
            cp_async_floats(smem_u32(sD + s * BM), p.dpsum + ws, BM, t);
        } else {
            const int m0 = m * BM, rows = min(BM, si.sq - m0);
            cp_async_tile<TileQ, HD, GT>(sQ + s * TileQ::BYTES, gQ + m0 * p.q_stride[1],
                                         p.q_stride[1], rows, p.head_dim, t);
            cp_async_tile<TileQ, HD, GT>(sdO + s * TileQ::BYTES, gdO + m0 * p.do_stride[1],
                                         p.do_stride[1], rows, p.head_dim, t);
            cp_async_floats(smem_u32(sLSE + s * BM), p.lse_log2 + ws_q + m0, BM, t);
            cp_async_floats(smem_u32(sD + s * BM), p.dpsum + ws_q + m0, BM, t);
        }
        ptx::cp_async_mbarrier_arrive(full + 8 * s);
    };

    if (tid == 0) {
        for (int s = 0; s < ST; ++s) {
            ptx::mbarrier_init(full + 8 * s, use_tma() ? 1 : GT); /* the refill's copies */
            ptx::mbarrier_init(empty + 8 * s, NT); /* every thread, done with the stage */
        }
        if (use_tma()) ptx::fence_mbarrier_init(); /* the copy engine sees the counts */
    }
    ptx::barrier_sync_unaligned(BAR_CTA, NT);
    if constexpr (ZERO_ROW) { /* the dS warps load K and V, the P warps may zero */
        if (!P_WARPS) {
            cp_async_tile<TileK, HD, GT>(sK, gK, p.k_stride[1], kv_rows, p.head_dim, gtid);
            cp_async_tile<TileK, HD, GT>(sV, gV, p.v_stride[1], kv_rows, p.head_dim, gtid);
            ptx::cp_async_commit();
            for (int s = 0; s < ST && m_end - 1 - s >= m_begin; ++s) load_stage(m_end - 1 - s, s);
            ptx::cp_async_wait<0>(); /* K and V (the stages' copies are in no group) */
        } else {
            zero_slice(); /* while the dS warps' copies are in flight */
        }
    } else {
        cp_async_tile<TileK, HD, NT>(sK, gK, p.k_stride[1], kv_rows, p.head_dim, tid);
        cp_async_tile<TileK, HD, NT>(sV, gV, p.v_stride[1], kv_rows, p.head_dim, tid);
        ptx::cp_async_commit();
        if (!P_WARPS)
            for (int s = 0; s < ST && m_end - 1 - s >= m_begin; ++s) load_stage(m_end - 1 - s, s);
        ptx::cp_async_wait<0>(); /* K and V (the stages' copies are in no group) */
    }
    ptx::barrier_sync_unaligned(BAR_CTA, NT);
    FB_TRACE(if (tid == 0) {
        trace::Cta::mark(trace::PROLOGUE);
        trace::Cta::steps(m_end - m_begin);
    })

    SoftmaxParams sp;
    sp.scale_log2 = p.scale_log2;
    sp.softcap_inv = sp.softcap_log2 = 0.0f; /* softcap plans run bwd_main */
    sp.slope_log2 = 0.0f;                    /* ALiBi: bias = -slope·|i + sk - sq - j| */
    if (p.alibi_slopes)
        sp.slope_log2 = p.alibi_slopes[b * p.alibi_stride[0] + h * p.alibi_stride[1]] * LOG2E;

    /* dQ_m = dS_m·K for this warp's block of LayoutQ, added into block m's fp32 rows; by
     * row-tile halves where the block has 4 row tiles (hd256), as in bwd_main. `it` is the
     * step that stored dS_m, which names its buffer. With FB_SPLIT_DQ_SHIFT(HD) = SH, each
     * P warp leaves its block's last SH 8-column tiles to dS warp + 4, which holds the
     * same LayoutQ rows (WQ divides 4), so one load of dS's fragments serves both. */
    constexpr int SH = FB_SPLIT_DQ_SHIFT(HD);
    auto dq_step = [&](int m, int it, int lane) {
        const auto a = operand_addr<LQ, TileP, true, false>(sdS, warp, lane);
        const uint32_t a_off = LATE * (it & 1) * TileP::BYTES;
        const auto bk = operand_addr<LQ, TileK, false, true>(sK, warp, lane);
        float *chunk = p.dq_accum + (ws_q + (int64_t)m * BM) * HD;
        constexpr int RT = LQ::MT >= 4 && LQ::NT % 2 == 0 ? LQ::MT / 2 : 0;
        constexpr bool SAME_ROWS = LQ::row_block(4) == LQ::row_block(0) &&
                                   LQ::row_block(5) == LQ::row_block(1) &&
                                   LQ::row_block(6) == LQ::row_block(2) &&
                                   LQ::row_block(7) == LQ::row_block(3);
        static_assert(SH == 0 || (RT == 0 && SH < LQ::NT && SAME_ROWS),
                      "the shifted dQ tiles share the dS warp's rows");
        if constexpr (RT > 0) {
            warp_gemm_by_row_tiles<LQ, RT, TileP, TileK, true, BN, T>(
                a, a_off, bk, 0, [&](int mi0, const float(&acc)[RT][LQ::NT][4]) {
                    red_add_row_tiles<LQ, RT, NT>(chunk, mi0, acc, tid);
                });
        } else if constexpr (SH > 0 && P_WARPS) {
            using Mine = ColumnSlice<LQ, 0, LQ::NT - SH>;
            float acc_dq[LQ::MT][LQ::NT - SH][4];
            zero(acc_dq);
            warp_gemm<Mine, TileP, TileK, false, true, BN, T>(acc_dq, a, a_off, bk, 0);
            red_add_tiles<LQ, 0, LQ::NT - SH, NT>(chunk, acc_dq, 1.0f, tid);
        } else if constexpr (SH > 0) {
            using Theirs = ColumnSlice<LQ, LQ::NT - SH, SH>;
            float acc_dq[LQ::MT][LQ::NT][4], acc_p[LQ::MT][SH][4];
            zero(acc_dq);
            zero(acc_p);
            warp_gemm_two_b<LQ, SH, TileP, TileK, false, true, BN, T>(
                acc_dq, acc_p, a, a_off, bk,
                operand_addr<Theirs, TileK, false, true>(sK, warp - 4, lane));
            red_add_frags<LQ, NT>(chunk, acc_dq, 1.0f, tid);
            red_add_tiles<LQ, LQ::NT - SH, SH, NT>(chunk, acc_p, 1.0f, tid - GT);
        } else {
            float acc_dq[LQ::MT][LQ::NT][4];
            zero(acc_dq);
            warp_gemm<LQ, TileP, TileK, false, true, BN, T>(acc_dq, a, a_off, bk, 0);
            red_add_frags<LQ, NT>(chunk, acc_dq, 1.0f, tid);
        }
    };

    /* After the loop each group writes its accumulator: dV from the P warps, dK (times the
     * scale) from the dS warps. Called in each branch, so that neither accumulator is live
     * where the branches would join (ptxas then allocates each loop on its own). */
    auto finish = [&](float(&acc)[LKV::MT][LKV::NT][4], bool dv) {
        const int lane = lane_id(), group_bar = dv ? BAR_P_GROUP : BAR_DS_GROUP;
        const float scale = dv ? 1.0f : p.scale;
        ptx::barrier_sync_unaligned(BAR_CTA, NT); /* every warp done with sK, sV and the ring */
        /* The CTA's count (count_in) follows the barrier above, after every warp's last dQ
         * addition. One thread's fence waits for those to land, so it goes after the group's
         * barrier below, where the rest of the group stores dV meanwhile; before that barrier
         * the group waited for the fence (hd128 0.3-1% slower, docs/performance.md). With
         * GQA, where dK and dV go out as reductions too, it stays first. */
        if (gqa) {
            if (OVERLAP && dv && gtid == 0 && p.dq_overlap) { /* the CTA's count (count_in) */
                ptx::fence_acq_rel_gpu();
                count_in();
            }
            /* The group sums keep bwd_main's LayoutKV (convert_dkv reads it): the matrix
             * goes through shared memory as fp32 rows (padded by 4 floats against bank
             * conflicts) and each thread reads back the elements of two threads of that
             * 8-warp layout. */
            using L8 = typename C::LayoutKV;
            constexpr int LD = HD + 4;
            static_assert(2 * BN * LD * 4 <= C::SPLIT_SMEM_BYTES, "fp32 dK and dV fit");
            float *rows = reinterpret_cast<float *>(smem) + (dv ? 0 : BN * LD);
#pragma unroll
            for (int i = 0; i < LKV::REGS; i += 2) {
                int r, c;
                LKV::coord(gw, lane, i, r, c);
                const float *v = &acc[i / 4 / LKV::NT][i / 4 % LKV::NT][i % 4];
                *reinterpret_cast<float2 *>(rows + r * LD + c) =
                    make_float2(v[0] * scale, v[1] * scale);
            }
            ptx::bar_sync(group_bar, GT);
            float *sums = (dv ? p.dv_accum : p.dk_accum) +
                          (si.ws_k_row0 + (int64_t)h_kv * p.ws_rows_k + n0) * HD;
            for (int t = gtid; t < NT; t += GT) { /* a thread of the 8-warp layout */
                float a8[L8::MT][L8::NT][4];
#pragma unroll
                for (int i = 0; i < L8::REGS; i += 2) {
                    int r, c;
                    L8::coord(t / 32, t % 32, i, r, c);
                    const float2 v = *reinterpret_cast<const float2 *>(rows + r * LD + c);
                    a8[i / 4 / L8::NT][i / 4 % L8::NT][i % 4] = v.x;
                    a8[i / 4 / L8::NT][i / 4 % L8::NT][i % 4 + 1] = v.y;
                }
                red_add_frags<L8, NT>(sums, a8, 1.0f, t);
            }
            return;
        }
        /* Staged in the group's (now free) tile, then written as whole 16-byte chunks. */
        const uint32_t tile = dv ? sV : sK;
        store_frags<LKV, TileK, T>(tile, acc, scale, gw, lane);
        ptx::bar_sync(group_bar, GT);
        if (OVERLAP && dv && gtid == 0 && p.dq_overlap) { /* the CTA's count (count_in) */
            ptx::fence_acq_rel_gpu();
            count_in();
        }
        T *out = dv ? out_rows(p.dv, p.dv_stride) : out_rows(p.dk, p.dk_stride);
        store_tile<TileK, HD, GT>(out, dv ? p.dv_stride[1] : p.dk_stride[1], tile, kv_rows,
                                  p.head_dim, gtid);
    };

    if constexpr (P_WARPS) {
        float acc_dv[LKV::MT][LKV::NT][4];
        zero(acc_dv);
        /* One step; UNMASKED: its tile needs no mask and there is no ALiBi; band (with
         * UNMASKED): the causal bound runs through the tile's corner (below). */
        auto p_step = [&](auto unmasked, int m, int it, bool band) {
            constexpr bool UNMASKED = decltype(unmasked)::value;
            const int s = it % ST, lane = lane_id();
            const int64_t m0 = (int64_t)m * BM;
            ptx::mbarrier_wait(full + 8 * s, (it / ST) & 1);
            float acc_s[LS::MT][LS::NT][4];
            zero(acc_s);
            warp_gemm<LS, TileQ, TileK, false, false, HD, T>(
                acc_s, operand_addr<LS, TileQ, true, false>(sQ, gw, lane), s * TileQ::BYTES,
                operand_addr<LS, TileK, false, false>(sK, gw, lane), 0);           // S = Q·Kᵀ
            if constexpr (UNMASKED) { /* one variant: no mask, no ALiBi */
                auto none = [] {};
                softmax_grad<true, false, false, false, false, LS>(
                    acc_s, acc_s, sLSE + s * BM, nullptr, sp, mask, m0, n0, gw, lane, none);
            } else { /* the variant each tile needs */
                softmax_p_tile<LS>(acc_s, sLSE + s * BM, sp, mask,
                                   mask.tile_needs_mask(m0, BM, n0, BN), m0, n0, gw, lane);
            }
            if (LATE && it > 0) ptx::bar_sync(BAR_DS_READY, NT); /* done with sP */
            store_frags<LS, TileP, T>(sP, acc_s, 1.0f, gw, lane);
            if constexpr (P_COPY) store_frags<LS, TileP, TP>(sP16, acc_s, 1.0f, gw, lane);
            if (UNMASKED && FB_SPLIT_PEEL(HD) && band) {
                /* Key n0 + c is visible to query m0 + r iff c <= r, so a warp's block lies
                 * inside the bound, past it, or, where its rows and columns start together,
                 * on it. The masked pairs were stored by this lane, so its zeros land after
                 * them with no barrier. Done after the store, the loop's registers keep
                 * their allocation: masking the values before it held all 128 of them live
                 * and spilled 10 more accesses a step (docs/performance.md, twenty-ninth
                 * session). */
                static_assert(!FB_SPLIT_PEEL(HD) || (BM == BN && LS::TM == LS::TN),
                              "the diagonal meets blocks' corners");
                const int w = LS::row0(gw) - LS::col0(gw);
                if (w == 0) {
                    zero_band_stored<LS, TileP, 0>(sP, gw, lane);
                    if constexpr (P_COPY) zero_band_stored<LS, TileP, 0>(sP16, gw, lane);
                } else if (w < 0) {
                    zero_band_stored<LS, TileP, -LS::TN>(sP, gw, lane);
                    if constexpr (P_COPY) zero_band_stored<LS, TileP, -LS::TN>(sP16, gw, lane);
                }
            }
            ptx::bar_arrive(BAR_P_READY, NT);
            ptx::bar_sync(BAR_P_GROUP, GT); /* all of P visible to the group */
            warp_gemm<LKV, TileP, TileQ, true, true, BM, T>(
                acc_dv, operand_addr<LKV, TileP, true, true>(sP, gw, lane), 0,
                operand_addr<LKV, TileQ, false, true>(sdO, gw, lane),
                s * TileQ::BYTES);                                                 // dV += Pᵀ·dO
            ptx::mbarrier_arrive(empty + 8 * s);
            if constexpr (LATE) {
                if (it > 0) dq_step(m + 1, it - 1, lane); /* the previous step's dS */
            } else {
                ptx::bar_sync(BAR_DS_READY, NT);
                dq_step(m, it, lane);
            }
        };
        int m = m_end - 1, it = 0;
        if constexpr (!FULL && FB_SPLIT_PEEL(HD)) {
            /* Query blocks from m_end - 1 down to m_fast need no mask where there is no left
             * window, ALiBi or partial key block (causal: all but the diagonal's): they run
             * a loop with one variant of the exponentials, the rest the per-tile choice. */
            int m_fast = m_end;
            const bool right_only = mask.left < 0 && !p.alibi_slopes && n0 + BN <= si.sk;
            if (right_only) {
                const int64_t x = mask.right < 0 ? 0 : n0 + BN - 1 - mask.diag - mask.right;
                m_fast = x <= 0 ? m_begin : (int)max((int64_t)m_begin, (x + BM - 1) / BM);
            }
            /* A causal CTA's one masked step where the bound meets the tile's corner (the
             * diagonal of a plan whose seqlen_k - seqlen_q is a multiple of BLOCK_M) runs
             * in this loop too, as its last step. */
            const bool band = right_only && m_fast == m_begin + 1 &&
                              mask.right >= 0 &&
                              (int64_t)m_begin * BM + mask.diag + mask.right == n0;
            if (band) m_fast = m_begin;
            for (; m >= m_fast; --m, ++it)
                p_step(std::true_type{}, m, it, band && m == m_fast);
        }
        for (; m >= m_begin; --m, ++it)
            p_step(std::integral_constant<bool, FULL>{}, m, it, false);
        if constexpr (LATE) {
            ptx::bar_sync(BAR_DS_READY, NT);
            dq_step(m_begin, m_end - 1 - m_begin, lane_id());
        }
        FB_TRACE(if (tid == 0) trace::Cta::mark(trace::P_LOOP));
        finish(acc_dv, true);
    } else {
        float acc_dk[LKV::MT][LKV::NT][4];
        zero(acc_dk);
        /* Before the CTA's first dQ addition one thread waits for the head's sums to be
         * zeroed (dq_zero.cuh); its warp's dP GEMM of step 0 starts late, which the wait
         * for P mostly hides. Every adder passes a barrier after it: BAR_P_READY (the dS
         * warps) or BAR_DS_READY (the P warps, which the dS warps reach after it). */
        if (ZERO_ROW && gtid == 0 && p.dq_zero_in_main) dq_zero_wait(zero_counter);
        for (int m = m_end - 1, it = 0; m >= m_begin; --m, ++it) {
            const int s = it % ST, lane = lane_id();
            ptx::mbarrier_wait(full + 8 * s, (it / ST) & 1);
            float acc_dp[LS::MT][LS::NT][4];
            zero(acc_dp);
            warp_gemm<LS, TileQ, TileK, false, false, HD, T>(
                acc_dp, operand_addr<LS, TileQ, true, false>(sdO, gw, lane), s * TileQ::BYTES,
                operand_addr<LS, TileK, false, false>(sV, gw, lane), 0);           // dP = dO·Vᵀ
            ptx::bar_sync(BAR_P_READY, NT);
            ds_from_stored_p<LS, TileP, TP>(acc_dp, sP16, sD + s * BM, gw, lane);
            const uint32_t ds_off = LATE * (it & 1) * TileP::BYTES;
            store_frags<LS, TileP, T>(sdS + ds_off, acc_dp, 1.0f, gw, lane);
            ptx::bar_arrive(BAR_DS_READY, NT);
            ptx::bar_sync(BAR_DS_GROUP, GT); /* all of dS visible to the group */
            warp_gemm<LKV, TileP, TileQ, true, true, BM, T>(
                acc_dk, operand_addr<LKV, TileP, true, true>(sdS, gw, lane), ds_off,
                operand_addr<LKV, TileQ, false, true>(sQ, gw, lane),
                s * TileQ::BYTES);                                                 // dK += dSᵀ·Q
            ptx::mbarrier_arrive(empty + 8 * s);
            /* Refill the stage once every thread is done with it; through TMA only the
             * issuing thread waits. */
            if (m - ST >= m_begin && (!use_tma() || gtid == 0)) {
                ptx::mbarrier_wait(empty + 8 * s, (it / ST) & 1);
                load_stage(m - ST, s);
            }
            dq_step(m, it, lane);
        }
        FB_TRACE(if (tid == GT) trace::Cta::mark(trace::DS_LOOP));
        finish(acc_dk, false);
    }
}

/* GROUPED: this instance decodes every grid order, heads in groups too (grid_order.cuh);
 * else only the plain orders. Which rows have which: FB_SPLIT_PLAIN, FB_SPLIT_GROUPED
 * (config_table.h). FULL (a plain instance, FB_SPLIT_FULL rows): no tile of any CTA needs
 * a mask or ALiBi, which the plan and execute guarantee (no window, not varlen, seqlen_k a
 * multiple of BLOCK_N, no ALiBi slopes bound; src/launches.c, split_full), so the P warps'
 * loop holds one variant of the exponentials instead of the four chosen per tile, and
 * none of the mask's values: at hd64 one local load a step where the plain instance's
 * P loop holds ~10 (its 136/156 B of spills). */
template <class C, bool GROUPED, bool FULL = false>
__global__ void __launch_bounds__(C::NUM_THREADS, 1)
    bwd_split_kernel(const __grid_constant__ fb_bwd_params p) /* grid constant: TMA reads the
                                                                 maps in place */
{
    static_assert(!(FULL && GROUPED), "the full-tile instance is a plain one");
    if constexpr (!arch_compiled<C::ARCH>() || C::SPLIT_STAGES == 0) {
        __trap();
    } else {
        FB_TRACE(trace::Cta cta; cta.start();
                 ptx::barrier_sync_unaligned(BAR_CTA, C::NUM_THREADS));
        if constexpr (FB_SPLIT_DQ_OVERLAP(C::HEAD_DIM))
            ptx::launch_dependents(); /* the overlapped convert pass may start once all have */
        if (threadIdx.x < C::NUM_THREADS / 2) split_role<C, true, GROUPED, FULL>(p);
        else split_role<C, false, GROUPED, false>(p); /* the dS warps never see the mask */
        FB_TRACE(ptx::barrier_sync_unaligned(BAR_CTA, C::NUM_THREADS); cta.finish());
    }
}

} // namespace fb
