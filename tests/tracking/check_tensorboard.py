"""check_tensorboard.py RUN_DIR [STEPS] - reads a run's TensorBoard event files with TensorBoard's
own reader (EventAccumulator: TFRecord framing, CRC checks, Event protos) and checks them against
the run's metrics.csv: every step once, each loss equal to the CSV's at float32 precision
(TensorBoard's scalars are float32), the step metrics and the validation scores there.
Prints what it checked; exit 1 at the first mismatch."""
import csv
import glob
import math
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

run_dir = sys.argv[1]
files = sorted(glob.glob(run_dir + "/events.out.tfevents.*"))
if not files:
    sys.exit(f"FAIL: no event file in {run_dir}")
acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
acc.Reload()
tags = acc.Tags()["scalars"]
rows = list(csv.DictReader(open(run_dir + "/metrics.csv")))
csv_steps = [int(r["step"]) for r in rows]
loss = acc.Scalars("loss")
tb_steps = [e.step for e in loss]
if tb_steps != csv_steps:
    sys.exit(f"FAIL: TensorBoard has loss at steps {tb_steps}, metrics.csv at {csv_steps}")
for e, r in zip(loss, rows):
    expected = float(r["loss"])
    # metrics.csv keeps 8 significant digits, TensorBoard a float32: equal to within one float32 step.
    if abs(e.value - expected) > 2.0 ** -23 * abs(expected):
        sys.exit(f"FAIL: step {e.step}: TensorBoard's loss {e.value!r} != metrics.csv's {expected!r}")
for tag, column in [("lr", "lr"), ("grad_norm", "grad_norm"), ("memory/peak_GB", "peak_GB")]:
    values = [e.value for e in acc.Scalars(tag)]
    for v, r in zip(values, rows):
        if not math.isclose(v, float(r[column]), rel_tol=1e-5, abs_tol=1e-6):
            sys.exit(f"FAIL: {tag} {v} != metrics.csv {column} {r[column]}")
val = sorted(t for t in tags if t.startswith("val/rmse/"))
if not val:
    sys.exit(f"FAIL: no validation scores (val/rmse/...) among {tags}")
val_steps = sorted({e.step for e in acc.Scalars(val[0])})
vrows = list(csv.DictReader(open(run_dir + "/validation.csv")))
print(f"ok: {len(files)} event file(s); loss at steps {tb_steps} equal to metrics.csv's; "
      f"{len(val)} validation RMSE series ({val[0]} ...) at steps {val_steps}; validation.csv has {len(vrows)} rows")
