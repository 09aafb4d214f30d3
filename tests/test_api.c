#define _POSIX_C_SOURCE 200809L
/* The public API's contracts: statuses and messages for bad input (nothing written),
 * device selection, the enqueue API with events, plans, build failures. */
#include <clattn.h>

#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static clattn_context *ctx;

/* Whether the calls on ctx take the GPU kernel family (CLATTN_KERNEL_FAMILY=gpu, or a
 * GPU): its fused and decode kernels have other names, blocking and workspace. */
static int gpu_family(void)
{
    return clattn_context_kernel_family(ctx) == CLATTN_KERNEL_FAMILY_GPU;
}

/* 6x3 example: Q = K = V = X */
static float X[6][3] = {{0.43f, 0.15f, 0.89f}, {0.55f, 0.87f, 0.66f}, {0.57f, 0.85f, 0.64f},
                        {0.22f, 0.58f, 0.33f}, {0.77f, 0.25f, 0.10f}, {0.05f, 0.80f, 0.55f}};
/* Z of the text (scale 1), float64 values from seed_examples.json */
static const double Z[6][3] = {
    {0.4420593986, 0.5930985621, 0.5789890707}, {0.4418657479, 0.651481978, 0.5683088877},
    {0.443127512, 0.649594579, 0.5670730577},   {0.4303897328, 0.6298280621, 0.55102706},
    {0.4671017295, 0.5909927255, 0.526596524},  {0.4177244739, 0.6503232057, 0.5645352171}};

static clattn_attention_desc unscaled(void)
{
    clattn_attention_desc d = clattn_attention_desc_default();
    d.scale = 1.0f;
    return d;
}

/* rm -rf of a test's temporary folder (mkdtemp), failing the test if it cannot */
static void remove_dir(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void fill(float *p, size_t n, float value)
{
    for (size_t i = 0; i < n; i++)
        p[i] = value;
}

static void assert_all(const float *p, size_t n, float value)
{
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(p[i] == value, "element %zu is %g, expected untouched %g", i, (double)p[i],
                      (double)value);
}

static void assert_z(const float *o, const char *what)
{
    for (int i = 0; i < 6; i++)
        for (int c = 0; c < 3; c++)
            ck_assert_msg(fabs(o[i * 3 + c] - Z[i][c]) <= 1e-5 + 1e-5 * fabs(Z[i][c]),
                          "%s: O[%d][%d] = %.8f, expected %.8f (tol 1e-5 + 1e-5|x|)", what, i, c,
                          (double)o[i * 3 + c], Z[i][c]);
}

/* Runs attention with one bad tensor and checks status, message and that O is
 * untouched. */
static void expect_failure(const clattn_attention_desc *d, const clattn_tensor *q,
                           const clattn_tensor *k, const clattn_tensor *v, clattn_status want,
                           const char *msg_part)
{
    float out[64];
    fill(out, 64, -7.0f);
    clattn_tensor o = clattn_tensor_host(out, q->shape[0], q->shape[1], q->shape[2], v->shape[3]);
    clattn_status st = clattn_attention(ctx, d, q, k, v, &o);
    ck_assert_msg(st == want, "status %s (%s), expected %s", clattn_status_string(st),
                  clattn_last_error_message(ctx), clattn_status_string(want));
    ck_assert_msg(strstr(clattn_last_error_message(ctx), msg_part), "message \"%s\" lacks \"%s\"",
                  clattn_last_error_message(ctx), msg_part);
    assert_all(out, 64, -7.0f);
}

START_TEST(version_and_status_strings)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", CLATTN_VERSION_MAJOR, CLATTN_VERSION_MINOR,
             CLATTN_VERSION_PATCH);
    ck_assert_str_eq(clattn_version(), want);
    ck_assert_str_eq(clattn_version(), CLATTN_VERSION_STRING);
    for (int s = CLATTN_SUCCESS; s <= CLATTN_ERROR_IO; s++) {
        const char *a = clattn_status_string((clattn_status)s);
        ck_assert_str_ne(a, "unknown status");
        for (int t = CLATTN_SUCCESS; t < s; t++)
            ck_assert_str_ne(a, clattn_status_string((clattn_status)t));
    }
    ck_assert_str_eq(clattn_status_string((clattn_status)999), "unknown status");
}
END_TEST

