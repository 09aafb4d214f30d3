/* Several devices (include/clattn.h "Several devices"): one call split across two
 * sub-devices of the default device (clCreateSubDevices, PoCL's CPU device has 2
 * compute units here) equals the same call on one device within 1e-6, by (batch, KV
 * head) and by keys, for every built-in mask, grouped-query heads, odd sizes, the
 * desc's extras (lengths, window, ALiBi, mask tensor, LSE, weights), uneven weights;
 * fully masked key blocks enqueue nothing; errors come with clear statuses.
 *
 * When the default device cannot be partitioned (e.g. a single-compute-unit device),
 * the tests run on two contexts of the same device (clattn_multi_create with the same
 * spec twice) instead, and say so.
 * Seeds: printed; CLATTN_TEST_SEED overrides the base seed. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static clattn_multi *g_multi;

static clattn_multi *multi(void)
{
    if (g_multi)
        return g_multi;
    clattn_status st = clattn_multi_create_sub_devices(NULL, 2, NULL, &g_multi);
    if (st == CLATTN_ERROR_UNSUPPORTED) {
        printf("test_multi: no sub-devices (%s); using two contexts on the same device\n",
               clattn_last_error_message(NULL));
        cl_device_id dev;
        clattn_context_get_cl(tu_ctx(), NULL, &dev, NULL);
        char name[256] = "";
        clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
        const char *specs[2] = {name, name};
        st = clattn_multi_create(specs, 2, &g_multi);
    } else if (st == CLATTN_SUCCESS) {
        cl_device_id d0, d1;
        clattn_context_get_cl(clattn_multi_context(g_multi, 0), NULL, &d0, NULL);
        clattn_context_get_cl(clattn_multi_context(g_multi, 1), NULL, &d1, NULL);
        cl_uint cu0 = 0, cu1 = 0;
        clGetDeviceInfo(d0, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu0, &cu0, NULL);
        clGetDeviceInfo(d1, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu1, &cu1, NULL);
        printf("test_multi: 2 sub-devices with %u and %u compute units\n", cu0, cu1);
    }
    ck_assert_msg(st == CLATTN_SUCCESS, "multi-device object: %s: %s", clattn_status_string(st),
                  clattn_last_error_message(NULL));
    ck_assert_uint_eq(clattn_multi_device_count(g_multi), 2);
    return g_multi;
}

#define ASSERT_MULTI_OK(status, ...)                                                               \
    do {                                                                                           \
        clattn_status st_ = (status);                                                              \
        if (st_ != CLATTN_SUCCESS) {                                                               \
            char what_[512];                                                                       \
            snprintf(what_, sizeof what_, __VA_ARGS__);                                            \
            ck_abort_msg("%s: %s: %s", what_, clattn_status_string(st_),                           \
                         clattn_multi_last_error_message(multi()));                                \
        }                                                                                          \
    } while (0)

static const char *split_name(clattn_split s)
{
    return s == CLATTN_SPLIT_HEADS ? "heads" : "keys";
}

/* Runs desc on one device and split across the two; O and LSE must agree within 1e-6
 * (and the weights, when `with_weights`). Returns the parts of the split call. */
