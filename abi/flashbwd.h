/* flashbwd.h — the FlashAttention backward pass (dQ, dK, dV) behind a stable C ABI.
 *
 * flashbwd computes the gradients of softmax attention from the tensors a FlashAttention
 * forward pass already produced (Q, K, V, O, the forward's logsumexp) and the incoming
 * gradient dO. It runs its own CUDA kernels on NVIDIA GPUs (sm_80 and newer), or an explicit
 * CPU reference backend that computes the same math on host memory.
 *
 * The API has one shape, borrowed from cuBLASLt and cuFFT: plan once, execute many.
 *
 *     flashbwd_problem p = {0};                 // zero means "default" for every field
 *     p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
 *     p.batch = 2; p.heads_q = 16; p.seqlen_q = p.seqlen_k = 4096; p.head_dim = 128;
 *     flashbwd_plan *plan;
 *     flashbwd_plan_create(&p, &plan);          // validates, sizes, caches launch shapes
 *     flashbwd_plan_set_tensor(plan, FLASHBWD_TENSOR_Q, q, NULL, 0);   // NULL = packed
 *     ...                                       // K, V, O, dO, LSE, dQ, dK, dV
 *     flashbwd_plan_workspace_size(plan, &bytes);
 *     flashbwd_plan_set_workspace(plan, ws, bytes);
 *     flashbwd_execute(plan, stream);           // enqueues; never allocates or syncs
 *     flashbwd_plan_destroy(plan);
 *
 * Conventions that hold for every function below:
 *   - Functions return an int32_t status: FLASHBWD_OK (0) or one of FLASHBWD_ERR_*.
 *     Every failure also records a message naming the offending field and value; read it
 *     with flashbwd_plan_last_error() (failures on a plan) or flashbwd_last_error() (any
 *     failure, on the calling thread). One exception: FLASHBWD_ERR_BUSY (the plan is in
 *     use by another thread) is recorded only on the calling thread, since writing the
 *     plan's message would race with the call that holds the plan.
 *   - Sizes and strides are int64_t and count elements; byte counts are size_t; device
 *     pointers and the CUDA stream are void *.
 *   - Input structs begin with size_t struct_size, set from a FLASHBWD_*_STRUCT_SIZE
 *     constant. Newer libraries accept older, shorter structs; an older library rejects a
 *     longer struct only if the part it does not know is non-zero.
 *   - Everything here is in ABI node FLASHBWD_1.0 unless its "Since" says otherwise
 *     (1.1: flashbwd_workspace_alloc, flashbwd_workspace_free).
 *
 * The ABI policy (what stays stable, how versions move) is docs/abi-policy.md.
 */
#ifndef FLASHBWD_H
#define FLASHBWD_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define FLASHBWD_API __declspec(dllimport)
#elif defined(__GNUC__)
#define FLASHBWD_API __attribute__((visibility("default")))
#else
#define FLASHBWD_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================
 * Versions
 * ====================================================================================== */

#define FLASHBWD_VERSION_MAJOR 1
#define FLASHBWD_VERSION_MINOR 1
#define FLASHBWD_VERSION_PATCH 0
/* MAJOR*10000 + MINOR*100 + PATCH, e.g. 10100 for 1.1.0. */
#define FLASHBWD_VERSION \
    (FLASHBWD_VERSION_MAJOR * 10000 + FLASHBWD_VERSION_MINOR * 100 + FLASHBWD_VERSION_PATCH)

/* flashbwd_version() — the version of the loaded library, encoded like FLASHBWD_VERSION.
 * Compare it with the FLASHBWD_VERSION you compiled against: the majors must be equal and
 * the runtime must not be older (bindings check this when they load).
 * @return the version number; never fails.
 * Threads: any thread, concurrently.  Since: 1.0 */
FLASHBWD_API uint32_t flashbwd_version(void);

/* ======================================================================================
 * Status codes. Append-only: a value is never renumbered or reused.
 * ====================================================================================== */

