# backward.jl — backward!: one call from Julia arrays to dQ, dK, dV.
#
# Layout. flashbwd documents C row-major tensors; a Julia array is column-major, so the same
# memory read with the dimensions reversed is the C tensor, with no copy:
#   C (batch, seqlen_q, heads_q, head_dim)   == Julia (head_dim, heads_q, seqlen_q, batch)
#   C (batch, seqlen_k, heads_kv, head_dim)  == Julia (head_dim, heads_kv, seqlen_k, batch)
#   C LSE (batch, heads_q, seqlen_q)         == Julia (seqlen_q, heads_q, batch), Float32
#   varlen: C (total, heads, head_dim)       == Julia (head_dim, heads, total)
#           C LSE (heads_q, total_q)         == Julia (total_q, heads_q)
#   ALiBi slopes: C (heads_q) or (batch, heads_q) == Julia (heads_q,) or (heads_q, batch)
# Strided views pass their strides through, e.g. PermutedDimsArray(A, (1, 3, 2, 4)) of an
# A of size (head_dim, seqlen, heads, batch) is FlashAttention's (batch, heads, seqlen, dim).
#
# Memory kinds. The functions marked "hook" below have a host method here; the CUDA
# extension adds CuArray methods, which is all it takes to run the same code on the GPU.

"""
    backward!(dq, dk, dv, q, k, v, o, dout, lse; causal=false, softmax_scale=0, softcap=0,
              window=nothing, deterministic=false, alibi_slopes=nothing,
              cu_seqlens_q=nothing, cu_seqlens_k=nothing, seqused_q=nothing,
              seqused_k=nothing, max_seqlen_q=nothing, max_seqlen_k=nothing,
              stream=nothing, workspace=nothing) -> (dq, dk, dv)

Compute the gradients of softmax attention into `dq`, `dk`, `dv` from the tensors a
FlashAttention forward pass produced (`q`, `k`, `v`, its output `o` and logsumexp `lse`)
and the incoming gradient `dout`.

Arrays are either all host arrays (the CPU reference backend, computed before returning) or,
with CUDA.jl loaded, all `CuArray`s (the CUDA backend: enqueued on `stream`, by default
`CUDA.stream()`, on the device holding `q`). Elements are `Float16`, or `BFloat16` with
BFloat16s.jl loaded; `lse` is `Float32`; `cu_seqlens_*` and `seqused_*` are `Int32`.

Sizes (Julia order; the C order is reversed, see the package README):
- `q`, `o`, `dout`, `dq`: `(head_dim, heads_q, seqlen_q, batch)`
- `k`, `v`, `dk`, `dv`: `(head_dim, heads_kv, seqlen_k, batch)`; `heads_kv` divides `heads_q`
- `lse`: `(seqlen_q, heads_q, batch)`
Variable-length batches drop the batch dimension (`(head_dim, heads, total)`, `lse` of size
`(total_q, heads_q)`) and pass `cu_seqlens_q`/`cu_seqlens_k` (batch + 1 offsets), optionally
`seqused_*`, and `max_seqlen_*` (computed from host `cu_seqlens` when omitted).

Keywords: `causal` masks bottom-right aligned; `window = (left, right)` lets query `i` see
keys `[i + sk - sq - left, i + sk - sq + right]` (-1 = unbounded); `softmax_scale`
0 means `1/sqrt(head_dim)`; `softcap` 0 is off; `deterministic` gives bitwise-identical
results run to run; `alibi_slopes` is `(heads_q,)` or `(heads_q, batch)` `Float32`.
`workspace` reuses scratch memory of at least the plan's [`workspace_size`](@ref) instead
of allocating it per call: an array of the arrays' kind, or a [`Workspace`](@ref) allocated
for a plan of the same problem (the memory the library runs fastest with; flashbwd 1.1).

Throws [`FlashBwdError`](@ref) with the library's message when the library rejects the
problem, and `ArgumentError`/`DimensionMismatch` when the arrays disagree with each other.
"""
function backward!(dq::AbstractArray, dk::AbstractArray, dv::AbstractArray,
                   q::AbstractArray, k::AbstractArray, v::AbstractArray, o::AbstractArray,
                   dout::AbstractArray, lse::AbstractArray;
                   causal::Bool=false, softmax_scale::Real=0, softcap::Real=0,
                   window::Union{Nothing,Tuple{Integer,Integer}}=nothing,
                   deterministic::Bool=false, alibi_slopes=nothing,
                   cu_seqlens_q=nothing, cu_seqlens_k=nothing,
                   seqused_q=nothing, seqused_k=nothing,
                   max_seqlen_q=nothing, max_seqlen_k=nothing,
                   stream=nothing, workspace=nothing)
    bindings = Pair{Int32,Any}[
        FLASHBWD_TENSOR_Q => q, FLASHBWD_TENSOR_K => k, FLASHBWD_TENSOR_V => v,
        FLASHBWD_TENSOR_O => o, FLASHBWD_TENSOR_DO => dout, FLASHBWD_TENSOR_LSE => lse,
        FLASHBWD_TENSOR_DQ => dq, FLASHBWD_TENSOR_DK => dk, FLASHBWD_TENSOR_DV => dv,
        FLASHBWD_TENSOR_CU_SEQLENS_Q => cu_seqlens_q, FLASHBWD_TENSOR_CU_SEQLENS_K => cu_seqlens_k,
        FLASHBWD_TENSOR_SEQUSED_Q => seqused_q, FLASHBWD_TENSOR_SEQUSED_K => seqused_k,
        FLASHBWD_TENSOR_ALIBI_SLOPES => alibi_slopes]
    filter!(b -> b.second !== nothing, bindings)

    backend = memory_backend(q)
    for (id, A) in bindings
        A isa AbstractArray || throw(ArgumentError("tensor $(tensor_name(id)) is a " *
                                                   "$(typeof(A)), not an array"))
        memory_backend(A) == backend || throw(ArgumentError(
            "q and $(tensor_name(id)) live in different memories ($(typeof(q)) and " *
            "$(typeof(A))); pass all host arrays (CPU backend) or all CuArrays (CUDA backend)"))
    end

    problem = problem_for(backend, q, k, v, o, dout, lse, dq, dk, dv; causal, softmax_scale,
                          softcap, window, deterministic, alibi_slopes, cu_seqlens_q,
                          cu_seqlens_k, seqused_q, seqused_k, max_seqlen_q, max_seqlen_k)

    # `bindings` references every array, so preserving it keeps all their memory valid
    # while the library holds pointers to it (the plan also references them while bound).
    GC.@preserve bindings workspace begin
        with_device_stream(q, stream) do s
            plan = Plan(problem)
            try
                for (id, A) in bindings
                    set_tensor!(plan, id, A)
                end
                bytes = workspace_size(plan)
                scratch = workspace
                if bytes > 0
                    scratch === nothing && (scratch = allocate_workspace(q, bytes))
                    set_workspace!(plan, scratch)
                end
                execute!(plan, s)
                # Ours, not the caller's: hand it back now, ordered after the work on s.
                workspace === nothing && scratch !== nothing && release_workspace(scratch)
            finally
                destroy!(plan)
            end
        end
    end
    return dq, dk, dv
