#!/bin/sh
# End-to-end tests of the `clattn` program: demo, run (round trips, ranks, masks,
# weights, --check, and the options of the desc: mask files, lengths, windows, ALiBi,
# attention sinks, softcap, positions, masked rows, LSE, head-mean weights, float16 and
# bfloat16 files; the KV-cache options: paged K/V, appending with rotary embeddings,
# packed variable-length batches; the gradients of --backward; dropout with its seed
# and offset), usage errors, malformed inputs that must fail without touching an
# existing output file, and outputs that must never be replaced
# (inputs, folders, symbolic links, devices, FIFOs). Needs only POSIX sh, od, awk, cmp, cut, ln, mkfifo,
# mktemp and paste: the .npy inputs are written here with printf.
#
# Usage: CLATTN_BIN=path/to/clattn sh tests/test_cli.sh
#
# shellcheck disable=SC2059 # printf formats are built on purpose (byte escapes)
# shellcheck disable=SC2086 # value lists such as $X are meant to split into words
# shellcheck disable=SC2046 # so are the lists $(swap_hn ...) and $(npy_values ...) print
set -eu

bin=${CLATTN_BIN:?set CLATTN_BIN to the clattn program}
. "$(dirname "$0")/test_lib.sh"

# expect_text NAME FILE TEXT: FILE (spaces squeezed) contains TEXT.
expect_text() {
    if tr -s ' ' <"$2" | grep -F -q -e "$3"; then pass; else fail "$1: no '$3' in $(basename "$2")"; fi
}

# bench_refuses SHAPES...: each --shapes entry is a usage error of clattn bench (exit 2,
# "bad --shapes entry")
bench_refuses() {
    for bad in "$@"; do
        run_clattn bench --shapes "$bad" --reps 1 --quiet
        expect_rc "bench $bad" 2
        expect_text "bench $bad" "$tmp/err" "bad --shapes entry"
    done
}

# ---- writing .npy files --------------------------------------------------------

# f16 HEX...: little-endian bytes of 16-bit words (float16, bfloat16, uint16).
f16() {
    for h in "$@"; do
        v=$((0x$h))
        printf "$(printf '\\%03o\\%03o' $((v & 255)) $((v >> 8 & 255)))"
    done
}

# u8 N...: bytes of the decimal values N... (bool and uint8 elements).
u8() {
    for n in "$@"; do printf "$(printf '\\%03o' "$n")"; done
}

# npy FILE DESCR SHAPE HEX...: a .npy file holding the float32 values HEX...
npy() {
    file=$1 descr=$2 shape=$3
    shift 3
    { npy_header "$descr" "$shape"; f32 "$@"; } >"$file"
}

# npy_with WRITER FILE DESCR SHAPE VALUE...: a .npy file whose data WRITER (f32, f16 or
# u8) makes from the VALUEs.
npy_with() {
    writer=$1 file=$2 descr=$3 shape=$4
    shift 4
    { npy_header "$descr" "$shape"; "$writer" "$@"; } >"$file"
}

# Example 1 of the demo: X (6x3), "your journey starts with one step".
X="3edc28f6 3e19999a 3f63d70a 3f0ccccd 3f5eb852 3f28f5c3 3f11eb85 3f59999a 3f23d70a
   3e6147ae 3f147ae1 3ea8f5c3 3f451eb8 3e800000 3dcccccd 3d4ccccd 3f4ccccd 3f0ccccd"
# Example 2 of the demo: sat, bank, river (3x4).
R="3dcccccd 3e4ccccd 3e99999a 3ecccccd 3e99999a becccccd 00000000 3fa66666
   3ecccccd be99999a 3dcccccd 3fc00000"

# float64 results of the two examples (tests/cases/seed_examples.json)
X_Z="0.4420593986 0.5930985621 0.5789890707 0.4418657479 0.651481978 0.5683088877
     0.443127512 0.649594579 0.5670730577 0.4303897328 0.6298280621 0.55102706
     0.4671017295 0.5909927255 0.526596524 0.4177244739 0.6503232057 0.5645352171"
X_W="0.2098347574 0.2005814405 0.1981492137 0.1242282192 0.1220487252 0.145157644
     0.138547585 0.2378912986 0.2332740262 0.1239916024 0.1081818752 0.1581136125
     0.1390075991 0.2369214381 0.2326019449 0.1242044007 0.1108002025 0.1564644146
     0.1435268847 0.2073944151 0.2045520298 0.1461922253 0.1262952434 0.1720392017
     0.1526108442 0.1958386644 0.1974906377 0.1366866636 0.1878589057 0.1295142844
     0.1384711604 0.2183637119 0.2127594268 0.1420475806 0.09880636995 0.1895517503"
R_O="0.3517492858 -0.3482507142 0.05174928577 1.403498572 0.3107981963 -0.1513303272
     0.1594678691 1.17292672 0.2375662661 -0.2126987983 0.09365060083 1.019048198"
R_W="0 0.4825071423 0.5174928577 0.2973393457 0 0.7026606543 0.3121686694 0.6878313306 0"

npy "$tmp/x.npy" '<f4' '(6, 3)' $X
npy "$tmp/x3.npy" '<f4' '(1, 6, 3)' $X
npy "$tmp/x4.npy" '<f4' '(1, 1, 6, 3)' $X
npy "$tmp/x2h.npy" '<f4' '(2, 6, 3)' $X $X
npy "$tmp/r.npy" '<f4' '(3, 4)' $R

# ---- reading .npy files back ---------------------------------------------------

# npy_values FILE [TYPE]: the float32 (od TYPE, e.g. f8: float64) values of a .npy file
# (version 1.0), one per line.
npy_values() {
    hlen=$(od -An -v -t u2 -j 8 -N 2 "$1" | tr -d ' ')
    od -An -v -t "${2:-f4}" -j $((10 + hlen)) "$1" | tr -s ' ' '\n' | sed '/^$/d'
}

# expect_values NAME FILE EXPECTED [TOL]: FILE (float32) holds exactly the values of the
# list EXPECTED (one argument, values separated by white space), each within TOL
# (default 5e-5).
expect_values() {
    name=$1 file=$2 want=$3 tol=${4:-5e-5}
    if [ ! -f "$file" ]; then
        fail "$name: $file was not written"
        return
    fi
    if npy_values "$file" | awk -v want="$want" -v tol="$tol" '
        BEGIN { n = split(want, w, " ") }
        { ++i; d = $1 - w[i]; if (d < 0) d = -d; if (i > n || d > tol + 0) bad = bad " [" i - 1 "] " $1 "/" w[i] }
        END { if (i != n) bad = bad " count " i "/" n; if (bad != "") { print "  got/expected:" bad; exit 1 } }'
    then pass; else fail "$name: values of $(basename "$file") differ (got/expected)"; fi
}

# expect_shape NAME FILE SHAPE: FILE's header says 'shape': SHAPE.
expect_shape() {
    if head -c 128 "$2" | grep -a -F -q "'shape': $3"; then pass; else fail "$1: shape is not $3"; fi
}

# expect_descr NAME FILE DESCR: FILE's header says 'descr': 'DESCR'.
expect_descr() {
    if head -c 128 "$2" | grep -a -F -q "'descr': '$3'"; then pass; else fail "$1: dtype is not $3"; fi
}

# ---- program and subcommand basics ----------------------------------------------

run_clattn --version
expect_rc "--version" 0
expect_text "--version" "$tmp/out" "clattn 0."
for cmd in "" devices demo run; do
    run_clattn $cmd --help
    expect_rc "$cmd --help" 0
    expect_text "$cmd --help" "$tmp/out" "Usage: clattn"
done
# README.md's block of run's options (from --scale to --device) is `clattn run --help`'s
run_clattn run --help
readme="$(dirname "$0")/../README.md"
options_block() { awk '/^  --scale X/{f=1} f{print} /^  --device SPEC/{f=0}' "$1"; }
options_block "$tmp/out" >"$tmp/help_block"
options_block "$readme" >"$tmp/readme_block"
if [ -s "$tmp/help_block" ] && cmp -s "$tmp/help_block" "$tmp/readme_block"; then pass; else
    fail "README.md's options block differs from run --help: $(diff "$tmp/help_block" "$tmp/readme_block" | head -4 | tr '\n' ' ')"
fi
# README.md's paged decode step, as written there (from "P=tests/data/paged" to the end of
# its block), run from the source tree's root with the outputs in $tmp
awk '/^P=tests\/data\/paged$/{f=1} /^```$/{f=0} f{print}' "$readme" |
    sed -e "s|^P=tests/data/paged|P=\"$(cd "$(dirname "$0")/.." && pwd)/tests/data/paged\"|" \
        -e "s|\./build/clattn|\"\$bin\"|" -e "s| \([KVO]2*[_a-z]*\)\.npy| \"\$tmp/\\1.npy\"|g" >"$tmp/paged_step.sh"
if grep -q -- "--block-table" "$tmp/paged_step.sh"; then pass; else
    fail "README.md's paged decode step not found"; fi
rc=0
(. "$tmp/paged_step.sh") >"$tmp/out" 2>"$tmp/err" || rc=$?
expect_rc "README's paged decode step" 0
expect_text "README's paged decode step" "$tmp/out" "check K cache: max abs error"
if [ -s "$tmp/O.npy" ] && [ -s "$tmp/K2.npy" ] && [ -s "$tmp/V2.npy" ]; then pass; else
    fail "README's paged decode step: O.npy, K2.npy or V2.npy not written"; fi
# its second command, in FlashAttention's layout: the same O (one query: the same order)
# and caches (pools (8, 2, 4, 16) against (8, 4, 2, 16))
if [ "$(grep -c -- "--layout bshd" "$tmp/paged_step.sh")" -eq 1 ]; then pass; else
    fail "README.md's paged decode step in FlashAttention's layout not found"; fi
expect_values "README's paged decode step, --layout bshd" "$tmp/O_bshd.npy" "$(npy_values "$tmp/O.npy" | tr '\n' ' ')" 1e-6
for c in K2 V2; do
    if [ "$(npy_values "$tmp/${c}_bshd.npy" | tr '\n' ' ')" = "$(swap_hn 8 2 4 16 $(npy_values "$tmp/$c.npy"))" ]
    then pass; else fail "README's paged decode step, --layout bshd: ${c}_bshd.npy is not $c.npy in (8, 4, 2, 16)"; fi
done
run_clattn -h
expect_rc "-h" 0
run_clattn frobnicate
expect_rc "unknown command" 2
expect_text "unknown command" "$tmp/err" "unknown command 'frobnicate'"
run_clattn
expect_rc "no command" 2
run_clattn run --q "$tmp/x.npy" --k "$tmp/x.npy" --v "$tmp/x.npy" --out "$tmp/o.npy" --frob
expect_rc "unknown option" 2
expect_text "unknown option" "$tmp/err" "unknown option '--frob'"
run_clattn run --q "$tmp/x.npy" --k "$tmp/x.npy" --out "$tmp/o.npy"
expect_rc "missing --v" 2
expect_text "missing --v" "$tmp/err" "missing --v"
run_clattn demo --frob
expect_rc "demo unknown option" 2
run_clattn demo --device ""
expect_rc "demo empty --device" 2
expect_text "demo empty --device" "$tmp/err" "option '--device' needs a non-empty value"
run_clattn demo --device 0:0 --device 0:0
expect_rc "demo repeated --device" 2
expect_text "demo repeated --device" "$tmp/err" "option '--device' is given more than once"
run_clattn demo --help
expect_text "demo --help" "$tmp/out" 'Example 1: "your journey starts with one step"'
expect_text "demo --help" "$tmp/out" 'Example 2: "sat bank river"'
if grep -q -i seed "$tmp/out"; then fail "demo --help: mentions seeds"; else pass; fi

run_clattn devices
expect_rc "devices" 0
expect_text "devices" "$tmp/out" "0:0"
expect_text "devices" "$tmp/out" "max work-group size"

# ---- demo ----------------------------------------------------------------------

run_clattn demo
expect_rc "demo" 0
expect_text "demo" "$tmp/out" "Device: "
expect_text "demo" "$tmp/out" "journey 0.4419 0.6515 0.5683"
expect_text "demo" "$tmp/out" "bank 0.2973 0.0000 0.7027"
expect_text "demo" "$tmp/out" "cos(bank output, money) = 0.959816"
expect_text "demo" "$tmp/out" "cos(bank output, river) = 0.995579"
expect_text "demo" "$tmp/out" "Z fused - reference"
expect_text "demo" "$tmp/out" 'Example 1: "your journey starts with one step"'
expect_text "demo" "$tmp/out" 'Example 2: "sat bank river"'
if grep -q -i seed "$tmp/out"; then fail "demo: mentions seeds"; else pass; fi

# ---- run: round trips ----------------------------------------------------------

# run_6x3 FILE ARGS...: `clattn run` with Q = K = V = FILE, scale 1 (as in example 1).
run_6x3() {
    file=$tmp/$1
    shift
    run_clattn run --q "$file" --k "$file" --v "$file" --scale 1 "$@"
}

for algorithm in auto unfused fused; do
    rm -f "$tmp/o.npy"
    run_6x3 x.npy --out "$tmp/o.npy" --algorithm "$algorithm"
    expect_rc "run $algorithm" 0
    expect_values "run $algorithm" "$tmp/o.npy" "$X_Z"
    expect_shape "run $algorithm" "$tmp/o.npy" "(6, 3)"
done

for algorithm in auto unfused; do
    rm -f "$tmp/o.npy" "$tmp/w.npy"
    run_6x3 x.npy --out "$tmp/o.npy" --weights "$tmp/w.npy" --algorithm "$algorithm"
    expect_rc "run $algorithm --weights" 0
    expect_values "run $algorithm --weights (O)" "$tmp/o.npy" "$X_Z"
    expect_values "run $algorithm --weights (W)" "$tmp/w.npy" "$X_W"
    expect_shape "run $algorithm --weights" "$tmp/w.npy" "(6, 6)"
done

# --check, with weights and both algorithms
for algorithm in unfused fused; do
    run_6x3 x.npy --out "$tmp/o.npy" --algorithm "$algorithm" --check
    expect_rc "run --check $algorithm" 0
    expect_text "run --check $algorithm" "$tmp/out" "check O: max abs error"
    expect_text "run --check $algorithm" "$tmp/out" ": within 1e-5 + 1e-5*|reference|"
done
run_6x3 x.npy --out "$tmp/o.npy" --weights "$tmp/w.npy" --check
expect_rc "run --check --weights" 0
expect_text "run --check --weights" "$tmp/out" "check W: max abs error"

# ranks 3 and 4 keep their rank; two query heads share one key/value head (GQA)
run_6x3 x3.npy --out "$tmp/o3.npy"
expect_rc "run rank 3" 0
expect_values "run rank 3" "$tmp/o3.npy" "$X_Z"
expect_shape "run rank 3" "$tmp/o3.npy" "(1, 6, 3)"
run_6x3 x4.npy --out "$tmp/o4.npy" --weights "$tmp/w4.npy"
expect_rc "run rank 4" 0
expect_values "run rank 4" "$tmp/o4.npy" "$X_Z"
expect_shape "run rank 4 (W)" "$tmp/w4.npy" "(1, 1, 6, 6)"
run_clattn run --q "$tmp/x2h.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --scale=1 --out "$tmp/o2h.npy" --check
expect_rc "run GQA" 0
expect_values "run GQA" "$tmp/o2h.npy" "$X_Z $X_Z"

# example 2: default scale 1/sqrt(4), no-self mask
run_clattn run --q "$tmp/r.npy" --k "$tmp/r.npy" --v "$tmp/r.npy" --mask no-self \
    --out "$tmp/ro.npy" --weights "$tmp/rw.npy" --check
expect_rc "run no-self" 0
expect_values "run no-self (O)" "$tmp/ro.npy" "$R_O"
expect_values "run no-self (W)" "$tmp/rw.npy" "$R_W"

# causal: the first query sees only the first key, so its output is X[0]
run_6x3 x.npy --mask causal --out "$tmp/oc.npy" --check
expect_rc "run causal" 0
if npy_values "$tmp/oc.npy" | head -n 3 | tr '\n' ' ' |
    awk '{ exit !($1 - 0.43 < 1e-6 && 0.43 - $1 < 1e-6 && $3 - 0.89 < 1e-6 && 0.89 - $3 < 1e-6) }'
then pass; else fail "run causal: first row is not X[0]"; fi

# ---- run: the options of the desc -----------------------------------------------

# X in decimal, and its rows' squared norms (the LSE of a row that sees only its own
# key, scale 1)
X_DEC="0.43 0.15 0.89 0.55 0.87 0.66 0.57 0.85 0.64 0.22 0.58 0.33 0.77 0.25 0.10 0.05 0.80 0.55"
X_NORM2="0.9995 1.495 1.457 0.4937 0.6654 0.945"
# X as float16 and as bfloat16 words (round to nearest even)
X16="36e1 30cd 3b1f 3866 3af6 3948 388f 3acd 391f 330a 38a4 3548 3a29 3400 2e66 2a66 3a66 3866"
XBF="3edc 3e1a 3f64 3f0d 3f5f 3f29 3f12 3f5a 3f24 3e61 3f14 3ea9 3f45 3e80 3dcd 3d4d 3f4d 3f0d"
# the lower triangle of a 6x6 matrix, as bools and as 0 / -inf
TRIL="1 0 0 0 0 0 1 1 0 0 0 0 1 1 1 0 0 0 1 1 1 1 0 0 1 1 1 1 1 0 1 1 1 1 1 1"
NEG=ff800000
TRIL_F="0 $NEG $NEG $NEG $NEG $NEG 0 0 $NEG $NEG $NEG $NEG 0 0 0 $NEG $NEG $NEG
        0 0 0 0 $NEG $NEG 0 0 0 0 0 $NEG 0 0 0 0 0 0"
npy_with u8 "$tmp/tril.npy" '|b1' '(6, 6)' $TRIL
npy_with u8 "$tmp/tril3.npy" '|b1' '(1, 6, 6)' $TRIL
npy_with u8 "$tmp/tril-u8.npy" '|u1' '(1, 1, 6, 6)' $TRIL
npy_with f32 "$tmp/tril-f.npy" '<f4' '(6, 6)' $TRIL_F
npy_with u8 "$tmp/keys5.npy" '|b1' '(6,)' 1 1 1 1 1 0
npy_with f32 "$tmp/keys5-f.npy" '<f4' '(1, 6)' 0 0 0 0 0 $NEG
npy_with f32 "$tmp/lens5.npy" '<i4' '(1,)' 00000005
npy_with f16 "$tmp/x16.npy" '<f2' '(6, 3)' $X16
npy_with f16 "$tmp/xbf.npy" '<u2' '(6, 3)' $XBF

# values_of FILE: the float32 values of FILE on one line
values_of() { npy_values "$1" | tr '\n' ' '; }

# --weights now works with the fused algorithm too (the library runs a second pass)
rm -f "$tmp/w.npy"
run_6x3 x.npy --out "$tmp/o.npy" --weights "$tmp/w.npy" --algorithm fused --check
expect_rc "run fused --weights" 0
expect_values "run fused --weights (W)" "$tmp/w.npy" "$X_W"
expect_text "run fused --weights" "$tmp/out" "check W: max abs error"

# a bool mask file equal to the causal mask gives the causal result, in every spelling:
# 2-D, 3-D, uint8 4-D, float32 0/-inf, and the window (-1, 0); both algorithms
C_O=$(values_of "$tmp/oc.npy")
for spec in "tril.npy" "tril3.npy" "tril-u8.npy" "tril-f.npy"; do
    for algorithm in fused unfused; do
        rm -f "$tmp/om.npy"
        run_6x3 x.npy --mask-file "$tmp/$spec" --algorithm "$algorithm" --out "$tmp/om.npy" --check
        expect_rc "run --mask-file $spec $algorithm" 0
        expect_values "run --mask-file $spec $algorithm" "$tmp/om.npy" "$C_O"
    done
