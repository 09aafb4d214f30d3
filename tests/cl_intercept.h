/* OpenCL call interposition for the reliability tests (test_faults, test_threads).
 *
 * cl_intercept.c defines its own versions of the OpenCL entry points that libclattn
 * (a static archive linked into the test executable) and the test helpers call; the
 * linker binds those calls to these definitions instead of libOpenCL's, and each one
 * forwards to the real function found with dlsym(RTLD_NEXT, ...). The library is not
 * changed or rebuilt. The wrappers
 *  - count live OpenCL objects per type: create and retain +1, a successful release −1
 *    (enqueue calls that return an event count as creating one);
 *  - can make the Nth "injectable" call (every wrapped call except retain/release and
 *    clFinish) fail with a chosen error, without calling the real function.
 * The counters are atomic (several threads may call OpenCL at once); the injection is
 * meant for one thread at a time (the test's). */
#ifndef CLATTN_CL_INTERCEPT_H
#define CLATTN_CL_INTERCEPT_H

#include "clattn.h"

#include <stdbool.h>

typedef enum cli_kind {
    CLI_MEM,
    CLI_KERNEL,
    CLI_PROGRAM,
    CLI_EVENT,
    CLI_QUEUE,
    CLI_CONTEXT,
    CLI_N_KINDS
} cli_kind;

typedef struct cli_counts {
    long live[CLI_N_KINDS];
} cli_counts;

/** "mem", "kernel", "program", "event", "queue", "context". */
const char *cli_kind_name(cli_kind kind);
/** The live-object counts now. */
cli_counts cli_counts_now(void);
/** Whether a and b agree on every type; if not, writes "mem 5 -> 6, event 0 -> 1" (a to
 *  b, the types that differ) into msg. */
bool cli_counts_equal(const cli_counts *a, const cli_counts *b, char *msg, size_t cap);

/** Number of error variants cli_arm() can inject into any call. */
#define CLI_N_VARIANTS 3
/** The error variant `variant` (0 .. CLI_N_VARIANTS−1) injects into `call`: variant 0
 *  is the call's typical failure (CL_MEM_OBJECT_ALLOCATION_FAILURE for clCreateBuffer,
 *  CL_BUILD_PROGRAM_FAILURE for clBuildProgram, CL_OUT_OF_RESOURCES for kernel
 *  launches, ...); the others are CL_OUT_OF_HOST_MEMORY, CL_OUT_OF_RESOURCES or a
 *  call-specific CL_INVALID_* code. */
cl_int cli_variant_error(const char *call, int variant);

/** From now on, count injectable calls; the fail_at-th (1-based) fails with
 *  cli_variant_error(call, variant). fail_at 0: count only. Resets the report. */
void cli_arm(long fail_at, int variant);
/** Stops counting and injecting (the report keeps what happened). */
void cli_disarm(void);

typedef struct cli_report {
    long calls;       /**< injectable calls made while armed */
    bool fired;       /**< whether the fail_at-th call happened (and failed) */
    const char *call; /**< the call that was failed (static string), or NULL */
    cl_int error;     /**< the error it returned */
    long reads_ok;    /**< successful clEnqueueReadBuffer calls while armed */
    long kernels_ok;  /**< successful clEnqueueNDRangeKernel calls while armed */
} cli_report;

cli_report cli_report_now(void);

#endif
