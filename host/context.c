/* Platform/device choice, context and queue, device limits. */
#include "internal.h"

#include <pthread.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PLATFORMS 16

static char *dup_string(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}
#define MAX_DEVICES 64

static bool contains_nocase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    if (n == 0)
        return false;
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return true;
    }
    return false;
}

/* "P:D" with decimal P and D. */
static bool parse_index_spec(const char *spec, unsigned *p, unsigned *d)
{
    char *end;
    if (!isdigit((unsigned char)spec[0]))
        return false;
    unsigned long pp = strtoul(spec, &end, 10);
    if (*end != ':' || !isdigit((unsigned char)end[1]))
        return false;
    unsigned long dd = strtoul(end + 1, &end, 10);
    if (*end != '\0' || pp > 1000 || dd > 1000)
        return false;
    *p = (unsigned)pp;
    *d = (unsigned)dd;
    return true;
}

/* ICD loaders and drivers (PoCL 3.1 among them) are not safe when several threads make
 * a process's first OpenCL calls at once: device discovery is serialised here. This is
 * the library's only global state, and it holds no data. */
static pthread_mutex_t discovery_lock = PTHREAD_MUTEX_INITIALIZER;

static clattn_status choose_device_locked(const char *spec, cl_platform_id *out_p,
                                          cl_device_id *out_d);

static clattn_status choose_device(const char *spec, cl_platform_id *out_p, cl_device_id *out_d)
{
    pthread_mutex_lock(&discovery_lock);
    clattn_status st = choose_device_locked(spec, out_p, out_d);
    pthread_mutex_unlock(&discovery_lock);
    return st;
}

static clattn_status choose_device_locked(const char *spec, cl_platform_id *out_p,
                                          cl_device_id *out_d)
{
    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint n_platforms = 0;
    cl_int err = clGetPlatformIDs(MAX_PLATFORMS, platforms, &n_platforms);
    if (err == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (err == CL_SUCCESS && n_platforms == 0))
        return clattn_fail(NULL, CLATTN_ERROR_NO_PLATFORM,
                           "no OpenCL platform found: install an OpenCL driver (for the CPU: "
                           "apt-get install pocl-opencl-icd) and check /etc/OpenCL/vendors");
    if (err != CL_SUCCESS)
        return clattn_fail_cl(NULL, err, "clGetPlatformIDs");
    if (n_platforms > MAX_PLATFORMS)
        n_platforms = MAX_PLATFORMS;

    unsigned want_p = 0, want_d = 0;
    const bool by_index = spec && parse_index_spec(spec, &want_p, &want_d);
    cl_platform_id first_p = NULL, gpu_p = NULL, sim_p = NULL;
    cl_device_id first_d = NULL, gpu_d = NULL, sim_d = NULL;
    for (cl_uint p = 0; p < n_platforms; p++) {
        cl_device_id devices[MAX_DEVICES];
        cl_uint n_devices = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devices, &n_devices) !=
            CL_SUCCESS)
            continue;
        if (n_devices > MAX_DEVICES)
            n_devices = MAX_DEVICES;
        for (cl_uint d = 0; d < n_devices; d++) {
            char name[256] = "";
            cl_device_type type = 0;
            clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof name - 1, name, NULL);
            clGetDeviceInfo(devices[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
            if (spec && *spec) {
                if ((by_index && p == want_p && d == want_d) ||
                    (!by_index && contains_nocase(name, spec))) {
                    *out_p = platforms[p];
                    *out_d = devices[d];
                    return CLATTN_SUCCESS;
                }
                continue;
            }
            /* a simulator (oclgrind reports itself as a GPU) is chosen by name only */
            char platform_name[256] = "";
            clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof platform_name - 1,
                              platform_name, NULL);
            if (contains_nocase(name, "oclgrind") || contains_nocase(platform_name, "oclgrind")) {
                sim_p = sim_p ? sim_p : platforms[p];
                sim_d = sim_d ? sim_d : devices[d];
                continue;
            }
            if (!first_d) {
                first_p = platforms[p];
                first_d = devices[d];
            }
            if (!gpu_d && (type & CL_DEVICE_TYPE_GPU)) {
                gpu_p = platforms[p];
                gpu_d = devices[d];
            }
        }
    }
    if (spec && *spec)
        return clattn_fail(NULL, CLATTN_ERROR_NO_DEVICE,
                           "no OpenCL device matches \"%s\" (give \"P:D\" indices or part of "
                           "a device name; `clattn devices` lists them)",
                           spec);
    if (!first_d && sim_d) { /* only a simulator: better than nothing */
        first_p = sim_p;
        first_d = sim_d;
    }
    if (!first_d)
        return clattn_fail(NULL, CLATTN_ERROR_NO_DEVICE,
                           "OpenCL platforms exist but none has a device (for the CPU: "
                           "apt-get install pocl-opencl-icd)");
    *out_p = gpu_d ? gpu_p : first_p;
    *out_d = gpu_d ? gpu_d : first_d;
    return CLATTN_SUCCESS;
}

