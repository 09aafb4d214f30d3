/*
 * clattn — command-line front end of the clattn library.
 *
 *   clattn devices   list OpenCL platforms and devices with their limits
 *   clattn demo      run two worked examples and compare with the CPU reference
 *   clattn run       attention on .npy files
 *
 * Exit status: 0 success, 1 failure (bad file, library error, failed check),
 * 2 usage error. A failing `run` writes no output file.
 */
#define _POSIX_C_SOURCE 200809L /* lstat, stat, access, link */

#include "clattn.h"
#include "bench.h"
#include "npy.h"

#include <CL/cl_ext.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#if defined(__GNUC__)
#define CLI_PRINTF(fmt_index, first_arg) __attribute__((format(printf, fmt_index, first_arg)))
#else
#define CLI_PRINTF(fmt_index, first_arg)
#endif

enum { EXIT_USAGE = 2 };

/* Tolerance of `run --check` (per element, against the float64-accumulating
 * reference) and of `demo` (absolute). */
#define CHECK_ATOL 1e-5
#define CHECK_RTOL 1e-5

static const char program_usage[] =
    "Usage: clattn <command> [options]\n"
    "\n"
    "Scaled dot-product attention O = softmax(scale*Q*K^T + mask)*V on OpenCL devices.\n"
    "\n"
    "Commands:\n"
    "  devices   list OpenCL platforms and devices (\"P:D\") with their limits\n"
    "  demo      run two worked examples on a device and compare with the CPU reference\n"
    "  run       compute attention on .npy files\n"
    "  bench     time attention on device buffers over a list of shapes\n"
    "\n"
    "Options:\n"
    "  -h, --help   show this help; `clattn <command> --help` describes a command\n"
    "  --version    print the library version\n"
    "\n"
    "Environment:\n"
    "  CLATTN_DEVICE      default device: \"P:D\" or a device-name substring\n"
    "  CLATTN_KERNEL_DIR  folder of .cl files to use instead of the built-in kernels\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 usage error.\n";

static const char devices_usage[] =
    "Usage: clattn devices\n"
    "\n"
    "Lists every OpenCL platform and device, indexed \"P:D\" as accepted by --device and\n"
    "CLATTN_DEVICE, with compute units, global/local memory, max allocation, max\n"
    "work-group size and fp16/fp64 support. Marks the device clattn picks by default.\n";

static const char demo_usage[] =
    "Usage: clattn demo [--device SPEC]\n"
    "\n"
    "Runs two worked examples through the library and prints their scores, weights\n"
    "and outputs:\n"
    "  Example 1: \"your journey starts with one step\", six words embedded as a 6x3\n"
    "             matrix X; Q = K = V = X, scale 1\n"
    "  Example 2: \"sat bank river\", 3x4 embeddings; scale 1/2, no word attends\n"
    "             itself; the output of \"bank\" is compared with \"river\" and \"money\"\n"
    "Compares both algorithms (unfused, fused) with the CPU reference and exits 1 if\n"
    "any value deviates by more than 1e-5.\n"
    "\n"
    "Options:\n"
    "  --device SPEC   \"P:D\" (see `clattn devices`) or a device-name substring;\n"
    "                  default: CLATTN_DEVICE, else the first GPU, else the first device\n"
    "  -h, --help      show this help\n";

static const char run_usage[] =
    "Usage: clattn run --q Q.npy --k K.npy --v V.npy --out O.npy [options]\n"
    "\n"
    "Computes O = softmax(scale*Q*K^T + mask)*V. Inputs are C-order little-endian\n"
    "float32 .npy files shaped (n, d), (h, n, d) or (b, h, n, d), all of the same rank:\n"
    "Q [b, h_q, n_q, d_k], K [b, h_kv, n_kv, d_k], V [b, h_kv, n_kv, d_v], with h_q a\n"
    "multiple of h_kv. O gets Q's rank and shape with the last dimension d_v.\n"
    "Output files are written only on success (an existing file is otherwise kept);\n"
    "an output must not name an input or the other output, and an existing output must\n"
    "be a regular file (not a directory, symbolic link, device or FIFO).\n"
    "\n"
    "Options:\n"
    "  --q FILE          queries\n"
    "  --k FILE          keys\n"
    "  --v FILE          values\n"
    "  --out FILE        output O\n"
    "  --scale X         multiplies Q*K^T (finite, non-zero; default 1/sqrt(d_k))\n"
    "  --mask M          none (default), causal (key j visible to query i iff j <= i),\n"
    "                    causal-bottom-right (iff j <= i + n_kv - n_q), no-self (iff j != i)\n"
    "  --algorithm A     auto (default), fused, unfused\n"
    "  --weights FILE    also write the attention weights, shaped like O with the last\n"
    "                    dimension n_kv (needs algorithm auto or unfused)\n"
    "  --check           also run the CPU reference; fail unless every element is within\n"
    "                    1e-5 + 1e-5*|reference|\n"
    "  --device SPEC     \"P:D\" (see `clattn devices`) or a device-name substring;\n"
    "                    default: CLATTN_DEVICE, else the first GPU, else the first device\n"
    "  -h, --help        show this help\n";

/* ------------------------------------------------------------------------------ */
/* Small helpers                                                                  */
/* ------------------------------------------------------------------------------ */

CLI_PRINTF(2, 3)
static int usage_error(const char *command, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", command);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", command);
    return EXIT_USAGE;
}

CLI_PRINTF(1, 2)
static int error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "clattn: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return EXIT_FAILURE;
}

