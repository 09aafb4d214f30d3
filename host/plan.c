/* Planning: which algorithm runs and why, which kernels with which -D options and
 * blocking, and the workspace. This (with plan_gpu.c, the GPU family's fused kernel) is
 * the only place program option strings are made. The blocking values come from
 * tuning.c. */
#include "internal.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#define CL_STD CLATTN_CL_STD
#define DECODE_MAX_N_Q 16  /* fused: up to this many queries stream K and V (decode.cl) */
#define MAX_SOFTMAX_WG 256 /* softmax: work-items per row */
#define MAX_HEAD_DIM 4096  /* beyond this, private arrays and tiles make no sense */
#define PLURAL(n) ((n) == 1 ? "" : "s") /* reasons: "1 key", "2 keys" */

static size_t pow2_at_least(int64_t n, size_t cap)
{
    size_t p = 1;
    while ((int64_t)p < n && p < cap)
        p *= 2;
    return p;
}

/* Appends to the plan's one-line reason; a text cut by the buffer ends in "..." */
static void add_reason(clattn_exec_plan *p, const char *fmt, ...)
{
    const size_t at = strlen(p->reason);
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(p->reason + at, sizeof p->reason - at, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= sizeof p->reason - at)
        memcpy(p->reason + sizeof p->reason - 4, "...", 4);
}

/* Builds `file` with `dims` (e.g. "-DD_K=64") and the blocking tuning.c chooses for the
 * request: on CPUs, where a work-item is a loop iteration, several queries per
 * work-item (register blocking); on GPUs one, to spare registers. A wg_request of 0
 * chooses; otherwise exactly that many work-items or CLATTN_ERROR_UNSUPPORTED. */
static clattn_status build_blocked(clattn_context *ctx, const char *file, const char *dims,
                                   const clattn_blocking_request *r, clattn_blocked *out)
{
    size_t rq, wg, tile_kv, limit;
    bool wg_fixed;
    clattn_tuning_choose(ctx, r, &rq, &wg, &tile_kv, &limit, &wg_fixed);
    if (wg > limit)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "work_group_size %zu exceeds the limit %zu for %s on this device "
                           "(CL_DEVICE_MAX_WORK_GROUP_SIZE, and on CPUs the stack the "
                           "work-group's private arrays need)",
                           wg, limit, file);
    if (tile_kv != r->tile_cap && clattn_fit_tile_kv(ctx, r->local_per_key, tile_kv) != tile_kv)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "tile_kv %zu: the %s kernel's tiles exceed the device's local memory "
                           "(%llu bytes)",
                           tile_kv, file, (unsigned long long)ctx->local_mem);
    for (;;) {
        char opts[512];
        snprintf(opts, sizeof opts, CL_STD " %s -DTILE_KV=%zu -DWG=%zu -DRQ=%zu -DNV=%d", dims,
                 tile_kv, wg, rq, clattn_tuning_vectors(ctx, rq));
        clattn_status st = clattn_get_kernel(ctx, file, opts, &out->entry);
        if (st != CLATTN_SUCCESS)
            return st;
        if (out->entry->kernel_wg_max >= wg)
            break;
        if (wg_fixed || wg == 1)
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "work_group_size %zu exceeds the %s kernel's limit %zu "
                               "(CL_KERNEL_WORK_GROUP_SIZE)",
                               wg, file, out->entry->kernel_wg_max);
        wg /= 2;
    }
    out->rq = rq;
    out->wg = wg;
    out->tile_kv = tile_kv;
    return CLATTN_SUCCESS;
}

/* scores.cl for head dim d = d_k, or weighted_sum.cl for d = d_v, or why not (local
 * memory: K rows of d_k floats, or V rows padded to 16 floats). */
static clattn_status tiled_stage_kernel(clattn_context *ctx, clattn_kernel kernel, int64_t n_q,
                                        int64_t d, const char *feat, clattn_blocked *out)
{
    const bool scores = kernel == CLATTN_KERNEL_SCORES;
    const int64_t per_key = scores ? d : clattn_ceil_div(d, 16) * 16;
    const size_t t = clattn_fit_tile_kv(ctx, per_key, clattn_default_tile_kv(ctx, false, 0));
    if (t == 0)
        return clattn_fail(
            ctx, CLATTN_ERROR_UNSUPPORTED,
            "%s: 16 rows of %s with %s %lld (%llu bytes) exceed the %llu bytes of local memory "
            "the tiles may use (CL_DEVICE_LOCAL_MEM_SIZE %llu, less 1024 for the kernel's own)",
            scores ? "scores" : "weighted sum", scores ? "K" : "V", scores ? "d_k" : "d_v",
            (long long)d, (unsigned long long)(16 * per_key * sizeof(float)),
            (unsigned long long)clattn_local_tile_budget(ctx), (unsigned long long)ctx->local_mem);
    char dims[384];
    snprintf(dims, sizeof dims, "-D%s=%lld %s", scores ? "D_K" : "D_V", (long long)d, feat);
    /* private floats per query: 16 + 2 per key (scores), d_v + 16 + 1 per key (sum) */
    const int64_t priv = scores ? 16 : per_key + 16, priv_key = scores ? 2 : 1;
    const clattn_blocking_request r = {
        kernel, scores ? d : 0, scores ? 0 : d, n_q, priv, priv_key, per_key, t, 0};
    return build_blocked(ctx, scores ? "scores.cl" : "weighted_sum.cl", dims, &r, out);
}

/* The options of the programs that turn scores into weights (softmax.cl,
 * weights_from_lse.cl): the LSE's dtype, the desc's dropout and how ALiBi is referenced. */
static void weights_options(char *opts, size_t len, clattn_dtype lse_dt,
                            const clattn_attention_desc *desc)
{
    snprintf(opts, len, CL_STD "%s%s%s", lse_dt == CLATTN_FLOAT64 ? " -DLSE_DT=4" : "",
             desc && desc->dropout_p > 0.0f ? " -DDROPOUT=1" : "",
             clattn_alibi_absolute(desc) ? " -DALIBI_ABSOLUTE=1" : "");
}

