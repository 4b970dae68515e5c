/* bench.c — times flashbwd's backward on the GPU over FlashAttention's benchmark grid.
 *
 *   flashbwd_bench [--dims 64,128] [--seqlens 512,...,16384] [--causal 0,1] [--dtype bf16|fp16]
 *                  [--kv-heads-div N] [--deterministic 0|1] [--host-costs 0|1] [--iters 30]
 *                  [--window LEFT] [--varlen 0|1] [--heads N] [--batch N]
 *                  [--workspace library|malloc]
 * --window: a sliding window of LEFT keys (with the causal flag: causal + window; without:
 *   LEFT on both sides). --varlen: packed sequences of mixed lengths (seqlen/4 .. seqlen,
 *   16k tokens in all). Windowed and varlen FLOPs count the visible (query, key) pairs.
 * --workspace: flashbwd_workspace_alloc's memory (the default: compressible on Hopper), or
 *   plain cudaMalloc (what sessions before the thirty-fifth timed).
 *
 * Grid: batch·seqlen = 16384 tokens, heads = 2048 / head_dim (FlashAttention's benchmark),
 * or --heads N (how the count of CTAs against the SMs' waves moves the figure), and
 * --batch N in place of 16384 / seqlen (with --heads: the same work in another grid order).
 * Inputs are random normals; O is random and LSE = log(visible keys) + 0.5, the value a
 * forward gives for such scores, so P stays in range (timing on zeros would flatter us).
 * Each point: 3 warm-ups, then the median of --iters runs timed with CUDA events. Prints
 * TFLOP/s by the FLOP convention of design.md. Also measures execute's host-side cost
 * and plan creation time on a tiny problem.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "check.h"
#include "flashbwd.h"
#include "inputs.h"

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        out[n++] = atoi(s);
        const char *c = strchr(s, ',');
        if (!c) break;
        s = c + 1;
    }
    return n;
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double fb_bench_launch_floor_us(int launches, int calls, void *stream, int small); /* launch_floor.cu */
double fb_bench_graph_floor_us(int launches, int calls, void *stream);

/* Microseconds per call of set_tensor(id, a or b, alternating) + execute, over m calls. */
static double rebind_and_execute_us(flashbwd_plan *plan, int32_t id, void *a, void *b, int m,
                                    cudaStream_t s)
{
    const double t0 = now();
    for (int i = 0; i < m; ++i) {
        CHECK(flashbwd_plan_set_tensor(plan, id, i & 1 ? b : a, NULL, 0));
        CHECK(flashbwd_execute(plan, s));
    }
    const double us = (now() - t0) / m * 1e6;
    CUDA_CHECK(cudaStreamSynchronize(s));
    return us;
}

/* Plan creation and execute on one tiny problem (1 x 1 x 128 x 64), microseconds per call:
 * out[0] plan_create (device cache warm), out[1] execute with unchanged bindings, out[2]
 * execute after rebinding dQ (set_tensor + execute, alternating two buffers), out[3] the
 * same rebinding Q, whose tensor map (split kernel, TMA rows) execute then encodes again;
 * *launches gets the plan's launch count. graph = 0 creates the plans with
 * FLASHBWD_LAUNCH_GRAPH=0. */
