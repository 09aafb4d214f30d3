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
        clattn_context_options opt = {.device = devices[i]};
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
    clattn_context_options opt = {.device = device};
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

/* ------------------------------------------------------------------ one device call */

/* What one device call needs kept alive until the final wait: its staged buffers,
 * the event of each output's non-blocking read-back, and the read-back copies. */
#define MAX_OUT 3

typedef struct job {
    size_t dev;
    clattn_staging sg;
    clattn_readback rb[MAX_OUT];
    cl_event events[MAX_OUT + 1];
    int n_rb, n_events;
    int32_t *lens; /* owned per-call kv_lens (key split) */
} job;

static void job_release(job *j, bool scatter)
{
    if (j->n_events > 0)
        clWaitForEvents((cl_uint)j->n_events, j->events);
    for (int i = 0; i < j->n_events; i++)
        clReleaseEvent(j->events[i]);
    for (int i = 0; i < j->n_rb; i++)
        clattn_readback_finish(&j->rb[i], scatter);
    clattn_staging_release(&j->sg);
    free(j->lens);
    memset(j, 0, sizeof *j);
}

/* One attention call of job j on its device: the host problem's views staged, planned,
 * launched, and the outputs read back without blocking. The problem was validated once
 * for the whole call (clattn_resolve_attention); nothing is checked again. */
static clattn_status enqueue_call(clattn_multi *m, job *j, const clattn_problem *host)
{
    clattn_context *ctx = m->ctx[j->dev];
    clattn_problem dev;
    clattn_exec_plan plan;
    cl_event done = NULL;
    clattn_status st = clattn_plan_attention(ctx, host, &plan);
    if (st == CLATTN_SUCCESS)
        st = clattn_stage_problem(ctx, &j->sg, host, &dev);
    if (st == CLATTN_SUCCESS)
        st = clattn_launch_attention(ctx, &plan, &dev, 0, NULL, &done);
    if (st != CLATTN_SUCCESS)
        return device_fail(m, j->dev, st);
    j->events[j->n_events++] = done;
    const clattn_view *outs[MAX_OUT][2] = {{&host->o, &dev.o},
                                           {host->has_w ? &host->w : NULL, &dev.w},
                                           {host->has_lse ? &host->lse : NULL, &dev.lse}};
    for (int i = 0; i < MAX_OUT; i++) {
        if (!outs[i][0])
            continue;
        cl_event read = NULL;
        st = clattn_readback_start(ctx, outs[i][0], outs[i][1], done, &j->rb[j->n_rb++], &read);
        if (read)
            j->events[j->n_events++] = read;
        if (st != CLATTN_SUCCESS)
            return device_fail(m, j->dev, st);
    }
    return CLATTN_SUCCESS;
}

/* Waits for every job, scatters, releases. Returns st, or the first wait failure. */
static clattn_status finish_jobs(clattn_multi *m, job *jobs, size_t n_jobs, clattn_status st)
{
    for (size_t i = 0; i < n_jobs; i++) {
        if (jobs[i].n_events > 0) {
            cl_int err = clWaitForEvents((cl_uint)jobs[i].n_events, jobs[i].events);
            if (err != CL_SUCCESS && st == CLATTN_SUCCESS)
                st = device_fail(m, jobs[i].dev,
                                 clattn_fail_cl(m->ctx[jobs[i].dev], err, "clWaitForEvents"));
        }
        job_release(&jobs[i], st == CLATTN_SUCCESS);
    }
    return st;
}

/* ------------------------------------------------------------------ split by heads */

