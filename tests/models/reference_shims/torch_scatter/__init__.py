"""Stand-in for torch_scatter (no wheel on PyPI; a source build takes ~10 minutes on 2 cores).

PhysicsNeMo's GraphCastNet (PyG backend) calls only ``torch_scatter.scatter(src, index, dim=0,
dim_size=N, reduce="sum"|"mean")`` to aggregate edge messages into their receivers. PyTorch's own
``Tensor.scatter_reduce(..., include_self=False)`` computes the same sums (bit-identical output on
the CPU was checked against torch_scatter 2.1.2); nodes with no incoming edge stay zero, as in
torch_scatter. Used only by the reference tests (tests/models/graphcast_reference.py).
"""
import torch

__version__ = "2.1.2+wxtrain-shim"


def scatter(src, index, dim=-1, out=None, dim_size=None, reduce="sum"):
    if out is not None:
        raise NotImplementedError("torch_scatter shim: 'out' is not supported")
    dim = dim % src.dim()
    if dim_size is None:
        dim_size = int(index.max()) + 1 if index.numel() > 0 else 0
    # Broadcast a 1-D index along the other dimensions, as torch_scatter does.
    if index.dim() == 1:
        shape = [1] * src.dim()
        shape[dim] = -1
        index = index.view(shape).expand_as(src)
    size = list(src.shape)
    size[dim] = dim_size
    reductions = {"sum": "sum", "add": "sum", "mean": "mean", "max": "amax", "min": "amin", "mul": "prod"}
    if reduce not in reductions:
        raise ValueError(f"torch_scatter shim: reduce={reduce!r} is not one of {sorted(reductions)}")
    return torch.zeros(size, dtype=src.dtype, device=src.device).scatter_reduce(
        dim, index, src, reductions[reduce], include_self=False)
