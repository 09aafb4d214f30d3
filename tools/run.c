/* `clattn run`: attention on .npy files, optionally checked against the CPU reference,
 * its outputs written all-or-nothing. The command line is parsed in run_args.c, the desc
 * made in run_kv.c; --backward goes on in run_backward.c after the inputs are read. */
#include "check.h"
#include "clattn.h"
#include "cli.h"
#include "commands.h"
#include "npy.h"
#include "outfile.h"
#include "run_args.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Checks the outputs (--out, --weights, --lse, --scores, the caches; with --backward the
 * gradients, and --lse is an input) before anything is computed: none names an input
 * file or another output (usage error), and each can be replaced. Returns -1 to go
 * on, or an exit status. */
static int check_output_paths(const run_args *a)
{
    enum { N_OUTS = 10, N_INS = 19 };
    const char *const lse_out = a->backward ? NULL : a->lse, *lse_in = a->backward ? a->lse : NULL;
    const char *const out_names[N_OUTS] = {"--out",         "--weights",     "--lse", "--scores",
                                           "--k-cache-out", "--v-cache-out", "--dq",  "--dk",
                                           "--dv",          "--dsinks"};
    const char *const outs[N_OUTS] = {a->out,         a->weights,     lse_out, a->scores,
                                      a->k_cache_out, a->v_cache_out, a->dq,   a->dk,
                                      a->dv,          a->dsinks};
    const char *const in_names[N_INS] = {"--q",
                                         "--k",
                                         "--v",
                                         "--mask-file",
                                         a->kv_lens_option,
                                         "--q-lens",
                                         "--sinks",
                                         "--k-scale",
                                         "--v-scale",
                                         "--block-table",
                                         "--k-new",
                                         "--v-new",
                                         "--rotary-cos",
                                         "--rotary-sin",
                                         "--cu-seqlens-q",
                                         "--cu-seqlens-k",
                                         "--do",
                                         "--o",
                                         "--lse"};
    const char *const ins[N_INS] = {a->q,
                                    a->k,
                                    a->v,
                                    a->mask_file,
                                    a->kv_lens_file,
                                    a->q_lens_file,
                                    a->sinks_file,
                                    a->k_scale_file,
                                    a->v_scale_file,
                                    a->block_table_file,
                                    a->k_new_file,
                                    a->v_new_file,
                                    a->rotary_cos_file,
                                    a->rotary_sin_file,
                                    a->cu_q_file,
                                    a->cu_k_file,
                                    a->d_out,
                                    a->o_in,
                                    lse_in};
    int n_outs = 0;
    for (int i = 0; i < N_OUTS; ++i) {
        n_outs += outs[i] != NULL;
    }
    if (n_outs > MAX_OUTPUTS) {
        return usage_error("clattn run",
                           "%d output files: one run writes at most %d (of --out, --weights, "
                           "--lse, --scores, --k-cache-out, --v-cache-out)",
                           n_outs, MAX_OUTPUTS);
    }
    for (int i = 0; i < N_OUTS; ++i) {
        for (int j = 0; j < N_INS && outs[i] != NULL; ++j) {
            if (ins[j] != NULL && same_file(outs[i], ins[j])) {
                return usage_error("clattn run",
                                   "%s '%s' is the same file as %s '%s'; writing it would "
                                   "destroy an input",
                                   out_names[i], outs[i], in_names[j], ins[j]);
            }
        }
    }
    for (int i = 0; i < N_OUTS; ++i) {
        for (int j = i + 1; j < N_OUTS && outs[i] != NULL; ++j) {
            if (outs[j] != NULL && same_file(outs[i], outs[j])) {
                return usage_error("clattn run", "%s '%s' and %s '%s' name the same file",
                                   out_names[i], outs[i], out_names[j], outs[j]);
            }
        }
    }
    for (int i = 0; i < N_OUTS; ++i) {
        if (outs[i] != NULL && check_output_file(outs[i]) != 0) {
            return EXIT_FAILURE;
        }
    }
    return -1;
}

/* Checks that dimension `what` of file a equals that of file b. */
static int same_dim(const char *what, const char *a_path, int64_t a, const char *b_path, int64_t b,
                    int bshd)
{
    if (a != b) {
        cli_error("%s: %s is %lld but %s has %lld%s", a_path, what, (long long)a, b_path,
                  (long long)b, layout_hint(bshd));
        return 0;
    }
    return 1;
}