static void host_cost_run(int32_t dtype, int graph, cudaStream_t s, double out[4],
                          int *launches)
{
    if (!graph) setenv("FLASHBWD_LAUNCH_GRAPH", "0", 1);
    flashbwd_problem p;
    memset(&p, 0, sizeof p);
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.dtype = dtype, p.batch = 1, p.heads_q = 1, p.seqlen_q = p.seqlen_k = 128, p.head_dim = 64;
    flashbwd_plan *plan;
    CHECK(flashbwd_plan_create(&p, &plan)); /* fills the device cache */
    flashbwd_plan_destroy(plan);
    const int n = 2000;
    double t0 = now();
    for (int i = 0; i < n; ++i) {
        CHECK(flashbwd_plan_create(&p, &plan));
        flashbwd_plan_destroy(plan);
    }
    out[0] = (now() - t0) / n * 1e6;
    CHECK(flashbwd_plan_create(&p, &plan));
    unsetenv("FLASHBWD_LAUNCH_GRAPH");
    const size_t elems = 128 * 64;
    void *buf[11];
    for (int i = 0; i < 11; ++i) {
        CUDA_CHECK(cudaMalloc(&buf[i], elems * 4));
        CUDA_CHECK(cudaMemset(buf[i], 0, elems * 4));
    }
    for (int id = FLASHBWD_TENSOR_Q; id <= FLASHBWD_TENSOR_DV; ++id)
        CHECK(flashbwd_plan_set_tensor(plan, id, buf[id - 1], NULL, 0));
    size_t ws_bytes;
    void *ws;
    CHECK(flashbwd_plan_workspace_size(plan, &ws_bytes));
    CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
    CHECK(flashbwd_plan_set_workspace(plan, ws, ws_bytes));
    for (int i = 0; i < 100; ++i) CHECK(flashbwd_execute(plan, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    const int m = 200; /* small enough not to fill the launch queue */
    t0 = now();
    for (int i = 0; i < m; ++i) CHECK(flashbwd_execute(plan, s));
    out[1] = (now() - t0) / m * 1e6;
    CUDA_CHECK(cudaStreamSynchronize(s));
    out[2] = rebind_and_execute_us(plan, FLASHBWD_TENSOR_DQ, buf[6], buf[9], m, s);
    out[3] = rebind_and_execute_us(plan, FLASHBWD_TENSOR_Q, buf[0], buf[10], m, s);
    flashbwd_plan_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = FLASHBWD_PLAN_INFO_STRUCT_SIZE;
    CHECK(flashbwd_plan_get_info(plan, &info));
    *launches = 0; /* table entries with a grid (a folded dQ conversion has none) */
    for (int l = 0; l < info.num_launches; ++l) *launches += info.grid[l][0] > 0;
    for (int i = 0; i < 11; ++i) CUDA_CHECK(cudaFree(buf[i]));
    CUDA_CHECK(cudaFree(ws));
    flashbwd_plan_destroy(plan);
}

/* Host costs of plan creation and execute, with the plan's launch graph (the default) and
 * with direct launches, beside the floors of the machine's launch paths. */
static void host_costs(int32_t dtype)
{
    cudaStream_t s;
    CUDA_CHECK(cudaStreamCreate(&s));
    double g[4], d[4];
    int launches;
    host_cost_run(dtype, 1, s, g, &launches);
    host_cost_run(dtype, 0, s, d, &launches);
    printf("host cost: plan_create %.2f us (device cache warm), execute %.2f us per call "
           "(enqueue only, %d launches as the plan's graph), set_tensor + execute %.2f us "
           "(new dQ binding each call), %.2f us (new Q binding: its tensor map encoded)\n",
           g[0], g[1], launches, g[2], g[3]);
    printf("host cost without the graph (FLASHBWD_LAUNCH_GRAPH=0): plan_create %.2f us, "
           "execute %.2f us, set_tensor + execute %.2f us (dQ), %.2f us (Q)\n", d[0], d[1],
           d[2], d[3]);
    const int m = 200;
    const double floor_us = fb_bench_launch_floor_us(launches, m, s, 0);
    const double small_us = fb_bench_launch_floor_us(launches, m, s, 1);
    const double graph_us = fb_bench_graph_floor_us(launches, m, s);
    if (floor_us < 0 || small_us < 0 || graph_us < 0) exit(1);
    printf("host cost floor: %d empty launches with execute's parameter size %.2f us per "
           "call (direct execute's own work: %.2f us); with 8-byte parameters %.2f us; as "
           "one captured graph %.2f us (graph execute's own work: %.2f us)\n",
           launches, floor_us, d[1] - floor_us, small_us, graph_us, g[1] - graph_us);
    CUDA_CHECK(cudaStreamDestroy(s));
}

int main(int argc, char **argv)
{
    int dims[8] = {64, 128}, ndims = 2;
    int seqlens[16] = {512, 1024, 2048, 4096, 8192, 16384}, nseq = 6;
    int causals[2] = {0, 1}, ncausal = 2;
    int iters = 30, kv_div = 1, deterministic = 0, host_cost = 1, window = -1, varlen = 0;
    int heads = 0; /* 0: 2048 / head_dim */
    int batch = 0; /* 0: 16384 / seqlen */
    int ws_library = 1, ws_plain_reported = 0;
    int32_t dtype = FLASHBWD_DTYPE_BF16;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--dims")) ndims = parse_list(argv[i + 1], dims, 8);
        else if (!strcmp(argv[i], "--seqlens")) nseq = parse_list(argv[i + 1], seqlens, 16);
        else if (!strcmp(argv[i], "--causal")) ncausal = parse_list(argv[i + 1], causals, 2);
        else if (!strcmp(argv[i], "--iters")) iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--kv-heads-div")) kv_div = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--heads")) heads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--deterministic")) deterministic = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--host-costs")) host_cost = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--window")) window = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--varlen")) varlen = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--workspace")) ws_library = strcmp(argv[i + 1], "malloc") != 0;
        else if (!strcmp(argv[i], "--dtype"))
            dtype = !strcmp(argv[i + 1], "fp16") ? FLASHBWD_DTYPE_FP16 : FLASHBWD_DTYPE_BF16;
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (iters < 1 || iters > 1000) iters = 30;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    if (host_cost) host_costs(dtype);
    printf("%4s %6s %6s %5s %5s %4s %3s %10s %9s\n", "d", "causal", "seqlen", "batch", "heads",
           "hkv", "det", "ms", "TFLOP/s");
    float *times = malloc(sizeof(float) * (size_t)iters);
    for (int di = 0; di < ndims; ++di)
        for (int ci = 0; ci < ncausal; ++ci)
            for (int si = 0; si < nseq; ++si) {
                const int64_t d = dims[di], s = seqlens[si];
                const int64_t b = batch > 0 ? batch : 16384 / s > 0 ? 16384 / s : 1;
                const int64_t h = heads > 0 ? heads : 2048 / d;
                const int64_t hkv = h / kv_div > 0 ? h / kv_div : 1;
                const int causal = causals[ci];
                flashbwd_problem p;
                memset(&p, 0, sizeof p);
                p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
                p.dtype = dtype, p.batch = b, p.heads_q = h, p.heads_kv = hkv;
                p.seqlen_q = p.seqlen_k = s, p.head_dim = (int32_t)d, p.causal = causal;
                p.deterministic = deterministic;
                if (window >= 0) {
                    p.use_window = 1, p.window_left = window;
                    p.window_right = causal ? 0 : window;
                }
                /* varlen: lengths from seqlen/4 to seqlen, as many as fit 16k tokens */
                int32_t cu[1025] = {0};
                int64_t nseqs = b;
                double pairs = 0; /* visible (query, key) pairs, for FLOPs */
                if (varlen) {
                    uint64_t st = 12345;
                    nseqs = 0;
                    int64_t total = 0;
                    while (nseqs < 1024) {
                        int64_t len = s / 4 + (int64_t)(in_next(&st) % (uint64_t)(s - s / 4 + 1));
                        if (total + len > 16384) len = 16384 - total;
                        if (len <= 0) break;
                        cu[nseqs + 1] = (int32_t)(total + len);
                        total += len, ++nseqs;
                    }
                    p.varlen = 1, p.batch = nseqs, p.total_q = p.total_k = total;
                }
                for (int64_t q = 0; q < (varlen ? nseqs : 1); ++q) {
                    const int64_t len = varlen ? cu[q + 1] - cu[q] : s;
                    for (int64_t i = 0; i < len; ++i) {
                        int64_t lo = 0, hi = len;
                        if (causal) hi = i + 1;
                        if (window >= 0) {
                            lo = i - window > 0 ? i - window : 0;
                            if (!causal) hi = i + window + 1 < len ? i + window + 1 : len;
                        }
                        pairs += (double)(hi - lo) * (varlen ? 1 : (double)b);
                    }
                }
                flashbwd_plan *plan;
                CHECK(flashbwd_plan_create(&p, &plan));
                const int64_t rows = varlen ? cu[nseqs] : b * s;
                const size_t nq = (size_t)(rows * h * d), nk = (size_t)(rows * hkv * d);
                uint16_t *host = malloc(nq * 2);
                void *t[10] = {0};
                const size_t sizes[10] = {0, nq, nk, nk, nq, nq, 0, nq, nk, nk};
                for (int id = FLASHBWD_TENSOR_Q; id <= FLASHBWD_TENSOR_DV; ++id) {
                    if (id == FLASHBWD_TENSOR_LSE) continue;
                    CUDA_CHECK(cudaMalloc(&t[id], sizes[id] * 2));
                    in_fill(host, sizes[id], dtype, (uint64_t)id * 7 + (uint64_t)s);
                    CUDA_CHECK(cudaMemcpy(t[id], host, sizes[id] * 2, cudaMemcpyHostToDevice));
                    CHECK(flashbwd_plan_set_tensor(plan, id, t[id], NULL, 0));
                }
                float *lse = malloc(sizeof(float) * (size_t)(rows * h));
                for (int64_t r = 0; r < rows * h; ++r) {
                    const int64_t i = r % s, visible = causal ? i + 1 : s;
                    lse[r] = logf((float)visible) + 0.5f;
                }
                CUDA_CHECK(cudaMalloc(&t[FLASHBWD_TENSOR_LSE], sizeof(float) * (size_t)(rows * h)));
                CUDA_CHECK(cudaMemcpy(t[FLASHBWD_TENSOR_LSE], lse, sizeof(float) * (size_t)(rows * h),
                                      cudaMemcpyHostToDevice));
                void *dcu = NULL;
                if (varlen) {
                    CUDA_CHECK(cudaMalloc(&dcu, sizeof(int32_t) * (size_t)(nseqs + 1)));
                    CUDA_CHECK(cudaMemcpy(dcu, cu, sizeof(int32_t) * (size_t)(nseqs + 1),
                                          cudaMemcpyHostToDevice));
                    CHECK(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_CU_SEQLENS_Q, dcu, NULL, 0));
                    CHECK(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_CU_SEQLENS_K, dcu, NULL, 0));
                }
                CHECK(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_LSE, t[FLASHBWD_TENSOR_LSE], NULL, 0));
                size_t ws_bytes;
                void *ws;
                CHECK(flashbwd_plan_workspace_size(plan, &ws_bytes));
                if (ws_library) {
                    int32_t compressed = 0;
                    CHECK(flashbwd_workspace_alloc(plan, &ws, &ws_bytes, &compressed));
                    if (!compressed && !ws_plain_reported++)
                        fprintf(stderr, "workspace: the library's is not compressible here\n");
                } else {
                    CUDA_CHECK(cudaMalloc(&ws, ws_bytes));
                }
                CHECK(flashbwd_plan_set_workspace(plan, ws, ws_bytes));
                cudaEvent_t e0, e1;
                CUDA_CHECK(cudaEventCreate(&e0));
                CUDA_CHECK(cudaEventCreate(&e1));
                for (int w = 0; w < 3; ++w) CHECK(flashbwd_execute(plan, NULL));
                for (int it = 0; it < iters; ++it) {
                    CUDA_CHECK(cudaEventRecord(e0, NULL));
                    CHECK(flashbwd_execute(plan, NULL));
                    CUDA_CHECK(cudaEventRecord(e1, NULL));
                    CUDA_CHECK(cudaEventSynchronize(e1));
                    CUDA_CHECK(cudaEventElapsedTime(&times[it], e0, e1));
                }
                CUDA_CHECK(cudaGetLastError());
                qsort(times, (size_t)iters, sizeof(float), cmp_float);
                const float ms = times[iters / 2];
                const double flops = (window >= 0 || varlen)
                                         ? 2.5 * 4.0 * pairs * (double)h * (double)d
                                         : in_bwd_flops(b, h, s, s, d, causal);
                printf("%4lld %6d %6lld %5lld %5lld %4lld %3d %10.3f %9.1f%s\n", (long long)d, causal,
                       (long long)s, (long long)(varlen ? nseqs : b), (long long)h, (long long)hkv,
                       deterministic, ms, flops / (ms * 1e-3) / 1e12,
                       varlen ? "  varlen" : window >= 0 ? "  window" : "");
                fflush(stdout);
                CUDA_CHECK(cudaEventDestroy(e0));
                CUDA_CHECK(cudaEventDestroy(e1));
                for (int id = 0; id < 10; ++id) CUDA_CHECK(cudaFree(t[id]));
                CUDA_CHECK(cudaFree(dcu));
                if (ws_library) CHECK(flashbwd_workspace_free(ws));
                else CUDA_CHECK(cudaFree(ws));
                free(host), free(lse);
                flashbwd_plan_destroy(plan);
            }
    free(times);
    return 0;
}
