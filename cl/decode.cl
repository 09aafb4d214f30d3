/* decode.cl — the fused attention of fused.cl for a few queries (decoding): K and V are
 * streamed from global memory once per KV head, whatever the number of query heads
 * that share it.
 *
 * Decoding is a stream over the KV cache; its limit is the memory's read bandwidth.
 * With grouped-query attention (GQA; `group` = h_q / h_kv query heads per KV head) the
 * query heads of a group read the same K and V rows, so one work-item takes all rows of
 * a KV head: the `group` query heads × n_q queries, up to NR of them, and each K and V
 * row it loads feeds every one of those rows while it is in registers. With NR ≥
 * group · n_q each K/V byte is read from memory once per call.
 *
 * Same arithmetic as fused.cl's reference loop (online softmax; Milakov & Gimelshein
 * 2018, Dao et al. 2022), 16 keys per step. Rows ρ of KV head hk (batch entry b) are
 * ρ = g·n_q + i for query head h = hk·group + g and query i; work-item x of NDRange
 * (⌈group·n_q / NR⌉ rounded up to WG, batch·h_kv / NH) takes rows x·NR … x·NR + NR − 1
 * of NH KV heads hk0 … hk0 + NH − 1, and runs each step of 16 keys for one head after the
 * other. NH is 1 but on CPUs for paged caches with small pages, and for every cache on
 * 16-lane ones (2 at least; tuning.c clattn_decode_heads): a page's heads lie next to
 * each other in the pool ([pages, h_kv,
 * page_size, d] or [pages, page_size, h_kv, d]), so a step's reads for NH heads are one
 * stretch of memory instead of NH pieces scattered over the pool, which the CPU's stream
 * prefetchers follow (pages of 16 keys: docs/BENCHMARKS.md).
 * Per step of 16 keys:
 * - scores, KG keys at a time: SB rows × KG keys (≤ 16) dot products against the K rows
 *   (each 16-float K vector feeds SB rows' FMAs), then one reduction of the 16 float16
 *   partial sums into one vector (hsum16: 15 additions of shuffled pairs, the additions
 *   of hsum in the same order) instead of a horizontal sum per row and key; whole steps
 *   in one page with unit column strides (nearly all) read K and V with plain loads;
 * - the online softmax of each row over the 16 keys (score terms and the visibility
 *   rule per row: rows differ in i and h);
 * - weighted sum, GEMM micro-kernel order: for each 16 columns of V, SB rows' float16
 *   accumulators take every V vector of the step with broadcast weights, from a private
 *   copy of the step's V rows made next to the K reads (K and V stay two sequential
 *   streams; reading V in place column block by column block was 1.3–1.5x slower) or,
 *   where the runtime prefetches (PoCL, Intel's CPU runtime, oclgrind), in place from
 *   rows prefetched next to the K reads instead (V_IN_PLACE below). A
 *   weight of 0 must add nothing even for inf or NaN values: steps where any weight is
 *   0 (masked or underflowed) take the sum that tests each weight; the others are
 *   whole steps and sum their 16 keys untested.
 * No local memory and no barriers. On GPUs (NR 1, a row per work-item) it runs only where
 * the GPU family's decode_gpu.cl cannot: weights, key weight sums, max logits.
 * Split-KV (SPLITS 1; "flash-decoding", Dao, Haziza, Massa, Sizov 2023): the keys the
 * work-item's rows see are cut into n_splits chunks of whole 16-key steps (at least
 * `chunk` keys; common.cl split_range: a window in a long cache splits the window),
 * NDRange dimension 2 numbers the chunk, and each work-item writes its rows' partial
 * results over its chunk as decode_gpu.cl does — O_s = acc/l (float32) at
 * o[(row·n_splits + s)·D_V + c] and LSE_s = m + log l (relative to the row's ALiBi
 * reference; −∞ where the chunk has no visible key) at lse[row·n_splits + s], row =
 * (b·h_q + h)·n_q + i, both buffers the host's float32 workspace — for split_merge.cl to
 * combine (with the sink). The host splits where batch × KV heads / NH × row blocks are
 * too few work-items to keep every CPU thread busy to the end (plan.c).
 */