end

const TENSOR_NAMES = Dict(
    FLASHBWD_TENSOR_Q => "q", FLASHBWD_TENSOR_K => "k", FLASHBWD_TENSOR_V => "v",
    FLASHBWD_TENSOR_O => "o", FLASHBWD_TENSOR_DO => "dout", FLASHBWD_TENSOR_LSE => "lse",
    FLASHBWD_TENSOR_DQ => "dq", FLASHBWD_TENSOR_DK => "dk", FLASHBWD_TENSOR_DV => "dv",
    FLASHBWD_TENSOR_CU_SEQLENS_Q => "cu_seqlens_q", FLASHBWD_TENSOR_CU_SEQLENS_K => "cu_seqlens_k",
    FLASHBWD_TENSOR_SEQUSED_Q => "seqused_q", FLASHBWD_TENSOR_SEQUSED_K => "seqused_k",
    FLASHBWD_TENSOR_ALIBI_SLOPES => "alibi_slopes")

tensor_name(id) = get(TENSOR_NAMES, id, "tensor $id")

# ======================================================================================
# The problem implied by the arrays. The library checks strides and alignment but cannot
# see array sizes, so every size is checked here before a pointer is handed over.
# ======================================================================================

function problem_for(backend, q, k, v, o, dout, lse, dq, dk, dv; causal, softmax_scale,
                     softcap, window, deterministic, alibi_slopes, cu_seqlens_q, cu_seqlens_k,
                     seqused_q, seqused_k, max_seqlen_q, max_seqlen_k)
    T = eltype(q)
    for (name, A) in (("k", k), ("v", v), ("o", o), ("dout", dout), ("dq", dq), ("dk", dk),
                      ("dv", dv))
        eltype(A) == T || throw(ArgumentError("$name has elements of type $(eltype(A)) " *
                                              "but q has $T; all 16-bit tensors share one type"))
    end
    expect_eltype("lse", lse, Float32)

    varlen = ndims(q) == 3
    if varlen
        (cu_seqlens_q === nothing || cu_seqlens_k === nothing) &&
            throw(ArgumentError("3-dimensional q means variable-length batches: pass " *
                                "cu_seqlens_q and cu_seqlens_k"))
        d, hq, total_q = size(q)
        hkv, total_k = size(k, 2), size(k, 3)
        expect_size("k", k, (d, hkv, total_k))
        batch = length(cu_seqlens_q) - 1
        expect_size("lse", lse, (total_q, hq))
        for (name, A, n) in (("cu_seqlens_q", cu_seqlens_q, batch + 1),
                             ("cu_seqlens_k", cu_seqlens_k, batch + 1),
                             ("seqused_q", seqused_q, batch), ("seqused_k", seqused_k, batch))
            A === nothing && continue
            expect_eltype(name, A, Int32)
            expect_size(name, A, (n,))
        end
        sq = max_seqlen_q === nothing ? longest_sequence("q", cu_seqlens_q) : max_seqlen_q
        sk = max_seqlen_k === nothing ? longest_sequence("k", cu_seqlens_k) : max_seqlen_k
    else
        ndims(q) == 4 || throw(DimensionMismatch("q has size $(size(q)); expected " *
                                                 "(head_dim, heads_q, seqlen_q, batch)"))
        all(x -> x === nothing, (cu_seqlens_q, cu_seqlens_k, seqused_q, seqused_k)) ||
            throw(ArgumentError("cu_seqlens/seqused need variable-length q of size " *
                                "(head_dim, heads_q, total_q)"))
        d, hq, sq, batch = size(q)
        hkv, sk = size(k, 2), size(k, 3)
        expect_size("k", k, (d, hkv, sk, batch))
        expect_size("lse", lse, (sq, hq, batch))
        total_q = total_k = 0
    end
    for (name, A) in (("o", o), ("dout", dout), ("dq", dq))
        expect_size(name, A, size(q))
    end
    for (name, A) in (("v", v), ("dk", dk), ("dv", dv))
        expect_size(name, A, size(k))
    end
    if alibi_slopes !== nothing
        expect_eltype("alibi_slopes", alibi_slopes, Float32)
        size(alibi_slopes) in ((hq,), (hq, batch)) || throw(DimensionMismatch(
            "alibi_slopes has size $(size(alibi_slopes)); expected ($hq,) or ($hq, $batch)"))
    end

    return Problem(; backend, device=device_ordinal(q), dtype=dtype_of(T), head_dim=d, batch,
                   heads_q=hq, heads_kv=hkv, seqlen_q=sq, seqlen_k=sk, total_q, total_k,
                   softmax_scale, softcap, causal, use_window=window !== nothing,
                   window_left=window === nothing ? 0 : window[1],
                   window_right=window === nothing ? 0 : window[2], varlen, deterministic)