#define FLASHBWD_OK                       0  /* success                                  1.0 */
#define FLASHBWD_ERR_NULL_ARGUMENT        1  /* a required pointer argument is NULL      1.0 */
#define FLASHBWD_ERR_STRUCT_SIZE          2  /* struct_size unknown, or unknown tail set 1.0 */
#define FLASHBWD_ERR_INVALID_VALUE        3  /* a field or argument is out of range      1.0 */
#define FLASHBWD_ERR_NOT_SUPPORTED        4  /* valid, but this build/device can't do it 1.0 */
#define FLASHBWD_ERR_NO_DEVICE            5  /* no usable CUDA driver or device          1.0 */
#define FLASHBWD_ERR_WRONG_DEVICE         6  /* current device is not the plan's         1.0 */
#define FLASHBWD_ERR_MISALIGNED           7  /* pointer or stride breaks 16-byte rules   1.0 */
#define FLASHBWD_ERR_TENSOR_NOT_SET       8  /* execute before a required tensor is set  1.0 */
#define FLASHBWD_ERR_WORKSPACE_TOO_SMALL  9  /* workspace missing or smaller than needed 1.0 */
#define FLASHBWD_ERR_CUDA                10  /* the CUDA runtime reported an error       1.0 */
#define FLASHBWD_ERR_OUT_OF_MEMORY       11  /* host memory allocation failed            1.0 */
#define FLASHBWD_ERR_OVERFLOW            12  /* a size or offset overflows 64 bits       1.0 */
#define FLASHBWD_ERR_BUSY                13  /* plan used from two threads at once       1.0 */
#define FLASHBWD_ERR_OVERLAP             14  /* an output overlaps another tensor        1.0 */
#define FLASHBWD_ERR_INVALID_LENGTHS     15  /* cu_seqlens/seqused contradict the plan   1.0 */
#define FLASHBWD_ERR_INTERNAL            16  /* a bug in flashbwd; please report it      1.0 */
/* One past the largest status this header knows. */
#define FLASHBWD_STATUS_COUNT            17

/* flashbwd_status_name() — the stable identifier of a status, e.g. "FLASHBWD_ERR_CUDA".
 * @status any value; unknown values give "FLASHBWD_ERR_UNKNOWN".
 * @return a static string, never NULL; the caller must not free it.
 * Threads: any thread, concurrently.  Since: 1.0 */
FLASHBWD_API const char *flashbwd_status_name(int32_t status);

/* flashbwd_status_string() — a one-line English description of a status.
 * @status any value; unknown values give a generic description.
 * @return a static string, never NULL; the caller must not free it.
 * Threads: any thread, concurrently.  Since: 1.0 */
FLASHBWD_API const char *flashbwd_status_string(int32_t status);

/* ======================================================================================
 * The problem: everything a plan is built for.
 * ====================================================================================== */

/* Element types of Q, K, V, O, dO, dQ, dK, dV (one type for all of them). */
#define FLASHBWD_DTYPE_BF16  1 /* bfloat16; also what 0 (the default) means          1.0 */
#define FLASHBWD_DTYPE_FP16  2 /* IEEE binary16                                      1.0 */

/* Where the plan runs. */
#define FLASHBWD_BACKEND_CUDA 1 /* a CUDA device; also what 0 (the default) means     1.0 */
#define FLASHBWD_BACKEND_CPU  2 /* the CPU reference: host pointers, fp32 math, slow  1.0 */

/* flashbwd_problem — the plan-time description of one backward pass.
 * Zero every byte, set struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE, then set the fields you
 * need; a field left 0 takes the default its comment gives. Fields marked "required" have
 * no default: 0 is rejected with FLASHBWD_ERR_INVALID_VALUE.
 *
 * Layouts (strides are given per tensor with flashbwd_plan_set_tensor):
 *   Q, O, dO, dQ: (batch, seqlen_q, heads_q, head_dim)   or, varlen, (total_q, heads_q, head_dim)
 *   K, V, dK, dV: (batch, seqlen_k, heads_kv, head_dim)  or, varlen, (total_k, heads_kv, head_dim)
 *   LSE (fp32):   (batch, heads_q, seqlen_q)             or, varlen, (heads_q, total_q)
 * LSE is the natural-log logsumexp of the scaled (and soft-capped, and biased) scores, as
 * FlashAttention's forward returns it. A row whose LSE is -inf gets zero gradients.
 * Masks: causal is aligned bottom-right (query i sees key j iff j <= i + seqlen_k - seqlen_q);
 * a window lets query i see keys [i + sk - sq - window_left, i + sk - sq + window_right]. */