done
rm -f "$tmp/om.npy"
run_6x3 x.npy --window -1,0 --out "$tmp/om.npy" --check
expect_rc "run --window -1,0" 0
expect_values "run --window -1,0 (causal)" "$tmp/om.npy" "$C_O"

# key padding three ways: --kv-lens 5, an int32 file, and key masks (6,) and (1, 6)
# broadcast over the queries
run_6x3 x.npy --kv-lens 5 --out "$tmp/okv.npy" --weights "$tmp/wkv.npy" --check
expect_rc "run --kv-lens" 0
if values_of "$tmp/wkv.npy" | awk '{ for (i = 6; i <= 36; i += 6) if ($i != 0) exit 1 }'
then pass; else fail "run --kv-lens: the last key has a weight"; fi
KV_O=$(values_of "$tmp/okv.npy")
for spec in "--kv-lens $tmp/lens5.npy" "--mask-file $tmp/keys5.npy" "--mask-file $tmp/keys5-f.npy"; do
    rm -f "$tmp/om.npy"
    run_6x3 x.npy $spec --out "$tmp/om.npy" --check
    expect_rc "run $spec" 0
    expect_values "run $spec" "$tmp/om.npy" "$KV_O"
done

# --q-lens 4: rows 4 and 5 are padding (zeros, LSE -inf), the others unchanged
run_6x3 x.npy --q-lens 4 --out "$tmp/oq.npy" --lse "$tmp/lq.npy" --check
expect_rc "run --q-lens" 0
expect_values "run --q-lens" "$tmp/oq.npy" "$(echo $X_Z | cut -d ' ' -f 1-12) 0 0 0 0 0 0"
expect_shape "run --q-lens (LSE)" "$tmp/lq.npy" "(6,)"
if values_of "$tmp/lq.npy" | awk '{ exit !($5 == "-inf" && $6 == "-inf" && $4 != "-inf") }'
then pass; else fail "run --q-lens: the LSE of the padding rows is not -inf"; fi

# --window 0,0 and a huge ALiBi slope: every query sees only its own key, so O = X and
# the LSE is the squared norm of the row
run_6x3 x.npy --window 0,0 --out "$tmp/ow.npy" --lse "$tmp/lw.npy" --check
expect_rc "run --window 0,0" 0
expect_values "run --window 0,0" "$tmp/ow.npy" "$X_DEC" 1e-6
expect_values "run --window 0,0 (LSE)" "$tmp/lw.npy" "$X_NORM2" 1e-6
expect_text "run --window 0,0" "$tmp/out" "check LSE: max abs error"
# leading zeros, more than a 64-bit integer has digits, are still the integer (not "out
# of range")
run_6x3 x.npy --window 0000000000000000000000000000000000000,-000000000000000000000000000000000000 \
    --out "$tmp/ow0.npy"
expect_rc "run --window with 37 leading zeros" 0
expect_values "run --window with 37 leading zeros" "$tmp/ow0.npy" "$X_DEC" 1e-6
run_6x3 x4.npy --alibi 1000 --out "$tmp/oa.npy" --lse "$tmp/la.npy" --check
expect_rc "run --alibi" 0
expect_values "run --alibi 1000" "$tmp/oa.npy" "$X_DEC" 1e-6
expect_shape "run --alibi (LSE rank 4)" "$tmp/la.npy" "(1, 1, 6)"
# --lse-dtype f64: the same LSE in float64 ('<f8'), checked against the reference
run_6x3 x4.npy --alibi 1000 --out "$tmp/oa64.npy" --lse "$tmp/la64.npy" --lse-dtype f64 --check
expect_rc "run --lse-dtype f64" 0
expect_text "run --lse-dtype f64" "$tmp/out" "check LSE: max abs error"
expect_descr "run --lse-dtype f64" "$tmp/la64.npy" "<f8"
expect_shape "run --lse-dtype f64" "$tmp/la64.npy" "(1, 1, 6)"
if [ "$(npy_values "$tmp/la64.npy" f8 | wc -l)" -eq 6 ] &&
    npy_values "$tmp/la.npy" | paste - "$(npy_values "$tmp/la64.npy" f8 >"$tmp/la64.txt" && echo "$tmp/la64.txt")" |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($1 < 0 ? -$1 : $1) + 1e-6) bad = 1 } END { exit bad }'
then pass; else fail "run --lse-dtype f64: the LSE differs from the float32 one"; fi
# case R17 through the CLI: keys [0, 2) and [2, 4) of a query at position 1e8 under ALiBi
# in two calls (--kv-start), merged here in double precision by their float64 LSEs,
# equal the one call's O (0.2816077, 0.0386145); float32 LSEs (spacing 4 at -5e7) merge
# the parts 50/50 (0.3558, 0.1442)
npy "$tmp/r17q.npy" '<f4' '(1, 2)' 3f000000 be800000
npy "$tmp/r17k0.npy" '<f4' '(2, 2)' 3f800000 00000000 00000000 3f800000
npy "$tmp/r17k2.npy" '<f4' '(2, 2)' bf800000 3f000000 3e800000 3e800000
npy "$tmp/r17v0.npy" '<f4' '(2, 2)' 3f800000 00000000 00000000 3f800000
npy "$tmp/r17v2.npy" '<f4' '(2, 2)' bf800000 3f800000 3f000000 bf000000
for part in 0 2; do
    run_clattn run --q "$tmp/r17q.npy" --k "$tmp/r17k$part.npy" --v "$tmp/r17v$part.npy" \
        --scale 1 --alibi 0.5 --q-start 100000000 --kv-start $part --out "$tmp/r17o$part.npy" \
        --lse "$tmp/r17l$part.npy" --lse-dtype f64 --check
    expect_rc "run R17 part $part (float64 LSE)" 0
done
if { npy_values "$tmp/r17l0.npy" f8; npy_values "$tmp/r17l2.npy" f8; npy_values "$tmp/r17o0.npy"
    npy_values "$tmp/r17o2.npy"; } | awk '{ x[NR] = $1 } END {
        m = x[1] > x[2] ? x[1] : x[2]; w0 = exp(x[1] - m); w2 = exp(x[2] - m); s = w0 + w2
        o0 = (w0 * x[3] + w2 * x[5]) / s; o1 = (w0 * x[4] + w2 * x[6]) / s
        d0 = o0 - 0.28160774512432724; d1 = o1 - 0.03861454923607072
        printf "  merged O %.7f %.7f\n", o0, o1
        exit !(d0 * d0 < 1e-10 && d1 * d1 < 1e-10) }' >"$tmp/r17merge"
then pass; else fail "run R17: the parts merged by their float64 LSEs are not one call's O: $(cat "$tmp/r17merge")"; fi
# --check with 3 weights before a float64 LSE (the reference's LSE stays aligned)
npy "$tmp/r17k3.npy" '<f4' '(3, 2)' 3f800000 00000000 00000000 3f800000 bf800000 3f000000
run_clattn run --q "$tmp/r17q.npy" --k "$tmp/r17k3.npy" --v "$tmp/r17k3.npy" \
    --out "$tmp/o3w.npy" --weights "$tmp/w3w.npy" --lse "$tmp/l3w.npy" --lse-dtype f64 --check
expect_rc "run --weights --lse-dtype f64 --check" 0
expect_text "run --weights --lse-dtype f64 --check" "$tmp/out" "check LSE: max abs error"
run_6x3 x.npy --out "$tmp/never.npy" --lse-dtype f64
expect_rc "run --lse-dtype without --lse" 2
expect_text "run --lse-dtype without --lse" "$tmp/err" "--lse-dtype needs --lse FILE"
run_6x3 x.npy --out "$tmp/never.npy" --lse "$tmp/never2.npy" --lse-dtype f16
expect_rc "run --lse-dtype f16" 2
expect_text "run --lse-dtype f16" "$tmp/err" "unknown --lse-dtype 'f16' (f32, f64)"
# one slope per query head (GQA: two query heads share one key/value head)
run_clattn run --q "$tmp/x2h.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --alibi 0.5,0.25 \
    --out "$tmp/o2h.npy" --check
expect_rc "run --alibi two heads" 0

# --sinks: a float32 file of h_q logits. A sink far above the scores takes every row's
# weight (O = 0, LSE = the sink); a sink of -inf is no sink; with two query heads (GQA)
# and sinks 0.5, -inf only the first head's weights sum below 1
npy "$tmp/sink1000.npy" '<f4' '(1,)' 447a0000
npy "$tmp/sink-inf.npy" '<f4' '(1,)' ff800000
npy "$tmp/sinks2.npy" '<f4' '(2,)' 3f000000 ff800000
run_6x3 x.npy --sinks "$tmp/sink1000.npy" --out "$tmp/osk.npy" --lse "$tmp/lsk.npy" --check
expect_rc "run --sinks 1000" 0
expect_values "run --sinks 1000" "$tmp/osk.npy" "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0" 1e-6
expect_values "run --sinks 1000 (LSE)" "$tmp/lsk.npy" "1000 1000 1000 1000 1000 1000"
expect_text "run --sinks 1000" "$tmp/out" "check LSE: max abs error"
for algorithm in fused unfused; do
    rm -f "$tmp/osk.npy"
    run_6x3 x.npy --sinks "$tmp/sink-inf.npy" --algorithm "$algorithm" --out "$tmp/osk.npy" --check
    expect_rc "run --sinks -inf $algorithm" 0
    expect_values "run --sinks -inf $algorithm (no sink)" "$tmp/osk.npy" "$X_Z"
done
run_clattn run --q "$tmp/x2h.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --scale 1 \
    --sinks "$tmp/sinks2.npy" --out "$tmp/o2s.npy" --weights "$tmp/w2s.npy" --lse "$tmp/l2s.npy" --check
expect_rc "run --sinks two heads" 0
expect_text "run --sinks two heads" "$tmp/out" "check W: max abs error"
if values_of "$tmp/w2s.npy" | awk '{ for (r = 0; r < 12; ++r) { t = 0
        for (j = 1; j <= 6; ++j) t += $(6 * r + j)
        if (r < 6 ? t > 0.99 : t < 0.99999 || t > 1.00001) exit 1 } }'
then pass; else fail "run --sinks two heads: the weights of the head with a sink sum to 1, or the other's do not"; fi

# --k-scale / --v-scale: an int8 ('|i1') K and V with their float32 scales. K holds
# 100*X and V -100*X as integers (X has two decimals), with scale 0.01 per token: the
# dequantized K and V are X and -X, so O is -X_Z (negative int8 values included); the
# same with scales that differ per token (K rows X_j times 1, 2, 0.5, ...) passes
# --check, and one scale per head (1, h_kv, 1, 1) with two KV heads of different scales
# gives the query heads of KV head 0 the result of X and passes --check
X100="43 15 89 55 87 66 57 85 64 22 58 33 77 25 10 5 80 55"
X100N=""
for n in $X100; do X100N="$X100N $((256 - n))"; done # -n as int8 bytes
S01=3c23d70a S02=3ca3d70a S005=3ba3d70a
npy_with u8 "$tmp/k8.npy" '|i1' '(6, 3)' $X100
npy_with u8 "$tmp/v8.npy" '|i1' '(6, 3)' $X100N
npy "$tmp/s01.npy" '<f4' '(6, 1)' $S01 $S01 $S01 $S01 $S01 $S01
npy "$tmp/s01-1.npy" '<f4' '(1, 1)' $S01
npy "$tmp/s-tok.npy" '<f4' '(6, 1)' $S01 $S02 $S005 $S02 $S01 $S005
run_clattn run --q "$tmp/x.npy" --k "$tmp/k8.npy" --v "$tmp/v8.npy" --scale 1 \
    --k-scale "$tmp/s01.npy" --v-scale "$tmp/s01.npy" --out "$tmp/o8.npy" --lse "$tmp/l8.npy" --check
expect_rc "run int8 K and V" 0
expect_values "run int8 K and V (O = -X_Z)" "$tmp/o8.npy" "$(for z in $X_Z; do printf -- '-%s ' "$z"; done)"
expect_text "run int8 K and V" "$tmp/out" "check LSE: max abs error"
for spec in "s01-1.npy|s-tok.npy" "s-tok.npy|s01.npy" "s-tok.npy|s-tok.npy"; do
    run_clattn run --q "$tmp/x.npy" --k "$tmp/k8.npy" --v "$tmp/v8.npy" --scale 1 \
        --k-scale "$tmp/${spec%%|*}" --v-scale "$tmp/${spec#*|}" --out "$tmp/o8.npy" --check
    expect_rc "run int8 K and V, scales $spec" 0
    expect_text "run int8 K and V, scales $spec" "$tmp/out" "check O: max abs error"
done
# an int8 K with a float32 V (its scale alone), rank 3
npy_with u8 "$tmp/k8-3.npy" '|i1' '(1, 6, 3)' $X100
npy "$tmp/s01-3.npy" '<f4' '(1, 6, 1)' $S01 $S01 $S01 $S01 $S01 $S01
run_clattn run --q "$tmp/x3.npy" --k "$tmp/k8-3.npy" --v "$tmp/x3.npy" --scale 1 \
    --k-scale "$tmp/s01-3.npy" --out "$tmp/o8.npy" --check
expect_rc "run int8 K, float V, rank 3" 0
expect_values "run int8 K, float V, rank 3" "$tmp/o8.npy" "$X_Z"
# one scale per head: KV head 0 is X (100*X, scale 0.01), head 1 2X (100*X, scale 0.02);
# two query heads per KV head (GQA)
npy_with u8 "$tmp/k8-2h.npy" '|i1' '(1, 2, 6, 3)' $X100 $X100
npy_with u8 "$tmp/v8-2h.npy" '|i1' '(1, 2, 6, 3)' $X100 $X100
npy "$tmp/s-head.npy" '<f4' '(1, 2, 1, 1)' $S01 $S02
npy "$tmp/x4h.npy" '<f4' '(1, 4, 6, 3)' $X $X $X $X
run_clattn run --q "$tmp/x4h.npy" --k "$tmp/k8-2h.npy" --v "$tmp/v8-2h.npy" --scale 1 \
    --k-scale "$tmp/s-head.npy" --v-scale "$tmp/s-head.npy" --out "$tmp/o8h.npy" --check
expect_rc "run int8 K and V, a scale per head" 0
expect_text "run int8 K and V, a scale per head" "$tmp/out" "check O: max abs error"
expect_shape "run int8 K and V, a scale per head" "$tmp/o8h.npy" "(1, 4, 6, 3)"
if values_of "$tmp/o8h.npy" | awk -v want="$X_Z $X_Z" '{ n = split(want, w, " ")
        for (i = 1; i <= n; ++i) { d = $i - w[i]; if (d < 0) d = -d; if (d > 5e-5) exit 1 } }'
then pass; else fail "run int8, a scale per head: query heads 0 and 1 (KV head 0, X) do not give X_Z"; fi

# a softcap far above the scores changes nothing; a small one passes --check
run_6x3 x.npy --softcap 1000 --out "$tmp/os.npy" --check
expect_rc "run --softcap 1000" 0
expect_values "run --softcap 1000" "$tmp/os.npy" "$X_Z"
run_6x3 x.npy --softcap 0.25 --mask causal --out "$tmp/os.npy" --check
expect_rc "run --softcap 0.25" 0

# positions: equal offsets keep the causal mask; a query block after the keys sees
# them all
rm -f "$tmp/op.npy"
run_6x3 x.npy --mask causal --q-start 7 --kv-start 7 --out "$tmp/op.npy" --check
expect_rc "run --q-start = --kv-start" 0
expect_values "run --q-start = --kv-start" "$tmp/op.npy" "$C_O"
run_6x3 x.npy --mask causal --q-start 6 --out "$tmp/op.npy" --check
expect_rc "run --q-start 6" 0
expect_values "run --q-start 6" "$tmp/op.npy" "$X_Z"

# --masked-rows: query 0 has no visible key when the keys start one position later
run_6x3 x.npy --mask causal --kv-start 1 --out "$tmp/om0.npy" --weights "$tmp/wm0.npy" --check
expect_rc "run --masked-rows zero (default)" 0
if values_of "$tmp/om0.npy" | awk '{ exit !($1 == 0 && $2 == 0 && $3 == 0 && $4 != 0) }'
then pass; else fail "run --masked-rows zero: row 0 is not zeros"; fi
run_6x3 x.npy --mask causal --kv-start 1 --masked-rows nan --out "$tmp/omn.npy" \
    --weights "$tmp/wmn.npy" --lse "$tmp/lmn.npy" --check
expect_rc "run --masked-rows nan" 0
if values_of "$tmp/omn.npy" | awk '{ exit !($1 ~ /nan/ && $3 ~ /nan/ && $4 !~ /nan/) }'
then pass; else fail "run --masked-rows nan: row 0 is not NaN"; fi
if values_of "$tmp/wmn.npy" | awk '{ exit !($1 ~ /nan/ && $6 ~ /nan/ && $7 !~ /nan/) }'
then pass; else fail "run --masked-rows nan: the weights of row 0 are not NaN"; fi
if values_of "$tmp/lmn.npy" | awk '{ exit !($1 == "-inf" && $2 != "-inf") }'
then pass; else fail "run --masked-rows nan: the LSE of row 0 is not -inf"; fi

# --weights-head-mean: two equal query heads average to the one-head weights, with the
# head dimension kept as 1
run_clattn run --q "$tmp/x2h.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --scale 1 --out "$tmp/o2h.npy" \
    --weights "$tmp/w2h.npy" --weights-head-mean --check
expect_rc "run --weights-head-mean" 0
expect_shape "run --weights-head-mean" "$tmp/w2h.npy" "(1, 6, 6)"
expect_values "run --weights-head-mean" "$tmp/w2h.npy" "$X_W"

# float16 and bfloat16 files: O takes Q's dtype unless --out-dtype says otherwise
for algorithm in fused unfused; do
    rm -f "$tmp/o16.npy"
    run_6x3 x16.npy --out "$tmp/o16.npy" --algorithm "$algorithm" --weights "$tmp/w16.npy" --check
    expect_rc "run float16 $algorithm" 0
    expect_descr "run float16 $algorithm" "$tmp/o16.npy" "<f2"
    expect_shape "run float16 $algorithm" "$tmp/o16.npy" "(6, 3)"
    expect_descr "run float16 $algorithm (W)" "$tmp/w16.npy" "<f4"
    expect_text "run float16 $algorithm" "$tmp/out" "+ 1 ulp of float16"
done
run_6x3 x16.npy --out "$tmp/o16.npy" --out-dtype f32 --check
expect_rc "run float16 --out-dtype f32" 0
expect_descr "run float16 --out-dtype f32" "$tmp/o16.npy" "<f4"
expect_values "run float16 --out-dtype f32" "$tmp/o16.npy" "$X_Z" 2e-3
run_6x3 xbf.npy --dtype bf16 --out "$tmp/obf.npy" --check
expect_rc "run bfloat16" 0
expect_descr "run bfloat16" "$tmp/obf.npy" "<u2"
expect_text "run bfloat16" "$tmp/out" "+ 1 ulp of bfloat16"
run_6x3 xbf.npy --dtype bf16 --out "$tmp/obf.npy" --out-dtype f32 --check
expect_rc "run bfloat16 --out-dtype f32" 0
expect_values "run bfloat16 --out-dtype f32" "$tmp/obf.npy" "$X_Z" 1e-2
run_clattn run --q "$tmp/x16.npy" --k "$tmp/x.npy" --v "$tmp/xbf.npy" --dtype bf16 --scale 1 \
    --out "$tmp/omix.npy" --check
expect_rc "run mixed dtypes" 0
expect_descr "run mixed dtypes" "$tmp/omix.npy" "<f2"
for t in f16:'<f2' bf16:'<u2'; do
    run_6x3 x.npy --out "$tmp/ot.npy" --out-dtype "${t%%:*}" --check
    expect_rc "run --out-dtype ${t%%:*}" 0
    expect_descr "run --out-dtype ${t%%:*}" "$tmp/ot.npy" "${t#*:}"
