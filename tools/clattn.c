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
#include "heatmap.h"
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
    "  tune      search the kernels' blocking on a device and store the best for it\n"
    "  heatmap   draw the attention weights of one head as an SVG heatmap\n"
    "\n"
    "Options:\n"
    "  -h, --help   show this help; `clattn <command> --help` describes a command\n"
    "  --version    print the library version\n"
    "\n"
    "Environment:\n"
    "  CLATTN_DEVICE      default device: \"P:D\" or a device-name substring\n"
    "  CLATTN_KERNEL_DIR  folder of .cl files to use instead of the built-in kernels\n"
    "  CLATTN_CACHE_DIR   program-binary cache and tuning folder (\"off\" disables it)\n"
    "  CLATTN_TUNE        \"off\" ignores the blocking `clattn tune` stored for the device\n"
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

/* In two parts: ISO C compilers need only support string literals of 4095 bytes. */
static const char run_usage_1[] =
    "Usage: clattn run --q Q.npy --k K.npy --v V.npy --out O.npy [options]\n"
    "\n"
    "Computes O = softmax(scale*Q*K^T + bias + mask)*V. Inputs are C-order little-endian\n"
    ".npy files shaped (n, d), (h, n, d) or (b, h, n, d), all of the same rank:\n"
    "Q [b, h_q, n_q, d_k], K [b, h_kv, n_kv, d_k], V [b, h_kv, n_kv, d_v], with h_q a\n"
    "multiple of h_kv. Each of Q, K and V is float32 ('<f4'), float16 ('<f2') or, with\n"
    "--dtype bf16, bfloat16 stored as uint16 words ('<u2'). O gets Q's rank and shape with\n"
    "the last dimension d_v, and Q's dtype unless --out-dtype says otherwise.\n"
    "Output files are written only on success (an existing file is otherwise kept);\n"
    "an output must not name an input or another output, and an existing output must\n"
    "be a regular file (not a directory, symbolic link, device or FIFO).\n"
    "\n"
    "Options:\n"
    "  --q FILE          queries\n"
    "  --k FILE          keys\n"
    "  --v FILE          values\n"
    "  --out FILE        output O\n"
    "  --scale X         multiplies Q*K^T (finite, non-zero; default 1/sqrt(d_k))\n"
    "  --mask M          none (default), causal (key j visible to query i iff j <= a_i),\n"
    "                    causal-bottom-right (the same, with a_i aligned to the bottom\n"
    "                    right: j <= i + n_kv - n_q), no-self (iff j != a_i)\n"
    "  --mask-file FILE  a mask array broadcast as in NumPy to (b, h_q, n_q, n_kv), e.g.\n"
    "                    (n_q, n_kv), (h_q|1, n_q, n_kv) or (b|1, h_q|1, n_q, n_kv): bool\n"
    "                    ('|b1'; or '|u1', nonzero = true) where true = key visible, or\n"
    "                    float32 ('<f4') added to the scores (-inf = masked)\n"
    "  --kv-lens L,...   valid keys per batch entry (b integers, 0..n_kv; or an int32 .npy\n"
    "                    file of b values): keys j >= L are masked (padding)\n"
    "  --q-lens L,...    valid queries per batch entry (b integers, 0..n_q; or an int32\n"
    "                    .npy file): rows i >= L output zeros (weights 0, LSE -inf)\n"
    "  --window L,R      sliding window: key j visible iff a_i - L <= j <= a_i + R\n"
    "                    (integers; -1 = unbounded on that side)\n"
    "  --alibi S,...     ALiBi slopes, one per query head (h_q finite numbers): the score\n"
    "                    of key j for query i of head h gets -S_h*|a_i - j|\n"
    "  --softcap C       logit softcap (Gemma 2): scaled scores s -> C*tanh(s/C), before\n"
    "                    masks and biases (finite, > 0; default off)\n"
    "  --q-start N       absolute position of the first query (default 0)\n"
    "  --kv-start N      absolute position of the first key (default 0)\n";
static const char run_usage_2[] =
    "  --masked-rows R   what a query row with no visible key outputs: zero (default; O\n"
    "                    and its weights 0) or nan (O and its weights NaN); LSE -inf\n"
    "  --algorithm A     auto (default), fused, unfused\n"
    "  --weights FILE    also write the attention weights (float32), shaped like O with\n"
    "                    the last dimension n_kv (either algorithm)\n"
    "  --weights-head-mean  with --weights: write the weights averaged over the query\n"
    "                    heads; the file keeps the head dimension, as 1: (b, 1, n_q,\n"
    "                    n_kv) for rank 4, (1, n_q, n_kv) for rank 3 (PyTorch drops it:\n"
    "                    w[:, 0] in NumPy)\n"
    "  --lse FILE        also write each query row's log-sum-exp of its visible scores\n"
    "                    (float32, natural log; -inf for a row with no visible key),\n"
    "                    shaped like O without its last dimension\n"
    "  --dtype D         auto (default: '<u2' inputs are refused) or bf16 ('<u2' inputs\n"
    "                    hold bfloat16 bit patterns)\n"
    "  --out-dtype T     the dtype of O: f32 ('<f4'), f16 ('<f2') or bf16 (bfloat16 bit\n"
    "                    patterns as '<u2'); default: Q's dtype\n"
    "  --check           also run the CPU reference with the same inputs and options and\n"
    "                    fail unless every element of O, the weights and the LSE is\n"
    "                    within 1e-5 + 1e-5*|reference|; a float16 or bfloat16 O is\n"
    "                    compared with the reference rounded to its dtype, within one\n"
    "                    unit in the last place of that dtype (plus the same 1e-5 +\n"
    "                    1e-5*|reference|, which matters only near zero)\n"
    "  --device SPEC     \"P:D\" (see `clattn devices`) or a device-name substring;\n"
    "                    default: CLATTN_DEVICE, else the first GPU, else the first device\n"
    "  -h, --help        show this help\n"
    "\n"
    "Positions: query i and key j sit at q_start + i and kv_start + j. The key aligned\n"
    "with query i is a_i = i + q_start - kv_start (top-left), plus n_kv - n_q with --mask\n"
    "causal-bottom-right, where n_q and n_kv are the batch entry's valid lengths (after\n"
    "--q-lens and --kv-lens). A key is visible only if every mask lets it through; the\n"
    "score of a visible key is softcap(scale*q.k) - alibi_slope*|a_i - j| + float mask.\n"
    "\n"
    "Exit status: 0 success, 1 failure (a file, the library or --check), 2 usage error\n"
    "(including --kv-lens, --q-lens and --alibi lists that do not fit the inputs).\n";
