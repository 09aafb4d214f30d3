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

/* ---- storage types (compile-time per tensor: -DQ_DT=1 …; values = clattn_dtype) ----
 * ELEM_T(dt) is the pointer element type; LD/ST read and write one element as float;
 * LD16 reads 16 contiguous elements as a float16. Arithmetic is always float. */
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2
#ifndef Q_DT
#define Q_DT 0
#endif
#ifndef K_DT
#define K_DT 0
#endif
#ifndef V_DT
#define V_DT 0
#endif
#ifndef O_DT
#define O_DT 0
#endif
/* the backward pass's dO, dQ, dK and dV (bwd_*.cl) */
#ifndef DO_DT
#define DO_DT 0
#endif
#ifndef DQ_DT
#define DQ_DT 0
#endif
#ifndef DK_DT
#define DK_DT 0
#endif
#ifndef DV_DT
#define DV_DT 0
#endif
/* A helper's variant for a storage type: TYPED(load_row16, K_DT)(…) calls load_row16_0,
 * _1 or _2 (no variadic macros: NVIDIA's OpenCL C 1.2 compiler refuses them). */
#define TYPED(fn, dt) TYPED_(fn, dt)
#define TYPED_(fn, dt) fn##_##dt
#define ELEM_T(dt) ELEM_T_(dt)
#define ELEM_T_(dt) ELEM_T_##dt
#define ELEM_T_0 float
#define ELEM_T_1 half
#define ELEM_T_2 ushort
#define ELEM_T_5 char /* int8 K/V (a quantized cache): the stored integer; the kernels
                       * multiply by the row's scale (K_SCALED, V_SCALED below) */
#define ELEM_T_6 uchar /* FP8 E4M3 K/V (OCP e4m3fn), decoded by fp8_16 below */
#define LD(dt, p, i) LD_(dt, p, i)
#define LD_(dt, p, i) LD_##dt(p, i)
#define LD_0(p, i) ((p)[i])
#define LD_1(p, i) vload_half((i), (p))
#define LD_2(p, i) as_float(((uint)(p)[i]) << 16)
#define LD_5(p, i) ((float)(p)[i])
#define LD_6(p, i) fp8_16((uchar16)((p)[i])).s0
#define LD16(dt, p, i) LD16_(dt, p, i)
#define LD16_(dt, p, i) LD16_##dt(p, i)
#define LD16_0(p, i) vload16(0, (p) + (i))
#define LD16_1(p, i) vload_half16(0, (p) + (i))
#define LD16_2(p, i) as_float16(convert_uint16(vload16(0, (p) + (i))) << 16)
#define LD16_5(p, i) convert_float16(vload16(0, (p) + (i)))
#define LD16_6(p, i) fp8_16(vload16(0, (p) + (i)))
#define LD8_0(p, i) vload8(0, (p) + (i))
#define LD8_1(p, i) vload_half8(0, (p) + (i))
#define LD8_2(p, i) as_float8(convert_uint8(vload8(0, (p) + (i))) << 16)
#define LD8_5(p, i) convert_float8(vload8(0, (p) + (i)))
#define LD8_6(p, i) fp8_16((uchar16)(vload8(0, (p) + (i)), (uchar8)(0))).lo
#define ST(dt, p, i, x) ST_(dt, p, i, x)
#define ST_(dt, p, i, x) ST_##dt(p, i, x)
#define ST_0(p, i, x) ((p)[i] = (x))
#define ST_1(p, i, x) vstore_half_rte((x), (i), (p))
#define ST_2(p, i, x) ((p)[i] = f32_to_bf16(x))

/* The LSE's storage type (-DLSE_DT=4: float64, which needs cl_khr_fp64; the host asks
 * for it only on such devices). Arithmetic stays float32; only the row's ALiBi constant
 * −slope·ref is added in the LSE's own precision, so a float64 LSE keeps the digits a
 * merge of far key blocks needs (case R17). */
#ifndef LSE_DT
#define LSE_DT 0
#endif
#if LSE_DT == 4
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double lse_t;
#else
typedef float lse_t;
#endif
/* a row's LSE from its value relative to the ALiBi reference and the constant's parts */
#define LSE_ABS(rel, slope, ref) ((lse_t)(rel) - (lse_t)(slope) * (lse_t)(ref))

