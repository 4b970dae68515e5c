/* test_concurrency.c — many threads, each with its own plans: 16 threads × 1000
 * create / execute / destroy cycles on small random problems (results checked against the
 * fp64 reference every 25th cycle), thread-local and per-plan messages that never bleed
 * between threads, and the per-process device cache: initialized once, and never poisoned
 * by failures.
 *
 *   test_concurrency         the CPU group (CI): CPU backend, and the cache on whatever
 *                            the machine has (no GPU: every CUDA plan fails the same way)
 *   test_concurrency --gpu   the GPU group: the cache counted under 16 racing threads, and
 *                            16 threads × 1000 cycles on the GPU, one stream per thread;
 *                            SKIPPED without a GPU. A separate CTest entry (see
 *                            tests/CMakeLists.txt), run by the lead on the H200.
 *
 * White-box (linked with the library's objects): fb_device_query_count() counts the CUDA
 * attribute queries of the device cache. Worker threads never call cmocka (its asserts
 * longjmp, which must stay on the main thread): each records its first failure, and the
 * main thread fails the test with it.
 */
#define _POSIX_C_SOURCE 200809L /* pthread_barrier_t */
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common.h"
#include "internal.h"

#ifdef FB_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#define THREADS 16
#define CYCLES 1000      /* per thread; FLASHBWD_CYCLES overrides (short sanitizer runs) */
#define CHECK_EVERY 25   /* cycles between fp64 checks of a thread's results */
#define PROBLEMS 3       /* random problems per thread, reused round robin */

/* One worker's state and its first failure. */
typedef struct worker {
    int index;
    uint64_t seed;
    int gpu;
    pthread_barrier_t *start;
    tcase tc[PROBLEMS];
    int32_t lens_q[PROBLEMS][4], lens_k[PROBLEMS][4];
    tdata td[PROBLEMS];
    long target;                   /* cycles to run */
    long cycles, checks, messages;
    char failure[FB_MESSAGE_BYTES + 128];
} worker;

