"""A PhysicsNeMo model with fixed-seed random weights, saved by PhysicsNeMo itself (Module.save) as a .mdlus.

usage: make_reference_model.py pangu|graphcast OUT.mdlus JSON_ARGS
Every weight is moved off its initialisation (LayerNorms start at 1 and 0, Pangu's bias tables at
small values), so that a mapping that dropped or swapped a tensor shows in the forward output.
GraphCastNet needs torch_scatter and torch_sparse: tests/models/reference_shims stands in for them
(torch_scatter.scatter as Tensor.scatter_reduce, bit-identical; torch_sparse only imported).
"""
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "models", "reference_shims"))

import torch  # noqa: E402

kind, out, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
torch.manual_seed(22)
if kind == "pangu":
    from physicsnemo.models.pangu import Pangu
    model = Pangu(**args)
else:
    from physicsnemo.models.graphcast.graph_cast_net import GraphCastNet
    model = GraphCastNet(**args)
with torch.no_grad():
    for name, p in model.named_parameters():
        p.add_(0.05 * torch.randn_like(p))
model.save(out)
print(f"{out}: {type(model).__module__}.{type(model).__name__} with {sum(p.numel() for p in model.parameters())} parameters")
