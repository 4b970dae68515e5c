# plan.jl — Plan, the owner of one flashbwd_plan, and the calls made on it.
#
# A Plan keeps a reference to every array bound to it, so the garbage collector cannot free
# memory the library still points at while the binding lasts. Its finalizer destroys the C
# plan; flashbwd_plan_destroy is host-only and never fails, so that is safe on any thread.
# One Plan must not be used by two tasks at once (the library answers FLASHBWD_ERR_BUSY).

"""
    Plan(problem::Problem)

Validate `problem` and build a plan for it (`flashbwd_plan_create`). Throws a
[`FlashBwdError`](@ref) naming the offending field when the problem is rejected. The plan is
destroyed by the garbage collector, or at once by [`destroy!`](@ref).

Then bind tensors with [`set_tensor!`](@ref), scratch memory with [`set_workspace!`](@ref)
(a [`Workspace`](@ref)`(plan)`, or an array of [`workspace_size`](@ref) bytes), and run
[`execute!`](@ref) as often as needed.
"""
mutable struct Plan
    handle::Ptr{Cvoid}
    problem::Problem
    bound::Dict{Int32,Any}   # tensor id => the array bound to it, kept alive
    workspace::Any

    function Plan(problem::Problem)
        out = Ref{Ptr{Cvoid}}(C_NULL)
        status = flashbwd_plan_create(Ref(problem), out)
        status == FLASHBWD_OK || throw_last_error(status)
        plan = new(out[], problem, Dict{Int32,Any}(), nothing)
        return finalizer(release_handle!, plan)
    end
end

# The finalizer: only the C call, which neither yields nor fails.
function release_handle!(plan::Plan)
    handle = plan.handle
    plan.handle = C_NULL
    flashbwd_plan_destroy(handle)   # NULL (already destroyed) is a no-op
    return nothing
end

"""
    destroy!(plan::Plan)

Release the C plan now rather than at garbage collection. Idempotent; any later call on the
plan throws an `ArgumentError`. Work already enqueued by [`execute!`](@ref) keeps running: it
does not read the plan.
"""
function destroy!(plan::Plan)
    release_handle!(plan)
    empty!(plan.bound)
    plan.workspace = nothing
    return nothing
end

function Base.unsafe_convert(::Type{Ptr{Cvoid}}, plan::Plan)
    plan.handle == C_NULL && throw(ArgumentError("this FlashBwd.Plan has been destroyed"))
    return plan.handle
end

Base.show(io::IO, plan::Plan) =
    print(io, "FlashBwd.Plan(", plan.handle == C_NULL ? "destroyed" : plan.handle, ")")

# Throw the plan's own message for a failed call on it.
function check(plan::Plan, status::Int32)
    status == FLASHBWD_OK && return nothing
    throw(FlashBwdError(status, unsafe_string(flashbwd_plan_last_error(plan))))
end

# ======================================================================================
# Tensors
# ======================================================================================

"""
    set_tensor!(plan, id, A::AbstractArray)
    set_tensor!(plan, id, nothing)
    set_tensor!(plan, id, ptr::Ptr, strides)

Bind array `A` as tensor `id` (`FlashBwd.FLASHBWD_TENSOR_Q`, ...), or unbind it with
`nothing`. `A` is a host array for a CPU plan (an `Array`, or a strided view of one such as
a `view` or a `PermutedDimsArray`) or, with CUDA.jl loaded, a `CuArray` for a CUDA plan.
Julia's column-major dimensions are C's row-major ones reversed, so a `(head_dim, heads,
seqlen, batch)` array is the `(batch, seqlen, heads, head_dim)` tensor the header documents,
and its strides are passed as they are: no copy is made. The first Julia dimension must be
contiguous. The plan keeps `A` alive until it is unbound or the plan is destroyed.

The raw form takes an element pointer and C strides (outermost first; `nothing` = packed);
the caller then keeps the memory alive.
"""
function set_tensor!(plan::Plan, id::Integer, A::AbstractArray)
    strides = c_strides(A)
    GC.@preserve A check(plan, set_tensor_memory(plan, id, A, strides))
    plan.bound[id] = A
    return plan
end