static clattn_status from_lse_kernel(clattn_context *ctx, clattn_dtype lse_dt,
                                     const clattn_attention_desc *desc, clattn_program_entry **out)
{
    char opts[96];
    weights_options(opts, sizeof opts, lse_dt, desc);
    return clattn_get_kernel(ctx, "weights_from_lse.cl", opts, out);
}

/* Softmax work-group: the caller's size if it is legal, else a power of two covering
 * the row, capped by the kernel's limit. */
static clattn_status softmax_kernel(clattn_context *ctx, const clattn_attention_desc *desc,
                                    int64_t width, clattn_dtype lse_dt, clattn_program_entry **out,
                                    size_t *wg)
{
    char opts[96];
    weights_options(opts, sizeof opts, lse_dt, desc);
    const clattn_status st = clattn_get_kernel(ctx, "softmax.cl", opts, out);
    if (st != CLATTN_SUCCESS)
        return st;
    size_t limit = (*out)->kernel_wg_max < ctx->max_wi[0] ? (*out)->kernel_wg_max : ctx->max_wi[0];
    size_t want = desc ? desc->work_group_size : 0;
    if (want > 0) {
        if (want > limit)
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "work_group_size %zu exceeds the softmax kernel's limit %zu "
                               "(CL_KERNEL_WORK_GROUP_SIZE / CL_DEVICE_MAX_WORK_ITEM_SIZES)",
                               want, limit);
        *wg = want;
    } else if (ctx->device_type & CL_DEVICE_TYPE_CPU) {
        *wg = 1; /* a row per work-item, 16 lanes at a time: no reduction, one JIT size */
    } else {     /* (a power of two: halved below a cap that is not one) */
        const size_t cap = limit < MAX_SOFTMAX_WG ? limit : MAX_SOFTMAX_WG;
        for (*wg = pow2_at_least(width, cap); *wg > cap;)
            *wg /= 2;
    }
    return CLATTN_SUCCESS;
}
/* What a call adds to the plain problem: the desc's optional terms and outputs, and
 * the storage types, as compile-time options of the kernels that read them. */
typedef struct features {
    char opts[256];      /* "-DQ_DT=1 … -DMASK_T=2 -DALIBI=1 -DSOFTCAP=0 …" */
    bool weights;        /* weights requested */
    bool head_mean;      /* … averaged over heads */
    bool lse;            /* LSE requested */
    clattn_dtype lse_dt; /* its dtype (float32 or float64) */
    bool quantized;      /* an int8 K or V with scales */
} features;

/* The -D options of the storage types and score terms; a type of -1 is left out. */
static void term_options(char *out, size_t len, int q_dt, int k_dt, int v_dt, int o_dt,
                         const clattn_view *mask, const clattn_attention_desc *desc)
{
    const int mask_t = !mask ? 0 : mask->dtype == CLATTN_BOOL ? 1 : 2;
    const char *names[4] = {"Q_DT", "K_DT", "V_DT", "O_DT"};
    const int dts[4] = {q_dt, k_dt, v_dt, o_dt};
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < 4; i++)
        if (dts[i] >= 0)
            at += (size_t)snprintf(out + at, len - at, "-D%s=%d ", names[i], dts[i]);
    if (desc) /* DROPOUT only when on: the programs without it keep their options */
        snprintf(out + at, len - at, "-DMASK_T=%d -DALIBI=%d -DSOFTCAP=%d%s", mask_t,
                 desc->alibi_slopes != NULL, desc->softcap > 0.0f,
                 desc->dropout_p > 0.0f ? " -DDROPOUT=1" : "");
}

static clattn_status make_features(clattn_context *ctx, const clattn_problem *p, features *f)
{
    /* with rotary embeddings the kernels read the rotated Q, a float32 workspace */
    const int q_dt = p->desc && p->desc->rotary ? (int)CLATTN_FLOAT32 : (int)p->q.dtype;
    term_options(f->opts, sizeof f->opts, q_dt, (int)p->k.dtype, (int)p->v.dtype, (int)p->o.dtype,
                 p->has_mask ? &p->mask : NULL, p->desc);
    f->weights = p->has_w;
    f->head_mean = p->has_w && p->desc->weights_head_mean;
    f->lse = p->has_lse;
    f->lse_dt = p->has_lse ? p->lse.dtype : CLATTN_FLOAT32;
    if (f->lse_dt == CLATTN_FLOAT64) { /* the kernels that write the LSE store doubles */
        const size_t at = strlen(f->opts);
        snprintf(f->opts + at, sizeof f->opts - at, " -DLSE_DT=4");
    }
    if (p->k.paged) { /* K and V rows through the block table (common.cl kv_row) */
        const size_t at = strlen(f->opts);
        snprintf(f->opts + at, sizeof f->opts - at, " -DPAGED=1");
    }
    f->quantized = clattn_problem_quantized(p);
    if (p->varlen) { /* a packed batch in one launch (rows.cl VARLEN_ROWS) */
        const size_t at = strlen(f->opts);
        snprintf(f->opts + at, sizeof f->opts - at, " -DVARLEN=1");
    }
    if (p->has_k_scale || p->has_v_scale) { /* int8 / FP8 K or V scales (common.cl kv_scale) */
        const size_t at = strlen(f->opts);
        snprintf(f->opts + at, sizeof f->opts - at, " -DK_SCALED=%d -DV_SCALED=%d",
                 (int)p->has_k_scale, (int)p->has_v_scale);
    }
    clattn_status st =
        clattn_block_mask_check(ctx, p->desc, p->q.n[0], p->q.n[1], p->q.n[2], p->k.n[2]);
    if (st == CLATTN_SUCCESS && p->desc && p->desc->mods && p->desc->mods->block_mask) {
        const size_t at = strlen(f->opts); /* the fused kernels skip by it (common.cl) */
        snprintf(f->opts + at, sizeof f->opts - at, " -DBLOCK_MASK=1");
    }
    const size_t at = strlen(f->opts); /* the snippets, by their hash (mods.c) */
    return st != CLATTN_SUCCESS
               ? st
               : clattn_mods_options(ctx, p->desc, f->opts + at, sizeof f->opts - at);
}