static void compare(const tu_problem *p, const clattn_attention_desc *desc, clattn_split split,
                    bool with_weights, clattn_multi_part parts[2], const char *label)
{
    const size_t n_o = (size_t)(p->b * p->h_q * p->n_q * p->d_v);
    const size_t rows = (size_t)(p->b * p->h_q * p->n_q);
    const size_t n_w = rows * (size_t)p->n_kv;
    float *o1 = tu_alloc(n_o, 12345.0f), *l1 = tu_alloc(rows, 12345.0f);
    float *o2 = tu_alloc(n_o + 8, 12345.0f), *l2 = tu_alloc(rows + 8, 12345.0f);
    float *w1 = with_weights ? tu_alloc(n_w, 12345.0f) : NULL;
    float *w2 = with_weights ? tu_alloc(n_w + 8, 12345.0f) : NULL;
    clattn_tensor to1 = tu_problem_o(p, o1), to2 = tu_problem_o(p, o2);
    clattn_tensor tl1 = clattn_tensor_host(l1, p->b, p->h_q, p->n_q, 1);
    clattn_tensor tl2 = clattn_tensor_host(l2, p->b, p->h_q, p->n_q, 1);
    clattn_tensor tw1 = clattn_tensor_host(w1, p->b, p->h_q, p->n_q, p->n_kv);
    clattn_tensor tw2 = clattn_tensor_host(w2, p->b, p->h_q, p->n_q, p->n_kv);
    clattn_attention_desc d1 = *desc, d2 = *desc;
    d1.lse = &tl1;
    d2.lse = &tl2;
    d1.weights = with_weights ? &tw1 : NULL;
    d2.weights = with_weights ? &tw2 : NULL;
    TU_ASSERT_OK(clattn_attention(tu_ctx(), &d1, &p->tq, &p->tk, &p->tv, &to1), "one device: %s",
                 label);
    ASSERT_MULTI_OK(
        clattn_multi_attention(multi(), split, &d2, &p->tq, &p->tk, &p->tv, &to2, parts),
        "split by %s: %s", split_name(split), label);
    const tu_tol tol = {1e-6, 1e-6};
    char what[600];
    snprintf(what, sizeof what, "split by %s, %s: O", split_name(split), label);
    TU_ASSERT_CLOSE(what, &to2, NULL, o1, tol);
    snprintf(what, sizeof what, "split by %s, %s: LSE", split_name(split), label);
    TU_ASSERT_CLOSE(what, &tl2, NULL, l1, tol);
    if (with_weights) {
        snprintf(what, sizeof what, "split by %s, %s: weights", split_name(split), label);
        TU_ASSERT_CLOSE(what, &tw2, NULL, w1, tol);
        tu_assert_untouched("weights canary", w2, n_w, n_w + 8, 12345.0f);
    }
    tu_assert_untouched("O canary", o2, n_o, n_o + 8, 12345.0f);
    tu_assert_untouched("LSE canary", l2, rows, rows + 8, 12345.0f);
    free(o1);
    free(l1);
    free(o2);
    free(l2);
    free(w1);
    free(w2);
}

static const clattn_mask masks[4] = {CLATTN_MASK_NONE, CLATTN_MASK_CAUSAL_TOP_LEFT,
                                     CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, CLATTN_MASK_NO_SELF};

/* ---- split by (batch, KV head) -------------------------------------------------------- */

START_TEST(heads_every_mask_gqa_odd_sizes)
{
    const uint32_t s = tu_seed() ^ 0x51u;
    /* 3 batch entries × 3 KV heads (2 query heads each): 9 units, cut at 5 for equal
     * weights, so device 0 gets entry 0 and half of entry 1 */
    tu_problem p;
    tu_problem_init(&p, 3, 6, 3, 17, 23, 13, 11, s, s + 1, s + 2, 0);
    ASSERT_MULTI_OK(clattn_multi_set_weights(multi(), NULL), "equal weights");
    for (int m = 0; m < 4; m++)
        for (int a = 0; a < 2; a++) {
            clattn_attention_desc desc = clattn_attention_desc_default();
            desc.mask = masks[m];
            desc.algorithm = tu_algorithms[a];
            clattn_multi_part parts[2];
            char label[128];
            snprintf(label, sizeof label, "%s, %s", tu_mask_name(masks[m]),
                     tu_algorithm_name(tu_algorithms[a]));
            compare(&p, &desc, CLATTN_SPLIT_HEADS, a == 1, parts, label);
            ck_assert_int_eq(parts[0].begin, 0);
            ck_assert_int_eq(parts[0].end, 5);
            ck_assert_int_eq(parts[1].begin, 5);
            ck_assert_int_eq(parts[1].end, 9);
            ck_assert_int_eq(parts[0].calls, 2); /* entry 0, then heads 0-1 of entry 1 */
            ck_assert_int_eq(parts[1].calls, 2); /* head 2 of entry 1, then entry 2 */
            ck_assert(parts[0].ran && parts[1].ran);
        }
    tu_problem_free(&p);
}
END_TEST

