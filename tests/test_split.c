/* Case R17 (tests/cases/R17.json): a split of one call over key blocks must equal the
 * call when ALiBi puts every key far from the queries. Each part's LSE is then about
 * −slope·distance (−5·10⁷ at q_start 10⁸), where float32's spacing (4) erases the
 * differences the merge weights by; clattn offers a float64 LSE (CLATTN_FLOAT64, on
 * devices with cl_khr_fp64) that keeps them. Checked here: one call (both algorithms,
 * float32 and float64 LSE), the documented split recipe (K[a:b], V[a:b], kv_start = a,
 * then clattn_merge and clattn_merge_enqueue), the parts themselves, the key split of
 * the several-device layer, and the reference, at q_start 10⁸ and 10⁵; plus a random
 * sweep of slopes, positions and block cuts against the one-call reference.
 * Tolerances: O 1e-5 + 1e-5·|expected| (the case's); a float64 LSE 1e-5 + 1e-12·|LSE|;
 * a float32 LSE within 4 ulp of its own size. Seeds: printed (CLATTN_TEST_SEED). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool device_has_fp64(void)
{
    cl_device_id dev;
    clattn_context_get_cl(tu_ctx(), NULL, &dev, NULL);
    cl_device_fp_config fp64 = 0;
    return clGetDeviceInfo(dev, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL) ==
               CL_SUCCESS &&
           fp64 != 0;
}

/* Whether the test can run; prints why not (a float64 LSE needs cl_khr_fp64). */
static bool fp64_or_skip(const char *test)
{
    if (device_has_fp64())
        return true;
    printf("%s: the device has no cl_khr_fp64; skipped\n", test);
    return false;
}

/* The case's inputs: q [1, 2], k and v [4, 2], as [1, 1, n, d] views. */
typedef struct r17 {
    float q[2], k[8], v[8];
    float slope;
    double o[2], lse, part_o[2][2], part_lse[2];
} r17;

static void load_case(r17 *c, int variant)
{
    cJSON *root = tu_case_load("R17");
    size_t n;
    double *x = tu_jarray(tu_jget(root, "inputs/q"), &n);
    ck_assert_uint_eq(n, 2);
    for (size_t i = 0; i < 2; i++)
        c->q[i] = (float)x[i];
    free(x);
    x = tu_jarray(tu_jget(root, "inputs/k"), &n);
    ck_assert_uint_eq(n, 8);
    for (size_t i = 0; i < 8; i++)
        c->k[i] = (float)x[i];
    free(x);
    x = tu_jarray(tu_jget(root, "inputs/v"), &n);
    for (size_t i = 0; i < 8; i++)
        c->v[i] = (float)x[i];
    free(x);
    x = tu_jarray(tu_jget(root, "params/alibi_slopes"), &n);
    c->slope = (float)x[0];
    free(x);
    const cJSON *exp = tu_jget(root, "expected");
    if (variant > 0) { /* variants[0]: q_start 1e5, O and LSE only */
        exp = tu_jget(cJSON_GetArrayItem(tu_jget(root, "variants"), variant - 1), "expected");
        c->part_lse[0] = c->part_lse[1] = NAN; /* not given */
    } else {
        const char *names[2] = {"parts/keys_0_1", "parts/keys_2_3"};
        for (int p = 0; p < 2; p++) {
            char path[64];
            snprintf(path, sizeof path, "%s/O", names[p]);
            x = tu_jarray(tu_jget(exp, path), &n);
            c->part_o[p][0] = x[0];
            c->part_o[p][1] = x[1];
            free(x);
            snprintf(path, sizeof path, "%s/lse", names[p]);
            c->part_lse[p] = tu_jnum(tu_jget(exp, path));
        }
    }
    x = tu_jarray(tu_jget(exp, "O"), &n);
    c->o[0] = x[0];
    c->o[1] = x[1];
    free(x);
    x = tu_jarray(tu_jget(exp, "lse"), &n);
    c->lse = x[0];
    free(x);
    cJSON_Delete(root);
}

