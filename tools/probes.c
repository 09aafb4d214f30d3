/* The ceilings `clattn bench --peak` compares each case with: the device's f32 FMA
 * throughput and its streaming read bandwidth, each measured by a small OpenCL kernel
 * built here (see bench.h). */
#include "bench.h"

#include <CL/cl.h>
#include <clattn.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* An FMA micro-benchmark: each work-item keeps NACC independent VEC accumulators, so the
 * chain latency hides behind throughput; FLOP = items · iterations · NACC · LANES · 2.
 * measure_peak builds it in more than one form and keeps the fastest: accumulators that
 * do not fit the register file spill, and a chain through the stack halves the rate (8
 * float16 accumulators are 16 of AVX2's 16 ymm registers: PoCL spilled two, and the probe
 * read 95-104 GFLOP/s on a 2-core Zen 3 whose plain C loop of 10 ymm FMA chains runs
 * at 93 per core). */
static const char peak_source[] =
    "#define F(x) x = fma(x, a, b)\n"
    "__kernel void fma_peak(__global float *out, int iters, float a, float b)\n"
    "{\n"
    "    VEC x0 = (VEC)(get_global_id(0)), x1 = x0 + 1.0f, x2 = x0 + 2.0f, x3 = x0 + 3.0f,\n"
    "        x4 = x0 + 4.0f, x5 = x0 + 5.0f, x6 = x0 + 6.0f, x7 = x0 + 7.0f;\n"
    "#if NACC > 8\n"
    "    VEC x8 = x0 + 8.0f, x9 = x0 + 9.0f, x10 = x0 + 10.0f, x11 = x0 + 11.0f;\n"
    "#endif\n"
    "    for (int i = 0; i < iters; i++) {\n"
    "        F(x0); F(x1); F(x2); F(x3); F(x4); F(x5); F(x6); F(x7);\n"
    "#if NACC > 8\n"
    "        F(x8); F(x9); F(x10); F(x11);\n"
    "#endif\n"
    "    }\n"
    "    VEC s = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7));\n"
    "#if NACC > 8\n"
    "    s += (x8 + x9) + (x10 + x11);\n"
    "#endif\n"
    "    float t[LANES], r = 0.0f;\n"
    "    *(VEC *)t = s;\n"
    "    for (int e = 0; e < LANES; e++)\n"
    "        r += t[e];\n"
    "    out[get_global_id(0)] = r;\n"
    "}\n";

/* Streaming read: work-item g sums the float16 vectors of its own contiguous chunk (CPU:
 * each thread streams one range, which the prefetchers follow) or every global-size-th
 * vector from g (GPU: neighbouring work-items read neighbouring vectors). */
static const char stream_source[] =
    "__kernel void stream_read(__global const float16 *x, long n, int chunked,\n"
    "                          __global float *out)\n"
    "{\n"
    "    const long g = get_global_id(0), G = get_global_size(0);\n"
    "    const long per = n / G, lo = chunked ? g * per : g, step = chunked ? 1 : G;\n"
    "    const long hi = chunked ? lo + per : n;\n"
    "    float16 s0 = 0.0f, s1 = 0.0f;\n"
    "    long i = lo;\n"
    "    for (; i + step < hi; i += 2 * step) {\n"
    "        s0 += x[i];\n"
    "        s1 += x[i + step];\n"
    "    }\n"
    "    for (; i < hi; i += step)\n"
    "        s0 += x[i];\n"
    "    const float16 s = s0 + s1;\n"
    "    out[g] = s.s0 + s.s1 + s.s2 + s.s3 + s.s4 + s.s5 + s.s6 + s.s7 + s.s8 + s.s9 +\n"
    "             s.sa + s.sb + s.sc + s.sd + s.se + s.sf;\n"
    "}\n";

/* The context's OpenCL objects and what the probes size their NDRanges by. */
typedef struct probe_device {
    cl_context ctx;
    cl_device_id dev;
    cl_command_queue queue;
    cl_uint units; /* compute units */
    bool gpu;
} probe_device;

