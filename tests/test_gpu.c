/* test_gpu.c — the CUDA backend against the fp64 reference (and the CPU backend) on fresh
 * random inputs, over dtype x head_dim x causal x GQA x sequence lengths, plus features
 * (window, softcap, ALiBi, varlen, strides, -inf LSE rows) and CUDA-graph capture.
 *
 * Outputs are poisoned (all bits set = NaN) before every call and every element of the
 * valid region must be written and finite. Where there is no GPU every test reports
 * SKIPPED. FLASHBWD_GPU_QUICK=1 runs a small subset (for compute-sanitizer).
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common.h"

#ifdef FB_WITH_CUDA
#include <cuda_runtime_api.h>

#define CUDA_OK(call)                                                                    \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) fail_msg("%s: %s", #call, cudaGetErrorString(e_));       \
    } while (0)

static int have_gpu(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/* FLASHBWD_GPU_QUICK=1: a subset for compute-sanitizer; =2: one case per kernel and
 * feature, for the slowest tool (racecheck). */
static int quick_level(void)
{
    const char *q = getenv("FLASHBWD_GPU_QUICK");
    return q ? atoi(q) : 0;
}
static int quick(void) { return quick_level() > 0; }

/* Device copies of a case's tensors. */
typedef struct dev {
    void *ptr[FLASHBWD_TENSOR_COUNT];
    void *ws;
    size_t ws_bytes;
} dev;

static size_t elem_bytes(int id)
{
    return (id >= FLASHBWD_TENSOR_Q && id <= FLASHBWD_TENSOR_DV && id != FLASHBWD_TENSOR_LSE) ? 2 : 4;
}

static int is_output(int id)
{
    return id == FLASHBWD_TENSOR_DQ || id == FLASHBWD_TENSOR_DK || id == FLASHBWD_TENSOR_DV;
}

static void dev_upload(const tdata *td, dev *d)
{
    memset(d, 0, sizeof *d);
    for (int id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) {
        const ttensor *t = &td->t[id];
        if (!t->data) continue;
        const size_t bytes = t->elems * elem_bytes(id);
        CUDA_OK(cudaMalloc(&d->ptr[id], bytes));
        if (is_output(id)) CUDA_OK(cudaMemset(d->ptr[id], 0xff, bytes)); /* poison: NaN */
        else CUDA_OK(cudaMemcpy(d->ptr[id], t->data, bytes, cudaMemcpyHostToDevice));
    }
}