function set_tensor!(plan::Plan, id::Integer, ::Nothing)
    check(plan, flashbwd_plan_set_tensor(plan, id, C_NULL, C_NULL, 0))
    delete!(plan.bound, id)
    return plan
end

function set_tensor!(plan::Plan, id::Integer, ptr::Ptr, strides)
    s = strides === nothing ? C_NULL : collect(Int64, strides)
    n = strides === nothing ? 0 : length(strides)
    check(plan, flashbwd_plan_set_tensor(plan, id, ptr, s, n))
    delete!(plan.bound, id)
    return plan
end

# Host memory; the CUDA extension adds a method for CuArrays. Ptr{Cvoid}(pointer(A)) throws
# for device arrays, so GPU memory can never reach a host pointer argument.
function set_tensor_memory(plan::Plan, id::Integer, A::AbstractArray, strides::Vector{Int64})
    return flashbwd_plan_set_tensor(plan, id, Ptr{Cvoid}(pointer(A)), strides,
                                    length(strides))
end

# C strides (outermost first) of a Julia array: its own strides reversed.
function c_strides(A::AbstractArray)
    s = try
        strides(A)
    catch
        throw(ArgumentError("FlashBwd needs arrays with memory strides (an Array, a strided " *
                            "view of one, or a CuArray); got a $(typeof(A))"))
    end
    if size(A, 1) > 1 && s[1] != 1
        throw(ArgumentError("the first dimension of a $(typeof(A)) of size $(size(A)) has " *
                            "stride $(s[1]); FlashBwd needs it contiguous (C's last dimension)"))
    end
    c = Int64[reverse(s)...]
    c[end] = 1   # a dimension of length 1 may report any stride; C requires 1
    return c
end

# ======================================================================================
# Workspace and execute
# ======================================================================================

"""
    workspace_size(plan) -> Int

Bytes of scratch memory [`execute!`](@ref) needs (host memory for a CPU plan, device memory
for a CUDA plan); may be 0.
"""
function workspace_size(plan::Plan)
    bytes = Ref{Csize_t}(0)
    check(plan, flashbwd_plan_workspace_size(plan, bytes))
    return Int(bytes[])
end

"""
    set_workspace!(plan, W::DenseArray)
    set_workspace!(plan, ptr::Ptr, bytes)

Bind scratch memory of at least [`workspace_size`](@ref) bytes: a dense array (an `Array`
for a CPU plan; a `CuArray` for a CUDA plan, which needs 256-byte alignment, as fresh
allocations have, and rejects other pointers with `FLASHBWD_ERR_MISALIGNED`) that the plan
keeps alive, or a raw pointer and size. A [`Workspace`](@ref) (since flashbwd 1.1) is the
memory the library itself would choose. Two executes in flight at once need different
workspaces.
"""
function set_workspace!(plan::Plan, W::DenseArray)
    bytes = length(W) * sizeof(eltype(W))
    GC.@preserve W check(plan, set_workspace_memory(plan, W, bytes))
    plan.workspace = W
    return plan
end

function set_workspace!(plan::Plan, ptr::Ptr, bytes::Integer)
    check(plan, flashbwd_plan_set_workspace(plan, ptr, bytes))
    plan.workspace = nothing
    return plan
end

set_workspace_memory(plan::Plan, W::DenseArray, bytes::Integer) =
    flashbwd_plan_set_workspace(plan, Ptr{Cvoid}(pointer(W)), bytes)

"""
    execute!(plan, stream=C_NULL)

Compute dQ, dK and dV for the bound tensors. A CPU plan computes on the calling thread and
ignores `stream`. A CUDA plan enqueues its kernels on `stream` (a raw `cudaStream_t`, or with
CUDA.jl loaded a `CuStream` such as `CUDA.stream()`) and returns without waiting.
"""
function execute!(plan::Plan, stream::Ptr{Cvoid}=C_NULL)
    check_bound_workspace(plan)
    check(plan, flashbwd_execute(plan, stream))
    return plan
end

"""
    plan_info(plan) -> PlanInfo

The configuration, launch shapes and workspace size the plan chose.
"""
function plan_info(plan::Plan)
    info = Ref(PlanInfo())
    check(plan, flashbwd_plan_get_info(plan, info))
    return info[]
end
