/* split_merge.cl — the second kernel of split-KV decoding (decode_gpu.cl): each output
 * element from the splits' partial results,
 *     M = max_s LSE_s,  w_s = exp(LSE_s − M),  O = Σ_s w_s · O_s / Σ_s w_s,
 *     LSE = M + log Σ_s w_s  (plus the row's ALiBi constant),
 * the merge of clattn_merge (merge.cl) done in one pass over all splits. Splits whose
 * LSE is −∞ (no visible key there) add nothing, whatever their O; a row with none
 * anywhere is an empty row (zeros, NaN with masked_nan, zeros for padding rows; LSE
 * −∞). A sink (the desc's sinks) joins as one more part, of LSE = the sink and O = 0
 * (rows.cl fold_sink), so the splits run without it. A NaN LSE makes the row NaN. NDRange (d_v, n_q, batch·h_q), one element per
 * work-item; the column-0 work-item writes the LSE.
 */
#ifndef D_V
#define D_V 64
#endif

__kernel void clattn_split_merge(__global const float *part_o, __global const float *part_lse,
                                 int n_splits, __global ELEM_T(O_DT) *o, long o_off, long4 o_st,
                                 __global lse_t *lse, long lse_off, long4 lse_st, int h_q,
                                 long n_q, long n_kv, int masked_nan, __global const float *alibi,
                                 RULE_PARAMS, __global const float *sinks, ROW0_PARAMS)
{
    const int c = get_global_id(0);
    const long i = get_global_id(1), bh = get_global_id(2);
    const long b = bh / h_q, h = bh % h_q, row = bh * n_q + i;
    if (VARLEN && row_padding(q_lens, b, i))
        return; /* a packed batch: another sequence's row (no barriers here) */
    VARLEN_SHIFT(o_off, o_st, q_row0[b]);
    VARLEN_SHIFT(lse_off, lse_st, q_row0[b]);
    const int lse_relative = 0; /* (STORE_LSE) the weights pass does not split */
    __global const float *pl = part_lse + row * n_splits;
    const row_rule rule = rule_at(RULE_ARGS, b, i, n_q, n_kv);
    const float slope = ALIBI ? alibi[h] : 0.0f;
    const long ref = ALIBI ? alibi_ref(rule) : 0;
    float mx = -INFINITY;
    for (int s = 0; s < n_splits; s++)
        mx = max_nan(mx, pl[s]);
    float sum = 0.0f, acc = 0.0f;
    if (mx != -INFINITY)
        for (int s = 0; s < n_splits; s++) {
            if (pl[s] == -INFINITY)
                continue;
            const float w = exp(pl[s] - mx);
            sum += w;
            acc = fma(w, part_o[(row * n_splits + s) * D_V + c], acc);
        }
    /* the sink (rows.cl fold_sink): one more part, of O = 0 */
    acc *= fold_sink(sinks, h, q_lens, b, i, &mx, &sum, slope, ref);
    const bool empty = mx == -INFINITY;
    const float fill = masked_nan && !row_padding(q_lens, b, i) ? NAN : 0.0f;
    ST(O_DT, o, view_at(o_off, o_st, b, h, i, c), empty ? fill : acc / sum);
    if (c == 0)
        STORE_LSE(empty, mx, sum, -INFINITY, slope, ref); /* (not relative: no max column) */
}