/* Why the fused algorithm cannot run this shape here ("" when it can); picks the tiled
 * kernel's tile (decode.cl stages nothing in local memory: only the head dims count). */
static size_t fused_fit(const clattn_context *ctx, int64_t d_k, int64_t d_v, bool decode, bool gpu,
                        bool half, char *why, size_t why_len)
{
    why[0] = '\0';
    const int64_t per_key = d_k + clattn_ceil_div(d_v, 16) * 16; /* K, V floats per key */
    size_t t = clattn_fit_tile_kv(ctx, per_key, clattn_default_tile_kv(ctx, true, per_key));
    bool kv_shared;
    if (gpu && !decode) /* the GPU family's smallest blocking: 1 row, 16 work-items, 16 keys */
        t = clattn_gpu_fits(ctx, d_k, d_v, 1, 16, 16, half, &kv_shared) ? 16 : 0;
    if (d_k > MAX_HEAD_DIM || d_v > MAX_HEAD_DIM)
        snprintf(why, why_len, "fused: head dims above %d are not supported", MAX_HEAD_DIM);
    else if (t == 0 && !decode && gpu)
        snprintf(why, why_len,
                 "fused: the GPU family's smallest blocking (1 row per work-item, 16 "
                 "work-items, 16 keys) needs more than the %llu bytes of local memory the "
                 "tiles may use (CL_DEVICE_LOCAL_MEM_SIZE %llu, less 1024)",
                 (unsigned long long)clattn_local_tile_budget(ctx),
                 (unsigned long long)ctx->local_mem);
    else if (t == 0 && !decode)
        snprintf(why, why_len,
                 "fused: 16 key rows of K and V (%llu bytes) exceed the %llu bytes of local "
                 "memory the tiles may use (CL_DEVICE_LOCAL_MEM_SIZE %llu, less 1024 for the "
                 "kernel's own)",
                 (unsigned long long)(16 * per_key * sizeof(float)),
                 (unsigned long long)clattn_local_tile_budget(ctx),
                 (unsigned long long)ctx->local_mem);
    return t;
}

/* Bytes of a packed float32 [a, b, c, d] workspace into *out, or false (overflow or
 * more than the device allocates at once; `why` says which). */
static bool workspace_fits(const clattn_context *ctx, int64_t a, int64_t b, int64_t c, int64_t d,
                           const char *what, int64_t *out, char *why, size_t why_len)
{
    int64_t n;
    if (!clattn_mul_ok(a, b, &n) || !clattn_mul_ok(n, c, &n) || !clattn_mul_ok(n, d, &n) ||
        !clattn_mul_ok(n, 4, &n)) {
        snprintf(why, why_len, "%s: the size overflows", what);
        return false;
    }
    if ((cl_ulong)n > ctx->max_alloc) {
        snprintf(why, why_len,
                 "%s: the %lld-byte buffer exceeds CL_DEVICE_MAX_MEM_ALLOC_SIZE (%llu bytes)", what,
                 (long long)n, (unsigned long long)ctx->max_alloc);
        return false;
    }
    *out = n;
    return true;
}

/* decode.cl's split-KV (CPU family): work-items ≥ 16 per compute unit (PoCL hands them to
 * its threads one by one, so the last ones even out threads that ran slower: 8 KV heads of
 * a batch-1 float16 GQA decode on 2 cores ran 65-92 % of the read bandwidth from one run to
 * the next unsplit, docs/BENCHMARKS.md), in at most ⌈n_kv / 2048⌉ chunks (a chunk's setup
 * and partial rows stay small next to its stream; chunks of 1024 keys and more, a little
 * fewer where split_chunk rounds the work-items to the compute units) */
#define CPU_DECODE_PER_UNIT 16
#define CPU_DECODE_MIN_CHUNK 2048

/* Split-KV chunk length for a span of n_kv keys (clattn_rule_span: the keys a work-item's
 * rows see together) over `blocks` work-groups: the context's count
 * (clattn_context_set_decode_splits; 1: none) or enough for `want` work-groups, at most
 * ⌈n_kv / min_chunk⌉ (then rounded up to a multiple of `units` work-groups) and
 * DECODE_MAX_SPLITS chunks; whole steps of `step` keys, so that the chunks may be fewer
 * than asked. At least n_kv when nothing is split. */
#define DECODE_MAX_SPLITS 256
static int64_t split_chunk(const clattn_context *ctx, int64_t n_kv, int64_t blocks, int64_t want,
                           int64_t min_chunk, int64_t step, int64_t units)
{
    int64_t splits = ctx->decode_splits;
    if (splits <= 0) {
        if (blocks < 1)
            blocks = 1;
        splits = clattn_ceil_div(want, blocks);
        const int64_t most = clattn_ceil_div(n_kv, min_chunk > 0 ? min_chunk : 1);
        if (splits > most)
            splits = most;
        /* few work-items: a multiple of `units` of them (3 chunks on 2 cores left one
         * core idle for a third of the call), the chunks a little shorter */
        if (units > 1 && splits > 1 && splits * blocks < want && (splits * blocks) % units)
            splits = clattn_ceil_div((splits * blocks + units - 1) / units * units, blocks);
    }
    if (splits > DECODE_MAX_SPLITS)
        splits = DECODE_MAX_SPLITS;
    if (splits > n_kv)
        splits = n_kv;
    if (splits < 1)
        splits = 1;
    return clattn_ceil_div(clattn_ceil_div(n_kv, splits), step) * step;
}

/* The kernels' least chunk length (their `chunk`; common.cl split_range cuts a work-item's
 * span, from its first visible key down to a whole step, into n_splits chunks of whole
 * steps, at least this long): the planned chunk, or min_chunk where shorter, so that a row
 * seeing fewer keys than the span (a shorter kv_lens, even in a cl_mem) still spreads
 * them over chunks of min_chunk keys, not the first chunk alone. */
