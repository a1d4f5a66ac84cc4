#include "models/aifs/aifs_options.h"

#include <string>
#include <vector>

#include "core/config_reader.h"
#include "core/model_presets.h"

namespace wxtrain::models {
namespace {

void read(SectionReader& r, AifsOptions& o) {
  r.get("num_channels", o.num_channels, 1, 1 << 16);
  r.describe("num_channels", "latent width of the encoder, processor and decoder (AIFS Single: 1024)");
  r.get_choice("mapper", o.mapper, {"graph_transformer"});
  r.describe("mapper", "encoder and decoder: \"graph_transformer\" (anemoi's GraphTransformerForward/BackwardMapper)");
  r.get_choice("processor", o.processor, {"transformer"});
  r.describe("processor", "processor: \"transformer\" (anemoi's TransformerProcessor, sliding-window attention over "
                          "the hidden nodes)");
  r.get("processor_layers", o.processor_layers, 1, 512);
  r.describe("processor_layers", "transformer layers of the processor (AIFS Single: 16)");
  r.get("num_heads", o.num_heads, 1, 1024);
  r.describe("num_heads", "processor attention heads (AIFS Single: 16)");
  r.get("mapper_num_heads", o.mapper_num_heads, 1, 1024);
  r.describe("mapper_num_heads", "encoder and decoder graph-attention heads (AIFS Single: 16)");
  r.get("mlp_hidden_ratio", o.mlp_hidden_ratio, 0.0, 64.0, Lower::kExclusive);
  r.describe("mlp_hidden_ratio", "MLP hidden width over num_channels, rounded half up (AIFS: 4)");
  r.get("hidden_grid", o.hidden_grid);
  r.describe("hidden_grid", "hidden nodes: octahedral reduced Gaussian grid o<N>, 4N(N+9) nodes (o48: 10,944; o96: "
                            "40,320, AIFS Single)");
  r.get("window_size", o.window_size, 0, int64_t{1} << 40);
  r.describe("window_size", "processor attention: each hidden node attends to the nodes within this many places of "
                            "it in the grid's order (anemoi's window_size; 0 = all nodes)");
  r.get("cutoff_factor", o.cutoff_factor, 0.0, 100.0, Lower::kExclusive);
  r.describe("cutoff_factor", "encoder: a grid cell sends to the hidden nodes within this factor x the hidden grid's "
                              "reference distance (anemoi's CutOffEdges; AIFS: 0.6)");
  r.get("max_neighbours", o.max_neighbours, 1, 1 << 20);
  r.describe("max_neighbours", "encoder: edges kept per hidden node, the nearest (anemoi's max_num_neighbours: 64)");
  r.get("decoder_neighbours", o.decoder_neighbours, 1, 64);
  r.describe("decoder_neighbours", "decoder: each grid cell receives from its nearest hidden nodes (anemoi's KNNEdges; "
                                   "AIFS: 3)");
  r.get("data_trainable", o.data_trainable, 0, 1024);
  r.describe("data_trainable", "learned features per grid cell, beside sin/cos of its latitude and longitude (AIFS: 8)");
  r.get("hidden_trainable", o.hidden_trainable, 0, 1024);
  r.describe("hidden_trainable", "learned features per hidden node (AIFS: 8)");
  r.get("edge_trainable", o.edge_trainable, 0, 1024);
  r.describe("edge_trainable", "learned features per encoder and decoder edge (anemoi's trainable_size; AIFS: 8)");
  r.get("latent_skip", o.latent_skip);
  r.describe("latent_skip", "add the processor's input to its output (anemoi's latent_skip)");
  r.get("encoder_chunks", o.encoder_chunks, 1, 1 << 16);
  r.describe("encoder_chunks", "encoder computes its hidden nodes in this many groups, one after another (anemoi's "
                               "num_chunks; same output, less memory)");
  r.get("processor_chunks", o.processor_chunks, 1, 512);
  r.describe("processor_chunks", "processor layers are checkpointed in this many groups (divides processor_layers)");
  r.get("decoder_chunks", o.decoder_chunks, 1, 1 << 16);
  r.describe("decoder_chunks", "decoder computes its grid cells in this many groups, one after another");
  r.get("checkpoint_encoder", o.checkpoint_encoder);
  r.describe("checkpoint_encoder", "with train.checkpointing: recompute the encoder (each chunk) in backward");
  r.get("checkpoint_processor", o.checkpoint_processor);
  r.describe("checkpoint_processor", "with train.checkpointing: recompute the processor (each chunk of layers) in backward");
  r.get("checkpoint_decoder", o.checkpoint_decoder);
  r.describe("checkpoint_decoder", "with train.checkpointing: recompute the decoder (each chunk) in backward");
  {  // the rules between keys (defaults pass them)
    if (o.num_channels % o.num_heads != 0)
      r.fail("num_heads",
             "= " + std::to_string(o.num_heads) + " must divide model.num_channels = " + std::to_string(o.num_channels));
    if (o.num_channels % o.mapper_num_heads != 0)
      r.fail("mapper_num_heads", "= " + std::to_string(o.mapper_num_heads) +
                                     " must divide model.num_channels = " + std::to_string(o.num_channels));
    if (o.processor_layers % o.processor_chunks != 0)
      r.fail("processor_chunks", "= " + std::to_string(o.processor_chunks) + " must divide model.processor_layers = " +
                                     std::to_string(o.processor_layers));
    const std::string g = o.hidden_grid;
    const bool octahedral = g.size() >= 2 && g.size() <= 6 && (g[0] == 'o' || g[0] == 'O') &&
                            g.find_first_not_of("0123456789", 1) == std::string::npos && std::stoll(g.substr(1)) >= 1;
    if (!octahedral)
      r.fail("hidden_grid", "= '" + g + "' is not an octahedral reduced Gaussian grid: expected "
                            "o<N> with N >= 1 (e.g. o48, o96)");
  }
}

// AIFS Single 1.0 (ECMWF; model card huggingface.co/ecmwf/aifs-single-1.0; Lang et al. 2024,
// arXiv:2406.01465): the N320 reduced Gaussian data grid (542,080 cells), the O96 hidden grid
// (40,320 nodes), 1024 channels, 16 transformer layers of 16 heads with a 512 window, 16 mapper
// heads, 8 learned features per cell, hidden node and mapper edge; two input states 6 h apart.
// Variables (our reading of the model card; docs/estimator.md says what was checked): 90
// prognostic (10u 10v 2d 2t msl skt sp tcw, the soil's stl1 stl2 swvl1 swvl2, and q t u v w z on 13
// pressure levels), 13 forcings (lsm, orography z, slor, sdor from files; position, day of year,
// local time and insolation computed), 12 diagnostic (tp cp sf tcc hcc mcc lcc 100u 100v ro ssrd
// strd). anemoi feeds the forcings at both input times; wxtrain's forcings come once, at the
// predicted state's time (docs/data.md), so this preset has 13 input channels fewer than anemoi's
// 206 (13,312 weights of the encoder's embedding, 0.005% of the parameters).
ModelPreset aifs_single_1() {
  const std::vector<int> levels = {50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000};
  std::vector<std::string> prognostic = {"10u", "10v", "2d",   "2t",   "msl",   "skt",
                                         "sp",  "tcw", "stl1", "stl2", "swvl1", "swvl2"};
  for (const auto& name : level_channel_names({"q", "t", "u", "v", "w", "z"}, levels)) prognostic.push_back(name);
  const std::vector<std::string> diagnostic = {"tp", "cp", "sf", "tcc", "hcc", "mcc", "lcc", "100u", "100v", "ro",
                                               "ssrd", "strd"};
  return {"aifs-single-1.0",
          "AIFS Single 1.0: N320 reduced Gaussian grid (542,080 cells), O96 hidden grid, 13 levels, 90 prognostic, "
          "13 forcing and 12 diagnostic variables, two input states 6 h apart",
          "ECMWF AIFS Single 1.0 model card (huggingface.co/ecmwf/aifs-single-1.0); Lang et al. 2024, arXiv:2406.01465",
          "name = \"aifs\"\nnum_channels = 1024\nprocessor_layers = 16\nnum_heads = 16\nmapper_num_heads = 16\n"
          "mlp_hidden_ratio = 4\nhidden_grid = \"o96\"\nwindow_size = 512\ncutoff_factor = 0.6\nmax_neighbours = 64\n"
          "decoder_neighbours = 3\ndata_trainable = 8\nhidden_trainable = 8\nedge_trainable = 8\n",
          "variables = " + toml_string_list(prognostic) + "\ndiagnostic_variables = " + toml_string_list(diagnostic) +
              "\nforcing_variables = [\"lsm\", \"z\", \"slor\", \"sdor\"]\nforcings = [\"cos_latitude\", "
              "\"sin_latitude\", \"cos_longitude\", \"sin_longitude\", \"cos_day_of_year\", \"sin_day_of_year\", "
              "\"cos_local_time\", \"sin_local_time\", \"insolation\"]\ngrid = \"n320\"\nhistory = 2\n"
              "time_step = \"6h\"\n"};
}

}  // namespace

ModelSchema aifs_schema() {
  ModelSchema s = make_model_schema<AifsOptions>(
      "aifs", "AIFS: graph-transformer encoder/decoder and a sliding-window transformer on a reduced Gaussian grid",
      &read, {aifs_single_1()});
  s.shards_grid = true;  // grid bands, hidden nodes by latitude (aifs.cpp set_node_shard)
  return s;
}

}  // namespace wxtrain::models