/* Record the first failure of a worker (later ones add nothing). */
__attribute__((format(printf, 2, 3))) static void worker_fail(worker *w, const char *fmt, ...)
{
    if (w->failure[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->failure, sizeof w->failure, fmt, ap);
    va_end(ap);
}

static long cycles_per_thread(void)
{
    const char *env = getenv("FLASHBWD_CYCLES");
    const long n = env ? strtol(env, NULL, 10) : CYCLES;
    return n > 0 ? n : CYCLES;
}

static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int64_t pick(uint64_t *s, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(next(s) % (uint64_t)(hi - lo + 1));
}

/* A small random problem: GQA, causal, windows, softcap and varlen all come up. head_dim 0
 * picks one of 8..32. */
static void random_case(worker *w, int k, uint64_t *s, int32_t head_dim, int64_t max_seq)
{
    tcase *tc = &w->tc[k];
    memset(tc, 0, sizeof *tc);
    tc->name = "random";
    tc->dtype = next(s) % 2 ? FLASHBWD_DTYPE_BF16 : FLASHBWD_DTYPE_FP16;
    tc->head_dim = head_dim ? head_dim : 8 * (int32_t)pick(s, 1, 4);
    tc->batch = pick(s, 1, 3);
    tc->heads_kv = pick(s, 1, 2);
    tc->heads_q = tc->heads_kv * pick(s, 1, 2);
    tc->seqlen_q = pick(s, 1, max_seq);
    tc->seqlen_k = pick(s, 1, max_seq);
    tc->causal = next(s) % 3 == 0;
    if (next(s) % 4 == 0) {
        tc->use_window = 1;
        tc->window_left = (int32_t)pick(s, -1, max_seq / 2);
        tc->window_right = (int32_t)pick(s, -1, max_seq / 2);
    }
    if (next(s) % 5 == 0) tc->softcap = (float)pick(s, 2, 30);
    if (next(s) % 4 == 0) { /* varlen: lengths up to the maxima, at least one row each side */
        tc->varlen = 1;
        for (int64_t b = 0; b < tc->batch; ++b) {
            w->lens_q[k][b] = (int32_t)pick(s, b == 0, tc->seqlen_q);
            w->lens_k[k][b] = (int32_t)pick(s, b == 0, tc->seqlen_k);
        }
        tc->lens_q = w->lens_q[k], tc->lens_k = w->lens_k[k];
    }
}

static void poison(tdata *td)
{
    for (int32_t id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
        memset(td->t[id].data, 0xff, td->t[id].elems * 2);
}

/* The fp64 check of one result; returns 0 and records a failure when it is off. */
static int results_ok(worker *w, int k, const char *what)
{
    const tcase *tc = &w->tc[k];
    const double bound = tc->dtype == FLASHBWD_DTYPE_BF16 ? 1e-2 : 3e-3;
    static const int32_t ids[3] = {FLASHBWD_TENSOR_DQ, FLASHBWD_TENSOR_DK, FLASHBWD_TENSOR_DV};
    for (int i = 0; i < 3; ++i) {
        int64_t bad = 0;
        const double err = tdata_error(tc, &w->td[k], ids[i], &bad);
        if (bad || !(err <= bound)) {
            worker_fail(w, "thread %d cycle %ld (%s, b%lld hq%lld hkv%lld sq%lld sk%lld d%d "
                        "varlen %d): tensor %d rel err %.3e, %lld NaN/Inf", w->index, w->cycles,
                        what, (long long)tc->batch, (long long)tc->heads_q,
                        (long long)tc->heads_kv, (long long)tc->seqlen_q,
                        (long long)tc->seqlen_k, tc->head_dim, tc->varlen, ids[i], err,
                        (long long)bad);
            return 0;
        }
    }
    ++w->checks;
    return 1;
}

/* A failure unique to (thread, cycle) on this thread; after other threads have had the
 * chance to fail too, the thread must read back its own message. A successful call in
 * between must leave it alone. */
static void check_own_message(worker *w, long cycle)
{
    flashbwd_problem p;
    memset(&p, 0, sizeof p);
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.backend = FLASHBWD_BACKEND_CPU;
    p.batch = p.heads_q = p.seqlen_q = p.seqlen_k = 1;
    const int32_t bad_dim = 1 + 8 * (int32_t)(w->index * 1000000L + cycle); /* never % 8 == 0 */
    p.head_dim = bad_dim;
    flashbwd_plan *plan = NULL;
    if (flashbwd_plan_create(&p, &plan) != FLASHBWD_ERR_INVALID_VALUE) {
        worker_fail(w, "thread %d: head_dim %d was not INVALID_VALUE", w->index, bad_dim);
        flashbwd_plan_destroy(plan);
        return;
    }
    sched_yield(); /* let the other threads fail in between */
    p.head_dim = 8;
    if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK) {
        worker_fail(w, "thread %d: a valid create failed: %s", w->index, flashbwd_last_error());
        return;
    }
    flashbwd_plan_destroy(plan);
    char want[64];
    snprintf(want, sizeof want, "problem.head_dim = %d;", bad_dim);
    const char *got = flashbwd_last_error();
    if (!strstr(got, want))
        worker_fail(w, "thread %d cycle %ld: expected its own \"%s\", read \"%s\"", w->index,
                    cycle, want, got);
    ++w->messages;
}

/* --- CPU workers ------------------------------------------------------------------------ */

static void *cpu_worker(void *arg)
{
    worker *w = arg;
    size_t ws_max = 0;
    flashbwd_plan *plans[PROBLEMS];
    for (int k = 0; k < PROBLEMS; ++k) { /* the largest workspace any of them needs */
        flashbwd_problem p = tcase_problem(&w->tc[k], FLASHBWD_BACKEND_CPU);
        if (flashbwd_plan_create(&p, &plans[k]) != FLASHBWD_OK) {
            worker_fail(w, "thread %d: create: %s", w->index, flashbwd_last_error());
            return NULL;
        }
        size_t b = 0;
        flashbwd_plan_workspace_size(plans[k], &b);
        if (b > ws_max) ws_max = b;
        flashbwd_plan_destroy(plans[k]);
    }
    float *ws = malloc(ws_max);
    pthread_barrier_wait(w->start);
    for (long c = 0; c < w->target && !w->failure[0]; ++c) {
        w->cycles = c;
        const int k = (int)(c % PROBLEMS);
        const tcase *tc = &w->tc[k];
        flashbwd_problem p = tcase_problem(tc, FLASHBWD_BACKEND_CPU);
        flashbwd_plan *plan = NULL;
        if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK) {
            worker_fail(w, "thread %d cycle %ld: create: %s", w->index, c, flashbwd_last_error());
            break;
        }
        if (tdata_bind(tc, &w->td[k], plan, NULL) != FLASHBWD_OK)
            worker_fail(w, "thread %d cycle %ld: bind: %s", w->index, c, flashbwd_last_error());
        /* A per-plan failure unique to this thread: a workspace (index + 1) floats short. */
        size_t need = 0;
        flashbwd_plan_workspace_size(plan, &need);
        const size_t short_by = sizeof(float) * (size_t)(w->index + 1);
        char want[96];
        snprintf(want, sizeof want, "workspace of %zu bytes", need - short_by);
        if (flashbwd_plan_set_workspace(plan, ws, need - short_by) != FLASHBWD_ERR_WORKSPACE_TOO_SMALL ||
            !strstr(flashbwd_plan_last_error(plan), want))
            worker_fail(w, "thread %d cycle %ld: plan message \"%s\", expected \"%s\"", w->index,
                        c, flashbwd_plan_last_error(plan), want);
        if (flashbwd_plan_set_workspace(plan, ws, ws_max) != FLASHBWD_OK)
            worker_fail(w, "thread %d: set_workspace: %s", w->index, flashbwd_last_error());
        const int check = c % CHECK_EVERY == (long)w->index % CHECK_EVERY;
        if (check) poison(&w->td[k]);
        if (flashbwd_execute(plan, NULL) != FLASHBWD_OK)
            worker_fail(w, "thread %d cycle %ld: execute: %s", w->index, c,
                        flashbwd_plan_last_error(plan));
        else if (check)
            results_ok(w, k, "cpu");
        flashbwd_plan_destroy(plan);
        check_own_message(w, c);
    }
    free(ws);
    return NULL;
}

