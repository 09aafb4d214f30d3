#!/bin/sh
# End-to-end tests of `clattn heatmap`: the seed 000 example ("your journey starts with
# one step", Q = K = X, scale 1) and the seed 003 example ("sat bank river", no-self)
# render to well-formed SVG with the token labels, one cell per weight and the values;
# --from-weights; XML characters in tokens are escaped; bad inputs (a missing file,
# mismatched d_k, a bad head index, a wrong token count) exit non-zero without creating
# the output file, and never replace an existing one. Needs POSIX sh, grep, printf and
# mktemp; xmllint (libxml2-utils) checks well-formedness when installed.
#
# Usage: CLATTN_BIN=path/to/clattn sh tests/test_heatmap.sh
#
# shellcheck disable=SC2059 # printf formats are built on purpose (byte escapes)
# shellcheck disable=SC2086 # value lists such as $X are meant to split into words
# shellcheck disable=SC2046 # so are the lists $(swap_hn ...) prints
set -eu

bin=${CLATTN_BIN:?set CLATTN_BIN to the clattn program}
. "$(dirname "$0")/test_lib.sh"

# expect_count NAME FILE PATTERN N: PATTERN (fixed string) occurs N times in FILE.
expect_count() {
    n=$(grep -o -F -e "$3" "$2" | wc -l | tr -d ' ')
    if [ "$n" -eq "$4" ]; then pass; else fail "$1: '$3' occurs $n times, expected $4"; fi
}

expect_text() {
    if grep -F -q -e "$3" "$2"; then pass; else fail "$1: no '$3' in $(basename "$2")"; fi
}

# expect_wellformed NAME FILE: an XML document with one <svg> root.
expect_wellformed() {
    if command -v xmllint >/dev/null 2>&1; then
        if xmllint --noout "$2" 2>"$tmp/err"; then pass; else fail "$1: xmllint rejects $2"; fi
    else
        # without xmllint: the prolog, one root element closed at the end, no raw '&'
        if head -n 1 "$2" | grep -q '^<?xml version="1.0"' &&
            [ "$(grep -c '<svg ' "$2")" -eq 1 ] && [ "$(tail -n 1 "$2")" = "</svg>" ] &&
            ! grep -q '&[^a-z#]' "$2"; then pass; else fail "$1: $2 is not well-formed"; fi
    fi
}

# expect_no_file NAME FILE
expect_no_file() {
    if [ ! -e "$2" ]; then pass; else fail "$1: $2 was created"; fi
    if ls "$2".clattn-tmp* >/dev/null 2>&1; then fail "$1: a temporary file was left"; else pass; fi
}

# ---- .npy files (version 1.0 headers padded to 64 bytes, like numpy) ----------------

# npy FILE SHAPE HEX...: a float32 .npy file of the given bit patterns
npy() {
    file=$1 shape=$2
    shift 2
    {
        npy_header '<f4' "$shape"
        f32 "$@"
    } >"$file"
}

# seed 000: X (6x3); seed 003: sat, bank, river (3x4)
X="3edc28f6 3e19999a 3f63d70a 3f0ccccd 3f5eb852 3f28f5c3 3f11eb85 3f59999a 3f23d70a
   3e6147ae 3f147ae1 3ea8f5c3 3f451eb8 3e800000 3dcccccd 3d4ccccd 3f4ccccd 3f0ccccd"
R="3dcccccd 3e4ccccd 3e99999a 3ecccccd 3e99999a becccccd 00000000 3fa66666
   3ecccccd be99999a 3dcccccd 3fc00000"
npy "$tmp/x.npy" '(6, 3)' $X
npy "$tmp/x2h.npy" '(2, 6, 3)' $X $X
npy "$tmp/x1h.npy" '(1, 6, 3)' $X
npy "$tmp/r.npy" '(3, 4)' $R
# 2x3 weights with values 0.5 0.25 0.25 / 0 1 0
npy "$tmp/w.npy" '(2, 3)' 3f000000 3e800000 3e800000 00000000 3f800000 00000000

# ---- the seed examples ------------------------------------------------------------------

run_clattn heatmap --help
expect_rc "heatmap --help" 0
expect_text "heatmap --help" "$tmp/out" "Usage: clattn heatmap"