/* Shape agreement of Q, K and V, with messages naming the files. */
static int check_shapes(const run_args *a, const npy_data *q, const npy_data *k, const npy_data *v)
{
    const char *const paths[] = {a->q, a->k, a->v};
    const npy_data *const arrays[] = {q, k, v};
    const char *const dims[] = {"d_k", "d_k", "d_v"};
    int64_t qs[4], ks[4], vs[4];
    int64_t *const shapes[] = {qs, ks, vs};
    for (int i = 0; i < 3; ++i) {
        if (arrays[i]->ndim < 2) { /* the reader rejects it already */
            char ranks[128];
            cli_error("%s: rank %d is not supported (need %s)", paths[i], arrays[i]->ndim,
                      layout_ranks(a->bshd, ranks, sizeof ranks));
            return 0;
        }
        if (i > 0 && !same_dim("the rank (Q, K and V must have the same rank)", paths[i],
                               arrays[i]->ndim, a->q, q->ndim, 0)) {
            return 0;
        }
        shape4(arrays[i]->shape, arrays[i]->ndim, a->bshd, shapes[i]);
        if (shapes[i][3] < 1) {
            cli_error("%s: %s is 0; head dims must be at least 1", paths[i], dims[i]);
            return 0;
        }
    }
    if (a->block_table_file != NULL) { /* page pools: (num_pages, h_kv, page_size, d) */
        if (q->ndim != 4) {
            static const char *const names[4] = {"num_pages", "h_kv", "page_size", "d"};
            char pool[64];
            cli_error("%s: --block-table needs Q, K and V of rank 4 (K and V page pools "
                      "%s), not rank %d",
                      a->k, layout_text(a->bshd, 4, names, pool, sizeof pool), k->ndim);
            return 0;
        }
        if (!same_dim("the number of pages", a->v, vs[0], a->k, ks[0], 0)) {
            return 0;
        }
    } else if (!same_dim("the batch size", a->k, ks[0], a->q, qs[0], 0) ||
               !same_dim("the batch size", a->v, vs[0], a->q, qs[0], 0)) {
        return 0;
    }
    if (!same_dim("the number of heads", a->v, vs[1], a->k, ks[1], a->bshd) ||
        !same_dim(a->block_table_file != NULL ? "the page size" : "n_kv (rows)", a->v, vs[2], a->k,
                  ks[2], a->bshd) ||
        !same_dim("d_k (last dimension)", a->k, ks[3], a->q, qs[3], 0)) {
        return 0;
    }
    return layout_check_heads(a->q, qs[1], a->k, ks[1], a->bshd); /* (V's are K's) */
}

/* ---- dtypes ---------------------------------------------------------------------- */

/* The .npy dtype a library dtype is written as (bfloat16 as uint16 words). */
npy_dtype npy_of(clattn_dtype dtype)
{
    return dtype == CLATTN_FLOAT16    ? NPY_F16
           : dtype == CLATTN_BFLOAT16 ? NPY_U16
           : dtype == CLATTN_FLOAT64  ? NPY_F64
                                      : NPY_F32;
}

/* ---- running ------------------------------------------------------------------------ */

/* Element count of a shape, or 0 in *ok if it (times esize bytes) overflows size_t. */
size_t count_of(const int64_t *shape, int ndim, size_t esize, int *ok)
{
    size_t n = 1;
    for (int i = 0; i < ndim; ++i) {
        if (shape[i] != 0 && n > SIZE_MAX / esize / (size_t)shape[i]) {
            *ok = 0;
        }
        n *= (size_t)shape[i];
    }
    return n;
}

/* The library dtype of input `path`, read as `d`; 0 if it has none (a message is
 * printed). */
int input_dtype(const run_args *a, const char *path, const npy_data *d, clattn_dtype *out)
{
    switch (d->dtype) {
    case NPY_F32: *out = CLATTN_FLOAT32; return 1;
    case NPY_F16: *out = CLATTN_FLOAT16; return 1;
    case NPY_I8: *out = CLATTN_INT8; return 1;     /* K and V only: Q's reader refuses it */
    case NPY_F64: *out = CLATTN_FLOAT64; return 1; /* an LSE only: the others refuse it */
    case NPY_U16:
        if (a->bf16) {
            *out = CLATTN_BFLOAT16;
            return 1;
        }
        cli_error("%s: dtype '<u2' (uint16) is read only with --dtype bf16 (as bfloat16 bit "
                  "patterns)",
                  path);
        return 0;
    default: cli_error("%s: dtype %s is not supported", path, npy_dtype_descr(d->dtype)); return 0;
    }
}

