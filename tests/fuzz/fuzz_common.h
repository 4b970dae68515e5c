/* fuzz_common.h — what the libFuzzer targets share: a reader that turns the fuzzer's bytes
 * into values (never failing: an exhausted input reads as zeros), biased pickers for sizes,
 * strides and pointers, a small flashbwd_problem builder, and an independent model of tensor
 * extents and spans that the targets check the library against.
 *
 * The targets link the C files of src/ directly (CPU-only, no FB_WITH_CUDA; see build.sh).
 * A failed check calls fz_fail(), which prints the reason and aborts, so libFuzzer records
 * the input as a crash exactly as it does for a sanitizer report.
 */
#ifndef FB_FUZZ_COMMON_H
#define FB_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "flashbwd.h"

/* --- Reading the input ----------------------------------------------------------------- */

typedef struct fz {
    const uint8_t *p;
    size_t n;
} fz;

uint64_t fz_bits(fz *f, int bytes);             /* little-endian, 1..8 bytes */
uint32_t fz_below(fz *f, uint32_t n);           /* 0..n-1 (n >= 1) */
int64_t fz_range(fz *f, int64_t lo, int64_t hi); /* lo..hi inclusive, hi - lo < 2^32 */
int fz_chance(fz *f, uint32_t one_in);          /* 1 with probability ~1/one_in */
void fz_bytes(fz *f, void *dst, size_t n);      /* fill dst; zeros once exhausted */

/* An int64 biased to the values that break arithmetic: 0, ±1, powers of two around 2^31,
 * 2^32, 2^53, 2^62, INT64 limits, small numbers, or raw bits. */
int64_t fz_i64_wild(fz *f);
/* A stride: mostly plausible (small, a multiple of 8, a product of extents), sometimes wild. */
int64_t fz_stride(fz *f, int64_t plausible);

/* --- Failing a check ------------------------------------------------------------------ */

_Noreturn void fz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define FZ_CHECK(cond, ...)                                                              \
    do {                                                                                 \
        if (!(cond)) fz_fail(__VA_ARGS__);                                               \
    } while (0)

/* Checks every failing call must pass: a known status, and a thread-local message that
 * starts with the status's name (plus, for a plan, the same per-plan message). */
void fz_check_failure(int32_t status, const flashbwd_plan *plan, const char *call);

/* --- Problems --------------------------------------------------------------------------- */

/* A small valid-looking problem (batch <= 3, heads <= 4, seqlen <= max_seq, head_dim <=
 * 32), occasionally with one field pushed out of range. backend: FLASHBWD_BACKEND_CPU, or
 * FLASHBWD_BACKEND_CUDA for a planning-only plan (arch 80/86/89/90). */
flashbwd_problem fz_problem(fz *f, int32_t backend, int64_t max_seq);

/* --- The model: what a tensor id means for a problem, computed without the library ----- */

typedef struct fz_shape {
    int rank;          /* 1..4 */
    int64_t ext[4];    /* extents, outermost first */
    size_t elem_bytes; /* 2 (16-bit), 4 (LSE, int32 lengths, slopes) */
    int output;        /* dQ, dK, dV */
} fz_shape;

/* Shape of tensor id for problem p (after the library's defaults: heads_kv 0 = heads_q,
 * total 0 = batch * seqlen); 0 if the id is not valid for p. ALiBi slopes are (heads_q)
 * when alibi_rank is 1 and (batch, heads_q) otherwise. */
int fz_shape_of(const flashbwd_problem *p, int32_t id, int alibi_rank, fz_shape *s);
/* Packed row-major strides of a shape. */
void fz_packed(const fz_shape *s, int64_t stride[4]);
/* Largest element offset reached with these strides, or -1 if it overflows int64. */
int64_t fz_last_offset(const fz_shape *s, const int64_t *stride, int rank);

/* Byte offsets of every element of a tensor, sorted (malloc'd; the caller frees them);
 * NULL when it has more than `limit` elements. */
int64_t *fz_offsets(const fz_shape *s, const int64_t *stride, int64_t limit, int64_t *count);
/* Whether two tensors, at base addresses pa and pb with sorted element offsets oa and ob
 * (elements of ea and eb bytes), share a byte. */
int fz_offsets_share(uintptr_t pa, const int64_t *oa, int64_t na, size_t ea, uintptr_t pb,
                     const int64_t *ob, int64_t nb, size_t eb);
/* Whether one tensor writes some byte twice (two elements overlap); -1 when too large. */
int fz_tensor_self_overlaps(const fz_shape *s, const int64_t *stride, int64_t limit);

#endif /* FB_FUZZ_COMMON_H */