START_TEST(null_and_enum_arguments)
{
    clattn_attention_desc d = unscaled();
    clattn_tensor x = clattn_tensor_host(X, 1, 1, 6, 3);
    float out[18];
    clattn_tensor o = clattn_tensor_host(out, 1, 1, 6, 3);
    ck_assert_int_eq(clattn_attention(NULL, &d, &x, &x, &x, &o), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_attention(ctx, NULL, &x, &x, &x, &o), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_attention(ctx, &d, NULL, &x, &x, &o), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_str_eq(clattn_last_error_message(ctx), "Q is NULL");
    ck_assert_int_eq(clattn_attention(ctx, &d, &x, &x, &x, NULL), CLATTN_ERROR_INVALID_ARGUMENT);
    d.mask = (clattn_mask)42;
    expect_failure(&d, &x, &x, &x, CLATTN_ERROR_INVALID_ARGUMENT, "unknown mask 42");
    d = unscaled();
    d.algorithm = (clattn_algorithm)-1;
    expect_failure(&d, &x, &x, &x, CLATTN_ERROR_INVALID_ARGUMENT, "unknown algorithm");
    d = unscaled();
    d.scale = NAN;
    expect_failure(&d, &x, &x, &x, CLATTN_ERROR_INVALID_ARGUMENT, "not finite");
    d = unscaled();
    clattn_tensor bad = x;
    bad.dtype = (clattn_dtype)7;
    expect_failure(&d, &bad, &x, &x, CLATTN_ERROR_INVALID_ARGUMENT, "dtype");
    ck_assert_int_eq(clattn_context_create(NULL, NULL), CLATTN_ERROR_INVALID_ARGUMENT);
    clattn_context_release(NULL); /* accepted */
}
END_TEST

START_TEST(shape_mismatches_name_the_numbers)
{
    static float buf[8 * 6 * 4];
    clattn_attention_desc d = clattn_attention_desc_default();
    clattn_tensor q = clattn_tensor_host(buf, 1, 2, 3, 4);
    clattn_tensor k = clattn_tensor_host(buf, 1, 2, 5, 4);
    clattn_tensor v = clattn_tensor_host(buf, 1, 2, 6, 4);
    expect_failure(&d, &q, &k, &v, CLATTN_ERROR_INVALID_SHAPE, "K has 5 rows (n_kv), V has 6");
    v.shape[2] = 5;
    k.shape[3] = 3;
    expect_failure(&d, &q, &k, &v, CLATTN_ERROR_INVALID_SHAPE, "Q has d_k 4, K has 3");
    k.shape[3] = 4;
    k.shape[1] = v.shape[1] = 3;
    expect_failure(&d, &q, &k, &v, CLATTN_ERROR_INVALID_SHAPE, "not a multiple");
    k.shape[1] = v.shape[1] = 2;
    k.shape[0] = 2;
    expect_failure(&d, &q, &k, &v, CLATTN_ERROR_INVALID_SHAPE, "batch sizes differ");
    k.shape[0] = 1;
    q.shape[2] = -1;
    expect_failure(&d, &q, &k, &v, CLATTN_ERROR_INVALID_SHAPE, "negative seq size -1");
    q.shape[2] = 3;
    q.shape[3] = k.shape[3] = 0;
    expect_failure(&d, &q, &k, &v, CLATTN_ERROR_INVALID_SHAPE, "d_k is 0");
}
END_TEST

START_TEST(layouts_and_overflow)
{
    clattn_attention_desc d = unscaled();
    clattn_tensor x = clattn_tensor_host(X, 1, 1, 6, 3);
    clattn_tensor bad = x;
    bad.strides[2] = -3;
    bad.strides[3] = 1;
    expect_failure(&d, &bad, &x, &x, CLATTN_ERROR_INVALID_LAYOUT, "negative seq stride");
    bad = x;
    bad.offset = -1;
    expect_failure(&d, &bad, &x, &x, CLATTN_ERROR_INVALID_LAYOUT, "negative offset");
    bad = x;
    bad.shape[0] = bad.shape[1] = (int64_t)1 << 40;
    bad.shape[2] = (int64_t)1 << 30;
    expect_failure(&d, &bad, &x, &x, CLATTN_ERROR_SIZE_OVERFLOW, "overflows");
    bad = x;
    bad.strides[0] = INT64_MAX / 2;
    bad.strides[3] = 1;
    bad.shape[0] = 3;
    expect_failure(&d, &bad, &x, &x, CLATTN_ERROR_SIZE_OVERFLOW, "Q");

    /* outputs: a zero stride, and rows that overlap */
    float out[32];
    fill(out, 32, -7.0f);
    clattn_tensor o = clattn_tensor_host(out, 1, 1, 6, 3);
    o.strides[2] = 0;
    o.strides[3] = 1;
    ck_assert_int_eq(clattn_attention(ctx, &d, &x, &x, &x, &o), CLATTN_ERROR_INVALID_LAYOUT);
    o.strides[2] = 2; /* row i overlaps row i+1 */
    ck_assert_int_eq(clattn_attention(ctx, &d, &x, &x, &x, &o), CLATTN_ERROR_INVALID_LAYOUT);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(ctx), "overlap"));
    assert_all(out, 32, -7.0f);
    /* both storages at once, or the wrong one for the call */
    bad = x;
    bad.buffer = (cl_mem)(uintptr_t)1;
    expect_failure(&d, &bad, &x, &x, CLATTN_ERROR_INVALID_LAYOUT, "exactly one");
    ck_assert_int_eq(clattn_attention_enqueue(ctx, &d, &x, &x, &x, &o, 0, NULL, NULL),
                     CLATTN_ERROR_INVALID_LAYOUT);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(ctx), "no cl_mem"));
}
END_TEST

/* Outputs that overlap each other (host or device), or an input on the same cl_mem,
 * are refused before anything runs; O in place over Q on host memory is fine. */