#ifndef D_K
#define D_K 64 /* head dim of Q and K */
#endif
#ifndef D_V
#define D_V 64 /* head dim of V and O */
#endif
#ifndef WG
#define WG 1 /* work-items per work-group */
#endif
#ifndef NR
#define NR 1 /* query rows (query heads of a KV head × queries) per work-item */
#endif
#ifndef NH
#define NH 1 /* KV heads per work-item (each with its NR rows), read step by step together */
#endif
#ifndef SPLITS
#define SPLITS 0 /* 1: split-KV, the partial O and LSE of chunk number get_global_id(2) */
#endif
#if SPLITS
#define SPLIT_PARAMS , int n_splits, long chunk
#else
#define SPLIT_PARAMS
#endif
#define SB (NR < 4 ? NR : 4) /* rows per register block */
/* Keys per block of scores: SB·KG ≤ 16 dot products, as many as the score accumulators'
 * register budget allows — SB·KG float16 accumulators, at most 16 where a float16 is one
 * register (NV > 1: AVX-512's 32) and at most 4 where it is two (NV 1: AVX2's 16 ymm;
 * 16 accumulators there spilled: 1.13x the time of a horizontal sum per row and key on a
 * Zen 3). NV: the host's, from the device's native vector width (tuning.c). */
#define SCORE_ACC (NV > 1 ? 16 : 4)
#define KG_MAX (SB > 2 ? 4 : 16 / SB)
#define KG (SCORE_ACC / SB < KG_MAX ? SCORE_ACC / SB : KG_MAX) /* 1, 2, 4, 8 or 16 */
#define N_QV (PAD16(D_K) / 16) /* float16 vectors per query row */
#define D_V_PAD PAD16(D_V)     /* d_v rounded up to whole float16 vectors */
#define N_AV (D_V_PAD / 16)    /* float16 accumulator vectors per row */
/* V column blocks per pass of the weighted sum: SB·AP float16 accumulators, enough for 8
 * chains of FMAs in flight — 8 where a float16 is one register (NV > 1), 4 where it is two
 * (NV 1: 8 of them took all 16 ymm registers) */
#define SUM_ACC (NV > 1 ? 8 : 4)
#define AP (N_AV < SUM_ACC / SB ? N_AV : SUM_ACC / SB) /* ≥ 1: SB ≤ 4 */

/* 16 horizontal sums at once: lane e of the result is hsum(d[e]) with the same additions
 * in the same order (same bits), in 15 vector additions of shuffled pairs instead of
 * 16 × (4 shuffles + 4 additions). Level by level, each group of 2w lanes adds its halves
 * of w lanes, and the groups of two inputs are packed into one vector (constant swizzles:
 * shuffle2 with a mask is an element loop in PoCL). */
#define HALVES8(x, y) ((float16)((x).lo, (y).lo) + (float16)((x).hi, (y).hi))
#define HALVES4(x, y)                                                                     \
    ((float16)((x).s0123, (x).s89ab, (y).s0123, (y).s89ab) +                               \
     (float16)((x).s4567, (x).scdef, (y).s4567, (y).scdef))
#define HALVES2(x, y)                                                                     \
    ((float16)(as_float8(as_ulong8(x).even), as_float8(as_ulong8(y).even)) +              \
     (float16)(as_float8(as_ulong8(x).odd), as_float8(as_ulong8(y).odd)))
#define HALVES1(x, y) ((float16)((x).even, (y).even) + (float16)((x).odd, (y).odd))

float16 hsum16(const float16 *d)
{
    float16 a[8], b[4], c[2];
#pragma unroll
    for (int e = 0; e < 8; e++)
        a[e] = HALVES8(d[2 * e], d[2 * e + 1]);
#pragma unroll
    for (int e = 0; e < 4; e++)
        b[e] = HALVES4(a[2 * e], a[2 * e + 1]);
#pragma unroll
    for (int e = 0; e < 2; e++)
        c[e] = HALVES2(b[2 * e], b[2 * e + 1]);
    return HALVES1(c[0], c[1]);
}

