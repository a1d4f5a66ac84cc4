#!/usr/bin/env python3
"""Peak RSS of real CPU training steps against `wxtrain estimate`'s CPU column (docs/benchmarks.md).

For every model and precision it runs `wxtrain profile` (real TrainingStep calls on synthetic
micro-batches, train.device = "cpu") at each batch size and reads the process's peak resident set
from the kernel (wait4's ru_maxrss: the same figure as /usr/bin/time -v's "Maximum resident set
size"), an independent meter: it sees every page the process touched, whoever allocated it. The
growth per sample between the smallest and the largest batch is set beside the estimate's
(`wxtrain estimate --json --batch B` at the same two batches), with and without its CPU overhead line.

glibc keeps freed memory unless told otherwise, which would make the RSS depend on the history of
the heap rather than on what the step needs at once; every run (profile and estimate) gets the
same settings, so freed blocks go back to the system: MALLOC_TRIM_THRESHOLD_=0 (trim the heap's
top at every free), MALLOC_MMAP_THRESHOLD_=65536 (blocks of 64 KiB and more are their own mappings,
unmapped when freed; a fixed threshold also stops glibc from raising it as big blocks are freed),
MALLOC_TOP_PAD_=0. OMP_NUM_THREADS is fixed too: per-thread buffers are part of what is measured.

Standard library only: runs with any python3.
"""
import argparse
import json
import os
import subprocess
import sys

MiB = 1024.0 * 1024.0
GLIBC = {"MALLOC_TRIM_THRESHOLD_": "0", "MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TOP_PAD_": "0"}


def run_env(threads):
    env = dict(os.environ)
    env.update(GLIBC)
    env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_measured(cmd, env):
    """Runs cmd; returns (stdout, peak RSS in bytes). wait4 reports this child's own rusage."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = p.stdout.read(), p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit("error: " + " ".join(cmd) + f" exited with {p.returncode}:\n" + err.decode(errors="replace")[-2000:])
    return out.decode(), usage.ru_maxrss * 1024  # ru_maxrss is in KiB on Linux


def settings(model, precision, batch):
    return ["--config", f"configs/storm_{model}.toml", "--set", "train.device=cpu",
            "--set", f"train.precision={precision}", "--set", f"train.batch_size={batch}"]


def measure(args, model, precision, batch, env):
    prof, rss = run_measured([args.wxtrain, "profile", *settings(model, precision, batch),
                              "--steps", str(args.steps), "--json"], env)
    p = json.loads(prof)
    est, _ = run_measured([args.wxtrain, "estimate", *settings(model, precision, batch), "--batch", str(batch),
                           "--memory", "1TiB", "--json"], env)
    e = json.loads(est)
    cpu = e["cpu"]
    return {"model": model, "precision": precision, "batch": batch, "rss_bytes": rss,
            "counted_peak_bytes": p["peak_bytes"],
            "counted_reserved_bytes": max(s["reserved_bytes"] for s in p["steps"]) if p["steps"] and "reserved_bytes" in p["steps"][0] else None,
            "estimate_allocated_bytes": cpu["total_bytes"] - cpu["overhead_bytes"],
            "estimate_total_bytes": cpu["total_bytes"],
            "estimate_overhead": e.get("cpu_overhead")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wxtrain", default="build/cli/wxtrain")
    ap.add_argument("--models", nargs="+", default=["unet", "vit", "gnn"])
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16-mixed"])
    ap.add_argument("--batches", nargs="+", type=int, default=[16, 48])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="also write every measurement to this file")
    args = ap.parse_args()
    if len(args.batches) < 2 or sorted(args.batches) != args.batches:
        sys.exit("error: --batches needs at least two batch sizes in ascending order")
    env = run_env(args.threads)
    rows, raw = [], []
    for m in args.models:
        for prec in args.precisions:
            pts = [measure(args, m, prec, b, env) for b in args.batches]
            raw.extend(pts)
            a, b = pts[0], pts[-1]
            db = b["batch"] - a["batch"]
            per = lambda key: (b[key] - a[key]) / db  # noqa: E731
            rss, counted = per("rss_bytes"), per("counted_peak_bytes")
            est_alloc, est_total = per("estimate_allocated_bytes"), per("estimate_total_bytes")
            rows.append((m, prec, a["rss_bytes"], b["rss_bytes"], rss, counted, est_alloc, est_total,
                         100.0 * (est_total - rss) / rss, b["estimate_total_bytes"] - b["rss_bytes"]))
            print(f"{m} {prec}: " + ", ".join(f"batch {p['batch']} RSS {p['rss_bytes'] / MiB:.1f} MiB, counted peak "
                                                 f"{p['counted_peak_bytes'] / MiB:.1f} MiB" for p in pts), file=sys.stderr)
    b0, b1 = args.batches[0], args.batches[-1]
    print(f"| model | precision | peak RSS b{b0} (MiB) | peak RSS b{b1} (MiB) | RSS MiB/sample | counted MiB/sample "
          f"| estimate without overhead MiB/sample | estimate MiB/sample | error | estimate - RSS at b{b1} (MiB) |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for m, prec, r0, r1, rss, counted, ea, et, err, gap in rows:
        print(f"| {m} | {prec} | {r0 / MiB:.0f} | {r1 / MiB:.0f} | {rss / MiB:.3f} | {counted / MiB:.3f} | {ea / MiB:.3f} "
              f"| {et / MiB:.3f} | {err:+.1f}% | {gap / MiB:+.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=1)
    worst = max(abs(r[8]) for r in rows)
    print(f"\nworst per-sample error {worst:.1f}% (target: within 10%)")
    return 0 if worst <= 10.0 else 1


if __name__ == "__main__":
    sys.exit(main())
