/* The element comparison of `clattn run --check` and `clattn demo` with the CPU
 * reference; see tools/check.c. */
#ifndef CLATTN_TOOLS_CHECK_H
#define CLATTN_TOOLS_CHECK_H

#include "clattn.h"

#include <stddef.h>

/* Tolerance of `run --check` (per element, against the float64-accumulating
 * reference) and of `demo` (absolute). */
#define CHECK_ATOL 1e-5
#define CHECK_RTOL 1e-5

/* Element-wise comparison with a reference: the largest |got - ref| (infinite where
 * one side is NaN or infinite and the other is not) and whether every element is
 * within CHECK_ATOL + CHECK_RTOL*|ref|. */
typedef struct deviation {
    double max_abs;
    size_t worst; /* index of max_abs */
    int within;   /* 1 if every element is within tolerance */
} deviation;

/* The deviation of `count` float32 values from the reference `ref`. */
deviation compare(const float *got, const float *ref, size_t count);

/* Prints the comparison of `got` with the reference `ref` (both `count` elements of
 * `dtype`: float32, float16 or bfloat16); returns 1 if every element is within
 * CHECK_ATOL + CHECK_RTOL*|ref|, plus one unit in the last place for float16 and
 * bfloat16. */
int report_check(const char *name, clattn_dtype dtype, const void *got, const void *ref,
                 size_t count);

/* report_check() within atol + rtol*|ref| (plus one unit in the last place for float16
 * and bfloat16) instead: the gradients of `run --backward`. */
int report_check_tol(const char *name, clattn_dtype dtype, const void *got, const void *ref,
                     size_t count, double atol, double rtol);

/* The largest finite |x| of `count` elements of `dtype` (float32, float16, bfloat16); 0
 * if none. */
double check_max_abs(clattn_dtype dtype, const void *data, size_t count);

#endif
