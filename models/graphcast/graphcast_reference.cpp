// GraphCast's reference: PhysicsNeMo's GraphCastNet (physicsnemo.models.graphcast.graph_cast_net,
// nvidia-physicsnemo 2.2.2). Its constructor arguments as our options and shape, its state_dict as
// ours, both ways (models/reference_model.h). docs/interop_graphcast.md lists what differs and how.
//
// What the reference computes, and the options that make ours compute the same:
//   model.graph = "physicsnemo"           its graph (physicsnemo_graph.cpp), on its grid: latitudes
//                                         linspace(-90, 90, H), longitudes linspace(-180, 180, W + 1)[1:]
//   model.grid_position_features = false  its grid nodes read the input channels only
//   model.aggregate_residual = true       its processor sums e + MLP(e, ...) into the nodes
// Its MLPs are ours with the first Linear on a concatenation (ours is split per input, the same
// parameters): encoder/decoder/processor node MLPs read (sum of edges, node), ours (node, sum).
#include "models/graphcast/graphcast_reference.h"

#include <cmath>
#include <functional>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "models/graphcast/graphcast.h"

namespace wxtrain::models {
namespace {

const char* const kClass = "GraphCastNet";

// The reference's constructor defaults (GraphCastNet.__init__), filled in where a file leaves a
// key out.
nlohmann::json reference_defaults() {
  return {{"mesh_level", 6},
          {"multimesh", true},
          {"input_res", {721, 1440}},
          {"input_dim_grid_nodes", 474},
          {"input_dim_mesh_nodes", 3},
          {"input_dim_edges", 4},
          {"output_dim_grid_nodes", 227},
          {"processor_type", "MessagePassing"},
          {"khop_neighbors", 32},
          {"num_attention_heads", 4},
          {"processor_layers", 16},
          {"hidden_layers", 1},
          {"hidden_dim", 512},
          {"aggregation", "sum"},
          {"activation_fn", "silu"},
          {"norm_type", "LayerNorm"},
          {"use_cugraphops_encoder", false},
          {"use_cugraphops_processor", false},
          {"use_cugraphops_decoder", false},
          {"do_concat_trick", false},
          {"recompute_activation", false},
          {"partition_size", 1},
          {"partition_group_name", nullptr},
          {"use_lat_lon_partitioning", false},
          {"expect_partitioned_input", false},
          {"global_features_on_rank_0", false},
          {"produce_aggregated_output", true},
          {"produce_aggregated_output_on_all_ranks", true},
          {"graph_backend", "pyg"}};
}

[[noreturn]] void refuse(const std::string& key, const nlohmann::json& value, const std::string& why) {
  throw ConfigError(std::string(kClass) + " argument '" + key + "' = " + value.dump() + ": " + why);
}

int64_t integer(const nlohmann::json& args, const std::string& key, int64_t min, int64_t max) {
  const nlohmann::json& v = args.at(key);
  if (!v.is_number_integer()) refuse(key, v, "expected an integer");
  const auto x = v.get<int64_t>();
  if (x < min || x > max)
    refuse(key, v, "wxtrain's GraphCast takes " + std::to_string(min) + " .. " + std::to_string(max));
  return x;
}

bool boolean(const nlohmann::json& args, const std::string& key) {
  const nlohmann::json& v = args.at(key);
  if (!v.is_boolean()) refuse(key, v, "expected true or false");
  return v.get<bool>();
}

std::string text(const nlohmann::json& args, const std::string& key) {
  const nlohmann::json& v = args.at(key);
  if (!v.is_string()) refuse(key, v, "expected a string");
  return v.get<std::string>();
}

// The arguments with the defaults filled in; a key the reference does not have is refused.
nlohmann::json complete_args(const nlohmann::json& file) {
  const nlohmann::json& given = file.contains("__args__") ? file.at("__args__") : file;
  if (!given.is_object()) throw ConfigError(std::string(kClass) + " arguments: expected a JSON object, got " + given.dump());
  nlohmann::json args = reference_defaults();
  for (const auto& [key, value] : given.items()) {
    if (!args.contains(key))
      throw ConfigError(std::string(kClass) + " argument '" + key + "' is not one of GraphCastNet's (nvidia-physicsnemo 2.2.2)");
    args[key] = value;
  }
  return args;
}

}  // namespace

std::pair<std::vector<double>, std::vector<double>> physicsnemo_grid(int64_t lat, int64_t lon) {
  // torch.linspace in float32, as GraphCastNet makes them (the same kernel, the same values).
  const torch::Tensor la = torch::linspace(-90, 90, lat, torch::kFloat);
  const torch::Tensor lo = torch::linspace(-180, 180, lon + 1, torch::kFloat).slice(0, 1);
  std::vector<double> latitudes(static_cast<size_t>(lat)), longitudes(static_cast<size_t>(lon));
  for (int64_t i = 0; i < lat; ++i) latitudes[static_cast<size_t>(i)] = la[i].item<float>();
  for (int64_t j = 0; j < lon; ++j) longitudes[static_cast<size_t>(j)] = lo[j].item<float>();
  return {latitudes, longitudes};
}

std::pair<ModelConfig, ModelShape> graphcast_from_reference_args(const nlohmann::json& file) {
  const nlohmann::json args = complete_args(file);
  // What wxtrain's GraphCast cannot be: refused by name.
  if (!boolean(args, "multimesh")) refuse("multimesh", args.at("multimesh"), "wxtrain's GraphCast has the multi-mesh only (true)");
  if (text(args, "processor_type") != "MessagePassing")
    refuse("processor_type", args.at("processor_type"), "wxtrain's GraphCast has the message-passing processor only");
  if (text(args, "aggregation") != "sum") refuse("aggregation", args.at("aggregation"), "wxtrain's GraphCast sums messages (\"sum\")");
  if (text(args, "activation_fn") != "silu") refuse("activation_fn", args.at("activation_fn"), "wxtrain's GraphCast uses \"silu\"");
  const std::string norm = text(args, "norm_type");
  if (norm != "LayerNorm" && norm != "TELayerNorm")  // TELayerNorm: the same LayerNorm, fused on the GPU
    refuse("norm_type", args.at("norm_type"), "expected \"LayerNorm\" or \"TELayerNorm\"");
  for (const char* key : {"use_cugraphops_encoder", "use_cugraphops_processor", "use_cugraphops_decoder"})
    if (boolean(args, key)) refuse(key, args.at(key), "cugraph-ops is not supported (false)");
  if (text(args, "graph_backend") != "pyg") refuse("graph_backend", args.at("graph_backend"), "the graph is PyG's (\"pyg\")");
  // Graph partitioning only acts with partition_size > 1; with 1 the other partition keys do nothing.
  integer(args, "partition_size", 1, 1);
  integer(args, "input_dim_mesh_nodes", 3, 3);
  integer(args, "input_dim_edges", 4, 4);
  // Options with no effect on the function (memory or speed only): do_concat_trick (the first
  // Linear of the edge MLPs stored split: from_reference_state reads either layout),
  // recompute_activation; khop_neighbors and num_attention_heads (graph transformer only).
  boolean(args, "do_concat_trick");
  boolean(args, "recompute_activation");

  ModelConfig config;
  config.name = "graphcast";
  auto& o = config.options.as<GraphCastOptions>();
  o.mesh_refinement = integer(args, "mesh_level", 0, 7);
  o.processor_layers = integer(args, "processor_layers", 3, 512);
  // Its MLPs have hidden_layers + 1 Linears (hidden_layers = 0 builds the same two as 1).
  o.mlp_layers = integer(args, "hidden_layers", 1, 7) + 1;
  o.latent = integer(args, "hidden_dim", 1, 1 << 16);
  o.edge_block = 0;
  o.graph = "physicsnemo";
  o.grid_position_features = false;
  o.aggregate_residual = true;

  const nlohmann::json& res = args.at("input_res");
  if (!res.is_array() || res.size() != 2 || !res[0].is_number_integer() || !res[1].is_number_integer() ||
      res[0].get<int64_t>() < 2 || res[1].get<int64_t>() < 2)
    refuse("input_res", res, "expected [latitudes, longitudes], two integers >= 2");
  ModelShape shape;
  shape.in_channels = integer(args, "input_dim_grid_nodes", 1, int64_t{1} << 20);
  shape.out_channels = integer(args, "output_dim_grid_nodes", 1, int64_t{1} << 20);
  shape.lat = res[0].get<int64_t>();
  shape.lon = res[1].get<int64_t>();
  std::tie(shape.latitudes, shape.longitudes) = physicsnemo_grid(shape.lat, shape.lon);
  check_model_options(config);
  return {config, shape};
}

nlohmann::json graphcast_to_reference_args(const ModelConfig& config, const ModelShape& shape) {
  const auto& o = config.options.as<GraphCastOptions>();
  auto unexpressible = [](const std::string& what) {
    throw ConfigError(std::string(kClass) + " cannot express " + what);
  };
  if (o.graph != "physicsnemo")
    unexpressible("model.graph = \"" + o.graph + "\": it builds its own graph (set model.graph = \"physicsnemo\")");
  if (o.grid_position_features)
    unexpressible("model.grid_position_features = true: its grid nodes read the input channels only");
  if (!o.aggregate_residual) unexpressible("model.aggregate_residual = false: its processor sums e + MLP");
  if (o.mlp_layers < 2) unexpressible("model.mlp_layers = 1: its MLPs have two Linears or more");
  if (o.processor_layers < 3) unexpressible("model.processor_layers = " + std::to_string(o.processor_layers) + " (it needs 3 or more)");
  // It builds its graph on its own grid; a model trained on another holds another graph.
  const auto [lat, lon] = physicsnemo_grid(shape.lat, shape.lon);
  const auto [our_lat, our_lon] = graphcast_grid(shape);
  auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::abs(a[i] - b[i]) > 1e-4) return false;
    return true;
  };
  if (!same(lat, our_lat) || !same(lon, our_lon)) {
    std::ostringstream m;
    m << "the grid of latitudes " << our_lat.front() << " .. " << our_lat.back() << " and longitudes " << our_lon.front()
      << " .. " << our_lon.back() << ": GraphCastNet builds its graph on latitudes -90 .. 90 (south first) and longitudes "
      << lon.front() << " .. 180, " << shape.lat << " x " << shape.lon;
    unexpressible(m.str());
  }
  nlohmann::json args = reference_defaults();
  args["mesh_level"] = o.mesh_refinement;
  args["input_res"] = {shape.lat, shape.lon};
  args["input_dim_grid_nodes"] = shape.in_channels;
  args["output_dim_grid_nodes"] = shape.out_channels;
  args["processor_layers"] = o.processor_layers;
  args["hidden_layers"] = o.mlp_layers - 1;
  args["hidden_dim"] = o.latent;
  return args;
}

