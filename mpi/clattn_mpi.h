/*
 * clattn-mpi — one attention call over several processes (machines) with MPI: ring
 * attention for one long sequence, and split-KV decoding. A separate library
 * (libclattn_mpi.a, built when CMake finds MPI) on top of clattn; each rank uses its
 * own clattn_context (its own device). docs/SCALING.md has the algorithms, the
 * communication volume and the measured runs.
 *
 * Conventions as in clattn.h (sizes in elements, statuses, no aborts or prints).
 * Every call here is collective over `comm`: every rank must make it, with the same
 * desc fields (scale, mask, window, softcap, alibi_slopes, q_start, kv_start), the same
 * batch, heads and head dims; only the sequence lengths of the blocks may differ.
 *
 * The global sequence is the concatenation of the ranks' blocks in rank order: rank r's
 * queries sit at positions desc->q_start + Σ_{r'<r} n_q(r') and its keys at
 * desc->kv_start + Σ_{r'<r} n_kv(r'), so the masks mean what they mean for the whole
 * sequence on one device (CAUSAL_BOTTOM_RIGHT aligns the last global query with the
 * last global key).
 *
 * Not supported (CLATTN_ERROR_UNSUPPORTED on every rank, before any communication of
 * data): desc->weights, mask_tensor, kv_lens, q_lens and masked_rows = NAN.
 */
#ifndef CLATTN_MPI_H
#define CLATTN_MPI_H

#include <clattn.h>
#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/** What one rank did in a call (wall-clock seconds, MPI_Wtime). */
typedef struct clattn_mpi_stats {
    int steps;           /**< ring steps (the communicator's size); 1 for split-KV */
    int blocks_computed; /**< K/V blocks attended; the others were fully masked */
    double compute_s;    /**< time from enqueueing a block's attention + merge to its
                              completion, summed over the blocks */
    double comm_wait_s;  /**< time spent waiting for MPI after the local work was done
                              (communication not hidden behind compute), summed */
    double total_s;      /**< the whole call */
    int64_t bytes_sent;  /**< payload bytes this rank sent (K/V blocks or partials) */
} clattn_mpi_stats;

/**
 * Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers"): rank
 * r holds Q_r [b, h_q, n_q(r), d_k], K_r [b, h_kv, n_kv(r), d_k], V_r [b, h_kv,
 * n_kv(r), d_v] (host views, any dtype and strides) and receives O_r [b, h_q, n_q(r),
 * d_v] = attention of its queries over the keys of every rank. In P steps the K/V
 * blocks travel around the ring r → r+1 with MPI_Isend/MPI_Irecv while the device
 * attends Q_r to the block it holds (clattn_attention_enqueue) and merges the partial
 * into a running (O, LSE) on the device (clattn_merge_enqueue). A block that no query
 * of r can see (causal, window) is forwarded without being computed.
 *
 * @param ctx    this rank's context.
 * @param desc   the whole sequence's desc (see the header comment); desc->lse, if set,
 *               receives this rank's rows of the global LSE [b, h_q, n_q(r), 1].
 * @param stats  optional.
 * @return CLATTN_SUCCESS, a status of clattn_attention(), CLATTN_ERROR_UNSUPPORTED
 *         (see above) or CLATTN_ERROR_OPENCL for an MPI failure (the message names the
 *         MPI call; in clattn_mpi_last_error_message()). Ranks agree on the status of
 *         the validation; a device failure on one rank makes the others fail at the
 *         next exchange or hang, as with any MPI program: abort the job.
 */
clattn_status clattn_mpi_ring_attention(clattn_context *ctx, MPI_Comm comm,
                                        const clattn_attention_desc *desc, const clattn_tensor *q,
                                        const clattn_tensor *k, const clattn_tensor *v,
                                        const clattn_tensor *o, clattn_mpi_stats *stats);

/**
 * Split-KV decoding: every rank holds the same queries Q [b, h_q, n_q, d_k] (e.g. the
 * new tokens) and its own block of the keys; each attends Q to its block (partial O_r,
 * LSE_r), then an LSE-weighted reduction gives every rank the exact O over all keys:
 *     M = max_r LSE_r (MPI_Allreduce MAX), s_r = exp(LSE_r − M),
 *     O = Σ_r s_r·O_r / Σ_r s_r, LSE = M + log Σ_r s_r (one MPI_Allreduce SUM, double).
 * Rows no rank sees output zeros (LSE −∞). desc->q_start is the queries' position (the
 * same on every rank).
 * @return as clattn_mpi_ring_attention().
 */
clattn_status clattn_mpi_split_kv_attention(clattn_context *ctx, MPI_Comm comm,
                                            const clattn_attention_desc *desc,
                                            const clattn_tensor *q, const clattn_tensor *k,
                                            const clattn_tensor *v, const clattn_tensor *o,
                                            clattn_mpi_stats *stats);

/** The message of this thread's last failed clattn_mpi call ("" when none): the MPI or
 *  clattn failure, with the rank. */
const char *clattn_mpi_last_error_message(void);

#ifdef __cplusplus
}
#endif
#endif /* CLATTN_MPI_H */
