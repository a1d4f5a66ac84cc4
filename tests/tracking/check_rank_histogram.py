"""check_rank_histogram.py tensorboard RUN_DIR | mlflow URI RUN_DIR - an ensemble run's rank
histograms as a tracking sink holds them, read back with the sink's own reader (TensorBoard's
EventAccumulator, MLflow's client), against the counts of the run's validation.csv: at every
validation step, for every variable and for the leads validation.svg draws (the first, middle and
last), the scalars val/rank_hist/<variable>/<lead>/rank_<k> are the relative frequencies
count_k x bins / total (1 = flat), to float32 precision. Exit 1 at the first mismatch."""
import csv
import math
import sys

sink = sys.argv[1]
if sink == "tensorboard":
    run_dir = sys.argv[2]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])

    def history(tag):
        return {e.step: e.value for e in acc.Scalars(tag)} if tag in tags else {}
elif sink == "mlflow":
    uri, run_dir = sys.argv[2], sys.argv[3]
    import json

    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    run_id = json.load(open(run_dir + "/mlflow/state.json"))["run_id"]
    tags = set(client.get_run(run_id).data.metrics)

    def history(tag):
        return {m.step: m.value for m in client.get_metric_history(run_id, tag)} if tag in tags else {}
else:
    sys.exit(f"usage: {sys.argv[0]} tensorboard RUN_DIR | mlflow URI RUN_DIR")


def fail(what):
    sys.exit(f"FAIL: {sink} {run_dir}: {what}")


rows = [r for r in csv.DictReader(open(run_dir + "/validation.csv")) if r["forecaster"] == "model"]
if not rows or "rank_0" not in rows[0]:
    fail("validation.csv has no rank histogram (not an ensemble run?)")
bins = sum(1 for k in rows[0] if k.startswith("rank_"))
leads = sorted({int(r["lead"]) for r in rows})
drawn = sorted({leads[0], leads[(len(leads) - 1) // 2], leads[-1]})
checked = 0
for r in rows:
    lead = int(r["lead"])
    name = f"{float(r['lead_hours']):g}h" if r["lead_hours"] else f"step{lead}"
    counts = [float(r[f"rank_{k}"]) for k in range(bins)]
    total = sum(counts)
    for k in range(bins):
        tag = f"val/rank_hist/{r['variable']}/{name}/rank_{k}"
        logged = history(tag)
        if lead not in drawn:
            if logged:
                fail(f"{tag} logged, but lead {lead} is not one of the drawn leads {drawn}")
            continue
        step = int(r["step"])
        if step not in logged:
            fail(f"{tag} has no value at validation step {step} (has {sorted(logged)}; tags like it: "
                 f"{sorted(t for t in tags if t.startswith('val/rank_hist/'))[:4]})")
        expected = counts[k] * bins / total
        if not math.isclose(logged[step], expected, rel_tol=1e-6, abs_tol=1e-6):
            fail(f"{tag} at step {step} is {logged[step]}, validation.csv's counts {counts} give {expected}")
        checked += 1
flat = [float(r[f"rank_{k}"]) for r in rows[:1] for k in range(bins)]
print(f"ok: {sink}: {checked} rank-histogram scalars ({bins} bins, leads {drawn} of {leads}) equal to "
      f"validation.csv's relative frequencies; first row's counts {flat}")