static clattn_status probe_limits(clattn_context *ctx)
{
    cl_device_id d = ctx->device;
    cl_int err =
        clGetDeviceInfo(d, CL_DEVICE_NAME, sizeof ctx->device_name - 1, ctx->device_name, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof ctx->device_type, &ctx->device_type, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof ctx->max_wg, &ctx->max_wg,
                              NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof ctx->max_wi, ctx->max_wi,
                              NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof ctx->local_mem, &ctx->local_mem,
                              NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof ctx->compute_units,
                              &ctx->compute_units, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof ctx->max_alloc,
                              &ctx->max_alloc, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof ctx->global_mem,
                              &ctx->global_mem, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(d, CL_DEVICE_PLATFORM, sizeof ctx->platform, &ctx->platform, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(d, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT,
                              sizeof ctx->native_float_width, &ctx->native_float_width, NULL);
    if (err != CL_SUCCESS)
        return clattn_fail_cl(ctx, err, "clGetDeviceInfo");
    /* Software prefetch in the CPU kernels (decode.cl, paged K/V): 1 where the compiler is
     * known to lower clang's __builtin_prefetch (PoCL, Intel's CPU runtime); 2 on oclgrind,
     * which cannot run the intrinsic: checked reads of the same addresses instead. */
    char platform_name[256] = "";
    clGetPlatformInfo(ctx->platform, CL_PLATFORM_NAME, sizeof platform_name - 1, platform_name,
                      NULL);
    if (contains_nocase(platform_name, "oclgrind"))
        ctx->cpu_prefetch = 2;
    else if ((ctx->device_type & CL_DEVICE_TYPE_CPU) &&
             (contains_nocase(platform_name, "Portable Computing Language") ||
              contains_nocase(platform_name, "Intel(R) OpenCL")))
        ctx->cpu_prefetch = 1;
    /* sub-group reductions in fused_gpu.cl: cl_khr_subgroup_clustered_reduce, built as
     * OpenCL C 3.0 on OpenCL 3 devices, else 2.0 (the extension needs sub-groups, which
     * OpenCL C 1.2 lacks) */
    size_t ext_len = 0;
    char version[16] = ""; /* "OpenCL 3.0 …": the first bytes are enough */
    size_t version_len = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_VERSION, 0, NULL, &version_len) == CL_SUCCESS && version_len) {
        char *v = calloc(1, version_len + 1);
        if (v && clGetDeviceInfo(d, CL_DEVICE_VERSION, version_len, v, NULL) == CL_SUCCESS)
            snprintf(version, sizeof version, "%s", v);
        free(v);
    }
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_len) == CL_SUCCESS && ext_len) {
        char *ext = calloc(1, ext_len + 1);
        const bool got =
            ext && clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, ext_len, ext, NULL) == CL_SUCCESS;
        ctx->has_fp16 = got && strstr(ext, "cl_khr_fp16");
        if (got && strstr(ext, "cl_khr_subgroup_clustered_reduce"))
            ctx->subgroup_std = strncmp(version, "OpenCL 3", 8) == 0   ? "-cl-std=CL3.0 -w"
                                : strncmp(version, "OpenCL 2", 8) == 0 ? "-cl-std=CL2.0 -w"
                                                                       : NULL;
        /* and a size to require where it is not the compiler's choice (Intel's CPU
         * runtime picks 8 lanes on AVX2: a row block of 16 would span two sub-groups) */
        size_t sizes[16], bytes = 0;
        if (ctx->subgroup_std && strstr(ext, "cl_intel_required_subgroup_size") &&
            clGetDeviceInfo(d, 0x4108 /* CL_DEVICE_SUB_GROUP_SIZES_INTEL */, sizeof sizes, sizes,
                            &bytes) == CL_SUCCESS)
            for (size_t i = 0; i < bytes / sizeof sizes[0] && i < 16; i++)
                if (sizes[i] && sizes[i] <= 16 && (sizes[i] & (sizes[i] - 1)) == 0)
                    ctx->intel_sg_sizes |= (unsigned)sizes[i];
        free(ext);
    }
    /* cl_khr_fp64: a nonzero double config (0 or an error: no float64 LSE) */
    cl_device_fp_config fp64 = 0;
    ctx->has_fp64 =
        clGetDeviceInfo(d, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL) == CL_SUCCESS &&
        fp64 != 0;
    return CLATTN_SUCCESS;
}

static clattn_status context_new(clattn_context **out)
{
    clattn_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "cannot allocate a context");
    ctx->message = calloc(1, 256);
    if (!ctx->message) {
        free(ctx);
        return clattn_fail(NULL, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "cannot allocate a context");
    }
    ctx->message_cap = 256;
    *out = ctx;
    return CLATTN_SUCCESS;
}

/* Copies ctx's message to the thread's message, releases ctx, returns st. */
static clattn_status fail_create(clattn_context *ctx, clattn_status st)
{
    clattn_fail(NULL, st, "%s", clattn_last_error_message(ctx));
    clattn_context_release(ctx);
    return st;
}

