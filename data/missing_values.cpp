#include "data/missing_values.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace wxtrain::data {
namespace {
const std::string kShare = "missing/share/";
const std::string kAlways = "missing/always/";

// "31.2%", and "<0.1%" rather than a rounded 0.0% for a share that is not zero.
std::string percent(double share) {
  if (share > 0 && share < 0.0005) return "<0.1%";
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", 100.0 * share);
  return text;
}
}  // namespace

MissingValues::MissingValues(std::vector<std::string> names) : names_(std::move(names)), channels_(names_.size()) {}

void MissingValues::add(const torch::Tensor& state) {
  TORCH_CHECK(state.dim() == 3 && state.size(0) == static_cast<int64_t>(channels_.size()), "MissingValues::add expects [",
              channels_.size(), ", lat, lon], got ", state.sizes());
  const torch::Tensor missing = torch::isnan(state);
  const torch::Tensor counts = missing.sum({1, 2}).to(torch::kFloat64).contiguous();
  const double* count = counts.data_ptr<double>();
  const double plane = static_cast<double>(state.size(1) * state.size(2));
  for (size_t v = 0; v < channels_.size(); ++v) {
    Channel& c = channels_[v];
    c.missing += count[v];
    c.total += plane;
    const torch::Tensor here = missing[static_cast<int64_t>(v)];
    c.always = c.always.defined() ? c.always.logical_and(here) : here.clone();
    c.always_share = c.always.to(torch::kFloat64).mean().item<double>();
  }
}

bool MissingValues::any() const {
  return std::any_of(channels_.begin(), channels_.end(), [](const Channel& c) { return c.missing > 0; });
}

const MissingValues::Channel* MissingValues::find(const std::string& name) const {
  const auto it = std::find(names_.begin(), names_.end(), name);
  return it == names_.end() ? nullptr : &channels_[static_cast<size_t>(it - names_.begin())];
}

double MissingValues::share(const std::string& name) const {
  const Channel* c = find(name);
  return c && c->total > 0 ? c->missing / c->total : 0.0;
}

double MissingValues::always_share(const std::string& name) const {
  const Channel* c = find(name);
  return c ? c->always_share : 0.0;
}

torch::Tensor MissingValues::always_missing(const std::string& name) const {
  const Channel* c = find(name);
  if (!c || c->always_share == 0 || !c->always.defined()) return {};
  return c->always;
}

std::string MissingValues::report() const {
  std::string listed;
  for (size_t v = 0; v < names_.size(); ++v) {
    if (channels_[v].missing == 0) continue;
    listed += (listed.empty() ? "" : ", ") + names_[v] + " " + percent(channels_[v].always_share) +
              " of cells in every state (" + percent(share(names_[v])) + " of all values)";
  }
  if (listed.empty()) return "";
  return "missing values (fill values or NaN) in the training data: " + listed +
         ". They are kept out of the loss and scores and enter the model as the channel's mean; a forecast "
         "writes NaN (the fill value) at the cells missing in every state";
}

void MissingValues::add_to_map(std::map<std::string, torch::Tensor>& map) const {
  for (size_t v = 0; v < names_.size(); ++v) {
    map[kShare + names_[v]] = torch::tensor(share(names_[v]), torch::kFloat64);
    if (const torch::Tensor always = always_missing(names_[v]); always.defined())
      map[kAlways + names_[v]] = always.to(torch::kUInt8).contiguous();
  }
}

MissingValues MissingValues::from_map(const std::map<std::string, torch::Tensor>& map) {
  MissingValues out;
  for (const auto& [key, value] : map) {
    if (key.rfind(kShare, 0) != 0) continue;
    const double share = value.numel() == 1 ? value.to(torch::kFloat64).item<double>() : -1;
    if (!(share >= 0 && share <= 1))
      throw DataError("checkpoint entry " + key + " is not a share of missing values between 0 and 1");
    const std::string name = key.substr(kShare.size());
    Channel c;
    c.missing = share;
    c.total = 1;
    const auto always = map.find(kAlways + name);
    if (always != map.end()) {
      if (always->second.dim() != 2 || always->second.numel() == 0)
        throw DataError("checkpoint entry " + always->first + " is not a [lat, lon] mask");
      c.always = always->second.to(torch::kBool);
      c.always_share = c.always.to(torch::kFloat64).mean().item<double>();
    }
    out.names_.push_back(name);
    out.channels_.push_back(c);
  }
  return out;
}

MissingValues MissingValues::subset(const std::vector<std::string>& names) const {
  MissingValues out;
  for (const auto& name : names) {
    if (const Channel* c = find(name)) {
      out.names_.push_back(name);
      out.channels_.push_back(*c);
    }
  }
  return out;
}

}  // namespace wxtrain::data