static int64_t split_least(int64_t chunk, int64_t min_chunk)
{
    return chunk < min_chunk ? chunk : min_chunk;
}

/* split_merge.cl for d_v (both families' split-KV decoding) */
static clattn_status merge_kernel(clattn_context *ctx, int64_t d_v, const features *f,
                                  clattn_program_entry **out)
{
    char opts[512];
    snprintf(opts, sizeof opts, CL_STD " -DD_V=%lld %s", (long long)d_v, f->opts);
    return clattn_get_kernel(ctx, "split_merge.cl", opts, out);
}

/* decode.cl: NR rows (query heads x queries of a KV head) of NH KV heads per work-item, one
 * per work-group (its default WG); NV sizes its register blocks; CPU_PREFETCH: context.c;
 * PF_L2 (prefetches into L2 where K's heads interleave in its rows): decode.cl.
 * With may_split (no weights, key sums or max logits asked, and keys to read), split-KV
 * where the work-items are too few (split_chunk), merged by split_merge.cl. */
static clattn_status decode_kernel(clattn_context *ctx, const clattn_problem *pr, int64_t group,
                                   const features *f, bool may_split, clattn_blocked *out)
{
    const int64_t rows = group * pr->q.n[2], d_k = pr->q.n[3], d_v = pr->v.n[3];
    const int64_t span = clattn_rule_span(pr->desc, pr->q.n[2], pr->k.n[2]);
    const size_t nr = clattn_decode_rows(ctx, rows, d_k, d_v),
                 nh = clattn_decode_heads(ctx, &pr->k, rows, nr, d_v, may_split);
    const int64_t blocks =
        pr->q.n[0] * (pr->k.n[1] / (int64_t)nh) * clattn_ceil_div(rows, (int64_t)nr);
    const int64_t chunk =
        may_split ? split_chunk(ctx, span, blocks,
                                CPU_DECODE_PER_UNIT *
                                    (int64_t)(ctx->compute_units ? ctx->compute_units : 1),
                                CPU_DECODE_MIN_CHUNK, 16, (int64_t)ctx->compute_units)
                  : span;
    const bool split = chunk < span,
               l2 = ctx->cpu_prefetch == 1 && clattn_kv_heads_interleave(&pr->k);
    char opts[512];
    snprintf(opts, sizeof opts,
             CL_STD " -DD_K=%lld -DD_V=%lld -DNR=%zu -DNH=%zu -DNV=%d -DCPU_PREFETCH=%d -DPF_L2=%d"
                    " -DSPLITS=%d %s",
             (long long)d_k, (long long)d_v, nr, nh, clattn_tuning_vectors(ctx, nr),
             ctx->cpu_prefetch, l2, split, f->opts);
    clattn_program_entry *entry = NULL, *merge = NULL;
    clattn_status st = clattn_get_kernel(ctx, "decode.cl", opts, &entry);
    if (st == CLATTN_SUCCESS && split)
        st = merge_kernel(ctx, d_v, f, &merge);
    if (st == CLATTN_SUCCESS)
        *out = (clattn_blocked){.rq = nr,
                                .wg = 1,
                                .tile_kv = 16,
                                .decode = true,
                                .heads = nh,
                                .pf_l2 = l2,
                                .entry = entry,
                                .merge = merge,
                                .split_chunk = split ? split_least(chunk, CPU_DECODE_MIN_CHUNK) : 0,
                                .n_splits = split ? (size_t)clattn_ceil_div(span, chunk) : 0};
    return st;
}
/* decode_gpu.cl + split_merge.cl (the GPU family's decoding): RB rows of a KV head per
 * work-group of WG keys per step; the keys cut into splits so that batch x KV heads x row
 * blocks x splits work-groups are ≥ 16 per compute unit, ≥ 4 steps per split (an H200,
 * (1, 32, 8, 32768) f16: 64 splits 4.7x faster than 16 with the staged kernel of
 * 2026-12-01, 1.45x with the direct loads of 2026-12-04; 256 slower; docs/BENCHMARKS.md),
 * unless CLATTN_DECODE_SPLITS or clattn_context_set_decode_splits() sets the count. */
#define GPU_DECODE_WG 128

/* decode_gpu.cl's local memory in bytes for rb rows per group (its local arrays: q_s,
 * s_s, red, psum, comb_l), or -1 where its work-items cannot share a key (16 columns
 * each) or a value row (8 each): d_k above 16·WG or d_v above 8·WG */
