/* bwd_dq_sum.cl — the backward pass's dQ where bwd_dkdv.cl forms it (its RK > 1 kernel:
 * the CPU form). bwd_dkdv's work-groups walk the key blocks of one split each, adding
 * dS·K into that split's float32 partial dQ (rows of DKP floats, the row order of
 * bwd_prep's workspace); this kernel sums the splits' partials, split 0 first, and stores
 * dQ in its type and view. A work-item per (row, batch entry · head); no atomics, so the
 * bits depend only on the number of splits (host/tuning.c clattn_backward_dq_splits). */
#ifndef D_K
#define D_K 64
#endif
#define DKP PAD16(D_K > 0 ? D_K : 1)

__kernel void clattn_bwd_dq_sum(__global const float *part, int splits,
                                __global ELEM_T(DQ_DT) *dq, long dq_off, long4 dq_st, int h_q,
                                long n_q)
{
    const long i = get_global_id(0), bh = get_global_id(1);
    const long b = bh / h_q, h = bh % h_q, n_rows = get_global_size(1) * n_q;
    const long row = bh * n_q + i;
    for (int c = 0; c < D_K; c++) {
        float s = splits > 0 ? part[row * DKP + c] : 0.0f;
        for (int p = 1; p < splits; p++)
            s += part[(p * n_rows + row) * DKP + c];
        ST(DQ_DT, dq, view_at(dq_off, dq_st, b, h, i, c), s);
    }
}
