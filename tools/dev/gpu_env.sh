# Sourced by tools/dev/gpu_run.sh and gpu_decode.sh on the GPU machine: R (the checkout),
# O ($OUT, default /tmp/out), B (the carried .gpu/bin), the carried libraries, a program
# cache, and an ICD file naming NVIDIA's OpenCL driver for the carried ICD loader.
R=$(cd "$(dirname "$0")/../.." && pwd); O=${OUT:-/tmp/out}; mkdir -p "$O"; B=$R/.gpu/bin
export LD_LIBRARY_PATH=$R/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CLATTN_CACHE_DIR=/tmp/clattn-cache
lib=$(ls /usr/local/nvidia/lib64/libnvidia-opencl.so.1 /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 /usr/lib64/libnvidia-opencl.so.1 2>/dev/null | head -1)
[ -n "$lib" ] || lib=$(timeout 60 find / -name 'libnvidia-opencl.so.1' 2>/dev/null | head -1)
echo "NVIDIA OpenCL: ${lib:-not found}"
mkdir -p /tmp/icd && echo "$lib" > /tmp/icd/nvidia.icd && export OCL_ICD_VENDORS=/tmp/icd