/* float → bfloat16, nearest with ties to even; NaN stays a (quiet) NaN */
ushort f32_to_bf16(float x)
{
    const uint u = as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((u >> 16) | 0x40u);
    return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* FP8 E4M3 (OCP e4m3fn: sign, 4 exponent bits of bias 7, 3 mantissa bits; no
 * infinities, S.1111.111 is NaN) to float, 16 at a time (host twin: clattn_fp8e4m3_to_f32):
 * normal values rebuild the float's bits (exponent + 120, mantissa shifted to the top),
 * subnormals are m·2⁻⁹. */
float16 fp8_16(uchar16 x)
{
    const uint16 u = convert_uint16(x);
    const uint16 e = (u >> 3) & 15u, m = u & 7u, sign = (u & 0x80u) << 24;
    const float16 normal = as_float16(sign | ((e + 120u) << 23) | (m << 20));
    const float16 sub = as_float16(sign | as_uint16(convert_float16(m) * 0x1p-9f));
    const float16 v = select(normal, sub, convert_int16(e == 0u));
    return select(v, (float16)(NAN), convert_int16((u & 0x7fu) == 0x7fu));
}

/* ---- which keys a query row sees (same rule as host/internal.h clattn_rule) ----
 * Query i of batch entry b sits at the diagonal key a_i = i + shift (+ n_kv_b − n_q_b for
 * the bottom-right causal mask), shift = q_start − kv_start. Visible keys are
 * lo ≤ j < hi (key padding, causal, window) and j ≠ self (NO_SELF); rows past the
 * batch entry's query length see nothing. wl / wr < 0: the window is unbounded on that
 * side. The rule arguments travel together as RULE_PARAMS. */
#define RULE_PARAMS                                                                         \
    int mask, long shift, long wl, long wr, __global const int *q_lens,                    \
        __global const int *kv_lens
#define RULE_ARGS mask, shift, wl, wr, q_lens, kv_lens

typedef struct row_rule {
    long lo, hi, self, diag;
} row_rule;

/* Batch entry b's length from a lengths array (kv_lens or q_lens; n without one),
 * clamped into [0, n]: lengths in a cl_mem are not checked on the host, and a bad one
 * must not send a kernel outside its views (the host checks host arrays). */
long seq_len(__global const int *lens, long b, long n)
{
    return lens ? clamp((long)lens[b], 0L, n) : n;
}

row_rule rule_at(RULE_PARAMS, long b, long i, long n_q, long n_kv)
{
    const long nq_b = seq_len(q_lens, b, n_q);
    const long nkv_b = seq_len(kv_lens, b, n_kv);
    row_rule r;
    r.diag = i + shift + (mask == MASK_CAUSAL_BOTTOM_RIGHT ? nkv_b - nq_b : 0);
    r.lo = 0;
    r.hi = nkv_b;
    if (mask == MASK_CAUSAL_TOP_LEFT || mask == MASK_CAUSAL_BOTTOM_RIGHT)
        r.hi = min(r.hi, r.diag + 1);
    if (wr >= 0)
        r.hi = min(r.hi, r.diag + wr + 1);
    if (wl >= 0)
        r.lo = max(r.lo, r.diag - wl);
    if (i >= nq_b) /* padding row: nothing visible */
        r.lo = r.hi = 0;
    /* within [0, n_kv_b]: kernels read weights and tiles only inside it */
    r.lo = min(r.lo, nkv_b);
    r.hi = clamp(r.hi, r.lo, nkv_b);
    r.self = mask == MASK_NO_SELF ? r.diag : -1;
    return r;
}

/* Tile-relative bounds: x − j0 clamped to [0, n]; and a key index relative to the tile,
 * or −1 when it lies outside [j0, j0 + n). */
int rel_bound(long x, long j0, int n)
{
    return (int)clamp(x - j0, 0L, (long)n);
}

int rel_key(long x, long j0, int n)
{
    return (x >= j0 && x < j0 + n) ? (int)(x - j0) : -1;
}

/* Split-KV decoding (decode.cl with SPLITS, decode_gpu.cl): the keys of chunk `split` of
 * n_splits, within the keys [lo, hi) a work-item's (work-group's) rows see. The span from
 * lo rounded down to a whole step of `step` keys is cut into n_splits chunks of whole
 * steps, ⌈span / n_splits⌉ keys and at least `least` (the host's planned length, plan.c):
 * chunks past the span are empty (lo ≥ hi), and every chunk starts on a step boundary.
 * Nothing visible (lo ≥ hi): every chunk is empty. A sliding window in a long cache
 * splits the window's keys, not the cache's. */
long2 split_range(long lo, long hi, int split, int n_splits, long least, long step)
{
    const long s0 = lo / step * step, span = max(hi - s0, 0L);
    const long c = max(least, (span + n_splits - 1) / n_splits + step - 1) / step * step;
    return (long2)(max(lo, s0 + split * c), min(hi, s0 + split * c + c));
}

/* Whether row i is a padding row (past its batch entry's query length). */
bool row_padding(__global const int *q_lens, long b, long i)
{
    return i >= seq_len(q_lens, b, i + 1); /* (past n_q: not a row) */
}

/* The keys [lo, hi) that any row of [i_first, i_last] may see: lo and hi grow with i, so
 * the first row's lo and the last valid row's hi bound them (key tiles outside are fully
 * masked and skipped). */
long2 group_key_range(RULE_PARAMS, long b, long i_first, long i_last, long n_q, long n_kv)
{
    const long nq_b = seq_len(q_lens, b, n_q);
    i_last = min(i_last, nq_b - 1);
    if (i_last < i_first)
        return (long2)(0, 0);
    const row_rule f = rule_at(RULE_ARGS, b, i_first, n_q, n_kv);
    const row_rule l = rule_at(RULE_ARGS, b, i_last, n_q, n_kv);
    return (long2)(f.lo, max(l.hi, f.lo));
}

/* ---- optional score terms, compile-time: MASK_T 0 none, 1 bool, 2 float additive;
 * ALIBI, SOFTCAP 0/1 ---- */
#ifndef MASK_T
#define MASK_T 0
#endif
#ifndef ALIBI
#define ALIBI 0
#endif
#ifndef SOFTCAP
#define SOFTCAP 0
#endif
/* MODS: the desc's score / mask snippets (clattn_mods.h), spliced in before this file by
 * the host with MOD_SCORE, MOD_MASK and the user buffers' MOD_BUF_PARAMS / MOD_BUF_ARGS
 * (", __global const int *clattn_buf0, …"); mod_pos = (q_start, kv_start). */
#ifndef MODS
#define MODS 0
#define MOD_SCORE 0
#define MOD_MASK 0
#define MOD_BUF_PARAMS
#define MOD_BUF_ARGS
#endif
/* with a score_mod the ALiBi bias is absolute (alibi_ref 0): the snippets' programs know
 * it from MOD_SCORE, the softmax and weights programs from this option (host/mods.c
 * clattn_alibi_absolute) */
#ifndef ALIBI_ABSOLUTE
#define ALIBI_ABSOLUTE MOD_SCORE
#endif
/* any term beyond the scale: the kernels' fast paths for plain tiles check this */
#define SCORE_TERMS (MASK_T || ALIBI || SOFTCAP || MODS)
#if MASK_T == 1
#define MASK_ELEM uchar
#else
#define MASK_ELEM float
#endif
/* BLOCK_MASK: the mask_mod's block flags (clattn_block_mask): bmask[b·st.s0 + h·st.s1 +
 * (i/16)·st.s2 + j/16] is 0 (every key of the 16 × 16 block masked), 1 (mixed) or 2
 * (none masked); a NULL bmask without it */
#ifndef BLOCK_MASK
#define BLOCK_MASK 0
#endif
#define TERM_PARAMS                                                                         \
    __global const MASK_ELEM *mt, long mt_off, long4 mt_st, __global const float *alibi,   \
        float softcap, long2 mod_pos, __global const uchar *bmask, long4 bm_st MOD_BUF_PARAMS
#define TERM_ARGS mt, mt_off, mt_st, alibi, softcap, mod_pos, bmask, bm_st MOD_BUF_ARGS
/* a tile whose only term is mask_mod needs none where the block mask says "full" */
#define ONLY_MASK_MOD (MOD_MASK && !MOD_SCORE && !MASK_T && !ALIBI && !SOFTCAP)

/* The block mask's state of rows [i0, i1] × keys [j0, j1] of (b, h): 0 when every
 * 16 × 16 block they touch is empty, 2 when every one is full, else 1 (and 1 without a
 * block mask: every tile evaluated). Uniform over a work-group that shares the range. */
int block_tile_state(__global const uchar *bmask, long4 st, long b, long h, long i0, long i1,
                     long j0, long j1)
{
#if BLOCK_MASK
    if (i1 < i0 || j1 < j0)
        return 0;
    bool any = false, all = true;
    for (long qb = i0 / 16; qb <= i1 / 16; qb++)
        for (long kb = j0 / 16; kb <= j1 / 16; kb++) {
            const uchar f = bmask[b * st.s0 + h * st.s1 + qb * st.s2 + kb];
            any |= f != 0;
            all &= f == 2;
        }
    return all ? 2 : any ? 1 : 0;
#else
    return 1;
#endif
}

/* Scores of row i of batch entry b, query head h, for 16 keys j = j0 + lane: raw dot
 * products s (already scaled) become score_mod(softcap(s) − slope·|diag − j| + mask), and
 * −∞ where the key is not visible: outside [lim_lo, lim_hi) (tile-relative), equal to
 * `self`, false in a bool mask, −∞ in a float mask, or false in mask_mod (masked keys
 * never read their values into the sum). The snippets see visible keys only. */
/* ALiBi biases are taken relative to the row's nearest visible key: the distance from
 * the diagonal to it (0 when the diagonal is visible). −slope·(|a_i − j| − ref) stays
 * small even when a chunk of keys lies far from the queries (split sequences), so the
 * differences between keys keep their digits; the row's constant −slope·ref goes into
 * the LSE only (softmax does not depend on it). A score_mod, which need not be a shift,
 * sees the absolute bias: ref 0 (host/reference.c likewise). */
long alibi_ref(row_rule r)
{
    if (ALIBI_ABSOLUTE || r.hi <= r.lo) /* a score_mod sees the absolute bias */
        return 0;
    if (r.diag < r.lo)
        return r.lo - r.diag;
    if (r.diag >= r.hi)
        return r.diag - (r.hi - 1);
    return 0;
}

float16 score_terms16(float16 s, int16 key, int lim_lo, int lim_hi, int self, long j0,
                      long n_kv, TERM_PARAMS, long mbase, long diag, float slope, long ref,
                      long b, long h, long i)
{
    int16 vis = (key >= lim_lo) & (key < lim_hi) & (key != self);
#if SOFTCAP
    s = softcap * tanh(s / softcap);
#endif
#if ALIBI
    /* |a_i − j| in 64 bits (positions reach 2^53), then rounded to float once */
    long16 dist = convert_long16(key) + (j0 - diag);
    dist = dist < 0 ? -dist : dist;
    s -= slope * convert_float16(dist - ref);
#endif
#if MASK_T
    MASK_ELEM m[16];
    for (int t = 0; t < 16; t++) {
        const int kt = key.s0 + t; /* keys are consecutive: lane t is key.s0 + t */
        m[t] = 0;
        if (j0 + kt < n_kv && kt >= lim_lo && kt < lim_hi)
            m[t] = mt[mbase + (j0 + kt) * mt_st.s3];
    }
#if MASK_T == 1
    vis &= convert_int16(vload16(0, m)) != 0;
#else
    const float16 mv = vload16(0, m);
    vis &= mv != (float16)(-INFINITY);
    s += mv;
#endif
#endif
#if MODS
    float sa[16];
    int va[16];
    vstore16(s, 0, sa);
    vstore16(vis, 0, va);
    /* the block mask's flag of these 16 keys (when they are one block, and some key is
     * visible: then row i and key jb lie inside the mask): 0 all masked by mask_mod, 2
     * none, 1 mixed (evaluate it) */
    const long jb = j0 + key.s0;
    const uchar bf = BLOCK_MASK && jb % 16 == 0 && any(vis)
                         ? bmask[b * bm_st.s0 + h * bm_st.s1 + (i / 16) * bm_st.s2 + jb / 16]
                         : 1;
    for (int t = 0; t < 16; t++) {
        const long j = j0 + key.s0 + t; /* keys are consecutive */
        if (!va[t] || j >= n_kv)
            continue;
#if MOD_SCORE
        sa[t] = clattn_score_mod(sa[t], (int)b, (int)h, mod_pos.x + i, mod_pos.y + j MOD_BUF_ARGS);
#endif
#if MOD_MASK
        if (bf == 0 ||
            (bf == 1 && !clattn_mask_mod((int)b, (int)h, mod_pos.x + i, mod_pos.y + j MOD_BUF_ARGS)))
            va[t] = 0;
#endif
    }
    s = vload16(0, sa);
    vis = vload16(0, va);
#endif
    return select((float16)(-INFINITY), s, vis);
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

/* The online softmax's step to a new running max m_new of a row (Milakov & Gimelshein
 * 2018): its accumulator (n_av float16 vectors) and running sum *l (kept lane-wise, one
 * horizontal sum when the row is stored) times exp(m − m_new); nothing when the max did
 * not change (the factor would be 1). NaN maxima rescale (to NaN). */
void rescale_row(float16 *acc, int n_av, float16 *l, float m, float m_new)
{
    if (m_new == m)
        return;
    const float alpha = exp(m - m_new);
    *l *= alpha;
    for (int a = 0; a < n_av; a++)
        acc[a] *= alpha;
}

/* Element offset of row s, column d of head (b, h) of a view. */
long view_at(long off, long4 st, long b, long h, long s, long d)
{
    return off + b * st.s0 + h * st.s1 + s * st.s2 + d * st.s3;
}

/* ---- paged K/V (-DPAGED=1; the host's twin: clattn_view_index, host/internal.h) ----
 * Key row j of batch entry b is slot j % size of page table[b·stride + j / size] of a
 * pool view (st.s0 strides pages, st.s2 slots). Entries are clamped into [0, count): a
 * bad table on the device reads a wrong page of the pool, never memory outside it.
 * Kernels pass their K/V tables (KV_PAGES) or none (NO_PAGES, Q and dO) to the staging
 * helpers. */
#ifndef PAGED
#define PAGED 0
#endif
#define PAGE_PARAMS                                                                         \
    __global const int *block_table, long bt_stride, long page_size, long num_pages
/* The helpers' paging parameters, appended to their parameter lists (and arguments) only
 * in programs built with -DPAGED=1: a table (NULL: a plain view), its row stride, the
 * page size and the pool's page count. Programs without pages keep the helpers' plain
 * signatures (with four more parameters on stage4, unused, PoCL 3.1 miscompiled
 * decode_gpu.cl for d_v 4: its outputs were zeros). */
#if PAGED
#define PG_PARAMS , __global const int *pg_table, long pg_stride, long pg_size, long pg_count
#define PG_ARGS , pg_table, pg_stride, pg_size, pg_count
#define KV_PAGES , block_table, bt_stride, page_size, num_pages /* a kernel's K/V pages */
#define NO_PAGES , 0, 0, 1, 1                                   /* Q, dO: no pages */
#else
#define PG_PARAMS
#define PG_ARGS
#define KV_PAGES
#define NO_PAGES
#endif

#if PAGED
/* (j / size, j % size): the page (table column) and slot of key row j in pages of `size`
 * keys, by a shift and a mask where size is a power of two (16, 256) and j ≥ 0, else by
 * division. Each decode step takes several: with 64-bit divisions, batch-8 GQA float16
 * decoding at page 256 took 1.15x the contiguous time on a 2-core AVX-512 Xeon (PoCL),
 * with the shift 0.99x (docs/BENCHMARKS.md, 2026-12-05). */
long2 page_slot(long j, long size)
{
    /* ⌊log2(size)⌋ or one more (size ≥ 1): the exponent of (float)size; a power of two
     * where 2^shift is size. (Not (size & (size − 1)) == 0, which LLVM turns into a
     * 64-bit llvm.ctpop that oclgrind cannot run.) */
    const int shift = (as_int((float)size) >> 23) - 127;
    if (size > 0 && j >= 0 && shift >= 0 && shift < 63 && (1L << shift) == size)
        return (long2)(j >> shift, j & (size - 1));
    return (long2)(j / size, j % size);
}
#endif

/* Element offset of element 0 of key row j of head h, batch entry b. */
long kv_row(long off, long4 st, long b, long h, long j PG_PARAMS)
{
#if PAGED
    if (pg_table) {
        const long2 ps = page_slot(j, pg_size);
        const long e = clamp((long)pg_table[b * pg_stride + ps.x], 0L, pg_count - 1);
        return off + e * st.s0 + h * st.s1 + ps.y * st.s2;
    }
#endif
    return view_at(off, st, b, h, j, 0);
}

/* ---- rotary position embeddings (append.cl, rope_q.cl; -DROPE=1, -DROPE_FP64=1 on
 * devices with cl_khr_fp64; the host's twin: reference.c) ----
 * Element c of a row, x_c, with its pair's other element x_o, at position pos: pair p
 * (c and c + dim/2, or 2p and 2p + 1 when interleaved) turns by pos · inv_freq[p]
 * radians; (x₁, x₂) → (x₁·cos − x₂·sin, x₂·cos + x₁·sin). Columns from dim on: x_c. */
#ifndef ROPE_TABLE
#define ROPE_TABLE 0
#endif
#if ROPE
#if ROPE_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
int rope_partner(int c, int dim, int interleaved)
{
    const int hd = dim / 2;
    return c >= dim ? c : interleaved ? (c ^ 1) : (c < hd ? c + hd : c - hd);
}

/* inv_freq: the frequencies [dim/2], or with -DROPE_TABLE=1 the caller's tables
 * [2][rope_len][dim/2] (cos rows, then sin rows; positions clamped into the table) */
float rope_at(float x_c, float x_o, int c, int dim, int interleaved,
              __global const float *inv_freq, long rope_len, long pos)
{
    if (c >= dim)
        return x_c;
    const int hd = dim / 2;
    const int pair = interleaved ? c / 2 : (c < hd ? c : c - hd);
    const bool first = interleaved ? (c % 2 == 0) : (c < hd);
#if ROPE_TABLE
    const long t = clamp(pos, 0L, rope_len - 1);
    const float cs = inv_freq[t * hd + pair], sn = inv_freq[(rope_len + t) * hd + pair];
#elif ROPE_FP64
    const double angle = (double)pos * (double)inv_freq[pair];
    const float cs = (float)cos(angle), sn = (float)sin(angle);
#else
    const float angle = (float)pos * inv_freq[pair];
    const float cs = cos(angle), sn = sin(angle);
#endif
    return first ? x_c * cs - x_o * sn : x_c * cs + x_o * sn;
}
#endif

/* Whether rows j … j + n − 1 are consecutive rows of one view (always without pages):
 * then row j + t lies t·st.s2 elements after row j. */
bool rows_contiguous(long j, int n PG_PARAMS)
{
#if PAGED
    if (pg_table)
        return page_slot(j, pg_size).x == page_slot(j + n - 1, pg_size).x;
#endif
    return true;
}

/* Elements c0 … c0+n-1 of a row starting at src[base] with stride st3 along d, zeros
 * past d; one function per width and storage type: load_row16_0 (16, float), load_row8_1
 * (8, half), …; TYPED(load_row16, dt) picks one. */
#define DEFINE_LOAD_ROW(n, dt)                                                              \
    float##n load_row##n##_##dt(__global const ELEM_T_##dt *src, long base, long st3, int c0, \
                                int d)                                                      \
    {                                                                                       \
        if (st3 == 1 && c0 + n <= d)                                                        \
            return LD##n##_##dt(src, base + c0);                                            \
        float t[n];                                                                         \
        for (int c = 0; c < n; c++)                                                         \
            t[c] = c0 + c < d ? LD_##dt(src, base + (c0 + c) * st3) : 0.0f;                 \
        return vload##n(0, t);                                                              \
    }
/* only the storage types this program reads (smaller programs compile faster) */
#ifdef BWD /* the backward pass also stages dO */
#define READS_DT(dt) (Q_DT == (dt) || K_DT == (dt) || V_DT == (dt) || DO_DT == (dt))
#else
#define READS_DT(dt) (Q_DT == (dt) || K_DT == (dt) || V_DT == (dt))
#endif
#if READS_DT(0)
DEFINE_LOAD_ROW(16, 0)
DEFINE_LOAD_ROW(8, 0)
#endif
#if READS_DT(1)
DEFINE_LOAD_ROW(16, 1)
DEFINE_LOAD_ROW(8, 1)
#endif
#if READS_DT(2)
DEFINE_LOAD_ROW(16, 2)
DEFINE_LOAD_ROW(8, 2)
#endif
#if READS_DT(5)
DEFINE_LOAD_ROW(16, 5)
DEFINE_LOAD_ROW(8, 5)
#endif
#if READS_DT(6)
DEFINE_LOAD_ROW(16, 6)
DEFINE_LOAD_ROW(8, 6)
#endif

#ifndef NV
/* float16 vectors per step of the tiled kernels' micro-kernels (fused.cl): 1, 2 or 4, the
 * host's choice from the device's native float vector width and RQ (tuning.c) */
#define NV 1
#endif
/* the step for n vectors: NV, or the largest power of two below it that divides n */
#define NV_FIT(n) ((n) % NV == 0 ? NV : (NV >= 2 && (n) % 2 == 0) ? 2 : 1)

/* ACCUMULATE_ROWS (below) where a staged value may be inf or NaN: rows jj whose weight
 * P = t[x][jj] is exactly 0 add nothing (not 0 · inf), for every weights-times-rows sum */
#define ACCUMULATE_ROWS_TESTED(acc, w, t, tile, n, stride, nvec, nx)                        \
    for (int jj_ = 0; jj_ < (n); jj_++)                                                    \
        _Pragma("unroll") for (int a_ = 0; a_ < (nvec); a_++)                              \
        {                                                                                  \
            const float16 vv_ = vload16(a_, (tile) + jj_ * (stride));                      \
            _Pragma("unroll") for (int x_ = 0; x_ < (nx); x_++) if ((t)[x_][jj_] != 0.0f)  \
                (acc)[x_][a_] = fma((float16)((w)[x_][jj_]), vv_, (acc)[x_][a_]);          \
        }
/* P·V of fused.cl and weighted_sum.cl (their RQ, TILE_KV, D_V_PAD and N_AV) */
#define ACCUMULATE_PV(acc, p, v_tile) ACCUMULATE_ROWS_TESTED(acc, p, p, v_tile, TILE_KV, D_V_PAD, N_AV, RQ)

/* acc[x][a] += Σ_jj w[x][jj] · tile[jj·stride + 16a .. +16) over the n rows of a staged
 * row-major tile, for x < nx and every float16 vector a < nvec of a row: the GEMM
 * micro-kernel in broadcast form that every "weights times staged rows" product uses
 * (P·V in fused.cl and weighted_sum.cl, dS·K in bwd_dq.cl, P·dO and dS·Q in bwd_dkdv.cl).
 * For each NV_FIT(nvec) vectors of a row, NV_FIT(nvec)·nx float16 accumulators stay in
 * registers over the tile while each row vector feeds nx FMAs with broadcast weights.
 * Nothing tests a weight: callers take it only when no staged value is inf or NaN (a
 * weight of 0 then adds exactly nothing). A macro: the arguments are the kernel's
 * compile-time constants. */
#define ACCUMULATE_ROWS(acc, w, tile, n, stride, nvec, nx)                                 \
    for (int a_ = 0; a_ < (nvec); a_ += NV_FIT(nvec)) {                                    \
        float16 o_[NV_FIT(nvec)][nx];                                                      \
        _Pragma("unroll") for (int u_ = 0; u_ < NV_FIT(nvec); u_++)                        \
        _Pragma("unroll") for (int x_ = 0; x_ < (nx); x_++) o_[u_][x_] = (acc)[x_][a_ + u_]; \
        _Pragma("unroll 2") for (int jj_ = 0; jj_ < (n); jj_++)                            \
        {                                                                                  \
            _Pragma("unroll") for (int u_ = 0; u_ < NV_FIT(nvec); u_++) {                  \
            const float16 vv_ = vload16(a_ + u_, (tile) + jj_ * (stride));                 \
            _Pragma("unroll") for (int x_ = 0; x_ < (nx); x_++)                            \
                o_[u_][x_] = fma((float16)((w)[x_][jj_]), vv_, o_[u_][x_]);                \
            }                                                                              \
        }                                                                                  \
        _Pragma("unroll") for (int u_ = 0; u_ < NV_FIT(nvec); u_++)                        \
        _Pragma("unroll") for (int x_ = 0; x_ < (nx); x_++) (acc)[x_][a_ + u_] = o_[u_][x_]; \
    }

/* The weighted sum of fused.cl and weighted_sum.cl when no staged V value is inf or NaN
 * (their RQ, TILE_KV, D_V_PAD and N_AV) */
#define ACCUMULATE_PV_DENSE(acc, p, v_tile) ACCUMULATE_ROWS(acc, p, v_tile, TILE_KV, D_V_PAD, N_AV, RQ)

/* acc[x] = Σ_c w[x][c] · t[c·16 + lane], c < n, x < nx (each column vector of a transposed
 * 16-wide tile feeds nx FMAs, w broadcast): the backward kernels' scores and dP; 2 chains per
 * x (even, odd c) when NV ≥ 2 (AVX-512), 1 when NV is 1 (AVX2: a float16 is 2 of 16 registers) */
#define MICRO_COLS(acc, w, t, n, nx)                                                     \
    do {                                                                                 \
        float16 e_[nx], o_[nx];                                                          \
        _Pragma("unroll") for (int x_ = 0; x_ < (nx); x_++) e_[x_] = o_[x_] = 0.0f;      \
        int c_ = 0;                                                                      \
        _Pragma("unroll 2") for (; c_ + 2 <= (n); c_ += 2)                               \
        {                                                                                \
            const float16 t0_ = vload16(0, (t) + c_ * 16), t1_ = vload16(0, (t) + (c_ + 1) * 16); \
            _Pragma("unroll") for (int x_ = 0; x_ < (nx); x_++)                          \
            {                                                                            \
                e_[x_] = fma((float16)((w)[x_][c_]), t0_, e_[x_]);                       \
                if (NV >= 2) o_[x_] = fma((float16)((w)[x_][c_ + 1]), t1_, o_[x_]);     \
                else e_[x_] = fma((float16)((w)[x_][c_ + 1]), t1_, e_[x_]);              \
            }                                                                            \
        }                                                                                \
        if (c_ < (n)) {                                                                  \
            const float16 t0_ = vload16(0, (t) + c_ * 16);                               \
            _Pragma("unroll") for (int x_ = 0; x_ < (nx); x_++)                          \
                e_[x_] = fma((float16)((w)[x_][c_]), t0_, e_[x_]);                       \
        }                                                                                \
        _Pragma("unroll") for (int x_ = 0; x_ < (nx); x_++) (acc)[x_] = e_[x_] + o_[x_]; \
    } while (0)

/* Whether any row this work-item staged into a row-major local tile (rows t, t + wg, …
 * of `tile`, each d_pad floats) holds inf or NaN. */
int rows_nonfinite(__local const float *t, int tile, int d_pad, int wg)
{
    int16 bad = 0;
    for (int jj = get_local_id(0); jj < tile; jj += wg)
        for (int a = 0; a < d_pad / 16; a++) {
            const float16 x = vload16(a, t + jj * d_pad);
            bad |= isnan(x) | isinf(x);
        }
    return any(bad);
}

/* d rounded up to whole float16 vectors */
#define PAD16(d) (((d) + 15) / 16 * 16)

/* The 8×8 block of rows r0…r7 transposed in registers (three rounds of shuffles, the
 * unpack / shuffle / permute of a SIMD transpose) and stored as 8 columns of 8
 * consecutive keys: t[c·tile + k] = r_k[c]. */
void store_transposed8(float8 r0, float8 r1, float8 r2, float8 r3, float8 r4, float8 r5,
                       float8 r6, float8 r7, __local float *t, int tile)
{
    const uint8 even = (uint8)(0, 8, 2, 10, 4, 12, 6, 14), odd = (uint8)(1, 9, 3, 11, 5, 13, 7, 15);
    const uint8 lo2 = (uint8)(0, 1, 8, 9, 4, 5, 12, 13), hi2 = (uint8)(2, 3, 10, 11, 6, 7, 14, 15);
    const uint8 lo4 = (uint8)(0, 1, 2, 3, 8, 9, 10, 11), hi4 = (uint8)(4, 5, 6, 7, 12, 13, 14, 15);
    const float8 a0 = shuffle2(r0, r1, even), a1 = shuffle2(r0, r1, odd);
    const float8 a2 = shuffle2(r2, r3, even), a3 = shuffle2(r2, r3, odd);
    const float8 a4 = shuffle2(r4, r5, even), a5 = shuffle2(r4, r5, odd);
    const float8 a6 = shuffle2(r6, r7, even), a7 = shuffle2(r6, r7, odd);
    const float8 b0 = shuffle2(a0, a2, lo2), b1 = shuffle2(a0, a2, hi2); /* cols 0|4, 2|6 */
    const float8 b2 = shuffle2(a1, a3, lo2), b3 = shuffle2(a1, a3, hi2); /* cols 1|5, 3|7 */
    const float8 b4 = shuffle2(a4, a6, lo2), b5 = shuffle2(a4, a6, hi2);
    const float8 b6 = shuffle2(a5, a7, lo2), b7 = shuffle2(a5, a7, hi2);
    vstore8(shuffle2(b0, b4, lo4), 0, t);
    vstore8(shuffle2(b2, b6, lo4), 0, t + tile);
    vstore8(shuffle2(b1, b5, lo4), 0, t + 2 * tile);
    vstore8(shuffle2(b3, b7, lo4), 0, t + 3 * tile);
    vstore8(shuffle2(b0, b4, hi4), 0, t + 4 * tile);
    vstore8(shuffle2(b2, b6, hi4), 0, t + 5 * tile);
    vstore8(shuffle2(b1, b5, hi4), 0, t + 6 * tile);
    vstore8(shuffle2(b3, b7, hi4), 0, t + 7 * tile);
}

/* Stages rows [j0, j0 + tile) of head (b, h) of a view into local memory: transposed,
 * dst[c·tile + jj] (K for the scores), or row-major with rows padded to d_pad,
 * dst[jj·d_pad + c] (V for the weighted sum). Rows past n and columns past d are
 * zeros. Row-major: work-item t copies rows t, t + wg, …, rows dense along d as float16
 * vectors. Transposed: work-item t takes blocks of 8 keys t, t + wg, … and moves 8×8
 * blocks through store_transposed8 where the 8 rows are present and dense along d,
 * elements one at a time elsewhere (a tile's partial end, strided views, d % 8).
 * Callers pass compile-time constants for d, d_pad, tile, wg and transpose, so the
 * compiler specialises this after inlining. One function per storage type:
 * stage_rows_0 (float), _1 (half), _2 (bf16); TYPED(stage_rows, dt) picks one. */
#define DEFINE_STAGE_ROWS(dt)                                                               \
    void stage_rows_##dt(__global const ELEM_T_##dt *src, long off, long4 st, long b, long h, \
                         long j0, long n, int d, int d_pad, int tile, int wg, bool transpose, \
                         __local float *dst PG_PARAMS)                                     \
    {                                                                                       \
        if (transpose) {                                                                    \
            for (int kb = get_local_id(0); kb < tile / 8; kb += wg) {                       \
                const int jj0 = 8 * kb;                                                     \
                int c = 0;                                                                  \
                if (st.s3 == 1 && j0 + jj0 + 8 <= n && rows_contiguous(j0 + jj0, 8 PG_ARGS)) {  \
                    const long base = kv_row(off, st, b, h, j0 + jj0 PG_ARGS);                  \
                    for (; c + 8 <= d; c += 8) {                                            \
                        const __global const ELEM_T_##dt *p_ = src + base + c;              \
                        store_transposed8(LD8_##dt(p_, 0), LD8_##dt(p_, st.s2),             \
                                          LD8_##dt(p_, 2 * st.s2), LD8_##dt(p_, 3 * st.s2), \
                                          LD8_##dt(p_, 4 * st.s2), LD8_##dt(p_, 5 * st.s2), \
                                          LD8_##dt(p_, 6 * st.s2), LD8_##dt(p_, 7 * st.s2), \
                                          dst + c * tile + jj0, tile);                      \
                    }                                                                       \
                }                                                                           \
                for (int k = 0; k < 8; k++) { /* what the blocks did not cover */          \
                    const long j = j0 + jj0 + k;                                            \
                    const long base = kv_row(off, st, b, h, j < n ? j : 0 PG_ARGS);             \
                    for (int cc = c; cc < d; cc++)                                          \
                        dst[cc * tile + jj0 + k] =                                          \
                            j < n ? LD_##dt(src, base + cc * st.s3) : 0.0f;                 \
                }                                                                           \
            }                                                                               \
        } else {                                                                            \
        for (int jj = get_local_id(0); jj < tile; jj += wg) {                               \
            const long j = j0 + jj;                                                         \
            const bool in = j < n;                                                          \
            const long base = kv_row(off, st, b, h, in ? j : 0 PG_ARGS);                        \
            int c = 0;                                                                      \
            if (in && st.s3 == 1) {                                                         \
                for (; c + 16 <= d; c += 16)                                                \
                    vstore16(LD16_##dt(src, base + c), 0, dst + jj * d_pad + c);            \
            }                                                                               \
            for (; c < d_pad; c++)                                                          \
                dst[jj * d_pad + c] = (in && c < d) ? LD_##dt(src, base + c * st.s3) : 0.0f; \
        }                                                                                   \
        }                                                                                   \
    }
#if READS_DT(0)
DEFINE_STAGE_ROWS(0)
#endif
#if READS_DT(1)
DEFINE_STAGE_ROWS(1)
#endif
#if READS_DT(2)
DEFINE_STAGE_ROWS(2)
#endif
#if READS_DT(5)
DEFINE_STAGE_ROWS(5)
#endif
#if READS_DT(6)
DEFINE_STAGE_ROWS(6)
#endif

/* Rows [r0, r0 + rows) of head (b, h) of a view into local memory, row-major with
 * `stride` floats per row, columns [0, dpad) (zeros past d and past n); every work-item
 * of the group takes float4 chunks lid, lid + local size, … (coalesced along the row). Returns
 * whether a value it staged is inf or NaN. One function per storage type:
 * stage4_0 (float), _1 (half), _2 (bf16); TYPED(stage4, dt) picks one. */
#define DEFINE_STAGE4(dt)                                                                   \
    bool stage4_##dt(__global const ELEM_T_##dt *src, long off, long4 st, long b, long h,  \
                     long r0, long n, int rows, int d, int dpad, int stride,                \
                     __local float *dst PG_PARAMS)                                         \
    {                                                                                       \
        const int per_row = dpad / 4;                                                       \
        int4 bad = 0;                                                                       \
        const int step_ = (int)get_local_size(0);                                           \
        for (int e = get_local_id(0); e < rows * per_row; e += step_) {                     \
            const int rr = e / per_row, c = 4 * (e % per_row);                              \
            const long row = r0 + rr;                                                       \
            float4 x = 0.0f;                                                                \
            if (row < n) {                                                                  \
                const long base = kv_row(off, st, b, h, row PG_ARGS);                           \
                if (st.s3 == 1 && c + 4 <= d) {                                             \
                    x = LD4_##dt(src, base + c);                                            \
                } else {                                                                    \
                    float t[4];                                                             \
                    for (int u = 0; u < 4; u++)                                             \
                        t[u] = c + u < d ? LD_##dt(src, base + (c + u) * st.s3) : 0.0f;     \
                    x = vload4(0, t);                                                       \
                }                                                                           \
            }                                                                               \
            bad |= isnan(x) | isinf(x);                                                     \
            vstore4(x, 0, dst + rr * stride + c);                                           \
        }                                                                                   \
        return any(bad);                                                                    \
    }