namespace {

// One MLP of each side. Its first Linear reads a concatenation of inputs: `inputs` lists them in
// the reference's order as (width, our input index).
struct MlpPair {
  std::string ours, reference;
  std::vector<std::pair<int64_t, size_t>> inputs;
  bool layer_norm = true;
  bool edge_mlp = false;  // an edge MLP: with do_concat_trick its first Linear is lin_efeat/lin_src/lin_dst
};

std::vector<MlpPair> mlp_pairs(const GraphCastOptions& o, const ModelShape& s) {
  const int64_t L = o.latent;
  const std::vector<std::pair<int64_t, size_t>> edge = {{L, 0}, {L, 1}, {L, 2}};  // (e, sender, receiver)
  const std::vector<std::pair<int64_t, size_t>> node = {{L, 1}, {L, 0}};          // (sum of edges, node)
  std::vector<MlpPair> p = {
      {"grid2mesh.grid_embed", "encoder_embedder.grid_node_mlp", {{s.in_channels, 0}}},
      {"grid2mesh.mesh_embed", "encoder_embedder.mesh_node_mlp", {{3, 0}}},
      {"grid2mesh.g2m_edge_embed", "encoder_embedder.grid2mesh_edge_mlp", {{4, 0}}},
      {"grid2mesh.mesh_edge_embed", "encoder_embedder.mesh_edge_mlp", {{4, 0}}},
      {"grid2mesh.edge_mlp", "encoder.edge_mlp", edge, true, true},
      {"grid2mesh.mesh_node_mlp", "encoder.dst_node_mlp", node},
      {"grid2mesh.grid_node_mlp", "encoder.src_node_mlp", {{L, 0}}},
  };
  // The reference's processor: processor_encoder (1 layer), processor (P - 2), processor_decoder
  // (1); each layer an edge block then a node block, numbered in one ModuleList.
  for (int64_t i = 0; i < o.processor_layers; ++i) {
    std::string block;
    int64_t k = 0;
    if (i == 0) {
      block = "processor_encoder";
    } else if (i == o.processor_layers - 1) {
      block = "processor_decoder";
    } else {
      block = "processor";
      k = i - 1;
    }
    const std::string prefix = block + ".processor_layers.";
    const std::string ours = "processor" + std::to_string(i);
    p.push_back({ours + ".edge_mlp", prefix + std::to_string(2 * k) + ".edge_mlp", edge, true, true});
    p.push_back({ours + ".node_mlp", prefix + std::to_string(2 * k + 1) + ".node_mlp", node});
  }
  p.push_back({"mesh2grid.m2g_edge_embed", "decoder_embedder.mesh2grid_edge_mlp", {{4, 0}}});
  p.push_back({"mesh2grid.edge_mlp", "decoder.edge_mlp", edge, true, true});
  p.push_back({"mesh2grid.grid_node_mlp", "decoder.node_mlp", node});
  p.push_back({"mesh2grid.output_mlp", "finale", {{L, 0}}, /*layer_norm=*/false});
  return p;
}

// The reference's names for Linear k (k >= 1) and the LayerNorm of an MLP of `layers` Linears:
// nn.Sequential(Linear, SiLU, ..., Linear, LayerNorm), or with the concat trick
// (SiLU, Linear, SiLU, ..., Linear, LayerNorm) after the split first Linear.
std::string reference_linear(const MlpPair& m, bool split, int64_t k) {
  return m.reference + ".model." + std::to_string(split ? 2 * k - 1 : 2 * k);
}
std::string reference_norm(const MlpPair& m, bool split, int64_t layers) {
  return m.reference + ".model." + std::to_string(split ? 2 * layers - 2 : 2 * layers - 1);
}

class Take {
 public:
  explicit Take(const StateDict& from, const char* side) : from_(from), side_(side) {}
  torch::Tensor operator()(const std::string& name, const std::vector<int64_t>& shape) {
    auto it = from_.find(name);
    if (it == from_.end()) {
      std::ostringstream m;
      m << side_ << " state_dict has no '" << name << "' (expected a tensor of shape " << c10::IntArrayRef(shape) << ")";
      throw ConfigError(m.str());
    }
    if (it->second.sizes() != c10::IntArrayRef(shape)) {
      std::ostringstream m;
      m << side_ << " state_dict's '" << name << "' has shape " << it->second.sizes() << ", expected "
        << c10::IntArrayRef(shape);
      throw ConfigError(m.str());
    }
    used_.insert(name);
    return it->second;
  }
  bool has(const std::string& name) const { return from_.count(name) > 0; }
  // A tensor nobody asked for: the first is named.
  void check_all_used(const std::function<bool(const std::string&)>& ignorable) const {
    for (const auto& [name, t] : from_)
      if (!used_.count(name) && !ignorable(name))
        throw ConfigError(std::string(side_) + " state_dict's '" + name + "' has no counterpart in the other model");
  }

