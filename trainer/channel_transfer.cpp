#include "trainer/channel_transfer.h"

#include <cstdio>
#include <map>
#include <set>

#include "core/error.h"

namespace wxtrain::trainer {

namespace {

// At most 8 names, then a count: an error or a summary stays a line or two for a 200-channel run.
std::string list(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > 8) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

void require_unique(const std::vector<std::string>& names, const std::string& which, const std::string& source) {
  std::set<std::string> seen;
  for (const auto& n : names)
    if (!seen.insert(n).second)
      throw ConfigError(source + ": channel '" + n + "' appears twice in the " + which +
                        " (channel names must be unique: they say which slice of a layer is whose)");
}

// One side (inputs or outputs) of the transfer: which new channel reads which old one.
struct ChannelMap {
  bool changed = false;                            // the lists differ (order included)
  std::vector<std::pair<int64_t, int64_t>> pairs;  // (new index, old index) of the matched channels
  int64_t old_count = 0, new_count = 0;
};

ChannelMap match_channels(const std::vector<std::string>& old_names, const std::vector<std::string>& new_names,
                          std::vector<std::string>& matched, std::vector<std::string>& added,
                          std::vector<std::string>& dropped) {
  ChannelMap m;
  m.changed = old_names != new_names;
  m.old_count = static_cast<int64_t>(old_names.size());
  m.new_count = static_cast<int64_t>(new_names.size());
  std::map<std::string, int64_t> old_index;
  for (size_t i = 0; i < old_names.size(); ++i) old_index[old_names[i]] = static_cast<int64_t>(i);
  std::set<std::string> kept;
  for (size_t i = 0; i < new_names.size(); ++i) {
    auto it = old_index.find(new_names[i]);
    if (it == old_index.end()) {
      added.push_back(new_names[i]);
    } else {
      matched.push_back(new_names[i]);
      kept.insert(new_names[i]);
      m.pairs.emplace_back(static_cast<int64_t>(i), it->second);
    }
  }
  for (const auto& n : old_names)
    if (!kept.count(n)) dropped.push_back(n);
  return m;
}

// `t` with its channel dimension split into (channel, entry) — channel-major — or (entry, channel)
// — channel-minor; returns the view and the dimension that indexes channels. A view, so that
// copying into a slice of the model's tensor writes the parameter itself.
std::pair<torch::Tensor, int64_t> split_channels(const torch::Tensor& t, const models::ChannelAxis& axis,
                                                 int64_t channels) {
  std::vector<int64_t> sizes = t.sizes().vec();
  sizes.erase(sizes.begin() + axis.dim);
  const auto at = sizes.begin() + axis.dim;
  if (axis.channel_major) {
    sizes.insert(at, {channels, axis.per_channel});
    return {t.view(sizes), axis.dim};
  }
  sizes.insert(at, {axis.per_channel, channels});
  return {t.view(sizes), axis.dim + 1};
}

// Why `stored` cannot be remapped into `target` along `axis`, or "" when it can: the other
// dimensions must agree and the channel dimension hold exactly the listed channels on each side.
std::string remap_mismatch(const torch::Tensor& stored, const torch::Tensor& target, const models::ChannelAxis& axis,
                           const ChannelMap& m) {
  const std::string side = axis.input ? "input" : "output";
  auto expect = [&](int64_t channels) {
    return std::to_string(channels) + " " + side + " channel(s) x " + std::to_string(axis.per_channel) +
           " along dim " + std::to_string(axis.dim);
  };
  if (stored.dim() != target.dim()) return "different ranks";
  for (int64_t d = 0; d < target.dim(); ++d)
    if (d != axis.dim && stored.size(d) != target.size(d))
      return "dim " + std::to_string(d) + " differs, and only dim " + std::to_string(axis.dim) + " runs over channels";
  if (stored.size(axis.dim) != m.old_count * axis.per_channel)
    return "the checkpoint's " + std::to_string(stored.size(axis.dim)) + " entries are not its " + expect(m.old_count);
  if (target.size(axis.dim) != m.new_count * axis.per_channel)
    return "the model's " + std::to_string(target.size(axis.dim)) + " entries are not its " + expect(m.new_count);
  return "";
}

}  // namespace

std::string ChannelTransferReport::summary() const {
  auto side = [](const char* which, const std::vector<std::string>& matched, const std::vector<std::string>& added,
                 const std::vector<std::string>& dropped) {
    std::string s = std::string(which) + " channels: " + std::to_string(matched.size()) + " matched, " +
                    std::to_string(added.size()) + " new";
    if (!added.empty()) s += " (" + list(added) + ")";
    s += ", " + std::to_string(dropped.size()) + " dropped";
    if (!dropped.empty()) s += " (" + list(dropped) + ")";
    return s + "\n";
  };
  std::string s = side("input", matched_inputs, new_inputs, dropped_inputs) +
                  side("output", matched_outputs, new_outputs, dropped_outputs);
  s += "tensors: " + std::to_string(loaded.size()) + " loaded, " + std::to_string(remapped.size()) + " remapped";
  if (!remapped.empty()) s += " (" + list(remapped) + ")";
  s += ", " + std::to_string(initialised.size()) + " initialised";
  if (!initialised.empty()) s += " (" + list(initialised) + ")";
  s += ", " + std::to_string(unexpected.size()) + " unexpected";
  if (!unexpected.empty()) s += " (" + list(unexpected) + ")";
  char share[32];
  std::snprintf(share, sizeof share, "%.1f%%", 100.0 * loaded_share);
  s += std::string("; ") + share + " of the model's values come from the checkpoint\n";
  if (!rebuilt.empty()) s += "grid: " + grid_change + " (" + std::to_string(rebuilt.size()) + " buffers)\n";
  if (!regridded.empty()) {
    s += "regridded for the region:\n";
    for (const auto& r : regridded) s += "  " + r + "\n";
  }
  return s;
}

ChannelTransferReport transfer_weights(models::WeatherModelImpl& model, const TensorMap& weights,
                                       const std::vector<std::string>& old_inputs,
                                       const std::vector<std::string>& old_outputs,
                                       const std::vector<std::string>& new_inputs,
                                       const std::vector<std::string>& new_outputs, bool strict,
                                       const std::string& source, const models::GridPlacement& placement,
                                       const models::ModelShape& trained_grid) {
  require_unique(old_inputs, "checkpoint's input channels", source);
  require_unique(old_outputs, "checkpoint's output channels", source);
  require_unique(new_inputs, "run's input channels", source);
  require_unique(new_outputs, "run's output channels", source);
  const models::ModelShape& shape = model.shape();
  if (static_cast<int64_t>(new_inputs.size()) != shape.in_channels ||
      static_cast<int64_t>(new_outputs.size()) != shape.out_channels)
    throw ConfigError(source + ": the run lists " + std::to_string(new_inputs.size()) + " input and " +
                      std::to_string(new_outputs.size()) + " output channels, but the model was built for " +
                      std::to_string(shape.in_channels) + " -> " + std::to_string(shape.out_channels));

  ChannelTransferReport report;
  const ChannelMap inputs =
      match_channels(old_inputs, new_inputs, report.matched_inputs, report.new_inputs, report.dropped_inputs);
  const ChannelMap outputs =
      match_channels(old_outputs, new_outputs, report.matched_outputs, report.new_outputs, report.dropped_outputs);

  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> own;
  for (const auto& p : model.named_parameters()) own[p.key()] = p.value();
  for (const auto& b : model.named_buffers()) own[b.key()] = b.value();
  std::map<std::string, models::ChannelAxis> axes;
  std::map<std::string, ChannelMap> axis_maps;  // which new channel of the axis reads which old one
  for (const auto& a : model.channel_axes()) {
    // A model's own description of itself: wrong here is a bug in the zoo, not in the run file.
    TORCH_CHECK(own.count(a.parameter), "channel_axes names '", a.parameter, "', which the model does not have");
    TORCH_CHECK(a.dim >= 0 && a.dim < own[a.parameter].dim() && a.per_channel > 0, "channel_axes: bad axis for '",
                a.parameter, "'");
    const std::vector<std::string>& new_names = a.input ? new_inputs : new_outputs;
    TORCH_CHECK(a.skip_begin >= 0 && a.skip_count >= 0 &&
                    a.skip_begin + a.skip_count <= static_cast<int64_t>(new_names.size()),
                "channel_axes: bad skipped range for '", a.parameter, "'");
    axes[a.parameter] = a;
    if (a.skip_count == 0) {
      axis_maps[a.parameter] = a.input ? inputs : outputs;
      continue;
    }
    // The axis leaves out some channels by position in this model; the checkpoint's side leaves
    // out the channels of the same names (the report above still counts every channel).
    const std::vector<std::string>& old_names = a.input ? old_inputs : old_outputs;
    const std::set<std::string> skipped(new_names.begin() + a.skip_begin,
                                        new_names.begin() + a.skip_begin + a.skip_count);
    std::vector<std::string> new_on_axis, old_on_axis, unused_matched, unused_added, unused_dropped;
    for (const auto& n : new_names)
      if (!skipped.count(n)) new_on_axis.push_back(n);
    for (const auto& n : old_names)
      if (!skipped.count(n)) old_on_axis.push_back(n);
    axis_maps[a.parameter] = match_channels(old_on_axis, new_on_axis, unused_matched, unused_added, unused_dropped);
  }

  // A checkpoint of another grid: its grid-sized tensors fitted to this model's, its grid buffers
  // replaced by the model's own (what was done, the report says).
  TensorMap fitted_weights = weights;
  const models::GridFit fit = model.fit_checkpoint_to_grid(fitted_weights, placement, trained_grid);
  report.regridded = fit.regridded;
  report.grid_change = fit.grid_change;

  // Decide everything first, copy last: an error leaves the model as it was built.
  std::vector<std::string> shape_errors, missing_reasons, fitted;  // fitted: to this grid
  for (const auto& [name, target] : own) {
    if (fit.rebuilt.count(name)) {
      report.rebuilt.push_back(name);
      continue;
    }
    auto it = fitted_weights.find(name);
    if (it == fitted_weights.end()) {
      report.initialised.push_back(name);
      missing_reasons.push_back(name);
      continue;
    }
    const torch::Tensor& stored = it->second;
    auto axis = axes.find(name);
    const ChannelMap* m = axis == axes.end() ? nullptr : &axis_maps.at(name);
    if (!m || !m->changed) {
      // Not channel-indexed, or its channels are the checkpoint's: exactly load_weights (the
      // tensors fitted to this grid are reported as regridded).
      if (stored.sizes() != target.sizes())
        shape_errors.push_back(name + " (checkpoint " + c10::str(stored.sizes()) + ", model " +
                               c10::str(target.sizes()) + ")");
      else if (fit.fitted.count(name))
        fitted.push_back(name);
      else
        report.loaded.push_back(name);
      continue;
    }
    const std::string why = remap_mismatch(stored, target, axis->second, *m);
    if (!why.empty()) {
      shape_errors.push_back(name + " (checkpoint " + c10::str(stored.sizes()) + ", model " +
                             c10::str(target.sizes()) + ": " + why + ")");
    } else if (m->pairs.empty()) {
      report.initialised.push_back(name);
      missing_reasons.push_back(name + " (no " + (axis->second.input ? "input" : "output") + " channel in common)");
    } else {
      report.remapped.push_back(name);
    }
  }
  for (const auto& [name, t] : fitted_weights)
    if (!own.count(name)) report.unexpected.push_back(name);

  if (!shape_errors.empty())
    throw ConfigError(source + ": weights do not fit this model: " + list(shape_errors) +
                      " — is [model] the same architecture as the checkpoint's? (" + kStrictLoadRemedy + ")");
  if (strict && (!missing_reasons.empty() || !report.unexpected.empty()))
    throw ConfigError(source + ": strict loading failed: missing " +
                      (missing_reasons.empty() ? "none" : list(missing_reasons)) + "; unexpected " +
                      (report.unexpected.empty() ? "none" : list(report.unexpected)) + " (" + kStrictLoadRemedy + ")");
  // Loading nothing would train from scratch while the user believes it fine-tunes.
  if (report.loaded.empty() && report.remapped.empty())
    throw ConfigError(source + ": no tensor of the checkpoint fits this model (the checkpoint has " +
                      (report.unexpected.empty() ? "none that the model lacks" : list(report.unexpected)) +
                      "; the model has " + list(report.initialised) +
                      "): is [model] the architecture the checkpoint was trained with? Fine-tuning needs the "
                      "same model.name and sizes; only the channels may differ");

  // The share of what a checkpoint can carry: grid buffers the model built for its own grid (a
  // region's graph, or the graph a reference checkpoint leaves out) are neither loaded nor learnt.
  const std::set<std::string> rebuilt(report.rebuilt.begin(), report.rebuilt.end());
  int64_t total = 0, carried = 0;
  for (const auto& [name, t] : own)
    if (!rebuilt.count(name)) total += t.numel();
  for (const auto& name : report.loaded) carried += own[name].numel();
  for (const auto& name : report.remapped) carried += own[name].numel();
  for (const auto& name : fitted) carried += own[name].numel();  // fitted to this grid (a region)
  report.loaded_share = total > 0 ? static_cast<double>(carried) / static_cast<double>(total) : 1.0;

  for (const auto& name : report.loaded) own[name].copy_(fitted_weights.at(name));
  for (const auto& name : fitted) own[name].copy_(fitted_weights.at(name));
  for (const auto& name : report.remapped) {
    const models::ChannelAxis& axis = axes.at(name);
    const ChannelMap& m = axis_maps.at(name);
    auto [to, to_dim] = split_channels(own[name], axis, m.new_count);
    auto [from, from_dim] = split_channels(fitted_weights.at(name).contiguous(), axis, m.old_count);
    for (const auto& [new_index, old_index] : m.pairs) to.select(to_dim, new_index).copy_(from.select(from_dim, old_index));
  }
  return report;
}

}  // namespace wxtrain::trainer
