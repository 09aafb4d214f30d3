/* Self-attention over three token embeddings ("sat bank river", d = 4) with clattn,
 * as an installed library: Q = K = V = X, no token attends to itself
 * (CLATTN_MASK_NO_SELF), scale 1/sqrt(d_k) (the default). Prints each token's output
 * row and the attention weights, then checks the device against clattn's float64 CPU
 * reference.
 *
 * Build against an installed clattn (see examples/CMakeLists.txt and examples/Makefile):
 *     cc self_attention.c $(pkg-config --cflags --libs clattn) -o self_attention
 * Run: ./self_attention [DEVICE]   (DEVICE: "P:D" or part of a name; default: CLATTN_DEVICE,
 * else the first GPU, else the first device). Exit status 0 on success, 1 on failure. */
#include <clattn.h>

#include <math.h>
#include <stdio.h>

#define N 3 /* tokens */
#define D 4 /* embedding size = d_k = d_v */

int main(int argc, char **argv)
{
    static const char *const tokens[N] = {"sat", "bank", "river"};
    float x[N][D] = {
        {0.1f, 0.2f, 0.3f, 0.4f}, {0.3f, -0.4f, 0.0f, 1.3f}, {0.4f, -0.3f, 0.1f, 1.5f}};
    float out[N][D], weights[N][N], expect[N][D];

    clattn_context_options opt = {0};
    opt.device = argc > 1 ? argv[1] : NULL;
    clattn_context *ctx;
    if (clattn_context_create(&opt, &ctx) != CLATTN_SUCCESS) {
        fprintf(stderr, "self_attention: %s\n", clattn_last_error_message(NULL));
        return 1;
    }
    cl_device_id device;
    char name[256] = "?";
    if (clattn_context_get_cl(ctx, NULL, &device, NULL) == CLATTN_SUCCESS)
        clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    printf("clattn %s on %s\n", clattn_version(), name);

    /* views [batch, heads, seq, dim] on host memory; packed row-major */
    clattn_tensor xt = clattn_tensor_host(x, 1, 1, N, D);
    clattn_tensor ot = clattn_tensor_host(out, 1, 1, N, D);
    clattn_tensor wt = clattn_tensor_host(weights, 1, 1, N, N);
    clattn_attention_desc desc = clattn_attention_desc_default(); /* scale 0 = 1/sqrt(d_k) */
    desc.mask = CLATTN_MASK_NO_SELF;
    desc.weights = &wt; /* also return the attention weights */

    clattn_status st = clattn_attention(ctx, &desc, &xt, &xt, &xt, &ot);
    if (st != CLATTN_SUCCESS) {
        fprintf(stderr, "self_attention: clattn_attention: %s: %s\n", clattn_status_string(st),
                clattn_last_error_message(ctx));
        clattn_context_release(ctx);
        return 1;
    }
    for (int i = 0; i < N; i++) {
        printf("%-5s -> %8.4f %8.4f %8.4f %8.4f   weights", tokens[i], out[i][0], out[i][1],
               out[i][2], out[i][3]);
        for (int j = 0; j < N; j++)
            printf(" %.4f", weights[i][j]);
        printf("\n");
    }

    /* the same attention on the CPU, accumulating in double */
    clattn_tensor et = clattn_tensor_host(expect, 1, 1, N, D);
    desc.weights = NULL;
    st = clattn_reference_attention(&desc, &xt, &xt, &xt, &et);
    if (st != CLATTN_SUCCESS) {
        fprintf(stderr, "self_attention: clattn_reference_attention: %s: %s\n",
                clattn_status_string(st), clattn_last_error_message(NULL));
        clattn_context_release(ctx);
        return 1;
    }
    double worst = 0.0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < D; j++) {
            const double err = fabs((double)out[i][j] - (double)expect[i][j]);
            worst = err > worst ? err : worst;
        }
    const int ok = worst <= 1e-5;
    printf("max |device - reference| = %.2e (%s)\n", worst, ok ? "ok" : "too large");
    clattn_context_release(ctx);
    return ok ? 0 : 1;
}
