/* validate.c — read a caller's flashbwd_problem: struct-size rules, one check per field,
 * defaults, and the normalized form the rest of the library uses.
 *
 * Every rejection names the field and the value it saw. Checks run in field order, so the
 * first bad field is the one reported.
 */
#include <math.h>
#include <string.h>

#include "internal.h"

/* No flashbwd struct will ever be larger; bounds how far a bogus struct_size makes us read. */
#define FB_STRUCT_SIZE_MAX 4096

/* Longest sequence the kernels index with 32-bit row numbers (leaves room for a tile). */
#define FB_SEQLEN_MAX ((int64_t)INT32_MAX - 65536)

int fb_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    if (a != 0 && b > INT64_MAX / a) return 0;
    *out = a * b;
    return 1;
}

int fb_add_i64(int64_t a, int64_t b, int64_t *out)
{
    if (a > INT64_MAX - b) return 0;
    *out = a + b;
    return 1;
}

/* Copy a caller's struct of `size` bytes into `dst` (of `known` bytes), applying the
 * struct_size rules of flashbwd.h. */
static int32_t read_struct(const void *src, size_t size, void *dst, size_t known,
                           size_t oldest, const char *what)
{
    FB_FAIL_IF(NULL, size < oldest, FLASHBWD_ERR_STRUCT_SIZE,
               "%s.struct_size = %zu is smaller than the oldest %s (%zu bytes); set it "
               "from the header's STRUCT_SIZE constant", what, size, what, oldest);
    FB_FAIL_IF(NULL, size > FB_STRUCT_SIZE_MAX, FLASHBWD_ERR_STRUCT_SIZE,
               "%s.struct_size = %zu is larger than any flashbwd struct (%d bytes)", what,
               size, FB_STRUCT_SIZE_MAX);
    const unsigned char *bytes = src;
    for (size_t i = known; i < size; ++i)
        FB_FAIL_IF(NULL, bytes[i] != 0, FLASHBWD_ERR_STRUCT_SIZE,
                   "%s.struct_size = %zu: byte %zu is non-zero, but this library (%u) "
                   "knows only the first %zu bytes", what, size, i, flashbwd_version(), known);
    memset(dst, 0, known);
    memcpy(dst, src, size < known ? size : known);
    return FLASHBWD_OK;
}

#define FB_INVALID(cond, ...) FB_FAIL_IF(NULL, cond, FLASHBWD_ERR_INVALID_VALUE, __VA_ARGS__)

/* Check that a flag field is 0 or 1. */
#define FB_CHECK_FLAG(field)                                                             \
    FB_INVALID(p.field != 0 && p.field != 1, "problem." #field " = %d; expected 0 or 1", \
               (int)p.field)

