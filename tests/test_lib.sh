# Shared helpers of the shell tests (sourced by test_cli.sh and test_heatmap.sh):
# a temporary folder, pass/fail counters, running the program and checking its exit
# status. The sourcing script sets `bin` first.
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