static void dev_download(tdata *td, const dev *d)
{
    for (int id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
        CUDA_OK(cudaMemcpy(td->t[id].data, d->ptr[id], td->t[id].elems * 2, cudaMemcpyDeviceToHost));
}

static void dev_free(dev *d)
{
    for (int id = 0; id < FLASHBWD_TENSOR_COUNT; ++id) CUDA_OK(cudaFree(d->ptr[id]));
    CUDA_OK(cudaFree(d->ws));
}

/* Create a CUDA plan for tc and bind d's tensors and a workspace. */
static flashbwd_plan *gpu_plan_det(const tcase *tc, const tdata *td, dev *d, int deterministic)
{
    flashbwd_problem p = tcase_problem(tc, FLASHBWD_BACKEND_CUDA);
    p.deterministic = deterministic;
    flashbwd_plan *plan = NULL;
    const int32_t st = flashbwd_plan_create(&p, &plan);
    if (st != FLASHBWD_OK) fail_msg("%s: plan_create: %s", tc->name, flashbwd_last_error());
    assert_int_equal(tdata_bind(tc, td, plan, d->ptr), FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_workspace_size(plan, &d->ws_bytes), FLASHBWD_OK);
    CUDA_OK(cudaMalloc(&d->ws, d->ws_bytes ? d->ws_bytes : 256));
    /* Garbage in the workspace: the kernels must not rely on it being zero. */
    CUDA_OK(cudaMemset(d->ws, 0x7f, d->ws_bytes ? d->ws_bytes : 256));
    assert_int_equal(flashbwd_plan_set_workspace(plan, d->ws, d->ws_bytes), FLASHBWD_OK);
    return plan;
}

static flashbwd_plan *gpu_plan(const tcase *tc, const tdata *td, dev *d)
{
    return gpu_plan_det(tc, td, d, 0);
}

/* Errors of dQ, dK, dV against fp64; fails on a NaN/Inf or an error over the bound. */
static void check_outputs(const tcase *tc, const tdata *td, const char *what)
{
    const double bound = tc->dtype == FLASHBWD_DTYPE_BF16 ? 1e-2 : 3e-3;
    const int ids[3] = {FLASHBWD_TENSOR_DQ, FLASHBWD_TENSOR_DK, FLASHBWD_TENSOR_DV};
    double err[3];
    int64_t bad[3];
    for (int i = 0; i < 3; ++i) err[i] = tdata_error(tc, td, ids[i], &bad[i]);
    printf("    %-40s %s dQ %.2e dK %.2e dV %.2e%s\n", tc->name, what, err[0], err[1], err[2],
           bad[0] + bad[1] + bad[2] ? "  NaN/Inf!" : "");
    fflush(stdout);
    const char *names[3] = {"dQ", "dK", "dV"};
    for (int i = 0; i < 3; ++i) {
        if (bad[i]) fail_msg("%s: %s has %lld NaN/Inf elements (unwritten or overflow)", tc->name,
                             names[i], (long long)bad[i]);
        if (!(err[i] <= bound)) fail_msg("%s: %s rel error %.3e > %.1e", tc->name, names[i], err[i], bound);
    }
}

/* Whether the environment overrides what the plans choose (bench/run_gpu.sh runs the
 * suite under each switch): then a case planned to group its heads may not. */
static int plan_choice_forced(void)
{
    static const char *const vars[] = {"FLASHBWD_FORCE_SPLIT", "FLASHBWD_FORCE_HEADS_ON_X",
                                       "FLASHBWD_HEAD_GROUP", "FLASHBWD_FORCE_CONFIG_CLASS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; ++i) {
        const char *v = getenv(vars[i]);
        if (v && *v) return 1;
    }
    return 0;
}

/* One case end to end on the GPU; runs > 1 repeats execute (poisoning the outputs each
 * time) and requires bitwise-identical outputs (deterministic plans). */
static void run_case_n(const tcase *tc, int deterministic, int runs);

static void run_case(const tcase *tc) { run_case_n(tc, 0, 1); }

static void run_case_n(const tcase *tc, int deterministic, int runs)
{
    tdata td;
    assert_int_equal(tdata_make(tc, &td, test_seed() ^ (uint64_t)(tc->seqlen_q * 131 + tc->seqlen_k)), 0);
    dev d;
    dev_upload(&td, &d);
    flashbwd_plan *plan = gpu_plan_det(tc, &td, &d, deterministic);
    /* A case planned for few SMs exists to run heads in groups: check that it does. */
    if (tc->sm_count && !deterministic && !plan_choice_forced()) {
        flashbwd_plan_info info;
        memset(&info, 0, sizeof info);
        info.struct_size = FLASHBWD_PLAN_INFO_STRUCT_SIZE;
        assert_int_equal(flashbwd_plan_get_info(plan, &info), FLASHBWD_OK);
        if (info.grid[FLASHBWD_LAUNCH_MAIN][0] >= tc->heads_q)
            fail_msg("%s: main grid x %d; expected a group of fewer than %lld heads", tc->name,
                     info.grid[FLASHBWD_LAUNCH_MAIN][0], (long long)tc->heads_q);
    }
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));
    uint16_t *first[3] = {NULL, NULL, NULL};
    for (int run = 0; run < runs; ++run) {
        for (int id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
            CUDA_OK(cudaMemsetAsync(d.ptr[id], 0xff, td.t[id].elems * 2, stream));
        const int32_t st = flashbwd_execute(plan, stream);
        if (st != FLASHBWD_OK) fail_msg("%s: execute: %s", tc->name, flashbwd_plan_last_error(plan));
        CUDA_OK(cudaStreamSynchronize(stream));
        CUDA_OK(cudaGetLastError());
        dev_download(&td, &d);
        if (run == 0) check_outputs(tc, &td, deterministic ? "gpu det" : "gpu");
        for (int i = 0; i < 3 && runs > 1; ++i) {
            const ttensor *t = &td.t[FLASHBWD_TENSOR_DQ + i];
            if (run == 0) {
                first[i] = malloc(t->elems * 2);
                memcpy(first[i], t->data, t->elems * 2);
            } else if (memcmp(first[i], t->data, t->elems * 2) != 0) {
                fail_msg("%s: run %d differs from run 0 in %s", tc->name, run,
                         i == 0 ? "dQ" : i == 1 ? "dK" : "dV");
            }
        }
    }
    for (int i = 0; i < 3; ++i) free(first[i]);
    if (runs > 1) printf("    %-40s %d runs bitwise identical\n", tc->name, runs);
    CUDA_OK(cudaStreamDestroy(stream));
    flashbwd_plan_destroy(plan);
    dev_free(&d);
    tdata_free(&td);
}

#define BF FLASHBWD_DTYPE_BF16
#define FP FLASHBWD_DTYPE_FP16

static void test_gpu_matches_fp64_over_the_core_matrix(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    static const int32_t dtypes[2] = {BF, FP};
    static const int32_t dims[3] = {64, 128, 40}; /* 40 runs padded on the 64 kernel */
    static const int64_t kv_heads[3] = {4, 2, 1}; /* GQA ratio 1, 2, and all heads (MQA) */
    static const int64_t lens[][2] = {{1, 1}, {17, 17}, {113, 113}, {1000, 1000}, {113, 17}, {17, 113}};
    const size_t nlens = quick() ? 3 : sizeof lens / sizeof lens[0];
    char name[96];
    for (int dt = 0; dt < 2; ++dt)
        for (int hd = 0; hd < 3; ++hd)
            for (int causal = 0; causal < 2; ++causal)
                for (int g = 0; g < 3; ++g)
                    for (size_t l = 0; l < nlens; ++l) {
                        if (quick() && (g == 1 || hd == 2)) continue;
                        if (quick_level() > 1 && (dt == 1 || l != 2 || g == 2)) continue;
                        snprintf(name, sizeof name, "%s d%d %s hkv%lld sq%lld sk%lld",
                                 dt ? "fp16" : "bf16", dims[hd], causal ? "causal" : "full",
                                 (long long)kv_heads[g], (long long)lens[l][0], (long long)lens[l][1]);
                        const tcase tc = {.name = name, .dtype = dtypes[dt], .head_dim = dims[hd],
                                          .batch = lens[l][0] >= 1000 ? 1 : 2, .heads_q = 4,
                                          .heads_kv = kv_heads[g], .seqlen_q = lens[l][0],
                                          .seqlen_k = lens[l][1], .causal = causal};
                        run_case(&tc);
                    }
}

