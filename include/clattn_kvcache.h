/** @file
 * clattn's KV-cache options (added in 0.3): the structs that clattn_attention_desc's
 * `paged`, `varlen` and `rotary` fields point to. Included by clattn.h (which declares
 * their types); the conventions of clattn.h apply. Names as in FlashAttention
 * (`flash_attn_with_kvcache`, `flash_attn_varlen_func`) and vLLM; docs/SEMANTICS.md
 * gives each one's exact semantics.
 */
#ifndef CLATTN_KVCACHE_H
#define CLATTN_KVCACHE_H

#include "clattn.h"

/**
 * A paged K/V cache (clattn_attention_desc.paged; added in 0.3): vLLM's PagedAttention
 * (Kwon et al. 2023) and FlashAttention's `block_table` argument of
 * `flash_attn_with_kvcache`.
 *
 * K and V are then pools of pages, views of shape [num_pages, h_kv, page_size, d]
 * (clattn's [batch, heads, seq, dim] order, with batch = page and seq = slot; any
 * strides, so FlashAttention's [num_pages, page_size, h_kv, d] pool is the strides
 * {page_size·h_kv·d, d, h_kv·d, 1}). K and V pools have the same num_pages and
 * page_size (any page_size ≥ 1). Key j of batch entry b is slot j % page_size of page
 * block_table[b·max_pages + j / page_size]. The call's n_kv is max_pages·page_size; the
 * desc's kv_lens are the sequences' lengths (FlashAttention's cache_seqlens; NULL: every
 * sequence fills its max_pages pages), and only the pages holding keys j < kv_lens[b]
 * are read, so table entries past them may hold anything (−1). Pages may appear in any
 * order and in several sequences (a shared prefix). Every mask term applies to the
 * logical key index j as without pages (causal masks, windows, ALiBi, positions).
 *
 * Runs with the fused algorithm (both kernel families, the decode kernels and split-KV
 * decoding); the unfused algorithm, attention weights, the backward pass, the three
 * stages and the several-device layer return CLATTN_ERROR_UNSUPPORTED for a paged call.
 */
struct clattn_paged_kv {
    /** Host int32 [batch, max_pages]; read during the call only. Each entry the call
     *  reads must be a page of the pool, 0 ≤ entry < num_pages, else
     *  CLATTN_ERROR_INVALID_ARGUMENT naming it, before anything is enqueued. */
    const int32_t *block_table;
    /** Or the table on the device (the *_enqueue calls only): int32 [batch, max_pages]
     *  from byte 0 of this cl_mem, read by the kernels, so a decode step needs no host
     *  read-back. The kernels clamp each entry into [0, num_pages): a bad entry reads a
     *  wrong page of the pool, never memory outside it. Exactly one of block_table and
     *  block_table_buffer is set. */
    cl_mem block_table_buffer;
    /** Entries per batch entry (the row stride of the table), ≥ 0. */
    int64_t max_pages;
};

/**
 * A packed batch of variable-length sequences (clattn_attention_desc.varlen; added in
 * 0.3): FlashAttention's `flash_attn_varlen_func` with `cu_seqlens_q` / `cu_seqlens_k`.
 *
 * Q, K, V and O (and the LSE) then hold every sequence's rows one after another along
 * the seq dimension, with a batch dimension of 1: Q [1, h_q, total_q, d_k], K
 * [1, h_kv, total_k, d_k], V [1, h_kv, total_k, d_v], O [1, h_q, total_q, d_v], LSE
 * [1, h_q, total_q, 1], any strides (FlashAttention's packed (total, nheads, headdim) is
 * the strides {0, d, h·d, 1}). Sequence b is query rows cu_seqlens_q[b] …
 * cu_seqlens_q[b + 1] − 1 and keys cu_seqlens_k[b] … cu_seqlens_k[b + 1] − 1; every
 * other term of the desc (masks and their diagonal, window, ALiBi, softcap, positions,
 * masked_rows) applies to each sequence on its own, as to a batch entry of those
 * lengths. Rows past cu_seqlens_q[batch] are not written.
 *
 * The fused algorithm runs the whole batch in one launch (a batch entry per sequence,
 * over max_seqlen_q rows; rows past a sequence's length are skipped), so the work is
 * that of the unpadded batch; decode-sized sequences take the decode kernels and split-KV
 * decoding as a padded batch would. The unfused algorithm (and the reference) run one
 * attention per non-empty sequence. Not combined with kv_lens, q_lens (the offsets give
 * the lengths), a mask tensor, weights, paged K/V, an append or dropout
 * (CLATTN_ERROR_UNSUPPORTED); the backward pass and the several-device layer take no
 * varlen desc either.
 */