static int64_t decode_gpu_local(int64_t d_k, int64_t d_v, size_t rb)
{
    const int64_t wg = GPU_DECODE_WG, r = (int64_t)rb;
    const int64_t lk = clattn_ceil_div(d_k, 16), lv = clattn_ceil_div(d_v, 8);
    if (lk > wg || lv > wg || lk < 1 || lv < 1)
        return -1;
    const int64_t part_rs = wg + (lk >= 32 ? 1 : 32 / lk), vr = wg / lv;
    const int64_t sums = r * lk * part_rs, comb = vr * r * lv * 8;
    return (r * lk * 16 + r * wg + r * 16 + (sums > comb ? sums : comb) + r * vr) *
               (int64_t)sizeof(float) +
           16;
}
static clattn_status decode_gpu_kernel(clattn_context *ctx, const clattn_problem *pr, int64_t group,
                                       const features *f, clattn_blocked *out)
{
    const int64_t n_q = pr->q.n[2], d_k = pr->q.n[3], d_v = pr->v.n[3];
    const int64_t span = clattn_rule_span(pr->desc, n_q, pr->k.n[2]), rows = group * n_q;
    size_t rb = rows < 1 ? 1 : rows < 8 ? (size_t)rows : 8;
    const int64_t budget = (int64_t)clattn_local_tile_budget(ctx);
    int64_t need = decode_gpu_local(d_k, d_v, rb);
    while (rb > 1 && need > budget)
        need = decode_gpu_local(d_k, d_v, --rb);
    if (need < 0 || need > budget)
        /* head dims too big: decode.cl unsplit (its split counts are sized for CPUs) */
        return decode_kernel(ctx, pr, group, f, false, out);
    const int64_t blocks = pr->q.n[0] * pr->k.n[1] * clattn_ceil_div(rows, (int64_t)rb);
    /* (one split of all keys, as the merge of one part, where the count is 1) */
    const int64_t chunk =
        split_chunk(ctx, span, blocks, 16 * (int64_t)(ctx->compute_units ? ctx->compute_units : 1),
                    4 * GPU_DECODE_WG, GPU_DECODE_WG, 1);
    char opts[512];
    snprintf(opts, sizeof opts, CL_STD " -DD_K=%lld -DD_V=%lld -DWG=%d -DRB=%zu %s", (long long)d_k,
             (long long)d_v, GPU_DECODE_WG, rb, f->opts);
    clattn_status st = clattn_get_kernel(ctx, "decode_gpu.cl", opts, &out->entry);
    if (st != CLATTN_SUCCESS)
        return st;
    if (out->entry->kernel_wg_max < GPU_DECODE_WG)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "GPU family decode kernel: %d work-items exceed the kernel's limit %zu "
                           "(CL_KERNEL_WORK_GROUP_SIZE)",
                           GPU_DECODE_WG, out->entry->kernel_wg_max);
    if ((st = merge_kernel(ctx, d_v, f, &out->merge)) != CLATTN_SUCCESS)
        return st;
    out->rq = 1;
    out->wg = GPU_DECODE_WG;
    out->tile_kv = GPU_DECODE_WG;
    out->rows = rb;
    out->decode = true;
    out->heads = 1;
    out->split_chunk = split_least(chunk, 4 * GPU_DECODE_WG);
    out->n_splits = (size_t)clattn_ceil_div(span, chunk);
    return CLATTN_SUCCESS;
}

/* fused.cl with the blocking tuning.c chooses (tile: what local memory allows) */
static clattn_status fused_kernel(clattn_context *ctx, int64_t n_q, int64_t d_k, int64_t d_v,
                                  size_t tile, size_t wg_request, const char *feat,
                                  clattn_blocked *out)
{
    char dims[384];
    snprintf(dims, sizeof dims, "-DD_K=%lld -DD_V=%lld %s", (long long)d_k, (long long)d_v, feat);
    /* private floats per query: q row, accumulator, lane sums, maxima, a tile's scores/weights */
    const int64_t d_v_pad = clattn_ceil_div(d_v, 16) * 16;
    const clattn_blocking_request r = {
        CLATTN_KERNEL_FUSED, d_k, d_v, n_q, d_k + d_v_pad + 40, 2, d_k + d_v_pad, tile, wg_request};
    return build_blocked(ctx, "fused.cl", dims, &r, out);
}

/* append.cl (desc.k_new / v_new) and rope_q.cl (desc.rotary), which run before the
 * attention; their workspace (the rotated Q, float32) counts in the plan's. */
static clattn_status plan_append(clattn_context *ctx, const clattn_problem *pr, clattn_exec_plan *p)
{
    if (!pr->has_append)
        return CLATTN_SUCCESS;
    const bool rope = pr->desc->rotary != NULL;
    const bool table = rope && (pr->desc->rotary->cos_table || pr->desc->rotary->table_buffer);
    const char *fp64 = table                   ? " -DROPE_TABLE=1" /* the caller's tables */
                       : rope && ctx->has_fp64 ? " -DROPE_FP64=1"
                                               : "";
    char opts[320];
    snprintf(opts, sizeof opts,
             CL_STD " -DKN_DT=%d -DVN_DT=%d -DK_DT=%d -DV_DT=%d -DPAGED=%d -DROPE=%d%s",
             (int)pr->k_new.dtype, (int)pr->v_new.dtype, (int)pr->k.dtype, (int)pr->v.dtype,
             pr->k.paged ? 1 : 0, rope ? 1 : 0, fp64);
    clattn_status st = clattn_get_kernel(ctx, "append.cl", opts, &p->append);
    if (st != CLATTN_SUCCESS || !rope)
        return st;
    snprintf(opts, sizeof opts, CL_STD " -DQ_DT=%d -DROPE=1%s", (int)pr->q.dtype, fp64);
    if ((st = clattn_get_kernel(ctx, "rope_q.cl", opts, &p->rope_q)) != CLATTN_SUCCESS)
        return st;
    p->workspace_bytes = pr->q.count * 4;
    return CLATTN_SUCCESS;
}

