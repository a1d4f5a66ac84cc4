// FourCastNet's reference implementation: PhysicsNeMo's physicsnemo.models.afno.AFNO (Modulus'
// modulus.models.afno.AFNO before it), the class Earth2Studio loads the published fcn.mdlus into.
// Its arguments map onto our [model] keys one to one, and its state_dict onto our parameters by
// name alone: the tensors have the same layout (the conv, the positional embedding [1, N, D], the
// filter's [2, nb, bs, bs] weights, the head's (p1, p2, c_out) rows).
//
//   reference                      ours
//   patch_embed.proj.{weight,bias} embed.proj.{weight,bias}
//   pos_embed                      embed.pos_embed
//   blocks.{i}.norm1, filter, norm2 block{i}.norm1, filter, norm2
//   blocks.{i}.mlp.fc1, mlp.fc2     block{i}.fc1, fc2
//   head.weight                    head.weight
//
// What the reference does that ours did not, now an option: the modes its filter slices
// (model.spectral_modes = "reference", which imports set). What ours does that the reference
// cannot: a grid that is not a multiple of the patch (we pad; the reference refuses), so export
// refuses it by name.
#include <algorithm>
#include <regex>

#include "core/config_reader.h"
#include "core/error.h"
#include "models/fourcastnet/fourcastnet.h"

namespace wxtrain::models {
namespace {

// AFNO.__init__'s signature: every argument and its default (nullptr: required).
const nlohmann::json& afno_defaults() {
  static const nlohmann::json defaults = {
      {"inp_shape", nullptr},   {"in_channels", nullptr},       {"out_channels", nullptr},
      {"patch_size", {16, 16}}, {"embed_dim", 256},             {"depth", 4},
      {"mlp_ratio", 4.0},       {"drop_rate", 0.0},             {"num_blocks", 16},
      {"sparsity_threshold", 0.01}, {"hard_thresholding_fraction", 1.0}};
  return defaults;
}

[[noreturn]] void refuse(const std::string& key, const nlohmann::json& value, const std::string& why) {
  throw ConfigError("AFNO argument '" + key + "' = " + value.dump() + ": " + why);
}

int64_t integer(const nlohmann::json& args, const std::string& key) {
  const nlohmann::json& v = args.at(key);
  if (!v.is_number_integer() && !(v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()))))
    refuse(key, v, "expected an integer");
  return v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(v.get<double>());
}

double real(const nlohmann::json& args, const std::string& key) {
  const nlohmann::json& v = args.at(key);
  if (!v.is_number()) refuse(key, v, "expected a number");
  return v.get<double>();
}

std::pair<int64_t, int64_t> pair_of(const nlohmann::json& args, const std::string& key) {
  const nlohmann::json& v = args.at(key);
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer())
    refuse(key, v, "expected two integers");
  return {v[0].get<int64_t>(), v[1].get<int64_t>()};
}

