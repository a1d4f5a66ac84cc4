"""Markdown tables of the ensemble benchmark (bench/run_ensemble_bench.sh): the last validation of
the MSE model and of the afCRPS ensemble on one dataset, per lead and variable.

    ensemble_table.py DATASET MSE_VALIDATION_CSV ENSEMBLE_VALIDATION_CSV

The MSE model's CRPS is its MAE (a deterministic forecast's CRPS): the `mae` column of its
validation.csv, scored by the same code (trainer/scores.cpp), latitude weights and validation
samples as the ensemble's fair CRPS (`crps` column). Prints, per lead and variable, the MSE
model's MAE, the ensemble's CRPS, their ratio (below 1: the ensemble wins), the ensemble's
spread/skill and persistence's MAE for scale; then per lead the geometric mean of the ratio over
the variables (variables have different units, so CRPS itself is not averaged) and the mean
spread/skill, and a verdict per lead: "met" when every variable's ratio is below 1 (leads beyond
the first) and every spread/skill lies in [0.5, 1.5].
"""
import csv
import math
import sys


def last_validation(path):
    rows = list(csv.DictReader(open(path)))
    last = max(int(r["step"]) for r in rows)
    return last, [r for r in rows if int(r["step"]) == last]


def main():
    dataset, mse_path, ens_path = sys.argv[1:4]
    mse_step, mse = last_validation(mse_path)
    ens_step, ens = last_validation(ens_path)
    if "mae" not in mse[0]:
        sys.exit(f"{mse_path} has no mae column: built before trainer/scores.cpp wrote it")
    det = {(int(r["lead"]), r["variable"], r["forecaster"]): r for r in mse}
    en = {(int(r["lead"]), r["variable"], r["forecaster"]): r for r in ens}
    leads = sorted({k[0] for k in en})
    variables = []
    for r in ens:
        if r["variable"] not in variables:
            variables.append(r["variable"])
    hours = {int(r["lead"]): r["lead_hours"] for r in ens}
    print(f"### {dataset}\n")
    print(f"Last validation (MSE model at step {mse_step}, ensemble at step {ens_step}), "
          f"{len(variables)} variables; CRPS in each variable's units.\n")
    print("| lead | variable | MSE model CRPS (=MAE) | ensemble CRPS | ratio | ensemble spread/skill | "
          "ensemble-mean RMSE | MSE model RMSE | persistence MAE |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary = []
    for lead in leads:
        ratios, ss, crps_ok, ss_ok = [], [], True, True
        for v in variables:
            d, e, p = det[(lead, v, "model")], en[(lead, v, "model")], en[(lead, v, "persistence")]
            mae, crps, s = float(d["mae"]), float(e["crps"]), float(e["spread_skill"])
            ratio = crps / mae
            ratios.append(ratio)
            ss.append(s)
            if lead > 1 and not ratio < 1:
                crps_ok = False
            if not 0.5 <= s <= 1.5:
                ss_ok = False
            label = f"{hours[lead]} h" if hours[lead] else str(lead)
            print(f"| {label} | {v} | {mae:.4g} | {crps:.4g} | {ratio:.3f} | {s:.3f} | "
                  f"{float(e['rmse']):.4g} | {float(d['rmse']):.4g} | {float(p['crps']):.4g} |")
        gm = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        summary.append((lead, gm, sum(ss) / len(ss), min(ss), max(ss), max(ratios), crps_ok, ss_ok))
    print("\nPer lead, over the variables: geometric mean and worst (largest) CRPS ratio, mean and range of "
          "spread/skill; verdict: CRPS lower at every variable (required beyond the first lead) and "
          "spread/skill within 0.5-1.5 at every variable.\n")
    print("| lead | ratio (geo. mean) | worst ratio | spread/skill mean | spread/skill range | CRPS lower | spread/skill in 0.5-1.5 |")
    print("|---|---|---|---|---|---|---|")
    for lead, gm, ssm, lo, hi, worst, crps_ok, ss_ok in summary:
        label = f"{hours[lead]} h" if hours[lead] else str(lead)
        crps_text = ("met" if crps_ok else "NOT met") if lead > 1 else ("yes" if worst < 1 else "no") + " (not required)"
        print(f"| {label} | {gm:.3f} | {worst:.3f} | {ssm:.3f} | {lo:.2f}-{hi:.2f} | {crps_text} | "
              f"{'met' if ss_ok else 'NOT met'} |")
    print()


if __name__ == "__main__":
    main()