clattn_status clattn_plan_attention(clattn_context *ctx, const clattn_problem *pr,
                                    clattn_exec_plan *p)
{
    memset(p, 0, sizeof *p);
    const clattn_attention_desc *desc = pr->desc;
    const clattn_view *q = &pr->q, *k = &pr->k, *v = &pr->v;
    features feat;
    clattn_status st0 = make_features(ctx, pr, &feat);
    if (st0 != CLATTN_SUCCESS)
        return st0;
    const features *f = &feat;
    const int64_t batch = q->n[0], h_q = q->n[1], n_q = q->n[2], d_k = q->n[3];
    const int64_t n_kv = k->n[2], d_v = v->n[3];
    if (h_q > INT_MAX || d_k > INT_MAX || d_v > INT_MAX)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "heads or head dims above INT_MAX");
    if (f->lse_dt == CLATTN_FLOAT64 && !ctx->has_fp64)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "a float64 LSE needs cl_khr_fp64, which %s does not have (use a "
                           "float32 LSE)",
                           ctx->device_name);

    /* a few queries (decoding) share nothing between queries: decode.cl streams K and V
     * once per KV head for all its query heads; with no keys it writes the empty rows
     * (dropout: the tiled kernels, which draw it; the decode kernels do not; batch
     * invariance: the tiled kernels, whose rows' arithmetic does not depend on n_q) */
    const bool decode = n_kv == 0 || (n_q <= DECODE_MAX_N_Q && desc->work_group_size == 0 &&
                                      desc->dropout_p == 0.0f && !desc->batch_invariant);
    const bool gpu = clattn_context_kernel_family(ctx) == CLATTN_KERNEL_FAMILY_GPU;
    const char *half_no = clattn_half_math_why_not(ctx, pr, decode, gpu); /* NULL: it runs */
    /* the n_q the tiled kernels' blocking is chosen for: batch invariance takes one for
     * every shape (stored tuning applies from n_q >= RQ x WG on, tuning.c) */
    const int64_t blocking_n_q = desc->batch_invariant ? INT64_MAX / 4 : n_q;
    const int64_t group = clattn_group(h_q, k->n[1]); /* query heads per KV head */
    /* workspaces: the unfused n_q×n_kv scores (unless they go straight into the
     * caller's weights), the per-head weights before averaging, the fused LSE */
    char fused_why[200], unfused_why[200] = "";
    const size_t fused_tile =
        fused_fit(ctx, d_k, d_v, decode, gpu, half_no == NULL, fused_why, sizeof fused_why);
    int64_t ws_scores = 0, ws_lse = 0, ws_fused = 0;
    if ((!f->weights || f->head_mean) &&
        !workspace_fits(ctx, batch, h_q, n_q, n_kv, "unfused: score matrix", &ws_scores,
                        unfused_why, sizeof unfused_why))
        ws_scores = -1;
    if (!fused_why[0] && (f->weights || pr->has_ksum || pr->has_mlog)) { /* (and the reductions) */
        if (!workspace_fits(ctx, batch, h_q, n_q, 4, "fused: LSE for the weights pass", &ws_lse,
                            fused_why, sizeof fused_why))
            ws_lse = -1;
        int64_t wm = 0;
        if (ws_lse >= 0 && f->head_mean &&
            !workspace_fits(ctx, batch, h_q, n_q, n_kv, "fused: per-head weights", &wm, fused_why,
                            sizeof fused_why))
            wm = -1;
        ws_fused = ws_lse + wm;
    }

    if (f->quantized) { /* the scales are read by the fused kernels only */
        if (desc->algorithm == CLATTN_ALGORITHM_UNFUSED)
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "an int8 or FP8 K/V runs with the fused algorithm only");
        if (fused_why[0])
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "an int8 or FP8 K/V needs the fused algorithm, which cannot "
                               "run this shape: %s",
                               fused_why);
    }
    if (pr->k.paged) { /* the block table is read by the fused kernels only */
        if (f->weights)
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "paged K/V: attention weights are not available (their pass "
                               "reads contiguous K); use the LSE");
        if (desc->algorithm == CLATTN_ALGORITHM_UNFUSED)
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "paged K/V runs with the fused algorithm only");
        if (fused_why[0])
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "paged K/V needs the fused algorithm, which cannot run this "
                               "shape: %s",
                               fused_why);
    }
    /* batch invariance: the fused kernels' rows, whatever the call's shape; key weight
     * sums: from the fused kernel's LSE */
    const char *fused_only = desc->batch_invariant ? "batch_invariant"
                             : pr->has_ksum        ? "key_weight_sums"
                             : pr->has_mlog        ? "max_logits"
                                                   : NULL;
    if (fused_only && desc->algorithm == CLATTN_ALGORITHM_UNFUSED)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "%s runs with the fused algorithm only",
                           fused_only);
    if (fused_only && fused_why[0])
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "%s needs the fused algorithm, which cannot run this shape: %s",
                           fused_only, fused_why);
    const bool want_unfused =
        desc->algorithm == CLATTN_ALGORITHM_UNFUSED ||
        (desc->algorithm == CLATTN_ALGORITHM_AUTO && !fused_only && (f->weights || fused_why[0]));
    if (desc->algorithm == CLATTN_ALGORITHM_FUSED && fused_why[0])
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "%s", fused_why);
    if (desc->algorithm == CLATTN_ALGORITHM_UNFUSED && unfused_why[0])
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "%s", unfused_why);
    if (want_unfused && !unfused_why[0]) {
        p->algorithm = CLATTN_ALGORITHM_UNFUSED;
        snprintf(p->reason, sizeof p->reason, "%s",
                 desc->algorithm == CLATTN_ALGORITHM_UNFUSED ? "unfused: requested"
                 : f->weights ? "auto: unfused, because weights were requested (it computes "
                                "them once; fused would need a second pass)"
                              : "auto: unfused, because the fused kernel cannot run this shape");
        snprintf(p->rejected, sizeof p->rejected, "%s",
                 fused_why[0] ? fused_why : "fused: possible, not preferred");
    } else if (!fused_why[0]) {
        p->algorithm = CLATTN_ALGORITHM_FUSED;
        snprintf(p->reason, sizeof p->reason, "%s",
                 desc->algorithm == CLATTN_ALGORITHM_FUSED
                     ? "fused: requested"
                     : "auto: fused (never stores n_q x n_kv)");
        snprintf(p->rejected, sizeof p->rejected, "%s",
                 unfused_why[0] ? unfused_why : "unfused: possible, not preferred");
    } else {
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "no algorithm fits: %s; %s", fused_why,
                           unfused_why);
    }

    clattn_status st = plan_append(ctx, pr, p);
    if (st != CLATTN_SUCCESS)
        return st;
    p->no_keys = n_kv == 0;
    if (p->algorithm == CLATTN_ALGORITHM_UNFUSED && !p->no_keys) {
        p->workspace_bytes += ws_scores;
        if ((st = tiled_stage_kernel(ctx, CLATTN_KERNEL_SCORES, n_q, d_k, f->opts, &p->scores)) !=
                CLATTN_SUCCESS ||
            (st = tiled_stage_kernel(ctx, CLATTN_KERNEL_WEIGHTED_SUM, n_q, d_v, f->opts,
                                     &p->wsum)) != CLATTN_SUCCESS ||
            (st = softmax_kernel(ctx, desc, n_kv, f->lse_dt, &p->softmax, &p->softmax_wg)) !=
                CLATTN_SUCCESS)
            return st;
        snprintf(p->kernels, sizeof p->kernels, "scores, softmax, weighted_sum%s",
                 f->head_mean ? ", head_mean" : "");
    } else {
        if (decode && gpu && !p->no_keys && !f->weights && !pr->has_ksum && !pr->has_mlog &&
            d_v > 0)
            st = decode_gpu_kernel(ctx, pr, group, f, &p->fused);
        else if (decode)
            st = decode_kernel(
                ctx, pr, group, f,
                !p->no_keys && !f->weights && !pr->has_ksum && !pr->has_mlog && d_v > 0, &p->fused);
        else if (gpu)
            st = clattn_plan_fused_gpu(ctx, blocking_n_q, d_k, d_v, desc->work_group_size, f->opts,
                                       half_no == NULL, &p->fused);
        else
            st = fused_kernel(ctx, blocking_n_q, d_k, d_v, fused_tile, desc->work_group_size,
                              f->opts, &p->fused);
        if (st != CLATTN_SUCCESS)
            return st;
        if (p->fused.n_splits) /* the splits' O and LSE, float32 */
            p->workspace_bytes += batch * h_q * n_q * (int64_t)p->fused.n_splits * (d_v + 1) * 4;
        if (pr->has_ksum && !p->no_keys) { /* key_sums.cl reads the LSE (a workspace) */
            if ((st = clattn_plan_key_sums(ctx, pr, f->opts, p)) != CLATTN_SUCCESS)
                return st;
            p->workspace_bytes += ws_fused; /* the row max and log-sum, as for weights */
        }
        if (pr->has_mlog && (st = clattn_plan_row_max(ctx, pr, f->lse_dt, p)) != CLATTN_SUCCESS)
            return st;
        if (pr->has_mlog && !p->key_sums && !(f->weights && !p->no_keys))
            p->workspace_bytes += ws_lse; /* (its LSE columns) */
        if (p->no_keys) /* whatever the algorithm and work-group size: nothing to compute */
            add_reason(p, "; n_kv 0: the decode kernel writes every row (zeros, or NaN for "
                          "masked_rows NaN; LSE -inf)");
        else if (decode && p->fused.n_splits && p->fused.rows)
            add_reason(
                p,
                "; GPU family split-KV decode (decode_gpu.cl, split_merge.cl): %zu split%s"
                " of the visible keys (<= %lld), %zu of a KV head's %lld row%s per work-group",
                p->fused.n_splits, PLURAL(p->fused.n_splits),
                (long long)clattn_rule_span(desc, n_q, n_kv), p->fused.rows,
                (long long)(group * n_q), PLURAL(group * n_q));
        else if (decode) {
            add_reason(p,
                       "; decode.cl: %zu of a KV head's %lld row%s (%lld query head%s x %lld %s)"
                       " per work-item share its K/V reads",
                       p->fused.rq, (long long)(group * n_q), PLURAL(group * n_q), (long long)group,
                       PLURAL(group), (long long)n_q, n_q == 1 ? "query" : "queries");
            if (p->fused.heads > 1)
                add_reason(p, ", %zu KV heads in turn", p->fused.heads);
            if (p->fused.pf_l2 || (p->fused.heads > 1 && clattn_kv_heads_interleave(&pr->k)))
                add_reason(p,
                           " (K's heads interleave in its rows: %zu of its %lld read together%s%s)",
                           p->fused.heads, (long long)pr->k.n[1],
                           (int64_t)p->fused.heads == pr->k.n[1] ? ", whole rows" : "",
                           p->fused.pf_l2 ? "; the rows ahead prefetched into L2" : "");
            if (p->fused.n_splits) /* (CPU family: too few work-items to keep every thread busy) */
                add_reason(p,
                           "; split-KV (split_merge.cl): %zu splits of the visible keys (<= %lld)",
                           p->fused.n_splits, (long long)clattn_rule_span(desc, n_q, n_kv));
        } else if (gpu)
            add_reason(p,
                       "; GPU kernel family (fused_gpu.cl): %zu query rows per work-group of %zu, "
                       "%zu keys per tile%s",
                       p->fused.rows, p->fused.wg, p->fused.tile_kv,
                       p->fused.subgroups ? ", sub-group reductions" : "");
        if (desc->dropout_p > 0.0f && !decode && n_q <= DECODE_MAX_N_Q)
            add_reason(p, "; dropout: the tiled kernel for n_q %lld (the decode kernels draw none)",
                       (long long)n_q);
        if (desc->batch_invariant && n_kv > 0)
            add_reason(p, "; batch-invariant: the tiled kernel for any n_q");
        if (pr->k.paged)
            add_reason(p, "; paged K/V: %lld page%s of %lld key%s per sequence, %lld in the pools",
                       (long long)k->page_stride, PLURAL(k->page_stride), (long long)k->page_size,
                       PLURAL(k->page_size), (long long)k->num_pages);
        snprintf(p->kernels, sizeof p->kernels, "%s%s%s%s%s",
                 p->fused.n_splits && p->fused.rows ? "decode_gpu, split_merge"
                 : p->fused.n_splits                ? "decode, split_merge"
                 : decode                           ? "decode"
                 : gpu                              ? "fused_gpu"
                                                    : "fused",
                 f->weights && !p->no_keys ? ", scores, weights_from_lse" : "",
                 f->head_mean && !p->no_keys ? ", head_mean" : "", p->key_sums ? ", key_sums" : "",
                 p->row_max ? ", row_max" : "");
        if (f->weights && !p->no_keys) {
            p->workspace_bytes += ws_fused;
            if ((st = tiled_stage_kernel(ctx, CLATTN_KERNEL_SCORES, n_q, d_k, f->opts,
                                         &p->scores)) != CLATTN_SUCCESS ||
                (st = from_lse_kernel(ctx, f->lse_dt, desc, &p->from_lse)) != CLATTN_SUCCESS)
                return st;
        }
    }
    if (desc->half_arithmetic) { /* (fused_gpu.cl alone has it; the unfused stages: float32) */
        const char *no = p->algorithm == CLATTN_ALGORITHM_UNFUSED ? "unfused"
                         : p->no_keys                             ? "no keys"
                                                                  : half_no;
        add_reason(p, "; half arithmetic%s%s", no ? " asked, not used: " : "", no ? no : "");
    }
    if (f->head_mean && !p->no_keys &&
        (st = clattn_get_kernel(ctx, "head_mean.cl", CL_STD, &p->head_mean)) != CLATTN_SUCCESS)
        return st;
    if (pr->has_append) { /* first: the cache's new rows, the rotated Q */
        char k2[sizeof p->kernels + 32];
        snprintf(k2, sizeof k2, "append%s, %s", p->rope_q ? ", rope_q" : "", p->kernels);
        memcpy(p->kernels, k2, sizeof p->kernels - 1); /* (fits: the longest list is short) */
        p->kernels[sizeof p->kernels - 1] = '\0';
        add_reason(p, "; first %lld new K/V rows appended%s", (long long)pr->k_new.n[2],
                   p->rope_q ? ", Q and them rotated" : "");
    }
    return CLATTN_SUCCESS;
}