/* lanes r·KG … r·KG + KG − 1 of s to dst[0 … KG − 1] */
#if KG == 1
#define STORE_KEYS(s, r, dst) ((dst)[0] = ((float *)&(s))[r])
#elif KG == 2
#define STORE_KEYS(s, r, dst) vstore2(((float2 *)&(s))[r], 0, (dst))
#elif KG == 4
#define STORE_KEYS(s, r, dst) vstore4(((float4 *)&(s))[r], 0, (dst))
#elif KG == 8
#define STORE_KEYS(s, r, dst) vstore8(((float8 *)&(s))[r], 0, (dst))
#else
#define STORE_KEYS(s, r, dst) vstore16((s), 0, (dst))
#endif

/* One step's raw scores into p and its V rows (times their int8 scales) into v_rows, KG
 * keys at a time: SB rows × KG keys = 16 dot products in float16 vectors, each K vector
 * feeding SB FMAs, then one reduction of the 16 (hsum16). KROW(t) and VROW(t): element
 * offsets of the step's K and V row t; LOADK and LOADV: 16 elements at column 16·cv of K
 * row KB, 16·a of V row VB; T: the row read for key g + u (keys outside [tlo, thi) read
 * key tlo or thi − 1 instead, a row of the step and of its page: every row masks them).
 * The rows are q16[R …] (R: the KV head's first row). */
#define STEP_SCORES(KROW, VROW, LOADK, LOADV, T, COPYV)                                       \
    for (int g = 0; g < 16; g += KG) {                                                      \
        long kbs[KG];                                                                       \
        float kl[16]; /* int8 keys: lane r·KG + u holds key g + u's scale (every row) */    \
        for (int u = 0; u < KG; u++) { /* V row t, read next to K row t */                  \
            const int t = (T);                                                              \
            kbs[u] = (KROW);                                                                \
            const long VB = (VROW);                                                         \
            /* int8 values: times the row's scale, once per row; int8 keys: each dot       \
             * product times the key's scale */                                             \
            const float vsc = V_SCALED ? kv_scale(v_sc, vs_off, vs_st, b, hk, j0 + t KV_PAGES) : 1.0f; \
            if (K_SCALED)                                                                   \
                for (int r = 0; r < 16 / KG; r++)                                           \
                    kl[r * KG + u] = kv_scale(k_sc, ks_off, ks_st, b, hk, j0 + t KV_PAGES); \
            if (COPYV) {                                                                    \
                _Pragma("unroll") for (int a = 0; a < N_AV; a++)                            \
                    v_rows[(g + u) * N_AV + a] = (LOADV) * vsc;                             \
            } else /* V read in place by the weighted sum: into the cache now */            \
                PREFETCH_LINES((__global const char *)(v + VB), D_V * (int)sizeof(ELEM_T(V_DT))); \
            PREFETCH_ROWS(g + u);                                                           \
        }                                                                                   \
        for (int r0 = 0; r0 < NR; r0 += SB) {                                               \
            float16 d[16]; /* d[r·KG + u]: row r0 + r, key g + u */                         \
            _Pragma("unroll") for (int e = 0; e < 16; e++) d[e] = 0.0f;                     \
            UNROLL_KEYS for (int u = 0; u < KG; u++) {                                      \
                const long KB = kbs[u];                                                     \
                _Pragma("unroll") for (int cv = 0; cv < N_QV; cv++) {                       \
                    const float16 kv = (LOADK);                                             \
                    _Pragma("unroll") for (int r = 0; r < SB; r++) if (r0 + r < NR)         \
                        d[r * KG + u] = fma(q16[R + r0 + r][cv], kv, d[r * KG + u]);        \
                }                                                                           \
            }                                                                               \
            float16 s = hsum16(d); /* lane r·KG + u: row r0 + r, key g + u */               \
            if (K_SCALED)                                                                   \
                s *= vload16(0, kl);                                                        \
            _Pragma("unroll") for (int r = 0; r < SB; r++) if (r0 + r < NR)                 \
                STORE_KEYS(s, r, p[r0 + r] + g);                                            \
        }                                                                                   \
    }
/* whether every K and V row is whole float16 vectors (then unit column strides allow plain
 * loads) */
#define UNIT_ROWS (D_K % 16 == 0 && D_V % 16 == 0)
/* Build time: the KG keys' dot products are unrolled (d[] in registers) up to 64 K vectors
 * per group, and the plain-load copy of STEP_SCORES exists up to d_k 128; beyond, one
 * general copy with a loop over the keys (d_k 4096 otherwise takes minutes to build). */
