/* weights_from_lse.cl — the attention weights from the scores and the LSE, in place:
 * the fused algorithm's second pass when weights are requested.
 *
 * Reference loop, per (b, h, i, j), from the fused kernel's row max m and log-sum l of
 * the relative scores (kept apart: S − m stays exact for large logits, as in softmax):
 *     W[i][j] = m[i] == -inf ? fill : exp((S[i][j] - m[i]) - l[i])    (S = -inf → 0)
 * fill is 0, or NaN for a fully masked row with masked_rows = NaN (never for padding
 * rows past q_lens[b]). NaN scores give NaN weights in their own row (LSE is NaN).
 * DROPOUT: W times the weight's dropout factor (dropout.cl), as the fused kernel used it.
 * Index map: NDRange (n_kv, n_q, batch·heads), one element per work-item; no local
 * memory, no barriers.
 */
__kernel void clattn_weights_from_lse(__global float *w, long w_off, long4 w_st,
                                      __global const lse_t *lse, long lse_off, long4 lse_st,
                                      int heads, int masked_nan, __global lse_t *lse_out,
                                      long lo_off, long4 lo_st, __global const float *alibi,
                                      long n_q, long n_kv, RULE_PARAMS, DROPOUT_PARAMS)
{
    const long j = get_global_id(0), i = get_global_id(1), bh = get_global_id(2);
    const long b = bh / heads, h = bh % heads;
    const long at = view_at(w_off, w_st, b, h, i, j);
    /* lse holds the fused kernel's LSE of the relative scores (see common.cl
     * alibi_ref); the caller's LSE, if asked for, gets the row's constant back */
    const long la = view_at(lse_off, lse_st, b, h, i, 0);
    const float m = (float)lse[la], l = (float)lse[la + lse_st.s3];
    if (lse_out && j == 0)
        lse_out[view_at(lo_off, lo_st, b, h, i, 0)] =
            m == -INFINITY ? (lse_t)(-INFINITY)
                           : (lse_t)m + (lse_t)l -
                                 (alibi ? (lse_t)alibi[h] *
                                              (lse_t)alibi_ref(rule_at(RULE_ARGS, b, i, n_q, n_kv))
                                        : (lse_t)0.0f);
    if (m == -INFINITY)
        w[at] = masked_nan && !row_padding(q_lens, b, i) ? NAN : 0.0f;
    else
        w[at] = exp((w[at] - m) - l) * (DROPOUT ? dropout1(DROPOUT_ARGS, bh, i, j) : 1.0f);
}
