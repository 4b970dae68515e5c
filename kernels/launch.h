/* launch.h — the C interface between the host code (src/) and the CUDA kernels (kernels/).
 *
 * src/launch.c fills one fb_bwd_params from the plan and its bound tensors and calls
 * fb_launch_backward(), which enqueues the preprocess, main and (GQA) convert kernels with the
 * grid shapes the plan cached. Plain C, so both gcc and nvcc read it. Nothing here is public.
 */
#ifndef FB_KERNELS_LAUNCH_H
#define FB_KERNELS_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A CUtensorMap (cuda.h: 128 bytes, 64-byte aligned), the tensor copy engine's description of
 * a tensor and of the box it copies; opaque here, so that this header needs no cuda.h.
 * src/tma_maps.c encodes them. */
typedef struct fb_tma_map {
#ifdef __cplusplus
    alignas(64)
#else
    _Alignas(64)
#endif
        uint64_t words[16];
} fb_tma_map;

/* Everything the kernels read. Strides are in elements; the last dimension is contiguous.
 * Varlen: batch strides are 0 and rows are offset by cu_seqlens. */
typedef struct fb_bwd_params {
    /* Tensors (device pointers). */
    const void *q, *k, *v, *o, *dout;
    const float *lse;
    void *dq, *dk, *dv;
    const int32_t *cu_seqlens_q, *cu_seqlens_k, *seqused_q, *seqused_k;
    const float *alibi_slopes;
    /* Strides: [0] batch, [1] row (token), [2] head. */
    int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3], do_stride[3];
    int64_t dq_stride[3], dk_stride[3], dv_stride[3];
    int64_t lse_stride[3];   /* [0] batch, [1] head, [2] row */
    int64_t alibi_stride[2]; /* [0] batch (0 = shared by the batch), [1] head */

    /* Workspace regions (fp32), laid out by src/workspace.c. */
    float *lse_log2;  /* per (b, h) row base: see ws_row_q below */
    float *dpsum;     /* D = rowsum(dO * O), same indexing */
    float *dq_accum;  /* rows x kernel_head_dim, fragment-interleaved per m-block */
    float *dk_accum;  /* GQA only: rows x kernel_head_dim, per n-block */
    float *dv_accum;  /* GQA only */
    int32_t *dq_count; /* per q-side row block: key blocks added (deterministic: turns;
                          split plans: dq_zero.cuh, or dq_overlap) */
    int32_t *dkv_sem; /* deterministic GQA: one per k-side row block */
    float *zero_begin;      /* the range the preprocess zeroes grid-stride (GQA sums, counters) */
    int64_t zero_floats;    /* its length, a multiple of 4 */

    /* Sizes. */
    int32_t batch, heads_q, heads_kv, group; /* group = heads_q / heads_kv */
    int32_t seqlen_q, seqlen_k;              /* maxima when varlen */
    int32_t head_dim;                        /* real head dim (<= kernel head dim) */
    int32_t varlen;
    int64_t total_q, total_k;                /* packed rows when varlen */
    int64_t ws_rows_q;  /* rows per head of the q-side workspace: padded Sq or varlen TQ */
    int64_t ws_rows_k;  /* rows per head of the k-side GQA accumulators */

    /* Math. */
    float scale;          /* softmax scale sigma; the final factor of dQ and dK */
    float scale_log2;     /* sigma * log2(e) (no softcap) */
    float softcap_inv;    /* sigma / softcap (softcap on) */
    float softcap_log2;   /* softcap * log2(e) (softcap on) */
    int32_t softcap_on;
    int32_t window_left;  /* keys left of the diagonal, -1 = unbounded */
    int32_t window_right; /* keys right of the diagonal, -1 = unbounded (causal gives 0) */
    int32_t deterministic;
    int32_t dq_zero_in_main; /* 1: the split kernel zeroes dq_accum (kernels/dq_zero.cuh),
                                the preprocess does not */
    int32_t dq_overlap;   /* 1: each split CTA counts itself in on its head's first dq_count
                             slot after its last additions, and the convert pass, launched
                             while the split kernel runs, waits for the head's count
                             (kernels/bwd_prepost.cuh); never with dq_zero_in_main, whose
                             protocol runs on the same slot */
    int64_t dq_tail_blocks; /* dq_overlap: the convert pass takes these last blocks of its
                               grid last, in grid order, and the others first, backwards */
    int32_t head_group;   /* main grid order (kernels/grid_order.cuh): 0 = (key blocks, heads,
                             batch); G = (G, key blocks, batch x heads / G), G divides heads_q */

    /* The split kernel's Q/dO refill through the tensor copy engine (FB_SPLIT_TMA rows):
     * tma_on = 1 when tma_q and tma_do describe Q and dO as (head_dim, heads, seqlen_q,
     * batch) tensors with 64 x BLOCK_M boxes, SWIZZLE_128B; else the refill is cp.async. */
    int32_t tma_on;
    fb_tma_map tma_q, tma_do;
} fb_bwd_params;

