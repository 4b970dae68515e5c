/* wrapper.h — what regen.sh hands to bindgen: the public header plus the values bindgen
 * cannot read from it.
 *
 * bindgen 0.60 evaluates #define constants with its own expression parser, which gives up on
 * the (size_t) casts of the FLASHBWD_*_STRUCT_SIZE macros and silently drops them. Clang
 * itself evaluates a const initializer, so each is restated here as a constant of its own
 * (suffix _VALUE); src/lib.rs re-exports it under the header's name, and regen.sh --check
 * fails if any FLASHBWD_ macro of the header has no constant in the crate.
 */
#include "flashbwd.h"

static const size_t FLASHBWD_PROBLEM_STRUCT_SIZE_VALUE = FLASHBWD_PROBLEM_STRUCT_SIZE;
static const size_t FLASHBWD_PROBLEM_STRUCT_SIZE_1_0_VALUE = FLASHBWD_PROBLEM_STRUCT_SIZE_1_0;
static const size_t FLASHBWD_PLAN_INFO_STRUCT_SIZE_VALUE = FLASHBWD_PLAN_INFO_STRUCT_SIZE;
static const size_t FLASHBWD_PLAN_INFO_STRUCT_SIZE_1_0_VALUE = FLASHBWD_PLAN_INFO_STRUCT_SIZE_1_0;
