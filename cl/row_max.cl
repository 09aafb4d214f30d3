/* row_max.cl — each query row's largest logit (the desc's max_logits; QK-clip's "max
 * logit"), from the three columns the fused kernel wrote with lse_relative (rows.cl
 * STORE_LSE): the row max m and log-sum l of its relative scores (the sink folded in)
 * and mx, the max of the relative scores alone. Per (b, h, i):
 *     max_logits[b, h, i] = mx == −∞ ? −∞ : mx − slope·ref
 * (the row's ALiBi constant back, common.cl alibi_ref: 0 under ALIBI_ABSOLUTE), −∞ for
 * a row with no visible key and for padding rows; and, when lse_out is set (no other
 * second pass writes the caller's LSE), the caller's LSE as weights_from_lse.cl writes
 * it: m == −∞ ? −∞ : m + l − slope·ref. No reduction here: the fused kernel took the
 * max as its online softmax did (NaN wins).
 * Index map: NDRange (n_q, batch·heads), one row per work-item; no local memory.
 */
__kernel void clattn_row_max(__global const lse_t *lse, long lse_off, long4 lse_st,
                             __global lse_t *lse_out, long lo_off, long4 lo_st,
                             __global float *mlog, long ml_off, long4 ml_st, int heads,
                             __global const float *alibi, long n_q, long n_kv, RULE_PARAMS)
{
    const long i = get_global_id(0), bh = get_global_id(1);
    if (i >= n_q)
        return;
    const long b = bh / heads, h = bh % heads;
    const long la = view_at(lse_off, lse_st, b, h, i, 0);
    const lse_t m = lse[la], mx = lse[la + 2 * lse_st.s3];
    const lse_t c0 = alibi ? (lse_t)alibi[h] *
                                    (lse_t)alibi_ref(rule_at(RULE_ARGS, b, i, n_q, n_kv))
                              : (lse_t)0.0f;
    if (lse_out)
        lse_out[view_at(lo_off, lo_st, b, h, i, 0)] =
            m == -INFINITY ? (lse_t)(-INFINITY) : m + lse[la + lse_st.s3] - c0;
    mlog[view_at(ml_off, ml_st, b, h, i, 0)] = mx == -INFINITY ? -INFINITY : (float)(mx - c0);
}
