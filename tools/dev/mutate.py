#!/usr/bin/env python3
"""Mutation testing of clattn's OpenCL kernels.

Each mutant of tools/dev/mutants.txt (a realistic kernel bug: one or more text
substitutions on cl/) is planted in a temporary copy of cl/, and the test executables of
a build are run against it through CLATTN_KERNEL_DIR, with CLATTN_CACHE_DIR=off so no
program binary built from other sources is reused. The fast tests run first, each
stopped at its first failure; only the mutants that survive them meet the slow tests.
A mutant of the backward kernels (bwd_*.cl) meets test_backward first; a "first: TEST"
line in the list puts that test first for its mutant (test_paged for the paging code).
The unmutated kernels are run first (the baseline): a test that already fails there
cannot kill anything, and is reported.

A mutant of the GPU kernel family's files (a "family: gpu" line in the list) runs its
tests with CLATTN_KERNEL_FAMILY=gpu, and has its own baseline run with that family; a
"blocking: RQ,WG,TILE_KV" line runs them with that CLATTN_BLOCKING (e.g. 1,32,64 for the
backward kernels' one-row and one-key forms, which CPUs do not take by default); an
"env: NAME=VALUE ..." line adds those variables (e.g. CLATTN_BACKWARD_SPLITS=0 for
bwd_dq.cl, which CPUs do not run by default). Each setting has its own baseline. A
"runtime: intel" line marks code only that runtime compiles (fused_gpu.cl's sub-group
reductions: PoCL has no sub-groups); under another runtime the mutant is listed as not
run, not scored.

Usage (from the repository root, after building, e.g. into build-mut):
    python3 tools/dev/mutate.py [--build build-mut] [--runtime intel|pocl]
                                [--only ID[,ID...]] [--fast-only] [--check]

--check only validates the list (every `find` occurs exactly once in its file) and
exits; every run validates it first and stops with status 2 when it does not hold.
Prints one line per mutant as it finishes, then the table (mutant, result, killed by,
time) and the score: killed / non-equivalent mutants. Exit status: 0 when every
non-equivalent mutant was killed, 1 when some survived, 2 for a broken list or setup.
docs/TESTING.md records the last full run.
"""

import argparse
import glob
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CL_DIR = os.path.join(ROOT, "cl")
LIST = os.path.join(HERE, "mutants.txt")

# (name, kind, extra environment); kind "check" = a Check executable in <build>/tests,
# "sh" = a shell test run with CLATTN_BIN. In the order they run: the fast ones first, the
# quickest killers first among them.
FAST = [
    ("test_exact", "check", {}),
    ("test_exact16", "check", {}),
    ("test_features", "check", {}),
    ("test_split", "check", {}),
    ("test_cases", "check", {}),
    ("test_seeds", "check", {}),
    ("test_api", "check", {}),
    ("test_backward", "check", {}),
    ("test_paged", "check", {}),
    ("test_dropout", "check", {}),
    ("test_varlen", "check", {}),
    ("test_invariant", "check", {}),
    ("test_reductions", "check", {}),
    ("test_mods", "check", {}),
]
# the GPU family's mutants: the same tests, test_exact and test_exact16 after the quick
# killers (PoCL builds their many GPU-family programs slowly: 3 minutes with no cache)
FAST_GPU = ["test_features", "test_cases", "test_split", "test_seeds", "test_api", "test_exact",
            "test_exact16", "test_backward", "test_paged", "test_dropout", "test_varlen",
            "test_invariant", "test_reductions", "test_mods"]
SLOW = [
    ("test_positions", "check", {}),
    ("test_random", "check", {}),
    ("test_stress", "check", {"CLATTN_STRESS_N": "60"}),
    ("test_model", "check", {}),
    ("test_multi", "check", {}),
    ("test_cli", "sh", {}),
]

CHECK_RESULT = re.compile(r":([FE]):([^:]*):([^:]*):\d+:")


class ListError(Exception):
    pass


# ------------------------------------------------------------------------- the list