START_TEST(heads_uneven_weights_and_extras)
{
    const uint32_t s = tu_seed() ^ 0x52u;
    tu_problem p;
    tu_problem_init(&p, 2, 4, 2, 9, 31, 8, 5, s, s + 1, s + 2, 0);
    const double w[2][2] = {{0.1, 0.9}, {1.0, 0.0}};
    int32_t kv_lens[2] = {31, 12}, q_lens[2] = {9, 4};
    float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
    const float sinks[4] = {0.5f, -INFINITY, 2.0f, -1.0f};
    uint8_t keep[4 * 9 * 31];
    for (size_t i = 0; i < sizeof keep; i++)
        keep[i] = (uint8_t)(tu_gen(s + 3, (uint32_t)i) > -0.7f);
    clattn_tensor mt = clattn_tensor_host(keep, 1, 4, 9, 31); /* broadcast over batch */
    mt.dtype = CLATTN_BOOL;
    for (int c = 0; c < 2; c++) {
        ASSERT_MULTI_OK(clattn_multi_set_weights(multi(), w[c]), "weights");
        for (int m = 0; m < 4; m++) {
            clattn_attention_desc desc = clattn_attention_desc_default();
            desc.mask = masks[m];
            desc.kv_lens = kv_lens;
            desc.q_lens = q_lens;
            desc.alibi_slopes = slopes;
            desc.window = 1;
            desc.window_left = 7;
            desc.window_right = -1;
            desc.mask_tensor = &mt;
            desc.q_start = 3;
            desc.sinks = sinks;
            clattn_multi_part parts[2];
            char label[128];
            snprintf(label, sizeof label, "weights %g/%g, %s, lengths+alibi+window+mask+sinks",
                     w[c][0], w[c][1], tu_mask_name(masks[m]));
            compare(&p, &desc, CLATTN_SPLIT_HEADS, true, parts, label);
            if (c == 1)
                ck_assert_msg(!parts[1].ran && parts[1].calls == 0, "weight 0 must get no work");
        }
    }
    ASSERT_MULTI_OK(clattn_multi_set_weights(multi(), NULL), "equal weights");
    tu_problem_free(&p);
}
END_TEST

/* ---- split by keys -------------------------------------------------------------------- */

START_TEST(keys_every_mask_gqa_odd_sizes)
{
    const uint32_t s = tu_seed() ^ 0x53u;
    tu_problem p;
    tu_problem_init(&p, 2, 4, 2, 19, 53, 24, 7, s, s + 1, s + 2, 0);
    ASSERT_MULTI_OK(clattn_multi_set_weights(multi(), NULL), "equal weights");
    const int64_t q_starts[3] = {0, 34, 50}; /* 34: the queries are the last n_q keys */
    for (int m = 0; m < 4; m++)
        for (int qs = 0; qs < 3; qs++)
            for (int a = 0; a < 2; a++) {
                clattn_attention_desc desc = clattn_attention_desc_default();
                desc.mask = masks[m];
                desc.algorithm = tu_algorithms[a];
                desc.q_start = q_starts[qs];
                desc.kv_start = qs == 2 ? 9 : 0;
                clattn_multi_part parts[2];
                char label[160];
                snprintf(label, sizeof label, "%s, q_start %lld, kv_start %lld, %s",
                         tu_mask_name(masks[m]), (long long)desc.q_start, (long long)desc.kv_start,
                         tu_algorithm_name(tu_algorithms[a]));
                compare(&p, &desc, CLATTN_SPLIT_KEYS, false, parts, label);
                ck_assert_int_eq(parts[0].end, 27); /* round(53 / 2) */
                ck_assert_int_eq(parts[1].begin, 27);
                ck_assert_int_eq(parts[1].end, 53);
            }
    tu_problem_free(&p);
}
END_TEST

