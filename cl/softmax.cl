/* softmax.cl — W = softmax over each row, subtracting the true row max.
 *
 * Reference loop, per row x of width n:
 *     m = max_j x[j] (NaN wins);  if m == -inf: W = 0 (no visible key; NaN on request)
 *     else W[j] = exp(x[j] - m) / sum_j exp(x[j] - m),  LSE = m + log(sum_j exp(x[j] - m))
 * Index map: NDRange (WG, rows, batch·heads), work-group (WG, 1, 1) with WG any size
 * the kernel allows (chosen by the host); work-item t handles the same elements in
 * all three passes, so x and y may be the same view (in place).
 */

/* Reduces v over the work-group with op (any work-group size, not only powers of
 * two): first fold [s, wg) onto [0, wg - s) for the largest power of two s < wg,
 * then halve. */
#define WG_REDUCE(red, v, op)                                                          \
    do {                                                                               \
        const int lid_ = get_local_id(0), wg_ = get_local_size(0);                     \
        red[lid_] = (v);                                                               \
        barrier(CLK_LOCAL_MEM_FENCE); /* every partial stored before folding */        \
        int s_ = 1;                                                                    \
        while (2 * s_ < wg_)                                                           \
            s_ *= 2;                                                                   \
        for (; s_ > 0; s_ >>= 1) {                                                     \
            if (lid_ < s_ && lid_ + s_ < wg_)                                          \
                red[lid_] = op(red[lid_], red[lid_ + s_]);                             \
            barrier(CLK_LOCAL_MEM_FENCE); /* this level done before the next reads */ \
        }                                                                              \
        (v) = red[0];                                                                  \
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone read red[0] before it is reused */   \
    } while (0)

#define ADD(a, b) ((a) + (b))

__kernel void clattn_softmax(__global const float *x, long x_off, long4 x_st,
                             __global float *y, long y_off, long4 y_st,
                             __global lse_t *lse, long lse_off, long4 lse_st,
                             int heads, long width, long n_q, int masked_nan, int sparse,
                             __global const float *alibi, RULE_PARAMS,
                             __global const float *sinks, DROPOUT_PARAMS, __local float *red)
{
    const int lid = get_local_id(0), wg = get_local_size(0);
    const long r = get_global_id(1), bh = get_global_id(2);
    const long b = bh / heads, h = bh % heads;
    /* Entries outside the row's visible keys [lo, hi) (lengths, causal, window: −∞ in x)
     * are not read and their weights are written as zeros. For plain rows (the public
     * softmax stage) the rule is empty: [0, width). */
    const row_rule rr = rule_at(RULE_ARGS, b, r, n_q, width);
    const long lo = rr.lo, hi = rr.hi;
    const long xrow = view_at(x_off, x_st, b, h, r, lo), yrow = view_at(y_off, y_st, b, h, r, lo);
    const long yrow0 = view_at(y_off, y_st, b, h, r, 0);
    /* Dense rows go 16 at a time: work-item t owns chunks t, t+WG, … of 16 elements, and
     * the tail past the last whole chunk element by element, in every pass alike. */
    const bool dense = x_st.s3 == 1 && y_st.s3 == 1;
    const long n = hi - lo, n16 = dense ? n / 16 : 0;
    /* sparse (the pipeline's workspace): the weighted sum reads only [lo, hi), so the
     * zeros outside are not written */
    for (long j = lid; j < lo && !sparse; j += wg)
        y[yrow0 + j * y_st.s3] = 0.0f;
    for (long j = hi + lid; j < width && !sparse; j += wg)
        y[yrow0 + j * y_st.s3] = 0.0f;

    float16 m16 = (float16)(-INFINITY);
    for (long c = lid; c < n16; c += wg)
        m16 = max_nan16(m16, vload16(c, x + xrow));
    float m = hmax_nan(m16);
    for (long j = 16 * n16 + lid; j < n; j += wg)
        m = max_nan(m, x[xrow + j * x_st.s3]);
    WG_REDUCE(red, m, max_nan);
    /* the sink (rows.cl fold_sink): one more key of value zero, in l and the LSE */
    float l_sink = 0.0f;
    const float slope = alibi ? alibi[h] : 0.0f;
    const long ref = alibi ? alibi_ref(rr) : 0;
    fold_sink(sinks, h, q_lens, b, r, &m, &l_sink, slope, ref);

    if (m == -INFINITY) { /* every key masked: zeros (NaN if asked, not for padding rows) */
        const float fill = masked_nan && !row_padding(q_lens, b, r) ? NAN : 0.0f;
        for (long j = lid; j < width; j += wg)
            if (fill != 0.0f || (j >= lo && j < hi))
                y[yrow0 + j * y_st.s3] = fill;
        if (lse && lid == 0)
            lse[view_at(lse_off, lse_st, b, h, r, 0)] = (lse_t)(-INFINITY);
        return;
    }
    float16 l16 = 0.0f;
    for (long c = lid; c < n16; c += wg)
        l16 += exp(vload16(c, x + xrow) - m);
    float l = hsum(l16);
    for (long j = 16 * n16 + lid; j < n; j += wg)
        l += exp(x[xrow + j * x_st.s3] - m);
    WG_REDUCE(red, l, ADD);
    l += l_sink;
    /* relative ALiBi scores (alibi set: common.cl alibi_ref): the row's constant back */
    if (lse && lid == 0)
        lse[view_at(lse_off, lse_st, b, h, r, 0)] = LSE_ABS(m + log(l), slope, ref);

    /* DROPOUT (dropout.cl): each weight times its factor (l and the LSE are before it) */
    for (long c = lid; c < n16; c += wg)
        vstore16(exp(vload16(c, x + xrow) - m) / l *
                     (DROPOUT ? dropout16_keys(DROPOUT_ARGS, bh, r, lo + 16 * c) : 1.0f),
                 c, y + yrow);
    for (long j = 16 * n16 + lid; j < n; j += wg)
        y[yrow + j * y_st.s3] = exp(x[xrow + j * x_st.s3] - m) / l *
                                (DROPOUT ? dropout1(DROPOUT_ARGS, bh, r, lo + j) : 1.0f);
}
