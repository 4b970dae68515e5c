/* inputs.h — random, forward-consistent inputs for the demo and the benchmark.
 *
 * A backward needs O and LSE from a forward; these helpers compute them on the host in
 * fp32 from random Q, K, V (normal values), so the backward runs on realistic data rather
 * than zeros. Tensors are packed (batch, seq, head, dim); LSE is (batch, head, seq).
 */
#ifndef FB_BENCH_INPUTS_H
#define FB_BENCH_INPUTS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "flashbwd.h"

static inline uint64_t in_next(uint64_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Roughly normal (sum of uniforms), cheap enough for hundreds of millions of values. */
static inline float in_normal(uint64_t *s)
{
    const uint64_t r = in_next(s);
    const float a = (float)(r & 0xffff), b = (float)((r >> 16) & 0xffff),
                c = (float)((r >> 32) & 0xffff), d = (float)(r >> 48);
    return ((a + b + c + d) / 65536.0f - 2.0f) * 1.7320508f;
}

static inline uint16_t in_to_half(float f, int32_t dtype)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if (dtype == FLASHBWD_DTYPE_BF16) return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    /* fp16, values well inside the normal range here: truncate-to-nearest is enough */
    const uint32_t sign = (u >> 16) & 0x8000u, e = (u >> 23) & 0xff;
    if (e < 103) return (uint16_t)sign;
    const uint32_t m = (u & 0x7fffffu) + 0x1000u;
    return (uint16_t)(sign | (((e - 112u) << 10) + (m >> 13)));
}

static inline float in_to_float(uint16_t h, int32_t dtype)
{
    uint32_t u;
    if (dtype == FLASHBWD_DTYPE_BF16) {
        u = (uint32_t)h << 16;
    } else {
        const uint32_t e = (h >> 10) & 31, m = h & 1023;
        u = (uint32_t)(h & 0x8000) << 16;
        if (e) u |= ((e + 112u) << 23) | (m << 13);
        else if (m) return (h & 0x8000 ? -1.0f : 1.0f) * (float)m * 5.9604645e-8f;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Fill n 16-bit values with random normals. */
static inline void in_fill(uint16_t *x, size_t n, int32_t dtype, uint64_t seed)
{
    uint64_t s = seed * 0x9e3779b97f4a7c15ull | 1;
    for (size_t i = 0; i < n; ++i) x[i] = in_to_half(in_normal(&s), dtype);
}

/* Forward on the host for one (b, h): O rows and LSE, causal bottom-right if asked. */
static inline void in_forward_head(const uint16_t *q, const uint16_t *k, const uint16_t *v,
                                   uint16_t *o, float *lse, int64_t b, int64_t h, int64_t sq,
                                   int64_t sk, int64_t heads, int64_t d, int causal, int32_t dtype,
                                   float *row)
{
    const float scale = 1.0f / sqrtf((float)d);
    for (int64_t i = 0; i < sq; ++i) {
        const uint16_t *qi = q + ((b * sq + i) * heads + h) * d;
        const int64_t hi = causal ? (i + sk - sq + 1 < sk ? i + sk - sq + 1 : sk) : sk;
        float mx = -INFINITY, sum = 0.0f;
        for (int64_t j = 0; j < hi; ++j) {
            const uint16_t *kj = k + ((b * sk + j) * heads + h) * d;
            float acc = 0.0f;
            for (int64_t c = 0; c < d; ++c) acc += in_to_float(qi[c], dtype) * in_to_float(kj[c], dtype);
            row[j] = acc * scale;
            if (row[j] > mx) mx = row[j];
        }
        uint16_t *oi = o + ((b * sq + i) * heads + h) * d;
        float acc_o[256] = {0};
        for (int64_t j = 0; j < hi; ++j) {
            const float p = expf(row[j] - mx);
            sum += p;
            const uint16_t *vj = v + ((b * sk + j) * heads + h) * d;
            for (int64_t c = 0; c < d; ++c) acc_o[c] += p * in_to_float(vj[c], dtype);
        }
        for (int64_t c = 0; c < d; ++c) oi[c] = in_to_half(hi > 0 ? acc_o[c] / sum : 0.0f, dtype);
        lse[(b * heads + h) * sq + i] = hi > 0 ? mx + logf(sum) : -INFINITY;
    }
}

/* Backward FLOPs by FlashAttention's convention: 2.5 x 4·b·h·sq·sk·d, halved if causal. */
static inline double in_bwd_flops(int64_t b, int64_t h, int64_t sq, int64_t sk, int64_t d,
                                  int causal)
{
    return 2.5 * 4.0 * (double)b * (double)h * (double)sq * (double)sk * (double)d /
           (causal ? 2.0 : 1.0);
}

#endif