done

# everything at once, both algorithms, checked against the reference
for algorithm in fused unfused; do
    run_clattn run --q "$tmp/x2h.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --algorithm "$algorithm" \
        --mask causal-bottom-right --mask-file "$tmp/tril-f.npy" --kv-lens 5 --q-lens 5 \
        --window 3,1 --alibi 0.5,0.125 --softcap 2 --q-start 1 --kv-start 2 \
        --out "$tmp/oall.npy" --weights "$tmp/wall.npy" --lse "$tmp/lall.npy" --check
    expect_rc "run all options $algorithm" 0
    expect_shape "run all options $algorithm (LSE)" "$tmp/lall.npy" "(2, 6)"
done

# ---- run: KV-cache options (paged K/V, append, rotary, varlen) ---------------------

# xrows A B: the hex words of X's rows A..B
xrows() { echo $X | cut -d ' ' -f "$(($1 * 3 + 1))-$(($2 * 3 + 3))"; }
Z3="00000000 00000000 00000000"
X_01=$(xrows 0 1) X_23=$(xrows 2 3) X_45=$(xrows 4 5) X_03=$(xrows 0 3) X_25=$(xrows 2 5)
# --block-table: a pool of three pages of two slots, (3, 1, 2, 3), holding X's rows 2-3,
# 4-5 and 0-1; the table (2, 0, 1) reads them back in order, so O is X_Z (scale 1)
npy "$tmp/pool.npy" '<f4' '(3, 1, 2, 3)' $X_23 $X_45 $X_01
npy_with f32 "$tmp/bt.npy" '<i4' '(1, 3)' 00000002 00000000 00000001
npy_with f32 "$tmp/bt-bad.npy" '<i4' '(1, 3)' 00000002 00000003 00000001
npy_with f32 "$tmp/bt2.npy" '<i4' '(2, 3)' 00000002 00000000 00000001 00000002 00000000 00000001
# run_paged ARGS...: Q = x4.npy, K = V = ARGS' pool, scale 1
for lens in "" "--kv-lens 6" "--cache-seqlens $tmp/lens6.npy"; do
    npy_with f32 "$tmp/lens6.npy" '<i4' '(1,)' 00000006
    rm -f "$tmp/opg.npy"
    run_clattn run --q "$tmp/x4.npy" --k "$tmp/pool.npy" --v "$tmp/pool.npy" --scale 1 \
        --block-table "$tmp/bt.npy" $lens --out "$tmp/opg.npy" --lse "$tmp/lpg.npy" --check
    expect_rc "run --block-table $lens" 0
    expect_values "run --block-table $lens" "$tmp/opg.npy" "$X_Z"
    expect_text "run --block-table $lens" "$tmp/out" "check LSE: max abs error"
done
# --cache-seqlens 5 is --kv-lens 5: the last key is padding
run_clattn run --q "$tmp/x4.npy" --k "$tmp/pool.npy" --v "$tmp/pool.npy" --scale 1 \
    --block-table "$tmp/bt.npy" --cache-seqlens 5 --out "$tmp/opg.npy" --check
expect_rc "run --block-table --cache-seqlens 5" 0
expect_values "run --block-table --cache-seqlens 5" "$tmp/opg.npy" "$KV_O"
# entry 3 is not a page of the pool: the library's message, exit 1, nothing written
rm -f "$tmp/never.npy"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/pool.npy" --v "$tmp/pool.npy" \
    --block-table "$tmp/bt-bad.npy" --out "$tmp/never.npy"
expect_rc "run --block-table, an entry outside the pool" 1
expect_text "run --block-table, an entry outside the pool" "$tmp/err" "clattn_attention failed: invalid argument"
expect_text "run --block-table, an entry outside the pool" "$tmp/err" "block_table"
if [ -e "$tmp/never.npy" ]; then fail "run --block-table, a bad entry: wrote the output"; else pass; fi
# an int8 pool's scales have the pool's shape: (num_pages|1, h_kv, page_size|1, 1)
npy_with u8 "$tmp/pool8.npy" '|i1' '(3, 1, 2, 3)' $X100
npy "$tmp/s-pool-bad.npy" '<f4' '(3, 1, 1, 2)' $S01 $S01 $S01 $S01 $S01 $S01
run_clattn run --q "$tmp/x4.npy" --k "$tmp/pool8.npy" --v "$tmp/pool.npy" \
    --block-table "$tmp/bt.npy" --k-scale "$tmp/s-pool-bad.npy" --out "$tmp/never.npy"
expect_rc "run --block-table, int8 pool, scales of the wrong shape" 1
expect_text "run --block-table, int8 pool, scales of the wrong shape" "$tmp/err" \
    "--k-scale needs float32 scales shaped (num_pages|1, h_kv, page_size|1, 1) = (3|1, 1, 2|1, 1) for $tmp/pool8.npy, not (3, 1, 1, 2)"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/pool.npy" --v "$tmp/pool.npy" \
    --block-table "$tmp/bt2.npy" --out "$tmp/never.npy"
expect_rc "run --block-table of two rows, Q of one" 1
expect_text "run --block-table of two rows" "$tmp/err" \
    "$tmp/bt2.npy: --block-table needs an int32 table of shape (b, max_pages) with b = 1 (Q's batch size), not (2, 3)"
run_clattn run --q "$tmp/x.npy" --k "$tmp/x.npy" --v "$tmp/x.npy" --block-table "$tmp/bt.npy" \
    --out "$tmp/never.npy"
expect_rc "run --block-table, rank 2" 1
expect_text "run --block-table, rank 2" "$tmp/err" "--block-table needs Q, K and V of rank 4"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/pool.npy" --v "$tmp/pool.npy" \
    --block-table "$tmp/lens6.npy" --out "$tmp/never.npy"
expect_rc "run --block-table of rank 1" 1
expect_text "run --block-table of rank 1" "$tmp/err" "--block-table $tmp/lens6.npy"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/pool.npy" --v "$tmp/pool.npy" \
    --block-table "$tmp/bt.npy" --kv-lens 5 --cache-seqlens 5 --out "$tmp/never.npy"
expect_rc "run --kv-lens and --cache-seqlens" 2
expect_text "run --kv-lens and --cache-seqlens" "$tmp/err" "--cache-seqlens is another name for --kv-lens"
if [ -e "$tmp/never.npy" ]; then fail "run --block-table errors: wrote an output"; else pass; fi

# --k-new / --v-new: a cache (1, 1, 6, 3) holding X's rows 0-3 and two empty rows, with
# --kv-lens 4, gets X's rows 4-5 appended: O is X_Z and the caches written are X;
# the same through a block table (the empty rows in page 1), and --check compares the
# caches the call wrote with the reference's
npy "$tmp/kc.npy" '<f4' '(1, 1, 6, 3)' $X_03 $Z3 $Z3
npy "$tmp/kn.npy" '<f4' '(1, 1, 2, 3)' $X_45
npy "$tmp/kn3.npy" '<f4' '(1, 2, 3)' $X_45
npy "$tmp/pool-e.npy" '<f4' '(3, 1, 2, 3)' $X_23 $Z3 $Z3 $X_01
cp "$tmp/kc.npy" "$tmp/kc.orig"
for paged in "" "--block-table $tmp/bt.npy"; do
    cache=$tmp/kc.npy cache_want=$X_DEC cache_shape="(1, 1, 6, 3)"
    if [ -n "$paged" ]; then # pages 0, 1, 2 hold X's rows 2-3, 4-5 (appended), 0-1
        cache=$tmp/pool-e.npy cache_shape="(3, 1, 2, 3)"
        cache_want="$(echo $X_DEC | cut -d ' ' -f 7-18) $(echo $X_DEC | cut -d ' ' -f 1-6)"
    fi
    rm -f "$tmp/oap.npy" "$tmp/kco.npy" "$tmp/vco.npy"
    run_clattn run --q "$tmp/x4.npy" --k "$cache" --v "$cache" --scale 1 $paged --kv-lens 4 \
        --k-new "$tmp/kn.npy" --v-new "$tmp/kn.npy" --out "$tmp/oap.npy" \
        --k-cache-out "$tmp/kco.npy" --v-cache-out "$tmp/vco.npy" --check
    expect_rc "run --k-new $paged" 0
    expect_values "run --k-new $paged" "$tmp/oap.npy" "$X_Z"
    expect_values "run --k-new $paged (--k-cache-out)" "$tmp/kco.npy" "$cache_want" 1e-6
    expect_values "run --k-new $paged (--v-cache-out)" "$tmp/vco.npy" "$cache_want" 1e-6
    expect_shape "run --k-new $paged (--k-cache-out)" "$tmp/kco.npy" "$cache_shape"
    expect_text "run --k-new $paged" "$tmp/out" "check K cache: max abs error"
    expect_text "run --k-new $paged" "$tmp/out" "check V cache: max abs error"
done
if cmp -s "$tmp/kc.npy" "$tmp/kc.orig"; then pass; else fail "run --k-new: the input cache file was changed"; fi
# rank 3, causal, checked
npy "$tmp/kc3.npy" '<f4' '(1, 6, 3)' $X_03 $Z3 $Z3
run_clattn run --q "$tmp/x3.npy" --k "$tmp/kc3.npy" --v "$tmp/kc3.npy" --scale 1 --kv-lens 4 --mask causal \
    --k-new "$tmp/kn3.npy" --v-new "$tmp/kn3.npy" --out "$tmp/oap.npy" --check
expect_rc "run --k-new rank 3 causal" 0
expect_values "run --k-new rank 3 causal" "$tmp/oap.npy" "$C_O"
# errors: a missing companion, new rows of the wrong shape, no room in the cache
rm -f "$tmp/never.npy"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --k-new "$tmp/kn.npy" \
    --v-new "$tmp/kn.npy" --out "$tmp/never.npy"
expect_rc "run --k-new without --kv-lens" 2
expect_text "run --k-new without --kv-lens" "$tmp/err" "--k-new needs --kv-lens"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --kv-lens 4 \
    --k-new "$tmp/kn.npy" --out "$tmp/never.npy"
expect_rc "run --k-new without --v-new" 2
expect_text "run --k-new without --v-new" "$tmp/err" "--k-new needs --v-new FILE"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --kv-lens 4 \
    --k-cache-out "$tmp/never.npy" --out "$tmp/never2.npy"
expect_rc "run --k-cache-out without --k-new" 2
expect_text "run --k-cache-out without --k-new" "$tmp/err" "--k-cache-out needs --k-new"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --kv-lens 4 \
    --k-new "$tmp/kn3.npy" --v-new "$tmp/kn.npy" --out "$tmp/never.npy"
expect_rc "run --k-new of another rank" 1
expect_text "run --k-new of another rank" "$tmp/err" \
    "$tmp/kn3.npy: --k-new needs rows shaped (b, h_kv, n_new, d_k) = (1, 1, n_new, 3) in Q's rank 4, not (1, 2, 3)"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --kv-lens 5 \
    --k-new "$tmp/kn.npy" --v-new "$tmp/kn.npy" --out "$tmp/never.npy" --k-cache-out "$tmp/never2.npy"
expect_rc "run --k-new past n_kv" 1
expect_text "run --k-new past n_kv" "$tmp/err" "clattn_attention failed"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --kv-lens 4 \
    --k-new "$tmp/kn.npy" --v-new "$tmp/kn.npy" --out "$tmp/never.npy" --k-cache-out "$tmp/kc.npy"
expect_rc "run --k-cache-out is --k" 2
expect_text "run --k-cache-out is --k" "$tmp/err" "--k-cache-out '$tmp/kc.npy' is the same file as --k"
if cmp -s "$tmp/kc.npy" "$tmp/kc.orig"; then pass; else fail "run --k-cache-out is --k: the cache file was changed"; fi
if [ -e "$tmp/never.npy" ] || [ -e "$tmp/never2.npy" ]; then fail "run --k-new errors: wrote an output"; else pass; fi
run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --kv-lens 4 --k-new "$tmp/kn.npy" \
    --v-new "$tmp/kn.npy" --out "$tmp/never.npy" --weights "$tmp/never2.npy" --lse "$tmp/never3.npy" \
    --k-cache-out "$tmp/never4.npy" --v-cache-out "$tmp/never5.npy"
expect_rc "run with 5 outputs" 2
expect_text "run with 5 outputs" "$tmp/err" "5 output files: one run writes at most 4"

# --rotary: checked against the reference (GPT-NeoX and GPT-J pairs, a base, partial:
# 2 of d_k = 3 columns); tables of cos 1, sin 0 turn nothing, so O is X_Z
npy "$tmp/cos1.npy" '<f4' '(6, 1)' 3f800000 3f800000 3f800000 3f800000 3f800000 3f800000
npy "$tmp/sin0.npy" '<f4' '(6, 1)' 00000000 00000000 00000000 00000000 00000000 00000000
npy "$tmp/cos1-4.npy" '<f4' '(4, 1)' 3f800000 3f800000 3f800000 3f800000
npy "$tmp/sin0-4.npy" '<f4' '(4, 1)' 00000000 00000000 00000000 00000000
npy "$tmp/cos1-2.npy" '<f4' '(3, 2)' 3f800000 3f800000 3f800000 3f800000 3f800000 3f800000
for spec in "2,0,0" "2,1,10000|--mask causal" "2,0,500|--block-table $tmp/bt.npy"; do
    cache=$tmp/kc.npy extra=
    case $spec in *"|"*) extra=${spec#*|} ;; esac
    case $spec in *block-table*) cache=$tmp/pool-e.npy ;; esac
    run_clattn run --q "$tmp/x4.npy" --k "$cache" --v "$cache" --kv-lens 4 --k-new "$tmp/kn.npy" \
        --v-new "$tmp/kn.npy" --rotary "${spec%%|*}" $extra \
        --out "$tmp/orot.npy" --lse "$tmp/lrot.npy" --k-cache-out "$tmp/krot.npy" --check
    expect_rc "run --rotary $spec" 0
    expect_text "run --rotary $spec" "$tmp/out" "check K cache: max abs error"
done
run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --scale 1 --kv-lens 4 \
    --k-new "$tmp/kn.npy" --v-new "$tmp/kn.npy" --rotary 2,0,0 --rotary-cos "$tmp/cos1.npy" \
    --rotary-sin "$tmp/sin0.npy" --out "$tmp/orot.npy" --check
expect_rc "run --rotary-cos/--rotary-sin" 0
expect_values "run --rotary-cos 1, --rotary-sin 0" "$tmp/orot.npy" "$X_Z"
# errors: no --k-new, an odd or malformed spec, a table without its partner, of the
# wrong shape, or too short for the positions 4 and 5 rotated (the library's message)
rm -f "$tmp/never.npy"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --kv-lens 4 --rotary 2,0,0 \
    --out "$tmp/never.npy"
expect_rc "run --rotary without --k-new" 2
expect_text "run --rotary without --k-new" "$tmp/err" "--rotary needs --k-new"
for bad in "3,0,0|not even" "2,2,0|INTERLEAVED is 2" "2,0|is not DIM,INTERLEAVED,BASE" \
    "2,0,-1|the base is negative" "2,0,1,1|is not DIM,INTERLEAVED,BASE"; do
    run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --kv-lens 4 \
        --k-new "$tmp/kn.npy" --v-new "$tmp/kn.npy" --rotary "${bad%%|*}" --out "$tmp/never.npy"
    expect_rc "run --rotary ${bad%%|*}" 2
    expect_text "run --rotary ${bad%%|*}" "$tmp/err" "--rotary '${bad%%|*}'"
    expect_text "run --rotary ${bad%%|*}" "$tmp/err" "${bad#*|}"
done
run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --kv-lens 4 \
    --k-new "$tmp/kn.npy" --v-new "$tmp/kn.npy" --rotary 2,0,0 --rotary-cos "$tmp/cos1.npy" \
    --out "$tmp/never.npy"
expect_rc "run --rotary-cos without --rotary-sin" 2
expect_text "run --rotary-cos without --rotary-sin" "$tmp/err" "--rotary-cos needs --rotary-sin FILE"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --kv-lens 4 \
    --k-new "$tmp/kn.npy" --v-new "$tmp/kn.npy" --rotary-cos "$tmp/cos1.npy" \
    --rotary-sin "$tmp/sin0.npy" --out "$tmp/never.npy"
expect_rc "run --rotary-cos without --rotary" 2
expect_text "run --rotary-cos without --rotary" "$tmp/err" "--rotary-cos needs --rotary"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --kv-lens 4 \
    --k-new "$tmp/kn.npy" --v-new "$tmp/kn.npy" --rotary 2,0,0 --rotary-cos "$tmp/cos1-2.npy" \
    --rotary-sin "$tmp/sin0.npy" --out "$tmp/never.npy"
expect_rc "run --rotary-cos of the wrong shape" 1
expect_text "run --rotary-cos of the wrong shape" "$tmp/err" \
    "$tmp/cos1-2.npy: --rotary-cos needs a float32 table of shape (table_len, dim/2) = (table_len, 1), not (3, 2)"
run_clattn run --q "$tmp/x4.npy" --k "$tmp/kc.npy" --v "$tmp/kc.npy" --kv-lens 4 \
    --k-new "$tmp/kn.npy" --v-new "$tmp/kn.npy" --rotary 2,0,0 --rotary-cos "$tmp/cos1-4.npy" \
    --rotary-sin "$tmp/sin0-4.npy" --out "$tmp/never.npy"
expect_rc "run --rotary tables too short" 1
expect_text "run --rotary tables too short" "$tmp/err" "clattn_attention failed: invalid shape"
if [ -e "$tmp/never.npy" ]; then fail "run --rotary errors: wrote an output"; else pass; fi

