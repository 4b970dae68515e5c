/* config_table.h — the one table of main-kernel tile configurations, per architecture.
 *
 * Plain C macros, included by src/config.c (to pick a row and size a plan) and by the CUDA
 * instantiation files in kernels/inst/ (to compile exactly these rows). A row is chosen by
 * the device's architecture class and the kernel head dim (head_dim rounded up onto 64,
 * 128, ...). Every row must fit its architecture's opt-in shared memory; the planning tests
 * check that for every row.
 *
 * Columns:
 *   ARCH   architecture class: 80 (A100), 86 (sm_86/sm_89), 90 (H100/H200)
 *   HD     kernel head dim: tensors with head_dim <= HD run here, columns >= head_dim off
 *   BM     query rows per main-loop step (BLOCK_M)
 *   BN     key rows per CTA (BLOCK_N)
 *   ST     pipeline stages of the Q/dO/LSE/D ring
 *   WS     warps along M of the S and dP GEMMs (the other 8/WS go along N)
 *   WK     warps along N of the dK and dV GEMMs (the other 8/WK go along head dim)
 *   WQ     warps along M of the dQ GEMM (the other 8/WQ go along head dim)
 *   LAG    1: the dQ GEMM of query block m runs at the start of step m + 1, from a second
 *          dS buffer, so a step needs one CTA barrier and one warp-group barrier instead
 *          of two CTA barriers (bwd_main.cuh); 0: dQ in its own step, one dS buffer
 *   FOLD   the main kernel converts dQ itself (no convert launch) when seqlen_k <= FOLD;
 *          -1: always. It saves a pass over the fp32 sums and a launch, and costs each step
 *          a count-in whose wait the kernel cannot fully hide (docs/performance.md).
 *          FOLD serves plans without a mask; FOLDM plans with one (causal or a window),
 *          where the count's cost was measured apart. On the H200 folding gains at hd64
 *          (past FMIN) and hd192 at every length, and at hd96 without a mask (+2..+3% at
 *          4k-16k keys); with a mask it is within +-1.3% there, and hd256 loses 3-6% past
 *          2048 keys either way, so those keep 2048 (the launch saving for small problems).
 *          hd128 keeps 2048 without a mask too: its unfolded kernel computes P early (below)
 *          and the folded one cannot without spilling dK/dV, so past 2048 keys the
 *          unfolded kernel is +1.9..+2.8% above the folded one.
 *          The sm_80/86 rows, not measured on their GPUs, take -1 at hd64 and 2048
 *          elsewhere.
 *   FMIN   and only when seqlen_k > FMIN (0: from the shortest). Where a CTA has few steps
 *          the fold's last count-ins, which wait for the CTA's final reductions, are not
 *          hidden: the H200's hd64 row converts in its own pass up to 1024 keys (+4..+8%
 *          causal, +4% at 512 keys non-causal; even at 1k non-causal, -1.2% at 2k).
 *   SPLIT  the split kernel (kernels/bwd_split.cuh: two 4-warp groups, one computing P and
 *          dV, the other dS and dK, side by side) serves plans with seqlen_k > SPLIT that it
 *          supports (not deterministic, no softcap); -1: never. It converts dQ in its own
 *          pass (FOLD does not apply to it).
 *   SST    the split kernel's pipeline stages (0: not compiled for this row)
 * Constraints (checked by static_assert in the kernel): every per-warp extent is a multiple
 * of 16, and the shared memory below fits the architecture.
 */
#ifndef FB_CONFIG_TABLE_H
#define FB_CONFIG_TABLE_H

#define FB_NUM_WARPS   8
#define FB_NUM_THREADS (FB_NUM_WARPS * 32)

/* Opt-in shared memory per block, bytes (CUDA programming guide, compute capabilities). */
#define FB_SMEM_LIMIT_SM80 166912 /* A100: 163 KB */
#define FB_SMEM_LIMIT_SM86 101376 /* sm_86, sm_89: 99 KB */
#define FB_SMEM_LIMIT_SM90 232448 /* H100, H200: 227 KB */

