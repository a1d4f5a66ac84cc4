// anemoi-models' AnemoiModelEncProcDec state_dict (one dataset "data", hidden nodes "hidden", as
// AIFS Single is configured) as wxtrain's AIFS, by name.
#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "models/aifs/aifs.h"

namespace wxtrain::models {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

// Rows of anemoi's learned edge features (in its graph provider's edge order) in ours.
torch::Tensor permute_edges(const torch::Tensor& anemoi_rows, const torch::Tensor& anemoi_index,
                            const BipartiteEdges& ours, const std::string& what) {
  const torch::Tensor index = anemoi_index.to(torch::kLong).cpu().contiguous();
  if (index.dim() != 2 || index.size(0) != 2 || index.size(1) != ours.edges() || anemoi_rows.size(0) != ours.edges())
    throw Error("anemoi's " + what + " has " + std::to_string(index.dim() == 2 ? index.size(1) : -1) + " edges (" +
                std::to_string(anemoi_rows.size(0)) + " rows of learned features), this model's graph " +
                std::to_string(ours.edges()) + ": the graphs differ");
  std::map<std::pair<int64_t, int64_t>, int64_t> position;
  const torch::Tensor s = ours.senders.cpu().contiguous(), r = ours.receivers.cpu().contiguous();
  for (int64_t e = 0; e < ours.edges(); ++e) position[{s.data_ptr<int64_t>()[e], r.data_ptr<int64_t>()[e]}] = e;
  std::vector<int64_t> ours_of_theirs(static_cast<size_t>(ours.edges()));
  const int64_t* p = index.data_ptr<int64_t>();
  for (int64_t e = 0; e < ours.edges(); ++e) {
    auto it = position.find({p[e], p[ours.edges() + e]});
    if (it == position.end())
      throw Error("anemoi's " + what + " edge " + std::to_string(p[e]) + " -> " + std::to_string(p[ours.edges() + e]) +
                  " is not in this model's graph");
    ours_of_theirs[static_cast<size_t>(e)] = it->second;
  }
  torch::Tensor out = torch::empty_like(anemoi_rows);
  out.index_copy_(0, torch::tensor(ours_of_theirs, torch::kLong), anemoi_rows);
  return out;
}

}  // namespace

