/* Shared helpers of the clattn test executables: the cases' generator, seeds, the
 * context, problems (Q, K, V filled by the generator), comparison against expected
 * values with the worst element reported, and the case-file (JSON) loader.
 *
 * Every helper that can fail inside a test fails the running Check test (ck_assert)
 * with a message naming what failed; none of them returns an error code to ignore. */
#ifndef CLATTN_TESTUTIL_H
#define CLATTN_TESTUTIL_H

#include "clattn.h"

#include <check.h>
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- the cases' generator ("lowbias32_pm1", tests/cases/README.md) ---------------- */

uint32_t tu_lowbias32(uint32_t x);
/** A float in [-1, 1), exact in float32: the `gen(seed, i)` of the case files. */
float tu_gen(uint32_t seed, uint32_t i);
/** dst[i] = factor · gen(seed, i) for i < n (M[r][c] = gen(seed, r·cols + c) when
 *  dst is a packed row-major matrix). */
void tu_fill_gen(float *dst, size_t n, uint32_t seed, float factor);
void tu_fill_value(float *dst, size_t n, float value);
/** malloc'd array of n (≥ 1 allocated) floats, every one set to `fill`. */
float *tu_alloc(size_t n, float fill);

/* ---- seeds, context, running a suite ----------------------------------------------- */

/** Sets the executable's base seed: CLATTN_TEST_SEED (decimal or 0x-hex) if set, else
 *  `default_seed`; prints it. Call first in main(). */
uint32_t tu_seed_init(uint32_t default_seed);
/** The base seed set by tu_seed_init(). */
uint32_t tu_seed(void);

/** The executable's one clattn context (created by tu_run_suite()). */
clattn_context *tu_ctx(void);

/** Sets a small blocking on tu_ctx() for every kernel (2 queries per work-item, 4
 *  work-items per group, 16-key tiles), so every tiled kernel runs several tiles with
 *  several work-items sharing each; `on` false removes the overrides (the built-in
 *  blocking). test_exact's and test_exact16's tests call it first (all but the one that
 *  sets CLATTN_BLOCKING itself), so a failed test cannot leave its blocking to the next. (One
 * blocking for all of them: each distinct program costs a build, and the mutation runs build
 * everything afresh.) */
void tu_small_blocking(bool on);

/** Prints the device, creates the context, runs the suite with CK_NOFORK (OpenCL and
 *  fork() do not mix), each result printed as it finishes, releases the context. Returns the exit
 * status for main(): 0 when every test passed, and failure when no test ran (a CK_RUN_CASE
 * or CK_INCLUDE_TAGS naming nothing in this executable must not pass silently). */
int tu_run_suite(Suite *suite);

/** The two algorithms every attention test runs. */
extern const clattn_algorithm tu_algorithms[2];
const char *tu_algorithm_name(clattn_algorithm a);
const char *tu_mask_name(clattn_mask m);

/** Fails the running test with the status, the call and the library's message. */
#define TU_ASSERT_OK(status, ...)                                                                  \
    do {                                                                                           \
        clattn_status tu_st_ = (status);                                                           \
        if (tu_st_ != CLATTN_SUCCESS) {                                                            \
            char tu_what_[1024];                                                                   \
            snprintf(tu_what_, sizeof tu_what_, __VA_ARGS__);                                      \
            ck_abort_msg("%s: status %d (%s): %s", tu_what_, (int)tu_st_,                          \
                         clattn_status_string(tu_st_), clattn_last_error_message(tu_ctx()));       \
        }                                                                                          \
    } while (0)

/* ---- tensors ----------------------------------------------------------------------- */

/** Pointer to element (b, h, s, d) of a host view (strides all 0 = packed). */
float *tu_at(const clattn_tensor *t, int64_t b, int64_t h, int64_t s, int64_t d);
int64_t tu_count(const clattn_tensor *t);
/** A host view with explicit strides and offset. */
clattn_tensor tu_view(float *data, const int64_t shape[4], const int64_t strides[4],
                      int64_t offset);
/** Copies the elements of a view into a packed malloc'd array (NULL-safe for 0). */
float *tu_pack(const clattn_tensor *t);

/** Q [b,h_q,n_q,d_k], K [b,h_kv,n_kv,d_k], V [b,h_kv,n_kv,d_v] in packed host arrays,
 *  each followed by `tail` extra floats (the tail is NaN: poison for reads past the
 *  end). */
typedef struct tu_problem {
    int64_t b, h_q, h_kv, n_q, n_kv, d_k, d_v;
    float *q, *k, *v;
    size_t tail;
    clattn_tensor tq, tk, tv;
} tu_problem;

/** Allocates the problem; Q, K, V = gen(seed_q/k/v, packed index). */
void tu_problem_init(tu_problem *p, int64_t b, int64_t h_q, int64_t h_kv, int64_t n_q, int64_t n_kv,
                     int64_t d_k, int64_t d_v, uint32_t seed_q, uint32_t seed_k, uint32_t seed_v,
                     size_t tail);