#define LD4_0(p, i) vload4(0, (p) + (i))
#define LD4_1(p, i) vload_half4(0, (p) + (i))
#define LD4_2(p, i) as_float4(convert_uint4(vload4(0, (p) + (i))) << 16)
#define LD4_5(p, i) convert_float4(vload4(0, (p) + (i)))
#define LD4_6(p, i) fp8_16((uchar16)(vload4(0, (p) + (i)), (uchar4)(0), (uchar8)(0))).lo.lo
#if READS_DT(0)
DEFINE_STAGE4(0)
#endif
#if READS_DT(1)
DEFINE_STAGE4(1)
#endif
#if READS_DT(2)
DEFINE_STAGE4(2)
#endif
#if READS_DT(5)
DEFINE_STAGE4(5)
#endif
#if READS_DT(6)
DEFINE_STAGE4(6)
#endif

/* ---- a quantized K/V cache (the desc's k_scale, v_scale; -DK_SCALED=1, -DV_SCALED=1) ----
 * K (or V) stores int8 values (K_DT 5) or FP8 E4M3 codes (6); key row j's values are
 * the stored ones times its scale, element (b, h, j) of a float32 view [b|1, h_kv, n_kv|1, 1] (a stride 0 where the
 * extent is 1: one scale per head, or per token and head), read through the block table
 * when paged, as K is. The kernels apply K's scale to the row's dot product and V's to
 * its weight in the sum (not in the softmax's denominator): the same products. */
#ifndef K_SCALED
#define K_SCALED 0
#endif
#ifndef V_SCALED
#define V_SCALED 0
#endif
float kv_scale(__global const float *sc, long off, long4 st, long b, long h, long j PG_PARAMS)
{
    return sc[kv_row(off, st, b, h, j PG_ARGS)];
}

#if K_SCALED || V_SCALED
/* A quantized K or V (common.cl kv_scale): the rows this work-item staged with stage4
 * (the same chunks: no barrier needed) times their scales. */
void scale_staged4(__local float *dst, int rows, int dpad, int stride, __global const float *sc,
                   long off, long4 st, long b, long h, long r0, long n PG_PARAMS)
{
    const int per_row = dpad / 4;
    for (int e = get_local_id(0); e < rows * per_row; e += (int)get_local_size(0)) {
        const int rr = e / per_row, c = 4 * (e % per_row);
        if (r0 + rr < n)
            vstore4(vload4(0, dst + rr * stride + c) * kv_scale(sc, off, st, b, h, r0 + rr PG_ARGS),
                    0, dst + rr * stride + c);
    }
}
#endif
