# FlashBwdCUDAExt.jl — CuArrays in, the CUDA backend out. Loaded by Julia when both FlashBwd
# and CUDA.jl are.
#
# Device memory goes to the library as CuPtr (CUDA.jl refuses to turn it into a host Ptr),
# the stream as the CUstream handle of a CuStream, by default CUDA.stream() (the task's
# stream). The array's device is made current and its context active first, because the
# library runs on the calling thread's current device, which must be the plan's.
module FlashBwdCUDAExt

using CUDA
using CUDA: CuPtr, CuStream, AnyCuArray
using FlashBwd
using FlashBwd: Plan, Workspace, libflashbwd, check

# ======================================================================================
# The C functions that take or give device memory or a stream, with device-typed arguments
# ======================================================================================

cuda_set_tensor(plan, id, ptr, strides, num_strides) =
    @ccall libflashbwd.flashbwd_plan_set_tensor(plan::Ptr{Cvoid}, id::Int32, ptr::CuPtr{Cvoid},
                                                strides::Ptr{Int64}, num_strides::Int32)::Int32

cuda_set_workspace(plan, ptr, bytes) =
    @ccall libflashbwd.flashbwd_plan_set_workspace(plan::Ptr{Cvoid}, ptr::CuPtr{Cvoid},
                                                   bytes::Csize_t)::Int32

cuda_execute(plan, stream) =
    @ccall libflashbwd.flashbwd_execute(plan::Ptr{Cvoid}, stream::CUDA.CUstream)::Int32

# Since 1.1: a CUDA plan's workspace is device memory, so it comes back as a CuPtr.
cuda_workspace_alloc(plan, ptr, bytes, compressed) =
    @ccall libflashbwd.flashbwd_workspace_alloc(plan::Ptr{Cvoid}, ptr::Ref{CuPtr{Cvoid}},
                                                bytes::Ref{Csize_t},
                                                compressed::Ptr{Int32})::Int32

cuda_workspace_free(ptr) = @ccall libflashbwd.flashbwd_workspace_free(ptr::CuPtr{Cvoid})::Int32

# ======================================================================================
# The low-level API on device memory
# ======================================================================================

# A CuArray, or a strided view of one: ccall converts it to its CuPtr and keeps it alive.
FlashBwd.set_tensor_memory(plan::Plan, id::Integer, A::AnyCuArray, strides::Vector{Int64}) =
    cuda_set_tensor(plan, id, A, strides, length(strides))

function FlashBwd.set_tensor!(plan::Plan, id::Integer, ptr::CuPtr, strides)
    s = strides === nothing ? C_NULL : collect(Int64, strides)
    n = strides === nothing ? 0 : length(strides)
    check(plan, cuda_set_tensor(plan, id, ptr, s, n))
    delete!(plan.bound, id)
    return plan
end

FlashBwd.set_workspace_memory(plan::Plan, W::CuArray, bytes::Integer) =
    cuda_set_workspace(plan, W, bytes)

function FlashBwd.set_workspace!(plan::Plan, ptr::CuPtr, bytes::Integer)
    check(plan, cuda_set_workspace(plan, ptr, bytes))
    plan.workspace = nothing
    return plan
end

"""
    execute!(plan, stream::CuStream)

Enqueue the plan's kernels on `stream` (e.g. `CUDA.stream()`); returns without waiting.
"""
function FlashBwd.execute!(plan::Plan, stream::CuStream)
    FlashBwd.check_bound_workspace(plan)
    CUDA.prepare_cuda_state()   # the task's context current on this thread
    check(plan, cuda_execute(plan, stream))
    return plan
end

# ======================================================================================
# Workspace (since 1.1): device memory on the plan's device, compressible where the GPU
# supports it. Synchronous like cudaMalloc; the library selects the plan's device itself
# and leaves the caller's current.
# ======================================================================================

function FlashBwd.library_workspace(::Val{FlashBwd.FLASHBWD_BACKEND_CUDA}, plan::Plan)
    CUDA.prepare_cuda_state()
    ptr, bytes, compressed = Ref{CuPtr{Cvoid}}(CuPtr{Cvoid}(0)), Ref{Csize_t}(0), Ref{Int32}(0)
    check(plan, cuda_workspace_alloc(plan, ptr, bytes, compressed))
    return Workspace{CuPtr{Cvoid}}(ptr[], bytes[], compressed[] != 0,
                                   FlashBwd.FLASHBWD_BACKEND_CUDA, plan.problem.device)
end

# Also the finalizer's: no Julia-side CUDA state is touched (a finalizer runs inside whatever
# task triggered the collection); the library switches to the memory's device and back.
FlashBwd.free_workspace_memory(ptr::CuPtr{Cvoid}) = cuda_workspace_free(ptr)

# ======================================================================================
# backward! hooks (see src/backward.jl)
# ======================================================================================

FlashBwd.memory_backend(::AnyCuArray) = FlashBwd.FLASHBWD_BACKEND_CUDA

# The CuArray under any wrapper (views, reshapes, PermutedDimsArray).
storage(A::CuArray) = A
storage(A::AbstractArray) = storage(parent(A))

FlashBwd.device_ordinal(A::AnyCuArray) = CUDA.deviceid(CUDA.device(storage(A)))

function FlashBwd.with_device_stream(f, A::AnyCuArray, stream)
    return CUDA.device!(CUDA.device(storage(A))) do
        s = stream === nothing ? CUDA.stream() : stream
        s isa CuStream || throw(ArgumentError("the CUDA backend takes a CuStream; got $s"))
        # The task's stream becomes s, so the workspace is allocated and freed in s's order.
        CUDA.stream!(s) do
            CUDA.prepare_cuda_state()
            f(s)
        end
    end
end

FlashBwd.allocate_workspace(::AnyCuArray, bytes) = CuArray{UInt8}(undef, bytes)

FlashBwd.release_workspace(W::CuArray) = CUDA.unsafe_free!(W)

end # module
