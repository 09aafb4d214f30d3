/* varlen.cl — a packed batch's offsets on the device (desc.varlen's cu_seqlens_q_buffer
 * and cu_seqlens_k_buffer, FlashAttention's cu_seqlens) as what the kernels read with
 * -DVARLEN=1 (rows.cl VARLEN_ROWS): each sequence's first row and its length, clamped
 * so that no kernel leaves the packed tensors and no two sequences share a row, whatever
 * the offsets hold (end[−1] = 0):
 *     row0[b] = clamp(cu[b], end[b − 1], total)
 *     len[b]  = clamp(cu[b + 1] − row0[b], 0, min(max_len, total − row0[b]))
 *     end[b]  = row0[b] + len[b]
 * Valid offsets (non-decreasing, within the tensors, no sequence past max_len) come out
 * as they are; offsets that decrease give empty or shorter sequences, a sequence longer
 * than the caller's max_seqlen is cut at it. One work-item walks the batch (a few
 * thousand sequences at most: microseconds); the host does the same with host offsets
 * (varlen.c, which checks them first).
 */
__kernel void clattn_varlen(__global const int *cu_q, __global const int *cu_k, long batch,
                            long total_q, long total_k, long max_q, long max_k,
                            __global int *q_lens, __global int *kv_lens, __global int *q_row0,
                            __global int *k_row0)
{
    if (get_global_id(0) != 0)
        return;
    long end_q = 0, end_k = 0;
    for (long b = 0; b < batch; b++) {
        const long q0 = clamp((long)cu_q[b], end_q, total_q);
        const long k0 = clamp((long)cu_k[b], end_k, total_k);
        const long nq = clamp((long)cu_q[b + 1] - q0, 0L, min(max_q, total_q - q0));
        const long nk = clamp((long)cu_k[b + 1] - k0, 0L, min(max_k, total_k - k0));
        q_row0[b] = (int)q0;
        k_row0[b] = (int)k0;
        q_lens[b] = (int)nq;
        kv_lens[b] = (int)nk;
        end_q = q0 + nq;
        end_k = k0 + nk;
    }
}