START_TEST(overlapping_outputs_refused)
{
    clattn_attention_desc d = unscaled();
    clattn_tensor x = clattn_tensor_host(X, 1, 1, 6, 3);
    float buf[64];
    fill(buf, 64, -7.0f);
    clattn_tensor o = clattn_tensor_host(buf, 1, 1, 6, 3);
    clattn_tensor w = clattn_tensor_host(buf + 10, 1, 1, 6, 6); /* starts inside O */
    d.weights = &w;
    ck_assert_int_eq(clattn_attention(ctx, &d, &x, &x, &x, &o), CLATTN_ERROR_INVALID_LAYOUT);
    ck_assert_str_eq(clattn_last_error_message(ctx), "O and weights overlap");
    assert_all(buf, 64, -7.0f);
    w.host = buf + 18; /* right after O: fine */
    ck_assert_int_eq(clattn_attention(ctx, &d, &x, &x, &x, &o), CLATTN_SUCCESS);
    assert_z(buf, "O next to the weights");

    float xq[18];
    memcpy(xq, X, sizeof xq);
    clattn_tensor q = clattn_tensor_host(xq, 1, 1, 6, 3);
    d.weights = NULL;
    ck_assert_int_eq(clattn_attention(ctx, &d, &q, &x, &x, &q), CLATTN_SUCCESS); /* in place */
    assert_z(xq, "O over Q on host memory");

    cl_context c;
    clattn_context_get_cl(ctx, &c, NULL, NULL);
    cl_int err;
    cl_mem m = clCreateBuffer(c, CL_MEM_READ_WRITE, 64 * sizeof(float), NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    clattn_tensor bq = clattn_tensor_buffer(m, 1, 1, 6, 3), bo = bq;
    bo.offset = 17; /* overlaps the last element of Q */
    ck_assert_int_eq(clattn_attention_enqueue(ctx, &d, &bq, &bq, &bq, &bo, 0, NULL, NULL),
                     CLATTN_ERROR_INVALID_LAYOUT);
    ck_assert_str_eq(clattn_last_error_message(ctx), "O overlaps Q in the same cl_mem");
    clattn_tensor s = clattn_tensor_buffer(m, 1, 1, 6, 6);
    s.offset = 18;
    clattn_tensor s2 = s;
    s2.offset = 20; /* softmax: exactly in place is fine, shifted is not */
    ck_assert_int_eq(clattn_softmax_enqueue(ctx, NULL, &s, &s2, 0, NULL, NULL),
                     CLATTN_ERROR_INVALID_LAYOUT);
    ck_assert_int_eq(clattn_softmax_enqueue(ctx, NULL, &s, &s, 0, NULL, NULL), CLATTN_SUCCESS);
    cl_command_queue queue;
    clattn_context_get_cl(ctx, NULL, NULL, &queue);
    clFinish(queue);
    clReleaseMemObject(m);
}
END_TEST

START_TEST(both_algorithms_return_weights)
{
    clattn_attention_desc d = unscaled();
    float w[36];
    clattn_tensor wt = clattn_tensor_host(w, 1, 1, 6, 6);
    d.weights = &wt;
    clattn_tensor x = clattn_tensor_host(X, 1, 1, 6, 3);
    static const clattn_algorithm algs[3] = {CLATTN_ALGORITHM_FUSED, CLATTN_ALGORITHM_UNFUSED,
                                             CLATTN_ALGORITHM_AUTO};
    for (int a = 0; a < 3; a++) {
        d.algorithm = algs[a];
        fill(w, 36, -7.0f);
        float out[18];
        clattn_tensor o = clattn_tensor_host(out, 1, 1, 6, 3);
        ck_assert_int_eq(clattn_attention(ctx, &d, &x, &x, &x, &o), CLATTN_SUCCESS);
        assert_z(out, "with weights");
        /* the seed's printed weight of "journey" for "Your" */
        ck_assert_msg(fabs(w[6 + 1] - 0.2378912986) < 1e-5, "algorithm %d: w[1][1] = %.8f",
                      (int)algs[a], (double)w[6 + 1]);
    }
    /* AUTO with weights prefers the unfused kernels (weights computed once) */
    clattn_plan p;
    float out[18];
    clattn_tensor o = clattn_tensor_host(out, 1, 1, 6, 3);
    ck_assert_int_eq(clattn_attention_plan(ctx, &d, &x, &x, &x, &o, &p), CLATTN_SUCCESS);
    ck_assert_int_eq(p.algorithm, CLATTN_ALGORITHM_UNFUSED);
    ck_assert_msg(strstr(p.kernels, "softmax") && strstr(p.rejected, "fused"),
                  "kernels \"%s\", rejected \"%s\"", p.kernels, p.rejected);
    d.algorithm = CLATTN_ALGORITHM_FUSED;
    ck_assert_int_eq(clattn_attention_plan(ctx, &d, &x, &x, &x, &o, &p), CLATTN_SUCCESS);
    ck_assert_str_eq(p.kernels, "decode, scores, weights_from_lse"); /* 6 queries: decode */
}
END_TEST

START_TEST(plan_explains_choice)
{
    clattn_attention_desc d = unscaled();
    clattn_tensor x = clattn_tensor_host(X, 1, 1, 6, 3);
    float out[18], w[36];
    clattn_tensor o = clattn_tensor_host(out, 1, 1, 6, 3);
    clattn_plan p;
    ck_assert_int_eq(clattn_attention_plan(ctx, &d, &x, &x, &x, &o, &p), CLATTN_SUCCESS);
    ck_assert_int_eq(p.algorithm, CLATTN_ALGORITHM_FUSED);
    if (gpu_family()) { /* split-KV decoding: the splits' O and LSE, 6 rows of 3 + 1 */
        ck_assert_str_eq(p.kernels, "decode_gpu, split_merge");
        ck_assert(p.workspace_bytes > 0 && p.workspace_bytes % (6 * 4 * 4) == 0);
    } else {
        ck_assert_uint_eq(p.workspace_bytes, 0);
    }
    ck_assert(p.work_group_size >= 1 && p.tile_kv >= 16 && p.queries_per_work_item >= 1);
    ck_assert(strlen(p.reason) > 0);
    d.algorithm = CLATTN_ALGORITHM_UNFUSED;
    ck_assert_int_eq(clattn_attention_plan(ctx, &d, &x, &x, &x, &o, &p), CLATTN_SUCCESS);
    ck_assert_int_eq(p.algorithm, CLATTN_ALGORITHM_UNFUSED);
    ck_assert_uint_eq(p.workspace_bytes, 6 * 6 * 4);
    ck_assert(p.tile_kv >= 16 && p.tile_kv % 16 == 0 && p.queries_per_work_item >= 1);
    clattn_tensor wt = clattn_tensor_host(w, 1, 1, 6, 6);
    d.algorithm = CLATTN_ALGORITHM_AUTO;
    d.weights = &wt;
    ck_assert_int_eq(clattn_attention_plan(ctx, &d, &x, &x, &x, &o, &p), CLATTN_SUCCESS);
    ck_assert_int_eq(p.algorithm, CLATTN_ALGORITHM_UNFUSED);
    ck_assert_int_eq(clattn_attention_plan(ctx, &d, &x, &x, &x, &o, NULL),
                     CLATTN_ERROR_INVALID_ARGUMENT);
}
END_TEST

/* A score matrix beyond CL_DEVICE_MAX_MEM_ALLOC_SIZE: UNFUSED is refused with the
 * numbers, AUTO takes FUSED (plans only: nothing is allocated or read). */
START_TEST(plan_falls_back_to_fused_for_huge_scores)
{
    static float dummy[4];
    cl_device_id dev;
    clattn_context_get_cl(ctx, NULL, &dev, NULL);
    cl_ulong max_alloc = 0;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
    int64_t n = 1024;
    while ((cl_ulong)(n * n) * 4 <= max_alloc) /* n x n floats just past the limit */
        n *= 2;
    clattn_tensor q = clattn_tensor_host(dummy, 1, 1, n, 64), o = q;
    clattn_attention_desc d = clattn_attention_desc_default();
    d.algorithm = CLATTN_ALGORITHM_UNFUSED;
    clattn_plan p;
    ck_assert_int_eq(clattn_attention_plan(ctx, &d, &q, &q, &q, &o, &p), CLATTN_ERROR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(ctx), "CL_DEVICE_MAX_MEM_ALLOC_SIZE"));
    d.algorithm = CLATTN_ALGORITHM_AUTO;
    ck_assert_int_eq(clattn_attention_plan(ctx, &d, &q, &q, &q, &o, &p), CLATTN_SUCCESS);
    ck_assert_int_eq(p.algorithm, CLATTN_ALGORITHM_FUSED);
    ck_assert_uint_eq(p.workspace_bytes, 0);
}
END_TEST

