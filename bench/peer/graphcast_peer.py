"""GraphCast in PyTorch's Python API: the peer of models/graphcast.cpp, block for block.

Encoder (grid -> mesh), interaction networks on the multi-mesh, decoder (mesh -> grid), every MLP
train_peer.GraphMLP (first Linear split per input, SiLU, LayerNorm on the output but the last).
The graph is the C++ model's own, not rebuilt here: node and edge features and the senders and
receivers of the grid2mesh, mesh and mesh2grid edges come from the .npy files that
`train_throughput --describe --buffers DIR` writes (shape["buffers_dir"]), so both sides run on
the same edges in the same order. Loaded by train_peer.py (PEER_MODULES) as `Model(m, shape)`.
"""
import os
import sys

import torch
import torch.nn as nn

import train_peer
from train_peer import GraphMLP, InteractionLayer


class MeshInteraction(InteractionLayer):
    """GraphCast's processor round (Lam et al. 2023 eq. 9-11): the receivers sum the edges' updates
    MLP(...), not the updated edges e + MLP(...) as the gnn's InteractionLayer does (models/gnn.h
    InteractionLayer with aggregate_residual = false)."""

    def forward(self, h, e, senders, receivers):
        pre = self.edge_mlp.project(1, h).index_select(1, senders)
        pre.add_(self.edge_mlp.project(2, h).index_select(1, receivers))
        pre = pre + self.edge_mlp.project(0, e)
        update = self.edge_mlp.finish(pre)
        agg = torch.zeros(h.shape[0], h.shape[1], update.shape[-1], dtype=update.dtype,
                          device=update.device).index_add_(1, receivers, update)
        h_new = h + self.node_mlp.finish(self.node_mlp.project(0, h) + self.node_mlp.project(1, agg))
        return h_new, e + update


class Grid2Mesh(nn.Module):
    def __init__(self, in_channels, L, layers):
        super().__init__()
        self.grid_embed = GraphMLP([in_channels, 3], L, L, layers)
        self.mesh_embed = GraphMLP([3], L, L, layers)
        self.g2m_edge_embed = GraphMLP([4], L, L, layers)
        self.mesh_edge_embed = GraphMLP([4], L, L, layers)
        self.edge_mlp = GraphMLP([L, L, L], L, L, layers)
        self.mesh_node_mlp = GraphMLP([L, L], L, L, layers)
        self.grid_node_mlp = GraphMLP([L], L, L, layers)

    def forward(self, grid, g):
        h_grid = self.grid_embed.finish(self.grid_embed.project(0, grid) + self.grid_embed.project(1, g.grid_features))
        # Batch-independent embeddings: [Nm, L], [Eg, L], [Em, L].
        h_mesh = self.mesh_embed(g.mesh_features)
        e = self.g2m_edge_embed(g.g2m_features)
        e_mesh = self.mesh_edge_embed(g.mesh_edge_features)
        # The edge's and the receiving mesh node's shares of the first layer are the same for every
        # sample: summed once per edge, then the sending grid node's share added per sample.
        shared = self.edge_mlp.project(0, e) + self.edge_mlp.project(2, h_mesh).index_select(0, g.g2m_receivers)
        update = self.edge_mlp.finish(self.edge_mlp.project(1, h_grid).index_select(1, g.g2m_senders) + shared)
        agg = torch.zeros(update.shape[0], g.mesh_features.shape[0], update.shape[2], dtype=update.dtype,
                          device=update.device).index_add_(1, g.g2m_receivers, update)
        mesh = h_mesh + self.mesh_node_mlp.finish(self.mesh_node_mlp.project(0, h_mesh)
                                                  + self.mesh_node_mlp.project(1, agg))
        return h_grid + self.grid_node_mlp(h_grid), mesh, e_mesh


class Mesh2Grid(nn.Module):
    def __init__(self, L, out_channels, layers):
        super().__init__()
        self.m2g_edge_embed = GraphMLP([4], L, L, layers)
        self.edge_mlp = GraphMLP([L, L, L], L, L, layers)
        self.grid_node_mlp = GraphMLP([L, L], L, L, layers)
        self.output_mlp = GraphMLP([L], L, out_channels, layers, layer_norm=False)

    def forward(self, mesh, grid, g):
        e = self.m2g_edge_embed(g.m2g_features)  # [3 Ng, L], batch-independent
        pre = self.edge_mlp.project(1, mesh).index_select(1, g.m2g_senders)
        pre.add_(self.edge_mlp.project(2, grid).index_select(1, g.m2g_receivers))
        update = self.edge_mlp.finish(pre + self.edge_mlp.project(0, e))
        agg = torch.zeros(update.shape[0], grid.shape[1], update.shape[2], dtype=update.dtype,
                          device=update.device).index_add_(1, g.m2g_receivers, update)
        h = grid + self.grid_node_mlp.finish(self.grid_node_mlp.project(0, grid) + self.grid_node_mlp.project(1, agg))
        return self.output_mlp(h)


class Model(nn.Module):
    def __init__(self, m, shape):
        super().__init__()
        if not shape.get("buffers_dir"):
            sys.exit("graphcast_peer: needs the C++ model's graph: train_peer.py --buffers DIR "
                     "(train_throughput --describe --buffers DIR)")
        for name in shape["buffers"]:
            self.register_buffer(name, train_peer.load_npy(os.path.join(shape["buffers_dir"], name + ".npy")))
        L, layers = m["latent"], m.get("mlp_layers", 2)
        self.grid2mesh = Grid2Mesh(shape["in_channels"], L, layers)
        self.processors = nn.ModuleList(MeshInteraction(L, layers) for _ in range(m["processor_layers"]))
        self.mesh2grid = Mesh2Grid(L, shape["out_channels"], layers)

    def forward(self, x):
        B, C, lat, lon = x.shape
        grid, mesh, e = self.grid2mesh(x.flatten(2).transpose(1, 2), self)  # [B, Ng, C] nodes
        for p in self.processors:
            mesh, e = p(mesh, e, self.mesh_senders, self.mesh_receivers)
        out = self.mesh2grid(mesh, grid, self)  # [B, Ng, C_out]
        return out.transpose(1, 2).reshape(B, out.shape[2], lat, lon)
