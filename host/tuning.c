/* The blocking of the tiled kernels (RQ queries per work-item, WG work-items per group,
 * TILE_KV keys per step): the built-in table per device class, the context's overrides
 * (clattn_context_set_blocking, CLATTN_BLOCKING), and the stored tuning results that
 * `clattn tune` measures — this file is the one reader and writer of their format.
 *
 * Stored tuning: <cache folder>/tune-<16 hex digits>.txt, the digits hashing the device
 * name, driver version, device version and the clattn version (a new driver or clattn
 * starts untuned). Lines: "<kernel> <d_k> <d_v> <rq> <wg> <tile_kv>", kernel one of
 * fused, scores (d_v 0), weighted_sum (d_k 0); '#' starts a comment. Unreadable or
 * malformed lines are ignored: tuning is an optimisation, never an error. The
 * environment (CLATTN_TUNE=off, CLATTN_BLOCKING) is read once, when a context is
 * created; nothing here runs getenv on a call's path. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The built-in table. */
#define GPU_TILE_KV 64                   /* blocked kernels on GPUs: keys per step (x16) */
#define CPU_TILE_KV 128                  /* scores / weighted sum on CPUs: keys per step */
#define CPU_FUSED_TILE_KV 128            /* fused on CPUs: at most this many keys per step, */
#define CPU_FUSED_TILE_BYTES (64 * 1024) /* with K and V tiles within this (cache-sized) */
#define GPU_WG 64                        /* blocked kernels on GPUs: work-items per group */
#define CPU_WG 32                        /* on CPUs: work-items per work-group (WG·RQ rows), */
/* queries per work-item on CPUs (cpu_rq): 6 where a float16 is two 8-lane registers (AVX2:
 * RQ·2 accumulators + 2 + 1 of 16 registers; 4 was 8 % slower on a Zen 3), 4 where it is
 * one 16-lane register (AVX-512: with NV 4, 16 accumulators + 4 + 4 of 32; measured on a
 * Xeon, family 6 model 207, 0.79–0.92x the time of RQ 6 with NV 2) */
#define CPU_RQ_8LANE 6
#define CPU_RQ_16LANE 4
/* … halved until the group's working set (every work-item's private arrays and the
 * local tiles) is within this. Measured on a Zen 3 (512 KiB L2 per core; PoCL reports
 * the L3 as CL_DEVICE_GLOBAL_MEM_CACHE_SIZE and Intel's runtime half the L2, so the
 * reported size cannot serve): d 64 and 128 fastest at WG 32 (264 KiB), d 256 at WG 32
 * (363 KiB) 1.5x slower than at WG 16 (214 KiB). With RQ 6 the fused kernel's d 64 and
 * 128 groups are 382 KiB at WG 32: 0.95-0.98x the time of WG 16 (223 KiB; 2026-12-03,
 * docs/BENCHMARKS.md), so the cap is 384 KiB; d 256 stays at WG 16 (295 KiB). */
#define CPU_GROUP_WORKING_BYTES (384 * 1024)
/* PoCL's CPU device runs a work-group on one thread's stack, private arrays of every
 * work-item included; beyond about this many bytes in all it crashes (and it reports
 * CL_KERNEL_PRIVATE_MEM_SIZE as a flat 1024, which cannot serve as the limit). */
#define CPU_GROUP_PRIVATE_BYTES (512 * 1024)
/* decode.cl on CPUs: up to this many query rows of a KV head share each K/V read, with
 * the work-item's private arrays (per row: q row, accumulator, weights; and the step's
 * 16 V rows) within this, well inside PoCL's stack (CPU_GROUP_PRIVATE_BYTES) */
#define CPU_DECODE_ROWS 16
#define CPU_DECODE_PRIVATE_BYTES (320 * 1024)
/* decode.cl on CPUs: a paged cache whose pages hold less than this of a KV head's K rows
 * is read several heads per work-item, page by page, so that the reads of a page make
 * stretches of about this many bytes (tools/dev/paged_read_probe.c, 16-key float32 pages of
 * 8 heads on a Zen 3: head by head 1.16-1.34x the contiguous time, the 8 heads of a page
 * together 1.01-1.03x; docs/BENCHMARKS.md) */
#define CPU_DECODE_STRETCH_BYTES (32 * 1024)
/* The same on 16-lane CPUs (AVX-512), where 2 heads of 4 and 8 KiB pieces (pages of 16
 * keys, d 128, float16 and float32) took 0.85-0.93x the time of the 4 or 8 heads that 32
 * KiB gives, and 4 heads of 2 KiB pieces (pages of 8, GQA) 0.93x the time of 2, 1 KiB
 * (pages of 4) 0.79x; for MHA 8 heads at pages of 4 0.95x the time of 16, 4 at pages of 8
 * 1.04x the time of 8, int8 pages of 16 at 4 heads 0.84x the time of 16 (a 2-core Xeon,
 * 2026-12-04, with decode.cl's K_FOLLOWS; docs/BENCHMARKS.md) */
