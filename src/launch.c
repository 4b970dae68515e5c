/* launch.c — flashbwd_execute(): check that the plan is ready, then run the backend.
 *
 * The CUDA path turns the plan and its bound tensors into one fb_bwd_params and hands it,
 * with the plan's cached launch table, to kernels/launch.cu: as the parameters of the plan's
 * launch graph (one cudaGraphLaunch), or, while the stream is being captured into the
 * caller's own graph, as direct launches. Nothing is allocated and the host never waits on
 * the stream.
 */
#include <math.h>
#include <string.h>

#include "internal.h"

#ifdef FB_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

static int32_t check_ready(flashbwd_plan *plan)
{
    for (int32_t id = 1; id < FLASHBWD_TENSOR_COUNT; ++id)
        FB_FAIL_IF(plan, fb_tensor_required(plan, id) && !plan->tensors[id].ptr,
                   FLASHBWD_ERR_TENSOR_NOT_SET,
                   "tensor %s (FLASHBWD_TENSOR id %d) is not set; bind it with "
                   "flashbwd_plan_set_tensor before execute", fb_tensor_name(id), id);
    FB_FAIL_IF(plan, plan->ws.total_bytes > 0 && plan->workspace == NULL,
               FLASHBWD_ERR_WORKSPACE_TOO_SMALL,
               "no workspace is set; this plan needs %zu bytes (flashbwd_plan_set_workspace)",
               plan->ws.total_bytes);
    FB_FAIL_IF(plan, plan->workspace_bytes < plan->ws.total_bytes,
               FLASHBWD_ERR_WORKSPACE_TOO_SMALL,
               "the workspace has %zu bytes; this plan needs %zu", plan->workspace_bytes,
               plan->ws.total_bytes);
    return FLASHBWD_OK;
}

int32_t flashbwd_execute(flashbwd_plan *plan, void *stream)
{
    FB_FAIL_IF(NULL, plan == NULL, FLASHBWD_ERR_NULL_ARGUMENT, "plan is NULL");
    /* BUSY goes to this thread's message only: the plan's belongs to the call in flight,
     * and writing it here would race with that call. */
    FB_FAIL_IF(NULL, atomic_exchange(&plan->busy, 1), FLASHBWD_ERR_BUSY,
               "flashbwd_execute: the plan is in use by another call");
    int32_t status = check_ready(plan);
    if (status == FLASHBWD_OK)
        status = plan->prob.backend == FLASHBWD_BACKEND_CPU ? fb_cpu_execute(plan)
                                                            : fb_cuda_execute(plan, stream);
    if (status == FLASHBWD_OK) fb_clear_plan_message(plan);
    atomic_store(&plan->busy, 0);
    return status;
}

#ifdef FB_WITH_CUDA

/* Copy the (batch, row, head) strides of a 16-bit tensor; varlen tensors have no batch. */
static void strides3(const fb_tensor *t, int varlen, int64_t out[3])
{
    if (varlen) {
        out[0] = 0, out[1] = t->stride[0], out[2] = t->stride[1];
    } else {
        out[0] = t->stride[0], out[1] = t->stride[1], out[2] = t->stride[2];
    }
}

