"""anemoi-datasets' own open_dataset reads the anemoi fixture store cells_fixture.py wrote:

    check_anemoi_store.py FIXTURE_DIR

(run with the interpreter of .venv-anemoi-datasets, scripts/install_anemoi_datasets_env.sh). The
store's shape, variables, dates (with the missing one reported as missing), cells, statistics and
every value of every present date equal what xarray read from cells.nc (expected_cells.f32, the
channels z_500, z_850, t_850, t2m), and a selection by name picks the right variables.
"""
import os
import sys

import numpy as np
from anemoi.datasets import open_dataset

fixture = sys.argv[1]
store = os.path.join(fixture, "anemoi.zarr")
ds = open_dataset(store)
assert ds.variables == ["z_500", "z_850", "t_850", "2t"], ds.variables
assert ds.shape == (20, 4, 1, 1008), ds.shape
assert ds.missing == {9}, ds.missing  # 2020-01-03T06, the archive's gap
assert str(ds.dates[9]) == "2020-01-03T06:00:00", ds.dates[9]
expected = np.fromfile(os.path.join(fixture, "expected_cells.f32"), dtype="<f4").reshape(19, 4, 1008)
present = [i for i in range(20) if i not in ds.missing]
for k, i in enumerate(present):
    got = ds[i][:, 0, :]
    assert np.array_equal(got, expected[k]), (i, np.abs(got - expected[k]).max())
assert ds.latitudes.shape == (1008,) and abs(ds.latitudes[0] - 84.37645766) < 1e-6, ds.latitudes[:3]
stats = np.loadtxt(os.path.join(fixture, "anemoi_statistics.txt"))
assert np.allclose(ds.statistics["mean"], stats[:, 0]) and np.allclose(ds.statistics["stdev"], stats[:, 1])
selected = open_dataset(store, select=["2t", "z_500"])
assert selected.variables == ["2t", "z_500"], selected.variables
assert np.array_equal(selected[0][0, 0], expected[0, 3]) and np.array_equal(selected[0][1, 0], expected[0, 0])
print("anemoi-datasets reads", store, ds.shape, "frequency", ds.frequency)
