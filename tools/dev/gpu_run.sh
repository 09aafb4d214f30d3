#!/bin/bash
# The prepared GPU run behind docs/BENCHMARKS.md. Prepare here (Debian 12), then run it
# on the GPU machine with the .gpu folder carried along:
#   sh tools/dev/gpu_prepare.sh          (builds build-gpu and fills .gpu/)
#   (on the GPU machine) bash tools/dev/gpu_run.sh
# One prepared device run: NVIDIA's OpenCL driver through the carried ICD loader; the FMA
# peak and streaming bandwidth, a sweep of the GPU family's blocking, clattn bench with
# each family and PyTorch SDPA on the same GPU, then the test executables (GPU family:
# the default on a GPU). Results go to $OUT (default /tmp/out); a summary to stdout.
set -u
. "$(dirname "$0")/gpu_env.sh" # R, O, B, the libraries and NVIDIA's ICD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv | tee "$O/gpu.txt"
"$B/clattn" devices 2>&1 | tee "$O/devices.txt"
date -u | tee -a "$O/gpu.txt"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }

# 1. correctness first, briefly: the demo and run --check (fused: the GPU family here)
"$B/clattn" demo > "$O/demo.txt" 2>&1; echo "demo rc=$?"; grep -E "journey|bank |within|exceed" "$O/demo.txt" | head -4
python3 -c "
import numpy as np; r=np.random.default_rng(1)
for d in (64, 128):
    for n in 'qkv': np.save(f'/tmp/{n}{d}.npy', r.standard_normal((8,1000,d)).astype(np.float32))"
for d in 64 128; do for a in fused unfused; do
  "$B/clattn" run --q /tmp/q$d.npy --k /tmp/k$d.npy --v /tmp/v$d.npy --out /tmp/o.npy --algorithm $a --check > /tmp/check.txt 2>&1
  echo "run --check d=$d $a rc=$? $(tail -1 /tmp/check.txt)"; done; done
el

# 2. the GPU family's blocking (RQ,WG,TILE_KV) on the two head dims; unsupported ones say so
SW="1,16,16,4096,4096,64,64,none,fused;1,16,16,4096,4096,128,128,none,fused"
for bl in 4,256,32 4,128,64 6,128,32 4,128,32 6,128,16; do
  CLATTN_BLOCKING=$bl timeout 30 "$B/clattn" bench --quiet --reps 3 --shapes "$SW" > /tmp/sweep.txt 2>&1
  rc=$?; { echo "== $bl rc=$rc"; cat /tmp/sweep.txt; } >> "$O/sweep.txt"
  echo "sweep $bl rc=$rc: $(grep -E '^1 ' /tmp/sweep.txt | awk '{printf "d=%s %s ms %s GFLOP/s; ", $6, $11, $14}')$(grep -iE 'error|unsupported' /tmp/sweep.txt | head -1 | cut -c1-160)"
done
el
# split-KV decoding: the chosen split count (0) against fixed ones
SD="8,32,8,1,32768,128,128,none,fused,f16;1,32,8,1,32768,128,128,none,fused,f16"
for ns in 0 4 16 64 256; do
  CLATTN_DECODE_SPLITS=$ns timeout 30 "$B/clattn" bench --quiet --reps 5 --shapes "$SD" > /tmp/split.txt 2>&1
  echo "decode splits $ns rc=$?: $(grep -E '^[18] ' /tmp/split.txt | awk '{printf "b=%s %s ms %s GB/s; ", $1, $11, $15}')"
done
el

# 3. clattn bench (GPU family, the default here; then the CPU family) and PyTorch SDPA
S="1,16,16,1024,1024,64,64;1,16,16,4096,4096,64,64;8,16,16,1024,1024,64,64;1,16,16,16384,16384,64,64,none,fused;1,16,16,4096,4096,128,128;4,16,16,4096,4096,128,128,none,fused;1,16,16,8192,8192,64,64,causal,fused;8,32,8,1,32768,128,128,none,fused,f16;1,32,8,1,32768,128,128,none,fused,f16;1,32,32,1,8192,128,128,none,fused"
timeout 150 "$B/clattn" bench --quiet --peak --reps 5 --shapes "$S" > "$O/bench_gpu.txt" 2>&1; echo "bench (gpu family) rc=$?"; cat "$O/bench_gpu.txt"
el
# float16 inputs with and without desc.half_arithmetic (the plan says whether it ran, and
# whether the row reductions go by sub-group: cl_khr_subgroup_clustered_reduce)
SH="1,16,16,4096,4096,64,64,none,fused,f16;1,16,16,4096,4096,64,64,none,fused,f16,half;1,16,16,4096,4096,128,128,none,fused,f16;1,16,16,4096,4096,128,128,none,fused,f16,half"
timeout 90 "$B/clattn" bench --quiet --reps 5 --json --shapes "$SH" > "$O/bench_half.json" 2>&1; echo "bench (f16, half arithmetic) rc=$?"
python3 -c "
import json,sys
for r in json.load(open(sys.argv[1])): print(r['d_k'], r['dtype'], round(r['device_ms']['median'], 3), 'ms', round(r['gflops'], 1), 'GFLOP/s |', r['plan'][-160:])" "$O/bench_half.json" 2>&1 | head -8
el
SC="1,16,16,4096,4096,64,64,none,fused;1,16,16,4096,4096,128,128,none,fused;1,16,16,8192,8192,64,64,causal,fused"
CLATTN_KERNEL_FAMILY=cpu timeout 90 "$B/clattn" bench --quiet --reps 3 --shapes "$SC" > "$O/bench_cpu_family.txt" 2>&1; echo "bench (cpu family) rc=$?"; grep -E '^[0-9]' "$O/bench_cpu_family.txt"
P="1,16,1024,64;1,16,4096,64;8,16,1024,64;1,16,16384,64;1,16,4096,128;4,16,4096,128;1,16,8192,64,causal;decode,8,32,8,1,32768,128,f16;decode,1,32,8,1,32768,128,f16;decode,1,32,32,1,8192,128,f32"
timeout 120 python3 "$R/tools/dev/gpu_sdpa_bench.py" "$P" > "$O/sdpa.jsonl" 2>&1; echo "sdpa rc=$?"; cat "$O/sdpa.jsonl"
el

# 4. the tests (GPU family), shortest first
export CLATTN_CASES_DIR=$R/tests/cases
for t in test_seeds test_cases test_api test_random test_features; do
  timeout 120 "$B/$t" > "$O/$t.log" 2>&1; echo "$t rc=$? $(grep -E '^[0-9]+%' "$O/$t.log" | tail -1) $(grep -m3 -E ':[EF]:' "$O/$t.log" | cut -c1-200)"
done
CLATTN_BIN=$B/clattn timeout 60 sh "$R/tests/test_cli.sh" > "$O/test_cli.log" 2>&1; echo "test_cli rc=$? $(tail -1 "$O/test_cli.log")"
el
