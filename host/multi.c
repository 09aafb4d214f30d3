/* Several devices: one attention call split by (batch, KV head) or by keys across a list
 * of clattn contexts, the queues running concurrently; the key split is merged exactly
 * with clattn_merge (log-sum-exp). docs/SCALING.md describes the rules. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LL(x) ((long long)(x))

struct clattn_multi {
    size_t n;
    clattn_context **ctx;
    cl_device_id *sub; /* sub-devices to release (NULL entries: none) */
    double *weight;    /* normalised to sum 1 */
    char message[1536];
};

/* ------------------------------------------------------------------ errors */

static clattn_status multi_fail(clattn_multi *m, clattn_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static clattn_status multi_fail(clattn_multi *m, clattn_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->message, sizeof m->message, fmt, ap);
    va_end(ap);
    return st;
}

/* Copies device i's last message into the object's, prefixed with the device. */
static clattn_status device_fail(clattn_multi *m, size_t i, clattn_status st)
{
    return multi_fail(m, st, "device %zu (%s): %s", i, m->ctx[i]->device_name,
                      clattn_last_error_message(m->ctx[i]));
}

const char *clattn_multi_last_error_message(const clattn_multi *multi)
{
    return multi ? multi->message : clattn_last_error_message(NULL);
}

/* ------------------------------------------------------------------ creation */

static clattn_status multi_new(size_t n, clattn_multi **out)
{
    clattn_multi *m = calloc(1, sizeof *m);
    if (m) {
        m->ctx = calloc(n, sizeof *m->ctx);
        m->sub = calloc(n, sizeof *m->sub);
        m->weight = calloc(n, sizeof *m->weight);
    }
    if (!m || !m->ctx || !m->sub || !m->weight) {
        clattn_multi_release(m);
        return clattn_fail(NULL, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                           "cannot allocate a multi-device object of %zu devices", n);
    }
    m->n = n;
    for (size_t i = 0; i < n; i++)
        m->weight[i] = 1.0 / (double)n;
    *out = m;
    return CLATTN_SUCCESS;
}

void clattn_multi_release(clattn_multi *multi)
{
    if (!multi)
        return;
    for (size_t i = 0; i < multi->n; i++) {
        clattn_context_release(multi->ctx ? multi->ctx[i] : NULL);
        if (multi->sub && multi->sub[i])
            clReleaseDevice(multi->sub[i]);
    }
    free(multi->ctx);
    free(multi->sub);
    free(multi->weight);
    free(multi);
}

clattn_status clattn_multi_create(const char *const *devices, size_t n_devices, clattn_multi **out)
{
    if (!out)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (!devices || n_devices == 0)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT,
                           "the device list is empty (devices %s, n_devices %zu)",
                           devices ? "set" : "NULL", n_devices);
    for (size_t i = 0; i < n_devices; i++)
        if (!devices[i])
            return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "devices[%zu] is NULL", i);
    clattn_multi *m = NULL;
    clattn_status st = multi_new(n_devices, &m);
    for (size_t i = 0; st == CLATTN_SUCCESS && i < n_devices; i++) {
        clattn_context_options opt = {devices[i], NULL, NULL};
        st = clattn_context_create(&opt, &m->ctx[i]);
        if (st != CLATTN_SUCCESS) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", clattn_last_error_message(NULL));
            clattn_fail(NULL, st, "devices[%zu] (\"%s\"): %s", i, devices[i], msg);
        }
    }
    if (st != CLATTN_SUCCESS) {
        clattn_multi_release(m);
        return st;
    }
    *out = m;
    return CLATTN_SUCCESS;
}