/* Make every worker's problems (fresh random each run; the seed is printed), run fn on
 * THREADS threads started together, and fail with the first recorded failure. */
static void run_workers(void *(*fn)(void *), int gpu, int32_t head_dim, int64_t max_seq)
{
    static worker w[THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    for (int t = 0; t < THREADS; ++t) {
        memset(&w[t], 0, sizeof w[t]);
        w[t].index = t, w[t].gpu = gpu, w[t].start = &start;
        w[t].target = cycles_per_thread();
        uint64_t s = test_seed() ^ ((uint64_t)(t + 1) * 0x9e3779b97f4a7c15ull);
        for (int k = 0; k < PROBLEMS; ++k) {
            random_case(&w[t], k, &s, head_dim, max_seq);
            assert_int_equal(tdata_make(&w[t].tc[k], &w[t].td[k], next(&s)), 0);
        }
    }
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; ++t) assert_int_equal(pthread_create(&th[t], NULL, fn, &w[t]), 0);
    for (int t = 0; t < THREADS; ++t) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&start);
    long cycles = 0, checks = 0, messages = 0;
    const char *first = NULL;
    for (int t = 0; t < THREADS; ++t) {
        cycles += w[t].failure[0] ? w[t].cycles : w[t].cycles + 1;
        checks += w[t].checks, messages += w[t].messages;
        if (w[t].failure[0] && !first) first = w[t].failure;
        for (int k = 0; k < PROBLEMS; ++k) tdata_free(&w[t].td[k]);
    }
    printf("    %d threads: %ld cycles, %ld fp64 checks, %ld own-message checks\n", THREADS,
           cycles, checks, messages);
    if (first) fail_msg("%s", first);
    assert_int_equal(cycles, (long)THREADS * cycles_per_thread());
}

static void test_16_threads_x_1000_cpu_cycles_with_own_messages(void **state)
{
    (void)state;
    run_workers(cpu_worker, 0, 0, 16);
}

/* --- The device cache, whatever the machine has ----------------------------------------- */

typedef struct create_race {
    pthread_barrier_t *start;
    int32_t device;
    int32_t status;
    char message[FB_MESSAGE_BYTES];
} create_race;

static void *race_create(void *arg)
{
    create_race *r = arg;
    flashbwd_problem p;
    memset(&p, 0, sizeof p);
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.backend = FLASHBWD_BACKEND_CUDA;
    p.device = r->device;
    p.head_dim = 64, p.batch = 1, p.heads_q = 2, p.seqlen_q = p.seqlen_k = 128;
    pthread_barrier_wait(r->start);
    flashbwd_plan *plan = NULL;
    r->status = flashbwd_plan_create(&p, &plan);
    snprintf(r->message, sizeof r->message, "%s", r->status ? flashbwd_last_error() : "");
    flashbwd_plan_destroy(plan);
    return NULL;
}

/* THREADS threads create a CUDA plan for `device` at the same moment; returns the status
 * they all got (failing the test if they disagree) and copies one message. */
