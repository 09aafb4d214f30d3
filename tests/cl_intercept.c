#define _GNU_SOURCE /* RTLD_NEXT */
/* OpenCL call interposition: see cl_intercept.h. Every wrapper forwards to the real
 * entry point of libOpenCL (dlsym(RTLD_NEXT, name)); signatures are those of CL/cl.h
 * (a mismatch is a compile error, "conflicting types"). Objects created by calls not
 * wrapped here (images, samplers, SVM, OpenCL 2.x calls) are not counted: if the
 * library starts using one, wrap it here, or the counts go negative on its release. */
#include "cl_intercept.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_long g_live[CLI_N_KINDS];

static struct {
    bool armed;
    long fail_at;
    int variant;
    cli_report report;
} g_inj;

const char *cli_kind_name(cli_kind kind)
{
    static const char *const names[CLI_N_KINDS] = {"mem",   "kernel", "program",
                                                   "event", "queue",  "context"};
    return kind >= 0 && kind < CLI_N_KINDS ? names[kind] : "?";
}

cli_counts cli_counts_now(void)
{
    cli_counts c;
    for (int i = 0; i < CLI_N_KINDS; i++)
        c.live[i] = atomic_load(&g_live[i]);
    return c;
}

bool cli_counts_equal(const cli_counts *a, const cli_counts *b, char *msg, size_t cap)
{
    bool same = true;
    size_t at = 0;
    if (cap)
        msg[0] = '\0';
    for (int i = 0; i < CLI_N_KINDS; i++) {
        if (a->live[i] == b->live[i])
            continue;
        same = false;
        if (at < cap) {
            int n = snprintf(msg + at, cap - at, "%s%s %ld -> %ld", at ? ", " : "",
                             cli_kind_name((cli_kind)i), a->live[i], b->live[i]);
            at += n > 0 ? (size_t)n : 0;
        }
    }
    return same;
}

static void count(cli_kind kind, long delta)
{
    atomic_fetch_add(&g_live[kind], delta);
}

cl_int cli_variant_error(const char *call, int variant)
{
    static const struct {
        const char *call;
        cl_int errors[CLI_N_VARIANTS];
    } table[] = {
        {"clCreateBuffer",
         {CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_HOST_MEMORY, CL_OUT_OF_RESOURCES}},
        {"clEnqueueNDRangeKernel",
         {CL_OUT_OF_RESOURCES, CL_INVALID_WORK_GROUP_SIZE, CL_OUT_OF_HOST_MEMORY}},
        {"clBuildProgram", {CL_BUILD_PROGRAM_FAILURE, CL_OUT_OF_HOST_MEMORY, CL_OUT_OF_RESOURCES}},
        {"clEnqueueReadBuffer",
         {CL_OUT_OF_RESOURCES, CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_HOST_MEMORY}},
        {"clEnqueueWriteBuffer",
         {CL_OUT_OF_RESOURCES, CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_OUT_OF_HOST_MEMORY}},
        {"clCreateKernel", {CL_OUT_OF_HOST_MEMORY, CL_OUT_OF_RESOURCES, CL_INVALID_KERNEL_NAME}},
        {"clSetKernelArg", {CL_OUT_OF_RESOURCES, CL_INVALID_ARG_SIZE, CL_OUT_OF_HOST_MEMORY}},
        {"clWaitForEvents",
         {CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, CL_OUT_OF_RESOURCES,
          CL_OUT_OF_HOST_MEMORY}},
        {"clGetMemObjectInfo", {CL_INVALID_MEM_OBJECT, CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY}},
    };
    static const cl_int fallback[CLI_N_VARIANTS] = {CL_OUT_OF_RESOURCES, CL_OUT_OF_HOST_MEMORY,
                                                    CL_INVALID_VALUE};
    if (variant < 0 || variant >= CLI_N_VARIANTS)
        variant = 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(table[i].call, call) == 0)
            return table[i].errors[variant];
    return fallback[variant];
}

void cli_arm(long fail_at, int variant)
{
    memset(&g_inj.report, 0, sizeof g_inj.report);
    g_inj.fail_at = fail_at;
    g_inj.variant = variant;
    g_inj.armed = true;
}

