# Shared helpers of the shell tests (sourced by test_cli.sh and test_heatmap.sh):
# a temporary folder, pass/fail counters, running the program and checking its exit
# status, writing .npy files byte by byte. The sourcing script sets `bin` first.
# shellcheck disable=SC2059 # printf formats are built on purpose (byte escapes)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

pass() { passed=$((passed + 1)); }
fail() {
    failed=$((failed + 1))
    echo "FAIL: $*"
    if [ -s "$tmp/err" ]; then sed 's/^/  stderr: /' "$tmp/err"; fi
}

# run_clattn ARGS...: runs the program with stdout in $tmp/out, stderr in $tmp/err,
# and its exit status in $rc (never stops the script).
run_clattn() {
    rc=0
    "$bin" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
}

# expect_rc NAME STATUS: the last run_clattn exited with STATUS.
expect_rc() {
    if [ "$rc" -eq "$2" ]; then pass; else fail "$1: exit status $rc, expected $2"; fi
}

# ---- writing .npy files --------------------------------------------------------

# f32 HEX...: little-endian bytes of float32 values given as bit patterns.
f32() {
    for h in "$@"; do
        v=$((0x$h))
        printf "$(printf '\\%03o\\%03o\\%03o\\%03o' $((v & 255)) $((v >> 8 & 255)) \
            $((v >> 16 & 255)) $((v >> 24 & 255)))"
    done
}

# npy_header DESCR SHAPE [FORTRAN]: a version 1.0 header, padded to 64 bytes like numpy.
npy_header() {
    dict="{'descr': '$1', 'fortran_order': ${3:-False}, 'shape': $2, }"
    pad=$(((64 - (10 + ${#dict} + 1) % 64) % 64))
    hlen=$((${#dict} + pad + 1))
    printf '\223NUMPY\001\000'
    printf "$(printf '\\%03o\\%03o' $((hlen % 256)) $((hlen / 256)))"
    printf '%s' "$dict"
    i=0
    while [ "$i" -lt "$pad" ]; do printf ' '; i=$((i + 1)); done
    printf '\n'
}

# swap_hn B H N D WORD...: the words, laid out (B, H, N, D), in (B, N, H, D) order (what
# --layout bshd reads: FlashAttention's (b, n, h, d), or pools (num_pages, page_size, h, d))
swap_hn() {
    sb=$1 sh=$2 sn=$3 sd=$4
    shift 4
    echo "$@" | tr -s ' ' '\n' | sed '/^$/d' | awk -v B="$sb" -v H="$sh" -v N="$sn" -v D="$sd" '
        { w[NR - 1] = $1 }
        END { for (b = 0; b < B; b++) for (n = 0; n < N; n++) for (h = 0; h < H; h++)
              for (d = 0; d < D; d++) printf "%s ", w[((b * H + h) * N + n) * D + d] }'
}
