/* bwd_main.cuh — main backward kernel: one CTA per (key block, query head, batch).
 *
 * The CTA keeps its BLOCK_N rows of K and V in shared memory and walks the query blocks
 * that can see them, last to first (as FlashAttention does): under a causal mask every key
 * block of a head then starts at the same bottom query block, so CTAs that run together
 * read the same Q and dO and add into the same dQ rows while these are in L2 (measured:
 * causal +0.6..+1.0% at hd128, +2..+3% at hd256 for 512-2k keys); the diagonal, masked
 * tiles come last. Per query block m (flash-backward-reference.md §1.1, §1.4):
 *   S  = Q·Kᵀ,  dP = dO·Vᵀ                         (registers, fp32)
 *   P  = exp2(S·scale·log2e − LSE·log2e),  dS = P∘(dP − D)   [softcap, ALiBi, masks]
 *        (with EARLY_P, P between the S and dP GEMMs: softmax_grad.cuh)
 *   P, dS → shared memory (16-bit, swizzled)
 *   dV += Pᵀ·dO,  dK += dSᵀ·Q                      (registers, across all m)
 *   dQ_m = dS·K  → red.global.add into the fp32 dq_accum chunk of block m
 * After the loop dK·scale and dV are written (or, with GQA, added into fp32 group sums).
 * dQ conversion: with FOLD (a plan-time choice from the config table's FOLD and FOLDM) the
 *   kernel converts dQ itself; else bwd_convert_dq_kernel runs after it. Mask::adders(m)
 *   key blocks add into block m; each counts itself in on the block's counter in the
 *   workspace (atom.release), and the one that completes the count converts the block
 *   (dQ = scale · sum, read back from L2) at the top of a later step, so no pass rereads
 *   the sums. Nothing of this may wait on the atomic, so thread 0 works a step apart:
 *   (1) at a step's mid-step barrier it counts in the previous step's block (LAG: at the
 *   next step's top, before the refill), whose reductions went out before the top
 *   barrier, so the release fence finds them done; (2) a step later, the answer back, it
 *   writes to shared memory whether its count completed the block; (3) after the next top
 *   barrier every thread reads that and, if so, the CTA converts. The last blocks are
 *   settled after the loop. The count can still cost long sequences a few % (ptxas spills
 *   the answer at once, so warp 0 waits for it): where it measured so, the config table's
 *   FOLD (plans without a mask) or FOLDM (with one) stops at a sequence length. With few
 *   steps per CTA the last count-ins, which wait for the CTA's final reductions, show
 *   instead: there FMIN keeps the convert pass (hd64 up to 1024 keys). Deterministic mode
 *   needs no count: the CTA with the last turn converts right after adding.
 *
 * Launch: grid (n_blocks, heads_q, batch), or with a mask heads in groups, each head's
 *   longest key block first (p.head_group: grid_order.cuh, src/launches.c);
 *   FB_NUM_THREADS threads, dynamic shared memory Cfg::SMEM_BYTES (raised at plan time).
 * Pipeline: Q, dO, LSE·log2e and D of a query block travel as one cp.async group into a
 *   ring of STAGES buffers; exactly one group is committed per step, after the P/dS
 *   barrier in the middle of the step (any point past the top barrier would do; there
 *   only dK/dV are live, and the loads have half a step), so at the top
 *   wait_group<STAGES-2> means "block m has landed" (with one stage the refill of the
 *   current block happens between two barriers at the top).
 * Shared memory: sK | sV | sQ[STAGES] | sdO[STAGES] | sP | sdS[1 + LAG] | sLSE[STAGES] |
 *   sD[STAGES].
 * Barriers per step: one CTA barrier at the top (block m landed; every warp is done with
 *   the previous step, so its ring stage, P and dS may be overwritten). dQ = dS·K needs
 *   every warp's dS. With Cfg::DQ_LAG (a config-table column) it runs at the top of the
 *   next step, after that step's CTA barrier, from a second dS buffer, so between
 *   writing P/dS and the dV/dK GEMMs only the warps of one column slice need to meet
 *   (Cfg::PDS_GROUP, a named barrier). Without it a second CTA barrier
 *   sits there and dQ follows dK in step m. Which is faster depends on the row
 *   (docs/performance.md): LAG frees dQ's registers during dV/dK, which ends the spills
 *   of hd192/256, but costs hd128 2-5%.
 * Deterministic mode: before adding to a sum (dQ of block m; with GQA the group's dK, dV)
 *   a CTA waits for that sum's turn counter (for dQ, the block's count) to reach its
 *   position in a fixed order (key blocks descending; heads of a group ascending), then
 *   adds and advances the counter.
 *   The key-block index of the grid runs backwards, so every wait points at a CTA with a
 *   smaller linear index (same head and batch, or an earlier head of the group at the
 *   same key block), which starts earlier: the chain always drains. Descending also means
 *   that under a causal mask the shortest CTAs go first and a CTA's turns come after work
 *   its predecessors finished early (shortest-first, as FlashAttention 3 schedules it).
 * Registers: shared-memory addresses are per-lane bases plus immediates (LaneAddr), rebuilt
 *   from an opaque lane id each iteration so they are not held across the loop.
 * Elsewhere: tiles and swizzle (smem_tile.cuh), warp ownership (warp_layout.cuh), masks
 *   (mask.cuh), P and dS (softmax_grad.cuh), PTX (ptx/), configurations (src/config_table.h).
 */