def parse_list(path):
    """The mutants: [{id, what, equivalent, subs: [(file, find, replace)]}]."""
    mutants, cur, sub, block = [], None, None, None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")

    def close_sub():
        nonlocal sub
        if sub is not None:
            if sub["find"] is None or sub["replace"] is None:
                raise ListError(f"{cur['id']}: a substitution lacks find: or replace:")
            cur["subs"].append((sub["file"], "\n".join(sub["find"]), "\n".join(sub["replace"])))
        sub = None

    for n, line in enumerate(lines, 1):
        if line.startswith("|"):
            if sub is None or block is None:
                raise ListError(f"{path}:{n}: text line outside find:/replace:")
            sub[block].append(line[1:])
            continue
        block = None
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("== "):
            if cur:
                close_sub()
                mutants.append(cur)
            parts = line[3:].split(None, 1)
            if len(parts) < 2:
                raise ListError(f"{path}:{n}: '== ID description' expected")
            cur = {"id": parts[0], "what": parts[1].strip(), "equivalent": None, "subs": [],
                   "family": None, "first": None, "blocking": None, "env": None,
                   "runtime": None}
            continue
        if cur is None:
            raise ListError(f"{path}:{n}: text before the first '== ID'")
        if line.startswith("equivalent:"):
            cur["equivalent"] = line.split(":", 1)[1].strip()
        elif line.startswith("first:"):
            cur["first"] = line.split(":", 1)[1].strip()
        elif line.startswith("family:"):
            cur["family"] = line.split(":", 1)[1].strip()
            if cur["family"] not in ("gpu", "cpu"):
                raise ListError(f"{path}:{n}: family: gpu or cpu")
        elif line.startswith("runtime:"):
            cur["runtime"] = line.split(":", 1)[1].strip()
            if cur["runtime"] not in ("intel", "pocl"):
                raise ListError(f"{path}:{n}: runtime: intel or pocl")
        elif line.startswith("blocking:"):
            cur["blocking"] = line.split(":", 1)[1].strip()
        elif line.startswith("env:"):
            cur["env"] = " ".join(sorted(line.split(":", 1)[1].split()))
            if not all(re.fullmatch(r"CLATTN_[A-Z_]+=\S+", e) for e in cur["env"].split()):
                raise ListError(f"{path}:{n}: env: NAME=VALUE ... (CLATTN_ variables)")
        elif line.startswith("file:"):
            close_sub()
            sub = {"file": line.split(":", 1)[1].strip(), "find": None, "replace": None}
        elif line.strip() in ("find:", "replace:"):
            if sub is None:
                raise ListError(f"{path}:{n}: {line.strip()} before file:")
            block = line.strip()[:-1]
            sub[block] = []
        else:
            raise ListError(f"{path}:{n}: cannot read: {line!r}")
    if cur:
        close_sub()
        mutants.append(cur)
    ids = [m["id"] for m in mutants]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ListError(f"duplicate mutant ids: {', '.join(sorted(dup))}")
    return mutants


def validate(mutants, cl_dir):
    """Every substitution's text must occur exactly once in its file (checked on the
    sources as the earlier substitutions of the same mutant leave them)."""
    errors = []
    for m in mutants:
        if not m["subs"]:
            errors.append(f"{m['id']}: no substitution")
        files = {}
        for fname, find, repl in m["subs"]:
            path = os.path.join(cl_dir, fname)
            if fname not in files:
                if not os.path.isfile(path):
                    errors.append(f"{m['id']}: no file cl/{fname}")
                    continue
                with open(path, encoding="utf-8") as f:
                    files[fname] = f.read()
            if not find:
                errors.append(f"{m['id']}: empty find text in {fname}")
                continue
            count = files[fname].count(find)
            if count != 1:
                first = find.split("\n")[0].strip()
                errors.append(f"{m['id']}: cl/{fname}: the find text occurs {count} times "
                              f"(must be exactly once): {first!r}")
                continue
            files[fname] = files[fname].replace(find, repl)
        for fname, text in files.items():
            with open(os.path.join(cl_dir, fname), encoding="utf-8") as f:
                if f.read() == text:
                    errors.append(f"{m['id']}: leaves cl/{fname} unchanged")
    return errors


def plant(m, cl_dir, dest):
    """A copy of cl/ in dest with m's substitutions."""
    for path in glob.glob(os.path.join(cl_dir, "*.cl")):
        shutil.copy(path, dest)
    for fname, find, repl in m["subs"]:
        path = os.path.join(dest, fname)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        assert text.count(find) == 1, (m["id"], fname)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(find, repl))


# ------------------------------------------------------------------------ runtime


def find_intel(explicit):
    cands = [explicit] if explicit else []
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    cands += [os.environ.get("CLATTN_INTEL_OCL_DIR", ""), "/opt/intel-ocl",
              os.path.join(cache, "clattn-intel-ocl")]  # tools/dev/intel-ocl.sh's default
    for c in cands:
        if not c:
            continue
        if os.path.isfile(c) and c.endswith(".so"):
            return c
        hits = sorted(glob.glob(os.path.join(c, "**", "libintelocl.so"), recursive=True))
        if hits:
            return hits[0]
    return None