run_clattn heatmap --q "$tmp/x.npy" --k "$tmp/x.npy" --scale 1 \
    --tokens "your journey starts with one step" --out "$tmp/s0.svg"
expect_rc "seed 000" 0
expect_wellformed "seed 000" "$tmp/s0.svg"
expect_count "seed 000 cells" "$tmp/s0.svg" 'class="cell"' 36
for t in your journey starts with one step; do
    expect_count "seed 000 label $t" "$tmp/s0.svg" ">$t</text>" 2 # row and column
done
# W of seed 000 (rounded to 2 decimals): 0.2098 0.2006 ... the row of "journey"
for v in 0.21 0.14 0.24 0.23 0.12 0.11 0.16; do
    expect_text "seed 000 value $v" "$tmp/s0.svg" ">$v</text>"
done
expect_text "seed 000 title" "$tmp/s0.svg" "scale 1 "
expect_text "seed 000 legend" "$tmp/s0.svg" ">min 0.0988"
expect_text "seed 000 legend" "$tmp/s0.svg" ">max 0.2379"

run_clattn heatmap --q "$tmp/r.npy" --k "$tmp/r.npy" --mask no-self --tokens "sat bank river" \
    --out "$tmp/s3.svg"
expect_rc "seed 003" 0
expect_wellformed "seed 003" "$tmp/s3.svg"
expect_count "seed 003 cells" "$tmp/s3.svg" 'class="cell"' 9
expect_count "seed 003 masked cells" "$tmp/s3.svg" ': masked</title>' 3
for v in 0.48 0.52 0.30 0.70 0.31 0.69; do
    expect_text "seed 003 value $v" "$tmp/s3.svg" ">$v</text>"
done
expect_text "seed 003 title" "$tmp/s3.svg" "mask no-self"

# a second head (h_q = 2 over one key head), no tokens: labels 0..5
run_clattn heatmap --q "$tmp/x2h.npy" --k "$tmp/x1h.npy" --head 1 --mask causal \
    --out "$tmp/h1.svg"
expect_rc "head 1, GQA, causal" 0
expect_wellformed "head 1" "$tmp/h1.svg"
expect_count "head 1 masked cells" "$tmp/h1.svg" ': masked</title>' 15
expect_count "head 1 number labels" "$tmp/h1.svg" ">5</text>" 2

# --layout bshd: Q and K in (b, n, h, d), two heads each (X and X's rows reversed), give
# the same SVG as in (b, h, n, d) (the files' base names, in the subtitle, are the same)
XR=$(echo $X | awk '{ for (r = 5; r >= 0; r--) for (c = 1; c <= 3; c++) printf "%s ", $(r * 3 + c) }')
mkdir "$tmp/bshd"
npy "$tmp/q2.npy" '(1, 2, 6, 3)' $X $XR
npy "$tmp/k2.npy" '(1, 2, 6, 3)' $XR $X
npy "$tmp/bshd/q2.npy" '(1, 6, 2, 3)' $(swap_hn 1 2 6 3 $X $XR)
npy "$tmp/bshd/k2.npy" '(1, 6, 2, 3)' $(swap_hn 1 2 6 3 $XR $X)
for head in 0 1; do
    run_clattn heatmap --q "$tmp/q2.npy" --k "$tmp/k2.npy" --head $head --out "$tmp/l-bhsd.svg"
    expect_rc "--layout bhsd, head $head" 0
    run_clattn heatmap --layout bshd --q "$tmp/bshd/q2.npy" --k "$tmp/bshd/k2.npy" --head $head \
        --out "$tmp/l-bshd.svg"
    expect_rc "--layout bshd, head $head" 0
    if cmp -s "$tmp/l-bhsd.svg" "$tmp/l-bshd.svg"; then pass; else
        fail "--layout bshd, head $head: the SVG differs from bhsd's"; fi
    grep -o '>[0-9.]*</text>' "$tmp/l-bhsd.svg" >"$tmp/l-values-$head"
