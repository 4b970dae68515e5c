/* The README's example: one backward pass on the CPU backend, checked by two identities
 * that hold for any inputs when O and LSE come from the forward: for every head,
 * sum_j dV_j = sum_i dO_i (softmax rows sum to 1) and sum_j dK_j = 0 (so do dS rows).
 * Build: cc readme_example.c -lflashbwd -lm */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashbwd.h"

enum { B = 1, S = 64, H = 2, D = 32 }; /* batch, seqlen, heads, head_dim */

static uint16_t to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }
static float from_bf16(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
#define AT(x, s, h, d) x[(((s) * H) + (h)) * D + (d)] /* packed (batch, seq, head, dim), B = 1 */

int main(void)
{
    static uint16_t q[S * H * D], k[S * H * D], v[S * H * D], o[S * H * D], dout[S * H * D];
    static uint16_t dq[S * H * D], dk[S * H * D], dv[S * H * D];
    static float lse[H * S]; /* (batch, head, seq) */
    for (int i = 0; i < S * H * D; ++i) {
        q[i] = to_bf16(sinf(i * 0.37f)), k[i] = to_bf16(cosf(i * 0.11f));
        v[i] = to_bf16(sinf(i * 0.05f + 1)), dout[i] = to_bf16(cosf(i * 0.71f));
    }
    /* The forward pass (causal), standing in for the one that produced o and lse. */
    const float scale = 1.0f / sqrtf(D);
    for (int h = 0; h < H; ++h)
        for (int i = 0; i < S; ++i) {
            float s[S], mx = -INFINITY, sum = 0;
            for (int j = 0; j <= i; ++j) {
                s[j] = 0;
                for (int c = 0; c < D; ++c) s[j] += from_bf16(AT(q, i, h, c)) * from_bf16(AT(k, j, h, c));
                s[j] *= scale, mx = fmaxf(mx, s[j]);
            }
            for (int j = 0; j <= i; ++j) sum += expf(s[j] - mx);
            lse[h * S + i] = mx + logf(sum);
            for (int c = 0; c < D; ++c) {
                float acc = 0;
                for (int j = 0; j <= i; ++j) acc += expf(s[j] - mx) / sum * from_bf16(AT(v, j, h, c));
                AT(o, i, h, c) = to_bf16(acc);
            }
        }

    /* The backward pass: plan once, bind tensors (NULL strides = packed), execute. */
    flashbwd_problem p = {0};
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.backend = FLASHBWD_BACKEND_CPU; /* FLASHBWD_BACKEND_CUDA with device pointers on a GPU */
    p.dtype = FLASHBWD_DTYPE_BF16;
    p.batch = B, p.heads_q = H, p.seqlen_q = S, p.seqlen_k = S, p.head_dim = D, p.causal = 1;
    flashbwd_plan *plan;
    if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK) {
        fprintf(stderr, "plan: %s\n", flashbwd_last_error());
        return 1;
    }
    void *tensors[] = {q, k, v, o, dout, lse, dq, dk, dv};
    for (int32_t id = FLASHBWD_TENSOR_Q; id <= FLASHBWD_TENSOR_DV; ++id)
        flashbwd_plan_set_tensor(plan, id, tensors[id - 1], NULL, 0);
    size_t bytes;
    flashbwd_plan_workspace_size(plan, &bytes);
    void *workspace = malloc(bytes);
    flashbwd_plan_set_workspace(plan, workspace, bytes);
    const int32_t status = flashbwd_execute(plan, NULL /* stream */);
    if (status != FLASHBWD_OK) fprintf(stderr, "execute: %s\n", flashbwd_plan_last_error(plan));
    flashbwd_plan_destroy(plan);
    free(workspace);
    if (status != FLASHBWD_OK) return 1;

    double worst = 0; /* the two identities, relative to the size of sum_i dO_i */
    for (int h = 0; h < H; ++h)
        for (int c = 0; c < D; ++c) {
            double sum_dv = 0, sum_do = 0, sum_dk = 0;
            for (int j = 0; j < S; ++j) sum_dv += from_bf16(AT(dv, j, h, c)), sum_dk += from_bf16(AT(dk, j, h, c));
            for (int i = 0; i < S; ++i) sum_do += from_bf16(AT(dout, i, h, c));
            worst = fmax(worst, fmax(fabs(sum_dv - sum_do), fabs(sum_dk)) / (fabs(sum_do) + 1));
        }
    printf("dq[0] = %g, dk[0] = %g, dv[0] = %g; identities hold to %.1e\n", from_bf16(dq[0]),
           from_bf16(dk[0]), from_bf16(dv[0]), worst);
    return worst < 0.05 ? 0 : 1;
}