clattn_status clattn_multi_create_sub_devices(const char *device, size_t n_sub,
                                              const unsigned *compute_units, clattn_multi **out)
{
    if (!out)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (n_sub == 0 || n_sub > 64)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT,
                           "n_sub is %zu; ask for 1 to 64 sub-devices", n_sub);
    if (compute_units)
        for (size_t i = 0; i < n_sub; i++)
            if (compute_units[i] == 0)
                return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT,
                                   "compute_units[%zu] is 0; each sub-device needs at least one",
                                   i);
    /* find the device the way a context does, then partition it */
    clattn_context *probe = NULL;
    clattn_context_options opt = {device, NULL, NULL};
    clattn_status st = clattn_context_create(&opt, &probe);
    if (st != CLATTN_SUCCESS)
        return st;
    const cl_device_id parent = probe->device;
    const cl_platform_id platform = probe->platform;
    char parent_name[256];
    snprintf(parent_name, sizeof parent_name, "%s", probe->device_name);
    cl_uint cu = 0;
    clGetDeviceInfo(parent, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);

    cl_device_partition_property props[72];
    size_t np = 0;
    if (compute_units) {
        props[np++] = CL_DEVICE_PARTITION_BY_COUNTS;
        for (size_t i = 0; i < n_sub; i++)
            props[np++] = (cl_device_partition_property)compute_units[i];
        props[np++] = CL_DEVICE_PARTITION_BY_COUNTS_LIST_END;
    } else {
        props[np++] = CL_DEVICE_PARTITION_EQUALLY;
        props[np++] = (cl_device_partition_property)(cu / n_sub > 0 ? cu / n_sub : 1);
    }
    props[np] = 0;
    cl_device_id subs[64];
    cl_uint n_made = 0;
    cl_int err = clCreateSubDevices(parent, props, 64, subs, &n_made);
    if (err != CL_SUCCESS || n_made < n_sub) {
        for (cl_uint i = 0; err == CL_SUCCESS && i < n_made && i < 64; i++)
            clReleaseDevice(subs[i]);
        clattn_context_release(probe);
        return clattn_fail(NULL, CLATTN_ERROR_UNSUPPORTED,
                           "%s (%u compute units) cannot be partitioned into %zu sub-devices %s: "
                           "clCreateSubDevices gave %s, %u sub-devices",
                           parent_name, (unsigned)cu, n_sub,
                           compute_units ? "by counts" : "equally", clattn_cl_error_name(err),
                           (unsigned)n_made);
    }
    /* EQUALLY may make more than asked for (a remainder); keep n_sub */
    for (cl_uint i = (cl_uint)n_sub; i < n_made && i < 64; i++)
        clReleaseDevice(subs[i]);
    clattn_context_release(probe);

    clattn_multi *m = NULL;
    st = multi_new(n_sub, &m);
    if (st != CLATTN_SUCCESS) {
        for (size_t i = 0; i < n_sub; i++)
            clReleaseDevice(subs[i]);
        return st;
    }
    for (size_t i = 0; i < n_sub; i++)
        m->sub[i] = subs[i];
    for (size_t i = 0; st == CLATTN_SUCCESS && i < n_sub; i++) {
        cl_context_properties cp[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
        cl_context c = clCreateContext(cp, 1, &subs[i], NULL, NULL, &err);
        cl_command_queue q = NULL;
        if (err == CL_SUCCESS)
            q = clCreateCommandQueue(c, subs[i], CL_QUEUE_PROFILING_ENABLE, &err);
        if (err != CL_SUCCESS)
            st = clattn_fail(NULL, CLATTN_ERROR_OPENCL, "sub-device %zu: %s: %s", i,
                             q ? "clCreateCommandQueue" : "clCreateContext",
                             clattn_cl_error_name(err));
        else
            st = clattn_context_create_from_cl(c, subs[i], q, &m->ctx[i]);
        /* the context retains both */
        if (q)
            clReleaseCommandQueue(q);
        if (c)
            clReleaseContext(c);
    }
    if (st != CLATTN_SUCCESS) {
        clattn_multi_release(m);
        return st;
    }
    *out = m;
    return CLATTN_SUCCESS;
}

size_t clattn_multi_device_count(const clattn_multi *multi)
{
    return multi ? multi->n : 0;
}

clattn_context *clattn_multi_context(const clattn_multi *multi, size_t i)
{
    return multi && i < multi->n ? multi->ctx[i] : NULL;
}

/* ------------------------------------------------------------------ weights */

clattn_status clattn_multi_set_weights(clattn_multi *multi, const double *weights)
{
    if (!multi)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "multi is NULL");
    multi->message[0] = '\0';
    double sum = 0.0;
    for (size_t i = 0; weights && i < multi->n; i++) {
        if (!isfinite(weights[i]) || weights[i] < 0.0)
            return multi_fail(multi, CLATTN_ERROR_INVALID_ARGUMENT,
                              "weights[%zu] is %g; weights must be finite and >= 0", i, weights[i]);
        sum += weights[i];
    }
    if (weights && !(sum > 0.0 && isfinite(sum)))
        return multi_fail(multi, CLATTN_ERROR_INVALID_ARGUMENT,
                          "the weights sum to %g; at least one must be > 0", sum);
    for (size_t i = 0; i < multi->n; i++)
        multi->weight[i] = weights ? weights[i] / sum : 1.0 / (double)multi->n;
    return CLATTN_SUCCESS;
}