void cli_disarm(void)
{
    g_inj.armed = false;
}

cli_report cli_report_now(void)
{
    return g_inj.report;
}

/* Whether this injectable call must fail; *err receives the error. */
static bool inject(const char *call, cl_int *err)
{
    if (!g_inj.armed)
        return false;
    if (++g_inj.report.calls != g_inj.fail_at)
        return false;
    g_inj.report.fired = true;
    g_inj.report.call = call;
    g_inj.report.error = *err = cli_variant_error(call, g_inj.variant);
    return true;
}

/* The real entry point, looked up once (a racing first lookup stores the same value):
 * the next definition after this executable's, or, when the linker dropped libOpenCL
 * from the executable's dependencies (--as-needed: every OpenCL symbol the program
 * references is defined here), libOpenCL loaded by name. */
static void resolve(const char *name, void *fn_ptr, size_t size)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (!p) {
        static void *loader;
        if (!loader)
            loader = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_GLOBAL);
        if (!loader)
            loader = dlopen("libOpenCL.so", RTLD_NOW | RTLD_GLOBAL);
        p = loader ? dlsym(loader, name) : NULL;
    }
    if (!p) {
        fprintf(stderr, "cl_intercept: no real %s (dlsym(RTLD_NEXT) and libOpenCL.so.1): %s\n",
                name, dlerror());
        abort();
    }
    memcpy(fn_ptr, &p, size);
}

