"""Reference cases for wxtrain's interop tests, made by the reference implementation itself.

usage: reference_case.py OUT_DIR

Run by the reference environment's Python (scripts/install_reference_env.sh). Each case builds a
small reference model with fixed-seed random weights and writes, into OUT_DIR:
  <case>.mdlus      saved by PhysicsNeMo's own Module.save
  <case>_state.pt   torch.save(model.state_dict()): the bare state_dict form
  <case>_io.pt      torch.save of an OrderedDict: "input", "output", "output_weight" (the loss is
                    sum(output * output_weight)) and "grad/<name>" for every parameter, by the
                    reference's names
and each published configuration, built on the meta device, writes published_<name>.json: the
class, its arguments, every parameter's name and shape, and the parameter count.
tests/interop/test_reference.cpp loads them through wxtrain and compares. Another architecture adds
a function to CASES (and PUBLISHED) and its checks to the C++ side; nothing else changes.
"""
import collections
import json
import pathlib
import sys

import torch

CASES = {}
PUBLISHED = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def published(fn):
    PUBLISHED[fn.__name__] = fn
    return fn


def perturbed(model, seed):
    """Every parameter moved off its initialisation (LayerNorm's ones, zero biases), so that each
    enters the output and each gradient is one the comparison can see."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model


# --- FourCastNet: physicsnemo.models.afno.AFNO ---

def afno(seed, **args):
    from physicsnemo.models.afno import AFNO
    torch.manual_seed(seed)
    return perturbed(AFNO(**args), seed + 1)


@case
def afno_wide():
    # A patch grid wider than tall (4 x 8): the reference filters only the first h/2 + 1 = 3 of
    # the 5 zonal wavenumbers, even at hard_thresholding_fraction 1.
    model = afno(1, inp_shape=[16, 32], in_channels=3, out_channels=2, patch_size=[4, 4], embed_dim=32, depth=2,
                 mlp_ratio=2.0, num_blocks=4, sparsity_threshold=0.01, hard_thresholding_fraction=1.0)
    return model, torch.randn(2, 3, 16, 32, generator=torch.Generator().manual_seed(2))


@case
def afno_thresholded():
    # Hard thresholding on a square patch grid (6 x 6): the reference's band of latitudinal modes.
    model = afno(3, inp_shape=[12, 12], in_channels=2, out_channels=2, patch_size=[2, 2], embed_dim=16, depth=1,
                 mlp_ratio=4.0, num_blocks=2, sparsity_threshold=0.0, hard_thresholding_fraction=0.5)
    return model, torch.randn(1, 2, 12, 12, generator=torch.Generator().manual_seed(4))


def published_afno(channels):
    from physicsnemo.models.afno import AFNO
    args = dict(inp_shape=[720, 1440], in_channels=channels, out_channels=channels, patch_size=[8, 8], embed_dim=768,
                depth=12, mlp_ratio=4.0, drop_rate=0.0, num_blocks=8, sparsity_threshold=0.01,
                hard_thresholding_fraction=1.0)
    with torch.device("meta"):
        model = AFNO(**args)
    return model, args


@published
def fourcastnet_earth2studio():
    # Earth2Studio's FourCastNet (fcn.mdlus): 26 channels on the 0.25-degree grid cropped to 720 rows.
    return published_afno(26)


@published
def fourcastnet_paper():
    # The paper's 20 channels: wxtrain's fourcastnet-0.25 preset (docs/estimator.md's table).
    return published_afno(20)


def write_case(name, model, x, out):
    model.save(str(out / f"{name}.mdlus"))
    torch.save(model.state_dict(), out / f"{name}_state.pt")
    y = model(x)
    w = torch.randn(y.shape, generator=torch.Generator().manual_seed(99))
    (y * w).sum().backward()
    io = collections.OrderedDict(input=x, output=y.detach(), output_weight=w)
    for n, p in model.named_parameters():
        io["grad/" + n] = p.grad
    torch.save(io, out / f"{name}_io.pt")


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    for name, make in CASES.items():
        model, x = make()
        write_case(name, model, x, out)
    for name, make in PUBLISHED.items():
        model, args = make()
        tensors = {n: list(t.shape) for n, t in model.state_dict().items()}
        record = dict(module=type(model).__module__, cls=type(model).__name__, args=args, tensors=tensors,
                      parameters=sum(p.numel() for p in model.parameters()))
        (out / f"published_{name}.json").write_text(json.dumps(record))
    print(f"reference cases written to {out}: {', '.join(CASES)}; published: {', '.join(PUBLISHED)}")


if __name__ == "__main__":
    main()