START_TEST(keys_fully_masked_block_is_skipped)
{
    const uint32_t s = tu_seed() ^ 0x54u;
    tu_problem p;
    /* causal top-left, 8 queries at positions 0..7: keys 8..39 are seen by nobody, so
     * the second device's block [20, 40) runs nothing */
    tu_problem_init(&p, 1, 2, 1, 8, 40, 16, 16, s, s + 1, s + 2, 0);
    ASSERT_MULTI_OK(clattn_multi_set_weights(multi(), NULL), "equal weights");
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.mask = CLATTN_MASK_CAUSAL_TOP_LEFT;
    clattn_multi_part parts[2];
    compare(&p, &desc, CLATTN_SPLIT_KEYS, false, parts, "causal, right block masked");
    ck_assert_msg(parts[0].ran && parts[0].calls == 1, "device 0 must run");
    ck_assert_msg(!parts[1].ran && parts[1].calls == 0, "device 1's block is fully masked");
    /* a window that sees only the last keys: the left block is skipped instead */
    desc.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    desc.window = 1;
    desc.window_left = 3;
    desc.window_right = 0;
    compare(&p, &desc, CLATTN_SPLIT_KEYS, false, parts, "bottom-right, window 3");
    ck_assert_msg(!parts[0].ran && parts[1].ran, "device 0's block is fully masked");
    /* every key masked for every row (q_lens 0): one device still writes the zero rows */
    int32_t q_lens[1] = {0};
    desc.q_lens = q_lens;
    desc.mask = CLATTN_MASK_NONE;
    desc.window = 0;
    compare(&p, &desc, CLATTN_SPLIT_KEYS, false, parts, "q_lens 0");
    ck_assert_int_eq(parts[0].ran + parts[1].ran, 1);
    tu_problem_free(&p);
}
END_TEST

START_TEST(keys_decode_and_extras)
{
    const uint32_t s = tu_seed() ^ 0x55u;
    /* one new token against a long cache (decode), then lengths, ALiBi, window, softcap
     * and a float mask, with uneven weights */
    tu_problem p;
    tu_problem_init(&p, 2, 8, 2, 1, 301, 32, 32, s, s + 1, s + 2, 0);
    const double w[2] = {0.3, 0.7};
    ASSERT_MULTI_OK(clattn_multi_set_weights(multi(), w), "weights");
    clattn_multi_part parts[2];
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    compare(&p, &desc, CLATTN_SPLIT_KEYS, false, parts, "decode, bottom-right");
    ck_assert_int_eq(parts[0].end, 90); /* round(301 · 0.3) */
    tu_problem_free(&p);

    tu_problem_init(&p, 2, 4, 1, 13, 47, 9, 6, s + 5, s + 6, s + 7, 0);
    int32_t kv_lens[2] = {40, 19};
    float slopes[4] = {0.3f, 0.2f, 0.1f, 0.05f};
    const float sinks[4] = {1.0f, -2.0f, -INFINITY, 0.25f};
    float *add = tu_alloc((size_t)(2 * 13 * 47), 0.0f);
    for (size_t i = 0; i < (size_t)(2 * 13 * 47); i++)
        add[i] = tu_gen(s + 8, (uint32_t)i) < -0.8f ? -INFINITY : tu_gen(s + 9, (uint32_t)i);
    clattn_tensor mt = clattn_tensor_host(add, 2, 1, 13, 47); /* broadcast over heads */
    for (int m = 0; m < 4; m++) {
        if (masks[m] == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT)
            continue; /* with kv_lens: UNSUPPORTED, below */
        desc = clattn_attention_desc_default();
        desc.mask = masks[m];
        desc.kv_lens = kv_lens;
        desc.alibi_slopes = slopes;
        desc.window = 1;
        desc.window_left = 20;
        desc.window_right = 2;
        desc.softcap = 5.0f;
        desc.mask_tensor = &mt;
        desc.q_start = 30;
        desc.kv_start = 2;
        desc.sinks = m % 2 ? sinks : NULL; /* the merge adds them once */
        char label[128];
        snprintf(label, sizeof label, "%s, lengths+alibi+window+softcap+float mask%s",
                 tu_mask_name(masks[m]), desc.sinks ? "+sinks" : "");
        compare(&p, &desc, CLATTN_SPLIT_KEYS, false, parts, label);
    }
    free(add);
    ASSERT_MULTI_OK(clattn_multi_set_weights(multi(), NULL), "equal weights");
    tu_problem_free(&p);
}
END_TEST

