/* fused_gpu.cl — the GPU family's fused kernel: O = softmax(scale · Q·Kᵀ + mask) · V in
 * one pass, with the semantics of fused.cl (its header states the reference loop: the
 * online softmax of Milakov & Gimelshein 2018 as FlashAttention-2 arranges it, Dao
 * 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work
 * Partitioning", section 3.1), shaped for GPUs instead of CPUs.
 *
 * Index map: NDRange (⌈n_q/BQ⌉·WG, batch·h_q), work-group (WG, 1). A work-group owns
 * BQ = (WG/CT)·RQ query rows of one (batch entry, query head); work-item
 * lid = ty·CT + tx owns rows ty·RQ … ty·RQ+RQ−1 of them, the CT work-items of one ty
 * sharing those rows. Per tile of TILE_KV keys:
 *   1. the group stages K (row-major, rows padded by 4 floats) and V into local memory
 *      with coalesced float4 loads (Q was staged once, the same way);
 *   2. scores, a register micro-tile of RQ rows × TN = TILE_KV/CT keys per work-item
 *      (keys tx, tx + CT, …): each float4 of Q (the same for all CT work-items: a
 *      broadcast) and of K feeds RQ·TN·4 FMAs — a GEMM micro-kernel;
 *   3. tiles that are not fully visible to every row, or have score terms (mask,
 *      ALiBi, softcap), pass the scores through local memory once, and score_terms16
 *      (common.cl, the one place the rule and terms are applied) fixes them 16 keys of a
 *      row at a time;
 *   4. row maxima: each work-item's partial max through local memory (CT per row), the
 *      online-softmax rescale, and P = exp(S − m) into local memory (keys × rows);
 *   5. O += P·V, a register micro-tile of RQ rows × TD = DVP/CT columns per work-item
 *      (float4 columns tx, tx + CT, …), each P value and V float4 feeding RQ·4 FMAs.
 * The running sum l stays a per-work-item partial (its keys only; the rescale factor is
 * the row's), summed across the CT work-items once at the end.
 * Reductions across the CT work-items of a row block (the row maxima of step 4, the sums
 * at the end): with SUBGROUPS (the host's choice where the device has
 * cl_khr_subgroup_clustered_reduce) and sub-groups whose size is a multiple of CT, the
 * work-items are numbered by sub-group (ty, tx from the sub-group id and local id, so
 * a row block is a cluster of CT consecutive lanes of one sub-group, however the device
 * maps work-items to sub-groups) and sub_group_clustered_reduce_max/add reduce in
 * registers; otherwise (and on devices without the extension) through local memory,
 * CT partials per row in red[]. The maxima keep "NaN wins" (max_nan) by reducing
 * order-preserving integer keys (ordered_key), NaN above +inf.
 * Local memory: Q BQ×(DK4+4), K TILE_KV×(DK4+4), V TILE_KV×DVP (in K's buffer with
 * KV_SHARED, staged after the scores), P TILE_KV×(BQ+4), and BQ×CT floats for the
 * reductions; the host (plan_gpu.c) picks tunables that fit.
 * A weight of 0 adds nothing even where V holds inf or NaN: tiles where some staged V
 * value is not finite take the summation that tests each weight.
 * HALF_MATH (desc.half_arithmetic on a device with cl_khr_fp16, Q, K and V float16): Q,
 * K and V stay half in local memory (exact: they are float16 already; half the bytes of
 * local memory and of its loads), and each score is summed over groups of 4 columns in
 * half arithmetic (a half2 product, a half2 FMA, one half add: each product rounds at
 * most 3 times) whose group sums add in float32. So, to first order,
 * |Δs| ≤ 3·2⁻¹¹·scale·Σ_c |q_c·k_c| + d_k·2⁻¹⁴·scale (the second term: products below
 * half's smallest normal, 2⁻¹⁴, subnormal or flushed to 0 by the device), while no group sum passes 65504 (it would be inf: inputs with
 * |q_c·k_c| near 16384 must not take this path). The softmax, P and O stay float32
 * (V widened from half on its load, exactly). docs/SEMANTICS.md, "Half arithmetic".
 */
