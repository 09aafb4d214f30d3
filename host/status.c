/* Status strings and the per-context (or per-thread) last-error message. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *clattn_status_string(clattn_status status)
{
    switch (status) {
    case CLATTN_SUCCESS: return "success";
    case CLATTN_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case CLATTN_ERROR_INVALID_SHAPE: return "invalid shape";
    case CLATTN_ERROR_INVALID_LAYOUT: return "invalid layout";
    case CLATTN_ERROR_SIZE_OVERFLOW: return "size overflow";
    case CLATTN_ERROR_UNSUPPORTED: return "unsupported";
    case CLATTN_ERROR_NO_PLATFORM: return "no OpenCL platform";
    case CLATTN_ERROR_NO_DEVICE: return "no OpenCL device";
    case CLATTN_ERROR_BUILD_FAILED: return "kernel build failed";
    case CLATTN_ERROR_OUT_OF_HOST_MEMORY: return "out of host memory";
    case CLATTN_ERROR_OUT_OF_DEVICE_MEMORY: return "out of device memory";
    case CLATTN_ERROR_BUFFER_TOO_SMALL: return "buffer too small";
    case CLATTN_ERROR_OPENCL: return "OpenCL error";
    case CLATTN_ERROR_IO: return "I/O error";
    }
    return "unknown status";
}

/* Messages of calls that have no context (context creation, the reference). */
static _Thread_local char thread_message[1024];

static void store(clattn_context *ctx, const char *text)
{
    if (!ctx) {
        snprintf(thread_message, sizeof thread_message, "%s", text);
        return;
    }
    size_t need = strlen(text) + 1;
    if (need > ctx->message_cap) {
        char *grown = realloc(ctx->message, need);
        if (!grown) { /* keep what fits in the old buffer */
            if (ctx->message_cap) {
                memcpy(ctx->message, text, ctx->message_cap - 1);
                ctx->message[ctx->message_cap - 1] = '\0';
            }
            return;
        }
        ctx->message = grown;
        ctx->message_cap = need;
    }
    memcpy(ctx->message, text, need);
}

clattn_status clattn_fail(clattn_context *ctx, clattn_status st, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    store(ctx, buf);
    if (ctx)
        ctx->last_cl = CL_SUCCESS;
    return st;
}

const char *clattn_cl_error_name(cl_int err)
{
    switch (err) {
        // clang-format off
#define C(x) case x: return #x
        C(CL_SUCCESS); C(CL_DEVICE_NOT_FOUND); C(CL_DEVICE_NOT_AVAILABLE);
        C(CL_COMPILER_NOT_AVAILABLE); C(CL_MEM_OBJECT_ALLOCATION_FAILURE);
        C(CL_OUT_OF_RESOURCES); C(CL_OUT_OF_HOST_MEMORY); C(CL_BUILD_PROGRAM_FAILURE);
        C(CL_INVALID_VALUE); C(CL_INVALID_DEVICE); C(CL_INVALID_CONTEXT);
        C(CL_INVALID_COMMAND_QUEUE); C(CL_INVALID_MEM_OBJECT); C(CL_INVALID_PROGRAM);
        C(CL_INVALID_KERNEL); C(CL_INVALID_KERNEL_ARGS); C(CL_INVALID_ARG_INDEX);
        C(CL_INVALID_ARG_VALUE); C(CL_INVALID_ARG_SIZE); C(CL_INVALID_WORK_GROUP_SIZE);
        C(CL_INVALID_WORK_ITEM_SIZE); C(CL_INVALID_GLOBAL_WORK_SIZE);
        C(CL_INVALID_EVENT_WAIT_LIST); C(CL_INVALID_EVENT); C(CL_INVALID_BUFFER_SIZE);
        C(CL_INVALID_BUILD_OPTIONS); C(CL_INVALID_PLATFORM); C(CL_INVALID_OPERATION);
        C(CL_MISALIGNED_SUB_BUFFER_OFFSET); C(CL_INVALID_HOST_PTR);
        C(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST);
#undef C
        // clang-format on
    }
    return "unknown OpenCL error";
}

clattn_status clattn_status_from_cl(cl_int err)
{
    switch (err) {
    case CL_SUCCESS: return CLATTN_SUCCESS;
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
    case CL_INVALID_BUFFER_SIZE: return CLATTN_ERROR_OUT_OF_DEVICE_MEMORY;
    case CL_OUT_OF_HOST_MEMORY: return CLATTN_ERROR_OUT_OF_HOST_MEMORY;
    default: return CLATTN_ERROR_OPENCL;
    }
}

clattn_status clattn_fail_cl(clattn_context *ctx, cl_int err, const char *what)
{
    const clattn_status st = clattn_status_from_cl(err);
    clattn_fail(ctx, st, "%s failed: %s (%d)", what, clattn_cl_error_name(err), (int)err);
    if (ctx)
        ctx->last_cl = err;
    return st;
}

void clattn_clear_error(clattn_context *ctx)
{
    if (!ctx)
        thread_message[0] = '\0';
    else if (ctx->message_cap)
        ctx->message[0] = '\0';
}

const char *clattn_last_error_message(const clattn_context *ctx)
{
    if (!ctx)
        return thread_message;
    return ctx->message ? ctx->message : "";
}

cl_int clattn_last_cl_error(const clattn_context *ctx)
{
    return ctx ? ctx->last_cl : CL_SUCCESS;
}
