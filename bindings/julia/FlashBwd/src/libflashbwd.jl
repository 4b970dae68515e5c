# libflashbwd.jl — abi/flashbwd.h mirrored one to one: its constants, its two structs and
# one @ccall wrapper per exported function. Nothing here checks a status; plan.jl and
# backward.jl build the Julia API on top of these.
#
# The mirror is checked without Julia by bindings/julia/ci.sh: every @ccall'd symbol must be
# exported by the built library with the header's argument count and types, every
# `const FLASHBWD_*` below must equal the header's #define, and every struct field must match
# the header's name, type and order (then the sizes are compared with the library's).

# ======================================================================================
# The library
# ======================================================================================

"""
    libflashbwd

The name every `@ccall` uses: the library's SONAME. When `ENV["FLASHBWD_LIB"]` is set,
`__init__` opens that file first, and the dynamic loader then resolves this name to the
already loaded library (it matches loaded libraries by SONAME). Otherwise the system search
applies: `LD_LIBRARY_PATH`, the ldconfig cache, Julia's `Libdl.DL_LOAD_PATH`.
"""
const libflashbwd = "libflashbwd.so.1"

# ======================================================================================
# Versions (the header this package mirrors: 1.1, so __init__ refuses a 1.0 library, which
# lacks the FLASHBWD_1.1 functions flashbwd_workspace_alloc and flashbwd_workspace_free)
# ======================================================================================

const FLASHBWD_VERSION_MAJOR = Int32(1)
const FLASHBWD_VERSION_MINOR = Int32(1)
const FLASHBWD_VERSION_PATCH = Int32(0)
const FLASHBWD_VERSION = Int32(FLASHBWD_VERSION_MAJOR * 10000 + FLASHBWD_VERSION_MINOR * 100 +
                               FLASHBWD_VERSION_PATCH)

# ======================================================================================
# Status codes (append-only; a value is never reused)
# ======================================================================================

const FLASHBWD_OK = Int32(0)
const FLASHBWD_ERR_NULL_ARGUMENT = Int32(1)
const FLASHBWD_ERR_STRUCT_SIZE = Int32(2)
const FLASHBWD_ERR_INVALID_VALUE = Int32(3)
const FLASHBWD_ERR_NOT_SUPPORTED = Int32(4)
const FLASHBWD_ERR_NO_DEVICE = Int32(5)
const FLASHBWD_ERR_WRONG_DEVICE = Int32(6)
const FLASHBWD_ERR_MISALIGNED = Int32(7)
const FLASHBWD_ERR_TENSOR_NOT_SET = Int32(8)
const FLASHBWD_ERR_WORKSPACE_TOO_SMALL = Int32(9)
const FLASHBWD_ERR_CUDA = Int32(10)
const FLASHBWD_ERR_OUT_OF_MEMORY = Int32(11)
const FLASHBWD_ERR_OVERFLOW = Int32(12)
const FLASHBWD_ERR_BUSY = Int32(13)
const FLASHBWD_ERR_OVERLAP = Int32(14)
const FLASHBWD_ERR_INVALID_LENGTHS = Int32(15)
const FLASHBWD_ERR_INTERNAL = Int32(16)
const FLASHBWD_STATUS_COUNT = Int32(17)

# ======================================================================================
# Element types, backends, tensor ids, launches, struct ids
# ======================================================================================

const FLASHBWD_DTYPE_BF16 = Int32(1)
const FLASHBWD_DTYPE_FP16 = Int32(2)

const FLASHBWD_BACKEND_CUDA = Int32(1)
const FLASHBWD_BACKEND_CPU = Int32(2)

const FLASHBWD_TENSOR_Q = Int32(1)
const FLASHBWD_TENSOR_K = Int32(2)
const FLASHBWD_TENSOR_V = Int32(3)
const FLASHBWD_TENSOR_O = Int32(4)
const FLASHBWD_TENSOR_DO = Int32(5)
const FLASHBWD_TENSOR_LSE = Int32(6)
const FLASHBWD_TENSOR_DQ = Int32(7)
const FLASHBWD_TENSOR_DK = Int32(8)
const FLASHBWD_TENSOR_DV = Int32(9)
const FLASHBWD_TENSOR_CU_SEQLENS_Q = Int32(10)
const FLASHBWD_TENSOR_CU_SEQLENS_K = Int32(11)
const FLASHBWD_TENSOR_SEQUSED_Q = Int32(12)
const FLASHBWD_TENSOR_SEQUSED_K = Int32(13)
const FLASHBWD_TENSOR_ALIBI_SLOPES = Int32(14)
const FLASHBWD_TENSOR_COUNT = Int32(15)

