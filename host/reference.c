/* The CPU reference: plain loops, every sum in double. The oracle for the tests and
 * for `clattn run --check`. Semantics match the kernels: masked keys (and keys whose
 * weight is exactly 0) contribute nothing; a row with no visible key outputs zeros;
 * NaN and +inf follow IEEE arithmetic within their own row. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

clattn_status clattn_reference_attention(const clattn_attention_desc *desc,
                                         const clattn_tensor *q_t, const clattn_tensor *k_t,
                                         const clattn_tensor *v_t, const clattn_tensor *o_t)
{
    clattn_view q, k, v, o, w;
    clattn_status st = clattn_check_desc(NULL, desc);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(NULL, "Q", q_t, CLATTN_STORAGE_HOST, false, &q);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(NULL, "K", k_t, CLATTN_STORAGE_HOST, false, &k);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(NULL, "V", v_t, CLATTN_STORAGE_HOST, false, &v);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(NULL, "O", o_t, CLATTN_STORAGE_HOST, true, &o);
    if (st == CLATTN_SUCCESS && desc->weights)
        st = clattn_view_make(NULL, "weights", desc->weights, CLATTN_STORAGE_HOST, true, &w);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_attention_shapes(NULL, &q, &k, &v, &o, desc->weights ? &w : NULL);
    if (st != CLATTN_SUCCESS)
        return st;
    clattn_clear_error(NULL);

    const int64_t batch = q.n[0], h_q = q.n[1], n_q = q.n[2], d_k = q.n[3];
    const int64_t n_kv = k.n[2], d_v = v.n[3];
    if (batch == 0 || h_q == 0 || n_q == 0)
        return CLATTN_SUCCESS;
    const int64_t group = h_q / k.n[1];
    const double scale = clattn_effective_scale(desc, d_k);
    const float *Q = q.host, *K = k.host, *V = v.host;
    float *O = o.host, *W = desc->weights ? (float *)w.host : NULL;

    double *p = malloc(sizeof(double) * (size_t)(n_kv > 0 ? n_kv : 1));
    double *acc = malloc(sizeof(double) * (size_t)d_v);
    if (!p || !acc) {
        free(p);
        free(acc);
        return clattn_fail(NULL, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                           "reference: cannot allocate %lld doubles", (long long)(n_kv + d_v));
    }
    for (int64_t b = 0; b < batch; b++)
        for (int64_t h = 0; h < h_q; h++) {
            const int64_t hk = h / group;
            for (int64_t i = 0; i < n_q; i++) {
                /* scores and the true row max (NaN wins, as in the kernels) */
                double m = -INFINITY;
                for (int64_t j = 0; j < n_kv; j++) {
                    if (!clattn_key_visible(desc->mask, i, j, n_q, n_kv)) {
                        p[j] = -INFINITY;
                        continue;
                    }
                    double dot = 0.0;
                    for (int64_t c = 0; c < d_k; c++)
                        dot += (double)Q[clattn_view_index(&q, b, h, i, c)] *
                               (double)K[clattn_view_index(&k, b, hk, j, c)];
                    p[j] = scale * dot;
                    if (p[j] > m || isnan(p[j]))
                        m = isnan(m) ? m : p[j];
                }
                double l = 0.0;
                for (int64_t c = 0; c < d_v; c++)
                    acc[c] = 0.0;
                const bool empty = (m == -INFINITY);
                for (int64_t j = 0; j < n_kv; j++) {
                    p[j] = empty ? 0.0 : exp(p[j] - m);
                    if (p[j] == 0.0)
                        continue; /* masked or zero weight: contributes nothing */
                    l += p[j];
                    for (int64_t c = 0; c < d_v; c++)
                        acc[c] += p[j] * (double)V[clattn_view_index(&v, b, hk, j, c)];
                }
                for (int64_t c = 0; c < d_v; c++)
                    O[clattn_view_index(&o, b, h, i, c)] = empty ? 0.0f : (float)(acc[c] / l);
                if (W)
                    for (int64_t j = 0; j < n_kv; j++)
                        W[clattn_view_index(&w, b, h, i, j)] = empty ? 0.0f : (float)(p[j] / l);
            }
        }
    free(p);
    free(acc);
    return CLATTN_SUCCESS;
}
