/* A real model: the attention of every layer of sentence-transformers/all-MiniLM-L6-v2
 * (6 layers, 12 heads, head dim 32) on four sentences of different lengths in one
 * padded batch, as captured by tools/dev/make_model_fixtures.py into tests/data/minilm/
 * (README.md there: model, versions, sentences, shapes, layouts).
 *
 * The model's attention output (its context layer, before the output projection) must
 * be matched within 1e-5 + 1e-5·|x| by both algorithms:
 *  - padded, with the model's key-padding mask given as kv_lens: every row, the padded
 *    query rows included (the model computes them too, over the valid keys only; so
 *    does clattn with kv_lens and no q_lens);
 *  - padded, with kv_lens and q_lens: the valid rows, and zeros in the padded rows;
 *  - padded, with the mask as a boolean mask_tensor [b, 1, n_q, n_kv]: every row;
 *  - each sentence on its own, unpadded (n_q = n_kv = its length, a strided view into
 *    the padded arrays, no mask): its valid rows;
 * and the CPU reference with kv_lens must match too (no device involved). */
#include "clattn.h"
#include "npy.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef CLATTN_MODEL_DIR
#error "CLATTN_MODEL_DIR (the folder of the fixtures) must be defined by the build"
#endif

enum { N_LAYERS = 6 };

/* One layer of the fixtures: Q, K, V, O [b, h, n, d] (n padded) and the valid lengths. */
typedef struct layer_fixture {
    npy_array q, k, v, o;
    int64_t b, h, n, d;
    int32_t kv_lens[16];
    unsigned char *mask; /* attention_mask.npy: bool [b, 1, n_q, n_kv], nonzero = visible */
} layer_fixture;

static void fixture_path(char *path, size_t cap, const char *name)
{
    int len = snprintf(path, cap, "%s/%s", CLATTN_MODEL_DIR, name);
    ck_assert_msg(len > 0 && (size_t)len < cap, "fixture path too long: %s", name);
}