clattn_status clattn_multi_get_weights(const clattn_multi *multi, double *weights)
{
    if (!multi || !weights)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "multi or weights is NULL");
    memcpy(weights, multi->weight, multi->n * sizeof *weights);
    return CLATTN_SUCCESS;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

clattn_status clattn_multi_calibrate(clattn_multi *multi, unsigned repeats, double *seconds)
{
    if (!multi)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "multi is NULL");
    multi->message[0] = '\0';
    if (repeats == 0)
        repeats = 3;
    const int64_t h = 8, n = 256, d = 64;
    const size_t count = (size_t)(h * n * d);
    float *x = malloc(count * sizeof *x), *o = malloc(count * sizeof *o);
    double *w = calloc(multi->n, sizeof *w);
    if (!x || !o || !w) {
        free(x);
        free(o);
        free(w);
        return multi_fail(multi, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "calibration buffers");
    }
    for (size_t i = 0; i < count; i++)
        x[i] = (float)((i * 2654435761u) % 2001u) / 1000.0f - 1.0f;
    clattn_tensor t = clattn_tensor_host(x, 1, h, n, d), to = clattn_tensor_host(o, 1, h, n, d);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.algorithm = CLATTN_ALGORITHM_FUSED;
    clattn_status st = CLATTN_SUCCESS;
    for (size_t i = 0; st == CLATTN_SUCCESS && i < multi->n; i++) {
        st = clattn_attention(multi->ctx[i], &desc, &t, &t, &t, &to); /* warm-up, builds */
        const double t0 = now_seconds();
        for (unsigned r = 0; st == CLATTN_SUCCESS && r < repeats; r++)
            st = clattn_attention(multi->ctx[i], &desc, &t, &t, &t, &to);
        if (st != CLATTN_SUCCESS)
            st = device_fail(multi, i, st);
        const double dt = (now_seconds() - t0) / repeats;
        if (seconds)
            seconds[i] = dt;
        w[i] = 1.0 / (dt > 1e-9 ? dt : 1e-9);
    }
    if (st == CLATTN_SUCCESS)
        st = clattn_multi_set_weights(multi, w);
    free(x);
    free(o);
    free(w);
    return st;
}

/* Start of device i's share of `total` units: round(total · Σ_{j<i} weight_j). */
static int64_t cut_point(const clattn_multi *m, size_t i, int64_t total)
{
    if (i == 0)
        return 0;
    if (i >= m->n)
        return total;
    double acc = 0.0;
    for (size_t j = 0; j < i; j++)
        acc += m->weight[j];
    int64_t c = (int64_t)floor((double)total * acc + 0.5);
    return c < 0 ? 0 : c > total ? total : c;
}

/* ------------------------------------------------------------------ staging */

/* A view restricted to [start, start + len) on dimension dim. */
static clattn_view sub_view(const clattn_view *v, int dim, int64_t start, int64_t len)
{
    clattn_view r = *v;
    r.offset += start * v->s[dim];
    r.n[dim] = len;
    r.count = r.n[0] * r.n[1] * r.n[2] * r.n[3];
    r.span = 0;
    if (r.count > 0) {
        r.span = 1;
        for (int i = 0; i < 4; i++)
            r.span += (r.n[i] - 1) * r.s[i];
    }
    return r;
}

/* Host memory one device call needs kept alive until the final wait. */
#define MAX_MEM 8
#define MAX_OUT 3

typedef struct job {
    size_t dev;
    cl_mem mem[MAX_MEM];
    int n_mem;
    /* outputs: host destination, device copy, read-back buffer */
    clattn_view out_host[MAX_OUT];
    int out_mem[MAX_OUT]; /* index into mem */
    void *out_tmp[MAX_OUT];
    int n_out;
    cl_event events[MAX_OUT + 1];
    int n_events;
    int32_t *lens; /* owned per-call kv_lens (key split) */
} job;