static clattn_status split_heads(clattn_multi *m, const clattn_attention_desc *desc,
                                 const clattn_problem *c, clattn_multi_part *parts)
{
    if (c->has_w && desc->weights_head_mean)
        return multi_fail(m, CLATTN_ERROR_UNSUPPORTED,
                          "weights_head_mean averages over all query heads, which SPLIT_HEADS "
                          "spreads across devices; use one context or SPLIT_HEADS without it");
    const int64_t batch = c->q.n[0], h_kv = c->k.n[1], group = clattn_group(c->q.n[1], h_kv);
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
            clattn_problem sub = *c;
            clattn_view *qo[4] = {&sub.q, &sub.o, &sub.lse, &sub.w}; /* [b, h_q, ...] */
            for (int t = 0; t < 4; t++) {
                *qo[t] = clattn_view_slice(qo[t], 0, b0, nb);
                *qo[t] = clattn_view_slice(qo[t], 1, h0 * group, nh * group);
            }
            sub.k = clattn_view_slice(&sub.k, 0, b0, nb);
            sub.k = clattn_view_slice(&sub.k, 1, h0, nh);
            sub.v = clattn_view_slice(&sub.v, 0, b0, nb);
            sub.v = clattn_view_slice(&sub.v, 1, h0, nh);
            if (c->has_mask && c->mask.n[0] != 1)
                sub.mask = clattn_view_slice(&sub.mask, 0, b0, nb);
            if (c->has_mask && c->mask.n[1] != 1)
                sub.mask = clattn_view_slice(&sub.mask, 1, h0 * group, nh * group);
            clattn_attention_desc d = *desc;
            if (d.kv_lens)
                d.kv_lens += b0;
            if (d.q_lens)
                d.q_lens += b0;
            if (d.alibi_slopes)
                d.alibi_slopes += h0 * group;
            if (d.sinks)
                d.sinks += h0 * group;
            sub.desc = &d;
            job *j = &jobs[n_jobs++];
            j->dev = dev;
            st = enqueue_call(m, j, &sub);
            parts[dev].calls++;
        }
    }
    st = finish_jobs(m, jobs, n_jobs, st);
    free(jobs);
    return st;
}

/* ------------------------------------------------------------------ split by keys */

/* Whether some valid query row sees a key of [c0, c1) (keys of the whole call). */
static bool block_visible(const clattn_attention_desc *desc, const clattn_problem *c, int64_t c0,
                          int64_t c1)
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

/* The exact merge of the key blocks' partial results (O packed [rows, d_v] float32
 * per part; each part's LSE view, float64 where the device has cl_khr_fp64) into the
 * caller's O and LSE views, on the host in float64: LSE = log Σ_p exp(LSE_p),
 * O = Σ_p exp(LSE_p − LSE)·O_p, parts with LSE_p = −∞ skipped (merge.cl's rule; no
 * device round trip for the partials). */
static double part_lse(const clattn_view *lse, size_t r)
{
    return clattn_host_load64(lse, (int64_t)r);
}

static void merge_on_host(const clattn_attention_desc *desc, const clattn_problem *c,
                          size_t n_parts, const float *part_o, const clattn_view *lse_views)
{
    const int64_t batch = c->q.n[0], h_q = c->q.n[1], n_q = c->q.n[2], d_v = c->v.n[3];
    const int64_t n_kv = c->k.n[2];
    const size_t rows = (size_t)(batch * h_q * n_q), n_o = rows * (size_t)d_v;
    size_t r = 0;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t h = 0; h < h_q; h++)
            for (int64_t i = 0; i < n_q; i++, r++) {
                double mx = -INFINITY;
                bool nan = false; /* a NaN part (NaN inputs) poisons the row, as in one call */
                for (size_t p = 0; p < n_parts; p++) {
                    nan = nan || isnan(part_lse(&lse_views[p], r));
                    if (part_lse(&lse_views[p], r) > mx)
                        mx = part_lse(&lse_views[p], r);
                }
                /* the sink: one more part, of LSE sinks[h] and O = 0 (not for padding
                 * rows); the parts ran without it */
                const double sink = desc->sinks && clattn_rule(desc, b, i, n_q, n_kv).valid
                                        ? (double)desc->sinks[h]
                                        : -INFINITY;
                if (sink > mx)
                    mx = sink;
                if (nan)
                    mx = NAN;
                double sum = mx != -INFINITY && sink != -INFINITY ? exp(sink - mx) : 0.0;
                for (size_t p = 0; p < n_parts; p++)
                    if (mx != -INFINITY && part_lse(&lse_views[p], r) != -INFINITY)
                        sum += exp(part_lse(&lse_views[p], r) - mx); /* NaN when mx is */
                for (int64_t e = 0; e < d_v; e++) {
                    double acc = 0.0;
                    for (size_t p = 0; p < n_parts; p++)
                        if (mx != -INFINITY && part_lse(&lse_views[p], r) != -INFINITY)
                            acc += exp(part_lse(&lse_views[p], r) - mx) / sum *
                                   part_o[n_o * p + r * (size_t)d_v + (size_t)e];
                    clattn_host_store(&c->o, clattn_view_index(&c->o, b, h, i, e), (float)acc);
                }
                if (c->has_lse)
                    clattn_host_store64(&c->lse, clattn_view_index(&c->lse, b, h, i, 0),
                                        mx == -INFINITY ? -INFINITY : mx + log(sum));
            }
}

