/** @file
 * clattn's backward pass (training): the gradients of clattn_attention() with respect to
 * Q, K and V. Included by clattn.h; the conventions of clattn.h apply (sizes in elements,
 * statuses, validation before anything is written).
 *
 * The device call (clattn_attention_backward, _enqueue) and its float64 CPU reference
 * (clattn_reference_attention_backward), the oracle the device kernels are tested
 * against. Names as in FlashAttention and PyTorch: dO is `dout` / `grad_out`, the LSE is
 * `softmax_lse` / `logsumexp`, dQ, dK, dV are `dq`, `dk`, `dv`.
 */
#ifndef CLATTN_BACKWARD_H
#define CLATTN_BACKWARD_H

#include "clattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * The backward pass on the device: for the forward call O = clattn_attention(desc, q, k,
 * v) that also wrote `lse`, and dO = ∂L/∂O, writes dQ = ∂L/∂Q, dK = ∂L/∂K and
 * dV = ∂L/∂V. Blocking, on host views (copied to and from device buffers, as for
 * clattn_attention): returns when the gradients are in dq, dk and dv.
 *
 * Algorithm: FlashAttention-2's backward (Dao 2023, "FlashAttention-2", Algorithm 2):
 * P is recomputed tile by tile from Q, K and the LSE (no n_q × n_kv matrix in memory;
 * device workspace 8 bytes per query row, and on CPUs 4·⌈d_k/16⌉·16 bytes per query row
 * and dQ split for the partial dQ sums), D_i = Σ_c dO_ic·O_ic first, then
 *     dS_ij = P_ij·(dO_i·V_j − D_i)·scale·g_ij,  dQ_i = Σ_j dS_ij·K_j,
 *     dK_j = Σ_i dS_ij·Q_i,  dV_j = Σ_i P_ij·dO_i,
 * g_ij = 1 − tanh²(scale·q_i·k_j / softcap) under a softcap, else 1. Float32 arithmetic
 * whatever the storage types.
 * Deterministic: each gradient element is summed by one work-item in a fixed order, no
 * atomics, so reruns give the same bits. dQ, which FlashAttention-2 accumulates with
 * atomic adds: on CPUs the dK/dV kernel adds dS·K into one float32 partial dQ per key
 * split (each written by one work-group walking its split's key blocks in order) and a
 * last kernel sums the splits in order; the split count comes from the device's compute
 * units and batch × KV heads (1 with desc->batch_invariant; CLATTN_BACKWARD_SPLITS=N
 * fixes it), and dQ's bits depend on it. On GPUs dQ has its own kernel, which recomputes
 * P and dP.
 *
 * Every term of the forward desc applies, with the gradients of
 * clattn_reference_attention_backward: masks and alignments, no-self, mask tensors (no
 * gradient into the mask), key and query lengths, windows, positions, ALiBi (a constant of
 * the score), softcap (through tanh), grouped-query heads (dK and dV sum over each KV
 * head's query heads). A query row with no visible key, or past q_lens, adds nothing and
 * gets a dQ row of 0; a key that no row sees gets dK = dV = 0. desc->weights and
 * desc->lse are ignored (pass the LSE as `lse`).
 *
 * The LSE must be the forward call's, from the same inputs and desc: P is exp(score −
 * LSE), so an LSE of other inputs gives wrong gradients, not an error. With ALiBi at
 * far positions (q_start, kv_start beyond about 2^24) pass a float64 LSE, as for
 * clattn_merge: the row's ALiBi constant is taken out of it in its own precision.
 *
 * @param ctx   the context.
 * @param desc  the forward call's desc.
 * @param q, k, v  the forward call's inputs: [b, h_q, n_q, d_k], [b, h_kv, n_kv, d_k],
 *              [b, h_kv, n_kv, d_v]; float32, float16 or bfloat16, any strides.
 * @param o     the forward call's output [b, h_q, n_q, d_v]. O and the LSE are read
 *              only, but validated as the forward call validates its outputs (no
 *              broadcast, no overlap with Q, K, V or the mask tensor in one cl_mem):
 *              they are what it wrote.
 * @param lse   the forward call's LSE [b, h_q, n_q, 1], float32 or float64 (float64
 *              needs cl_khr_fp64). Required.
 * @param d_o   ∂L/∂O, shaped as o, any float storage type.
 * @param dq, dk, dv  outputs shaped as q, k, v, any float storage types; they must not
 *              overlap each other or any input.
 * @return CLATTN_SUCCESS; the validation statuses of clattn_attention() for the forward
 *         operands; CLATTN_ERROR_INVALID_ARGUMENT (NULL ctx, desc or lse);
 *         CLATTN_ERROR_INVALID_SHAPE (dO not shaped as O, a gradient not shaped as its
 *         input); CLATTN_ERROR_INVALID_LAYOUT (a gradient overlapping another or an
 *         input; a buffer view given to the blocking call);
 *         CLATTN_ERROR_UNSUPPORTED (head dims above 256, whose private rows the kernels
 *         do not hold; a float64 LSE without cl_khr_fp64); OpenCL failures as
 *         CLATTN_ERROR_OPENCL. Nothing is written unless it succeeds validation; the
 *         message is in clattn_last_error_message(ctx). Added in 0.3.
 */
