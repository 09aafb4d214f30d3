/* merge.cl — combine partial attention results over disjoint key ranges (split-KV,
 * several devices, ring attention) into the exact result over all the keys.
 *
 * Reference, per row (b, h, i), over the parts p:
 *     LSE = log sum_p exp(LSE_p),   O = sum_p exp(LSE_p - LSE) · O_p
 * computed as a running pairwise merge in a float32 workspace (acc, acc_lse), one
 * launch per part, then a store:
 *     mode MERGE_FIRST (0):  acc = O_0, acc_lse = LSE_0
 *     mode MERGE_NEXT (1), part p: M = max(acc_lse, LSE_p); a = exp(acc_lse - M), c = exp(LSE_p - M)
 *                           acc = (a·acc + c·O_p) / (a + c); acc_lse = M + log(a + c)
 *     mode MERGE_FINISH (2):   O = acc (zeros where acc_lse = -inf), LSE = acc_lse
 * Parts with LSE_p = -inf (no visible key) are skipped, so their O rows (zeros or NaN)
 * never enter the sum.
 * Index map: NDRange (batch·heads·n_q), one row per work-item, a loop over d_v.
 * V_DT is the part's storage type, O_DT the output's.
 */
/* the steps, as launch.c numbers them */
#define MERGE_FIRST 0
#define MERGE_NEXT 1
#define MERGE_FINISH 2

/* PL_DT: the storage type of this part's LSE (0 float32, 4 float64); the running LSE
 * and the output LSE are lse_t (common.cl), float64 whenever any LSE of the merge is.
 * The weights of the pairwise merge come from LSE differences taken in that precision. */
#ifndef PL_DT
#define PL_DT 0
#endif
#ifndef OL_DT
#define OL_DT 0 /* the output LSE's storage type (0 float32, 4 float64) */
#endif
#if OL_DT == 4
typedef double ol_t;
#else
typedef float ol_t;
#endif
#if PL_DT == 4
typedef double pl_t;
#else
typedef float pl_t;
#endif

/* max with NaN winning, in the LSE's precision */
lse_t lse_max_nan(lse_t a, lse_t b)
{
    return isnan(a) ? a : isnan(b) ? b : fmax(a, b);
}

__kernel void clattn_merge(__global float *acc, __global lse_t *acc_lse, long d_v, int heads,
                           long n_q, __global const ELEM_T(V_DT) *po, long po_off, long4 po_st,
                           __global const pl_t *pl, long pl_off, long4 pl_st,
                           __global ELEM_T(O_DT) *o, long o_off, long4 o_st,
                           __global ol_t *lse, long lse_off, long4 lse_st, int mode)
{
    const long row = get_global_id(0);
    const long i = row % n_q, bh = row / n_q, b = bh / heads, h = bh % heads;
    __global float *a = acc + row * d_v;
    if (mode == MERGE_FINISH) {
        const lse_t l = acc_lse[row];
        for (long c = 0; c < d_v; c++)
            ST(O_DT, o, view_at(o_off, o_st, b, h, i, c), l == -INFINITY ? 0.0f : a[c]);
        if (lse)
            lse[view_at(lse_off, lse_st, b, h, i, 0)] = (ol_t)l;
        return;
    }
    const lse_t lp = (lse_t)pl[view_at(pl_off, pl_st, b, h, i, 0)];
    const lse_t la = mode == MERGE_FIRST ? (lse_t)(-INFINITY) : acc_lse[row];
    if (mode == MERGE_FIRST || la == -INFINITY) { /* nothing merged yet: take the part as it is */
        acc_lse[row] = lp;
        for (long c = 0; c < d_v; c++)
            a[c] = lp == -INFINITY ? 0.0f : LD(V_DT, po, view_at(po_off, po_st, b, h, i, c));
        return;
    }
    if (lp == -INFINITY)
        return; /* this part saw no key of the row */
    const lse_t mx = lse_max_nan(la, lp);
    const float ca = exp((float)(la - mx)), cp = exp((float)(lp - mx)), den = ca + cp;
    for (long c = 0; c < d_v; c++)
        a[c] = (ca * a[c] + cp * LD(V_DT, po, view_at(po_off, po_st, b, h, i, c))) / den;
    acc_lse[row] = mx + (lse_t)log(den);
}
