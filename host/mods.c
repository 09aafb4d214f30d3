/* Score and mask snippets (clattn_mods.h): their checks, the sources the host splices in
 * (before common.cl: the macros that give common.cl's score_terms16 the user buffers and
 * the snippets' prototypes; after the kernel's file: the snippets), and those buffers on
 * the device. A program built with snippets names them in its options by the hash of their
 * texts and buffer types (-DMOD_ID=…), so the context's program table and the binary cache
 * keep one program per snippet text; the context keeps each one's sources for program.c
 * (clattn_mods_source), built on its first use. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct clattn_mod_source {
    uint64_t id;
    char *score, *mask;                     /* the snippets' texts (copies), or NULL */
    char types[CLATTN_MAX_MOD_BUFFERS + 1]; /* buffer_types */
    char *head, *tail; /* spliced in before common.cl / after the kernel's file */
    clattn_mod_source *next;
};

clattn_status clattn_mods_check(clattn_context *ctx, const clattn_attention_desc *desc)
{
    const clattn_mods *m = desc->mods;
    if (!m)
        return CLATTN_SUCCESS;
    if (!m->score_mod && !m->mask_mod)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "mods: neither score_mod nor mask_mod is set");
    if ((m->score_mod && !*m->score_mod) || (m->mask_mod && !*m->mask_mod))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "mods: %s is an empty string (NULL for none)",
                           m->score_mod && !*m->score_mod ? "score_mod" : "mask_mod");
    if ((m->score_mod && !m->mask_mod && strstr(m->score_mod, "clattn_mask_mod")) ||
        (m->mask_mod && !m->score_mod && strstr(m->mask_mod, "clattn_score_mod")))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "mods: %s names %s, which would not be called: give each function's "
                           "source in its own field",
                           m->mask_mod ? "mask_mod" : "score_mod",
                           m->mask_mod ? "clattn_score_mod" : "clattn_mask_mod");
    if (m->n_buffers < 0 || m->n_buffers > CLATTN_MAX_MOD_BUFFERS ||
        (m->n_buffers > 0 && !m->buffers))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "mods: n_buffers %d must be 0 … %d, with buffers non-NULL", m->n_buffers,
                           CLATTN_MAX_MOD_BUFFERS);
    for (int i = 0; i < m->n_buffers; i++) {
        const clattn_mod_buffer *u = &m->buffers[i];
        char name[32];
        snprintf(name, sizeof name, "mods.buffers[%d]", i);
        if (u->dtype != CLATTN_INT32 && u->dtype != CLATTN_FLOAT32)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "%s: dtype %d; it must be CLATTN_INT32 or CLATTN_FLOAT32", name,
                               (int)u->dtype);
        if (u->count < 1 || u->count > ((int64_t)1 << 40))
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "%s: count %lld must be 1 … 2^40", name, (long long)u->count);
        if (!u->host == !u->buffer)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "%s: exactly one of host and buffer must be set", name);
        if (u->buffer) {
            clattn_view v = clattn_view_packed(1, 1, 1, u->count);
            v.buffer = u->buffer;
            v.dtype = u->dtype;
            v.esize = 4;
            v.span = u->count;
            clattn_status st = clattn_view_check_buffer(ctx, name, &v);
            if (st != CLATTN_SUCCESS)
                return st;
        }
    }
    return CLATTN_SUCCESS;
}

clattn_status clattn_mods_check_twins(const clattn_attention_desc *desc)
{
    const clattn_mods *m = desc ? desc->mods : NULL;
    if (!m)
        return CLATTN_SUCCESS;
    const char *no = m->score_mod && !m->score_mod_host ? "score_mod without score_mod_host"
                     : m->mask_mod && !m->mask_mod_host ? "mask_mod without mask_mod_host"
                                                        : NULL;
    for (int i = 0; !no && m->buffers && i < m->n_buffers && i < CLATTN_MAX_MOD_BUFFERS; i++)
        if (!m->buffers[i].host)
            no = "a user buffer without a host array";
    if (no)
        return clattn_fail(NULL, CLATTN_ERROR_UNSUPPORTED,
                           "mods: %s (the reference runs the snippets' C twins on host arrays)",
                           no);
    return CLATTN_SUCCESS;
}

