"""check_mlflow.py URI RUN_DIR [--keys-like OTHER_RUN_DIR] - reads a run's MLflow record back with
MLflow's own Python client and checks it against the run folder:
  - the parameters are the run file's values (run.toml, flattened: train.lr, data.sources.0.file);
  - every step of metrics.csv has its loss logged, equal to the CSV's (8 significant digits), once;
  - lr, memory and samples/s are logged per step; validation scores (val/rmse/<var>/<lead>,
    val/acc/...) at the steps validation.csv has;
  - the artifacts hold validation.svg, run.toml and metrics.csv; the command line and versions are
    tags; the run is FINISHED.
With --keys-like, the metric keys must also be those of OTHER_RUN_DIR's run (a run of the same
data: the same series).
Exit 1 at the first mismatch."""
import csv
import json
import sys
import tomllib

from mlflow.tracking import MlflowClient

uri, run_dir = sys.argv[1], sys.argv[2]
other = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--keys-like" else None
client = MlflowClient(uri)


def fail(what):
    sys.exit(f"FAIL: {run_dir}: {what}")


def run_of(folder):
    state = json.load(open(folder + "/mlflow/state.json"))
    return client.get_run(state["run_id"])


def flatten(table, prefix=""):
    out = {}
    for key, value in table.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out.update(flatten(value, name))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, v in enumerate(value):
                out.update(flatten(v, f"{name}.{i}"))
        else:
            out[name] = value
    return out


def same_value(logged, value):
    if isinstance(value, str):
        return logged == value
    return tomllib.loads("v = " + logged)["v"] == value  # numbers, booleans and arrays as TOML text


run = run_of(run_dir)
run_id = run.info.run_id
if run.info.status != "FINISHED":
    fail(f"status {run.info.status}, expected FINISHED")
expected = flatten(tomllib.load(open(run_dir + "/run.toml", "rb")))
params = run.data.params
if set(params) != set(expected):
    fail(f"parameters {sorted(set(params) ^ set(expected))} differ between MLflow and run.toml")
for key, value in expected.items():
    if not same_value(params[key], value):
        fail(f"parameter {key} = {params[key]!r} in MLflow, {value!r} in run.toml")

rows = list(csv.DictReader(open(run_dir + "/metrics.csv")))
history = client.get_metric_history(run_id, "loss")
by_step = {}
for m in history:
    by_step.setdefault(m.step, []).append(m.value)
if sorted(by_step) != [int(r["step"]) for r in rows]:
    fail(f"loss logged at steps {sorted(by_step)}, metrics.csv has {[int(r['step']) for r in rows]}")
for r in rows:
    values = by_step[int(r["step"])]
    if len(values) != 1:
        fail(f"step {r['step']}: {len(values)} loss values {values}")
    if float("%.8g" % values[0]) != float(r["loss"]):
        fail(f"step {r['step']}: MLflow's loss {values[0]!r} != metrics.csv's {r['loss']}")
for key in ["lr", "grad_norm", "samples_per_s", "memory/peak_GB", "memory/allocated_GB"]:
    if len(client.get_metric_history(run_id, key)) != len(rows):
        fail(f"{key} is not logged at every step")

metrics = run.data.metrics
val_keys = sorted(k for k in metrics if k.startswith("val/rmse/"))
acc_keys = [k for k in metrics if k.startswith("val/acc/")]
if not val_keys or not acc_keys:
    fail(f"no validation scores among {sorted(metrics)}")
val_steps = sorted({m.step for m in client.get_metric_history(run_id, val_keys[0])})
csv_steps = sorted({int(r["step"]) for r in csv.DictReader(open(run_dir + "/validation.csv"))})
if val_steps != csv_steps:
    fail(f"{val_keys[0]} at steps {val_steps}, validation.csv at {csv_steps}")

# A deterministic model's MAE (its CRPS) per variable and lead: val/mae/<variable>/<lead> equals
# validation.csv's `mae` of the model at the last validation.
rows_csv = list(csv.DictReader(open(run_dir + "/validation.csv")))
last = max(int(r["step"]) for r in rows_csv)
checked = 0
for r in rows_csv:
    if int(r["step"]) != last or r["forecaster"] != "model":
        continue
    lead = f"{float(r['lead_hours']):g}h" if r["lead_hours"] else f"step{r['lead']}"
    key = f"val/mae/{r['variable']}/{lead}"
    if key not in metrics:
        fail(f"{key} missing: the run's val/mae keys are {sorted(k for k in metrics if k.startswith('val/mae/'))}")
    if abs(metrics[key] - float(r["mae"])) > 1e-4 * max(1.0, abs(float(r["mae"]))):
        fail(f"{key} = {metrics[key]}, validation.csv's mae {r['mae']}")
    checked += 1
if not checked:
    fail("no model rows at the last validation in validation.csv")

artifacts = {a.path for a in client.list_artifacts(run_id)}
for name in ["validation.svg", "run.toml", "metrics.csv", "command.txt"]:
    if name not in artifacts:
        fail(f"artifact {name} missing: the run has {sorted(artifacts)}")
tags = run.data.tags
for tag in ["wxtrain.command", "wxtrain.version", "wxtrain.libtorch", "purpose"]:
    if tag not in tags:
        fail(f"tag {tag} missing: {sorted(tags)}")

if other:
    o = run_of(other)
    if set(o.data.metrics) != set(metrics):
        fail(f"metric keys differ from {other}'s: {sorted(set(o.data.metrics) ^ set(metrics))}")
print(f"ok: {run_dir}: run {run_id} FINISHED; {len(params)} parameters = run.toml; loss at {len(rows)} steps "
      f"= metrics.csv; {len(val_keys)} RMSE series at steps {val_steps}; artifacts {sorted(artifacts)}")
