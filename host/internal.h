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
} clattn_view;

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
                                            const clattn_view *o, const clattn_view *w);
clattn_status clattn_check_desc(clattn_context *ctx, const clattn_attention_desc *desc);
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
/* A program created from a cached binary (not yet built), or NULL. */
cl_program clattn_cache_load(const clattn_context *ctx, uint64_t key);
void clattn_cache_store(const clattn_context *ctx, uint64_t key, cl_program program);

/* ---- programs (program.c) ---- */
clattn_status clattn_get_kernel(clattn_context *ctx, const char *file, const char *options,
                                clattn_program_entry **out);
void clattn_programs_release(clattn_context *ctx);

/* ---- numeric helpers ---- */
float clattn_effective_scale(const clattn_attention_desc *desc, int64_t d_k);

/* Whether key j is visible to query i under a built-in mask (same rule as
 * cl/common.cl's key_visible). */
static inline bool clattn_key_visible(clattn_mask mask, int64_t i, int64_t j, int64_t n_q,
                                      int64_t n_kv)
{
    switch (mask) {
    case CLATTN_MASK_CAUSAL_TOP_LEFT: return j <= i;
    case CLATTN_MASK_CAUSAL_BOTTOM_RIGHT: return j <= i + n_kv - n_q;
    case CLATTN_MASK_NO_SELF: return j != i;
    default: return true;
    }
}

static inline int64_t clattn_view_index(const clattn_view *v, int64_t b, int64_t h, int64_t s,
                                        int64_t d)
{
    return v->offset + b * v->s[0] + h * v->s[1] + s * v->s[2] + d * v->s[3];
}
#endif