static int64_t variant_q_start(int variant)
{
    return variant == 0 ? 100000000 : 100000;
}

static void check_o(const char *what, const float *o, const double *exp)
{
    for (int c = 0; c < 2; c++)
        ck_assert_msg(tu_within(o[c], exp[c], TU_TOL_DEFAULT),
                      "%s: O[%d] = %.9g, expected %.9g (tol 1e-5 + 1e-5|x|)", what, c, (double)o[c],
                      exp[c]);
}

static void check_lse64(const char *what, double got, double exp)
{
    ck_assert_msg(fabs(got - exp) <= 1e-5 + 1e-12 * fabs(exp),
                  "%s: LSE = %.12g, expected %.12g (tol 1e-5 + 1e-12|x|)", what, got, exp);
}

/* One call over all four keys, both algorithms, with a float32 and a float64 LSE. */
START_TEST(R17_one_call)
{
    for (int variant = 0; variant < 2; variant++) {
        r17 c;
        load_case(&c, variant);
        clattn_tensor tq = clattn_tensor_host(c.q, 1, 1, 1, 2);
        clattn_tensor tk = clattn_tensor_host(c.k, 1, 1, 4, 2);
        clattn_tensor tv = clattn_tensor_host(c.v, 1, 1, 4, 2);
        for (int a = 0; a < 2; a++)
            for (int dt = 0; dt < 2; dt++) {
                if (dt == 1 && !device_has_fp64())
                    continue;
                float o[2], l32 = 0.0f;
                double l64 = 0.0;
                clattn_tensor to = clattn_tensor_host(o, 1, 1, 1, 2);
                clattn_tensor tl = clattn_tensor_host(dt ? (void *)&l64 : (void *)&l32, 1, 1, 1, 1);
                tl.dtype = dt ? CLATTN_FLOAT64 : CLATTN_FLOAT32;
                clattn_attention_desc d = clattn_attention_desc_default();
                d.scale = 1.0f;
                d.alibi_slopes = &c.slope;
                d.q_start = variant_q_start(variant);
                d.algorithm = tu_algorithms[a];
                d.lse = &tl;
                TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &tq, &tk, &tv, &to), "one call");
                char what[96];
                snprintf(what, sizeof what, "R17 q_start %lld, one call, %s, LSE %s",
                         (long long)d.q_start, tu_algorithm_name(d.algorithm),
                         dt ? "float64" : "float32");
                check_o(what, o, c.o);
                if (dt)
                    check_lse64(what, l64, c.lse);
                else /* float32 rounding of its own size: 4 ulp */
                    ck_assert_msg(fabs(l32 - c.lse) <= 4.0 * fabs(c.lse) * 0x1p-23,
                                  "%s: LSE = %.9g, expected %.9g within 4 ulp", what, (double)l32,
                                  c.lse);
                /* the reference writes the same float64 LSE */
                if (dt) {
                    double r64 = 0.0;
                    float ro[2];
                    clattn_tensor rl = clattn_tensor_host(&r64, 1, 1, 1, 1);
                    rl.dtype = CLATTN_FLOAT64;
                    clattn_tensor rto = clattn_tensor_host(ro, 1, 1, 1, 2);
                    d.lse = &rl;
                    TU_ASSERT_OK(clattn_reference_attention(&d, &tq, &tk, &tv, &rto), "reference");
                    check_o("R17 reference", ro, c.o);
                    check_lse64("R17 reference", r64, c.lse);
                }
            }
    }
}
END_TEST

/* The documented split recipe: keys [0, 2) and [2, 4) as two calls with kv_start 0 and
 * 2 and a float64 LSE, then clattn_merge (host) and clattn_merge_enqueue (buffers). */
