// Pangu-Weather's reference implementation: PhysicsNeMo's physicsnemo.models.pangu.Pangu (revised
// from WeatherLearn). Its five arguments (img_size, patch_size, embed_dim, num_heads, window_size)
// become our [model] keys with the options that make ours compute its function (pangu.h lists
// them: pre-norm blocks, centered padding, a fixed roll of [1, 3, 6], windows never cut to the
// grid, every wrapped edge masked); the rest of its architecture is fixed in its code and fixed
// here: 5 upper-air variables on 13 levels, 4 surface variables plus 3 constant masks in, stage
// depths 2, 6, 6, 2, MLP ratio 4.
//
//   reference (state_dict)                          ours
//   patchembed2d.proj.{weight,bias}  Conv2d          embed.surface.{weight,bias}   Linear (kernel flattened)
//   patchembed3d.proj.{weight,bias}  Conv3d          embed.upper.{weight,bias}
//   layer{s}.blocks.{i}.norm1, norm2                 layer{s}_block{i}.norm1, norm2
//   layer{s}.blocks.{i}.attn.qkv, proj               layer{s}_block{i}.attn.qkv, proj
//   layer{s}.blocks.{i}.attn.earth_position_bias_table  layer{s}_block{i}.attn.earth_bias (same layout)
//   layer{s}.blocks.{i}.attn.earth_position_index [N, N]  layer{s}_block{i}.attn.position_index [N * N]
//   layer{s}.blocks.{i}.attn_mask (odd i)            layer{s}_block{i}.shift_mask
//   layer{s}.blocks.{i}.mlp.layers.{0,2}             layer{s}_block{i}.fc1, fc2
//   downsample.linear, norm                          downsample.reduce, norm
//   upsample.linear1, linear2, norm                  upsample.expand, mix, norm
//   patchrecovery2d.conv.{weight,bias} ConvTranspose2d  head.surface.weight (transposed), head.surface_bias
//   patchrecovery3d.conv.{weight,bias} ConvTranspose3d  head.upper.weight (transposed), head.upper_bias
//
// The recovery's input is [layer 4's output, the skip] in the reference and [skip, layer 4's
// output] in ours (the pseudocode's order): the head's weights swap their two halves of inputs.
// The buffers are not loaded blindly: the index and the masks a checkpoint holds must be the ones
// its arguments imply, or the weights were trained for another architecture.
#include <algorithm>
#include <optional>
#include <set>
#include <sstream>

#include "core/config_reader.h"
#include "core/error.h"
#include "models/pangu/pangu.h"