#define CPU_DECODE_STRETCH_BYTES_16LANE (8 * 1024)
/* decode.cl on CPUs: K rows whose heads interleave (a head's stride below the row's:
 * FlashAttention's [batch, seq, h_kv, d] cache and its [num_pages, page_size, h_kv, d]
 * pool) are read every KV head per work-item, up to this many rows in all where a head's
 * part of a row is at least CPU_DECODE_PART_BYTES (else up to CPU_DECODE_ROWS), so that a
 * work-item reads whole rows or large parts of them: with 2 heads per work-item each
 * reads a quarter of every row. GQA (b, 32, 8, 1, n_kv, 128) took 0.67-0.85x the time of
 * the 2 heads (f32 b1 0.67, f16 b1 0.85, f16 b8 0.73), MHA f16 16 or 32 heads 0.64x, f32
 * d 64 at 8 heads 0.83x; but f16 d 64 (128-byte parts) 1.15x at 8 heads, 0.97x at 4 (a
 * 2-core AVX-512 Xeon, 2026-12-05; docs/BENCHMARKS.md) */
#define CPU_DECODE_ROWS_INTERLEAVED 32
#define CPU_DECODE_PART_BYTES 256

#define MAX_TUNE_ENTRIES 256
#define ANY_KERNEL ((clattn_kernel)-1) /* CLATTN_BLOCKING: every kernel */

static const char *const kernel_names[3] = {"fused", "scores", "weighted_sum"};

static bool is_cpu(const clattn_context *ctx)
{
    return (ctx->device_type & CL_DEVICE_TYPE_CPU) != 0;
}

cl_ulong clattn_local_tile_budget(const clattn_context *ctx)
{
    return ctx->local_mem > 1024 ? ctx->local_mem - 1024 : 0;
}

const char *clattn_half_math_why_not(const clattn_context *ctx, const clattn_problem *pr,
                                     bool decode, bool gpu)
{
    if (!pr->desc->half_arithmetic)
        return "";
    if (!gpu) /* (fused_gpu.cl alone has the path) */
        return "the CPU family";
    if (!ctx->has_fp16) /* (before the shape: what the device lacks) */
        return "the device has no cl_khr_fp16";
    if (decode)
        return "decoding"; /* (with no keys the plan says so instead) */
    if (pr->desc->rotary)  /* (an int8 or FP8 K or V is not float16 either) */
        return "rotary Q is rotated into float32";
    return pr->q.dtype != CLATTN_FLOAT16 || pr->k.dtype != CLATTN_FLOAT16 ||
                   pr->v.dtype != CLATTN_FLOAT16
               ? "Q, K and V are not all float16"
               : NULL;
}

size_t clattn_gpu_ct(size_t wg)
{
    size_t ct = 16;
    while (ct > 1 && wg % ct != 0)
        ct /= 2;
    return ct;
}

size_t clattn_fit_tile_kv(const clattn_context *ctx, int64_t local_floats_per_key, size_t cap)
{
    const cl_ulong budget = clattn_local_tile_budget(ctx);
    size_t t = cap;
    while (t >= 16 && (cl_ulong)t * (cl_ulong)local_floats_per_key * sizeof(float) > budget)
        t /= 2;
    return t >= 16 ? t : 0;
}

size_t clattn_default_tile_kv(const clattn_context *ctx, bool fused, int64_t per_key)
{
    if (!is_cpu(ctx))
        return GPU_TILE_KV;
    if (!fused)
        return CPU_TILE_KV;
    /* measured: d 64 best at 128 keys, 128 at 64 */
    size_t cap = CPU_FUSED_TILE_KV;
    while (cap > 16 && (int64_t)cap * per_key * (int64_t)sizeof(float) > CPU_FUSED_TILE_BYTES)
        cap /= 2;
    return cap;
}

static bool lanes16(const clattn_context *ctx)
{
    return is_cpu(ctx) && ctx->native_float_width >= 16;
}

static size_t cpu_rq(const clattn_context *ctx)
{
    return lanes16(ctx) ? CPU_RQ_16LANE : CPU_RQ_8LANE;
}

