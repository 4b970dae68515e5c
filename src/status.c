/* status.c — status names and descriptions, and the failure messages of plans and threads.
 *
 * One X-macro list generates both lookups, so a status cannot have a name without a
 * description. The list must match the FLASHBWD_* constants of flashbwd.h one for one;
 * tests/test_abi.c checks that every value below FLASHBWD_STATUS_COUNT has an entry.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define FB_STATUS_LIST(X)                                                                 \
    X(FLASHBWD_OK, "success")                                                             \
    X(FLASHBWD_ERR_NULL_ARGUMENT, "a required pointer argument is NULL")                  \
    X(FLASHBWD_ERR_STRUCT_SIZE, "struct_size is not one this library knows, or a newer "  \
                                "struct sets fields this library does not know")          \
    X(FLASHBWD_ERR_INVALID_VALUE, "a field or argument has an invalid value")             \
    X(FLASHBWD_ERR_NOT_SUPPORTED, "valid, but not supported by this build or device")     \
    X(FLASHBWD_ERR_NO_DEVICE, "no usable CUDA driver or device")                          \
    X(FLASHBWD_ERR_WRONG_DEVICE, "the current CUDA device is not the plan's device")      \
    X(FLASHBWD_ERR_MISALIGNED, "a pointer or stride is not aligned as required")          \
    X(FLASHBWD_ERR_TENSOR_NOT_SET, "a required tensor was not set before execute")        \
    X(FLASHBWD_ERR_WORKSPACE_TOO_SMALL, "the workspace is missing or too small")          \
    X(FLASHBWD_ERR_CUDA, "the CUDA runtime reported an error")                            \
    X(FLASHBWD_ERR_OUT_OF_MEMORY, "host memory allocation failed")                        \
    X(FLASHBWD_ERR_OVERFLOW, "a size or offset is too large to represent")                \
    X(FLASHBWD_ERR_BUSY, "the plan is in use by another call")                            \
    X(FLASHBWD_ERR_OVERLAP, "an output tensor overlaps another tensor")                   \
    X(FLASHBWD_ERR_INVALID_LENGTHS, "cu_seqlens or seqused contradict the plan")          \
    X(FLASHBWD_ERR_INTERNAL, "internal error in flashbwd")

const char *flashbwd_status_name(int32_t status)
{
    switch (status) {
#define FB_NAME_CASE(code, text) case code: return #code;
        FB_STATUS_LIST(FB_NAME_CASE)
#undef FB_NAME_CASE
    default: return "FLASHBWD_ERR_UNKNOWN";
    }
}

const char *flashbwd_status_string(int32_t status)
{
    switch (status) {
#define FB_TEXT_CASE(code, text) case code: return text;
        FB_STATUS_LIST(FB_TEXT_CASE)
#undef FB_TEXT_CASE
    default: return "unknown status code";
    }
}

/* The calling thread's last failure message. */
static _Thread_local char thread_message[FB_MESSAGE_BYTES];

int32_t fb_fail(flashbwd_plan *plan, int32_t status, const char *fmt, ...)
{
    char text[FB_MESSAGE_BYTES - 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    /* "FLASHBWD_ERR_X: what happened" so a message read alone still names its status. */
    snprintf(thread_message, sizeof thread_message, "%s: %s", flashbwd_status_name(status),
             text);
    if (plan) memcpy(plan->message, thread_message, sizeof plan->message);
    return status;
}

void fb_clear_plan_message(flashbwd_plan *plan)
{
    if (plan) plan->message[0] = '\0';
}

const char *flashbwd_plan_last_error(const flashbwd_plan *plan)
{
    return plan ? plan->message : "";
}

const char *flashbwd_last_error(void) { return thread_message; }
