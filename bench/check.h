/* check.h — exit-on-failure wrappers shared by the bench programs (demo, bench).
 *
 * CHECK(call): a flashbwd call; on failure print the call and the thread's last error
 * message, exit 1. CUDA_CHECK(call): a CUDA runtime call, defined when the CUDA runtime
 * header was included first.
 */
#ifndef FB_BENCH_CHECK_H
#define FB_BENCH_CHECK_H
#include <stdio.h>
#include <stdlib.h>

#include "flashbwd.h"

#define CHECK(call)                                                                       \
    do {                                                                                  \
        int32_t s_ = (call);                                                              \
        if (s_ != FLASHBWD_OK) {                                                          \
            fprintf(stderr, "%s failed: %s\n", #call, flashbwd_last_error());             \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#ifdef CUDART_VERSION
#define CUDA_CHECK(call)                                                                  \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            fprintf(stderr, "%s:%d %s failed: %s\n", __FILE__, __LINE__, #call,           \
                    cudaGetErrorString(e_));                                              \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)
#endif

#endif