bool clattn_alibi_absolute(const clattn_attention_desc *desc)
{
    return desc && desc->mods && desc->mods->score_mod;
}

/* The buffers' parameter types, "i" (int32) or "f" (float32) each, into types[]. */
static void buffer_types(const clattn_mods *m, char types[CLATTN_MAX_MOD_BUFFERS + 1])
{
    int n = 0;
    for (; n < m->n_buffers && n < CLATTN_MAX_MOD_BUFFERS; n++)
        types[n] = m->buffers[n].dtype == CLATTN_INT32 ? 'i' : 'f';
    types[n] = '\0';
}

/* What a program (or, mask_only, a block mask) depends on in the mods: the snippets'
 * texts (NULL and "" hash apart: "" is refused) and the buffers' types. */
static uint64_t mods_hash(const clattn_mods *m, bool mask_only)
{
    char types[CLATTN_MAX_MOD_BUFFERS + 1];
    buffer_types(m, types);
    uint64_t h = clattn_hash_str(CLATTN_HASH_SEED, types);
    if (!mask_only)
        h = clattn_hash_str(h, m->score_mod ? m->score_mod : "");
    return clattn_hash_str(h, m->mask_mod ? m->mask_mod : "");
}

static bool same_text(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static char *copy_text(const char *s, bool *failed)
{
    char *c = s ? malloc(strlen(s) + 1) : NULL;
    if (s && !c)
        *failed = true;
    return c ? strcpy(c, s) : NULL;
}

/* The source spliced in before common.cl: the switches, the buffers' parameters and
 * arguments and the snippets' prototypes (a definition of other types, or writing a
 * buffer, is a compile error at the snippet's line), then common.cl's own numbering. */
static char *head_source(const clattn_mods *m)
{
    const size_t len = 1024 + (size_t)m->n_buffers * 128;
    char *s = malloc(len);
    if (!s)
        return NULL;
    size_t at =
        (size_t)snprintf(s, len, "#define MODS 1\n#define MOD_SCORE %d\n#define MOD_MASK %d\n",
                         m->score_mod != NULL, m->mask_mod != NULL);
    at += (size_t)snprintf(s + at, len - at, "#define MOD_BUF_PARAMS");
    for (int i = 0; i < m->n_buffers; i++)
        at += (size_t)snprintf(s + at, len - at, " , __global const %s *clattn_buf%d",
                               m->buffers[i].dtype == CLATTN_INT32 ? "int" : "float", i);
    at += (size_t)snprintf(s + at, len - at, "\n#define MOD_BUF_ARGS");
    for (int i = 0; i < m->n_buffers; i++)
        at += (size_t)snprintf(s + at, len - at, " , clattn_buf%d", i);
    at += (size_t)snprintf(s + at, len - at, "\n");
    if (m->score_mod)
        at += (size_t)snprintf(s + at, len - at,
                               "float clattn_score_mod(float score, int b, int h, long q_pos, "
                               "long k_pos MOD_BUF_PARAMS);\n");
    if (m->mask_mod)
        at += (size_t)snprintf(s + at, len - at,
                               "bool clattn_mask_mod(int b, int h, long q_pos, long k_pos "
                               "MOD_BUF_PARAMS);\n");
    snprintf(s + at, len - at, "#line 1 \"common.cl\"\n");
    return s;
}

/* The snippets themselves, after every clattn source (so that their macros cannot reach
 * clattn's code), each from its own line 1. */
static char *tail_source(const clattn_mods *m)
{
    const size_t len =
        128 + (m->score_mod ? strlen(m->score_mod) : 0) + (m->mask_mod ? strlen(m->mask_mod) : 0);
    char *s = malloc(len);
    if (!s)
        return NULL;
    size_t at = 0;
    s[0] = '\0';
    if (m->score_mod)
        at += (size_t)snprintf(s + at, len - at, "\n#line 1 \"score_mod\"\n%s\n\n", m->score_mod);
    if (m->mask_mod)
        snprintf(s + at, len - at, "\n#line 1 \"mask_mod\"\n%s\n\n", m->mask_mod);
    return s;
}

/* The context's entry of program id `id`, or NULL. */
static const clattn_mod_source *entry(const clattn_context *ctx, uint64_t id)
{
    for (const clattn_mod_source *e = ctx->mod_sources; e; e = e->next)
        if (e->id == id)
            return e;
    return NULL;
}

clattn_status clattn_mods_options(clattn_context *ctx, const clattn_attention_desc *desc, char *out,
                                  size_t len)
{
    out[0] = '\0';
    if (!desc || !desc->mods)
        return CLATTN_SUCCESS;
    const clattn_mods *m = desc->mods;
    char types[CLATTN_MAX_MOD_BUFFERS + 1];
    buffer_types(m, types);
    /* the id names the program: the inputs' hash, moved on past another text's (each call
     * compares texts; the sources are built once, on the first call with them) */
    uint64_t id = mods_hash(m, false);
    for (const clattn_mod_source *e; (e = entry(ctx, id)) != NULL; id++) /* (++: a collision) */
        if (same_text(e->score, m->score_mod) && same_text(e->mask, m->mask_mod) &&
            strcmp(e->types, types) == 0) {
            snprintf(out, len, " -DMOD_ID=%016llx", (unsigned long long)id);
            return CLATTN_SUCCESS;
        }
    bool failed = false;
    clattn_mod_source *e = calloc(1, sizeof *e);
    if (e) {
        e->id = id;
        e->score = copy_text(m->score_mod, &failed);
        e->mask = copy_text(m->mask_mod, &failed);
        memcpy(e->types, types, sizeof types);
        e->head = head_source(m);
        e->tail = tail_source(m);
    }
    if (!e || failed || !e->head || !e->tail) {
        if (e) {
            free(e->score);
            free(e->mask);
            free(e->head);
            free(e->tail);
            free(e);
        }
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "mods: the snippets' source");
    }
    e->next = ctx->mod_sources;
    ctx->mod_sources = e;
    snprintf(out, len, " -DMOD_ID=%016llx", (unsigned long long)id);
    return CLATTN_SUCCESS;
}