static probe_device probe_device_of(clattn_context *ctx)
{
    probe_device d = {NULL, NULL, NULL, 1, false};
    clattn_context_get_cl(ctx, &d.ctx, &d.dev, &d.queue);
    clGetDeviceInfo(d.dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof d.units, &d.units, NULL);
    cl_device_type type = 0;
    clGetDeviceInfo(d.dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    d.gpu = (type & CL_DEVICE_TYPE_GPU) != 0;
    return d;
}

/* The probes' program and kernel (built from source, uncached) and their output buffer of
 * out_items floats; *prog and *out are NULL or to be released, and the kernel NULL when
 * *err is not CL_SUCCESS. */
static cl_kernel probe_kernel(const probe_device *d, const char *src, const char *name,
                              const char *options, size_t out_items, cl_program *prog, cl_mem *out,
                              cl_int *err)
{
    char opts[160];
    snprintf(opts, sizeof opts, "-cl-std=CL1.2 -w %s", options);
    *out = NULL;
    *prog = clCreateProgramWithSource(d->ctx, 1, &src, NULL, err);
    if (*err == CL_SUCCESS)
        *err = clBuildProgram(*prog, 1, &d->dev, opts, NULL, NULL);
    cl_kernel kern = *err == CL_SUCCESS ? clCreateKernel(*prog, name, err) : NULL;
    if (*err == CL_SUCCESS)
        *out = clCreateBuffer(d->ctx, CL_MEM_WRITE_ONLY, out_items * sizeof(float), NULL, err);
    return kern;
}

/* `work` per nanosecond of device time (events) over 5 runs of a probe kernel whose
 * arguments are set, the median; 0 on failure. The first of 6 runs is not counted: it
 * compiles for this local size. */
static double median_rate(cl_command_queue queue, cl_kernel kern, size_t global, size_t local,
                          double work)
{
    double rate[5];
    int runs = 0;
    cl_int err = CL_SUCCESS;
    for (int r = 0; r < 6 && err == CL_SUCCESS; r++) {
        cl_event e;
        err = clEnqueueNDRangeKernel(queue, kern, 1, NULL, &global, &local, 0, NULL, &e);
        if (err == CL_SUCCESS)
            err = clWaitForEvents(1, &e);
        if (err == CL_SUCCESS && r > 0)
            rate[runs++] = work / (bench_event_ns(e, CL_PROFILING_COMMAND_END) -
                                   bench_event_ns(e, CL_PROFILING_COMMAND_START));
        if (err == CL_SUCCESS)
            clReleaseEvent(e);
    }
    return err == CL_SUCCESS && runs ? bench_summarize(rate, runs).median : 0.0;
}

/* Sets a probe kernel's arguments 0 … n − 1, each call checked on its own (an OR of two
 * codes is neither); stops at the first failure. */
static cl_int set_args(cl_kernel kern, cl_int err, int n, const size_t *sizes,
                       const void *const *values)
{
    for (int i = 0; i < n && err == CL_SUCCESS; i++)
        err = clSetKernelArg(kern, (cl_uint)i, sizes[i], values[i]);
    return err;
}

/* Releases what a probe created (any may be NULL). */
static void release_probe(cl_kernel kern, cl_program prog, cl_mem a, cl_mem b)
{
    if (a)
        clReleaseMemObject(a);
    if (b)
        clReleaseMemObject(b);
    if (kern)
        clReleaseKernel(kern);
    if (prog)
        clReleaseProgram(prog);
}

/* The streaming-read probe, built once and kept: its kernel and 256 MiB buffer (less
 * where the device's allocation limit is lower), so that `bench --peak` can measure the
 * bandwidth again next to every case at the cost of the runs only. */
struct bw_probe {
    probe_device d;
    cl_program prog;
    cl_kernel kern;
    cl_mem x, out;
    size_t bytes, global, local;
};

bw_probe *bw_probe_open(clattn_context *ctx)
{
    bw_probe *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->d = probe_device_of(ctx);
    cl_ulong max_alloc = 0;
    clGetDeviceInfo(p->d.dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
    p->bytes = (size_t)256 << 20;
    while (p->bytes > ((size_t)1 << 20) && p->bytes > max_alloc)
        p->bytes /= 2;
    p->local = p->d.gpu ? 256 : 1;
    p->global = p->d.gpu ? (size_t)p->d.units * 2048 : p->d.units;
    const cl_long n = (cl_long)(p->bytes / (16 * sizeof(float)));
    const cl_int chunked = p->d.gpu ? 0 : 1;
    cl_int err;
    p->kern =
        probe_kernel(&p->d, stream_source, "stream_read", "", p->global, &p->prog, &p->out, &err);
    p->x =
        err == CL_SUCCESS ? clCreateBuffer(p->d.ctx, CL_MEM_READ_ONLY, p->bytes, NULL, &err) : NULL;
    const cl_float one = 1.0f;
    if (err == CL_SUCCESS) /* touch every page before timing */
        err = clEnqueueFillBuffer(p->d.queue, p->x, &one, sizeof one, 0, p->bytes, 0, NULL, NULL);
    const size_t sizes[] = {sizeof p->x, sizeof n, sizeof chunked, sizeof p->out};
    const void *const values[] = {&p->x, &n, &chunked, &p->out};
    err = set_args(p->kern, err, 4, sizes, values);
    if (err != CL_SUCCESS) {
        bw_probe_close(p);
        return NULL;
    }
    return p;
}

double bw_probe_measure(bw_probe *p)
{
    return p ? median_rate(p->d.queue, p->kern, p->global, p->local, (double)p->bytes) : 0.0;
}

void bw_probe_close(bw_probe *p)
{
    if (!p)
        return;
    release_probe(p->kern, p->prog, p->x, p->out);
    free(p);
}

/* OpenCL C's name of a vector of `lanes` floats: "float", "float2" … "float16" */
static void vec_type(int lanes, char *out, size_t len)
{
    if (lanes == 1)
        snprintf(out, len, "float");
    else
        snprintf(out, len, "float%d", lanes);
}

/* GFLOP/s of the FMA kernel in one form (VEC of `lanes` floats, `nacc` accumulators): the
 * median of 5 runs; 0 on failure. */
static double peak_form(clattn_context *ctx, int lanes, int nacc)
{
    const probe_device d = probe_device_of(ctx);
    /* GPUs: groups of 256 and 16 per compute unit, enough warps to fill every scheduler
     * (groups of 8 left an H200 at a quarter of its peak); CPUs: 16 items per core */
    const size_t local = d.gpu ? 256 : 8, global = local * d.units * 16;
    const cl_int iters = d.gpu ? 4096 : 65536 * 16 / lanes * 8 / nacc;
    char vec[8], options[64];
    vec_type(lanes, vec, sizeof vec);
    snprintf(options, sizeof options, "-DVEC=%s -DLANES=%d -DNACC=%d", vec, lanes, nacc);
    cl_program prog;
    cl_mem out;
    cl_int err;
    cl_kernel kern = probe_kernel(&d, peak_source, "fma_peak", options, global, &prog, &out, &err);
    const cl_float a = 0.999f, b = 0.001f;
    const size_t sizes[] = {sizeof out, sizeof iters, sizeof a, sizeof b};
    const void *const values[] = {&out, &iters, &a, &b};
    err = set_args(kern, err, 4, sizes, values);
    const double gflops = err == CL_SUCCESS ? median_rate(d.queue, kern, global, local,
                                                          (double)global * iters * nacc * lanes * 2)
                                            : 0;
    release_probe(kern, prog, out, NULL);
    return gflops;
}

/* The device's f32 FMA peak: the fastest of two forms of the probe, 8 float16
 * accumulators (GPUs, AVX-512) and 12 of the device's native float vector width (CPUs
 * whose vector registers are fewer or narrower: AVX2's 16 ymm hold 12 float8 and the
 * operands); `form` names the one kept. 0 on failure. */
double measure_peak(clattn_context *ctx, char *form, size_t form_len)
{
    cl_device_id dev;
    clattn_context_get_cl(ctx, NULL, &dev, NULL);
    cl_uint native = 0;
    clGetDeviceInfo(dev, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof native, &native, NULL);
    double best = peak_form(ctx, 16, 8);
    snprintf(form, form_len, "float16 x 8 accumulators");
    if (native >= 1 && native <= 16 && (native & (native - 1)) == 0) { /* 1, 2, 4, 8, 16 */
        const double g = peak_form(ctx, (int)native, 12);
        if (g > best) {
            char vec[8];
            vec_type((int)native, vec, sizeof vec);
            best = g;
            snprintf(form, form_len, "%s x 12 accumulators", vec);
        }
    }
    return best;
}