typedef struct flashbwd_problem {
    size_t  struct_size;   /* FLASHBWD_PROBLEM_STRUCT_SIZE (required)                      */
    int32_t backend;       /* FLASHBWD_BACKEND_*; 0 = CUDA                                  */
    int32_t device;        /* CUDA device ordinal; 0 = device 0. Ignored by the CPU backend */
    int32_t dtype;         /* FLASHBWD_DTYPE_*; 0 = bf16                                    */
    int32_t head_dim;      /* required: 8..256, a multiple of 8                             */
    int64_t batch;         /* required: number of sequences (varlen: cu_seqlens has batch+1) */
    int64_t heads_q;       /* required: query heads                                          */
    int64_t heads_kv;      /* key/value heads; must divide heads_q (GQA/MQA); 0 = heads_q    */
    int64_t seqlen_q;      /* required: query length (varlen: the longest sequence)          */
    int64_t seqlen_k;      /* required: key length (varlen: the longest sequence)            */
    int64_t total_q;       /* varlen only: rows of packed Q; 0 = batch * seqlen_q            */
    int64_t total_k;       /* varlen only: rows of packed K; 0 = batch * seqlen_k            */
    float   softmax_scale; /* scale of q.k; 0 = 1/sqrt(head_dim); must be finite and > 0     */
    float   softcap;       /* score = softcap * tanh(scale * q.k / softcap); 0 = off         */
    int32_t causal;        /* 1 = causal (bottom-right aligned); 0 = not                     */
    int32_t use_window;    /* 1 = apply window_left/right; 0 = no sliding window             */
    int32_t window_left;   /* keys to the left of the diagonal; -1 = unbounded (< -1 invalid)*/
    int32_t window_right;  /* keys to the right of the diagonal; -1 = unbounded (< -1 invalid)*/
    int32_t varlen;        /* 1 = packed sequences with cu_seqlens_q/k; 0 = padded batch     */
    int32_t deterministic; /* 1 = bitwise-identical outputs run to run; 0 = fastest          */
    int32_t sm_count;      /* SMs to schedule for; 0 = the device's count                    */
    int32_t arch;          /* planning only: describe a device as 10*major+minor (80, 86,
                              89, 90) instead of querying one; 0 = query the device.
                              A plan made this way can be inspected, not executed.           */
    int32_t smem_per_block; /* with arch: opt-in shared memory per block in bytes;
                               0 = that architecture's documented limit                      */
    int32_t reserved0;     /* must be 0                                                      */
} flashbwd_problem;

/* Bytes of flashbwd_problem as of this header: offsetof(last field) + sizeof(last field). */
#define FLASHBWD_PROBLEM_STRUCT_SIZE_1_0 ((size_t)(8 + 4 * 4 + 7 * 8 + 2 * 4 + 10 * 4))
#define FLASHBWD_PROBLEM_STRUCT_SIZE     FLASHBWD_PROBLEM_STRUCT_SIZE_1_0

/* ======================================================================================
 * Plans
 * ====================================================================================== */

/* An immutable description of one problem plus the tensors and workspace bound to it. */
typedef struct flashbwd_plan flashbwd_plan;

/* flashbwd_plan_create() — validate a problem and build a plan for it. [constructor]
 * Does the expensive work once: validates every field, queries the device's properties
 * (cached per device for the whole process), picks the kernel configuration for its
 * architecture and shared memory, raises the kernels' shared-memory limit, caches the
 * grid and block shape of every launch and the workspace layout, and (CUDA backend) builds
 * the plan's launch graph: its kernels as one instantiated CUDA graph, which execute
 * replays (environment FLASHBWD_LAUNCH_GRAPH=0 turns it off). Allocates no
 * device memory of the caller's.
 * @problem read during the call only.
 * @out     receives the plan, or NULL on failure. The caller owns the plan and releases it
 *          with flashbwd_plan_destroy().
 * @return  FLASHBWD_OK; FLASHBWD_ERR_NULL_ARGUMENT; FLASHBWD_ERR_STRUCT_SIZE;
 *          FLASHBWD_ERR_INVALID_VALUE (the message names the field and value);
 *          FLASHBWD_ERR_NOT_SUPPORTED (a valid problem this build or device cannot run);
 *          FLASHBWD_ERR_OVERFLOW (sizes too large to index); FLASHBWD_ERR_NO_DEVICE;
 *          FLASHBWD_ERR_CUDA; FLASHBWD_ERR_OUT_OF_MEMORY.
 * Threads: any thread, concurrently.  Since: 1.0 */