int clattn_tuning_vectors(const clattn_context *ctx, size_t rq)
{
    if (ctx->vectors_override)
        return ctx->vectors_override;
    /* AVX-512 (PoCL and Intel's runtime report 16 native lanes): NV·RQ accumulators, at
     * most 16 of the 32 registers, so that enough independent FMA chains hide the FMA
     * latency (RQ 6 with NV 1 left the FMA units half idle: NV 2 took 0.74–0.84x the
     * time); AVX2 (8 lanes) holds a float16 in two of its 16 registers already */
    if (!lanes16(ctx))
        return 1;
    return rq <= 4 ? 4 : 2;
}

/* "A,B,C" or "A,B,C,D": plain decimal values below 2^20 and nothing else; returns how many
 * (3 or 4), or 0 for anything else (the whole string is then ignored) */
static int parse_blocking(const char *s, unsigned v[4])
{
    int n = 0;
    while (n < 4) {
        if (*s < '0' || *s > '9')
            return 0;
        char *end = NULL;
        errno = 0;
        const unsigned long x = strtoul(s, &end, 10);
        if (errno != 0 || x >= (1UL << 20))
            return 0;
        v[n++] = (unsigned)x;
        if (*end == '\0')
            return n >= 3 ? n : 0;
        if (*end != ',')
            return 0;
        s = end + 1;
    }
    return 0; /* a fifth value */
}

static bool blocking_ok(const clattn_blocking *b)
{
    /* RQ 8 makes PoCL's work-group compiler run for many minutes: 1..6 */
    return b->queries_per_work_item >= 1 && b->queries_per_work_item <= 6 &&
           b->work_group_size >= 1 && b->work_group_size <= 1024 && b->tile_kv >= 16 &&
           b->tile_kv <= 512 && b->tile_kv % 16 == 0;
}

static const clattn_tune_entry *find(const clattn_tune_entry *list, int n, clattn_kernel kernel,
                                     int64_t d_k, int64_t d_v, bool wildcards)
{
    for (int i = n - 1; i >= 0; i--) { /* the last entry for a key wins */
        const clattn_tune_entry *e = &list[i];
        const bool k_ok = e->kernel == kernel || (wildcards && e->kernel == ANY_KERNEL);
        const bool dk_ok = e->d_k == d_k || (wildcards && e->d_k == 0);
        const bool dv_ok = e->d_v == d_v || (wildcards && e->d_v == 0);
        if (k_ok && dk_ok && dv_ok)
            return e;
    }
    return NULL;
}

/* a head dim's row in whole float16 vectors, as the kernels pad it (PAD16, at least one) */
static int64_t pad16(int64_t d)
{
    return clattn_ceil_div(d > 0 ? d : 1, 16) * 16;
}

static int64_t backward_dq_splits(const clattn_context *ctx, const clattn_problem *pr, size_t rk)
{
    /* RK > 1 (CPUs): bwd_dkdv.cl forms dQ += dS·K with the dK and dV products (5 products
     * of the forward's size in all, not 7), each work-group walking the key blocks of one
     * split into a float32 partial dQ. Enough splits that (batch · KV heads · splits)
     * keeps every compute unit busy twice over; batch-invariant calls take one, so that
     * dQ's bits do not depend on the batch. */
    if (rk < 2 || ctx->backward_splits == 0)
        return 0;
    const int64_t groups = pr->k.n[0] * pr->k.n[1], cu = ctx->compute_units;
    const int64_t blocks = clattn_ceil_div(pr->k.n[2], CLATTN_BACKWARD_WG * (int64_t)rk);
    int64_t s = ctx->backward_splits > 0                  ? ctx->backward_splits
                : pr->desc->batch_invariant || groups < 1 ? 1
                                                          : clattn_ceil_div(2 * cu, groups);
    if (ctx->backward_splits < 0 && s > blocks)
        s = blocks > 1 ? blocks : 1;
    /* bwd_dkdv's local memory with the block's K rows and the tile's dS (the tile's Q and
     * dO twice, its scores, and some) must fit */
    const int64_t kb = CLATTN_BACKWARD_WG * (int64_t)rk, dkp = pad16(pr->q.n[3]);
    if ((cl_ulong)(4 * (32 * (dkp + pad16(pr->v.n[3])) + 32 * kb + kb * dkp) + 2048) >
        ctx->local_mem)
        return 0;
    /* the partial sums must fit one buffer: fewer splits, or dQ in its own kernel */
    const int64_t row_bytes = 4 * dkp;
    const int64_t rows = pr->q.n[0] * pr->q.n[1] * pr->q.n[2];
    while (s > 1 && (cl_ulong)(s * rows * row_bytes) > ctx->max_alloc)
        s--;
    return (cl_ulong)(s * rows * row_bytes) <= ctx->max_alloc ? s : 0;
}

