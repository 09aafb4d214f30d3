#!/bin/sh
# clattn-mpi on loopback: ring attention and split-KV decoding with $NP ranks, every
# built-in mask, uneven blocks and grouped-query heads; clattn_ring compares each rank's
# rows with the single-process result (1e-5 + 1e-5·|expected|, O and LSE) and exits 1 on
# a mismatch. Each mpirun is bounded by `timeout 120`.
#   CLATTN_RING=build/mpi/clattn_ring MPIEXEC=mpirun NP=4 sh tests/test_mpi.sh
set -u
: "${CLATTN_RING:?set CLATTN_RING to the clattn_ring program}"
: "${MPIEXEC:=mpirun}"
: "${NP:=2}"
# root in CI containers; --oversubscribe: more ranks than cores; no binding
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
# every rank on the CPU device: one PoCL thread per rank keeps 4 ranks on 2 cores sane
export POCL_MAX_PTHREAD_COUNT="${POCL_MAX_PTHREAD_COUNT:-1}"
# One PoCL kernel cache per rank: PoCL 3.1 segfaults (readdir on a directory another
# process removed, inside clBuildProgram) when several processes write the same program
# into one cache at once -- CI's 4-rank run died so. Each rank keeps its own cache for
# the whole script, so only the first run of a kernel variant compiles it.
cache_base=$(mktemp -d "${TMPDIR:-/tmp}/clattn-mpi-kcache.XXXXXX") || exit 1
trap 'rm -rf "$cache_base"' EXIT
# Each rank's cache starts as a hard-linked copy of this user's PoCL cache (new folders,
# shared files that PoCL only ever reads or replaces by rename), so the programs the
# suite built before need no build here; on another file system, or without a cache,
# each rank starts empty.
kcache=${POCL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pocl/kcache}
if [ -d "$kcache" ]; then
    r=0
    while [ "$r" -lt "$NP" ]; do
        cp -al "$kcache" "$cache_base/rank$r" 2>/dev/null || rm -rf "$cache_base/rank$r"
        r=$((r + 1))
    done
fi
fails=0
run() {
    echo "+ $MPIEXEC -np $NP clattn_ring $*"
    timeout 120 "$MPIEXEC" --oversubscribe --bind-to none -np "$NP" \
        sh -c 'POCL_CACHE_DIR="$0/rank${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}" exec "$@"' \
        "$cache_base" "$CLATTN_RING" "$@"
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "FAILED (exit $rc): clattn_ring $*"
        fails=$((fails + 1))
    fi
}
for mask in none causal causal-bottom-right no-self; do
    run --mode ring --n 203 --heads 4 --kv-heads 2 --dim 24 --mask "$mask" --seed 3
done
run --mode ring --n 131 --n-q 57 --batch 2 --heads 3 --kv-heads 1 --dim 16 --mask causal-bottom-right --seed 4
run --mode ring --n 3 --heads 2 --kv-heads 2 --dim 8 --mask causal --seed 5 # blocks of 0 and 1 keys
for mask in none causal-bottom-right no-self; do
    run --mode decode --n 301 --n-q 3 --heads 8 --kv-heads 2 --dim 32 --mask "$mask" --seed 6
done
run --mode decode --n 77 --n-q 1 --batch 3 --heads 4 --kv-heads 4 --dim 64 --mask causal --seed 7
# case R17: ALiBi with every key 1e8 positions from the queries; the parts' LSEs are
# about -5e7, so the merge needs float64 LSEs to weight the blocks right
run --mode ring --n 8 --heads 2 --kv-heads 1 --dim 4 --alibi 0.5 --q-start 100000000 --seed 8
run --mode decode --n 9 --n-q 2 --heads 2 --kv-heads 2 --dim 4 --alibi 0.5 --q-start 100000000 --seed 9
# attention sinks (one head without): each query row gets its head's sink once, in the
# final merge, however the keys are split
run --mode ring --n 61 --heads 3 --kv-heads 1 --dim 8 --mask causal --sink 0.75 --seed 10
run --mode decode --n 301 --n-q 2 --heads 4 --kv-heads 2 --dim 16 --sink -0.5 --seed 11
if [ $fails -ne 0 ]; then
    echo "test_mpi: $fails run(s) failed with $NP ranks"
    exit 1
fi
echo "test_mpi: all runs passed with $NP ranks"