FLASHBWD_API int32_t flashbwd_plan_create(const flashbwd_problem *problem, flashbwd_plan **out);

/* flashbwd_plan_destroy() — release a plan. [destructor]
 * Host-only: makes no CUDA call and does not wait for work in flight, so it may run on any
 * thread, in a finalizer, or after the CUDA context is gone. Work already enqueued by
 * flashbwd_execute() keeps running; it does not read the plan. The plan's launch graph is
 * handed to the library, which destroys it in the next plan creation on the same device.
 * @plan the plan, or NULL (a harmless no-op).
 * Threads: any thread, but not concurrently with another call on the same plan.  Since: 1.0 */
FLASHBWD_API void flashbwd_plan_destroy(flashbwd_plan *plan);

/* flashbwd_plan_info — what a plan chose. An output struct: set struct_size to
 * FLASHBWD_PLAN_INFO_STRUCT_SIZE (or an older value); the library fills that many bytes. */
typedef struct flashbwd_plan_info {
    size_t  struct_size;       /* FLASHBWD_PLAN_INFO_STRUCT_SIZE (set by the caller)       */
    int32_t backend;           /* FLASHBWD_BACKEND_*                                       */
    int32_t arch;              /* 10*major+minor of the device planned for; 0 on the CPU   */
    int32_t sm_count;          /* SMs the schedule is built for                            */
    int32_t smem_per_block;    /* the device's opt-in shared memory per block, bytes       */
    int32_t kernel_head_dim;   /* head_dim the kernel is compiled for (>= head_dim)        */
    int32_t block_m;           /* query rows per main-loop step                            */
    int32_t block_n;           /* key rows per main-kernel CTA                             */
    int32_t num_threads;       /* threads per CTA of the main kernel                       */
    int32_t stages_q;          /* Q buffers in the main kernel's pipeline                  */
    int32_t stages_do;         /* dO buffers in the main kernel's pipeline                 */
    int32_t smem_bytes;        /* dynamic shared memory of the main kernel, bytes          */
    int32_t num_launches;      /* entries of the launch table below (3, or 4 with GQA)     */
    int32_t grid[4][3];        /* grid (x, y, z) of entry 0..num_launches-1; an entry with
                                  grid 0 is not launched                                   */
    int32_t block[4][3];       /* block (x, y, z) of each launch                           */
    size_t  workspace_bytes;   /* what flashbwd_plan_workspace_size() returns             */
} flashbwd_plan_info;

#define FLASHBWD_PLAN_INFO_STRUCT_SIZE_1_0 ((size_t)(8 + 12 * 4 + 24 * 4 + 8))
#define FLASHBWD_PLAN_INFO_STRUCT_SIZE     FLASHBWD_PLAN_INFO_STRUCT_SIZE_1_0

/* Launch order, the index into flashbwd_plan_info.grid and .block. */
#define FLASHBWD_LAUNCH_PREPROCESS   0 /* D = rowsum(dO*O), LSE*log2(e), zero accumulators 1.0 */
#define FLASHBWD_LAUNCH_MAIN         1 /* dK, dV per key block; dQ partial sums          1.0 */
#define FLASHBWD_LAUNCH_CONVERT_DQ   2 /* convert dQ; grid 0 if the main kernel does it  1.0 */
#define FLASHBWD_LAUNCH_CONVERT_DKV  3 /* GQA only: convert the group sums of dK, dV     1.0 */

/* flashbwd_plan_get_info() — report the configuration, launch shapes and workspace of a plan.
 * @plan the plan (read only).
 * @info caller-owned; info->struct_size must be set; the library writes that many bytes
 *       (at most its own size; a larger struct's tail is zeroed).
 * @return FLASHBWD_OK; FLASHBWD_ERR_NULL_ARGUMENT; FLASHBWD_ERR_STRUCT_SIZE.
 * Threads: any thread; concurrently with other readers of the plan.  Since: 1.0 */
FLASHBWD_API int32_t flashbwd_plan_get_info(const flashbwd_plan *plan, flashbwd_plan_info *info);

/* ======================================================================================
 * Tensors
 * ====================================================================================== */

