/* `clattn run --backward`: the gradients of the attention on .npy files
 * (clattn_attention_backward, include/clattn_backward.h). dO and the forward call's O and
 * LSE go in (O and the LSE read with --o / --lse, or recomputed by clattn_attention); dQ,
 * dK, dV and the sinks' gradient come out, optionally checked against the float64
 * reference (clattn_reference_attention_backward), and are written all-or-nothing. The
 * command line is parsed in run_args.c; Q, K, V and the other inputs of the forward call
 * are read in run.c and its desc made in run_kv.c, as for the forward call. */
#include "check.h"
#include "clattn.h"
#include "cli.h"
#include "npy.h"
#include "outfile.h"
#include "run_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --check's tolerance of a gradient: |got - ref| <= GRAD_ATOL*s + GRAD_RTOL*|ref|, with
 * s = max(1, the largest |ref| of that gradient), plus one unit in the last place of a
 * float16 or bfloat16 gradient. For inputs of magnitude 1 (s = 1) this is
 * tests/test_backward.c's TOL_DEVICE: float32 sums of d_k + d_v products, P from a
 * float32 LSE, and dS = P*(dP - D) cancelling when dP is close to D; s scales the
 * absolute part with the gradients' magnitude. */
#define GRAD_ATOL 2e-4
#define GRAD_RTOL 2e-3

static const char command[] = "clattn run";

/* The checks of --backward and its options; see run_args.h. */
int check_backward_args(const run_args *a)
{
    enum { N_BWD = 6, N_FWD = 6 };
    const char *const bwd_names[N_BWD] = {"--do", "--o", "--dq", "--dk", "--dv", "--dsinks"};
    const char *const bwd_values[N_BWD] = {a->d_out, a->o_in, a->dq, a->dk, a->dv, a->dsinks};
    if (!a->backward) {
        for (int i = 0; i < N_BWD; ++i) {
            if (bwd_values[i] != NULL) {
                return usage_error(command,
                                   "%s needs --backward (it is an option of the "
                                   "backward pass)",
                                   bwd_names[i]);
            }
        }
        return -1;
    }
    /* what only the forward pass writes */
    const char *const fwd_names[N_FWD] = {"--out",         "--weights",     "--scores",
                                          "--k-cache-out", "--v-cache-out", "--out-dtype"};
    const char *const fwd_values[N_FWD] = {a->out,         a->weights,     a->scores,
                                           a->k_cache_out, a->v_cache_out, a->out_dtype_text};
    for (int i = 0; i < N_FWD; ++i) {
        if (fwd_values[i] == NULL) {
            continue;
        }
        if (i == 0) {
            return usage_error(command, "--out is the forward pass's output: --backward writes "
                                        "--dq, --dk and --dv (and reads the forward's O "
                                        "with --o, if given)");
        }
        if (i == N_FWD - 1) {
            return usage_error(command, "--out-dtype is the forward pass's: --backward writes "
                                        "each gradient in the dtype of its input");
        }
        return usage_error(command,
                           "%s is an output of the forward pass, not of --backward (which "
                           "writes --dq, --dk, --dv and --dsinks)",
                           fwd_names[i]);
    }
    const char *const need_names[4] = {"--do", "--dq", "--dk", "--dv"};
    const char *const need_values[4] = {a->d_out, a->dq, a->dk, a->dv};
    const char *const need_what[4] = {
        "dO, the gradient of the loss with respect to O: PyTorch's grad_out", "where dQ goes",
        "where dK goes", "where dV goes"};
    for (int i = 0; i < 4; ++i) {
        if (need_values[i] == NULL) {
            return usage_error(command, "--backward needs %s FILE (%s)", need_names[i],
                               need_what[i]);
        }
    }
    if ((a->o_in != NULL) != (a->lse != NULL)) {
        return usage_error(command,
                           "%s needs %s: the forward's O and LSE go together (or give neither, "
                           "and they are recomputed)",
                           a->o_in != NULL ? "--o" : "--lse", a->o_in != NULL ? "--lse" : "--o");
    }
    if (a->dsinks != NULL && a->sinks_file == NULL) {
        return usage_error(command, "--dsinks needs --sinks FILE (it is the sinks' gradient)");
    }
    return -1;
}

/* Reads `path`, given as `option`, which must have the dtypes `accept` and be shaped
 * `want` (rank ndim; `what` says why in the message); *dtype (if not NULL) receives its
 * library dtype. Returns -1 to go on, or an exit status. */
