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

/* NaN-propagating max of float16 vectors, and horizontal max / sum of one. */
float16 max_nan16(float16 a, float16 b)
{
    return select(b, a, isgreater(a, b) | isnan(a));
}

float hmax_nan(float16 v)
{
    float8 a = select(v.hi, v.lo, isgreater(v.lo, v.hi) | isnan(v.lo));
    float4 b = select(a.hi, a.lo, isgreater(a.lo, a.hi) | isnan(a.lo));
    float2 c = select(b.hi, b.lo, isgreater(b.lo, b.hi) | isnan(b.lo));
    return max_nan(c.x, c.y);
}

float hsum(float16 v)
{
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
    float2 c = b.lo + b.hi;
    return c.x + c.y;
}

/* Element offset of row s, column d of head (b, h) of a view. */
long view_at(long off, long4 st, long b, long h, long s, long d)
{
    return off + b * st.s0 + h * st.s1 + s * st.s2 + d * st.s3;
}

/* Elements c0 … c0+15 of a row starting at src[base] with stride st3 along d, zeros
 * past d. */
float16 load_row16(__global const float *src, long base, long st3, int c0, int d)
{
    if (st3 == 1 && c0 + 16 <= d)
        return vload16(0, src + base + c0);
    float t[16];
    for (int c = 0; c < 16; c++)
        t[c] = c0 + c < d ? src[base + (c0 + c) * st3] : 0.0f;
    return vload16(0, t);
}

/* acc[r][a] += p[r][jj] · V[jj] (vector a) for every key jj of a staged V tile, for the
 * RQ rows of a work-item; keys of weight exactly 0 contribute nothing, even NaN or inf
 * values. A macro, so each kernel file's RQ, N_AV, TILE_KV and D_V_PAD apply; the
 * pragmas keep the register blocks in registers (see fused.cl). */
#define ACCUMULATE_PV(acc, p, v_tile)                                                    \
    for (int jj_ = 0; jj_ < TILE_KV; jj_++)                                              \
        _Pragma("unroll") for (int a_ = 0; a_ < N_AV; a_++)                              \
        {                                                                                \
            const float16 vv_ = vload16(a_, (v_tile) + jj_ * D_V_PAD);                   \
            _Pragma("unroll") for (int r_ = 0; r_ < RQ; r_++) if ((p)[r_][jj_] != 0.0f)  \
                (acc)[r_][a_] = fma((float16)((p)[r_][jj_]), vv_, (acc)[r_][a_]);        \
        }

/* d rounded up to whole float16 vectors */
#define PAD16(d) (((d) + 15) / 16 * 16)

/* Stages rows [j0, j0 + tile) of head (b, h) of a view into local memory: transposed,
 * dst[c·tile + jj] (K for the scores), or row-major with rows padded to d_pad,
 * dst[jj·d_pad + c] (V for the weighted sum). Rows past n and columns past d are
 * zeros. Work-item t copies rows t, t + wg, …; rows dense along d move as float16
 * vectors. Callers pass compile-time constants for d, d_pad, tile, wg and transpose,
 * so the compiler specialises this after inlining. */
void stage_rows(__global const float *src, long off, long4 st, long b, long h, long j0, long n,
                int d, int d_pad, int tile, int wg, bool transpose, __local float *dst)
{
    for (int jj = get_local_id(0); jj < tile; jj += wg) {
        const long j = j0 + jj;
        const bool in = j < n;
        const long base = view_at(off, st, b, h, in ? j : 0, 0);
        int c = 0;
        if (in && st.s3 == 1) {
            for (; c + 16 <= d; c += 16) {
                const float16 r = vload16(0, src + base + c);
                if (transpose) {
                    __local float *t = dst + c * tile + jj;
                    t[0] = r.s0, t[tile] = r.s1, t[2 * tile] = r.s2, t[3 * tile] = r.s3;
                    t[4 * tile] = r.s4, t[5 * tile] = r.s5, t[6 * tile] = r.s6;
                    t[7 * tile] = r.s7, t[8 * tile] = r.s8, t[9 * tile] = r.s9;
                    t[10 * tile] = r.sa, t[11 * tile] = r.sb, t[12 * tile] = r.sc;
                    t[13 * tile] = r.sd, t[14 * tile] = r.se, t[15 * tile] = r.sf;
                } else {
                    vstore16(r, 0, dst + jj * d_pad + c);
                }
            }
        }
        for (; c < d_pad; c++) {
            const float x = (in && c < d) ? src[base + c * st.s3] : 0.0f;
            if (!transpose)
                dst[jj * d_pad + c] = x;
            else if (c < d)
                dst[c * tile + jj] = x;
        }
    }
}