static size_t backward_rows(const clattn_context *ctx, int64_t d_k, int64_t d_v)
{
    /* each staged K or V column vector feeds RQ FMAs instead of one (the kernel was
     * load-bound at one row per work-item) */
    const size_t cap = d_k > 128 || d_v > 128 ? 2 : 4;
    const clattn_tune_entry *o = find(ctx->override, ctx->n_override, ANY_KERNEL, 0, 0, false);
    if (o) /* CLATTN_BLOCKING (tests take both forms on any device) */
        return o->blocking.queries_per_work_item < cap ? o->blocking.queries_per_work_item : cap;
    return is_cpu(ctx) ? cap : 1;
}

void clattn_backward_blocking(const clattn_context *ctx, const clattn_problem *pr,
                              clattn_backward_plan *plan)
{
    plan->dq_rows = backward_rows(ctx, pr->q.n[3], pr->v.n[3]);
    plan->dq_splits = backward_dq_splits(ctx, pr, plan->dq_rows);
    plan->dq_part_bytes =
        plan->dq_splits * pr->q.n[0] * pr->q.n[1] * pr->q.n[2] * 4 * pad16(pr->q.n[3]);
}

/* decode.cl's private arrays per row on CPUs (q row, accumulator, weights, lane-wise sum,
 * rule) and per work-item (the step's V rows, the row store), in bytes */
static int64_t decode_row_bytes(int64_t d_k, int64_t d_v)
{
    return (clattn_ceil_div(d_k, 16) * 16 + clattn_ceil_div(d_v, 16) * 16 + 64) *
           (int64_t)sizeof(float);
}
static int64_t decode_fixed_bytes(int64_t d_v)
{
    return 17 * clattn_ceil_div(d_v, 16) * 16 * (int64_t)sizeof(float);
}

size_t clattn_decode_rows(const clattn_context *ctx, int64_t rows, int64_t d_k, int64_t d_v)
{
    /* on CPUs: as many rows as the private-array budget allows, up to CPU_DECODE_ROWS */
    int64_t cap = CPU_DECODE_ROWS;
    if (is_cpu(ctx)) {
        cap = (CPU_DECODE_PRIVATE_BYTES - decode_fixed_bytes(d_v)) / decode_row_bytes(d_k, d_v);
        cap = cap < 1 ? 1 : cap > CPU_DECODE_ROWS ? CPU_DECODE_ROWS : cap;
    }
    /* an override of the fused kernel sets the rows (its WG and TILE_KV do not apply);
     * otherwise GPUs take one row per work-item */
    const clattn_tune_entry *o =
        find(ctx->override, ctx->n_override, CLATTN_KERNEL_FUSED, d_k, d_v, true);
    int64_t nr = o ? (int64_t)o->blocking.queries_per_work_item : is_cpu(ctx) ? cap : 1;
    if (nr > cap)
        nr = cap;
    if (nr > rows)
        nr = rows;
    if (nr < 1)
        return 1;
    return (size_t)clattn_ceil_div(rows, clattn_ceil_div(rows, nr)); /* 20 rows: 10 + 10 */
}

bool clattn_kv_heads_interleave(const clattn_view *k)
{
    return k->n[1] > 1 && k->n[2] > 1 && k->s[3] == 1 && k->s[1] >= k->n[3] && k->s[1] < k->s[2];
}