def runtime_env(runtime, intel_lib):
    env = dict(os.environ)
    if runtime == "intel":
        env["OCL_ICD_FILENAMES"] = intel_lib
        env["OCL_ICD_VENDORS"] = tempfile.mkdtemp(prefix="clattn-no-vendors-")
        libdir = os.path.dirname(intel_lib)
        env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"]
                                           if env.get("LD_LIBRARY_PATH") else "")
    env["CLATTN_CACHE_DIR"] = "off"
    env.pop("CLATTN_BLOCKING", None)
    env.pop("CLATTN_KERNEL_FAMILY", None)  # per mutant (family: in the list)
    env.pop("CLATTN_DECODE_SPLITS", None)
    env.pop("CLATTN_BACKWARD_SPLITS", None)
    env.pop("CLATTN_KERNEL_DIR", None)
    env.pop("CLATTN_DEVICE", None)
    env.pop("CK_RUN_SUITE", None)
    env.pop("CK_RUN_CASE", None)
    return env


# ---------------------------------------------------------------------------- tests


def test_command(build, name, kind):
    if kind == "sh":
        script = os.path.join(ROOT, "tests", name + ".sh")
        clattn = os.path.join(build, "clattn")
        if not (os.path.isfile(script) and os.path.isfile(clattn)):
            return None, {}
        return ["sh", script], {"CLATTN_BIN": clattn}
    exe = os.path.join(build, "tests", name)
    return ([exe], {}) if os.access(exe, os.X_OK) else (None, {})


