#!/usr/bin/env python3
"""Time variants of clattn bench runs round by round, as ratios to the first (dev-time only).

A variant is a kernel folder (CLATTN_KERNEL_DIR; empty: the embedded kernels), a forced
count of KV heads per decode work-item (CLATTN_DECODE_HEADS; empty: the choice), one
`clattn bench --shapes` entry and optional environment settings (`@NAME=VALUE` each, e.g.
`@CLATTN_BLOCKING=2,1,64` for 2 decode rows per work-item). Each round runs every variant once, in turn, as its own
`clattn bench --quiet --reps N` (so each gets its own environment, which ratio_bench.py's
single bench run cannot give), and takes its median device time; each variant's ratio to
the first variant is taken per round, and the median of the rounds' ratios (with their
range) is printed. On a machine whose speed drifts from minute to minute, ratios within
a round are steadier than times.

Usage (from the repository root, after building):
    python3 tools/dev/variant_bench.py [--rounds 10] [--reps 5] [--bin build/clattn]
        LABEL=KERNEL_DIR@HEADS@SHAPE[@NAME=VALUE...] ...

e.g. paged against contiguous float16 decoding, and paged with 2 heads forced:
    S=8,32,8,1,8192,128,128,none,fused,f16
    python3 tools/dev/variant_bench.py "contig=@@$S" "p16=@@$S,page16" "p16h2=@2@$S,page16"
"""

import argparse
import os
import statistics
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--bin", default="build/clattn")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="each run's median device time (default), or its fastest: on a "
                         "machine whose cores are at times taken away (runs at 2x the time), "
                         "the fastest of the reps compares the kernels without those runs")
    ap.add_argument("--huge-pages", action="store_true",
                    help="pass --huge-pages to every clattn bench run (operands in huge pages)")
    ap.add_argument("variants", nargs="+",
                    help="LABEL=KERNEL_DIR@HEADS@SHAPE[@NAME=VALUE...]; the first is the base")
    a = ap.parse_args()
    variants = []
    for text in a.variants:
        label, sep, rest = text.partition("=")
        parts = rest.split("@")
        extra = [e.partition("=") for e in parts[3:]]
        if (not sep or not label or len(parts) < 3 or not parts[2] or
                any(not name or not eq for name, eq, _ in extra)):
            ap.error("a variant is LABEL=KERNEL_DIR@HEADS@SHAPE[@NAME=VALUE...] (KERNEL_DIR "
                     "and HEADS may be empty), not %r" % text)
        variants.append((label, parts[0], parts[1], parts[2], {n: v for n, _, v in extra}))
    times = {v[0]: [] for v in variants}
    if len(times) != len(variants):
        ap.error("the labels must differ")
    for r in range(a.rounds):
        for label, kernels, heads, shape, extra in variants:
            env = dict(os.environ)
            env.update(extra)
            for name, value in (("CLATTN_KERNEL_DIR", kernels), ("CLATTN_DECODE_HEADS", heads)):
                if value:
                    env[name] = value
                else:
                    env.pop(name, None)
            run = subprocess.run([a.bin, "bench", "--quiet", "--reps", str(a.reps), "--shapes",
                                  shape] + (["--huge-pages"] if a.huge_pages else []),
                                 env=env, capture_output=True, text=True)
            rows = [ln.split() for ln in run.stdout.splitlines()]
            ms = [float(f[10]) if a.stat == "median" else float(f[11][1:].split("-")[0])
                  for f in rows if len(f) > 11 and f[0].isdigit()]
            if run.returncode != 0 or len(ms) != 1:
                sys.exit("clattn bench failed for %s:\n%s%s" % (label, run.stdout, run.stderr))
            times[label].append(ms[0])
        print("round %d: %s ms" % (r + 1, "  ".join("%s %.2f" % (k, v[-1]) for k, v in times.items())),
              flush=True)
    base = times[variants[0][0]]
    for label, v in times.items():
        ratios = [x / b for x, b in zip(v, base)]
        print("%-16s median %.2f ms  / %s: median %.3f [%.2f-%.2f] over %d rounds"
              % (label, statistics.median(v), variants[0][0], statistics.median(ratios),
                 min(ratios), max(ratios), len(ratios)))


if __name__ == "__main__":
    main()