bool clattn_mods_source(const clattn_context *ctx, const char *options, const char **head,
                        const char **tail)
{
    *head = *tail = NULL;
    const char *at = strstr(options, "-DMOD_ID=");
    if (!at)
        return false;
    const clattn_mod_source *e = entry(ctx, strtoull(at + 9, NULL, 16));
    if (!e)
        return false;
    *head = e->head;
    *tail = e->tail;
    return true;
}

void clattn_mods_release(clattn_context *ctx)
{
    while (ctx->mod_sources) {
        clattn_mod_source *next = ctx->mod_sources->next;
        free(ctx->mod_sources->score);
        free(ctx->mod_sources->mask);
        free(ctx->mod_sources->head);
        free(ctx->mod_sources->tail);
        free(ctx->mod_sources);
        ctx->mod_sources = next;
    }
}

clattn_status clattn_mods_buffers(clattn_context *ctx, const clattn_attention_desc *desc,
                                  cl_mem out[CLATTN_MAX_MOD_BUFFERS],
                                  bool owned[CLATTN_MAX_MOD_BUFFERS], int *n)
{
    *n = 0;
    const clattn_mods *m = desc ? desc->mods : NULL;
    for (int i = 0; m && i < m->n_buffers; i++) {
        const clattn_mod_buffer *u = &m->buffers[i];
        owned[i] = u->buffer == NULL;
        out[i] = u->buffer;
        if (owned[i]) {
            clattn_status st = clattn_create_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                                    u->count * 4, (void *)u->host, &out[i]);
            if (st != CLATTN_SUCCESS)
                return st;
        }
        *n = i + 1;
    }
    return CLATTN_SUCCESS;
}

/* ---- block masks (clattn_block_mask_create) ---- */