struct clattn_varlen {
    /** Host int32 [batch + 1]: non-decreasing from cu_seqlens_q[0] ≥ 0 to at most
     *  total_q (Q's seq extent), else CLATTN_ERROR_INVALID_SHAPE. Read during the call
     *  only. */
    const int32_t *cu_seqlens_q;
    /** Host int32 [batch + 1], the same for K and V (≤ total_k). */
    const int32_t *cu_seqlens_k;
    /** Number of sequences, ≥ 0. */
    int64_t batch;
    /** Or the offsets on the device (the *_enqueue and plan calls; added in 0.3): int32
     *  [batch + 1] from byte 0 of each cl_mem, read by a small kernel in the same
     *  enqueue, so a step needs no host read-back; one form for both q and k
     *  (CLATTN_ERROR_INVALID_ARGUMENT otherwise), each holding at least batch + 1 int32
     *  (else CLATTN_ERROR_BUFFER_TOO_SMALL).
     *  They are not checked on the host: each sequence is clamped into the packed tensors
     *  after the one before (first row clamp(cu[b], end of sequence b − 1, total), length
     *  clamp(cu[b+1] − first, 0, min(max_seqlen, total − first))), so bad offsets give
     *  wrong or empty sequences, never accesses outside the tensors or two sequences
     *  writing one row. Fused algorithm only (else CLATTN_ERROR_UNSUPPORTED). */
    cl_mem cu_seqlens_q_buffer;
    cl_mem cu_seqlens_k_buffer; /**< see cu_seqlens_q_buffer */
    /** The longest query / key sequence (FlashAttention's max_seqlen_q, max_seqlen_k):
     *  required (> 0 when batch > 0, else CLATTN_ERROR_INVALID_SHAPE) with offsets on the
     *  device, where longer sequences are cut at it; with host offsets 0 (computed) or at
     *  least the longest (else CLATTN_ERROR_INVALID_SHAPE). */
    int64_t max_seqlen_q;
    int64_t max_seqlen_k; /**< see max_seqlen_q */
};

/**
 * Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer") applied by the call to
 * Q and to the appended K rows (clattn_attention_desc.rotary; added in 0.3), as
 * FlashAttention's `rotary_cos` / `rotary_sin` / `rotary_interleaved` arguments of
 * `flash_attn_with_kvcache` do.
 *
 * Pair p (0 ≤ p < dim/2) of a row at position `pos` turns by pos · f_p radians, with
 * f_p = base^(−2p/dim) rounded to float32 (as PyTorch and Hugging Face build their
 * tables): (x₁, x₂) → (x₁·cos − x₂·sin, x₂·cos + x₁·sin). The angle and its cosine
 * and sine are computed in float64 on devices with cl_khr_fp64, else in float32 (an
 * angle error of about pos·2⁻²⁴ rad). Columns from dim on are copied unchanged.
 * Positions: appended key row t of batch entry b sits at kv_start + kv_lens[b] + t;
 * query row i at kv_start + kv_lens[b] + i with a causal mask or a window, else every
 * query row at kv_start + kv_lens[b] (FlashAttention's convention: cache_seqlens + i,
 * or cache_seqlens). Llama's Hugging Face weights use interleaved 0; Meta's original
 * code and GGUF files (llama.cpp) rotate adjacent pairs: interleaved 1.
 */
struct clattn_rotary {
    /** Rotated columns from the start of each head: even, 2 ≤ dim ≤ d_k; 0 = d_k
     *  (which must then be even). */
    int64_t dim;
    /** 0: GPT-NeoX / Llama pairs (c, c + dim/2) (`rotate_half`); 1: GPT-J pairs
     *  (2c, 2c + 1). */
    int interleaved;
    /** θ, the base of the frequencies; 0 = 10000. Finite and > 0 otherwise. Not used
     *  with tables. */
    float base;
    /** Optional: the caller's tables (FlashAttention's rotary_cos / rotary_sin), for
     *  frequencies no base gives (NTK or YaRN scaling, Llama 3's rope_scaling): row t,
     *  column p is cos (sin) of the angle of pair p at position t. Host float32 arrays
     *  [table_len, dim/2] row-major (copied to the device per call; read during the call
     *  only), or table_buffer: a cl_mem of float32 [2, table_len, dim/2] from byte 0 (cos
     *  rows, then sin rows), for the *_enqueue calls. At most one of the two forms; both
     *  cos and sin with the host form. Every position the call rotates must be below
     *  table_len (CLATTN_ERROR_INVALID_SHAPE with host lengths; with lengths in a cl_mem
     *  the kernels clamp positions into 0..table_len − 1). NULL: angles from base.
     *  Added in 0.3. */
    const float *cos_table;
    const float *sin_table; /**< see cos_table */
    cl_mem table_buffer;    /**< see cos_table */
    int64_t table_len;      /**< rows of the tables (positions 0..table_len − 1) */
};

#endif
