/* cpu_ref.c — the CPU reference backend: the whole backward on host memory, fp32 math.
 *
 * It is the oracle of the GPU tests and lets bindings run end to end without a GPU, so it
 * favours plain, checkable code over speed: per (batch, kv head) it converts K and V to
 * fp32 once, then for each query head of the group and each query row computes
 *   score_j = scale * q.k_j            (or softcap * tanh(scale * q.k_j / softcap))
 *             - slope * |i + sk - sq - j|   (ALiBi)
 *   P_j = exp(score_j - LSE_i),  dP_j = dO_i . v_j,  D_i = dO_i . O_i
 *   dS_j = P_j (dP_j - D_i) (1 - tanh^2 when soft-capped)
 *   dV_j += P_j dO_i,  dK_j += dS_j q_i,  dQ_i += dS_j k_j
 * over the keys j the mask lets row i see, and finally scales dQ and dK by `scale`.
 * GQA group sums stay in fp32 until the one conversion at the end. Includes no CUDA header.
 */
#include <math.h>
#include <string.h>

#include "internal.h"

typedef struct seq {
    int64_t q_off, k_off; /* first packed row (varlen) */
    int64_t sq, sk;
} seq;

static const int32_t *ints(const flashbwd_plan *plan, int32_t id)
{
    return plan->tensors[id].ptr;
}

/* Read and check one batch's lengths (varlen) against the plan. */
static int32_t seq_info(flashbwd_plan *plan, int64_t b, seq *s)
{
    const fb_problem_norm *p = &plan->prob;
    if (!p->varlen) {
        s->q_off = s->k_off = 0;
        s->sq = p->seqlen_q, s->sk = p->seqlen_k;
        return FLASHBWD_OK;
    }
    const int32_t *cq = ints(plan, FLASHBWD_TENSOR_CU_SEQLENS_Q);
    const int32_t *ck = ints(plan, FLASHBWD_TENSOR_CU_SEQLENS_K);
    const int32_t *uq = ints(plan, FLASHBWD_TENSOR_SEQUSED_Q);
    const int32_t *uk = ints(plan, FLASHBWD_TENSOR_SEQUSED_K);
    const struct { const int32_t *cu, *used; int64_t total, max; const char *side; } side[2] = {
        {cq, uq, p->total_q, p->seqlen_q, "q"}, {ck, uk, p->total_k, p->seqlen_k, "k"}};
    for (int i = 0; i < 2; ++i) {
        const int32_t *cu = side[i].cu;
        FB_FAIL_IF(plan, cu[b] < 0 || cu[b + 1] < cu[b] || cu[b + 1] > side[i].total,
                   FLASHBWD_ERR_INVALID_LENGTHS,
                   "cu_seqlens_%s[%lld] = %d, cu_seqlens_%s[%lld] = %d: entries must rise from "
                   ">= 0 to <= total_%s = %lld", side[i].side, (long long)b, cu[b],
                   side[i].side, (long long)b + 1, cu[b + 1], side[i].side,
                   (long long)side[i].total);
        int64_t len = cu[b + 1] - cu[b];
        if (side[i].used) {
            FB_FAIL_IF(plan, side[i].used[b] < 0 || side[i].used[b] > len,
                       FLASHBWD_ERR_INVALID_LENGTHS,
                       "seqused_%s[%lld] = %d; expected 0..%lld (the cu_seqlens length)",
                       side[i].side, (long long)b, side[i].used[b], (long long)len);
            len = side[i].used[b];
        }
        FB_FAIL_IF(plan, len > side[i].max, FLASHBWD_ERR_INVALID_LENGTHS,
                   "sequence %lld has %s length %lld, longer than the plan's seqlen_%s = %lld",
                   (long long)b, side[i].side, (long long)len, side[i].side,
                   (long long)side[i].max);
        if (i == 0) s->q_off = cu[b], s->sq = len;
        else s->k_off = cu[b], s->sk = len;
    }
    return FLASHBWD_OK;
}

/* Address of row r, head h of 16-bit tensor id in batch b. */
static uint16_t *row_ptr(const flashbwd_plan *plan, int32_t id, int64_t b, int64_t r, int64_t h)
{
    const fb_tensor *t = &plan->tensors[id];
    int64_t off = plan->prob.varlen ? r * t->stride[0] + h * t->stride[1]
                                    : b * t->stride[0] + r * t->stride[1] + h * t->stride[2];
    return (uint16_t *)t->ptr + off;
}

static void load_rows(const flashbwd_plan *plan, int32_t id, int64_t b, int64_t r0, int64_t n,
                      int64_t h, float *dst)
{
    const int d = plan->prob.head_dim, dtype = plan->prob.dtype;
    for (int64_t r = 0; r < n; ++r) {
        const uint16_t *src = row_ptr(plan, id, b, r0 + r, h);
        for (int c = 0; c < d; ++c) dst[r * d + c] = fb_half_to_float(src[c], dtype);
    }
}

static void store_rows(const flashbwd_plan *plan, int32_t id, int64_t b, int64_t r0, int64_t n,
                       int64_t h, const float *src, float factor)
{
    const int d = plan->prob.head_dim, dtype = plan->prob.dtype;
    for (int64_t r = 0; r < n; ++r) {
        uint16_t *dst = row_ptr(plan, id, b, r0 + r, h);
        for (int c = 0; c < d; ++c) dst[c] = fb_float_to_half(src[r * d + c] * factor, dtype);
    }
}

static float dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