struct clattn_block_mask {
    clattn_context *ctx;
    cl_mem flags; /* [batch, heads, n_qb, n_kb] bytes */
    int64_t batch, heads, n_q, n_kv, n_qb, n_kb;
    int64_t q_start, kv_start;
    uint64_t mask_id; /* mask_mod's text and its buffers' dtypes */
};

clattn_status clattn_block_mask_create(clattn_context *ctx, const clattn_attention_desc *desc,
                                       int64_t batch, int64_t heads, int64_t n_q, int64_t n_kv,
                                       clattn_block_mask **out)
{
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    clattn_clear_error(ctx);
    if (!out || !desc)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "%s is NULL", out ? "desc" : "out");
    *out = NULL;
    clattn_status st = clattn_mods_check(ctx, desc);
    if (st != CLATTN_SUCCESS)
        return st;
    if (!desc->mods || !desc->mods->mask_mod)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "block mask: desc->mods has no mask_mod to build it from");
    const int64_t pos_max = (int64_t)1 << 53; /* positions, as clattn_check_desc's */
    const bool sizes_ok = n_q >= 0 && n_kv >= 0 && n_q <= pos_max && n_kv <= pos_max;
    const int64_t n_qb = sizes_ok ? clattn_ceil_div(n_q, 16) : 0;
    const int64_t n_kb = sizes_ok ? clattn_ceil_div(n_kv, 16) : 0;
    int64_t count = 0;
    if (!sizes_ok || batch < 1 || heads < 1 || heads > INT32_MAX ||
        !clattn_mul_ok(batch, heads, &count) || !clattn_mul_ok(count, n_qb, &count) ||
        !clattn_mul_ok(count, n_kb, &count))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                           "block mask: batch %lld and heads %lld (≥ 1), n_q %lld and n_kv %lld "
                           "(0 … 2^53) out of range",
                           (long long)batch, (long long)heads, (long long)n_q, (long long)n_kv);
    char opts[96];
    snprintf(opts, sizeof opts, "%s", CLATTN_CL_STD);
    const size_t at = strlen(opts);
    clattn_program_entry *e = NULL;
    if ((st = clattn_mods_options(ctx, desc, opts + at, sizeof opts - at)) != CLATTN_SUCCESS ||
        (st = clattn_get_kernel(ctx, "block_mask.cl", opts, &e)) != CLATTN_SUCCESS)
        return st;
    clattn_block_mask *m = calloc(1, sizeof *m);
    if (!m)
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "block mask");
    *m = (clattn_block_mask){ctx,
                             NULL,
                             batch,
                             heads,
                             n_q,
                             n_kv,
                             n_qb,
                             n_kb,
                             desc->q_start,
                             desc->kv_start,
                             mods_hash(desc->mods, true)};
    st = clattn_create_buffer(ctx, CL_MEM_READ_WRITE, count > 0 ? count : 1, NULL, &m->flags);
    cl_mem bufs[CLATTN_MAX_MOD_BUFFERS];
    bool owned[CLATTN_MAX_MOD_BUFFERS];
    int n_bufs = 0;
    if (st == CLATTN_SUCCESS)
        st = clattn_mods_buffers(ctx, desc, bufs, owned, &n_bufs);
    if (st == CLATTN_SUCCESS && count > 0) {
        const cl_int h32 = (cl_int)heads;
        const cl_long longs[4] = {n_q, n_kv, desc->q_start, desc->kv_start};
        cl_int err = clSetKernelArg(e->kernel, 0, sizeof(cl_mem), &m->flags);
        err |= clSetKernelArg(e->kernel, 1, sizeof h32, &h32);
        for (cl_uint i = 0; i < 4; i++)
            err |= clSetKernelArg(e->kernel, 2 + i, sizeof(cl_long), &longs[i]);
        for (int i = 0; i < n_bufs; i++)
            err |= clSetKernelArg(e->kernel, 6 + (cl_uint)i, sizeof(cl_mem), &bufs[i]);
        const size_t global[3] = {(size_t)n_kb, (size_t)n_qb, (size_t)(batch * heads)};
        cl_event done = NULL;
        if (err == CL_SUCCESS)
            err = clEnqueueNDRangeKernel(ctx->queue, e->kernel, 3, NULL, global, NULL, 0, NULL,
                                         &done);
        if (err == CL_SUCCESS)
            err = clWaitForEvents(1, &done);
        if (done)
            clReleaseEvent(done);
        if (err != CL_SUCCESS)
            st = clattn_fail_cl(ctx, err, "block mask: building the flags (block_mask.cl)");
    }
    for (int i = 0; i < n_bufs; i++)
        if (owned[i] && bufs[i])
            clReleaseMemObject(bufs[i]);
    if (st != CLATTN_SUCCESS) {
        clattn_block_mask_release(m);
        return st;
    }
    *out = m;
    return CLATTN_SUCCESS;
}