#if N_QV * KG <= 64
#define UNROLL_KEYS _Pragma("unroll")
#else
#define UNROLL_KEYS _Pragma("unroll 1")
#endif
#define PLAIN_STEPS (UNIT_ROWS && N_QV <= 8)

/* Software prefetch on CPUs: the K rows PF_STEPS steps ahead are prefetched (one K row per
 * key read, every cache line of the row) unless they are the next head's rows right after
 * the current step's on a 16-lane CPU (K_FOLLOWS below), and so are the V rows unless they
 * follow the current step's in memory and are read next to their K rows (V_FOLLOWS below;
 * V_IN_PLACE prefetches them next to their K rows). GQA decoding does enough arithmetic per byte
 * that the hardware prefetchers fall behind even on contiguous K (0.84-0.89x the time
 * with K prefetched, 2026-12-02), and with pages they restart at every jump to a page
 * elsewhere in the pool, each time after a few misses (pages of 16 keys: 1.2-1.5x the
 * contiguous time without prefetching; docs/BENCHMARKS.md). A hint: prefetches neither
 * fault nor change results.
 * The host (context.c) passes -DCPU_PREFETCH=1 for PoCL and Intel's CPU runtime: clang's
 * __builtin_prefetch, since PoCL's OpenCL prefetch() is an empty
 * function (the address cast to a generic pointer: CPUs have one address space); and
 * -DCPU_PREFETCH=2 for oclgrind, which cannot run the intrinsic: a volatile one-byte
 * read of each address instead, so the memory checker sees every address prefetched
 * (all lie in K and V: the step ahead is whole below khi, and whole in one page or read
 * row by row through the table). */
#ifndef CPU_PREFETCH
#define CPU_PREFETCH 0
#endif
/* PF_L2 (the host's, plan.c: with CPU_PREFETCH 1 where K's heads interleave within its
 * rows, FlashAttention's [b, n_kv, h_kv, d] cache and [num_pages, page_size, h_kv, d]
 * pool): the prefetches go to the L2 cache (locality 2, x86 prefetcht1), not to L1
 * (prefetcht0). A head's rows there lie a whole row apart (2 KiB for 8 heads of d 128 in
 * float16), so a head-step's 64 lines of K and 64 of V fall into 8 of the L1 cache's 64
 * sets, more than its 12 ways hold (48 KiB): prefetched into L1 a head-step ahead, some
 * are likely gone again before they are read. In that layout single-query GQA decoding
 * took 0.89-0.98x the time (batch-8 float16: 0.94x contiguous, 0.93x in pages of 16),
 * MHA and int8 0.94-1.06x, 4 queries 1.00-1.03x, Intel's CPU runtime 0.93-0.95x; in
 * clattn's own layout, where a head's rows are one stretch, L2 took 1.10x the time (MHA
 * float32 in pages of 16, int8 batch 1; 1.14x in a shorter run), so it keeps L1 (a 2-core
 * AVX-512 Xeon, 2026-12-05; docs/BENCHMARKS.md). */
#ifndef PF_L2
#define PF_L2 0
#endif
#if CPU_PREFETCH == 2 || (CPU_PREFETCH == 1 && defined(__clang__))
#define CAN_PREFETCH 1
#if CPU_PREFETCH == 2
#define PREFETCH_LINE(a) ((void)*(volatile __global const char *)(a))
#else
#define PREFETCH_LINE(a) __builtin_prefetch((const void *)(size_t)(a), 0, PF_L2 ? 2 : 3)
#endif
#define PREFETCH_LINES(base, bytes)                                                          \
    for (int c_ = 0; c_ < (bytes); c_ += 64)                                                \
        PREFETCH_LINE((base) + c_)
#else
#define CAN_PREFETCH 0
#define PREFETCH_LINES(base, bytes)
#endif
#if CAN_PREFETCH
/* head-steps ahead: 2 with one head per work-item (1, 2 and 4 measured alike), 1 with
 * several (the next head's rows, or the next step's first head's after the last head; 2
 * kept twice as much in flight as the L1 cache holds next to NH heads' rows: 1.05-1.4x the
 * time on pages of 16, docs/BENCHMARKS.md) */
