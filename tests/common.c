/* common.c — random problems and the fp64 reference of the tests (see common.h). */
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

/* --- Random numbers -------------------------------------------------------------------- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t test_seed(void)
{
    static uint64_t seed;
    if (!seed) {
        const char *env = getenv("FLASHBWD_TEST_SEED");
        seed = env ? strtoull(env, NULL, 0) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
        if (!seed) seed = 1;
        fprintf(stderr, "[ seed     ] FLASHBWD_TEST_SEED=%llu\n", (unsigned long long)seed);
    }
    return seed;
}

double rnd_normal(uint64_t *state)
{
    double u1 = ((splitmix(state) >> 11) + 1.0) * 0x1.0p-53;
    double u2 = (splitmix(state) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* --- 16-bit conversions ------------------------------------------------------------------ */

float th_to_float(uint16_t h, int32_t dtype)
{
    if (dtype == FLASHBWD_DTYPE_FP16) {
        const int e = (h >> 10) & 31, m = h & 1023;
        double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
        return (float)((h & 0x8000) ? -v : v);
    }
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t th_from_float(float f, int32_t dtype)
{
    if (dtype == FLASHBWD_DTYPE_FP16) {
        /* nearest representable by search over the binade: slow but obviously right */
        if (isnan(f)) return 0x7e00;
        const uint16_t sign = signbit(f) ? 0x8000 : 0;
        const double a = fabs((double)f);
        if (a >= 65520.0) return sign | 0x7c00;
        uint16_t best = 0;
        double best_err = INFINITY;
        int e = a < ldexp(1, -14) ? 0 : (int)floor(log2(a)) + 15;
        for (int ee = e - 1; ee <= e + 1; ++ee) {
            if (ee < 0 || ee > 30) continue;
            const double ulp = ldexp(1, (ee == 0 ? 1 : ee) - 25);
            const double base = ee == 0 ? 0 : ldexp(1, ee - 15);
            double m = floor((a - base) / ulp);
            for (double mm = m - 1; mm <= m + 2; ++mm) {
                if (mm < 0 || mm > 1023) continue;
                const double v = base + mm * ulp;
                const double err = fabs(v - a);
                const uint16_t bits = (uint16_t)((ee << 10) | (int)mm);
                if (err < best_err || (err == best_err && !(bits & 1))) best = bits, best_err = err;
            }
        }
        return sign | best;
    }
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    const uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

/* --- Layouts ------------------------------------------------------------------------------- */

static int is_qside(int id)
{
    return id == FLASHBWD_TENSOR_Q || id == FLASHBWD_TENSOR_O || id == FLASHBWD_TENSOR_DO ||
           id == FLASHBWD_TENSOR_DQ;
}

static int is_half(int id) { return id >= FLASHBWD_TENSOR_Q && id <= FLASHBWD_TENSOR_DV &&
                                    id != FLASHBWD_TENSOR_LSE; }

/* Strides of a 16-bit tensor with dims (B, S, H, D) or varlen (T, H, D). */
static int half_strides(const tcase *tc, int64_t rows, int64_t seq, int64_t heads, int64_t s[4])
{
    const int64_t d = tc->head_dim;
    if (tc->varlen) {
        if (tc->layout == 0) s[0] = heads * d, s[1] = d;
        else if (tc->layout == 1) s[0] = heads * (d + 8) + 16, s[1] = d + 8;
        else s[0] = d, s[1] = rows * d;
        s[2] = 1;
        return 3;
    }
    if (tc->layout == 0) s[2] = d, s[1] = heads * d, s[0] = seq * heads * d;
    else if (tc->layout == 1) s[2] = d + 8, s[1] = heads * (d + 8) + 16, s[0] = seq * s[1] + 64;
    else s[1] = d, s[2] = seq * d, s[0] = heads * seq * d;
    s[3] = 1;
    return 4;
}

static size_t span_elems(const int64_t *ext, const int64_t *stride, int rank)
{
    int64_t last = 0;
    for (int i = 0; i < rank; ++i) last += (ext[i] - 1) * stride[i];
    return (size_t)last + 1;
}

/* Element offset of (b, row-in-sequence r, head h, col c) of a 16-bit tensor. */
static int64_t half_off(const tcase *tc, const tdata *td, int id, int64_t b, int64_t r, int64_t h,
                        int64_t c)
{
    const ttensor *t = &td->t[id];
    if (tc->varlen) {
        const int64_t row = (is_qside(id) ? td->off_q[b] : td->off_k[b]) + r;
        return row * t->stride[0] + h * t->stride[1] + c;
    }
    return b * t->stride[0] + r * t->stride[1] + h * t->stride[2] + c;
}

static int64_t lse_off(const tcase *tc, const tdata *td, int64_t b, int64_t h, int64_t r)
{
    const ttensor *t = &td->t[FLASHBWD_TENSOR_LSE];
    if (tc->varlen) return h * t->stride[0] + td->off_q[b] + r;
    return b * t->stride[0] + h * t->stride[1] + r;
}

/* Packed reference index of (b, r, h, c). */
static int64_t ref_off(const tcase *tc, const tdata *td, int qside, int64_t b, int64_t r,
                       int64_t h, int64_t c)
{
    const int64_t heads = qside ? tc->heads_q : tc->heads_kv;
    const int64_t row = tc->varlen ? (qside ? td->off_q[b] : td->off_k[b]) + r
                                   : b * (qside ? tc->seqlen_q : tc->seqlen_k) + r;
    return (row * heads + h) * tc->head_dim + c;
}

/* --- fp64 reference ------------------------------------------------------------------------- */

/* Inputs converted once to double, packed like the reference outputs. */
typedef struct dbl {
    double *q, *k, *v, *o, *dout;
} dbl;

static double *to_double(const tcase *tc, const tdata *td, int id)
{
    const int q = is_qside(id);
    const int64_t heads = q ? tc->heads_q : tc->heads_kv;
    const int64_t rows = q ? td->total_q : td->total_k;
    double *out = malloc(sizeof(double) * (size_t)(rows * heads * tc->head_dim + 1));
    for (int64_t b = 0; b < tc->batch; ++b)
        for (int64_t r = 0; r < (q ? td->len_q[b] : td->len_k[b]); ++r)
            for (int64_t h = 0; h < heads; ++h)
                for (int64_t c = 0; c < tc->head_dim; ++c)
                    out[ref_off(tc, td, q, b, r, h, c)] = th_to_float(
                        ((uint16_t *)td->t[id].data)[half_off(tc, td, id, b, r, h, c)], tc->dtype);
    return out;
}

static double dotd(const double *a, const double *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

static double slope(const tcase *tc, const tdata *td, int64_t b, int64_t h)
{
    const float *s = td->t[FLASHBWD_TENSOR_ALIBI_SLOPES].data;
    if (!tc->alibi) return 0.0;
    return tc->alibi == 1 ? s[h] : s[b * tc->heads_q + h];
}

/* score of (i, j) before masking, and d(score)/d(q.k) / scale in *dt */
static double score(const tcase *tc, double qk, double sl, int64_t i, int64_t j, int64_t diag,
                    double *dt)
{
    const double scale = tc->scale > 0 ? tc->scale : 1.0 / sqrt((double)tc->head_dim);
    double s;
    if (tc->softcap > 0) {
        const double t = tanh(qk * scale / tc->softcap);
        s = tc->softcap * t;
        *dt = 1.0 - t * t;
    } else {
        s = qk * scale;
        *dt = 1.0;
    }
    return s - sl * fabs((double)(i + diag - j));
}

static int visible(const tcase *tc, int64_t i, int64_t j, int64_t diag, int64_t sk)
{
    if (j < 0 || j >= sk) return 0;
    int64_t right = tc->use_window && tc->window_right >= 0 ? tc->window_right : -1;
    if (tc->causal) right = 0;
    const int64_t left = tc->use_window && tc->window_left >= 0 ? tc->window_left : -1;
    if (right >= 0 && j > i + diag + right) return 0;
    if (left >= 0 && j < i + diag - left) return 0;
    return 1;
}

/* Forward for one (b, h): writes O (16-bit) and LSE (fp32). */
static void forward_head(const tcase *tc, tdata *td, const dbl *x, int64_t b, int64_t h,
                         double *S, double *o)
{
    const int64_t sq = td->len_q[b], sk = td->len_k[b], d = tc->head_dim, diag = sk - sq;
    const int64_t hk = h / (tc->heads_q / tc->heads_kv);
    const double sl = slope(tc, td, b, h);
    for (int64_t i = 0; i < sq; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < sk; ++j) {
            double dt;
            const double qk = dotd(x->q + ref_off(tc, td, 1, b, i, h, 0),
                                   x->k + ref_off(tc, td, 0, b, j, hk, 0), d);
            S[j] = visible(tc, i, j, diag, sk) ? score(tc, qk, sl, i, j, diag, &dt) : -INFINITY;
            if (S[j] > mx) mx = S[j];
        }
        double sum = 0;
        memset(o, 0, sizeof(double) * (size_t)d);
        if (mx > -INFINITY)
            for (int64_t j = 0; j < sk; ++j) {
                const double pj = exp(S[j] - mx);
                sum += pj;
                const double *vj = x->v + ref_off(tc, td, 0, b, j, hk, 0);
                for (int64_t c = 0; c < d; ++c) o[c] += pj * vj[c];
            }
        float lse = mx > -INFINITY ? (float)(mx + log(sum)) : -INFINITY;
        if (tc->masked_rows && i % 7 == 3) lse = -INFINITY;
        ((float *)td->t[FLASHBWD_TENSOR_LSE].data)[lse_off(tc, td, b, h, i)] = lse;
        uint16_t *O = td->t[FLASHBWD_TENSOR_O].data;
        for (int64_t c = 0; c < d; ++c)
            O[half_off(tc, td, FLASHBWD_TENSOR_O, b, i, h, c)] =
                th_from_float(sum > 0 ? (float)(o[c] / sum) : 0.0f, tc->dtype);
    }
}

/* Backward for one (b, h) with explicit matrices: P, dP, dS of size sq x sk. */
static void backward_head(const tcase *tc, tdata *td, const dbl *x, int64_t b, int64_t h,
                          double *P, double *dS)
{
    const int64_t sq = td->len_q[b], sk = td->len_k[b], d = tc->head_dim, diag = sk - sq;
    const int64_t hk = h / (tc->heads_q / tc->heads_kv);
    const double scale = tc->scale > 0 ? tc->scale : 1.0 / sqrt((double)d);
    const double sl = slope(tc, td, b, h);
    const float *L = td->t[FLASHBWD_TENSOR_LSE].data;
    for (int64_t i = 0; i < sq; ++i) {
        const double lse = L[lse_off(tc, td, b, h, i)];
        const double *qi = x->q + ref_off(tc, td, 1, b, i, h, 0);
        const double *doi = x->dout + ref_off(tc, td, 1, b, i, h, 0);
        const double D = dotd(doi, x->o + ref_off(tc, td, 1, b, i, h, 0), d);
        for (int64_t j = 0; j < sk; ++j) {
            double dt = 1;
            const double qk = dotd(qi, x->k + ref_off(tc, td, 0, b, j, hk, 0), d);
            const double dp = dotd(doi, x->v + ref_off(tc, td, 0, b, j, hk, 0), d);
            const double s = score(tc, qk, sl, i, j, diag, &dt);
            const double p = (visible(tc, i, j, diag, sk) && lse != -INFINITY) ? exp(s - lse) : 0.0;
            P[i * sk + j] = p;
            dS[i * sk + j] = p * (dp - D) * dt * scale; /* gradient w.r.t. q.k */
        }
    }
    for (int64_t i = 0; i < sq; ++i) { /* dQ = dS K */
        double *dq = td->ref_dq + ref_off(tc, td, 1, b, i, h, 0);
        for (int64_t j = 0; j < sk; ++j) {
            const double *kj = x->k + ref_off(tc, td, 0, b, j, hk, 0);
            for (int64_t c = 0; c < d; ++c) dq[c] += dS[i * sk + j] * kj[c];
        }
    }
    for (int64_t j = 0; j < sk; ++j) { /* dK += dSᵀ Q, dV += Pᵀ dO (group sums) */
        double *dk = td->ref_dk + ref_off(tc, td, 0, b, j, hk, 0);
        double *dv = td->ref_dv + ref_off(tc, td, 0, b, j, hk, 0);
        for (int64_t i = 0; i < sq; ++i) {
            const double *qi = x->q + ref_off(tc, td, 1, b, i, h, 0);
            const double *doi = x->dout + ref_off(tc, td, 1, b, i, h, 0);
            for (int64_t c = 0; c < d; ++c) {
                dk[c] += dS[i * sk + j] * qi[c];
                dv[c] += P[i * sk + j] * doi[c];
            }
        }
    }
}

/* --- Building a case -------------------------------------------------------------------- */

static void alloc_tensor(ttensor *t, size_t elems, size_t esz)
{
    t->elems = elems;
    t->data = calloc(elems ? elems : 1, esz);
}

/* The reference runs its (batch, head) tasks on a few threads: the GPU suite's largest
 * cases would otherwise dominate its run time. Backward tasks own a kv head and walk its
 * query-head group in order, so the group sums are deterministic. */
typedef struct ref_job {
    const tcase *tc;
    tdata *td;
    const dbl *x;
    int phase; /* 0 forward, 1 backward */
    atomic_llong next;
} ref_job;

static void *ref_worker(void *arg)
{
    ref_job *job = arg;
    const tcase *tc = job->tc;
    tdata *td = job->td;
    int64_t maxq = 1, maxk = 1;
    for (int64_t b = 0; b < tc->batch; ++b) {
        if (td->len_q[b] > maxq) maxq = td->len_q[b];
        if (td->len_k[b] > maxk) maxk = td->len_k[b];
    }
    double *S = malloc(sizeof(double) * (size_t)(maxq * maxk));
    double *S2 = malloc(sizeof(double) * (size_t)(maxq * maxk));
    double *o = malloc(sizeof(double) * (size_t)tc->head_dim);
    const int64_t heads = job->phase ? tc->heads_kv : tc->heads_q;
    const int64_t group = tc->heads_q / tc->heads_kv;
    for (;;) {
        const int64_t task = atomic_fetch_add(&job->next, 1);
        if (task >= tc->batch * heads) break;
        const int64_t b = task / heads, h = task % heads;
        if (job->phase == 0) forward_head(tc, td, job->x, b, h, S, o);
        else
            for (int64_t g = 0; g < group; ++g) backward_head(tc, td, job->x, b, h * group + g, S, S2);
    }
    free(S), free(S2), free(o);
    return NULL;
}

static void run_parallel(ref_job *job)
{
    enum { MAX_THREADS = 16 };
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > MAX_THREADS) n = MAX_THREADS;
    pthread_t th[MAX_THREADS];
    int started = 0;
    for (long i = 0; i < n; ++i)
        if (pthread_create(&th[started], NULL, ref_worker, job) == 0) ++started;
    if (started == 0) ref_worker(job);
    for (int i = 0; i < started; ++i) pthread_join(th[i], NULL);
}

int tdata_make(const tcase *tc, tdata *td, uint64_t seed)
{
    memset(td, 0, sizeof *td);
    const int64_t B = tc->batch, d = tc->head_dim;
    td->off_q = calloc((size_t)B, sizeof(int64_t));
    td->off_k = calloc((size_t)B, sizeof(int64_t));
    td->len_q = calloc((size_t)B, sizeof(int64_t));
    td->len_k = calloc((size_t)B, sizeof(int64_t));
    for (int64_t b = 0; b < B; ++b) {
        td->len_q[b] = tc->varlen ? tc->lens_q[b] : tc->seqlen_q;
        td->len_k[b] = tc->varlen ? tc->lens_k[b] : tc->seqlen_k;
        td->off_q[b] = tc->varlen ? td->total_q : 0;
        td->off_k[b] = tc->varlen ? td->total_k : 0;
        td->total_q += td->len_q[b];
        td->total_k += td->len_k[b];
    }
    if (!tc->varlen) td->total_q = B * tc->seqlen_q, td->total_k = B * tc->seqlen_k;
    if (tc->varlen && (td->total_q == 0 || td->total_k == 0)) return -1; /* total 0 = default */

    for (int id = FLASHBWD_TENSOR_Q; id <= FLASHBWD_TENSOR_DV; ++id) {
        ttensor *t = &td->t[id];
        if (is_half(id)) {
            const int q = is_qside(id);
            const int64_t heads = q ? tc->heads_q : tc->heads_kv;
            const int64_t seq = q ? tc->seqlen_q : tc->seqlen_k;
            const int64_t rows = q ? td->total_q : td->total_k;
            t->rank = half_strides(tc, rows, seq, heads, t->stride);
            int64_t ext[4] = {B, seq, heads, d};
            if (tc->varlen) ext[0] = rows, ext[1] = heads, ext[2] = d;
            alloc_tensor(t, span_elems(ext, t->stride, t->rank), 2);
        } else { /* LSE */
            if (tc->varlen) {
                t->rank = 2;
                t->stride[0] = td->total_q + (tc->layout == 1 ? 4 : 0), t->stride[1] = 1;
                int64_t ext[2] = {tc->heads_q, td->total_q};
                alloc_tensor(t, span_elems(ext, t->stride, 2), 4);
            } else {
                t->rank = 3;
                const int64_t s = tc->seqlen_q + (tc->layout == 1 ? 4 : 0);
                t->stride[2] = 1, t->stride[1] = s, t->stride[0] = tc->heads_q * s + (tc->layout == 1 ? 8 : 0);
                int64_t ext[3] = {B, tc->heads_q, tc->seqlen_q};
                alloc_tensor(t, span_elems(ext, t->stride, 3), 4);
            }
        }
    }
    if (tc->varlen) {
        const int ids[2] = {FLASHBWD_TENSOR_CU_SEQLENS_Q, FLASHBWD_TENSOR_CU_SEQLENS_K};
        for (int s = 0; s < 2; ++s) {
            ttensor *t = &td->t[ids[s]];
            t->rank = 1, t->stride[0] = 1;
            alloc_tensor(t, (size_t)B + 1, 4);
            int32_t *cu = t->data;
            for (int64_t b = 0; b < B; ++b) cu[b] = (int32_t)(s ? td->off_k[b] : td->off_q[b]);
            cu[B] = (int32_t)(s ? td->total_k : td->total_q);
        }
    }
    uint64_t st = seed ^ 0x5eedull;
    if (tc->alibi) {
        ttensor *t = &td->t[FLASHBWD_TENSOR_ALIBI_SLOPES];
        t->rank = tc->alibi;
        if (tc->alibi == 1) t->stride[0] = 1;
        else t->stride[0] = tc->heads_q, t->stride[1] = 1;
        alloc_tensor(t, (size_t)(tc->alibi == 1 ? tc->heads_q : B * tc->heads_q), 4);
        for (size_t i = 0; i < t->elems; ++i)
            ((float *)t->data)[i] = (float)(0.05 + 0.5 * fabs(rnd_normal(&st)));
    }
    /* Random inputs; outputs poisoned (0xffff is NaN in fp16 and bf16). */
    const int inputs[4] = {FLASHBWD_TENSOR_Q, FLASHBWD_TENSOR_K, FLASHBWD_TENSOR_V, FLASHBWD_TENSOR_DO};
    for (int n = 0; n < 4; ++n) {
        ttensor *t = &td->t[inputs[n]];
        for (size_t i = 0; i < t->elems; ++i)
            ((uint16_t *)t->data)[i] = th_from_float((float)rnd_normal(&st), tc->dtype);
    }
    for (int id = FLASHBWD_TENSOR_DQ; id <= FLASHBWD_TENSOR_DV; ++id)
        memset(td->t[id].data, 0xff, td->t[id].elems * 2);

    const size_t nq = (size_t)(td->total_q * tc->heads_q * d), nk = (size_t)(td->total_k * tc->heads_kv * d);
    td->ref_dq = calloc(nq ? nq : 1, sizeof(double));
    td->ref_dk = calloc(nk ? nk : 1, sizeof(double));
    td->ref_dv = calloc(nk ? nk : 1, sizeof(double));
    dbl x = {to_double(tc, td, FLASHBWD_TENSOR_Q), to_double(tc, td, FLASHBWD_TENSOR_K),
             to_double(tc, td, FLASHBWD_TENSOR_V), NULL, to_double(tc, td, FLASHBWD_TENSOR_DO)};
    ref_job job = {tc, td, &x, 0, 0};
    run_parallel(&job); /* forward: one task per (batch, query head) */
    x.o = to_double(tc, td, FLASHBWD_TENSOR_O); /* the 16-bit O the library sees */
    job.phase = 1;
    atomic_store(&job.next, 0);
    run_parallel(&job); /* backward: one task per (batch, kv head), its group in order */
    free(x.q), free(x.k), free(x.v), free(x.o), free(x.dout);
    return 0;
}

void tdata_free(tdata *td)
{
    for (int id = 0; id < FLASHBWD_TENSOR_COUNT; ++id) free(td->t[id].data);
    free(td->off_q), free(td->off_k), free(td->len_q), free(td->len_k);
    free(td->ref_dq), free(td->ref_dk), free(td->ref_dv);
    memset(td, 0, sizeof *td);
}

flashbwd_problem tcase_problem(const tcase *tc, int32_t backend)
{
    flashbwd_problem p;
    memset(&p, 0, sizeof p);
    p.struct_size = FLASHBWD_PROBLEM_STRUCT_SIZE;
    p.backend = backend;
    p.dtype = tc->dtype;
    p.head_dim = tc->head_dim;
    p.batch = tc->batch, p.heads_q = tc->heads_q, p.heads_kv = tc->heads_kv;
    p.seqlen_q = tc->seqlen_q, p.seqlen_k = tc->seqlen_k;
    p.softmax_scale = tc->scale, p.softcap = tc->softcap;
    p.causal = tc->causal;
    p.sm_count = tc->sm_count;
    p.use_window = tc->use_window;
    p.window_left = tc->use_window ? tc->window_left : 0;
    p.window_right = tc->use_window ? tc->window_right : 0;
    p.varlen = tc->varlen;
    if (tc->varlen) {
        int64_t tq = 0, tk = 0;
        for (int64_t b = 0; b < tc->batch; ++b) tq += tc->lens_q[b], tk += tc->lens_k[b];
        p.total_q = tq, p.total_k = tk;
    }
    return p;
}

int32_t tdata_bind(const tcase *tc, const tdata *td, flashbwd_plan *plan, void *const base[])
{
    (void)tc;
    for (int id = 1; id < FLASHBWD_TENSOR_COUNT; ++id) {
        const ttensor *t = &td->t[id];
        if (!t->data) continue;
        void *ptr = base && base[id] ? base[id] : t->data;
        int32_t s = flashbwd_plan_set_tensor(plan, id, ptr, t->stride, t->rank);
        if (s != FLASHBWD_OK) return s;
    }
    return FLASHBWD_OK;
}

flashbwd_plan *tcpu_plan(const tcase *tc, const tdata *td, int deterministic, void **workspace)
{
    flashbwd_problem p = tcase_problem(tc, FLASHBWD_BACKEND_CPU);
    p.deterministic = deterministic;
    flashbwd_plan *plan = NULL;
    size_t bytes = 0;
    *workspace = NULL;
    if (flashbwd_plan_create(&p, &plan) != FLASHBWD_OK || tdata_bind(tc, td, plan, NULL) ||
        flashbwd_plan_workspace_size(plan, &bytes) || !(*workspace = malloc(bytes ? bytes : 1)) ||
        flashbwd_plan_set_workspace(plan, *workspace, bytes)) {
        fprintf(stderr, "%s: CPU plan: %s\n", tc->name, flashbwd_last_error());
        flashbwd_plan_destroy(plan);
        free(*workspace);
        *workspace = NULL;
        return NULL;
    }
    return plan;
}

double tdata_error(const tcase *tc, const tdata *td, int32_t id, int64_t *nan_count)
{
    const int q = id == FLASHBWD_TENSOR_DQ;
    const double *ref = id == FLASHBWD_TENSOR_DQ ? td->ref_dq : id == FLASHBWD_TENSOR_DK ? td->ref_dk : td->ref_dv;
    const int64_t heads = q ? tc->heads_q : tc->heads_kv;
    const uint16_t *x = td->t[id].data;
    double num = 0, den = 0;
    int64_t bad = 0;
    for (int64_t b = 0; b < tc->batch; ++b) {
        const int64_t len = q ? td->len_q[b] : td->len_k[b];
        for (int64_t r = 0; r < len; ++r)
            for (int64_t h = 0; h < heads; ++h)
                for (int64_t c = 0; c < tc->head_dim; ++c) {
                    const double v = th_to_float(x[half_off(tc, td, id, b, r, h, c)], tc->dtype);
                    const double e = ref[ref_off(tc, td, q, b, r, h, c)];
                    if (!isfinite(v)) {
                        ++bad;
                        continue;
                    }
                    num += (v - e) * (v - e);
                    den += e * e;
                }
    }
    *nan_count = bad;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
