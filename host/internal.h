/* Private to the library: the context, validated views and helpers shared by host/. */
#ifndef CLATTN_INTERNAL_H
#define CLATTN_INTERNAL_H

#include "clattn.h"

#include <stdarg.h>
#include <stdbool.h>

/* A cached, built program with its one kernel. */
typedef struct clattn_program_entry {
    char *key; /* file + '\n' + build options */
    cl_program program;
    cl_kernel kernel;
    size_t kernel_wg_max; /* CL_KERNEL_WORK_GROUP_SIZE */
    struct clattn_program_entry *next;
} clattn_program_entry;

/* One blocking for a tiled kernel and head dims (tuning.c): a stored tuning result or a
 * context override. d_k / d_v 0 in an override = any. */
typedef struct clattn_tune_entry {
    clattn_kernel kernel;
    int64_t d_k, d_v;
    clattn_blocking blocking;
} clattn_tune_entry;

typedef struct clattn_mod_source clattn_mod_source; /* mods.c */

struct clattn_context {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    char device_name[256];
    cl_device_type device_type;
    size_t max_wg;                  /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
    size_t max_wi[3];               /* CL_DEVICE_MAX_WORK_ITEM_SIZES */
    cl_ulong local_mem;             /* CL_DEVICE_LOCAL_MEM_SIZE, bytes */
    cl_uint compute_units;          /* CL_DEVICE_MAX_COMPUTE_UNITS */
    cl_ulong max_alloc;             /* CL_DEVICE_MAX_MEM_ALLOC_SIZE, bytes */
    cl_ulong global_mem;            /* CL_DEVICE_GLOBAL_MEM_SIZE, bytes */
    bool has_fp64;                  /* cl_khr_fp64 (CL_DEVICE_DOUBLE_FP_CONFIG != 0) */
    bool has_fp16;                  /* cl_khr_fp16 (desc.half_arithmetic) */
    const char *subgroup_std;       /* -cl-std for fused_gpu.cl's sub-group reductions
                                       (cl_khr_subgroup_clustered_reduce); NULL: none */
    bool subgroup_build_failed;     /* such a build failed where one without built: off */
    unsigned intel_sg_sizes;        /* sub-group sizes a kernel can require (bit n: 2^n;
                                       cl_intel_required_subgroup_size), or 0 */
    cl_uint native_float_width;     /* CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT (lanes) */
    int cpu_prefetch;               /* decode.cl's CPU_PREFETCH (context.c) */
    int vectors_override;           /* NV of CLATTN_BLOCKING's fourth value; 0: derived */
    char *kernel_dir;               /* NULL = embedded sources */
    char *cache_dir;                /* program-binary cache and tuning folder; NULL = off */
    bool cache_binaries;            /* programs saved to / loaded from cache_dir (cache.c) */
    clattn_mod_source *mod_sources; /* the snippets' sources the programs were built with */
    clattn_program_entry *programs;
    char *tune_path;         /* the device's tuning file (NULL: cache disabled) */
    clattn_tune_entry *tune; /* stored entries, loaded at creation */
    int n_tune;
    bool use_stored_tuning;      /* false: CLATTN_TUNE=off at creation, or set off */
    clattn_kernel_family family; /* as set (CLATTN_KERNEL_FAMILY at creation); AUTO: by type */
    int64_t decode_splits;       /* split-KV decode key splits (CLATTN_DECODE_SPLITS); 0: choose */
    int64_t decode_heads; /* CPU decode KV heads per work-item (CLATTN_DECODE_HEADS); 0: choose */
    int64_t backward_splits;     /* CLATTN_BACKWARD_SPLITS: −1 choose, 0 bwd_dq.cl, N splits */
    clattn_tune_entry *override; /* clattn_context_set_blocking (CLATTN_BLOCKING at creation) */
    int n_override;
    /* The unfused algorithm's n_q×n_kv workspace, kept for the next call (a fresh one
     * costs a page fault per 4 KiB on CPU devices: 25–40 % of an unfused call); only on
     * in-order queues, where a later call's kernels cannot overtake an earlier one's. */
    bool in_order;
    cl_mem nn_ws;
    int64_t nn_ws_bytes;
    char *message; /* last error, heap; "" when none */
    size_t message_cap;
    cl_int last_cl;
};

/* A validated 4-D view with its effective strides. */
typedef struct clattn_view {
    int64_t n[4];
    int64_t s[4];
    int64_t offset;
    int64_t count; /* product of n */
    int64_t span;  /* elements from offset to one past the last element (0 if empty) */
    void *host;
    cl_mem buffer;
    clattn_dtype dtype;
    int64_t esize; /* bytes per element */
    /* Paged K/V (desc.paged; validate.c make_paged): n and count are the logical
     * [batch, h_kv, n_kv, d], span covers the pool; row s of batch entry b is slot
     * s % page_size of page page_table[b·page_stride + s / page_size] (s[0] strides
     * pages, s[2] slots). The host table, or NULL when the table is a cl_mem
     * (page_table_buffer) that only the kernels read. */
    bool paged;
    const int32_t *page_table;
    cl_mem page_table_buffer;
    int64_t page_size, page_stride, num_pages;
} clattn_view;