/* "(a, b)" for the shape of `d` ("(a,)" for rank 1), into buf. */
const char *shape_text(const npy_data *d, char *buf, size_t size)
{
    snprintf(buf, size, "(");
    for (int i = 0; i < d->ndim; ++i) {
        size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%lld%s", (long long)d->shape[i],
                 i + 1 < d->ndim ? ", "
                 : d->ndim == 1  ? ",)"
                                 : ")");
    }
    return buf;
}

/* --check with --k-new: the caches written by the call against those the reference
 * wrote (its own copies ref_k, ref_v), for each cache written out. 0, or an exit
 * status. */
static int check_caches(const run_args *a, const run_inputs *in, const void *ref_k,
                        const void *ref_v)
{
    int ok = 1;
    if (a->k_cache_out != NULL) {
        ok &= report_check("K cache", in->dk, in->k.data, ref_k, in->k.count);
    }
    if (a->v_cache_out != NULL) {
        ok &= report_check("V cache", in->dv, in->v.data, ref_v, in->v.count);
    }
    return ok ? 0
              : cli_error("--check failed: the updated caches are not within tolerance; nothing "
                          "was written");
}

/* Runs the reference with the same desc and inputs, into its own outputs, and compares
 * O, the weights and the LSE; returns 0, or an exit status. */
static int check_against_reference(const clattn_attention_desc *desc, const clattn_tensor *q,
                                   const clattn_tensor *k, const clattn_tensor *v,
                                   const clattn_tensor *o, size_t o_count, size_t w_count,
                                   size_t lse_count)
{
    const size_t o_bytes = (o_count * clattn_dtype_size(o->dtype) + 15) / 16 * 16;
    /* zeroed like the outputs: rows outside every --cu-seqlens sequence are written by
     * neither */
    const size_t lse_size = desc->lse != NULL ? clattn_dtype_size(desc->lse->dtype) : sizeof(float);
    const size_t w_bytes = (w_count * sizeof(float) + 15) / 16 * 16; /* (the LSE's alignment) */
    unsigned char *ref = calloc(1, o_bytes + w_bytes + lse_count * lse_size + 1);
    if (ref == NULL) {
        return cli_error("out of memory for the reference result");
    }
    float *ref_w_data = (float *)(void *)(ref + o_bytes);
    void *ref_lse_data = ref + o_bytes + w_bytes; /* float32 or float64 */
    clattn_tensor ref_o = *o, ref_w, ref_lse;
    ref_o.host = ref;
    clattn_attention_desc ref_desc = *desc;
    if (desc->weights != NULL) {
        ref_w = *desc->weights;
        ref_w.host = ref_w_data;
        ref_desc.weights = &ref_w;
    }
    if (desc->lse != NULL) {
        ref_lse = *desc->lse;
        ref_lse.host = ref_lse_data;
        ref_desc.lse = &ref_lse;
    }
    int rc = EXIT_FAILURE;
    clattn_status status = clattn_reference_attention(&ref_desc, q, k, v, &ref_o);
    if (status != CLATTN_SUCCESS) {
        library_error("clattn_reference_attention", status, NULL);
    } else {
        int ok = report_check("O", o->dtype, o->host, ref, o_count);
        if (desc->weights != NULL) {
            ok &= report_check("W", CLATTN_FLOAT32, desc->weights->host, ref_w_data, w_count);
        }
        if (desc->lse != NULL) {
            ok &= report_check("LSE", desc->lse->dtype, desc->lse->host, ref_lse_data, lse_count);
        }
        rc = ok ? 0
                : cli_error("--check failed: the result is not within tolerance; nothing "
                            "was written");
    }
    free(ref);
    return rc;
}

/* The desc of the --scores-stage: raw keeps only the scale (no mask term, bias or
 * softcap), softcap adds the softcap, masked is the call's own desc without dropout (the
 * scores come before the softmax and dropout; the stages refuse a dropout desc). */
