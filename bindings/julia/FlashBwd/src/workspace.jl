# workspace.jl — Workspace, scratch memory the library allocates for a plan (ABI 1.1).
#
# flashbwd_workspace_alloc gives the memory a plan's execute runs fastest with: on GPUs with
# compute data compression (Hopper and newer) compressible device memory, where the zeros
# every execute writes over its fp32 dQ sums cost almost no DRAM traffic; elsewhere what
# cudaMalloc gives; host memory aligned to 256 bytes for a CPU plan. The caller owns it: it
# is not bound to the plan it was sized for, outlives that plan, and suits every plan of the
# same backend and device whose workspace_size is not larger.
#
# A Workspace owns one such allocation and frees it exactly once, with
# flashbwd_workspace_free: at destroy!, or else in its finalizer. A Plan it is bound to keeps
# it alive (plan.workspace), so the garbage collector cannot free memory a plan still points
# at; destroy! can, so execute! refuses to run a plan whose bound Workspace was destroyed.
#
# Host memory here, device memory through the CUDA extension: Workspace{Ptr{Cvoid}} for a
# CPU plan, Workspace{CuPtr{Cvoid}} for a CUDA plan, so device memory never travels as a host
# Ptr. The hooks marked below have a host method here and a CUDA method in the extension.

"""
    Workspace(plan::Plan)

Allocate scratch memory for `plan` in the memory its [`execute!`](@ref) runs fastest with
(`flashbwd_workspace_alloc`; since flashbwd 1.1), and bind it with
[`set_workspace!`](@ref)`(plan, ws)`:

- a CPU plan: host memory, 256-byte aligned;
- a CUDA plan (CUDA.jl loaded): device memory on the plan's device, created compressible
  where the GPU supports compute data compression (Hopper and newer, about 1-2% faster
  backward passes at 512-1k keys on an H200), else ordinary `cudaMalloc` memory.
  Allocation is synchronous, like `cudaMalloc`: not while a stream of the device is being
  captured.

The memory is yours, not the plan's: allocating does not bind it, it outlives the plan, and
it suits every plan of the same backend and device whose [`workspace_size`](@ref) is not
larger (so also `backward!(...; workspace=ws)` for the same problem). Free it with
[`destroy!`](@ref)`(ws)`, or leave it to the garbage collector. Throws a
[`FlashBwdError`](@ref) when the library cannot allocate (e.g. `FLASHBWD_ERR_NOT_SUPPORTED`
for a planning-only plan, `FLASHBWD_ERR_CUDA` when the device is out of memory).

Fields (read them, do not set them):
- `ptr`: the memory, a `Ptr{Cvoid}` (CPU plan) or `CuPtr{Cvoid}` (CUDA plan); null when the
  plan needs no workspace, and after `destroy!`. [`pointer`](@ref)`(ws)` returns it and
  refuses a destroyed workspace.
- `bytes`: its size: at least `workspace_size(plan)`, rounded up to the allocation
  granularity; 0 with a null `ptr`.
- `compressed`: `true` when the memory is compressible (CUDA on Hopper and newer).
- `backend`, `device`: the plan's `FLASHBWD_BACKEND_*` and CUDA device (-1 for host memory);
  `set_workspace!` refuses a plan with others.

```julia
ws = Workspace(plan)
set_workspace!(plan, ws)      # the plan keeps ws alive while it is bound
execute!(plan)
destroy!(ws)                  # or leave it to the garbage collector
```

One task at a time per `Workspace`, as per [`Plan`](@ref).
"""
mutable struct Workspace{P}
    ptr::P
    bytes::Int
    compressed::Bool
    backend::Int32
    device::Int32
    freed::Bool

    # Takes ownership of memory flashbwd_workspace_alloc returned.
    function Workspace{P}(ptr::P, bytes::Integer, compressed::Bool, backend::Integer,
                          device::Integer) where {P}
        ws = new{P}(ptr, bytes, compressed, backend, device, false)
        return finalizer(release_memory!, ws)
    end
end

function Workspace(plan::Plan)
    info = plan_info(plan)
    return library_workspace(Val(info.backend), plan)
end

# Hook: the allocation for a plan of this backend. Host memory here; the CUDA extension adds
# the method for Val(FLASHBWD_BACKEND_CUDA).
function library_workspace(::Val{FLASHBWD_BACKEND_CPU}, plan::Plan)
    ptr, bytes, compressed = Ref{Ptr{Cvoid}}(C_NULL), Ref{Csize_t}(0), Ref{Int32}(0)
    check(plan, flashbwd_workspace_alloc(plan, ptr, bytes, compressed))
    return Workspace{Ptr{Cvoid}}(ptr[], bytes[], compressed[] != 0, FLASHBWD_BACKEND_CPU, -1)
