/* Shared helpers of the clattn test executables (see testutil.h). */
#include "testutil.h"

#include <clattn_tuning.h>

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- generator --------------------------------------------------------------------- */

uint32_t tu_lowbias32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

float tu_gen(uint32_t seed, uint32_t i)
{
    uint32_t h = tu_lowbias32(i + seed * 0x9E3779B9U);
    return (float)((int32_t)(h >> 8) - 8388608) / 8388608.0f;
}

void tu_fill_gen(float *dst, size_t n, uint32_t seed, float factor)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = factor * tu_gen(seed, (uint32_t)i);
}

void tu_fill_value(float *dst, size_t n, float value)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = value;
}

float *tu_alloc(size_t n, float fill)
{
    float *p = malloc(sizeof(float) * (n > 0 ? n : 1));
    ck_assert_msg(p != NULL, "cannot allocate %zu floats", n);
    tu_fill_value(p, n > 0 ? n : 1, fill);
    return p;
}

/* ---- seeds, context, suite ----------------------------------------------------------- */

static uint32_t g_seed;
static clattn_context *g_ctx;

uint32_t tu_seed_init(uint32_t default_seed)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* keep our lines in order with Check's */
    const char *env = getenv("CLATTN_TEST_SEED");
    g_seed = (env && *env) ? (uint32_t)strtoul(env, NULL, 0) : default_seed;
    printf("seed %u (0x%08x)%s\n", (unsigned)g_seed, (unsigned)g_seed,
           (env && *env) ? " from CLATTN_TEST_SEED" : " (default; set CLATTN_TEST_SEED to change)");
    return g_seed;
}

uint32_t tu_seed(void)
{
    return g_seed;
}

clattn_context *tu_ctx(void)
{
    return g_ctx;
}

void tu_small_blocking(bool on)
{
    const clattn_blocking b = {2, 4, 16};
    const clattn_kernel kernels[] = {CLATTN_KERNEL_FUSED, CLATTN_KERNEL_SCORES,
                                     CLATTN_KERNEL_WEIGHTED_SUM};
    for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++)
        TU_ASSERT_OK(clattn_context_set_blocking(g_ctx, kernels[k], 0, 0, on ? &b : NULL),
                     "set_blocking");
}