static char run_usage[sizeof run_usage_1 + sizeof run_usage_2]; /* cmd_run joins them */

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

/* Whether got matches ref within CHECK_ATOL + CHECK_RTOL*|ref| + extra; NaN must meet
 * NaN and infinities must be equal. *diff receives |got - ref| (infinite on a NaN or
 * infinity mismatch). */
static int element_ok(double g, double r, double extra, double *diff)
{
    if (isnan(g) || isnan(r) || isinf(g) || isinf(r)) {
        const int ok = (isnan(g) && isnan(r)) || g == r;
        *diff = ok ? 0.0 : INFINITY;
        return ok;
    }
    *diff = fabs(g - r);
    return *diff <= CHECK_ATOL + CHECK_RTOL * fabs(r) + extra;
}

static deviation compare(const float *got, const float *ref, size_t count)
{
    deviation dev = {0.0, 0, 1};
    for (size_t i = 0; i < count; ++i) {
        double diff;
        const int ok = element_ok(got[i], ref[i], 0.0, &diff);
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
    const char *q, *k, *v, *out, *weights, *lse, *mask_file, *device;
    const char *scale_text, *mask_text, *algorithm_text, *kv_lens_text, *q_lens_text;
    const char *window_text, *alibi_text, *softcap_text, *masked_rows_text;
    const char *q_start_text, *kv_start_text, *dtype_text, *out_dtype_text;
    int check, head_mean;
    float scale, softcap;
    clattn_mask mask;
    clattn_algorithm algorithm;
    int masked_rows;
    int window;
    int64_t window_left, window_right, q_start, kv_start;
    int bf16;      /* --dtype bf16: '<u2' inputs are bfloat16 */
    int out_dtype; /* a clattn_dtype, or -1: Q's */
    /* --kv-lens / --q-lens given as lists (malloc'd), or as int32 .npy files */
    int32_t *kv_lens, *q_lens;
    size_t n_kv_lens, n_q_lens;
    const char *kv_lens_file, *q_lens_file;
    float *alibi; /* malloc'd */
    size_t n_alibi;
} run_args;

static void free_run_args(run_args *a)
{
    free(a->kv_lens);
    free(a->q_lens);
    free(a->alibi);
}

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

/* The decimal integer that is exactly text[0..len) (optional sign, no spaces). */
static int parse_integer(const char *text, size_t len, long long *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf ||
        !(text[0] == '-' || text[0] == '+' || (text[0] >= '0' && text[0] <= '9'))) {
        return 0;
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    long long value = strtoll(buf, &end, 10);
    if (end == buf || *end != '\0' || errno == ERANGE) {
        return 0;
    }
    *out = value;
    return 1;
}

/* The finite float32 number that is exactly text[0..len). */
static int parse_float(const char *text, size_t len, float *out)
{
    char buf[64];
    if (len == 0 || len >= sizeof buf || text[0] == ' ' || text[0] == '\t') {
        return 0;
    }
    memcpy(buf, text, len);
    buf[len] = '\0';
    char *end;
    double value = strtod(buf, &end);
    if (end == buf || *end != '\0' || !isfinite(value) || fabs(value) > FLT_MAX) {
        return 0;
    }
    *out = (float)value;
    return 1;
}

/* The comma-separated items of `text`: calls item(start, len, index, arg) for each,
 * stopping at the first non-zero return, which it returns. */
static int for_each_item(const char *text, int (*item)(const char *, size_t, size_t, void *),
                         void *arg)
{
    size_t index = 0;
    for (const char *p = text;; ++index) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        int rc = item(p, len, index, arg);
        if (rc != 0 || comma == NULL) {
            return rc;
        }
        p = comma + 1;
    }
}

static size_t count_items(const char *text)
{
    size_t n = 1;
    for (const char *p = text; (p = strchr(p, ',')) != NULL; ++p) {
        ++n;
    }
    return n;
}

typedef struct list_parse {
    const char *option, *text;
    int32_t *ints;
    float *floats;
} list_parse;

static int length_item(const char *item, size_t len, size_t index, void *arg)
{
    list_parse *l = arg;
    long long value;
    if (!parse_integer(item, len, &value)) {
        return usage_error("clattn run", "%s '%s': '%.*s' is not an integer", l->option, l->text,
                           (int)len, item);
    }
    if (value < 0) {
        return usage_error("clattn run", "%s '%s': %lld is negative (lengths are 0 or more)",
                           l->option, l->text, value);
    }
    if (value > INT32_MAX) {
        return usage_error("clattn run", "%s '%s': %lld is too large (at most %d)", l->option,
                           l->text, value, INT32_MAX);
    }
    l->ints[index] = (int32_t)value;
    return 0;
}