clattn_status clattn_plan_stage(clattn_context *ctx, const clattn_stage_call *sp,
                                clattn_stage_plan *out)
{
    memset(out, 0, sizeof *out);
    char feat[256];
    switch (sp->kind) {
    case CLATTN_STAGE_SOFTMAX:
        return softmax_kernel(ctx, sp->desc, sp->a.n[3], CLATTN_FLOAT32, &out->softmax,
                              &out->softmax_wg);
    case CLATTN_STAGE_SCORES: {
        term_options(feat, sizeof feat, (int)sp->a.dtype, (int)sp->b.dtype, -1, -1,
                     sp->has_mask ? &sp->mask : NULL, sp->desc);
        const size_t at = strlen(feat);
        const clattn_status st = clattn_mods_options(ctx, sp->desc, feat + at, sizeof feat - at);
        if (st != CLATTN_SUCCESS)
            return st;
        return tiled_stage_kernel(ctx, CLATTN_KERNEL_SCORES, sp->a.n[2], sp->a.n[3], feat,
                                  &out->bk);
    }
    case CLATTN_STAGE_WEIGHTED_SUM:
    default:
        term_options(feat, sizeof feat, -1, -1, (int)sp->b.dtype, (int)sp->c.dtype, NULL, NULL);
        return tiled_stage_kernel(ctx, CLATTN_KERNEL_WEIGHTED_SUM, sp->c.n[2], sp->c.n[3], feat,
                                  &out->bk);
    }
}