#ifndef D_K
#define D_K 64 /* head dim of Q and K */
#endif
#ifndef D_V
#define D_V 64 /* head dim of V and O */
#endif
#ifndef TILE_KV
#define TILE_KV 32 /* keys per tile; a multiple of CT */
#endif
#ifndef WG
#define WG 256 /* work-items per group; a multiple of CT */
#endif
#ifndef RQ
#define RQ 4 /* query rows per work-item */
#endif
#ifndef CT
#define CT 16 /* work-items sharing a block of rows; a power of two up to 16 */
#endif
#ifndef KV_SHARED
#define KV_SHARED 0 /* 1: V is staged into K's local buffer once the scores are done */
#endif
#ifndef HALF_MATH
#define HALF_MATH 0 /* 1: Q·Kᵀ in half, Q, K, V half in local memory (float16 inputs) */
#endif
#if HALF_MATH
#pragma OPENCL EXTENSION cl_khr_fp16 : enable
typedef half lm_t; /* what Q, K and V are kept as in local memory */

/* stage4 (common.cl) for float16 rows kept as half: the same rows, chunks and zeros,
 * the bits copied; returns whether a staged value is inf or NaN (exponent all ones). */
bool stage4h(__global const half *src, long off, long4 st, long b, long h, long r0, long n,
             int rows, int d, int dpad, int stride, __local half *dst PG_PARAMS)
{
    const int per_row = dpad / 4;
    __global const ushort *bits = (__global const ushort *)src;
    short4 bad = 0;
    for (int e = get_local_id(0); e < rows * per_row; e += (int)get_local_size(0)) {
        const int rr = e / per_row, c = 4 * (e % per_row);
        const long row = r0 + rr;
        ushort4 x = 0;
        if (row < n) {
            const long base = kv_row(off, st, b, h, row PG_ARGS);
            if (st.s3 == 1 && c + 4 <= d) {
                x = vload4(0, bits + base + c);
            } else {
                ushort t[4];
                for (int u = 0; u < 4; u++)
                    t[u] = c + u < d ? bits[base + (c + u) * st.s3] : (ushort)0;
                x = vload4(0, t);
            }
        }
        bad |= (x & (ushort)0x7c00) == (ushort)0x7c00;
        vstore4(as_half4(x), 0, dst + rr * stride + c);
    }
    return any(bad);
}
#define STAGE_Q stage4h
#define STAGE_K stage4h
#define STAGE_V stage4h
#define LOAD_V4(i, p) vload_half4(i, p)
typedef half4 lm4_t;

/* acc + a·b over a group of 4 columns: in half (a half2 product, a half2 FMA, one add),
 * the group's sum added in float32 */
float dot4_add(float acc, half4 a, half4 b)
{
    const half2 g = fma(a.hi, b.hi, a.lo * b.lo);
    return acc + (float)(g.x + g.y);
}
#else
typedef float lm_t;
typedef float4 lm4_t;

float dot4_add(float acc, float4 a, float4 b) /* acc + a·b, 4 FMAs in float32 */
{
    return fma(a.w, b.w, fma(a.z, b.z, fma(a.y, b.y, fma(a.x, b.x, acc))));
}
#define STAGE_Q TYPED(stage4, Q_DT)
#define STAGE_K TYPED(stage4, K_DT)
#define STAGE_V TYPED(stage4, V_DT)
#define LOAD_V4(i, p) vload4(i, p)
#endif
#ifndef SUBGROUPS
#define SUBGROUPS 0 /* 1: row reductions by sub-group where the sub-group size allows */
#endif
#ifndef REQD_SUB_GROUP
#define REQD_SUB_GROUP 0 /* CT: sub-groups of CT lanes required (cl_intel_required_subgroup_size) */
#endif
#if SUBGROUPS && REQD_SUB_GROUP
#pragma OPENCL EXTENSION cl_intel_required_subgroup_size : enable
#define SUB_GROUP_ATTR __attribute__((intel_reqd_sub_group_size(REQD_SUB_GROUP)))
#else
#define SUB_GROUP_ATTR
#endif
#if SUBGROUPS
#pragma OPENCL EXTENSION cl_khr_subgroups : enable
#pragma OPENCL EXTENSION cl_khr_subgroup_clustered_reduce : enable

