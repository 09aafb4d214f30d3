/* Persistent program-binary cache: built kernels saved per (clattn version, device,
 * driver, build options, sources), so a new process skips the OpenCL compiler.
 *
 * File: <dir>/<16 hex digits>.bin holding "CLATTNB2", the 64-bit FNV-1a hash of the
 * key, the binary's size and the FNV-1a hash of the binary (little-endian u64s), then
 * the binary. Everything here is
 * best effort: a missing folder, a corrupt or foreign file, a failed write only mean a
 * build from source (and a fresh file). Files are written to a temporary name and
 * renamed, so concurrent processes never read half a file. */
#define _POSIX_C_SOURCE 200809L
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "CLATTNB2"
#define MAX_BINARY ((size_t)256 << 20)

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t clattn_hash_str(uint64_t h, const char *s)
{
    return fnv1a(h, s, strlen(s) + 1); /* the NUL separates the fields */
}

/* The device facts that make a binary valid: name, driver and device version. */
static uint64_t hash_device(uint64_t h, cl_device_id device)
{
    const cl_device_info infos[3] = {CL_DEVICE_NAME, CL_DRIVER_VERSION, CL_DEVICE_VERSION};
    for (int i = 0; i < 3; i++) {
        char text[256] = "";
        clGetDeviceInfo(device, infos[i], sizeof text - 1, text, NULL);
        h = clattn_hash_str(h, text);
    }
    return h;
}

uint64_t clattn_device_hash(const clattn_context *ctx)
{
    return hash_device(clattn_hash_str(CLATTN_HASH_SEED, CLATTN_VERSION_STRING), ctx->device);
}

uint64_t clattn_cache_key(const clattn_context *ctx, const char *const *sources, int n_sources,
                          const char *options)
{
    uint64_t h = clattn_device_hash(ctx);
    h = clattn_hash_str(h, options);
    for (int i = 0; i < n_sources; i++)
        h = clattn_hash_str(h, sources[i]);
    return h;
}

static void file_path(const clattn_context *ctx, uint64_t key, char *path, size_t len)
{
    snprintf(path, len, "%s/%016llx.bin", ctx->cache_dir, (unsigned long long)key);
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

cl_program clattn_cache_load(const clattn_context *ctx, uint64_t key)
{
    if (!ctx->cache_dir || !ctx->cache_binaries)
        return NULL;
    char path[4096];
    file_path(ctx, key, path, sizeof path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char head[32];
    unsigned char *binary = NULL;
    size_t size = 0;
    const int head_ok = fread(head, 1, sizeof head, f) == sizeof head &&
                        memcmp(head, MAGIC, 8) == 0 && get_u64(head + 8) == key;
    if (head_ok) {
        size = (size_t)get_u64(head + 16);
        if (size > 0 && size <= MAX_BINARY)
            binary = malloc(size + 1);
        /* exactly `size` bytes must follow, with the recorded hash */
        if (binary && (fread(binary, 1, size + 1, f) != size ||
                       fnv1a(CLATTN_HASH_SEED, binary, size) != get_u64(head + 24))) {
            free(binary);
            binary = NULL;
        }
    }
    fclose(f);
    if (!binary)
        return NULL;
    cl_int status = CL_SUCCESS, err;
    const unsigned char *bins[1] = {binary};
    cl_program prog =
        clCreateProgramWithBinary(ctx->context, 1, &ctx->device, &size, bins, &status, &err);
    free(binary);
    if (err != CL_SUCCESS || status != CL_SUCCESS) {
        if (prog)
            clReleaseProgram(prog);
        return NULL;
    }
    return prog;
}

/* mkdir -p for the cache folder; 0 on success */
static int make_dirs(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -1;
    for (char *p = path + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(path, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(path, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

void clattn_cache_store(const clattn_context *ctx, uint64_t key, cl_program program)
{
    if (!ctx->cache_dir || !ctx->cache_binaries)
        return;
    size_t size = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) !=
            CL_SUCCESS ||
        size == 0 || size > MAX_BINARY)
        return;
    unsigned char *binary = malloc(size);
    unsigned char *bins[1] = {binary};
    if (!binary ||
        clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) != CL_SUCCESS ||
        make_dirs(ctx->cache_dir) != 0) {
        free(binary);
        return;
    }
    char path[4096], tmp[4200];
    file_path(ctx, key, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path); /* unique per writer, thread or process */
    unsigned char head[32];
    memcpy(head, MAGIC, 8);
    put_u64(head + 8, key);
    put_u64(head + 16, size);
    put_u64(head + 24, fnv1a(CLATTN_HASH_SEED, binary, size));
    const int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (fd >= 0 && !f) {
        close(fd);
        remove(tmp);
    }
    if (f) {
        const int ok =
            fwrite(head, 1, sizeof head, f) == sizeof head && fwrite(binary, 1, size, f) == size;
        if (fclose(f) != 0 || !ok || rename(tmp, path) != 0)
            remove(tmp);
    }
    free(binary);
}

char *clattn_cache_dir(const char *option)
{
    const char *dir = option ? option : getenv("CLATTN_CACHE_DIR");
    char buf[4096];
    if (dir) {
        if (!*dir || strcmp(dir, "off") == 0)
            return NULL;
        snprintf(buf, sizeof buf, "%s", dir);
    } else {
        const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
        if (xdg && *xdg == '/')
            snprintf(buf, sizeof buf, "%s/clattn", xdg);
        else if (home && *home)
            snprintf(buf, sizeof buf, "%s/.cache/clattn", home);
        else
            return NULL;
    }
    char *copy = malloc(strlen(buf) + 1);
    if (copy)
        strcpy(copy, buf);
    return copy;
}

/* PoCL keeps its own cache of builds (keyed by sources and options) unless
 * POCL_KERNEL_CACHE=0; asking it for CL_PROGRAM_BINARIES compiles every kernel again. */
static bool runtime_caches_builds(cl_platform_id platform)
{
    char name[128] = "";
    if (clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof name - 1, name, NULL) != CL_SUCCESS ||
        strcmp(name, "Portable Computing Language") != 0)
        return false;
    const char *env = getenv("POCL_KERNEL_CACHE");
    return !env || strcmp(env, "0") != 0;
}

clattn_status clattn_cache_open(clattn_context *ctx, const clattn_context_options *options)
{
    const clattn_binary_cache mode = options ? options->binary_cache : CLATTN_BINARY_CACHE_AUTO;
    if (mode != CLATTN_BINARY_CACHE_AUTO && mode != CLATTN_BINARY_CACHE_ON &&
        mode != CLATTN_BINARY_CACHE_OFF)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "options->binary_cache %d is not a clattn_binary_cache", (int)mode);
    ctx->cache_dir = clattn_cache_dir(options ? options->cache_dir : NULL); /* best effort */
    ctx->cache_binaries = mode == CLATTN_BINARY_CACHE_ON || (mode == CLATTN_BINARY_CACHE_AUTO &&
                                                             !runtime_caches_builds(ctx->platform));
    return CLATTN_SUCCESS;
}
