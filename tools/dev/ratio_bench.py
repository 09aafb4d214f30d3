#!/usr/bin/env python3
"""Time ratios of clattn bench shapes to a base shape, measured in the same run (dev-time only).

On a machine whose speed drifts by 10-40 % from minute to minute, the ratio of two shapes
timed seconds apart is steadier than either time: each round runs `clattn bench` once
with the base shape first and the others after it, and takes each shape's median device
time over --reps runs; the ratio shape / base is taken per round, and the median of the
rounds' ratios (with their range) is printed.

Usage (from the repository root, after building):
    python3 tools/dev/ratio_bench.py [--rounds 6] [--reps 9] [--bin build/clattn]
        [--kernels DIR] [--huge-pages] BASE_SHAPE SHAPE [SHAPE ...]

Shapes as `clattn bench --shapes` takes them, e.g. the paged decode of issue 14:
    python3 tools/dev/ratio_bench.py "8,32,8,1,8192,128,128,none,fused,f16" \\
        "8,32,8,1,8192,128,128,none,fused,f16,page16"
--kernels sets CLATTN_KERNEL_DIR (a folder of cl/ sources to run instead of the
embedded ones: a before/after comparison runs this twice); --huge-pages passes
`clattn bench --huge-pages` (operands in memory advised for transparent huge pages).
"""

import argparse
import os
import statistics
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--bin", default="build/clattn")
    ap.add_argument("--kernels", default=None, help="CLATTN_KERNEL_DIR for the runs")
    ap.add_argument("--huge-pages", action="store_true", help="clattn bench --huge-pages")
    ap.add_argument("shapes", nargs="+", help="the base shape, then the shapes to compare")
    a = ap.parse_args()
    if len(a.shapes) < 2:
        ap.error("give a base shape and at least one shape to compare with it")
    env = dict(os.environ)
    if a.kernels:
        env["CLATTN_KERNEL_DIR"] = a.kernels
    ratios = [[] for _ in a.shapes[1:]]
    for r in range(a.rounds):
        cmd = [a.bin, "bench", "--quiet", "--reps", str(a.reps), "--shapes", ";".join(a.shapes)]
        if a.huge_pages:
            cmd.append("--huge-pages")
        run = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit("clattn bench failed:\n" + run.stderr)
        rows = [ln.split() for ln in run.stdout.splitlines()]
        ms = [float(f[10]) for f in rows if len(f) > 10 and f[0].isdigit()]
        if len(ms) != len(a.shapes):
            sys.exit("expected %d result rows, got %d:\n%s" % (len(a.shapes), len(ms), run.stdout))
        print("round %d: %s ms" % (r + 1, "  ".join("%.2f" % x for x in ms)), flush=True)
        for i, x in enumerate(ms[1:]):
            ratios[i].append(x / ms[0])
    for shape, v in zip(a.shapes[1:], ratios):
        print("%s / base: median %.3f  [%.2f-%.2f] over %d rounds"
              % (shape, statistics.median(v), min(v), max(v), len(v)))


if __name__ == "__main__":
    main()
