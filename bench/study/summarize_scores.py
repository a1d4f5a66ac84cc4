"""Markdown tables of the storm study (bench/run_forcing_study.sh): each variant's last validation
(validation.csv, written by wxtrain train) averaged over the seeds, per variable and lead.

    summarize_scores.py OUT_DIR VARIANT...   (OUT_DIR holds VARIANT-SEED/validation.csv)
"""
import collections
import csv
import glob
import os
import sys


def last_validation(path):
    rows = list(csv.DictReader(open(path)))
    last = max(int(r["step"]) for r in rows)
    return [r for r in rows if int(r["step"]) == last]


def main():
    out, variants = sys.argv[1], sys.argv[2:]
    # scores[(variant or reference forecaster, variable, lead)] -> {"rmse": [...], "acc": [...]}
    scores = collections.defaultdict(lambda: {"rmse": [], "acc": []})
    hours = {}
    order = []
    for variant in variants:
        runs = sorted(glob.glob(os.path.join(out, variant + "-*", "validation.csv")))
        if not runs:
            sys.exit(f"no validation.csv for {variant} in {out}")
        for path in runs:
            for r in last_validation(path):
                key_name = variant if r["forecaster"] == "model" else r["forecaster"]
                if r["forecaster"] != "model" and variant != variants[0]:
                    continue  # persistence and climatology do not depend on the variant
                key = (key_name, r["variable"], int(r["lead"]))
                scores[key]["rmse"].append(float(r["rmse"]))
                scores[key]["acc"].append(float(r["acc"]))
                hours[int(r["lead"])] = r["lead_hours"]
                if r["variable"] not in order:
                    order.append(r["variable"])
    columns = ["persistence", "climatology"] + variants
    mean = lambda v: sum(v) / len(v)
    for metric, title in (("rmse", "RMSE (data units, lower is better)"), ("acc", "ACC (1 is perfect)")):
        cols = [c for c in columns if not (metric == "acc" and c == "climatology")]
        print(f"\n{title}, mean of {len(runs)} seeds\n")
        print("| variable | lead | " + " | ".join(cols) + " |")
        print("|---|---|" + "---|" * len(cols))
        for variable in order:
            for lead in sorted(hours):
                cells = []
                for c in cols:
                    v = scores.get((c, variable, lead))
                    cells.append(f"{mean(v[metric]):.4g}" if v else "")
                print(f"| {variable} | {hours[lead]} h | " + " | ".join(cells) + " |")
    # One line per variant: the mean over variables of 1 - model / persistence RMSE, per lead.
    print("\nSkill against persistence (1 - RMSE / persistence RMSE, mean over variables)\n")
    print("| variant | " + " | ".join(f"{hours[l]} h" for l in sorted(hours)) + " |")
    print("|---|" + "---|" * len(hours))
    for variant in variants:
        cells = []
        for lead in sorted(hours):
            skill = [1 - mean(scores[(variant, v, lead)]["rmse"]) / mean(scores[("persistence", v, lead)]["rmse"])
                     for v in order]
            cells.append(f"{100 * mean(skill):.1f}%")
        print(f"| {variant} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