/* A failed library call: its status and the context's message. */
static int library_error(const char *call, clattn_status status, const clattn_context *ctx)
{
    const char *message = clattn_last_error_message(ctx);
    return error("%s failed: %s%s%s", call, clattn_status_string(status),
                 message[0] != '\0' ? ": " : "", message);
}

static clattn_status open_context(const char *device, clattn_context **ctx)
{
    clattn_context_options options = {0}; /* fields are only ever appended */
    options.device = device;
    clattn_status status = clattn_context_create(&options, ctx);
    if (status != CLATTN_SUCCESS) {
        library_error("clattn_context_create", status, NULL);
    }
    return status;
}

/* Element-wise comparison with a reference: the largest |got - ref| (infinite where
 * one side is NaN or infinite and the other is not) and whether every element is
 * within CHECK_ATOL + CHECK_RTOL*|ref|. */
typedef struct deviation {
    double max_abs;
    size_t worst; /* index of max_abs */
    int within;   /* 1 if every element is within tolerance */
} deviation;

static deviation compare(const float *got, const float *ref, size_t count)
{
    deviation dev = {0.0, 0, 1};
    for (size_t i = 0; i < count; ++i) {
        double g = got[i], r = ref[i], diff;
        int ok;
        if (isnan(g) || isnan(r)) {
            ok = isnan(g) && isnan(r);
            diff = ok ? 0.0 : INFINITY;
        } else if (isinf(g) || isinf(r)) {
            ok = g == r;
            diff = ok ? 0.0 : INFINITY;
        } else {
            diff = fabs(g - r);
            ok = diff <= CHECK_ATOL + CHECK_RTOL * fabs(r);
        }
        if (!ok) {
            dev.within = 0;
        }
        if (diff > dev.max_abs) {
            dev.max_abs = diff;
            dev.worst = i;
        }
    }
    return dev;
}

/* ------------------------------------------------------------------------------ */
/* Option parsing                                                                 */
/* ------------------------------------------------------------------------------ */

typedef struct option {
    const char *name;   /* "--q" */
    const char **value; /* receives the argument; NULL for a flag */
    int *flag;          /* set to 1 for a flag */
} option;

enum { PARSE_OK, PARSE_HELP, PARSE_ERROR };

/* Accepts "--name VALUE", "--name=VALUE" and flags; -h/--help prints `usage`. An
 * option given twice, or with an empty value, is a usage error. At most 32 options. */
static int parse_options(const char *command, const char *usage, int argc, char **argv,
                         const option *options, size_t n_options)
{
    unsigned long seen = 0; /* bit j: options[j] was given */
    for (int i = 0; i < argc; ++i) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            fputs(usage, stdout);
            return PARSE_HELP;
        }
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        size_t name_len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        size_t j = 0;
        while (j < n_options && !(strlen(options[j].name) == name_len &&
                                  strncmp(options[j].name, arg, name_len) == 0)) {
            ++j;
        }
        if (j == n_options) {
            usage_error(command, arg[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s'",
                        arg);
            return PARSE_ERROR;
        }
        const option *opt = &options[j];
        if (seen & 1ul << j) {
            usage_error(command, "option '%s' is given more than once", opt->name);
            return PARSE_ERROR;
        }
        seen |= 1ul << j;
        if (opt->value == NULL) {
            if (eq != NULL) {
                usage_error(command, "option '%s' takes no value", opt->name);
                return PARSE_ERROR;
            }
            *opt->flag = 1;
            continue;
        }
        const char *value = eq != NULL ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (value == NULL) {
            usage_error(command, "option '%s' needs a value", opt->name);
            return PARSE_ERROR;
        }
        if (value[0] == '\0') {
            usage_error(command, "option '%s' needs a non-empty value", opt->name);
            return PARSE_ERROR;
        }
        *opt->value = value;
    }
    return PARSE_OK;
}

/* parse_options() mapped to "continue" (-1) or an exit status. */
static int parse_command_line(const char *command, const char *usage, int argc, char **argv,
                              const option *options, size_t n_options)
{
    switch (parse_options(command, usage, argc, argv, options, n_options)) {
    case PARSE_OK: return -1;
    case PARSE_HELP: return EXIT_SUCCESS;
    default: return EXIT_USAGE;
    }
}

/* ------------------------------------------------------------------------------ */
/* clattn devices                                                                 */
/* ------------------------------------------------------------------------------ */

/* A string property of `device`, or of `platform` when device is NULL (malloc'd;
 * NULL on failure). */