static void job_release(job *j)
{
    if (j->n_events > 0)
        clWaitForEvents((cl_uint)j->n_events, j->events);
    for (int i = 0; i < j->n_events; i++)
        clReleaseEvent(j->events[i]);
    for (int i = 0; i < j->n_mem; i++)
        clReleaseMemObject(j->mem[i]);
    for (int i = 0; i < j->n_out; i++) {
        const clattn_view *hv = &j->out_host[i];
        if (j->out_tmp[i] != (char *)hv->host + hv->offset * hv->esize)
            free(j->out_tmp[i]);
    }
    free(j->lens);
    memset(j, 0, sizeof *j);
}

static clattn_status make_buffer(clattn_multi *m, job *j, cl_mem_flags flags, int64_t bytes,
                                 void *host, cl_mem *out)
{
    cl_int err;
    const size_t size = bytes > 0 ? (size_t)bytes : 4;
    *out = clCreateBuffer(m->ctx[j->dev]->context, host && bytes > 0 ? flags : CL_MEM_READ_WRITE,
                          size, bytes > 0 ? host : NULL, &err);
    if (err != CL_SUCCESS) /* the status the library maps err to (status.c) */
        return multi_fail(m, clattn_fail_cl(m->ctx[j->dev], err, "clCreateBuffer"),
                          "device %zu (%s): clCreateBuffer of %lld bytes: %s", j->dev,
                          m->ctx[j->dev]->device_name, LL(bytes), clattn_cl_error_name(err));
    j->mem[j->n_mem++] = *out;
    return CLATTN_SUCCESS;
}

/* A buffer tensor for host view hv on job j's device: inputs are copied (the view's
 * span, strides kept), outputs allocated and registered for read-back. */
static clattn_status stage_view(clattn_multi *m, job *j, const clattn_view *hv, bool input,
                                clattn_tensor *out)
{
    cl_mem buf;
    char *base = (char *)hv->host + hv->offset * hv->esize;
    clattn_status st =
        make_buffer(m, j, input ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE,
                    hv->span * hv->esize, input ? base : NULL, &buf);
    if (st != CLATTN_SUCCESS)
        return st;
    memset(out, 0, sizeof *out);
    for (int i = 0; i < 4; i++) {
        out->shape[i] = hv->n[i];
        out->strides[i] = hv->s[i];
    }
    bool all_zero = true;
    for (int i = 0; i < 4; i++)
        all_zero = all_zero && hv->s[i] == 0;
    if (all_zero) /* a single element (or empty): any strides address it */
        out->strides[3] = 1;
    out->dtype = hv->dtype;
    out->buffer = buf;
    if (!input) {
        j->out_host[j->n_out] = *hv;
        j->out_mem[j->n_out] = j->n_mem - 1;
        j->out_tmp[j->n_out] = NULL;
        j->n_out++;
    }
    return CLATTN_SUCCESS;
}

/* After the call is enqueued (event done): non-blocking reads of every output. */
static clattn_status enqueue_reads(clattn_multi *m, job *j, cl_event done)
{
    clattn_context *c = m->ctx[j->dev];
    for (int o = 0; o < j->n_out; o++) {
        const clattn_view *hv = &j->out_host[o];
        if (hv->count == 0)
            continue;
        char *base = (char *)hv->host + hv->offset * hv->esize;
        const bool dense = hv->span == hv->count;
        j->out_tmp[o] = dense ? base : malloc((size_t)(hv->span * hv->esize));
        if (!j->out_tmp[o])
            return multi_fail(m, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                              "cannot allocate %lld bytes to read back an output",
                              LL(hv->span * hv->esize));
        cl_int err = clEnqueueReadBuffer(c->queue, j->mem[j->out_mem[o]], CL_FALSE, 0,
                                         (size_t)(hv->span * hv->esize), j->out_tmp[o], 1, &done,
                                         &j->events[j->n_events]);
        if (err != CL_SUCCESS)
            return multi_fail(m, CLATTN_ERROR_OPENCL, "device %zu (%s): clEnqueueReadBuffer: %s",
                              j->dev, c->device_name, clattn_cl_error_name(err));
        j->n_events++;
    }
    return CLATTN_SUCCESS;
}

/* After the wait: scatter the read-back copies of strided outputs into their views. */
static void scatter(job *j)
{
    for (int o = 0; o < j->n_out; o++) {
        const clattn_view *hv = &j->out_host[o];
        char *base = (char *)hv->host + hv->offset * hv->esize;
        if (!j->out_tmp[o] || j->out_tmp[o] == base)
            continue;
        clattn_view_scatter(hv, j->out_tmp[o]);
    }
}

/* The views of one validated call on host memory. */
typedef struct call {
    clattn_view q, k, v, o, w, mask, lse;
    bool has_w, has_mask, has_lse;
} call;

