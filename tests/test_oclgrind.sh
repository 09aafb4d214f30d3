#!/bin/sh
# Every kernel under oclgrind's device simulator, which reports out-of-bounds accesses,
# data races and missing barriers. oclgrind exits 0 even when it reports, so each run
# logs to a file and a non-empty log fails the test. Small shapes with tails off every
# tile (n_q 19, n_kv 37, d_k 20, d_v 9, grouped heads 2:1), all masks, both algorithms,
# the GPU blocking oclgrind's device gets by default and the CPU blocking (4 queries per
# work-item), plus the demo (the decoding path and the three stages on their own).
# Usage: CLATTN_BIN=build/clattn sh tests/test_oclgrind.sh   (run from anywhere)
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

check demo "$bin" demo
for blocking in default 4,8,32; do
    for mask in none causal causal-bottom-right no-self; do
        for alg in fused unfused; do
            if [ "$blocking" = default ]; then unset CLATTN_BLOCKING; else export CLATTN_BLOCKING=$blocking; fi
            set -- --q "$data/og_q.npy" --k "$data/og_k.npy" --v "$data/og_v.npy" \
                --out "$tmp/o.npy" --mask "$mask" --algorithm "$alg" --check
            [ "$alg" = unfused ] && set -- "$@" --weights "$tmp/w.npy"
            check "$blocking $mask $alg" "$bin" run "$@"
        done
    done
done
echo "test_oclgrind: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
