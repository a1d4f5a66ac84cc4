#include "data/normalization.h"

#include <cmath>

#include "core/error.h"
#include "data/dataset.h"

namespace wxtrain::data {
namespace {
const std::string kMean = "norm/mean/";
const std::string kStd = "norm/std/";
const std::string kIndex = "norm/index/";
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
  std::vector<double> sum(V, 0.0), sum_sq(V, 0.0), count(V, 0.0);
  for (int64_t t = time_begin; t < time_end; ++t) {
    torch::Tensor state = dataset.shared_state(t).to(torch::kFloat64).reshape({V, -1});  // to() copies
    torch::Tensor valid = ~torch::isnan(state);
    torch::Tensor values = torch::where(valid, state, torch::zeros_like(state));
    torch::Tensor s = values.sum(1), s2 = (values * values).sum(1), n = valid.sum(1).to(torch::kFloat64);
    for (int64_t v = 0; v < V; ++v) {
      sum[v] += s[v].item<double>();
      sum_sq[v] += s2[v].item<double>();
      count[v] += n[v].item<double>();
    }
  }
  torch::Tensor mean = torch::empty({V}, torch::kFloat32), std = torch::empty({V}, torch::kFloat32);
  for (int64_t v = 0; v < V; ++v) {
    if (count[v] == 0) {
      throw DataError("variable '" + dataset.variables()[v].name + "' (" + dataset.variables()[v].file +
                      ") has no valid points in the training split: every value is a fill value");
    }
    const double m = sum[v] / count[v];
    const double variance = std::max(0.0, sum_sq[v] / count[v] - m * m);
    const double s = std::sqrt(variance);
    mean[v] = m;
    std[v] = s > 1e-12 * std::max(1.0, std::abs(m)) ? s : 1.0;
  }
  return Normalization(dataset.variable_names(), mean, std);
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
  }
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
    names.push_back(name);
  }
  return Normalization(names, mean, std);
}

}  // namespace wxtrain::data