static clattn_attention_desc scores_desc(const clattn_attention_desc *desc, int stage)
{
    if (stage == RUN_SCORES_MASKED) {
        clattn_attention_desc d = *desc;
        d.dropout_p = 0.0f;
        return d;
    }
    clattn_attention_desc d = clattn_attention_desc_default();
    d.scale = desc->scale;
    d.softcap = stage == RUN_SCORES_SOFTCAP ? desc->softcap : 0.0f;
    return d;
}

/* --scores: S at the asked stage on the device (clattn_scores), and with --check the
 * reference's (clattn_reference_scores) compared element by element. 0, or an exit
 * status. */
static int compute_scores(const run_args *a, clattn_context *ctx, const clattn_attention_desc *desc,
                          const clattn_tensor *q, const clattn_tensor *k, const clattn_tensor *s,
                          size_t count)
{
    const clattn_attention_desc d = scores_desc(desc, a->scores_stage);
    clattn_status status = clattn_scores(ctx, &d, q, k, s);
    if (status != CLATTN_SUCCESS) {
        return library_error("clattn_scores", status, ctx);
    }
    if (!a->check) {
        return 0;
    }
    float *ref = malloc((count > 0 ? count : 1) * sizeof *ref);
    if (ref == NULL) {
        return cli_error("out of memory for the reference scores");
    }
    clattn_tensor rs = *s;
    rs.host = ref;
    int rc = EXIT_FAILURE;
    status = clattn_reference_scores(&d, q, k, &rs);
    if (status != CLATTN_SUCCESS) {
        library_error("clattn_reference_scores", status, NULL);
    } else if (report_check("S", CLATTN_FLOAT32, s->host, ref, count)) {
        rc = 0;
    } else {
        cli_error("--check failed: the scores are not within tolerance; nothing was written");
    }
    free(ref);
    return rc;
}