static void load_f32(const char *name, npy_array *out)
{
    char path[4096], err[512];
    fixture_path(path, sizeof path, name);
    ck_assert_msg(npy_read_f32_rank(path, 4, "(b, h, n, d)", out, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(out->ndim, 4);
}

/* The data of a version 1.0 .npy file whose header names `descr` and `shape` (exactly
 * as numpy writes them, e.g. "'<i4'" and "(4,)"): the float32 reader of tools/npy/npy.c
 * reads neither int32 nor bool. Copies exactly `size` bytes into `data`. */
static void load_raw(const char *name, const char *descr, const char *shape, void *data,
                     size_t size)
{
    char path[4096];
    fixture_path(path, sizeof path, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: cannot open it", path);
    unsigned char prefix[10];
    ck_assert_msg(fread(prefix, 1, 10, f) == 10 && memcmp(prefix, "\x93NUMPY\x01\x00", 8) == 0,
                  "%s: not a version 1.0 .npy file", path);
    size_t header_len = prefix[8] | (size_t)prefix[9] << 8;
    char header[65536 + 1];
    ck_assert_msg(fread(header, 1, header_len, f) == header_len, "%s: short header", path);
    header[header_len] = '\0';
    char want[128];
    snprintf(want, sizeof want, "'descr': %s", descr);
    ck_assert_msg(strstr(header, want) != NULL, "%s: header %s has no %s", path, header, want);
    ck_assert_msg(strstr(header, "'fortran_order': False") != NULL, "%s: not C order", path);
    snprintf(want, sizeof want, "'shape': %s", shape);
    ck_assert_msg(strstr(header, want) != NULL, "%s: header %s has no %s", path, header, want);
    ck_assert_msg(fread(data, 1, size, f) == size, "%s: fewer than %zu data bytes", path, size);
    ck_assert_msg(fgetc(f) == EOF, "%s: more than %zu data bytes", path, size);
    fclose(f);
}

static void fixture_load(layer_fixture *fx, int layer)
{
    memset(fx, 0, sizeof *fx);
    char name[64];
    npy_array *const arrays[] = {&fx->q, &fx->k, &fx->v, &fx->o};
    const char *const names[] = {"q", "k", "v", "o"};
    for (int i = 0; i < 4; ++i) {
        snprintf(name, sizeof name, "layer%d_%s.npy", layer, names[i]);
        load_f32(name, arrays[i]);
        for (int j = 0; j < 4; ++j) {
            ck_assert_msg(arrays[i]->shape[j] == fx->q.shape[j], "%s: shape differs from Q's",
                          name);
        }
    }
    fx->b = fx->q.shape[0];
    fx->h = fx->q.shape[1];
    fx->n = fx->q.shape[2];
    fx->d = fx->q.shape[3];
    ck_assert_msg(fx->b >= 2 && fx->b <= 16 && fx->n >= 2 && fx->n <= 64,
                  "unexpected fixture shape b %lld n %lld", (long long)fx->b, (long long)fx->n);
    char shape[64];
    snprintf(shape, sizeof shape, "(%lld,)", (long long)fx->b);
    load_raw("kv_lens.npy", "'<i4'", shape, fx->kv_lens, (size_t)fx->b * sizeof(int32_t));
    snprintf(shape, sizeof shape, "(%lld, 1, %lld, %lld)", (long long)fx->b, (long long)fx->n,
             (long long)fx->n);
    fx->mask = malloc((size_t)(fx->b * fx->n * fx->n));
    ck_assert_ptr_nonnull(fx->mask);
    load_raw("attention_mask.npy", "'|b1'", shape, fx->mask, (size_t)(fx->b * fx->n * fx->n));
    int distinct = 0, padded = 0;
    for (int64_t b = 0; b < fx->b; ++b) {
        ck_assert(fx->kv_lens[b] >= 1 && fx->kv_lens[b] <= fx->n);
        padded |= fx->kv_lens[b] < fx->n;
        distinct += b == 0 || fx->kv_lens[b] != fx->kv_lens[b - 1];
        for (int64_t i = 0; i < fx->n; ++i) { /* the mask is the key padding of kv_lens */
            for (int64_t j = 0; j < fx->n; ++j) {
                ck_assert_int_eq(fx->mask[(b * fx->n + i) * fx->n + j] != 0, j < fx->kv_lens[b]);
            }
        }
    }
    ck_assert_msg(padded && distinct == fx->b,
                  "the fixtures must pad sentences of distinct lengths");
}

static void fixture_free(layer_fixture *fx)
{
    npy_free(&fx->q);
    npy_free(&fx->k);
    npy_free(&fx->v);
    npy_free(&fx->o);
    free(fx->mask);
}

static clattn_tensor view_of(const layer_fixture *fx, float *data)
{
    return clattn_tensor_host(data, fx->b, fx->h, fx->n, fx->d);
}

/* Compares rows [0, rows[b]) of every (b, h) of got (packed [b, h, got_n, d]) with the
 * model's O; fails the test with the worst element. rows == NULL: all n rows. */
static void compare_rows(const char *what, const layer_fixture *fx, const float *got,
                         int64_t b_first, int64_t b_count, int64_t got_n, const int32_t *rows)
{
    int64_t bad = 0, checked = 0, wb = 0, wh = 0, wi = 0, wd = 0;
    double worst = -1.0, worst_got = 0.0, worst_exp = 0.0;
    const tu_tol tol = TU_TOL_DEFAULT;
    for (int64_t bb = 0; bb < b_count; ++bb) {
        int64_t b = b_first + bb, n_rows = rows != NULL ? rows[b] : got_n;
        for (int64_t h = 0; h < fx->h; ++h) {
            for (int64_t i = 0; i < n_rows; ++i) {
                for (int64_t d = 0; d < fx->d; ++d) {
                    double g = got[((bb * fx->h + h) * got_n + i) * fx->d + d];
                    double e = fx->o.data[((b * fx->h + h) * fx->n + i) * fx->d + d];
                    double excess = (fabs(g - e) - tol.atol) / (tol.atol + tol.rtol * fabs(e));
                    ++checked;
                    if (!tu_within(g, e, tol)) {
                        ++bad;
                        excess = excess != excess ? 1e300 : excess; /* NaN: worst */
                    }
                    if (excess > worst) {
                        worst = excess;
                        worst_got = g;
                        worst_exp = e;
                        wb = b, wh = h, wi = i, wd = d;
                    }
                }
            }
        }
    }
    ck_assert_msg(checked > 0, "%s: nothing compared", what);
    ck_assert_msg(bad == 0,
                  "%s: %lld of %lld elements off; worst (b %lld, h %lld, i %lld, d %lld): got "
                  "%.9g, model %.9g (tolerance 1e-5 + 1e-5*|model|)",
                  what, (long long)bad, (long long)checked, (long long)wb, (long long)wh,
                  (long long)wi, (long long)wd, worst_got, worst_exp);
}

/* Fails unless rows [rows[b], n) of every (b, h) of got are zero. */
static void assert_padded_rows_zero(const char *what, const layer_fixture *fx, const float *got,
                                    const int32_t *rows)
{
    for (int64_t b = 0; b < fx->b; ++b) {
        for (int64_t h = 0; h < fx->h; ++h) {
            for (int64_t i = rows[b]; i < fx->n; ++i) {
                for (int64_t d = 0; d < fx->d; ++d) {
                    float g = got[((b * fx->h + h) * fx->n + i) * fx->d + d];
                    ck_assert_msg(g == 0.0f, "%s: padded row (b %lld, h %lld, i %lld) holds %g",
                                  what, (long long)b, (long long)h, (long long)i, (double)g);
                }
            }
        }
    }
}

/* Loop index of the device tests: layer · 2 + algorithm index. */
static void loop_params(int index, int *layer, clattn_algorithm *algorithm, char *what, size_t cap,
                        const char *test)
{
    *layer = index / 2;
    *algorithm = tu_algorithms[index % 2];
    snprintf(what, cap, "%s, layer %d, %s", test, *layer, tu_algorithm_name(*algorithm));
}

/* The padded batch with the model's key padding as kv_lens: every row matches. */
START_TEST(test_padded_kv_lens)
{
    int layer;
    clattn_algorithm algorithm;
    char what[128];
    loop_params(_i, &layer, &algorithm, what, sizeof what, "padded, kv_lens");
    layer_fixture fx;
    fixture_load(&fx, layer);
    float *o = tu_alloc(fx.o.count, NAN);
    clattn_tensor tq = view_of(&fx, fx.q.data), tk = view_of(&fx, fx.k.data),
                  tv = view_of(&fx, fx.v.data), to = view_of(&fx, o);
    clattn_attention_desc desc = clattn_attention_desc_default(); /* scale 1/sqrt(32), as BERT */
    desc.algorithm = algorithm;
    desc.kv_lens = fx.kv_lens;
    TU_ASSERT_OK(clattn_attention(tu_ctx(), &desc, &tq, &tk, &tv, &to), "%s", what);
    compare_rows(what, &fx, o, 0, fx.b, fx.n, NULL);
    free(o);
    fixture_free(&fx);
}
END_TEST

/* kv_lens and q_lens: the valid rows match; the padded rows are zeros. */
START_TEST(test_padded_q_lens)
{
    int layer;
    clattn_algorithm algorithm;
    char what[128];
    loop_params(_i, &layer, &algorithm, what, sizeof what, "padded, kv_lens + q_lens");
    layer_fixture fx;
    fixture_load(&fx, layer);
    float *o = tu_alloc(fx.o.count, NAN);
    clattn_tensor tq = view_of(&fx, fx.q.data), tk = view_of(&fx, fx.k.data),
                  tv = view_of(&fx, fx.v.data), to = view_of(&fx, o);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.algorithm = algorithm;
    desc.kv_lens = fx.kv_lens;
    desc.q_lens = fx.kv_lens; /* self-attention: the same valid length */
    TU_ASSERT_OK(clattn_attention(tu_ctx(), &desc, &tq, &tk, &tv, &to), "%s", what);
    compare_rows(what, &fx, o, 0, fx.b, fx.n, fx.kv_lens);
    assert_padded_rows_zero(what, &fx, o, fx.kv_lens);
    free(o);
    fixture_free(&fx);
}
END_TEST

/* The model's mask as a boolean mask tensor [b, 1, n_q, n_kv] (attention_mask.npy). */
START_TEST(test_padded_mask_tensor)
{
    int layer;
    clattn_algorithm algorithm;
    char what[128];
    loop_params(_i, &layer, &algorithm, what, sizeof what, "padded, bool mask_tensor");
    layer_fixture fx;
    fixture_load(&fx, layer);
    clattn_tensor tmask = clattn_tensor_host(fx.mask, fx.b, 1, fx.n, fx.n);
    tmask.dtype = CLATTN_BOOL;
    float *o = tu_alloc(fx.o.count, NAN);
    clattn_tensor tq = view_of(&fx, fx.q.data), tk = view_of(&fx, fx.k.data),
                  tv = view_of(&fx, fx.v.data), to = view_of(&fx, o);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.algorithm = algorithm;
    desc.mask_tensor = &tmask;
    TU_ASSERT_OK(clattn_attention(tu_ctx(), &desc, &tq, &tk, &tv, &to), "%s", what);
    compare_rows(what, &fx, o, 0, fx.b, fx.n, NULL);
    free(o);
    fixture_free(&fx);
}
END_TEST

/* Each sentence alone, unpadded: n_q = n_kv = its length, read through a strided view
 * of the padded arrays (no padding support needed). */
START_TEST(test_unpadded_sentences)
{
    int layer;
    clattn_algorithm algorithm;
    char what[128];
    loop_params(_i, &layer, &algorithm, what, sizeof what, "unpadded");
    layer_fixture fx;
    fixture_load(&fx, layer);
    float *o = tu_alloc((size_t)(fx.h * fx.n * fx.d), NAN);
    for (int64_t b = 0; b < fx.b; ++b) {
        int64_t len = fx.kv_lens[b];
        const int64_t shape[4] = {1, fx.h, len, fx.d};
        const int64_t strides[4] = {fx.h * fx.n * fx.d, fx.n * fx.d, fx.d, 1};
        const int64_t offset = b * fx.h * fx.n * fx.d;
        clattn_tensor tq = tu_view(fx.q.data, shape, strides, offset);
        clattn_tensor tk = tu_view(fx.k.data, shape, strides, offset);
        clattn_tensor tv = tu_view(fx.v.data, shape, strides, offset);
        clattn_tensor to = clattn_tensor_host(o, 1, fx.h, len, fx.d);
        clattn_attention_desc desc = clattn_attention_desc_default();
        desc.algorithm = algorithm;
        char sentence[256];
        snprintf(sentence, sizeof sentence, "%s, sentence %lld (%lld tokens)", what, (long long)b,
                 (long long)len);
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &desc, &tq, &tk, &tv, &to), "%s", sentence);
        compare_rows(sentence, &fx, o, b, 1, len, NULL);
    }
    free(o);
    fixture_free(&fx);
}
END_TEST

/* The float64 CPU reference with kv_lens (no device): every row of every layer. */
START_TEST(test_reference_kv_lens)
{
    layer_fixture fx;
    fixture_load(&fx, _i);
    float *o = tu_alloc(fx.o.count, NAN);
    clattn_tensor tq = view_of(&fx, fx.q.data), tk = view_of(&fx, fx.k.data),
                  tv = view_of(&fx, fx.v.data), to = view_of(&fx, o);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.kv_lens = fx.kv_lens;
    clattn_status st = clattn_reference_attention(&desc, &tq, &tk, &tv, &to);
    ck_assert_msg(st == CLATTN_SUCCESS, "reference, layer %d: status %d (%s)", _i, (int)st,
                  clattn_status_string(st));
    char what[64];
    snprintf(what, sizeof what, "reference, kv_lens, layer %d", _i);
    compare_rows(what, &fx, o, 0, fx.b, fx.n, NULL);
    free(o);
    fixture_free(&fx);
}
END_TEST

/* An int8 and an FP8 K/V cache of the model (symmetric, one scale per token and head:
 * max |x| / 127, or / 448 for FP8 E4M3):
 * clattn on the int8 data equals the float64 reference on the same data within
 * 1e-5 + 1e-5·|x|, and the quantization error against the model's float32 O (valid
 * keys by kv_lens, every row) is printed and bounded. */
START_TEST(test_int8_kv_cache)
{
    const int layer = _i;
    layer_fixture fx;
    fixture_load(&fx, layer);
    const int64_t rows = fx.b * fx.h * fx.n;
    uint8_t *k8 = malloc((size_t)fx.k.count), *v8 = malloc((size_t)fx.v.count);
    float *ks = tu_alloc((size_t)rows, 0.0f), *vs = tu_alloc((size_t)rows, 0.0f);
    float *o = tu_alloc(fx.o.count, NAN), *ro = tu_alloc(fx.o.count, NAN);
    for (int fp8 = 0; fp8 < 2; fp8++) { /* int8, then FP8 E4M3 (scale max |x| / 448) */
        char what[64];
        snprintf(what, sizeof what, "%s K/V, layer %d", fp8 ? "fp8" : "int8", layer);
        const float top = fp8 ? 448.0f : 127.0f;
        for (int t = 0; t < 2; t++) {
            const float *x = t ? fx.v.data : fx.k.data;
            uint8_t *q = t ? v8 : k8;
            float *sc = t ? vs : ks;
            for (int64_t r = 0; r < rows; r++) {
                float mx = 0.0f;
                for (int64_t c = 0; c < fx.d; c++)
                    mx = fmaxf(mx, fabsf(x[r * fx.d + c]));
                sc[r] = mx > 0.0f ? mx / top : 1.0f;
                for (int64_t c = 0; c < fx.d; c++)
                    q[r * fx.d + c] = fp8 ? clattn_f32_to_fp8e4m3(x[r * fx.d + c] / sc[r])
                                          : (uint8_t)(int8_t)lrintf(x[r * fx.d + c] / sc[r]);
            }
        }
        clattn_tensor tq = view_of(&fx, fx.q.data), tk = view_of(&fx, NULL),
                      tv = view_of(&fx, NULL);
        tk.host = k8;
        tv.host = v8;
        tk.dtype = tv.dtype = fp8 ? CLATTN_FLOAT8_E4M3 : CLATTN_INT8;
        clattn_tensor tks = clattn_tensor_host(ks, fx.b, fx.h, fx.n, 1),
                      tvs = clattn_tensor_host(vs, fx.b, fx.h, fx.n, 1);
        clattn_tensor to = view_of(&fx, o), tro = view_of(&fx, ro);
        clattn_attention_desc desc = clattn_attention_desc_default();
        desc.kv_lens = fx.kv_lens;
        desc.k_scale = &tks;
        desc.v_scale = &tvs;
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &desc, &tq, &tk, &tv, &to), "%s", what);
        TU_ASSERT_OK(clattn_reference_attention(&desc, &tq, &tk, &tv, &tro), "%s: reference", what);
        TU_ASSERT_CLOSE(what, &to, NULL, ro, TU_TOL_DEFAULT);
        double err = 0.0, mag = 0.0;
        for (int64_t i = 0; i < (int64_t)fx.o.count; i++) {
            err = fmax(err, fabs((double)o[i] - (double)fx.o.data[i]));
            mag = fmax(mag, fabs((double)fx.o.data[i]));
        }
        printf("%s: within tolerance of the reference on the quantized data; max |O_q - "
               "O_model| = %.3g (max |O_model| %.3g)\n",
               what, err, mag);
        /* int8 about 0.5 % of max |O|, FP8 (3 mantissa bits) a few times more */
        ck_assert_msg(err < (fp8 ? 0.06 : 0.02) * mag, "%s: quantization error %g of max |O| %g",
                      what, err, mag);
    }
    free(k8);
    free(v8);
    free(ks);
    free(vs);
    free(o);
    free(ro);
    fixture_free(&fx);
}
END_TEST

static Suite *model_suite(void)
{
    Suite *s = suite_create("model");
    TCase *ref = tcase_create("reference");
    tcase_add_loop_test(ref, test_reference_kv_lens, 0, N_LAYERS);
    suite_add_tcase(s, ref);
    TCase *unpadded = tcase_create("unpadded");
    tcase_add_loop_test(unpadded, test_unpadded_sentences, 0, 2 * N_LAYERS);
    suite_add_tcase(s, unpadded);
    TCase *padded = tcase_create("padded");
    tcase_add_loop_test(padded, test_padded_kv_lens, 0, 2 * N_LAYERS);
    tcase_add_loop_test(padded, test_padded_q_lens, 0, 2 * N_LAYERS);
    tcase_add_loop_test(padded, test_padded_mask_tensor, 0, 2 * N_LAYERS);
    suite_add_tcase(s, padded);
    TCase *int8 = tcase_create("int8");
    tcase_add_loop_test(int8, test_int8_kv_cache, 0, N_LAYERS);
    suite_add_tcase(s, int8);
    return s;
}

int main(void)
{
    tu_seed_init(0); /* fixed data: the seed is not used, but printed like every suite */
    return tu_run_suite(model_suite());
}
