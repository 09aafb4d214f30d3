#!/usr/bin/env python3
"""Python overhead benchmark: a call through the `clattn` package against the same call
from C, in one run (wall time per call, median).

For each case, round by round (and within a round, call by call for the raw C
call and the PyOpenCL column) so that drift hits the columns alike:
  C program    `clattn bench --json` wall_ms: clattn_attention_enqueue on device buffers,
               then clWaitForEvents (the C program's own loop, its own process)
  raw C call   in this process, on the same queue and buffers as the next column: one
               ctypes call of clattn_attention_enqueue with views built once, then
               clWaitForEvents (what any binding costs at least)
  PyOpenCL     clattn.scaled_dot_product_attention(..., out=O) on pyopencl arrays of
               the same shape (O allocated once, as the C loop does), then waiting for
               the output's event: the C call plus the package's argument handling,
               ctypes and the event wrapping
  NumPy        the same call on NumPy arrays (the blocking API: it also copies Q, K, V
               to the device and O back, so it is not overhead alone; shown for scale)
The PyOpenCL column minus the raw C call is the package's cost per call (same process,
context, queue and buffers; the C program's column shows the process makes no other
difference).

Usage: python3 tools/dev/bench_python.py [--build build] [--rounds 3]
           [--shapes "b,h_q,h_kv,n_q,n_kv,d; ..."]
Needs the package importable (pip install ./python, or CLATTN_LIBRARY=build/libclattn.so
PYTHONPATH=python/src), numpy and pyopencl.
"""
import os
import statistics
import sys
import time

import numpy as np

from bench_peers import SETTLE_S, parse_args, run_json  # the same script folder

DEFAULT_SHAPES = "1,8,8,1,128,64; 1,32,8,1,4096,128; 1,8,8,1024,1024,64"
REPS = 50  # calls per round and column (the median is reported)


def parse_shapes(text):
    out = []
    for spec in text.split(";"):
        parts = [int(p) for p in spec.split(",") if p.strip()]
        if parts:
            out.append(tuple(parts))
    return out


def time_interleaved(fns, reps):
    """Median ms of each function, called in turn (one call of each per repetition), so
    that this machine's drift hits them alike."""
    for fn in fns:
        fn()  # warm-up (builds or loads the programs)
    ts = [[] for _ in fns]
    for _ in range(reps):
        for t, fn in zip(ts, fns):
            t0 = time.perf_counter()
            fn()
            t.append(1e3 * (time.perf_counter() - t0))
    return [statistics.median(t) for t in ts]


def raw_call(clattn, dq, dk, dv, dout, gqa):
    """A function making the bare C call: views and desc built once by the package."""
    import ctypes

    from clattn import _attention, _lib

    call = _attention._Call(dq, dk, dv, None, 0.0, False, None, gqa, {"out": dout})
    handle = call.context(None).handle
    args = (handle, ctypes.byref(call.desc)) + call.tensors()
    enqueue, wait = _lib.lib.clattn_attention_enqueue, _lib.opencl.clWaitForEvents
    release = _lib.opencl.clReleaseEvent
    done = ctypes.c_void_p()
    ref = ctypes.byref(done)

    def run():
        if enqueue(*args, 0, None, ref) != 0 or wait(1, ref) != 0:
            raise RuntimeError("clattn_attention_enqueue failed")
        release(done)
        call.keep  # the views' arrays stay alive with `call`

    return run


def main():
    args, clattn_bin = parse_args(__doc__, DEFAULT_SHAPES)
    import clattn
    import pyopencl as cl
    import pyopencl.array as cl_array

    dev = next(d for d in clattn.devices() if d.is_default)
    p, d = (int(x) for x in dev.spec.split(":"))
    queue = cl.CommandQueue(cl.Context([cl.get_platforms()[p].get_devices()[d]]))
    print(f"device: {dev.name} ({dev.platform}); host CPU: "
          f"{next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')), '?')}; "
          f"clattn {clattn.__version__}, numpy {np.__version__}, pyopencl {cl.VERSION_TEXT}, "
          f"Python {sys.version.split()[0]}")
    rows = []
    for (b, hq, hkv, nq, nkv, dd) in parse_shapes(args.shapes):
        r = np.random.default_rng(0)
        q = r.standard_normal((b, hq, nq, dd), dtype=np.float32)
        k = r.standard_normal((b, hkv, nkv, dd), dtype=np.float32)
        v = r.standard_normal((b, hkv, nkv, dd), dtype=np.float32)
        dq, dk, dv = (cl_array.to_device(queue, x) for x in (q, k, v))
        dout = cl_array.empty(queue, q.shape, np.float32)
        gqa = hq != hkv
        # results agree before anything is timed
        ref = clattn.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
        got = clattn.scaled_dot_product_attention(dq, dk, dv, enable_gqa=gqa).get()
        assert np.allclose(got, ref, atol=1e-5, rtol=1e-5), "PyOpenCL and NumPy paths differ"
        cols = {"C": [], "raw": [], "PyOpenCL": [], "NumPy": []}
        raw = raw_call(clattn, dq, dk, dv, dout, gqa)
        reps = REPS if nq * nkv <= 1 << 20 else 5
        for _ in range(args.rounds):
            res = run_json([clattn_bin, "bench", "--json", "--quiet", "--reps", str(reps),
                            "--shapes", f"{b},{hq},{hkv},{nq},{nkv},{dd},{dd},none,fused"])
            cols["C"].append(res[0]["wall_ms"]["median"])
            time.sleep(SETTLE_S)
            raw_ms, cl_ms = time_interleaved([
                raw,
                lambda: clattn.scaled_dot_product_attention(dq, dk, dv, enable_gqa=gqa,
                                                            out=dout).finish()], reps)
            # apart: its host-device copies would disturb the calls timed next to it
            np_ms, = time_interleaved([
                lambda: clattn.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)], reps)
            cols["raw"].append(raw_ms)
            cols["PyOpenCL"].append(cl_ms)
            cols["NumPy"].append(np_ms)
        med = {c: statistics.median(v) for c, v in cols.items()}
        rows.append(((b, hq, hkv, nq, nkv, dd), med))
    print("\n| b, h_q, h_kv, n_q, n_kv, d | C program ms | raw C call ms | package, PyOpenCL "
          "arrays ms | package cost per call | package, NumPy arrays ms (with copies) |")
    print("|---|---|---|---|---|---|")
    for shape, m in rows:
        print(f"| {', '.join(map(str, shape))} | {m['C']:.3f} | {m['raw']:.3f} | "
              f"{m['PyOpenCL']:.3f} | {1e3 * (m['PyOpenCL'] - m['raw']):+.0f} µs | "
              f"{m['NumPy']:.3f} |")


if __name__ == "__main__":
    main()
