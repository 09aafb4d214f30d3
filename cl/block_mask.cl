/* block_mask.cl — the flags of a mask_mod per 16 × 16 block (clattn_block_mask_create):
 * work-item (kb, qb, bh) evaluates clattn_mask_mod on rows 16·qb … and keys 16·kb … that
 * lie inside [0, n_q) × [0, n_kv), at positions q_start + i, kv_start + j, and writes 0
 * (all false), 2 (all true) or 1 (mixed) to flags[bh·n_qb·n_kb + qb·n_kb + kb]. bh runs
 * over batch·heads of the mask (b = bh / heads, h = bh % heads). Built with the snippets'
 * source (MOD_MASK 1) like every kernel that applies them. */
__kernel void clattn_block_mask(__global uchar *flags, int heads, long n_q, long n_kv,
                                long q_start, long kv_start MOD_BUF_PARAMS)
{
    const long kb = get_global_id(0), qb = get_global_id(1), bh = get_global_id(2);
    const long n_kb = get_global_size(0), n_qb = get_global_size(1);
    const int b = (int)(bh / heads), h = (int)(bh % heads);
    bool any = false, all = true;
#if MOD_MASK
    for (long i = 16 * qb; i < min(16 * qb + 16, n_q); i++)
        for (long j = 16 * kb; j < min(16 * kb + 16, n_kv); j++) {
            const bool v = clattn_mask_mod(b, h, q_start + i, kv_start + j MOD_BUF_ARGS);
            any |= v;
            all &= v;
        }
#endif
    flags[(bh * n_qb + qb) * n_kb + kb] = all ? 2 : any ? 1 : 0;
}