clattn_status clattn_block_mask_counts(const clattn_block_mask *m, int64_t *empty, int64_t *partial,
                                       int64_t *full)
{
    if (!m)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "mask is NULL");
    const size_t n = (size_t)(m->batch * m->heads * m->n_qb * m->n_kb);
    unsigned char *f = malloc(n > 0 ? n : 1);
    if (!f)
        return clattn_fail(m->ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "block mask counts");
    const cl_int err =
        n > 0 ? clEnqueueReadBuffer(m->ctx->queue, m->flags, CL_TRUE, 0, n, f, 0, NULL, NULL)
              : CL_SUCCESS;
    int64_t c[3] = {0, 0, 0};
    for (size_t i = 0; err == CL_SUCCESS && i < n; i++)
        c[f[i] < 3 ? f[i] : 1]++;
    free(f);
    if (err != CL_SUCCESS)
        return clattn_fail_cl(m->ctx, err, "block mask counts: clEnqueueReadBuffer");
    if (empty)
        *empty = c[0];
    if (partial)
        *partial = c[1];
    if (full)
        *full = c[2];
    return CLATTN_SUCCESS;
}

void clattn_block_mask_release(clattn_block_mask *m)
{
    if (!m)
        return;
    if (m->flags)
        clReleaseMemObject(m->flags);
    free(m);
}

clattn_status clattn_block_mask_check(clattn_context *ctx, const clattn_attention_desc *desc,
                                      int64_t batch, int64_t h_q, int64_t n_q, int64_t n_kv)
{
    const clattn_block_mask *m = desc && desc->mods ? desc->mods->block_mask : NULL;
    if (!m)
        return CLATTN_SUCCESS;
    const char *why = !desc->mods->mask_mod || m->mask_id != mods_hash(desc->mods, true)
                          ? "another mask_mod (or buffer dtypes)"
                      : m->ctx != ctx ? "another context"
                      : m->q_start != desc->q_start || m->kv_start != desc->kv_start
                          ? "other q_start / kv_start"
                      : m->n_q != n_q || m->n_kv != n_kv ? "another n_q or n_kv"
                      : (m->batch != 1 && m->batch != batch) || (m->heads != 1 && m->heads != h_q)
                          ? "another batch or head count"
                          : NULL;
    if (why)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "mods.block_mask was built for %s (it has batch %lld, heads %lld, "
                           "n_q %lld, n_kv %lld, q_start %lld, kv_start %lld)",
                           why, (long long)m->batch, (long long)m->heads, (long long)m->n_q,
                           (long long)m->n_kv, (long long)m->q_start, (long long)m->kv_start);
    return CLATTN_SUCCESS;
}

void clattn_block_mask_arg(const clattn_attention_desc *desc, cl_mem *flags, cl_long4 *st)
{
    const clattn_block_mask *m = desc && desc->mods ? desc->mods->block_mask : NULL;
    *flags = m ? m->flags : NULL;
    const int64_t per_head = m ? m->n_qb * m->n_kb : 0;
    *st = (cl_long4){{m && m->batch > 1 ? m->heads * per_head : 0, m && m->heads > 1 ? per_head : 0,
                      m ? m->n_kb : 0, 1}};
}