size_t clattn_decode_heads(const clattn_context *ctx, const clattn_view *k, int64_t rows, size_t nr,
                           int64_t d_v, bool may_split)
{
    const int64_t h_kv = k->n[1], d_k = k->n[3];
    const int64_t items = k->n[0] * h_kv * clattn_ceil_div(rows, (int64_t)nr); /* at 1 */
    const int64_t piece = k->paged ? k->page_size * d_k * k->esize : 0; /* a head's K in a page */
    int64_t want = ctx->decode_heads;
    /* choose (at most 16 rows, at least a work-item per compute unit: below): on CPUs,
     * for small pages, heads for a stretch of about CPU_DECODE_STRETCH_BYTES (16-lane ones:
     * CPU_DECODE_STRETCH_BYTES_16LANE); and at least 2 on 16-lane CPUs (AVX-512) for every
     * cache: contiguous, 0.87-0.95x the time of 1 on a 2-core Xeon (GQA f32 and f16, MHA
     * f16; MHA f32 level, 1.01), where 8-lane ones (AVX2, a Zen 3) took 1.09x
     * (docs/BENCHMARKS.md); every head where the heads interleave within K's rows, up to
     * CPU_DECODE_ROWS_INTERLEAVED rows for parts of CPU_DECODE_PART_BYTES or more */
    const bool interleaved = is_cpu(ctx) && clattn_kv_heads_interleave(k);
    const int64_t max_rows = interleaved && d_k * k->esize >= CPU_DECODE_PART_BYTES
                                 ? CPU_DECODE_ROWS_INTERLEAVED
                                 : CPU_DECODE_ROWS;
    if (want <= 0) {
        const int64_t stretch =
            lanes16(ctx) ? CPU_DECODE_STRETCH_BYTES_16LANE : CPU_DECODE_STRETCH_BYTES;
        const int64_t heads = is_cpu(ctx) && piece > 0 ? clattn_ceil_div(stretch, piece) : 1;
        want = interleaved ? h_kv : lanes16(ctx) ? 2 : 1;
        if (heads > want)
            want = heads;
    }
    size_t nh = 1;
    for (int64_t c = 2; c <= want && c <= h_kv; c++) {
        if (decode_fixed_bytes(d_v) + c * (int64_t)nr * decode_row_bytes(d_k, d_v) >
            CPU_DECODE_PRIVATE_BYTES)
            break; /* (on any device: the kernel's arrays are the same) */
        /* chosen: at most 16 rows in all (8 heads' 32 rows in f16 took 1.2x the time, their
         * q rows and accumulators beyond the L1 cache), a work-item per compute unit */
        if (ctx->decode_heads <= 0 &&
            (c * (int64_t)nr > max_rows ||
             (!(interleaved && may_split) && items / c < (int64_t)ctx->compute_units)))
            break; /* (interleaved heads where may_split: split-KV decoding makes the items) */
        if (h_kv % c == 0)
            nh = (size_t)c;
    }
    return nh;
}

/* Adds or replaces (same kernel and dims) an entry of a heap list. */
static bool put(clattn_tune_entry **list, int *n, const clattn_tune_entry *e)
{
    for (int i = 0; i < *n; i++)
        if ((*list)[i].kernel == e->kernel && (*list)[i].d_k == e->d_k &&
            (*list)[i].d_v == e->d_v) {
            (*list)[i] = *e;
            return true;
        }
    if (*n >= MAX_TUNE_ENTRIES)
        return false;
    clattn_tune_entry *grown = realloc(*list, (size_t)(*n + 1) * sizeof **list);
    if (!grown)
        return false;
    *list = grown;
    grown[(*n)++] = *e;
    return true;
}

/* One line of the file, or false. */
static bool parse_line(const char *line, clattn_tune_entry *e)
{
    char kernel[32];
    long long d_k, d_v;
    unsigned rq, wg, tile;
    if (line[0] == '#' ||
        sscanf(line, "%31s %lld %lld %u %u %u", kernel, &d_k, &d_v, &rq, &wg, &tile) != 6 ||
        d_k < 0 || d_v < 0)
        return false;
    int k = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(kernel, kernel_names[i]) == 0)
            k = i;
    e->kernel = (clattn_kernel)k;
    e->d_k = d_k;
    e->d_v = d_v;
    e->blocking.queries_per_work_item = rq;
    e->blocking.work_group_size = wg;
    e->blocking.tile_kv = tile;
    return k >= 0 && blocking_ok(&e->blocking);
}

/* An environment count: a plain decimal up to max, or fallback for anything else (unset,
 * empty, signs, trailing characters) */
static int64_t env_count(const char *name, int64_t max, int64_t fallback)
{
    const char *s = getenv(name);
    char *end = NULL;
    if (!s || *s < '0' || *s > '9')
        return fallback;
    const long long v = strtoll(s, &end, 10);
    return *end == '\0' && v <= max ? v : fallback;
}