# --cu-seqlens-q / --cu-seqlens-k: X's rows packed as two sequences, rows 0-1 and 2-5,
# rank 3 and rank 4, offsets as lists and as int32 files; each sequence alone gives
# the same rows
npy_with f32 "$tmp/cu.npy" '<i4' '(3,)' 00000000 00000002 00000006
npy "$tmp/xa.npy" '<f4' '(2, 3)' $X_01
npy "$tmp/xb.npy" '<f4' '(4, 3)' $X_25
run_clattn run --q "$tmp/xa.npy" --k "$tmp/xa.npy" --v "$tmp/xa.npy" --mask causal --out "$tmp/ova.npy"
run_clattn run --q "$tmp/xb.npy" --k "$tmp/xb.npy" --v "$tmp/xb.npy" --mask causal --out "$tmp/ovb.npy"
VAR_O="$(values_of "$tmp/ova.npy") $(values_of "$tmp/ovb.npy")"
for spec in "x3.npy|0,2,6|0,2,6" "x4.npy|$tmp/cu.npy|0,2,6" "x3.npy|$tmp/cu.npy|$tmp/cu.npy"; do
    files=${spec%%|*} offsets=${spec#*|}
    rm -f "$tmp/ovar.npy"
    run_clattn run --q "$tmp/$files" --k "$tmp/$files" --v "$tmp/$files" --mask causal \
        --cu-seqlens-q "${offsets%%|*}" --cu-seqlens-k "${offsets#*|}" --out "$tmp/ovar.npy" \
        --lse "$tmp/lvar.npy" --check
    expect_rc "run --cu-seqlens $spec" 0
    expect_values "run --cu-seqlens $spec" "$tmp/ovar.npy" "$VAR_O"
    expect_text "run --cu-seqlens $spec" "$tmp/out" "check LSE: max abs error"
done
# --batch-invariant: row 5 of the causal 6x3 call and the same row as a one-row call (the
# decode shape) give the same bits
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask causal-bottom-right \
    --batch-invariant --out "$tmp/obi.npy" --check
expect_rc "run --batch-invariant" 0
npy "$tmp/x5.npy" '<f4' '(1, 1, 3)' $(xrows 5 5)
run_clattn run --q "$tmp/x5.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask causal-bottom-right \
    --batch-invariant --out "$tmp/obi1.npy"
expect_rc "run --batch-invariant, one row" 0
# (row 5 is the last 12 bytes of both files)
tail -c 12 "$tmp/obi.npy" >"$tmp/row_full"
tail -c 12 "$tmp/obi1.npy" >"$tmp/row_one"
if [ -s "$tmp/row_one" ] && cmp -s "$tmp/row_full" "$tmp/row_one"; then
    pass
else
    fail "run --batch-invariant: the one-row call's bits differ from row 5 of the full call"
fi
# --mask-mod: causal written as a snippet gives the bits of --mask causal (fused); a
# document mask through --mod-buffer (int32 ids: rows 0-2 and 3-5) gives the two halves'
# own results; a snippet that does not compile names its own line; --check refuses
printf 'bool clattn_mask_mod(int b, int h, long q, long k)\n{\n    return k <= q;\n}\n' >"$tmp/causal.cl"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask causal \
    --algorithm fused --out "$tmp/oc_builtin.npy"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask-mod "$tmp/causal.cl" \
    --algorithm fused --out "$tmp/oc_mod.npy"
expect_rc "run --mask-mod causal.cl" 0
if cmp -s "$tmp/oc_builtin.npy" "$tmp/oc_mod.npy"; then pass; else
    fail "run --mask-mod causal.cl: not the bits of --mask causal"; fi
printf 'bool clattn_mask_mod(int b, int h, long q, long k,\n                     __global const int *doc)\n{\n    return doc[q] == doc[k];\n}\n' >"$tmp/doc.cl"
npy_with f32 "$tmp/doc.npy" '<i4' '(6,)' 00000000 00000000 00000000 00000001 00000001 00000001
npy "$tmp/x02.npy" '<f4' '(3, 3)' $(xrows 0 2)
npy "$tmp/x35.npy" '<f4' '(3, 3)' $(xrows 3 5)
run_clattn run --q "$tmp/x02.npy" --k "$tmp/x02.npy" --v "$tmp/x02.npy" --out "$tmp/od0.npy"
run_clattn run --q "$tmp/x35.npy" --k "$tmp/x35.npy" --v "$tmp/x35.npy" --out "$tmp/od1.npy"
for alg in fused unfused; do
    run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask-mod "$tmp/doc.cl" \
        --mod-buffer doc="$tmp/doc.npy" --algorithm $alg --out "$tmp/odoc.npy"
    expect_rc "run --mask-mod doc.cl --mod-buffer ($alg)" 0
    expect_values "run --mask-mod doc.cl --mod-buffer ($alg)" "$tmp/odoc.npy" \
        "$(values_of "$tmp/od0.npy") $(values_of "$tmp/od1.npy")"
done
# --block-mask: the same bits as without it
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask-mod "$tmp/causal.cl" \
    --block-mask --algorithm fused --out "$tmp/oc_bm.npy"
expect_rc "run --mask-mod causal.cl --block-mask" 0
if cmp -s "$tmp/oc_builtin.npy" "$tmp/oc_bm.npy"; then pass; else
    fail "run --mask-mod causal.cl --block-mask: not the bits of --mask causal"; fi
printf 'bool clattn_mask_mod(int b, int h, long q, long k)\n{\n    return q >= ;\n}\n' >"$tmp/bad.cl"
rm -f "$tmp/never.npy"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask-mod "$tmp/bad.cl" \
    --out "$tmp/never.npy"
expect_rc "run --mask-mod bad.cl" 1
expect_text "run --mask-mod bad.cl" "$tmp/err" "mask_mod:3:"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask-mod "$tmp/doc.cl" \
    --mod-buffer doc="$tmp/doc.npy" --check --out "$tmp/never.npy"
expect_rc "run --mask-mod --check" 2
expect_text "run --mask-mod --check" "$tmp/err" "cannot run the OpenCL C"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mod-buffer doc="$tmp/doc.npy" \
    --out "$tmp/never.npy"
expect_rc "run --mod-buffer alone" 2
expect_text "run --mod-buffer alone" "$tmp/err" "--mod-buffer needs --score-mod or --mask-mod"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask-mod "$tmp/doc.cl" \
    --mod-buffer "$tmp/doc.npy" --out "$tmp/never.npy"
expect_rc "run --mod-buffer without NAME=" 2
expect_text "run --mod-buffer without NAME=" "$tmp/err" "is not NAME=FILE.npy"
# the snippet options read their values as every other option does: a forgotten value is
# not the next option (a new user's finding: --score-mod --check read a file "--check"),
# --name=VALUE works, --block-mask takes no value and is given once
for opt in --score-mod --mask-mod --mod-buffer; do
    run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" $opt --check \
        --out "$tmp/never.npy"
    expect_rc "run $opt --check" 2
    expect_text "run $opt --check" "$tmp/err" "option '$opt' needs a value before the next option"
done
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --out "$tmp/never.npy" \
    --mask-mod
expect_rc "run --mask-mod (last, no value)" 2
expect_text "run --mask-mod (last, no value)" "$tmp/err" "option '--mask-mod' needs a value"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask-mod "$tmp/causal.cl" \
    --mask-mod="$tmp/causal.cl" --out "$tmp/never.npy"
expect_rc "run --mask-mod twice" 2
expect_text "run --mask-mod twice" "$tmp/err" "option '--mask-mod' is given more than once"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask-mod "$tmp/causal.cl" \
    --block-mask --block-mask --out "$tmp/never.npy"
expect_rc "run --block-mask twice" 2
expect_text "run --block-mask twice" "$tmp/err" "option '--block-mask' is given more than once"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask-mod "$tmp/causal.cl" \
    --block-mask=1 --out "$tmp/never.npy"
expect_rc "run --block-mask=1" 2
expect_text "run --block-mask=1" "$tmp/err" "option '--block-mask' takes no value"
if [ -e "$tmp/never.npy" ]; then fail "run --mask-mod errors: wrote an output"; else pass; fi
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" \
    --mask-mod="$tmp/causal.cl" --algorithm fused --out "$tmp/oc_eq.npy"
expect_rc "run --mask-mod=FILE" 0
if ! cmp -s "$tmp/oc_eq.npy" "$tmp/oc_bm.npy"; then
    fail "run --mask-mod=FILE: not the bits of --mask-mod FILE"; else pass; fi
# one sequence, rows 2-5 only: rows 0-1 are written as zeros, and --check compares them
# as zeros too (its reference once read them from uninitialised memory)
rm -f "$tmp/ovar.npy"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask causal \
    --cu-seqlens-q 2,6 --cu-seqlens-k 2,6 --out "$tmp/ovar.npy" --lse "$tmp/lvar.npy" --check
expect_rc "run --cu-seqlens 2,6 (rows outside the sequence)" 0
expect_values "run --cu-seqlens 2,6 (rows outside the sequence)" "$tmp/ovar.npy" \
    "0 0 0 0 0 0 $(values_of "$tmp/ovb.npy")"
# errors: one without the other, different counts, a batch of 2, with --kv-lens
npy "$tmp/x2b.npy" '<f4' '(2, 1, 6, 3)' $X $X
rm -f "$tmp/never.npy"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --cu-seqlens-q 0,2,6 \
    --out "$tmp/never.npy"
expect_rc "run --cu-seqlens-q without --cu-seqlens-k" 2
expect_text "run --cu-seqlens-q without --cu-seqlens-k" "$tmp/err" "--cu-seqlens-q needs --cu-seqlens-k"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --cu-seqlens-q 0,2,6 \
    --cu-seqlens-k 0,6 --out "$tmp/never.npy"
expect_rc "run --cu-seqlens of different counts" 2
expect_text "run --cu-seqlens of different counts" "$tmp/err" "--cu-seqlens-q has 3 offsets but --cu-seqlens-k 2"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --cu-seqlens-q "$tmp/cu.npy" \
    --cu-seqlens-k 0,6 --out "$tmp/never.npy"
expect_rc "run --cu-seqlens of different counts (a file)" 1
expect_text "run --cu-seqlens of different counts (a file)" "$tmp/err" "--cu-seqlens-q has 3 offsets but --cu-seqlens-k 2"
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --cu-seqlens-q 0,2,-6 \
    --cu-seqlens-k 0,2,6 --out "$tmp/never.npy"
expect_rc "run --cu-seqlens-q negative" 2
expect_text "run --cu-seqlens-q negative" "$tmp/err" "--cu-seqlens-q '0,2,-6': -6 is negative"
for bad in "--q $tmp/x2b.npy --k $tmp/x2b.npy --v $tmp/x2b.npy" \
    "--q $tmp/x3.npy --k $tmp/x3.npy --v $tmp/x3.npy --kv-lens 6" \
    "--q $tmp/x3.npy --k $tmp/x3.npy --v $tmp/x3.npy --cu-seqlens-k 0,7,6"; do
    case $bad in *cu-seqlens-k*) cu_k= ;; *) cu_k="--cu-seqlens-k 0,2,6" ;; esac
    # shellcheck disable=SC2086 # $bad and $cu_k are lists of options
    run_clattn run $bad --cu-seqlens-q 0,2,6 $cu_k --out "$tmp/never.npy"
    expect_rc "run --cu-seqlens, $bad" 1
    expect_text "run --cu-seqlens, $bad" "$tmp/err" "clattn_attention failed"
done
if [ -e "$tmp/never.npy" ]; then fail "run --cu-seqlens errors: wrote an output"; else pass; fi

# ---- run --layout bshd: FlashAttention's (b, n, h, d) ------------------------------
# Q's two heads X and B_Q2 (also --backward's problem, below) over one KV head X,
# causal: in (6, 2, 3) and (6, 1, 3) the results are those of (2, 6, 3) and (1, 6, 3)
# with O's heads and queries swapped back; the LSE stays (h_q, n_q)
B_Q2="3f6e147b bf7a1cac 3ef1a9fc bf2f1aa0 3f791687 bf774bc7 3f424dd3 3eb9db23 3f370a3d
      3f800000 bf056042 bea5e354 3ed4fdf4 bee0c49c bef22d0e bf0b020c 3f374bc7 3f3fbe77"
npy "$tmp/qg.npy" '<f4' '(2, 6, 3)' $X $B_Q2
npy "$tmp/qg-bshd.npy" '<f4' '(6, 2, 3)' $(swap_hn 1 2 6 3 $X $B_Q2)
npy "$tmp/x-bshd.npy" '<f4' '(6, 1, 3)' $X
run_clattn run --q "$tmp/qg.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask causal \
    --out "$tmp/olay.npy" --lse "$tmp/llay.npy" --check
expect_rc "run rank 3 GQA (bhsd, for --layout bshd)" 0
# (the mask file (1, 6, 6) stays (h_q|1, n_q, n_kv): the causal mask of both heads)
run_clattn run --layout bshd --q "$tmp/qg-bshd.npy" --k "$tmp/x-bshd.npy" --v "$tmp/x-bshd.npy" \
    --mask-file "$tmp/tril3.npy" --out "$tmp/olay-b.npy" --lse "$tmp/llay-b.npy" --check
expect_rc "run --layout bshd rank 3 GQA" 0
expect_values "run --layout bshd rank 3 GQA" "$tmp/olay-b.npy" "$(swap_hn 1 2 6 3 $(values_of "$tmp/olay.npy"))" 1e-6
expect_shape "run --layout bshd rank 3 GQA" "$tmp/olay-b.npy" "(6, 2, 3)"
expect_values "run --layout bshd rank 3 GQA (LSE)" "$tmp/llay-b.npy" "$(values_of "$tmp/llay.npy")" 1e-6
expect_shape "run --layout bshd rank 3 GQA (LSE)" "$tmp/llay-b.npy" "(2, 6)"
# rank 4, two heads of X: O is X_Z in each head, laid out (1, 6, 2, 3); weights (b, h, n_q, n_kv)
npy "$tmp/xx-bshd.npy" '<f4' '(1, 6, 2, 3)' $(swap_hn 1 2 6 3 $X $X)
for algorithm in fused unfused; do
    run_clattn run --layout bshd --q "$tmp/xx-bshd.npy" --k "$tmp/xx-bshd.npy" --v "$tmp/xx-bshd.npy" \
        --scale 1 --algorithm $algorithm --out "$tmp/olay-b.npy" --weights "$tmp/wlay-b.npy" --check
    expect_rc "run --layout bshd rank 4 $algorithm" 0
    expect_values "run --layout bshd rank 4 $algorithm" "$tmp/olay-b.npy" "$(swap_hn 1 2 6 3 $X_Z $X_Z)"
    expect_shape "run --layout bshd rank 4 $algorithm (weights)" "$tmp/wlay-b.npy" "(1, 2, 6, 6)"
done
# packed variable-length sequences: (total, h, d)
run_clattn run --layout bshd --q "$tmp/qg-bshd.npy" --k "$tmp/x-bshd.npy" --v "$tmp/x-bshd.npy" \
    --cu-seqlens-q 0,2,6 --cu-seqlens-k 0,2,6 --out "$tmp/olay-b.npy" --check
expect_rc "run --layout bshd --cu-seqlens" 0
run_clattn run --q "$tmp/qg.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --cu-seqlens-q 0,2,6 \
    --cu-seqlens-k 0,2,6 --out "$tmp/olay.npy"
expect_values "run --layout bshd --cu-seqlens" "$tmp/olay-b.npy" "$(swap_hn 1 2 6 3 $(values_of "$tmp/olay.npy"))" 1e-6
# a paged cache of two KV heads (X's rows, then B_Q2's), pages of 2 keys, the table
# (2, 0, 1); keys 0-3 cached, 4-5 appended: (3, 2, 2, 3) pools, (num_pages, h_kv,
# page_size, d) or (num_pages, page_size, h_kv, d), give the same O and caches
PL="$(xrows 2 3) $(echo $B_Q2 | cut -d ' ' -f 7-12) $Z3 $Z3 $Z3 $Z3 $(xrows 0 1) $(echo $B_Q2 | cut -d ' ' -f 1-6)"
npy "$tmp/pl.npy" '<f4' '(3, 2, 2, 3)' $PL
npy "$tmp/pl-bshd.npy" '<f4' '(3, 2, 2, 3)' $(swap_hn 3 2 2 3 $PL)
NEW="$(xrows 4 5) $(echo $B_Q2 | cut -d ' ' -f 13-18)"
npy "$tmp/nl.npy" '<f4' '(1, 2, 2, 3)' $NEW
npy "$tmp/nl-bshd.npy" '<f4' '(1, 2, 2, 3)' $(swap_hn 1 2 2 3 $NEW)
npy "$tmp/ql.npy" '<f4' '(1, 4, 1, 3)' $(xrows 0 3)
npy "$tmp/ql-bshd.npy" '<f4' '(1, 1, 4, 3)' $(xrows 0 3)
for layout in bhsd bshd; do
    sfx=$([ $layout = bshd ] && echo -bshd || true)
    run_clattn run --layout $layout --q "$tmp/ql$sfx.npy" --k "$tmp/pl$sfx.npy" --v "$tmp/pl$sfx.npy" \
        --block-table "$tmp/bt.npy" --kv-lens 4 --k-new "$tmp/nl$sfx.npy" --v-new "$tmp/nl$sfx.npy" \
        --out "$tmp/opl-$layout.npy" --k-cache-out "$tmp/kpl-$layout.npy" --check
    expect_rc "run --layout $layout --block-table --k-new" 0
    expect_text "run --layout $layout --block-table --k-new" "$tmp/out" "check K cache: max abs error"
done
expect_values "run --layout bshd --block-table --k-new" "$tmp/opl-bshd.npy" "$(values_of "$tmp/opl-bhsd.npy")" 1e-6
expect_values "run --layout bshd --block-table --k-new (cache)" "$tmp/kpl-bshd.npy" \
    "$(swap_hn 3 2 2 3 $(values_of "$tmp/kpl-bhsd.npy"))" 0
# messages in the layout's order, and a layout it does not know; (1, 2, 1, 3) is 2 heads
# of 1 row in bhsd, 2 rows of 1 head in bshd
rm -f "$tmp/never.npy"
npy "$tmp/nl1.npy" '<f4' '(1, 2, 1, 3)' $(xrows 4 5)
run_clattn run --layout bshd --q "$tmp/ql-bshd.npy" --k "$tmp/pl-bshd.npy" --v "$tmp/pl-bshd.npy" \
    --block-table "$tmp/bt.npy" --kv-lens 4 --k-new "$tmp/nl1.npy" --v-new "$tmp/nl1.npy" --out "$tmp/never.npy"
expect_rc "run --layout bshd, --k-new in bhsd" 1
expect_text "run --layout bshd, --k-new in bhsd" "$tmp/err" \
    "--k-new needs rows shaped (b, n_new, h_kv, d_k) = (1, n_new, 2, 3) in Q's rank 4, not (1, 2, 1, 3)"
npy_with u8 "$tmp/pl8.npy" '|i1' '(3, 2, 2, 3)' $X100 $X100
npy "$tmp/s-pl.npy" '<f4' '(1, 1, 2, 1)' $S01 $S02 # a scale per KV head
npy "$tmp/s-pl-bad.npy" '<f4' '(3, 2, 1, 2)' $S01 $S01 $S01 $S01 $S01 $S01 $S01 $S01 $S01 $S01 $S01 $S01
run_clattn run --layout bshd --q "$tmp/ql-bshd.npy" --k "$tmp/pl8.npy" --v "$tmp/pl-bshd.npy" \
    --block-table "$tmp/bt.npy" --k-scale "$tmp/s-pl.npy" --out "$tmp/opl8.npy" --check
expect_rc "run --layout bshd, int8 pool" 0
run_clattn run --layout bshd --q "$tmp/ql-bshd.npy" --k "$tmp/pl8.npy" --v "$tmp/pl-bshd.npy" \
    --block-table "$tmp/bt.npy" --k-scale "$tmp/s-pl-bad.npy" --out "$tmp/never.npy"
expect_rc "run --layout bshd, int8 pool, scales of the wrong shape" 1
expect_text "run --layout bshd, int8 pool, scales of the wrong shape" "$tmp/err" \
    "--k-scale needs float32 scales shaped (num_pages|1, page_size|1, h_kv, 1) = (3|1, 2|1, 2, 1)"
run_clattn run --layout bshd --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" \
    --block-table "$tmp/bt.npy" --out "$tmp/never.npy"
expect_rc "run --layout bshd --block-table, rank 3" 1
expect_text "run --layout bshd --block-table, rank 3" "$tmp/err" \
    "(K and V page pools (num_pages, page_size, h_kv, d)), not rank 3"
npy "$tmp/rank5.npy" '<f4' '(1, 1, 1, 6, 3)' $X
run_clattn run --layout bshd --q "$tmp/rank5.npy" --k "$tmp/x.npy" --v "$tmp/x.npy" --out "$tmp/never.npy"
expect_rc "run --layout bshd, rank 5" 1
expect_text "run --layout bshd, rank 5" "$tmp/err" "rank 5 is not supported (need (n, d), (n, h, d) or (b, n, h, d))"
run_clattn run --layout bshd --q "$tmp/qg-bshd.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --out "$tmp/never.npy"
expect_rc "run --layout bshd, K in bhsd" 1
expect_text "run --layout bshd, K in bhsd" "$tmp/err" \
    "2 heads is not a multiple of the 6 heads of $tmp/x3.npy (h_q must be a multiple of h_kv) (--layout bshd: heads are the last dimension but one"
run_clattn run --layout bshd --q "$tmp/x-bshd.npy" --k "$tmp/qg-bshd.npy" --v "$tmp/qg-bshd.npy" --out "$tmp/never.npy"
expect_rc "run --layout bshd, h_q 1 of h_kv 2" 1
expect_text "run --layout bshd, h_q 1 of h_kv 2" "$tmp/err" "1 head is not a multiple of the 2 heads of"
run_clattn run --layout sbhd --q "$tmp/x.npy" --k "$tmp/x.npy" --v "$tmp/x.npy" --out "$tmp/never.npy"
expect_rc "run --layout sbhd" 2
expect_text "run --layout sbhd" "$tmp/err" "unknown --layout 'sbhd' (bhsd: (b, h, n, d), PyTorch's; bshd: (b, n, h, d), FlashAttention's)"
if [ -e "$tmp/never.npy" ]; then fail "run --layout errors: wrote an output"; else pass; fi