static clattn_status validate(clattn_multi *m, const clattn_attention_desc *desc,
                              const clattn_tensor *q, const clattn_tensor *k,
                              const clattn_tensor *v, const clattn_tensor *o, call *c)
{
    clattn_context *x = m->ctx[0];
    clattn_clear_error(x);
    clattn_status st = clattn_check_desc(x, desc);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(x, "Q", q, CLATTN_STORAGE_HOST, false, &c->q);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(x, "K", k, CLATTN_STORAGE_HOST, false, &c->k);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(x, "V", v, CLATTN_STORAGE_HOST, false, &c->v);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(x, "O", o, CLATTN_STORAGE_HOST, true, &c->o);
    c->has_w = desc && desc->weights;
    if (st == CLATTN_SUCCESS && c->has_w)
        st = clattn_view_make(x, "weights", desc->weights, CLATTN_STORAGE_HOST, true, &c->w);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_attention_shapes(x, &c->q, &c->k, &c->v, &c->o, c->has_w ? &c->w : NULL,
                                           desc->weights_head_mean != 0);
    clattn_extras ex;
    if (st == CLATTN_SUCCESS)
        st = clattn_check_extras(x, desc, &c->q, &c->k, CLATTN_STORAGE_HOST, &ex);
    if (st != CLATTN_SUCCESS)
        return multi_fail(m, st, "%s", clattn_last_error_message(x));
    c->has_mask = ex.has_mask;
    c->has_lse = ex.has_lse;
    if (c->has_mask) /* keep the real strides: broadcast dimensions have n = 1 */
        c->mask = ex.mask;
    if (c->has_lse)
        c->lse = ex.lse;
    const clattn_view *outs[3] = {&c->o, c->has_w ? &c->w : NULL, c->has_lse ? &c->lse : NULL};
    static const char *const names[3] = {"O", "weights", "lse"};
    for (int a = 0; a < 3; a++)
        for (int b = a + 1; b < 3; b++)
            if (outs[a] && outs[b] && clattn_views_overlap(outs[a], outs[b]))
                return multi_fail(m, CLATTN_ERROR_INVALID_LAYOUT, "%s and %s overlap", names[a],
                                  names[b]);
    return CLATTN_SUCCESS;
}

/* Enqueue one attention call of job j on its device: inputs staged, outputs read back
 * without blocking. */
static clattn_status enqueue_call(clattn_multi *m, job *j, const clattn_attention_desc *desc,
                                  const clattn_view *q, const clattn_view *k, const clattn_view *v,
                                  const clattn_view *o, const clattn_view *lse,
                                  const clattn_view *w, const clattn_view *mask)
{
    clattn_tensor tq, tk, tv, to, tl, tw, tm;
    clattn_attention_desc d = *desc;
    clattn_status st = stage_view(m, j, q, true, &tq);
    if (st == CLATTN_SUCCESS)
        st = stage_view(m, j, k, true, &tk);
    if (st == CLATTN_SUCCESS)
        st = stage_view(m, j, v, true, &tv);
    if (st == CLATTN_SUCCESS && mask)
        st = stage_view(m, j, mask, true, &tm);
    if (st == CLATTN_SUCCESS)
        st = stage_view(m, j, o, false, &to);
    if (st == CLATTN_SUCCESS && lse)
        st = stage_view(m, j, lse, false, &tl);
    if (st == CLATTN_SUCCESS && w)
        st = stage_view(m, j, w, false, &tw);
    if (st != CLATTN_SUCCESS)
        return st;
    d.mask_tensor = mask ? &tm : NULL;
    d.lse = lse ? &tl : NULL;
    d.weights = w ? &tw : NULL;
    cl_event done = NULL;
    st = clattn_attention_enqueue(m->ctx[j->dev], &d, &tq, &tk, &tv, &to, 0, NULL, &done);
    if (st != CLATTN_SUCCESS)
        return device_fail(m, j->dev, st);
    j->events[j->n_events++] = done;
    return enqueue_reads(m, j, done);
}