static int32_t race(int32_t device, char *message, size_t size)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    create_race r[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; ++t) {
        r[t].start = &start, r[t].device = device;
        assert_int_equal(pthread_create(&th[t], NULL, race_create, &r[t]), 0);
    }
    for (int t = 0; t < THREADS; ++t) pthread_join(th[t], NULL);
    pthread_barrier_destroy(&start);
    for (int t = 1; t < THREADS; ++t)
        if (r[t].status != r[0].status)
            fail_msg("device %d: thread 0 got %s (%s), thread %d %s (%s)", device,
                     flashbwd_status_name(r[0].status), r[0].message, t,
                     flashbwd_status_name(r[t].status), r[t].message);
    snprintf(message, size, "%s", r[0].message);
    return r[0].status;
}

static int visible_gpus(void)
{
#ifdef FB_WITH_CUDA
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
#else
    return 0;
#endif
}

/* Failures are never cached: every round of racing creates fails the same way, with the
 * runtime's reason, and queries nothing it could store; an out-of-range ordinal fails on
 * its own without touching device 0's entry. With a GPU, device 0 then works and was queried
 * exactly once. Meaningful in every build: CPU-only (NOT_SUPPORTED), CUDA without a driver
 * (CI: NO_DEVICE), and on a GPU. */
static void test_failed_device_queries_do_not_poison_the_cache(void **state)
{
    (void)state;
    const int gpus = visible_gpus();
    char msg[FB_MESSAGE_BYTES];
    const int32_t bad = race(63, msg, sizeof msg); /* beyond any machine's devices */
#ifdef FB_WITH_CUDA
    if (gpus > 0) {
        assert_int_equal(bad, FLASHBWD_ERR_INVALID_VALUE);
        assert_non_null(strstr(msg, "problem.device = 63"));
    } else {
        assert_int_equal(bad, FLASHBWD_ERR_NO_DEVICE);
        assert_non_null(strstr(msg, "cudaGetDeviceCount"));
    }
#else
    assert_int_equal(bad, FLASHBWD_ERR_NOT_SUPPORTED);
    assert_non_null(strstr(msg, "without CUDA"));
#endif
    for (int round = 0; round < 3; ++round) {
        const int32_t st = race(0, msg, sizeof msg);
        if (gpus > 0) {
            if (st != FLASHBWD_OK) fail_msg("device 0, round %d: %s", round, msg);
            assert_int_equal(fb_device_query_count(), 1);
        } else {
            /* the same refusal every round: a failure left nothing behind */
            assert_int_equal(st, bad);
            assert_int_equal(fb_device_query_count(), 0);
        }
    }
    printf("    %d GPU(s): %d rounds of %d racing creates gave %s; %lld device queries\n", gpus,
           4, THREADS, gpus ? "OK" : flashbwd_status_name(bad),
           (long long)fb_device_query_count());
}

/* ======================================================================================
 * GPU group
 * ====================================================================================== */

#ifdef FB_WITH_CUDA

/* Device copies of one problem's tensors. */
typedef struct dev_case {
    void *ptr[FLASHBWD_TENSOR_COUNT];
} dev_case;

static size_t elem_bytes(int32_t id)
{
    return id >= FLASHBWD_TENSOR_Q && id <= FLASHBWD_TENSOR_DV && id != FLASHBWD_TENSOR_LSE ? 2 : 4;
}

#define CUDA_TRY(w, call)                                                                \
    do {                                                                                 \
        const cudaError_t e_ = (call);                                                   \
        if (e_ != cudaSuccess) {                                                         \
            worker_fail((w), "thread %d: %s: %s", (w)->index, #call,                     \
                        cudaGetErrorString(e_));                                         \
            goto out;                                                                    \
        }                                                                                \
    } while (0)