# ---- run: errors leave an existing output byte-identical ------------------------

printf 'precious' >"$tmp/keep.npy"
cp "$tmp/keep.npy" "$tmp/keep.orig"
printf 'weights' >"$tmp/keepw.npy"
cp "$tmp/keepw.npy" "$tmp/keepw.orig"

head -c 100 "$tmp/x.npy" >"$tmp/truncated.npy"
head -c 140 "$tmp/x.npy" >"$tmp/short.npy"
head -c 9 "$tmp/x.npy" >"$tmp/stub.npy"
npy "$tmp/f8.npy" '<f8' '(6, 3)' $X
npy "$tmp/be.npy" '>f4' '(6, 3)' $X
npy "$tmp/v5.npy" '<f4' '(5, 3)' 3edc28f6 3e19999a 3f63d70a 3f0ccccd 3f5eb852 3f28f5c3 \
    3f11eb85 3f59999a 3f23d70a 3e6147ae 3f147ae1 3ea8f5c3 3f451eb8 3e800000 3dcccccd
npy "$tmp/long.npy" '<f4' '(6, 3)' $X 00000000
npy "$tmp/k4.npy" '<f4' '(3, 6)' $X
npy "$tmp/rank1.npy" '<f4' '(18,)' $X
{ npy_header '<f4' '(6, 3)' True; f32 $X; } >"$tmp/fortran.npy"
printf 'PK\003\004 not an npy file at all' >"$tmp/zip.npy"