int tu_run_suite(Suite *suite)
{
    clattn_status st = clattn_context_create(NULL, &g_ctx);
    if (st != CLATTN_SUCCESS) {
        fprintf(stderr, "clattn_context_create failed: %s: %s\n", clattn_status_string(st),
                clattn_last_error_message(NULL));
        return EXIT_FAILURE;
    }
    cl_device_id dev = NULL;
    char name[256] = "?", version[256] = "?";
    if (clattn_context_get_cl(g_ctx, NULL, &dev, NULL) == CLATTN_SUCCESS) {
        clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
        clGetDeviceInfo(dev, CL_DEVICE_VERSION, sizeof version - 1, version, NULL);
    }
    printf("clattn %s on device \"%s\" (%s)\n", clattn_version(), name, version);

    SRunner *sr = srunner_create(suite);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_set_log(sr, "-"); /* each result as it finishes: a crash still names its test */
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    if (srunner_ntests_run(sr) == 0) { /* a CK_RUN_CASE or tag that names nothing here */
        const char *run_case = getenv("CK_RUN_CASE"), *tags = getenv("CK_INCLUDE_TAGS");
        fprintf(stderr,
                "no test ran: CK_RUN_CASE=%s CK_INCLUDE_TAGS=%s selects nothing in this "
                "executable (its test cases are listed in its main())\n",
                run_case ? run_case : "(unset)", tags ? tags : "(unset)");
        failed = 1;
    }
    srunner_free(sr);
    clattn_context_release(g_ctx);
    g_ctx = NULL;
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

const clattn_algorithm tu_algorithms[2] = {CLATTN_ALGORITHM_UNFUSED, CLATTN_ALGORITHM_FUSED};

const char *tu_algorithm_name(clattn_algorithm a)
{
    switch (a) {
    case CLATTN_ALGORITHM_AUTO: return "auto";
    case CLATTN_ALGORITHM_UNFUSED: return "unfused";
    case CLATTN_ALGORITHM_FUSED: return "fused";
    }
    return "?";
}

const char *tu_mask_name(clattn_mask m)
{
    switch (m) {
    case CLATTN_MASK_NONE: return "none";
    case CLATTN_MASK_CAUSAL_TOP_LEFT: return "causal_top_left";
    case CLATTN_MASK_CAUSAL_BOTTOM_RIGHT: return "causal_bottom_right";
    case CLATTN_MASK_NO_SELF: return "no_self";
    }
    return "?";
}

/* ---- tensors ------------------------------------------------------------------------- */

static void effective_strides(const clattn_tensor *t, int64_t s[4])
{
    if (t->strides[0] || t->strides[1] || t->strides[2] || t->strides[3]) {
        memcpy(s, t->strides, sizeof(int64_t) * 4);
        return;
    }
    s[3] = 1;
    for (int i = 2; i >= 0; i--)
        s[i] = s[i + 1] * t->shape[i + 1];
}

float *tu_at(const clattn_tensor *t, int64_t b, int64_t h, int64_t s, int64_t d)
{
    int64_t st[4];
    effective_strides(t, st);
    return (float *)t->host + t->offset + b * st[0] + h * st[1] + s * st[2] + d * st[3];
}

int64_t tu_count(const clattn_tensor *t)
{
    return t->shape[0] * t->shape[1] * t->shape[2] * t->shape[3];
}

clattn_tensor tu_view(float *data, const int64_t shape[4], const int64_t strides[4], int64_t offset)
{
    clattn_tensor t = clattn_tensor_host(data, shape[0], shape[1], shape[2], shape[3]);
    memcpy(t.strides, strides, sizeof t.strides);
    t.offset = offset;
    return t;
}

float *tu_pack(const clattn_tensor *t)
{
    float *out = tu_alloc((size_t)tu_count(t), 0.0f);
    size_t n = 0;
    for (int64_t b = 0; b < t->shape[0]; b++)
        for (int64_t h = 0; h < t->shape[1]; h++)
            for (int64_t s = 0; s < t->shape[2]; s++)
                for (int64_t d = 0; d < t->shape[3]; d++)
                    out[n++] = *tu_at(t, b, h, s, d);
    return out;
}

void tu_problem_init(tu_problem *p, int64_t b, int64_t h_q, int64_t h_kv, int64_t n_q, int64_t n_kv,
                     int64_t d_k, int64_t d_v, uint32_t seed_q, uint32_t seed_k, uint32_t seed_v,
                     size_t tail)
{
    memset(p, 0, sizeof *p);
    p->b = b, p->h_q = h_q, p->h_kv = h_kv, p->n_q = n_q, p->n_kv = n_kv;
    p->d_k = d_k, p->d_v = d_v, p->tail = tail;
    const size_t nq = (size_t)(b * h_q * n_q * d_k), nk = (size_t)(b * h_kv * n_kv * d_k),
                 nv = (size_t)(b * h_kv * n_kv * d_v);
    p->q = tu_alloc(nq + tail, NAN);
    p->k = tu_alloc(nk + tail, NAN);
    p->v = tu_alloc(nv + tail, NAN);
    tu_fill_gen(p->q, nq, seed_q, 1.0f);
    tu_fill_gen(p->k, nk, seed_k, 1.0f);
    tu_fill_gen(p->v, nv, seed_v, 1.0f);
    p->tq = clattn_tensor_host(p->q, b, h_q, n_q, d_k);
    p->tk = clattn_tensor_host(p->k, b, h_kv, n_kv, d_k);
    p->tv = clattn_tensor_host(p->v, b, h_kv, n_kv, d_v);
}

void tu_problem_free(tu_problem *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
    memset(p, 0, sizeof *p);
}

clattn_tensor tu_problem_o(const tu_problem *p, float *o)
{
    return clattn_tensor_host(o, p->b, p->h_q, p->n_q, p->d_v);
}

float *tu_run(const tu_problem *p, const clattn_attention_desc *desc, clattn_algorithm algorithm)
{
    clattn_attention_desc d = *desc;
    d.algorithm = algorithm;
    /* a value no correct result has here: unwritten elements show up */
    float *o = tu_alloc((size_t)(p->b * p->h_q * p->n_q * p->d_v), 12345.0f);
    clattn_tensor to = tu_problem_o(p, o);
    TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &p->tq, &p->tk, &p->tv, &to),
                 "clattn_attention(%s, mask %s, b=%lld h_q=%lld h_kv=%lld n_q=%lld n_kv=%lld "
                 "d_k=%lld d_v=%lld)",
                 tu_algorithm_name(algorithm), tu_mask_name(d.mask), (long long)p->b,
                 (long long)p->h_q, (long long)p->h_kv, (long long)p->n_q, (long long)p->n_kv,
                 (long long)p->d_k, (long long)p->d_v);
    return o;
}

float *tu_reference(const tu_problem *p, const clattn_attention_desc *desc, float **weights)
{
    clattn_attention_desc d = *desc;
    float *o = tu_alloc((size_t)(p->b * p->h_q * p->n_q * p->d_v), NAN);
    clattn_tensor to = tu_problem_o(p, o), tw;
    if (weights) {
        *weights = tu_alloc((size_t)(p->b * p->h_q * p->n_q * p->n_kv), NAN);
        tw = clattn_tensor_host(*weights, p->b, p->h_q, p->n_q, p->n_kv);
        d.weights = &tw;
    } else {
        d.weights = NULL;
    }
    clattn_status st = clattn_reference_attention(&d, &p->tq, &p->tk, &p->tv, &to);
    ck_assert_msg(st == CLATTN_SUCCESS, "clattn_reference_attention: %s", clattn_status_string(st));
    return o;
}

