#!/usr/bin/env python3
"""`wxtrain estimate --json` on every run file in configs/, traced and analytic, kept for comparison.

    bench/estimate_configs.py run --wxtrain build/cli/wxtrain --out DIR [CONFIG ...]
    bench/estimate_configs.py compare DIR_BEFORE DIR_AFTER

`run` writes DIR/<config>.<method>.json for each run file (method: trace, analytic). The figures
that measure this process rather than the run are left out: the time it took, and the CPU
column's fixed overhead, which is the estimating process's resident set (estimator/cpu_overhead.h)
and differs from one run to the next. Everything else is a pure function of the run file and the code: a refactoring must leave it
as it was, to the byte. `compare` prints every difference and exits 1 if there is one.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

# Figures of the estimating process itself (its resident set, how long it took), not of the run.
PROCESS_FIELDS = {("cpu", "overhead_bytes"), ("cpu", "total_bytes"), ("cpu_overhead", "process_bytes")}


def strip_process_figures(d):
    for section, key in PROCESS_FIELDS:
        if isinstance(d.get(section), dict):
            d[section].pop(key, None)
    d.pop("seconds", None)
    return d


def run(args):
    os.makedirs(args.out, exist_ok=True)
    configs = args.configs or sorted(glob.glob("configs/*.toml"))
    if not os.path.exists("build/era5_fixture/era5.zarr"):  # configs/era5_fixture_*.toml read it
        subprocess.run(["/usr/bin/python3", "tests/data/era5_fixture.py", "build/era5_fixture"], check=True,
                       stdout=subprocess.DEVNULL)
    for config in configs:
        name = os.path.splitext(os.path.basename(config))[0]
        for method, flags in (("trace", []), ("analytic", ["--analytic"])):
            cmd = [args.wxtrain, "estimate", "--json", "--config", config] + flags
            p = subprocess.run(cmd, capture_output=True, text=True)
            path = os.path.join(args.out, f"{name}.{method}.json")
            if p.returncode != 0:
                # An error is a result too: the same run file must fail the same way.
                result = {"exit_code": p.returncode, "stderr": p.stderr.strip()}
            else:
                result = strip_process_figures(json.loads(p.stdout))
            with open(path, "w") as f:
                json.dump(result, f, indent=1, sort_keys=True)
                f.write("\n")
            print(f"{path}: {'exit ' + str(p.returncode) if p.returncode else 'ok'}", flush=True)


def diff(a, b, where=""):
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append(f"{where}.{k}: {'missing before' if k not in a else 'missing after'}")
            else:
                out += diff(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} -> {b!r}"]


def compare(args):
    before = {os.path.basename(p) for p in glob.glob(os.path.join(args.before, "*.json"))}
    after = {os.path.basename(p) for p in glob.glob(os.path.join(args.after, "*.json"))}
    problems = [f"{n}: only before" for n in sorted(before - after)] + [f"{n}: only after" for n in sorted(after - before)]
    for name in sorted(before & after):
        with open(os.path.join(args.before, name)) as f:
            a = json.load(f)
        with open(os.path.join(args.after, name)) as f:
            b = json.load(f)
        for d in (a, b):
            d.pop("config", None)  # the path it was given
            strip_process_figures(d)
        problems += [f"{name} {d}" for d in diff(a, b)]
    for p in problems:
        print(p)
    print(f"{len(before & after)} estimates compared, {len(problems)} differences")
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--wxtrain", default="build/cli/wxtrain")
    r.add_argument("--out", required=True)
    r.add_argument("configs", nargs="*")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = ap.parse_args()
    sys.exit(run(args) if args.command == "run" else compare(args))


if __name__ == "__main__":
    main()
