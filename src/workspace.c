/* workspace.c — the offset and size of every workspace region of a plan.
 *
 * CUDA backend, all fp32, each region 256-byte aligned:
 *   lse_log2, dpsum   one float per query row of every (batch, head)
 *   dq_accum          kernel_head_dim floats per query row (summed over key blocks)
 *   dk_accum, dv_accum  GQA only: kernel_head_dim floats per key row of every kv head
 *   dq_count          an int32 per query row block: how many key blocks have added into
 *                     its dQ sum, so the last one converts it (deterministic mode: whose
 *                     turn it is to add; split plans that zero their dQ sums in the main
 *                     kernel: each head's first one counts its tickets, kernels/dq_zero.cuh;
 *                     split plans with the overlapped convert pass: each head's first one
 *                     counts the head's CTAs that are done adding, kernels/bwd_split.cuh)
 *   dkv_sem           deterministic GQA only: a turn counter per key row block
 * A "row" space per head is padded so that every kernel reads and writes whole tiles with
 * no bounds checks: padded batches use round_up(seqlen, tile) rows per (batch, head);
 * varlen uses round_up(total + batch * tile, tile) rows per head, sequence b starting at
 * floor((cu_seqlens[b] + b * tile) / tile) * tile (flash-backward-reference.md §5).
 * The preprocess zeroes each query block's dq_accum rows in the CTA of that block (unless
 * the split kernel does, src/launches.c), and dk_accum .. dkv_sem, which are adjacent, as
 * one range.
 *
 * CPU backend: scratch floats for one kv-head group (K, V, dK, dV), one query head (Q, dO,
 * dQ) and two score rows, at the plan's maximum lengths.
 */
#include "internal.h"

#define FB_WS_ALIGN 256

/* bytes = count * elem, rounded up to the region alignment; 0 on overflow. */
static int region(int64_t count, int64_t elem, int64_t *bytes)
{
    int64_t b;
    if (!fb_mul_i64(count, elem, &b) || !fb_add_i64(b, FB_WS_ALIGN - 1, &b)) return 0;
    *bytes = b / FB_WS_ALIGN * FB_WS_ALIGN;
    return 1;
}

static int32_t plan_cuda(flashbwd_plan *plan)
{
    const fb_problem_norm *p = &plan->prob;
    const int64_t bm = plan->config.block_m, bn = plan->config.block_n;
    const int64_t hd = plan->config.kernel_head_dim;
    /* Zeroed: a failed fb_mul_i64 leaves its output unwritten, and it is read below. */
    int64_t rows_q = 0, rows_k = 0, per_head_q = 0, per_head_k = 0, t = 0;
    int ok = 1;
    if (p->varlen) {
        ok &= fb_mul_i64(p->batch, bm, &t) && fb_add_i64(p->total_q, t, &t);
        per_head_q = fb_round_up(t, bm);
        ok &= fb_mul_i64(p->batch, bn, &t) && fb_add_i64(p->total_k, t, &t);
        per_head_k = fb_round_up(t, bn);
        ok &= fb_mul_i64(per_head_q, p->heads_q, &rows_q);
        ok &= fb_mul_i64(per_head_k, p->heads_kv, &rows_k);
    } else {
        per_head_q = fb_round_up(p->seqlen_q, bm);
        per_head_k = fb_round_up(p->seqlen_k, bn);
        ok &= fb_mul_i64(per_head_q, p->heads_q, &t) && fb_mul_i64(t, p->batch, &rows_q);
        ok &= fb_mul_i64(per_head_k, p->heads_kv, &t) && fb_mul_i64(t, p->batch, &rows_k);
    }
    const int gqa = p->heads_kv != p->heads_q;
    int64_t lse_b = 0, dps_b = 0, dq_b = 0, dk_b = 0, dv_b = 0, rows_hd = 0;
    int64_t dqs_b = 0, dkvs_b = 0;
    ok &= region(rows_q, 4, &lse_b) && region(rows_q, 4, &dps_b);
    ok &= fb_mul_i64(rows_q, hd, &rows_hd) && region(rows_hd, 4, &dq_b);
    if (gqa) {
        ok &= fb_mul_i64(rows_k, hd, &rows_hd) && region(rows_hd, 4, &dk_b);
        dv_b = dk_b;
    }
    ok &= region(rows_q / bm, 4, &dqs_b); /* rows are whole blocks: every per-head count is */
    if (p->deterministic && gqa) ok &= region(rows_k / bn, 4, &dkvs_b);
    int64_t total = 0;
    ok &= fb_add_i64(lse_b, dps_b, &total) && fb_add_i64(total, dq_b, &total) &&
          fb_add_i64(total, dk_b, &total) && fb_add_i64(total, dv_b, &total) &&
          fb_add_i64(total, dqs_b, &total) && fb_add_i64(total, dkvs_b, &total);
    FB_FAIL_IF(plan, !ok || (uint64_t)total > (uint64_t)SIZE_MAX, FLASHBWD_ERR_OVERFLOW,
               "the workspace size overflows (batch %lld, heads %lld, seqlen_q %lld, "
               "seqlen_k %lld)", (long long)p->batch, (long long)p->heads_q,
               (long long)p->seqlen_q, (long long)p->seqlen_k);

    fb_workspace_layout *ws = &plan->ws;
    ws->lse_log2 = 0;
    ws->dpsum = (size_t)lse_b;
    ws->dq_accum = ws->dpsum + (size_t)dps_b;
    ws->dk_accum = ws->dq_accum + (size_t)dq_b;
    ws->dv_accum = ws->dk_accum + (size_t)dk_b;
    ws->dq_count = ws->dv_accum + (size_t)dv_b;
    ws->dkv_sem = ws->dq_count + (size_t)dqs_b;
    ws->zero_begin = ws->dk_accum;
    ws->zero_bytes = (size_t)(dk_b + dv_b + dqs_b + dkvs_b);
    ws->total_bytes = (size_t)total;
    ws->rows_q = per_head_q;
    ws->rows_k = per_head_k;
    return FLASHBWD_OK;
}

static int32_t plan_cpu(flashbwd_plan *plan)
{
    const fb_problem_norm *p = &plan->prob;
    int64_t a, b, floats;
    int ok = fb_mul_i64(4 * p->seqlen_k + 3 * p->seqlen_q, p->head_dim, &a) &&
             fb_add_i64(a, 2 * p->seqlen_k, &floats) && fb_mul_i64(floats, 4, &b);
    FB_FAIL_IF(plan, !ok || (uint64_t)b > (uint64_t)SIZE_MAX, FLASHBWD_ERR_OVERFLOW,
               "the CPU workspace size overflows (seqlen_q %lld, seqlen_k %lld)",
               (long long)p->seqlen_q, (long long)p->seqlen_k);
    plan->ws.cpu_floats = (size_t)floats;
    plan->ws.total_bytes = (size_t)b;
    return FLASHBWD_OK;
}

int32_t fb_workspace_plan(flashbwd_plan *plan)
{
    return plan->prob.backend == FLASHBWD_BACKEND_CPU ? plan_cpu(plan) : plan_cuda(plan);
}