done
# the two heads differ: each head's own rows were read
if cmp -s "$tmp/l-values-0" "$tmp/l-values-1"; then fail "--layout: heads 0 and 1 drew the same weights"; else pass; fi
run_clattn heatmap --layout bshd --q "$tmp/bshd/q2.npy" --k "$tmp/k2.npy" --out "$tmp/never.svg"
expect_rc "--layout bshd, K in bhsd" 1
expect_text "--layout bshd, K in bhsd" "$tmp/err" "2 heads is not a multiple of the 6 heads of"
expect_text "--layout bshd, K in bhsd" "$tmp/err" "(--layout bshd: heads are the last dimension but one"
npy "$tmp/h0.npy" '(1, 6, 0, 3)'
run_clattn heatmap --layout bshd --q "$tmp/h0.npy" --k "$tmp/bshd/k2.npy" --out "$tmp/never.svg"
expect_rc "--layout bshd, Q of 0 heads" 1
expect_text "--layout bshd, Q of 0 heads" "$tmp/err" "h0.npy: h_q is 0; heads must be at least 1"
run_clattn heatmap --layout bshd --from-weights "$tmp/w.npy" --out "$tmp/never.svg"
expect_rc "--layout with --from-weights" 2
expect_text "--layout with --from-weights" "$tmp/err" "--layout does not go with --from-weights"
run_clattn heatmap --layout thd --q "$tmp/x.npy" --k "$tmp/x.npy" --out "$tmp/never.svg"
expect_rc "--layout thd" 2
expect_text "--layout thd" "$tmp/err" "unknown --layout 'thd' (bhsd: (b, h, n, d), PyTorch's; bshd"
expect_no_file "--layout errors" "$tmp/never.svg"

# --from-weights, and tokens with XML characters
run_clattn heatmap --from-weights "$tmp/w.npy" --tokens "<a> b&c \"d'" --q-tokens "x y" \
    --out "$tmp/w.svg"
expect_rc "from-weights" 0
expect_wellformed "from-weights" "$tmp/w.svg"
expect_count "from-weights cells" "$tmp/w.svg" 'class="cell"' 6
expect_text "escaped <a>" "$tmp/w.svg" ">&lt;a&gt;</text>"
expect_text "escaped b&c" "$tmp/w.svg" ">b&amp;c</text>"
expect_text "escaped quotes" "$tmp/w.svg" ">&quot;d&apos;</text>"
expect_text "from-weights value" "$tmp/w.svg" ">0.25</text>"

# --max-side: blocks of cells, each the block's largest visible weight. 5x7 weights
# (i*7 + j)/64 with a NaN at (3, 5); --max-side 2: blocks of 3x4, a 2x2 grid whose maxima
# are (2,3) 17/64, (2,6) 20/64, (4,3) 31/64 and NaN (a NaN is never hidden)
npy "$tmp/w57.npy" '(5, 7)' 00000000 3c800000 3d000000 3d400000 3d800000 3da00000 3dc00000 \
    3de00000 3e000000 3e100000 3e200000 3e300000 3e400000 3e500000 3e600000 3e700000 \
    3e800000 3e880000 3e900000 3e980000 3ea00000 3ea80000 3eb00000 3eb80000 3ec00000 \
    3ec80000 7fc00000 3ed80000 3ee00000 3ee80000 3ef00000 3ef80000 3f000000 3f040000 3f080000
run_clattn heatmap --from-weights "$tmp/w57.npy" --max-side 2 --out "$tmp/w57.svg"
expect_rc "max-side 2" 0
expect_wellformed "max-side 2" "$tmp/w57.svg"
expect_count "max-side 2 cells" "$tmp/w57.svg" 'class="cell"' 4
expect_text "max-side 2 block (0,0)" "$tmp/w57.svg" "0$(printf '\342\200\223')2 $(printf '\342\206\222') 0$(printf '\342\200\223')3: 0.265625</title>"
expect_text "max-side 2 block (0,1)" "$tmp/w57.svg" "4$(printf '\342\200\223')6: 0.3125</title>"
expect_text "max-side 2 block (1,0)" "$tmp/w57.svg" "3$(printf '\342\200\223')4 $(printf '\342\206\222') 0$(printf '\342\200\223')3: 0.484375</title>"
expect_text "max-side 2 NaN block" "$tmp/w57.svg" ": NaN</title>"
expect_text "max-side 2 subtitle" "$tmp/w57.svg" "the largest weight of 3$(printf '\303\227')4"
run_clattn heatmap --from-weights "$tmp/w57.npy" --out "$tmp/w57all.svg"
expect_rc "max-side default" 0
expect_count "max-side default cells" "$tmp/w57all.svg" 'class="cell"' 35
# the largest --max-side: every cell (the block size once overflowed to 0 or -1)
run_clattn heatmap --from-weights "$tmp/w57.npy" --max-side 9223372036854775807 --out "$tmp/w57max.svg"
expect_rc "max-side 2^63-1" 0
expect_count "max-side 2^63-1 cells" "$tmp/w57max.svg" 'class="cell"' 35
# causal 6x6 in blocks of 2x2: the three blocks above the diagonal are wholly masked
run_clattn heatmap --q "$tmp/x.npy" --k "$tmp/x.npy" --mask causal --max-side 3 \
    --out "$tmp/x3.svg"