clattn_status tu_attention_via_buffers(clattn_context *ctx, const clattn_attention_desc *desc,
                                       const clattn_tensor *q, const clattn_tensor *k,
                                       const clattn_tensor *v, const clattn_tensor *o,
                                       const size_t len[5])
{
    cl_context cl_ctx = NULL;
    cl_command_queue queue = NULL;
    ck_assert_int_eq(clattn_context_get_cl(ctx, &cl_ctx, NULL, &queue), CLATTN_SUCCESS);

    const clattn_tensor *host[5] = {q, k, v, o, desc->weights};
    clattn_tensor view[5];
    cl_mem mem[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int i = 0; i < 5; i++) {
        if (!host[i])
            continue;
        cl_int err = CL_SUCCESS;
        size_t n = len[i] > 0 ? len[i] : 1;
        mem[i] = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * sizeof(float),
                                host[i]->host, &err);
        ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer(%zu floats) failed: %d", n, (int)err);
        view[i] = *host[i];
        view[i].host = NULL;
        view[i].buffer = mem[i];
    }
    clattn_attention_desc d = *desc;
    d.weights = desc->weights ? &view[4] : NULL;
    cl_event done = NULL;
    clattn_status st =
        clattn_attention_enqueue(ctx, &d, &view[0], &view[1], &view[2], &view[3], 0, NULL, &done);
    if (st == CLATTN_SUCCESS) {
        ck_assert_msg(done != NULL, "clattn_attention_enqueue succeeded without a done event");
        ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
        for (int i = 3; i < 5; i++)
            if (mem[i])
                ck_assert_int_eq(clEnqueueReadBuffer(queue, mem[i], CL_TRUE, 0,
                                                     len[i] * sizeof(float), host[i]->host, 1,
                                                     &done, NULL),
                                 CL_SUCCESS);
        clReleaseEvent(done);
    }
    for (int i = 0; i < 5; i++)
        if (mem[i])
            clReleaseMemObject(mem[i]);
    return st;
}

/* ---- comparison ---------------------------------------------------------------------- */

bool tu_within(double got, double exp, tu_tol tol)
{
    if (isnan(exp) || isnan(got))
        return isnan(exp) && isnan(got);
    if (isinf(exp) || isinf(got))
        return got == exp;
    return fabs(got - exp) <= tol.atol + tol.rtol * fabs(exp);
}

bool tu_close(const char *what, const clattn_tensor *got, const double *exp64, const float *exp32,
              tu_tol tol, char *msg, size_t cap)
{
    int64_t n_bad = 0, worst[4] = {0, 0, 0, 0}, idx = 0;
    double worst_ratio = -1.0, worst_got = 0.0, worst_exp = 0.0;
    for (int64_t b = 0; b < got->shape[0]; b++)
        for (int64_t h = 0; h < got->shape[1]; h++)
            for (int64_t i = 0; i < got->shape[2]; i++)
                for (int64_t j = 0; j < got->shape[3]; j++, idx++) {
                    double g = *tu_at(got, b, h, i, j);
                    double e = exp64 ? exp64[idx] : (double)exp32[idx];
                    if (tu_within(g, e, tol))
                        continue;
                    n_bad++;
                    double t = tol.atol + tol.rtol * fabs(e);
                    double diff = fabs(g - e);
                    double ratio = (isfinite(diff) && t > 0) ? diff / t : INFINITY;
                    if (ratio > worst_ratio) {
                        worst_ratio = ratio;
                        worst[0] = b, worst[1] = h, worst[2] = i, worst[3] = j;
                        worst_got = g, worst_exp = e;
                    }
                }
    if (n_bad == 0)
        return true;
    snprintf(msg, cap,
             "%s: %lld of %lld elements out of tolerance; worst at (b,h,i,j)=(%lld,%lld,%lld,%lld):"
             " got %.9g, expected %.9g, |diff| %.3g, tolerance %.3g (atol %g + rtol %g*|exp|)",
             what, (long long)n_bad, (long long)idx, (long long)worst[0], (long long)worst[1],
             (long long)worst[2], (long long)worst[3], worst_got, worst_exp,
             fabs(worst_got - worst_exp), tol.atol + tol.rtol * fabs(worst_exp), tol.atol,
             tol.rtol);
    return false;
}

