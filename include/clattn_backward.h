/** @file
 * clattn's backward pass (training): the gradients of clattn_attention() with respect to
 * Q, K and V. Included by clattn.h; the conventions of clattn.h apply (sizes in elements,
 * statuses, validation before anything is written).
 *
 * Step 1 of the backward pass: the float64 CPU reference, the oracle the device
 * kernels will be tested against.
 */
#ifndef CLATTN_BACKWARD_H
#define CLATTN_BACKWARD_H

#include "clattn.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif /* CLATTN_BACKWARD_H */
