/* dropout.cl — the dropout generator every program includes after common.cl
 * (host/program.c): the kernels that draw dropout (fused, softmax, weights_from_lse, the
 * backward) use it, the others take DROPOUT_PARAMS and never read them. */
/* ---- dropout (the desc's dropout_p; host twin: host/dropout.c) ----
 * Weight (bh = b·h_q + h, row i, key j) is kept iff word j mod 4 of Philox4x32-10
 * (Salmon et al. 2011) of counter (⌊j/4⌋, i, bh, drop_offset) and key (low, high 32 bits
 * of drop_seed) is ≥ drop_thr (⌊p·2^32⌋), and then counts drop_scale = 1/(1 − p) times.
 * Nothing else enters, so every kernel, tile and pass draws the same bit. Programs built
 * with DROPOUT 0 take the arguments and never read them. */
#ifndef DROPOUT
#define DROPOUT 0
#endif
#define DROPOUT_PARAMS ulong drop_seed, uint drop_offset, uint drop_thr, float drop_scale
#define DROPOUT_ARGS drop_seed, drop_offset, drop_thr, drop_scale

/* Philox4x32-10's ten rounds on counters c0..c3 (variables of type T: uint, or uint16
 * for 16 lanes) with the key of `seed` and its Weyl schedule, in place */
#define PHILOX_ROUNDS(T, seed)                                                              \
    do {                                                                                    \
        uint k0_ = (uint)(seed), k1_ = (uint)((seed) >> 32);                                \
        for (int r_ = 0; r_ < 10; r_++) {                                                   \
            const T hi0_ = mul_hi((T)(0xD2511F53u), c0), lo0_ = c0 * 0xD2511F53u;          \
            const T hi1_ = mul_hi((T)(0xCD9E8D57u), c2), lo1_ = c2 * 0xCD9E8D57u;          \
            c0 = hi1_ ^ c1 ^ k0_;                                                           \
            c1 = lo1_;                                                                      \
            c2 = hi0_ ^ c3 ^ k1_;                                                           \
            c3 = lo0_;                                                                      \
            k0_ += 0x9E3779B9u;                                                             \
            k1_ += 0xBB67AE85u;                                                             \
        }                                                                                   \
    } while (0)

/* the 10 rounds on 16 lanes: counters (c0, c1, c2, c3), word w of each (0..3) */
uint16 philox16(uint16 c0, uint16 c1, uint16 c2, uint c3_, ulong seed, uint16 w)
{
    uint16 c3 = (uint16)(c3_);
    PHILOX_ROUNDS(uint16, seed);
    return select(select(c0, c1, w == 1u), select(c2, c3, w == 3u), w >= 2u);
}

/* the factors (0 or drop_scale) of keys j0 … j0 + 15 of row i */
float16 dropout16_keys(DROPOUT_PARAMS, long bh, long i, long j0)
{
    const uint16 jj = (uint16)((uint)(j0 & 3)) +
                      (uint16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const uint16 r = philox16((uint16)((uint)(j0 >> 2)) + (jj >> 2u), (uint16)((uint)i),
                              (uint16)((uint)bh), drop_offset, drop_seed, jj & 3u);
    return select((float16)(0.0f), (float16)(drop_scale), r >= drop_thr);
}

/* the factors of rows i0 … i0 + 15 at key j */
float16 dropout16_rows(DROPOUT_PARAMS, long bh, long i0, long j)
{
    const uint16 ii = (uint16)((uint)i0) +
                      (uint16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const uint16 r = philox16((uint16)((uint)(j >> 2)), ii, (uint16)((uint)bh), drop_offset,
                              drop_seed, (uint16)((uint)(j & 3)));
    return select((float16)(0.0f), (float16)(drop_scale), r >= drop_thr);
}

/* one weight's factor (scalar: one lane's work on GPUs) */
float dropout1(DROPOUT_PARAMS, long bh, long i, long j)
{
    uint c0 = (uint)(j >> 2), c1 = (uint)i, c2 = (uint)bh, c3 = drop_offset;
    PHILOX_ROUNDS(uint, drop_seed);
    /* word j mod 4 by index: oclgrind 21.10 picked the wrong word from the equivalent
     * chain of ?: (from j = 4 on), PoCL did not */
    const uint words[4] = {c0, c1, c2, c3};
    return words[j & 3] >= drop_thr ? drop_scale : 0.0f;
}