clattn_status clattn_attention_backward(clattn_context *ctx, const clattn_attention_desc *desc,
                                        const clattn_tensor *q, const clattn_tensor *k,
                                        const clattn_tensor *v, const clattn_tensor *o,
                                        const clattn_tensor *lse, const clattn_tensor *d_o,
                                        const clattn_tensor *dq, const clattn_tensor *dk,
                                        const clattn_tensor *dv);

/**
 * clattn_attention_backward on buffer views, enqueued: returns once the kernels are
 * enqueued after the n_wait events of `wait`; `done` (optional) completes when dq, dk and
 * dv are written. Host views are refused (CLATTN_ERROR_INVALID_LAYOUT). The caller
 * keeps the buffers alive until `done`. Statuses as clattn_attention_backward. Added
 * in 0.3.
 */
clattn_status clattn_attention_backward_enqueue(clattn_context *ctx,
                                                const clattn_attention_desc *desc,
                                                const clattn_tensor *q, const clattn_tensor *k,
                                                const clattn_tensor *v, const clattn_tensor *o,
                                                const clattn_tensor *lse, const clattn_tensor *d_o,
                                                const clattn_tensor *dq, const clattn_tensor *dk,
                                                const clattn_tensor *dv, cl_uint n_wait,
                                                const cl_event *wait, cl_event *done);

/**
 * The CPU reference of the backward pass: for O = clattn_reference_attention(desc, q, k,
 * v) and dO = ∂L/∂O, writes dQ = ∂L/∂Q, dK = ∂L/∂K and dV = ∂L/∂V.
 *
 * Algorithm: FlashAttention-2's backward (Dao 2023, "FlashAttention-2", Algorithm 2) as
 * plain loops with every sum in double: per query row, P is recomputed from Q and K,
 *     D_i = Σ_c dO_ic·O_ic,   dP_ij = dO_i·V_j,   dS_ij = P_ij·(dP_ij − D_i)·g_ij,
 *     dQ_i = scale·Σ_j dS_ij·K_j,   dK_j = scale·Σ_i dS_ij·Q_i,   dV_j = Σ_i P_ij·dO_i,
 * with g_ij = 1 − tanh²(scale·q_i·k_j / softcap) when desc->softcap is set, else 1.
 *
 * Every term of the desc applies as in the forward call. Masks, lengths, windows,
 * positions and ALiBi decide P; ALiBi slopes and float masks are constants of the
 * score and get no gradient. With grouped-query heads, dK and dV of a KV head sum over
 * its group's query heads. A query row with no visible key (either masked_rows
 * setting), or a padding row past q_lens, contributes nothing, and its dQ row is 0. A
 * key whose weight is exactly 0 contributes nothing, whatever its K and V values.
 * desc->weights and desc->lse are ignored.
 *
 * Single-threaded; no OpenCL needed. Memory: (h_kv·n_kv·(d_k + d_v) + n_kv) doubles.
 *
 * @param desc  the forward call's desc.
 * @param q     host view [b, h_q, n_q, d_k].
 * @param k     host view [b, h_kv, n_kv, d_k].
 * @param v     host view [b, h_kv, n_kv, d_v].
 * @param d_o   host view [b, h_q, n_q, d_v], ∂L/∂O (validated as clattn_attention's O).
 * @param dq    host view shaped as q (float32, float16 or bfloat16).
 * @param dk    host view shaped as k.
 * @param dv    host view shaped as v.
 *              dq, dk and dv must not overlap each other or any input.
 * @return CLATTN_SUCCESS, or a validation status of clattn_reference_attention()
 *         (INVALID_SHAPE also when a gradient's shape differs from its input's,
 *         INVALID_LAYOUT for overlapping outputs), or CLATTN_ERROR_OUT_OF_HOST_MEMORY.
 *         The message is in clattn_last_error_message(NULL).
 */
clattn_status clattn_reference_attention_backward(const clattn_attention_desc *desc,
                                                  const clattn_tensor *q, const clattn_tensor *k,
                                                  const clattn_tensor *v, const clattn_tensor *d_o,
                                                  const clattn_tensor *dq, const clattn_tensor *dk,
                                                  const clattn_tensor *dv);

/**
 * The dropout mask of a desc (desc->dropout_p, dropout_seed, dropout_offset), as the
 * kernels and clattn_reference_attention draw it: keep[((b·h_q + h)·n_q + i)·n_kv + j]
 * = 1 where weight (b, h, i, j) is kept, 0 where it is dropped (whatever the masks: a
 * masked weight is 0 either way). For tests and for checking a custom backward. With
 * dropout_p 0 every entry is 1. Single-threaded, no OpenCL.
 *
 * @param desc  the call's desc (only its dropout fields are read).
 * @param batch, h_q, n_q, n_kv  the call's shape.
 * @param keep  host array of batch·h_q·n_q·n_kv bytes, written.
 * @return CLATTN_SUCCESS; CLATTN_ERROR_INVALID_ARGUMENT (NULL desc or keep, dropout_p
 *         not 0 or within (0, 1), dropout_offset ≥ 2^32, a negative extent);
 *         CLATTN_ERROR_UNSUPPORTED (a shape past the generator's counter: batch·h_q or
 *         n_q above 2^32, n_kv above 2^34). Added in 0.3.
 */
clattn_status clattn_dropout_mask(const clattn_attention_desc *desc, int64_t batch, int64_t h_q,
                                  int64_t n_q, int64_t n_kv, uint8_t *keep);

#ifdef __cplusplus
}
#endif
#endif /* CLATTN_BACKWARD_H */