START_TEST(empty_problems)
{
    clattn_attention_desc d = clattn_attention_desc_default();
    float q[12], kv[4], out[16];
    fill(q, 12, 0.5f);
    clattn_tensor tq = clattn_tensor_host(q, 1, 1, 3, 4);
    clattn_tensor tk = clattn_tensor_host(kv, 1, 1, 0, 4);
    for (int alg = CLATTN_ALGORITHM_AUTO; alg <= CLATTN_ALGORITHM_FUSED; alg++) {
        d.algorithm = (clattn_algorithm)alg;
        fill(out, 16, NAN);
        clattn_tensor o = clattn_tensor_host(out, 1, 1, 3, 4);
        clattn_status st = clattn_attention(ctx, &d, &tq, &tk, &tk, &o);
        ck_assert_msg(st == CLATTN_SUCCESS, "n_kv = 0, algorithm %d: %s", alg,
                      clattn_last_error_message(ctx));
        for (int i = 0; i < 12; i++)
            ck_assert_msg(out[i] == 0.0f, "n_kv = 0, algorithm %d: O[%d] = %g", alg, i,
                          (double)out[i]);
        ck_assert(isnan(out[12]));
        /* n_q = 0: success, nothing written */
        clattn_tensor q0 = clattn_tensor_host(q, 1, 1, 0, 4);
        clattn_tensor k1 = clattn_tensor_host(q, 1, 1, 3, 4);
        clattn_tensor o0 = clattn_tensor_host(out, 1, 1, 0, 4);
        fill(out, 16, -7.0f);
        ck_assert_int_eq(clattn_attention(ctx, &d, &q0, &k1, &k1, &o0), CLATTN_SUCCESS);
        assert_all(out, 16, -7.0f);
        { /* its plan says nothing runs (it described a decode kernel of "0 rows"), and with
           * key weight sums that key_sums.cl alone writes their zeros */
            clattn_plan plan;
            ck_assert_int_eq(clattn_attention_plan(ctx, &d, &q0, &k1, &k1, &o0, &plan),
                             CLATTN_SUCCESS);
            ck_assert_msg(plan.kernels[0] == '\0' &&
                              strncmp(plan.reason, "no query rows", 13) == 0 &&
                              plan.work_group_size == 0 && plan.tile_kv == 0,
                          "n_q 0: kernels \"%s\", reason \"%s\", wg %zu", plan.kernels, plan.reason,
                          plan.work_group_size);
            float sums[3] = {-7.0f, -7.0f, -7.0f};
            clattn_tensor ks = clattn_tensor_host(sums, 1, 1, 1, 3);
            clattn_attention_desc dk = d;
            dk.key_weight_sums = &ks;
            dk.algorithm = CLATTN_ALGORITHM_AUTO; /* (key sums: fused only) */
            ck_assert_int_eq(clattn_attention_plan(ctx, &dk, &q0, &k1, &k1, &o0, &plan),
                             CLATTN_SUCCESS);
            ck_assert_msg(strcmp(plan.kernels, "key_sums") == 0,
                          "n_q 0 with key sums: kernels \"%s\", reason \"%s\"", plan.kernels,
                          plan.reason);
            ck_assert_int_eq(clattn_attention(ctx, &dk, &q0, &k1, &k1, &o0), CLATTN_SUCCESS);
            assert_all(sums, 3, 0.0f);
        }
        /* no heads (h_q = h_kv = 0) and no batch entries: success, nothing written, no
         * division by the KV head count (the group) anywhere; plan and enqueue too */
        for (int z = 1; z <= 2; z++) {
            const int64_t b = z == 1 ? 1 : 0, h = z == 1 ? 0 : 2;
            clattn_tensor qz = clattn_tensor_host(q, b, h, 3, 4);
            clattn_tensor kz = clattn_tensor_host(q, b, h, 3, 4);
            clattn_tensor oz = clattn_tensor_host(out, b, h, 3, 4);
            clattn_plan plan;
            ck_assert_msg(clattn_attention_plan(ctx, &d, &qz, &kz, &kz, &oz, &plan) ==
                              CLATTN_SUCCESS,
                          "plan of b %lld h %lld: %s", (long long)b, (long long)h,
                          clattn_last_error_message(ctx));
            ck_assert_int_eq(clattn_attention(ctx, &d, &qz, &kz, &kz, &oz), CLATTN_SUCCESS);
            assert_all(out, 16, -7.0f);
        }
    }
}
END_TEST

static cl_mem make_buffer(cl_context c, const void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(c, CL_MEM_READ_WRITE | (host ? CL_MEM_COPY_HOST_PTR : 0), bytes,
                              (void *)host, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    return m;
}

/* The enqueue API on cl_mem, with wait lists and completion events, on the context's
 * own queue and on an application's out-of-order queue. */
START_TEST(enqueue_api_with_events)
{
    cl_context c;
    cl_device_id dev;
    cl_command_queue queue;
    ck_assert_int_eq(clattn_context_get_cl(ctx, &c, &dev, &queue), CLATTN_SUCCESS);
    cl_int err;
    cl_command_queue_properties props = 0;
    clGetDeviceInfo(dev, CL_DEVICE_QUEUE_PROPERTIES, sizeof props, &props, NULL);
    cl_command_queue ooo =
        clCreateCommandQueue(c, dev, props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    clattn_context *app;
    ck_assert_int_eq(clattn_context_create_from_cl(c, dev, ooo, &app), CLATTN_SUCCESS);
    clReleaseCommandQueue(ooo); /* the clattn context keeps its own reference */

    clattn_context *contexts[2] = {ctx, app};
    for (int which = 0; which < 2; which++)
        for (int alg = CLATTN_ALGORITHM_UNFUSED; alg <= CLATTN_ALGORITHM_FUSED; alg++) {
            clattn_context *cx = contexts[which];
            cl_command_queue qq;
            clattn_context_get_cl(cx, NULL, NULL, &qq);
            cl_mem xb = make_buffer(c, NULL, sizeof X);
            cl_mem ob = make_buffer(c, NULL, 18 * sizeof(float));
            cl_event written, done;
            ck_assert_int_eq(
                clEnqueueWriteBuffer(qq, xb, CL_FALSE, 0, sizeof X, X, 0, NULL, &written),
                CL_SUCCESS);
            clattn_tensor x = clattn_tensor_buffer(xb, 1, 1, 6, 3);
            clattn_tensor o = clattn_tensor_buffer(ob, 1, 1, 6, 3);
            clattn_attention_desc d = unscaled();
            d.algorithm = (clattn_algorithm)alg;
            ck_assert_int_eq(clattn_attention_enqueue(cx, &d, &x, &x, &x, &o, 1, &written, &done),
                             CLATTN_SUCCESS);
            float out[18];
            ck_assert_int_eq(
                clEnqueueReadBuffer(qq, ob, CL_TRUE, 0, sizeof out, out, 1, &done, NULL),
                CL_SUCCESS);
            assert_z(out, which ? "out-of-order queue" : "own queue");
            /* a view larger than its buffer */
            o.shape[2] = 7;
            x.shape[2] = 7;
            ck_assert_int_eq(clattn_attention_enqueue(cx, &d, &x, &x, &x, &o, 0, NULL, NULL),
                             CLATTN_ERROR_BUFFER_TOO_SMALL);
            ck_assert_ptr_nonnull(strstr(clattn_last_error_message(cx), "84 bytes"));
            clReleaseEvent(written);
            clReleaseEvent(done);
            clReleaseMemObject(xb);
            clReleaseMemObject(ob);
        }
    clattn_context_release(app);
}
END_TEST

START_TEST(device_selection)
{
    clattn_context_options opt = {0};
    clattn_context *c2 = NULL;
    opt.device = "no such device 12345";
    ck_assert_int_eq(clattn_context_create(&opt, &c2), CLATTN_ERROR_NO_DEVICE);
    ck_assert_ptr_null(c2);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(NULL), "no such device 12345"));
    opt.device = "0:0";
    ck_assert_int_eq(clattn_context_create(&opt, &c2), CLATTN_SUCCESS);
    clattn_context_release(c2);
    opt.device = "99:0";
    ck_assert_int_eq(clattn_context_create(&opt, &c2), CLATTN_ERROR_NO_DEVICE);
    /* a case-insensitive part of the default device's name */
    cl_device_id dev;
    clattn_context_get_cl(ctx, NULL, &dev, NULL);
    char name[256] = "", part[4];
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    ck_assert(strlen(name) >= 3);
    for (int i = 0; i < 3; i++)
        part[i] = (char)((name[i] >= 'a' && name[i] <= 'z') ? name[i] - 32 : name[i]);
    part[3] = '\0';
    opt.device = part;
    ck_assert_int_eq(clattn_context_create(&opt, &c2), CLATTN_SUCCESS);
    clattn_context_release(c2);
}
END_TEST