/* Waits for every job, scatters, releases. Returns st, or the first wait failure. */
static clattn_status finish_jobs(clattn_multi *m, job *jobs, size_t n_jobs, clattn_status st)
{
    for (size_t i = 0; i < n_jobs; i++) {
        if (jobs[i].n_events > 0) {
            cl_int err = clWaitForEvents((cl_uint)jobs[i].n_events, jobs[i].events);
            if (err != CL_SUCCESS && st == CLATTN_SUCCESS)
                st = multi_fail(m, CLATTN_ERROR_OPENCL, "device %zu (%s): clWaitForEvents: %s",
                                jobs[i].dev, m->ctx[jobs[i].dev]->device_name,
                                clattn_cl_error_name(err));
        }
        if (st == CLATTN_SUCCESS)
            scatter(&jobs[i]);
        job_release(&jobs[i]);
    }
    return st;
}

/* ------------------------------------------------------------------ split by heads */

static clattn_status split_heads(clattn_multi *m, const clattn_attention_desc *desc, const call *c,
                                 clattn_multi_part *parts)
{
    if (c->has_w && desc->weights_head_mean)
        return multi_fail(m, CLATTN_ERROR_UNSUPPORTED,
                          "weights_head_mean averages over all query heads, which SPLIT_HEADS "
                          "spreads across devices; use one context or SPLIT_HEADS without it");
    const int64_t batch = c->q.n[0], h_kv = c->k.n[1], group = c->q.n[1] / h_kv;
    const int64_t units = batch * h_kv;
    /* at most 3 rectangles per device: a partial batch entry, whole entries, a partial */
    job *jobs = calloc(m->n * 3, sizeof *jobs);
    if (!jobs)
        return multi_fail(m, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "jobs");
    size_t n_jobs = 0;
    clattn_status st = CLATTN_SUCCESS;
    for (size_t dev = 0; dev < m->n && st == CLATTN_SUCCESS; dev++) {
        const int64_t u0 = cut_point(m, dev, units), u1 = cut_point(m, dev + 1, units);
        parts[dev].begin = u0;
        parts[dev].end = u1;
        parts[dev].ran = u1 > u0 && c->q.n[2] > 0;
        parts[dev].calls = 0;
        int64_t u = u0;
        while (u < u1 && c->q.n[2] > 0 && st == CLATTN_SUCCESS) {
            /* rectangle: batch entries [b0, b1) × KV heads [h0, h1) */
            const int64_t b0 = u / h_kv, h0 = u % h_kv;
            int64_t b1, h1;
            if (h0 != 0 || u1 - u < h_kv) { /* a partial batch entry */
                b1 = b0 + 1;
                h1 = (u1 - b0 * h_kv) < h_kv ? u1 - b0 * h_kv : h_kv;
            } else { /* whole batch entries */
                b1 = b0 + (u1 - u) / h_kv;
                h1 = h_kv;
            }
            u = (b1 - 1) * h_kv + h1;
            const int64_t nb = b1 - b0, nh = h1 - h0;
            clattn_view q = sub_view(&c->q, 0, b0, nb), k = sub_view(&c->k, 0, b0, nb),
                        v = sub_view(&c->v, 0, b0, nb), o = sub_view(&c->o, 0, b0, nb);
            q = sub_view(&q, 1, h0 * group, nh * group);
            k = sub_view(&k, 1, h0, nh);
            v = sub_view(&v, 1, h0, nh);
            o = sub_view(&o, 1, h0 * group, nh * group);
            clattn_view lse, w, mask;
            if (c->has_lse) {
                lse = sub_view(&c->lse, 0, b0, nb);
                lse = sub_view(&lse, 1, h0 * group, nh * group);
            }
            if (c->has_w) {
                w = sub_view(&c->w, 0, b0, nb);
                w = sub_view(&w, 1, h0 * group, nh * group);
            }
            if (c->has_mask) {
                mask = c->mask;
                if (mask.n[0] != 1)
                    mask = sub_view(&mask, 0, b0, nb);
                if (mask.n[1] != 1)
                    mask = sub_view(&mask, 1, h0 * group, nh * group);
            }
            clattn_attention_desc d = *desc;
            if (d.kv_lens)
                d.kv_lens += b0;
            if (d.q_lens)
                d.q_lens += b0;
            if (d.alibi_slopes)
                d.alibi_slopes += h0 * group;
            job *j = &jobs[n_jobs++];
            j->dev = dev;
            st = enqueue_call(m, j, &d, &q, &k, &v, &o, c->has_lse ? &lse : NULL,
                              c->has_w ? &w : NULL, c->has_mask ? &mask : NULL);
            parts[dev].calls++;
        }
    }
    st = finish_jobs(m, jobs, n_jobs, st);
    free(jobs);
    return st;
}