/* An int whose order is that of the floats, NaN (any sign or payload) above +inf: max
 * over keys is max_nan over floats (-0 below +0, which max_nan may return either of). */
int ordered_key(float x)
{
    const int u = as_int(x);
    return isnan(x) ? INT_MAX : u >= 0 ? u : u ^ 0x7fffffff;
}

float from_ordered_key(int k)
{
    return k == INT_MAX ? NAN : as_float(k >= 0 ? k : k ^ 0x7fffffff);
}
#endif

#define BQ (WG / CT * RQ)                          /* query rows per work-group */
#define TN (TILE_KV / CT)                          /* score columns per work-item */
#define DK4 ((D_K + 3) / 4 * 4)                    /* d_k rounded up to float4 */
#define QK_STRIDE (DK4 + 4)                        /* local row stride of Q and K */
#define DVP ((D_V + 4 * CT - 1) / (4 * CT) * (4 * CT)) /* d_v rounded to CT float4s */
#define NTD (DVP / (4 * CT))                       /* float4 output columns per work-item */
#define P_STRIDE (BQ + 4)                          /* p_t[key · P_STRIDE + row] */
#define K_FLOATS (TILE_KV * QK_STRIDE)
#define V_FLOATS (TILE_KV * DVP)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) SUB_GROUP_ATTR void
clattn_fused_gpu(FUSED_PARAMS)
{
    __local lm_t q_s[BQ * QK_STRIDE];
#if KV_SHARED
    __local lm_t k_s[K_FLOATS > V_FLOATS ? K_FLOATS : V_FLOATS];
#define v_s k_s
#else
    __local lm_t k_s[K_FLOATS];
    __local lm_t v_s[V_FLOATS];
#endif
    __local float p_t[TILE_KV * P_STRIDE];
    __local float red[BQ * CT]; /* red[row · CT + tx]: partial maxima, then sums */
    __local int v_bad;          /* some staged V value of this tile is inf or NaN */
    const int lid = get_local_id(0);
#if SUBGROUPS /* (uniform over the group: every sub-group is whole when WG is a multiple) */
    const int sgs = (int)get_max_sub_group_size();
    const bool by_sg = sgs % CT == 0 && WG % sgs == 0;
    const int sl = by_sg ? (int)(get_sub_group_id() * sgs + get_sub_group_local_id()) : lid;
#else
    const bool by_sg = false;
    const int sl = lid;
#endif
    const int tx = sl % CT, ty = sl / CT;
    const long g0 = get_group_id(0) * BQ; /* first query row of the group */
    const long bh = get_global_id(1);
    const long b = bh / h_q, h = bh % h_q, hk = h / group;
    VARLEN_ROWS(b); /* a packed batch: sequence b's rows */
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const float slope = ALIBI ? alibi[h] : 0.0f;
    /* K/V rows past the batch entry's keys are staged as zeros, not read (with pages,
     * the table holds no page for them) */
    const long nkv_b = seq_len(kv_lens, b, n_kv);

    (void)STAGE_Q(q, q_off, q_st, b, h, g0, Q_ROWS(b), BQ, D_K, DK4, QK_STRIDE, q_s NO_PAGES);
    if (lid == 0)
        v_bad = 0;
    barrier(CLK_LOCAL_MEM_FENCE); /* v_bad cleared before any work-item stages V */

    float4 acc[RQ][NTD];
    float m[RQ], l[RQ];
    #pragma unroll
    for (int r = 0; r < RQ; r++) {
        #pragma unroll
        for (int n = 0; n < NTD; n++)
            acc[r][n] = 0.0f;
        m[r] = -INFINITY;
        l[r] = 0.0f; /* this work-item's keys only */
    }
    /* the group's valid rows [g0, i_last]: key tiles outside their keys are skipped, and a
     * tile is plain (every key visible to every row, no score term) when the last row's lo
     * and the first row's hi enclose it (lo and hi grow with the row) */
    const long nq_b = seq_len(q_lens, b, n_q);
    const long i_last = min(g0 + BQ, nq_b) - 1;
    const long2 kr = group_key_range(RULE_ARGS, b, g0, g0 + BQ - 1, n_q, n_kv);
    const row_rule r_first = rule_at(RULE_ARGS, b, g0 < n_q ? g0 : 0, n_q, n_kv);
    const row_rule r_last = rule_at(RULE_ARGS, b, i_last >= 0 ? i_last : 0, n_q, n_kv);
    const bool terms = SCORE_TERMS || mask == MASK_NO_SELF;

    for (long j0 = kr.x / TILE_KV * TILE_KV; j0 < kr.y; j0 += TILE_KV) {
        /* the block mask (uniform over the group): a tile mask_mod masks for every row is
         * skipped, and one it leaves fully visible needs no snippet */
        const int bstate = block_tile_state(bmask, bm_st, b, h, g0, min(g0 + BQ, n_q) - 1, j0,
                                            min(j0 + TILE_KV, n_kv) - 1);
        if (bstate == 0)
            continue;
        (void)STAGE_K(k, k_off, k_st, b, hk, j0, nkv_b, TILE_KV, D_K, DK4, QK_STRIDE, k_s KV_PAGES);
#if K_SCALED /* a quantized K: the staged rows times their scales */
        scale_staged4(k_s, TILE_KV, DK4, QK_STRIDE, k_sc, ks_off, ks_st, b, hk, j0, nkv_b KV_PAGES);
#endif
#if !KV_SHARED
        if (STAGE_V(v, v_off, v_st, b, hk, j0, nkv_b, TILE_KV, D_V, DVP, DVP, v_s KV_PAGES))
            v_bad = 1; /* read after the row-max barrier, reset after the next one */
#if V_SCALED
        scale_staged4(v_s, TILE_KV, DVP, DVP, v_sc, vs_off, vs_st, b, hk, j0, nkv_b KV_PAGES);
#endif
#endif
        barrier(CLK_LOCAL_MEM_FENCE); /* Q, K (and V) staged */

        /* 2. the scores of RQ rows × TN keys */
        float s[RQ][TN];
        #pragma unroll
        for (int r = 0; r < RQ; r++) {
            #pragma unroll
            for (int u = 0; u < TN; u++)
                s[r][u] = 0.0f;
        }
        #pragma unroll 2
        for (int c = 0; c < DK4; c += 4) {
            lm4_t qv[RQ], kv[TN];
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                qv[r] = vload4(0, q_s + (ty * RQ + r) * QK_STRIDE + c);
            #pragma unroll
            for (int u = 0; u < TN; u++)
                kv[u] = vload4(0, k_s + (tx + CT * u) * QK_STRIDE + c);
            #pragma unroll
            for (int r = 0; r < RQ; r++) {
                #pragma unroll
                for (int u = 0; u < TN; u++)
                    s[r][u] = dot4_add(s[r][u], qv[r], kv[u]);
            }
        }
        #pragma unroll
        for (int r = 0; r < RQ; r++) {
            #pragma unroll
            for (int u = 0; u < TN; u++)
                s[r][u] *= scale;
        }
#if KV_SHARED
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone is done with K */
        if (STAGE_V(v, v_off, v_st, b, hk, j0, nkv_b, TILE_KV, D_V, DVP, DVP, v_s KV_PAGES))
            v_bad = 1;
#if V_SCALED
        scale_staged4(v_s, TILE_KV, DVP, DVP, v_sc, vs_off, vs_st, b, hk, j0, nkv_b KV_PAGES);
#endif
#endif

        /* 3. the rule and the score terms, where the tile needs them (uniform) */
        /* (a mask_mod that the block mask says masks nothing here needs no terms) */
        const bool tile_terms = terms && !(ONLY_MASK_MOD && mask != MASK_NO_SELF && bstate == 2);
        if (tile_terms || r_last.lo > j0 || r_first.hi < j0 + TILE_KV) {
            #pragma unroll
            for (int r = 0; r < RQ; r++) {
                #pragma unroll
                for (int u = 0; u < TN; u++)
                    p_t[(tx + CT * u) * P_STRIDE + ty * RQ + r] = s[r][u];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int ch = lid; ch < BQ * (TILE_KV / 16); ch += WG) {
                const int row = ch % BQ, sv = ch / BQ;
                const long i = g0 + row;
                row_rule rr = rule_at(RULE_ARGS, b, i < n_q ? i : 0, n_q, n_kv);
                if (i >= n_q)
                    rr.lo = rr.hi = 0;
                const long mbase = MASK_T && i < n_q ? view_at(mt_off, mt_st, b, h, i, 0) : 0;
                float t16[16];
                for (int e = 0; e < 16; e++)
                    t16[e] = p_t[(16 * sv + e) * P_STRIDE + row];
                const float16 x = score_terms16(
                    vload16(0, t16), lane + 16 * sv, rel_bound(rr.lo, j0, TILE_KV),
                    rel_bound(rr.hi, j0, TILE_KV), rel_key(rr.self, j0, TILE_KV), j0, n_kv,
                    TERM_ARGS, mbase, rr.diag, slope, ALIBI ? alibi_ref(rr) : 0, b, h, i);
                vstore16(x, 0, t16);
                for (int e = 0; e < 16; e++)
                    p_t[(16 * sv + e) * P_STRIDE + row] = t16[e];
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            #pragma unroll
            for (int r = 0; r < RQ; r++) {
                #pragma unroll
                for (int u = 0; u < TN; u++)
                    s[r][u] = p_t[(tx + CT * u) * P_STRIDE + ty * RQ + r];
            }
        }

        /* 4. the row maxima, the online-softmax step, P into local memory */
        float mt[RQ]; /* the tile's row maxima (by sub-group), else partial */
        #pragma unroll
        for (int r = 0; r < RQ; r++) {
            mt[r] = s[r][0];
            #pragma unroll
            for (int u = 1; u < TN; u++)
                mt[r] = max_nan(mt[r], s[r][u]);
        }
#if SUBGROUPS
        if (by_sg) {
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                mt[r] = from_ordered_key(sub_group_clustered_reduce_max(ordered_key(mt[r]), CT));
        } else
#endif
        {
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                red[(ty * RQ + r) * CT + tx] = mt[r];
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* partial maxima (and a shared V) in place */
        const bool v_finite = !v_bad;
        #pragma unroll
        for (int r = 0; r < RQ; r++) {
            float m_new = max_nan(m[r], mt[r]);
            if (!by_sg) {
                #pragma unroll
                for (int t = 0; t < CT; t++)
                    m_new = max_nan(m_new, red[(ty * RQ + r) * CT + t]);
            }
            if (m_new == -INFINITY) { /* nothing visible yet: P = 0 */
                #pragma unroll
                for (int u = 0; u < TN; u++)
                    s[r][u] = 0.0f;
            } else {
                if (m_new != m[r]) { /* rescale to the new max (NaN maxima: to NaN) */
                    const float alpha = exp(m[r] - m_new);
                    l[r] *= alpha;
                    #pragma unroll
                    for (int n = 0; n < NTD; n++)
                        acc[r][n] *= alpha;
                }
                #pragma unroll
                for (int u = 0; u < TN; u++) {
                    s[r][u] = exp(s[r][u] - m_new);
                    l[r] += s[r][u];
#if DROPOUT /* after the sum: l and the LSE are those before dropout */
                    s[r][u] *= dropout1(DROPOUT_ARGS, bh, g0 + ty * RQ + r, j0 + tx + CT * u);
#endif
                }
                m[r] = m_new;
            }
            #pragma unroll
            for (int u = 0; u < TN; u++)
                p_t[(tx + CT * u) * P_STRIDE + ty * RQ + r] = s[r][u];
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* P in place; everyone has read v_bad */
        if (lid == 0)
            v_bad = 0; /* set again only after the barrier that ends this tile */

        /* 5. O += P·V */
        if (v_finite) {
            #pragma unroll 4
            for (int jj = 0; jj < TILE_KV; jj++) {
                float pr[RQ];
                #pragma unroll
                for (int r = 0; r < RQ; r++)
                    pr[r] = p_t[jj * P_STRIDE + ty * RQ + r];
                #pragma unroll
                for (int n = 0; n < NTD; n++) {
                    const float4 vv = LOAD_V4(0, v_s + jj * DVP + 4 * (tx + CT * n));
                    #pragma unroll
                    for (int r = 0; r < RQ; r++)
                        acc[r][n] = fma((float4)(pr[r]), vv, acc[r][n]);
                }
            }
        } else {
            for (int jj = 0; jj < TILE_KV; jj++) {
                #pragma unroll
                for (int r = 0; r < RQ; r++) {
                    const float pr = p_t[jj * P_STRIDE + ty * RQ + r];
                    if (pr != 0.0f) {
                        #pragma unroll
                        for (int n = 0; n < NTD; n++)
                            acc[r][n] = fma((float4)(pr),
                                            LOAD_V4(0, v_s + jj * DVP + 4 * (tx + CT * n)),
                                            acc[r][n]);
                    }
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* all reads done before the next tile is staged */
    }

    /* the row sums across the CT work-items of each row, then the stores */
#if SUBGROUPS
    if (by_sg) {
        #pragma unroll
        for (int r = 0; r < RQ; r++)
            l[r] = sub_group_clustered_reduce_add(l[r], CT);
    } else
#endif
    {
        #pragma unroll
        for (int r = 0; r < RQ; r++)
            red[(ty * RQ + r) * CT + tx] = l[r];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int r = 0; r < RQ; r++) {
        const long i = g0 + ty * RQ + r;
        if (i >= n_q)
            break;
        if (VARLEN && row_padding(q_lens, b, i))
            continue; /* another sequence's row */
        float lt = l[r];
        if (!by_sg) {
            lt = 0.0f;
            for (int t = 0; t < CT; t++)
                lt += red[(ty * RQ + r) * CT + t];
        }
        const row_rule rule = rule_at(RULE_ARGS, b, i, n_q, n_kv);
        const bool no_keys = m[r] == -INFINITY || rule.hi <= rule.lo;
        const long ref = ALIBI ? alibi_ref(rule) : 0;
        float mr = no_keys ? -INFINITY : m[r];
        const float mx = mr; /* (the scores' max, before the sink) */
        lt = no_keys ? 0.0f : lt;
        const float as = fold_sink(sinks, h, q_lens, b, i, &mr, &lt, slope, ref);
        const bool empty = mr == -INFINITY;
        const float fill = masked_nan && !row_padding(q_lens, b, i) ? NAN : 0.0f;
        for (int n = 0; n < NTD; n++) {
            float out[4];
            vstore4(empty ? (float4)(fill) : no_keys ? (float4)(0.0f) : acc[r][n] * as / lt, 0,
                    out);
            for (int e = 0; e < 4; e++) {
                const int c = 4 * (tx + CT * n) + e;
                if (c < D_V)
                    ST(O_DT, o, view_at(o_off, o_st, b, h, i, c), out[e]);
            }
        }
        if (tx == 0)
            STORE_LSE(empty, mr, lt, mx, slope, ref);
    }
}
