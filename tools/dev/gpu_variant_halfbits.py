#!/usr/bin/env python3
"""Patch a copy of cl/ so float16 rows load as ushort vectors, converted in registers.

A kernel variant for the GPU decode sweep (dev-time only; tools/dev/gpu_decode.sh runs it
as `halfbits`): common.cl's LD16_1 and LD8_1 (vload_half16 / vload_half8) become one
vector load of 16 or 8 ushort and an integer conversion to float, exact like vload_half
(normal numbers rebiased, subnormals through convert_float, inf and NaN kept with their
payload, NaNs quiet, the sign copied; all 65536 codes give vload_half's bits on PoCL).
The question it answers: NVIDIA's OpenCL has no cl_khr_fp16, and the H200 run of 2026-12-04 moved float16 K/V at half float32's bytes per second, as
if vload_half16 were issued as 16 two-byte loads (docs/BENCHMARKS.md, nineteenth).

Usage: python3 tools/dev/gpu_variant_halfbits.py DIR   (DIR: a copy of cl/, edited in place)
Checked on PoCL: the GPU family's decode tests pass with CLATTN_KERNEL_DIR=DIR.
"""

import sys

CONVERT = r"""
/* (gpu_variant_halfbits.py) float16 bits to float, exactly as vload_half: |x| below 2^-14
 * (subnormal halves) as an integer times 2^-24, normal ones rebiased (127 - 15 = 112),
 * inf and NaN to exponent 255 with their mantissa bits (NaNs quiet, as PoCL's vload_half
 * gives them), then the sign */
#define DEFINE_HALF_BITS(n)                                                                 \
    float##n half_bits##n(ushort##n h)                                                      \
    {                                                                                       \
        const uint##n u = convert_uint##n(h), ax = u & 0x7fffu;                             \
        const float##n sub = convert_float##n(ax) * 0x1p-24f;                               \
        const uint##n nan = select((uint##n)(0u), (uint##n)(0x400000u), ax > (uint##n)(0x7c00u)); \
        const uint##n big = select((ax << 13) + 0x38000000u, (ax << 13) | 0x7f800000u | nan, \
                                   ax >= (uint##n)(0x7c00u));                               \
        const float##n mag = select(as_float##n(big), sub, ax < (uint##n)(0x400u));         \
        return as_float##n(as_uint##n(mag) | ((u & 0x8000u) << 16));                       \
    }
DEFINE_HALF_BITS(16)
DEFINE_HALF_BITS(8)
"""


def main():
    path = sys.argv[1].rstrip("/") + "/common.cl"
    s = open(path).read()
    old16 = "#define LD16_1(p, i) vload_half16(0, (p) + (i))\n"
    old8 = "#define LD8_1(p, i) vload_half8(0, (p) + (i))\n"
    anchor = "#define LD8_6("
    for text in (old16, old8, anchor):
        if s.count(text) != 1:
            sys.exit("gpu_variant_halfbits.py: %r not found once in %s" % (text, path))
    s = s.replace(old16, "#define LD16_1(p, i) half_bits16(vload16(0, "
                  "(__global const ushort *)((p) + (i))))\n")
    s = s.replace(old8, "#define LD8_1(p, i) half_bits8(vload8(0, "
                  "(__global const ushort *)((p) + (i))))\n")
    end = s.index("\n", s.index(anchor)) + 1
    s = s[:end] + CONVERT + s[end:]
    open(path, "w").write(s)


if __name__ == "__main__":
    main()