/*                 ARCH  HD   BM   BN  ST  WS  WK  WQ LAG FOLD FOLDM FMIN SPLIT SST  shared memory */
#define FB_CONFIG_TABLE(X)                                                              \
    X(80,  64, 128, 128, 2,  4,  4,  4, 0,   -1,   -1,    0,    -1,  0) /* 162 KB: BN 128 halves dQ atomics vs 64 */ \
    X(80,  96,  64, 128, 2,  2,  4,  4, 0, 2048, 2048,    0,    -1,  0) /* 129 KB                                 */ \
    X(80, 128,  64, 128, 2,  2,  4,  2, 0, 2048, 2048,    0,    -1,  0) /* 161 KB                                 */ \
    X(80, 192,  64,  64, 2,  2,  2,  2, 0, 2048, 2048,    0,    -1,  0) /* 161 KB                                 */ \
    X(80, 256,  64,  64, 1,  2,  2,  2, 0, 2048, 2048,    0,    -1,  0) /* 144 KB: one stage to fit 163 KB        */ \
    X(86,  64,  64, 128, 2,  2,  4,  2, 0,   -1,   -1,    0,    -1,  0) /* 97 KB                                  */ \
    X(86,  96,  64,  64, 2,  2,  4,  4, 0, 2048, 2048,    0,    -1,  0) /* 89 KB                                  */ \
    X(86, 128,  64,  64, 1,  2,  4,  2, 0, 2048, 2048,    0,    -1,  0) /* 80 KB: one stage to fit 99 KB          */ \
    X(86, 192,  32,  64, 1,  2,  4,  2, 0, 2048, 2048,    0,    -1,  0) /* 80 KB                                  */ \
    X(86, 256,  32,  32, 1,  2,  2,  2, 0, 2048, 2048,    0,    -1,  0) /* 68 KB: 16x8 S/dP warp blocks           */ \
    X(90,  64, 128, 128, 2,  2,  4,  4, 1,   -1,   -1, 1024,     0,  2) /* 194 KB: LAG 1 +1.5..+2.7% from 2k keys  */ \
    X(90,  96,  64, 128, 2,  2,  4,  4, 0,   -1, 2048,    0,     0,  2) /* 129 KB: LAG 0 is 1-3% above LAG 1      */ \
    X(90, 128,  64, 128, 2,  2,  4,  2, 0, 2048, 2048,    0,     0,  2) /* 161 KB: LAG 0 is 2-5% above LAG 1      */ \
    X(90, 192,  64,  64, 2,  2,  2,  2, 1,   -1,   -1,    0,     0,  2) /* 169 KB: LAG 0 spills 136 B, LAG 1 8 B  */ \
    X(90, 256,  64,  64, 2,  2,  2,  1, 1, 2048, 2048,    0,     0,  2) /* 217 KB: WQ 1 1.4-5.5% above WQ 2       */

/* EARLY_P(hd): which main kernels of head dim hd compute P before the dP GEMM, so that ptxas
 * interleaves the exponentials with that GEMM's mma (kernels/softmax_grad.cuh): bit 0 the
 * unfolded kernel, bit 1 the folded one. Measured on the H200 against P after the GEMM:
 * hd64 +1.1..+3.8% and hd256 +0.1..+2.4% with both; hd96/hd128 unfolded +2.5..+6.2% (no
 * spills, where the late order spilled 28-40 B), but hd128's folded kernel then keeps 16 of
 * the dK/dV accumulators in local memory (-2.7..-5.6%; hd96's folded kernel, spilling 60 B
 * where late spills 20, was not run); hd192 not measured, left late. */
#define FB_EARLY_P(hd) ((hd) == 96 || (hd) == 128 ? 1 : (hd) == 192 ? 0 : 3)

/* Shared memory of the main kernel, bytes, in the order the kernel lays it out:
 * K and V (BN x HD, 16-bit), then ST stages of Q and dO (BM x HD), then P and 1 + LAG dS
 * buffers (BM x BN), then ST stages of the fp32 row statistics LSE*log2(e) and D (BM floats
 * each). */
#define FB_SMEM_KV_BYTES(bm, bn, hd, st)         (2 * (bn) * (hd) * 2)
#define FB_SMEM_QDO_BYTES(bm, bn, hd, st)        ((st) * 2 * (bm) * (hd) * 2)
#define FB_SMEM_PDS_BYTES(bm, bn, lag)           ((2 + (lag)) * (bm) * (bn) * 2)
#define FB_SMEM_STATS_BYTES(bm, bn, hd, st)      ((st) * 2 * (bm) * 4)
#define FB_SMEM_MAIN_BYTES(bm, bn, hd, st, lag)                                        \
    (FB_SMEM_KV_BYTES(bm, bn, hd, st) + FB_SMEM_QDO_BYTES(bm, bn, hd, st) +            \
     FB_SMEM_PDS_BYTES(bm, bn, lag) + FB_SMEM_STATS_BYTES(bm, bn, hd, st))

