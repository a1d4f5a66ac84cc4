#include "data/normalization.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/dataset.h"

namespace wxtrain::data {
namespace {
const std::string kMean = "norm/mean/";
const std::string kStd = "norm/std/";
const std::string kIndex = "norm/index/";
const std::string kDiffStd = "norm/diff_std/";

// Sums of valid (non-NaN) values per channel of a [C, N] float64 tensor, accumulated in double.
// With `weights` ([N] float64, mean 1: a point set's cell areas) each point counts by its weight,
// so the statistics are the sphere's, not the cells' (an N grid's crowded polar rows, a region's
// denser cells would otherwise count more).
struct Moments {
  std::vector<double> sum, sum_sq, count;
  torch::Tensor weights;
  explicit Moments(int64_t channels, torch::Tensor w = {})
      : sum(channels, 0.0), sum_sq(channels, 0.0), count(channels, 0.0), weights(std::move(w)) {}
  void add(const torch::Tensor& values_cn) {
    torch::Tensor valid = ~torch::isnan(values_cn);
    torch::Tensor values = torch::where(valid, values_cn, torch::zeros_like(values_cn));
    torch::Tensor s, s2, n;
    if (weights.defined()) {
      torch::Tensor w = weights.view({1, -1});
      s = (values * w).sum(1), s2 = (values * values * w).sum(1), n = (valid.to(torch::kFloat64) * w).sum(1);
    } else {
      s = values.sum(1), s2 = (values * values).sum(1), n = valid.sum(1).to(torch::kFloat64);
    }
    for (size_t v = 0; v < sum.size(); ++v) {
      sum[v] += s[v].item<double>();
      sum_sq[v] += s2[v].item<double>();
      count[v] += n[v].item<double>();
    }
  }
  double mean(size_t v) const { return sum[v] / count[v]; }
  // Zero spread (a constant field, a region that is all sea) gets 1: normalising never divides by 0.
  double std(size_t v) const {
    const double m = mean(v);
    const double s = std::sqrt(std::max(0.0, sum_sq[v] / count[v] - m * m));
    return s > 1e-12 * std::max(1.0, std::abs(m)) ? s : 1.0;
  }
};
}  // namespace

Normalization::Normalization(std::vector<std::string> names, torch::Tensor mean, torch::Tensor std)
    : names_(std::move(names)), mean_(mean.to(torch::kFloat32).contiguous()),
      std_(std.to(torch::kFloat32).contiguous()) {
  TORCH_CHECK(mean_.dim() == 1 && std_.dim() == 1 &&
                  mean_.size(0) == static_cast<int64_t>(names_.size()) && std_.size(0) == mean_.size(0),
              "Normalization needs [V] mean and std for ", names_.size(), " variables, got ",
              mean_.sizes(), " and ", std_.sizes());
}

Normalization Normalization::compute(const Dataset& dataset, int64_t time_begin, int64_t time_end) {
  const int64_t V = dataset.num_variables();
  if (time_end <= time_begin) {
    throw DataError("cannot compute normalisation statistics from an empty time range [" +
                    std::to_string(time_begin) + ", " + std::to_string(time_end) + ")");
  }
  const TimeAxis& axis = dataset.time_axis();
  // A point set's statistics weigh cells by area (data/grid.h); a rectangle's count points alike,
  // as they always have (checkpoints' statistics stay comparable).
  torch::Tensor area;
  if (dataset.point_set()) {
    area = torch::tensor(dataset.grid().areas, torch::kFloat64);
    area = area / area.mean();
  }
  Moments states(V, area), diffs(V, area);
  MissingValues missing(dataset.variable_names());
  torch::Tensor previous;
  for (int64_t t = time_begin; t < time_end; ++t) {
    const torch::Tensor raw = dataset.shared_state(t);
    missing.add(raw);
    torch::Tensor state = raw.to(torch::kFloat64).reshape({V, -1});  // to() copies
    states.add(state);
    if (previous.defined() && axis.one_step_apart(t - 1, t))
      diffs.add(state - previous);  // NaN where either is masked
    previous = state;
  }
  std::vector<std::string> names = dataset.variable_names();
  std::vector<float> mean, std, diff_std;
  for (int64_t v = 0; v < V; ++v) {
    if (states.count[v] == 0) {
      throw DataError("variable '" + dataset.variables()[v].name + "' (" + dataset.variables()[v].file +
                      ") has no valid points in the training split: every value is a fill value");
    }
    mean.push_back(static_cast<float>(states.mean(v)));
    std.push_back(static_cast<float>(states.std(v)));
    // A split of one state has no difference: fall back to the state's own spread (no rescaling).
    diff_std.push_back(static_cast<float>(diffs.count[v] > 0 ? diffs.std(v) : states.std(v)));
  }

  const int64_t S = dataset.static_fields().size(0);
  if (S > 0) {
    Moments statics(S);
    statics.add(dataset.static_fields().to(torch::kFloat64).reshape({S, -1}));
    for (int64_t s = 0; s < S; ++s) {
      if (statics.count[s] == 0)
        throw DataError("static field '" + dataset.static_names()[s] + "' has no valid point on the grid");
      names.push_back(dataset.static_names()[s]);
      mean.push_back(static_cast<float>(statics.mean(s)));
      std.push_back(static_cast<float>(statics.std(s)));
      diff_std.push_back(std::nanf(""));
    }
  }
  const auto& forcings = dataset.computed_forcing_names();
  if (!forcings.empty()) {
    const int64_t F = static_cast<int64_t>(forcings.size());
    Moments computed(F, area);
    const int64_t span = time_end - time_begin, samples = std::min<int64_t>(64, span);
    for (int64_t k = 0; k < samples; ++k) {
      const int64_t t = time_begin + k * span / samples;
      const int64_t seconds = axis.has_dates ? axis.seconds[t] : 0;
      computed.add(dataset.computed_forcings(seconds).to(torch::kFloat64).reshape({F, -1}));
    }
    for (int64_t f = 0; f < F; ++f) {
      names.push_back(forcings[f]);
      mean.push_back(static_cast<float>(computed.mean(f)));
      std.push_back(static_cast<float>(computed.std(f)));
      diff_std.push_back(std::nanf(""));
    }
  }
  Normalization result(names, torch::tensor(mean), torch::tensor(std));
  result.diff_std_ = torch::tensor(diff_std);
  result.missing_ = std::move(missing);
  return result;
}

Normalization Normalization::subset(const std::vector<std::string>& names) const {
  std::vector<int64_t> index;
  for (const auto& name : names) {
    auto it = std::find(names_.begin(), names_.end(), name);
    if (it == names_.end()) {
      std::string known;
      for (const auto& n : names_) known += (known.empty() ? "" : ", ") + n;
      throw DataError("no normalisation statistics for channel '" + name + "' (they cover " + known + ")");
    }
    index.push_back(it - names_.begin());
  }
  const torch::Tensor i = torch::tensor(index, torch::kInt64);
  Normalization out(names, mean_.index_select(0, i), std_.index_select(0, i));
  if (diff_std_.defined()) out.diff_std_ = diff_std_.index_select(0, i);
  out.missing_ = missing_.subset(names);
  return out;
}

int64_t Normalization::take_stored_statistics(const Dataset& dataset) {
  int64_t taken = 0;
  for (const VariableInfo& info : dataset.variables()) {
    if (!info.stored_mean || !info.stored_stdev) continue;
    auto it = std::find(names_.begin(), names_.end(), info.name);
    if (it == names_.end()) continue;
    const int64_t k = it - names_.begin();
    mean_[k] = static_cast<float>(*info.stored_mean);
    // A constant field's stdev of 0 gets 1, as compute() does: normalising never divides by 0.
    std_[k] = static_cast<float>(*info.stored_stdev > 0 ? *info.stored_stdev : 1.0);
    ++taken;
  }
  return taken;
}

Normalization Normalization::identity(const std::vector<std::string>& names) {
  const int64_t V = static_cast<int64_t>(names.size());
  return Normalization(names, torch::zeros({V}), torch::ones({V}));
}

torch::Tensor Normalization::broadcastable(const torch::Tensor& stat, const torch::Tensor& x) const {
  TORCH_CHECK(x.dim() >= 3 && x.size(-3) == num_variables(), "normalisation expects [..., ",
              num_variables(), ", lat, lon], got ", x.sizes());
  return stat.to(x.device(), x.scalar_type()).view({num_variables(), 1, 1});
}

torch::Tensor Normalization::normalize(const torch::Tensor& x) const {
  const int64_t V = num_variables();
  if (x.numel() == 0) return x.to(torch::kFloat32, /*non_blocking=*/false, /*copy=*/true);  // no channels (no statics)
  if (x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.is_contiguous() && x.dim() >= 3 &&
      x.size(-3) == V && mean_.scalar_type() == torch::kFloat32 && std_.scalar_type() == torch::kFloat32) {
    // The loader's path (every state of every sample): one pass instead of ATen's three (subtract,
    // divide, nan_to_num) and their temporaries; the same arithmetic, so the same floats.
    torch::Tensor out = torch::empty_like(x);
    const int64_t plane = x.size(-2) * x.size(-1);
    const int64_t outer = x.numel() / (V * plane);
    const float* in = x.data_ptr<float>();
    float* result = out.data_ptr<float>();
    const torch::Tensor mean = mean_.contiguous(), std = std_.contiguous();
    const float* m = mean.data_ptr<float>();
    const float* d = std.data_ptr<float>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t v = 0; v < V; ++v) {
        const int64_t base = (o * V + v) * plane;
        const float mv = m[v], dv = d[v];
        for (int64_t i = 0; i < plane; ++i) {
          const float scaled = (in[base + i] - mv) / dv;
          result[base + i] = std::isfinite(scaled) ? scaled : 0.0f;
        }
      }
    }
    return out;
  }
  torch::Tensor scaled = (x - broadcastable(mean_, x)) / broadcastable(std_, x);
  return torch::nan_to_num(scaled, 0.0, 0.0, 0.0);
}