std::pair<ModelConfig, ModelShape> from_afno_args(const nlohmann::json& given) {
  if (!given.is_object()) throw ConfigError("AFNO arguments: expected an object, got " + given.dump());
  nlohmann::json args = afno_defaults();
  for (const auto& [key, value] : given.items()) {
    if (!afno_defaults().contains(key)) {
      std::vector<std::string> known;
      for (const auto& [k, v] : afno_defaults().items()) known.push_back(k);
      refuse(key, value, "not an argument of AFNO that wxtrain's FourCastNet knows (" + join_list(known) + ")" +
                             did_you_mean(key, known));
    }
    args[key] = value;
  }
  for (const auto& [key, value] : args.items())
    if (value.is_null()) throw ConfigError("AFNO argument '" + key + "' is missing (AFNO requires it)");
  const auto [lat, lon] = pair_of(args, "inp_shape");
  const auto [patch_lat, patch_lon] = pair_of(args, "patch_size");
  if (patch_lat != patch_lon) refuse("patch_size", args["patch_size"], "wxtrain's FourCastNet takes square patches");
  if (patch_lat < 1 || lat < 1 || lon < 1 || lat % patch_lat || lon % patch_lon)
    refuse("inp_shape", args["inp_shape"], "must be positive multiples of patch_size " + args["patch_size"].dump());
  if (real(args, "drop_rate") != 0.0)
    refuse("drop_rate", args["drop_rate"], "wxtrain's FourCastNet has no dropout (the published model uses 0)");
  FourCastNetOptions o;
  o.patch_size = patch_lat;
  o.embed_dim = integer(args, "embed_dim");
  o.depth = integer(args, "depth");
  o.mlp_ratio = real(args, "mlp_ratio");
  o.afno_blocks = integer(args, "num_blocks");
  o.sparsity_threshold = real(args, "sparsity_threshold");
  o.hard_thresholding_fraction = real(args, "hard_thresholding_fraction");
  o.spectral_modes = "reference";
  ModelConfig config;
  config.name = fourcastnet_schema().name;
  config.options = ModelOptionsBox(std::make_unique<FourCastNetOptions>(o));
  check_model_options(config);  // our ranges and rules, named as model.<key>
  ModelShape shape;
  shape.in_channels = integer(args, "in_channels");
  shape.out_channels = integer(args, "out_channels");
  if (shape.in_channels < 1) refuse("in_channels", args["in_channels"], "expected a positive count");
  if (shape.out_channels < 1) refuse("out_channels", args["out_channels"], "expected a positive count");
  shape.lat = lat;
  shape.lon = lon;
  return {std::move(config), std::move(shape)};
}

nlohmann::json to_afno_args(const ModelConfig& config, const ModelShape& shape) {
  const auto& o = config.options.as<FourCastNetOptions>();
  const int64_t p = o.patch_size;
  if (shape.lat % p || shape.lon % p)
    throw ConfigError("the grid " + std::to_string(shape.lat) + " x " + std::to_string(shape.lon) +
                      " is not a multiple of model.patch_size = " + std::to_string(p) +
                      ": wxtrain pads it, but PhysicsNeMo's AFNO requires inp_shape divisible by patch_size "
                      "(crop data.region to a multiple of the patch)");
  // The filter must see the modes the reference's does: with model.spectral_modes = "lowest" that
  // holds only where both selections keep the same modes.
  const int64_t h = shape.lat / p, wf = shape.lon / p / 2 + 1;
  if (o.spectral_modes != "reference") {
    const torch::Tensor ours = afno_mode_mask(h, wf, o.hard_thresholding_fraction, false, torch::kFloat);
    const torch::Tensor theirs = afno_mode_mask(h, wf, o.hard_thresholding_fraction, true, torch::kFloat);
    const bool same = ours.defined() == theirs.defined() && (!ours.defined() || torch::equal(ours, theirs));
    if (!same)
      throw ConfigError("model.spectral_modes = \"" + o.spectral_modes + "\" filters other Fourier modes than "
                        "PhysicsNeMo's AFNO on this " + std::to_string(h) + " x " + std::to_string(shape.lon / p) +
                        " patch grid: the exported model would compute another function (train with "
                        "model.spectral_modes = \"reference\" to export)");
  }
  return {{"inp_shape", {shape.lat, shape.lon}},
          {"in_channels", shape.in_channels},
          {"out_channels", shape.out_channels},
          {"patch_size", {p, p}},
          {"embed_dim", o.embed_dim},
          {"depth", o.depth},
          {"mlp_ratio", o.mlp_ratio},
          {"drop_rate", 0.0},
          {"num_blocks", o.afno_blocks},
          {"sparsity_threshold", o.sparsity_threshold},
          {"hard_thresholding_fraction", o.hard_thresholding_fraction}};
}