static const int32_t vl_q[] = {130, 0, 64, 1, 77};
static const int32_t vl_k[] = {200, 5, 0, 128, 77};

static void test_gpu_matches_fp64_on_features(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    const tcase cases[] = {
        {.name = "bf16 d64 window 37/5", .dtype = BF, .head_dim = 64, .batch = 2, .heads_q = 2, .heads_kv = 2, .seqlen_q = 300, .seqlen_k = 300, .use_window = 1, .window_left = 37, .window_right = 5},
        {.name = "fp16 d128 causal+window 100", .dtype = FP, .head_dim = 128, .batch = 1, .heads_q = 2, .heads_kv = 1, .seqlen_q = 257, .seqlen_k = 400, .causal = 1, .use_window = 1, .window_left = 100, .window_right = -1},
        {.name = "bf16 d128 window right only", .dtype = BF, .head_dim = 128, .batch = 1, .heads_q = 2, .heads_kv = 2, .seqlen_q = 200, .seqlen_k = 150, .use_window = 1, .window_left = -1, .window_right = 20},
        {.name = "bf16 d64 softcap 30", .dtype = BF, .head_dim = 64, .batch = 2, .heads_q = 2, .heads_kv = 1, .seqlen_q = 190, .seqlen_k = 190, .softcap = 30.0f, .causal = 1},
        {.name = "fp16 d128 softcap 2", .dtype = FP, .head_dim = 128, .batch = 1, .heads_q = 4, .heads_kv = 4, .seqlen_q = 150, .seqlen_k = 211, .softcap = 2.0f},
        {.name = "bf16 d64 alibi per head causal", .dtype = BF, .head_dim = 64, .batch = 2, .heads_q = 4, .heads_kv = 2, .seqlen_q = 140, .seqlen_k = 170, .alibi = 1, .causal = 1},
        {.name = "fp16 d128 alibi per batch", .dtype = FP, .head_dim = 128, .batch = 2, .heads_q = 2, .heads_kv = 2, .seqlen_q = 99, .seqlen_k = 99, .alibi = 2},
        {.name = "bf16 d128 scale 0.05", .dtype = BF, .head_dim = 128, .batch = 1, .heads_q = 2, .heads_kv = 2, .seqlen_q = 128, .seqlen_k = 128, .scale = 0.05f},
        {.name = "fp16 d64 padded strides gqa", .dtype = FP, .head_dim = 64, .batch = 2, .heads_q = 4, .heads_kv = 2, .seqlen_q = 129, .seqlen_k = 65, .layout = 1, .causal = 1},
        {.name = "bf16 d128 bhsd strides", .dtype = BF, .head_dim = 128, .batch = 2, .heads_q = 2, .heads_kv = 2, .seqlen_q = 100, .seqlen_k = 130, .layout = 2},
        {.name = "fp16 d128 padded strides causal", .dtype = FP, .head_dim = 128, .batch = 2, .heads_q = 3, .heads_kv = 3, .seqlen_q = 190, .seqlen_k = 190, .layout = 1, .causal = 1},
        {.name = "bf16 d64 -inf LSE rows", .dtype = BF, .head_dim = 64, .batch = 1, .heads_q = 2, .heads_kv = 2, .seqlen_q = 150, .seqlen_k = 150, .masked_rows = 1, .causal = 1},
        {.name = "fp16 d128 varlen causal gqa", .dtype = FP, .head_dim = 128, .batch = 5, .heads_q = 4, .heads_kv = 1, .seqlen_q = 130, .seqlen_k = 200, .varlen = 1, .lens_q = vl_q, .lens_k = vl_k, .causal = 1},
        {.name = "bf16 d64 varlen strided", .dtype = BF, .head_dim = 64, .batch = 5, .heads_q = 2, .heads_kv = 2, .seqlen_q = 130, .seqlen_k = 200, .varlen = 1, .lens_q = vl_q, .lens_k = vl_k, .layout = 1},
        {.name = "bf16 d24 seqlen 1000x1", .dtype = BF, .head_dim = 24, .batch = 1, .heads_q = 2, .heads_kv = 1, .seqlen_q = 1000, .seqlen_k = 1},
        {.name = "fp16 d8 causal 333", .dtype = FP, .head_dim = 8, .batch = 1, .heads_q = 2, .heads_kv = 2, .seqlen_q = 333, .seqlen_k = 333, .causal = 1},
        {.name = "bf16 d256 causal gqa 300", .dtype = BF, .head_dim = 256, .batch = 2, .heads_q = 4, .heads_kv = 2, .seqlen_q = 300, .seqlen_k = 300, .causal = 1},
        {.name = "fp16 d192 window varlen", .dtype = FP, .head_dim = 192, .batch = 5, .heads_q = 2, .heads_kv = 1, .seqlen_q = 130, .seqlen_k = 200, .varlen = 1, .lens_q = vl_q, .lens_k = vl_k, .use_window = 1, .window_left = 30, .window_right = 30},
        {.name = "bf16 d96 softcap sq>sk", .dtype = BF, .head_dim = 96, .batch = 2, .heads_q = 2, .heads_kv = 2, .seqlen_q = 333, .seqlen_k = 111, .softcap = 10.0f, .causal = 1},
        {.name = "bf16 d120 causal 515x1000", .dtype = BF, .head_dim = 120, .batch = 1, .heads_q = 2, .heads_kv = 2, .seqlen_q = 515, .seqlen_k = 1000, .causal = 1},
        {.name = "fp16 d96 padded strides causal", .dtype = FP, .head_dim = 96, .batch = 2, .heads_q = 3, .heads_kv = 3, .seqlen_q = 170, .seqlen_k = 170, .layout = 1, .causal = 1},
        /* planned for 2 SMs: heads in groups of 4 of 8 (12), the split kernel's grouped
         * instance (src/launches.c) */
        {.name = "bf16 d64 causal heads in groups", .dtype = BF, .head_dim = 64, .batch = 2, .heads_q = 8, .heads_kv = 8, .seqlen_q = 600, .seqlen_k = 600, .causal = 1, .sm_count = 2},
        {.name = "fp16 d128 causal heads in groups gqa", .dtype = FP, .head_dim = 128, .batch = 1, .heads_q = 12, .heads_kv = 3, .seqlen_q = 450, .seqlen_k = 520, .causal = 1, .sm_count = 2},
        {.name = "bf16 d256 window heads in groups", .dtype = BF, .head_dim = 256, .batch = 2, .heads_q = 8, .heads_kv = 8, .seqlen_q = 300, .seqlen_k = 300, .use_window = 1, .window_left = 90, .window_right = 10, .sm_count = 2},
        /* whole key blocks without a mask: the split kernel's full-tile instance at hd64
         * (FB_SPLIT_FULL), but the plain one while ALiBi slopes are bound */
        {.name = "bf16 d64 whole key blocks 1024 gqa", .dtype = BF, .head_dim = 64, .batch = 1, .heads_q = 4, .heads_kv = 2, .seqlen_q = 1000, .seqlen_k = 1024},
        {.name = "fp16 d40 whole key blocks 256", .dtype = FP, .head_dim = 40, .batch = 2, .heads_q = 2, .heads_kv = 2, .seqlen_q = 130, .seqlen_k = 256},
        {.name = "bf16 d64 whole key blocks bhsd strides", .dtype = BF, .head_dim = 64, .batch = 2, .heads_q = 3, .heads_kv = 3, .seqlen_q = 128, .seqlen_k = 128, .layout = 2},
        {.name = "bf16 d64 window right only 30", .dtype = BF, .head_dim = 64, .batch = 1, .heads_q = 2, .heads_kv = 1, .seqlen_q = 300, .seqlen_k = 520, .use_window = 1, .window_left = -1, .window_right = 30},
        {.name = "fp16 d64 whole key blocks alibi", .dtype = FP, .head_dim = 64, .batch = 2, .heads_q = 2, .heads_kv = 2, .seqlen_q = 256, .seqlen_k = 512, .alibi = 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        if (quick() && i % 3) continue;
        if (quick_level() > 1 && i % 6) continue;
        run_case(&cases[i]);
    }
}

/* Capture execute into a graph, replay it on new inputs copied into the same buffers. The
 * plan first runs once through its own launch graph; while the stream is captured, execute
 * launches the kernels one by one into the caller's graph instead. */
static void test_gpu_execute_replays_from_a_cuda_graph(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    const tcase tc = {.name = "graph bf16 d128 causal", .dtype = BF, .head_dim = 128, .batch = 2, .heads_q = 4, .heads_kv = 2, .seqlen_q = 200, .seqlen_k = 200, .causal = 1};
    tdata td;
    assert_int_equal(tdata_make(&tc, &td, test_seed() + 1), 0);
    dev d;
    dev_upload(&td, &d);
    flashbwd_plan *plan = gpu_plan(&tc, &td, &d);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    assert_int_equal(flashbwd_execute(plan, stream), FLASHBWD_OK); /* the plan's graph */
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    assert_int_equal(flashbwd_execute(plan, stream), FLASHBWD_OK);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int round = 0; round < 2; ++round) {
        if (round == 1) { /* fresh inputs, same buffers */
            tdata_free(&td);
            assert_int_equal(tdata_make(&tc, &td, test_seed() + 2), 0);
            for (int id = 1; id < FLASHBWD_TENSOR_COUNT; ++id)
                if (td.t[id].data && !is_output(id))
                    CUDA_OK(cudaMemcpy(d.ptr[id], td.t[id].data, td.t[id].elems * elem_bytes(id),
                                       cudaMemcpyHostToDevice));
        }
        for (int id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
            CUDA_OK(cudaMemset(d.ptr[id], 0xff, td.t[id].elems * 2));
        CUDA_OK(cudaGraphLaunch(exec, stream));
        CUDA_OK(cudaStreamSynchronize(stream));
        dev_download(&td, &d);
        check_outputs(&tc, &td, round ? "graph replay, new data" : "graph replay");
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    CUDA_OK(cudaStreamDestroy(stream));
    flashbwd_plan_destroy(plan);
    dev_free(&d);
    tdata_free(&td);
}

/* Execute replays the plan's own launch graph: a second call with the same bindings, then
 * new output buffers and a new workspace, each checked against fp64; the first outputs,
 * poisoned again, must stay untouched once the plan writes elsewhere. (GQA: three kernels
 * in the graph.) */
static void test_gpu_plan_graph_follows_new_bindings(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    const tcase tc = {.name = "plan graph bf16 d64 gqa causal", .dtype = BF, .head_dim = 64, .batch = 2, .heads_q = 4, .heads_kv = 2, .seqlen_q = 150, .seqlen_k = 170, .causal = 1};
    tdata td;
    assert_int_equal(tdata_make(&tc, &td, test_seed() + 7), 0);
    dev d;
    dev_upload(&td, &d);
    flashbwd_plan *plan = gpu_plan(&tc, &td, &d);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));
    void *other[FLASHBWD_TENSOR_COUNT];
    memcpy(other, d.ptr, sizeof other);
    for (int id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
        CUDA_OK(cudaMalloc(&other[id], td.t[id].elems * 2));
    void *ws2 = NULL;
    CUDA_OK(cudaMalloc(&ws2, d.ws_bytes ? d.ws_bytes : 256));
    CUDA_OK(cudaMemset(ws2, 0x7f, d.ws_bytes ? d.ws_bytes : 256));
    const char *what[] = {"first call", "same bindings", "new outputs, workspace"};
    for (int call = 0; call < 3; ++call) {
        if (call == 2) {
            assert_int_equal(tdata_bind(&tc, &td, plan, other), FLASHBWD_OK);
            assert_int_equal(flashbwd_plan_set_workspace(plan, ws2, d.ws_bytes), FLASHBWD_OK);
        }
        for (int id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id) {
            CUDA_OK(cudaMemsetAsync(d.ptr[id], 0xff, td.t[id].elems * 2, stream));
            CUDA_OK(cudaMemsetAsync(other[id], 0xff, td.t[id].elems * 2, stream));
        }
        const int32_t st = flashbwd_execute(plan, stream);
        if (st != FLASHBWD_OK) fail_msg("%s: %s", what[call], flashbwd_plan_last_error(plan));
        CUDA_OK(cudaStreamSynchronize(stream));
        dev_download(&td, &d);
        if (call < 2) {
            check_outputs(&tc, &td, what[call]);
            continue;
        }
        for (int id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id) /* untouched */
            for (size_t e = 0; e < td.t[id].elems; ++e)
                if (((uint16_t *)td.t[id].data)[e] != 0xffff)
                    fail_msg("%s: the old tensor %d was written at %zu", what[call], id, e);
        for (int id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
            CUDA_OK(cudaMemcpy(td.t[id].data, other[id], td.t[id].elems * 2,
                               cudaMemcpyDeviceToHost));
        check_outputs(&tc, &td, what[call]);
    }
    for (int id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id) CUDA_OK(cudaFree(other[id]));
    CUDA_OK(cudaFree(ws2));
    CUDA_OK(cudaStreamDestroy(stream));
    flashbwd_plan_destroy(plan);
    dev_free(&d);
    tdata_free(&td);
}

/* A plan whose tiles need no mask (hd64, whole key blocks) runs the split kernel's
 * full-tile instance, which has no ALiBi: binding slopes must switch execute (its graph
 * node, or the direct launch) to the plain instance, and unbinding them back. Three calls
 * on one plan, each against fp64 for what is bound. */
static void test_gpu_full_tile_plan_follows_alibi_binding(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    const tcase plain = {.name = "bf16 d64 512 keys", .dtype = BF, .head_dim = 64, .batch = 2, .heads_q = 2, .heads_kv = 2, .seqlen_q = 384, .seqlen_k = 512};
    tcase alibi = plain;
    alibi.name = "bf16 d64 512 keys, slopes bound", alibi.alibi = 1;
    tdata tdp, tda;
    assert_int_equal(tdata_make(&plain, &tdp, test_seed() + 11), 0);
    assert_int_equal(tdata_make(&alibi, &tda, test_seed() + 12), 0);
    dev dp, da;
    dev_upload(&tdp, &dp);
    dev_upload(&tda, &da);
    flashbwd_plan *plan = gpu_plan(&plain, &tdp, &dp);
    cudaStream_t stream;
    CUDA_OK(cudaStreamCreate(&stream));
    for (int call = 0; call < 3; ++call) {
        const int with = call == 1;
        const tcase *tc = with ? &alibi : &plain;
        tdata *td = with ? &tda : &tdp;
        dev *d = with ? &da : &dp;
        assert_int_equal(tdata_bind(tc, td, plan, d->ptr), FLASHBWD_OK);
        if (!with)
            assert_int_equal(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_ALIBI_SLOPES, NULL, NULL, 0),
                             FLASHBWD_OK);
        for (int id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
            CUDA_OK(cudaMemsetAsync(d->ptr[id], 0xff, td->t[id].elems * 2, stream));
        const int32_t st = flashbwd_execute(plan, stream);
        if (st != FLASHBWD_OK) fail_msg("%s: %s", tc->name, flashbwd_plan_last_error(plan));
        CUDA_OK(cudaStreamSynchronize(stream));
        dev_download(td, d);
        check_outputs(tc, td, call == 2 ? "gpu, slopes unbound again" : "gpu");
    }
    CUDA_OK(cudaStreamDestroy(stream));
    flashbwd_plan_destroy(plan);
    dev_free(&dp);
    dev_free(&da);
    tdata_free(&tdp);
    tdata_free(&tda);
}

/* The same inputs on the CPU backend and the GPU: both near fp64, and near each other. */
static void test_gpu_agrees_with_the_cpu_backend(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    const tcase tc = {.name = "cpu vs gpu bf16 d64 gqa causal", .dtype = BF, .head_dim = 64, .batch = 2, .heads_q = 4, .heads_kv = 2, .seqlen_q = 250, .seqlen_k = 300, .causal = 1};
    tdata td;
    assert_int_equal(tdata_make(&tc, &td, test_seed() + 3), 0);
    /* CPU backend first, on host buffers. */
    void *ws;
    flashbwd_plan *cpu = tcpu_plan(&tc, &td, 0, &ws);
    assert_non_null(cpu);
    assert_int_equal(flashbwd_execute(cpu, NULL), FLASHBWD_OK);
    check_outputs(&tc, &td, "cpu");
    uint16_t *cpu_out[3];
    for (int i = 0; i < 3; ++i) {
        const ttensor *t = &td.t[FLASHBWD_TENSOR_DQ + i];
        cpu_out[i] = malloc(t->elems * 2);
        memcpy(cpu_out[i], t->data, t->elems * 2);
    }
    dev d;
    dev_upload(&td, &d);
    flashbwd_plan *gpu = gpu_plan(&tc, &td, &d);
    assert_int_equal(flashbwd_execute(gpu, NULL), FLASHBWD_OK);
    CUDA_OK(cudaDeviceSynchronize());
    dev_download(&td, &d);
    check_outputs(&tc, &td, "gpu");
    for (int i = 0; i < 3; ++i) { /* GPU vs CPU backend directly */
        const ttensor *t = &td.t[FLASHBWD_TENSOR_DQ + i];
        double num = 0, den = 0;
        for (size_t e = 0; e < t->elems; ++e) {
            const double a = th_to_float(((uint16_t *)t->data)[e], tc.dtype);
            const double b = th_to_float(cpu_out[i][e], tc.dtype);
            if (isnan(a) && isnan(b)) continue; /* padding never written by either */
            num += (a - b) * (a - b), den += b * b;
        }
        printf("    gpu vs cpu backend %s: rel diff %.2e\n", i == 0 ? "dQ" : i == 1 ? "dK" : "dV",
               sqrt(num / den));
        assert_true(sqrt(num / den) < 1e-2);
        free(cpu_out[i]);
    }
    free(ws);
    flashbwd_plan_destroy(cpu);
    flashbwd_plan_destroy(gpu);
    dev_free(&d);
    tdata_free(&td);
}

/* Every head_dim the ABI accepts (multiples of 8 up to 256), each on the kernel size that
 * serves it (64, 96, 128, 192, 256), alternating dtype, causal and GQA. */
static void test_gpu_matches_fp64_for_every_head_dim(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    char name[96];
    for (int d = 8; d <= 256; d += 8) {
        if (quick() && d % 64 != 0 && d != 96 && d != 8) continue;
        if (quick_level() > 1 && d != 96 && d != 192 && d != 256) continue;
        const int i = d / 8;
        snprintf(name, sizeof name, "%s d%d %s hkv%d sq%d sk%d", i % 2 ? "fp16" : "bf16", d,
                 i % 3 ? "causal" : "full", i % 4 ? 2 : 1, 70 + i, 129 - i);
        const tcase tc = {.name = name, .dtype = i % 2 ? FP : BF, .head_dim = d, .batch = 2,
                          .heads_q = 2, .heads_kv = i % 4 ? 2 : 1, .seqlen_q = 70 + i,
                          .seqlen_k = 129 - i, .causal = i % 3 != 0};
        run_case(&tc);
    }
}

static const int32_t det_q[] = {190, 0, 64, 1, 200};
static const int32_t det_k[] = {300, 7, 0, 129, 200};

/* Deterministic plans: fp64-accurate and bitwise identical over 5 runs, for every feature
 * that reorders the reductions (GQA group sums, masks, varlen, every kernel head dim). */
static void test_gpu_deterministic_mode_is_bitwise_reproducible(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    const tcase cases[] = {
        {.name = "det bf16 d128 gqa4 causal", .dtype = BF, .head_dim = 128, .batch = 2, .heads_q = 4, .heads_kv = 1, .seqlen_q = 700, .seqlen_k = 700, .causal = 1},
        {.name = "det fp16 d64 full sq<sk", .dtype = FP, .head_dim = 64, .batch = 2, .heads_q = 4, .heads_kv = 4, .seqlen_q = 300, .seqlen_k = 900},
        {.name = "det bf16 d96 window gqa2", .dtype = BF, .head_dim = 96, .batch = 1, .heads_q = 4, .heads_kv = 2, .seqlen_q = 600, .seqlen_k = 600, .use_window = 1, .window_left = 150, .window_right = 40},
        {.name = "det bf16 d192 causal+window", .dtype = BF, .head_dim = 192, .batch = 1, .heads_q = 2, .heads_kv = 1, .seqlen_q = 500, .seqlen_k = 640, .causal = 1, .use_window = 1, .window_left = 200, .window_right = -1},
        {.name = "det fp16 d256 softcap alibi", .dtype = FP, .head_dim = 256, .batch = 1, .heads_q = 2, .heads_kv = 2, .seqlen_q = 400, .seqlen_k = 400, .softcap = 20.0f, .alibi = 1},
        {.name = "det bf16 d128 varlen gqa2", .dtype = BF, .head_dim = 128, .batch = 5, .heads_q = 4, .heads_kv = 2, .seqlen_q = 200, .seqlen_k = 300, .varlen = 1, .lens_q = det_q, .lens_k = det_k, .causal = 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        if (quick() && i % 2) continue;
        if (quick_level() > 1 && i != 0) continue;
        run_case_n(&cases[i], 1, quick() ? 2 : 5);
    }
}

/* The contract of flashbwd.h: device-side lengths that contradict the plan (longer than
 * the plan's maximum, decreasing or negative cu_seqlens, seqused past the sequence) give
 * unspecified values but never an access outside the bound tensors. Run under
 * compute-sanitizer memcheck to see the "never" (bench/run_gpu.sh does). */
static void test_gpu_contradictory_lengths_stay_in_bounds(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    static const int32_t lq[] = {40, 10, 30}, lk[] = {20, 50, 15};
    const tcase tc = {.name = "contradictory lengths", .dtype = BF, .head_dim = 64, .batch = 3, .heads_q = 2, .heads_kv = 1, .seqlen_q = 40, .seqlen_k = 50, .varlen = 1, .lens_q = lq, .lens_k = lk, .causal = 1};
    tdata td;
    assert_int_equal(tdata_make(&tc, &td, test_seed() + 9), 0);
    dev d;
    dev_upload(&td, &d);
    flashbwd_plan *plan = gpu_plan(&tc, &td, &d);
    const int32_t bad[][4] = {
        {0, 200, 20, 80},         /* a sequence longer than seqlen_q, cu past total_q */
        {0, 30, 10, 80},          /* decreasing */
        {-50, 10, 40, 80},        /* negative start */
        {0, 2147483647, -2, 80},  /* extremes */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        CUDA_OK(cudaMemcpy(d.ptr[FLASHBWD_TENSOR_CU_SEQLENS_Q], bad[i], sizeof bad[i], cudaMemcpyHostToDevice));
        CUDA_OK(cudaMemcpy(d.ptr[FLASHBWD_TENSOR_CU_SEQLENS_K], bad[i], sizeof bad[i], cudaMemcpyHostToDevice));
        assert_int_equal(flashbwd_execute(plan, NULL), FLASHBWD_OK);
        CUDA_OK(cudaDeviceSynchronize());
    }
    /* seqused beyond the cu_seqlens lengths and beyond the plan's maxima */
    int32_t *used;
    const int32_t big[3] = {1000, -5, 60};
    CUDA_OK(cudaMalloc((void **)&used, sizeof big));
    CUDA_OK(cudaMemcpy(used, big, sizeof big, cudaMemcpyHostToDevice));
    assert_int_equal(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_SEQUSED_Q, used, NULL, 0), FLASHBWD_OK);
    assert_int_equal(flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_SEQUSED_K, used, NULL, 0), FLASHBWD_OK);
    assert_int_equal(flashbwd_execute(plan, NULL), FLASHBWD_OK);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaFree(used));
    flashbwd_plan_destroy(plan);
    dev_free(&d);
    tdata_free(&td);
}

