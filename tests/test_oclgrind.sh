#!/bin/sh
# Every kernel under oclgrind's device simulator, which reports out-of-bounds accesses,
# data races and missing barriers. oclgrind exits 0 even when it reports, so each run
# logs to a file and a non-empty log fails the test. Small shapes with tails off every
# tile (n_q 19, n_kv 37, d_k 20, d_v 9, grouped heads 2:1), all masks, both algorithms,
# both kernel families (oclgrind's device is a GPU: the GPU family by default), each with
# its default blocking and with 4 queries per work-item in groups of 8, plus the demo (the decoding path and the three stages on their own) and the
# decode kernel's test with all terms, with one and with several rows per work-item.
# Also the backward kernels (test_backward's small device cases), paged K/V and the
# append with rotary embeddings (test_paged).
# Usage: CLATTN_BIN=build/clattn [CLATTN_FEATURES_BIN=build/tests/test_features]
#        sh tests/test_oclgrind.sh   (run from anywhere)
set -u
bin=${CLATTN_BIN:?set CLATTN_BIN to the clattn program}
data=$(cd "$(dirname "$0")/data" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

check() { # name, command...
    name=$1
    shift
    rm -f "$tmp/log"
    if oclgrind --data-races --log "$tmp/log" "$@" >"$tmp/out" 2>&1 && [ ! -s "$tmp/log" ]; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL $name"
        head -40 "$tmp/log" "$tmp/out"
    fi
}

# CLATTN_OCLGRIND_PAGED=1 (ctest's slow test_oclgrind_paged): only test_paged's paged
# configurations in both kernel families (decode, split-KV, the tiled kernels)
if [ -n "${CLATTN_PAGED_BIN:-}" ] && [ "${CLATTN_OCLGRIND_PAGED:-0}" = 1 ]; then
    CK_RUN_CASE=equal check "paged, decode" "$CLATTN_PAGED_BIN"
    CK_RUN_CASE=equal_more CK_INCLUDE_TAGS=slow check "paged, tiled" "$CLATTN_PAGED_BIN"
    # dropout's generator in the forward kernels of both families (test_dropout's device
    # cases: fused, unfused with softmax.cl, weights_from_lse.cl)
    if [ -n "${CLATTN_DROPOUT_BIN:-}" ]; then
        CK_RUN_CASE=device check "dropout" "$CLATTN_DROPOUT_BIN"
        CLATTN_KERNEL_FAMILY=gpu CK_RUN_CASE=device check "dropout, GPU family" "$CLATTN_DROPOUT_BIN"
    fi
    # packed varlen batches in one launch: the offsets' kernel, hostile offsets on the
    # device, both sizes (tiled and decode kernels), the CPU family (the GPU family's
    # varlen cases are test_varlen_gpu's: 100 s more under oclgrind)
    if [ -n "${CLATTN_VARLEN_BIN:-}" ]; then
        CLATTN_KERNEL_FAMILY=cpu CK_RUN_CASE=context_family check "varlen" "$CLATTN_VARLEN_BIN"
    fi
    # and in the backward kernels (test_backward's small case with dropout)
    if [ -n "${CLATTN_BACKWARD_BIN:-}" ]; then
        CK_RUN_CASE=device_dropout check "backward, dropout" "$CLATTN_BACKWARD_BIN"
    fi
    echo "test_oclgrind (paged, dropout): $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    exit
fi
check demo "$bin" demo
# every mask with the default blocking; with 4 queries per work-item in groups of 8 (the
# CPU family with 4 float16 vectors per micro-kernel step, as on AVX-512) the
# two masks whose tile skipping differs most (bottom-right causal, no-self)
for fb in gpu:default gpu:4,8,32 cpu:default cpu:4,8,64,4; do
    export CLATTN_KERNEL_FAMILY=${fb%%:*}
    blocking=${fb#*:}
    masks="none causal causal-bottom-right no-self"
    [ "$blocking" = default ] || masks="causal-bottom-right no-self"
    for mask in $masks; do
        for alg in fused unfused; do
            if [ "$blocking" = default ]; then unset CLATTN_BLOCKING; else export CLATTN_BLOCKING=$blocking; fi
            set -- --q "$data/og_q.npy" --k "$data/og_k.npy" --v "$data/og_v.npy" \
                --out "$tmp/o.npy" --mask "$mask" --algorithm "$alg" --check
            [ "$alg" = unfused ] && set -- "$@" --weights "$tmp/w.npy"
            check "$fb $mask $alg" "$bin" run "$@"
        done
    done
done
# the optional terms and outputs (every branch of score_terms16, the LSE and
# weights-from-LSE pass, head means, 16-bit loads and stores), default blocking, GPU
# family (the CPU family's kernels read the same terms through the same helpers)
unset CLATTN_BLOCKING CLATTN_KERNEL_FAMILY
base="--q $data/og_q.npy --k $data/og_k.npy --v $data/og_v.npy --check"
for alg in fused unfused; do
    check "features A $alg" "$bin" run $base --out "$tmp/o.npy" --algorithm "$alg" \
        --mask-file "$data/og_mask.npy" --kv-lens 30 --window 5,3 --lse "$tmp/l.npy" \
        --weights "$tmp/w.npy"
    check "features B $alg" "$bin" run $base --out "$tmp/o.npy" --algorithm "$alg" \
        --mask causal-bottom-right --alibi 0.5,0.25 --softcap 2 --q-lens 11 \
        --masked-rows nan --weights "$tmp/w.npy" --weights-head-mean
    check "features C $alg" "$bin" run --q "$data/og_q16.npy" --k "$data/og_k16.npy" \
        --v "$data/og_v16.npy" --check --out "$tmp/o.npy" --algorithm "$alg" --mask no-self \
        --q-start 3 --kv-start 1
done
# score / mask snippets (common.cl score_terms16) and a block mask (block_mask.cl, the
# tiled kernels' skipping), both algorithms
printf 'bool clattn_mask_mod(int b, int h, long q, long k)\n{\n    return (q + k) %% 3 != 0 && k / 7 != 2;\n}\n' >"$tmp/mm.cl"
printf 'float clattn_score_mod(float s, int b, int h, long q, long k)\n{\n    return s - 0.1f * (float)(k - q);\n}\n' >"$tmp/sm.cl"
for alg in fused unfused; do
    check "snippets $alg" "$bin" run --q "$data/og_q.npy" --k "$data/og_k.npy" \
        --v "$data/og_v.npy" --out "$tmp/o.npy" --algorithm "$alg" --mask-mod "$tmp/mm.cl" \
        --score-mod "$tmp/sm.cl" --alibi 0.5,0.25 --lse "$tmp/l.npy"
done
check "block mask" "$bin" run --q "$data/og_q.npy" --k "$data/og_k.npy" --v "$data/og_v.npy" \
    --out "$tmp/o.npy" --algorithm fused --mask-mod "$tmp/mm.cl" --block-mask
CLATTN_KERNEL_FAMILY=cpu check "block mask, CPU family" "$bin" run --q "$data/og_q.npy" \
    --k "$data/og_k.npy" --v "$data/og_v.npy" --out "$tmp/o.npy" --algorithm fused \
    --mask-mod "$tmp/mm.cl" --block-mask
unset CLATTN_KERNEL_FAMILY
# the merge kernel (clattn_merge of 2, 3 and 7 parts, in place too) from test_features
if [ -n "${CLATTN_FEATURES_BIN:-}" ]; then
    export CK_RUN_CASE=merge
    check "merge" "$CLATTN_FEATURES_BIN"
    # the decode kernels with every term, GQA 4:1 x 5 queries: the GPU family's split-KV
    # decoding (oclgrind's default), and the CPU family's decode.cl with one row per
    # work-item and with blocks of rows: 5 rows (a register block of 4 and one of 1), 4
    export CK_RUN_CASE=decode
    for fb in gpu:default cpu:1,1,16 cpu:6,1,16 cpu:4,1,16; do
        export CLATTN_KERNEL_FAMILY=${fb%%:*}
        blocking=${fb#*:}
        if [ "$blocking" = default ]; then unset CLATTN_BLOCKING; else export CLATTN_BLOCKING=$blocking; fi
        check "decode $fb" "$CLATTN_FEATURES_BIN"
    done
    unset CLATTN_KERNEL_FAMILY
    unset CK_RUN_CASE CLATTN_BLOCKING
fi
# float64 LSEs: the kernels' LSE_DT=4 stores, the merge's float64 running LSE (case R17)
if [ -n "${CLATTN_SPLIT_BIN:-}" ]; then
    check "float64 LSE (test_split)" "$CLATTN_SPLIT_BIN"
fi
# the backward kernels (bwd_prep, bwd_dq, bwd_dkdv, bwd_dq_sum): float mask, softcap, causal, GQA 4:2,
# masked rows and poisoned masked keys (test_backward's small device cases)
# — one query row or key per work-item (what this GPU-typed device gets), then the CPU
# form: 4 rows or keys per work-item, 4 float16 vectors per micro-kernel step
if [ -n "${CLATTN_BACKWARD_BIN:-}" ]; then
    CK_RUN_CASE=device_small check "backward" "$CLATTN_BACKWARD_BIN"
    CLATTN_BLOCKING=4,8,64,4 CK_RUN_CASE=device_small check "backward, 4 rows or keys per work-item" \
        "$CLATTN_BACKWARD_BIN"
    # the CPU form's dQ formed in bwd_dkdv over several key blocks and splits (bwd_dq_sum)
    CLATTN_BLOCKING=4,8,64,4 CK_RUN_CASE=device_blocks check "backward, dQ in bwd_dkdv, key blocks" \
        "$CLATTN_BACKWARD_BIN"
fi
# paged K/V (test_paged): the table on the device with entries outside the pool (the
# kernels clamp them), and every paged configuration in both kernel families (decode,
# split-KV decoding, the tiled kernels staging rows page by page)
if [ -n "${CLATTN_PAGED_BIN:-}" ]; then
    CK_RUN_CASE=device check "paged, device table" "$CLATTN_PAGED_BIN"
    # the CPU family's decode.cl too (oclgrind's device is a GPU: the default family),
    # with the clamped entries and lengths (its prefetches, checked reads on oclgrind,
    # run in test_oclgrind_paged's pages of 16 and 8; with pages of 7 a whole step ahead is
    # read row by row through the clamped table)
    CLATTN_KERNEL_FAMILY=cpu CK_RUN_CASE=device check "paged, device table, CPU family" \
        "$CLATTN_PAGED_BIN"
    # append.cl and rope_q.cl: rows appended into the cache, rotary, device lengths past it
    CK_RUN_CASE=append check "append, rotary" "$CLATTN_PAGED_BIN"
fi
echo "test_oclgrind: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