# Indices into PlanInfo.grid and .block; add 1 for Julia's 1-based tuples.
const FLASHBWD_LAUNCH_PREPROCESS = Int32(0)
const FLASHBWD_LAUNCH_MAIN = Int32(1)
const FLASHBWD_LAUNCH_CONVERT_DQ = Int32(2)
const FLASHBWD_LAUNCH_CONVERT_DKV = Int32(3)

const FLASHBWD_STRUCT_PROBLEM = Int32(1)
const FLASHBWD_STRUCT_PLAN_INFO = Int32(2)

# ======================================================================================
# Structs: the same fields, types and order as the header, so Julia's layout is C's
# ======================================================================================

# Bytes as the header counts them: offset of the last field plus its size.
const FLASHBWD_PROBLEM_STRUCT_SIZE_1_0 = Csize_t(8 + 4 * 4 + 7 * 8 + 2 * 4 + 10 * 4)
const FLASHBWD_PROBLEM_STRUCT_SIZE = FLASHBWD_PROBLEM_STRUCT_SIZE_1_0
const FLASHBWD_PLAN_INFO_STRUCT_SIZE_1_0 = Csize_t(8 + 12 * 4 + 24 * 4 + 8)
const FLASHBWD_PLAN_INFO_STRUCT_SIZE = FLASHBWD_PLAN_INFO_STRUCT_SIZE_1_0

"""
    Problem(; head_dim, batch, heads_q, seqlen_q, seqlen_k, ...)

`flashbwd_problem`: everything a plan is built for. Every keyword is a field of the C struct
(see `abi/flashbwd.h`) and defaults to 0, which the library reads as "the default";
`struct_size` defaults to `FLASHBWD_PROBLEM_STRUCT_SIZE`. Tensor shapes are given in C's
row-major order: `(batch, seqlen_q, heads_q, head_dim)` is a Julia array of size
`(head_dim, heads_q, seqlen_q, batch)`.

```julia
p = Problem(backend=FlashBwd.FLASHBWD_BACKEND_CPU, dtype=FlashBwd.FLASHBWD_DTYPE_FP16,
            head_dim=64, batch=2, heads_q=8, seqlen_q=128, seqlen_k=128, causal=1)
```
"""
struct Problem
    struct_size::Csize_t
    backend::Int32
    device::Int32
    dtype::Int32
    head_dim::Int32
    batch::Int64
    heads_q::Int64
    heads_kv::Int64
    seqlen_q::Int64
    seqlen_k::Int64
    total_q::Int64
    total_k::Int64
    softmax_scale::Float32
    softcap::Float32
    causal::Int32
    use_window::Int32
    window_left::Int32
    window_right::Int32
    varlen::Int32
    deterministic::Int32
    sm_count::Int32
    arch::Int32
    smem_per_block::Int32
    reserved0::Int32
end

function Problem(; struct_size=FLASHBWD_PROBLEM_STRUCT_SIZE, backend=0, device=0, dtype=0,
                 head_dim=0, batch=0, heads_q=0, heads_kv=0, seqlen_q=0, seqlen_k=0,
                 total_q=0, total_k=0, softmax_scale=0, softcap=0, causal=0, use_window=0,
                 window_left=0, window_right=0, varlen=0, deterministic=0, sm_count=0, arch=0,
                 smem_per_block=0)
    # reserved0 must stay 0, so it is not a keyword.
    return Problem(struct_size, backend, device, dtype, head_dim, batch, heads_q, heads_kv,
                   seqlen_q, seqlen_k, total_q, total_k, softmax_scale, softcap, causal,
                   use_window, window_left, window_right, varlen, deterministic, sm_count, arch,
                   smem_per_block, 0)
end

"""
    PlanInfo

`flashbwd_plan_info`: what a plan chose (see [`plan_info`](@ref)). `grid[i]` and `block[i]`
are the launch shapes of C's launch `i - 1` (`FLASHBWD_LAUNCH_*` plus one).
"""
struct PlanInfo
    struct_size::Csize_t
    backend::Int32
    arch::Int32
    sm_count::Int32
    smem_per_block::Int32
    kernel_head_dim::Int32
    block_m::Int32
    block_n::Int32
    num_threads::Int32
    stages_q::Int32
    stages_do::Int32
    smem_bytes::Int32
    num_launches::Int32
    grid::NTuple{4,NTuple{3,Int32}}
    block::NTuple{4,NTuple{3,Int32}}
    workspace_bytes::Csize_t