static int read_shaped(const run_args *a, const char *option, const char *path, unsigned accept,
                       const int64_t *want, int ndim, const char *what, npy_data *d,
                       clattn_dtype *dtype)
{
    char message[512];
    if (npy_read(path, accept, 1, NULL, d, message, sizeof message) != 0) {
        return cli_error("%s %s", option, message); /* "--do FILE: ..." */
    }
    int same = d->ndim == ndim;
    for (int i = 0; i < ndim && same; ++i) {
        same = d->shape[i] == want[i];
    }
    if (!same) {
        npy_data w;
        memset(&w, 0, sizeof w);
        w.ndim = ndim;
        memcpy(w.shape, want, sizeof(int64_t) * (size_t)ndim);
        char got_text[128], want_text[128];
        return cli_error("%s: %s has shape %s; it must be %s (%s)", path, option,
                         shape_text(d, got_text, sizeof got_text),
                         shape_text(&w, want_text, sizeof want_text), what);
    }
    return dtype != NULL && !input_dtype(a, path, d, dtype) ? EXIT_FAILURE : -1;
}

/* A gradient's storage type: its input's (float32 for an int8 K or V, which the backward
 * pass refuses anyway). */
static clattn_dtype grad_dtype(clattn_dtype input)
{
    return input == CLATTN_INT8 ? CLATTN_FLOAT32 : input;
}

/* The gradients of a call: dQ, dK, dV and the sinks' (float32, h_q), as host views. */
typedef struct gradients {
    clattn_tensor t[4];
    size_t count[4];
} gradients;

static const char *const grad_names[4] = {"dQ", "dK", "dV", "d_sinks"};

/* --check: the reference's gradients (into `ref`, shaped and typed as `g`) against the
 * device's. 0, or an exit status. */
static int check_gradients(const clattn_attention_desc *desc, const clattn_tensor *q,
                           const clattn_tensor *k, const clattn_tensor *v, const clattn_tensor *d_o,
                           const gradients *g, gradients *ref)
{
    clattn_attention_desc ref_desc = *desc;
    ref_desc.d_sinks = desc->d_sinks != NULL ? &ref->t[3] : NULL;
    clattn_status status = clattn_reference_attention_backward(&ref_desc, q, k, v, d_o, &ref->t[0],
                                                               &ref->t[1], &ref->t[2]);
    if (status != CLATTN_SUCCESS) {
        return library_error("clattn_reference_attention_backward", status, NULL);
    }
    int ok = 1;
    for (int i = 0; i < 4; ++i) {
        if (i == 3 && desc->d_sinks == NULL) {
            break;
        }
        const clattn_dtype dtype = g->t[i].dtype;
        double s = check_max_abs(dtype, ref->t[i].host, ref->count[i]);
        s = s > 1.0 ? s : 1.0;
        ok &= report_check_tol(grad_names[i], dtype, g->t[i].host, ref->t[i].host, g->count[i],
                               GRAD_ATOL * s, GRAD_RTOL);
    }
    return ok ? 0
              : cli_error("--check failed: the gradients are not within tolerance; nothing was "
                          "written");
}

/* Allocates the gradients' storage (zeroed) of the shapes and dtypes of Q, K, V and the
 * sinks into g. 0, or -1 out of memory (what was allocated stays in g, to free). */
static int alloc_gradients(const run_inputs *in, int bshd, gradients *g)
{
    const npy_data *const inputs[3] = {&in->q, &in->k, &in->v};
    const clattn_dtype dtypes[3] = {in->dq, in->dk, in->dv};
    memset(g, 0, sizeof *g);
    for (int i = 0; i < 3; ++i) {
        const clattn_dtype dtype = grad_dtype(dtypes[i]);
        g->count[i] = inputs[i]->count;
        g->t[i] = host_view(NULL, inputs[i]->shape, inputs[i]->ndim, dtype, bshd);
        g->t[i].host = calloc(g->count[i] > 0 ? g->count[i] : 1, clattn_dtype_size(dtype));
    }
    g->count[3] = (size_t)in->qs[1];
    g->t[3] = clattn_tensor_host(calloc(g->count[3], sizeof(float)), 1, in->qs[1], 1, 1);
    for (int i = 0; i < 4; ++i) {
        if (g->t[i].host == NULL) {
            return -1;
        }
    }
    return 0;
}

static void free_gradients(gradients *g)
{
    for (int i = 0; i < 4; ++i) {
        free(g->t[i].host);
    }
}