/* Tensor ids. Append-only; new inputs get new ids, so no struct ever changes for them. */
#define FLASHBWD_TENSOR_Q             1  /* in,  16-bit, rank 4 (varlen 3)                 1.0 */
#define FLASHBWD_TENSOR_K             2  /* in,  16-bit, rank 4 (varlen 3)                 1.0 */
#define FLASHBWD_TENSOR_V             3  /* in,  16-bit, rank 4 (varlen 3)                 1.0 */
#define FLASHBWD_TENSOR_O             4  /* in,  16-bit, rank 4 (varlen 3)                 1.0 */
#define FLASHBWD_TENSOR_DO            5  /* in,  16-bit, rank 4 (varlen 3)                 1.0 */
#define FLASHBWD_TENSOR_LSE           6  /* in,  fp32,   rank 3 (varlen 2)                 1.0 */
#define FLASHBWD_TENSOR_DQ            7  /* out, 16-bit, rank 4 (varlen 3)                 1.0 */
#define FLASHBWD_TENSOR_DK            8  /* out, 16-bit, rank 4 (varlen 3)                 1.0 */
#define FLASHBWD_TENSOR_DV            9  /* out, 16-bit, rank 4 (varlen 3)                 1.0 */
#define FLASHBWD_TENSOR_CU_SEQLENS_Q 10  /* in,  int32, batch+1 entries, varlen only        1.0 */
#define FLASHBWD_TENSOR_CU_SEQLENS_K 11  /* in,  int32, batch+1 entries, varlen only        1.0 */
#define FLASHBWD_TENSOR_SEQUSED_Q    12  /* in,  int32, batch entries, varlen, optional     1.0 */
#define FLASHBWD_TENSOR_SEQUSED_K    13  /* in,  int32, batch entries, varlen, optional     1.0 */
#define FLASHBWD_TENSOR_ALIBI_SLOPES 14  /* in,  fp32, (heads_q) or (batch, heads_q), opt.  1.0 */
/* One past the largest tensor id this header knows. */
#define FLASHBWD_TENSOR_COUNT        15

/* flashbwd_plan_set_tensor() — bind one tensor (device memory, or host memory for the CPU
 * backend) to the plan, replacing any earlier binding of that id.
 * Checks what it can on the spot: the rank, a contiguous last dimension, strides that keep
 * every element addressable, 16-byte alignment of the pointer and of the strides of 16-bit
 * tensors (CUDA backend), and that outputs overlap neither inputs nor each other.
 * @plan    the plan.
 * @id      a FLASHBWD_TENSOR_* id.
 * @ptr     the tensor's first element; NULL unbinds it. Not dereferenced here. It must stay
 *          valid until the work of every flashbwd_execute() that uses it has finished.
 * @strides element strides, outermost first, in the layout of flashbwd_problem (4 for
 *          padded 16-bit tensors, 3 when varlen; 3 for LSE, 2 when varlen; 1 for the int32
 *          and slope vectors). Read during the call only. NULL means packed row-major.
 *          The last stride must be 1. ALiBi slopes take 1 stride for (heads_q) or 2 for
 *          (batch, heads_q).
 * @num_strides how many strides `strides` holds (ignored when strides is NULL; ALiBi slopes
 *          then mean (heads_q)).
 * @return FLASHBWD_OK; FLASHBWD_ERR_NULL_ARGUMENT (plan); FLASHBWD_ERR_INVALID_VALUE (id,
 *         rank, stride); FLASHBWD_ERR_MISALIGNED; FLASHBWD_ERR_OVERLAP; FLASHBWD_ERR_BUSY.
 * Threads: not concurrently with any other call on the same plan.  Since: 1.0 */
FLASHBWD_API int32_t flashbwd_plan_set_tensor(flashbwd_plan *plan, int32_t id, void *ptr,
                                              const int64_t *strides, int32_t num_strides);

/* ======================================================================================
 * Workspace
 * ====================================================================================== */

/* flashbwd_plan_workspace_size() — bytes of scratch memory execute needs for this plan.
 * Device memory for the CUDA backend, host memory for the CPU backend. Fixed for the life
 * of the plan.
 * @plan  the plan (read only).
 * @bytes receives the size (may be 0).
 * @return FLASHBWD_OK; FLASHBWD_ERR_NULL_ARGUMENT.
 * Threads: any thread; concurrently with other readers of the plan.  Since: 1.0 */
