"""anemoi's graph and AIFS model on a small grid, for tests/models/test_aifs_reference.cpp.

Run in the anemoi environment (scripts/install_anemoi_env.sh): anemoi-graphs 0.9.8 builds the graph
(data grid -> octahedral hidden grid with CutOffEdges, hidden -> data with KNNEdges, edge_length
"unit-max" and edge_dirs "unit-std", the AIFS graph recipe), anemoi-models 0.19.0 builds
AnemoiModelEncProcDec on it (graph-transformer encoder and decoder, transformer processor with SDPA
and a sliding window) with fixed-seed random weights, and runs one forward and backward pass.
Writes into OUT_DIR:
  grid.json      the data grid (latitudes, longitudes, degrees, cell order) and the hidden grid,
                 the model's sizes (our [model] keys) and the channels
  graph.pt       anemoi's edges (senders, receivers, features) of both edge sets, dst-sorted
  state.pt       the model's state_dict (a plain dict: LibTorch cannot read an OrderedDict)
  io.pt          input x [B, C_in, cells] (ours: history-major channels), output y [B, C_out, cells]
                 without anemoi's residual (the last input state; our trainer adds it), the weight
                 of the scalar loss sum(y * w), and the gradients of that loss for the input and
                 every parameter (grad.<name>)
  ens_state.pt, ens_io.pt   the same for AnemoiEnsModelEncProcDec with NoiseConditioning (AIFS-ENS,
                 4 noise channels): x [B x E, C_in + 4, cells] holds each member's noise fields as
                 its last 4 channels (wxtrain's layout; anemoi's torch.randn is made to return them),
                 fcstep 0, every weight random, the zero-initialised conditional norms too
The hidden grid's latitudes come from numpy's Gauss-Legendre nodes (an implementation of the
Gaussian latitudes independent of ours; anemoi's own o-grids are downloaded from ECMWF, which the
tests do not do).
"""
import json
import os
import sys

import numpy as np
import torch

torch.manual_seed(0)
torch.set_num_threads(1)
out = sys.argv[1]
os.makedirs(out, exist_ok=True)

from anemoi.graphs.edges.attributes import EdgeDirection  # noqa: E402
from anemoi.graphs.edges.attributes import EdgeLength  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aifs_fixture_lib import build_graph, build_model, octahedral  # noqa: E402

N_HIDDEN = 4  # O4: 4 * 4 * 13 = 208 hidden nodes
CHANNELS, HEADS, LAYERS, WINDOW = 32, 4, 2, 24
TRAINABLE = {"data": 3, "hidden": 2, "edges": 2}


# A global data grid without the poles (its cells are distinct), placed off the symmetries of the
# octahedral grid (the equator, longitude 0): there, distances to hidden nodes tie, and which of
# two equally near nodes a KNN or cut-off edge picks is the search's accident (sklearn's or ours).
data_rows = np.linspace(83.1, -85.3, 29)
data_cols = np.arange(48) * 7.5 + 1.3
data_lat = np.repeat(data_rows, len(data_cols))
data_lon = np.tile(data_cols, len(data_rows))
hid_lat, hid_lon = octahedral(N_HIDDEN)

graph = build_graph(data_lat, data_lon, hid_lat, hid_lon)

graph_out = {}
for key, name in ((("data", "to", "hidden"), "encoder"), (("hidden", "to", "data"), "decoder")):
    e = graph[key]
    index = e.edge_index.long()
    feats = torch.cat([e.edge_length, e.edge_dirs], dim=1).float()
    order = torch.argsort(index[1] * 1_000_000 + index[0])
    graph_out[f"{name}.senders"] = index[0][order].contiguous()
    graph_out[f"{name}.receivers"] = index[1][order].contiguous()
    graph_out[f"{name}.features"] = feats[order].contiguous()
    # The same attributes by anemoi's own code in float64, from float64 coordinates (its graph holds
    # them in float32: ~1e-7 rad, which moves short edges' normalised lengths by ~5e-6): ours are
    # computed in double, so this separates a formula difference from float32 round-off.
    coords = {"data": (data_lat, data_lon), "hidden": (hid_lat, hid_lon)}
    src, dst = (torch.from_numpy(np.radians(np.stack(coords[k], axis=1))) for k in (key[0], key[2]))
    x_j, x_i = src[index[0]], dst[index[1]]
    length_b, dirs_b = EdgeLength(norm="unit-max"), EdgeDirection(norm="unit-std")
    length = length_b.normalise(length_b.compute(x_i, x_j).unsqueeze(-1))
    dirs = dirs_b.normalise(dirs_b.compute(x_i, x_j))
    graph_out[f"{name}.features64"] = torch.cat([length, dirs], dim=1)[order].contiguous()