static void fill_params(const flashbwd_plan *plan, fb_bwd_params *k)
{
    const fb_problem_norm *p = &plan->prob;
    const fb_tensor *t = plan->tensors;
    memset(k, 0, sizeof *k);
    k->q = t[FLASHBWD_TENSOR_Q].ptr, k->k = t[FLASHBWD_TENSOR_K].ptr;
    k->v = t[FLASHBWD_TENSOR_V].ptr, k->o = t[FLASHBWD_TENSOR_O].ptr;
    k->dout = t[FLASHBWD_TENSOR_DO].ptr, k->lse = t[FLASHBWD_TENSOR_LSE].ptr;
    k->dq = t[FLASHBWD_TENSOR_DQ].ptr, k->dk = t[FLASHBWD_TENSOR_DK].ptr;
    k->dv = t[FLASHBWD_TENSOR_DV].ptr;
    k->cu_seqlens_q = t[FLASHBWD_TENSOR_CU_SEQLENS_Q].ptr;
    k->cu_seqlens_k = t[FLASHBWD_TENSOR_CU_SEQLENS_K].ptr;
    k->seqused_q = t[FLASHBWD_TENSOR_SEQUSED_Q].ptr;
    k->seqused_k = t[FLASHBWD_TENSOR_SEQUSED_K].ptr;
    strides3(&t[FLASHBWD_TENSOR_Q], p->varlen, k->q_stride);
    strides3(&t[FLASHBWD_TENSOR_K], p->varlen, k->k_stride);
    strides3(&t[FLASHBWD_TENSOR_V], p->varlen, k->v_stride);
    strides3(&t[FLASHBWD_TENSOR_O], p->varlen, k->o_stride);
    strides3(&t[FLASHBWD_TENSOR_DO], p->varlen, k->do_stride);
    strides3(&t[FLASHBWD_TENSOR_DQ], p->varlen, k->dq_stride);
    strides3(&t[FLASHBWD_TENSOR_DK], p->varlen, k->dk_stride);
    strides3(&t[FLASHBWD_TENSOR_DV], p->varlen, k->dv_stride);
    const fb_tensor *lse = &t[FLASHBWD_TENSOR_LSE];
    if (p->varlen) {
        k->lse_stride[0] = 0, k->lse_stride[1] = lse->stride[0], k->lse_stride[2] = 1;
    } else {
        k->lse_stride[0] = lse->stride[0], k->lse_stride[1] = lse->stride[1];
        k->lse_stride[2] = 1;
    }
    const fb_tensor *alibi = &t[FLASHBWD_TENSOR_ALIBI_SLOPES];
    k->alibi_slopes = alibi->ptr;
    if (alibi->ptr) {
        k->alibi_stride[0] = alibi->rank == 2 ? alibi->stride[0] : 0;
        k->alibi_stride[1] = alibi->rank == 2 ? alibi->stride[1] : alibi->stride[0];
    }

    char *ws = plan->workspace;
    const fb_workspace_layout *w = &plan->ws;
    const int gqa = p->heads_kv != p->heads_q;
    k->lse_log2 = (float *)(ws + w->lse_log2);
    k->dpsum = (float *)(ws + w->dpsum);
    k->dq_accum = (float *)(ws + w->dq_accum);
    k->dk_accum = gqa ? (float *)(ws + w->dk_accum) : NULL;
    k->dv_accum = gqa ? (float *)(ws + w->dv_accum) : NULL;
    k->dq_count = (int32_t *)(ws + w->dq_count);
    k->dkv_sem = p->deterministic && gqa ? (int32_t *)(ws + w->dkv_sem) : NULL;
    k->zero_begin = (float *)(ws + w->zero_begin);
    k->zero_floats = (int64_t)(w->zero_bytes / sizeof(float));

    k->batch = (int32_t)p->batch, k->heads_q = (int32_t)p->heads_q;
    k->heads_kv = (int32_t)p->heads_kv, k->group = (int32_t)(p->heads_q / p->heads_kv);
    k->seqlen_q = (int32_t)p->seqlen_q, k->seqlen_k = (int32_t)p->seqlen_k;
    k->head_dim = p->head_dim, k->varlen = p->varlen;
    k->total_q = p->total_q, k->total_k = p->total_k;
    k->ws_rows_q = w->rows_q, k->ws_rows_k = w->rows_k;

    const float log2e = 1.4426950408889634f;
    k->scale = p->softmax_scale;
    k->scale_log2 = p->softmax_scale * log2e;
    k->softcap_on = p->softcap > 0.0f;
    k->softcap_inv = k->softcap_on ? p->softmax_scale / p->softcap : 0.0f;
    k->softcap_log2 = k->softcap_on ? p->softcap * log2e : 0.0f;
    k->window_left = p->window_left, k->window_right = p->window_right;
    k->deterministic = p->deterministic;
    k->dq_zero_in_main = plan->launches.dq_zero_in_main;
    k->dq_overlap = plan->launches.dq_overlap;
    k->dq_tail_blocks = plan->launches.dq_tail_blocks;
    k->head_group = plan->launches.head_group;
}

/* NO_DEVICE when the driver went away (codes 34, 35, 100, as device.c reads them), else
 * CUDA. */
static int32_t launch_status(cudaError_t err)
{
    return err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice ||
                   err == cudaErrorStubLibrary
               ? FLASHBWD_ERR_NO_DEVICE
               : FLASHBWD_ERR_CUDA;
}

int32_t fb_cuda_execute(flashbwd_plan *plan, void *stream)
{
    FB_FAIL_IF(plan, plan->planning_only, FLASHBWD_ERR_NOT_SUPPORTED,
               "this plan was created from explicit device properties (problem.arch = %d) "
               "and can only be inspected", plan->prob.explicit_arch);
    FB_TRY(fb_device_check_current(plan, plan->prob.device));
    fb_bwd_params params;
    fill_params(plan, &params);
    fb_tma_bind(plan, &params);
    if (plan->graph) { /* replay the plan's graph, unless the stream is being captured */
        enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
        cudaError_t err = cudaStreamIsCapturing((cudaStream_t)stream, &capture);
        FB_FAIL_IF(plan, err != cudaSuccess, launch_status(err),
                   "launching the backward kernels failed: cudaStreamIsCapturing: %s (%s)",
                   cudaGetErrorName(err), cudaGetErrorString(err));
        if (capture == cudaStreamCaptureStatusNone) {
            const char *call = "";
            err = (cudaError_t)fb_graph_launch(plan->graph, &params, stream, &call);
            FB_FAIL_IF(plan, err != cudaSuccess, launch_status(err),
                       "launching the backward kernels failed: %s: %s (%s)", call,
                       cudaGetErrorName(err), cudaGetErrorString(err));
            return FLASHBWD_OK;
        }
    }
    cudaError_t err = (cudaError_t)fb_launch_backward(&params, &plan->launches, stream);
    FB_FAIL_IF(plan, err != cudaSuccess, launch_status(err),
               "launching the backward kernels failed: %s (%s)", cudaGetErrorName(err),
               cudaGetErrorString(err));
    return FLASHBWD_OK;
}

#else

int32_t fb_cuda_execute(flashbwd_plan *plan, void *stream)
{
    (void)stream;
    return fb_fail(plan, FLASHBWD_ERR_NOT_SUPPORTED, "this flashbwd was built without CUDA");
}

#endif