/* ------------------------------------------------------------------ split by keys */

/* Whether some valid query row sees a key of [c0, c1) (keys of the whole call). */
static bool block_visible(const clattn_attention_desc *desc, const call *c, int64_t c0, int64_t c1)
{
    const int64_t batch = c->q.n[0], n_q = c->q.n[2], n_kv = c->k.n[2];
    for (int64_t b = 0; b < batch; b++)
        for (int64_t i = 0; i < n_q; i++) {
            const clattn_row_rule r = clattn_rule(desc, b, i, n_q, n_kv);
            if (!r.valid)
                break;
            const int64_t lo = r.lo > c0 ? r.lo : c0, hi = r.hi < c1 ? r.hi : c1;
            if (lo < hi && !(hi - lo == 1 && r.self == lo))
                return true;
        }
    return false;
}

static clattn_status split_keys(clattn_multi *m, const clattn_attention_desc *desc, const call *c,
                                clattn_multi_part *parts)
{
    if (c->has_w)
        return multi_fail(m, CLATTN_ERROR_UNSUPPORTED,
                          "SPLIT_KEYS cannot return the attention weights (each device sees "
                          "only its keys); use SPLIT_HEADS or one context");
    if (desc->masked_rows == CLATTN_MASKED_ROWS_NAN)
        return multi_fail(m, CLATTN_ERROR_UNSUPPORTED,
                          "SPLIT_KEYS merges rows with no visible key to zeros; "
                          "masked_rows = NAN needs SPLIT_HEADS or one context");
    if (desc->mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT && (desc->kv_lens || desc->q_lens))
        return multi_fail(m, CLATTN_ERROR_UNSUPPORTED,
                          "SPLIT_KEYS with CAUSAL_BOTTOM_RIGHT and kv_lens or q_lens: the "
                          "diagonal depends on each batch entry's lengths; use SPLIT_HEADS");
    const int64_t batch = c->q.n[0], h_q = c->q.n[1], n_q = c->q.n[2], n_kv = c->k.n[2];
    const int64_t d_v = c->v.n[3];
    const size_t rows = (size_t)(batch * h_q * n_q), n_o = rows * (size_t)d_v;

    /* the blocks, and which of them any query sees */
    int64_t *cut = calloc(m->n + 1, sizeof *cut);
    job *jobs = calloc(m->n, sizeof *jobs);
    clattn_tensor *to = calloc(m->n, sizeof *to), *tl = calloc(m->n, sizeof *tl);
    float *part_o = NULL, *part_l = NULL;
    if (!cut || !jobs || !to || !tl) {
        free(cut);
        free(jobs);
        free(to);
        free(tl);
        return multi_fail(m, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "key-split bookkeeping");
    }
    size_t n_run = 0, first_nonempty = m->n;
    for (size_t i = 0; i <= m->n; i++)
        cut[i] = cut_point(m, i, n_kv);
    for (size_t i = 0; i < m->n; i++) {
        parts[i].begin = cut[i];
        parts[i].end = cut[i + 1];
        parts[i].calls = 0;
        parts[i].ran = cut[i + 1] > cut[i] && n_q > 0 && block_visible(desc, c, cut[i], cut[i + 1]);
        if (cut[i + 1] > cut[i] && first_nonempty == m->n)
            first_nonempty = i;
        n_run += (size_t)parts[i].ran;
    }
    clattn_status st = CLATTN_SUCCESS;
    if (n_q == 0)
        goto done;
    if (n_run == 0) {
        /* every key is masked for every row (or n_kv = 0): one device writes the zero
         * rows; with n_kv = 0 it runs the whole (empty) call */
        size_t i = first_nonempty < m->n ? first_nonempty : 0;
        parts[i].ran = 1;
        n_run = 1;
    }
    part_o = malloc((n_o > 0 ? n_o : 1) * n_run * sizeof *part_o);
    part_l = malloc((rows > 0 ? rows : 1) * n_run * sizeof *part_l);
    if (!part_o || !part_l) {
        st = multi_fail(m, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                        "cannot allocate %zu partial outputs of %zu floats", n_run, n_o);
        goto done;
    }
    size_t p = 0;
    for (size_t dev = 0; dev < m->n && st == CLATTN_SUCCESS; dev++) {
        if (!parts[dev].ran)
            continue;
        const int64_t c0 = cut[dev], len = cut[dev + 1] - cut[dev];
        clattn_view k = sub_view(&c->k, 2, c0, len), v = sub_view(&c->v, 2, c0, len);
        clattn_tensor t_o = clattn_tensor_host(part_o + n_o * p, batch, h_q, n_q, d_v);
        clattn_tensor t_l = clattn_tensor_host(part_l + rows * p, batch, h_q, n_q, 1);
        to[p] = t_o;
        tl[p] = t_l;
        clattn_view o, lse;
        clattn_view_make(m->ctx[0], "O part", &t_o, CLATTN_STORAGE_HOST, true, &o);
        clattn_view_make(m->ctx[0], "LSE part", &t_l, CLATTN_STORAGE_HOST, true, &lse);
        clattn_view mask;
        if (c->has_mask)
            mask = sub_view(&c->mask, 3, c0, len);
        clattn_attention_desc d = *desc;
        d.kv_start = desc->kv_start + c0;
        if (desc->mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT) { /* as top-left, shifted */
            d.mask = CLATTN_MASK_CAUSAL_TOP_LEFT;
            d.q_start = desc->q_start + n_kv - n_q;
        }
        job *j = &jobs[p];
        j->dev = dev;
        if (desc->kv_lens) {
            j->lens = malloc((size_t)batch * sizeof *j->lens);
            if (!j->lens) {
                st = multi_fail(m, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "kv_lens");
                break;
            }
            for (int64_t b = 0; b < batch; b++) {
                int64_t l = desc->kv_lens[b] - c0;
                j->lens[b] = (int32_t)(l < 0 ? 0 : l > len ? len : l);
            }
            d.kv_lens = j->lens;
        }
        p++;
        st = enqueue_call(m, j, &d, &c->q, &k, &v, &o, &lse, NULL, c->has_mask ? &mask : NULL);
        parts[dev].calls = 1;
    }
    st = finish_jobs(m, jobs, p, st);
    if (st == CLATTN_SUCCESS) {
        /* the user's O and LSE views, as tensors */
        clattn_tensor uo, ul;
        memset(&uo, 0, sizeof uo);
        memset(&ul, 0, sizeof ul);
        for (int i = 0; i < 4; i++) {
            uo.shape[i] = c->o.n[i];
            uo.strides[i] = c->o.s[i];
            ul.shape[i] = c->has_lse ? c->lse.n[i] : 0;
            ul.strides[i] = c->has_lse ? c->lse.s[i] : 0;
        }
        uo.offset = c->o.offset;
        uo.dtype = c->o.dtype;
        uo.host = c->o.host;
        ul.offset = c->has_lse ? c->lse.offset : 0;
        ul.host = c->has_lse ? c->lse.host : NULL;
        st = clattn_merge(m->ctx[0], n_run, to, tl, &uo, c->has_lse ? &ul : NULL);
        if (st != CLATTN_SUCCESS)
            st = device_fail(m, 0, st);
    }
done:
    free(part_o);
    free(part_l);
    free(cut);
    free(jobs);
    free(to);
    free(tl);
    return st;
}