/* One launch: grid, block and dynamic shared memory, cached by the plan. */
typedef struct fb_launch_dims {
    int32_t grid[3];
    int32_t block[3];
    int32_t smem_bytes;
} fb_launch_dims;

/* The plan's launch table. */
typedef struct fb_launch_table {
    int32_t kernel_index;   /* index into the compiled kernel registry */
    int32_t num_launches;   /* table entries: 3, or 4 with GQA */
    int32_t dq_in_main;     /* 1: the main kernel converts dQ; the convert-dQ grid is 0 */
    int32_t split;          /* 1: the split kernel (bwd_split.cuh) is the main launch */
    int32_t head_group;     /* fb_bwd_params.head_group */
    int32_t split_grouped;  /* 1: the split kernel's head-group instance (0 < head_group <
                               heads_q, or the row has no plain one: FB_SPLIT_PLAIN) */
    int32_t split_tma;      /* the split kernel may refill through TMA (execute checks the
                               tensors: src/tma_maps.c) */
    int32_t dq_zero_in_main; /* fb_bwd_params.dq_zero_in_main */
    int32_t split_full;     /* 1: no tile needs a mask (FB_SPLIT_FULL rows): the split
                               kernel's full-tile instance serves every execute that binds
                               no ALiBi slopes, the plain one the others */
    int32_t dq_overlap;     /* fb_bwd_params.dq_overlap; the graph's edge from the main
                               launch to the convert-dQ one is programmatic */
    int64_t dq_tail_blocks; /* fb_bwd_params.dq_tail_blocks */
    fb_launch_dims launch[4];
} fb_launch_table;

/* Key of one compiled main-kernel variant: a config-table row and a dtype. */
typedef struct fb_kernel_key {
    int32_t dtype;  /* FLASHBWD_DTYPE_* */
    int32_t arch;   /* config-table ARCH column */
    int32_t head_dim;
} fb_kernel_key;

/* Find the compiled variant for key; returns its index, or -1 if this build lacks it. */
int fb_kernel_find(const fb_kernel_key *key);

/* Prepare a variant on the current device: raise its dynamic shared-memory limit to
 * smem_bytes. Returns a cudaError_t value (0 = success). */
int fb_kernel_prepare(int kernel_index, int smem_bytes);

/* Enqueue the whole backward pass. Returns a cudaError_t value (0 = success). Never
 * allocates, never synchronizes. */
int fb_launch_backward(const fb_bwd_params *params, const fb_launch_table *table, void *stream);

/* The same launches as one instantiated CUDA graph, so that execute costs one
 * cudaGraphLaunch instead of one launch per kernel (docs/performance.md, host costs). */
typedef struct fb_launch_graph fb_launch_graph;

/* Build the graph of a table's launches on the current device (which must be `device`).
 * First destroys the graphs fb_graph_release queued for this device. On failure nothing
 * is left behind, *out is NULL and *failed_call names the CUDA call that failed.
 * Returns a cudaError_t value. */
int fb_graph_create(const fb_launch_table *table, int device, fb_launch_graph **out,
                    const char **failed_call);

/* Enqueue the graph on `stream` with these parameters: when they differ from the last
 * call's, every kernel node's are set first. Returns a cudaError_t value; *failed_call
 * names the call that failed. The stream must not be capturing (the caller checks). */
int fb_graph_launch(fb_launch_graph *graph, const fb_bwd_params *params, void *stream,
                    const char **failed_call);

/* Destroy the graphs fb_graph_release queued for `device` (makes CUDA calls; the plan
 * creation path runs it through fb_graph_create, the fault tests directly). */
void fb_graph_reap(int device);

/* Hand a graph back. Host-only, no CUDA call, any thread (plan destroy runs in Go and
 * Julia finalizers): the graph is queued and destroyed by the next fb_graph_create on its
 * device. NULL is ignored. */
void fb_graph_release(fb_launch_graph *graph);

#ifdef __cplusplus
}
#endif

#endif /* FB_KERNELS_LAUNCH_H */