/* Everything after reading and checking the inputs. */
static int run_attention(const run_args *a, run_inputs *in)
{
    const int ndim = in->q.ndim;
    const int64_t n_kv = in->n_kv, d_v = in->vs[3];
    const clattn_dtype o_dtype = a->out_dtype >= 0 ? (clattn_dtype)a->out_dtype : in->dq;
    const clattn_dtype lse_dtype = (clattn_dtype)a->lse_dtype;
    /* Q's shape in [b, h, n] order (its rank; --layout keeps it for the LSE, weights and
     * scores); O gets Q's file shape with the last dimension d_v */
    const int64_t *const b_h_n = in->qs + (4 - ndim);
    output_file files[MAX_OUTPUTS];
    int n_files = 0, fits = 1;
    /* scores, LSE, weights, then O: O is renamed last */
    output_file *lse_file = NULL, *w_file = NULL, *s_file = NULL, *o_file;
    output_file *kc_file = NULL, *vc_file = NULL; /* --k-cache-out, --v-cache-out */
    const char *const cache_outs[2] = {a->k_cache_out, a->v_cache_out};
    const npy_data *const caches[2] = {&in->k, &in->v};
    output_file **const cache_files[2] = {&kc_file, &vc_file};
    for (int i = 0; i < 2; ++i) { /* the caches after the append, as read */
        if (cache_outs[i] != NULL) {
            output_file *f = *cache_files[i] = &files[n_files++];
            *f = (output_file){cache_outs[i], caches[i]->dtype, NULL, {0}, caches[i]->ndim};
            memcpy(f->shape, caches[i]->shape, sizeof(int64_t) * (size_t)caches[i]->ndim);
        }
    }
    if (a->scores != NULL) {
        s_file = &files[n_files++];
        *s_file = (output_file){a->scores, NPY_F32, NULL, {0}, ndim};
        memcpy(s_file->shape, b_h_n, sizeof(int64_t) * (size_t)ndim);
        s_file->shape[ndim - 1] = n_kv;
    }
    if (a->lse != NULL) {
        lse_file = &files[n_files++];
        *lse_file = (output_file){a->lse, npy_of(lse_dtype), NULL, {0}, ndim - 1};
        memcpy(lse_file->shape, b_h_n, sizeof(int64_t) * (size_t)(ndim - 1));
    }
    if (a->weights != NULL) {
        w_file = &files[n_files++];
        *w_file = (output_file){a->weights, NPY_F32, NULL, {0}, ndim};
        memcpy(w_file->shape, b_h_n, sizeof(int64_t) * (size_t)ndim);
        w_file->shape[ndim - 1] = n_kv;
        if (a->head_mean && ndim >= 3) {
            w_file->shape[ndim - 3] = 1; /* the head dimension, kept as 1 */
        }
    }
    o_file = &files[n_files++];
    *o_file = (output_file){a->out, npy_of(o_dtype), NULL, {0}, ndim};
    memcpy(o_file->shape, in->q.shape, sizeof(int64_t) * (size_t)ndim);
    o_file->shape[ndim - 1] = d_v;

    size_t o_count = count_of(o_file->shape, ndim, clattn_dtype_size(o_dtype), &fits);
    size_t w_count = w_file ? count_of(w_file->shape, ndim, sizeof(float), &fits) : 0;
    const size_t lse_size = clattn_dtype_size(lse_dtype);
    size_t lse_count = lse_file ? count_of(lse_file->shape, ndim - 1, lse_size, &fits) : 0;
    size_t s_count = s_file ? count_of(s_file->shape, ndim, sizeof(float), &fits) : 0;
    if (!fits) {
        return cli_error("the output would be too large for this machine's size_t");
    }
    void *o = calloc(o_count > 0 ? o_count : 1, clattn_dtype_size(o_dtype));
    void *ref_k = NULL, *ref_v = NULL; /* --check with --k-new */
    float *w = w_file ? calloc(w_count > 0 ? w_count : 1, sizeof *w) : NULL;
    void *lse = lse_file ? calloc(lse_count > 0 ? lse_count : 1, lse_size) : NULL;
    float *sc = s_file ? calloc(s_count > 0 ? s_count : 1, sizeof *sc) : NULL;
    clattn_context *ctx = NULL;
    run_desc rd;
    memset(&rd, 0, sizeof rd);
    int rc = EXIT_FAILURE;
    if (o == NULL || (w_file && w == NULL) || (lse_file && lse == NULL) || (s_file && sc == NULL)) {
        cli_error("out of memory for the outputs (%zu + %zu + %zu + %zu elements)", o_count,
                  w_count, lse_count, s_count);
        goto done;
    }
    clattn_tensor tq = host_view(in->q.data, in->q.shape, ndim, in->dq, a->bshd);
    clattn_tensor tk = host_view(in->k.data, in->k.shape, ndim, in->dk, a->bshd);
    clattn_tensor tv = host_view(in->v.data, in->v.shape, ndim, in->dv, a->bshd);
    clattn_tensor to = host_view(o, o_file->shape, ndim, o_dtype, a->bshd);
    /* [b, h_q or 1, n_q, n_kv] and [b, h_q, n_q, 1] */
    clattn_tensor tw =
        clattn_tensor_host(w, in->qs[0], a->head_mean ? 1 : in->qs[1], in->qs[2], n_kv);
    clattn_tensor tl = clattn_tensor_host(lse, in->qs[0], in->qs[1], in->qs[2], 1);
    tl.dtype = lse_dtype;
    int lrc = run_make_desc(a, in, &rd);
    if (lrc >= 0) {
        rc = lrc;
        goto done;
    }
    clattn_attention_desc desc = rd.desc;
    desc.weights = w != NULL ? &tw : NULL;
    desc.weights_head_mean = a->head_mean;
    desc.lse = lse != NULL ? &tl : NULL;
    /* --k-new: the call writes the appended rows into K and V; the reference of --check
     * appends into its own copies of the caches as they were before */
    clattn_tensor ref_tk = tk, ref_tv = tv;
    if (a->check && a->k_new_file != NULL) {
        const size_t k_bytes = in->k.count * npy_dtype_size(in->k.dtype);
        const size_t v_bytes = in->v.count * npy_dtype_size(in->v.dtype);
        ref_k = malloc(k_bytes + 1);
        ref_v = malloc(v_bytes + 1);
        if (ref_k == NULL || ref_v == NULL) {
            cli_error("out of memory for the reference's copies of K and V");
            goto done;
        }
        memcpy(ref_k, in->k.data, k_bytes);
        memcpy(ref_v, in->v.data, v_bytes);
        ref_tk.host = ref_k;
        ref_tv.host = ref_v;
    }
    if (open_context(a->device, &ctx) != CLATTN_SUCCESS) {
        goto done;
    }
    const char *what = "clattn_block_mask_create";
    clattn_status status = run_block_mask(a, in, ctx, &rd); /* --block-mask (run_mods.c) */
    if (status == CLATTN_SUCCESS) {
        what = "clattn_attention";
        status = clattn_attention(ctx, &desc, &tq, &tk, &tv, &to);
    }
    if (status != CLATTN_SUCCESS) {
        library_error(what, status, ctx);
        goto done;
    }
    if (a->check) {
        rc =
            check_against_reference(&desc, &tq, &ref_tk, &ref_tv, &to, o_count, w_count, lse_count);
        if (rc == 0) {
            rc = check_caches(a, in, ref_k, ref_v);
        }
        if (rc != 0) {
            goto done;
        }
    }
    if (s_file) {
        const clattn_tensor ts = clattn_tensor_host(sc, in->qs[0], in->qs[1], in->qs[2], n_kv);
        rc = compute_scores(a, ctx, &desc, &tq, &tk, &ts, s_count);
        if (rc != 0) {
            goto done;
        }
        s_file->data = sc;
    }
    o_file->data = o;
    if (w_file) {
        w_file->data = w;
    }
    if (lse_file) {
        lse_file->data = lse;
    }
    if (kc_file) {
        kc_file->data = in->k.data;
    }
    if (vc_file) {
        vc_file->data = in->v.data;
    }
    rc = write_outputs(files, n_files);
done:
    clattn_block_mask_release((clattn_block_mask *)rd.mods.block_mask);
    clattn_context_release(ctx);
    free(ref_k);
    free(ref_v);
    free(o);
    free(w);
    free(lse);
    free(sc);
    return rc;
}

