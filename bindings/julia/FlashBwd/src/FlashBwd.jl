"""
    FlashBwd

Julia bindings of flashbwd, the FlashAttention backward pass (dQ, dK, dV) behind a stable
C ABI (`libflashbwd.so.1`). [`backward!`](@ref) runs it on host arrays (the CPU reference
backend) or, with CUDA.jl loaded, on `CuArray`s; [`Plan`](@ref) and its functions expose the
plan-once, execute-many C API, and [`Workspace`](@ref) the library's own workspace allocator
(flashbwd 1.1). Set `ENV["FLASHBWD_LIB"]` to the library's path before
`using FlashBwd` when it is not on the loader's search path.
"""
module FlashBwd

using Libdl

export backward!, Problem, PlanInfo, Plan, FlashBwdError, destroy!, set_tensor!,
       workspace_size, set_workspace!, execute!, plan_info, Workspace

include("libflashbwd.jl")
include("errors.jl")
include("plan.jl")
include("workspace.jl")
include("backward.jl")

# ======================================================================================
# Loading: find the library, then refuse to run against one this package does not match
# ======================================================================================

function __init__()
    load_library()
    check_version()
    check_layout(Problem, FLASHBWD_STRUCT_PROBLEM, FLASHBWD_PROBLEM_STRUCT_SIZE)
    check_layout(PlanInfo, FLASHBWD_STRUCT_PLAN_INFO, FLASHBWD_PLAN_INFO_STRUCT_SIZE)
    return nothing
end

function load_library()
    path = get(ENV, "FLASHBWD_LIB", "")
    chosen = nothing
    if !isempty(path)
        chosen = Libdl.dlopen(path; throw_error=false)
        chosen === nothing && error("FlashBwd: cannot load FLASHBWD_LIB = $(repr(path)); " *
                                    "point it at a built libflashbwd.so.1")
    end
    # What every @ccall will use (the same lookup as ccall's).
    handle = Libdl.dlopen(libflashbwd; throw_error=false)
    handle === nothing && error("FlashBwd: cannot load $libflashbwd; set " *
                                "ENV[\"FLASHBWD_LIB\"] to its path or add its directory to " *
                                "LD_LIBRARY_PATH")
    if chosen !== nothing &&
       Libdl.dlsym(chosen, :flashbwd_version) != Libdl.dlsym(handle, :flashbwd_version)
        error("FlashBwd: FLASHBWD_LIB = $(repr(path)) is loaded, but $libflashbwd resolves " *
              "to another library ($(Libdl.dlpath(handle))); is its SONAME $libflashbwd?")
    end
    return nothing
end

version_string(v) = "$(v ÷ 10000).$(v ÷ 100 % 100).$(v % 100)"

# Same major, and the library no older than the header mirrored here (libflashbwd.jl).
function check_version()
    runtime = Int(flashbwd_version())
    compiled = Int(FLASHBWD_VERSION)
    if runtime ÷ 10000 != compiled ÷ 10000 || runtime < compiled
        error("FlashBwd: the loaded $libflashbwd is version $(version_string(runtime)); " *
              "this package needs $(version_string(compiled)) or a newer $(compiled ÷ 10000).x")
    end
    return nothing
end

# Bytes of T the way the header counts them: offset of the last field plus its size.
used_bytes(T) = Int(fieldoffset(T, fieldcount(T))) + sizeof(fieldtype(T, fieldcount(T)))

# The Julia mirror must cover exactly the header's bytes; a library of the same minor
# version must know exactly those bytes too, a newer one at least them (it accepts older,
# shorter structs).
function check_layout(T::Type, struct_id, expected)
    used = used_bytes(T)
    if used != expected || sizeof(T) != expected
        error("FlashBwd: Julia's $T has $used bytes of fields and sizeof $(sizeof(T)), but " *
              "the header's size is $expected: the struct mirror is stale")
    end
    known = Int(flashbwd_struct_size(struct_id))
    same_minor = Int(flashbwd_version()) ÷ 100 == Int(FLASHBWD_VERSION) ÷ 100
    if known < used || (same_minor && known != sizeof(T))
        error("FlashBwd: the loaded $libflashbwd says $T (struct id $struct_id) has $known " *
              "bytes, but this package's mirror has sizeof $(sizeof(T)); they disagree")
    end
    return nothing
end

end # module