end

expect_size(name, A, dims) = size(A) == dims ||
    throw(DimensionMismatch("$name has size $(size(A)); expected $dims"))

expect_eltype(name, A, T) = eltype(A) == T ||
    throw(ArgumentError("$name has elements of type $(eltype(A)); expected $T"))

"""
    dtype_of(T) -> Int32

The `FLASHBWD_DTYPE_*` of element type `T`: `Float16`, or `BFloat16` with BFloat16s.jl loaded.
"""
dtype_of(::Type{Float16}) = FLASHBWD_DTYPE_FP16
dtype_of(::Type{T}) where {T} = throw(ArgumentError(
    "FlashBwd computes on Float16 or BFloat16 (load BFloat16s.jl) elements, not $T"))

# Offsets must be on the host to be read here; device offsets need max_seqlen_* given.
function longest_sequence(side, cu_seqlens::Array{Int32})
    length(cu_seqlens) >= 2 || throw(ArgumentError("cu_seqlens_$side needs batch + 1 >= 2 entries"))
    return maximum(cu_seqlens[i+1] - cu_seqlens[i] for i in 1:length(cu_seqlens)-1)
end
longest_sequence(side, cu_seqlens) = throw(ArgumentError(
    "pass max_seqlen_$side: cu_seqlens_$side is a $(typeof(cu_seqlens)), not a host Vector{Int32}"))

# ======================================================================================
# Hooks: host methods here, CuArray methods in ext/FlashBwdCUDAExt.jl
# ======================================================================================

# Which backend can read this array's memory.
memory_backend(::AbstractArray) = FLASHBWD_BACKEND_CPU

# The device ordinal for Problem.device (ignored by the CPU backend).
device_ordinal(::AbstractArray) = 0

# Run f(stream) with the array's device current; the CPU backend has no stream.
function with_device_stream(f, ::AbstractArray, stream)
    stream === nothing || stream == C_NULL || throw(ArgumentError(
        "host arrays run on the CPU backend, which takes no stream; got $stream"))
    return f(C_NULL)
end

# Scratch memory of the array's kind; the CPU backend needs 4-byte alignment, which a
# Vector{Float32} has.
allocate_workspace(::AbstractArray, bytes) = Vector{Float32}(undef, cld(bytes, 4))

# Give scratch memory back early (garbage collection would do it later).
release_workspace(::AbstractArray) = nothing
