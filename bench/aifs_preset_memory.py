#!/usr/bin/python3
"""AIFS Single 1.0's memory by the analytic formulas (docs/estimator.md, "AIFS Single 1.0").

    bench/aifs_preset_memory.py [--wxtrain build/cli/wxtrain]

Runs `wxtrain estimate --analytic --batch 1 --gpu H100 --json` on `preset = "aifs-single-1.0"` (the
N320 grid generated from the run file, no data) for inference and training with mapper chunks and
checkpointing, and prints the rows of the table in GB (10^9 bytes, as Earth2Studio quotes), each with
the --set arguments that reproduce it. Nothing is measured: these are the estimator's answers.
"""
import argparse
import json
import subprocess
import tempfile

ROWS = [
    # mode, precision, mapper chunks, checkpointing, processor checkpoints (model.processor_chunks)
    ("inference", "fp32", 1, False, 1),
    ("inference", "bf16", 1, False, 1),
    ("inference", "fp32", 4, False, 1),
    ("inference", "bf16", 4, False, 1),
    ("train", "bf16-mixed", 1, True, 1),
    ("train", "bf16-mixed", 4, True, 1),
    ("train", "bf16-mixed", 1, True, 16),
    ("train", "bf16-mixed", 4, True, 16),
    ("train", "bf16-mixed", 16, True, 16),
    ("train", "bf16-mixed", 4, False, 1),
    ("train", "fp32", 4, True, 16),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wxtrain", default="build/cli/wxtrain")
    args = ap.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write('[model]\npreset = "aifs-single-1.0"\n')
        path = f.name
    print("| mode | precision | mapper chunks | checkpointing | processor checkpoints | states GB | activations GB | overhead GB | total GB | `--set` |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---|")
    for mode, precision, chunks, ckpt, processor in ROWS:
        sets = [f"train.precision={precision}", f"model.encoder_chunks={chunks}", f"model.decoder_chunks={chunks}"]
        if mode == "train":
            sets.append(f"train.checkpointing={'true' if ckpt else 'false'}")
            if processor > 1:
                sets.append(f"model.processor_chunks={processor}")
        cmd = [args.wxtrain, "estimate", "--config", path, "--analytic", "--batch", "1", "--gpu", "H100", "--json",
               "--mode", mode]
        for s in sets:
            cmd += ["--set", s]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if not out.stdout.strip():
            raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr}")
        b = json.loads(out.stdout)["gpus"][0]["at_batch"]
        states = (b["params_bytes"] + b["grads_bytes"] + b["optimizer_bytes"]) / 1e9
        print(f"| {mode} | {precision} | {chunks} | {'per chunk' if ckpt else ('off' if mode == 'train' else '-')} | "
              f"{processor if mode == 'train' and ckpt else '-'} | "
              f"{states:.1f} | {b['activations_bytes'] / 1e9:.1f} | {b['overhead_bytes'] / 1e9:.1f} | "
              f"{b['total_bytes'] / 1e9:.1f} | `{' '.join('--set ' + s for s in sets)}` |", flush=True)


if __name__ == "__main__":
    main()