#define PF_STEPS (NH > 1 ? 1 : 2)
#define PREFETCH_ROWS(t)                                                                      \
    do {                                                                                    \
        if (pfk >= 0)                                                                       \
            PREFETCH_LINES((__global const char *)(k + pfk + (t) * k_st.s2),                \
                           D_K * (int)sizeof(ELEM_T(K_DT)));                                \
        if (pfv >= 0)                                                                       \
            PREFETCH_LINES((__global const char *)(v + pfv + (t) * v_st.s2),                \
                           D_V * (int)sizeof(ELEM_T(V_DT)));                                \
        PREFETCH_PAGED_ROW(t);                                                              \
    } while (0)
#if PAGED
/* A whole step ahead that crosses pages (pages of fewer than 16 keys, or not multiples of
 * 16): each of its K and V rows prefetched at its own place, through the table. Without
 * it such steps had no prefetch at all: pages of 8 took 1.72x the contiguous time, 1.36x
 * with it; pages of 12 2.07x, 1.48x (GQA f16, 2-core AVX-512 Xeon, 2026-12-05;
 * docs/BENCHMARKS.md). The K/V scales (int8 / FP8) are left to the hardware there. */
#define PREFETCH_PAGED_ROW(t)                                                               \
    if (pf_rows) {                                                                          \
        PREFETCH_LINES((__global const char *)(k + kv_row(k_off, k_st, b, hp, jp + (t) KV_PAGES)), \
                       D_K * (int)sizeof(ELEM_T(K_DT)));                                    \
        PREFETCH_LINES((__global const char *)(v + kv_row(v_off, v_st, b, hp, jp + (t) KV_PAGES)), \
                       D_V * (int)sizeof(ELEM_T(V_DT)));                                    \
    }
#else
#define PREFETCH_PAGED_ROW(t)
#endif
#else
#define PREFETCH_ROWS(t)
#endif

/* Whole steps read V in place where the rows can be prefetched: each V row is prefetched
 * next to its K row (the two streams stay sequential, as with the copy) and the weighted
 * sum loads it from the cache, instead of copying the step's rows (a load and a store per
 * vector, the copy 18 % of a GQA decode's samples on a Zen 3; PoCL's LLVM moves the copy
 * in 16-byte pieces). Without prefetching, reading in place was 1.2-1.5x slower. One row
 * per work-item (multi-head decoding) reads in place too since 2026-12-04 (PoCL, 15-30
 * rounds: 0.83-0.99x the copy's time; Intel's runtime 1.01x; an earlier measurement had
 * 1.05-1.09x the other way). int8/FP8 V keeps the copy (it applies the row's scale once),
 * and so do kernels without plain steps (PLAIN_STEPS 0: d_k above 128 or a head dim not
 * whole vectors), which never read in place (the first of them leave V's prefetch to
 * the hardware too: V_FOLLOWS). docs/BENCHMARKS.md. */
#define V_IN_PLACE (CAN_PREFETCH && PLAIN_STEPS && !V_SCALED)
/* V rows read in step with their K rows — in place (V_IN_PLACE) or by the copy of whole
 * float16 vectors next to the K reads (UNIT_ROWS: d_k above 128 here) — are not
 * prefetched a step ahead when they follow the current step's in memory: the two
 * sequential streams are left to the hardware's prefetchers, as V_IN_PLACE kernels
 * always did. At d 192 and 256 that took 0.92-0.96x the time (PoCL, 30-40 rounds, MHA and
 * GQA, f32 and f16); rows that are not whole vectors keep the prefetch (d 72: 1.04-1.07x
 * without it), and so does int8/FP8 V. docs/BENCHMARKS.md. */
#define V_FOLLOWS (CAN_PREFETCH && UNIT_ROWS && !V_SCALED)
/* K rows a head-step ahead (PF_STEPS 1) that directly follow the step's — the next head's
 * rows in a page of 16 keys of a [pages, h_kv, page_size, d] pool — are left to the
 * hardware's prefetcher, which continues into them, on 16-lane CPUs (NV > 1) for rows of
 * whole vectors: on a 2-core AVX-512 Xeon (PoCL, 12 rounds, 2026-12-04) 0.89-1.01x the
 * time at 2 heads per work-item, 0.91-1.04x at 4 or 8; unmeasured on 8-lane ones (AVX2),
 * whose hardware prefetchers fell behind on contiguous K (the 0.84-0.89x above, a Zen 3),
 * and for other head dims (V's rule keeps their prefetch). The K scales (int8 / FP8)
 * keep theirs. docs/BENCHMARKS.md. */