 private:
  const StateDict& from_;
  const char* side_;
  std::set<std::string> used_;
};

}  // namespace

StateDict graphcast_from_reference_state(const StateDict& reference, const ModelConfig& config, const ModelShape& shape) {
  const auto& o = config.options.as<GraphCastOptions>();
  if (o.grid_position_features)
    throw ConfigError("graphcast: model.grid_position_features = true has grid2mesh.grid_embed.first.1.weight, "
                      "which GraphCastNet's state_dict has no counterpart for (set it to false)");
  Take take(reference, "GraphCastNet's");
  const bool split = take.has("encoder.edge_mlp.lin_efeat");  // do_concat_trick = true
  const int64_t L = o.latent, layers = o.mlp_layers;
  TORCH_CHECK(layers >= 2, "graphcast_from_reference_state: model.mlp_layers must be 2 or more");
  StateDict ours;
  for (const MlpPair& m : mlp_pairs(o, shape)) {
    const int64_t first_out = L;  // two Linears or more: the first goes to the hidden width
    int64_t width = 0;
    for (const auto& [w, i] : m.inputs) width += w;
    // The first Linear, cut by input and put in our input order.
    std::vector<torch::Tensor> parts(m.inputs.size());
    torch::Tensor bias;
    if (m.edge_mlp && split) {
      const char* names[] = {"lin_efeat", "lin_src", "lin_dst"};
      for (size_t j = 0; j < 3; ++j)
        parts[m.inputs[j].second] = take(m.reference + "." + names[j], {first_out, m.inputs[j].first});
      bias = take(m.reference + ".bias", {first_out});
    } else {
      const torch::Tensor w = take(m.reference + ".model.0.weight", {first_out, width});
      bias = take(m.reference + ".model.0.bias", {first_out});
      int64_t at = 0;
      for (const auto& [w_in, i] : m.inputs) {
        parts[i] = w.narrow(1, at, w_in);
        at += w_in;
      }
    }
    for (size_t i = 0; i < parts.size(); ++i) ours[m.ours + ".first." + std::to_string(i) + ".weight"] = parts[i].contiguous();
    ours[m.ours + ".first.0.bias"] = bias;
    for (int64_t k = 1; k < layers; ++k) {
      const int64_t out = k == layers - 1 && m.ours == "mesh2grid.output_mlp" ? shape.out_channels : L;
      const std::string r = reference_linear(m, m.edge_mlp && split, k);
      ours[m.ours + ".layer" + std::to_string(k) + ".weight"] = take(r + ".weight", {out, L});
      ours[m.ours + ".layer" + std::to_string(k) + ".bias"] = take(r + ".bias", {out});
    }
    if (m.layer_norm) {
      const std::string r = reference_norm(m, m.edge_mlp && split, layers);
      ours[m.ours + ".norm.weight"] = take(r + ".weight", {L});
      ours[m.ours + ".norm.bias"] = take(r + ".bias", {L});
    }
  }
  take.check_all_used([](const std::string&) { return false; });
  return ours;
}