namespace wxtrain::models {
namespace {

// What PhysicsNeMo's Pangu fixes in its code (physicsnemo/models/pangu/pangu.py).
constexpr int64_t kUpperVariables = 5, kLevels = 13, kSurface = 4, kMasks = 3, kTokenLevels = 8;
constexpr int64_t kDepths[4] = {2, 6, 6, 2};
// Transformer3DBlock's shift when FuserLayer passes none (every odd block), whatever the window.
constexpr int64_t kShift[3] = {1, 3, 6};

// Pangu.__init__'s signature: every argument and its default.
const nlohmann::json& pangu_defaults() {
  static const nlohmann::json defaults = {{"img_size", {721, 1440}},
                                          {"patch_size", {2, 4, 4}},
                                          {"embed_dim", 192},
                                          {"num_heads", {6, 12, 12, 6}},
                                          {"window_size", {2, 6, 12}}};
  return defaults;
}

[[noreturn]] void refuse(const std::string& key, const nlohmann::json& value, const std::string& why) {
  throw ConfigError("Pangu argument '" + key + "' = " + value.dump() + ": " + why);
}

std::vector<int64_t> integers(const nlohmann::json& args, const std::string& key, size_t count) {
  const nlohmann::json& v = args.at(key);
  std::vector<int64_t> out;
  if (v.is_array() && v.size() == count)
    for (const auto& e : v)
      if (e.is_number_integer() && e.get<int64_t>() >= 1) out.push_back(e.get<int64_t>());
  if (out.size() != count) refuse(key, v, "expected " + std::to_string(count) + " positive integers");
  return out;
}

std::string text(const std::vector<int64_t>& v) { return nlohmann::json(v).dump(); }

// The zero padding PhysicsNeMo puts before a dimension of `size` cut into patches or windows of
// `multiple` (get_pad3d, PatchEmbed2D/3D): half of what is missing, rounded down.
int64_t padding(int64_t size, int64_t multiple) { return size % multiple ? multiple - size % multiple : 0; }

std::pair<ModelConfig, ModelShape> from_pangu_args(const nlohmann::json& given) {
  if (!given.is_object()) throw ConfigError("Pangu arguments: expected an object, got " + given.dump());
  nlohmann::json args = pangu_defaults();
  std::vector<std::string> known;
  for (const auto& [k, v] : pangu_defaults().items()) known.push_back(k);
  for (const auto& [key, value] : given.items()) {
    if (!pangu_defaults().contains(key))
      refuse(key, value, "not an argument of PhysicsNeMo's Pangu that wxtrain knows (" + join_list(known) + ")" +
                             did_you_mean(key, known));
    args[key] = value;
  }
  const std::vector<int64_t> img = integers(args, "img_size", 2), patch = integers(args, "patch_size", 3);
  const std::vector<int64_t> heads = integers(args, "num_heads", 4), window = integers(args, "window_size", 3);
  const nlohmann::json& dim = args.at("embed_dim");
  if (!dim.is_number_integer() || dim.get<int64_t>() < 1) refuse("embed_dim", dim, "expected a positive integer");
  if (patch[0] != 2)
    refuse("patch_size", args["patch_size"], "PhysicsNeMo's Pangu sizes its token grid as 8 levels (13 levels in "
                                             "patches of 2, plus the surface) whatever patch_size[0]; only 2 runs");
  if (patch[1] != patch[2]) refuse("patch_size", args["patch_size"], "wxtrain's Pangu takes square lat/lon patches");
  // PatchEmbed3D takes the latitude's remainder modulo patch_size[0] (PatchEmbed2D modulo
  // patch_size[1]): where the two pad differently the reference's own token grids disagree.
  const int64_t pad2d = padding(img[0], patch[1]), pad3d = img[0] % patch[0] ? patch[1] - img[0] % patch[0] : 0;
  if (pad2d != pad3d)
    refuse("img_size", args["img_size"], "PhysicsNeMo's PatchEmbed3D pads latitude by " + std::to_string(pad3d) +
                                             " rows (its remainder taken modulo patch_size[0]) and PatchEmbed2D by " +
                                             std::to_string(pad2d) + "; wxtrain pads both alike. Latitudes that "
                                             "leave the same remainder modulo " + std::to_string(patch[0]) + " and " +
                                             std::to_string(patch[1]) + " (e.g. 721 with patches of 4) work");
  for (size_t d = 0; d < 3; ++d)
    if (window[d] <= kShift[d])
      refuse("window_size", args["window_size"], "PhysicsNeMo's blocks roll their windows by [1, 3, 6] whatever the "
                                                 "window, and wxtrain needs the roll smaller than the window");

  PanguOptions o;
  o.patch_size = patch[1];
  o.level_patch = patch[0];
  o.embed_dim = dim.get<int64_t>();
  o.mlp_ratio = 4.0;
  o.upper_variables = kUpperVariables;
  o.levels = kLevels;
  o.window = window;
  o.stage_depths = {kDepths[0], kDepths[1], kDepths[2], kDepths[3]};
  o.stage_heads = heads;
  o.block_norm = "pre";
  o.padding = "centered";
  o.window_shift = {kShift[0], kShift[1], kShift[2]};
  o.fit_window = false;
  o.shift_mask = "all_edges";
  ModelConfig config;
  config.name = "pangu";
  config.options = ModelOptionsBox(std::make_unique<PanguOptions>(o));
  check_model_options(config);  // the heads against the widths, as a run file's would be
  ModelShape shape;
  shape.lat = img[0];
  shape.lon = img[1];
  // One state of 5 x 13 upper-air and 4 surface channels, and the 3 masks as forcings.
  shape.state_channels = kUpperVariables * kLevels + kSurface;
  shape.in_channels = shape.state_channels + kMasks;
  shape.out_channels = shape.state_channels;
  shape.history = 1;
  return {config, shape};
}

// Why our configuration is not a PhysicsNeMo Pangu, or "" when it is one.
std::string not_a_reference_pangu(const PanguOptions& o, const ModelShape& s) {
  auto differs = [](const std::string& key, const std::string& ours, const std::string& theirs) {
    return "model." + key + " = " + ours + " (PhysicsNeMo's Pangu: " + theirs + ")";
  };
  if (o.upper_variables != kUpperVariables) return differs("upper_variables", std::to_string(o.upper_variables), "5");
  if (o.levels != kLevels) return differs("levels", std::to_string(o.levels), "13");
  if (o.level_patch != 2) return differs("level_patch", std::to_string(o.level_patch), "2");
  if (o.mlp_ratio != 4.0) return differs("mlp_ratio", toml_text(o.mlp_ratio), "4.0");
  if (o.stage_depths != std::vector<int64_t>{kDepths[0], kDepths[1], kDepths[2], kDepths[3]})
    return differs("stage_depths", text(o.stage_depths), "[2, 6, 6, 2]");
  if (o.block_norm != "pre") return differs("block_norm", "\"" + o.block_norm + "\"", "\"pre\"");
  if (o.padding != "centered") return differs("padding", "\"" + o.padding + "\"", "\"centered\"");
  if (o.window_shift != std::vector<int64_t>{kShift[0], kShift[1], kShift[2]})
    return differs("window_shift", text(o.window_shift), "[1, 3, 6]");
  if (o.fit_window) return differs("fit_window", "true", "false");
  if (o.shift_mask != "all_edges") return differs("shift_mask", "\"" + o.shift_mask + "\"", "\"all_edges\"");
  if (s.in_channels != kUpperVariables * kLevels + kSurface + kMasks || s.out_channels != kUpperVariables * kLevels + kSurface)
    return std::to_string(s.in_channels) + " input and " + std::to_string(s.out_channels) +
           " output channels (PhysicsNeMo's Pangu: 72 = 65 upper-air + 4 surface + 3 masks in, 69 out)";
  if (s.history != 1) return "data.history = " + std::to_string(s.history) + " (PhysicsNeMo's Pangu: 1)";
  const int64_t p = o.patch_size;
  if (padding(s.lat, p) != (s.lat % 2 ? p - s.lat % 2 : 0))
    return "a grid of " + std::to_string(s.lat) + " latitudes, which PhysicsNeMo's patch embeddings pad differently";
  return "";
}

nlohmann::json to_pangu_args(const ModelConfig& config, const ModelShape& shape) {
  const auto& o = config.options.as<PanguOptions>();
  if (const std::string why = not_a_reference_pangu(o, shape); !why.empty())
    throw ConfigError("cannot be written as PhysicsNeMo's Pangu: " + why);
  return {{"img_size", {shape.lat, shape.lon}},
          {"patch_size", {o.level_patch, o.patch_size, o.patch_size}},
          {"embed_dim", o.embed_dim},
          {"num_heads", o.stage_heads},
          {"window_size", o.window}};
}

// How a tensor is held on each side.
enum class Layout {
  kSame,           // same layout
  kFlattened,      // a convolution's kernel [D, C, ...] as a Linear's [D, C * ...]
  kRecovery,       // a transposed convolution's [2D, C, ...] as a Linear's [C * ..., 2D], input halves swapped
  kPositionIndex,  // [N, N] as [N * N]; must equal what the window implies
  kMask,           // same layout; must equal what the grid implies
};

struct TensorPair {
  std::string reference, ours;
  std::vector<int64_t> reference_shape;
  Layout layout;
  torch::Tensor expected;  // kPositionIndex, kMask: the buffer the arguments imply (ours)
};

// Every tensor of the reference's state_dict for this configuration, in its order, with ours.
std::vector<TensorPair> pangu_tensor_pairs(const ModelConfig& config, const ModelShape& shape) {
  const auto& o = config.options.as<PanguOptions>();
  if (const std::string why = not_a_reference_pangu(o, shape); !why.empty())
    throw ConfigError("PhysicsNeMo's Pangu state_dict: this model is not one: " + why);
  const int64_t D = o.embed_dim, pz = o.level_patch, p = o.patch_size;
  const int64_t h = ceil_div(shape.lat, p), w = ceil_div(shape.lon, p);
  std::vector<TensorPair> pairs;
  auto add = [&](const std::string& ref, const std::string& ours, std::vector<int64_t> ref_shape,
                 Layout layout = Layout::kSame, torch::Tensor expected = {}) {
    pairs.push_back({ref, ours, std::move(ref_shape), layout, std::move(expected)});
  };
  auto linear = [&](const std::string& ref, const std::string& ours, int64_t in, int64_t out, bool bias = true) {
    add(ref + ".weight", ours + ".weight", {out, in});
    if (bias) add(ref + ".bias", ours + ".bias", {out});
  };
  auto norm = [&](const std::string& ref, const std::string& ours, int64_t dim) {
    add(ref + ".weight", ours + ".weight", {dim});
    add(ref + ".bias", ours + ".bias", {dim});
  };
  add("patchembed2d.proj.weight", "embed.surface.weight", {D, kSurface + kMasks, p, p}, Layout::kFlattened);
  add("patchembed2d.proj.bias", "embed.surface.bias", {D});
  add("patchembed3d.proj.weight", "embed.upper.weight", {D, kUpperVariables, pz, p, p}, Layout::kFlattened);
  add("patchembed3d.proj.bias", "embed.upper.bias", {D});
  auto stage = [&](int number, int64_t dim, int64_t lat, int64_t lon) {
    const Extent3 grid{kTokenLevels, lat, lon}, window{o.window[0], o.window[1], o.window[2]};
    const Extent3 shift{o.window_shift[0], o.window_shift[1], o.window_shift[2]};
    Extent3 padded{};
    for (size_t d = 0; d < 3; ++d) padded[d] = ceil_div(grid[d], window[d]) * window[d];
    const int64_t types = (padded[0] / window[0]) * (padded[1] / window[1]), N = window[0] * window[1] * window[2];
    const int64_t heads = o.stage_heads[static_cast<size_t>(number - 1)];
    const int64_t hidden = static_cast<int64_t>(static_cast<double>(dim) * o.mlp_ratio);
    const torch::Tensor index = earth_position_index(window);
    const torch::Tensor mask = all_edges_shift_mask(padded, window, shift);
    for (int64_t i = 0; i < kDepths[number - 1]; ++i) {
      const std::string ref = "layer" + std::to_string(number) + ".blocks." + std::to_string(i) + ".";
      const std::string ours = "layer" + std::to_string(number) + "_block" + std::to_string(i) + ".";
      norm(ref + "norm1", ours + "norm1", dim);
      add(ref + "attn.earth_position_bias_table", ours + "attn.earth_bias",
          {window[0] * window[0] * window[1] * window[1] * (2 * window[2] - 1), types, heads});
      add(ref + "attn.earth_position_index", ours + "attn.position_index", {N, N}, Layout::kPositionIndex, index);
      linear(ref + "attn.qkv", ours + "attn.qkv", dim, 3 * dim);
      linear(ref + "attn.proj", ours + "attn.proj", dim, dim);
      norm(ref + "norm2", ours + "norm2", dim);
      linear(ref + "mlp.layers.0", ours + "fc1", dim, hidden);
      linear(ref + "mlp.layers.2", ours + "fc2", hidden, dim);
      if (i % 2 == 1) add(ref + "attn_mask", ours + "shift_mask", mask.sizes().vec(), Layout::kMask, mask);
    }
  };
  stage(1, D, h, w);
  linear("downsample.linear", "downsample.reduce", 4 * D, 2 * D, false);
  norm("downsample.norm", "downsample.norm", 4 * D);
  stage(2, 2 * D, ceil_div(h, 2), ceil_div(w, 2));
  stage(3, 2 * D, ceil_div(h, 2), ceil_div(w, 2));
  linear("upsample.linear1", "upsample.expand", 2 * D, 4 * D, false);
  linear("upsample.linear2", "upsample.mix", D, D, false);
  norm("upsample.norm", "upsample.norm", D);
  stage(4, D, h, w);
  add("patchrecovery2d.conv.weight", "head.surface.weight", {2 * D, kSurface, p, p}, Layout::kRecovery);
  add("patchrecovery2d.conv.bias", "head.surface_bias", {kSurface});
  add("patchrecovery3d.conv.weight", "head.upper.weight", {2 * D, kUpperVariables, pz, p, p}, Layout::kRecovery);
  add("patchrecovery3d.conv.bias", "head.upper_bias", {kUpperVariables});
  return pairs;
}

std::string shape_text(at::IntArrayRef shape) { return nlohmann::json(shape.vec()).dump(); }

// [2D, ...] input halves swapped: [x, skip] (the reference's) <-> [skip, x] (ours); an involution.
torch::Tensor swap_halves(const torch::Tensor& t, int64_t dim) {
  const int64_t half = t.size(dim) / 2;
  return torch::cat({t.narrow(dim, half, half), t.narrow(dim, 0, half)}, dim);
}

StateDict from_pangu_state(const StateDict& reference, const ModelConfig& config, const ModelShape& shape) {
  StateDict ours;
  std::set<std::string> used;
  for (const TensorPair& pair : pangu_tensor_pairs(config, shape)) {
    const auto it = reference.find(pair.reference);
    if (it == reference.end())
      throw ConfigError("PhysicsNeMo's Pangu state_dict has no '" + pair.reference + "' (expected " +
                        shape_text(pair.reference_shape) + ", for " + pair.ours + ")");
    const torch::Tensor& t = it->second;
    if (t.sizes() != at::IntArrayRef(pair.reference_shape))
      throw ConfigError("PhysicsNeMo's Pangu state_dict: '" + pair.reference + "' is " + shape_text(t.sizes()) +
                        ", expected " + shape_text(pair.reference_shape) + " for the arguments given");
    used.insert(pair.reference);
    torch::Tensor mapped;
    switch (pair.layout) {
      case Layout::kSame: mapped = t; break;
      case Layout::kFlattened: mapped = t.reshape({t.size(0), -1}); break;
      case Layout::kRecovery: {
        // [2D, C, (pz,) p, p] -> [C (pz) p p, 2D], the 2D inputs as [skip, x].
        std::vector<int64_t> order;
        for (int64_t d = 1; d < t.dim(); ++d) order.push_back(d);
        order.push_back(0);
        mapped = swap_halves(t.permute(order).reshape({-1, t.size(0)}), 1);
        break;
      }
      case Layout::kPositionIndex:
      case Layout::kMask: {
        const torch::Tensor flat = pair.layout == Layout::kPositionIndex ? t.reshape({-1}) : t;
        if (!t.is_meta() && !torch::equal(flat.to(pair.expected.scalar_type()), pair.expected))
          throw ConfigError("PhysicsNeMo's Pangu state_dict: the buffer '" + pair.reference +
                            "' differs from the one its arguments imply: the weights belong to another architecture");
        mapped = t.is_meta() ? flat : pair.expected;
        break;
      }
    }
    ours[pair.ours] = t.is_meta() ? mapped : mapped.contiguous().clone();
  }
  for (const auto& [name, t] : reference)
    if (!used.count(name))
      throw ConfigError("PhysicsNeMo's Pangu state_dict: '" + name + "' " + shape_text(t.sizes()) +
                        " is not a tensor of Pangu with these arguments (wxtrain maps every tensor or none)");
  return ours;
}

StateDict to_pangu_state(const StateDict& ours, const ModelConfig& config, const ModelShape& shape) {
  StateDict reference;
  std::set<std::string> used;
  for (const TensorPair& pair : pangu_tensor_pairs(config, shape)) {
    const auto it = ours.find(pair.ours);
    if (it == ours.end())
      throw ConfigError("pangu state: no '" + pair.ours + "' to write as PhysicsNeMo's '" + pair.reference + "'");
    const torch::Tensor& t = it->second;
    used.insert(pair.ours);
    torch::Tensor mapped;
    switch (pair.layout) {
      case Layout::kSame:
      case Layout::kMask: mapped = t; break;
      case Layout::kFlattened:
      case Layout::kPositionIndex: mapped = t.reshape(pair.reference_shape); break;
      case Layout::kRecovery: {
        // [C (pz) p p, 2D] -> [2D, C, (pz,) p, p]
        std::vector<int64_t> unflat(pair.reference_shape.begin() + 1, pair.reference_shape.end());
        unflat.push_back(pair.reference_shape[0]);
        std::vector<int64_t> order{static_cast<int64_t>(unflat.size()) - 1};
        for (int64_t d = 0; d + 1 < static_cast<int64_t>(unflat.size()); ++d) order.push_back(d);
        mapped = swap_halves(t, 1).reshape(unflat).permute(order);
        break;
      }
    }
    if (mapped.sizes() != at::IntArrayRef(pair.reference_shape))
      throw ConfigError("pangu state: '" + pair.ours + "' is " + shape_text(t.sizes()) + ", which does not give " +
                        pair.reference + " " + shape_text(pair.reference_shape));
    reference[pair.reference] = t.is_meta() ? mapped : mapped.contiguous().clone();
  }
  for (const auto& [name, t] : ours)
    if (!used.count(name))
      throw ConfigError("pangu state: '" + name + "' " + shape_text(t.sizes()) +
                        " has no place in PhysicsNeMo's Pangu (wxtrain maps every tensor or none)");
  return reference;
}

// The order PhysicsNeMo's Pangu reads its channels in (Pangu.prepare_input: 4 surface, 3 masks,
// 5 x 13 upper air), as wxtrain lists them (the upper-air volume first: pangu.h), with the names a
// run file may give each (ERA5's short names, WeatherBench's long ones, Earth2Studio's). The
// levels and variables are Pangu-Weather's (198808xc/Pangu-Weather: Z, Q, T, U, V on 1000 .. 50
// hPa; MSLP, U10, V10, T2M; the land mask, soil type and topography).
constexpr double kPanguLevels[kLevels] = {1000, 925, 850, 700, 600, 500, 400, 300, 250, 200, 150, 100, 50};
const std::vector<std::vector<std::string>>& pangu_upper_names() {
  static const std::vector<std::vector<std::string>> names = {{"z", "geopotential"},
                                                              {"q", "specific_humidity"},
                                                              {"t", "temperature"},
                                                              {"u", "u_component_of_wind"},
                                                              {"v", "v_component_of_wind"}};
  return names;
}
const std::vector<std::vector<std::string>>& pangu_surface_names() {
  static const std::vector<std::vector<std::string>> names = {
      {"msl", "mslp", "mean_sea_level_pressure"},
      {"u10", "u10m", "10u", "10m_u_component_of_wind"},
      {"v10", "v10m", "10v", "10m_v_component_of_wind"},
      {"t2m", "2t", "2m_temperature"},
      {"land_mask", "lsm", "land_sea_mask"},
      {"soil_type", "slt"},
      {"topography", "orography", "z_surface", "geopotential_at_surface"}};
  return names;
}

std::string level_text(double level) {
  std::ostringstream o;
  o << level;
  return o.str();
}

const std::string& pangu_channel_order() {
  static const std::string order = [] {
    std::string levels;
    for (double l : kPanguLevels) levels += (levels.empty() ? "" : ", ") + level_text(l);
    std::vector<std::string> upper, rest;
    for (const auto& names : pangu_upper_names()) upper.push_back(names.front());
    for (const auto& names : pangu_surface_names()) rest.push_back(names.front());
    return join_list(upper) + " (each on " + levels + " hPa, in that order), then " +
           join_list({rest.begin(), rest.begin() + kSurface}) + " (prognostic), then " +
           join_list({rest.begin() + kSurface, rest.end()}) + " (static fields or forcings)";
  }();
  return order;
}

// A run's 72 inputs against pangu_channel_order(): the first difference or two, and both orders.
std::string check_pangu_channels(const ChannelLayout& run) {
  struct Expected {
    const std::vector<std::string>* names;
    std::optional<double> level;
  };
  std::vector<Expected> expected;
  for (const auto& names : pangu_upper_names())
    for (double l : kPanguLevels) expected.push_back({&names, l});
  for (const auto& names : pangu_surface_names()) expected.push_back({&names, std::nullopt});
  std::vector<ChannelLayout::Channel> inputs;
  for (int64_t h = 0; h < run.history; ++h) inputs.insert(inputs.end(), run.prognostic.begin(), run.prognostic.end());
  inputs.insert(inputs.end(), run.forcing.begin(), run.forcing.end());
  inputs.insert(inputs.end(), run.statics.begin(), run.statics.end());
  auto text = [](const std::string& base, std::optional<double> level) {
    return level ? base + " on " + level_text(*level) + " hPa" : base;
  };
  std::vector<std::string> differences, theirs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ChannelLayout::Channel& c = inputs[i];
    // A source with levels names its channels <name>_<level>.
    const std::string base = c.level ? c.name.substr(0, c.name.rfind('_')) : c.name;
    theirs.push_back(c.name);
    if (i >= expected.size()) continue;
    const Expected& e = expected[i];
    const bool name_ok = std::find(e.names->begin(), e.names->end(), base) != e.names->end();
    const bool level_ok = e.level.has_value() == c.level.has_value() && (!e.level || *e.level == *c.level);
    if ((!name_ok || !level_ok) && differences.size() < 3)
      differences.push_back("input " + std::to_string(i + 1) + " is " + text(base, c.level) + " where it reads " +
                            text(e.names->front(), e.level) +
                            (e.names->size() > 1 ? " (named " + join_list(*e.names, " or ") + ")" : ""));
  }
  if (inputs.size() != expected.size())
    differences.insert(differences.begin(), "the run has " + std::to_string(inputs.size()) + " inputs, it reads " +
                                                std::to_string(expected.size()));
  if (differences.empty()) return "";
  return "PhysicsNeMo's Pangu reads its channels in a fixed order, which its checkpoint does not record, and the "
         "run's channels are not in it: " + join_list(differences, "; ") + ". It reads " + pangu_channel_order() +
         "; the run lists " + join_list(theirs) + ". List [[data.sources]] (with `levels` in that order) and "
         "[[data.static]] so; `name` renames a channel";
}

}  // namespace

ReferenceModel pangu_physicsnemo_reference() {
  ReferenceModel r;
  r.python_class = "Pangu";
  r.python_module = "physicsnemo.models.pangu.pangu";
  r.from_reference_args = &from_pangu_args;
  r.to_reference_args = &to_pangu_args;
  r.from_reference_state = &from_pangu_state;
  r.to_reference_state = &to_pangu_state;
  r.channel_order = pangu_channel_order();
  r.check_channels = &check_pangu_channels;
  return r;
}

}  // namespace wxtrain::models