/* A kernel that does not compile: BUILD_FAILED with the build log; a missing kernel
 * folder: IO. The context stays usable for other kernels. */
START_TEST(build_failure_reports_log)
{
    char dir[] = "/tmp/clattn_kdir_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/common.cl", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("bool key_visible(int m, long i, long j, long a, long b) { return true; }\n"
          "long visible_key_end(int m, long i, long a, long n) { return n; }\n"
          "float max_nan(float a, float b) { return a > b ? a : b; }\n"
          "long view_at(long o, long4 s, long b, long h, long x, long d) { return o; }\n",
          f);
    fclose(f);
    /* every program also includes dropout.cl and rows.cl (empty here) */
    for (int x = 0; x < 2; x++) {
        snprintf(path, sizeof path, "%s/%s", dir, x ? "rows.cl" : "dropout.cl");
        f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fclose(f);
    }
    /* 6 queries run decode.cl (GPU family: decode_gpu.cl); longer ones fused.cl (or
     * fused_gpu.cl) */
    static const char *const names[4] = {"fused", "decode", "fused_gpu", "decode_gpu"};
    for (int k = 0; k < 4; k++) {
        snprintf(path, sizeof path, "%s/%s.cl", dir, names[k]);
        f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "__kernel void clattn_%s(__global float *o) { o[0] = this_is_not_defined; }\n",
                names[k]);
        fclose(f);
    }

    clattn_context_options opt = {0};
    opt.kernel_dir = dir;
    clattn_context *c2;
    ck_assert_int_eq(clattn_context_create(&opt, &c2), CLATTN_SUCCESS);
    clattn_attention_desc d = unscaled();
    d.algorithm = CLATTN_ALGORITHM_FUSED;
    clattn_tensor x = clattn_tensor_host(X, 1, 1, 6, 3);
    float out[18];
    fill(out, 18, -7.0f);
    clattn_tensor o = clattn_tensor_host(out, 1, 1, 6, 3);
    ck_assert_int_eq(clattn_attention(c2, &d, &x, &x, &x, &o), CLATTN_ERROR_BUILD_FAILED);
    const char *msg = clattn_last_error_message(c2);
    ck_assert_msg(strstr(msg, "build log") && strstr(msg, "this_is_not_defined"),
                  "message lacks the build log: %s", msg);
    ck_assert_int_eq(clattn_last_cl_error(c2), CL_BUILD_PROGRAM_FAILURE);
    assert_all(out, 18, -7.0f);
    d.algorithm = CLATTN_ALGORITHM_UNFUSED; /* scores.cl is missing from the folder */
    ck_assert_int_eq(clattn_attention(c2, &d, &x, &x, &x, &o), CLATTN_ERROR_IO);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(c2), "scores.cl"));
    clattn_context_release(c2);
    unlink(path);
    snprintf(path, sizeof path, "%s/common.cl", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/dropout.cl", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/rows.cl", dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

static int count_bin_files(const char *dir, int corrupt)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             corrupt ? "for f in %s/*.bin; do printf 'CLATTNB1garbage' > \"$f\"; done"
                     : "ls %s/*.bin 2>/dev/null | wc -l",
             dir);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    int n = 0;
    if (fscanf(p, "%d", &n) != 1)
        n = 0;
    pclose(p);
    return n;
}

/* The persistent program cache: a first context writes binaries, a second one reuses
 * them, corrupt files are ignored (and replaced), "off" writes nothing. */
/* A tuning file (as `clattn tune` writes it) changes the blocking of later contexts on
 * the device, for problems large enough; CLATTN_TUNE=off ignores it; malformed lines
 * are skipped. */
START_TEST(stored_tuning_is_used)
{
    char dir[] = "/tmp/clattn_tune_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    clattn_context_options opt = {0};
    opt.cache_dir = dir;
    clattn_context *c2;
    ck_assert_int_eq(clattn_context_create(&opt, &c2), CLATTN_SUCCESS);
    const char *path = clattn_context_tuning_file(c2);
    ck_assert_ptr_nonnull(path);
    ck_assert_msg(strncmp(path, dir, strlen(dir)) == 0, "tuning file %s outside %s", path, dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("# test\nfused 16 16 4 8 32\nfused garbage\nscores 16 0 1 4 48\n", f);
    fclose(f);
    clattn_context_release(c2);

    const int64_t n = 256;
    float *q = calloc((size_t)(n * 16), sizeof(float)),
          *o = calloc((size_t)(n * 16), sizeof(float));
    clattn_tensor tq = clattn_tensor_host(q, 1, 1, n, 16), to = clattn_tensor_host(o, 1, 1, n, 16);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.algorithm = CLATTN_ALGORITHM_FUSED;
    for (int off = 0; off < 2; off++) {
        if (off)
            setenv("CLATTN_TUNE", "off", 1);
        ck_assert_int_eq(clattn_context_create(&opt, &c2), CLATTN_SUCCESS);
        clattn_plan p;
        ck_assert_int_eq(clattn_attention_plan(c2, &d, &tq, &tq, &tq, &to, &p), CLATTN_SUCCESS);
        if (!off) {
            ck_assert_uint_eq(p.queries_per_work_item, 4);
            ck_assert_uint_eq(p.work_group_size, 8);
            ck_assert_uint_eq(p.tile_kv, 32);
            /* and it computes the same thing */
            ck_assert_int_eq(clattn_attention(c2, &d, &tq, &tq, &tq, &to), CLATTN_SUCCESS);
        } else {
            ck_assert_msg(p.queries_per_work_item != 4 || p.work_group_size != 8 || p.tile_kv != 32,
                          "CLATTN_TUNE=off still uses the tuning file");
        }
        /* a problem smaller than the stored blocking's 4 x 8 queries keeps the built-in
         * small-problem blocking (20 queries: fused.cl, not the decode kernel) */
        clattn_tensor small = clattn_tensor_host(q, 1, 1, 20, 16);
        clattn_tensor small_o = clattn_tensor_host(o, 1, 1, 20, 16);
        ck_assert_int_eq(clattn_attention_plan(c2, &d, &small, &small, &small, &small_o, &p),
                         CLATTN_SUCCESS);
        ck_assert_str_eq(p.kernels, gpu_family() ? "fused_gpu" : "fused");
        if (!gpu_family()) /* (the GPU family's built-in blocking has 4 rows per work-item) */
            ck_assert_uint_eq(p.queries_per_work_item, 1);
        clattn_context_release(c2);
    }
    unsetenv("CLATTN_TUNE");
    free(q);
    free(o);
    remove_dir(dir);
}
END_TEST

/* Whether the context's runtime keeps its own build cache (PoCL with POCL_KERNEL_CACHE
 * unset or not 0): where clattn's AUTO binary cache stays empty. */
static bool runtime_caches_builds(const clattn_context *c)
{
    cl_device_id dev;
    cl_platform_id plat;
    char name[128] = "";
    ck_assert_int_eq(clattn_context_get_cl(c, NULL, &dev, NULL), CLATTN_SUCCESS);
    ck_assert_int_eq(clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL),
                     CL_SUCCESS);
    ck_assert_int_eq(clGetPlatformInfo(plat, CL_PLATFORM_NAME, sizeof name - 1, name, NULL),
                     CL_SUCCESS);
    const char *env = getenv("POCL_KERNEL_CACHE");
    return strcmp(name, "Portable Computing Language") == 0 && (!env || strcmp(env, "0") != 0);
}