int32_t fb_problem_read(const flashbwd_problem *in, fb_problem_norm *out)
{
    FB_FAIL_IF(NULL, in == NULL, FLASHBWD_ERR_NULL_ARGUMENT, "problem is NULL");
    flashbwd_problem p;
    FB_TRY(read_struct(in, in->struct_size, &p, sizeof p, FLASHBWD_PROBLEM_STRUCT_SIZE_1_0,
                       "problem"));
    memset(out, 0, sizeof *out);

    out->backend = p.backend ? p.backend : FLASHBWD_BACKEND_CUDA;
    FB_INVALID(out->backend != FLASHBWD_BACKEND_CUDA && out->backend != FLASHBWD_BACKEND_CPU,
               "problem.backend = %d; expected FLASHBWD_BACKEND_CUDA (1) or "
               "FLASHBWD_BACKEND_CPU (2)", p.backend);
    const int cuda = out->backend == FLASHBWD_BACKEND_CUDA;
    FB_INVALID(p.device < 0, "problem.device = %d; expected a device ordinal >= 0", p.device);
    out->device = p.device;

    out->dtype = p.dtype ? p.dtype : FLASHBWD_DTYPE_BF16;
    FB_INVALID(out->dtype != FLASHBWD_DTYPE_BF16 && out->dtype != FLASHBWD_DTYPE_FP16,
               "problem.dtype = %d; expected FLASHBWD_DTYPE_BF16 (1) or FLASHBWD_DTYPE_FP16 (2)",
               p.dtype);
    FB_INVALID(p.head_dim <= 0 || p.head_dim > 256 || p.head_dim % 8 != 0,
               "problem.head_dim = %d; expected a multiple of 8 in 8..256", p.head_dim);
    out->head_dim = p.head_dim;

    FB_INVALID(p.batch <= 0, "problem.batch = %lld; expected >= 1", (long long)p.batch);
    FB_INVALID(p.heads_q <= 0, "problem.heads_q = %lld; expected >= 1", (long long)p.heads_q);
    FB_INVALID(p.heads_kv < 0, "problem.heads_kv = %lld; expected >= 0 (0 = heads_q)",
               (long long)p.heads_kv);
    out->batch = p.batch;
    out->heads_q = p.heads_q;
    out->heads_kv = p.heads_kv ? p.heads_kv : p.heads_q;
    FB_INVALID(out->heads_kv > out->heads_q || out->heads_q % out->heads_kv != 0,
               "problem.heads_kv = %lld must divide problem.heads_q = %lld",
               (long long)out->heads_kv, (long long)out->heads_q);

    FB_INVALID(p.seqlen_q <= 0, "problem.seqlen_q = %lld; expected >= 1",
               (long long)p.seqlen_q);
    FB_INVALID(p.seqlen_k <= 0, "problem.seqlen_k = %lld; expected >= 1",
               (long long)p.seqlen_k);
    FB_FAIL_IF(NULL, p.seqlen_q > FB_SEQLEN_MAX, FLASHBWD_ERR_OVERFLOW,
               "problem.seqlen_q = %lld exceeds the largest supported length %lld",
               (long long)p.seqlen_q, (long long)FB_SEQLEN_MAX);
    FB_FAIL_IF(NULL, p.seqlen_k > FB_SEQLEN_MAX, FLASHBWD_ERR_OVERFLOW,
               "problem.seqlen_k = %lld exceeds the largest supported length %lld",
               (long long)p.seqlen_k, (long long)FB_SEQLEN_MAX);
    out->seqlen_q = p.seqlen_q;
    out->seqlen_k = p.seqlen_k;

    FB_CHECK_FLAG(varlen);
    out->varlen = p.varlen;
    FB_INVALID(!p.varlen && p.total_q != 0,
               "problem.total_q = %lld is set but problem.varlen = 0", (long long)p.total_q);
    FB_INVALID(!p.varlen && p.total_k != 0,
               "problem.total_k = %lld is set but problem.varlen = 0", (long long)p.total_k);
    FB_INVALID(p.total_q < 0, "problem.total_q = %lld; expected >= 0", (long long)p.total_q);
    FB_INVALID(p.total_k < 0, "problem.total_k = %lld; expected >= 0", (long long)p.total_k);
    if (p.varlen) {
        /* cu_seqlens holds batch + 1 int32 entries: their count and bytes must be
         * addressable (set_tensor's limit), and batch + 1 must not overflow. */
        FB_FAIL_IF(NULL, p.batch >= INT64_MAX / 8, FLASHBWD_ERR_OVERFLOW,
                   "problem.batch = %lld: a varlen plan's cu_seqlens (batch + 1 entries) would "
                   "be too large to address", (long long)p.batch);
        int64_t bq, bk;
        FB_FAIL_IF(NULL, !fb_mul_i64(p.batch, p.seqlen_q, &bq), FLASHBWD_ERR_OVERFLOW,
                   "problem.batch * seqlen_q overflows (%lld * %lld)", (long long)p.batch,
                   (long long)p.seqlen_q);
        FB_FAIL_IF(NULL, !fb_mul_i64(p.batch, p.seqlen_k, &bk), FLASHBWD_ERR_OVERFLOW,
                   "problem.batch * seqlen_k overflows (%lld * %lld)", (long long)p.batch,
                   (long long)p.seqlen_k);
        out->total_q = p.total_q ? p.total_q : bq;
        out->total_k = p.total_k ? p.total_k : bk;
    }

    FB_INVALID(!isfinite(p.softmax_scale) || p.softmax_scale < 0.0f,
               "problem.softmax_scale = %g; expected a finite value > 0 (0 = 1/sqrt(head_dim))",
               (double)p.softmax_scale);
    out->softmax_scale = p.softmax_scale != 0.0f ? p.softmax_scale
                                                 : 1.0f / sqrtf((float)p.head_dim);
    FB_INVALID(!isfinite(p.softcap) || p.softcap < 0.0f,
               "problem.softcap = %g; expected a finite value >= 0 (0 = off)",
               (double)p.softcap);
    out->softcap = p.softcap;

    FB_CHECK_FLAG(causal);
    FB_CHECK_FLAG(use_window);
    FB_INVALID(!p.use_window && (p.window_left != 0 || p.window_right != 0),
               "problem.window_left = %d, window_right = %d are set but problem.use_window = 0",
               p.window_left, p.window_right);
    FB_INVALID(p.window_left < -1,
               "problem.window_left = %d; expected >= 0, or -1 for unbounded", p.window_left);
    FB_INVALID(p.window_right < -1,
               "problem.window_right = %d; expected >= 0, or -1 for unbounded", p.window_right);
    out->causal = p.causal;
    out->window_left = p.use_window && p.window_left >= 0 ? p.window_left : -1;
    out->window_right = p.use_window && p.window_right >= 0 ? p.window_right : -1;
    if (p.causal) out->window_right = 0; /* causal = a window whose right edge is the diagonal */

    FB_CHECK_FLAG(deterministic);
    out->deterministic = p.deterministic;

    FB_INVALID(p.sm_count < 0, "problem.sm_count = %d; expected >= 0 (0 = the device's)",
               p.sm_count);
    out->sm_count_override = p.sm_count;
    FB_INVALID(p.arch != 0 && !cuda,
               "problem.arch = %d describes a CUDA device, but problem.backend is CPU", p.arch);
    FB_INVALID(p.arch != 0 && fb_arch_smem_limit(p.arch) == 0,
               "problem.arch = %d; expected 0 (query the device) or one of 80, 86, 87, 89, 90",
               p.arch);
    FB_INVALID(p.smem_per_block < 0, "problem.smem_per_block = %d; expected >= 0",
               p.smem_per_block);
    FB_INVALID(p.smem_per_block != 0 && p.arch == 0,
               "problem.smem_per_block = %d is set but problem.arch = 0", p.smem_per_block);
    out->explicit_arch = p.arch;
    out->explicit_smem = p.smem_per_block;
    FB_INVALID(p.reserved0 != 0, "problem.reserved0 = %d; expected 0", p.reserved0);

    /* Element counts of the largest tensors must be addressable with 64-bit offsets. */
    int64_t rows_q = p.varlen ? out->total_q : 0, rows_k = p.varlen ? out->total_k : 0, n;
    if (!p.varlen) {
        FB_FAIL_IF(NULL, !fb_mul_i64(p.batch, p.seqlen_q, &rows_q), FLASHBWD_ERR_OVERFLOW,
                   "problem.batch * seqlen_q overflows (%lld * %lld)", (long long)p.batch,
                   (long long)p.seqlen_q);
        FB_FAIL_IF(NULL, !fb_mul_i64(p.batch, p.seqlen_k, &rows_k), FLASHBWD_ERR_OVERFLOW,
                   "problem.batch * seqlen_k overflows (%lld * %lld)", (long long)p.batch,
                   (long long)p.seqlen_k);
    }
    FB_FAIL_IF(NULL, !fb_mul_i64(rows_q, out->heads_q, &n) || !fb_mul_i64(n, 256 * 4, &n),
               FLASHBWD_ERR_OVERFLOW,
               "Q has too many elements to address: %lld rows x %lld heads x %d",
               (long long)rows_q, (long long)out->heads_q, p.head_dim);
    FB_FAIL_IF(NULL, !fb_mul_i64(rows_k, out->heads_kv, &n) || !fb_mul_i64(n, 256 * 4, &n),
               FLASHBWD_ERR_OVERFLOW,
               "K has too many elements to address: %lld rows x %lld heads x %d",
               (long long)rows_k, (long long)out->heads_kv, p.head_dim);
    FB_FAIL_IF(NULL, (uint64_t)n > (uint64_t)SIZE_MAX, FLASHBWD_ERR_OVERFLOW,
               "tensor sizes exceed the address space");

    if (cuda) {
        /* Grid limits: heads on grid y, batch on grid z (65535 each). */
        FB_FAIL_IF(NULL, out->heads_q > 65535, FLASHBWD_ERR_NOT_SUPPORTED,
                   "problem.heads_q = %lld; the CUDA backend supports at most 65535",
                   (long long)out->heads_q);
        FB_FAIL_IF(NULL, out->batch > 65535, FLASHBWD_ERR_NOT_SUPPORTED,
                   "problem.batch = %lld; the CUDA backend supports at most 65535",
                   (long long)out->batch);
    }
    return FLASHBWD_OK;
}
