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

/* One stored tuning result (tune.c). */
typedef struct clattn_tune_entry {
    char key[64]; /* "<kernel> <d_k> <d_v>" */
    unsigned rq, wg, tile_kv;
} clattn_tune_entry;

struct clattn_context {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    char device_name[256];
    cl_device_type device_type;
    size_t max_wg;       /* CL_DEVICE_MAX_WORK_GROUP_SIZE */
    size_t max_wi[3];    /* CL_DEVICE_MAX_WORK_ITEM_SIZES */
    cl_ulong local_mem;  /* CL_DEVICE_LOCAL_MEM_SIZE, bytes */
    cl_ulong max_alloc;  /* CL_DEVICE_MAX_MEM_ALLOC_SIZE, bytes */
    cl_ulong global_mem; /* CL_DEVICE_GLOBAL_MEM_SIZE, bytes */
    char *kernel_dir;    /* NULL = embedded sources */
    char *cache_dir;     /* program-binary cache folder; NULL = off */
    clattn_program_entry *programs;
    char *tune_path;         /* the device's tuning file (NULL: cache disabled) */
    clattn_tune_entry *tune; /* loaded entries */
    int n_tune;
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
} clattn_view;

/* Bit sets of dtypes a role accepts (clattn_view_check_dtype). */
#define CLATTN_DT_F32 (1u << CLATTN_FLOAT32)
#define CLATTN_DT_FLOATS ((1u << CLATTN_FLOAT32) | (1u << CLATTN_FLOAT16) | (1u << CLATTN_BFLOAT16))
#define CLATTN_DT_MASK ((1u << CLATTN_FLOAT32) | (1u << CLATTN_BOOL))

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

/* ---- views (validate.c) ---- */
typedef enum { CLATTN_STORAGE_HOST, CLATTN_STORAGE_BUFFER, CLATTN_STORAGE_ANY } clattn_storage;
clattn_status clattn_view_make(clattn_context *ctx, const char *name, const clattn_tensor *t,
                               clattn_storage storage, bool is_output, clattn_view *out);
/* checks shapes of an attention call: q, k, v, o and the optional weights */
clattn_status clattn_check_attention_shapes(clattn_context *ctx, const clattn_view *q,
                                            const clattn_view *k, const clattn_view *v,
                                            const clattn_view *o, const clattn_view *w,
                                            bool w_head_mean);
clattn_status clattn_check_desc(clattn_context *ctx, const clattn_attention_desc *desc);
/* Copies the elements of host view hv from `from` (a buffer laid out like hv's span,
 * starting at hv's offset) into hv's storage: only the view's elements are written. */
void clattn_view_scatter(const clattn_view *hv, const char *from);
/* INVALID_ARGUMENT unless v's dtype is in `allowed` (CLATTN_DT_*) */
clattn_status clattn_view_check_dtype(clattn_context *ctx, const char *name, const clattn_view *v,
                                      unsigned allowed);
/* The optional inputs and outputs of a desc for an attention call, validated against
 * the call's q, k (and o for shapes): mask tensor, lengths, slopes, LSE. Views are made
 * with `storage`; absent ones get count 0 and have_* false. */
typedef struct clattn_extras {
    bool has_mask, has_lse;
    clattn_view mask; /* with stride 0 on broadcast dimensions */
    clattn_view lse;
} clattn_extras;
clattn_status clattn_check_extras(clattn_context *ctx, const clattn_attention_desc *desc,
                                  const clattn_view *q, const clattn_view *k,
                                  clattn_storage storage, clattn_extras *out);
bool clattn_mul_ok(int64_t a, int64_t b, int64_t *out);
/* Whether the extents [offset, offset + span) of two views on the same storage (the same
 * host memory or the same cl_mem) intersect. */
bool clattn_views_overlap(const clattn_view *a, const clattn_view *b);

/* ---- persistent program-binary cache (cache.c) ---- */
/* The folder from the option (or CLATTN_CACHE_DIR, $XDG_CACHE_HOME/clattn,
 * ~/.cache/clattn); NULL when disabled ("" or "off") or out of memory. Heap string. */
char *clattn_cache_dir(const char *option);
uint64_t clattn_cache_key(const clattn_context *ctx, const char *const *sources, int n_sources,
                          const char *options);
/* The hash of the clattn version and the device's name, driver and version: what makes a
 * cached binary or a stored tuning valid. */