torch.save(graph_out, os.path.join(out, "graph.pt"))

# Variables: 3 prognostic, 1 forcing (input only), 1 diagnostic (output only); 2 input steps.
N_STEP_INPUT = 2
model, data_indices = build_model(graph, ["t", "u", "v"], ["cos_lat"], ["tp"], n_step_input=N_STEP_INPUT,
                                  channels=CHANNELS, heads=HEADS, layers=LAYERS, window=WINDOW, trainable=TRAINABLE)
# Random weights everywhere, the zero-initialised trainable tensors too (else their gradients
# and effects would be tested at zero only).
with torch.no_grad():
    for name, p in model.named_parameters():
        p.copy_(torch.randn_like(p) * (0.5 if p.dim() == 1 else 1.0 / max(1, p.shape[-1]) ** 0.5))
model.train()

cells = len(data_lat)
B = 2
x = torch.randn(B, N_STEP_INPUT, 1, cells, len(data_indices["data"].model.input))  # t, u, v, cos_lat
x.requires_grad_(True)
y_full = model({"data": x})["data"]  # [B, 1, 1, cells, outputs]
# The residual SkipConnection adds the last input's prognostic variables: take it off.
prog_in = data_indices["data"].model.input.prognostic
prog_out = data_indices["data"].model.output.prognostic
skip = torch.zeros_like(y_full)
skip[..., prog_out] = x[:, -1:, :, :, :][..., prog_in]
y = (y_full - skip)[:, 0, 0]  # [B, cells, outputs]
w = torch.randn_like(y)
(y * w).sum().backward()

# Ours: [B, C_in, cells] with channel = step * V_in + variable (anemoi's "(time vars)").
x_ours = x.detach()[:, :, 0].permute(0, 1, 3, 2).reshape(B, -1, cells)
grad_x = x.grad[:, :, 0].permute(0, 1, 3, 2).reshape(B, -1, cells)
io = {"x": x_ours.contiguous(), "y": y.detach().permute(0, 2, 1).contiguous(), "w": w.permute(0, 2, 1).contiguous(),
      "grad.x": grad_x.contiguous()}
for name, p in model.named_parameters():
    io["grad." + name] = p.grad.detach().clone()
torch.save(io, os.path.join(out, "io.pt"))
# The edge order of anemoi's learned edge features: its graph providers' dst-sorted edge_index.
graph_out["encoder.provider_index"] = model.encoder_graph_provider["data"].edge_index_base.long().contiguous()
graph_out["decoder.provider_index"] = model.decoder_graph_provider["data"].edge_index_base.long().contiguous()
torch.save(graph_out, os.path.join(out, "graph.pt"))
torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, os.path.join(out, "state.pt"))

n_params = sum(p.numel() for p in model.parameters())
with open(os.path.join(out, "grid.json"), "w") as f:
    json.dump(
        {
            "data_latitudes": data_rows.tolist(),
            "data_longitudes": data_cols.tolist(),
            "hidden_latitudes": hid_lat.tolist(),
            "hidden_longitudes": hid_lon.tolist(),
            "model": {"channels": CHANNELS, "heads": HEADS, "mapper_heads": HEADS, "processor_layers": LAYERS,
                      "window_size": WINDOW, "hidden_grid": f"o{N_HIDDEN}", "mlp_ratio": 4,
                      "data_trainable": TRAINABLE["data"], "hidden_trainable": TRAINABLE["hidden"],
                      "edge_trainable": TRAINABLE["edges"]},
            "in_channels": N_STEP_INPUT * 4,
            "out_channels": 4,
            "parameters": n_params,
            "state_keys": list(model.state_dict().keys()),
        },
        f,
        indent=1,
    )