static int slope_item(const char *item, size_t len, size_t index, void *arg)
{
    list_parse *l = arg;
    if (!parse_float(item, len, &l->floats[index])) {
        return usage_error("clattn run", "%s '%s': '%.*s' is not a finite float32 number",
                           l->option, l->text, (int)len, item);
    }
    return 0;
}

/* --kv-lens / --q-lens: a list of lengths, or the name of an int32 .npy file (read
 * later, once the batch size is known). Returns -1 to go on, or an exit status. */
static int parse_lengths(const char *option, const char *text, int32_t **list, size_t *count,
                         const char **file)
{
    size_t len = strlen(text);
    if (len > 4 && strcmp(text + len - 4, ".npy") == 0) {
        *file = text;
        return -1;
    }
    *count = count_items(text);
    *list = malloc(*count * sizeof **list);
    if (*list == NULL) {
        return error("out of memory");
    }
    list_parse l = {option, text, *list, NULL};
    int rc = for_each_item(text, length_item, &l);
    return rc != 0 ? rc : -1;
}

static int window_item(const char *item, size_t len, size_t index, void *arg)
{
    int64_t *bounds = arg;
    long long value;
    if (index >= 2 || !parse_integer(item, len, &value)) {
        return 1;
    }
    if (value < -1) {
        return 2;
    }
    bounds[index] = (int64_t)value;
    return 0;
}