START_TEST(two_contexts_on_one_device)
{
    /* the fallback configuration: the same device named twice */
    cl_device_id dev;
    clattn_context_get_cl(tu_ctx(), NULL, &dev, NULL);
    char name[256] = "";
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    const char *specs[2] = {name, name};
    clattn_multi *m2 = NULL;
    clattn_status st = clattn_multi_create(specs, 2, &m2);
    ck_assert_msg(st == CLATTN_SUCCESS, "%s", clattn_last_error_message(NULL));
    const uint32_t s = tu_seed() ^ 0x56u;
    tu_problem p;
    tu_problem_init(&p, 1, 3, 3, 11, 29, 8, 8, s, s + 1, s + 2, 0);
    const size_t n_o = (size_t)(3 * 11 * 8);
    float *o1 = tu_alloc(n_o, 0.0f), *o2 = tu_alloc(n_o, 0.0f);
    clattn_tensor t1 = tu_problem_o(&p, o1), t2 = tu_problem_o(&p, o2);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    TU_ASSERT_OK(clattn_attention(tu_ctx(), &desc, &p.tq, &p.tk, &p.tv, &t1), "one device");
    for (int split = 0; split < 2; split++) {
        st = clattn_multi_attention(m2, (clattn_split)split, &desc, &p.tq, &p.tk, &p.tv, &t2, NULL);
        ck_assert_msg(st == CLATTN_SUCCESS, "%s", clattn_multi_last_error_message(m2));
        TU_ASSERT_CLOSE("two contexts, one device", &t2, NULL, o1, ((tu_tol){1e-6, 1e-6}));
    }
    double secs[2], w[2];
    st = clattn_multi_calibrate(m2, 1, secs);
    ck_assert_msg(st == CLATTN_SUCCESS, "%s", clattn_multi_last_error_message(m2));
    ck_assert(clattn_multi_get_weights(m2, w) == CLATTN_SUCCESS);
    ck_assert(secs[0] > 0 && secs[1] > 0);
    ck_assert(fabs(w[0] + w[1] - 1.0) < 1e-12 && w[0] > 0 && w[1] > 0);
    printf("test_multi: calibration %.4f s and %.4f s per call, weights %.3f %.3f\n", secs[0],
           secs[1], w[0], w[1]);
    free(o1);
    free(o2);
    tu_problem_free(&p);
    clattn_multi_release(m2);
}
END_TEST

START_TEST(strided_views_and_in_place)
{
    /* O written in place over Q (same storage), Q/K/V strided (heads outermost) */
    const uint32_t s = tu_seed() ^ 0x57u;
    const int64_t b = 2, h = 3, n = 10, d = 6;
    const size_t count = (size_t)(b * h * n * d);
    float *x = tu_alloc(count, 0.0f), *ref = tu_alloc(count, 0.0f);
    tu_fill_gen(x, count, s, 1.0f);
    const int64_t shape[4] = {b, h, n, d}, strides[4] = {n * d, b * n * d, d, 1};
    clattn_tensor tx = tu_view(x, shape, strides, 0);
    clattn_tensor tr = clattn_tensor_host(ref, b, h, n, d);
    for (int split = 0; split < 2; split++) {
        tu_fill_gen(x, count, s, 1.0f);
        clattn_attention_desc desc = clattn_attention_desc_default();
        desc.mask = CLATTN_MASK_NO_SELF;
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &desc, &tx, &tx, &tx, &tr), "one device");
        ASSERT_MULTI_OK(
            clattn_multi_attention(multi(), (clattn_split)split, &desc, &tx, &tx, &tx, &tx, NULL),
            "in place, split %d", split);
        TU_ASSERT_CLOSE("in place, strided", &tx, NULL, ref, ((tu_tol){1e-6, 1e-6}));
    }
    free(x);
    free(ref);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------------ */