# expect_failure NAME STATUS FILE TEXT ARGS...: `clattn run ARGS` exits with STATUS,
# its message names FILE and contains TEXT, and the existing outputs keep.npy and
# keepw.npy (the defaults of --out and --weights, added unless ARGS has them) are
# unchanged, and no file never.npy (a name the tests give to new outputs) appears.
expect_failure() {
    name=$1 status=$2 file=$3 text=$4
    shift 4
    has_out=0 has_weights=0
    for arg in "$@"; do
        case $arg in
        --out | --out=*) has_out=1 ;;
        --weights | --weights=*) has_weights=1 ;;
        esac
    done
    if [ "$has_out" -eq 0 ]; then set -- "$@" --out "$tmp/keep.npy"; fi
    if [ "$has_weights" -eq 0 ]; then set -- "$@" --weights "$tmp/keepw.npy"; fi
    run_clattn run "$@"
    expect_rc "$name" "$status"
    expect_text "$name" "$tmp/err" "$file"
    expect_text "$name" "$tmp/err" "$text"
    if cmp -s "$tmp/keep.npy" "$tmp/keep.orig" && cmp -s "$tmp/keepw.npy" "$tmp/keepw.orig"; then
        pass
    else
        fail "$name: an existing output file was changed"
        cp "$tmp/keep.orig" "$tmp/keep.npy"
        cp "$tmp/keepw.orig" "$tmp/keepw.npy"
    fi
    if [ -e "$tmp/never.npy" ]; then
        fail "$name: a new output file was written"
        rm -f "$tmp/never.npy"
    fi
    for left in "$tmp"/*.clattn-tmp*; do
        if [ -e "$left" ]; then fail "$name: temporary file $left left behind"; return; fi
    done
    pass
}

x=$tmp/x.npy
expect_failure "truncated" 1 "$tmp/truncated.npy" "truncated" --q "$x" --k "$tmp/truncated.npy" --v "$x"
expect_failure "short data" 1 "$tmp/short.npy" "truncated: data is 12 bytes" --q "$x" --k "$x" --v "$tmp/short.npy"
expect_failure "short header" 1 "$tmp/stub.npy" "truncated" --q "$tmp/stub.npy" --k "$x" --v "$x"
expect_failure "dtype <f8" 1 "$tmp/f8.npy" "dtype '<f8' is not supported" --q "$x" --k "$x" --v "$tmp/f8.npy"
expect_failure "dtype >f4" 1 "$tmp/be.npy" "dtype '>f4' is not supported" --q "$tmp/be.npy" --k "$x" --v "$x"
expect_failure "fortran order" 1 "$tmp/fortran.npy" "fortran_order" --q "$tmp/fortran.npy" --k "$x" --v "$x"
expect_failure "bad magic" 1 "$tmp/zip.npy" "bad magic" --q "$x" --k "$tmp/zip.npy" --v "$x"
expect_failure "trailing data" 1 "$tmp/long.npy" "trailing bytes" --q "$x" --k "$x" --v "$tmp/long.npy"
expect_failure "missing file" 1 "$tmp/nonexistent.npy" "cannot open" --q "$x" --k "$x" --v "$tmp/nonexistent.npy"
# a failure names its command, as usage errors do ("clattn run: ", not "clattn: ")
expect_text "missing file: command named" "$tmp/err" "clattn run: $tmp/nonexistent.npy: cannot open"
expect_failure "K/V rows differ" 1 "$tmp/v5.npy" "n_kv" --q "$x" --k "$x" --v "$tmp/v5.npy"
expect_failure "d_k differs" 1 "$tmp/k4.npy" "d_k" --q "$x" --k "$tmp/k4.npy" --v "$tmp/k4.npy"
expect_failure "rank differs" 1 "$tmp/x3.npy" "rank" --q "$x" --k "$tmp/x3.npy" --v "$tmp/x3.npy"
expect_failure "rank 1" 1 "$tmp/rank1.npy" "rank 1 is not supported (need (n, d), (h, n, d) or (b, h, n, d))" \
    --q "$tmp/rank1.npy" --k "$x" --v "$x"
expect_failure "bad mask" 2 "--mask" "unknown --mask 'diagonal'" --q "$x" --k "$x" --v "$x" --mask diagonal
expect_failure "bad scale" 2 "--scale" "not a finite float32" --q "$x" --k "$x" --v "$x" --scale 1e99
expect_failure "output folder missing" 1 "$tmp/no/dir/o.npy" "temporary file" \
    --q "$x" --k "$x" --v "$x" --out "$tmp/no/dir/o.npy"
expect_failure "weights folder missing" 1 "$tmp/no/dir/w.npy" "temporary file" \
    --q "$x" --k "$x" --v "$x" --weights "$tmp/no/dir/w.npy"

# zero heads and zero head dimensions, ranks 0 and 5 (rejected with messages that say
# what is accepted)
npy "$tmp/h0.npy" '<f4' '(0, 6, 3)'
npy "$tmp/d0.npy" '<f4' '(6, 0)'
npy "$tmp/rank0.npy" '<f4' '()' 3f800000
npy "$tmp/rank5.npy" '<f4' '(1, 1, 1, 6, 3)' $X
expect_failure "h_q = h_kv = 0" 1 "$tmp/h0.npy" "h_q is 0; heads must be at least 1" \
    --q "$tmp/h0.npy" --k "$tmp/h0.npy" --v "$tmp/h0.npy"
expect_failure "h_kv = 0" 1 "$tmp/h0.npy" "h_kv is 0; heads must be at least 1" \
    --q "$tmp/x3.npy" --k "$tmp/h0.npy" --v "$tmp/h0.npy"
expect_failure "d_k = 0" 1 "$tmp/d0.npy" "d_k is 0; head dims must be at least 1" \
    --q "$tmp/d0.npy" --k "$tmp/d0.npy" --v "$x"
expect_failure "d_v = 0" 1 "$tmp/d0.npy" "d_v is 0; head dims must be at least 1" \
    --q "$x" --k "$x" --v "$tmp/d0.npy"
expect_failure "rank 0" 1 "$tmp/rank0.npy" "rank 0 is not supported (need (n, d), (h, n, d) or (b, h, n, d))" \
    --q "$tmp/rank0.npy" --k "$x" --v "$x"
expect_failure "rank 5" 1 "$tmp/rank5.npy" "rank 5 is not supported (need (n, d), (h, n, d) or (b, h, n, d))" \
    --q "$x" --k "$x" --v "$tmp/rank5.npy"

# empty and repeated options are usage errors
expect_failure "empty --out" 2 "--out" "option '--out' needs a non-empty value" \
    --q "$x" --k "$x" --v "$x" --out ""
expect_failure "empty --weights" 2 "--weights" "option '--weights' needs a non-empty value" \
    --q "$x" --k "$x" --v "$x" --weights ""
expect_failure "empty --weights=" 2 "--weights" "option '--weights' needs a non-empty value" \
    --q "$x" --k "$x" --v "$x" --weights=
expect_failure "empty --device" 2 "--device" "option '--device' needs a non-empty value" \
    --q "$x" --k "$x" --v "$x" --device ""
expect_failure "repeated --out" 2 "--out" "option '--out' is given more than once" \
    --q "$x" --k "$x" --v "$x" --out "$tmp/keep.npy" --out "$tmp/keep.npy"
expect_failure "repeated --q" 2 "--q" "option '--q' is given more than once" \
    --q "$x" --k "$x" --v "$x" --q "$x"
expect_failure "repeated --check" 2 "--check" "option '--check' is given more than once" \
    --q "$x" --k "$x" --v "$x" --check --check
# a value forgotten: the next option is not taken for it (a new user's finding: the
# block table's value became '--out', and 'o.npy' an unexpected argument)
expect_failure "--block-table without its value" 2 "--block-table" \
    "option '--block-table' needs a value" --q "$x" --k "$x" --v "$x" --block-table --out \
    "$tmp/keep.npy"
expect_failure "--kv-lens before another KV option" 2 "--kv-lens" \
    "option '--kv-lens' needs a value before the next option" --q "$x" --k "$x" \
    --v "$x" --kv-lens --block-table "$x"

# bad values of the desc's options: usage errors (2) for the option's text and for
# lists that do not fit the inputs, failures (1) for files; never an output
n=$tmp/never.npy
TRIL30=$(echo "$TRIL" | cut -d ' ' -f 1-30)
npy_with u8 "$tmp/mask65.npy" '|b1' '(6, 5)' $TRIL30
npy_with u8 "$tmp/mask266.npy" '|b1' '(2, 6, 6)' $TRIL $TRIL
npy_with u8 "$tmp/mask2166.npy" '|b1' '(2, 1, 6, 6)' $TRIL $TRIL
npy_with f16 "$tmp/mask-f16.npy" '<f2' '(6,)' 3c00 3c00 3c00 3c00 3c00 3c00
npy "$tmp/mask-f8.npy" '<f8' '(3,)' 00000000 00000000 00000000 00000000 00000000 00000000
npy_with f32 "$tmp/lens2.npy" '<i4' '(2,)' 00000005 00000005
npy_with f32 "$tmp/lens-neg.npy" '<i4' '(1,)' ffffffff
for spec in "--kv-lens|1,2|--kv-lens has 2 values but the batch size of Q is 1" \
    "--kv-lens|-1|-1 is negative (lengths are 0 or more)" \
    "--kv-lens|7|value 7 (batch entry 0) is above n_kv (6)" \
    "--kv-lens|5x|'5x' is not an integer" \
    "--kv-lens|5,|'' is not an integer" \
    "--kv-lens|99999999999999999999|is out of range (lengths are 0 to 2^31 - 1)" \
    "--kv-lens|3000000000|3000000000 is too large (at most 2147483647)" \
    "--q-lens|7|value 7 (batch entry 0) is above n_q (6)" \
    "--q-lens|-3|-3 is negative" \
    "--alibi|1,2|--alibi has 2 slopes but Q has 1 heads" \
    "--alibi|abc|'abc' is not a finite float32 number" \
    "--alibi|inf|'inf' is not a finite float32 number" \
    "--window|1|--window '1' is not L,R" \
    "--window|1,2,3|--window '1,2,3' is not L,R" \
    "--window|a,1|--window 'a,1' is not L,R" \
    "--window|1;2|--window '1;2' is not L,R" \
    "--window|-2,0|a bound below -1" \
    "--window|99999999999999999999,0|a bound beyond 2^63 - 1" \
    "--window|0,-99999999999999999999|a bound below -1" \
    "--softcap|0|--softcap '0' is not a finite float32 number above 0" \
    "--softcap|-1|--softcap '-1' is not a finite float32 number above 0" \
    "--softcap|inf|--softcap 'inf' is not a finite float32 number above 0" \
    "--softcap|1e-50|--softcap '1e-50' is not a finite float32 number above 0" \
    "--masked-rows|maybe|unknown --masked-rows 'maybe' (zero, nan)" \
    "--q-start|1.5|--q-start '1.5' is not an integer" \
    "--kv-start|9007199254740992|within +-(2^53 - 1)" \
    "--dtype|f16|unknown --dtype 'f16'" \
    "--out-dtype|f64|unknown --out-dtype 'f64'"; do
    option=${spec%%|*} rest=${spec#*|}
    value=${rest%%|*} text=${rest#*|}
    expect_failure "$option $value" 2 "$option" "$text" --q "$x" --k "$x" --v "$x" --lse "$n" \
        "$option" "$value"
done
for spec in "mask65.npy|its n_kv dimension is 5, need 1 or 6" \
    "mask266.npy|its h_q dimension is 2, need 1" \
    "mask2166.npy|its b dimension is 2, need 1" \
    "mask-f16.npy|dtype '<f2' is not supported" \
    "mask-f8.npy|dtype '<f8' is not supported" \
    "nonexistent.npy|cannot open"; do
    expect_failure "--mask-file ${spec%%|*}" 1 "$tmp/${spec%%|*}" "${spec#*|}" \
        --q "$x" --k "$x" --v "$x" --lse "$n" --mask-file "$tmp/${spec%%|*}"
done
# (where the inputs' dimension is 1 the message wants 1, not "1 or 1")
run_clattn run --q "$x" --k "$x" --v "$x" --out "$tmp/o_mask.npy" --mask-file "$tmp/mask266.npy"
if grep -q "its h_q dimension is 2, need 1$" "$tmp/err"; then pass; else
    fail "--mask-file mask266.npy: not 'need 1' at the end: $(cat "$tmp/err")"; fi
expect_failure "--kv-lens file of float32" 1 "$x" "dtype '<f4' is not supported (need '<i4'" \
    --q "$x" --k "$x" --v "$x" --lse "$n" --kv-lens "$x"
expect_failure "--kv-lens file of 2 values" 1 "$tmp/lens2.npy" "needs one int32 per batch entry" \
    --q "$x" --k "$x" --v "$x" --lse "$n" --kv-lens "$tmp/lens2.npy"
npy "$tmp/sink-nan.npy" '<f4' '(1,)' 7fc00000
expect_failure "--sinks of 2 logits, 1 head" 1 "$tmp/sinks2.npy" \
    "--sinks needs one float32 logit per query head, shape (h_q,) = (1,), not (2,)" \
    --q "$x" --k "$x" --v "$x" --lse "$n" --sinks "$tmp/sinks2.npy"
expect_failure "--sinks of rank 2" 1 "$x" "--sinks needs one float32 logit per query head" \
    --q "$x" --k "$x" --v "$x" --lse "$n" --sinks "$x"
expect_failure "--sinks NaN" 1 "$tmp/sink-nan.npy" "--sinks value nan (head 0) is not a sink logit" \
    --q "$x" --k "$x" --v "$x" --lse "$n" --sinks "$tmp/sink-nan.npy"
expect_failure "--sinks float16" 1 "$tmp/x16.npy" "dtype '<f2' is not supported" \
    --q "$x" --k "$x" --v "$x" --lse "$n" --sinks "$tmp/x16.npy"
expect_failure "--sinks missing" 1 "$tmp/nonexistent.npy" "cannot open" \
    --q "$x" --k "$x" --v "$x" --lse "$n" --sinks "$tmp/nonexistent.npy"
expect_failure "--lse is --sinks" 2 "--lse '$tmp/sinks2.npy' is the same file as --sinks" \
    "would destroy an input" --q "$x" --k "$x" --v "$x" --sinks "$tmp/sinks2.npy" --lse "$tmp/sinks2.npy"
# int8 K/V: a scale file is needed with an int8 K or V and refused with a float one;
# scales float32 only, shaped like K (V) with the last dimension 1; Q is never int8
npy "$tmp/s01-16.npy" '<f4' '(16, 1)' $S01 $S01 $S01 $S01 $S01 $S01 $S01 $S01 \
    $S01 $S01 $S01 $S01 $S01 $S01 $S01 $S01
npy "$tmp/s01-6.npy" '<f4' '(6,)' $S01 $S01 $S01 $S01 $S01 $S01
npy_with f16 "$tmp/s01-f16.npy" '<f2' '(6, 1)' 211f 211f 211f 211f 211f 211f
expect_failure "int8 K without --k-scale" 1 "$tmp/k8.npy" \
    "dtype '|i1' (int8, a quantized cache) needs its float32 scales: add --k-scale FILE" \
    --q "$x" --k "$tmp/k8.npy" --v "$x" --lse "$n"
expect_failure "int8 V without --v-scale" 1 "$tmp/v8.npy" "add --v-scale FILE" \
    --q "$x" --k "$tmp/k8.npy" --v "$tmp/v8.npy" --k-scale "$tmp/s01.npy" --lse "$n"
expect_failure "--k-scale with a float32 K" 1 "$tmp/s01.npy" \
    "--k-scale goes with an int8 ('|i1') K only, and $x is float32" \
    --q "$x" --k "$x" --v "$x" --k-scale "$tmp/s01.npy" --lse "$n"
expect_failure "--v-scale with a float32 V" 1 "$tmp/s01.npy" "--v-scale goes with an int8 ('|i1') V only" \
    --q "$x" --k "$tmp/k8.npy" --v "$x" --k-scale "$tmp/s01.npy" --v-scale "$tmp/s01.npy" --lse "$n"
for spec in "s01-16.npy|(16, 1)" "s01-6.npy|(6,)" "s-head.npy|(1, 2, 1, 1)"; do
    expect_failure "--k-scale of shape ${spec#*|}" 1 "$tmp/${spec%%|*}" \
        "--k-scale needs float32 scales shaped (n_kv|1, 1) = (6|1, 1) for $tmp/k8.npy, not ${spec#*|}" \
        --q "$x" --k "$tmp/k8.npy" --v "$x" --k-scale "$tmp/${spec%%|*}" --lse "$n"
done
expect_failure "--v-scale of the wrong heads" 1 "$tmp/s01-3.npy" \
    "--v-scale needs float32 scales shaped (b|1, h_kv, n_kv|1, 1) = (1|1, 2, 6|1, 1) for $tmp/v8-2h.npy, not (1, 6, 1)" \
    --q "$tmp/x4h.npy" --k "$tmp/k8-2h.npy" --v "$tmp/v8-2h.npy" --k-scale "$tmp/s-head.npy" \
    --v-scale "$tmp/s01-3.npy" --lse "$n"
expect_failure "--k-scale float16" 1 "--k-scale $tmp/s01-f16.npy" "dtype '<f2' is not supported" \
    --q "$x" --k "$tmp/k8.npy" --v "$x" --k-scale "$tmp/s01-f16.npy" --lse "$n"
expect_failure "--k-scale missing" 1 "--k-scale $tmp/nonexistent.npy" "cannot open" \
    --q "$x" --k "$tmp/k8.npy" --v "$x" --k-scale "$tmp/nonexistent.npy" --lse "$n"
expect_failure "int8 Q" 1 "$tmp/k8.npy" "dtype '|i1' is not supported" \
    --q "$tmp/k8.npy" --k "$tmp/k8.npy" --v "$x" --k-scale "$tmp/s01.npy" --lse "$n"
expect_failure "int8 K with --weights" 1 "clattn_attention failed: unsupported" "no attention weights" \
    --q "$x" --k "$tmp/k8.npy" --v "$x" --k-scale "$tmp/s01.npy" --lse "$n"
expect_failure "--lse is --k-scale" 2 "--lse '$tmp/s01.npy' is the same file as --k-scale" \
    "would destroy an input" --q "$x" --k "$tmp/k8.npy" --v "$x" --k-scale "$tmp/s01.npy" --lse "$tmp/s01.npy"
expect_failure "--q-lens file negative" 1 "$tmp/lens-neg.npy" "value -1 (batch entry 0) is outside 0..n_q" \
    --q "$x" --k "$x" --v "$x" --lse "$n" --q-lens "$tmp/lens-neg.npy"
expect_failure "uint16 input without --dtype bf16" 1 "$tmp/xbf.npy" "is read only with --dtype bf16" \
    --q "$tmp/xbf.npy" --k "$x" --v "$x" --lse "$n"
expect_failure "--lse is --q" 2 "--lse '$x' is the same file as --q" "would destroy an input" \
    --q "$x" --k "$x" --v "$x" --lse "$x"
expect_failure "--out is --mask-file" 2 "--out '$tmp/tril.npy' is the same file as --mask-file" \
    "would destroy an input" --q "$x" --k "$x" --v "$x" --mask-file "$tmp/tril.npy" --out "$tmp/tril.npy"
expect_failure "--lse is --weights" 2 "--weights '$tmp/keepw.npy' and --lse '$tmp/keepw.npy'" \
    "name the same file" --q "$x" --k "$x" --v "$x" --lse "$tmp/keepw.npy"
expect_failure "--lse folder missing" 1 "$tmp/no/dir/l.npy" "temporary file" \
    --q "$x" --k "$x" --v "$x" --lse "$tmp/no/dir/l.npy"
expect_failure "empty --window" 2 "--window" "option '--window' needs a non-empty value" \
    --q "$x" --k "$x" --v "$x" --lse "$n" --window ""
run_clattn run --q "$x" --k "$x" --v "$x" --out "$n" --weights-head-mean
expect_rc "--weights-head-mean without --weights" 2
expect_text "--weights-head-mean without --weights" "$tmp/err" "--weights-head-mean needs --weights FILE"
if [ -e "$n" ]; then fail "--weights-head-mean without --weights: wrote $n"; else pass; fi

# inputs that are not regular files are rejected without being read: a FIFO without a
# writer, a device (/dev/null rather than an endless /dev/zero, which a reader that
# reads to the end would never finish)
mkfifo "$tmp/fifo.npy"
expect_failure "FIFO input" 1 "$tmp/fifo.npy" "is a FIFO (named pipe), not a regular file" \
    --q "$x" --k "$tmp/fifo.npy" --v "$x"
expect_failure "device input" 1 "/dev/null" "is a device, not a regular file" \
    --q "$x" --k "$x" --v /dev/null

# ---- run: outputs that must not be replaced --------------------------------------

# An output that cannot be replaced fails before anything is written: here --out is a
# folder and the existing --weights file must keep its content (and the other way).
mkdir "$tmp/adir"
expect_failure "--out is a folder" 1 "$tmp/adir" "is a directory, not a regular file" \
    --q "$x" --k "$x" --v "$x" --out "$tmp/adir"
expect_failure "--weights is a folder" 1 "$tmp/adir" "is a directory, not a regular file" \
    --q "$x" --k "$x" --v "$x" --weights "$tmp/adir"
if [ -d "$tmp/adir" ]; then pass; else fail "--out is a folder: the folder was replaced"; fi

# symbolic links, devices and FIFOs are refused (the link, to keep.npy, stays a link)
ln -s keep.npy "$tmp/link.npy"
expect_failure "--out is a symbolic link" 1 "$tmp/link.npy" "is a symbolic link, not a regular file" \
    --q "$x" --k "$x" --v "$x" --out "$tmp/link.npy"
if [ -L "$tmp/link.npy" ]; then pass; else fail "--out is a symbolic link: the link was replaced"; fi
# As root, a program that replaced devices would replace /dev/null itself: use a copy
# of it in $tmp then (skipped if mknod is not allowed).
dev=/dev/null
if [ "$(id -u)" -eq 0 ]; then
    dev=$tmp/null
    mknod "$dev" c 1 3 2>/dev/null || dev=
fi
if [ -n "$dev" ]; then
    expect_failure "--out is a device" 1 "$dev" "is a device, not a regular file" \
        --q "$x" --k "$x" --v "$x" --out "$dev"
    if [ -c "$dev" ]; then pass; else fail "--out is a device: $dev is no longer a device"; fi
fi
mkfifo "$tmp/fifo-out.npy"
expect_failure "--weights is a FIFO" 1 "$tmp/fifo-out.npy" "is a FIFO (named pipe), not a regular file" \
    --q "$x" --k "$x" --v "$x" --weights "$tmp/fifo-out.npy"
if [ -p "$tmp/fifo-out.npy" ]; then pass; else fail "--weights is a FIFO: the FIFO was replaced"; fi

# an output that names an input (by the same or another path, or a hard link), or the
# other output, is a usage error and the input is kept
cp "$x" "$tmp/qc.npy"
ln "$tmp/qc.npy" "$tmp/qc-link.npy"
expect_failure "--out is --q" 2 "--out '$tmp/qc.npy' is the same file as --q" "would destroy an input" \
    --q "$tmp/qc.npy" --k "$x" --v "$x" --out "$tmp/qc.npy"
expect_failure "--out is --k (other path)" 2 "--out '$tmp/./qc.npy' is the same file as --k" \
    "would destroy an input" --q "$x" --k "$tmp/qc.npy" --v "$x" --out "$tmp/./qc.npy"
expect_failure "--weights is --v (hard link)" 2 "--weights '$tmp/qc-link.npy' is the same file as --v" \
    "would destroy an input" --q "$x" --k "$x" --v "$tmp/qc.npy" --weights "$tmp/qc-link.npy"
if cmp -s "$x" "$tmp/qc.npy"; then pass; else fail "--out is an input: the input was changed"; fi
expect_failure "--out is --weights" 2 "--weights '$tmp/./new.npy'" "name the same file" \
    --q "$x" --k "$x" --v "$x" --out "$tmp/new.npy" --weights "$tmp/./new.npy"
expect_failure "--out is --weights (existing)" 2 "--weights '$tmp/keep.npy'" "name the same file" \
    --q "$x" --k "$x" --v "$x" --weights "$tmp/keep.npy"
if [ -e "$tmp/new.npy" ]; then fail "--out is --weights: new.npy was written"; else pass; fi

# the same inputs with ordinary outputs still work, and replace both existing outputs
run_clattn run --q "$tmp/qc.npy" --k "$tmp/qc-link.npy" --v "$x" --scale 1 \
    --out "$tmp/keep.npy" --weights "$tmp/keepw.npy"
expect_rc "replace both outputs" 0
expect_values "replace both outputs (O)" "$tmp/keep.npy" "$X_Z"
expect_values "replace both outputs (W)" "$tmp/keepw.npy" "$X_W"

# ---- R16: window bounds at INT64_MAX ("no limit") -----------------------------------

# tests/cases/R16.json: q (1,2), k (3,2), v (3,2), scale 1. A bound of INT64_MAX (or
# INT64_MAX - 1) lies beyond every key, so all 3 keys are visible: softmax([1, 0, 0])
# over the rows of V. Tolerance 1e-5 absolute (the case's 1e-5 + 1e-5*|exp|, tighter).
npy "$tmp/r16q.npy" '<f4' '(1, 2)' 3f800000 00000000
npy "$tmp/r16k.npy" '<f4' '(3, 2)' 3f800000 00000000 00000000 3f800000 00000000 00000000
npy "$tmp/r16v.npy" '<f4' '(3, 2)' 3f800000 40000000 40400000 40800000 40a00000 40c00000
R16_O="2.2716493457025124 3.271649345702513"
R16_W="0.5761168847658291 0.21194155761708544 0.21194155761708544"
R16_LSE="1.551444713932051"
# r16_run NAME ARGS...: runs the case's inputs with ARGS, --check and both outputs.
r16_run() {
    r16name=$1
    shift
    rm -f "$tmp/r16o.npy" "$tmp/r16l.npy" "$tmp/r16w.npy"
    run_clattn run --q "$tmp/r16q.npy" --k "$tmp/r16k.npy" --v "$tmp/r16v.npy" \
        --out "$tmp/r16o.npy" --lse "$tmp/r16l.npy" --scale 1 --check "$@"
    expect_rc "$r16name" 0
    expect_values "$r16name (O)" "$tmp/r16o.npy" "$R16_O" 1e-5
    expect_values "$r16name (LSE)" "$tmp/r16l.npy" "$R16_LSE" 1e-5
    expect_text "$r16name" "$tmp/out" "check O: max abs error"
    expect_text "$r16name" "$tmp/out" "check LSE: max abs error"
}
for algorithm in unfused fused; do
    # the case's command (with --weights)
    r16_run "R16 --window=-1,INT64_MAX $algorithm" --weights "$tmp/r16w.npy" \
        --window=-1,9223372036854775807 --algorithm "$algorithm"
    expect_values "R16 --window=-1,INT64_MAX $algorithm (W)" "$tmp/r16w.npy" "$R16_W" 1e-5
    # its variant: the left bound, with the row's diagonal at -2
    r16_run "R16 --window INT64_MAX,-1 --kv-start 2 $algorithm" \
        --window 9223372036854775807,-1 --kv-start 2 --algorithm "$algorithm"
    # one less, which the case reports as correct before the fix too
    r16_run "R16 --window=-1,INT64_MAX-1 $algorithm" --window=-1,9223372036854775806 \
        --algorithm "$algorithm"
done

# ---- run --scores: the score matrix at ONNX Attention's three stages ------------
# raw (scale*Q*K^T), softcap, masked (after the masks and biases, -inf where masked)
X_S="0.9995 0.9544 0.9422 0.4753 0.4576 0.631 0.9544 1.495 1.4754 0.8434 0.707 1.0865
     0.9422 1.4754 1.457 0.8296 0.7154 1.0605 0.4753 0.8434 0.8296 0.4937 0.3474 0.6565
     0.4576 0.707 0.7154 0.3474 0.6654 0.2935 0.631 1.0865 1.0605 0.6565 0.2935 0.945"
for algorithm in unfused fused; do
    rm -f "$tmp/s.npy"
    run_6x3 x.npy --out "$tmp/o.npy" --scores "$tmp/s.npy" --algorithm "$algorithm" --check
    expect_rc "run --scores $algorithm" 0
    expect_values "run --scores $algorithm (S of the text)" "$tmp/s.npy" "$X_S" 1e-4
    expect_shape "run --scores $algorithm" "$tmp/s.npy" "(6, 6)"
    expect_text "run --scores $algorithm" "$tmp/out" "check S: max abs error"
done
# raw ignores the causal mask; masked has -inf above the diagonal (15 cells)
rm -f "$tmp/s.npy"
run_6x3 x.npy --out "$tmp/o.npy" --mask causal --scores "$tmp/s.npy" --scores-stage raw --check
expect_rc "run --scores-stage raw --mask causal" 0
expect_values "run --scores-stage raw --mask causal" "$tmp/s.npy" "$X_S" 1e-4
rm -f "$tmp/s.npy"
run_6x3 x.npy --out "$tmp/o.npy" --mask causal --scores "$tmp/s.npy" --check
expect_rc "run --scores (masked) --mask causal" 0
if [ "$(npy_values "$tmp/s.npy" | grep -c inf)" -eq 15 ]; then pass; else
    fail "run --scores (masked) --mask causal: not 15 masked cells"; fi
# softcap 0.5: every |S| below 0.5, the first one 0.5*tanh(0.9995/0.5)
rm -f "$tmp/s.npy"
run_6x3 x.npy --out "$tmp/o.npy" --softcap 0.5 --alibi 0.25 --scores "$tmp/s.npy" \
    --scores-stage softcap --check
expect_rc "run --scores-stage softcap" 0
if npy_values "$tmp/s.npy" | awk 'NR == 1 { d = $1 - 0.4819784; if (d < 0) d = -d; if (d > 1e-5) bad = 1 }
        { if ($1 >= 0.5 || $1 <= -0.5) bad = 1 } END { exit bad }'
then pass; else fail "run --scores-stage softcap: values are not the capped scores"; fi
# every stage against the reference with every term (--check fails otherwise)
for stage in raw softcap masked; do
    rm -f "$tmp/s.npy"
    run_6x3 x.npy --out "$tmp/o.npy" --softcap 1.5 --alibi 0.5 --mask causal --window 2,0 \
        --q-start 3 --scores "$tmp/s.npy" --scores-stage "$stage" --check
    expect_rc "run --scores-stage $stage, every term, --check" 0
done
run_6x3 x.npy --out "$tmp/o.npy" --scores "$tmp/s.npy" --scores-stage final
expect_rc "run --scores-stage unknown" 2
expect_text "run --scores-stage unknown" "$tmp/err" "unknown --scores-stage 'final'"
run_6x3 x.npy --out "$tmp/o.npy" --scores-stage raw
expect_rc "run --scores-stage without --scores" 2
run_6x3 x.npy --out "$tmp/o.npy" --scores "$tmp/o.npy"
expect_rc "run --scores the same file as --out" 2

# The training options (--backward, --dropout) build their own programs (a minute cold
# on 2 cores): CLATTN_CLI_SKIP_TRAINING=1 (the README's suite) leaves them to
# test_cli_training, which runs the whole script in CI's slow pass.
if [ "${CLATTN_CLI_SKIP_TRAINING:-0}" != 1 ]; then

# ---- run --backward: the gradients dQ, dK, dV and the sinks' -------------------------
# A causal GQA problem: two query heads (X and B_Q2) share the one key/value head X
# (K = V, scale 1/sqrt(3)), dO random. The expected gradients are float64 sums of the
# formulas written out apart from the library (P the softmax of the visible scores,
# dV = P^T dO, dS = P*(dO V^T - rowsum(dO*O)), dQ = scale*dS K, dK = scale*dS^T Q, dK and
# dV summed over the two query heads; with --sinks 0.5,-inf the sink takes a share of
# head 0's rows and d_sinks_h = -sum_i P_sink,i * rowsum(dO*O)_i).
B_DO="3f1851ec bf0d9168 3f59999a 3cbc6a7f bf0978d5 bdb645a2 be23d70a bf578d50 3e041893
      be8f5c29 3e0e5604 3f5c28f6 3e94fdf4 be428f5c 3f3a1cac 3f7d70a4 bc9ba5e3 3f63d70a
      bf7645a2 bf381062 bf27ef9e 3f604189 3ec3126f 3ee04189 beda9fbe bc23d70a 3f4624dd
      bf4ccccd bf449ba6 bf67ae14 bd810625 3f2e5604 3de147ae be49ba5e 3b83126f bf245a1d"
B_DQ="0 0 0 -0.006143606 -0.03686163 0.01177524 -0.009577991 -0.05248657 0.01770549
      0.006196612 -0.007373207 0.01345421 -0.0009448552 -0.004365594 0.02752422
      0.02739249 -0.005444099 0.02372842 0 0 0 0.004553739 0.02732244 -0.008727999
      -0.004034369 -0.02173096 0.0074084 -0.0246546 -0.03286383 -0.01570407 -0.006265329
      0.03562066 0.01226933 -0.004771279 0.0008783099 -0.01861343"
B_DK="0.1741998 0.1087374 0.153776 -0.1059395 -0.01699696 -0.09445839 -0.05480395
      -0.0107571 -0.02607902 0.03198979 -0.07303929 -0.04107434 -0.03867565 0.01683312
      0.02258894 -0.006770419 -0.02477713 -0.01475319"
B_DV="-0.3187851 -1.666571 0.7331041 0.2851698 -0.4589818 0.7811219 -0.2747195
      -0.3841223 0.5544631 -0.09198407 -0.05264281 0.1638084 0.1470474 0.1319457
      0.2227712 0.1392715 -0.002628346 0.0307313"
B_DQ_SINK="0.0575978 0.02009226 0.1192141 -0.02558015 -0.0503176 -0.02374467 -0.03502561
           -0.07662898 -0.02325852 0.02744976 0.02600783 0.04194416 0.01903687
           0.01744121 0.0421978 0.05080144 0.0358964 0.05605634 0 0 0 0.004553739
           0.02732244 -0.008727999 -0.004034369 -0.02173096 0.0074084 -0.0246546
           -0.03286383 -0.01570407 -0.006265329 0.03562066 0.01226933 -0.004771279
           0.0008783099 -0.01861343"
B_DK_SINK="0.1993871 0.08413873 0.2381248 -0.1091195 -0.01874659 -0.09828017 -0.05249254
           -0.003892059 -0.02345375 0.04504332 -0.04828895 -0.02602595 -0.02894937
           0.02674142 0.0285332 -0.005894199 -0.01075761 -0.005114768"
B_DV_SINK="-0.6174279 -1.288732 0.2404912 0.2697524 -0.3068138 0.6786058 -0.2862238
           -0.3213673 0.4379785 -0.1102032 -0.05277221 0.07703605 0.1172776 0.1398757
           0.177438 0.1128213 -0.002120716 0.006952837"
B_DS_SINK="-0.332811 0"
npy "$tmp/dog.npy" '<f4' '(2, 6, 3)' $B_DO
npy "$tmp/do6.npy" '<f4' '(6, 3)' 3f1851ec bf0d9168 3f59999a 3cbc6a7f bf0978d5 bdb645a2 be23d70a bf578d50 3e041893 be8f5c29 3e0e5604 3f5c28f6 3e94fdf4 be428f5c 3f3a1cac 3f7d70a4 bc9ba5e3 3f63d70a

# bwd ARGS...: `clattn run --backward` of that problem, the gradients into g[qkv].npy.
bwd() {
    run_clattn run --backward --q "$tmp/qg.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask causal \
        --do "$tmp/dog.npy" --dq "$tmp/gq.npy" --dk "$tmp/gk.npy" --dv "$tmp/gv.npy" "$@"
}
run_clattn run --help
expect_text "run --help (--backward)" "$tmp/out" "clattn run --backward --q Q.npy"
expect_text "run --help (--backward)" "$tmp/out" "--do FILE dO = dL/dO (PyTorch's grad_out"

# O and the LSE recomputed; --check compares each gradient with the reference
rm -f "$tmp/gq.npy" "$tmp/gk.npy" "$tmp/gv.npy"
bwd --check
expect_rc "run --backward --check" 0
for g in dQ dK dV; do
    expect_text "run --backward --check ($g)" "$tmp/out" "check $g: max abs error"
done
expect_text "run --backward --check" "$tmp/out" ": within 0.0002 + 0.002*|reference|"
expect_values "run --backward (dQ)" "$tmp/gq.npy" "$B_DQ" 1e-5
expect_values "run --backward (dK)" "$tmp/gk.npy" "$B_DK" 1e-5
expect_values "run --backward (dV)" "$tmp/gv.npy" "$B_DV" 1e-5
expect_shape "run --backward (dQ)" "$tmp/gq.npy" "(2, 6, 3)"
expect_shape "run --backward (dK)" "$tmp/gk.npy" "(1, 6, 3)"
expect_descr "run --backward (dV)" "$tmp/gv.npy" "<f4"
if npy_values "$tmp/gq.npy" | awk '$1 != 0 { nonzero = 1 } END { exit !nonzero }'
then pass; else fail "run --backward: dQ is all zeros"; fi
for g in gq gk gv; do cp "$tmp/$g.npy" "$tmp/$g-recomputed.npy"; done
# --layout bshd: the same problem in (n, h, d), Q (6, 2, 3) and K = V (6, 1, 3) (the
# forward's files above): the same gradients in that layout, the forward's O and LSE
# given or recomputed
npy "$tmp/dog-bshd.npy" '<f4' '(6, 2, 3)' $(swap_hn 1 2 6 3 $B_DO)
run_clattn run --layout bshd --q "$tmp/qg-bshd.npy" --k "$tmp/x-bshd.npy" --v "$tmp/x-bshd.npy" \
    --mask causal --out "$tmp/og-bshd.npy" --lse "$tmp/lg-bshd.npy"
for given in "" "--o $tmp/og-bshd.npy --lse $tmp/lg-bshd.npy"; do
    rm -f "$tmp/gq.npy" "$tmp/gk.npy" "$tmp/gv.npy"
    run_clattn run --backward --layout bshd --q "$tmp/qg-bshd.npy" --k "$tmp/x-bshd.npy" \
        --v "$tmp/x-bshd.npy" --mask causal --do "$tmp/dog-bshd.npy" --dq "$tmp/gq.npy" \
        --dk "$tmp/gk.npy" --dv "$tmp/gv.npy" --check $given
    expect_rc "run --backward --layout bshd $given" 0
    expect_values "run --backward --layout bshd $given (dQ)" "$tmp/gq.npy" "$(swap_hn 1 2 6 3 $B_DQ)" 1e-5
    expect_values "run --backward --layout bshd $given (dK)" "$tmp/gk.npy" "$B_DK" 1e-5
    expect_values "run --backward --layout bshd $given (dV)" "$tmp/gv.npy" "$B_DV" 1e-5
    expect_shape "run --backward --layout bshd $given (dQ)" "$tmp/gq.npy" "(6, 2, 3)"
    expect_shape "run --backward --layout bshd $given (dK)" "$tmp/gk.npy" "(6, 1, 3)"
done

# O and the LSE from the forward call (--out, --lse): the same gradients, bit for bit
run_clattn run --q "$tmp/qg.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask causal \
    --out "$tmp/og.npy" --lse "$tmp/lg.npy"
expect_rc "run (the forward of --backward --o --lse)" 0
bwd --o "$tmp/og.npy" --lse "$tmp/lg.npy" --check
expect_rc "run --backward --o --lse --check" 0
expect_text "run --backward --o --lse --check" "$tmp/out" "check dV: max abs error"
for g in gq gk gv; do
    if cmp -s "$tmp/$g.npy" "$tmp/$g-recomputed.npy"; then pass; else
        fail "run --backward --o --lse: $g.npy differs from the recomputed forward's"; fi
done

# the LSE in float64 (--lse-dtype f64) as the backward's input: the same gradients
run_clattn run --q "$tmp/qg.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask causal \
    --out "$tmp/og.npy" --lse "$tmp/lg64.npy" --lse-dtype f64
expect_rc "run (the forward of --backward, a float64 LSE)" 0
bwd --o "$tmp/og.npy" --lse "$tmp/lg64.npy" --check
expect_rc "run --backward --lse (float64) --check" 0
expect_values "run --backward --lse (float64) (dQ)" "$tmp/gq.npy" "$B_DQ" 1e-5
bwd --o "$tmp/og.npy" --lse "$tmp/lg64.npy" --lse-dtype f64
expect_rc "run --backward --lse-dtype" 2
expect_text "run --backward --lse-dtype" "$tmp/err" "reads --lse in its file's dtype"

# --sinks: d_sinks too (--dsinks, float32 (h_q,)); head 1 has no sink (-inf): 0
bwd --sinks "$tmp/sinks2.npy" --dsinks "$tmp/gs.npy" --check
expect_rc "run --backward --sinks --check" 0
expect_text "run --backward --sinks --check" "$tmp/out" "check d_sinks: max abs error"
expect_values "run --backward --sinks (d_sinks)" "$tmp/gs.npy" "$B_DS_SINK" 1e-5
expect_shape "run --backward --sinks (d_sinks)" "$tmp/gs.npy" "(2,)"
expect_values "run --backward --sinks (dQ)" "$tmp/gq.npy" "$B_DQ_SINK" 1e-5
expect_values "run --backward --sinks (dK)" "$tmp/gk.npy" "$B_DK_SINK" 1e-5
expect_values "run --backward --sinks (dV)" "$tmp/gv.npy" "$B_DV_SINK" 1e-5

# every term of the desc at once, the forward run unfused; and 16-bit inputs, whose
# gradients keep their dtypes (dQ float16, dK float32, dV bfloat16)
bwd --algorithm unfused --softcap 2 --alibi 0.5,0.25 --window 2,1 --q-start 1 --kv-lens 5 \
    --sinks "$tmp/sinks2.npy" --check
expect_rc "run --backward, every term, --check" 0
run_clattn run --backward --q "$tmp/x16.npy" --k "$tmp/x.npy" --v "$tmp/xbf.npy" --dtype bf16 \
    --mask causal --do "$tmp/do6.npy" --dq "$tmp/gq16.npy" --dk "$tmp/gk16.npy" \
    --dv "$tmp/gv16.npy" --check
expect_rc "run --backward float16/bfloat16 --check" 0
expect_text "run --backward float16/bfloat16 --check" "$tmp/out" "+ 1 ulp of float16"
expect_descr "run --backward float16 (dQ)" "$tmp/gq16.npy" "<f2"
expect_descr "run --backward float32 (dK)" "$tmp/gk16.npy" "<f4"
expect_descr "run --backward bfloat16 (dV)" "$tmp/gv16.npy" "<u2"

# bwd_failure NAME STATUS TEXT ARGS...: `clattn run ARGS` exits with STATUS, its message
# contains TEXT, the gradient files g[qkvs].npy are unchanged, and no temporary file is
# left behind.
for g in gq gk gv gs; do cp "$tmp/$g.npy" "$tmp/$g.orig"; done
bwd_failure() {
    name=$1 status=$2 text=$3
    shift 3
    run_clattn run "$@"
    expect_rc "$name" "$status"
    expect_text "$name" "$tmp/err" "$text"
    for g in gq gk gv gs; do
        if cmp -s "$tmp/$g.npy" "$tmp/$g.orig"; then pass; else
            fail "$name: $g.npy was changed"
            cp "$tmp/$g.orig" "$tmp/$g.npy"
        fi
    done
    for left in "$tmp"/*.clattn-tmp*; do
        if [ -e "$left" ]; then fail "$name: temporary file $left left behind"; return; fi
    done
    pass
}
B_IN="--backward --q $tmp/qg.npy --k $tmp/x3.npy --v $tmp/x3.npy --mask causal"
B_OUT="--dq $tmp/gq.npy --dk $tmp/gk.npy --dv $tmp/gv.npy"
bwd_failure "run --backward without --do" 2 "--backward needs --do FILE" $B_IN $B_OUT
bwd_failure "run --backward without --dv" 2 "--backward needs --dv FILE" $B_IN \
    --do "$tmp/dog.npy" --dq "$tmp/gq.npy" --dk "$tmp/gk.npy"
bwd_failure "run --backward, dO not shaped like O" 1 \
    "--do has shape (1, 6, 3); it must be (2, 6, 3) (O's shape" $B_IN --do "$tmp/x3.npy" $B_OUT
bwd_failure "run --backward, an O of another shape" 1 "--o has shape (6, 3); it must be (2, 6, 3)" \
    $B_IN --do "$tmp/dog.npy" $B_OUT --o "$tmp/x.npy" --lse "$tmp/lg.npy"
bwd_failure "run --backward, an LSE of another shape" 1 \
    "--lse has shape (2, 6, 3); it must be (2, 6) (the forward's LSE" \
    $B_IN --do "$tmp/dog.npy" $B_OUT --o "$tmp/og.npy" --lse "$tmp/og.npy"
bwd_failure "run --backward --o without --lse" 2 "--o needs --lse" \
    $B_IN --do "$tmp/dog.npy" $B_OUT --o "$tmp/og.npy"
bwd_failure "run --backward --out" 2 "--out is the forward pass's output" \
    $B_IN --do "$tmp/dog.npy" $B_OUT --out "$tmp/never.npy"
bwd_failure "run --backward --weights" 2 "--weights is an output of the forward pass" \
    $B_IN --do "$tmp/dog.npy" $B_OUT --weights "$tmp/never.npy"
bwd_failure "run --dq without --backward" 2 "--dq needs --backward" \
    --q "$tmp/qg.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --out "$tmp/never.npy" --dq "$tmp/gq.npy"
bwd_failure "run --backward --dsinks without --sinks" 2 "--dsinks needs --sinks FILE" \
    $B_IN --do "$tmp/dog.npy" $B_OUT --dsinks "$tmp/gs.npy"
bwd_failure "run --backward --cu-seqlens (varlen)" 1 \
    "clattn_attention_backward failed: unsupported: varlen: the backward pass takes" \
    $B_IN --do "$tmp/dog.npy" $B_OUT --cu-seqlens-q 0,2,6 --cu-seqlens-k 0,2,6
bwd_failure "run --backward, dQ in a missing folder" 1 \
    "$tmp/no/dir/gq.npy: cannot create a temporary file in its folder" \
    $B_IN --do "$tmp/dog.npy" --dq "$tmp/no/dir/gq.npy" --dk "$tmp/gk.npy" --dv "$tmp/gv.npy"
bwd_failure "run --backward, dQ is Q" 2 "--dq '$tmp/qg.npy' is the same file as --q" \
    $B_IN --do "$tmp/dog.npy" --dq "$tmp/qg.npy" --dk "$tmp/gk.npy" --dv "$tmp/gv.npy"
bwd_failure "run --backward, dK is the LSE read" 2 "--dk '$tmp/lg.npy' is the same file as --lse" \
    $B_IN --do "$tmp/dog.npy" --dq "$tmp/gq.npy" --dk "$tmp/lg.npy" --dv "$tmp/gv.npy" \
    --o "$tmp/og.npy" --lse "$tmp/lg.npy"
# the O and LSE of another problem (Q = X in both heads): --check sees wrong gradients
run_clattn run --q "$tmp/x2h.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --out "$tmp/o2x.npy" \
    --lse "$tmp/l2x.npy"
expect_rc "run (another problem's O and LSE)" 0
bwd_failure "run --backward --check, another problem's O and LSE" 1 \
    "--check failed: the gradients are not within tolerance; nothing was written" \
    $B_IN --do "$tmp/dog.npy" $B_OUT --o "$tmp/o2x.npy" --lse "$tmp/l2x.npy" --check
expect_text "run --backward --check, another problem's O and LSE" "$tmp/out" "check dQ: max abs error"
expect_text "run --backward --check, another problem's O and LSE" "$tmp/out" "NOT within"

# ---- run --dropout: dropout on the weights (Philox4x32-10, --dropout-seed/-offset) -----
# The causal GQA problem of --backward. drop ARGS...: `clattn run` of it with --dropout 0.3.
drop() {
    run_clattn run --q "$tmp/qg.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask causal \
        --dropout 0.3 "$@"
}
run_clattn run --help
expect_text "run --help (--dropout)" "$tmp/out" "--dropout P dropout on the attention weights"
expect_text "run --help (--dropout-offset)" "$tmp/out" "--dropout-offset N with --dropout"
# --check: the reference draws the same mask (O, the weights after dropout, the LSE)
drop --out "$tmp/od1.npy" --weights "$tmp/wd1.npy" --lse "$tmp/ld1.npy" --scores "$tmp/sd1.npy" \
    --check
expect_rc "run --dropout 0.3 --check" 0
for t in O W LSE S; do
    expect_text "run --dropout 0.3 --check ($t)" "$tmp/out" "check $t: max abs error"
done
run_clattn run --q "$tmp/qg.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask causal \
    --out "$tmp/od0.npy" --weights "$tmp/wd0.npy" --lse "$tmp/ld0.npy" --scores "$tmp/sd0.npy"
expect_rc "run (no dropout, to compare)" 0
# each weight is dropped (0) or kept and scaled by 1/(1 - 0.3), some of each; the LSE and
# the scores are those before dropout
npy_values "$tmp/wd0.npy" >"$tmp/wd0.txt"
npy_values "$tmp/wd1.npy" >"$tmp/wd1.txt"
if paste "$tmp/wd0.txt" "$tmp/wd1.txt" | awk '
    { d = $2 - $1 / 0.7; if (d < 0) d = -d
      if ($2 == 0) { if ($1 > 0) dropped++ } else if (d <= 1e-6 + 1e-5 * $2) kept++; else bad++ }
    END { exit !(bad == 0 && dropped > 0 && kept > 0) }'
then pass; else fail "run --dropout 0.3: weights are not 0 or W/(1 - 0.3), or none dropped/kept"; fi
expect_values "run --dropout 0.3 (LSE before dropout)" "$tmp/ld1.npy" "$(values_of "$tmp/ld0.npy")" 1e-6
if cmp -s "$tmp/sd1.npy" "$tmp/sd0.npy"; then pass; else fail "run --dropout: --scores changed"; fi
if cmp -s "$tmp/od1.npy" "$tmp/od0.npy"; then fail "run --dropout 0.3: O is that without dropout"
else pass; fi
# the same seed and offset: the same file; another offset or seed: another mask
drop --out "$tmp/od2.npy" --weights "$tmp/wd2.npy" --lse "$tmp/ld2.npy" --scores "$tmp/sd2.npy"
expect_rc "run --dropout 0.3 again" 0
if cmp -s "$tmp/od1.npy" "$tmp/od2.npy" && cmp -s "$tmp/wd1.npy" "$tmp/wd2.npy"; then pass; else
    fail "run --dropout 0.3 twice: the outputs differ"; fi
drop --out "$tmp/od3.npy" --dropout-seed 0 --dropout-offset 0 --check
expect_rc "run --dropout 0.3 --dropout-seed 0 --dropout-offset 0 (the defaults)" 0
drop --out "$tmp/od4.npy"
if cmp -s "$tmp/od3.npy" "$tmp/od4.npy"; then pass; else
    fail "run --dropout: seed 0 and offset 0 are not the defaults"; fi
drop --out "$tmp/od5.npy" --dropout-offset 1 --check
expect_rc "run --dropout 0.3 --dropout-offset 1 --check" 0
if cmp -s "$tmp/od4.npy" "$tmp/od5.npy"; then fail "run --dropout: another offset, the same O"
else pass; fi
drop --out "$tmp/od6.npy" --dropout-seed 18446744073709551615 --dropout-offset 4294967295 --check
expect_rc "run --dropout, the largest seed and offset, --check" 0
if cmp -s "$tmp/od4.npy" "$tmp/od6.npy"; then fail "run --dropout: another seed, the same O"
else pass; fi
# --dropout 0 is no dropout
run_clattn run --q "$tmp/qg.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask causal \
    --out "$tmp/od7.npy" --dropout 0 --dropout-seed 5
expect_rc "run --dropout 0" 0
run_clattn run --q "$tmp/qg.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --mask causal \
    --out "$tmp/od8.npy"
if cmp -s "$tmp/od7.npy" "$tmp/od8.npy"; then pass; else fail "run --dropout 0: O differs"; fi

# --backward: the recomputed forward and the backward pass draw the same mask, and the
# reference of --check too; from the forward's own O and LSE, the same gradients
bwd --dropout 0.3 --dropout-seed 42 --dropout-offset 7 --check
expect_rc "run --backward --dropout --check" 0
for g in dQ dK dV; do
    expect_text "run --backward --dropout --check ($g)" "$tmp/out" "check $g: max abs error"
done
for g in gq gk gv; do cp "$tmp/$g.npy" "$tmp/$g-dropout.npy"; done
if cmp -s "$tmp/gv.npy" "$tmp/gv-recomputed.npy"; then
    fail "run --backward --dropout: dV is that without dropout"; else pass; fi
drop --dropout-seed 42 --dropout-offset 7 --out "$tmp/ogd.npy" --lse "$tmp/lgd.npy"
expect_rc "run --dropout (the forward of --backward --o --lse)" 0
bwd --dropout 0.3 --dropout-seed 42 --dropout-offset 7 --o "$tmp/ogd.npy" --lse "$tmp/lgd.npy" \
    --check
expect_rc "run --backward --dropout --o --lse --check" 0
for g in gq gk gv; do
    if cmp -s "$tmp/$g.npy" "$tmp/$g-dropout.npy"; then pass; else
        fail "run --backward --dropout --o --lse: $g.npy differs from the recomputed forward's"; fi
done
# the O of another mask (offset 8) with the LSE: --check sees wrong gradients
drop --dropout-seed 42 --dropout-offset 8 --out "$tmp/ogd8.npy"
expect_rc "run --dropout (offset 8)" 0

# hostile values: usage errors (or the library's refusal), no output touched (keep.npy
# and keepw.npy as "replace both outputs" left them)
cp "$tmp/keep.npy" "$tmp/keep.orig"
cp "$tmp/keepw.npy" "$tmp/keepw.orig"
expect_failure "run --dropout 1" 2 "--dropout '1'" "is not a probability within [0, 1)" \
    --q "$x" --k "$x" --v "$x" --dropout 1
expect_failure "run --dropout -0.1" 2 "--dropout '-0.1'" "is not a probability within [0, 1)" \
    --q "$x" --k "$x" --v "$x" --dropout -0.1
expect_failure "run --dropout 0.99999999 (1 in float32)" 2 "--dropout '0.99999999'" \
    "is not a probability within [0, 1) in float32" --q "$x" --k "$x" --v "$x" --dropout 0.99999999
for bad in abc nan inf 0.3x; do
    expect_failure "run --dropout $bad" 2 "--dropout '$bad'" "is not a probability" \
        --q "$x" --k "$x" --v "$x" --dropout "$bad"
done
for bad in -1 1.5 0x10 " 1" 18446744073709551616; do
    expect_failure "run --dropout-seed '$bad'" 2 "--dropout-seed '$bad'" \
        "is not an integer within 0 .. 18446744073709551615 (2^64 - 1)" \
        --q "$x" --k "$x" --v "$x" --dropout 0.3 --dropout-seed "$bad"
done
for bad in 4294967296 -1 1e3 18446744073709551616; do
    expect_failure "run --dropout-offset '$bad'" 2 "--dropout-offset '$bad'" \
        "is not an integer within 0 .. 4294967295 (below 2^32" \
        --q "$x" --k "$x" --v "$x" --dropout 0.3 --dropout-offset "$bad"
done
expect_failure "run --dropout-seed without --dropout" 2 "--dropout-seed" "needs --dropout P" \
    --q "$x" --k "$x" --v "$x" --dropout-seed 3
expect_failure "run --dropout-offset without --dropout" 2 "--dropout-offset" "needs --dropout P" \
    --q "$x" --k "$x" --v "$x" --dropout-offset 3
expect_failure "run --dropout twice" 2 "--dropout" "given more than once" \
    --q "$x" --k "$x" --v "$x" --dropout 0.1 --dropout 0.2
run_clattn run --q "$tmp/x3.npy" --k "$tmp/x3.npy" --v "$tmp/x3.npy" --cu-seqlens-q 0,2,6 \
    --cu-seqlens-k 0,2,6 --dropout 0.3 --out "$tmp/never.npy"
expect_rc "run --dropout --cu-seqlens (varlen)" 1
expect_text "run --dropout --cu-seqlens (varlen)" "$tmp/err" \
    "clattn_attention failed: unsupported: varlen: not combined with dropout"
if [ -e "$tmp/never.npy" ]; then fail "run --dropout --cu-seqlens: wrote an output"; else pass; fi
for g in gq gk gv gs; do cp "$tmp/$g.npy" "$tmp/$g.orig"; done
bwd_failure "run --backward --dropout 1" 2 "--dropout '1' is not a probability within [0, 1)" \
    $B_IN --do "$tmp/dog.npy" $B_OUT --dropout 1
bwd_failure "run --backward --dropout-offset 2^32" 2 \
    "--dropout-offset '4294967296' is not an integer within 0 .. 4294967295" \
    $B_IN --do "$tmp/dog.npy" $B_OUT --dropout 0.3 --dropout-offset 4294967296
bwd_failure "run --backward --dropout --check, the O of another mask" 1 \
    "--check failed: the gradients are not within tolerance; nothing was written" \
    $B_IN --do "$tmp/dog.npy" $B_OUT --dropout 0.3 --dropout-seed 42 --dropout-offset 7 \
    --o "$tmp/ogd8.npy" --lse "$tmp/lgd.npy" --check

fi # training options

# ---- progress of bench and tune on standard error; standard output unchanged --------
run_clattn bench --shapes "1,2,2,16,16,8,8;1,2,2,1,32,8,8,none,fused" --reps 1
expect_rc "bench" 0
expect_text "bench (table)" "$tmp/out" "device_ms"
if [ "$(grep -c '^1 ' "$tmp/out")" -eq 3 ]; then pass; else fail "bench: not 3 result rows"; fi
expect_text "bench (progress, plain lines off a terminal)" "$tmp/err" "clattn bench: [3/3] b 1, h 2/2, n 1x32"
if grep -q "clattn bench" "$tmp/out"; then fail "bench: progress on standard output"; else pass; fi
run_clattn bench --shapes "1,2,2,16,16,8,8,none,fused" --reps 1 --json --quiet
expect_rc "bench --json --quiet" 0
if [ -s "$tmp/err" ]; then fail "bench --quiet: standard error is not empty"; else pass; fi
if head -1 "$tmp/out" | grep -q '^\[$' && tail -1 "$tmp/out" | grep -q '^\]$'; then pass; else
    fail "bench --json: standard output is not one JSON array"; fi
# operands beyond the device's global memory: refused before anything is allocated (they
# used to be allocated until the system killed the process); 2^40 batch entries, 16 TiB
# and more, beyond any device's memory, and a case whose size products pass 2^63
run_clattn bench --shapes "1099511627776,1,1,1,1,1,1,none,fused" --reps 1 --warmup 0 --quiet
expect_rc "bench, operands beyond global memory" 1
expect_text "bench, operands beyond global memory" "$tmp/err" "GiB of global memory"
run_clattn bench --shapes "4294967296,4294967296,1,1,1,1,1,none,fused" --reps 1 --warmup 0 --quiet
expect_rc "bench, sizes whose product passes 2^63" 1
expect_text "bench, sizes whose product passes 2^63" "$tmp/err" "GiB of global memory"
# --peak: the probes' line names the form kept and gives positive rates (the value
# itself is the machine's: benchmarks, not tests)
run_clattn bench --shapes "1,1,1,1,16,8,8,none,fused" --reps 1 --quiet --peak
expect_rc "bench --peak" 0
if grep -Eq '^f32 FMA peak \(float(2|4|8|16)? x (8|12) accumulators\): [0-9]*[1-9][0-9]*\.[0-9] GFLOP/s; streaming read: [0-9.]*[1-9][0-9.]* GB/s$' "$tmp/out"; then
    pass; else fail "bench --peak: no line 'f32 FMA peak (FORM): N GFLOP/s; streaming read: N GB/s' (got: $(grep -i peak "$tmp/out"))"; fi
# ... and each row ends with its fraction of the read bandwidth and the bandwidth measured
# around it (the mean of the probe's runs just before and just after the case)
if grep -Eq '^1 .* [0-9.]+%  +[0-9.]+%  +[0-9]*[1-9][0-9]*\.[0-9]$' "$tmp/out"; then pass; else
    fail "bench --peak: the row does not end with 'N% N% BW' (got: $(grep '^1 ' "$tmp/out"))"; fi
run_clattn bench --shapes "1,1,1,1,16,8,8,none,fused" --reps 1 --quiet --peak --json
expect_rc "bench --peak --json" 0
if grep -Eq '"bw_gbytes_per_s": [0-9]*[1-9][0-9.]*(e[-+]?[0-9]+)?,' "$tmp/out"; then pass; else
    fail "bench --peak --json: no positive bw_gbytes_per_s (got: $(cat "$tmp/out"))"; fi
# --json with a case that fails (d_k past the kernels' 4096) after one that runs: still one
# JSON array (no separator before the closing bracket), exit status 1
run_clattn bench --shapes "1,1,1,4,4,8,8,none,fused;1,1,1,4,4,5000,8,none,fused" --reps 1 --json --quiet
expect_rc "bench --json, the last case failing" 1
if [ "$(tail -1 "$tmp/out")" = "]" ] && ! tail -2 "$tmp/out" | head -1 | grep -q ',$' &&
    grep -q '"peak_gflops": null' "$tmp/out" && grep -q '"bw_gbytes_per_s": null' "$tmp/out"; then pass; else
    fail "bench --json, the last case failing: not one JSON array (got: $(cat "$tmp/out"))"; fi
# a size past the 64-bit range is refused, not clamped
run_clattn bench --shapes "1,1,1,4,4,8,99999999999999999999" --reps 1 --quiet
expect_rc "bench, a size out of range" 2
expect_text "bench, a size out of range" "$tmp/err" "a size out of range"
# an empty field is refused (it would leave the fields after it at their defaults: this
# would have run f32); spaces around ';' are not part of a field
run_clattn bench --shapes "1,1,1,4,4,8,8,,f16" --reps 1 --quiet
expect_rc "bench, an empty field" 2
expect_text "bench, an empty field" "$tmp/err" "an empty field"
run_clattn bench --shapes "1,1,1,4,4,8,8,none,fused,f16 ; 1,2,1,4,4,8,8,causal,unfused" --reps 1 --quiet
expect_rc "bench, spaces around ';'" 0
expect_text "bench, spaces around ';'" "$tmp/out" "none fused f16"
# --huge-pages: operands in memory advised for huge pages, used in place (a paged decode)
run_clattn bench --shapes "1,4,2,1,40,16,16,none,fused,f32,page16;1,4,2,3,40,16,16,causal,unfused" --reps 1 --quiet --huge-pages
expect_rc "bench --huge-pages" 0
expect_text "bench --huge-pages" "$tmp/out" "paged16"
# a paged decode with no keys (no pages: a one-entry block table; it failed to allocate)
run_clattn bench --shapes "1,4,2,1,0,16,16,none,fused,f32,page16" --reps 1 --quiet
expect_rc "bench paged, n_kv 0" 0
expect_text "bench paged, n_kv 0" "$tmp/out" "paged16 f32"
run_clattn bench --shapes "1,4,2,1,40,16,16,none,fused,f32,page16;1,4,2,1,40,16,16,none,fused" --reps 1 --quiet --json
expect_text "bench --json paged" "$tmp/out" '"algorithm": "paged16", "page_size": 16,'
expect_text "bench --json contiguous" "$tmp/out" '"algorithm": "fused", "page_size": 0,'
# inorder: each sequence's pages in order in the pool (the block table 0, 1, 2, ...); it
# needs pageN, once; the name says it, with bshd after it
run_clattn bench --shapes "1,4,2,1,40,16,16,none,fused,f32,inorder,page16;1,4,2,1,40,16,16,none,fused,f16,page8,inorder,bshd" --reps 1 --quiet --json
expect_rc "bench inorder" 0
expect_text "bench inorder" "$tmp/out" '"algorithm": "paged16/inorder", "page_size": 16,'
expect_text "bench inorder bshd" "$tmp/out" '"algorithm": "paged8/inorder/bshd", "page_size": 8,'
run_clattn bench --shapes "1,4,2,1,40,16,16,none,fused,f32,page4096,inorder" --reps 1 --quiet
expect_text "bench inorder (table)" "$tmp/out" "paged4096/inorder f32"
bench_refuses "1,4,2,1,40,16,16,none,fused,f32,inorder" "1,4,2,1,40,16,16,none,fused,f32,page16,inorder,inorder" \
    "1,4,2,1,40,16,16,none,unfused,f32,page16,inorder"
run_clattn bench --shapes "1,4,2,1,40,16,16,none,fused,f32,inorder,bshd" --reps 1 --quiet
expect_text "bench inorder without pageN (message)" "$tmp/err" "inorder and roundrobin order a pool's pages: they need pageN"
# roundrobin: the pages handed out to the sequences in turn (sequence i's page p at p*b + i)
run_clattn bench --shapes "2,4,2,1,40,16,16,none,fused,f32,page16,roundrobin;3,4,2,1,40,16,16,none,fused,f16,roundrobin,page8,bshd" --reps 1 --quiet --json
expect_rc "bench roundrobin" 0
expect_text "bench roundrobin" "$tmp/out" '"algorithm": "paged16/roundrobin", "page_size": 16,'
expect_text "bench roundrobin bshd" "$tmp/out" '"algorithm": "paged8/roundrobin/bshd", "page_size": 8,'
run_clattn bench --shapes "2,4,2,1,40,16,16,none,fused,f32,page16,roundrobin,bshd" --reps 1 --quiet
expect_text "bench roundrobin (table)" "$tmp/out" "paged16/roundrobin/bshd f32"
bench_refuses "1,4,2,1,40,16,16,none,fused,f32,roundrobin" "1,4,2,1,40,16,16,none,fused,f32,page16,roundrobin,inorder" \
    "1,4,2,1,40,16,16,none,fused,f32,page16,roundrobin,roundrobin" "1,4,2,1,40,16,16,none,both,f32,page16,roundrobin"
# the mask field takes run's mask names (cli_mask_names), exactly
run_clattn bench --shapes "1,2,1,1,32,8,8,no-self,fused" --reps 1 --quiet
expect_rc "bench, mask no-self" 0
expect_text "bench, mask no-self" "$tmp/out" "no-self fused"
run_clattn bench --shapes "1,2,1,1,32,8,8,CAUSAL" --reps 1 --quiet
expect_rc "bench, an unknown mask" 2
expect_text "bench, an unknown mask" "$tmp/err" "bad --shapes entry '1,2,1,1,32,8,8,CAUSAL': unknown mask 'CAUSAL'"
# an int8 K/V cache (per-token scales), contiguous and paged; fused only
run_clattn bench --shapes "1,2,1,1,32,8,8,none,fused,f32,int8;1,2,1,1,32,8,8,none,fused,f16,page8,int8" --reps 1 --quiet
expect_rc "bench int8" 0
expect_text "bench int8" "$tmp/out" "fused f32/i8"
expect_text "bench int8 (paged)" "$tmp/out" "paged8 f16/i8"
bench_refuses "1,2,1,1,32,8,8,none,both,f32,int8" "1,2,1,1,32,8,8,none,fused,f32,int8,int8" "1,2,1,1,32,8,8,none,fused,f32,int4"
# half: desc.half_arithmetic on float16 operands (the plan says whether it ran: not on
# PoCL's CPU device, the CPU family); fused only, f16 only, no int8
run_clattn bench --shapes "1,2,1,32,32,8,8,none,fused,f16,half" --reps 1 --quiet --json
expect_rc "bench half" 0
expect_text "bench half" "$tmp/out" '"dtype": "f16/half"'
expect_text "bench half (plan)" "$tmp/out" "; half arithmetic"
bench_refuses "1,2,1,32,32,8,8,none,both,f16,half" "1,2,1,32,32,8,8,none,fused,f32,half" \
    "1,2,1,32,32,8,8,none,fused,f16,int8,half" "1,2,1,32,32,8,8,none,fused,f16,half,half"
# winL: a sliding window (any algorithm); GFLOP/s and GB/s count the keys rows see, so a
# decode with a window of 16 in a cache of 64 reads 17 keys' K/V rows of each KV head
run_clattn bench --shapes "1,2,1,1,64,8,8,causal-bottom-right,fused,f32,win16;1,2,1,3,40,8,8,none,unfused,f16,win0" --reps 1 --quiet --json
expect_rc "bench winL" 0
expect_text "bench winL" "$tmp/out" '"dtype": "f32/w16"'
expect_text "bench winL (unfused)" "$tmp/out" '"dtype": "f16/w0"'
# (bytes = GB/s x ms x 1e6: Q and O 2 x 16 floats, K and V 17 x 16 floats)
if awk '/"f32\/w16"/ && match($0, /"device_ms": \{"median": [^,]*/) {
        ms = substr($0, RSTART + 24, RLENGTH - 24)
        match($0, /"gbytes_per_s": [^,]*/); gb = substr($0, RSTART + 16, RLENGTH - 16)
        bytes = gb * ms * 1e6; want = (2 * 16 + 17 * 16) * 4
        ok = bytes > want * 0.9999 && bytes < want * 1.0001 }
    END { exit !ok }' "$tmp/out"; then
    pass; else fail "bench winL: GB/s does not count Q, O and the 17 visible keys' K/V once (got: $(cat "$tmp/out"))"; fi