START_TEST(R17_split_recipe)
{
    if (!fp64_or_skip("R17_split_recipe"))
        return;
    for (int variant = 0; variant < 2; variant++) {
        r17 c;
        load_case(&c, variant);
        clattn_tensor tq = clattn_tensor_host(c.q, 1, 1, 1, 2);
        for (int a = 0; a < 2; a++) {
            float po[2][2];
            double pl[2];
            clattn_tensor to[2], tl[2];
            for (int p = 0; p < 2; p++) {
                clattn_tensor tk = clattn_tensor_host(c.k + 4 * p, 1, 1, 2, 2);
                clattn_tensor tv = clattn_tensor_host(c.v + 4 * p, 1, 1, 2, 2);
                to[p] = clattn_tensor_host(po[p], 1, 1, 1, 2);
                tl[p] = clattn_tensor_host(&pl[p], 1, 1, 1, 1);
                tl[p].dtype = CLATTN_FLOAT64;
                clattn_attention_desc d = clattn_attention_desc_default();
                d.scale = 1.0f;
                d.alibi_slopes = &c.slope;
                d.q_start = variant_q_start(variant);
                d.kv_start = 2 * p;
                d.algorithm = tu_algorithms[a];
                d.lse = &tl[p];
                TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &tq, &tk, &tv, &to[p]), "part %d", p);
                if (!isnan(c.part_lse[p])) {
                    char what[64];
                    snprintf(what, sizeof what, "R17 part %d (%s)", p,
                             tu_algorithm_name(d.algorithm));
                    check_o(what, po[p], c.part_o[p]);
                    check_lse64(what, pl[p], c.part_lse[p]);
                }
            }
            /* host merge */
            float o[2];
            double l = 0.0;
            clattn_tensor mo = clattn_tensor_host(o, 1, 1, 1, 2);
            clattn_tensor ml = clattn_tensor_host(&l, 1, 1, 1, 1);
            ml.dtype = CLATTN_FLOAT64;
            TU_ASSERT_OK(clattn_merge(tu_ctx(), 2, to, tl, &mo, &ml), "clattn_merge");
            char what[96];
            snprintf(what, sizeof what, "R17 q_start %lld, split + clattn_merge (%s parts)",
                     (long long)variant_q_start(variant), tu_algorithm_name(tu_algorithms[a]));
            check_o(what, o, c.o);
            check_lse64(what, l, c.lse);
            /* the same on buffers, the output LSE in float32 (its own rounding only) */
            cl_context cx;
            cl_command_queue queue;
            clattn_context_get_cl(tu_ctx(), &cx, NULL, &queue);
            cl_int err;
            cl_mem bo[2], bl[2], out_o, out_l;
            clattn_tensor bto[2], btl[2];
            for (int p = 0; p < 2; p++) {
                bo[p] = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof po[p],
                                       po[p], &err);
                ck_assert_int_eq(err, CL_SUCCESS);
                bl[p] = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof pl[p],
                                       &pl[p], &err);
                ck_assert_int_eq(err, CL_SUCCESS);
                bto[p] = clattn_tensor_buffer(bo[p], 1, 1, 1, 2);
                btl[p] = clattn_tensor_buffer(bl[p], 1, 1, 1, 1);
                btl[p].dtype = CLATTN_FLOAT64;
            }
            out_o = clCreateBuffer(cx, CL_MEM_READ_WRITE, 2 * sizeof(float), NULL, &err);
            ck_assert_int_eq(err, CL_SUCCESS);
            out_l = clCreateBuffer(cx, CL_MEM_READ_WRITE, sizeof(double), NULL, &err);
            ck_assert_int_eq(err, CL_SUCCESS);
            clattn_tensor bmo = clattn_tensor_buffer(out_o, 1, 1, 1, 2);
            clattn_tensor bml = clattn_tensor_buffer(out_l, 1, 1, 1, 1);
            bml.dtype = CLATTN_FLOAT64;
            cl_event done;
            TU_ASSERT_OK(clattn_merge_enqueue(tu_ctx(), 2, bto, btl, &bmo, &bml, 0, NULL, &done),
                         "clattn_merge_enqueue");
            float eo[2];
            double el = 0.0;
            ck_assert_int_eq(
                clEnqueueReadBuffer(queue, out_o, CL_TRUE, 0, sizeof eo, eo, 1, &done, NULL),
                CL_SUCCESS);
            ck_assert_int_eq(
                clEnqueueReadBuffer(queue, out_l, CL_TRUE, 0, sizeof el, &el, 0, NULL, NULL),
                CL_SUCCESS);
            clReleaseEvent(done);
            check_o("R17 clattn_merge_enqueue", eo, c.o);
            check_lse64("R17 clattn_merge_enqueue", el, c.lse);
            for (int p = 0; p < 2; p++) {
                clReleaseMemObject(bo[p]);
                clReleaseMemObject(bl[p]);
            }
            clReleaseMemObject(out_o);
            clReleaseMemObject(out_l);
        }
    }
}
END_TEST