StateDict aifs_state_from_anemoi(const StateDict& anemoi, const AifsImpl& model,
                                 const torch::Tensor& anemoi_encoder_edge_index,
                                 const torch::Tensor& anemoi_decoder_edge_index) {
  StateDict out;
  std::set<std::string> used;
  auto take = [&](const std::string& theirs, std::string ours) {
    auto it = anemoi.find(theirs);
    if (it == anemoi.end()) throw Error("anemoi's state_dict has no " + theirs + " (for " + ours + ")");
    // anemoi's MLP holds its layers in a Sequential named mlp: node_dst_mlp.mlp.0 is our node_dst_mlp.0.
    const size_t inner = ours.find("mlp.mlp.");
    if (inner != std::string::npos) ours.erase(inner, 4);
    out[ours] = it->second;
    used.insert(theirs);
  };
  // Conditional-norm noise channels are not read by the embeddings.
  const int64_t in_channels = model.shape().in_channels - model.shape().conditional_noise;
  // AnemoiEnsModelEncProcDec (its noise_injector in the state_dict) appends one more input column
  // after the node features: the forecast step, min(1, fcstep) (0 at the first rollout step, 1
  // after). wxtrain's model does not know the step: the column is dropped, which is exact at fcstep
  // 0 (where anemoi multiplies it by zero), and the model with noise channels must say so.
  bool ensemble = false;
  for (const auto& [name, tensor] : anemoi) ensemble = ensemble || starts_with(name, "noise_injector.");
  if (ensemble != (model.shape().conditional_noise > 0))
    throw Error(std::string("anemoi's state_dict is ") + (ensemble ? "an ensemble model's (noise_injector)" : "a deterministic model's") +
                ", this AIFS " + (ensemble ? "has no" : "has") + " conditional-norm noise (train.noise_injection)");
  const int64_t fcstep_columns = ensemble ? 1 : 0;
  const int64_t node_features = 4 + model.options().data_trainable;
  // anemoi's one embedding of [input channels, node features] is ours two: columns split.
  auto split_columns = [&](const std::string& theirs, const std::string& channels, const std::string& position) {
    auto it = anemoi.find(theirs);
    if (it == anemoi.end()) throw Error("anemoi's state_dict has no " + theirs);
    if (it->second.dim() != 2 || it->second.size(1) != in_channels + node_features + fcstep_columns)
      throw Error("anemoi's " + theirs + " is " + std::to_string(it->second.dim() == 2 ? it->second.size(1) : -1) +
                  " columns wide; this model reads " + std::to_string(in_channels) + " input channels and " +
                  std::to_string(node_features) + " node features" + (ensemble ? " (and anemoi a forecast step)" : ""));
    out[channels] = it->second.narrow(1, 0, in_channels).contiguous();
    out[position] = it->second.narrow(1, in_channels, node_features).contiguous();
    used.insert(theirs);
  };
  for (const auto& [name, tensor] : anemoi) {
    if (starts_with(name, "encoder.data.") || starts_with(name, "decoder.data.")) {
      const std::string side = name.substr(0, 7);  // "encoder" / "decoder"
      const std::string rest = name.substr(std::string("encoder.data.").size());
      // anemoi's layer_norm_attention and layer_norm_attention_dest are one module: a state_dict
      // has both names, named_parameters() only the first.
      if (starts_with(rest, "proc.layer_norm_attention.")) {
        take(name, side + ".layer_norm_attention_dest." + rest.substr(std::string("proc.layer_norm_attention.").size()));
      } else if (starts_with(rest, "proc.layer_norm_attention_dest.")) {
        const std::string alias = side + ".data.proc.layer_norm_attention." +
                                  rest.substr(std::string("proc.layer_norm_attention_dest.").size());
        if (!anemoi.count(alias)) take(name, side + ".layer_norm_attention_dest." +
                                                 rest.substr(std::string("proc.layer_norm_attention_dest.").size()));
        used.insert(name);
      } else if (side == "encoder" && rest == "emb_nodes_src.weight") {
        split_columns(name, "encoder.emb_nodes_src.weight", "encoder.emb_nodes_src_position.weight");
      } else if (side == "encoder" && rest == "emb_nodes_src.bias") {
        take(name, "encoder.emb_nodes_src.bias");
      } else if (side == "encoder" && starts_with(rest, "emb_nodes_dst.")) {
        take(name, "encoder.emb_nodes_dst_position." + rest.substr(std::string("emb_nodes_dst.").size()));
      } else if (side == "decoder" && rest == "emb_nodes_dst.weight") {
        split_columns(name, "decoder.emb_nodes_dst.weight", "decoder.emb_nodes_dst_position.weight");
      } else {
        take(name, side + "." + (starts_with(rest, "proc.") ? rest.substr(5) : rest));
      }
    } else if (starts_with(name, "processor.proc.")) {
      const std::string rest = name.substr(std::string("processor.proc.").size());
      const size_t dot = rest.find('.');
      std::string inner = rest.substr(dot + 1);
      // Our layer holds the attention's Linears itself: attention.lin_q is lin_q.
      if (starts_with(inner, "attention.")) inner = inner.substr(std::string("attention.").size());
      take(name, "processor" + rest.substr(0, dot) + "." + inner);
    } else if (starts_with(name, "noise_injector.noise_mlp.")) {
      out[name] = tensor;  // the same module path (NoiseConditioning.noise_mlp: mlp.0, mlp.2, layer_norm)
      used.insert(name);
    } else if (name == "node_attributes.latlons_data") {
      take(name, "latlons_data");
    } else if (name == "node_attributes.latlons_hidden") {
      take(name, "latlons_hidden");
    } else if (name == "node_attributes.trainable_tensors.data.trainable") {
      take(name, "encoder.data_trainable");
    } else if (name == "node_attributes.trainable_tensors.hidden.trainable") {
      take(name, "encoder.hidden_trainable");
    } else if (name == "encoder_graph_provider.data.trainable.trainable") {
      out["encoder.edge_trainable"] =
          permute_edges(tensor, anemoi_encoder_edge_index, model.encoder_edges(), "encoder (data -> hidden)");
      used.insert(name);
    } else if (name == "decoder_graph_provider.data.trainable.trainable") {
      out["decoder.edge_trainable"] =
          permute_edges(tensor, anemoi_decoder_edge_index, model.decoder_edges(), "decoder (hidden -> data)");
      used.insert(name);
    } else if (name.find("trainable_layout_version") != std::string::npos) {
      if (tensor.item<int64_t>() != 1)
        throw Error(name + " = " + std::to_string(tensor.item<int64_t>()) + ": only anemoi's layout 1 is known");
      used.insert(name);
    }
  }
  for (const auto& [name, tensor] : anemoi)
    if (!used.count(name)) throw Error("anemoi's " + name + " has no place in wxtrain's AIFS");
  return out;
}

}  // namespace wxtrain::models