/* Parses and checks the command line; returns -1 to go on, or an exit status. */
static int parse_run_args(int argc, char **argv, run_args *a)
{
    static const char command[] = "clattn run";
    static const char *const algorithms[] = {"auto", "unfused", "fused", NULL};
    static const char *const masked_rows[] = {"zero", "nan", NULL}; /* CLATTN_MASKED_ROWS_* */
    static const char *const dtypes[] = {"auto", "bf16", NULL};
    static const char *const out_dtypes[] = {"f32", "f16", "bf16", NULL}; /* clattn_dtype */
    const option options[] = {
        {"--q", &a->q, NULL},
        {"--k", &a->k, NULL},
        {"--v", &a->v, NULL},
        {"--out", &a->out, NULL},
        {"--scale", &a->scale_text, NULL},
        {"--mask", &a->mask_text, NULL},
        {"--mask-file", &a->mask_file, NULL},
        {"--kv-lens", &a->kv_lens_text, NULL},
        {"--q-lens", &a->q_lens_text, NULL},
        {"--window", &a->window_text, NULL},
        {"--alibi", &a->alibi_text, NULL},
        {"--softcap", &a->softcap_text, NULL},
        {"--q-start", &a->q_start_text, NULL},
        {"--kv-start", &a->kv_start_text, NULL},
        {"--masked-rows", &a->masked_rows_text, NULL},
        {"--algorithm", &a->algorithm_text, NULL},
        {"--weights", &a->weights, NULL},
        {"--weights-head-mean", NULL, &a->head_mean},
        {"--lse", &a->lse, NULL},
        {"--dtype", &a->dtype_text, NULL},
        {"--out-dtype", &a->out_dtype_text, NULL},
        {"--check", NULL, &a->check},
        {"--device", &a->device, NULL},
    };
    a->out_dtype = -1;
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
    int rows = a->masked_rows_text != NULL ? lookup(a->masked_rows_text, masked_rows) : 0;
    if (rows < 0) {
        return usage_error(command, "unknown --masked-rows '%s' (zero, nan)", a->masked_rows_text);
    }
    a->masked_rows = rows;
    int dtype = a->dtype_text != NULL ? lookup(a->dtype_text, dtypes) : 0;
    if (dtype < 0) {
        return usage_error(command,
                           "unknown --dtype '%s' (auto, bf16: read '<u2' inputs as bfloat16)",
                           a->dtype_text);
    }
    a->bf16 = dtype == 1;
    if (a->out_dtype_text != NULL) {
        a->out_dtype = lookup(a->out_dtype_text, out_dtypes);
        if (a->out_dtype < 0) {
            return usage_error(command, "unknown --out-dtype '%s' (f32, f16, bf16)",
                               a->out_dtype_text);
        }
    }
    if (a->head_mean && a->weights == NULL) {
        return usage_error(command, "--weights-head-mean needs --weights FILE");
    }
    if (a->softcap_text != NULL &&
        (!parse_float(a->softcap_text, strlen(a->softcap_text), &a->softcap) ||
         !(a->softcap > 0.0f))) {
        return usage_error(command,
                           "--softcap '%s' is not a finite float32 number above 0 (omit it for "
                           "no softcap)",
                           a->softcap_text);
    }
    if (a->window_text != NULL) {
        int64_t bounds[2] = {0, 0};
        int bad = count_items(a->window_text) != 2
                      ? 1
                      : for_each_item(a->window_text, window_item, bounds);
        if (bad == 2) {
            return usage_error(command,
                               "--window '%s': a bound below -1 (-1 means unbounded on that "
                               "side)",
                               a->window_text);
        }
        if (bad != 0) {
            return usage_error(command,
                               "--window '%s' is not L,R (two integers >= -1, -1 = unbounded)",
                               a->window_text);
        }
        a->window = 1;
        a->window_left = bounds[0];
        a->window_right = bounds[1];
    }
    const char *const start_names[] = {"--q-start", "--kv-start"};
    const char *const start_texts[] = {a->q_start_text, a->kv_start_text};
    int64_t *const starts[] = {&a->q_start, &a->kv_start};
    for (int i = 0; i < 2; ++i) {
        long long value;
        if (start_texts[i] == NULL) {
            continue;
        }
        if (!parse_integer(start_texts[i], strlen(start_texts[i]), &value) ||
            value <= -(1ll << 53) || value >= 1ll << 53) {
            return usage_error(command, "%s '%s' is not an integer within +-2^53", start_names[i],
                               start_texts[i]);
        }
        *starts[i] = (int64_t)value;
    }
    if (a->kv_lens_text != NULL) {
        rc = parse_lengths("--kv-lens", a->kv_lens_text, &a->kv_lens, &a->n_kv_lens,
                           &a->kv_lens_file);
        if (rc >= 0) {
            return rc;
        }
    }
    if (a->q_lens_text != NULL) {
        rc = parse_lengths("--q-lens", a->q_lens_text, &a->q_lens, &a->n_q_lens, &a->q_lens_file);
        if (rc >= 0) {
            return rc;
        }
    }
    if (a->alibi_text != NULL) {
        a->n_alibi = count_items(a->alibi_text);
        a->alibi = malloc(a->n_alibi * sizeof *a->alibi);
        if (a->alibi == NULL) {
            return error("out of memory");
        }
        list_parse l = {"--alibi", a->alibi_text, NULL, a->alibi};
        rc = for_each_item(a->alibi_text, slope_item, &l);
        if (rc != 0) {
            return rc;
        }
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
int same_file(const char *a, const char *b)
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
int check_output_file(const char *path)
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

/* Checks --out, --weights and --lse before anything is computed: none names an input
 * file or another output (usage error), and each can be replaced. Returns -1 to go
 * on, or an exit status. */
static int check_output_paths(const run_args *a)
{
    enum { N_OUTS = 3, N_INS = 6 };
    const char *const out_names[N_OUTS] = {"--out", "--weights", "--lse"};
    const char *const outs[N_OUTS] = {a->out, a->weights, a->lse};
    const char *const in_names[N_INS] = {"--q",         "--k",       "--v",
                                         "--mask-file", "--kv-lens", "--q-lens"};
    const char *const ins[N_INS] = {a->q,          a->k, a->v, a->mask_file, a->kv_lens_file,
                                    a->q_lens_file};
    for (int i = 0; i < N_OUTS; ++i) {
        for (int j = 0; j < N_INS && outs[i] != NULL; ++j) {
            if (ins[j] != NULL && same_file(outs[i], ins[j])) {
                return usage_error("clattn run",
                                   "%s '%s' is the same file as %s '%s'; writing it would "
                                   "destroy an input",
                                   out_names[i], outs[i], in_names[j], ins[j]);
            }
        }
    }
    for (int i = 0; i < N_OUTS; ++i) {
        for (int j = i + 1; j < N_OUTS && outs[i] != NULL; ++j) {
            if (outs[j] != NULL && same_file(outs[i], outs[j])) {
                return usage_error("clattn run", "%s '%s' and %s '%s' name the same file",
                                   out_names[i], outs[i], out_names[j], outs[j]);
            }
        }
    }
    for (int i = 0; i < N_OUTS; ++i) {
        if (outs[i] != NULL && check_output_file(outs[i]) != 0) {
            return EXIT_FAILURE;
        }
    }
    return -1;
}

/* The input ranks `run` accepts, as messages describe them. */
#define RUN_RANKS "(n, d), (h, n, d) or (b, h, n, d)"

/* The 4-D shape [b, h, n, d] of a shape of rank 1..4 (leading 1s). */
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
static int check_shapes(const run_args *a, const npy_data *q, const npy_data *k, const npy_data *v)
{
    const char *const paths[] = {a->q, a->k, a->v};
    const npy_data *const arrays[] = {q, k, v};
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

/* ---- dtypes ---------------------------------------------------------------------- */

static size_t dtype_size(clattn_dtype dtype)
{
    return dtype == CLATTN_FLOAT32 ? 4 : dtype == CLATTN_BOOL ? 1 : 2;
}

/* The .npy dtype a library dtype is written as (bfloat16 as uint16 words). */
static npy_dtype npy_of(clattn_dtype dtype)
{
    return dtype == CLATTN_FLOAT16 ? NPY_F16 : dtype == CLATTN_BFLOAT16 ? NPY_U16 : NPY_F32;
}

/* Element i of a float32, float16 or bfloat16 array. */
static double load_value(clattn_dtype dtype, const void *data, size_t i)
{
    if (dtype == CLATTN_FLOAT32) {
        return ((const float *)data)[i];
    }
    uint16_t bits = ((const uint16_t *)data)[i];
    return dtype == CLATTN_FLOAT16 ? clattn_f16_to_f32(bits) : clattn_bf16_to_f32(bits);
}

/* One unit in the last place of a 16-bit float type at the magnitude of `x` (0 for
 * float32, whose outputs are compared with CHECK_ATOL and CHECK_RTOL alone). */
static double ulp16(clattn_dtype dtype, double x)
{
    if (dtype == CLATTN_FLOAT32 || !isfinite(x)) {
        return 0.0;
    }
    const int mantissa = dtype == CLATTN_FLOAT16 ? 10 : 7;
    const int min_exp = dtype == CLATTN_FLOAT16 ? -14 : -126; /* smallest normal: 2^min_exp */
    int e;
    frexp(x, &e); /* |x| = m * 2^e, 0.5 <= m < 1: its binade is 2^(e-1) */
    if (x == 0.0 || e - 1 < min_exp) {
        e = min_exp + 1;
    }
    return ldexp(1.0, e - 1 - mantissa);
}

/* Prints the comparison of `got` with the reference `ref` (both `count` elements of
 * `dtype`); returns 1 if every element is within CHECK_ATOL + CHECK_RTOL*|ref|, plus one
 * unit in the last place for float16 and bfloat16. NaN must meet NaN, and infinities
 * must be equal. */
static int report_check(const char *name, clattn_dtype dtype, const void *got, const void *ref,
                        size_t count)
{
    double max_abs = 0.0, worst_bad = -1.0;
    size_t worst = 0, bad = 0;
    for (size_t i = 0; i < count; ++i) {
        const double r = load_value(dtype, ref, i);
        double diff;
        const int ok = element_ok(load_value(dtype, got, i), r, ulp16(dtype, r), &diff);
        if (diff > max_abs) {
            max_abs = diff;
            worst = i;
        }
        /* show the worst element out of tolerance, else the largest deviation */
        if (!ok && diff > worst_bad) {
            worst_bad = diff;
            bad = i;
        }
    }
    const int within = worst_bad < 0.0;
    if (!within) {
        worst = bad;
    }
    printf("check %s: max abs error %.3g", name, max_abs);
    if (count > 0) {
        printf(" (element %zu: got %.9g, reference %.9g)", worst, load_value(dtype, got, worst),
               load_value(dtype, ref, worst));
    }
    printf(": %s 1e-5 + 1e-5*|reference|%s\n", within ? "within" : "NOT within",
           dtype == CLATTN_FLOAT16    ? " + 1 ulp of float16"
           : dtype == CLATTN_BFLOAT16 ? " + 1 ulp of bfloat16"
                                      : "");
    return within;
}

/* ---- writing the outputs ----------------------------------------------------------- */

/* One output file: its content and where it goes. */
typedef struct output_file {
    const char *path;
    npy_dtype dtype;
    const void *data;
    int64_t shape[4];
    int ndim;
} output_file;

/* Creates a new file next to `path`, named "PATH.clattn-tmpN", with `create` (which
 * must fail with EEXIST if the name is taken); *name receives the malloc'd name.
 * Returns 0, or -1 with errno set. */
int create_next_to(const char *path, int (*create)(const char *name, void *arg), void *arg,
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
    const output_file *file;
    char message[512]; /* set when writing fails */
} npy_content;

/* create_next_to() callback: a new file holding an npy_content. */
static int create_npy(const char *name, void *arg)
{
    npy_content *c = arg;
    const output_file *o = c->file;
    c->message[0] = '\0';
    FILE *f = fopen(name, "wbx"); /* C11 exclusive create: never clobbers a file */
    if (f == NULL) {
        return -1;
    }
    int rc = npy_write_stream(f, o->path, o->dtype, o->data, o->shape, o->ndim, c->message,
                              sizeof c->message);
    if (fclose(f) != 0 && rc == 0) {
        rc = -1;
        snprintf(c->message, sizeof c->message, "%s: write failed: %s", o->path, strerror(errno));
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

/* Writes an output to a new temporary file next to its path; *tmp receives its name. */
static int write_temporary(const output_file *file, char **tmp)
{
    npy_content content = {file, ""};
    if (create_next_to(file->path, create_npy, &content, tmp) == 0) {
        return 0;
    }
    if (content.message[0] != '\0') {
        return error("%s", content.message);
    }
    return error("%s: cannot create a temporary file next to it: %s", file->path, strerror(errno));
}

/* Renames the temporary file `tmp` onto `path`. If `backup` is not NULL and `path`
 * exists, it is first hard-linked to a new name in *backup (NULL if that fails), so
 * that the old file can be put back. Returns 0, or an exit status. */
int replace_file(const char *tmp, const char *path, char **backup)
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

enum { MAX_OUTPUTS = 3 };

/* Writes the outputs all-or-nothing: each goes to a temporary file first, then they are
 * renamed over their destinations in order; if a rename fails, the destinations
 * already replaced get their old content back (or are removed if they did not
 * exist). */
static int write_outputs(const output_file *files, int n)
{
    char *tmp[MAX_OUTPUTS] = {NULL}, *backup[MAX_OUTPUTS] = {NULL};
    int existed[MAX_OUTPUTS] = {0};
    int rc = 0, renamed = 0;
    for (int i = 0; i < n && rc == 0; ++i) {
        rc = write_temporary(&files[i], &tmp[i]);
    }
    for (int i = 0; i < n && rc == 0; ++i) {
        struct stat st;
        existed[i] = lstat(files[i].path, &st) == 0;
        /* the last one needs no way back: nothing can fail after it */
        rc = replace_file(tmp[i], files[i].path, i + 1 < n ? &backup[i] : NULL);
        if (rc == 0) {
            free(tmp[i]); /* renamed: nothing left to remove */
            tmp[i] = NULL;
            renamed = i + 1;
        }
    }
    for (int i = renamed - 1; rc != 0 && i >= 0; --i) { /* undo */
        if (backup[i] != NULL && rename(backup[i], files[i].path) == 0) {
            free(backup[i]);
            backup[i] = NULL;
        } else if (backup[i] != NULL || existed[i] || remove(files[i].path) != 0) {
            error("%s: was already replaced and could not be restored", files[i].path);
        }
    }
    for (int i = 0; i < n; ++i) {
        if (backup[i] != NULL) {
            remove(backup[i]);
            free(backup[i]);
        }
        if (tmp[i] != NULL) {
            remove(tmp[i]);
            free(tmp[i]);
        }
    }
    return rc;
}

/* ---- running ------------------------------------------------------------------------ */

/* A host view on packed data of a shape of rank 1..4 (leading 1s). */
static clattn_tensor host_view(void *data, const int64_t *shape, int ndim, clattn_dtype dtype)
{
    int64_t s[4];
    shape4(shape, ndim, s);
    clattn_tensor t = clattn_tensor_host(data, s[0], s[1], s[2], s[3]);
    t.dtype = dtype;
    return t;
}

/* Element count of a shape, or 0 in *ok if it (times esize bytes) overflows size_t. */
static size_t count_of(const int64_t *shape, int ndim, size_t esize, int *ok)
{
    size_t n = 1;
    for (int i = 0; i < ndim; ++i) {
        if (shape[i] != 0 && n > SIZE_MAX / esize / (size_t)shape[i]) {
            *ok = 0;
        }
        n *= (size_t)shape[i];
    }
    return n;
}

/* The inputs of a run after reading: Q, K, V and the optional mask. */
typedef struct run_inputs {
    npy_data q, k, v, mask, kv_lens, q_lens;
    clattn_dtype dq, dk, dv;
    int64_t qs[4], ks[4], vs[4]; /* 4-D shapes */
} run_inputs;

/* The library dtype of input `path`, read as `d`; 0 if it has none (a message is
 * printed). */
static int input_dtype(const run_args *a, const char *path, const npy_data *d, clattn_dtype *out)
{
    switch (d->dtype) {
    case NPY_F32: *out = CLATTN_FLOAT32; return 1;
    case NPY_F16: *out = CLATTN_FLOAT16; return 1;
    case NPY_U16:
        if (a->bf16) {
            *out = CLATTN_BFLOAT16;
            return 1;
        }
        error("%s: dtype '<u2' (uint16) is read only with --dtype bf16 (as bfloat16 bit "
              "patterns)",
              path);
        return 0;
    default: error("%s: dtype %s is not supported", path, npy_dtype_descr(d->dtype)); return 0;
    }
}

/* The mask tensor view of the mask file broadcast to (b, h_q, n_q, n_kv): dimensions of
 * 1 broadcast (b and h through shape 1, n_q and n_kv through stride 0). Returns 1, or
 * 0 after a message. */
static int mask_view(const run_args *a, const run_inputs *in, clattn_tensor *out)
{
    const npy_data *m = &in->mask;
    const int64_t target[4] = {in->qs[0], in->qs[1], in->qs[2], in->ks[2]};
    int64_t fs[4], packed[4];
    shape4(m->shape, m->ndim, fs);
    static const char *const names[4] = {"b", "h_q", "n_q", "n_kv"};
    for (int i = 0; i < 4; ++i) {
        if (fs[i] != 1 && fs[i] != target[i]) {
            char shape[128] = "(";
            for (int d = 0; d < m->ndim; ++d) {
                size_t used = strlen(shape);
                snprintf(shape + used, sizeof shape - used, "%lld%s", (long long)m->shape[d],
                         d + 1 < m->ndim ? ", "
                         : m->ndim == 1  ? ",)"
                                         : ")");
            }
            error("%s: the mask's shape %s does not broadcast to (b, h_q, n_q, n_kv) = (%lld, "
                  "%lld, %lld, %lld): its %s dimension is %lld, need 1 or %lld",
                  a->mask_file, shape, (long long)target[0], (long long)target[1],
                  (long long)target[2], (long long)target[3], names[i], (long long)fs[i],
                  (long long)target[i]);
            return 0;
        }
    }
    packed[3] = 1;
    for (int i = 2; i >= 0; --i) {
        packed[i] = packed[i + 1] * fs[i + 1];
    }
    *out = clattn_tensor_host(m->data, fs[0], fs[1], target[2], target[3]);
    out->dtype = m->dtype == NPY_F32 ? CLATTN_FLOAT32 : CLATTN_BOOL;
    for (int i = 0; i < 4; ++i) {
        /* never all 0 (that would mean packed): strides[3] or an earlier one is 1 */
        out->strides[i] = i >= 2 && fs[i] == 1 && target[i] != 1 ? 0 : packed[i];
    }
    return 1;
}

/* --kv-lens / --q-lens: the list (exit status 2 when it does not fit the inputs) or
 * the int32 file (already read into `file`; exit status 1). Returns -1 to go on. */
static int check_lengths(const char *option, const char *what, const int32_t *list, size_t count,
                         const char *path, const npy_data *file, int64_t batch, int64_t limit,
                         const int32_t **out)
{
    if (path != NULL) {
        list = file->data;
        count = file->count;
        if (file->ndim != 1 || (int64_t)count != batch) {
            return error("%s: %s needs one int32 per batch entry, shape (%lld,)", path, option,
                         (long long)batch);
        }
    } else if ((int64_t)count != batch) {
        return usage_error("clattn run", "%s has %zu value%s but the batch size of Q is %lld",
                           option, count, count == 1 ? "" : "s", (long long)batch);
    }
    for (size_t i = 0; i < count; ++i) {
        if (list[i] < 0 || list[i] > limit) {
            if (path != NULL) {
                return error("%s: value %lld (batch entry %zu) is outside 0..%s (%lld)", path,
                             (long long)list[i], i, what, (long long)limit);
            }
            return usage_error("clattn run", "%s: value %lld (batch entry %zu) is above %s (%lld)",
                               option, (long long)list[i], i, what, (long long)limit);
        }
    }
    *out = list;
    return -1;
}

/* Runs the reference with the same desc and inputs, into its own outputs, and compares
 * O, the weights and the LSE; returns 0, or an exit status. */
static int check_against_reference(const clattn_attention_desc *desc, const clattn_tensor *q,
                                   const clattn_tensor *k, const clattn_tensor *v,
                                   const clattn_tensor *o, size_t o_count, size_t w_count,
                                   size_t lse_count)
{
    const size_t o_bytes = (o_count * dtype_size(o->dtype) + 15) / 16 * 16;
    unsigned char *ref = malloc(o_bytes + (w_count + lse_count) * sizeof(float) + 1);
    if (ref == NULL) {
        return error("out of memory for the reference result");
    }
    float *ref_w_data = (float *)(void *)(ref + o_bytes), *ref_lse_data = ref_w_data + w_count;
    clattn_tensor ref_o = *o, ref_w, ref_lse;
    ref_o.host = ref;
    clattn_attention_desc ref_desc = *desc;
    if (desc->weights != NULL) {
        ref_w = *desc->weights;
        ref_w.host = ref_w_data;
        ref_desc.weights = &ref_w;
    }
    if (desc->lse != NULL) {
        ref_lse = *desc->lse;
        ref_lse.host = ref_lse_data;
        ref_desc.lse = &ref_lse;
    }
    int rc = EXIT_FAILURE;
    clattn_status status = clattn_reference_attention(&ref_desc, q, k, v, &ref_o);
    if (status != CLATTN_SUCCESS) {
        library_error("clattn_reference_attention", status, NULL);
    } else {
        int ok = report_check("O", o->dtype, o->host, ref, o_count);
        if (desc->weights != NULL) {
            ok &= report_check("W", CLATTN_FLOAT32, desc->weights->host, ref_w_data, w_count);
        }
        if (desc->lse != NULL) {
            ok &= report_check("LSE", CLATTN_FLOAT32, desc->lse->host, ref_lse_data, lse_count);
        }
        rc = ok ? 0
                : error("--check failed: the result is not within tolerance; nothing "
                        "was written");
    }
    free(ref);
    return rc;
}

/* Everything after reading and checking the inputs. */
static int run_attention(const run_args *a, run_inputs *in)
{
    const int ndim = in->q.ndim;
    const int64_t n_kv = in->ks[2], d_v = in->vs[3];
    const clattn_dtype o_dtype = a->out_dtype >= 0 ? (clattn_dtype)a->out_dtype : in->dq;
    const int64_t *const b_h_n = in->q.shape; /* Q's shape but its last dimension */
    output_file files[MAX_OUTPUTS];
    int n_files = 0, fits = 1;
    /* LSE, weights, then O: O is renamed last */
    output_file *lse_file = NULL, *w_file = NULL, *o_file;
    if (a->lse != NULL) {
        lse_file = &files[n_files++];
        *lse_file = (output_file){a->lse, NPY_F32, NULL, {0}, ndim - 1};
        memcpy(lse_file->shape, b_h_n, sizeof(int64_t) * (size_t)(ndim - 1));
    }
    if (a->weights != NULL) {
        w_file = &files[n_files++];
        *w_file = (output_file){a->weights, NPY_F32, NULL, {0}, ndim};
        memcpy(w_file->shape, b_h_n, sizeof(int64_t) * (size_t)ndim);
        w_file->shape[ndim - 1] = n_kv;
        if (a->head_mean && ndim >= 3) {
            w_file->shape[ndim - 3] = 1; /* the head dimension, kept as 1 */
        }
    }
    o_file = &files[n_files++];
    *o_file = (output_file){a->out, npy_of(o_dtype), NULL, {0}, ndim};
    memcpy(o_file->shape, b_h_n, sizeof(int64_t) * (size_t)ndim);
    o_file->shape[ndim - 1] = d_v;

    size_t o_count = count_of(o_file->shape, ndim, dtype_size(o_dtype), &fits);
    size_t w_count = w_file ? count_of(w_file->shape, ndim, sizeof(float), &fits) : 0;
    size_t lse_count = lse_file ? count_of(lse_file->shape, ndim - 1, sizeof(float), &fits) : 0;
    if (!fits) {
        return error("the output would be too large for this machine's size_t");
    }
    void *o = calloc(o_count > 0 ? o_count : 1, dtype_size(o_dtype));
    float *w = w_file ? calloc(w_count > 0 ? w_count : 1, sizeof *w) : NULL;
    float *lse = lse_file ? calloc(lse_count > 0 ? lse_count : 1, sizeof *lse) : NULL;
    clattn_context *ctx = NULL;
    int rc = EXIT_FAILURE;
    if (o == NULL || (w_file && w == NULL) || (lse_file && lse == NULL)) {
        error("out of memory for the outputs (%zu + %zu + %zu elements)", o_count, w_count,
              lse_count);
        goto done;
    }
    clattn_tensor tq = host_view(in->q.data, in->q.shape, ndim, in->dq);
    clattn_tensor tk = host_view(in->k.data, in->k.shape, ndim, in->dk);
    clattn_tensor tv = host_view(in->v.data, in->v.shape, ndim, in->dv);
    clattn_tensor to = host_view(o, o_file->shape, ndim, o_dtype);
    /* [b, h_q or 1, n_q, n_kv] and [b, h_q, n_q, 1] */
    clattn_tensor tw =
        clattn_tensor_host(w, in->qs[0], a->head_mean ? 1 : in->qs[1], in->qs[2], n_kv);
    clattn_tensor tl = clattn_tensor_host(lse, in->qs[0], in->qs[1], in->qs[2], 1);
    clattn_tensor tm;
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = a->scale;
    desc.mask = a->mask;
    desc.algorithm = a->algorithm;
    desc.weights = w != NULL ? &tw : NULL;
    desc.weights_head_mean = a->head_mean;
    desc.lse = lse != NULL ? &tl : NULL;
    desc.softcap = a->softcap;
    desc.masked_rows = a->masked_rows;
    desc.window = a->window;
    desc.window_left = a->window_left;
    desc.window_right = a->window_right;
    desc.q_start = a->q_start;
    desc.kv_start = a->kv_start;
    desc.alibi_slopes = a->alibi;
    if (a->mask_file != NULL) {
        if (!mask_view(a, in, &tm)) {
            goto done;
        }
        desc.mask_tensor = &tm;
    }
    int lrc = -1;
    if (a->kv_lens_text != NULL) {
        lrc = check_lengths("--kv-lens", "n_kv", a->kv_lens, a->n_kv_lens, a->kv_lens_file,
                            &in->kv_lens, in->qs[0], n_kv, &desc.kv_lens);
    }
    if (lrc < 0 && a->q_lens_text != NULL) {
        lrc = check_lengths("--q-lens", "n_q", a->q_lens, a->n_q_lens, a->q_lens_file, &in->q_lens,
                            in->qs[0], in->qs[2], &desc.q_lens);
    }
    if (lrc >= 0) {
        rc = lrc;
        goto done;
    }
    if (a->alibi != NULL && (int64_t)a->n_alibi != in->qs[1]) {
        rc = usage_error("clattn run",
                         "--alibi has %zu slope%s but Q has %lld heads (one slope "
                         "per query head)",
                         a->n_alibi, a->n_alibi == 1 ? "" : "s", (long long)in->qs[1]);
        goto done;
    }
    if (open_context(a->device, &ctx) != CLATTN_SUCCESS) {
        goto done;
    }
    clattn_status status = clattn_attention(ctx, &desc, &tq, &tk, &tv, &to);
    if (status != CLATTN_SUCCESS) {
        library_error("clattn_attention", status, ctx);
        goto done;
    }
    if (a->check) {
        rc = check_against_reference(&desc, &tq, &tk, &tv, &to, o_count, w_count, lse_count);
        if (rc != 0) {
            goto done;
        }
    }
    o_file->data = o;
    if (w_file) {
        w_file->data = w;
    }
    if (lse_file) {
        lse_file->data = lse;
    }
    rc = write_outputs(files, n_files);
done:
    clattn_context_release(ctx);
    free(o);
    free(w);
    free(lse);
    return rc;
}

/* Reads the inputs and checks their dtypes and shapes; returns -1 to go on, or an exit
 * status. */
static int read_inputs(const run_args *a, run_inputs *in)
{
    const unsigned floats = NPY_ACCEPT(NPY_F32) | NPY_ACCEPT(NPY_F16) | NPY_ACCEPT(NPY_U16);
    npy_data *const arrays[] = {&in->q, &in->k, &in->v};
    clattn_dtype *const dtypes[] = {&in->dq, &in->dk, &in->dv};
    const char *const paths[] = {a->q, a->k, a->v};
    char message[512];
    for (int i = 0; i < 3; ++i) {
        if (npy_read(paths[i], floats, 2, RUN_RANKS, arrays[i], message, sizeof message) != 0) {
            return error("%s", message);
        }
        if (!input_dtype(a, paths[i], arrays[i], dtypes[i])) {
            return EXIT_FAILURE;
        }
    }
    if (!check_shapes(a, &in->q, &in->k, &in->v)) {
        return EXIT_FAILURE;
    }
    shape4(in->q.shape, in->q.ndim, in->qs);
    shape4(in->k.shape, in->k.ndim, in->ks);
    shape4(in->v.shape, in->v.ndim, in->vs);
    if (a->mask_file != NULL &&
        npy_read(a->mask_file, NPY_ACCEPT(NPY_BOOL) | NPY_ACCEPT(NPY_U8) | NPY_ACCEPT(NPY_F32), 1,
                 "1 to 4 dimensions, broadcast to (b, h_q, n_q, n_kv)", &in->mask, message,
                 sizeof message) != 0) {
        return error("%s", message);
    }
    const char *const len_paths[] = {a->kv_lens_file, a->q_lens_file};
    npy_data *const lens[] = {&in->kv_lens, &in->q_lens};
    for (int i = 0; i < 2; ++i) {
        if (len_paths[i] != NULL && npy_read(len_paths[i], NPY_ACCEPT(NPY_I32), 1, "(b,)", lens[i],
                                             message, sizeof message) != 0) {
            return error("%s", message);
        }
    }
    return -1;
}

static int cmd_run(int argc, char **argv)
{
    run_args a = {0};
    snprintf(run_usage, sizeof run_usage, "%s%s", run_usage_1, run_usage_2);
    int rc = parse_run_args(argc, argv, &a);
    if (rc < 0) {
        rc = check_output_paths(&a);
    }
    if (rc >= 0) {
        free_run_args(&a);
        return rc;
    }
    run_inputs in;
    memset(&in, 0, sizeof in);
    rc = read_inputs(&a, &in);
    if (rc < 0) {
        rc = run_attention(&a, &in);
    }
    npy_data *const arrays[] = {&in.q, &in.k, &in.v, &in.mask, &in.kv_lens, &in.q_lens};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; ++i) {
        npy_data_free(arrays[i]);
    }
    free_run_args(&a);
    return rc;
}

/* ------------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
    } commands[] = {{"devices", cmd_devices}, {"demo", cmd_demo}, {"run", cmd_run},
                    {"bench", cmd_bench},     {"tune", cmd_tune}, {"heatmap", cmd_heatmap}};

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
