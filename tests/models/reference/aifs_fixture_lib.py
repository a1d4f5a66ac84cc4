"""What the AIFS fixtures share: the octahedral grid, anemoi-graphs' AIFS graph, anemoi-models'
AnemoiModelEncProcDec (run in the anemoi environment, scripts/install_anemoi_env.sh)."""
import numpy as np
from anemoi.models.data_indices.collection import IndexCollection
from anemoi.models.models import AnemoiModelEncProcDec
from anemoi.utils.config import DotDict
from omegaconf import OmegaConf


def octahedral(n):
    """O_n, north to south, each row from longitude 0; latitudes from numpy's Gauss-Legendre nodes
    (independent of wxtrain's; anemoi's own o-grids are downloaded from ECMWF, which tests do not do)."""
    x, _ = np.polynomial.legendre.leggauss(2 * n)  # ascending roots of P_2n
    north = np.degrees(np.arcsin(x[::-1][:n]))
    lats, lons = [], []
    rows = [(north[i - 1], i) for i in range(1, n + 1)] + [(-north[i - 1], i) for i in range(n, 0, -1)]
    for lat, i in rows:
        count = 4 * i + 16
        lats += [lat] * count
        lons += [360.0 * j / count for j in range(count)]
    return np.array(lats), np.array(lons)


ATTRIBUTES = {
    "edge_length": {"_target_": "anemoi.graphs.edges.attributes.EdgeLength", "norm": "unit-max"},
    "edge_dirs": {"_target_": "anemoi.graphs.edges.attributes.EdgeDirection", "norm": "unit-std"},
}


def build_graph(data_lat, data_lon, hid_lat, hid_lon, cutoff_factor=0.6, neighbours=3):
    """AIFS's graph recipe: data -> hidden CutOffEdges, hidden -> data KNNEdges, built as
    GraphCreator.update_graph builds a config's graph (the builders called directly: a config holding
    542,080 coordinates takes OmegaConf minutes)."""
    from anemoi.graphs.edges import CutOffEdges
    from anemoi.graphs.edges import KNNEdges
    from anemoi.graphs.nodes import LatLonNodes
    from torch_geometric.data import HeteroData

    graph = HeteroData()
    graph = LatLonNodes(np.asarray(data_lat), np.asarray(data_lon), name="data").update_graph(graph, attrs_config={})
    graph = LatLonNodes(np.asarray(hid_lat), np.asarray(hid_lon), name="hidden").update_graph(graph, attrs_config={})
    for builder in (CutOffEdges("data", "hidden", cutoff_factor=cutoff_factor),
                    KNNEdges("hidden", "data", num_nearest_neighbours=neighbours)):
        graph = builder.update_graph(graph, attrs_config=None)
        graph = builder.register_attributes(graph, DotDict(ATTRIBUTES))
    return graph


def build_model(graph, prognostic, forcing, diagnostic, n_step_input, channels, heads, layers, window, trainable,
                noise_channels=0):
    """AnemoiModelEncProcDec with graph-transformer mappers, a transformer processor (SDPA: flash
    attention is not on the CPU) and the residual SkipConnection, one dataset "data".

    noise_channels > 0: AnemoiEnsModelEncProcDec as AIFS-ENS configures it, NoiseConditioning
    (noise_std 1, noise_channels_dim = noise_channels, noise_mlp_hidden_dim 32) with the processor's
    LayerNorms ConditionalLayerNorm (zero-initialised, autocast off); the noise drawn on the data grid
    and projected onto the hidden nodes through the encoder's edges, row-normalised
    (noise_edges_name), as wxtrain draws it on the data grid."""
    variables = prognostic + forcing + diagnostic
    name_to_index = {v: i for i, v in enumerate(variables)}
    data_config = OmegaConf.create({"forcing": forcing, "diagnostic": diagnostic})
    data_indices = {"data": IndexCollection(data_config, name_to_index)}
    mapper = {"trainable_size": trainable["edges"], "sub_graph_edge_attributes": ["edge_length", "edge_dirs"],
              "num_chunks": 1, "mlp_hidden_ratio": 4, "num_heads": heads, "qk_norm": False, "cpu_offload": False,
              "graph_attention_backend": "pyg", "layer_kernels": None, "num_channels": channels}
    config = OmegaConf.create({"model": {
        "model": {"_target_": "anemoi.models.models.AnemoiModelEncProcDec", "hidden_nodes_name": "hidden",
                  "latent_skip": True},
        "node_trainable_parameters": {"data": trainable["data"], "hidden": trainable["hidden"]},
        "latent_skip": True,
        "latent_aggregator": {"_target_": "anemoi.models.layers.aggregator.SumAggregator"},
        "processor": {"_target_": "anemoi.models.layers.processor.TransformerProcessor", "num_layers": layers,
                      "num_channels": channels, "num_chunks": 1, "num_heads": heads, "mlp_hidden_ratio": 4,
                      "window_size": window, "dropout_p": 0.0,
                      "attention_implementation": "scaled_dot_product_attention", "qk_norm": False,
                      "softcap": None, "use_alibi_slopes": False, "cpu_offload": False, "layer_kernels": None},
        "encoders": {"data": {"source_datasets": ["data"], "dataset_fusing_strategy": "not_supported",
                              "mapper": {"_target_": "anemoi.models.layers.mapper.GraphTransformerForwardMapper",
                                         **mapper}}},
        "decoders": {"data": {"target_datasets": ["data"], "target_node_features": ["encoded_data"],
                              "mapper": {"_target_": "anemoi.models.layers.mapper.GraphTransformerBackwardMapper",
                                         "initialise_data_extractor_zero": False, **mapper}}},
        "residual": {"_target_": "anemoi.models.layers.residual.SkipConnection"},
        "bounding": [],
    }})
    if noise_channels > 0:
        from anemoi.models.models import AnemoiEnsModelEncProcDec

        config.model.model._target_ = "anemoi.models.models.AnemoiEnsModelEncProcDec"
        config.model.model.condition_on_residual = False
        config.model.condition_on_residual = False
        config.model.noise_injector = {
            "_target_": "anemoi.models.layers.ensemble.NoiseConditioning", "noise_std": 1,
            "noise_channels_dim": noise_channels, "noise_mlp_hidden_dim": 32, "layer_kernels": None,
            "noise_edges_name": ["data", "to", "hidden"], "row_normalize_noise_matrix": True}
        config.model.processor.layer_kernels = {"LayerNorm": {
            "_target_": "anemoi.models.layers.normalization.ConditionalLayerNorm", "_partial_": True,
            "condition_shape": noise_channels, "zero_init": True, "autocast": False}}
        model = AnemoiEnsModelEncProcDec(model_config=config, data_indices=data_indices, statistics={"data": {}},
                                         n_step_input=n_step_input, n_step_output=1, graph_data=graph)
        return model, data_indices
    model = AnemoiModelEncProcDec(model_config=config, data_indices=data_indices, statistics={"data": {}},
                                  n_step_input=n_step_input, n_step_output=1, graph_data=graph)
    return model, data_indices