end

function library_workspace(::Val{B}, plan::Plan) where {B}
    B == FLASHBWD_BACKEND_CUDA && throw(ArgumentError(
        "the workspace of a CUDA plan is device memory: load CUDA.jl (`using CUDA`) first"))
    throw(ArgumentError("a plan of backend $B has no workspace allocator here"))
end

# Hook: flashbwd_workspace_free for memory of this pointer type (the CUDA extension adds
# CuPtr). Never throws, so the finalizer can use it.
free_workspace_memory(ptr::Ptr{Cvoid}) = flashbwd_workspace_free(ptr)

# The finalizer, and the body of destroy!: free once, then hold a null pointer. The C call
# neither yields nor throws; for host memory it makes no CUDA call, for device memory it
# synchronizes the device first (as cudaFree does). Returns the C status.
function release_memory!(ws::Workspace{P}) where {P}
    ws.freed && return FLASHBWD_OK
    ptr = ws.ptr
    ws.freed = true
    ws.ptr = P(0)
    ws.bytes = 0
    ws.compressed = false
    return free_workspace_memory(ptr)
end

"""
    destroy!(ws::Workspace)

Free the workspace's memory now (`flashbwd_workspace_free`) rather than at garbage
collection. Idempotent: a destroyed workspace is not freed twice. Device memory is freed as
`cudaFree` frees it: the device is synchronized first, so work still using it finishes
before it goes; prefer this to the finalizer for device memory, at a point where no stream
of the device is being captured. A plan it is still bound to refuses to
[`execute!`](@ref) until another workspace is bound. Throws a [`FlashBwdError`](@ref) with
the library's message when the library reports a failure (`FLASHBWD_ERR_CUDA`: freed as
far as the driver allows).
"""
function destroy!(ws::Workspace)
    status = release_memory!(ws)
    status == FLASHBWD_OK || throw_last_error(status)
    return nothing
end

"""
    pointer(ws::Workspace)

The workspace's memory: a `Ptr{Cvoid}` to host memory, or a `CuPtr{Cvoid}` to device memory;
null when the plan needed no workspace. Throws an `ArgumentError` once it was destroyed.
Bind it with `set_workspace!(plan, ws)`, which keeps `ws` alive; a raw pointer does not.
"""
function Base.pointer(ws::Workspace)
    ws.freed && throw(ArgumentError("this FlashBwd.Workspace has been destroyed"))
    return ws.ptr
end

memory_name(backend, device) =
    backend == FLASHBWD_BACKEND_CPU ? "host memory" :
    backend == FLASHBWD_BACKEND_CUDA ? "device memory of CUDA device $device" :
    "memory of backend $backend"

function Base.show(io::IO, ws::Workspace)
    ws.freed && return print(io, "FlashBwd.Workspace(destroyed)")
    print(io, "FlashBwd.Workspace(", ws.bytes, " bytes of ", memory_name(ws.backend, ws.device),
          " at ", ws.ptr, ws.compressed ? ", compressible" : "", ")")
end

"""
    set_workspace!(plan, ws::Workspace)

Bind a [`Workspace`](@ref) (since flashbwd 1.1): its memory must be of the plan's backend
and CUDA device, and at least [`workspace_size`](@ref)`(plan)` bytes. The plan keeps `ws`
alive while it is bound.
"""
function set_workspace!(plan::Plan, ws::Workspace)
    ptr = pointer(ws)   # throws for a destroyed workspace
    backend = plan_info(plan).backend
    device = backend == FLASHBWD_BACKEND_CPU ? Int32(-1) : plan.problem.device
    if (ws.backend, ws.device) != (backend, device)
        have, need = memory_name(ws.backend, ws.device), memory_name(backend, device)
        throw(ArgumentError("this FlashBwd.Workspace is $have, but the plan runs on $need; " *
                            "allocate one with Workspace(plan)"))
    end
    set_workspace!(plan, ptr, ws.bytes)   # the Ptr method here, the CuPtr one in the extension
    plan.workspace = ws
    return plan
end

# Called by execute! before the library runs: a Workspace bound to the plan and destroyed
# since would have the library write into freed memory.
function check_bound_workspace(plan::Plan)
    ws = plan.workspace
    if ws isa Workspace && ws.freed
        throw(ArgumentError("the FlashBwd.Workspace bound to this plan has been destroyed; " *
                            "bind another with set_workspace!"))
    end
    return nothing
end