/* Reads the inputs and checks their dtypes and shapes; returns -1 to go on, or an exit
 * status. */
static int read_inputs(const run_args *a, run_inputs *in)
{
    const unsigned floats = NPY_ACCEPT(NPY_F32) | NPY_ACCEPT(NPY_F16) | NPY_ACCEPT(NPY_U16);
    npy_data *const arrays[] = {&in->q, &in->k, &in->v};
    clattn_dtype *const dtypes[] = {&in->dq, &in->dk, &in->dv};
    const char *const paths[] = {a->q, a->k, a->v};
    char message[512], ranks[128];
    for (int i = 0; i < 3; ++i) {
        /* K and V may be int8 (with --k-scale, --v-scale), Q not */
        const unsigned accept = i == 0 ? floats : floats | NPY_ACCEPT(NPY_I8);
        if (npy_read(paths[i], accept, 2, layout_ranks(a->bshd, ranks, sizeof ranks), arrays[i],
                     message, sizeof message) != 0) {
            return cli_error("%s", message);
        }
        if (!input_dtype(a, paths[i], arrays[i], dtypes[i])) {
            return EXIT_FAILURE;
        }
    }
    if (!check_shapes(a, &in->q, &in->k, &in->v)) {
        return EXIT_FAILURE;
    }
    shape4(in->q.shape, in->q.ndim, a->bshd, in->qs);
    shape4(in->k.shape, in->k.ndim, a->bshd, in->ks);
    shape4(in->v.shape, in->v.ndim, a->bshd, in->vs);
    const char *const scale_options[] = {"--k-scale", "--v-scale"};
    const char *const scale_paths[] = {a->k_scale_file, a->v_scale_file};
    npy_data *const scales[] = {&in->k_scale, &in->v_scale};
    for (int i = 0; i < 2; ++i) {
        const npy_data *kv = i == 0 ? &in->k : &in->v;
        if (scale_paths[i] != NULL && kv->dtype == NPY_I8 &&
            npy_read(scale_paths[i], NPY_ACCEPT(NPY_F32), 1, i == 0 ? "K's rank" : "V's rank",
                     scales[i], message, sizeof message) != 0) {
            return cli_error("%s %s", scale_options[i], message); /* "--k-scale FILE: ..." */
        }
        int rc = run_check_scale(scale_options[i], scale_paths[i], scales[i], paths[i + 1], kv,
                                 a->block_table_file != NULL, a->bshd);
        if (rc >= 0) {
            return rc;
        }
    }
    if (a->mask_file != NULL &&
        npy_read(a->mask_file, NPY_ACCEPT(NPY_BOOL) | NPY_ACCEPT(NPY_U8) | NPY_ACCEPT(NPY_F32), 1,
                 "1 to 4 dimensions, broadcast to (b, h_q, n_q, n_kv)", &in->mask, message,
                 sizeof message) != 0) {
        return cli_error("%s", message);
    }
    const char *const len_paths[] = {a->kv_lens_file, a->q_lens_file};
    npy_data *const lens[] = {&in->kv_lens, &in->q_lens};
    for (int i = 0; i < 2; ++i) {
        if (len_paths[i] != NULL && npy_read(len_paths[i], NPY_ACCEPT(NPY_I32), 1, "(b,)", lens[i],
                                             message, sizeof message) != 0) {
            return cli_error("%s", message);
        }
    }
    if (a->sinks_file != NULL && npy_read(a->sinks_file, NPY_ACCEPT(NPY_F32), 1, "(h_q,)",
                                          &in->sinks, message, sizeof message) != 0) {
        return cli_error("%s", message);
    }
    in->n_kv = in->ks[2];
    if (a->block_table_file != NULL) {
        if (npy_read(a->block_table_file, NPY_ACCEPT(NPY_I32), 2, "(b, max_pages)",
                     &in->block_table, message, sizeof message) != 0) {
            return cli_error("--block-table %s", message);
        }
        in->n_kv = in->block_table.shape[1] * in->ks[2]; /* max_pages * page_size */
    }
    const char *const new_paths[] = {a->k_new_file, a->v_new_file};
    npy_data *const new_rows[] = {&in->k_new, &in->v_new};
    clattn_dtype *const new_dtypes[] = {&in->dk_new, &in->dv_new};
    for (int i = 0; i < 2; ++i) {
        if (new_paths[i] == NULL) {
            continue;
        }
        if (npy_read(new_paths[i], floats, 2, "Q's rank", new_rows[i], message, sizeof message) !=
            0) {
            return cli_error("%s %s", i == 0 ? "--k-new" : "--v-new", message);
        }
        if (!input_dtype(a, new_paths[i], new_rows[i], new_dtypes[i])) {
            return EXIT_FAILURE;
        }
    }
    const char *const table_paths[] = {a->rotary_cos_file, a->rotary_sin_file};
    npy_data *const tables[] = {&in->rotary_cos, &in->rotary_sin};
    for (int i = 0; i < 2; ++i) {
        if (table_paths[i] != NULL &&
            npy_read(table_paths[i], NPY_ACCEPT(NPY_F32), 2, "(table_len, dim/2)", tables[i],
                     message, sizeof message) != 0) {
            return cli_error("%s %s", i == 0 ? "--rotary-cos" : "--rotary-sin", message);
        }
    }
    int mrc = run_read_mods(a, in); /* tools/run_mods.c */
    if (mrc >= 0) {
        return mrc;
    }
    const char *const cu_paths[] = {a->cu_q_file, a->cu_k_file};
    npy_data *const cus[] = {&in->cu_q, &in->cu_k};
    for (int i = 0; i < 2; ++i) {
        if (cu_paths[i] != NULL && npy_read(cu_paths[i], NPY_ACCEPT(NPY_I32), 1, "(b + 1,)", cus[i],
                                            message, sizeof message) != 0) {
            return cli_error("%s %s", i == 0 ? "--cu-seqlens-q" : "--cu-seqlens-k", message);
        }
    }
    return -1;
}

int cmd_run(int argc, char **argv)
{
    run_args a = {0};
    int rc = parse_run_args(argc, argv, &a);
    if (rc < 0) {
        rc = check_output_paths(&a);
    }
    if (rc >= 0) {
        free_run_args(&a);
        return rc;
    }
    run_inputs in;
    memset(&in, 0, sizeof in);
    rc = read_inputs(&a, &in);
    if (rc < 0) {
        rc = a.backward ? run_backward(&a, &in) : run_attention(&a, &in);
    }
    npy_data *const arrays[] = {&in.q,          &in.k,           &in.v,     &in.mask,
                                &in.kv_lens,    &in.q_lens,      &in.sinks, &in.k_scale,
                                &in.v_scale,    &in.block_table, &in.k_new, &in.v_new,
                                &in.rotary_cos, &in.rotary_sin,  &in.cu_q,  &in.cu_k};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; ++i) {
        npy_data_free(arrays[i]);
    }
    run_free_mods(&in);
    free_run_args(&a);
    return rc;
}
