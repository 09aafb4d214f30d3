/* clattn_ring: the clattn-mpi example and test driver. Every rank builds the same global
 * Q, K, V (deterministic), takes its block (uneven when the lengths do not divide), runs
 * ring attention or split-KV decoding over MPI_COMM_WORLD, and compares its rows with
 * the single-process result that rank 0 computes on the whole sequence (broadcast to
 * every rank). Prints one line per rank (time computing, time waiting for MPI, bytes
 * sent) and PASS / FAIL; exits 1 on a mismatch beyond 1e-5 + 1e-5·|expected| (O and
 * LSE), 2 on a usage error.
 *
 *   mpirun -np 4 clattn_ring --mode ring --n 1000 --mask causal
 *   mpirun -np 2 clattn_ring --mode decode --n-q 1 --n 4096 --mask causal-bottom-right
 */
#include "clattn_mpi.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    fprintf(stderr,
            "usage: clattn_ring [--mode ring|decode] [--n N_KV] [--n-q N_Q] [--batch B]\n"
            "                   [--heads H_Q] [--kv-heads H_KV] [--dim D] [--repeat R]\n"
            "                   [--mask none|causal|causal-bottom-right|no-self] [--seed S]\n"
            "                   [--alibi SLOPE] [--q-start POS] [--sink LOGIT]\n"
            "  ring:   queries and keys are one sequence of N_KV tokens (N_Q = N_KV unless\n"
            "          given), split into one block per rank\n"
            "  decode: every rank has the N_Q (default 1) queries, the keys are split\n");
}

static float gen(unsigned seed, size_t i)
{
    unsigned x = (unsigned)(i * 2654435761u) ^ (seed * 0x9E3779B9u);
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return (float)(x >> 8) / (float)(1u << 23) - 1.0f; /* [-1, 1) */
}