print(f"anemoi AIFS fixture: {cells} cells, {len(hid_lat)} hidden nodes, "
      f"{graph_out['encoder.senders'].numel()} encoder edges, {graph_out['decoder.senders'].numel()} decoder edges, "
      f"{n_params} parameters -> {out}")

# ---- AIFS-ENS: AnemoiEnsModelEncProcDec with NoiseConditioning ----
NOISE = 4
ens, _ = build_model(graph, ["t", "u", "v"], ["cos_lat"], ["tp"], n_step_input=N_STEP_INPUT, channels=CHANNELS,
                     heads=HEADS, layers=LAYERS, window=WINDOW, trainable=TRAINABLE, noise_channels=NOISE)
# Random weights: the conditional norms' scale and bias start at zero (the noise would not matter).
with torch.no_grad():
    for name, p in ens.named_parameters():
        p.copy_(torch.randn_like(p) * (0.5 if p.dim() == 1 else 1.0 / max(1, p.shape[-1]) ** 0.5))
ens.train()
E = 3
V = len(data_indices["data"].model.input)
xe = torch.randn(B, N_STEP_INPUT, E, cells, V)
xe.requires_grad_(True)
noise = torch.randn(B, E, cells, NOISE)  # anemoi's noise_shape with the data grid (noise_edges_name)
real_randn = torch.randn


def fixed_noise(*args, size=None, **kwargs):
    shape = tuple(size) if size is not None else tuple(args[0] if len(args) == 1 and not isinstance(args[0], int) else args)
    assert shape == tuple(noise.shape), f"anemoi asked for noise of shape {shape}, expected {tuple(noise.shape)}"
    return noise.clone().to(kwargs.get("dtype", torch.float32))


torch.randn = fixed_noise
try:
    ye_full = ens({"data": xe}, fcstep=0)["data"]  # [B, 1, E, cells, outputs]
finally:
    torch.randn = real_randn
skip = torch.zeros_like(ye_full)
skip[..., prog_out] = xe[:, -1:, :, :, :][..., prog_in]
ye = (ye_full - skip)[:, 0]  # [B, E, cells, outputs]
we = torch.randn_like(ye)
(ye * we).sum().backward()
rows = B * E
# Ours: rows sample-major (b * E + e, anemoi's "(batch ensemble)"), channels step * V + variable, then
# the member's noise fields.
xe_ours = xe.detach().permute(0, 2, 1, 4, 3).reshape(rows, N_STEP_INPUT * V, cells)
xe_ours = torch.cat([xe_ours, noise.reshape(rows, cells, NOISE).permute(0, 2, 1)], dim=1)
grad_xe = xe.grad.permute(0, 2, 1, 4, 3).reshape(rows, N_STEP_INPUT * V, cells)
io = {"x": xe_ours.contiguous(), "y": ye.detach().reshape(rows, cells, -1).permute(0, 2, 1).contiguous(),
      "w": we.reshape(rows, cells, -1).permute(0, 2, 1).contiguous(), "grad.x": grad_xe.contiguous()}
for name, p in ens.named_parameters():
    io["grad." + name] = p.grad.detach().clone()
torch.save(io, os.path.join(out, "ens_io.pt"))
torch.save({k: v.detach().clone() for k, v in ens.state_dict().items()}, os.path.join(out, "ens_state.pt"))
with open(os.path.join(out, "ens.json"), "w") as f:
    json.dump({"members": E, "noise_channels": NOISE, "parameters": sum(p.numel() for p in ens.parameters()),
               "state_keys": list(ens.state_dict().keys())}, f, indent=1)
print(f"anemoi AIFS-ENS fixture: {E} members, {NOISE} noise channels, "
      f"{sum(p.numel() for p in ens.parameters())} parameters")
