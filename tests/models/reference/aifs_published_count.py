"""anemoi-models' parameter count of AIFS Single 1.0's configuration, for test_aifs_reference.cpp.

Usage: aifs_published_count.py LAT.npy LON.npy OUT.json. The N320 data grid's cell coordinates
(542,080) come from ecCodes' reduced_gg_pl_320 sample (written by Debian's python3 with the eccodes
bindings: tests/models/reference/aifs_published.sh); the hidden grid is O96 (numpy's Gauss-Legendre
nodes); anemoi-graphs builds CutOffEdges (0.6) and KNNEdges (3) with edge_length and edge_dirs, and
anemoi-models builds AnemoiModelEncProcDec on the meta device (no memory) with AIFS Single's sizes:
1024 channels, 16 transformer layers of 16 heads, MLP ratio 4, 16 mapper heads, 8 learned features
per cell, hidden node and mapper edge, 2 input steps. Writes its parameter count and edge counts.
"""
import json
import sys

import numpy as np
import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from aifs_fixture_lib import build_graph, build_model, octahedral  # noqa: E402

lat, lon = np.load(sys.argv[1]), np.load(sys.argv[2])
hid_lat, hid_lon = octahedral(96)
graph = build_graph(lat, lon, hid_lat, hid_lon)
# AIFS Single 1.0's variables (our reading of its model card): 90 prognostic (8 surface, 4 soil,
# q/t/u/v/w/z on 13 levels), 13 forcings, 12 diagnostics.
levels = [50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000]
prognostic = ["10u", "10v", "2d", "2t", "msl", "skt", "sp", "tcw", "stl1", "stl2", "swvl1", "swvl2"] + [
    f"{v}_{l}" for v in ("q", "t", "u", "v", "w", "z") for l in levels]
forcing = ["cos_julian_day", "cos_latitude", "cos_local_time", "cos_longitude", "insolation", "lsm", "sdor",
           "sin_julian_day", "sin_latitude", "sin_local_time", "sin_longitude", "slor", "z"]
diagnostic = ["100u", "100v", "cp", "hcc", "lcc", "mcc", "ro", "sf", "ssrd", "strd", "tcc", "tp"]
with torch.device("meta"):
    model, _ = build_model(graph, prognostic, forcing, diagnostic, n_step_input=2, channels=1024, heads=16, layers=16,
                        window=512, trainable={"data": 8, "hidden": 8, "edges": 8})
n = sum(p.numel() for p in model.parameters())
out = {"parameters": n, "cells": len(lat), "hidden": len(hid_lat),
       "encoder_edges": int(graph[("data", "to", "hidden")].edge_index.shape[1]),
       "decoder_edges": int(graph[("hidden", "to", "data")].edge_index.shape[1]),
       "in_channels": 2 * (len(prognostic) + len(forcing)), "out_channels": len(prognostic) + len(diagnostic)}
json.dump(out, open(sys.argv[3], "w"), indent=1)
# The cells for the C++ side (LibTorch reads a torch.save'd dict of tensors).
torch.save({"latitudes": torch.from_numpy(np.asarray(lat, dtype=np.float64)),
            "longitudes": torch.from_numpy(np.asarray(lon, dtype=np.float64))},
           sys.argv[3].rsplit("/", 1)[0] + "/n320.pt")
print(out)
