#!/bin/bash
# The prepared GPU run behind docs/BENCHMARKS.md. Prepare here (Debian 12), then run it
# on the GPU machine with the .gpu folder carried along:
#   cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release && cmake --build build-gpu -j
#   mkdir -p .gpu/bin .gpu/lib && cp build-gpu/clattn build-gpu/tests/test_{seeds,cases,api,random} .gpu/bin/
#   cp -L /lib/x86_64-linux-gnu/lib{OpenCL.so.1,cjson.so.1,subunit.so.0} .gpu/lib/ && cp tools/dev/gpu_run.sh .gpu/run.sh
#   (on the GPU machine) bash .gpu/run.sh
# One prepared device run: NVIDIA's OpenCL driver through the carried ICD loader;
# clattn bench + PyTorch SDPA on the same GPU, then the test executables.
set -u
R=$(cd "$(dirname "$0")/.." && pwd); O=${OUT:-/tmp/out}; mkdir -p "$O"; B=$R/.gpu/bin
export LD_LIBRARY_PATH=$R/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
lib=$(ls /usr/local/nvidia/lib64/libnvidia-opencl.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 /usr/lib64/libnvidia-opencl.so.1 2>/dev/null | head -1)
[ -n "$lib" ] || lib=$(timeout 60 find / -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
echo "NVIDIA OpenCL: ${lib:-not found}"
mkdir -p /tmp/icd && echo "$lib" > /tmp/icd/nvidia.icd && export OCL_ICD_VENDORS=/tmp/icd
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
"$B/clattn" devices 2>&1 | tee "$O/devices.txt"
"$B/clattn" demo > "$O/demo.txt" 2>&1; echo "demo rc=$?"; grep -E "journey|bank |within|exceed" "$O/demo.txt" | head -8
S="1,16,16,1024,1024,64,64;1,16,16,4096,4096,64,64;8,16,16,1024,1024,64,64;1,16,16,16384,16384,64,64,none,fused;1,16,16,4096,4096,128,128;4,16,16,4096,4096,128,128,none,fused;1,16,16,16384,16384,128,128,none,fused;1,16,16,8192,8192,64,64,causal,fused;1,32,32,1,8192,128,128"
timeout 200 "$B/clattn" bench --peak --reps 5 --shapes "$S" > "$O/bench.txt" 2>&1; echo "bench rc=$?"; cat "$O/bench.txt"
P="1,16,1024,64;1,16,4096,64;8,16,1024,64;1,16,16384,64;1,16,4096,128;4,16,4096,128;1,16,16384,128;1,16,8192,64,causal"
timeout 120 python3 "$R/tools/dev/gpu_sdpa_bench.py" "$P" > "$O/sdpa.jsonl" 2>&1; echo "sdpa rc=$?"; cat "$O/sdpa.jsonl"
cd /tmp && python3 -c "
import numpy as np; r=np.random.default_rng(1)
for n in 'qkv': np.save(f'/tmp/{n}.npy', r.standard_normal((8,1024,64)).astype(np.float32))"
for a in fused unfused; do "$B/clattn" run --q /tmp/q.npy --k /tmp/k.npy --v /tmp/v.npy --out /tmp/o_$a.npy --algorithm $a --check; echo "run --check $a rc=$?"; done
export CLATTN_CASES_DIR=$R/tests/cases
for t in test_seeds test_api test_cases test_random; do timeout 150 "$B/$t" > "$O/$t.log" 2>&1; echo "$t rc=$? $(grep -E '^[0-9]+%' "$O/$t.log" | tail -1)"; done
CLATTN_BIN=$B/clattn timeout 60 sh "$R/tests/test_cli.sh" > "$O/test_cli.log" 2>&1; echo "test_cli rc=$? $(tail -1 "$O/test_cli.log")"