/* rank r's block of n items split over p ranks: the first n % p blocks get one more */
static void block_of(int64_t n, int p, int r, int64_t *start, int64_t *len)
{
    const int64_t base = n / p, extra = n % p;
    *len = base + (r < extra ? 1 : 0);
    *start = r * base + (r < extra ? r : extra);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int P, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *mode = "ring", *mask_name = "none";
    long long n_kv = 512, n_q = -1, batch = 1, h_q = 4, h_kv = 2, dim = 64, repeat = 1;
    unsigned seed = 1;
    double alibi = 0.0, sink = NAN; /* --sink: sinks[h] = LOGIT·(h + 1), head 1 none */
    long long q_start = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (rank == 0)
                usage();
            MPI_Finalize();
            return 0;
        }
        if (!val) {
            if (rank == 0)
                usage();
            MPI_Finalize();
            return 2;
        }
        i++;
        if (!strcmp(a, "--mode"))
            mode = val;
        else if (!strcmp(a, "--mask"))
            mask_name = val;
        else if (!strcmp(a, "--n"))
            n_kv = atoll(val);
        else if (!strcmp(a, "--n-q"))
            n_q = atoll(val);
        else if (!strcmp(a, "--batch"))
            batch = atoll(val);
        else if (!strcmp(a, "--heads"))
            h_q = atoll(val);
        else if (!strcmp(a, "--kv-heads"))
            h_kv = atoll(val);
        else if (!strcmp(a, "--dim"))
            dim = atoll(val);
        else if (!strcmp(a, "--repeat"))
            repeat = atoll(val);
        else if (!strcmp(a, "--seed"))
            seed = (unsigned)atoll(val);
        else if (!strcmp(a, "--alibi"))
            alibi = atof(val);
        else if (!strcmp(a, "--sink"))
            sink = atof(val);
        else if (!strcmp(a, "--q-start"))
            q_start = atoll(val);
        else {
            if (rank == 0) {
                fprintf(stderr, "clattn_ring: unknown option %s\n", a);
                usage();
            }
            MPI_Finalize();
            return 2;
        }
    }
    const bool ring = !strcmp(mode, "ring");
    clattn_mask mask = CLATTN_MASK_NONE;
    if (!strcmp(mask_name, "causal"))
        mask = CLATTN_MASK_CAUSAL_TOP_LEFT;
    else if (!strcmp(mask_name, "causal-bottom-right"))
        mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    else if (!strcmp(mask_name, "no-self"))
        mask = CLATTN_MASK_NO_SELF;
    else if (strcmp(mask_name, "none"))
        mask = (clattn_mask)-1;
    if (n_q < 0)
        n_q = ring ? n_kv : 1;
    if ((!ring && strcmp(mode, "decode")) || mask == (clattn_mask)-1 || n_kv < 0 || batch < 1 ||
        h_kv < 1 || h_q < h_kv || h_q % h_kv || dim < 1 || repeat < 1) {
        if (rank == 0)
            usage();
        MPI_Finalize();
        return 2;
    }

    clattn_context *ctx = NULL;
    if (clattn_context_create(NULL, &ctx) != CLATTN_SUCCESS) {
        fprintf(stderr, "rank %d: clattn: %s\n", rank, clattn_last_error_message(NULL));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* the global problem, on every rank */
    const size_t nq_all = (size_t)(batch * h_q * n_q * dim),
                 nkv_all = (size_t)(batch * h_kv * n_kv * dim);
    const size_t rows_all = (size_t)(batch * h_q * n_q);
    float *Q = malloc(nq_all * 4 + 4), *K = malloc(nkv_all * 4 + 4), *V = malloc(nkv_all * 4 + 4);
    float *ref = malloc(nq_all * 4 + 4), *ref_l = malloc(rows_all * 4 + 4);
    float *out = malloc(nq_all * 4 + 4), *out_l = malloc(rows_all * 4 + 4);
    if (!Q || !K || !V || !ref || !ref_l || !out || !out_l) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < nq_all; i++)
        Q[i] = gen(seed, i);
    for (size_t i = 0; i < nkv_all; i++) {
        K[i] = gen(seed + 1, i);
        V[i] = gen(seed + 2, i);
    }
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.mask = mask;
    desc.q_start = q_start; /* far from every key with ALiBi: case R17 */
    float *slopes = malloc((size_t)h_q * sizeof *slopes);
    if (!slopes) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long long h = 0; h < h_q; h++)
        slopes[h] = (float)alibi * (float)(h + 1);
    if (alibi != 0.0)
        desc.alibi_slopes = slopes;
    float *sinks = malloc((size_t)h_q * sizeof *sinks);
    if (!sinks) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (long long h = 0; h < h_q; h++)
        sinks[h] = h == 1 ? -INFINITY : (float)sink * (float)(h + 1);
    if (!isnan(sink))
        desc.sinks = sinks;
    if (rank == 0) { /* the single-process result */
        clattn_tensor tq = clattn_tensor_host(Q, batch, h_q, n_q, dim);
        clattn_tensor tk = clattn_tensor_host(K, batch, h_kv, n_kv, dim);
        clattn_tensor tv = clattn_tensor_host(V, batch, h_kv, n_kv, dim);
        clattn_tensor to = clattn_tensor_host(ref, batch, h_q, n_q, dim);
        clattn_tensor tl = clattn_tensor_host(ref_l, batch, h_q, n_q, 1);
        clattn_attention_desc d = desc;
        d.lse = &tl;
        clattn_status st = clattn_attention(ctx, &d, &tq, &tk, &tv, &to);
        if (st != CLATTN_SUCCESS) {
            fprintf(stderr, "rank 0: single-process attention: %s\n",
                    clattn_last_error_message(ctx));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    MPI_Bcast(ref, (int)nq_all, MPI_FLOAT, 0, MPI_COMM_WORLD);
    MPI_Bcast(ref_l, (int)rows_all, MPI_FLOAT, 0, MPI_COMM_WORLD);

    /* this rank's blocks: strided views into the global arrays */
    int64_t q0 = 0, qn = n_q, k0, kn;
    if (ring)
        block_of(n_q, P, rank, &q0, &qn);
    block_of(n_kv, P, rank, &k0, &kn);
    clattn_tensor tq = clattn_tensor_host(Q, batch, h_q, qn, dim);
    clattn_tensor tk = clattn_tensor_host(K, batch, h_kv, kn, dim);
    clattn_tensor tv = clattn_tensor_host(V, batch, h_kv, kn, dim);
    clattn_tensor to = clattn_tensor_host(out, batch, h_q, qn, dim);
    clattn_tensor tl = clattn_tensor_host(out_l, batch, h_q, qn, 1);
    const int64_t sq[4] = {h_q * n_q * dim, n_q * dim, dim, 1};
    const int64_t skv[4] = {h_kv * n_kv * dim, n_kv * dim, dim, 1};
    const int64_t sl[4] = {h_q * n_q, n_q, 1, 1};
    memcpy(tq.strides, sq, sizeof sq);
    memcpy(to.strides, sq, sizeof sq);
    memcpy(tk.strides, skv, sizeof skv);
    memcpy(tv.strides, skv, sizeof skv);
    memcpy(tl.strides, sl, sizeof sl);
    tq.offset = to.offset = q0 * dim;
    tk.offset = tv.offset = k0 * dim;
    tl.offset = q0;
    desc.lse = &tl;
    clattn_mpi_stats stats;
    memset(&stats, 0, sizeof stats);
    clattn_status st = CLATTN_SUCCESS;
    double compute = 0, comm = 0, total = 0;
    for (long long rep = 0; rep < repeat && st == CLATTN_SUCCESS; rep++) {
        st = ring
                 ? clattn_mpi_ring_attention(ctx, MPI_COMM_WORLD, &desc, &tq, &tk, &tv, &to, &stats)
                 : clattn_mpi_split_kv_attention(ctx, MPI_COMM_WORLD, &desc, &tq, &tk, &tv, &to,
                                                 &stats);
        if (rep > 0 || repeat == 1) { /* the first of several is the warm-up */
            compute += stats.compute_s;
            comm += stats.comm_wait_s;
            total += stats.total_s;
        }
    }
    const double runs = repeat > 1 ? (double)(repeat - 1) : 1.0;
    if (st != CLATTN_SUCCESS) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, clattn_status_string(st),
                clattn_mpi_last_error_message());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* compare this rank's rows */
    double worst = 0.0;
    long long bad = 0;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t h = 0; h < h_q; h++)
            for (int64_t i = q0; i < q0 + qn; i++) {
                const size_t row = (size_t)((b * h_q + h) * n_q + i);
                for (int64_t d = 0; d < dim + 1; d++) {
                    const double got = d < dim ? out[row * (size_t)dim + (size_t)d] : out_l[row];
                    const double exp = d < dim ? ref[row * (size_t)dim + (size_t)d] : ref_l[row];
                    const double diff = (isinf(got) && got == exp) ? 0.0 : fabs(got - exp);
                    if (!(diff <= 1e-5 + 1e-5 * fabs(exp)))
                        bad++;
                    if (!(diff <= worst))
                        worst = diff;
                }
            }
    double line[6] = {compute / runs,
                      comm / runs,
                      total / runs,
                      (double)stats.bytes_sent,
                      (double)stats.blocks_computed,
                      (double)qn};
    double *lines = rank == 0 ? malloc(sizeof line * (size_t)P) : NULL;
    MPI_Gather(line, 6, MPI_DOUBLE, lines, 6, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    double worst_all = 0.0;
    long long bad_all = 0;
    MPI_Reduce(&worst, &worst_all, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&bad, &bad_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("clattn_ring: %s, %d ranks, mask %s, batch %lld, heads %lld/%lld, n_q %lld, n_kv "
               "%lld, d %lld, %lld run(s)\n",
               mode, P, mask_name, batch, h_q, h_kv, n_q, n_kv, dim, repeat);
        for (int r = 0; r < P; r++)
            printf("  rank %d: %4.0f queries, %d/%d blocks computed, compute %.4f s, MPI wait "
                   "%.4f s, total %.4f s, sent %.0f bytes\n",
                   r, lines[6 * r + 5], (int)lines[6 * r + 4], ring ? P : 1, lines[6 * r],
                   lines[6 * r + 1], lines[6 * r + 2], lines[6 * r + 3]);
        printf("clattn_ring: max |O - O_single|, |LSE - LSE_single| = %.3g; %s\n", worst_all,
               bad_all ? "FAIL" : "PASS");
        free(lines);
    }
    free(Q);
    free(K);
    free(V);
    free(ref);
    free(ref_l);
    free(slopes);
    free(sinks);
    free(out);
    free(out_l);
    clattn_context_release(ctx);
    int rc = 0;
    if (rank == 0)
        rc = bad_all ? 1 : 0;
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return rc;
}