bench_refuses "1,2,1,1,64,8,8,none,fused,f32,win" "1,2,1,1,64,8,8,none,fused,f32,win-1" \
    "1,2,1,1,64,8,8,none,fused,f32,win4,win4" "3,2,1,12,12,8,8,none,fused,f32,varlen,win4" \
    "3,2,1,12,12,8,8,none,fused,f32,win4,padded" "1,2,1,1,64,8,8,none,fused,f32,win4x" \
    "1,2,1,1,64,8,8 ,causal-bottom-right,fused,f32,win4" "1,2,1,1,64,8,8x" "1,2,1,1,64,8,8.5" \
    "1,2,1,1,64,8,8,none,fused,f32,drop0.1000000000000000000000000000000000001,win1234567890"
# bshd: K and V [b, n_kv, h_kv, d] (FlashAttention's cache and pool); the plan says the
# decode kernel reads whole rows (every KV head per work-item) where the device is a CPU
run_clattn bench --shapes "1,4,2,1,64,16,16,none,fused,f32,bshd;2,4,2,1,40,16,16,none,fused,f16,page8,bshd;1,2,2,8,8,8,8,none,unfused,f32,bshd" --reps 1 --quiet --json
expect_rc "bench bshd" 0
expect_text "bench bshd" "$tmp/out" '"algorithm": "fused/bshd"'
expect_text "bench bshd (paged)" "$tmp/out" '"algorithm": "paged8/bshd"'
expect_text "bench bshd (unfused)" "$tmp/out" '"algorithm": "unfused/bshd"'
if grep -q '"device": "pthread' "$tmp/out"; then
    expect_text "bench bshd (plan)" "$tmp/out" "2 KV heads in turn (K's heads interleave in its rows"