/* The backward pass after the inputs are read (see run_args.h). */
int run_backward(const run_args *a, run_inputs *in)
{
    const unsigned floats = NPY_ACCEPT(NPY_F32) | NPY_ACCEPT(NPY_F16) | NPY_ACCEPT(NPY_U16);
    const int ndim = in->q.ndim;
    int64_t o_shape[4];
    memcpy(o_shape, in->q.shape, sizeof o_shape);
    o_shape[ndim - 1] = in->vs[3]; /* O: Q's shape with the last dimension d_v */
    npy_data d_o, o_in, lse_in;
    memset(&d_o, 0, sizeof d_o);
    memset(&o_in, 0, sizeof o_in);
    memset(&lse_in, 0, sizeof lse_in);
    clattn_dtype do_dtype = CLATTN_FLOAT32, o_dtype = CLATTN_FLOAT32, lse_dtype = CLATTN_FLOAT32;
    gradients g, ref;
    memset(&g, 0, sizeof g);
    memset(&ref, 0, sizeof ref);
    float *o32 = NULL, *lse32 = NULL; /* the recomputed forward's O and LSE */
    clattn_context *ctx = NULL;
    static const char o_what[] = "O's shape: Q's with the last dimension d_v";
    int rc = read_shaped(a, "--do", a->d_out, floats, o_shape, ndim, o_what, &d_o, &do_dtype);
    if (rc < 0 && a->o_in != NULL) {
        rc = read_shaped(a, "--o", a->o_in, floats, o_shape, ndim, o_what, &o_in, &o_dtype);
        if (rc < 0) {
            rc = read_shaped(a, "--lse", a->lse, NPY_ACCEPT(NPY_F32) | NPY_ACCEPT(NPY_F64),
                             in->qs + (4 - ndim), ndim - 1,
                             "the forward's LSE, float32 or float64: (b, h_q, n_q) in Q's rank "
                             "less one",
                             &lse_in, &lse_dtype);
        }
    }
    if (rc >= 0) {
        goto done;
    }
    rc = EXIT_FAILURE;
    int fits = 1;
    const size_t o_count = count_of(o_shape, ndim, sizeof(float), &fits);
    const size_t rows = in->q.count / (size_t)in->qs[3]; /* b*h_q*n_q; d_k >= 1 */
    if (!fits) {
        cli_error("O would be too large for this machine's size_t");
        goto done;
    }
    if (a->o_in == NULL) {
        o32 = calloc(o_count > 0 ? o_count : 1, sizeof *o32);
        lse32 = calloc(rows > 0 ? rows : 1, sizeof *lse32);
    }
    if (alloc_gradients(in, a->bshd, &g) != 0 ||
        (a->check && alloc_gradients(in, a->bshd, &ref) != 0) ||
        (a->o_in == NULL && (o32 == NULL || lse32 == NULL))) {
        cli_error("out of memory for the gradients");
        goto done;
    }
    run_desc rd;
    int lrc = run_make_desc(a, in, &rd);
    if (lrc >= 0) {
        rc = lrc;
        goto done;
    }
    const clattn_tensor tq = host_view(in->q.data, in->q.shape, ndim, in->dq, a->bshd);
    const clattn_tensor tk = host_view(in->k.data, in->k.shape, ndim, in->dk, a->bshd);
    const clattn_tensor tv = host_view(in->v.data, in->v.shape, ndim, in->dv, a->bshd);
    const clattn_tensor tdo = host_view(d_o.data, o_shape, ndim, do_dtype, a->bshd);
    const clattn_tensor to =
        host_view(a->o_in != NULL ? o_in.data : o32, o_shape, ndim, o_dtype, a->bshd);
    clattn_tensor tl = clattn_tensor_host(a->o_in != NULL ? lse_in.data : lse32, in->qs[0],
                                          in->qs[1], in->qs[2], 1);
    tl.dtype = lse_dtype; /* --lse's, float32 or float64; the recomputed one float32 */
    if (open_context(a->device, &ctx) != CLATTN_SUCCESS) {
        goto done;
    }
    clattn_status status;
    if (a->o_in == NULL) { /* the forward call for O (float32) and its LSE */
        clattn_attention_desc fwd = rd.desc;
        fwd.lse = &tl;
        status = clattn_attention(ctx, &fwd, &tq, &tk, &tv, &to);
        if (status != CLATTN_SUCCESS) {
            library_error("clattn_attention (the forward pass, for O and the LSE)", status, ctx);
            goto done;
        }
    }
    clattn_attention_desc bwd = rd.desc;
    bwd.d_sinks = a->sinks_file != NULL ? &g.t[3] : NULL;
    status = clattn_attention_backward(ctx, &bwd, &tq, &tk, &tv, &to, &tl, &tdo, &g.t[0], &g.t[1],
                                       &g.t[2]);
    if (status != CLATTN_SUCCESS) {
        library_error("clattn_attention_backward", status, ctx);
        goto done;
    }
    if (a->check) {
        rc = check_gradients(&bwd, &tq, &tk, &tv, &tdo, &g, &ref);
        if (rc != 0) {
            goto done;
        }
    }
    output_file files[MAX_OUTPUTS];
    const char *const paths[4] = {a->dq, a->dk, a->dv, a->dsinks};
    const npy_data *const like[4] = {&in->q, &in->k, &in->v, &in->sinks};
    int n_files = 0;
    for (int i = 0; i < 4; ++i) {
        if (paths[i] != NULL) {
            output_file *f = &files[n_files++];
            *f = (output_file){paths[i], npy_of(g.t[i].dtype), g.t[i].host, {0}, like[i]->ndim};
            memcpy(f->shape, like[i]->shape, sizeof(int64_t) * (size_t)like[i]->ndim);
        }
    }
    rc = write_outputs(files, n_files);
done:
    clattn_context_release(ctx);
    free_gradients(&g);
    free_gradients(&ref);
    free(o32);
    free(lse32);
    npy_data_free(&d_o);
    npy_data_free(&o_in);
    npy_data_free(&lse_in);
    return rc;
}