/* flashbwd_workspace_alloc's memory (compressible where the device has compute data
 * compression) runs every plan kind: poisoned with garbage first, then two executes, each
 * against fp64 (the second finds the first's leftovers in the workspace). Then it is freed,
 * and a second free is refused with a message naming the pointer. */
static void test_gpu_library_workspace_runs_every_plan_kind(void **state)
{
    (void)state;
    if (!have_gpu()) skip();
    const tcase cases[] = {
        {.name = "lib ws bf16 d128 causal", .dtype = BF, .head_dim = 128, .batch = 2, .heads_q = 3, .heads_kv = 3, .seqlen_q = 300, .seqlen_k = 300, .causal = 1},
        {.name = "lib ws fp16 d64 gqa", .dtype = FP, .head_dim = 64, .batch = 1, .heads_q = 4, .heads_kv = 2, .seqlen_q = 200, .seqlen_k = 1100},
        {.name = "lib ws bf16 d256 long keys", .dtype = BF, .head_dim = 256, .batch = 1, .heads_q = 2, .heads_kv = 2, .seqlen_q = 129, .seqlen_k = 2100},
        {.name = "lib ws fp16 d96 det gqa", .dtype = FP, .head_dim = 96, .batch = 2, .heads_q = 2, .heads_kv = 1, .seqlen_q = 77, .seqlen_k = 190},
    };
    const size_t ncases = quick() ? 2 : sizeof cases / sizeof cases[0];
    for (size_t c = 0; c < ncases; ++c) {
        const tcase *tc = &cases[c];
        tdata td;
        assert_int_equal(tdata_make(tc, &td, test_seed() + 11 * c), 0);
        dev d;
        dev_upload(&td, &d);
        flashbwd_problem p = tcase_problem(tc, FLASHBWD_BACKEND_CUDA);
        p.deterministic = strstr(tc->name, "det") != NULL;
        flashbwd_plan *plan = NULL;
        if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK)
            fail_msg("%s: plan_create: %s", tc->name, flashbwd_last_error());
        assert_int_equal(tdata_bind(tc, &td, plan, d.ptr), FLASHBWD_OK);
        size_t need = 0, got = 0;
        int32_t compressed = -1;
        void *ws = NULL;
        assert_int_equal(flashbwd_plan_workspace_size(plan, &need), FLASHBWD_OK);
        if (flashbwd_workspace_alloc(plan, &ws, &got, &compressed) != FLASHBWD_OK)
            fail_msg("%s: workspace_alloc: %s", tc->name, flashbwd_plan_last_error(plan));
        if (!ws || got < need || (uintptr_t)ws % 256 || (compressed != 0 && compressed != 1))
            fail_msg("%s: workspace %p of %zu bytes (need %zu), compressed %d", tc->name, ws,
                     got, need, (int)compressed);
        CUDA_OK(cudaMemset(ws, 0x7f, got)); /* garbage: the kernels must not rely on zeros */
        assert_int_equal(flashbwd_plan_set_workspace(plan, ws, got), FLASHBWD_OK);
        for (int run = 0; run < 2; ++run) {
            for (int id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
                CUDA_OK(cudaMemset(d.ptr[id], 0xff, td.t[id].elems * 2));
            if (flashbwd_execute(plan, NULL) != FLASHBWD_OK)
                fail_msg("%s: execute: %s", tc->name, flashbwd_plan_last_error(plan));
            CUDA_OK(cudaDeviceSynchronize());
            dev_download(&td, &d);
            check_outputs(tc, &td, compressed ? "compressible ws" : "plain ws");
        }
        flashbwd_plan_destroy(plan);
        assert_int_equal(flashbwd_workspace_free(ws), FLASHBWD_OK);
        assert_int_equal(flashbwd_workspace_free(ws), FLASHBWD_ERR_INVALID_VALUE);
        char hex[32];
        snprintf(hex, sizeof hex, "%p", ws);
        if (!strstr(flashbwd_last_error(), hex))
            fail_msg("%s: the second free's message \"%s\" does not name %s", tc->name,
                     flashbwd_last_error(), hex);
        dev_free(&d);
        tdata_free(&td);
    }
}

