/* `clattn devices`: every OpenCL platform and device with its limits, and the device
 * a context gets by default. */
#include "clattn.h"
#include "cli.h"
#include "commands.h"

#include <CL/cl_ext.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char devices_usage[] =
    "Usage: clattn devices\n"
    "\n"
    "Lists every OpenCL platform and device, indexed \"P:D\" as accepted by --device and\n"
    "CLATTN_DEVICE, with compute units, global/local memory, max allocation, max\n"
    "work-group size and fp16/fp64 arithmetic (cl_khr_fp16, cl_khr_fp64: half arithmetic\n"
    "and the float64 LSE need them; float16 and bfloat16 storage works on every device).\n"
    "Marks the device clattn picks by default.\n";

/* Whether the space-separated list `extensions` holds `name`. */
static int has_extension(const char *extensions, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = extensions; p != NULL && (p = strstr(p, name)) != NULL; p += len) {
        if ((p == extensions || p[-1] == ' ') && (p[len] == '\0' || p[len] == ' ')) {
            return 1;
        }
    }
    return 0;
}

static const char *format_bytes(char *buf, size_t len, cl_ulong bytes)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double value = (double)bytes;
    int unit = 0;
    while (value >= 1024.0 && unit < 4) {
        value /= 1024.0;
        ++unit;
    }
    if (unit == 0) {
        snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
    } else {
        snprintf(buf, len, "%.1f %s", value, units[unit]);
    }
    return buf;
}

static const char *device_type_name(cl_device_type type)
{
    if (type & CL_DEVICE_TYPE_GPU) {
        return "GPU";
    }
    if (type & CL_DEVICE_TYPE_CPU) {
        return "CPU";
    }
    if (type & CL_DEVICE_TYPE_ACCELERATOR) {
        return "accelerator";
    }
    return "other";
}

static void print_device(cl_uint p, cl_uint d, cl_device_id device, int is_default)
{
    cl_device_type type = 0;
    cl_uint compute_units = 0;
    cl_ulong global_mem = 0, local_mem = 0, max_alloc = 0;
    cl_device_local_mem_type local_type = CL_LOCAL;
    size_t max_wg = 0;
    /* Core OpenCL 1.2 queries; `failed` is non-zero if any failed (CL_SUCCESS is 0), and
     * a failed query leaves its zero value. */
    cl_int failed =
        clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL) |
        clGetDeviceInfo(device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof compute_units, &compute_units,
                        NULL) |
        clGetDeviceInfo(device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global_mem, &global_mem, NULL) |
        clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL) |
        clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_TYPE, sizeof local_type, &local_type, NULL) |
        clGetDeviceInfo(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL) |
        clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
    char *name = cl_info_string(NULL, device, CL_DEVICE_NAME);
    char *version = cl_info_string(NULL, device, CL_DEVICE_VERSION);
    char *extensions = cl_info_string(NULL, device, CL_DEVICE_EXTENSIONS);
    char b1[32], b2[32], b3[32];

    printf("  %u:%u  %s (%s%s)\n", p, d, name != NULL ? name : "?", device_type_name(type),
           is_default ? ", default" : "");
    printf("       version              %s\n", version != NULL ? version : "?");
    printf("       compute units        %u\n", compute_units);
    printf("       global memory        %s\n", format_bytes(b1, sizeof b1, global_mem));
    printf("       local memory         %s%s\n", format_bytes(b2, sizeof b2, local_mem),
           local_type == CL_GLOBAL ? " (emulated in global memory)" : "");
    printf("       max allocation       %s\n", format_bytes(b3, sizeof b3, max_alloc));
    printf("       max work-group size  %zu\n", max_wg);
    printf("       fp16 / fp64 math     %s / %s (f16 and bf16 storage: any device)\n",
           has_extension(extensions, "cl_khr_fp16") ? "yes" : "no",
           has_extension(extensions, "cl_khr_fp64") ? "yes" : "no");
    if (failed != CL_SUCCESS || name == NULL || version == NULL || extensions == NULL) {
        printf("       (some device queries failed: their values show as 0 or ?)\n");
    }
    free(name);
    free(version);
    free(extensions);
}

/* Lists the devices of one platform; returns how many it has. */
static cl_uint print_platform(cl_uint p, cl_platform_id platform, cl_device_id default_device)
{
    char *name = cl_info_string(platform, NULL, CL_PLATFORM_NAME);
    char *version = cl_info_string(platform, NULL, CL_PLATFORM_VERSION);
    printf("Platform %u: %s (%s)\n", p, name != NULL ? name : "?", version != NULL ? version : "?");
    free(name);
    free(version);

    cl_uint n_devices = 0;
    cl_int rc = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, NULL, &n_devices);
    cl_device_id *devices =
        rc == CL_SUCCESS && n_devices > 0 ? malloc(n_devices * sizeof *devices) : NULL;
    if (devices == NULL ||
        clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n_devices, devices, NULL) != CL_SUCCESS) {
        printf("  no devices%s\n",
               rc == CL_SUCCESS || rc == CL_DEVICE_NOT_FOUND ? "" : " (clGetDeviceIDs failed)");
        free(devices);
        return 0;
    }
    for (cl_uint d = 0; d < n_devices; ++d) {
        print_device(p, d, devices[d], devices[d] == default_device);
    }
    free(devices);
    return n_devices;
}

int cmd_devices(int argc, char **argv)
{
    int rc = parse_command_line("clattn devices", devices_usage, argc, argv, NULL, 0);
    if (rc >= 0) {
        return rc;
    }
    cl_uint n_platforms = 0;
    cl_int cl_rc = clGetPlatformIDs(0, NULL, &n_platforms);
    if (cl_rc == CL_PLATFORM_NOT_FOUND_KHR || (cl_rc == CL_SUCCESS && n_platforms == 0)) {
        return cli_error("no OpenCL platform found. Install one, e.g. "
                         "`apt-get install pocl-opencl-icd` (CPU), or a GPU vendor's OpenCL "
                         "driver.");
    }
    cl_platform_id *platforms =
        cl_rc == CL_SUCCESS ? malloc(n_platforms * sizeof *platforms) : NULL;
    if (platforms == NULL || clGetPlatformIDs(n_platforms, platforms, NULL) != CL_SUCCESS) {
        free(platforms);
        return cli_error("clGetPlatformIDs failed (OpenCL error %d)", (int)cl_rc);
    }

    /* The device a context gets with no --device option (honours CLATTN_DEVICE). */
    clattn_context *ctx = NULL;
    cl_device_id default_device = NULL;
    clattn_status status = clattn_context_create(NULL, &ctx);
    if (status == CLATTN_SUCCESS &&
        clattn_context_get_cl(ctx, NULL, &default_device, NULL) != CLATTN_SUCCESS) {
        default_device = NULL;
    }

    cl_uint n_devices = 0;
    for (cl_uint p = 0; p < n_platforms; ++p) {
        n_devices += print_platform(p, platforms[p], default_device);
    }
    if (status != CLATTN_SUCCESS) {
        const char *message = clattn_last_error_message(NULL);
        printf("No default device: %s%s%s\n", clattn_status_string(status),
               message[0] != '\0' ? ": " : "", message);
    }
    clattn_context_release(ctx);
    free(platforms);
    if (n_devices == 0) {
        return cli_error("no OpenCL device found on any platform");
    }
    return EXIT_SUCCESS;
}
