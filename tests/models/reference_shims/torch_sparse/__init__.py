"""Stand-in for torch_sparse, so that PhysicsNeMo's GraphCastNet PyG backend imports.

PhysicsNeMo uses torch_sparse.SparseTensor only for the k-hop attention mask of the graph
transformer processor (khop_neighbors > 0). The message-passing processor, the only one the
reference tests build, never calls it: any use raises, so a test that needed it fails loudly.
"""
__version__ = "0.6.18+wxtrain-shim"


class SparseTensor:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("torch_sparse shim: SparseTensor (k-hop processors) is not provided")

    @classmethod
    def from_edge_index(cls, *args, **kwargs):
        raise NotImplementedError("torch_sparse shim: SparseTensor (k-hop processors) is not provided")
