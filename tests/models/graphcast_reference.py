"""PhysicsNeMo's GraphCastNet computes what wxtrain's GraphCast is tested against.

Run in the reference environment (nvidia-physicsnemo 2.2.2, torch_geometric, scikit-learn, scipy;
torch_scatter and torch_sparse from tests/models/reference_shims, which this script puts on the path):

    graphcast_reference.py OUT_DIR

writes, for tests/models/test_graphcast_reference.cpp:
  OUT_DIR/<case>/args.json   the constructor arguments, as a .mdlus's args.json holds them
  OUT_DIR/<case>/state.pt    torch.save(dict(model.state_dict())): fixed-seed random weights
  OUT_DIR/<case>/data.pt     the input, the output, the probe and loss, every parameter's gradient of
                             loss = sum(output * probe), and the reference's graph tensors
  OUT_DIR/published.json     GraphCastNet() with its defaults, built on the meta device: every
                             parameter's name and shape and the count (with do_concat_trick both ways)
"""
import inspect
import json
import os
import sys
import types

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_shims"))

import torch  # noqa: E402
from physicsnemo.models.graphcast import graph_cast_net  # noqa: E402
from physicsnemo.models.graphcast.graph_cast_net import GraphCastNet  # noqa: E402

# Small models on the reference's own grid and graph: the whole function, in fractions of a second.
CASES = {
    # The default layout, one hidden layer, a level-2 multi-mesh on a 15-degree grid.
    "small": dict(mesh_level=2, input_res=(13, 24), input_dim_grid_nodes=5, output_dim_grid_nodes=4,
                  processor_layers=4, hidden_dim=16, hidden_layers=1),
    # The concat trick's parameter layout (first Linear of the edge MLPs split), two hidden layers.
    "concat_trick": dict(mesh_level=1, input_res=(10, 20), input_dim_grid_nodes=3, output_dim_grid_nodes=2,
                         processor_layers=3, hidden_dim=8, hidden_layers=2, do_concat_trick=True),
}


def write_case(out_dir, name, args):
    os.makedirs(os.path.join(out_dir, name), exist_ok=True)
    torch.manual_seed(1234)
    model = GraphCastNet(**args)
    # Kaiming-uniform Linears as built; LayerNorms moved off their (1, 0) start so they count too.
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    c, (h, w) = args["input_dim_grid_nodes"], args["input_res"]
    x = torch.randn(1, c, h, w)
    y = model(x)
    probe = torch.randn_like(y)
    loss = (y * probe).sum()
    loss.backward()

    data = {"input": x, "output": y.detach(), "probe": probe, "loss": loss.detach(),
            "latitudes": model.latitudes, "longitudes": model.longitudes,
            "graph.mesh_vertices": torch.tensor(model.graph.mesh_vertices, dtype=torch.float32),
            "graph.mesh_x": model.mesh_ndata,
            "graph.mesh_edge_index": model.mesh_graph.edge_index,
            "graph.mesh_edge_attr": model.mesh_edata,
            "graph.g2m_edge_index": model.g2m_graph[model.g2m_graph.edge_types[0]].edge_index,
            "graph.g2m_edge_attr": model.g2m_edata,
            "graph.m2g_edge_index": model.m2g_graph[model.m2g_graph.edge_types[0]].edge_index,
            "graph.m2g_edge_attr": model.m2g_edata}
    for pname, p in model.named_parameters():
        data["grad." + pname] = p.grad.detach().clone()
    torch.save(dict(model.state_dict()), os.path.join(out_dir, name, "state.pt"))
    torch.save(data, os.path.join(out_dir, name, "data.pt"))
    with open(os.path.join(out_dir, name, "args.json"), "w") as f:
        json.dump({"__name__": "GraphCastNet", "__module__": GraphCastNet.__module__, "__args__": args}, f, indent=1)


class _NoGraph:
    """Stands in for graph_cast_net.Graph on the meta device: the parameters do not depend on the
    graph, and building the 0.25-degree M6 graph (1M grid points) in Python takes minutes."""

    def __init__(self, *args, **kwargs):
        pass

    def create_mesh_graph(self, verbose=False):
        return types.SimpleNamespace(x=torch.zeros(1, 3), edge_attr=torch.zeros(1, 4)), None

    def create_g2m_graph(self, verbose=False):
        return types.SimpleNamespace(edge_attr=torch.zeros(1, 4))

    def create_m2g_graph(self, verbose=False):
        return types.SimpleNamespace(edge_attr=torch.zeros(1, 4))


def write_published(out_dir):
    defaults = {k: v.default for k, v in inspect.signature(GraphCastNet.__init__).parameters.items()
                if k != "self"}
    defaults["input_res"] = list(defaults["input_res"])
    real_graph = graph_cast_net.Graph
    graph_cast_net.Graph = _NoGraph
    try:
        layouts = {}
        for trick in (False, True):
            with torch.device("meta"):
                model = GraphCastNet(do_concat_trick=trick)
            layouts["concat_trick" if trick else "default"] = {
                "parameters": [[n, list(p.shape)] for n, p in model.named_parameters()],
                "count": sum(p.numel() for p in model.parameters()),
            }
    finally:
        graph_cast_net.Graph = real_graph
    with open(os.path.join(out_dir, "published.json"), "w") as f:
        json.dump({"args": defaults, **layouts}, f, indent=1)
    return layouts["default"]["count"]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: graphcast_reference.py OUT_DIR")
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    for name, args in CASES.items():
        write_case(out_dir, name, args)
    count = write_published(out_dir)
    print(f"GraphCastNet fixtures in {out_dir}: {', '.join(CASES)}; published size {count:,} parameters")


if __name__ == "__main__":
    main()