/* Bit sets of dtypes a role accepts (clattn_view_check_dtype). */
#define CLATTN_DT_F32 (1u << CLATTN_FLOAT32)
#define CLATTN_DT_FLOATS ((1u << CLATTN_FLOAT32) | (1u << CLATTN_FLOAT16) | (1u << CLATTN_BFLOAT16))
#define CLATTN_DT_MASK ((1u << CLATTN_FLOAT32) | (1u << CLATTN_BOOL))
/* K, V: also int8 with scales, FP8 E4M3 with optional scales */
#define CLATTN_DT_KV (CLATTN_DT_FLOATS | (1u << CLATTN_INT8) | (1u << CLATTN_FLOAT8_E4M3))
#define CLATTN_DT_LSE ((1u << CLATTN_FLOAT32) | (1u << CLATTN_FLOAT64))

/* ---- errors (status.c) ---- */
clattn_status clattn_fail(clattn_context *ctx, clattn_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif

    ;
/* Map an OpenCL error from `what` (e.g. "clEnqueueNDRangeKernel(fused)"). */
clattn_status clattn_fail_cl(clattn_context *ctx, cl_int err, const char *what);
void clattn_clear_error(clattn_context *ctx);
const char *clattn_cl_error_name(cl_int err);

/* ---- views (view.c) ---- */
typedef enum { CLATTN_STORAGE_HOST, CLATTN_STORAGE_BUFFER, CLATTN_STORAGE_ANY } clattn_storage;
/* A public tensor as a checked view: dtype, shape, strides (all zero = packed; a stride
 * of 0 on a dimension of extent > 1 only where t->broadcast allows it, and never on an
 * output), offset, overflow, storage kind; outputs must not self-overlap. */
clattn_status clattn_view_make(clattn_context *ctx, const char *name, const clattn_tensor *t,
                               clattn_storage storage, bool is_output, clattn_view *out);
/* A buffer view's cl_mem: a valid one, of ctx's cl_context (ctx NULL: not checked), and
 * large enough (CLATTN_ERROR_BUFFER_TOO_SMALL). Called after the shape and layout checks,
 * so shape errors come first. No-op for host views and empty views. */
clattn_status clattn_view_check_buffer(clattn_context *ctx, const char *name, const clattn_view *v);
/* INVALID_ARGUMENT unless v's dtype is in `allowed` (CLATTN_DT_*) */
clattn_status clattn_view_check_dtype(clattn_context *ctx, const char *name, const clattn_view *v,
                                      unsigned allowed);
/* Whether the extents [offset, offset + span) of two views on the same storage (the same
 * host memory or the same cl_mem) intersect. */
bool clattn_views_overlap(const clattn_view *a, const clattn_view *b);
/* Whether a and b are exactly the same view (storage, offset, strides, dtype). */
bool clattn_views_same(const clattn_view *a, const clattn_view *b);
/* A paged view's pool as a plain view [num_pages, h, page_size, d] (other views as they
 * are). */
clattn_view clattn_view_pool(const clattn_view *v);
/* A packed view [a, b, c, d] of dtype float32 with no storage yet. */
clattn_view clattn_view_packed(int64_t a, int64_t b, int64_t c, int64_t d);
/* v restricted to [start, start + len) on dimension dim. */
clattn_view clattn_view_slice(const clattn_view *v, int dim, int64_t start, int64_t len);
bool clattn_mul_ok(int64_t a, int64_t b, int64_t *out);

/* ---- validation (validate.c): each call's checks, producing one resolved problem ---- */
/* One validated attention call: the desc and a view of every tensor it names. The mask
 * view has stride 0 on its broadcast dimensions. ctx NULL (the reference) puts the
 * message in the thread's; public entry points reject a NULL ctx themselves. */
typedef struct clattn_problem {
    const clattn_attention_desc *desc;
    clattn_view q, k, v, o, w, mask, lse;
    bool has_w, has_mask, has_lse;
    /* desc.k_new / v_new: rows appended into K and V (which the call then writes) */
    clattn_view k_new, v_new;
    bool has_append;
    /* desc.k_scale / v_scale: an int8 K or V's scales (stride 0 where broadcast; paged
     * as K is) */
    clattn_view k_scale, v_scale;
    bool has_k_scale, has_v_scale;
    /* A packed batch in one launch (varlen.c): batch entry b is sequence b, the views'
     * batch strides are 0 and n[2] the longest sequence; the kernels (-DVARLEN=1) read
     * device int32 [batch] arrays: q_lens, kv_lens, q_row0, k_row0 (rows.cl
     * VARLEN_ROWS). Not owned by the problem. */
    bool varlen;
    cl_mem varlen_bufs[4];
    /* desc.key_weight_sums: [b, h_q or h_kv, 1, n_kv] float32 (key_sums.cl) */
    clattn_view ksum;
    bool has_ksum;
    /* desc.max_logits: [b, h_q, n_q, 1] float32 (row_max.cl) */
    clattn_view mlog;
    bool has_mlog;
} clattn_problem;
/* Whether K or V is a quantized cache (int8, FP8): the fused forward of the CPU family. */
static inline bool clattn_problem_quantized(const clattn_problem *p)
{
    return p->k.dtype == CLATTN_INT8 || p->v.dtype == CLATTN_INT8 ||
           p->k.dtype == CLATTN_FLOAT8_E4M3 || p->v.dtype == CLATTN_FLOAT8_E4M3;
}
/* The KV-cache terms of an attention call, in the order clattn_resolve_attention runs them
 * (validate_kv.c): paged pools become logical views; k_new / v_new and rotary; a
 * quantized K's / V's scales; the host block table's entries the call reads. */
clattn_status clattn_check_paged(clattn_context *ctx, const clattn_attention_desc *desc,
                                 const clattn_view *q, clattn_view *k, clattn_view *v,
                                 clattn_storage storage);
clattn_status clattn_check_append(clattn_context *ctx, const clattn_attention_desc *desc,
                                  const clattn_tensor *k, const clattn_tensor *v,
                                  clattn_storage storage, clattn_problem *cv);
clattn_status clattn_check_quant(clattn_context *ctx, const clattn_attention_desc *desc,
                                 clattn_storage storage, clattn_problem *cv);
clattn_status clattn_check_block_table(clattn_context *ctx, const clattn_attention_desc *desc,
                                       const clattn_view *k);
clattn_status clattn_resolve_attention(clattn_context *ctx, const clattn_attention_desc *desc,
                                       const clattn_tensor *q, const clattn_tensor *k,
                                       const clattn_tensor *v, const clattn_tensor *o,
                                       clattn_storage storage, clattn_problem *out);
/* The public stages: scores (a = Q, b = K, c = S), softmax (a = S, c = W; no b),
 * weighted sum (a = W, b = V, c = O). */
typedef enum { CLATTN_STAGE_SCORES, CLATTN_STAGE_SOFTMAX, CLATTN_STAGE_WEIGHTED_SUM } clattn_stage;
typedef struct clattn_stage_call {
    clattn_stage kind;
    const clattn_attention_desc *desc; /* NULL for softmax and weighted sum without one */
    clattn_view a, b, c, mask;
    bool has_mask;
} clattn_stage_call;
clattn_status clattn_resolve_stage(clattn_context *ctx, clattn_stage kind,
                                   const clattn_attention_desc *desc, const clattn_tensor *a,
                                   const clattn_tensor *b, const clattn_tensor *c,
                                   clattn_storage storage, clattn_stage_call *out);
#define CLATTN_MAX_MERGE_PARTS 4096
typedef struct clattn_merge_problem {
    size_t n_parts;
    clattn_view *o_parts, *lse_parts; /* heap, n_parts each */
    clattn_view o, lse;
    bool has_lse;
} clattn_merge_problem;
/* On failure and after use: clattn_merge_problem_free. */
clattn_status clattn_resolve_merge(clattn_context *ctx, size_t n_parts,
                                   const clattn_tensor *o_parts, const clattn_tensor *lse_parts,
                                   const clattn_tensor *o, const clattn_tensor *lse,
                                   clattn_storage storage, clattn_merge_problem *out);
void clattn_merge_problem_free(clattn_merge_problem *m);
/* dQ, dK, dV (t[0..2]) and the optional d_sinks (t[3], may be NULL: out[3] zeroed) of
 * the backward pass against the forward problem ex (whose O is dO for the reference, d_o
 * NULL; the device call passes its dO view). */
clattn_status clattn_resolve_gradients(clattn_context *ctx, const clattn_problem *ex,
                                       const clattn_view *d_o, const clattn_tensor *const t[4],
                                       clattn_storage storage, clattn_view out[4]);
clattn_status clattn_check_desc(clattn_context *ctx, const clattn_attention_desc *desc);
/* What the backward pass (device and reference) does not take: paged K/V, an append,
 * rotary embeddings, varlen. */
clattn_status clattn_check_backward_desc(clattn_context *ctx, const clattn_attention_desc *desc);
/* dropout (dropout.c): the desc's dropout fields, and the shapes the generator's counter
 * holds (clattn_attention_desc.dropout_p) */
clattn_status clattn_check_dropout(clattn_context *ctx, const clattn_attention_desc *desc);
clattn_status clattn_check_dropout_shape(clattn_context *ctx, const clattn_attention_desc *desc,
                                         int64_t batch, int64_t h_q, int64_t n_q, int64_t n_kv);
/* Philox4x32-10 (Salmon et al. 2011): one block of 4 words */
void clattn_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
/* the kernels' threshold: a weight is kept iff its word ≥ ⌊p·2^32⌋ */
uint32_t clattn_dropout_threshold(float p);
/* weight (bh = b·h_q + h, i, j): kept, and its factor (0 or 1/(1 − p); 1 without dropout) */
bool clattn_dropout_kept(const clattn_attention_desc *desc, int64_t bh, int64_t i, int64_t j);
double clattn_dropout_factor(const clattn_attention_desc *desc, int64_t bh, int64_t i, int64_t j);
clattn_status clattn_check_wait_list(clattn_context *ctx, cl_uint n_wait, const cl_event *wait);

/* ---- planning (plan.c): algorithm, kernels, -D options, blocking, workspace ---- */
/* Every program's language version (-w: PoCL prints warning counts to stderr) */
#define CLATTN_CL_STD "-cl-std=CL1.2 -w"
/* A tiled kernel's program and blocking: RQ queries per work-item, WG work-items per
 * group, TILE_KV keys per step (compile-time constants of the program). */
typedef struct clattn_blocked {
    size_t rq, wg, tile_kv;
    bool decode;     /* decode.cl: rq rows (query heads x queries of a KV head) per work-item */
    size_t heads;    /* decode.cl: KV heads per work-item (each with its rq rows), >= 1 */
    bool pf_l2;      /* decode.cl's PF_L2: its prefetches go into the L2 cache */
    bool subgroups;  /* fused_gpu.cl built with sub-group reductions (SUBGROUPS=1) */
    size_t rows;     /* fused_gpu.cl: query rows per work-group (0: rq x wg, one row block each);
                      * decode_gpu.cl: rows of a KV head per work-group */
    size_t n_splits; /* decode_gpu.cl, decode.cl with SPLITS (0: not split-KV): chunks of the
                      * keys each work-item's (group's) rows see, … */
    int64_t split_chunk;         /* … of at least this many keys (common.cl split_range) */
    clattn_program_entry *merge; /* … merged by split_merge.cl */
    clattn_program_entry *entry;
} clattn_blocked;
typedef struct clattn_exec_plan {
    clattn_algorithm algorithm;
    bool no_keys;                       /* n_kv = 0: the fused streaming kernel writes every row */
    clattn_blocked scores, wsum, fused; /* the tiled kernels that will run */
    clattn_program_entry *softmax, *from_lse, *head_mean;
    clattn_program_entry *append, *rope_q; /* desc.k_new / v_new, desc.rotary (first) */
    clattn_program_entry *key_sums;        /* desc.key_weight_sums (after the fused kernel) */
    size_t key_sums_wg;
    clattn_program_entry *row_max; /* desc.max_logits (after the fused kernel) */
    size_t softmax_wg;
    int64_t workspace_bytes;
    char reason[512];
    char kernels[128];
    char rejected[512];
} clattn_exec_plan;
clattn_status clattn_plan_attention(clattn_context *ctx, const clattn_problem *pr,
                                    clattn_exec_plan *p);
typedef struct clattn_stage_plan {
    clattn_blocked bk;             /* scores, weighted sum */
    clattn_program_entry *softmax; /* softmax */
    size_t softmax_wg;
} clattn_stage_plan;
clattn_status clattn_plan_stage(clattn_context *ctx, const clattn_stage_call *sp,
                                clattn_stage_plan *out);
/* merge.cl for one (part dtype, part LSE dtype, output dtype); lse64: the running and
 * output LSE in float64 (some LSE of the merge is float64; needs cl_khr_fp64) */
clattn_status clattn_plan_merge_step(clattn_context *ctx, clattn_dtype part, clattn_dtype part_lse,
                                     clattn_dtype out, clattn_dtype out_lse, bool lse64,
                                     clattn_program_entry **e);

/* ---- buffers, staging and read-back (stage.c) ---- */
clattn_status clattn_create_buffer(clattn_context *ctx, cl_mem_flags flags, int64_t bytes,
                                   void *host, cl_mem *out);
/* A packed float32 workspace view [a, b, c, d] on a new buffer. */
clattn_status clattn_workspace(clattn_context *ctx, int64_t a, int64_t b, int64_t c, int64_t d,
                               clattn_view *ws);
/* A packed float32 [a, b, c, d] n_q×n_kv workspace: the context's kept buffer (grown as
 * needed) on an in-order queue, with *own NULL; elsewhere a new buffer the caller
 * releases after enqueueing, returned in *own too. */
clattn_status clattn_workspace_nn(clattn_context *ctx, int64_t a, int64_t b, int64_t c, int64_t d,
                                  clattn_view *ws, cl_mem *own);
/* The buffers a blocking call made, released at its end. */
typedef struct clattn_staging {
    cl_mem *mem;
    size_t n, cap;
} clattn_staging;
/* A device copy of host view hv (inputs copied, outputs not), as view dv with offset 0
 * over the view's span. */
clattn_status clattn_stage_view(clattn_context *ctx, clattn_staging *sg, const clattn_view *hv,
                                bool input, clattn_view *dv);
/* Every view of a host problem staged into dev (desc shared). */
clattn_status clattn_stage_problem(clattn_context *ctx, clattn_staging *sg,
                                   const clattn_problem *host, clattn_problem *dev);
void clattn_staging_release(clattn_staging *sg);
/* Reads device view dv back into host view hv after `after` (may be NULL), writing only
 * the view's elements. Blocking. */
clattn_status clattn_unstage(clattn_context *ctx, const clattn_view *hv, const clattn_view *dv);
/* The outputs of a staged problem read back into the host problem. */
clattn_status clattn_unstage_problem(clattn_context *ctx, const clattn_problem *host,
                                     const clattn_problem *dev);
/* A non-blocking read-back: starts reading dv into a temporary (or hv's own memory when
 * the view is dense) after `after`; clattn_readback_finish, after *read completes,
 * scatters into hv and frees the temporary. */
typedef struct clattn_readback {
    clattn_view host;
    void *tmp;
} clattn_readback;
clattn_status clattn_readback_start(clattn_context *ctx, const clattn_view *hv,
                                    const clattn_view *dv, cl_event after, clattn_readback *rb,
                                    cl_event *read);
void clattn_readback_finish(clattn_readback *rb, bool scatter);
/* Copies the elements of host view hv from `from` (a buffer laid out like hv's span,
 * starting at hv's offset) into hv's storage: only the view's elements are written. */
void clattn_view_scatter(const clattn_view *hv, const char *from);
/* Waits for `done` and releases it. */
clattn_status clattn_wait(clattn_context *ctx, cl_event done);

/* ---- launches (launch.c): one enqueue per .cl file, each algorithm's event chain ---- */
/* The backward pass's programs (plan.c) and launch (launch.c): bwd_prep, then bwd_dq and
 * bwd_dkdv; dev's lse is the forward call's LSE (an input), g[] = dQ, dK, dV. */
#define CLATTN_BACKWARD_MAX_D 256
#define CLATTN_BACKWARD_WG 32 /* rows (bwd_dq) or keys (bwd_dkdv) per work-group */
typedef struct clattn_backward_plan {
    clattn_program_entry *prep, *dq, *dkdv;
    size_t dq_rows;               /* bwd_dq's query rows per work-item (RQ), and bwd_dkdv's */
                                  /* keys per work-item (RK): clattn_backward_blocking */
    int64_t dq_splits;            /* > 0: bwd_dkdv forms dQ in that many splits, dq is bwd_dq_sum */
    int64_t dq_part_bytes;        /* … into float32 partial sums of this many bytes in all */
    clattn_program_entry *dsinks; /* NULL without d_sinks */
} clattn_backward_plan;
/* g: dQ, dK, dV and d_sinks (g[3].count 0 without one) */
clattn_status clattn_plan_backward(clattn_context *ctx, const clattn_problem *pr,
                                   const clattn_view *d_o, const clattn_view g[4],
                                   clattn_backward_plan *out);
clattn_status clattn_launch_backward(clattn_context *ctx, const clattn_backward_plan *plan,
                                     const clattn_problem *dev, const clattn_view *d_o,
                                     const clattn_view g[4], cl_uint n_wait, const cl_event *wait,
                                     cl_event *done);
/* What a call runs (the one place this rule lives: launch.c): a call with no query element
 * enqueues nothing but a marker, or only key_sums.cl (the key weight sums' zeros), unless
 * it appends K/V rows. */
typedef enum clattn_launch_work {
    CLATTN_LAUNCH_PLAN = 0,     /* the plan's kernels */
    CLATTN_LAUNCH_NOTHING,      /* a marker */
    CLATTN_LAUNCH_KEY_SUMS_ONLY /* key_sums.cl over no rows */
} clattn_launch_work;
clattn_launch_work clattn_launch_what(const clattn_exec_plan *plan, const clattn_problem *dv);
clattn_status clattn_launch_attention(clattn_context *ctx, const clattn_exec_plan *plan,
                                      const clattn_problem *dev, cl_uint n_wait,
                                      const cl_event *wait, cl_event *done);
clattn_status clattn_launch_stage(clattn_context *ctx, const clattn_stage_plan *plan,
                                  const clattn_stage_call *dev, cl_uint n_wait,
                                  const cl_event *wait, cl_event *done);
clattn_status clattn_launch_merge(clattn_context *ctx, const clattn_merge_problem *dev,
                                  cl_uint n_wait, const cl_event *wait, cl_event *done);

/* ---- score and mask snippets (mods.c, clattn_mods.h) ---- */
#define CLATTN_MAX_MOD_BUFFERS 8
/* The desc's mods: snippets, buffers (dtypes, counts, host xor cl_mem, its size). */
clattn_status clattn_mods_check(clattn_context *ctx, const clattn_attention_desc *desc);
/* Whether ALiBi biases are absolute (a score_mod sees them so: the row's reference 0),
 * for the kernels (ALIBI_ABSOLUTE) and the reference. */
bool clattn_alibi_absolute(const clattn_attention_desc *desc);
/* The reference's needs: a C twin for each snippet and host arrays (UNSUPPORTED). */
clattn_status clattn_mods_check_twins(const clattn_attention_desc *desc);
/* The build option naming the desc's snippets (" -DMOD_ID=<hash>", "" without mods);
 * their source is kept on the context for program.c. OUT_OF_HOST_MEMORY. */
clattn_status clattn_mods_options(clattn_context *ctx, const clattn_attention_desc *desc, char *out,
                                  size_t len);
/* The sources to splice in before common.cl and after the kernel's file for a program's
 * options (false, NULLs: none). */
bool clattn_mods_source(const clattn_context *ctx, const char *options, const char **head,
                        const char **tail);
void clattn_mods_release(clattn_context *ctx);
/* The desc's block mask against the call's sizes and positions (INVALID_ARGUMENT). */
clattn_status clattn_block_mask_check(clattn_context *ctx, const clattn_attention_desc *desc,
                                      int64_t batch, int64_t h_q, int64_t n_q, int64_t n_kv);
/* Its flags and strides for common.cl's TERM_PARAMS (NULL and zeros without one). */
void clattn_block_mask_arg(const clattn_attention_desc *desc, cl_mem *flags, cl_long4 *st);
/* The user buffers on the device, in order: the caller's cl_mem, or a copy of the host
 * array (owned[i]: release it after the launch). *n counts those set, even on failure. */
clattn_status clattn_mods_buffers(clattn_context *ctx, const clattn_attention_desc *desc,
                                  cl_mem out[CLATTN_MAX_MOD_BUFFERS],
                                  bool owned[CLATTN_MAX_MOD_BUFFERS], int *n);

/* ---- persistent program-binary cache (cache.c) ---- */
/* The folder from the option (or CLATTN_CACHE_DIR, $XDG_CACHE_HOME/clattn,
 * ~/.cache/clattn); NULL when disabled ("" or "off") or out of memory. Heap string. */
char *clattn_cache_dir(const char *option);
/* Sets ctx->cache_dir and ctx->cache_binaries from the options (NULL: defaults) once the
 * device's platform is known; CLATTN_ERROR_INVALID_ARGUMENT for an unknown binary_cache
 * (a folder that cannot be allocated only turns the cache off). */
clattn_status clattn_cache_open(clattn_context *ctx, const clattn_context_options *options);
/* FNV-1a, 64-bit (the cache's keys and files, the snippets' program ids): h over s and
 * its NUL (which separates fields); start from CLATTN_HASH_SEED. */
#define CLATTN_HASH_SEED 0xcbf29ce484222325ULL
uint64_t clattn_hash_str(uint64_t h, const char *s);
uint64_t clattn_cache_key(const clattn_context *ctx, const char *const *sources, int n_sources,
                          const char *options);
/* The hash of the clattn version and the device's name, driver and version: what makes a
 * cached binary or a stored tuning valid. */
uint64_t clattn_device_hash(const clattn_context *ctx);
/* A program created from a cached binary (not yet built), or NULL. */
cl_program clattn_cache_load(const clattn_context *ctx, uint64_t key);
void clattn_cache_store(const clattn_context *ctx, uint64_t key, cl_program program);

/* ---- tuning (tuning.c): built-in blocking per device class, overrides, stored ---- */
/* Reads CLATTN_TUNE and CLATTN_BLOCKING and the device's tuning file: once, at context
 * creation. */
void clattn_tuning_init(clattn_context *ctx);
void clattn_tuning_release(clattn_context *ctx);
/* What the blocking of one tiled kernel is asked to be. */
typedef struct clattn_blocking_request {
    clattn_kernel kernel;
    int64_t d_k, d_v;        /* head dims (0 where the kernel has none) */
    int64_t n_q;             /* queries: small problems keep the built-in class */
    int64_t private_floats;  /* per-query private floats besides the tile's (CPU stack) */
    int64_t private_per_key; /* … plus this many per key of the tile */
    int64_t local_per_key;   /* local-memory floats per key of a tile */
    size_t tile_cap;         /* the largest tile the kernel's local memory allows */
    size_t wg_request;       /* 0 = choose; else exactly this many work-items */
} clattn_blocking_request;
/* RQ, WG and TILE_KV for a request: overrides first, then stored tuning, then the
 * built-in table; *limit gets the work-group ceiling of the device (and, on CPUs, of
 * the private arrays); *wg_fixed whether WG was asked for (request, override, stored)
 * rather than chosen within *limit. */
void clattn_tuning_choose(const clattn_context *ctx, const clattn_blocking_request *r, size_t *rq,
                          size_t *wg, size_t *tile_kv, size_t *limit, bool *wg_fixed);
/* NV, the float16 vectors per step of the tiled kernels' micro-kernels (common.cl) for a
 * blocking of rq queries per work-item: on CPU devices whose native float vector has 16
 * lanes (AVX-512) 4 up to RQ 4 and 2 above, else 1; CLATTN_BLOCKING's optional fourth
 * value overrides it. */
int clattn_tuning_vectors(const clattn_context *ctx, size_t rq);
/* The backward plan's blocking: bwd_dq.cl's query rows and bwd_dkdv.cl's keys per
 * work-item (on CPUs 4, 2 above head dim 128: the private arrays; on other devices 1;
 * CLATTN_BLOCKING's RQ within that cap where it is set), and bwd_dkdv.cl's key splits of
 * dQ's partial sums (bwd_dq_sum.cl) with their bytes, or 0: bwd_dq.cl forms dQ */
void clattn_backward_blocking(const clattn_context *ctx, const clattn_problem *pr,
                              clattn_backward_plan *plan);
/* The blocking an override (returns 1: CLATTN_BLOCKING, clattn_context_set_blocking)
 * or the stored tuning (2) gives the request, or 0 (none: nothing is written); a
 * request's wg_request replaces an override's WG and disables stored tuning. */
int clattn_tuning_explicit(const clattn_context *ctx, const clattn_blocking_request *r, size_t *rq,
                           size_t *wg, size_t *tile_kv);
/* The work-group ceiling of a kernel whose work-items hold private_bytes each: the
 * device's, and on CPUs what one thread's stack holds (PoCL runs a group on one). */
size_t clattn_group_limit_private(const clattn_context *ctx, int64_t private_bytes);
/* decode.cl: how many of the `rows` query rows of a KV head (query heads x queries)
 * one work-item takes, so that they share each K/V read: all of them up to a cap on
 * CPUs (private arrays), in blocks as even as possible; 1 on other devices; an
 * override of the fused kernel's blocking sets it (its RQ, at most the rows). */
size_t clattn_decode_rows(const clattn_context *ctx, int64_t rows, int64_t d_k, int64_t d_v);
/* Whether K's (or V's) heads interleave within its rows: each head's part of a row d
 * contiguous elements (unit column stride, a head stride of d or more) and a head's
 * stride below a row's, as in FlashAttention's [batch, seq, h_kv, d] cache and
 * [num_pages, page_size, h_kv, d] pool (several heads and rows). */
bool clattn_kv_heads_interleave(const clattn_view *k);
/* decode.cl's KV heads per work-item (NH) for K's view, `rows` rows per KV head and nr of
 * them per work-item: ctx->decode_heads where set (at most it; a divisor of h_kv), else 1
 * but on CPUs for paged caches whose pages hold less than CPU_DECODE_STRETCH_BYTES of a
 * head (CPU_DECODE_STRETCH_BYTES_16LANE on 16-lane CPUs, which take at least 2 for every
 * cache), with NH·nr at most 16 rows, while a work-item per compute unit remains; and on
 * CPUs every head for K rows whose heads interleave, with NH·nr at most
 * CPU_DECODE_ROWS_INTERLEAVED rows (where may_split, split-KV decoding then makes the
 * work-items; else while a work-item per compute unit remains); the private arrays within
 * budget either way. */
size_t clattn_decode_heads(const clattn_context *ctx, const clattn_view *k, int64_t rows, size_t nr,
                           int64_t d_v, bool may_split);
/* fused_gpu.cl's CT for a work-group of wg: the work-items sharing a row block (a power
 * of two up to 16 dividing wg; with sub-group reductions, a cluster of one sub-group). */
size_t clattn_gpu_ct(size_t wg);
/* desc.half_arithmetic: NULL when it runs (asked, the GPU family's fused_gpu.cl rather
 * than decoding, a device with cl_khr_fp16, Q, K and V read as float16 with no scales),
 * else why not ("" when it was not asked). */
const char *clattn_half_math_why_not(const clattn_context *ctx, const clattn_problem *pr,
                                     bool decode, bool gpu);
/* plan_gpu.c. Whether a blocking of fused_gpu.cl fits local memory (K and V apart if
 * they can be, else sharing one buffer: *kv_shared); half: built with HALF_MATH (Q, K and
 * V take 2 bytes an element in local memory, not 4). */
bool clattn_gpu_fits(const clattn_context *ctx, int64_t d_k, int64_t d_v, size_t rq, size_t wg,
                     size_t tile, bool half, bool *kv_shared);
/* fused_gpu.cl (the GPU family): an override or stored tuning if there is one (RQ rows
 * per work-item, WG work-items, TILE_KV keys), else the first of a list, largest row
 * blocks first, that fits local memory and the kernel's work-group limit; built with
 * sub-group reductions where the device has them, else (or where that build fails)
 * without. feat: the features' -D options; half: the half-arithmetic path (HALF_MATH;
 * clattn_half_math_why_not said it runs), whose smaller local tiles fit larger blockings. */
clattn_status clattn_plan_fused_gpu(clattn_context *ctx, int64_t n_q, int64_t d_k, int64_t d_v,
                                    size_t wg_request, const char *feat, bool half,
                                    clattn_blocked *out);
/* Largest TILE_KV (a multiple of 16, at most `cap`) whose local tiles of
 * local_floats_per_key floats per key fit the device's local memory; 0 if none. */
size_t clattn_fit_tile_kv(const clattn_context *ctx, int64_t local_floats_per_key, size_t cap);
/* The local memory the tiles may use: the device's less 1024 bytes for the kernels' own
 * small local arrays. */
cl_ulong clattn_local_tile_budget(const clattn_context *ctx);
/* The built-in keys per step of the tiled kernels on this device; fused: the cap for
 * head dims d_k, d_v. */
size_t clattn_default_tile_kv(const clattn_context *ctx, bool fused, int64_t per_key);

/* ---- programs (program.c) ---- */
clattn_status clattn_get_kernel(clattn_context *ctx, const char *file, const char *options,
                                clattn_program_entry **out);
void clattn_programs_release(clattn_context *ctx);

/* ---- reductions (reductions.c): desc.key_weight_sums, desc.max_logits ---- */
/* key_sums.cl for the problem's head dim, storage types and terms (feat: the fused
 * kernel's -D options), its work-group sized to the device's local memory. */
clattn_status clattn_plan_key_sums(clattn_context *ctx, const clattn_problem *pr, const char *feat,
                                   clattn_exec_plan *p);
/* row_max.cl for desc.max_logits (lse_dt: the LSE workspace's type, as the plan chose it
 * for the fused kernel; the ALiBi reference as the weights pass's). */
clattn_status clattn_plan_row_max(clattn_context *ctx, const clattn_problem *pr,
                                  clattn_dtype lse_dt, clattn_exec_plan *p);

/* A blocking call's device part: stages host's views, runs plan on them (reshaped by
 * adjust(dev, arg) when adjust is set: varlen's batch of sequences), waits, and reads
 * the outputs back into host's views (attention.c). */
clattn_status clattn_run_staged(clattn_context *ctx, const clattn_exec_plan *plan,
                                const clattn_problem *host,
                                void (*adjust)(clattn_problem *dev, const void *arg),
                                const void *arg);

/* The public description of an execution plan (clattn_attention_plan's out). */
void clattn_plan_describe(const clattn_exec_plan *p, clattn_plan *out);

/* ---- packed variable-length batches (varlen.c): desc.varlen ---- */
typedef enum {
    CLATTN_VARLEN_BLOCKING,
    CLATTN_VARLEN_ENQUEUE,
    CLATTN_VARLEN_PLAN,
    CLATTN_VARLEN_REFERENCE
} clattn_varlen_mode;
/* The packed call validated once, then the fused algorithm in one launch over the
 * sequences (offsets on the host or the device), or one attention per non-empty sequence
 * on slices (the unfused algorithm, the reference; enqueued: each after `wait`, joined in
 * `done`). */
clattn_status clattn_varlen_run(clattn_context *ctx, clattn_varlen_mode mode,
                                const clattn_attention_desc *desc, const clattn_tensor *q,
                                const clattn_tensor *k, const clattn_tensor *v,
                                const clattn_tensor *o, cl_uint n_wait, const cl_event *wait,
                                cl_event *done, clattn_plan *plan);

/* ---- numeric helpers ---- */
/* Rotary embeddings' frequencies f_p = base^(−2p/dim) for p < dim/2, rounded to
 * float32: what the kernels (append.cl, rope_q.cl) and the reference both use. */
void clattn_rope_freqs(const clattn_rotary *r, int64_t dim, float *out);
/* How far apart the rotated queries sit: 1 (query i at the cache's length + i) with a
 * causal mask or a window, else 0 (every query at the cache's length), as
 * FlashAttention's flash_attn_with_kvcache rotates them. */
int clattn_rope_q_step(const clattn_attention_desc *d);
/* With host kv_lens: the last position a rotary call rotates + 1 (Q's rows and the n_new
 * appended keys of every batch entry; at least 1). */
int64_t clattn_rope_rows(const clattn_attention_desc *d, int64_t batch, int64_t n_q, int64_t n_new);
float clattn_effective_scale(const clattn_attention_desc *desc, int64_t d_k);
/* Query heads per KV head (GQA's group): h_q / h_kv, and 1 for a problem without heads
 * (h_q = h_kv = 0, which validation allows as empty; no division by zero). */
static inline int64_t clattn_group(int64_t h_q, int64_t h_kv)
{
    return h_kv > 0 ? h_q / h_kv : 1;
}
static inline int64_t clattn_ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* ---- which keys a query row sees (rule.c): the one implementation on the host ---- */
typedef clattn_key_range clattn_row_rule;
/* The rule of (batch entry b, query row i), under every term of the desc; desc's
 * positions and lengths already validated. All position sums saturate (rule.c). */
clattn_row_rule clattn_rule(const clattn_attention_desc *d, int64_t b, int64_t i, int64_t n_q,
                            int64_t n_kv);
/* The window bounds the kernels get: -1 = unbounded, else capped so that no sum of a
 * position and a bound overflows (the cap is far beyond any position). */
void clattn_rule_window(const clattn_attention_desc *d, int64_t *left, int64_t *right);
/* The most keys n_q consecutive query rows of one batch entry see together (the width of
 * the union of their ranges), at most n_kv: a window bounds it (left + right + n_q, the
 * right bound 0 under a causal mask), anything else leaves n_kv. Split-KV decoding cuts
 * this span, not n_kv, into chunks (plan.c). */
int64_t clattn_rule_span(const clattn_attention_desc *d, int64_t n_q, int64_t n_kv);

/* Element idx of a host view as float (any float dtype, or bool as 0/1). */
static inline float clattn_host_load(const clattn_view *v, int64_t idx)
{
    switch (v->dtype) {
    case CLATTN_FLOAT16: return clattn_f16_to_f32(((const uint16_t *)v->host)[idx]);
    case CLATTN_BFLOAT16: return clattn_bf16_to_f32(((const uint16_t *)v->host)[idx]);
    case CLATTN_BOOL: return ((const uint8_t *)v->host)[idx] ? 1.0f : 0.0f;
    case CLATTN_FLOAT64: return (float)((const double *)v->host)[idx];
    case CLATTN_INT8: return (float)((const int8_t *)v->host)[idx]; /* (before its scale) */
    case CLATTN_FLOAT8_E4M3: return clattn_fp8e4m3_to_f32(((const uint8_t *)v->host)[idx]);
    default: return ((const float *)v->host)[idx];
    }
}

static inline void clattn_host_store(const clattn_view *v, int64_t idx, float x)
{
    switch (v->dtype) {
    case CLATTN_FLOAT16: ((uint16_t *)v->host)[idx] = clattn_f32_to_f16(x); break;
    case CLATTN_BFLOAT16: ((uint16_t *)v->host)[idx] = clattn_f32_to_bf16(x); break;
    case CLATTN_BOOL: ((uint8_t *)v->host)[idx] = x != 0.0f; break;
    case CLATTN_FLOAT64: ((double *)v->host)[idx] = x; break;
    default: ((float *)v->host)[idx] = x;
    }
}

/* A float64 value into a host view: kept whole in a float64 view (LSE), rounded to the
 * view's dtype otherwise. */
static inline void clattn_host_store64(const clattn_view *v, int64_t idx, double x)
{
    if (v->dtype == CLATTN_FLOAT64)
        ((double *)v->host)[idx] = x;
    else
        clattn_host_store(v, idx, (float)x);
}

/* A host view's element as float64 (exact for float64 and every narrower type). */
static inline double clattn_host_load64(const clattn_view *v, int64_t idx)
{
    return v->dtype == CLATTN_FLOAT64 ? ((const double *)v->host)[idx]
                                      : (double)clattn_host_load(v, idx);
}

/* Element (b, h, s, d) of a view; of a paged view (host table) through its block table
 * (the kernels' twin: common.cl kv_row). */
static inline int64_t clattn_view_index(const clattn_view *v, int64_t b, int64_t h, int64_t s,
                                        int64_t d)
{
    if (v->paged && v->page_table) {
        const int64_t page = v->page_table[b * v->page_stride + s / v->page_size];
        return v->offset + page * v->s[0] + h * v->s[1] + (s % v->page_size) * v->s[2] +
               d * v->s[3];
    }
    return v->offset + b * v->s[0] + h * v->s[1] + s * v->s[2] + d * v->s[3];
}
#endif