// Our name of a reference tensor, "" when it has none.
std::string ours_of(const std::string& name) {
  static const std::regex block(R"(blocks\.(\d+)\.(norm1\.(weight|bias)|norm2\.(weight|bias)|filter\.(w1|b1|w2|b2)|mlp\.(fc1|fc2)\.(weight|bias)))");
  if (name == "pos_embed") return "embed.pos_embed";
  if (name == "patch_embed.proj.weight" || name == "patch_embed.proj.bias") return "embed." + name.substr(12);
  if (name == "head.weight") return name;
  std::smatch m;
  if (std::regex_match(name, m, block)) {
    std::string rest = m[2];
    if (rest.rfind("mlp.", 0) == 0) rest = rest.substr(4);
    return "block" + m[1].str() + "." + rest;
  }
  return "";
}

// The reference's name of one of ours, "" when it has none.
std::string theirs_of(const std::string& name) {
  static const std::regex block(R"(block(\d+)\.(norm1\.(weight|bias)|norm2\.(weight|bias)|filter\.(w1|b1|w2|b2)|(fc1|fc2)\.(weight|bias)))");
  if (name == "embed.pos_embed") return "pos_embed";
  if (name == "embed.proj.weight" || name == "embed.proj.bias") return "patch_embed." + name.substr(6);
  if (name == "head.weight") return name;
  std::smatch m;
  if (std::regex_match(name, m, block)) {
    std::string rest = m[2];
    if (rest.rfind("fc", 0) == 0) rest = "mlp." + rest;
    return "blocks." + m[1].str() + "." + rest;
  }
  return "";
}

// Every tensor our FourCastNet of `depth` blocks holds.
std::vector<std::string> our_names(int64_t depth) {
  std::vector<std::string> names = {"embed.proj.weight", "embed.proj.bias", "embed.pos_embed", "head.weight"};
  for (int64_t i = 0; i < depth; ++i)
    for (const char* t : {"norm1.weight", "norm1.bias", "filter.w1", "filter.b1", "filter.w2", "filter.b2",
                          "norm2.weight", "norm2.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"})
      names.push_back("block" + std::to_string(i) + "." + t);
  return names;
}

// Renames every tensor of `from` with `rename`; a name without a counterpart, or one of
// `expected` left without a tensor, is a ConfigError naming it.
StateDict translate(const StateDict& from, const std::function<std::string(const std::string&)>& rename,
                    const std::vector<std::string>& expected, const std::string& from_side, const std::string& to_side) {
  StateDict out;
  for (const auto& [name, tensor] : from) {
    const std::string mapped = rename(name);
    if (mapped.empty())
      throw ConfigError(from_side + " tensor '" + name + "' " + c10::str(tensor.sizes()) + " has no counterpart in " + to_side);
    out[mapped] = tensor;
  }
  for (const auto& name : expected)
    if (!out.count(name)) throw ConfigError(to_side + " needs '" + name + "', which " + from_side + " lacks");
  for (const auto& [name, tensor] : out)
    if (std::find(expected.begin(), expected.end(), name) == expected.end())
      throw ConfigError(from_side + " holds '" + name + "', which " + to_side + " of this depth does not have");
  return out;
}

}  // namespace

ReferenceModel afno_reference() {
  ReferenceModel r;
  r.python_class = "AFNO";
  r.python_module = "physicsnemo.models.afno.afno";
  r.from_reference_args = from_afno_args;
  r.to_reference_args = to_afno_args;
  r.from_reference_state = [](const StateDict& reference, const ModelConfig& config, const ModelShape&) {
    const int64_t depth = config.options.as<FourCastNetOptions>().depth;
    return translate(reference, ours_of, our_names(depth), "the AFNO state_dict's", "wxtrain's FourCastNet");
  };
  r.to_reference_state = [](const StateDict& ours, const ModelConfig& config, const ModelShape&) {
    const int64_t depth = config.options.as<FourCastNetOptions>().depth;
    std::vector<std::string> expected;
    for (const auto& name : our_names(depth)) expected.push_back(theirs_of(name));
    return translate(ours, theirs_of, expected, "wxtrain's FourCastNet", "PhysicsNeMo's AFNO");
  };
  return r;
}

}  // namespace wxtrain::models
