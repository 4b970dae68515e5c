/* demo.c — the README's main job: one real backward pass, checked, with its throughput.
 *
 * On a machine with a CUDA GPU it runs the CUDA backend (batch 2, 8 heads, seqlen 1024,
 * head_dim 128, causal); elsewhere the CPU reference backend on a smaller problem. Inputs are
 * random with O and LSE from a host forward; the check recomputes the gradients of one head
 * in fp64 and prints their relative error. Exit status 0 only if the check passes.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef FB_WITH_CUDA
#include <cuda_runtime_api.h> /* before check.h, which then defines CUDA_CHECK */
#endif

#include "check.h"
#include "flashbwd.h"
#include "inputs.h"

enum { T_Q, T_K, T_V, T_O, T_DO, T_DQ, T_DK, T_DV, T_N };
static const int32_t ids[T_N] = {FLASHBWD_TENSOR_Q,  FLASHBWD_TENSOR_K,  FLASHBWD_TENSOR_V,
                                 FLASHBWD_TENSOR_O,  FLASHBWD_TENSOR_DO, FLASHBWD_TENSOR_DQ,
                                 FLASHBWD_TENSOR_DK, FLASHBWD_TENSOR_DV};

/* fp64 gradients of head (b = 0, h = 0) and their relative error against the library's. */
static double check_head0(uint16_t *const x[T_N], const float *lse, int64_t s, int64_t heads,
                          int64_t d, int causal, int32_t dtype)
{
#define AT(t, row, c) ((double)in_to_float(x[t][((row) * heads) * d + (c)], dtype))
    const double scale = 1.0 / sqrt((double)d);
    double *dq = calloc((size_t)(s * d), sizeof(double)), *dk = calloc((size_t)(s * d), sizeof(double));
    double *dv = calloc((size_t)(s * d), sizeof(double));
    for (int64_t i = 0; i < s; ++i) {
        double D = 0;
        for (int64_t c = 0; c < d; ++c) D += AT(T_DO, i, c) * AT(T_O, i, c);
        for (int64_t j = 0; j < (causal ? i + 1 : s); ++j) {
            double qk = 0, dp = 0;
            for (int64_t c = 0; c < d; ++c) qk += AT(T_Q, i, c) * AT(T_K, j, c), dp += AT(T_DO, i, c) * AT(T_V, j, c);
            const double p = exp(qk * scale - lse[i]), ds = p * (dp - D) * scale;
            for (int64_t c = 0; c < d; ++c) {
                dq[i * d + c] += ds * AT(T_K, j, c);
                dk[j * d + c] += ds * AT(T_Q, i, c);
                dv[j * d + c] += p * AT(T_DO, i, c);
            }
        }
    }
    double worst = 0;
    double *ref[3] = {dq, dk, dv};
    for (int g = 0; g < 3; ++g) {
        double num = 0, den = 0;
        for (int64_t i = 0; i < s; ++i)
            for (int64_t c = 0; c < d; ++c) {
                const double got = AT(T_DQ + g, i, c), want = ref[g][i * d + c];
                num += (got - want) * (got - want), den += want * want;
            }
        const double err = isfinite(num) ? sqrt(num / den) : INFINITY;
        printf("  check: %s of head 0 vs fp64: rel error %.2e\n", g == 0 ? "dQ" : g == 1 ? "dK" : "dV", err);
        if (!(err <= worst)) worst = err;
    }
#undef AT
    free(dq), free(dk), free(dv);
    return worst;
}

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
    const int32_t dtype = FLASHBWD_DTYPE_BF16;
    const int causal = 1;
    flashbwd_problem p;
    memset(&p, 0, sizeof p);
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.backend = FLASHBWD_BACKEND_CUDA;
    p.dtype = dtype;
    p.batch = 2, p.heads_q = 8, p.seqlen_q = p.seqlen_k = 1024, p.head_dim = 128;
    p.causal = causal;
    flashbwd_plan *plan = NULL;
    int32_t st = flashbwd_plan_create(&p, &plan);
    if (st != FLASHBWD_OK) {
        printf("flashbwd %u: no usable GPU (%s); using the CPU reference backend\n",
               flashbwd_version(), flashbwd_last_error());
        p.backend = FLASHBWD_BACKEND_CPU;
        p.batch = 1, p.heads_q = 4, p.seqlen_q = p.seqlen_k = 512, p.head_dim = 64;
        CHECK(flashbwd_plan_create(&p, &plan));
    }
    const int gpu = p.backend == FLASHBWD_BACKEND_CUDA;
    const int64_t b = p.batch, h = p.heads_q, s = p.seqlen_q, d = p.head_dim, n = b * s * h * d;
    printf("flashbwd %u: %s backward, %s, batch %lld, heads %lld, seqlen %lld, head_dim %lld, %s\n",
           flashbwd_version(), gpu ? "CUDA" : "CPU", "bf16", (long long)b, (long long)h,
           (long long)s, (long long)d, causal ? "causal" : "non-causal");

    uint16_t *x[T_N];
    for (int t = 0; t < T_N; ++t) x[t] = malloc((size_t)n * 2);
    float *lse = malloc(sizeof(float) * (size_t)(b * h * s)), *row = malloc(sizeof(float) * (size_t)s);
    in_fill(x[T_Q], (size_t)n, dtype, 1), in_fill(x[T_K], (size_t)n, dtype, 2);
    in_fill(x[T_V], (size_t)n, dtype, 3), in_fill(x[T_DO], (size_t)n, dtype, 4);
    for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t hi = 0; hi < h; ++hi)
            in_forward_head(x[T_Q], x[T_K], x[T_V], x[T_O], lse, bi, hi, s, s, h, d, causal, dtype, row);
    for (int t = T_DQ; t <= T_DV; ++t) memset(x[t], 0xff, (size_t)n * 2); /* poison */

    /* The workspace from the library: host memory for the CPU backend; on a GPU, device
     * memory that is compressible where the GPU has compute data compression. */
    size_t ws_bytes = 0;
    int32_t ws_compressed = 0;
    double ms = 0;
    void *ws = NULL;