/* The backward pass (bwd_prep.cl, bwd_dq.cl or bwd_dq_sum.cl, bwd_dkdv.cl): the storage
 * types of every operand and gradient, the score terms and the head dims, compile-time.
 * Rows of d_k and d_v floats live in private memory: head dims up to CLATTN_BACKWARD_MAX_D. */
clattn_status clattn_plan_backward(clattn_context *ctx, const clattn_problem *pr,
                                   const clattn_view *d_o, const clattn_view g[4],
                                   clattn_backward_plan *out)
{
    features f;
    memset(out, 0, sizeof *out);
    clattn_status st0 = make_features(ctx, pr, &f);
    if (st0 != CLATTN_SUCCESS)
        return st0;
    const int64_t d_k = pr->q.n[3], d_v = pr->v.n[3];
    if (pr->q.n[1] > INT_MAX)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "heads above INT_MAX");
    if (d_k > CLATTN_BACKWARD_MAX_D || d_v > CLATTN_BACKWARD_MAX_D)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "the backward pass takes head dims up to %d (d_k %lld, d_v %lld)",
                           CLATTN_BACKWARD_MAX_D, (long long)d_k, (long long)d_v);
    if (f.lse_dt == CLATTN_FLOAT64 && !ctx->has_fp64)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "a float64 LSE needs cl_khr_fp64, which %s does not have (use a "
                           "float32 LSE)",
                           ctx->device_name);
    clattn_backward_blocking(ctx, pr, out);
    char opts[512];
    snprintf(opts, sizeof opts,
             CL_STD " -DBWD=1 -DWG=%d -DRQ=%zu -DRK=%zu -DNV=%d -DD_K=%lld -DD_V=%lld -DDO_DT=%d "
                    "-DDQ_DT=%d -DDK_DT=%d -DDV_DT=%d -DDQ_FUSED=%d %s",
             CLATTN_BACKWARD_WG, out->dq_rows, out->dq_rows,
             clattn_tuning_vectors(ctx, out->dq_rows), (long long)d_k, (long long)d_v,
             (int)d_o->dtype, (int)g[0].dtype, (int)g[1].dtype, (int)g[2].dtype, out->dq_splits > 0,
             f.opts);
    clattn_status st = clattn_get_kernel(ctx, "bwd_prep.cl", opts, &out->prep);
    if (st == CLATTN_SUCCESS)
        st = clattn_get_kernel(ctx, out->dq_splits ? "bwd_dq_sum.cl" : "bwd_dq.cl", opts, &out->dq);
    if (st == CLATTN_SUCCESS)
        st = clattn_get_kernel(ctx, "bwd_dkdv.cl", opts, &out->dkdv);
    if (st == CLATTN_SUCCESS && g[3].count > 0)
        st = clattn_get_kernel(ctx, "bwd_dsinks.cl", opts, &out->dsinks);
    if (st == CLATTN_SUCCESS && (out->dq->kernel_wg_max < CLATTN_BACKWARD_WG ||
                                 out->dkdv->kernel_wg_max < CLATTN_BACKWARD_WG))
        st = clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                         "the backward kernels' %d work-items exceed the device's limit "
                         "(CL_KERNEL_WORK_GROUP_SIZE %zu, %zu)",
                         CLATTN_BACKWARD_WG, out->dq->kernel_wg_max, out->dkdv->kernel_wg_max);
    return st;
}