StateDict graphcast_to_reference_state(const StateDict& ours, const ModelConfig& config, const ModelShape& shape) {
  const auto& o = config.options.as<GraphCastOptions>();
  if (o.grid_position_features)
    throw ConfigError("graphcast: grid2mesh.grid_embed.first.1.weight (model.grid_position_features = true) has no "
                      "counterpart in GraphCastNet's state_dict");
  Take take(ours, "wxtrain's");
  const int64_t L = o.latent, layers = o.mlp_layers;
  if (layers < 2) throw ConfigError("GraphCastNet cannot express model.mlp_layers = 1: its MLPs have two Linears or more");
  StateDict reference;
  for (const MlpPair& m : mlp_pairs(o, shape)) {
    const int64_t first_out = L;  // two Linears or more: the first goes to the hidden width
    std::vector<torch::Tensor> columns;
    for (const auto& [w_in, i] : m.inputs)
      columns.push_back(take(m.ours + ".first." + std::to_string(i) + ".weight", {first_out, w_in}));
    reference[m.reference + ".model.0.weight"] = torch::cat(columns, 1);
    reference[m.reference + ".model.0.bias"] = take(m.ours + ".first.0.bias", {first_out});
    for (int64_t k = 1; k < layers; ++k) {
      const int64_t out = k == layers - 1 && m.ours == "mesh2grid.output_mlp" ? shape.out_channels : L;
      const std::string r = reference_linear(m, false, k);
      reference[r + ".weight"] = take(m.ours + ".layer" + std::to_string(k) + ".weight", {out, L});
      reference[r + ".bias"] = take(m.ours + ".layer" + std::to_string(k) + ".bias", {out});
    }
    if (m.layer_norm) {
      const std::string r = reference_norm(m, false, layers);
      reference[r + ".weight"] = take(m.ours + ".norm.weight", {L});
      reference[r + ".bias"] = take(m.ours + ".norm.bias", {L});
    }
  }
  // Our graph buffers (GraphCastImpl's registered buffers): GraphCastNet rebuilds its graph from its
  // arguments and keeps none in its state_dict.
  static const std::set<std::string> graph_buffers = {
      "grid_features", "mesh_features",  "g2m_senders",        "g2m_receivers", "g2m_features",  "mesh_senders",
      "mesh_receivers", "mesh_edge_features", "m2g_senders", "m2g_receivers", "m2g_features"};
  take.check_all_used([](const std::string& name) { return graph_buffers.count(name) > 0; });
  return reference;
}

ReferenceModel graphcast_reference() {
  ReferenceModel r;
  r.python_class = kClass;
  r.python_module = "physicsnemo.models.graphcast.graph_cast_net";
  r.from_reference_args = &graphcast_from_reference_args;
  r.to_reference_args = &graphcast_to_reference_args;
  r.from_reference_state = &graphcast_from_reference_state;
  r.to_reference_state = &graphcast_to_reference_state;
  return r;
}

}  // namespace wxtrain::models