void clattn_tuning_init(clattn_context *ctx)
{
    const char *family = getenv("CLATTN_KERNEL_FAMILY");
    ctx->family = !family                      ? CLATTN_KERNEL_FAMILY_AUTO
                  : strcmp(family, "gpu") == 0 ? CLATTN_KERNEL_FAMILY_GPU
                  : strcmp(family, "cpu") == 0 ? CLATTN_KERNEL_FAMILY_CPU
                                               : CLATTN_KERNEL_FAMILY_AUTO;
    /* a decimal 0 … 256 each; anything else leaves the choice to the plan (decode: 0, the
     * backward: −1, its 0 meaning dQ in its own kernel) */
    ctx->decode_splits = env_count("CLATTN_DECODE_SPLITS", 256, 0);
    ctx->decode_heads = env_count("CLATTN_DECODE_HEADS", 256, 0);
    ctx->backward_splits = env_count("CLATTN_BACKWARD_SPLITS", 256, -1);
    const char *tune = getenv("CLATTN_TUNE");
    ctx->use_stored_tuning = !(tune && strcmp(tune, "off") == 0);
    /* CLATTN_BLOCKING="RQ,WG,TILE_KV[,NV]": an override of every kernel (tuning
     * experiments; NV 1, 2 or 4, the micro-kernels' vectors per step; its RQ, up to 4, is
     * also the backward kernels' rows and keys per work-item) */
    const char *env = getenv("CLATTN_BLOCKING");
    clattn_tune_entry o = {ANY_KERNEL, 0, 0, {0, 0, 0}};
    unsigned v[4] = {0, 0, 0, 0};
    const int got = env ? parse_blocking(env, v) : 0;
    o.blocking.queries_per_work_item = v[0];
    o.blocking.work_group_size = v[1];
    o.blocking.tile_kv = v[2];
    if (got >= 3 && blocking_ok(&o.blocking) && (got == 3 || v[3] == 1 || v[3] == 2 || v[3] == 4)) {
        (void)put(&ctx->override, &ctx->n_override, &o);
        ctx->vectors_override = got == 4 ? (int)v[3] : 0;
    }
    if (!ctx->cache_dir)
        return;
    const uint64_t h = clattn_device_hash(ctx);
    const size_t len = strlen(ctx->cache_dir) + 32;
    ctx->tune_path = malloc(len);
    if (!ctx->tune_path)
        return;
    snprintf(ctx->tune_path, len, "%s/tune-%016llx.txt", ctx->cache_dir, (unsigned long long)h);
    FILE *f = fopen(ctx->tune_path, "r");
    if (!f)
        return;
    char line[256];
    clattn_tune_entry e;
    while (fgets(line, sizeof line, f))
        if (parse_line(line, &e))
            (void)put(&ctx->tune, &ctx->n_tune, &e);
    fclose(f);
}

void clattn_tuning_release(clattn_context *ctx)
{
    free(ctx->tune_path);
    free(ctx->tune);
    free(ctx->override);
    ctx->tune_path = NULL;
    ctx->tune = ctx->override = NULL;
    ctx->n_tune = ctx->n_override = 0;
}

/* Private floats of one work-item holding rq queries with a tile of tile_kv keys. */
static int64_t item_floats(const clattn_blocking_request *r, size_t rq, size_t tile_kv)
{
    return (int64_t)rq * (r->private_floats + r->private_per_key * (int64_t)tile_kv);
}

/* The work-group ceiling: the device's, and on CPUs what the group's private arrays
 * (rq queries of the request's floats and tile) leave of one thread's stack. */
static size_t group_limit(const clattn_context *ctx, const clattn_blocking_request *r, size_t rq,
                          size_t tile_kv)
{
    size_t limit = ctx->max_wg < ctx->max_wi[0] ? ctx->max_wg : ctx->max_wi[0];
    if (is_cpu(ctx)) {
        const int64_t per_item = (item_floats(r, rq, tile_kv) + 64) * (int64_t)sizeof(float);
        const int64_t fits = CPU_GROUP_PRIVATE_BYTES / per_item;
        if ((int64_t)limit > fits)
            limit = fits > 1 ? (size_t)fits : 1;
    }
    return limit;
}

size_t clattn_group_limit_private(const clattn_context *ctx, int64_t private_bytes)
{
    size_t limit = ctx->max_wg < ctx->max_wi[0] ? ctx->max_wg : ctx->max_wi[0];
    if (is_cpu(ctx) && private_bytes > 0) {
        const int64_t fits = CPU_GROUP_PRIVATE_BYTES / private_bytes;
        if ((int64_t)limit > fits)
            limit = fits > 1 ? (size_t)fits : 1;
    }
    return limit;
}

/* Bytes a CPU work-group touches per tile: its work-items' private arrays and the
 * local tiles. */
static int64_t group_working_bytes(const clattn_blocking_request *r, size_t rq, size_t wg,
                                   size_t tile_kv)
{
    return ((int64_t)wg * item_floats(r, rq, tile_kv) + r->local_per_key * (int64_t)tile_kv) *
           (int64_t)sizeof(float);
}

int clattn_tuning_explicit(const clattn_context *ctx, const clattn_blocking_request *r, size_t *rq,
                           size_t *wg, size_t *tile_kv)
{
    const clattn_tune_entry *o =
        find(ctx->override, ctx->n_override, r->kernel, r->d_k, r->d_v, true);
    if (o) {
        *rq = o->blocking.queries_per_work_item;
        *tile_kv = o->blocking.tile_kv;
        *wg = r->wg_request ? r->wg_request : o->blocking.work_group_size;
        return 1;
    }
    if (r->wg_request != 0 || !ctx->use_stored_tuning)
        return 0;
    const clattn_tune_entry *t = find(ctx->tune, ctx->n_tune, r->kernel, r->d_k, r->d_v, false);
    if (t && r->n_q >= (int64_t)(t->blocking.queries_per_work_item * t->blocking.work_group_size) &&
        t->blocking.work_group_size <=
            group_limit(ctx, r, t->blocking.queries_per_work_item, t->blocking.tile_kv) &&
        clattn_fit_tile_kv(ctx, r->local_per_key, t->blocking.tile_kv) == t->blocking.tile_kv) {
        /* stored by `clattn tune` for this device (large enough problems only) */
        *rq = t->blocking.queries_per_work_item;
        *tile_kv = t->blocking.tile_kv;
        *wg = t->blocking.work_group_size;
        return 2;
    }
    return 0;
}