clattn_status clattn_context_create(const clattn_context_options *options, clattn_context **out)
{
    if (!out)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    const char *spec = options && options->device ? options->device : getenv("CLATTN_DEVICE");
    const char *kdir =
        options && options->kernel_dir ? options->kernel_dir : getenv("CLATTN_KERNEL_DIR");

    cl_platform_id platform;
    cl_device_id device;
    clattn_status st = choose_device(spec, &platform, &device);
    if (st != CLATTN_SUCCESS)
        return st;
    clattn_context *ctx = NULL;
    if ((st = context_new(&ctx)) != CLATTN_SUCCESS)
        return st;
    ctx->device = device;
    if (kdir && *kdir && !(ctx->kernel_dir = dup_string(kdir)))
        return fail_create(ctx, clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "strdup"));

    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)platform, 0};
    ctx->context = clCreateContext(props, 1, &device, NULL, NULL, &err);
    if (err != CL_SUCCESS)
        return fail_create(ctx, clattn_fail_cl(ctx, err, "clCreateContext"));
    ctx->queue = clCreateCommandQueue(ctx->context, device, CL_QUEUE_PROFILING_ENABLE, &err);
    ctx->in_order = true;
    if (err != CL_SUCCESS)
        return fail_create(ctx, clattn_fail_cl(ctx, err, "clCreateCommandQueue"));
    if ((st = probe_limits(ctx)) != CLATTN_SUCCESS ||
        (st = clattn_cache_open(ctx, options)) != CLATTN_SUCCESS)
        return fail_create(ctx, st);
    clattn_tuning_init(ctx);
    clattn_clear_error(NULL);
    *out = ctx;
    return CLATTN_SUCCESS;
}

clattn_status clattn_context_create_from_cl(cl_context context, cl_device_id device,
                                            cl_command_queue queue, clattn_context **out)
{
    return clattn_context_create_from_cl_with_options(NULL, context, device, queue, out);
}

clattn_status clattn_context_create_from_cl_with_options(const clattn_context_options *options,
                                                         cl_context context, cl_device_id device,
                                                         cl_command_queue queue,
                                                         clattn_context **out)
{
    if (!out)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (!context || !device || !queue)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT,
                           "context, device and queue must all be non-NULL");
    cl_device_id qdev = NULL;
    cl_context qctx = NULL;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof qdev, &qdev, NULL);
    cl_command_queue_properties props = 0;
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof qctx, &qctx, NULL);
    if (err == CL_SUCCESS)
        err = clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL);
    if (err != CL_SUCCESS)
        return clattn_fail_cl(NULL, err, "clGetCommandQueueInfo(queue)");
    if (qdev != device || qctx != context)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT,
                           "the queue belongs to another device or context");
    clattn_context *ctx = NULL;
    clattn_status st = context_new(&ctx);
    if (st != CLATTN_SUCCESS)
        return st;
    if ((err = clRetainContext(context)) != CL_SUCCESS)
        return fail_create(ctx, clattn_fail_cl(ctx, err, "clRetainContext"));
    ctx->context = context;
    if ((err = clRetainCommandQueue(queue)) != CL_SUCCESS)
        return fail_create(ctx, clattn_fail_cl(ctx, err, "clRetainCommandQueue"));
    ctx->queue = queue;
    ctx->in_order = !(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
    ctx->device = device;
    const char *kdir =
        options && options->kernel_dir ? options->kernel_dir : getenv("CLATTN_KERNEL_DIR");
    if (kdir && *kdir && !(ctx->kernel_dir = dup_string(kdir)))
        return fail_create(ctx, clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "strdup"));
    if ((st = probe_limits(ctx)) != CLATTN_SUCCESS ||
        (st = clattn_cache_open(ctx, options)) != CLATTN_SUCCESS)
        return fail_create(ctx, st);
    clattn_tuning_init(ctx);
    clattn_clear_error(NULL);
    *out = ctx;
    return CLATTN_SUCCESS;
}

void clattn_context_release(clattn_context *ctx)
{
    if (!ctx)
        return;
    if (ctx->queue) {
        clFinish(ctx->queue);
        if (ctx->nn_ws)
            clReleaseMemObject(ctx->nn_ws);
        clattn_programs_release(ctx);
        clReleaseCommandQueue(ctx->queue);
    } else {
        clattn_programs_release(ctx);
    }
    if (ctx->context)
        clReleaseContext(ctx->context);
    free(ctx->kernel_dir);
    free(ctx->cache_dir);
    clattn_mods_release(ctx);
    clattn_tuning_release(ctx);
    free(ctx->message);
    free(ctx);
}

clattn_status clattn_context_get_cl(const clattn_context *ctx, cl_context *context,
                                    cl_device_id *device, cl_command_queue *queue)
{
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    if (context)
        *context = ctx->context;
    if (device)
        *device = ctx->device;
    if (queue)
        *queue = ctx->queue;
    return CLATTN_SUCCESS;
}
