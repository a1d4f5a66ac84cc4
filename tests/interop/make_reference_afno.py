"""PhysicsNeMo's AFNO with fixed-seed weights, saved by PhysicsNeMo as a .mdlus.

usage: make_reference_afno.py OUT.mdlus JSON_ARGS
The global model the global-to-regional test imports (global_to_regional.sh): the arguments match
global_afno.toml's [model] on the fixture's 32 x 64 grid.
"""
import json
import sys

import torch
from physicsnemo.models.afno import AFNO

torch.manual_seed(0)
model = AFNO(**json.loads(sys.argv[2]))
model.save(sys.argv[1])
print(f"{sys.argv[1]}: AFNO with {sum(p.numel() for p in model.parameters())} parameters")