START_TEST(program_binary_cache)
{
    char dir[] = "/tmp/clattn_cache_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    clattn_context_options opt = {0};
    opt.cache_dir = dir;
    opt.binary_cache = CLATTN_BINARY_CACHE_ON;
    clattn_attention_desc d = unscaled();
    clattn_tensor x = clattn_tensor_host(X, 1, 1, 6, 3);
    float out[18];
    clattn_tensor o = clattn_tensor_host(out, 1, 1, 6, 3);
    for (int round = 0; round < 3; round++) {
        if (round == 2)
            count_bin_files(dir, 1); /* corrupt every file */
        clattn_context *c2;
        ck_assert_int_eq(clattn_context_create(&opt, &c2), CLATTN_SUCCESS);
        for (int alg = CLATTN_ALGORITHM_UNFUSED; alg <= CLATTN_ALGORITHM_FUSED; alg++) {
            d.algorithm = (clattn_algorithm)alg;
            fill(out, 18, NAN);
            ck_assert_int_eq(clattn_attention(c2, &d, &x, &x, &x, &o), CLATTN_SUCCESS);
            assert_z(out, round == 0 ? "cache cold" : round == 1 ? "cache warm" : "corrupt");
        }
        clattn_context_release(c2);
        /* scores, softmax, wsum, and decode (GPU family: decode_gpu and split_merge) */
        ck_assert_int_eq(count_bin_files(dir, 0), gpu_family() ? 5 : 4);
    }
    remove_dir(dir);
    /* AUTO: binaries unless the runtime caches its builds itself; OFF: none, with the
     * folder still holding the tuning; an unknown value is refused */
    for (int mode = CLATTN_BINARY_CACHE_AUTO; mode <= CLATTN_BINARY_CACHE_OFF + 1; mode += 2) {
        char dir2[] = "/tmp/clattn_cache_mode_XXXXXX";
        ck_assert_ptr_nonnull(mkdtemp(dir2));
        opt.cache_dir = dir2;
        opt.binary_cache = (clattn_binary_cache)mode;
        clattn_context *c2 = NULL;
        if (mode > CLATTN_BINARY_CACHE_OFF) {
            ck_assert_int_eq(clattn_context_create(&opt, &c2), CLATTN_ERROR_INVALID_ARGUMENT);
            ck_assert_ptr_null(c2);
            ck_assert_ptr_nonnull(strstr(clattn_last_error_message(NULL), "binary_cache 3"));
            rmdir(dir2);
            continue;
        }
        ck_assert_int_eq(clattn_context_create(&opt, &c2), CLATTN_SUCCESS);
        d.algorithm = CLATTN_ALGORITHM_FUSED;
        ck_assert_int_eq(clattn_attention(c2, &d, &x, &x, &x, &o), CLATTN_SUCCESS);
        assert_z(out, mode == CLATTN_BINARY_CACHE_AUTO ? "binary cache auto" : "binary cache off");
        const bool own = runtime_caches_builds(c2);
        printf("binary cache %s on this runtime (%s its own build cache)\n",
               mode == CLATTN_BINARY_CACHE_AUTO ? "AUTO" : "OFF", own ? "with" : "without");
        clattn_context_release(c2);
        ck_assert_int_eq(count_bin_files(dir2, 0), mode == CLATTN_BINARY_CACHE_AUTO && !own);
        remove_dir(dir2);
    }
    opt.binary_cache = CLATTN_BINARY_CACHE_ON;
    char off_dir[] = "/tmp/clattn_cache_off_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(off_dir));
    ck_assert_int_eq(setenv("CLATTN_CACHE_DIR", off_dir, 1), 0); /* the option wins */
    opt.cache_dir = "off";
    clattn_context *c3;
    ck_assert_int_eq(clattn_context_create(&opt, &c3), CLATTN_SUCCESS);
    ck_assert_int_eq(clattn_attention(c3, &d, &x, &x, &x, &o), CLATTN_SUCCESS);
    clattn_context_release(c3);
    ck_assert_int_eq(count_bin_files(off_dir, 0), 0);
    unsetenv("CLATTN_CACHE_DIR");
    rmdir(off_dir);
}
END_TEST

/* After every kind of error above, the same context still computes right answers. */
START_TEST(context_usable_after_errors)
{
    clattn_attention_desc d = unscaled();
    clattn_tensor x = clattn_tensor_host(X, 1, 1, 6, 3);
    float out[18];
    clattn_tensor o = clattn_tensor_host(out, 1, 1, 6, 3);
    clattn_tensor bad = x;
    bad.shape[3] = 2;
    ck_assert_int_ne(clattn_attention(ctx, &d, &bad, &x, &x, &o), CLATTN_SUCCESS);
    for (int alg = CLATTN_ALGORITHM_AUTO; alg <= CLATTN_ALGORITHM_FUSED; alg++) {
        d.algorithm = (clattn_algorithm)alg;
        ck_assert_int_eq(clattn_attention(ctx, &d, &x, &x, &x, &o), CLATTN_SUCCESS);
        ck_assert_str_eq(clattn_last_error_message(ctx), "");
        assert_z(out, "after errors");
    }
}
END_TEST

/* The tuning API: an override wins over the built-in choice and is removed again; the
 * stored tuning can be switched off on a context; a stored entry lands in the file and is
 * used by a later context; bad values are refused. */
/* CLATTN_BLOCKING: exactly three or four plain decimal values in range, or the whole
 * string is ignored (the built-in blocking applies) */
