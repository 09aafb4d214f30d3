/* common.cl — helpers shared by every clattn kernel; prepended to each kernel file.
 *
 * Tensor arguments come as (pointer, offset, strides): element (b, h, s, d) of a
 * [batch, heads, seq, dim] view lives at offset + b*st.s0 + h*st.s1 + s*st.s2 + d*st.s3,
 * in elements. All index arithmetic is in 64-bit `long`.
 */

/* Built-in masks; the values equal the public enum clattn_mask. */
#define MASK_NONE 0
#define MASK_CAUSAL_TOP_LEFT 1
#define MASK_CAUSAL_BOTTOM_RIGHT 2
#define MASK_NO_SELF 3

/* Whether key j is visible to query i (same rule as host/internal.h). */
bool key_visible(int mask, long i, long j, long n_q, long n_kv)
{
    if (mask == MASK_CAUSAL_TOP_LEFT)
        return j <= i;
    if (mask == MASK_CAUSAL_BOTTOM_RIGHT)
        return j <= i + n_kv - n_q;
    if (mask == MASK_NO_SELF)
        return j != i;
    return true;
}

/* One past the last key any query in [i_first, i_last] can see: the causal masks
 * make every key tile from here on fully masked, so kernels stop there. */
long visible_key_end(int mask, long i_last, long n_q, long n_kv)
{
    long end = n_kv;
    if (mask == MASK_CAUSAL_TOP_LEFT)
        end = i_last + 1;
    else if (mask == MASK_CAUSAL_BOTTOM_RIGHT)
        end = i_last + n_kv - n_q + 1;
    return clamp(end, 0L, n_kv);
}

/* max that propagates NaN (fmax would drop it and yield finite garbage). */
float max_nan(float a, float b)
{
    return (a > b || isnan(a)) ? a : b;
}

/* Element offset of row s, column d of head (b, h) of a view. */
long view_at(long off, long4 st, long b, long h, long s, long d)
{
    return off + b * st.s0 + h * st.s1 + s * st.s2 + d * st.s3;
}