START_TEST(errors_have_clear_statuses)
{
    clattn_multi *m = (clattn_multi *)&m; /* must be reset to NULL */
    const char *none[1] = {NULL};
    ck_assert_int_eq(clattn_multi_create(none, 0, &m), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(clattn_last_error_message(NULL), "empty"), "%s",
                  clattn_last_error_message(NULL));
    ck_assert_int_eq(clattn_multi_create(NULL, 2, &m), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_multi_create(none, 1, &m), CLATTN_ERROR_INVALID_ARGUMENT);
    const char *nodev[2] = {"0:0", "no such device xyz"};
    ck_assert_int_eq(clattn_multi_create(nodev, 2, &m), CLATTN_ERROR_NO_DEVICE);
    ck_assert_msg(strstr(clattn_last_error_message(NULL), "devices[1]"), "%s",
                  clattn_last_error_message(NULL));
    ck_assert_int_eq(clattn_multi_create(nodev, 1, NULL), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_multi_create_sub_devices(NULL, 0, NULL, &m),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    const unsigned zero[2] = {1, 0}, many[2] = {1000, 1000};
    ck_assert_int_eq(clattn_multi_create_sub_devices(NULL, 2, zero, &m),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_multi_create_sub_devices(NULL, 2, many, &m), CLATTN_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(clattn_last_error_message(NULL), "cannot be partitioned"), "%s",
                  clattn_last_error_message(NULL));
    ck_assert_ptr_null(m);
    clattn_multi_release(NULL);
    ck_assert_uint_eq(clattn_multi_device_count(NULL), 0);
    ck_assert_ptr_null(clattn_multi_context(multi(), 2));

    /* weights */
    const double bad_w[2][2] = {{-1.0, 1.0}, {0.0, 0.0}};
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(clattn_multi_set_weights(multi(), bad_w[i]),
                         CLATTN_ERROR_INVALID_ARGUMENT);
    const double nan_w[2] = {NAN, 1.0};
    ck_assert_int_eq(clattn_multi_set_weights(multi(), nan_w), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(clattn_multi_last_error_message(multi()), "weights[0]"), "%s",
                  clattn_multi_last_error_message(multi()));

    /* shapes: K has 5 rows, V has 6 */
    float q[2 * 4], k[5 * 4], v[6 * 4], o[2 * 4];
    tu_fill_value(q, 8, 0.5f);
    tu_fill_value(k, 20, 0.5f);
    tu_fill_value(v, 24, 0.5f);
    tu_fill_value(o, 8, -7.0f);
    clattn_tensor tq = clattn_tensor_host(q, 1, 1, 2, 4), tk = clattn_tensor_host(k, 1, 1, 5, 4);
    clattn_tensor tv = clattn_tensor_host(v, 1, 1, 6, 4), to = clattn_tensor_host(o, 1, 1, 2, 4);
    clattn_attention_desc desc = clattn_attention_desc_default();
    for (int split = 0; split < 2; split++) {
        ck_assert_int_eq(
            clattn_multi_attention(multi(), (clattn_split)split, &desc, &tq, &tk, &tv, &to, NULL),
            CLATTN_ERROR_INVALID_SHAPE);
        ck_assert_msg(strstr(clattn_multi_last_error_message(multi()), "V"), "%s",
                      clattn_multi_last_error_message(multi()));
        tu_assert_untouched("O after a shape error", o, 0, 8, -7.0f);
    }
    /* GQA heads that do not divide */
    clattn_tensor tq3 = clattn_tensor_host(q, 1, 2, 1, 4), tk2 = clattn_tensor_host(k, 1, 2, 2, 4);
    clattn_tensor tv2 = clattn_tensor_host(v, 1, 2, 2, 4), to3 = clattn_tensor_host(o, 1, 2, 1, 4);
    tq3.shape[1] = to3.shape[1] = 2; /* fine: 2 / 2 */
    ck_assert_int_eq(
        clattn_multi_attention(multi(), CLATTN_SPLIT_HEADS, &desc, &tq3, &tk2, &tv2, &to3, NULL),
        CLATTN_SUCCESS);
    tu_fill_value(o, 8, -7.0f);
    tk2.shape[1] = tv2.shape[1] = 3; /* 2 query heads over 3 KV heads */
    tk2.shape[2] = tv2.shape[2] = 1;
    ck_assert_int_eq(
        clattn_multi_attention(multi(), CLATTN_SPLIT_HEADS, &desc, &tq3, &tk2, &tv2, &to3, NULL),
        CLATTN_ERROR_INVALID_SHAPE);
    /* host views only */
    clattn_tensor tb = tq;
    tb.host = NULL;
    ck_assert_int_eq(
        clattn_multi_attention(multi(), CLATTN_SPLIT_KEYS, &desc, &tb, &tk, &tk, &to, NULL),
        CLATTN_ERROR_INVALID_LAYOUT);
    /* unknown split, NULL object */
    ck_assert_int_eq(
        clattn_multi_attention(multi(), (clattn_split)7, &desc, &tq, &tk, &tk, &to, NULL),
        CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(
        clattn_multi_attention(NULL, CLATTN_SPLIT_KEYS, &desc, &tq, &tk, &tk, &to, NULL),
        CLATTN_ERROR_INVALID_ARGUMENT);
    /* what a key split cannot do */
    float w[2 * 5];
    clattn_tensor tw = clattn_tensor_host(w, 1, 1, 2, 5);
    clattn_attention_desc dw = desc;
    dw.weights = &tw;
    ck_assert_int_eq(
        clattn_multi_attention(multi(), CLATTN_SPLIT_KEYS, &dw, &tq, &tk, &tk, &to, NULL),
        CLATTN_ERROR_UNSUPPORTED);
    dw.weights_head_mean = 1;
    ck_assert_int_eq(
        clattn_multi_attention(multi(), CLATTN_SPLIT_HEADS, &dw, &tq, &tk, &tk, &to, NULL),
        CLATTN_ERROR_UNSUPPORTED);
    clattn_attention_desc dn = desc;
    dn.masked_rows = CLATTN_MASKED_ROWS_NAN;
    ck_assert_int_eq(
        clattn_multi_attention(multi(), CLATTN_SPLIT_KEYS, &dn, &tq, &tk, &tk, &to, NULL),
        CLATTN_ERROR_UNSUPPORTED);
    int32_t lens[1] = {3};
    clattn_attention_desc db = desc;
    db.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    db.kv_lens = lens;
    ck_assert_int_eq(
        clattn_multi_attention(multi(), CLATTN_SPLIT_KEYS, &db, &tq, &tk, &tk, &to, NULL),
        CLATTN_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(clattn_multi_last_error_message(multi()), "SPLIT_HEADS"), "%s",
                  clattn_multi_last_error_message(multi()));
    clattn_attention_desc di = desc; /* batch invariance: a key split's merge follows it */
    di.batch_invariant = 1;
    ck_assert_int_eq(
        clattn_multi_attention(multi(), CLATTN_SPLIT_KEYS, &di, &tq, &tk, &tk, &to, NULL),
        CLATTN_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(clattn_multi_last_error_message(multi()), "batch_invariant"), "%s",
                  clattn_multi_last_error_message(multi()));
    tu_assert_untouched("O after refusals", o, 0, 8, -7.0f);
    /* a successful call clears the message */
    ck_assert_int_eq(
        clattn_multi_attention(multi(), CLATTN_SPLIT_KEYS, &desc, &tq, &tk, &tk, &to, NULL),
        CLATTN_SUCCESS);
    ck_assert_str_eq(clattn_multi_last_error_message(multi()), "");
}
END_TEST

int main(void)
{
    tu_seed_init(0x6d17u);
    Suite *s = suite_create("multi");
    TCase *tc = tcase_create("multi");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, errors_have_clear_statuses);
    tcase_add_test(tc, heads_every_mask_gqa_odd_sizes);
    tcase_add_test(tc, heads_uneven_weights_and_extras);
    tcase_add_test(tc, keys_every_mask_gqa_odd_sizes);
    tcase_add_test(tc, keys_fully_masked_block_is_skipped);
    tcase_add_test(tc, keys_decode_and_extras);
    tcase_add_test(tc, strided_views_and_in_place);
    tcase_add_test(tc, two_contexts_on_one_device);
    suite_add_tcase(s, tc);
    int rc = tu_run_suite(s);
    clattn_multi_release(g_multi);
    return rc;
}