void tu_assert_untouched(const char *what, const float *buf, size_t begin, size_t end, float value)
{
    size_t n_bad = 0, first = 0;
    for (size_t i = begin; i < end; i++)
        if (memcmp(&buf[i], &value, sizeof value) != 0) {
            if (n_bad++ == 0)
                first = i;
        }
    ck_assert_msg(n_bad == 0,
                  "%s: %zu of the elements [%zu, %zu) that must stay %g were written; first at "
                  "%zu: %.9g",
                  what, n_bad, begin, end, (double)value, first, n_bad ? (double)buf[first] : 0.0);
}

void tu_assert_same_bits(const float *got, const float *want, size_t n, const char *what, ...)
{
    size_t i = 0;
    while (i < n && memcmp(&got[i], &want[i], sizeof *got) == 0)
        i++;
    if (i == n)
        return;
    char name[512];
    va_list ap;
    va_start(ap, what);
    vsnprintf(name, sizeof name, what, ap);
    va_end(ap);
    ck_abort_msg("%s: element %zu is %.9g, expected %.9g (the same bits)", name, i, (double)got[i],
                 (double)want[i]);
}

cl_mem tu_buffer(cl_context context, const void *host, size_t bytes)
{
    cl_int err;
    cl_mem m = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                              (void *)host, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    return m;
}

void tu_assert_finite(const char *what, const clattn_tensor *t)
{
    for (int64_t b = 0; b < t->shape[0]; b++)
        for (int64_t h = 0; h < t->shape[1]; h++)
            for (int64_t i = 0; i < t->shape[2]; i++)
                for (int64_t j = 0; j < t->shape[3]; j++) {
                    float x = *tu_at(t, b, h, i, j);
                    ck_assert_msg(isfinite(x), "%s: element (%lld,%lld,%lld,%lld) is %g", what,
                                  (long long)b, (long long)h, (long long)i, (long long)j,
                                  (double)x);
                }
}

/* ---- case files ---------------------------------------------------------------------- */

cJSON *tu_case_load(const char *name)
{
    /* CLATTN_CASES_DIR in the environment wins over the build's path (relocated runs) */
    const char *dir = getenv("CLATTN_CASES_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.json", dir && *dir ? dir : CLATTN_CASES_DIR, name);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open case file %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    ck_assert_msg(size > 0, "case file %s is empty", path);
    char *text = malloc((size_t)size + 1);
    ck_assert_ptr_nonnull(text);
    size_t got = fread(text, 1, (size_t)size, f);
    fclose(f);
    text[got] = '\0';
    cJSON *root = cJSON_Parse(text);
    free(text);
    ck_assert_msg(root != NULL, "case file %s is not valid JSON", path);
    return root;
}

const cJSON *tu_subcase(const cJSON *root, const char *name)
{
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(root, "subcases"))
    {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return s;
    }
    ck_abort_msg("case file has no subcase named %s", name);
    return NULL;
}

const cJSON *tu_jfind(const cJSON *node, const char *path)
{
    char key[256];
    while (node && *path) {
        size_t n = strcspn(path, "/");
        if (n >= sizeof key)
            return NULL;
        memcpy(key, path, n);
        key[n] = '\0';
        node = cJSON_GetObjectItemCaseSensitive(node, key);
        path += n;
        if (*path == '/')
            path++;
    }
    return node;
}

const cJSON *tu_jget(const cJSON *node, const char *path)
{
    const cJSON *r = tu_jfind(node, path);
    ck_assert_msg(r != NULL, "case file: no entry at %s", path);
    return r;
}

double tu_jnum(const cJSON *item)
{
    if (cJSON_IsNumber(item))
        return item->valuedouble;
    if (cJSON_IsString(item)) {
        if (strcmp(item->valuestring, "NaN") == 0)
            return NAN;
        if (strcmp(item->valuestring, "Infinity") == 0)
            return INFINITY;
        if (strcmp(item->valuestring, "-Infinity") == 0)
            return -INFINITY;
    }
    ck_abort_msg("case file: expected a number, got %s",
                 cJSON_IsString(item) ? item->valuestring : "a non-number");
    return NAN;
}

static size_t jarray_fill(const cJSON *item, double *out)
{
    if (!cJSON_IsArray(item)) {
        if (out)
            *out = tu_jnum(item);
        return 1;
    }
    size_t n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, item) n += jarray_fill(e, out ? out + n : NULL);
    return n;
}

double *tu_jarray(const cJSON *item, size_t *count)
{
    size_t n = jarray_fill(item, NULL);
    double *out = malloc(sizeof(double) * (n > 0 ? n : 1));
    ck_assert_ptr_nonnull(out);
    jarray_fill(item, out);
    if (count)
        *count = n;
    return out;
}

tu_tol tu_jtol(const cJSON *tol)
{
    tu_tol t = {0.0, 0.0};
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(tol, "atol");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(tol, "rtol");
    if (a)
        t.atol = tu_jnum(a);
    if (r)
        t.rtol = tu_jnum(r);
    return t;
}