torch::Tensor Normalization::denormalize(const torch::Tensor& x) const {
  return x * broadcastable(std_, x) + broadcastable(mean_, x);
}

std::map<std::string, torch::Tensor> Normalization::to_map() const {
  std::map<std::string, torch::Tensor> map;
  for (int64_t v = 0; v < num_variables(); ++v) {
    map[kMean + names_[v]] = mean_[v].clone();
    map[kStd + names_[v]] = std_[v].clone();
    map[kIndex + names_[v]] = torch::tensor(v, torch::kInt64);
    if (diff_std_.defined()) map[kDiffStd + names_[v]] = diff_std_[v].clone();
  }
  missing_.add_to_map(map);
  return map;
}

Normalization Normalization::from_map(const std::map<std::string, torch::Tensor>& map) {
  std::vector<std::pair<int64_t, std::string>> order;
  for (const auto& [key, value] : map) {
    if (key.rfind(kIndex, 0) == 0) order.emplace_back(value.item<int64_t>(), key.substr(kIndex.size()));
  }
  if (order.empty()) throw DataError("no normalisation statistics (norm/* entries) found");
  std::sort(order.begin(), order.end());
  std::vector<std::string> names;
  torch::Tensor mean = torch::empty({static_cast<int64_t>(order.size())});
  torch::Tensor std = torch::empty_like(mean);
  torch::Tensor diff_std = torch::full_like(mean, std::nanf(""));
  bool any_diff = false;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& [index, name] = order[i];
    if (index != static_cast<int64_t>(i)) {
      throw DataError("normalisation statistics have channel indices that are not 0..V-1 (variable '" +
                      name + "' has " + std::to_string(index) + ")");
    }
    auto m = map.find(kMean + name), s = map.find(kStd + name);
    if (m == map.end() || s == map.end()) {
      throw DataError("normalisation statistics for variable '" + name + "' lack their " +
                      (m == map.end() ? "mean" : "std"));
    }
    mean[i] = m->second.item<float>();
    std[i] = s->second.item<float>();
    if (auto d = map.find(kDiffStd + name); d != map.end()) {
      diff_std[i] = d->second.item<float>();
      any_diff = true;
    }
    names.push_back(name);
  }
  Normalization result(names, mean, std);
  if (any_diff) result.diff_std_ = diff_std;
  result.missing_ = MissingValues::from_map(map);
  return result;
}

}  // namespace wxtrain::data