void clattn_tuning_choose(const clattn_context *ctx, const clattn_blocking_request *r, size_t *rq,
                          size_t *wg, size_t *tile_kv, size_t *limit, bool *wg_fixed)
{
    const bool cpu = is_cpu(ctx);
    /* the micro-kernels' registers do not depend on d: RQ by the vector width */
    *rq = cpu ? cpu_rq(ctx) : 1;
    *tile_kv = r->tile_cap;
    size_t wg_request = r->wg_request, erq, ewg, etile;
    if (clattn_tuning_explicit(ctx, r, &erq, &ewg, &etile)) {
        *rq = erq;
        *tile_kv = etile;
        wg_request = ewg;
    }
    /* the ceiling for what was chosen: on CPUs the group's private arrays for this RQ and
     * tile (an override of a large RQ and tile is refused, not a PoCL stack overflow) */
    *limit = group_limit(ctx, r, *rq, *tile_kv);
    *wg = wg_request;
    *wg_fixed = wg_request != 0;
    if (*wg == 0) { /* two size classes, not one program per n_q */
        *wg = cpu ? CPU_WG : GPU_WG;
        if (cpu && r->n_q < (int64_t)(*wg * *rq)) /* fewer queries than one group holds */
            *rq = *wg = 1;
        while (cpu && *wg > 1 &&
               group_working_bytes(r, *rq, *wg, *tile_kv) > CPU_GROUP_WORKING_BYTES)
            *wg /= 2;
        while (*wg > *limit)
            *wg /= 2;
    }
}

/* ------------------------------------------------------------------ public API */

static clattn_status check_key(clattn_context *ctx, clattn_kernel kernel, int64_t d_k, int64_t d_v,
                               const clattn_blocking *b)
{
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    clattn_clear_error(ctx);
    if ((int)kernel < 0 || (int)kernel > 2)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "unknown kernel %d", (int)kernel);
    if (d_k < 0 || d_v < 0)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "d_k %lld / d_v %lld is negative",
                           (long long)d_k, (long long)d_v);
    if ((kernel == CLATTN_KERNEL_SCORES && d_v != 0) ||
        (kernel == CLATTN_KERNEL_WEIGHTED_SUM && d_k != 0))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "%s has no %s: give 0 for it (d_k %lld, d_v %lld)", kernel_names[kernel],
                           kernel == CLATTN_KERNEL_SCORES ? "d_v" : "d_k", (long long)d_k,
                           (long long)d_v);
    if (b && !blocking_ok(b))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "blocking %u,%u,%u: queries_per_work_item must be 1..6, "
                           "work_group_size 1..1024, tile_kv 16..512 and a multiple of 16",
                           b->queries_per_work_item, b->work_group_size, b->tile_kv);
    return CLATTN_SUCCESS;
}

clattn_status clattn_context_set_blocking(clattn_context *ctx, clattn_kernel kernel, int64_t d_k,
                                          int64_t d_v, const clattn_blocking *blocking)
{
    clattn_status st = check_key(ctx, kernel, d_k, d_v, blocking);
    if (st != CLATTN_SUCCESS)
        return st;
    if (!blocking) {
        for (int i = 0; i < ctx->n_override; i++)
            if (ctx->override[i].kernel == kernel && ctx->override[i].d_k == d_k &&
                ctx->override[i].d_v == d_v) {
                ctx->override[i] = ctx->override[--ctx->n_override];
                i--;
            }
        return CLATTN_SUCCESS;
    }
    const clattn_tune_entry e = {kernel, d_k, d_v, *blocking};
    if (!put(&ctx->override, &ctx->n_override, &e))
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                           "cannot hold more than %d overrides", MAX_TUNE_ENTRIES);
    return CLATTN_SUCCESS;
}

clattn_status clattn_context_use_stored_tuning(clattn_context *ctx, int use)
{
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    ctx->use_stored_tuning = use != 0;
    return CLATTN_SUCCESS;
}