uint64_t clattn_device_hash(const clattn_context *ctx);
/* A program created from a cached binary (not yet built), or NULL. */
cl_program clattn_cache_load(const clattn_context *ctx, uint64_t key);
void clattn_cache_store(const clattn_context *ctx, uint64_t key, cl_program program);

/* ---- stored tuning (tune.c) ---- */
void clattn_tune_load(clattn_context *ctx);
const clattn_tune_entry *clattn_tune_find(const clattn_context *ctx, const char *key);

/* ---- programs (program.c) ---- */
clattn_status clattn_get_kernel(clattn_context *ctx, const char *file, const char *options,
                                clattn_program_entry **out);
void clattn_programs_release(clattn_context *ctx);

/* ---- numeric helpers ---- */
float clattn_effective_scale(const clattn_attention_desc *desc, int64_t d_k);

/* The positional rules of one (batch entry, query row), shared by the reference and
 * the host-side planning (same rules as cl/common.cl). */
typedef struct clattn_row_rule {
    int64_t lo, hi; /* visible keys are lo <= j < hi (lengths, causal, window) */
    int64_t self;   /* NO_SELF: the excluded key (a_i), else -1 */
    int64_t diag;   /* a_i: the key aligned with this query */
    bool valid;     /* i < q_len */
} clattn_row_rule;

static inline clattn_row_rule clattn_rule(const clattn_attention_desc *d, int64_t b, int64_t i,
                                          int64_t n_q, int64_t n_kv)
{
    clattn_row_rule r;
    const int64_t nq_b = d->q_lens ? d->q_lens[b] : n_q;
    const int64_t nkv_b = d->kv_lens ? d->kv_lens[b] : n_kv;
    r.valid = i < nq_b;
    r.diag = i + d->q_start - d->kv_start +
             (d->mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT ? nkv_b - nq_b : 0);
    r.lo = 0;
    r.hi = nkv_b;
    if ((d->mask == CLATTN_MASK_CAUSAL_TOP_LEFT || d->mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT) &&
        r.diag + 1 < r.hi)
        r.hi = r.diag + 1;
    /* positions are validated to |x| < 2^53 and windows are capped here, so nothing
     * below overflows */
    const int64_t cap = (int64_t)1 << 60;
    const int64_t wl = d->window_left < cap ? d->window_left : cap;
    const int64_t wr = d->window_right < cap ? d->window_right : cap;
    if (d->window && wr >= 0 && r.diag + wr + 1 < r.hi)
        r.hi = r.diag + wr + 1;
    if (d->window && wl >= 0 && r.diag - wl > r.lo)
        r.lo = r.diag - wl;
    if (r.lo > nkv_b) /* within [0, n_kv_b], as in the kernels */
        r.lo = nkv_b;
    if (r.hi < r.lo)
        r.hi = r.lo;
    r.self = d->mask == CLATTN_MASK_NO_SELF ? r.diag : -1;
    return r;
}

/* Element idx of a host view as float (any float dtype, or bool as 0/1). */
static inline float clattn_host_load(const clattn_view *v, int64_t idx)
{
    switch (v->dtype) {
    case CLATTN_FLOAT16: return clattn_f16_to_f32(((const uint16_t *)v->host)[idx]);
    case CLATTN_BFLOAT16: return clattn_bf16_to_f32(((const uint16_t *)v->host)[idx]);
    case CLATTN_BOOL: return ((const uint8_t *)v->host)[idx] ? 1.0f : 0.0f;
    default: return ((const float *)v->host)[idx];
    }
}

static inline void clattn_host_store(const clattn_view *v, int64_t idx, float x)
{
    switch (v->dtype) {
    case CLATTN_FLOAT16: ((uint16_t *)v->host)[idx] = clattn_f32_to_f16(x); break;
    case CLATTN_BFLOAT16: ((uint16_t *)v->host)[idx] = clattn_f32_to_bf16(x); break;
    case CLATTN_BOOL: ((uint8_t *)v->host)[idx] = x != 0.0f; break;
    default: ((float *)v->host)[idx] = x;
    }
}

static inline int64_t clattn_view_index(const clattn_view *v, int64_t b, int64_t h, int64_t s,
                                        int64_t d)
{
    return v->offset + b * v->s[0] + h * v->s[1] + s * v->s[2] + d * v->s[3];
}
#endif