static void axpy(float *y, float a, const float *x, int n)
{
    for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

static float lse_at(const flashbwd_plan *plan, int64_t b, int64_t h, int64_t row)
{
    const fb_tensor *t = &plan->tensors[FLASHBWD_TENSOR_LSE];
    const float *lse = t->ptr;
    return plan->prob.varlen ? lse[h * t->stride[0] + row]
                             : lse[b * t->stride[0] + h * t->stride[1] + row];
}

static float slope_at(const flashbwd_plan *plan, int64_t b, int64_t h)
{
    const fb_tensor *t = &plan->tensors[FLASHBWD_TENSOR_ALIBI_SLOPES];
    if (!t->ptr) return 0.0f;
    const float *s = t->ptr;
    return t->rank == 2 ? s[b * t->stride[0] + h * t->stride[1]] : s[h * t->stride[0]];
}

/* One query head's contribution to dK, dV of its kv head, and its dQ. */
static void head_backward(const flashbwd_plan *plan, const seq *s, int64_t b, int64_t h,
                          const float *K, const float *V, float *dK, float *dV, float *Q,
                          float *dO, float *dQ, float *P, float *dS)
{
    const fb_problem_norm *p = &plan->prob;
    const int d = p->head_dim;
    const int64_t diag = s->sk - s->sq;
    const float slope = slope_at(plan, b, h);
    load_rows(plan, FLASHBWD_TENSOR_Q, b, s->q_off, s->sq, h, Q);
    load_rows(plan, FLASHBWD_TENSOR_DO, b, s->q_off, s->sq, h, dO);
    memset(dQ, 0, sizeof(float) * (size_t)(s->sq * d));
    for (int64_t i = 0; i < s->sq; ++i) {
        const float lse = lse_at(plan, b, h, s->q_off + i);
        if (lse == -INFINITY) continue; /* fully masked in the forward: zero gradients */
        const float *qi = Q + i * d, *doi = dO + i * d;
        /* D_i = dO_i . O_i, from the 16-bit O like the GPU preprocess */
        const uint16_t *orow = row_ptr(plan, FLASHBWD_TENSOR_O, b, s->q_off + i, h);
        float D = 0.0f;
        for (int c = 0; c < d; ++c) D += doi[c] * fb_half_to_float(orow[c], p->dtype);
        int64_t lo = 0, hi = s->sk; /* visible keys [lo, hi) */
        if (p->window_left >= 0 && i + diag - p->window_left > lo) lo = i + diag - p->window_left;
        if (p->window_right >= 0 && i + diag + p->window_right + 1 < hi)
            hi = i + diag + p->window_right + 1;
        for (int64_t j = lo; j < hi; ++j) {
            const float sc = dot(qi, K + j * d, d);
            float score, dtanh = 1.0f;
            if (p->softcap > 0.0f) {
                const float t = tanhf(sc * p->softmax_scale / p->softcap);
                score = p->softcap * t;
                dtanh = 1.0f - t * t;
            } else {
                score = sc * p->softmax_scale;
            }
            if (slope != 0.0f) score -= slope * fabsf((float)(i + diag - j));
            P[j] = expf(score - lse);
            dS[j] = P[j] * (dot(doi, V + j * d, d) - D) * dtanh;
        }
        float *dqi = dQ + i * d;
        for (int64_t j = lo; j < hi; ++j) {
            axpy(dV + j * d, P[j], doi, d);
            axpy(dK + j * d, dS[j], qi, d);
            axpy(dqi, dS[j], K + j * d, d);
        }
    }
    store_rows(plan, FLASHBWD_TENSOR_DQ, b, s->q_off, s->sq, h, dQ, p->softmax_scale);
}

int32_t fb_cpu_execute(flashbwd_plan *plan)
{
    const fb_problem_norm *p = &plan->prob;
    const int64_t d = p->head_dim, group = p->heads_q / p->heads_kv;
    for (int64_t b = 0; b < p->batch; ++b) { /* check every length before writing anything */
        seq s;
        FB_TRY(seq_info(plan, b, &s));
    }
    float *ws = plan->workspace;
    float *K = ws, *V = K + p->seqlen_k * d, *dK = V + p->seqlen_k * d;
    float *dV = dK + p->seqlen_k * d, *Q = dV + p->seqlen_k * d, *dO = Q + p->seqlen_q * d;
    float *dQ = dO + p->seqlen_q * d, *P = dQ + p->seqlen_q * d, *dS = P + p->seqlen_k;
    for (int64_t b = 0; b < p->batch; ++b) {
        seq s;
        FB_TRY(seq_info(plan, b, &s));
        for (int64_t hk = 0; hk < p->heads_kv; ++hk) {
            load_rows(plan, FLASHBWD_TENSOR_K, b, s.k_off, s.sk, hk, K);
            load_rows(plan, FLASHBWD_TENSOR_V, b, s.k_off, s.sk, hk, V);
            memset(dK, 0, sizeof(float) * (size_t)(s.sk * d));
            memset(dV, 0, sizeof(float) * (size_t)(s.sk * d));
            for (int64_t g = 0; g < group; ++g)
                head_backward(plan, &s, b, hk * group + g, K, V, dK, dV, Q, dO, dQ, P, dS);
            store_rows(plan, FLASHBWD_TENSOR_DK, b, s.k_off, s.sk, hk, dK, p->softmax_scale);
            store_rows(plan, FLASHBWD_TENSOR_DV, b, s.k_off, s.sk, hk, dV, 1.0f);
        }
    }
    return FLASHBWD_OK;
}