def run_test(cmd, env, ignore, timeout, stop_early=True):
    """Runs one test program. Returns (failed, why, seconds, failures, tail): failed is
    True when the program showed a failure outside `ignore` (the tests that fail on the
    baseline), crashed or timed out; with stop_early it is stopped at its first such
    failure (Check prints each result as it finishes)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", start_new_session=True, cwd=ROOT)
    lines = queue.Queue()

    def reader():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=reader, daemon=True).start()

    def stop():
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the test we started, and its children
        except ProcessLookupError:
            pass

    failures, first, first_line, tail, timed_out = [], None, "", [], False
    deadline = t0 + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            timed_out = True
            stop()
            break
        if line is None:
            break
        tail = (tail + [line.rstrip("\n")])[-20:]
        mt = CHECK_RESULT.search(line)
        if mt:
            test = f"{mt.group(2)}:{mt.group(3)}"
            if test not in failures:
                failures.append(test)
            if test not in ignore and first is None:
                first = test
                first_line = line.strip()
                if stop_early:
                    stop()
                    break
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        stop()
        rc = proc.wait()
    secs = time.monotonic() - t0
    if first:
        return True, first, secs, failures, [first_line]
    if timed_out:
        return True, f"timeout after {timeout:.0f} s", secs, failures, tail
    if rc != 0 and (not failures or any(f not in ignore for f in failures)):
        why = f"exit status {rc}"
        if rc < 0:
            why = f"killed by signal {-rc} ({signal.Signals(-rc).name})"
        return True, why, secs, failures, tail
    return False, "", secs, failures, tail


# ----------------------------------------------------------------------------- main


def fmt_secs(s):
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=None,
                    help="build folder with tests/ (default: build-mut, else build)")
    ap.add_argument("--runtime", choices=["intel", "pocl"], default=None,
                    help="OpenCL runtime: Intel's CPU runtime (default when found) or PoCL "
                         "(the system ICD)")
    ap.add_argument("--intel", default=None,
                    help="libintelocl.so or a folder holding it (default: $CLATTN_INTEL_OCL_DIR, "
                         "/opt/intel-ocl, ~/.cache/clattn-intel-ocl as tools/dev/intel-ocl.sh "
                         "installs it)")
    ap.add_argument("--only", action="append", default=[],
                    help="run only these mutant IDs (comma-separated; repeatable)")
    ap.add_argument("--fast-only", action="store_true", help="skip the slow tests")
    ap.add_argument("--tests", help="use only these tests (comma-separated names, e.g. "
                    "test_varlen,test_paged): a quicker run for the mutants of one feature")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the unmutated run (then no failure is treated as pre-existing)")
    ap.add_argument("--timeout", type=float, default=900.0,
                    help="seconds per test program (a mutant that hangs is killed by timeout)")
    ap.add_argument("--verbose", "-v", action="store_true",
                    help="print the failure that killed each mutant")
    ap.add_argument("--check", action="store_true", help="validate the list and exit")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--mutants", default=LIST, help="the list (default tools/dev/mutants.txt)")
    args = ap.parse_args()

    try:
        mutants = parse_list(args.mutants)
    except ListError as e:
        print(f"mutate.py: {args.mutants}: {e}", file=sys.stderr)
        return 2
    # one snapshot of cl/ for the whole run (the baseline included), so an edit of cl/
    # during a run cannot mix sources
    snapshot = tempfile.mkdtemp(prefix="clattn-mut-cl-")
    for path in glob.glob(os.path.join(CL_DIR, "*.cl")):
        shutil.copy(path, snapshot)
    try:
        return run(args, mutants, snapshot)
    finally:
        shutil.rmtree(snapshot, ignore_errors=True)


def run(args, mutants, cl_dir):
    errors = validate(mutants, cl_dir)
    if errors:
        print(f"mutate.py: {len(errors)} problem(s) in {os.path.relpath(args.mutants, ROOT)} "
              "(fix the list before running):", file=sys.stderr)
        for e in errors:
            print("  " + e, file=sys.stderr)
        return 2
    n_eq = sum(1 for m in mutants if m["equivalent"])
    if args.check or args.list:
        if args.list:
            for m in mutants:
                files = sorted({s[0] for s in m["subs"]})
                eq = "  [equivalent]" if m["equivalent"] else ""
                fam = f"  [family {m['family']}]" if m["family"] else ""
                print(f"{m['id']:5} {','.join(files):20} {m['what']}{eq}{fam}")
        print(f"{len(mutants)} mutants ({n_eq} marked equivalent); every substitution "
              "matches exactly once")
        return 0

    if args.only:
        want = {x.strip() for o in args.only for x in o.split(",") if x.strip()}
        unknown = want - {m["id"] for m in mutants}
        if unknown:
            print(f"mutate.py: unknown mutant id(s): {', '.join(sorted(unknown))}",
                  file=sys.stderr)
            return 2
        mutants = [m for m in mutants if m["id"] in want]

    build = args.build or next((os.path.join(ROOT, b) for b in ("build-mut", "build")
                                if os.path.isdir(os.path.join(ROOT, b, "tests"))), None)
    if not build or not os.path.isdir(os.path.join(build, "tests")):
        print("mutate.py: no build folder with tests/ (build first, or pass --build)",
              file=sys.stderr)
        return 2
    build = os.path.abspath(build)
    intel = find_intel(args.intel)
    runtime = args.runtime or ("intel" if intel else "pocl")
    if runtime == "intel" and not intel:
        print("mutate.py: --runtime intel: libintelocl.so not found (pip install "
              "intel-opencl-rt intel-cmplr-lib-rt into a venv; pass --intel DIR)",
              file=sys.stderr)
        return 2
    env0 = runtime_env(runtime, intel)
    dev = subprocess.run([os.path.join(build, "clattn"), "devices"], env=env0,
                         capture_output=True, text=True)
    device = next((ln.strip() for ln in dev.stdout.splitlines() if "default" in ln),
                  dev.stdout.strip().split("\n")[0] if dev.stdout else "?")
    rev = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %cd", "--date=short"],
                         capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "cl"],
                           capture_output=True, text=True).stdout.strip()
    print(f"runtime {runtime}" + (f" ({intel})" if runtime == "intel" else "") +
          f"; device {device}; build {build}; cl/ at {rev or '?'}" +
          (" with local changes" if dirty else ""))

    tests = [(n, k, e) for n, k, e in FAST + ([] if args.fast_only else SLOW)
             if not args.tests or n in args.tests.split(",")]
    cmds = {}
    for name, kind, extra in tests:
        cmd, env_extra = test_command(build, name, kind)
        if cmd is None:
            print(f"  (no {name} in the build: skipped)")
            continue
        cmds[name] = (cmd, {**env_extra, **extra})
    fast_names = [n for n, _, _ in FAST if n in cmds]
    slow_names = [n for n, _, _ in SLOW if n in cmds and not args.fast_only]

    t_start = time.monotonic()

    def setting(m):  # the family, CLATTN_BLOCKING and env: a mutant's tests run with
        return ((m["family"] or "") + ("@" + m["blocking"] if m["blocking"] else "")
                + ("%" + m["env"] if m["env"] else ""))

    def family_env(key):
        key, _, env = key.partition("%")
        fam, _, blocking = key.partition("@")
        return {**({"CLATTN_KERNEL_FAMILY": fam} if fam else {}),
                **({"CLATTN_BLOCKING": blocking} if blocking else {}),
                **dict(e.split("=", 1) for e in env.split())}

    families = sorted({setting(m) for m in mutants})
    baseline = {(f, n): set() for f in families for n in cmds}
    if not args.no_baseline:
        for fam in families:
            print(f"baseline (unmutated kernels{', ' + fam if fam else ''}):")
            for name in fast_names + slow_names:
                cmd, extra = cmds[name]
                failed, why, secs, failures, tail = run_test(
                    cmd, {**env0, **extra, **family_env(fam), "CLATTN_KERNEL_DIR": cl_dir}, set(),
                    args.timeout, stop_early=False)
                baseline[(fam, name)] = set(failures)
                state = "passes" if not failed else (
                    f"FAILS ({len(failures)} test(s): {', '.join(failures)})" if failures
                    else f"FAILS: {why}")
                print(f"  {name:15} {state}  [{fmt_secs(secs)}]")
                if failed and not failures:
                    print("mutate.py: a test fails on the unmutated kernels without naming a "
                          "test; fix that first. Its output ends:\n    " + "\n    ".join(tail),
                          file=sys.stderr)
                    return 2

    results = []
    elsewhere = [m for m in mutants if m["runtime"] and m["runtime"] != runtime]
    for m in elsewhere:  # code that only that runtime compiles (e.g. sub-groups: Intel's)
        print(f"{m['id']:5} skipped: needs --runtime {m['runtime']}", flush=True)
    for m in [m for m in mutants if m not in elsewhere]:
        t0 = time.monotonic()
        killer, log, message = None, [], ""
        with tempfile.TemporaryDirectory(prefix=f"clattn-mut-{m['id']}-") as kdir:
            plant(m, cl_dir, kdir)
            fam = setting(m)
            env = {**env0, **family_env(fam), "CLATTN_KERNEL_DIR": kdir}
            order = ([n for n in FAST_GPU if n in fast_names] if m["family"] == "gpu"
                     else fast_names) + slow_names
            if any(f.startswith("bwd_") for f, _, _ in m["subs"]):
                order = ["test_backward"] + [n for n in order if n != "test_backward"]
            if m["first"] in order:
                order = [m["first"]] + [n for n in order if n != m["first"]]
            for name in order:
                cmd, extra = cmds[name]
                failed, why, secs, _, tail = run_test(cmd, {**env, **extra},
                                                      baseline[(fam, name)], args.timeout)
                log.append(f"{name} {fmt_secs(secs)}")
                if failed:
                    killer = f"{name}: {why}"
                    message = tail[-1] if tail else ""
                    break
        secs = time.monotonic() - t0
        status = "killed" if killer else "SURVIVED"
        results.append((m, status, killer or "-", secs))
        eq = " (marked equivalent)" if m["equivalent"] else ""
        print(f"{m['id']:5} {status:8} {fmt_secs(secs):>8}  {killer or 'ran: ' + ', '.join(log)}"
              f"{eq}", flush=True)
        if args.verbose and message:
            print(f"      {message[:400]}", flush=True)

    total = time.monotonic() - t_start
    print()
    print(f"| mutant | what | result | killed by | time |")
    print(f"|---|---|---|---|---|")
    for m, status, killer, secs in results:
        res = status + (" (equivalent)" if m["equivalent"] else "")
        print(f"| {m['id']} | {m['what']} | {res} | {killer} | {fmt_secs(secs)} |")
    scored = [r for r in results if not r[0]["equivalent"]]
    killed = sum(1 for r in scored if r[1] == "killed")
    survivors = [r[0]["id"] for r in scored if r[1] != "killed"]
    eq_killed = [r[0]["id"] for r in results if r[0]["equivalent"] and r[1] == "killed"]
    print()
    print(f"score: {killed}/{len(scored)} non-equivalent mutants killed"
          f"{' (fast tests only)' if args.fast_only else ''}; "
          f"{sum(1 for r in results if r[0]['equivalent'])} marked equivalent; "
          f"runtime {runtime}; {fmt_secs(total)}")
    if elsewhere:
        print("not run here (another runtime): " + ", ".join(m["id"] for m in elsewhere))
    if survivors:
        print("survivors: " + ", ".join(survivors))
    if eq_killed:
        print("marked equivalent but killed (the judgement is wrong, or a test is flaky): " +
              ", ".join(eq_killed))
    return 0 if not survivors else 1


if __name__ == "__main__":
    sys.exit(main())