static void *gpu_worker(void *arg)
{
    worker *w = arg;
    cudaStream_t stream = NULL;
    dev_case d[PROBLEMS];
    memset(d, 0, sizeof d);
    void *ws = NULL;
    size_t ws_max = 0;
    CUDA_TRY(w, cudaSetDevice(0));
    CUDA_TRY(w, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int k = 0; k < PROBLEMS; ++k) {
        for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) {
            const ttensor *t = &w->td[k].t[id];
            if (!t->data) continue;
            CUDA_TRY(w, cudaMalloc(&d[k].ptr[id], t->elems * elem_bytes(id)));
            CUDA_TRY(w, cudaMemcpy(d[k].ptr[id], t->data, t->elems * elem_bytes(id),
                                   cudaMemcpyHostToDevice));
        }
        flashbwd_problem p = tcase_problem(&w->tc[k], FLASHBWD_BACKEND_CUDA);
        flashbwd_plan *plan = NULL;
        if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK) {
            worker_fail(w, "thread %d: create: %s", w->index, flashbwd_last_error());
            goto out;
        }
        size_t b = 0;
        flashbwd_plan_workspace_size(plan, &b);
        if (b > ws_max) ws_max = b;
        flashbwd_plan_destroy(plan);
    }
    CUDA_TRY(w, cudaMalloc(&ws, ws_max));
    pthread_barrier_wait(w->start);
    for (long c = 0; c < w->target && !w->failure[0]; ++c) {
        w->cycles = c;
        const int k = (int)(c % PROBLEMS);
        const tcase *tc = &w->tc[k];
        tdata *td = &w->td[k];
        const int check = c % CHECK_EVERY == (long)w->index % CHECK_EVERY;
        if (check)
            for (int32_t id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
                CUDA_TRY(w, cudaMemsetAsync(d[k].ptr[id], 0xff, td->t[id].elems * 2, stream));
        flashbwd_problem p = tcase_problem(tc, FLASHBWD_BACKEND_CUDA);
        flashbwd_plan *plan = NULL;
        if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK) {
            worker_fail(w, "thread %d cycle %ld: create: %s", w->index, c, flashbwd_last_error());
            break;
        }
        int32_t st = tdata_bind(tc, td, plan, d[k].ptr);
        if (st == FLASHBWD_OK) st = flashbwd_plan_set_workspace(plan, ws, ws_max);
        if (st == FLASHBWD_OK) st = flashbwd_execute(plan, stream);
        if (st != FLASHBWD_OK)
            worker_fail(w, "thread %d cycle %ld: %s", w->index, c, flashbwd_plan_last_error(plan));
        flashbwd_plan_destroy(plan); /* host-only: the enqueued work does not read the plan */
        if (check && st == FLASHBWD_OK) {
            for (int32_t id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
                CUDA_TRY(w, cudaMemcpyAsync(td->t[id].data, d[k].ptr[id], td->t[id].elems * 2,
                                            cudaMemcpyDeviceToHost, stream));
            CUDA_TRY(w, cudaStreamSynchronize(stream));
            results_ok(w, k, "gpu");
        }
        check_own_message(w, c);
    }
    CUDA_TRY(w, cudaStreamSynchronize(stream));
out:
    for (int k = 0; k < PROBLEMS; ++k)
        for (int32_t id = 0; id < FLASHBWD_TENSOR_COUNT; ++id) cudaFree(d[k].ptr[id]);
    cudaFree(ws);
    if (stream) cudaStreamDestroy(stream);
    return NULL;
}

#endif /* FB_WITH_CUDA */

/* The first CUDA plans of the process, created by 16 threads at once: the cache must query
 * device 0 exactly once. Runs first in the GPU group's process. */
static void test_device_cache_initializes_once_under_16_racing_threads(void **state)
{
    (void)state;
    if (visible_gpus() == 0) {
        printf("    needs a GPU\n");
        skip();
    }
    assert_int_equal(fb_device_query_count(), 0);
    char msg[FB_MESSAGE_BYTES];
    const int32_t st = race(0, msg, sizeof msg);
    if (st != FLASHBWD_OK) fail_msg("16 racing creates on device 0: %s", msg);
    assert_int_equal(fb_device_query_count(), 1);
}

static void test_16_threads_x_1000_gpu_cycles_on_separate_streams(void **state)
{
    (void)state;
    if (visible_gpus() == 0) {
        printf("    needs a GPU\n");
        skip();
    }
#ifdef FB_WITH_CUDA
    /* head_dim 64: compiled in every build (FLASHBWD_HEAD_DIMS defaults to 64;128). */
    run_workers(gpu_worker, 1, 64, 300);
    assert_int_equal(fb_device_query_count(), 1);
#endif
}

int main(int argc, char **argv)
{
    test_seed();
    const struct CMUnitTest cpu[] = {
        cmocka_unit_test(test_16_threads_x_1000_cpu_cycles_with_own_messages),
        cmocka_unit_test(test_failed_device_queries_do_not_poison_the_cache),
    };
    const struct CMUnitTest gpu[] = {
        cmocka_unit_test(test_device_cache_initializes_once_under_16_racing_threads),
        cmocka_unit_test(test_16_threads_x_1000_gpu_cycles_on_separate_streams),
    };
    if (argc > 1 && strcmp(argv[1], "--gpu") == 0) return cmocka_run_group_tests(gpu, NULL, NULL);
    return cmocka_run_group_tests(cpu, NULL, NULL);
}