end

# A zeroed PlanInfo asking for this package's size: what flashbwd_plan_get_info() fills.
function PlanInfo()
    no_launches = ntuple(_ -> ntuple(_ -> Int32(0), 3), 4)
    return PlanInfo(FLASHBWD_PLAN_INFO_STRUCT_SIZE, ntuple(_ -> Int32(0), 12)..., no_launches,
                    no_launches, Csize_t(0))
end

# ======================================================================================
# One wrapper per exported function, named like the C function. Plans are passed as
# Ptr{Cvoid}; a Plan converts itself (plan.jl), so ccall keeps it alive during the call.
# ======================================================================================

flashbwd_version() = @ccall libflashbwd.flashbwd_version()::UInt32

flashbwd_status_name(status) = @ccall libflashbwd.flashbwd_status_name(status::Int32)::Cstring

flashbwd_status_string(status) =
    @ccall libflashbwd.flashbwd_status_string(status::Int32)::Cstring

flashbwd_plan_create(problem, out) =
    @ccall libflashbwd.flashbwd_plan_create(problem::Ref{Problem}, out::Ref{Ptr{Cvoid}})::Int32

# Host-only in C (no CUDA call, NULL is a no-op): safe in a finalizer, on any thread.
flashbwd_plan_destroy(plan) = @ccall libflashbwd.flashbwd_plan_destroy(plan::Ptr{Cvoid})::Cvoid

flashbwd_plan_get_info(plan, info) =
    @ccall libflashbwd.flashbwd_plan_get_info(plan::Ptr{Cvoid}, info::Ref{PlanInfo})::Int32

# Host pointers; the CUDA extension has a CuPtr twin of this and of set_workspace/execute.
flashbwd_plan_set_tensor(plan, id, ptr, strides, num_strides) =
    @ccall libflashbwd.flashbwd_plan_set_tensor(plan::Ptr{Cvoid}, id::Int32, ptr::Ptr{Cvoid},
                                                strides::Ptr{Int64}, num_strides::Int32)::Int32

flashbwd_plan_workspace_size(plan, bytes) =
    @ccall libflashbwd.flashbwd_plan_workspace_size(plan::Ptr{Cvoid}, bytes::Ref{Csize_t})::Int32

flashbwd_plan_set_workspace(plan, ptr, bytes) =
    @ccall libflashbwd.flashbwd_plan_set_workspace(plan::Ptr{Cvoid}, ptr::Ptr{Cvoid},
                                                   bytes::Csize_t)::Int32

# Since 1.1 (node FLASHBWD_1.1). `ptr` receives host memory (a CPU plan's workspace); the
# CUDA extension has a CuPtr twin of this and of flashbwd_workspace_free for device memory.
# `compressed` may be C_NULL.
flashbwd_workspace_alloc(plan, ptr, bytes, compressed) =
    @ccall libflashbwd.flashbwd_workspace_alloc(plan::Ptr{Cvoid}, ptr::Ref{Ptr{Cvoid}},
                                                bytes::Ref{Csize_t},
                                                compressed::Ptr{Int32})::Int32

# Since 1.1. Host memory is freed with no CUDA call (NULL is a no-op): safe in a finalizer,
# on any thread. A pointer it never gave, or gave and already took back, is refused with
# FLASHBWD_ERR_INVALID_VALUE rather than freed.
flashbwd_workspace_free(ptr) =
    @ccall libflashbwd.flashbwd_workspace_free(ptr::Ptr{Cvoid})::Int32

flashbwd_execute(plan, stream) =
    @ccall libflashbwd.flashbwd_execute(plan::Ptr{Cvoid}, stream::Ptr{Cvoid})::Int32

flashbwd_plan_last_error(plan) =
    @ccall libflashbwd.flashbwd_plan_last_error(plan::Ptr{Cvoid})::Cstring

flashbwd_last_error() = @ccall libflashbwd.flashbwd_last_error()::Cstring

flashbwd_struct_size(struct_id) =
    @ccall libflashbwd.flashbwd_struct_size(struct_id::Int32)::Csize_t
