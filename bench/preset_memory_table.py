#!/usr/bin/python3
"""The memory table of the published configurations (docs/estimator.md, "Presets").

    bench/preset_memory_table.py [--wxtrain build/cli/wxtrain] [PRESET ...]

For every preset named (default: the four below), runs `wxtrain estimate --json` at micro-batch 1 for
training (fp32, bf16-mixed, fp16-mixed; checkpointing off and per block, and at rollout 12 also per block
and per rollout step (train.rollout_checkpointing); rollout 1 and 12) and inference
(the three precisions), all by the analytic formulas, and prints a Markdown table: the per-rank total at batch 1 on an H100
(model states, activations, GPU overhead), the smallest catalog GPU where batch 1 fits, and the
largest batch on an A100 80GB and an H100. Nothing is measured here: these are the estimator's
answers, which docs/estimator.md sets beside what the papers report.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

PRESETS = ["graphcast-0.25", "graphcast-1.0", "pangu-0.25", "fourcastnet-0.25"]
GiB = 1024.0**3


# Checkpointing levels: off, per block (train.checkpointing), per block and per rollout step
# (train.rollout_checkpointing as well; only meaningful with a rollout).
CHECKPOINTING = {"off": (False, False), "blocks": (True, False), "blocks + steps": (True, True)}


def estimate(wxtrain, preset, mode, precision, checkpointing, rollout):
    blocks, steps = CHECKPOINTING[checkpointing]
    text = f'[model]\npreset = "{preset}"\n[train]\nbatch_size = 1\nprecision = "{precision}"\n'
    text += f"checkpointing = {'true' if blocks else 'false'}\n"
    text += f"rollout_checkpointing = {'true' if steps else 'false'}\n"
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        # --analytic: the formulas for every row (tracing these sizes on a CPU takes minutes per row;
        # the formulas are checked against traces at small sizes, tests/estimator).
        cmd = [wxtrain, "estimate", "--config", path, "--json", "--analytic", "--mode", mode]
        if mode == "train":
            cmd += ["--set", f"data.rollout_steps={rollout}"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            # A run that fits no GPU in the catalog is an error with the size it needs.
            need = re.search(r"needs ([0-9.]+) GiB per rank and fits no GPU", out.stderr)
            if not need:
                sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")
            return {"fits_none": float(need.group(1))}
        return json.loads(out.stdout)
    finally:
        os.unlink(path)


def row(preset, mode, precision, ckpt, rollout, d):
    ck = ckpt if mode == "train" else "-"
    ro = str(rollout) if mode == "train" else "-"
    if "fits_none" in d:
        return f"| {preset} | {mode} | {precision} | {ck} | {ro} | | | {d['fits_none']:.2f} (largest GPU's total) | none | 0 | 0 |"
    gpus = {g["name"]: g for g in d["gpus"]}
    h100 = gpus["H100"]
    fitting = sorted((g for g in d["gpus"] if g["fits"]), key=lambda g: g["memory_bytes"])
    smallest = fitting[0]["label"] if fitting else "none"
    total = h100["at_batch"]["total_bytes"] / GiB
    states = (h100["at_batch"]["params_bytes"] + h100["at_batch"]["grads_bytes"] + h100["at_batch"]["optimizer_bytes"]) / GiB
    act = h100["at_batch"]["activations_bytes"] / GiB
    return (f"| {preset} | {mode} | {precision} | {ck} | {ro} | {states:.2f} | {act:.2f} | {total:.2f} | {smallest} | "
            f"{gpus['A100-80']['max_batch']} | {h100['max_batch']} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wxtrain", default="build/cli/wxtrain")
    ap.add_argument("presets", nargs="*", default=PRESETS)
    args = ap.parse_args()
    print("| preset | mode | precision | ckpt | rollout | model states GiB | activations GiB (batch 1) | "
          "total on an H100 GiB | smallest GPU for batch 1 | max batch A100 80GB | max batch H100 |")
    print("|---|---|---|---|---:|---:|---:|---:|---|---:|---:|")
    for preset in args.presets:
        first = None
        for precision in ["fp32", "bf16-mixed", "fp16-mixed"]:
            for ckpt, rollout in [("off", 1), ("off", 12), ("blocks", 1), ("blocks", 12), ("blocks + steps", 12)]:
                d = estimate(args.wxtrain, preset, "train", precision, ckpt, rollout)
                first = first or (d if "parameters" in d else None)
                print(row(preset, "train", precision, ckpt, rollout, d), flush=True)
        for precision in ["fp32", "bf16-mixed", "fp16-mixed"]:
            d = estimate(args.wxtrain, preset, "inference", precision, "off", 1)
            print(row(preset, "inference", precision, "off", 1, d), flush=True)
        if first:
            print(f"<!-- {preset}: {first['parameters']} parameters, {first['method']} -->", flush=True)


if __name__ == "__main__":
    main()