#pragma once
#include "bwd_config.cuh"
#include "bwd_prepost.cuh"
#include "grid_order.cuh"
#include "launch.h"
#include "mask.cuh"
#include "ptx/atomic.cuh"
#include "ptx/barrier.cuh"
#include "seqinfo.cuh"
#include "softmax_grad.cuh"
#include "tile_io.cuh"
#include "warp_gemm.cuh"

namespace fb {

/* Deterministic mode: wait until *sem reaches turn (thread 0 spins; the CTA then syncs).
 * ">=" rather than "==": with valid lengths the counter never passes a waiting turn, and
 * with contradictory ones (sequences sharing workspace rows) it may, but then the wait
 * still ends, since every counter only grows. */
__device__ __forceinline__ void wait_turn(const int32_t *sem, int turn, int tid)
{
    if (tid == 0)
        while (ptx::ld_acquire_gpu(sem) < turn) {
        }
    __syncthreads();
}

/* ... and after the CTA's reductions: sync, then thread 0 passes the turn on. */
__device__ __forceinline__ void pass_turn(int32_t *sem, int tid)
{
    __syncthreads();
    if (tid == 0) ptx::red_release_gpu_add(sem, 1);
}

/* convert_chunk out of line: a conversion is a rare step, and inlined into the loop its
 * registers would spill the hot path's accumulators; called, it saves them only when it
 * runs. */
template <class L, int ROWS, int HD, int NT, typename T>
__device__ __noinline__ void convert_dq_block(T *out, int64_t row_stride, const float *chunk,
                                              int valid_rows, int head_dim, float scale, int tid)
{
    convert_chunk<L, ROWS, HD, NT>(out, row_stride, chunk, valid_rows, head_dim, scale, tid);
}

template <class C, bool FOLD>
__global__ void __launch_bounds__(C::NUM_THREADS, 1) bwd_main_kernel(const fb_bwd_params p)
{
    if constexpr (!arch_compiled<C::ARCH>()) {
        __trap();
    } else {
    using T = typename C::T;
    using TileQ = typename C::TileQ;
    using TileK = typename C::TileK;
    using TileP = typename C::TileP;
    using LS = typename C::LayoutS;
    using LKV = typename C::LayoutKV;
    using LQ = typename C::LayoutQ;
    constexpr int BM = C::BLOCK_M, BN = C::BLOCK_N, HD = C::HEAD_DIM, ST = C::STAGES;
    constexpr int NT = C::NUM_THREADS;
    constexpr bool EARLY_P = (FB_EARLY_P(HD) >> (FOLD ? 1 : 0) & 1) != 0; /* config_table.h */

    /* Shared memory, as byte addresses in the shared state space. */
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sK = smem_u32(smem);
    const uint32_t sV = sK + TileK::BYTES;
    const uint32_t sQ = sV + TileK::BYTES;
    const uint32_t sdO = sQ + ST * TileQ::BYTES;
    const uint32_t sP = sdO + ST * TileQ::BYTES;
    const uint32_t sdS = sP + TileP::BYTES;
    float *sLSE = reinterpret_cast<float *>(smem + 2 * TileK::BYTES + 2 * ST * TileQ::BYTES +
                                            (1 + C::DS_BUFFERS) * TileP::BYTES);
    float *sD = sLSE + ST * BM;

    /* The grid's order: grid_order.cuh. Deterministic: key blocks backwards (header). */
    const GridPos gp = grid_pos<FB_HEAD_GROUPS(HD)>(p);
    const int n_block = p.deterministic ? gp.n_blocks - 1 - gp.n_index : gp.n_index;
    const int h = gp.h, b = gp.b;
    const int tid = threadIdx.x, warp = tid / 32;
    const SeqInfo si = seq_info<BM, BN>(p, b);
    const int n0 = n_block * BN;
    if (n0 >= si.sk) return; /* varlen: this sequence has fewer keys */
    const int h_kv = h / p.group;
    const int kv_rows = min(BN, si.sk - n0);
    const bool gqa = p.group > 1;

    const Mask mask{si.sk, (int64_t)si.sk - si.sq, p.window_left, p.window_right};
    int m_begin, m_end;
    mask.m_block_range(n0, BN, BM, si.sq, m_begin, m_end);

    /* Output rows of this key block; computed where used, to keep them out of the loop. */
    auto out_rows = [&](void *base, const int64_t *stride) {
        return tensor_rows<T>(base, stride, b, si.k_row0 + n0, h_kv);
    };
    if (m_begin >= m_end) { /* no query sees these keys: their gradients are zero */
        if (gqa && p.dkv_sem) { /* still take this head's turn in the group order */
            int32_t *sem = p.dkv_sem + (si.ws_k_row0 + (int64_t)h_kv * p.ws_rows_k + n0) / BN;
            wait_turn(sem, h % p.group, tid);
            pass_turn(sem, tid);
        }
        if (!gqa) {
            zero_rows<BN, HD, NT>(out_rows(p.dk, p.dk_stride), p.dk_stride[1], kv_rows,
                                  p.head_dim, tid);
            zero_rows<BN, HD, NT>(out_rows(p.dv, p.dv_stride), p.dv_stride[1], kv_rows,
                                  p.head_dim, tid);
        }
        return;
    }

    const T *gK = tensor_rows<const T>(p.k, p.k_stride, b, si.k_row0 + n0, h_kv);
    const T *gV = tensor_rows<const T>(p.v, p.v_stride, b, si.k_row0 + n0, h_kv);
    const T *gQ = tensor_rows<const T>(p.q, p.q_stride, b, si.q_row0, h);
    const T *gdO = tensor_rows<const T>(p.dout, p.do_stride, b, si.q_row0, h);
    const int64_t ws_q = si.ws_q_row0 + (int64_t)h * p.ws_rows_q; /* this head's row 0 */

    /* Query block m into ring stage s: Q, dO (zero past sq), LSE·log2e and D. The thread's
     * chunk coordinates come from an opaque thread index on the LAG 0 rows (recomputed
     * each step: held, ptxas spilled them and reloaded them after the top barrier) and from
     * threadIdx.x on the LAG 1 rows (there the opaque index made ptxas spill instead):
     * each the choice that measured faster (docs/performance.md). */
    auto load_stage = [&](int m, int s) {
        const int tid = C::DQ_LAG ? (int)threadIdx.x : thread_id<NT>();
        const int m0 = m * BM, rows = min(BM, si.sq - m0);
        cp_async_tile<TileQ, HD, NT>(sQ + s * TileQ::BYTES, gQ + m0 * p.q_stride[1],
                                     p.q_stride[1], rows, p.head_dim, tid);
        cp_async_tile<TileQ, HD, NT>(sdO + s * TileQ::BYTES, gdO + m0 * p.do_stride[1],
                                     p.do_stride[1], rows, p.head_dim, tid);
        cp_async_floats(smem_u32(sLSE + s * BM), p.lse_log2 + ws_q + m0, BM, tid);
        cp_async_floats(smem_u32(sD + s * BM), p.dpsum + ws_q + m0, BM, tid);
    };

    cp_async_tile<TileK, HD, NT>(sK, gK, p.k_stride[1], kv_rows, p.head_dim, tid);
    cp_async_tile<TileK, HD, NT>(sV, gV, p.v_stride[1], kv_rows, p.head_dim, tid);
    ptx::cp_async_commit();
#pragma unroll
    for (int s = 0; s < ST - 1; ++s) {
        if (m_end - 1 - s >= m_begin) load_stage(m_end - 1 - s, s);
        ptx::cp_async_commit(); /* commit even when empty: wait_group counts groups */
    }

    SoftmaxParams sp;
    sp.scale_log2 = p.scale_log2;
    sp.softcap_inv = p.softcap_inv;
    sp.softcap_log2 = p.softcap_log2;
    sp.slope_log2 = 0.0f; /* ALiBi: bias = -slope·|i + sk - sq - j| */
    if (p.alibi_slopes)
        sp.slope_log2 = p.alibi_slopes[b * p.alibi_stride[0] + h * p.alibi_stride[1]] * LOG2E;
    const bool softcap = p.softcap_on != 0;

    float acc_dk[LKV::MT][LKV::NT][4], acc_dv[LKV::MT][LKV::NT][4];
    zero(acc_dk);
    zero(acc_dv);

    /* dQ of query block m: its fp32 sum, its count of key blocks added, its 16-bit rows. */
    /* (Pointers are formed where used: held across the loop they would cost registers.) */
    const int n_blocks = (si.sk + BN - 1) / BN;
    auto dq_count = [&](int m) { return p.dq_count + (ws_q + (int64_t)m * BM) / BM; };
    auto convert_dq = [&](int m) { /* every thread; the sum must be complete */
        const int64_t m0 = (int64_t)m * BM;
        T *out = static_cast<T *>(p.dq) + b * p.dq_stride[0] +
                 (si.q_row0 + m0) * p.dq_stride[1] + h * p.dq_stride[2];
        convert_dq_block<LQ, BM, HD, NT>(out, p.dq_stride[1], p.dq_accum + (ws_q + m0) * HD,
                                         min(BM, si.sq - (int)m0), p.head_dim, p.scale, tid);
    };
    /* Non-deterministic: thread 0 counts in block m (its reductions went out a step ago);
     * the old count comes back into `seen`, and it completed the block if it was one short
     * of the number of adders. The address adds tid (0 here) so that it is not uniform
     * across the warp: for a uniform one ptxas aggregates the warp's atomics and
     * broadcasts the result with a shuffle at once, which stalls the warp on the atomic. */
    int32_t seen = 0;
    auto count_in = [&](int m) {
        if (FOLD && !p.deterministic && tid == 0 && m < m_end)
            seen = ptx::atom_add_release_gpu(dq_count(m) + tid, 1);
    };
    auto completes = [&](int m) { /* thread 0; then acquires the other adders' sums */
        const bool last = seen == mask.adders(m, BM, BN, n_blocks) - 1;
        if (last) ptx::fence_acq_rel_gpu();
        return last;
    };
    __shared__ int dq_ready[2]; /* per step parity: a block this CTA must convert, or -1 */

    /* dQ_m = dS_m·K from dS buffer `buf`, added into block m's fp32 rows. */
    /* In two halves where the warp's block has 4 row tiles (hd256): the first half's
     * reductions go out while the second half's mma run, not in one burst after them. */
    constexpr int DQ_GROUP = LQ::MT >= 4 && LQ::NT % 2 == 0 ? LQ::MT / 2 : 0;
    constexpr bool DQ_BY_ROW_TILE = DQ_GROUP > 0;
    auto dq_step = [&](int m, int buf) {
        const int lane = lane_id();
        const int64_t m0 = (int64_t)m * BM;
        const auto a = operand_addr<LQ, TileP, true, false>(sdS, warp, lane);
        const auto bk = operand_addr<LQ, TileK, false, true>(sK, warp, lane);
        int32_t *sem = p.deterministic ? dq_count(m) : nullptr;
        auto wait = [&] {
            if (sem)
                wait_turn(sem, mask.last_n_block(m, BM, BN, (si.sk + BN - 1) / BN) - n_block,
                          tid);
        };
        if constexpr (DQ_BY_ROW_TILE) {
            wait();
            constexpr int RT = DQ_GROUP > 0 ? DQ_GROUP : 1;
            warp_gemm_by_row_tiles<LQ, RT, TileP, TileK, true, BN, T>(               // dQ = dS·K
                a, buf * TileP::BYTES, bk, 0, [&](int mi0, const float(&acc)[RT][LQ::NT][4]) {
                    red_add_row_tiles<LQ, RT, NT>(p.dq_accum + (ws_q + m0) * HD, mi0, acc,
                                                  tid);
                });
        } else {
            float acc_dq[LQ::MT][LQ::NT][4];
            zero(acc_dq);
            warp_gemm<LQ, TileP, TileK, false, true, BN, T>(acc_dq, a, buf * TileP::BYTES,
                                                            bk, 0);                   // dQ = dS·K
            wait();
            red_add_frags<LQ, NT>(p.dq_accum + (ws_q + m0) * HD, acc_dq, 1.0f, tid);
        }
        if (sem) {
            pass_turn(sem, tid);
            if (FOLD && n_block == mask.first_n_block(m, BM, BN)) { /* the last turn */
                __syncthreads(); /* thread 0's release fence covers the CTA's reductions */
                convert_dq(m);
            }
        }
    };

    for (int m = m_end - 1, it = 0; m >= m_begin; --m, ++it) {
        const int stage = it % ST;
        if constexpr (ST == 1) { /* the one stage is refilled once every warp is done with it */
            __syncthreads();
            if constexpr (C::DQ_LAG) count_in(m + 2);
            load_stage(m, 0);
            ptx::cp_async_commit();
            ptx::cp_async_wait<0>();
            __syncthreads();
        } else {
            ptx::cp_async_wait<ST - 2>();
            __syncthreads(); /* block m visible; the previous step done by every warp */
            if constexpr (C::DQ_LAG) count_in(m + 2); /* before the refill's loads, see above */
        }
        if (FOLD && !p.deterministic && it > 0) { /* settled at the previous step's mid-step */
            const int ready = dq_ready[(it - 1) & 1];
            if (ready >= 0) convert_dq(ready);
        }
        if constexpr (C::DQ_LAG)
            if (it > 0) dq_step(m + 1, (it - 1) & 1);

        const int lane = lane_id();
        const uint32_t q_off = stage * TileQ::BYTES;            /* sQ, sdO stage */
        const uint32_t do_off = q_off + ST * TileQ::BYTES;      /* sdO relative to sQ */
        const float *lse = sLSE + stage * BM, *dsum = sD + stage * BM;
        const int64_t m0 = (int64_t)m * BM;
        const int buf = C::DQ_LAG ? it & 1 : 0; /* this step's dS buffer */

        float acc_s[LS::MT][LS::NT][4], acc_dp[LS::MT][LS::NT][4];
        {
            const auto a = operand_addr<LS, TileQ, true, false>(sQ, warp, lane);
            const auto bk = operand_addr<LS, TileK, false, false>(sK, warp, lane);
            zero(acc_s);
            warp_gemm<LS, TileQ, TileK, false, false, HD, T>(acc_s, a, q_off, bk, 0);   // S = Q·Kᵀ
            auto gemm_dp = [&] { /* run by softmax_grad between P and dS */
                zero(acc_dp);
                warp_gemm<LS, TileQ, TileK, false, false, HD, T>(acc_dp, a, do_off, bk,
                                                                 TileK::BYTES);       // dP = dO·Vᵀ
            };
            softmax_grad_tile<LS, EARLY_P>(acc_s, acc_dp, lse, dsum, sp, softcap, mask,
                                           mask.tile_needs_mask(m0, BM, n0, BN), m0, n0,
                                           warp, lane, gemm_dp);
        }
        store_frags<LS, TileP, T>(sP, acc_s, 1.0f, warp, lane);
        store_frags<LS, TileP, T>(sdS + buf * TileP::BYTES, acc_dp, 1.0f, warp, lane);
        if constexpr (C::DQ_LAG && C::PDS_GROUP < 8) /* this slice's P, dS visible */
            ptx::bar_sync(1 + warp / C::PDS_GROUP, 32 * C::PDS_GROUP);
        else
            __syncthreads(); /* all of P and dS visible */
        /* Settle block m + 2 (two steps back), counted in a step ago (LAG: at this step's
         * top), then count in block m + 1 (LAG: next step), whose reductions went out
         * before the top barrier: a step apart, the atomic's answer is back before it is
         * read. */
        if (FOLD && !p.deterministic && tid == 0)
            dq_ready[it & 1] = m + 2 < m_end && completes(m + 2) ? m + 2 : -1;
        if constexpr (!C::DQ_LAG) count_in(m + 1);
        if constexpr (ST > 1) { /* refill the previous step's stage (every warp is past it) */
            if (m - (ST - 1) >= m_begin) load_stage(m - (ST - 1), (it + ST - 1) % ST);
            ptx::cp_async_commit(); /* one group per step, even when empty */
        }

        {
            const auto a = operand_addr<LKV, TileP, true, true>(sP, warp, lane);
            const auto bq = operand_addr<LKV, TileQ, false, true>(sQ, warp, lane);
            warp_gemm<LKV, TileP, TileQ, true, true, BM, T>(acc_dv, a, 0, bq, do_off);  // dV += Pᵀ·dO
            warp_gemm<LKV, TileP, TileQ, true, true, BM, T>(acc_dk, a,
                                                            (1 + buf) * TileP::BYTES, bq,
                                                            q_off);                   // dK += dSᵀ·Q
        }
        if constexpr (!C::DQ_LAG) dq_step(m, 0);
    }
    if constexpr (C::DQ_LAG) {
        __syncthreads(); /* the last step's dS from every warp */
        dq_step(m_begin, (m_end - 1 - m_begin) & 1);
    }
    if (FOLD && !p.deterministic) { /* settle the last three blocks */
        __syncthreads();
        const int ready = dq_ready[(m_end - 1 - m_begin) & 1]; /* block m_begin + 2 */
        if (ready >= 0) convert_dq(ready);
        if constexpr (C::DQ_LAG) count_in(m_begin + 1); /* LAG 0: in the last step */
        if (__syncthreads_or(tid == 0 && m_begin + 1 < m_end && completes(m_begin + 1)))
            convert_dq(m_begin + 1);
        count_in(m_begin);
        if (__syncthreads_or(tid == 0 && completes(m_begin))) convert_dq(m_begin);
    }
    __syncthreads(); /* done with sK, sV (the epilogue reuses them) */

    const int lane = lane_id();
    if (gqa) { /* add into the group sums; convert_dkv writes dK, dV */
        const int64_t row = si.ws_k_row0 + (int64_t)h_kv * p.ws_rows_k + n0;
        int32_t *sem = p.dkv_sem ? p.dkv_sem + row / BN : nullptr;
        if (sem) wait_turn(sem, h % p.group, tid);
        red_add_frags<LKV, NT>(p.dk_accum + row * HD, acc_dk, p.scale, tid);
        red_add_frags<LKV, NT>(p.dv_accum + row * HD, acc_dv, 1.0f, tid);
        if (sem) pass_turn(sem, tid);
        return;
    }
    /* Stage dK, dV in the (now free) sK, sV tiles, then write whole 16-byte chunks. */
    store_frags<LKV, TileK, T>(sK, acc_dk, p.scale, warp, lane);
    store_frags<LKV, TileK, T>(sV, acc_dv, 1.0f, warp, lane);
    __syncthreads();
    store_tile<TileK, HD, NT>(out_rows(p.dk, p.dk_stride), p.dk_stride[1], sK, kv_rows,
                              p.head_dim, tid);
    store_tile<TileK, HD, NT>(out_rows(p.dv, p.dv_stride), p.dv_stride[1], sV, kv_rows,
                              p.head_dim, tid);
    }
}

} // namespace fb