void tu_problem_free(tu_problem *p);
/** A packed O view for the problem over `o` (b·h_q·n_q·d_v floats). */
clattn_tensor tu_problem_o(const tu_problem *p, float *o);

/** Runs clattn_attention(desc with `algorithm`) into a new packed O (caller frees);
 *  fails the test on any status but success. */
float *tu_run(const tu_problem *p, const clattn_attention_desc *desc, clattn_algorithm algorithm);
/** The float64 reference's O (packed, caller frees); `weights` (packed
 *  [b,h_q,n_q,n_kv]) receives the reference weights when not NULL. */
float *tu_reference(const tu_problem *p, const clattn_attention_desc *desc, float **weights);

/** clattn_attention_enqueue on cl_mem copies of the host arrays behind the views:
 *  len[0..3] = elements of the arrays of q, k, v, o (len[4]: of desc->weights' array,
 *  if set), counted from each view's host pointer. Buffers are created with copies
 *  of the arrays (so canaries travel), the views keep their shapes, strides and
 *  offsets, the call waits on nothing, its `done` event is waited for, then the whole
 *  O (and weights) arrays are read back into host memory. Returns the call's status
 *  (OpenCL failures outside clattn fail the test). Uses `ctx` (any context). */
clattn_status tu_attention_via_buffers(clattn_context *ctx, const clattn_attention_desc *desc,
                                       const clattn_tensor *q, const clattn_tensor *k,
                                       const clattn_tensor *v, const clattn_tensor *o,
                                       const size_t len[5]);

/* ---- comparison --------------------------------------------------------------------- */

typedef struct tu_tol {
    double atol, rtol;
} tu_tol;
#define TU_TOL_DEFAULT ((tu_tol){1e-5, 1e-5})

/** Whether got is within tol of exp: |got − exp| ≤ atol + rtol·|exp|, NaN only
 *  matches NaN, ±inf only the same infinity. */
bool tu_within(double got, double exp, tu_tol tol);

/** Compares every element of the host view `got` with a packed expected array of the
 *  same shape (exactly one of exp64, exp32 is non-NULL). On a mismatch writes into
 *  msg the name, the number of bad elements and the worst one (index (b, h, i, j),
 *  got, expected, tolerance) and returns false. */
bool tu_close(const char *what, const clattn_tensor *got, const double *exp64, const float *exp32,
              tu_tol tol, char *msg, size_t cap);

#define TU_ASSERT_CLOSE(what, got, exp64, exp32, tol)                                              \
    do {                                                                                           \
        char tu_msg_[1024];                                                                        \
        ck_assert_msg(tu_close((what), (got), (exp64), (exp32), (tol), tu_msg_, sizeof tu_msg_),   \
                      "%s", tu_msg_);                                                              \
    } while (0)

/** Fails the test unless buf[begin..end) all still hold `value` (bitwise; canaries and
 *  "untouched" regions). */
void tu_assert_untouched(const char *what, const float *buf, size_t begin, size_t end, float value);
/** Fails the test unless got[0..n) has the bits of want[0..n), naming the first element
 *  that differs; the message starts with the printf-formatted `what`. */
void tu_assert_same_bits(const float *got, const float *want, size_t n, const char *what, ...)
    __attribute__((format(printf, 4, 5)));
/** A read-write cl_mem of `bytes` bytes copied from host (an OpenCL error fails the
 *  test); the caller releases it. */
cl_mem tu_buffer(cl_context context, const void *host, size_t bytes);
/** Fails the test if any element of the view is NaN or infinite. */
void tu_assert_finite(const char *what, const clattn_tensor *t);

/* ---- case files (tests/cases/Rnn.json) ----------------------------------------------- */

/** Parses CLATTN_CASES_DIR/<name>.json (e.g. "R06"); fails the test if unreadable. */
cJSON *tu_case_load(const char *name);
/** The subcase whose "name" is `name`; fails the test if absent. */
const cJSON *tu_subcase(const cJSON *root, const char *name);
/** The node at a '/'-separated path of object keys; fails the test if absent. */
const cJSON *tu_jget(const cJSON *node, const char *path);
/** Like tu_jget but NULL when absent. */
const cJSON *tu_jfind(const cJSON *node, const char *path);
/** A number, or one of the strings "NaN", "Infinity", "-Infinity". */
double tu_jnum(const cJSON *item);
/** A number or nested arrays of numbers, flattened row-major into a malloc'd array;
 *  *count receives the element count. */
double *tu_jarray(const cJSON *item, size_t *count);
/** {"atol": .., "rtol": ..} (a missing field is 0). */
tu_tol tu_jtol(const cJSON *tol);

#endif