/* mkdir -p of the folder holding `path` */
static void make_parents(const char *path)
{
    char *dir = malloc(strlen(path) + 1);
    if (!dir)
        return;
    strcpy(dir, path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = '\0';
        for (char *p = dir + 1; *p; p++)
            if (*p == '/') {
                *p = '\0';
                (void)mkdir(dir, 0755);
                *p = '/';
            }
        (void)mkdir(dir, 0755);
    }
    free(dir);
}

clattn_status clattn_context_store_blocking(clattn_context *ctx, clattn_kernel kernel, int64_t d_k,
                                            int64_t d_v, const clattn_blocking *blocking,
                                            const char *note)
{
    clattn_status st = check_key(ctx, kernel, d_k, d_v, blocking);
    if (st != CLATTN_SUCCESS)
        return st;
    if (!blocking)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "blocking is NULL");
    if (!ctx->tune_path)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "the program-binary cache is disabled, so there is no tuning file");
    char key[96];
    snprintf(key, sizeof key, "%s %lld %lld ", kernel_names[kernel], (long long)d_k,
             (long long)d_v);
    const size_t plen = strlen(ctx->tune_path);
    char *tmp = malloc(plen + 32);
    if (!tmp)
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "cannot allocate a path");
    snprintf(tmp, plen + 32, "%s.tmp.%ld", ctx->tune_path, (long)getpid());
    make_parents(ctx->tune_path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        st = clattn_fail(ctx, CLATTN_ERROR_IO, "cannot write %s: %s", tmp, strerror(errno));
        free(tmp);
        return st;
    }
    /* the old lines but those of this key, then the new one */
    FILE *in = fopen(ctx->tune_path, "r");
    char line[256];
    bool any = false;
    while (in && fgets(line, sizeof line, in))
        if (strncmp(line, key, strlen(key)) != 0) {
            fputs(line, out);
            any = true;
        }
    if (in)
        fclose(in);
    if (!any)
        fputs("# clattn tune: <kernel> <d_k> <d_v> <rq> <wg> <tile_kv>\n", out);
    fprintf(out, "%s%u %u %u", key, blocking->queries_per_work_item, blocking->work_group_size,
            blocking->tile_kv);
    if (note) { /* one line: a note's line breaks become spaces */
        fputs("  # ", out);
        for (const char *c = note; *c; c++)
            fputc(*c == '\n' || *c == '\r' ? ' ' : *c, out);
    }
    fputc('\n', out);
    if (fclose(out) != 0 || rename(tmp, ctx->tune_path) != 0) {
        st = clattn_fail(ctx, CLATTN_ERROR_IO, "cannot write %s: %s", ctx->tune_path,
                         strerror(errno));
        remove(tmp);
        free(tmp);
        return st;
    }
    free(tmp);
    const clattn_tune_entry e = {kernel, d_k, d_v, *blocking};
    if (!put(&ctx->tune, &ctx->n_tune, &e))
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                           "cannot hold more than %d stored entries", MAX_TUNE_ENTRIES);
    return CLATTN_SUCCESS;
}

clattn_status clattn_context_set_kernel_family(clattn_context *ctx, clattn_kernel_family family)
{
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    clattn_clear_error(ctx);
    if ((int)family < 0 || (int)family > 2)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "unknown kernel family %d (0 auto, 1 cpu, 2 gpu)", (int)family);
    ctx->family = family;
    return CLATTN_SUCCESS;
}

/* A context's count `field` set to n: 0 (the plan chooses) or 1 … 256 */
static clattn_status set_count(clattn_context *ctx, int n, const char *what, int64_t *field)
{
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    clattn_clear_error(ctx);
    if (n < 0 || n > 256)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "%s %d: give 0 (choose) or 1..256",
                           what, n);
    *field = n;
    return CLATTN_SUCCESS;
}

clattn_status clattn_context_set_decode_splits(clattn_context *ctx, int splits)
{
    return set_count(ctx, splits, "decode splits", ctx ? &ctx->decode_splits : NULL);
}

clattn_status clattn_context_set_decode_heads(clattn_context *ctx, int heads)
{
    return set_count(ctx, heads, "decode heads", ctx ? &ctx->decode_heads : NULL);
}

clattn_kernel_family clattn_context_kernel_family(const clattn_context *ctx)
{
    if (!ctx)
        return CLATTN_KERNEL_FAMILY_AUTO;
    if (ctx->family != CLATTN_KERNEL_FAMILY_AUTO)
        return ctx->family;
    return is_cpu(ctx) ? CLATTN_KERNEL_FAMILY_CPU : CLATTN_KERNEL_FAMILY_GPU;
}

const char *clattn_context_tuning_file(const clattn_context *ctx)
{
    return ctx ? ctx->tune_path : NULL;
}
