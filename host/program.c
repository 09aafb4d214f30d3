/* Kernel programs: common.cl + dropout.cl + rows.cl + one concern file, built once per
 * (file, options) and cached on the context with their one kernel ("clattn_<stem>"). */
#include "internal.h"
#include "kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *embedded(const char *file)
{
    for (const clattn_kernel_source *s = clattn_kernel_sources; s->name; s++)
        if (strcmp(s->name, file) == 0)
            return s->source;
    return NULL;
}

/* Reads kernel_dir/file into a new NUL-terminated string. */
static clattn_status read_source(clattn_context *ctx, const char *file, char **out)
{
    size_t plen = strlen(ctx->kernel_dir) + strlen(file) + 2;
    char *path = malloc(plen);
    if (!path)
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "cannot allocate a path");
    snprintf(path, plen, "%s/%s", ctx->kernel_dir, file);
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    long size = -1;
    if (f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (text = malloc((size_t)size + 1)) && fread(text, 1, (size_t)size, f) == (size_t)size) {
        text[size] = '\0';
        fclose(f);
        free(path);
        *out = text;
        return CLATTN_SUCCESS;
    }
    free(text);
    if (f)
        fclose(f);
    clattn_status st =
        clattn_fail(ctx, CLATTN_ERROR_IO, "cannot read kernel source %s (CLATTN_KERNEL_DIR)", path);
    free(path);
    return st;
}

/* The program's one kernel, "clattn_<stem>", and its work-group limit. */
static clattn_status create_kernel(clattn_context *ctx, const char *file, clattn_program_entry *e)
{
    cl_int err;
    char name[64];
    size_t stem = strcspn(file, ".");
    snprintf(name, sizeof name, "clattn_%.*s", (int)stem, file);
    e->kernel = clCreateKernel(e->program, name, &err);
    if (err != CL_SUCCESS)
        return clattn_fail_cl(ctx, err, "clCreateKernel");
    err = clGetKernelWorkGroupInfo(e->kernel, ctx->device, CL_KERNEL_WORK_GROUP_SIZE,
                                   sizeof e->kernel_wg_max, &e->kernel_wg_max, NULL);
    if (err != CL_SUCCESS)
        return clattn_fail_cl(ctx, err, "clGetKernelWorkGroupInfo");
    return CLATTN_SUCCESS;
}

static clattn_status build(clattn_context *ctx, const char *file, const char *options,
                           clattn_program_entry *e)
{
    /* src[1…4]: common.cl, dropout.cl, rows.cl, then the kernel's file; with snippets
     * (clattn_mods.h) src[0] and src[5]: their macros and prototypes before, the snippets
     * after */
    enum { N_FILES = 4 };
    char *loaded[N_FILES + 1] = {NULL, NULL, NULL, NULL, NULL};
    const char *src[N_FILES + 2] = {NULL, NULL, NULL, NULL, NULL, NULL};
    const char *files[N_FILES + 1] = {NULL, "common.cl", "dropout.cl", "rows.cl", file};
    const bool mods = clattn_mods_source(ctx, options, &src[0], &src[N_FILES + 1]);
    const int first = mods ? 0 : 1, n_src = mods ? N_FILES + 2 : N_FILES;
    clattn_status st = CLATTN_SUCCESS;
    for (int i = 1; i <= N_FILES && st == CLATTN_SUCCESS; i++) {
        if (ctx->kernel_dir) {
            st = read_source(ctx, files[i], &loaded[i]);
            src[i] = loaded[i];
        } else if (!(src[i] = embedded(files[i]))) {
            st = clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "no kernel source %s", files[i]);
        }
    }
    cl_int err = CL_SUCCESS;
    uint64_t key = 0;
    if (st == CLATTN_SUCCESS) {
        key = clattn_cache_key(ctx, src + first, n_src, options);
        e->program = clattn_cache_load(ctx, key);
        if (e->program && clBuildProgram(e->program, 1, &ctx->device, options, NULL, NULL) !=
                              CL_SUCCESS) { /* a stale or foreign binary: build from source */
            clReleaseProgram(e->program);
            e->program = NULL;
        }
        if (e->program) {
            for (int i = 0; i <= N_FILES; i++)
                free(loaded[i]);
            return create_kernel(ctx, file, e);
        }
        e->program =
            clCreateProgramWithSource(ctx->context, (cl_uint)n_src, src + first, NULL, &err);
        if (err != CL_SUCCESS)
            st = clattn_fail_cl(ctx, err, "clCreateProgramWithSource");
    }
    for (int i = 0; i <= N_FILES; i++)
        free(loaded[i]);
    if (st != CLATTN_SUCCESS)
        return st;

    err = clBuildProgram(e->program, 1, &ctx->device, options, NULL, NULL);
    if (err == CL_SUCCESS)
        clattn_cache_store(ctx, key, e->program);
    if (err != CL_SUCCESS) {
        size_t log_size = 0;
        clGetProgramBuildInfo(e->program, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &log_size);
        char *log = malloc(log_size + 1);
        if (log) {
            log[0] = '\0';
            clGetProgramBuildInfo(e->program, ctx->device, CL_PROGRAM_BUILD_LOG, log_size, log,
                                  NULL);
            log[log_size] = '\0';
        }
        /* the build log can be long: format it into the context's growable message */
        size_t need = strlen(file) + strlen(options) + (log ? strlen(log) : 0) + 128;
        char *msg = malloc(need);
        if (msg) {
            snprintf(msg, need, "building %s with \"%s\" failed: %s (%d)\nbuild log:\n%s", file,
                     options, clattn_cl_error_name(err), (int)err, log ? log : "(none)");
            clattn_fail(ctx, CLATTN_ERROR_BUILD_FAILED, "%s", "");
            free(ctx->message);
            ctx->message = msg;
            ctx->message_cap = need;
        } else {
            clattn_fail(ctx, CLATTN_ERROR_BUILD_FAILED, "building %s failed", file);
        }
        ctx->last_cl = err;
        free(log);
        return CLATTN_ERROR_BUILD_FAILED;
    }

    return create_kernel(ctx, file, e);
}

static void entry_free(clattn_program_entry *e)
{
    if (e->kernel)
        clReleaseKernel(e->kernel);
    if (e->program)
        clReleaseProgram(e->program);
    free(e->key);
    free(e);
}

clattn_status clattn_get_kernel(clattn_context *ctx, const char *file, const char *options,
                                clattn_program_entry **out)
{
    size_t klen = strlen(file) + strlen(options) + 2;
    char *key = malloc(klen);
    if (!key)
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "cannot allocate a program");
    snprintf(key, klen, "%s\n%s", file, options);
    for (clattn_program_entry *e = ctx->programs; e; e = e->next)
        if (strcmp(e->key, key) == 0) {
            free(key);
            *out = e;
            return CLATTN_SUCCESS;
        }
    clattn_program_entry *e = calloc(1, sizeof *e);
    if (!e) {
        free(key);
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "cannot allocate a program");
    }
    e->key = key;
    clattn_status st = build(ctx, file, options, e);
    if (st != CLATTN_SUCCESS) {
        entry_free(e);
        return st;
    }
    e->next = ctx->programs;
    ctx->programs = e;
    *out = e;
    return CLATTN_SUCCESS;
}

void clattn_programs_release(clattn_context *ctx)
{
    clattn_program_entry *e = ctx->programs;
    while (e) {
        clattn_program_entry *next = e->next;
        entry_free(e);
        e = next;
    }
    ctx->programs = NULL;
}