#ifdef FB_WITH_CUDA
    void *dev[T_N] = {0}, *dlse = NULL; /* device copies (GPU run) */
#endif
    if (!gpu) {
        for (int t = 0; t < T_N; ++t) CHECK(flashbwd_plan_set_tensor(plan, ids[t], x[t], NULL, 0));
        CHECK(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_LSE, lse, NULL, 0));
        CHECK(flashbwd_workspace_alloc(plan, &ws, &ws_bytes, &ws_compressed));
        CHECK(flashbwd_plan_set_workspace(plan, ws, ws_bytes));
        const double t0 = seconds();
        CHECK(flashbwd_execute(plan, NULL));
        ms = (seconds() - t0) * 1e3;
    } else {
#ifdef FB_WITH_CUDA
        for (int t = 0; t < T_N; ++t) {
            CUDA_CHECK(cudaMalloc(&dev[t], (size_t)n * 2));
            CUDA_CHECK(cudaMemcpy(dev[t], x[t], (size_t)n * 2, cudaMemcpyHostToDevice));
            CHECK(flashbwd_plan_set_tensor(plan, ids[t], dev[t], NULL, 0));
        }
        CUDA_CHECK(cudaMalloc(&dlse, sizeof(float) * (size_t)(b * h * s)));
        CUDA_CHECK(cudaMemcpy(dlse, lse, sizeof(float) * (size_t)(b * h * s), cudaMemcpyHostToDevice));
        CHECK(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_LSE, dlse, NULL, 0));
        CHECK(flashbwd_workspace_alloc(plan, &ws, &ws_bytes, &ws_compressed));
        CHECK(flashbwd_plan_set_workspace(plan, ws, ws_bytes));
        printf("  workspace %.1f MB%s\n", ws_bytes / 1e6, ws_compressed ? ", compressible" : "");
        cudaEvent_t e0, e1;
        CUDA_CHECK(cudaEventCreate(&e0));
        CUDA_CHECK(cudaEventCreate(&e1));
        CHECK(flashbwd_execute(plan, NULL)); /* warm-up */
        float best = 1e30f;
        for (int it = 0; it < 10; ++it) {
            CUDA_CHECK(cudaEventRecord(e0, NULL));
            CHECK(flashbwd_execute(plan, NULL));
            CUDA_CHECK(cudaEventRecord(e1, NULL));
            CUDA_CHECK(cudaEventSynchronize(e1));
            float t;
            CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
            if (t < best) best = t;
        }
        ms = best;
        for (int t = T_DQ; t <= T_DV; ++t)
            CUDA_CHECK(cudaMemcpy(x[t], dev[t], (size_t)n * 2, cudaMemcpyDeviceToHost));
#endif
    }
    const double tflops = in_bwd_flops(b, h, s, s, d, causal) / (ms * 1e-3) / 1e12;
    printf("  time %.3f ms, %.2f TFLOP/s (FLOPs: 2.5 x forward, causal halved)\n", ms, tflops);
    const double err = check_head0(x, lse, s, h, d, causal, dtype);
    const int ok = err <= 1e-2;
    printf("  %s (bound 1e-2 for bf16)\n", ok ? "PASS" : "FAIL");
#ifdef FB_WITH_CUDA
    if (gpu) {
        for (int t = 0; t < T_N; ++t) CUDA_CHECK(cudaFree(dev[t]));
        CUDA_CHECK(cudaFree(dlse));
        CHECK(flashbwd_workspace_free(ws));
        ws = NULL;
    }
#endif
    if (!gpu) CHECK(flashbwd_workspace_free(ws));
    flashbwd_plan_destroy(plan);
    for (int t = 0; t < T_N; ++t) free(x[t]);
    free(lse), free(row);
    return ok ? 0 : 1;
}