expect_rc "max-side 3, causal" 0
expect_count "max-side 3 cells" "$tmp/x3.svg" 'class="cell"' 9
expect_count "max-side 3 masked blocks" "$tmp/x3.svg" ': masked</title>' 3

# ---- bad inputs: non-zero, no output file ----------------------------------------------

bad() { # bad NAME STATUS ARGS...: exits STATUS and creates no $tmp/bad.svg
    name=$1 status=$2
    shift 2
    run_clattn heatmap "$@" --out "$tmp/bad.svg"
    expect_rc "$name" "$status"
    expect_no_file "$name" "$tmp/bad.svg"
}
bad "missing Q file" 1 --q "$tmp/missing.npy" --k "$tmp/x.npy"
expect_text "missing Q file message" "$tmp/err" "clattn heatmap: $tmp/missing.npy: cannot open"
bad "missing weights file" 1 --from-weights "$tmp/missing.npy"
bad "mismatched d_k" 1 --q "$tmp/x.npy" --k "$tmp/r.npy"
expect_text "mismatched d_k message" "$tmp/err" "clattn heatmap: $tmp/r.npy: d_k (last dimension) is"
bad "head out of range" 2 --q "$tmp/x.npy" --k "$tmp/x.npy" --head 1
bad "head out of range (weights)" 2 --from-weights "$tmp/w.npy" --head 3
bad "batch out of range" 2 --q "$tmp/x.npy" --k "$tmp/x.npy" --batch 2
bad "negative head" 2 --q "$tmp/x.npy" --k "$tmp/x.npy" --head -1
bad "token count" 2 --q "$tmp/x.npy" --k "$tmp/x.npy" --tokens "too few"
bad "unknown mask" 2 --q "$tmp/x.npy" --k "$tmp/x.npy" --mask diagonal
bad "zero scale" 2 --q "$tmp/x.npy" --k "$tmp/x.npy" --scale 0
bad "no K" 2 --q "$tmp/x.npy"
bad "weights with --q" 2 --from-weights "$tmp/w.npy" --q "$tmp/x.npy"
bad "max-side 0" 2 --from-weights "$tmp/w.npy" --max-side 0
bad "max-side not a number" 2 --from-weights "$tmp/w.npy" --max-side 2x
bad "max-side with a sign" 2 --from-weights "$tmp/w.npy" --max-side +5
bad "max-side with a space" 2 --from-weights "$tmp/w.npy" --max-side " 5"
bad "max-side beyond 2^63-1" 2 --from-weights "$tmp/w.npy" --max-side 99999999999999999999
expect_text "max-side beyond 2^63-1 message" "$tmp/err" "is out of range"
run_clattn heatmap --q "$tmp/x.npy" --k "$tmp/x.npy" --out "$tmp/x.npy"
expect_rc "output is an input" 2

# a failure keeps an existing output file as it was
cp "$tmp/s3.svg" "$tmp/keep.svg"
run_clattn heatmap --q "$tmp/x.npy" --k "$tmp/r.npy" --out "$tmp/keep.svg"
expect_rc "failure with an existing output" 1
if cmp -s "$tmp/s3.svg" "$tmp/keep.svg"; then pass; else fail "an existing output was changed"; fi

echo "test_heatmap: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
