#!/bin/bash
# The prepared GPU run for decoding (issues 14 and 18): the GPU family's decode_gpu.cl on
# the issues' shapes — float16/float32 GQA, MHA, paged (page 16/256), int8 against float32 —
# each with the read bandwidth measured around it, PyTorch SDPA on the same shapes, the
# split counts, and kernel variants that time the decode kernel's stages (a variant leaves a
# stage out: its numbers are wrong on purpose and only its time counts). Then the decode
# tests. Prepare here (Debian 12), run there with .gpu carried:
#   sh tools/dev/gpu_prepare.sh          (builds build-gpu and fills .gpu/)
#   (on the GPU machine) bash tools/dev/gpu_decode.sh
# Results go to $OUT (default /tmp/out); a summary to stdout. A full run took 219-272 s on
# an H200 (its steps' timeouts add up to more than the device tool's 600 s per command);
# QUICK=1 (the decode shapes, paged/int8 and the variants) took 118 s (before the halfbits
# variant and the group-8 shape were added, 2026-12-04, twentieth: unrun on a GPU).
set -u
. "$(dirname "$0")/gpu_env.sh" # R, O, B, the libraries and NVIDIA's ICD
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee "$O/gpu.txt"
date -u | tee -a "$O/gpu.txt"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s]"; }
row() { grep -E '^[0-9]+ ' "$1" | awk '{printf "%s,%s,%s,%s,%s %s %s: %s ms %s GB/s %s of bw (%s GB/s)\n", $1,$2,$3,$4,$5, $9, $10, $11, $15, $18, $19}'; }

# 1. the issues' decode shapes, GPU family (the default on a GPU), bandwidth probe around each;
# and a group of 8 query heads per KV head (blocks of 8 rows: do their registers spill?)
G="1,32,8,1,32768,128,128,none,fused"
S="$G,f16;1,64,8,1,32768,128,128,none,fused,f16;8,32,8,1,8192,128,128,none,fused,f16;8,32,8,1,32768,128,128,none,fused,f16;$G;1,32,32,1,8192,128,128,none,fused;1,32,32,1,8192,128,128,none,fused,f16"
timeout 120 "$B/clattn" bench --peak --quiet --reps 10 --shapes "$S" > "$O/decode.txt" 2>&1; echo "decode rc=$?"
grep -E "peak|device" "$O/decode.txt" | head -3; row "$O/decode.txt"
el
# paged and int8 (issue 14): page 16 and 256 against contiguous; int8 against float32
P="$G,f16;$G,f16,page16;$G,f16,page256;8,32,8,1,8192,128,128,none,fused,f16;8,32,8,1,8192,128,128,none,fused,f16,page16;8,32,8,1,8192,128,128,none,fused,f16,page256;8,32,8,1,8192,128,128,none,fused;8,32,8,1,8192,128,128,none,fused,f32,int8;$G;$G,f32,int8"
timeout 120 "$B/clattn" bench --peak --quiet --reps 10 --shapes "$P" > "$O/paged.txt" 2>&1; echo "paged/int8 rc=$?"
row "$O/paged.txt"
el
if [ -n "${QUICK:-}" ]; then SD="8,32,8,1,32768,128,128,none,fused,f16;$G,f16"; else
# split counts (0: the choice)
SD="8,32,8,1,32768,128,128,none,fused,f16;$G,f16"
for ns in 0 16 64 256; do
  CLATTN_DECODE_SPLITS=$ns timeout 30 "$B/clattn" bench --quiet --reps 10 --shapes "$SD" > /tmp/split.txt 2>&1
  echo "splits $ns rc=$?: $(grep -E '^[18] ' /tmp/split.txt | awk '{printf "b=%s %s ms %s GB/s; ", $1, $11, $15}')"
done
el
fi
# 2. kernel variants (CLATTN_KERNEL_DIR): stages left out (K or V not read), and the
# previous decode_gpu.cl where gpu_prepare.sh saved one (.gpu/prev: PREV=<git ref>)
mk() { rm -rf "/tmp/kv/$1"; mkdir -p /tmp/kv; cp -r "$R/cl" "/tmp/kv/$1"; }
mk noscore; python3 - /tmp/kv/noscore/decode_gpu.cl <<'PYEOF'
import sys; p = sys.argv[1]; s = open(p).read(); a = s.index("? k_cols16("); b = s.index(":", a)
open(p, "w").write(s[:a] + "? (float16)(1.0f)\n" + s[b:])
PYEOF
mk nopv; sed -i 's/v_cols8(v, v_off, v_st, b, hk, j0 + kk, k_hi, 8 \* vl KV_PAGES)/(float8)(1.0f)/' /tmp/kv/nopv/decode_gpu.cl
# float16 rows as ushort vectors converted in registers (a lead: vload_half16 may be 16
# two-byte loads on NVIDIA; exact, checked on PoCL: tools/dev/gpu_variant_halfbits.py)
mk halfbits; python3 "$R/tools/dev/gpu_variant_halfbits.py" /tmp/kv/halfbits
variants="base noscore nopv halfbits"
# DEFINES="name:MACRO=V,MACRO=V name2:…": more variants, decode_gpu.cl's #ifndef tunables set
for spec in ${DEFINES:-}; do
  name=${spec%%:*}; mk "$name"
  for d in $(echo "${spec#*:}" | tr ',' ' '); do sed -i "1i #define ${d%%=*} ${d#*=}" "/tmp/kv/$name/decode_gpu.cl"; done
  variants="$variants $name"
done
[ -f "$R/.gpu/prev/decode_gpu.cl" ] && { mk prev; cp "$R/.gpu/prev/decode_gpu.cl" /tmp/kv/prev/; variants="$variants prev"; }
for vdir in $variants; do
  kd=$R/cl; [ "$vdir" = base ] || kd=/tmp/kv/$vdir
  CLATTN_KERNEL_DIR=$kd timeout 40 "$B/clattn" bench --quiet --reps 10 --shapes "$SD;8,32,8,1,8192,128,128,none,fused" > /tmp/var.txt 2>&1
  echo "variant $vdir rc=$?: $(grep -E '^[18] ' /tmp/var.txt | awk '{printf "b=%s %s %s ms %s GB/s; ", $1, $10, $11, $15}') $(grep -iE 'error|fail' /tmp/var.txt | head -1 | cut -c1-200)"
done
el
[ -n "${QUICK:-}" ] && exit 0 # QUICK=1: sections 1 and 2 only
# 3. PyTorch SDPA on the decode shapes
PS="decode,1,32,8,1,32768,128,f16;decode,8,32,8,1,8192,128,f16;decode,8,32,8,1,32768,128,f16;decode,1,32,8,1,32768,128,f32;decode,1,32,32,1,8192,128,f32;decode,1,32,32,1,8192,128,f16;decode,8,32,8,1,8192,128,f32"
timeout 90 python3 "$R/tools/dev/gpu_sdpa_bench.py" "$PS" > "$O/sdpa.jsonl" 2>&1; echo "sdpa rc=$?"; cat "$O/sdpa.jsonl"
el
# 4. the decode tests on the GPU (GPU family)
export CLATTN_CASES_DIR=$R/tests/cases
for t in test_varlen test_seeds test_paged; do
  timeout 120 "$B/$t" > "$O/$t.log" 2>&1; echo "$t rc=$? $(grep -E '^[0-9]+%' "$O/$t.log" | tail -1) $(grep -m3 -E ':[EF]:' "$O/$t.log" | cut -c1-200)"
done
el