static char *cl_info_string(cl_platform_id platform, cl_device_id device, cl_uint param)
{
    size_t size = 0;
    cl_int rc = device != NULL ? clGetDeviceInfo(device, param, 0, NULL, &size)
                               : clGetPlatformInfo(platform, param, 0, NULL, &size);
    char *text = rc == CL_SUCCESS ? malloc(size + 1) : NULL;
    if (text == NULL) {
        return NULL;
    }
    rc = device != NULL ? clGetDeviceInfo(device, param, size, text, NULL)
                        : clGetPlatformInfo(platform, param, size, text, NULL);
    if (rc != CL_SUCCESS) {
        free(text);
        return NULL;
    }
    text[size] = '\0';
    return text;
}

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
    printf("       fp16 / fp64          %s / %s\n",
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

static int cmd_devices(int argc, char **argv)
{
    int rc = parse_command_line("clattn devices", devices_usage, argc, argv, NULL, 0);
    if (rc >= 0) {
        return rc;
    }
    cl_uint n_platforms = 0;
    cl_int cl_rc = clGetPlatformIDs(0, NULL, &n_platforms);
    if (cl_rc == CL_PLATFORM_NOT_FOUND_KHR || (cl_rc == CL_SUCCESS && n_platforms == 0)) {
        return error("no OpenCL platform found. Install one, e.g. "
                     "`apt-get install pocl-opencl-icd` (CPU), or a GPU vendor's OpenCL "
                     "driver.");
    }
    cl_platform_id *platforms =
        cl_rc == CL_SUCCESS ? malloc(n_platforms * sizeof *platforms) : NULL;
    if (platforms == NULL || clGetPlatformIDs(n_platforms, platforms, NULL) != CL_SUCCESS) {
        free(platforms);
        return error("clGetPlatformIDs failed (OpenCL error %d)", (int)cl_rc);
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
        return error("no OpenCL device found on any platform");
    }
    return EXIT_SUCCESS;
}

/* ------------------------------------------------------------------------------ */
/* clattn demo                                                                    */
/* ------------------------------------------------------------------------------ */

/* Example 1: "Your journey starts with one step", 6 words × 3 dimensions. */
static const char *const journey_words[] = {"your", "journey", "starts", "with", "one", "step"};
static float journey_x[6 * 3] = {
    0.43f, 0.15f, 0.89f, /* your */
    0.55f, 0.87f, 0.66f, /* journey */
    0.57f, 0.85f, 0.64f, /* starts */
    0.22f, 0.58f, 0.33f, /* with */
    0.77f, 0.25f, 0.10f, /* one */
    0.05f, 0.80f, 0.55f, /* step */
};

/* Example 2: static embeddings of "sat bank river" (and "money" for comparison). */
static const char *const river_words[] = {"sat", "bank", "river"};
static float river_x[3 * 4] = {
    0.1f, 0.2f,  0.3f, 0.4f, /* sat */
    0.3f, -0.4f, 0.0f, 1.3f, /* bank */
    0.4f, -0.3f, 0.1f, 1.5f, /* river */
};
static const float money_embedding[4] = {0.2f, -0.5f, 0.1f, 1.2f};

typedef struct example {
    const char *title;
    const char *const *words; /* n row (and column) labels */
    float *x;                 /* n×d; Q = K = V = x */
    int64_t n, d;
    float scale;
    clattn_mask mask;
} example;

/* The results of one example: S, W and Z (unfused), and Z of the fused kernel. */
typedef struct example_result {
    float *scores, *weights, *z, *z_fused;
} example_result;

static void print_matrix(const char *title, const float *m, int64_t rows, int64_t cols,
                         const char *const *row_labels, const char *const *col_labels)
{
    printf("%s\n", title);
    if (col_labels != NULL) {
        printf("%-8s", "");
        for (int64_t c = 0; c < cols; ++c) {
            printf(" %8s", col_labels[c]);
        }
        printf("\n");
    }
    for (int64_t r = 0; r < rows; ++r) {
        printf("%-8s", row_labels[r]);
        for (int64_t c = 0; c < cols; ++c) {
            printf(" %8.4f", m[r * cols + c]);
        }
        printf("\n");
    }
}

/* Whether key j is visible to query i (n_q = n_kv here). */
static int visible(clattn_mask mask, int64_t i, int64_t j)
{
    switch (mask) {
    case CLATTN_MASK_CAUSAL_TOP_LEFT:
    case CLATTN_MASK_CAUSAL_BOTTOM_RIGHT: return j <= i;
    case CLATTN_MASK_NO_SELF: return j != i;
    default: return 1;
    }
}

/* S in double, rounded to float: the reference for clattn_scores. */
static void reference_scores(const example *ex, float *s)
{
    for (int64_t i = 0; i < ex->n; ++i) {
        for (int64_t j = 0; j < ex->n; ++j) {
            double dot = 0.0;
            for (int64_t c = 0; c < ex->d; ++c) {
                dot += (double)ex->x[i * ex->d + c] * ex->x[j * ex->d + c];
            }
            s[i * ex->n + j] = visible(ex->mask, i, j) ? (float)(ex->scale * dot) : -INFINITY;
        }
    }
}

/* Runs the library's stages on one example. Returns 0, or an exit status. */
static int compute_example(clattn_context *ctx, const example *ex, const example_result *res)
{
    clattn_tensor x = clattn_tensor_host(ex->x, 1, 1, ex->n, ex->d);
    clattn_tensor s = clattn_tensor_host(res->scores, 1, 1, ex->n, ex->n);
    clattn_tensor w = clattn_tensor_host(res->weights, 1, 1, ex->n, ex->n);
    clattn_tensor z = clattn_tensor_host(res->z, 1, 1, ex->n, ex->d);
    clattn_tensor z_fused = clattn_tensor_host(res->z_fused, 1, 1, ex->n, ex->d);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = ex->scale;
    desc.mask = ex->mask;

    clattn_status status = clattn_scores(ctx, &desc, &x, &x, &s);
    if (status != CLATTN_SUCCESS) {
        return library_error("clattn_scores", status, ctx);
    }
    desc.algorithm = CLATTN_ALGORITHM_UNFUSED;
    desc.weights = &w;
    status = clattn_attention(ctx, &desc, &x, &x, &x, &z);
    if (status != CLATTN_SUCCESS) {
        return library_error("clattn_attention (unfused)", status, ctx);
    }
    desc.algorithm = CLATTN_ALGORITHM_FUSED;
    desc.weights = NULL;
    status = clattn_attention(ctx, &desc, &x, &x, &x, &z_fused);
    if (status != CLATTN_SUCCESS) {
        return library_error("clattn_attention (fused)", status, ctx);
    }
    return 0;
}

/* Prints one deviation line; returns 1 if it exceeds the demo's tolerance. */
static int report_deviation(const char *what, const float *got, const float *ref, size_t count)
{
    deviation dev = compare(got, ref, count);
    int bad = !(dev.max_abs <= CHECK_ATOL);
    printf("  max |%s - reference| = %.3g%s\n", what, dev.max_abs,
           bad ? "  ** exceeds 1e-5 **" : "");
    return bad;
}

/* Compares an example's results with the CPU reference; returns 0, or an exit status. */
static int check_example(const example *ex, const example_result *res, float *scratch)
{
    size_t nn = (size_t)(ex->n * ex->n), nd = (size_t)(ex->n * ex->d);
    float *ref_w = scratch, *ref_z = scratch + nn, *ref_s = scratch + nn + nd;
    clattn_tensor x = clattn_tensor_host(ex->x, 1, 1, ex->n, ex->d);
    clattn_tensor w = clattn_tensor_host(ref_w, 1, 1, ex->n, ex->n);
    clattn_tensor z = clattn_tensor_host(ref_z, 1, 1, ex->n, ex->d);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = ex->scale;
    desc.mask = ex->mask;
    desc.weights = &w;
    clattn_status status = clattn_reference_attention(&desc, &x, &x, &x, &z);
    if (status != CLATTN_SUCCESS) {
        return library_error("clattn_reference_attention", status, NULL);
    }
    reference_scores(ex, ref_s);

    printf("Deviation from the CPU reference (float64 accumulation):\n");
    int bad = report_deviation("S", res->scores, ref_s, nn);
    bad |= report_deviation("W", res->weights, ref_w, nn);
    bad |= report_deviation("Z unfused", res->z, ref_z, nd);
    bad |= report_deviation("Z fused", res->z_fused, ref_z, nd);
    return bad ? EXIT_FAILURE : 0;
}

/* Computes, prints and checks one example. `z_out` (n×d) receives Z if not NULL. */
static int run_example(clattn_context *ctx, const example *ex, float *z_out)
{
    size_t nn = (size_t)(ex->n * ex->n), nd = (size_t)(ex->n * ex->d);
    /* one block: S, W, Z, Z fused, then the reference's W, Z and S */
    float *block = calloc(4 * nn + 3 * nd, sizeof *block);
    if (block == NULL) {
        return error("out of memory");
    }
    example_result res = {block, block + nn, block + 2 * nn, block + 2 * nn + nd};
    int rc = compute_example(ctx, ex, &res);
    if (rc == 0) {
        printf("\n%s\n\n", ex->title);
        print_matrix("Scores S = scale * X X^T (clattn_scores):", res.scores, ex->n, ex->n,
                     ex->words, ex->words);
        print_matrix("Weights W = softmax(S) (unfused):", res.weights, ex->n, ex->n, ex->words,
                     ex->words);
        print_matrix("Outputs Z = W X (unfused):", res.z, ex->n, ex->d, ex->words, NULL);
        print_matrix("Outputs Z (fused, online softmax):", res.z_fused, ex->n, ex->d, ex->words,
                     NULL);
        rc = check_example(ex, &res, block + 2 * nn + 2 * nd);
        if (z_out != NULL) {
            memcpy(z_out, res.z, nd * sizeof *z_out);
        }
    }
    free(block);
    return rc;
}

static double cosine(const float *a, const float *b, int64_t d)
{
    double dot = 0.0, na = 0.0, nb = 0.0;
    for (int64_t i = 0; i < d; ++i) {
        dot += (double)a[i] * b[i];
        na += (double)a[i] * a[i];
        nb += (double)b[i] * b[i];
    }
    return dot / (sqrt(na) * sqrt(nb));
}

static int cmd_demo(int argc, char **argv)
{
    const char *device = NULL;
    const option options[] = {{"--device", &device, NULL}};
    int rc = parse_command_line("clattn demo", demo_usage, argc, argv, options, 1);
    if (rc >= 0) {
        return rc;
    }
    clattn_context *ctx = NULL;
    if (open_context(device, &ctx) != CLATTN_SUCCESS) {
        return EXIT_FAILURE;
    }
    cl_device_id device_id = NULL;
    char *device_name = NULL;
    if (clattn_context_get_cl(ctx, NULL, &device_id, NULL) == CLATTN_SUCCESS) {
        device_name = cl_info_string(NULL, device_id, CL_DEVICE_NAME);
    }
    printf("Device: %s\n", device_name != NULL ? device_name : "?");
    free(device_name);

    const example journey = {
        "Example 1: \"your journey starts with one step\", Q = K = V = X (6x3), scale 1",
        journey_words,
        journey_x,
        6,
        3,
        1.0f,
        CLATTN_MASK_NONE};
    const example river = {
        "Example 2: \"sat bank river\", Q = K = V (3x4), scale 1/sqrt(4) = 1/2, no self-attention",
        river_words,
        river_x,
        3,
        4,
        0.5f,
        CLATTN_MASK_NO_SELF};
    float river_z[3 * 4];

    int journey_rc = run_example(ctx, &journey, NULL);
    int river_rc = run_example(ctx, &river, river_z);
    if (river_rc == 0) {
        printf("cos(bank output, money) = %.6f\n", cosine(river_z + 4, money_embedding, 4));
        printf("cos(bank output, river) = %.6f\n", cosine(river_z + 4, river_x + 8, 4));
    }
    clattn_context_release(ctx);
    rc = journey_rc != 0 ? journey_rc : river_rc;
    printf("\n%s\n", rc == 0 ? "All values within 1e-5 of the reference."
                             : "FAILED: see the messages above.");
    return rc;
}

/* ------------------------------------------------------------------------------ */
/* clattn run                                                                     */
/* ------------------------------------------------------------------------------ */

typedef struct run_args {
    const char *q, *k, *v, *out, *weights, *device;
    const char *scale_text, *mask_text, *algorithm_text;
    int check;
    float scale;
    clattn_mask mask;
    clattn_algorithm algorithm;
} run_args;

/* Index of `text` in the NULL-terminated `names`, or -1. */
static int lookup(const char *text, const char *const *names)
{
    for (int i = 0; names[i] != NULL; ++i) {
        if (strcmp(text, names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

const char *const cli_mask_names[] = {"none", "causal", "causal-bottom-right", "no-self",
                                      NULL}; /* in clattn_mask order */

/* Parses and checks the command line; returns -1 to go on, or an exit status. */
static int parse_run_args(int argc, char **argv, run_args *a)
{
    static const char command[] = "clattn run";
    static const char *const algorithms[] = {"auto", "unfused", "fused", NULL};
    const option options[] = {
        {"--q", &a->q, NULL},
        {"--k", &a->k, NULL},
        {"--v", &a->v, NULL},
        {"--out", &a->out, NULL},
        {"--scale", &a->scale_text, NULL},
        {"--mask", &a->mask_text, NULL},
        {"--algorithm", &a->algorithm_text, NULL},
        {"--weights", &a->weights, NULL},
        {"--check", NULL, &a->check},
        {"--device", &a->device, NULL},
    };
    int rc = parse_command_line(command, run_usage, argc, argv, options,
                                sizeof options / sizeof options[0]);
    if (rc >= 0) {
        return rc;
    }
    const char *const required[] = {"--q", "--k", "--v", "--out"};
    const char *const values[] = {a->q, a->k, a->v, a->out};
    for (int i = 0; i < 4; ++i) {
        if (values[i] == NULL || values[i][0] == '\0') {
            return usage_error(command, "missing %s FILE", required[i]);
        }
    }
    if (a->scale_text != NULL) {
        char *end;
        errno = 0;
        double scale = strtod(a->scale_text, &end);
        if (end == a->scale_text || *end != '\0' || !isfinite(scale) || fabs(scale) > FLT_MAX) {
            return usage_error(command, "--scale '%s' is not a finite float32 number",
                               a->scale_text);
        }
        a->scale = (float)scale;
        if (a->scale == 0.0f) {
            return usage_error(command,
                               "--scale '%s' is zero in float32 (the library reads 0 as the "
                               "default 1/sqrt(d_k)); omit --scale for that",
                               a->scale_text);
        }
    }
    int mask = a->mask_text != NULL ? lookup(a->mask_text, cli_mask_names) : 0;
    if (mask < 0) {
        return usage_error(command,
                           "unknown --mask '%s' (none, causal, causal-bottom-right, no-self)",
                           a->mask_text);
    }
    int algorithm = a->algorithm_text != NULL ? lookup(a->algorithm_text, algorithms) : 0;
    if (algorithm < 0) {
        return usage_error(command, "unknown --algorithm '%s' (auto, fused, unfused)",
                           a->algorithm_text);
    }
    a->mask = (clattn_mask)mask;
    a->algorithm = (clattn_algorithm)algorithm;
    if (a->weights != NULL && a->algorithm == CLATTN_ALGORITHM_FUSED) {
        return usage_error(command, "--weights needs --algorithm auto or unfused (the fused "
                                    "kernel never stores the weights)");
    }
    return -1;
}

/* The folder part of `path` ("." if it has none; malloc'd, NULL if out of memory). */
static char *folder_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t len = slash == NULL ? 0 : slash == path ? 1 : (size_t)(slash - path);
    char *folder = malloc(len + 2);
    if (folder != NULL) {
        if (slash == NULL) {
            strcpy(folder, ".");
        } else {
            memcpy(folder, path, len);
            folder[len] = '\0';
        }
    }
    return folder;
}

/* Whether `a` and `b` name the same file: the same text; the same (st_dev, st_ino) if
 * both exist; or, if neither exists, the same name in the same folder. */
static int same_file(const char *a, const char *b)
{
    if (strcmp(a, b) == 0) {
        return 1;
    }
    struct stat sa, sb;
    int a_exists = stat(a, &sa) == 0, b_exists = stat(b, &sb) == 0;
    if (a_exists || b_exists) {
        return a_exists && b_exists && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    }
    const char *base_a = strrchr(a, '/'), *base_b = strrchr(b, '/');
    base_a = base_a != NULL ? base_a + 1 : a;
    base_b = base_b != NULL ? base_b + 1 : b;
    if (strcmp(base_a, base_b) != 0) {
        return 0;
    }
    char *folder_a = folder_of(a), *folder_b = folder_of(b);
    int same = folder_a != NULL && folder_b != NULL && stat(folder_a, &sa) == 0 &&
               stat(folder_b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    free(folder_a);
    free(folder_b);
    return same;
}

/* An output may be replaced: it is not there yet, or is a regular file (not a
 * symbolic link); and its folder is writable. Returns 0, or an exit status. */
static int check_output_file(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode)) {
            return error("%s: is %s, not a regular file; refusing to replace it (name a new or "
                         "regular file)",
                         path, npy_file_kind(st.st_mode));
        }
    } else if (errno != ENOENT) {
        return error("%s: cannot use it as an output: %s", path, strerror(errno));
    }
    char *folder = folder_of(path);
    if (folder == NULL) {
        return error("out of memory");
    }
    int rc = 0;
    if (access(folder, W_OK | X_OK) != 0) {
        rc = error("%s: cannot create a temporary file in its folder '%s': %s", path, folder,
                   strerror(errno));
    }
    free(folder);
    return rc;
}

/* Checks --out and --weights before anything is computed: neither names an input nor
 * the other (usage error), and each can be replaced. Returns -1 to go on, or an exit
 * status. */
static int check_output_paths(const run_args *a)
{
    const char *const out_names[] = {"--out", "--weights"};
    const char *const outs[] = {a->out, a->weights};
    const char *const in_names[] = {"--q", "--k", "--v"};
    const char *const ins[] = {a->q, a->k, a->v};
    for (int i = 0; i < 2 && outs[i] != NULL; ++i) {
        for (int j = 0; j < 3; ++j) {
            if (same_file(outs[i], ins[j])) {
                return usage_error("clattn run",
                                   "%s '%s' is the same file as %s '%s'; writing it would "
                                   "destroy an input",
                                   out_names[i], outs[i], in_names[j], ins[j]);
            }
        }
    }
    if (a->weights != NULL && same_file(a->out, a->weights)) {
        return usage_error("clattn run", "--out '%s' and --weights '%s' name the same file", a->out,
                           a->weights);
    }
    for (int i = 0; i < 2; ++i) {
        if (outs[i] != NULL && check_output_file(outs[i]) != 0) {
            return EXIT_FAILURE;
        }
    }
    return -1;
}

/* The input ranks `run` accepts, as messages describe them. */
#define RUN_RANKS "(n, d), (h, n, d) or (b, h, n, d)"

/* The 4-D shape [b, h, n, d] of a shape of rank 2..4 (leading 1s). */
static void shape4(const int64_t *shape, int ndim, int64_t out[4])
{
    int lead = 4 - ndim;
    for (int i = 0; i < 4; ++i) {
        out[i] = i < lead ? 1 : shape[i - lead];
    }
}

/* Checks that dimension `what` of file a equals that of file b. */
static int same_dim(const char *what, const char *a_path, int64_t a, const char *b_path, int64_t b)
{
    if (a != b) {
        error("%s: %s is %lld but %s has %lld", a_path, what, (long long)a, b_path, (long long)b);
        return 0;
    }
    return 1;
}

/* Shape agreement of Q, K and V, with messages naming the files. */
static int check_shapes(const run_args *a, const npy_array *q, const npy_array *k,
                        const npy_array *v)
{
    const char *const paths[] = {a->q, a->k, a->v};
    const npy_array *const arrays[] = {q, k, v};
    const char *const heads[] = {"h_q", "h_kv", "h_kv"};
    const char *const dims[] = {"d_k", "d_k", "d_v"};
    int64_t qs[4], ks[4], vs[4];
    int64_t *const shapes[] = {qs, ks, vs};
    for (int i = 0; i < 3; ++i) {
        if (arrays[i]->ndim < 2) { /* the reader rejects it already */
            error("%s: rank %d is not supported (need " RUN_RANKS ")", paths[i], arrays[i]->ndim);
            return 0;
        }
        if (i > 0 && !same_dim("the rank (Q, K and V must have the same rank)", paths[i],
                               arrays[i]->ndim, a->q, q->ndim)) {
            return 0;
        }
        shape4(arrays[i]->shape, arrays[i]->ndim, shapes[i]);
        if (shapes[i][1] < 1) {
            error("%s: %s is 0; heads must be at least 1", paths[i], heads[i]);
            return 0;
        }
        if (shapes[i][3] < 1) {
            error("%s: %s is 0; head dims must be at least 1", paths[i], dims[i]);
            return 0;
        }
    }
    if (!same_dim("the batch size", a->k, ks[0], a->q, qs[0]) ||
        !same_dim("the batch size", a->v, vs[0], a->q, qs[0]) ||
        !same_dim("the number of heads", a->v, vs[1], a->k, ks[1]) ||
        !same_dim("n_kv (rows)", a->v, vs[2], a->k, ks[2]) ||
        !same_dim("d_k (last dimension)", a->k, ks[3], a->q, qs[3])) {
        return 0;
    }
    if (qs[1] % ks[1] != 0) {
        error("%s: %lld heads is not a multiple of the %lld heads of %s (h_q must be a "
              "multiple of h_kv)",
              a->q, (long long)qs[1], (long long)ks[1], a->k);
        return 0;
    }
    return 1;
}

/* `shape` with its last dimension replaced; its element count in *count, or 0 if the
 * count overflows size_t. */
static int output_shape(const npy_array *like, int64_t last, int64_t shape[4], size_t *count)
{
    size_t n = 1;
    int overflow = 0;
    for (int i = 0; i < like->ndim; ++i) {
        shape[i] = i == like->ndim - 1 ? last : like->shape[i];
        if (shape[i] != 0 && n > SIZE_MAX / sizeof(float) / (size_t)shape[i]) {
            overflow = 1;
        }
        n *= (size_t)shape[i];
    }
    *count = n;
    return !overflow || n == 0;
}

static clattn_tensor host_view(float *data, const int64_t *shape, int ndim)
{
    int64_t s[4];
    shape4(shape, ndim, s);
    return clattn_tensor_host(data, s[0], s[1], s[2], s[3]);
}

/* Prints the comparison of `got` with the reference; returns 1 if within tolerance. */
static int report_check(const char *name, const float *got, const float *ref, size_t count)
{
    deviation dev = compare(got, ref, count);
    printf("check %s: max abs error %.3g", name, dev.max_abs);
    if (count > 0) {
        printf(" (element %zu: got %.9g, reference %.9g)", dev.worst, got[dev.worst],
               ref[dev.worst]);
    }
    printf(": %s 1e-5 + 1e-5*|reference|\n", dev.within ? "within" : "NOT within");
    return dev.within;
}

/* Creates a new file next to `path`, named "PATH.clattn-tmpN", with `create` (which
 * must fail with EEXIST if the name is taken); *name receives the malloc'd name.
 * Returns 0, or -1 with errno set. */
static int create_next_to(const char *path, int (*create)(const char *name, void *arg), void *arg,
                          char **name)
{
    size_t len = strlen(path) + 32;
    char *candidate = malloc(len);
    if (candidate == NULL) {
        errno = ENOMEM;
        return -1;
    }
    for (int i = 0; i < 1000; ++i) {
        snprintf(candidate, len, "%s.clattn-tmp%d", path, i);
        errno = 0;
        if (create(candidate, arg) == 0) {
            *name = candidate;
            return 0;
        }
        if (errno != EEXIST) {
            break;
        }
    }
    int saved = errno;
    free(candidate);
    errno = saved;
    return -1;
}

typedef struct npy_content {
    const char *path; /* for messages */
    const float *data;
    const int64_t *shape;
    int ndim;
    char message[512]; /* set when writing fails */
} npy_content;

/* create_next_to() callback: a new file holding an npy_content. */
static int create_npy(const char *name, void *arg)
{
    npy_content *c = arg;
    c->message[0] = '\0';
    FILE *f = fopen(name, "wbx"); /* C11 exclusive create: never clobbers a file */
    if (f == NULL) {
        return -1;
    }
    int rc =
        npy_write_f32_stream(f, c->path, c->data, c->shape, c->ndim, c->message, sizeof c->message);
    if (fclose(f) != 0 && rc == 0) {
        rc = -1;
        snprintf(c->message, sizeof c->message, "%s: write failed: %s", c->path, strerror(errno));
    }
    if (rc != 0) {
        remove(name);
        errno = 0; /* not EEXIST: stop trying other names */
    }
    return rc;
}

/* create_next_to() callback: a second hard link to the file `arg`. */
static int create_link(const char *name, void *arg)
{
    return link((const char *)arg, name);
}

/* Writes `data` to a new temporary file next to `path`; *tmp receives its name. */
static int write_temporary(const char *path, const float *data, const int64_t *shape, int ndim,
                           char **tmp)
{
    npy_content content = {path, data, shape, ndim, ""};
    if (create_next_to(path, create_npy, &content, tmp) == 0) {
        return 0;
    }
    if (content.message[0] != '\0') {
        return error("%s", content.message);
    }
    return error("%s: cannot create a temporary file next to it: %s", path, strerror(errno));
}

/* Renames the temporary file `tmp` onto `path`. If `backup` is not NULL and `path`
 * exists, it is first hard-linked to a new name in *backup (NULL if that fails), so
 * that the old file can be put back. Returns 0, or an exit status. */
static int replace_file(const char *tmp, const char *path, char **backup)
{
    struct stat st;
    if (backup != NULL && lstat(path, &st) == 0 &&
        create_next_to(path, create_link, (void *)path, backup) != 0) {
        *backup = NULL; /* e.g. a file system without hard links: no way back */
    }
    if (rename(tmp, path) != 0) {
        int saved = errno;
        if (backup != NULL && *backup != NULL) {
            remove(*backup);
            free(*backup);
            *backup = NULL;
        }
        return error("%s: cannot rename the temporary file onto it: %s", path, strerror(saved));
    }
    return 0;
}

/* Writes O (and W if requested) all-or-nothing: both go to temporary files first, then
 * are renamed over their destinations; if the second rename fails, the first
 * destination gets its old content back (or is removed if it did not exist). */
static int write_outputs(const run_args *a, const float *o, const int64_t *o_shape, const float *w,
                         const int64_t *w_shape, int ndim)
{
    char *tmp_o = NULL, *tmp_w = NULL, *backup = NULL;
    int rc = write_temporary(a->out, o, o_shape, ndim, &tmp_o);
    if (rc == 0 && a->weights != NULL) {
        rc = write_temporary(a->weights, w, w_shape, ndim, &tmp_w);
    }
    struct stat st;
    int w_existed = a->weights != NULL && lstat(a->weights, &st) == 0;
    if (rc == 0 && tmp_w != NULL) {
        rc = replace_file(tmp_w, a->weights, &backup);
        if (rc == 0) {
            free(tmp_w); /* renamed: nothing left to remove */
            tmp_w = NULL;
        }
    }
    if (rc == 0) {
        rc = replace_file(tmp_o, a->out, NULL);
        if (rc == 0) {
            free(tmp_o);
            tmp_o = NULL;
        } else if (a->weights != NULL) {
            /* undo the rename of W */
            if (backup != NULL && rename(backup, a->weights) == 0) {
                free(backup);
                backup = NULL;
            } else if (backup != NULL || w_existed || remove(a->weights) != 0) {
                error("%s: was already replaced and could not be restored", a->weights);
            }
        }
    }
    if (backup != NULL) {
        remove(backup);
        free(backup);
    }
    if (tmp_o != NULL) {
        remove(tmp_o);
        free(tmp_o);
    }
    if (tmp_w != NULL) {
        remove(tmp_w);
        free(tmp_w);
    }
    return rc;
}

/* Runs the reference and compares; returns 0, or an exit status. */
static int check_against_reference(const clattn_attention_desc *desc, const clattn_tensor *q,
                                   const clattn_tensor *k, const clattn_tensor *v,
                                   const clattn_tensor *o, size_t o_count, size_t w_count)
{
    float *ref = malloc((o_count + w_count > 0 ? o_count + w_count : 1) * sizeof *ref);
    if (ref == NULL) {
        return error("out of memory for the reference result");
    }
    clattn_tensor ref_o = *o, ref_w;
    ref_o.host = ref;
    clattn_attention_desc ref_desc = *desc;
    if (desc->weights != NULL) {
        ref_w = *desc->weights;
        ref_w.host = ref + o_count;
        ref_desc.weights = &ref_w;
    }
    int rc = EXIT_FAILURE;
    clattn_status status = clattn_reference_attention(&ref_desc, q, k, v, &ref_o);
    if (status != CLATTN_SUCCESS) {
        library_error("clattn_reference_attention", status, NULL);
    } else {
        int ok = report_check("O", o->host, ref, o_count);
        if (desc->weights != NULL) {
            ok &= report_check("W", desc->weights->host, ref + o_count, w_count);
        }
        rc = ok ? 0
                : error("--check failed: the result is not within tolerance; nothing "
                        "was written");
    }
    free(ref);
    return rc;
}

/* Everything after reading and checking the inputs. */
static int run_attention(const run_args *a, npy_array *q, npy_array *k, npy_array *v)
{
    int64_t o_shape[4], w_shape[4];
    size_t o_count, w_count = 0;
    int64_t n_kv = k->shape[k->ndim - 2], d_v = v->shape[v->ndim - 1];
    if (!output_shape(q, d_v, o_shape, &o_count) ||
        (a->weights != NULL && !output_shape(q, n_kv, w_shape, &w_count))) {
        return error("the output would be too large for this machine's size_t");
    }
    float *o = calloc(o_count > 0 ? o_count : 1, sizeof *o);
    float *w = a->weights != NULL ? calloc(w_count > 0 ? w_count : 1, sizeof *w) : NULL;
    clattn_context *ctx = NULL;
    int rc = EXIT_FAILURE;
    if (o == NULL || (a->weights != NULL && w == NULL)) {
        error("out of memory for the output (%zu + %zu floats)", o_count, w_count);
        goto done;
    }
    if (open_context(a->device, &ctx) != CLATTN_SUCCESS) {
        goto done;
    }
    clattn_tensor tq = host_view(q->data, q->shape, q->ndim);
    clattn_tensor tk = host_view(k->data, k->shape, k->ndim);
    clattn_tensor tv = host_view(v->data, v->shape, v->ndim);
    clattn_tensor to = host_view(o, o_shape, q->ndim);
    clattn_tensor tw = w != NULL ? host_view(w, w_shape, q->ndim) : to;
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = a->scale;
    desc.mask = a->mask;
    desc.algorithm = a->algorithm;
    desc.weights = w != NULL ? &tw : NULL;
    clattn_status status = clattn_attention(ctx, &desc, &tq, &tk, &tv, &to);
    if (status != CLATTN_SUCCESS) {
        library_error("clattn_attention", status, ctx);
        goto done;
    }
    if (a->check) {
        rc = check_against_reference(&desc, &tq, &tk, &tv, &to, o_count, w_count);
        if (rc != 0) {
            goto done;
        }
    }
    rc = write_outputs(a, o, o_shape, w, w_shape, q->ndim);
done:
    clattn_context_release(ctx);
    free(o);
    free(w);
    return rc;
}

static int cmd_run(int argc, char **argv)
{
    run_args a = {0};
    int rc = parse_run_args(argc, argv, &a);
    if (rc < 0) {
        rc = check_output_paths(&a);
    }
    if (rc >= 0) {
        return rc;
    }
    npy_array q = {0}, k = {0}, v = {0};
    npy_array *const arrays[] = {&q, &k, &v};
    const char *const paths[] = {a.q, a.k, a.v};
    char message[512];
    rc = EXIT_FAILURE;
    for (int i = 0; i < 3; ++i) {
        if (npy_read_f32_rank(paths[i], 2, RUN_RANKS, arrays[i], message, sizeof message) != 0) {
            error("%s", message);
            goto done;
        }
    }
    if (check_shapes(&a, &q, &k, &v)) {
        rc = run_attention(&a, &q, &k, &v);
    }
done:
    npy_free(&q);
    npy_free(&k);
    npy_free(&v);
    return rc;
}

/* ------------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
    } commands[] = {
        {"devices", cmd_devices}, {"demo", cmd_demo}, {"run", cmd_run}, {"bench", cmd_bench}};

    if (argc < 2) {
        fputs(program_usage, stderr);
        return EXIT_USAGE;
    }
    const char *command = argv[1];
    if (strcmp(command, "-h") == 0 || strcmp(command, "--help") == 0) {
        fputs(program_usage, stdout);
        return EXIT_SUCCESS;
    }
    if (strcmp(command, "--version") == 0) {
        printf("clattn %s\n", clattn_version());
        return EXIT_SUCCESS;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; ++i) {
        if (strcmp(command, commands[i].name) == 0) {
            return commands[i].run(argc - 2, argv + 2);
        }
    }
    return usage_error("clattn", command[0] == '-' ? "unknown option '%s'" : "unknown command '%s'",
                       command);
}
