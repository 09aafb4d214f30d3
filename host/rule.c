/* Which keys a query row sees: the one implementation of the positional rule on the
 * host (lengths, causal alignment, window, NO_SELF). The reference, the planning, the
 * several-device layer, clattn-mpi and the CLI all call it; the kernels' copy in
 * cl/common.cl gets its window bounds from clattn_rule_window(), so the sums it forms
 * cannot overflow either.
 *
 * Saturation: positions are validated to |q_start|, |kv_start| < 2^53 and sizes are
 * element counts (< 2^62 in practice), so a_i itself never overflows; a window bound
 * may be anything up to INT64_MAX. Bounds are capped at RULE_CAP = 2^60 here, which is
 * beyond every reachable key (any |a_i − j| < 2^56), so the capped rule is the exact
 * rule, and every sum below stays far from int64's limits. */
#include "internal.h"

#define RULE_CAP ((int64_t)1 << 60)

void clattn_rule_window(const clattn_attention_desc *d, int64_t *left, int64_t *right)
{
    *left = d->window && d->window_left >= 0 ? d->window_left : -1;
    *right = d->window && d->window_right >= 0 ? d->window_right : -1;
    if (*left > RULE_CAP)
        *left = RULE_CAP;
    if (*right > RULE_CAP)
        *right = RULE_CAP;
}

int64_t clattn_rule_span(const clattn_attention_desc *d, int64_t n_q, int64_t n_kv)
{
    int64_t wl, wr;
    clattn_rule_window(d, &wl, &wr);
    /* rows i and i + 1 have diagonals a and a + 1: together, [a_0 − left, a_{n_q−1} +
     * right] (causal masks keep j ≤ a_i, so right ≤ 0 there) */
    if (d->mask == CLATTN_MASK_CAUSAL_TOP_LEFT || d->mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT)
        wr = 0;
    if (wl < 0 || wr < 0 || n_q >= n_kv)
        return n_kv;
    const int64_t span = wl + wr + n_q; /* (each bound capped at 2^60: no overflow) */
    return span < n_kv ? span : n_kv;
}

clattn_row_rule clattn_rule(const clattn_attention_desc *d, int64_t b, int64_t i, int64_t n_q,
                            int64_t n_kv)
{
    clattn_row_rule r;
    const int64_t nq_b = d->q_lens ? d->q_lens[b] : n_q;
    const int64_t nkv_b = d->kv_lens ? d->kv_lens[b] : n_kv;
    r.valid = i < nq_b;
    r.diag = i + d->q_start - d->kv_start +
             (d->mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT ? nkv_b - nq_b : 0);
    r.lo = 0;
    r.hi = nkv_b;
    if ((d->mask == CLATTN_MASK_CAUSAL_TOP_LEFT || d->mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT) &&
        r.diag + 1 < r.hi)
        r.hi = r.diag + 1;
    int64_t wl, wr;
    clattn_rule_window(d, &wl, &wr);
    if (wr >= 0 && r.diag + wr + 1 < r.hi)
        r.hi = r.diag + wr + 1;
    if (wl >= 0 && r.diag - wl > r.lo)
        r.lo = r.diag - wl;
    if (!r.valid)
        r.lo = r.hi = 0;
    if (r.lo > nkv_b) /* within [0, n_kv_b], as in the kernels */
        r.lo = nkv_b;
    if (r.hi < r.lo)
        r.hi = r.lo;
    r.self = d->mask == CLATTN_MASK_NO_SELF ? r.diag : -1;
    return r;
}

clattn_status clattn_visible_keys(const clattn_attention_desc *desc, int64_t n_q, int64_t n_kv,
                                  int64_t b, int64_t i, clattn_key_range *out)
{
    clattn_clear_error(NULL);
    if (!desc || !out)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "%s is NULL",
                           !desc ? "desc" : "out");
    clattn_status st = clattn_check_desc(NULL, desc);
    if (st != CLATTN_SUCCESS)
        return st;
    const int64_t pos_max = (int64_t)1 << 53; /* as q_start, kv_start and the calls' sizes */
    if (n_q < 0 || n_kv < 0 || n_q >= pos_max || n_kv >= pos_max || b < 0 || i < 0 || i >= n_q)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT,
                           "n_q %lld, n_kv %lld, b %lld, i %lld: need 0 <= i < n_q, b >= 0",
                           (long long)n_q, (long long)n_kv, (long long)b, (long long)i);
    if (desc->kv_lens_buffer || desc->q_lens_buffer)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT,
                           "the lengths are in a cl_mem (kv_lens_buffer / q_lens_buffer): pass "
                           "them as host arrays to ask which keys a row sees");
    if (desc->kv_lens && (desc->kv_lens[b] < 0 || desc->kv_lens[b] > n_kv))
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT,
                           "kv_lens[%lld] is %d; it must be within 0..n_kv (%lld)", (long long)b,
                           (int)desc->kv_lens[b], (long long)n_kv);
    if (desc->q_lens && (desc->q_lens[b] < 0 || desc->q_lens[b] > n_q))
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT,
                           "q_lens[%lld] is %d; it must be within 0..n_q (%lld)", (long long)b,
                           (int)desc->q_lens[b], (long long)n_q);
    *out = clattn_rule(desc, b, i, n_q, n_kv);
    return CLATTN_SUCCESS;
}
