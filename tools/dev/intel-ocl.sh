#!/bin/sh
# Intel's OpenCL CPU runtime (PyPI: intel-opencl-rt, intel-cmplr-lib-rt) as a second
# OpenCL implementation beside PoCL. Installs it into a virtual environment (once) and
# runs a command with only that runtime visible to the ICD loader:
#   sh tools/dev/intel-ocl.sh ./build/clattn devices
#   sh tools/dev/intel-ocl.sh ctest --test-dir build -LE "oclgrind|valgrind"
# CLATTN_INTEL_OCL_DIR: where the environment lives (default ~/.cache/clattn-intel-ocl).
# With no command it only installs and prints the variables to export by hand.
set -eu
dir=${CLATTN_INTEL_OCL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/clattn-intel-ocl}
lib="$dir/lib/libintelocl.so"
if [ ! -e "$lib" ]; then
    if ! python3 -m venv "$dir" >/dev/null 2>&1; then
        # Debian's python3 ships venv separately
        apt-get install -y -qq python3-venv >/dev/null
        python3 -m venv "$dir"
    fi
    # three tries: a download cut or corrupted on the way is fetched again
    for try in 1 2 3; do
        "$dir/bin/pip" install -q --no-cache-dir intel-opencl-rt intel-cmplr-lib-rt && break
        [ "$try" -lt 3 ] || exit 1
        echo "intel-ocl.sh: pip install failed, try $try of 3" >&2
        sleep 20
    done
fi
[ -e "$lib" ] || { echo "intel-ocl.sh: $lib missing after the install" >&2; exit 1; }
vendors="$dir/no-other-vendors" # an empty folder: the ICD loader sees Intel's runtime only
mkdir -p "$vendors"
export OCL_ICD_FILENAMES="$lib" OCL_ICD_VENDORS="$vendors"
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ $# -eq 0 ]; then
    echo "export OCL_ICD_FILENAMES=$OCL_ICD_FILENAMES OCL_ICD_VENDORS=$OCL_ICD_VENDORS LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    exit 0
fi
exec "$@"