/* FB_SPLIT_P16(hd): with bf16 inputs the split kernel's P warps also store P as fp16, which
 * the dS warps read for dS = P*(dP - D), so that dS is computed from P within 2^-11 rather
 * than bf16's 2^-8 (the dV GEMM takes the bf16 copy either way). Measured on the H200
 * (docs/performance.md): dQ/dK error against fp64 2.55e-3 with it, 3.17e-3 without (the
 * main kernel's, with fp32 P: 2.44e-3); the copy costs hd128 0..1% and hd256 +-1.5%, but
 * hd64 2..4% (its 64 x 64 P blocks double the stores), which keeps the bf16 P. */
#define FB_SPLIT_P16(hd) ((hd) > 64)

/* FB_SPLIT_DQ_LATE(hd): the split kernel's P warps take the previous step's dS for their
 * dQ, so that they never wait for the dS warps mid-step (a second dS buffer). Same run on
 * the H200 against taking the step's own dS: hd64 +10..+16%, hd96 +6.5..+10%, but hd128
 * -1.0..-0.1%, hd192 -1..-2.5% and hd256 -7..-12% (docs/performance.md, twelfth and
 * thirteenth sessions). */
#define FB_SPLIT_DQ_LATE(hd) ((hd) == 64 || (hd) == 96)

/* FB_SPLIT_DQ_SHIFT(hd): of each P warp's LayoutQ block of dQ, the last this many 8-column
 * tiles are computed by its dS-warp neighbour (warp + 4, same rows), moving mma work off
 * the P warps, whose loop is the longer one where the dS warps wait for P at BAR_P_READY
 * (ncu at hd128 16k: 11.7% of the dS warps' samples; docs/performance.md, eighteenth
 * session). Same run on the H200 against none: hd192 2 of 6 tiles +4.9..+11.5% (1 tile
 * +1.6..+3.8%), and 3 over 2 +0.8..+1.7% and +0.8..+2.0% in two calls (it spills 20/16 B
 * where 2 spills none); hd128 1 of 4 +0.6..+2.3% but 16k causal -0.6% (2 of 4 spill
 * 136/176 B: -2.3..-3.7%); hd96 within +-0.7% and hd64 1 of 4 -0.1..-1.2% (not taken: at
 * hd64 the roles wait on each other about equally). hd256 runs its dQ by row-tile halves. */
#define FB_SPLIT_DQ_SHIFT(hd) ((hd) == 192 ? 3 : (hd) == 128 ? 1 : 0)

/* FB_SPLIT_REFILL_DERIVED(hd): the split kernel's dS warps derive the Q/dO rows of each
 * ring refill from the block index at every step (kernels/bwd_split.cuh, grid_head_batch)
 * instead of keeping them from the preamble: only ptxas's allocation of their loop
 * changes. Same run on the H200 (docs/performance.md, fourteenth session): hd128
 * +0.9..+2.9% (512-16k keys, both masks), but hd64 -2..-7%, hd96 -0.5..-2.8%, hd256
 * -3%, hd192 mixed (-2.4..+1.6%). */
#define FB_SPLIT_REFILL_DERIVED(hd) ((hd) == 128)

/* FB_HEAD_GROUPS(hd): bwd_main's kernels of head dim hd (deterministic and softcap plans,
 * the sm_80/86 rows) map a grid of heads in groups (kernels/grid_order.cuh; src/launches.c
 * groups a masked plan's heads where this is 1, and otherwise puts all of a batch entry's
 * heads on x). hd128 and hd96 keep the plain order there, as their split kernels did.
 * FB_SPLIT_PLAIN(hd), FB_SPLIT_GROUPED(hd): the split kernel of head dim hd has an
 * instance that decodes only the plain orders (key blocks or all heads on x), one that
 * decodes heads in groups too (any order), or both; a plan whose heads run in groups
 * smaller than heads_q takes the grouped one, every other plan the plain one where the row
 * has it. The groups' extra division moves ptxas's allocation of the whole kernel, either
 * way (same runs on the H200, docs/performance.md): hd128 with it was 1.2-2.4% below the
 * plain order at every point but 16k causal, and at hd64 it raised the spills from 136/156
 * to 172/256 B, so both keep a plain instance for the plans that do not group (no mask, or
 * short: G = heads_q): hd64 +0.5..+2.6%, hd128 16k causal +1.6%; but hd256's plain
 * instance ran 1.1-2.3% below its grouped one, which serves all of its plans (as hd192's,
 * not measured without it). hd96 has no grouped instance (not measured: it would spill
 * 16 B where it spills none). */
