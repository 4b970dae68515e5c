/* common.h — test helpers shared by the suites: fresh random problems, an independent fp64
 * forward and backward (the oracle of every numerical test), and binding a case's tensors
 * to a plan at any base address (host for the CPU backend, device for CUDA).
 *
 * Nothing here calls flashbwd's own math: the reference is written from the semantics in
 * abi/flashbwd.h (masks, softcap, ALiBi, GQA, varlen), materializing the score matrix per
 * (batch, head) in double.
 */
#ifndef FB_TESTS_COMMON_H
#define FB_TESTS_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "flashbwd.h"

/* One backward problem, as a test describes it. Zero means "off" / "default". */
typedef struct tcase {
    const char *name;
    int32_t dtype;        /* FLASHBWD_DTYPE_* */
    int32_t head_dim;
    int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k;
    int32_t causal;
    int32_t use_window, window_left, window_right;
    float softcap, scale;
    int32_t layout;       /* 0 packed (b,s,h,d); 1 padded strides; 2 (b,h,s,d) via strides */
    int32_t varlen;       /* lens_q/lens_k give each sequence's length (<= seqlen_q/k) */
    const int32_t *lens_q, *lens_k;
    int32_t alibi;        /* 0 none, 1 per head, 2 per (batch, head) */
    int32_t masked_rows;  /* set every 7th query row's LSE to -inf */
    int32_t sm_count;     /* problem.sm_count: few SMs make short masked plans group heads */
} tcase;

/* A 16-bit tensor (or fp32 LSE) in host memory with its strides. */
typedef struct ttensor {
    void *data;
    size_t elems;         /* allocation size, elements */
    int64_t stride[4];
    int32_t rank;
} ttensor;

typedef struct tdata {
    ttensor t[FLASHBWD_TENSOR_COUNT]; /* indexed by FLASHBWD_TENSOR_* */
    int64_t total_q, total_k;
    int64_t *off_q, *off_k;           /* per batch first row (varlen) */
    int64_t *len_q, *len_k;           /* per batch lengths */
    double *ref_dq, *ref_dk, *ref_dv; /* packed [rows][heads][head_dim] */
} tdata;

/* Random numbers: the seed comes from FLASHBWD_TEST_SEED or the clock, and is printed. */
uint64_t test_seed(void);
double rnd_normal(uint64_t *state);

/* Build random inputs for tc, run the fp64 forward (O, LSE) and backward (ref_d*). Output
 * tensors are allocated and poisoned (all bits set: NaN in fp16 and bf16). */
int tdata_make(const tcase *tc, tdata *td, uint64_t seed);
void tdata_free(tdata *td);

/* Bind every tensor of td to plan, using base[id] as the address of tensor id (NULL: use
 * td's host buffer). Returns the first failing status. */
int32_t tdata_bind(const tcase *tc, const tdata *td, flashbwd_plan *plan, void *const base[]);

/* flashbwd_problem for tc with the given backend. */
flashbwd_problem tcase_problem(const tcase *tc, int32_t backend);

/* A CPU-backend plan for tc (deterministic if asked) with td's host tensors bound and a
 * fresh workspace in *workspace (the caller frees it). NULL on failure, after printing
 * the library's message. */
flashbwd_plan *tcpu_plan(const tcase *tc, const tdata *td, int deterministic, void **workspace);

/* Relative Frobenius error of output tensor id (host data in td->t[id]) against the
 * reference; *nan_count receives elements that are NaN or Inf (unwritten or overflowed). */
double tdata_error(const tcase *tc, const tdata *td, int32_t id, int64_t *nan_count);

/* 16-bit conversions (round to nearest even), independent of the library's. */
float th_to_float(uint16_t h, int32_t dtype);
uint16_t th_from_float(float f, int32_t dtype);

#endif