/* ------------------------------------------------------------------ entry point */

clattn_status clattn_multi_attention(clattn_multi *multi, clattn_split split,
                                     const clattn_attention_desc *desc, const clattn_tensor *q,
                                     const clattn_tensor *k, const clattn_tensor *v,
                                     const clattn_tensor *o, clattn_multi_part *parts)
{
    if (!multi)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "multi is NULL");
    multi->message[0] = '\0';
    if (split != CLATTN_SPLIT_HEADS && split != CLATTN_SPLIT_KEYS)
        return multi_fail(multi, CLATTN_ERROR_INVALID_ARGUMENT,
                          "split is %d; use CLATTN_SPLIT_HEADS or CLATTN_SPLIT_KEYS", (int)split);
    call c;
    clattn_status st = validate(multi, desc, q, k, v, o, &c);
    if (st != CLATTN_SUCCESS)
        return st;
    clattn_multi_part local[64];
    clattn_multi_part *pp = parts;
    if (!pp) {
        pp = multi->n <= 64 ? local : calloc(multi->n, sizeof *pp);
        if (!pp)
            return multi_fail(multi, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "parts");
    }
    st = split == CLATTN_SPLIT_HEADS ? split_heads(multi, desc, &c, pp)
                                     : split_keys(multi, desc, &c, pp);
    if (pp != parts && pp != local)
        free(pp);
    return st;
}