fi
bench_refuses "1,4,2,1,64,16,16,none,backward,f32,bshd" "1,4,2,1,64,16,16,none,fused,f32,bshd,bshd" \
    "3,2,1,12,12,8,8,none,fused,f32,varlen,bshd" "1,4,2,1,64,16,16,none,fused,f32,bshdx"
# varlen / padded prefill shapes: packed sequences with cu_seqlens, or the padded batch
# with the same lengths; bad combinations are usage errors
run_clattn bench --shapes "3,2,1,12,12,8,8,causal,fused,f32,varlen;3,2,1,12,12,8,8,causal,unfused,f32,padded" --reps 1 --quiet
expect_rc "bench varlen" 0
expect_text "bench varlen" "$tmp/out" "fused/varlen f32"
expect_text "bench padded" "$tmp/out" "unfused/padded f32"
bench_refuses "3,2,1,12,10,8,8,none,fused,f32,varlen" "3,2,1,12,12,8,8,none,fused,f32,varlen,varlen" \
    "3,2,1,12,12,8,8,none,backward,f32,padded" "65,2,1,12,12,8,8,none,fused,f32,varlen" \
    "3,2,1,12,12,8,8,none,fused,f32,page4,varlen" "3,2,1,12,12,8,8,none,fused,f32,int8,padded" \
    "1,4,3,4,4,4,4" "1,4,2,1,64,16,16,none,fused,f32,page+16" "1,4,2,1,64,16,16,none,fused,f32,page 16"
# two candidates, not the default 48 (each is a program build: minutes on PoCL); n_q 32:
# the tiled kernel (16 queries would decode)
run_clattn tune --dry-run --shapes "1,1,1,32,32,8,8,none,fused" --reps 1 --rq 2,6 --wg 4 --tile 32
expect_rc "tune --dry-run" 0
expect_text "tune (table)" "$tmp/out" "(2 candidates ran)"
expect_text "tune (progress)" "$tmp/err" "clattn tune: [1/7] case 1/1"
expect_text "tune (progress, a candidate)" "$tmp/err" "candidate 2/2, RQ,WG,TILE 6,4,32"
for bad in "--rq 7" "--rq 0" "--wg 4," "--wg ,4" "--tile 24" "--tile 32,,64" "--tile 528" "--rq 1,2,3,4,5,6,1,2,3" "--rq +4" "--wg 4,-8"; do
    # shellcheck disable=SC2086 # the option and its value are two words
    run_clattn tune --dry-run $bad
    expect_rc "tune $bad" 2
done
if grep -q "clattn tune: \[" "$tmp/out"; then fail "tune: progress on standard output"; else pass; fi
run_clattn tune --dry-run --quiet --shapes "1,1,1,32,32,8,8,causal,fused" --reps 1 --rq 2 --wg 4 --tile 32
expect_rc "tune --dry-run, causal, one candidate" 0
expect_text "tune (table names the mask)" "$tmp/out" "1x1x32x32 d=8,8 causal"
expect_text "tune (one candidate)" "$tmp/out" "(1 candidate ran)"
run_clattn tune --dry-run --quiet --shapes "1,1,1,32,32,8,8,none,fused,f64" --reps 1 --rq 2 --wg 4 --tile 32
expect_rc "tune, a bad dtype" 2
expect_text "tune, a bad dtype (its own name and grammar)" "$tmp/err" "clattn tune: bad --shapes entry '1,1,1,32,32,8,8,none,fused,f64': dtype f32, f16 or bf16 (b,h_q,h_kv,n_q,n_kv,d_k,d_v[,mask[,alg[,dtype[,winL]]]], at most 32 cases)"
# tune times the forward kernels on plain K/V: bench's other cases are usage errors (their
# winner would be stored as the forward kernel's); a decode case is reported, not tuned
for bad in "1,2,2,64,64,8,8,none,backward" "1,2,2,1,64,8,8,none,fused,f32,page16" \
    "1,2,2,1,64,8,8,none,fused,f32,int8" "2,2,2,16,16,8,8,none,fused,f32,varlen" \
    "1,2,2,64,64,8,8,none,fused,f32,drop0.5" "1,2,2,64,64,8,8,none,fused,f16,half"; do
    run_clattn tune --dry-run --quiet --shapes "$bad" --reps 1 --rq 2 --wg 4 --tile 32
    expect_rc "tune $bad" 2
    expect_text "tune $bad" "$tmp/err" "tune times the forward kernels on plain K/V"
done
# the refusal names the --shapes entry (an algorithm "both" makes two cases of one)
run_clattn tune --dry-run --quiet --shapes "1,4,2,1,64,64,64;1,4,2,1,64,64,64,none,fused,f32,bshd" --reps 1
expect_rc "tune bshd (second entry)" 2
expect_text "tune bshd (second entry)" "$tmp/err" "--shapes entry 2: tune times the forward kernels"
run_clattn tune --dry-run --quiet --shapes "1,4,2,2,64,8,8,none,fused,f16" --reps 1 --rq 2 --wg 4 --tile 32
expect_rc "tune (decode)" 0
expect_text "tune (decode)" "$tmp/out" "1x4x2x64 d=8,8 f16 -"
expect_text "tune (decode)" "$tmp/out" "(the decode kernel, n_q <= 16: no blocking to tune)"
# no query rows or no keys: nothing tiled runs either (the timings would be noise)
run_clattn tune --dry-run --quiet --shapes "1,4,2,0,64,8,8,none,both;1,4,2,32,0,8,8,none,unfused" --reps 1 --rq 2 --wg 4 --tile 32
expect_rc "tune (empty)" 0
expect_text "tune (n_q 0)" "$tmp/out" "(no query rows: no blocking to tune)"
expect_text "tune (n_kv 0)" "$tmp/out" "(n_kv 0, the decode kernel writes the rows: no blocking to tune)"
if grep -q "candidates ran" "$tmp/out"; then fail "tune (empty): a candidate ran"; else pass; fi

echo "test_cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
