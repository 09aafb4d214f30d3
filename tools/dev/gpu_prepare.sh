#!/bin/sh
# Builds clattn here (Debian 12, Release) and fills .gpu/ with what tools/dev/gpu_run.sh
# runs on the GPU machine: the CLI, the test executables and the shared libraries they
# need that the machine may lack (ICD loader, cJSON, subunit). Carry .gpu with the run.
set -e
cd "$(dirname "$0")/../.."
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j2 >/dev/null
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib
cp build-gpu/clattn .gpu/bin/
for t in test_seeds test_cases test_api test_random test_features test_paged test_varlen; do cp build-gpu/tests/$t .gpu/bin/; done
cp -L /lib/x86_64-linux-gnu/libOpenCL.so.1 /lib/x86_64-linux-gnu/libcjson.so.1 \
      /lib/x86_64-linux-gnu/libsubunit.so.0 .gpu/lib/
for f in .gpu/bin/*; do ldd "$f" | grep -q "not found" && { echo "$f: missing libraries"; ldd "$f" | grep "not found"; }; done
# PREV=<git ref>: that revision's decode_gpu.cl beside, for gpu_decode.sh's comparison
if [ -n "${PREV:-}" ]; then mkdir -p .gpu/prev && git show "$PREV:cl/decode_gpu.cl" > .gpu/prev/decode_gpu.cl; fi
du -sh .gpu