FLASHBWD_API int32_t flashbwd_plan_workspace_size(const flashbwd_plan *plan, size_t *bytes);

/* flashbwd_plan_set_workspace() — bind the caller's scratch memory.
 * @plan  the plan.
 * @ptr   at least flashbwd_plan_workspace_size() bytes, 256-byte aligned (CUDA; host
 *        memory for the CPU backend needs 4-byte alignment); owned by the caller; must stay valid until the work of every execute that uses it has finished.
 *        Two executes in flight at once on different streams need different workspaces.
 * @bytes its size in bytes.
 * @return FLASHBWD_OK; FLASHBWD_ERR_NULL_ARGUMENT (plan); FLASHBWD_ERR_MISALIGNED;
 *         FLASHBWD_ERR_WORKSPACE_TOO_SMALL; FLASHBWD_ERR_BUSY.
 * Threads: not concurrently with any other call on the same plan.  Since: 1.0 */
FLASHBWD_API int32_t flashbwd_plan_set_workspace(flashbwd_plan *plan, void *ptr, size_t bytes);

/* flashbwd_workspace_alloc() — allocate a workspace for a plan, in the kind of memory its
 * execute runs fastest with. A convenience: any memory that meets
 * flashbwd_plan_set_workspace()'s rules works as well.
 * CUDA backend: device memory on the plan's device (the caller's current device does not
 * matter and is left as it was). Where the device supports compute data compression
 * (Hopper and newer), the memory is created compressible: every execute first writes
 * zeros over its fp32 dQ sums, and zero lines cost the DRAM almost nothing there (1-2%
 * faster backward passes at 512-1k keys on an H200, docs/performance.md). Elsewhere,
 * or when the driver declines, ordinary device memory as cudaMalloc gives.
 * CPU backend: host memory, 256-byte aligned.
 * Synchronous like cudaMalloc: not stream-ordered, not to be called while a stream of
 * the device is being captured. It does not bind the memory to the plan.
 * @plan       the plan the memory is sized for (its backend, device and workspace size);
 *             not a planning-only plan.
 * @ptr        receives the memory, or NULL when the plan needs no workspace.
 * @bytes      receives its size: at least flashbwd_plan_workspace_size() (rounded up to
 *             the allocation granularity); 0 with a NULL *ptr.
 * @compressed receives 1 when the memory is compressible, else 0; may be NULL.
 * The caller owns the memory and frees it with flashbwd_workspace_free() (never cudaFree
 * or free()); it outlives the plan and suits every plan of the same backend and device
 * whose workspace size is not larger.
 * @return FLASHBWD_OK; FLASHBWD_ERR_NULL_ARGUMENT (plan, ptr or bytes); FLASHBWD_ERR_BUSY;
 *         FLASHBWD_ERR_NOT_SUPPORTED (planning-only plan); FLASHBWD_ERR_NO_DEVICE (the
 *         driver went away); FLASHBWD_ERR_CUDA (the device is out of memory, or another
 *         CUDA error, named in the message);
 *         FLASHBWD_ERR_OUT_OF_MEMORY (host). On failure *ptr is NULL and *bytes 0.
 * Threads: not concurrently with any other call on the same plan.  Since: 1.1 */
FLASHBWD_API int32_t flashbwd_workspace_alloc(flashbwd_plan *plan, void **ptr, size_t *bytes,
                                              int32_t *compressed);

/* flashbwd_workspace_free() — free memory that flashbwd_workspace_alloc() returned.
 * Device memory is freed like cudaFree frees: the device is synchronized first, so work
 * still using it finishes before it goes. Unbind it from plans (or destroy them) before
 * their next execute.
 * @ptr what flashbwd_workspace_alloc() gave, or NULL (nothing happens).
 * @return FLASHBWD_OK; FLASHBWD_ERR_INVALID_VALUE (ptr did not come from
 *         flashbwd_workspace_alloc, or was freed already); FLASHBWD_ERR_CUDA (the memory
 *         is freed as far as the driver allows, and the message names the failing call).
 * Threads: any thread, concurrently.  Since: 1.1 */
FLASHBWD_API int32_t flashbwd_workspace_free(void *ptr);

/* ======================================================================================
 * Execute
 * ====================================================================================== */

