# errors.jl — a failing status becomes a FlashBwdError carrying the library's message.

"""
    FlashBwdError(status, name, message)

A flashbwd call failed. `status` is the C status (`FLASHBWD_ERR_*`), `name` its stable
identifier (`"FLASHBWD_ERR_INVALID_VALUE"`), and `message` the library's detailed message,
which names the offending field and value (the status's generic text when there is none).
"""
struct FlashBwdError <: Exception
    status::Int32
    name::String
    message::String
end

# From a status and the library's message, which reads "FLASHBWD_ERR_X: what happened";
# the name is kept in its own field, so the message keeps only what happened.
function FlashBwdError(status::Integer, library_message::AbstractString)
    name = unsafe_string(flashbwd_status_name(status))
    text = String(chopprefix(library_message, name * ": "))
    isempty(text) && (text = unsafe_string(flashbwd_status_string(status)))
    return FlashBwdError(Int32(status), name, text)
end

Base.showerror(io::IO, e::FlashBwdError) =
    print(io, "FlashBwdError: ", e.name, " (", e.status, "): ", e.message)

# The thread-local message is read in the next call on the same task, with no yield point
# in between, so a task switch (the only way a task changes threads) cannot intervene.
function throw_last_error(status::Int32)
    message = unsafe_string(flashbwd_last_error())
    throw(FlashBwdError(status, message))
end