START_TEST(blocking_environment_parsing)
{
    static const struct {
        const char *env;
        int applied;
    } cases[] = {
        {"3,8,32", 1},     {"3,8,32,2", 1},       {"3,8,32abc", 0},
        {"3,8,32,2,9", 0}, {"3,8,4294967328", 0}, {"4294967299,8,32", 0},
        {"-3,8,32", 0},    {"3,8,32,3", 0},       {"3,8", 0},
        {"", 0},           {" 3,8,32", 0},        {"3,,8,32", 0},
    };
    const int64_t n = 256;
    float *q = calloc((size_t)(n * 16), sizeof(float));
    clattn_tensor tq = clattn_tensor_host(q, 1, 1, n, 16);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.algorithm = CLATTN_ALGORITHM_FUSED;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        setenv("CLATTN_BLOCKING", cases[c].env, 1);
        clattn_context *ctx = NULL;
        ck_assert_int_eq(clattn_context_create(NULL, &ctx), CLATTN_SUCCESS);
        clattn_plan p;
        ck_assert_int_eq(clattn_attention_plan(ctx, &d, &tq, &tq, &tq, &tq, &p), CLATTN_SUCCESS);
        const int got = p.queries_per_work_item == 3 && p.work_group_size == 8 && p.tile_kv == 32;
        ck_assert_msg(got == cases[c].applied,
                      "CLATTN_BLOCKING=\"%s\": %s (plan RQ %zu, WG %zu, TILE_KV %zu)", cases[c].env,
                      cases[c].applied ? "not applied" : "applied", p.queries_per_work_item,
                      p.work_group_size, p.tile_kv);
        clattn_context_release(ctx);
    }
    unsetenv("CLATTN_BLOCKING");
    free(q);
}
END_TEST

START_TEST(tuning_api)
{
    char dir[] = "/tmp/clattn_tuneapi_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    clattn_context_options opt = {0};
    opt.cache_dir = dir;
    clattn_context *c2;
    ck_assert_int_eq(clattn_context_create(&opt, &c2), CLATTN_SUCCESS);
    const int64_t n = 256;
    float *q = calloc((size_t)(n * 16), sizeof(float)),
          *o = calloc((size_t)(n * 16), sizeof(float));
    clattn_tensor tq = clattn_tensor_host(q, 1, 1, n, 16), to = clattn_tensor_host(o, 1, 1, n, 16);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.algorithm = CLATTN_ALGORITHM_FUSED;
    clattn_plan builtin, p;
    ck_assert_int_eq(clattn_attention_plan(c2, &d, &tq, &tq, &tq, &to, &builtin), CLATTN_SUCCESS);
    /* an override for exactly these dims, then one for any dims */
    const clattn_blocking b = {2, 4, 32}, other = {1, 2, 16};
    ck_assert_int_eq(clattn_context_set_blocking(c2, CLATTN_KERNEL_FUSED, 16, 16, &b),
                     CLATTN_SUCCESS);
    ck_assert_int_eq(clattn_attention_plan(c2, &d, &tq, &tq, &tq, &to, &p), CLATTN_SUCCESS);
    ck_assert_uint_eq(p.queries_per_work_item, 2);
    ck_assert_uint_eq(p.work_group_size, 4);
    ck_assert_uint_eq(p.tile_kv, 32);
    ck_assert_int_eq(clattn_attention(c2, &d, &tq, &tq, &tq, &to), CLATTN_SUCCESS);
    ck_assert_int_eq(clattn_context_set_blocking(c2, CLATTN_KERNEL_FUSED, 0, 0, &other),
                     CLATTN_SUCCESS);
    ck_assert_int_eq(clattn_attention_plan(c2, &d, &tq, &tq, &tq, &to, &p), CLATTN_SUCCESS);
    ck_assert_uint_eq(p.tile_kv, 16); /* the later override of the kernel wins */
    ck_assert_int_eq(clattn_context_set_blocking(c2, CLATTN_KERNEL_FUSED, 0, 0, NULL),
                     CLATTN_SUCCESS);
    ck_assert_int_eq(clattn_attention_plan(c2, &d, &tq, &tq, &tq, &to, &p), CLATTN_SUCCESS);
    ck_assert_uint_eq(p.tile_kv, 32); /* back to the (16, 16) override */
    ck_assert_int_eq(clattn_context_set_blocking(c2, CLATTN_KERNEL_FUSED, 16, 16, NULL),
                     CLATTN_SUCCESS);
    ck_assert_int_eq(clattn_attention_plan(c2, &d, &tq, &tq, &tq, &to, &p), CLATTN_SUCCESS);
    ck_assert_uint_eq(p.queries_per_work_item, builtin.queries_per_work_item);
    ck_assert_uint_eq(p.work_group_size, builtin.work_group_size);
    ck_assert_uint_eq(p.tile_kv, builtin.tile_kv);
    /* bad values */
    const clattn_blocking bad[3] = {{0, 4, 32}, {2, 4, 24}, {2, 2000, 32}};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(clattn_context_set_blocking(c2, CLATTN_KERNEL_FUSED, 0, 0, &bad[i]),
                         CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_context_set_blocking(c2, (clattn_kernel)7, 0, 0, &b),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_context_set_blocking(NULL, CLATTN_KERNEL_FUSED, 0, 0, &b),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    /* a tile whose local memory the device does not have: UNSUPPORTED naming the limit */
    clattn_tensor wide = clattn_tensor_host(q, 1, 1, 4, 1024);
    clattn_tensor wide_o = clattn_tensor_host(o, 1, 1, 4, 1024);
    const clattn_blocking huge = {1, 1, 512};
    ck_assert_int_eq(clattn_context_set_blocking(c2, CLATTN_KERNEL_SCORES, 0, 0, &huge),
                     CLATTN_SUCCESS);
    cl_ulong local = 0;
    cl_device_id dev;
    clattn_context_get_cl(c2, NULL, &dev, NULL);
    clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    clattn_attention_desc du = clattn_attention_desc_default();
    du.algorithm = CLATTN_ALGORITHM_UNFUSED;
    if (local < 512u * 1024u * 4u) { /* 512 keys of 1024 floats */
        ck_assert_int_eq(clattn_attention_plan(c2, &du, &wide, &wide, &wide, &wide_o, &p),
                         CLATTN_ERROR_UNSUPPORTED);
        ck_assert_ptr_nonnull(strstr(clattn_last_error_message(c2), "local memory"));
    }
    ck_assert_int_eq(clattn_context_set_blocking(c2, CLATTN_KERNEL_SCORES, 0, 0, NULL),
                     CLATTN_SUCCESS);
    /* store: the file gets the line, a later context uses it, use_stored_tuning(0) not */
    ck_assert_int_eq(clattn_context_store_blocking(c2, CLATTN_KERNEL_FUSED, 16, 16, &b, "a\nnote"),
                     CLATTN_SUCCESS);
    ck_assert_int_eq(clattn_context_store_blocking(c2, CLATTN_KERNEL_FUSED, 16, 16, &b, NULL),
                     CLATTN_SUCCESS); /* replaces, does not add */
    FILE *f = fopen(clattn_context_tuning_file(c2), "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    int entries = 0;
    while (fgets(line, sizeof line, f))
        entries += strncmp(line, "fused 16 16 2 4 32", 18) == 0;
    fclose(f);
    ck_assert_int_eq(entries, 1);
    clattn_context_release(c2);
    ck_assert_int_eq(clattn_context_create(&opt, &c2), CLATTN_SUCCESS);
    ck_assert_int_eq(clattn_attention_plan(c2, &d, &tq, &tq, &tq, &to, &p), CLATTN_SUCCESS);
    ck_assert_uint_eq(p.work_group_size, 4);
    ck_assert_int_eq(clattn_context_use_stored_tuning(c2, 0), CLATTN_SUCCESS);
    ck_assert_int_eq(clattn_attention_plan(c2, &d, &tq, &tq, &tq, &to, &p), CLATTN_SUCCESS);
    ck_assert_uint_eq(p.work_group_size, builtin.work_group_size);
    clattn_context_release(c2);
    /* no cache, no file: storing is refused */
    opt.cache_dir = "off";
    ck_assert_int_eq(clattn_context_create(&opt, &c2), CLATTN_SUCCESS);
    ck_assert_int_eq(clattn_context_store_blocking(c2, CLATTN_KERNEL_FUSED, 16, 16, &b, NULL),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    clattn_context_release(c2);
    free(q);
    free(o);
    remove_dir(dir);
}
END_TEST

/* What an integrator hit (issue: integrator round): a stride of 0 on a dimension of
 * extent > 1 is refused unless asked for; a cl_mem or event of another cl_context is
 * refused; shape errors come before "buffer too small"; create_from_cl takes options. */
START_TEST(integrator_contracts)
{
    clattn_attention_desc d = unscaled();
    /* Q over two heads with stride 0 on heads: refused, then explicit */
    clattn_tensor q2 = clattn_tensor_host(X, 1, 2, 6, 3);
    q2.strides[1] = 0;
    q2.strides[2] = 3;
    q2.strides[3] = 1;
    clattn_tensor x = clattn_tensor_host(X, 1, 1, 6, 3);
    float out[64];
    fill(out, 64, -7.0f);
    clattn_tensor o2 = clattn_tensor_host(out, 1, 2, 6, 3);
    ck_assert_int_eq(clattn_attention(ctx, &d, &q2, &x, &x, &o2), CLATTN_ERROR_INVALID_LAYOUT);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(ctx), "Q has stride 0 on its heads"));
    assert_all(out, 64, -7.0f);
    clattn_tensor k2 = q2; /* K and V over two KV heads the same way */
    ck_assert_int_eq(clattn_attention(ctx, &d, &x, &k2, &k2, &o2), CLATTN_ERROR_INVALID_LAYOUT);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(ctx), "K has stride 0 on its heads"));
    q2.broadcast = CLATTN_BROADCAST(1);
    ck_assert_int_eq(clattn_attention(ctx, &d, &q2, &x, &x, &o2), CLATTN_SUCCESS);
    assert_z(out, "broadcast head 0");
    assert_z(out + 18, "broadcast head 1");

    /* another cl_context on the same device */
    cl_context mine;
    cl_device_id dev;
    clattn_context_get_cl(ctx, &mine, &dev, NULL);
    cl_int err;
    cl_context other = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    cl_mem xb = make_buffer(mine, X, sizeof X), ob = make_buffer(mine, NULL, sizeof X);
    cl_mem foreign = make_buffer(other, X, sizeof X);
    clattn_tensor bx = clattn_tensor_buffer(xb, 1, 1, 6, 3);
    clattn_tensor bo = clattn_tensor_buffer(ob, 1, 1, 6, 3);
    clattn_tensor bf = clattn_tensor_buffer(foreign, 1, 1, 6, 3);
    ck_assert_int_eq(clattn_attention_enqueue(ctx, &d, &bf, &bx, &bx, &bo, 0, NULL, NULL),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(ctx), "another cl_context"));
    cl_event foreign_event = clCreateUserEvent(other, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    ck_assert_int_eq(clattn_attention_enqueue(ctx, &d, &bx, &bx, &bx, &bo, 1, &foreign_event, NULL),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(ctx), "wait[0] belongs to another"));
    clSetUserEventStatus(foreign_event, CL_COMPLETE);
    clReleaseEvent(foreign_event);
    /* an LSE of the wrong shape on a buffer too small for it: the shape error first */
    cl_mem small = make_buffer(mine, NULL, 4);
    clattn_tensor bl = clattn_tensor_buffer(small, 1, 1, 5, 1);
    d.lse = &bl;
    ck_assert_int_eq(clattn_attention_enqueue(ctx, &d, &bx, &bx, &bx, &bo, 0, NULL, NULL),
                     CLATTN_ERROR_INVALID_SHAPE);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(ctx), "lse is [1, 1, 5, 1]"));
    bl.shape[2] = 6; /* the right shape: now the size is what is wrong */
    ck_assert_int_eq(clattn_attention_enqueue(ctx, &d, &bx, &bx, &bx, &bo, 0, NULL, NULL),
                     CLATTN_ERROR_BUFFER_TOO_SMALL);
    d.lse = NULL;
    clReleaseMemObject(small);
    clReleaseMemObject(xb);
    clReleaseMemObject(ob);
    clReleaseMemObject(foreign);

    /* create_from_cl with options: the cache folder is honoured */
    char dir[] = "/tmp/clattn_fromcl_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    clattn_context_options opt = {0};
    opt.cache_dir = dir;
    cl_command_queue queue = clCreateCommandQueue(other, dev, 0, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    clattn_context *app;
    ck_assert_int_eq(clattn_context_create_from_cl_with_options(&opt, other, dev, queue, &app),
                     CLATTN_SUCCESS);
    const char *path = clattn_context_tuning_file(app);
    ck_assert_ptr_nonnull(path);
    ck_assert_msg(strncmp(path, dir, strlen(dir)) == 0, "tuning file %s outside %s", path, dir);
    clattn_context_release(app);
    clReleaseCommandQueue(queue);
    clReleaseContext(other);
    remove_dir(dir);
}
END_TEST