static void test_gpu_execute_on_another_device_is_wrong_device(void **state)
{
    (void)state;
    int n = 0;
    if (!have_gpu() || cudaGetDeviceCount(&n) != cudaSuccess || n < 2) skip();
    const tcase tc = {.name = "wrong device", .dtype = BF, .head_dim = 64, .batch = 1, .heads_q = 1, .heads_kv = 1, .seqlen_q = 16, .seqlen_k = 16};
    tdata td;
    assert_int_equal(tdata_make(&tc, &td, test_seed()), 0);
    dev d;
    dev_upload(&td, &d);
    flashbwd_plan *plan = gpu_plan(&tc, &td, &d);
    CUDA_OK(cudaSetDevice(1));
    assert_int_equal(flashbwd_execute(plan, NULL), FLASHBWD_ERR_WRONG_DEVICE);
    CUDA_OK(cudaSetDevice(0));
    flashbwd_plan_destroy(plan);
    dev_free(&d);
    tdata_free(&td);
}

int main(void)
{
    test_seed();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_matches_fp64_over_the_core_matrix),
        cmocka_unit_test(test_gpu_matches_fp64_on_features),
        cmocka_unit_test(test_gpu_execute_replays_from_a_cuda_graph),
        cmocka_unit_test(test_gpu_plan_graph_follows_new_bindings),
        cmocka_unit_test(test_gpu_full_tile_plan_follows_alibi_binding),
        cmocka_unit_test(test_gpu_agrees_with_the_cpu_backend),
        cmocka_unit_test(test_gpu_matches_fp64_for_every_head_dim),
        cmocka_unit_test(test_gpu_deterministic_mode_is_bitwise_reproducible),
        cmocka_unit_test(test_gpu_contradictory_lengths_stay_in_bounds),
        cmocka_unit_test(test_gpu_library_workspace_runs_every_plan_kind),
        cmocka_unit_test(test_gpu_execute_on_another_device_is_wrong_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* built without CUDA */

static void test_gpu_suite_needs_a_cuda_build(void **state)
{
    (void)state;
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gpu_suite_needs_a_cuda_build)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
