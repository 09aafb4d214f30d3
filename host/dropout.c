/* Dropout's generator (desc.dropout_p; the kernels' twin: cl/common.cl, "dropout"):
 * Philox4x32-10 (Salmon, Moraes, Dror, Shaw 2011, "Parallel random numbers: as easy as
 * 1, 2, 3"), the keep/drop bit of each weight, the desc's dropout checks (the one place
 * they are stated), and clattn_dropout_mask. */
#include "internal.h"

#include <math.h>

void clattn_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u; /* the Weyl key schedule */
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

uint32_t clattn_dropout_threshold(float p)
{
    /* p < 1 in float: p·2^32 ≤ 2^32 − 256, exact in double */
    return p > 0.0f ? (uint32_t)floor((double)p * 4294967296.0) : 0u;
}

bool clattn_dropout_kept(const clattn_attention_desc *desc, int64_t bh, int64_t i, int64_t j)
{
    if (!(desc->dropout_p > 0.0f))
        return true;
    const uint32_t ctr[4] = {(uint32_t)(j >> 2), (uint32_t)i, (uint32_t)bh,
                             (uint32_t)desc->dropout_offset};
    const uint32_t key[2] = {(uint32_t)desc->dropout_seed, (uint32_t)(desc->dropout_seed >> 32)};
    uint32_t r[4];
    clattn_philox4x32_10(ctr, key, r);
    return r[j & 3] >= clattn_dropout_threshold(desc->dropout_p);
}

double clattn_dropout_factor(const clattn_attention_desc *desc, int64_t bh, int64_t i, int64_t j)
{
    if (!(desc->dropout_p > 0.0f))
        return 1.0;
    return clattn_dropout_kept(desc, bh, i, j) ? 1.0 / (1.0 - (double)desc->dropout_p) : 0.0;
}

clattn_status clattn_check_dropout(clattn_context *ctx, const clattn_attention_desc *desc)
{
    if (!(desc->dropout_p == 0.0f || (desc->dropout_p > 0.0f && desc->dropout_p < 1.0f)))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "dropout_p %g must be 0 (off) or within (0, 1)",
                           (double)desc->dropout_p);
    if (desc->dropout_offset >> 32)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "dropout_offset %llu must be below 2^32 (the generator's counter "
                           "word 3)",
                           (unsigned long long)desc->dropout_offset);
    return CLATTN_SUCCESS;
}

clattn_status clattn_check_dropout_shape(clattn_context *ctx, const clattn_attention_desc *desc,
                                         int64_t batch, int64_t h_q, int64_t n_q, int64_t n_kv)
{
    const int64_t c32 = (int64_t)1 << 32;
    /* batch·h_q ≤ 2^32 without forming a product that may overflow */
    const bool heads_over = h_q > 0 && batch > c32 / h_q;
    if (desc->dropout_p > 0.0f && (heads_over || n_q > c32 || n_kv > 4 * c32))
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "dropout: batch %lld x h_q %lld, n_q %lld or n_kv %lld is past the "
                           "generator's counter (2^32 (batch entries x heads), 2^32, 2^34)",
                           (long long)batch, (long long)h_q, (long long)n_q, (long long)n_kv);
    return CLATTN_SUCCESS;
}

clattn_status clattn_dropout_mask(const clattn_attention_desc *desc, int64_t batch, int64_t h_q,
                                  int64_t n_q, int64_t n_kv, uint8_t *keep)
{
    clattn_clear_error(NULL);
    if (!desc || !keep)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "desc and keep must be non-NULL");
    if (batch < 0 || h_q < 0 || n_q < 0 || n_kv < 0)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT,
                           "extents %lld, %lld, %lld, %lld must not be negative", (long long)batch,
                           (long long)h_q, (long long)n_q, (long long)n_kv);
    clattn_status st = clattn_check_dropout(NULL, desc);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_dropout_shape(NULL, desc, batch, h_q, n_q, n_kv);
    if (st != CLATTN_SUCCESS)
        return st;
    size_t at = 0;
    for (int64_t bh = 0; bh < batch * h_q; bh++)
        for (int64_t i = 0; i < n_q; i++)
            for (int64_t j = 0; j < n_kv; j++)
                keep[at++] = (uint8_t)clattn_dropout_kept(desc, bh, i, j);
    return CLATTN_SUCCESS;
}