#define FB_HEAD_GROUPS(hd) ((hd) != 128 && (hd) != 96)
#define FB_SPLIT_PLAIN(hd) ((hd) != 192 && (hd) != 256)
#define FB_SPLIT_GROUPED(hd) ((hd) != 96)

/* FB_SPLIT_KEYS_ON_X_FROM(hd): from this many key blocks a masked plan served by the
 * split kernel of head dim hd keeps key blocks on the main grid's x (one head after the
 * other, longest key block first, through the plain instance) instead of heads in groups;
 * 0: never. Same run on the H200 (docs/performance.md, twenty-second session), causal,
 * key blocks on x against the groups the rule in src/launches.c picks: hd128 16k +3.3%
 * bf16 / +1.8% fp16 (G = 4), 8k -1.4% / -1.9% (G = 8), 2k-4k -4..-5%; hd96 (heads on x)
 * -1.2..-3.7% at 2k-16k; hd64 and hd256 +0.6% / +0.1% at 16k, noise, so left as they are. */
#define FB_SPLIT_KEYS_ON_X_FROM(hd) ((hd) == 128 ? 128 : 0)

/* FB_SPLIT_FULL(hd): the split kernel of head dim hd has a third instance, a plain one
 * for plans none of whose tiles needs a mask or ALiBi (no window, not varlen, seqlen_k a
 * multiple of BLOCK_N, and at execute no ALiBi slopes bound: src/launches.c, split_full),
 * whose P warps compute the exponentials in one variant instead of the four chosen per
 * tile, with m_begin a constant 0. ptxas then allocates their loop without the mask's
 * values: at hd64 the dS loop has no local access and the P loop one load a step (the
 * plain instance: 136/156 B of spills, ~10 local accesses a step in the P loop, its bound
 * among them, reloaded behind the dQ reductions). Same run on the H200 against
 * FLASHBWD_SPLIT_FULL=0 (docs/performance.md, twentieth session): hd64 non-causal
 * +1.4..+1.5% bf16, +1.2..+2.4% fp16 (512-16k keys); a first build (3 local loads a step)
 * +1.8..+3.0% and +2.5..+3.7% in another call. hd128 -1.2..-1.6% (spills 40/28 B where the
 * plain instance spills 60/48, and loses anyway). A second P loop inside the plain
 * instance, chosen per CTA, gained less (+1.1..+2.3%) and cost its masked plans 3% at
 * 512/1k causal keys: hence an instance of its own. Since FB_SPLIT_PEEL the plain
 * instance runs these plans' steps in one variant too, and it is the faster one past
 * FB_SPLIT_FULL_KEYS (below). */
#define FB_SPLIT_FULL(hd) ((hd) == 64)

/* FB_SPLIT_FULL_KEYS: the longest seqlen_k a plan takes the full-tile instance for; past it
 * the plain instance serves, whose P warps run a plan without a mask in their one-variant
 * loop too (FB_SPLIT_PEEL), so only how ptxas compiled the loops differs. Same runs on
 * the H200 (docs/performance.md, fortieth session), hd64 non-causal, the plain instance
 * against the full-tile one: 512 keys 0.983 / 0.982 (bf16 / fp16), 1k 1.002 / 1.009, 2k 1.015 /
 * 1.023, 4k 1.020 / 1.035, 8k 1.020 / 1.039, 16k 1.023 / 1.034; sustained (clocks.py,
 * 3 s a run, twice) 4k +1.4 / +2.2%, 16k +1.7 / +2.5%. */
#define FB_SPLIT_FULL_KEYS 1024

