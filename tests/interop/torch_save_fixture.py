"""Files torch.save writes, for wxtrain's reader, and a check of what wxtrain writes back.

usage: torch_save_fixture.py write DIR   writes DIR/*.pt by torch.save and DIR/expected.json
       torch_save_fixture.py check DIR   loads DIR/written_*.pt (wxtrain's write_torch_state_dict)
                                         with torch.load(weights_only=True) and nn.Module.load_state_dict

Run by the torch environment's Python (.venv): no PhysicsNeMo needed. tests/interop/
test_torch_save_python.cpp reads what `write` wrote and writes what `check` reads.
"""
import collections
import json
import pathlib
import sys

import torch


class Small(torch.nn.Module):
    """A module whose state_dict has what real ones have: a conv, a LayerNorm, a buffer, and the
    `_metadata` attribute (module versions) torch attaches to every state_dict."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 2)
        self.norm = torch.nn.LayerNorm(3)
        self.register_buffer("steps", torch.tensor([3, 1, 4], dtype=torch.int64))


def expected(tensors):
    return {n: {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                "values": t.detach().to(torch.float64).flatten().tolist()} for n, t in tensors.items()}


def write(out):
    torch.manual_seed(0)
    model = Small()
    state = model.state_dict()
    assert hasattr(state, "_metadata")
    torch.save(state, out / "module_state.pt")

    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    kinds = collections.OrderedDict()
    kinds["float64"] = torch.randn(3, 2, dtype=torch.float64)
    kinds["bfloat16"] = torch.randn(5).to(torch.bfloat16)
    kinds["float16"] = torch.randn(2, 2).to(torch.float16)
    kinds["int32"] = torch.tensor([-7, 2**31 - 1], dtype=torch.int32)
    kinds["bool"] = torch.tensor([True, False, True])
    kinds["scalar"] = torch.tensor(2.5)
    kinds["empty"] = torch.zeros(0, 4)
    kinds["transposed"] = base.t()                 # strides (1, 6)
    kinds["row_view"] = base[2]                    # storage offset 12, shares base's storage
    kinds["base"] = base
    kinds["big_int"] = torch.tensor([2**40 + 5, -(2**35)], dtype=torch.int64)
    torch.save(kinds, out / "kinds.pt")

    # A training checkpoint that holds the model under "model_state", DistributedDataParallel's
    # "module." in front of every name, beside an optimizer state and plain numbers.
    wrapped = collections.OrderedDict(("module." + n, t) for n, t in state.items())
    torch.save({"epoch": 7, "model_state": wrapped, "optimizer_state": {"state": {}, "param_groups": [{"lr": 0.1}]},
                "note": "trained", "history": [1.5, 2.5]}, out / "training_checkpoint.pt")

    record = {"module_state": expected(state), "kinds": expected(kinds)}
    (out / "expected.json").write_text(json.dumps(record))
    print(f"torch.save files written to {out} (torch {torch.__version__})")


def check(out):
    for name in ("module_state", "kinds"):
        original = torch.load(out / f"{name}.pt", weights_only=True)
        written = torch.load(out / f"written_{name}.pt", weights_only=True)
        assert isinstance(written, collections.OrderedDict), type(written)
        assert sorted(written) == sorted(original), (sorted(written), sorted(original))
        for n, t in original.items():
            w = written[n]
            assert w.dtype == t.dtype and w.shape == t.shape, (n, w.dtype, t.dtype, w.shape, t.shape)
            assert torch.equal(w, t), n
    model = Small()
    model.load_state_dict(torch.load(out / "written_module_state.pt", weights_only=True), strict=True)
    print("torch.load(weights_only=True) and load_state_dict read wxtrain's files: every tensor equal")


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1]](pathlib.Path(sys.argv[2]))
