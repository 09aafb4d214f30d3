#!/usr/bin/env python3
"""A/B timing of two clattn builds (or two kernel folders) on this machine (dev-time only).

This machine drifts by 10-40 % from minute to minute, so two builds are compared by
alternating them round by round (A B, B A, A B, ...) and taking each case's median of
the rounds' `clattn bench --json` medians (device time). Prints B/A per case (< 1: B is
faster). --min instead takes the fastest run of all rounds (device time only ever gains
from interference, so for compute-bound changes the minimum is the steadier estimate).

Usage: python3 tools/dev/ab_bench.py BIN_A BIN_B [--rounds 4] [--shapes LIST]
       python3 tools/dev/ab_bench.py build/clattn build/clattn --kernels-a cl --kernels-b /tmp/cl-b
LIST is `clattn bench --shapes` syntax; --kernels-a/-b set CLATTN_KERNEL_DIR per side,
--env-a/-b NAME=VALUE any other variable (CLATTN_BLOCKING=6,32,64) per side.
"""
import argparse
import json
import os
import statistics
import subprocess

DEFAULT_SHAPES = ("1,32,32,1,8192,128,128,none,fused;1,32,8,1,32768,128,128,none,fused;"
                  "1,32,8,1,32768,128,128,none,fused,f16;8,32,8,1,8192,128,128,none,fused,f16")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bin_a")
    ap.add_argument("bin_b")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--min", action="store_true",
                    help="compare the fastest run of all rounds, not the median of medians")
    ap.add_argument("--kernels-a", help="CLATTN_KERNEL_DIR for A")
    ap.add_argument("--kernels-b", help="CLATTN_KERNEL_DIR for B")
    ap.add_argument("--env-a", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for A only (repeatable), e.g. CLATTN_BLOCKING=6,32,64")
    ap.add_argument("--env-b", action="append", default=[], metavar="NAME=VALUE",
                    help="an environment variable for B only (repeatable)")
    args = ap.parse_args()
    sides = [("A", args.bin_a, args.kernels_a, args.env_a), ("B", args.bin_b, args.kernels_b, args.env_b)]
    res = {"A": {}, "B": {}}
    for r in range(args.rounds):
        for name, binary, kdir, extra in (sides if r % 2 == 0 else sides[::-1]):
            env = dict(os.environ)
            env.update(kv.split("=", 1) for kv in extra)
            if kdir:
                env["CLATTN_KERNEL_DIR"] = kdir
            out = subprocess.run([binary, "bench", "--json", "--quiet", "--reps", str(args.reps),
                                  "--shapes", args.shapes], env=env, check=True,
                                 capture_output=True, text=True).stdout
            for c in json.loads(out):
                key = (c["b"], c["h_q"], c["h_kv"], c["n_q"], c["n_kv"], c["d_k"], c["d_v"],
                       c["mask"], c["algorithm"], c["dtype"])
                res[name].setdefault(key, []).append(c["device_ms"]["min" if args.min else "median"])
    for key, times in res["A"].items():
        pick = min if args.min else statistics.median
        a, b = pick(times), pick(res["B"].get(key, [float("nan")]))
        print(",".join(str(x) for x in key), f"A {a:.2f} ms  B {b:.2f} ms  B/A {b / a:.2f}")


if __name__ == "__main__":
    main()