static clattn_status split_keys(clattn_multi *m, const clattn_attention_desc *desc,
                                const clattn_problem *c, clattn_multi_part *parts)
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
    float *part_o = NULL;
    double *part_l = NULL; /* float64 storage; a device without cl_khr_fp64 writes float32 */
    clattn_view *lse_views = NULL;
    if (!cut || !jobs) {
        free(cut);
        free(jobs);
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
    lse_views = calloc(n_run, sizeof *lse_views);
    if (!part_o || !part_l || !lse_views) {
        st = multi_fail(m, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                        "cannot allocate %zu partial outputs of %zu floats", n_run, n_o);
        goto done;
    }
    size_t p = 0;
    for (size_t dev = 0; dev < m->n && st == CLATTN_SUCCESS; dev++) {
        if (!parts[dev].ran)
            continue;
        const int64_t c0 = cut[dev], len = cut[dev + 1] - cut[dev];
        clattn_problem sub = *c;
        sub.k = clattn_view_slice(&c->k, 2, c0, len);
        sub.v = clattn_view_slice(&c->v, 2, c0, len);
        sub.o = clattn_view_packed(batch, h_q, n_q, d_v);
        sub.o.host = part_o + n_o * p;
        sub.lse = clattn_view_packed(batch, h_q, n_q, 1);
        sub.lse.host = part_l + rows * p;
        if (m->ctx[dev]->has_fp64) { /* keeps far-ALiBi differences (R17) */
            sub.lse.dtype = CLATTN_FLOAT64;
            sub.lse.esize = 8;
        }
        sub.has_lse = true;
        lse_views[p] = sub.lse;
        if (c->has_mask)
            sub.mask = clattn_view_slice(&c->mask, 3, c0, len);
        clattn_attention_desc d = *desc;
        d.kv_start = desc->kv_start + c0;
        d.sinks = NULL;                                      /* added once, by the merge */
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
        sub.desc = &d;
        st = enqueue_call(m, j, &sub);
        parts[dev].calls = 1;
    }
    st = finish_jobs(m, jobs, p, st);
    if (st == CLATTN_SUCCESS)
        merge_on_host(desc, c, n_run, part_o, lse_views);
done:
    free(part_o);
    free(part_l);
    free(lse_views);
    free(cut);
    free(jobs);
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
    clattn_problem c; /* validated once, on the first device's context */
    clattn_status st =
        clattn_resolve_attention(multi->ctx[0], desc, q, k, v, o, CLATTN_STORAGE_HOST, &c);
    if (st != CLATTN_SUCCESS)
        return device_fail(multi, 0, st);
    if (c.k.paged || c.has_append || desc->varlen || clattn_problem_quantized(&c))
        return multi_fail(multi, CLATTN_ERROR_UNSUPPORTED,
                          "paged K/V, k_new / v_new, varlen, int8 K/V: the several-device layer "
                          "takes contiguous float K and V that it only reads, and a batch");
    if (desc->dropout_p != 0.0f)
        return multi_fail(multi, CLATTN_ERROR_UNSUPPORTED,
                          "dropout: its generator counts heads, rows and keys per call, which "
                          "the several-device split renumbers; use one context");
    if (desc->key_weight_sums || desc->mods || desc->max_logits)
        return multi_fail(multi, CLATTN_ERROR_UNSUPPORTED,
                          "%s: not with the several-device layer; use one context",
                          desc->mods              ? "mods (snippets and their buffers)"
                          : desc->key_weight_sums ? "key_weight_sums"
                                                  : "max_logits");
    if (desc->batch_invariant && split == CLATTN_SPLIT_KEYS)
        return multi_fail(multi, CLATTN_ERROR_UNSUPPORTED,
                          "batch_invariant: a key split merges partial sums, whose order "
                          "follows the split; use CLATTN_SPLIT_HEADS or one context");
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