/* clattn_multi_attention(CLATTN_SPLIT_KEYS) over two contexts of the device: its
 * partial LSEs are float64 where the devices have cl_khr_fp64. */
START_TEST(R17_multi_key_split)
{
    if (!fp64_or_skip("R17_multi_key_split"))
        return;
    cl_device_id dev;
    clattn_context_get_cl(tu_ctx(), NULL, &dev, NULL);
    char name[256] = "";
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    const char *specs[2] = {name, name};
    clattn_multi *m;
    ck_assert_int_eq(clattn_multi_create(specs, 2, &m), CLATTN_SUCCESS);
    for (int variant = 0; variant < 2; variant++) {
        r17 c;
        load_case(&c, variant);
        clattn_tensor tq = clattn_tensor_host(c.q, 1, 1, 1, 2);
        clattn_tensor tk = clattn_tensor_host(c.k, 1, 1, 4, 2);
        clattn_tensor tv = clattn_tensor_host(c.v, 1, 1, 4, 2);
        float o[2];
        double l = 0.0;
        clattn_tensor to = clattn_tensor_host(o, 1, 1, 1, 2);
        clattn_tensor tl = clattn_tensor_host(&l, 1, 1, 1, 1);
        tl.dtype = CLATTN_FLOAT64;
        clattn_attention_desc d = clattn_attention_desc_default();
        d.scale = 1.0f;
        d.alibi_slopes = &c.slope;
        d.q_start = variant_q_start(variant);
        d.lse = &tl;
        clattn_multi_part parts[2];
        clattn_status st =
            clattn_multi_attention(m, CLATTN_SPLIT_KEYS, &d, &tq, &tk, &tv, &to, parts);
        ck_assert_msg(st == CLATTN_SUCCESS, "SPLIT_KEYS: %s", clattn_multi_last_error_message(m));
        ck_assert_msg(parts[0].ran && parts[1].ran, "both key blocks must run");
        check_o("R17 SPLIT_KEYS", o, c.o);
        check_lse64("R17 SPLIT_KEYS", l, c.lse);
    }
    clattn_multi_release(m);
}
END_TEST

/* Random problems with far ALiBi keys: slopes 0.0625 .. 1, q_start up to 1e8 before or
 * after the keys, 2 to 4 key blocks at random cuts, both algorithms for the parts: the
 * merged O and float64 LSE equal the one-call reference. */