#define REAL(name)                                                                                 \
    static __typeof__(&name) real_;                                                                \
    if (!real_)                                                                                    \
    resolve(#name, &real_, sizeof real_)

/* A create call that returns the object and reports through errcode_ret. */
#define CREATE_BODY(name, kind, ...)                                                               \
    REAL(name);                                                                                    \
    cl_int e_ = CL_SUCCESS;                                                                        \
    if (inject(#name, &e_)) {                                                                      \
        if (errcode_ret)                                                                           \
            *errcode_ret = e_;                                                                     \
        return NULL;                                                                               \
    }                                                                                              \
    __typeof__(real_(__VA_ARGS__, &e_)) obj_ = real_(__VA_ARGS__, &e_);                            \
    if (errcode_ret)                                                                               \
        *errcode_ret = e_;                                                                         \
    if (obj_)                                                                                      \
        count(kind, 1);                                                                            \
    return obj_

/* An injectable call returning cl_int, with no object effect. */
#define PLAIN_BODY(name, ...)                                                                      \
    REAL(name);                                                                                    \
    cl_int e_ = CL_SUCCESS;                                                                        \
    if (inject(#name, &e_))                                                                        \
        return e_;                                                                                 \
    return real_(__VA_ARGS__)

/* An injectable enqueue call: a returned event counts as created. */
#define ENQUEUE_BODY(name, ...)                                                                    \
    REAL(name);                                                                                    \
    cl_int e_ = CL_SUCCESS;                                                                        \
    if (inject(#name, &e_))                                                                        \
        return e_;                                                                                 \
    e_ = real_(__VA_ARGS__);                                                                       \
    if (e_ == CL_SUCCESS && event)                                                                 \
        count(CLI_EVENT, 1);                                                                       \
    return e_

#define REFCOUNT(type, kind, retain, release)                                                      \
    CL_API_ENTRY cl_int CL_API_CALL retain(type obj)                                               \
    {                                                                                              \
        REAL(retain);                                                                              \
        cl_int e_ = real_(obj);                                                                    \
        if (e_ == CL_SUCCESS)                                                                      \
            count(kind, 1);                                                                        \
        return e_;                                                                                 \
    }                                                                                              \
    CL_API_ENTRY cl_int CL_API_CALL release(type obj)                                              \
    {                                                                                              \
        REAL(release);                                                                             \
        cl_int e_ = real_(obj);                                                                    \
        if (e_ == CL_SUCCESS)                                                                      \
            count(kind, -1);                                                                       \
        return e_;                                                                                 \
    }

REFCOUNT(cl_mem, CLI_MEM, clRetainMemObject, clReleaseMemObject)
REFCOUNT(cl_kernel, CLI_KERNEL, clRetainKernel, clReleaseKernel)
REFCOUNT(cl_program, CLI_PROGRAM, clRetainProgram, clReleaseProgram)
REFCOUNT(cl_event, CLI_EVENT, clRetainEvent, clReleaseEvent)
REFCOUNT(cl_command_queue, CLI_QUEUE, clRetainCommandQueue, clReleaseCommandQueue)
REFCOUNT(cl_context, CLI_CONTEXT, clRetainContext, clReleaseContext)

/* ---- platforms, devices, contexts, queues ---- */

CL_API_ENTRY cl_int CL_API_CALL clGetPlatformIDs(cl_uint num_entries, cl_platform_id *platforms,
                                                 cl_uint *num_platforms)
{
    PLAIN_BODY(clGetPlatformIDs, num_entries, platforms, num_platforms);
}

CL_API_ENTRY cl_int CL_API_CALL clGetDeviceIDs(cl_platform_id platform, cl_device_type device_type,
                                               cl_uint num_entries, cl_device_id *devices,
                                               cl_uint *num_devices)
{
    PLAIN_BODY(clGetDeviceIDs, platform, device_type, num_entries, devices, num_devices);
}

CL_API_ENTRY cl_int CL_API_CALL clGetDeviceInfo(cl_device_id device, cl_device_info param_name,
                                                size_t param_value_size, void *param_value,
                                                size_t *param_value_size_ret)
{
    PLAIN_BODY(clGetDeviceInfo, device, param_name, param_value_size, param_value,
               param_value_size_ret);
}

CL_API_ENTRY cl_context CL_API_CALL clCreateContext(
    const cl_context_properties *properties, cl_uint num_devices, const cl_device_id *devices,
    void(CL_CALLBACK *pfn_notify)(const char *, const void *, size_t, void *), void *user_data,
    cl_int *errcode_ret)
{
    CREATE_BODY(clCreateContext, CLI_CONTEXT, properties, num_devices, devices, pfn_notify,
                user_data);
}

CL_API_ENTRY cl_context CL_API_CALL
clCreateContextFromType(const cl_context_properties *properties, cl_device_type device_type,
                        void(CL_CALLBACK *pfn_notify)(const char *, const void *, size_t, void *),
                        void *user_data, cl_int *errcode_ret)
{
    CREATE_BODY(clCreateContextFromType, CLI_CONTEXT, properties, device_type, pfn_notify,
                user_data);
}

CL_API_ENTRY cl_command_queue CL_API_CALL clCreateCommandQueue(cl_context context,
                                                               cl_device_id device,
                                                               cl_command_queue_properties props,
                                                               cl_int *errcode_ret)
{
    CREATE_BODY(clCreateCommandQueue, CLI_QUEUE, context, device, props);
}

CL_API_ENTRY cl_int CL_API_CALL clGetCommandQueueInfo(cl_command_queue queue,
                                                      cl_command_queue_info param_name,
                                                      size_t param_value_size, void *param_value,
                                                      size_t *param_value_size_ret)
{
    PLAIN_BODY(clGetCommandQueueInfo, queue, param_name, param_value_size, param_value,
               param_value_size_ret);
}

/* not injectable: the library calls it only while releasing a context */
CL_API_ENTRY cl_int CL_API_CALL clFinish(cl_command_queue queue)
{
    REAL(clFinish);
    return real_(queue);
}

/* ---- memory objects ---- */

CL_API_ENTRY cl_mem CL_API_CALL clCreateBuffer(cl_context context, cl_mem_flags flags, size_t size,
                                               void *host_ptr, cl_int *errcode_ret)
{
    CREATE_BODY(clCreateBuffer, CLI_MEM, context, flags, size, host_ptr);
}

CL_API_ENTRY cl_mem CL_API_CALL clCreateSubBuffer(cl_mem buffer, cl_mem_flags flags,
                                                  cl_buffer_create_type type, const void *info,
                                                  cl_int *errcode_ret)
{
    CREATE_BODY(clCreateSubBuffer, CLI_MEM, buffer, flags, type, info);
}

CL_API_ENTRY cl_int CL_API_CALL clGetMemObjectInfo(cl_mem memobj, cl_mem_info param_name,
                                                   size_t param_value_size, void *param_value,
                                                   size_t *param_value_size_ret)
{
    PLAIN_BODY(clGetMemObjectInfo, memobj, param_name, param_value_size, param_value,
               param_value_size_ret);
}

/* ---- programs and kernels ---- */

CL_API_ENTRY cl_program CL_API_CALL clCreateProgramWithSource(cl_context context, cl_uint count_,
                                                              const char **strings,
                                                              const size_t *lengths,
                                                              cl_int *errcode_ret)
{
    CREATE_BODY(clCreateProgramWithSource, CLI_PROGRAM, context, count_, strings, lengths);
}

CL_API_ENTRY cl_program CL_API_CALL clCreateProgramWithBinary(
    cl_context context, cl_uint num_devices, const cl_device_id *device_list, const size_t *lengths,
    const unsigned char **binaries, cl_int *binary_status, cl_int *errcode_ret)
{
    CREATE_BODY(clCreateProgramWithBinary, CLI_PROGRAM, context, num_devices, device_list, lengths,
                binaries, binary_status);
}

CL_API_ENTRY cl_program CL_API_CALL clLinkProgram(cl_context context, cl_uint num_devices,
                                                  const cl_device_id *device_list,
                                                  const char *options, cl_uint num_input_programs,
                                                  const cl_program *input_programs,
                                                  void(CL_CALLBACK *pfn_notify)(cl_program, void *),
                                                  void *user_data, cl_int *errcode_ret)
{
    CREATE_BODY(clLinkProgram, CLI_PROGRAM, context, num_devices, device_list, options,
                num_input_programs, input_programs, pfn_notify, user_data);
}

CL_API_ENTRY cl_int CL_API_CALL clBuildProgram(cl_program program, cl_uint num_devices,
                                               const cl_device_id *device_list, const char *options,
                                               void(CL_CALLBACK *pfn_notify)(cl_program, void *),
                                               void *user_data)
{
    PLAIN_BODY(clBuildProgram, program, num_devices, device_list, options, pfn_notify, user_data);
}

CL_API_ENTRY cl_int CL_API_CALL clGetProgramInfo(cl_program program, cl_program_info param_name,
                                                 size_t param_value_size, void *param_value,
                                                 size_t *param_value_size_ret)
{
    PLAIN_BODY(clGetProgramInfo, program, param_name, param_value_size, param_value,
               param_value_size_ret);
}

CL_API_ENTRY cl_int CL_API_CALL clGetProgramBuildInfo(cl_program program, cl_device_id device,
                                                      cl_program_build_info param_name,
                                                      size_t param_value_size, void *param_value,
                                                      size_t *param_value_size_ret)
{
    PLAIN_BODY(clGetProgramBuildInfo, program, device, param_name, param_value_size, param_value,
               param_value_size_ret);
}

CL_API_ENTRY cl_kernel CL_API_CALL clCreateKernel(cl_program program, const char *kernel_name,
                                                  cl_int *errcode_ret)
{
    CREATE_BODY(clCreateKernel, CLI_KERNEL, program, kernel_name);
}

CL_API_ENTRY cl_int CL_API_CALL clCreateKernelsInProgram(cl_program program, cl_uint num_kernels,
                                                         cl_kernel *kernels,
                                                         cl_uint *num_kernels_ret)
{
    REAL(clCreateKernelsInProgram);
    cl_int e_ = CL_SUCCESS;
    if (inject("clCreateKernelsInProgram", &e_))
        return e_;
    cl_uint n = 0;
    e_ = real_(program, num_kernels, kernels, &n);
    if (num_kernels_ret)
        *num_kernels_ret = n;
    if (e_ == CL_SUCCESS && kernels)
        count(CLI_KERNEL, (long)n);
    return e_;
}

CL_API_ENTRY cl_int CL_API_CALL clSetKernelArg(cl_kernel kernel, cl_uint arg_index, size_t arg_size,
                                               const void *arg_value)
{
    PLAIN_BODY(clSetKernelArg, kernel, arg_index, arg_size, arg_value);
}

CL_API_ENTRY cl_int CL_API_CALL clGetKernelWorkGroupInfo(cl_kernel kernel, cl_device_id device,
                                                         cl_kernel_work_group_info param_name,
                                                         size_t param_value_size, void *param_value,
                                                         size_t *param_value_size_ret)
{
    PLAIN_BODY(clGetKernelWorkGroupInfo, kernel, device, param_name, param_value_size, param_value,
               param_value_size_ret);
}

/* ---- events ---- */

CL_API_ENTRY cl_event CL_API_CALL clCreateUserEvent(cl_context context, cl_int *errcode_ret)
{
    CREATE_BODY(clCreateUserEvent, CLI_EVENT, context);
}

CL_API_ENTRY cl_int CL_API_CALL clWaitForEvents(cl_uint num_events, const cl_event *event_list)
{
    PLAIN_BODY(clWaitForEvents, num_events, event_list);
}

/* ---- enqueued commands ---- */

CL_API_ENTRY cl_int CL_API_CALL clEnqueueReadBuffer(cl_command_queue queue, cl_mem buffer,
                                                    cl_bool blocking_read, size_t offset,
                                                    size_t size, void *ptr, cl_uint n_wait,
                                                    const cl_event *wait, cl_event *event)
{
    REAL(clEnqueueReadBuffer);
    cl_int e_ = CL_SUCCESS;
    if (inject("clEnqueueReadBuffer", &e_))
        return e_;
    e_ = real_(queue, buffer, blocking_read, offset, size, ptr, n_wait, wait, event);
    if (e_ == CL_SUCCESS && event)
        count(CLI_EVENT, 1);
    if (e_ == CL_SUCCESS && g_inj.armed)
        g_inj.report.reads_ok++;
    return e_;
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueWriteBuffer(cl_command_queue queue, cl_mem buffer,
                                                     cl_bool blocking_write, size_t offset,
                                                     size_t size, const void *ptr, cl_uint n_wait,
                                                     const cl_event *wait, cl_event *event)
{
    ENQUEUE_BODY(clEnqueueWriteBuffer, queue, buffer, blocking_write, offset, size, ptr, n_wait,
                 wait, event);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueFillBuffer(cl_command_queue queue, cl_mem buffer,
                                                    const void *pattern, size_t pattern_size,
                                                    size_t offset, size_t size, cl_uint n_wait,
                                                    const cl_event *wait, cl_event *event)
{
    ENQUEUE_BODY(clEnqueueFillBuffer, queue, buffer, pattern, pattern_size, offset, size, n_wait,
                 wait, event);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueCopyBuffer(cl_command_queue queue, cl_mem src, cl_mem dst,
                                                    size_t src_offset, size_t dst_offset,
                                                    size_t size, cl_uint n_wait,
                                                    const cl_event *wait, cl_event *event)
{
    ENQUEUE_BODY(clEnqueueCopyBuffer, queue, src, dst, src_offset, dst_offset, size, n_wait, wait,
                 event);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueNDRangeKernel(cl_command_queue queue, cl_kernel kernel,
                                                       cl_uint work_dim, const size_t *offset,
                                                       const size_t *global, const size_t *local,
                                                       cl_uint n_wait, const cl_event *wait,
                                                       cl_event *event)
{
    REAL(clEnqueueNDRangeKernel);
    cl_int e_ = CL_SUCCESS;
    if (inject("clEnqueueNDRangeKernel", &e_))
        return e_;
    e_ = real_(queue, kernel, work_dim, offset, global, local, n_wait, wait, event);
    if (e_ == CL_SUCCESS && event)
        count(CLI_EVENT, 1);
    if (e_ == CL_SUCCESS && g_inj.armed)
        g_inj.report.kernels_ok++;
    return e_;
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueMarkerWithWaitList(cl_command_queue queue, cl_uint n_wait,
                                                            const cl_event *wait, cl_event *event)
{
    ENQUEUE_BODY(clEnqueueMarkerWithWaitList, queue, n_wait, wait, event);
}

CL_API_ENTRY cl_int CL_API_CALL clEnqueueBarrierWithWaitList(cl_command_queue queue, cl_uint n_wait,
                                                             const cl_event *wait, cl_event *event)
{
    ENQUEUE_BODY(clEnqueueBarrierWithWaitList, queue, n_wait, wait, event);
}