/* flashbwd_execute() — compute dQ, dK and dV for the bound tensors.
 * CUDA backend: enqueues the plan's kernels on `stream` and returns; it allocates nothing
 * and never synchronizes the host, so it may be captured into a CUDA graph. The current
 * device must be the plan's. Errors inside the kernels surface later on the stream.
 * The kernels go out as one launch of the plan's graph (its parameters updated first when
 * a tensor or the workspace was rebound since the last call); on a stream being captured
 * they are launched one by one into the caller's graph instead. Like any CUDA graph
 * launch, the work of one plan's calls runs in call order even on different streams:
 * for concurrent backward passes, use a plan per stream.
 * CPU backend: computes on the calling thread and returns when done; `stream` is ignored.
 * Device-side lengths (cu_seqlens, seqused) are the caller's contract: cu_seqlens must rise
 * from >= 0 to <= total, seqused must not exceed its sequence, and no length may exceed
 * the plan's seqlen. Lengths that break it are rejected by the CPU backend
 * (FLASHBWD_ERR_INVALID_LENGTHS); the CUDA kernels clamp them and give unspecified values,
 * but never read or write outside the bound tensors and workspace (compute-sanitizer
 * memcheck is clean on such inputs) and never hang, deterministic mode included. Rows
 * past seqused (and rows of packed tensors outside every sequence) are not written.
 * @plan   the plan, with Q, K, V, O, dO, LSE, dQ, dK, dV (and cu_seqlens when varlen) set
 *         and a large enough workspace when the size is not 0.
 * @stream a cudaStream_t (NULL = the legacy default stream).
 * @return FLASHBWD_OK; FLASHBWD_ERR_NULL_ARGUMENT (plan); FLASHBWD_ERR_TENSOR_NOT_SET;
 *         FLASHBWD_ERR_WORKSPACE_TOO_SMALL; FLASHBWD_ERR_WRONG_DEVICE;
 *         FLASHBWD_ERR_NO_DEVICE (the driver went away); FLASHBWD_ERR_CUDA
 *         (launch failure, with the CUDA error in the message); FLASHBWD_ERR_NOT_SUPPORTED
 *         (planning-only plan, or a configuration this build has no kernel for);
 *         FLASHBWD_ERR_INVALID_LENGTHS (CPU); FLASHBWD_ERR_OUT_OF_MEMORY (CPU);
 *         FLASHBWD_ERR_BUSY.
 * Threads: not concurrently with any other call on the same plan (detected: BUSY).
 * Since: 1.0 */
FLASHBWD_API int32_t flashbwd_execute(flashbwd_plan *plan, void *stream);

/* ======================================================================================
 * Errors and sizes
 * ====================================================================================== */

/* flashbwd_plan_last_error() — the message of the last failed call on this plan.
 * @plan the plan, or NULL (then "").
 * @return "" when the last call on the plan succeeded; owned by the plan, valid until the
 *         next call on it or its destruction.
 * Threads: as any reader of the plan.  Since: 1.0 */
FLASHBWD_API const char *flashbwd_plan_last_error(const flashbwd_plan *plan);

/* flashbwd_last_error() — the message of the last failed flashbwd call on this thread,
 * including those that have no plan (flashbwd_plan_create). Every failing call sets it;
 * successful calls leave it as it was.
 * @return never NULL; "" if nothing failed on this thread yet; thread-local storage, valid
 *         until the next flashbwd call on this thread.
 * Threads: any thread; each thread has its own message.  Since: 1.0 */
FLASHBWD_API const char *flashbwd_last_error(void);

/* Struct ids for flashbwd_struct_size(). */
#define FLASHBWD_STRUCT_PROBLEM    1 /* flashbwd_problem                                  1.0 */
#define FLASHBWD_STRUCT_PLAN_INFO  2 /* flashbwd_plan_info                                1.0 */

/* flashbwd_struct_size() — how many bytes of a struct this library knows; lets bindings
 * with hand-mirrored structs (Julia) check their layouts when they load.
 * @struct_id a FLASHBWD_STRUCT_* id.
 * @return the size, or 0 for an unknown id.
 * Threads: any thread, concurrently.  Since: 1.0 */
FLASHBWD_API size_t flashbwd_struct_size(int32_t struct_id);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHBWD_H */