int main(void)
{
    if (clattn_context_create(NULL, &ctx) != CLATTN_SUCCESS) {
        fprintf(stderr, "test_api: no context: %s\n", clattn_last_error_message(NULL));
        return 1;
    }
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("api");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, version_and_status_strings);
    tcase_add_test(tc, null_and_enum_arguments);
    tcase_add_test(tc, shape_mismatches_name_the_numbers);
    tcase_add_test(tc, layouts_and_overflow);
    tcase_add_test(tc, overlapping_outputs_refused);
    tcase_add_test(tc, both_algorithms_return_weights);
    tcase_add_test(tc, plan_explains_choice);
    tcase_add_test(tc, plan_falls_back_to_fused_for_huge_scores);
    tcase_add_test(tc, empty_problems);
    tcase_add_test(tc, enqueue_api_with_events);
    tcase_add_test(tc, device_selection);
    tcase_add_test(tc, build_failure_reports_log);
    tcase_add_test(tc, program_binary_cache);
    tcase_add_test(tc, stored_tuning_is_used);
    tcase_add_test(tc, context_usable_after_errors);
    tcase_add_test(tc, tuning_api);
    tcase_add_test(tc, blocking_environment_parsing);
    tcase_add_test(tc, integrator_contracts);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    clattn_context_release(ctx);
    return failed ? 1 : 0;
}