START_TEST(far_alibi_splits_random)
{
    if (!fp64_or_skip("far_alibi_splits_random"))
        return;
    const uint32_t seed = tu_seed() ^ 0x17u;
    printf("far_alibi_splits_random: seed 0x%x\n", seed);
    const int64_t h = 2, n_q = 3, n_kv = 13, d = 4;
    const float slopes_all[4] = {0.0625f, 0.25f, 0.5f, 1.0f};
    for (int t = 0; t < 8; t++) {
        tu_problem p;
        tu_problem_init(&p, 1, h, 1, n_q, n_kv, d, d, seed + 3 * (uint32_t)t,
                        seed + 3 * (uint32_t)t + 1, seed + 3 * (uint32_t)t + 2, 0);
        const float slopes[2] = {slopes_all[t % 4], slopes_all[(t + 1) % 4]};
        clattn_attention_desc desc = clattn_attention_desc_default();
        desc.alibi_slopes = slopes;
        desc.q_start = (t % 2 ? -1 : 1) * (t < 4 ? 100000 : 100000000);
        desc.mask = t % 3 == 2 ? CLATTN_MASK_NO_SELF : CLATTN_MASK_NONE;
        /* the reference over all keys */
        float ref_o[24];
        double ref_l[6];
        clattn_tensor ro = clattn_tensor_host(ref_o, 1, h, n_q, d);
        clattn_tensor rl = clattn_tensor_host(ref_l, 1, h, n_q, 1);
        rl.dtype = CLATTN_FLOAT64;
        clattn_attention_desc dr = desc;
        dr.lse = &rl;
        TU_ASSERT_OK(clattn_reference_attention(&dr, &p.tq, &p.tk, &p.tv, &ro), "reference");
        /* the parts */
        const int n_parts = 2 + t % 3;
        int64_t cut[5];
        cut[0] = 0;
        cut[n_parts] = n_kv;
        for (int c = 1; c < n_parts; c++)
            cut[c] = cut[c - 1] + 1 +
                     (int64_t)(tu_lowbias32(seed + (uint32_t)(17 * t + c)) %
                               (uint32_t)(n_kv - cut[c - 1] - (n_parts - c)));
        float po[4][24];
        double pl[4][6];
        clattn_tensor to[4], tl[4];
        for (int c = 0; c < n_parts; c++) {
            const int64_t len = cut[c + 1] - cut[c];
            clattn_tensor tk = p.tk, tv = p.tv;
            tk.shape[2] = tv.shape[2] = len;
            const int64_t st[4] = {n_kv * d, n_kv * d, d, 1}; /* K, V: [1, 1, n_kv, d] */
            memcpy(tk.strides, st, sizeof st);
            memcpy(tv.strides, st, sizeof st);
            tk.offset = tv.offset = cut[c] * d;
            to[c] = clattn_tensor_host(po[c], 1, h, n_q, d);
            tl[c] = clattn_tensor_host(pl[c], 1, h, n_q, 1);
            tl[c].dtype = CLATTN_FLOAT64;
            clattn_attention_desc dp = desc;
            dp.kv_start = cut[c];
            dp.lse = &tl[c];
            dp.algorithm = tu_algorithms[(t + c) % 2];
            TU_ASSERT_OK(clattn_attention(tu_ctx(), &dp, &p.tq, &tk, &tv, &to[c]),
                         "sample %d part %d", t, c);
        }
        float o[24];
        double l[6];
        clattn_tensor mo = clattn_tensor_host(o, 1, h, n_q, d);
        clattn_tensor ml = clattn_tensor_host(l, 1, h, n_q, 1);
        ml.dtype = CLATTN_FLOAT64;
        TU_ASSERT_OK(clattn_merge(tu_ctx(), (size_t)n_parts, to, tl, &mo, &ml), "merge");
        char what[128];
        snprintf(what, sizeof what, "sample %d (q_start %lld, %d parts, slopes %g/%g)", t,
                 (long long)desc.q_start, n_parts, (double)slopes[0], (double)slopes[1]);
        TU_ASSERT_CLOSE(what, &mo, NULL, ref_o, TU_TOL_DEFAULT);
        for (int r = 0; r < h * n_q; r++)
            check_lse64(what, l[r], ref_l[r]);
        tu_problem_free(&p);
    }
}
END_TEST

int main(void)
{
    tu_seed_init(0x5117u);
    Suite *s = suite_create("split");
    TCase *tc = tcase_create("R17");
    tcase_add_test(tc, R17_one_call);
    tcase_add_test(tc, R17_split_recipe);
    tcase_add_test(tc, R17_multi_key_split);
    tcase_add_test(tc, far_alibi_splits_random);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
