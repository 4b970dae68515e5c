/* internal.h — private declarations shared by the host sources in src/. Never installed.
 *
 * Naming: fb_ for functions used across files, FB_ for macros; everything is hidden by
 * -fvisibility=hidden and the version script.
 */
#ifndef FB_INTERNAL_H
#define FB_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "flashbwd.h"
#include "../kernels/launch.h"

/* --- Messages and failures (status.c) ------------------------------------------------ */

#define FB_MESSAGE_BYTES 512

/* Record a failure: formats the message into the plan (if any) and the calling thread's
 * buffer, and returns status. */
int32_t fb_fail(flashbwd_plan *plan, int32_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Return from the calling function with a recorded failure when cond holds. */
#define FB_FAIL_IF(plan, cond, status, ...)                                              \
    do {                                                                                 \
        if (cond) return fb_fail((plan), (status), __VA_ARGS__);                         \
    } while (0)

/* Forward a failing status (the callee already recorded its message). */
#define FB_TRY(expr)                                                                     \
    do {                                                                                 \
        int32_t fb_try_status_ = (expr);                                                 \
        if (fb_try_status_ != FLASHBWD_OK) return fb_try_status_;                        \
    } while (0)

/* Clear the plan's message at the start of a call that succeeds. */
void fb_clear_plan_message(flashbwd_plan *plan);

/* --- Checked arithmetic (validate.c) -------------------------------------------------- */

/* *out = a * b, or 0 (false) on overflow of int64. Inputs must be >= 0. */
int fb_mul_i64(int64_t a, int64_t b, int64_t *out);
/* *out = a + b, or 0 on overflow. Inputs must be >= 0. */
int fb_add_i64(int64_t a, int64_t b, int64_t *out);

static inline int64_t fb_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t fb_round_up(int64_t a, int64_t b) { return fb_cdiv(a, b) * b; }

/* --- Device properties (device.c) ----------------------------------------------------- */

typedef struct fb_device_props {
    int32_t arch;           /* 10*major + minor */
    int32_t sm_count;
    int32_t smem_per_block; /* opt-in bytes */
} fb_device_props;

/* Properties of CUDA device `ordinal`, queried once per process (thread-safe) and cached.
 * Failures are recorded on plan (which may be NULL). */
int32_t fb_device_get(flashbwd_plan *plan, int32_t ordinal, fb_device_props *out);

/* Test hook: how many times the device cache queried the CUDA runtime. */
int64_t fb_device_query_count(void);

/* Run fn with `ordinal` as the current device, restoring the caller's device after. */
int32_t fb_device_prepare_kernel(flashbwd_plan *plan, int32_t ordinal, int kernel_index,
                                 int smem_bytes);

/* Build the plan's launch graph (plan->graph) on device `ordinal`, the caller's current
 * device restored afterwards. */
int32_t fb_device_build_graph(flashbwd_plan *plan, int32_t ordinal);
/* CUDA builds: record a failed runtime call (err_code a cudaError_t): FLASHBWD_ERR_NO_DEVICE
 * for "no driver" and "no device", else FLASHBWD_ERR_CUDA; the message names call and error. */
int32_t fb_cuda_fail(flashbwd_plan *plan, int err_code, const char *call);
/* Check that the calling thread's current device is `ordinal`. */
int32_t fb_device_check_current(flashbwd_plan *plan, int32_t ordinal);

/* --- Kernel configuration (config.c) -------------------------------------------------- */

typedef struct fb_config {
    int32_t arch_class;      /* 80, 86 or 90: the config-table row's ARCH */
    int32_t kernel_head_dim; /* HD */
    int32_t block_m, block_n, stages;
    int32_t warps_sdp, warps_dkv, warps_dq;
    int32_t dq_lag;          /* LAG: 1 = dQ one step late, from a second dS buffer */
    int32_t dq_fold;         /* FOLD: main kernel converts dQ if seqlen_k <= this; -1 always */
    int32_t dq_fold_masked;  /* FOLDM: the same for plans with a causal mask or a window */
    int32_t dq_fold_min;     /* FMIN: and only if seqlen_k > this */
    int32_t split;           /* SPLIT: the split kernel serves seqlen_k > this; -1 never */
    int32_t split_stages;    /* SST: its pipeline stages; 0 = not compiled */
    int32_t smem_bytes;      /* the main kernel's (bwd_main) */
    int32_t split_smem_bytes; /* the split kernel's; 0 without one */
} fb_config;

/* The architecture class whose rows serve `arch` (80, 86 or 90), or 0 if none does. */
int32_t fb_arch_class(int32_t arch);
/* Documented opt-in shared memory per block for an architecture, or 0 if unknown. */
int32_t fb_arch_smem_limit(int32_t arch);
/* The kernel head dim serving head_dim, or 0 if none. */
int32_t fb_kernel_head_dim(int32_t head_dim);
/* Pick the row for (arch, head_dim) that fits smem_limit. */
int32_t fb_config_select(flashbwd_plan *plan, int32_t arch, int32_t head_dim,
                         int32_t smem_limit, fb_config *out);
/* Number of table rows and row i (for the planning tests). */
int fb_config_count(void);
const fb_config *fb_config_row(int i);

/* --- Plan ----------------------------------------------------------------------------- */

/* A bound tensor. */
typedef struct fb_tensor {
    void *ptr;
    int64_t stride[4];   /* outermost first; unused entries 0 */
    int32_t rank;
} fb_tensor;

/* Workspace regions, byte offsets from the workspace base (workspace.c). */
typedef struct fb_workspace_layout {
    size_t lse_log2, dpsum, dq_accum, dk_accum, dv_accum; /* CUDA */
    size_t dq_count, dkv_sem;       /* CUDA; dkv_sem deterministic GQA only */
    size_t zero_begin, zero_bytes;                         /* CUDA: zeroed by preprocess */
    size_t cpu_floats;                                      /* CPU: scratch floats */
    size_t total_bytes;
    int64_t rows_q, rows_k;   /* per-head rows of the q-side and k-side regions */
} fb_workspace_layout;

/* The problem after defaults and normalization. */
typedef struct fb_problem_norm {
    int32_t backend, device, dtype, head_dim;
    int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, total_q, total_k;
    float softmax_scale, softcap;
    int32_t causal;
    int32_t window_left;  /* -1 = unbounded; causal folded in (right = 0) */
    int32_t window_right;
    int32_t varlen, deterministic;
    int32_t sm_count_override, explicit_arch, explicit_smem;
} fb_problem_norm;

/* The split kernel's tensor maps for Q and dO, kept from the last execute (tma_maps.c):
 * valid once encoded for the tensors and shape in the key; on = both encodes succeeded. */
typedef struct fb_tma_cache {
    const void *q, *dout;
    int64_t q_stride[3], do_stride[3];
    int32_t shape[4]; /* batch, heads_q, seqlen_q, head_dim */
    int32_t valid, on;
    /* the maps' bytes (fb_tma_map without its 64-byte alignment, which calloc'd plans
     * would not honour; copied into the aligned parameter block at execute) */
    uint64_t q_map[16], do_map[16];
} fb_tma_cache;

struct flashbwd_plan {
    fb_problem_norm prob;
    fb_device_props props;   /* planned-for device (zero for the CPU backend) */
    int32_t planning_only;   /* created from explicit device properties */
    fb_config config;        /* CUDA backend */
    fb_launch_table launches;
    int32_t launch_graph;    /* build graph (FLASHBWD_LAUNCH_GRAPH, default 1) */
    fb_launch_graph *graph;  /* the launches as one CUDA graph; NULL: launched one by one */
    fb_workspace_layout ws;
    fb_tma_cache tma;        /* CUDA backend, split kernel with FB_SPLIT_TMA */
    fb_tensor tensors[FLASHBWD_TENSOR_COUNT];
    void *workspace;
    size_t workspace_bytes;
    atomic_int busy;         /* set while a call mutates or executes the plan */
    char message[FB_MESSAGE_BYTES];
};

/* validate.c: check a caller's struct and produce the normalized problem. */
int32_t fb_problem_read(const flashbwd_problem *in, fb_problem_norm *out);

/* workspace.c: lay out the workspace for a planned problem. */
int32_t fb_workspace_plan(flashbwd_plan *plan);

/* launches.c: grid and block of every launch, from the problem and the config. */
int32_t fb_launches_plan(flashbwd_plan *plan);

/* tensors.c: element size, name and requiredness of a tensor id. */
size_t fb_tensor_elem_bytes(int32_t id);
const char *fb_tensor_name(int32_t id);
/* Whether tensor id must be set before execute. */
int fb_tensor_required(const flashbwd_plan *plan, int32_t id);

/* cpu_ref.c: run the backward on the CPU. */
int32_t fb_cpu_execute(flashbwd_plan *plan);

/* launch.c: run the backward on the GPU. */
int32_t fb_cuda_execute(flashbwd_plan *plan, void *stream);

/* tma_maps.c: set k->tma_on, and k->tma_q and k->tma_do where the split kernel can refill
 * through TMA, from the plan's cache or encoded now (CUDA builds only). */
void fb_tma_bind(flashbwd_plan *plan, fb_bwd_params *k);

/* Half-precision conversions used by the CPU backend (half.c). */
float fb_half_to_float(uint16_t h, int32_t dtype);
uint16_t fb_float_to_half(float f, int32_t dtype);

#endif /* FB_INTERNAL_H */