/* FB_SPLIT_PEEL(hd): in the split kernel's plain and grouped instances the P warps run the
 * steps whose tiles need no mask (without a left window, ALiBi or a partial key block:
 * under a causal mask all but the diagonal's) in a loop of their own with one variant of
 * the exponentials, as the full-tile instance does, and the rest in the loop that chooses
 * per tile. Same run on the H200 against one loop (docs/performance.md, twentieth
 * session), causal 512 / 1k / 2k / 4k / 16k keys: hd64 0.996 / 1.009 / 1.016 / 1.026 /
 * 1.033; hd128 0.962-0.967 but 16k 1.002, non-causal 0.965-0.972; hd256 0.88-0.92.
 * A causal CTA's one masked step, where the diagonal meets its tile's corner, runs in the
 * one-variant loop too, the masked part of P then overwritten with zeros (bwd_split.cuh):
 * hd64 causal 512 / 1k / 2k +3.1 / +2.3 / +2.2% bf16 (plain instance) over a step of its
 * own, which had gained +2.5% at 512; 4k / 8k / 16k +1.6 / +0.2 / +0.2% bf16, +2.7 / +1.2 /
 * +1.1% fp16 (grouped instance) over the four-variant loop (twenty-eighth, twenty-ninth
 * sessions). */
#define FB_SPLIT_PEEL(hd) ((hd) == 64)

/* FB_SPLIT_TMA(hd): the split kernel's ring refill can go through the tensor copy engine
 * (sm_90): one dS thread asks for Q's and dO's boxes and the LSE and D rows, instead of
 * every dS thread issuing cp.async and computing their addresses (docs/performance.md,
 * lever (16c)), one box per tile panel: 64 columns with SWIZZLE_128B, 32 at hd96 with
 * SWIZZLE_64B. Execute falls back to cp.async for varlen, seqused_q, and tensors whose
 * base or strides are not 16-byte multiples (src/tma_maps.c). */
#define FB_SPLIT_TMA(hd) ((hd) > 0)

/* FB_SPLIT_DQ_OVERLAP(hd): split plans of head dim hd run the convert pass beside the split
 * kernel's last CTAs (src/launches.c, dq_overlap): each CTA counts itself in on its head
 * before its dV stores, and the pass, launched behind a programmatic edge, converts a head
 * once its count is complete. Same run on the H200 against the build without it
 * (docs/performance.md, thirty-first session): hd128 +2.4 / +3.1 / +1.4% without a mask
 * at 512 / 1k / 2k keys, causal +1.8 / +1.0 / +0.5%; hd256 +2.0 / +2.5 / +2.2%, causal
 * +1.9 / +0.6 / +0.7%; 16k keys within +-1.4% (the tail is 1 step in 128). hd64's CTAs are
 * short and it gained nothing (-1.1..+1.7%), so its kernels are compiled without it. */
#define FB_SPLIT_DQ_OVERLAP(hd) ((hd) > 64)

/* FB_SPLIT_DQ_ZERO_BYTES(hd): the split kernel of head dim hd zeroes a head's fp32 dQ sums
 * itself (kernels/dq_zero.cuh: the first four P warps of the head's CTAs, a quarter each,
 * while their dS warps load K and V) when the sums, round_up(seqlen_q, BM) x hd x 4 bytes,
 * are at most this; such plans put heads on the main grid's x (src/launches.c). 0: never,
 * and the kernel keeps its prologue as before. Same run on the H200 against the zeroing
 * in the preprocess and main's prologue (docs/performance.md, twenty-sixth session): hd64
 * +2.5 / +1.9 / +0.8% without a mask at 512 / 1k / 2k keys, causal level; but hd128
 * causal 1k -2.5%, and the reworked prologue cost hd96, hd192 and hd256 2-9%, zeroing or
 * not. */
#define FB_SPLIT_DQ_ZERO_BYTES(hd) ((hd) == 64 ? 512 * 1024 : 0)

/* Shared memory of the split kernel: K and V, SST stages of Q and dO, P, dS (two buffers
 * with FB_SPLIT_DQ_LATE) and the fp16 copy of P (FB_SPLIT_P16; reserved for fp16 inputs
 * too), SST stages of LSE*log2(e) and D, then the ring's two mbarriers per stage (8 bytes
 * each). */
#define FB_SMEM_SPLIT_BYTES(bm, bn, hd, sst)                                           \
    (FB_SMEM_KV_BYTES(bm, bn, hd, sst) + FB_SMEM_QDO_BYTES(bm, bn, hd, sst) +          \
     FB_SMEM_PDS_BYTES(bm, bn, FB_SPLIT_DQ_LATE(hd)) +                                \
     FB_SPLIT_P16(hd) * (bm) * (bn) * 2 +                                              \
     FB_SMEM_STATS_BYTES(bm, bn, hd, sst) + (sst) * 2 * 8)

#endif /* FB_CONFIG_TABLE_H */