#define K_FOLLOWS (CAN_PREFETCH && UNIT_ROWS && NV > 1)

/* The weighted sum's keys t0 … t1 − 1 for AP column blocks of SB rows (o_[r][c]), V vector
 * (t, column block col) from the step's copy (V_COPY) or in place (V_GLOBAL); TESTED:
 * keys of weight 0 skipped, not multiplied */
#define V_COPY(t, col) v_rows[(t) * N_AV + (col)]
#define V_GLOBAL(t, col) LD16(V_DT, v, vb0 + (t) * v_st.s2 + 16 * (col))
#define SUM_KEYS(VV, t0, t1, TESTED)                                                          \
    for (int t = (t0); t < (t1); t++)                                                       \
        _Pragma("unroll") for (int c = 0; c < AP; c++) {                                    \
            const float16 vv = VV(t, min(a0 + c, N_AV - 1));                                \
            _Pragma("unroll") for (int r = 0; r < SB; r++)                                  \
                if (r0 + r < NR && (!(TESTED) || p[r0 + r][t] != 0.0f))                     \
                    o_[r][c] = fma((float16)(p[r0 + r][t]), vv, o_[r][c]);                  \
        }

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void clattn_decode(FUSED_PARAMS
                                                                             SPLIT_PARAMS)
{
    const long rows = (long)group * n_q, x = get_global_id(0);
    if (x * NR >= rows)
        return; /* no barriers in this kernel */
    const long h_kv = h_q / group, bhk = get_global_id(1);
    const long b = bhk / (h_kv / NH), hk0 = bhk % (h_kv / NH) * NH; /* first KV head */
    VARLEN_ROWS(b); /* a packed batch: sequence b's rows */
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);

    /* row r of KV head hk0 + hh at index hh·NR + r (the visibility rule and ALiBi's
     * reference depend on the query only: NR of them) */
    float16 q16[NH * NR][N_QV], acc[NH * NR][N_AV];
    float m[NH * NR], slope[NH * NR];
    float16 l[NH * NR]; /* each row's running sum, lane-wise: one horizontal sum at the end */
    row_rule rule[NR]; /* visible keys of each row (none for rows past group·n_q) */
    long mbase[NH * NR], ref[NR];
    long klo = n_kv, khi = 0; /* keys any row of this work-item may see */
    for (int hr = 0; hr < NH * NR; hr++) { /* (setup and stores not unrolled: compile time) */
        const int r = hr % NR;
        const long rho = x * NR + r, h = (hk0 + hr / NR) * group + rho / n_q, i = rho % n_q;
        const bool real = rho < rows;
        const bool read = real && i < Q_ROWS(b); /* (varlen: not the next sequence's) */
        const long qb = read ? view_at(q_off, q_st, b, h, i, 0) : 0;
        for (int cv = 0; cv < N_QV; cv++)
            q16[hr][cv] = read ? TYPED(load_row16, Q_DT)(q, qb, q_st.s3, 16 * cv, D_K) : 0.0f;
        for (int a = 0; a < N_AV; a++)
            acc[hr][a] = 0.0f;
        m[hr] = -INFINITY;
        l[hr] = 0.0f;
        mbase[hr] = MASK_T && real ? view_at(mt_off, mt_st, b, h, i, 0) : 0;
        slope[hr] = ALIBI && real ? alibi[h] : 0.0f;
        if (hr >= NR)
            continue; /* the rule: once per row */
        rule[r] = rule_at(RULE_ARGS, b, real ? i : 0, n_q, n_kv);
        if (!real)
            rule[r].lo = rule[r].hi = 0;
        if (rule[r].hi > rule[r].lo) {
            klo = min(klo, rule[r].lo);
            khi = max(khi, rule[r].hi);
        }
        ref[r] = ALIBI ? alibi_ref(rule[r]) : 0;
    }
#if SPLITS /* this work-item's chunk of the keys its rows see */
    const long split = get_global_id(2);
    const long2 part = split_range(klo, khi, split, n_splits, chunk, 16);
    klo = part.x;
    khi = part.y;
#endif

    const bool unit = k_st.s3 == 1 && v_st.s3 == 1; /* (rows' column strides) */
    float p[NR][16];              /* scores, then weights, of the step's 16 keys */
    float16 v_rows[16 * N_AV];    /* the step's V rows, as float, copied in memory order */
    for (long j0 = klo / 16 * 16; j0 < khi; j0 += 16) {
        const int tlo = rel_bound(klo, j0, 16), thi = rel_bound(khi, j0, 16);
        /* the step's first K and V rows; with pages, the others follow them when the step
         * lies in one page (one table read per step, not per key) */
        const bool one_page = rows_contiguous(j0, 16 KV_PAGES);
        /* the step for each KV head in turn: with pages, a page's heads lie next to each
         * other in the pool, so NH > 1 reads NH heads' rows as one stretch */
#pragma unroll 1
        for (int hh = 0; hh < NH; hh++) {
            const long hk = hk0 + hh;
            const int R = hh * NR; /* this head's rows in q16, acc, m, l, mbase, slope */
            const long kb0 = kv_row(k_off, k_st, b, hk, j0 KV_PAGES);
            const long vb0 = kv_row(v_off, v_st, b, hk, j0 KV_PAGES);
#if CAN_PREFETCH
            /* the rows PF_STEPS head-steps ahead in the order they are read (NH > 1: the
             * same head's step ahead would be NH·PF_STEPS head-steps away, more than the L1
             * cache holds), where that step is whole: as one stretch in one page, or row
             * by row through the table where it crosses pages (PREFETCH_PAGED_ROW) */
            const int ahead = hh + PF_STEPS;
            const long jp = j0 + 16 * (ahead / NH), hp = hk0 + ahead % NH;
            long pfk = -1, pfv = -1;
            bool pf_rows = false; /* the step ahead crosses pages: row by row */
            if (jp + 16 <= khi && unit && !rows_contiguous(jp, 16 KV_PAGES))
                pf_rows = PAGED;
            else if (jp + 16 <= khi && unit) {
                pfk = kv_row(k_off, k_st, b, hp, jp KV_PAGES);
                pfv = kv_row(v_off, v_st, b, hp, jp KV_PAGES);
                if (V_FOLLOWS && pfv == vb0 + 16 * PF_STEPS * v_st.s2)
                    pfv = -1; /* V follows on: read next to its K rows in its step */
#if K_SCALED /* int8 / FP8: the step's scales (one line per head and page) */
                if (pfk >= 0)
                    PREFETCH_LINE((__global const char *)(k_sc + kv_row(ks_off, ks_st, b, hp,
                                                                          jp KV_PAGES)));
#endif
#if V_SCALED
                if (pfv >= 0)
                    PREFETCH_LINE((__global const char *)(v_sc + kv_row(vs_off, vs_st, b, hp,
                                                                          jp KV_PAGES)));
#endif
                if (K_FOLLOWS && PF_STEPS == 1 && pfk == kb0 + 16 * k_st.s2)
                    pfk = -1; /* K follows on (after its scales' prefetch) */
            }
#endif
            bool in_place = false; /* this step's V read in place (V_IN_PLACE, whole steps) */
            /* Fast steps: whole, in one page, rows with unit column stride and whole vectors
             * (plain loads at fixed offsets); the others go through the general helpers. */
#if PLAIN_STEPS
            if (one_page && tlo == 0 && thi == 16 && unit) {
                STEP_SCORES(kb0 + t * k_st.s2, vb0 + t * v_st.s2, LD16(K_DT, k, KB + 16 * cv),
                            LD16(V_DT, v, VB + 16 * a), g + u, !V_IN_PLACE)
                in_place = V_IN_PLACE;
            } else
#endif
            {
                STEP_SCORES(one_page ? kb0 + t * k_st.s2
                                     : kv_row(k_off, k_st, b, hk, j0 + t KV_PAGES),
                            one_page ? vb0 + t * v_st.s2
                                     : kv_row(v_off, v_st, b, hk, j0 + t KV_PAGES),
                            TYPED(load_row16, K_DT)(k, KB, k_st.s3, 16 * cv, D_K),
                            TYPED(load_row16, V_DT)(v, VB, v_st.s3, 16 * a, D_V),
                            clamp(g + u, tlo, thi - 1), true)
            }
            /* the online softmax of each row over the 16 keys */
            bool zero = false; /* some weight of the step is 0: test each in the sum */
            for (int r = 0; r < NR; r++) {
                const int lo = rel_bound(rule[r].lo, j0, 16), hi = rel_bound(rule[r].hi, j0, 16);
                const int self = rel_key(rule[r].self, j0, 16);
                float16 s = vload16(0, p[r]) * scale;
                const long rho = x * NR + r; /* query head hk·group + ρ / n_q, row ρ mod n_q */
                if (SCORE_TERMS || lo > 0 || hi < 16 || self >= 0)
                    s = score_terms16(s, lane, lo, hi, self, j0, n_kv, TERM_ARGS, mbase[R + r],
                                      rule[r].diag, slope[R + r], ref[r], b,
                                      hk * group + rho / n_q, rho % n_q);
                const float m_new = max_nan(m[R + r], hmax_nan(s));
                if (m_new == -INFINITY) { /* nothing visible yet: weights 0 */
                    vstore16((float16)(0.0f), 0, p[r]);
                    zero = true;
                    continue;
                }
                rescale_row(acc[R + r], N_AV, &l[R + r], m[R + r], m_new);
                m[R + r] = m_new;
                const float16 w = exp_softmax16(s - m_new);
                l[R + r] += w;
                zero |= any(w == 0.0f);
                vstore16(w, 0, p[r]);
            }
            /* the weighted sum: for AP blocks of 16 columns of V at a time, SB rows'
             * accumulators in registers over the step's keys (SB·AP independent chains of FMAs),
             * each V vector feeding SB FMAs. Without a weight of 0 the step is whole (keys
             * outside [tlo, thi) weigh 0) and needs no test. The step's sum starts from 0 and
             * is added to the row's accumulator afterwards: a sum over n keys then rounds n/16
             * times into acc, not n times (SEMANTICS.md, "Accuracy over many keys"). */
            for (int a0 = 0; a0 < N_AV; a0 += AP)
                for (int r0 = 0; r0 < NR; r0 += SB) {
                    float16 o_[SB][AP];
#pragma unroll
                    for (int r = 0; r < SB; r++)
#pragma unroll
                        for (int c = 0; c < AP; c++)
                            o_[r][c] = 0.0f;
                    if (!zero && in_place) {
#pragma unroll 4
                        SUM_KEYS(V_GLOBAL, 0, 16, false)
                    } else if (!zero) {
#pragma unroll 4
                        SUM_KEYS(V_COPY, 0, 16, false)
                    } else if (in_place) {
                        SUM_KEYS(V_GLOBAL, tlo, thi, true)
                    } else {
                        SUM_KEYS(V_COPY, tlo, thi, true)
                    }
#pragma unroll
                    for (int r = 0; r < SB; r++)
#pragma unroll
                        for (int c = 0; c < AP; c++)
                            if (r0 + r < NR && a0 + c < N_AV)
                                acc[R + r0 + r][a0 + c] += o_[r][c];
                }
        } /* hh */
    }
    for (int hr = 0; hr < NH * NR; hr++) {
        const int r = hr % NR;
        const long rho = x * NR + r, h = (hk0 + hr / NR) * group + rho / n_q, i = rho % n_q;
        if (rho >= rows)
            continue;
#if SPLITS /* the chunk's partial O and LSE (relative), for split_merge.cl */
        const long prow = ((b * h_q + h) * n_q + i) * n_splits + split;
        const float lt = hsum(l[hr]);
        const bool empty = m[hr] == -INFINITY;
        float out[D_V_PAD];
        for (int a = 0; a < N_AV; a++)
            vstore16(empty ? (float16)(0.0f) : acc[hr][a] / lt, a, out);
        __global float *po = (__global float *)o + prow * D_V;
        for (int c = 0; c < D_V; c++)
            po[c] = out[c];
        ((__global float *)lse)[prow] = empty ? -INFINITY : m[hr] + log(lt);
#else
        STORE_ROW(acc[hr], m[hr], hsum(l[hr]), slope[hr], ref[r]);
#endif
    }
}
