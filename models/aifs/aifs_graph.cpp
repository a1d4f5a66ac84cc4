#include "models/aifs/aifs_graph.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <utility>

#include <ATen/Parallel.h>

#include "core/error.h"

namespace wxtrain::models {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kRadians = kPi / 180.0;
using Vec3 = std::array<double, 3>;

Vec3 xyz(double lat_deg, double lon_deg) {
  const double lat = lat_deg * kRadians, lon = lon_deg * kRadians;
  return {std::cos(lat) * std::cos(lon), std::cos(lat) * std::sin(lon), std::sin(lat)};
}
double chord(const Vec3& a, const Vec3& b) {
  const double dx = a[0] - b[0], dy = a[1] - b[1], dz = a[2] - b[2];
  return std::sqrt(dx * dx + dy * dy + dz * dz);
}

std::vector<Vec3> to_xyz(const LatLonPoints& p) {
  std::vector<Vec3> out(p.latitudes.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = xyz(p.latitudes[i], p.longitudes[i]);
  return out;
}

// Points bucketed in cubes of side `cell`: the points within r of a query are in the cubes within
// ceil(r / cell) of its own. O(points) to build, O(neighbours) per query.
class SpatialIndex {
 public:
  SpatialIndex(const std::vector<Vec3>& points, double cell)
      : points_(points), cell_(cell), max_coord_(static_cast<int64_t>(std::floor(2.0 / cell)) + 1) {
    for (size_t i = 0; i < points.size(); ++i) buckets_[key(coord(points[i]))].push_back(static_cast<int64_t>(i));
  }
  // Indices of the points with chord distance <= r to p, with their distances.
  void within(const Vec3& p, double r, std::vector<std::pair<double, int64_t>>& out) const {
    out.clear();
    const std::array<int64_t, 3> c = coord(p);
    const auto reach = static_cast<int64_t>(std::ceil(r / cell_));
    for (int64_t dx = -reach; dx <= reach; ++dx)
      for (int64_t dy = -reach; dy <= reach; ++dy)
        for (int64_t dz = -reach; dz <= reach; ++dz) {
          const std::array<int64_t, 3> n = {c[0] + dx, c[1] + dy, c[2] + dz};
          // Cubes outside the sphere's box hold nothing (and would alias others' keys).
          if (std::min({n[0], n[1], n[2]}) < 0 || std::max({n[0], n[1], n[2]}) > max_coord_) continue;
          auto it = buckets_.find(key(n));
          if (it == buckets_.end()) continue;
          for (int64_t j : it->second) {
            const double d = chord(p, points_[static_cast<size_t>(j)]);
            if (d <= r) out.emplace_back(d, j);
          }
        }
  }
  double cell() const { return cell_; }

 private:
  std::array<int64_t, 3> coord(const Vec3& p) const {
    return {static_cast<int64_t>(std::floor((p[0] + 1) / cell_)), static_cast<int64_t>(std::floor((p[1] + 1) / cell_)),
            static_cast<int64_t>(std::floor((p[2] + 1) / cell_))};
  }
  static int64_t key(const std::array<int64_t, 3>& c) { return (c[0] * 4194304LL + c[1]) * 4194304LL + c[2]; }
  const std::vector<Vec3>& points_;
  double cell_;
  int64_t max_coord_;
  std::unordered_map<int64_t, std::vector<int64_t>> buckets_;
};

// A cell side that keeps a few points per cube: the mean spacing of n points on the sphere.
double spacing(int64_t n) { return std::max(1e-4, std::sqrt(4 * kPi / static_cast<double>(std::max<int64_t>(n, 1)))); }

// k nearest (by chord) of p among the indexed points, nearest first; fewer if there are fewer.
std::vector<std::pair<double, int64_t>> nearest(const SpatialIndex& index, const Vec3& p, int64_t k, int64_t total) {
  std::vector<std::pair<double, int64_t>> found;
  k = std::min(k, total);
  // Grow the radius until k points lie within it: then no point outside can be nearer.
  for (double r = index.cell();; r *= 2) {
    index.within(p, r, found);
    if (static_cast<int64_t>(found.size()) >= k || r > 2.0) break;
  }
  std::sort(found.begin(), found.end());
  if (static_cast<int64_t>(found.size()) > k) found.resize(static_cast<size_t>(k));
  return found;
}

// anemoi-graphs' edge_length (haversine, radians) and edge_dirs (compute_directions), normalised
// "unit-max" and "unit-std" over the set, for edges sorted by receiver.
torch::Tensor edge_features(const LatLonPoints& sources, const LatLonPoints& targets,
                            const std::vector<int64_t>& senders, const std::vector<int64_t>& receivers) {
  const auto edges = static_cast<int64_t>(senders.size());
  std::vector<double> f(static_cast<size_t>(edges) * 3);
  at::parallel_for(0, edges, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t e = begin; e < end; ++e) {
      const auto s = static_cast<size_t>(senders[e]), t = static_cast<size_t>(receivers[e]);
      const double slat = sources.latitudes[s] * kRadians, slon = sources.longitudes[s] * kRadians;
      const double tlat = targets.latitudes[t] * kRadians, tlon = targets.longitudes[t] * kRadians;
      // EdgeLength.compute(x_i = target, x_j = source) -> haversine_distance(x_i, x_j)
      const double dlat = slat - tlat, dlon = slon - tlon;
      const double a = std::pow(std::sin(dlat / 2), 2) + std::cos(tlat) * std::cos(slat) * std::pow(std::sin(dlon / 2), 2);
      double* out = f.data() + 3 * e;
      out[0] = 2 * std::atan2(std::sqrt(a), std::sqrt(1 - a));
      // compute_directions(source, target): rotate the target to the north pole, keep the
      // source's x, y, as a unit vector.
      const Vec3 sv = xyz(sources.latitudes[s], sources.longitudes[s]), tv = xyz(targets.latitudes[t], targets.longitudes[t]);
      constexpr double eps = 1e-8;
      double x, y;
      if (tv[2] > 1 - eps) {
        x = sv[0], y = sv[1];
      } else if (tv[2] < -1 + eps) {
        x = sv[0], y = -sv[1];
      } else {
        const Vec3 axis = {tv[1], -tv[0], 0.0};  // target x north pole
        const double sin_t = std::hypot(axis[0], axis[1]);
        const double cos_t = std::clamp(tv[2], -1.0, 1.0);
        const double theta = std::atan2(sin_t, cos_t);
        const Vec3 k = {axis[0] / std::max(sin_t, eps), axis[1] / std::max(sin_t, eps), 0.0};
        const double kn = std::max(std::hypot(k[0], k[1]), eps);
        const Vec3 u = {k[0] / kn, k[1] / kn, 0.0};
        const double c = std::cos(theta), si = std::sin(theta);
        const Vec3 cross = {u[1] * sv[2] - u[2] * sv[1], u[2] * sv[0] - u[0] * sv[2], u[0] * sv[1] - u[1] * sv[0]};
        const double dot = u[0] * sv[0] + u[1] * sv[1] + u[2] * sv[2];
        x = sv[0] * c + cross[0] * si + u[0] * dot * (1 - c);
        y = sv[1] * c + cross[1] * si + u[1] * dot * (1 - c);
      }
      const double n = std::max(std::hypot(x, y), eps);
      out[1] = x / n;
      out[2] = y / n;
    }
  });
  double longest = 0, sum = 0, sum_sq = 0;
  for (int64_t e = 0; e < edges; ++e) {
    longest = std::max(longest, f[3 * e]);
    for (int c = 1; c < 3; ++c) sum += f[3 * e + c];
  }
  const double count = 2.0 * static_cast<double>(edges), mean = sum / std::max(count, 1.0);
  for (int64_t e = 0; e < edges; ++e)
    for (int c = 1; c < 3; ++c) sum_sq += (f[3 * e + c] - mean) * (f[3 * e + c] - mean);
  double std_dev = count > 1 ? std::sqrt(sum_sq / (count - 1)) : 1.0;
  if (std_dev == 0) std_dev = 1;  // anemoi skips the normalisation then
  if (longest == 0) longest = 1;
  torch::Tensor t = torch::empty({edges, 3}, torch::kFloat);
  float* p = t.data_ptr<float>();
  for (int64_t e = 0; e < edges; ++e) {
    p[3 * e] = static_cast<float>(f[3 * e] / longest);
    p[3 * e + 1] = static_cast<float>(f[3 * e + 1] / std_dev);
    p[3 * e + 2] = static_cast<float>(f[3 * e + 2] / std_dev);
  }
  return t;
}

BipartiteEdges make_edges(const LatLonPoints& sources, const LatLonPoints& targets,
                          std::vector<std::vector<int64_t>>& per_target) {
  std::vector<int64_t> senders, receivers;
  for (size_t t = 0; t < per_target.size(); ++t) {
    std::sort(per_target[t].begin(), per_target[t].end());
    for (int64_t s : per_target[t]) {
      senders.push_back(s);
      receivers.push_back(static_cast<int64_t>(t));
    }
  }
  BipartiteEdges out;
  out.senders = torch::tensor(senders, torch::kLong);
  out.receivers = torch::tensor(receivers, torch::kLong);
  out.features = edge_features(sources, targets, senders, receivers);
  return out;
}

}  // namespace

std::vector<double> gaussian_latitudes(int64_t n) {
  TORCH_CHECK(n >= 1, "gaussian_latitudes: N must be >= 1, got ", n);
  // The positive roots of P_2N by Newton's method from the usual asymptotic guess.
  const int64_t order = 2 * n;
  std::vector<double> out;
  for (int64_t i = 1; i <= n; ++i) {
    double x = std::cos(kPi * (static_cast<double>(i) - 0.25) / (static_cast<double>(order) + 0.5));
    for (int iter = 0; iter < 100; ++iter) {
      double p0 = 1, p1 = x;  // P_0, P_1; recurrence up to P_order
      for (int64_t k = 2; k <= order; ++k) {
        const double p2 = ((2.0 * k - 1) * x * p1 - (k - 1.0) * p0) / static_cast<double>(k);
        p0 = p1, p1 = p2;
      }
      const double dp = static_cast<double>(order) * (x * p1 - p0) / (x * x - 1);
      const double dx = p1 / dp;
      x -= dx;
      if (std::abs(dx) < 1e-16) break;
    }
    out.push_back(std::asin(x) / kRadians);
  }
  return out;
}

LatLonPoints octahedral_grid(int64_t n) {
  const std::vector<double> north = gaussian_latitudes(n);
  LatLonPoints grid;
  auto row = [&](double lat, int64_t i) {  // i: 1 .. N counted from the nearest pole
    const int64_t count = 4 * i + 16;
    for (int64_t j = 0; j < count; ++j) {
      grid.latitudes.push_back(lat);
      grid.longitudes.push_back(360.0 * static_cast<double>(j) / static_cast<double>(count));
    }
  };
  for (int64_t i = 1; i <= n; ++i) row(north[static_cast<size_t>(i - 1)], i);
  for (int64_t i = n; i >= 1; --i) row(-north[static_cast<size_t>(i - 1)], i);
  return grid;
}

int64_t octahedral_number(const std::string& grid, const std::string& key) {
  const bool ok = grid.size() >= 2 && (grid[0] == 'o' || grid[0] == 'O') &&
                  std::all_of(grid.begin() + 1, grid.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                  grid.size() <= 6;
  const int64_t n = ok ? std::stoll(grid.substr(1)) : 0;
  if (n < 1)
    throw ConfigError(key + " = '" + grid + "' is not an octahedral reduced Gaussian grid: expected o<N> with N >= 1 "
                      "(e.g. o48, 10,944 points; o96, 40,320)");
  return n;
}

double grid_reference_distance(const LatLonPoints& nodes) {
  const std::vector<Vec3> p = to_xyz(nodes);
  const SpatialIndex index(p, spacing(nodes.size()));
  std::vector<double> nearest_distance(p.size(), 0.0);
  at::parallel_for(0, static_cast<int64_t>(p.size()), 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      // sklearn's kneighbors(n_neighbors=2) then dists > 0: the nearest other, distinct point.
      for (const auto& [d, j] : nearest(index, p[static_cast<size_t>(i)], 3, static_cast<int64_t>(p.size())))
        if (d > 0) {
          nearest_distance[static_cast<size_t>(i)] = d;
          break;
        }
    }
  });
  return *std::max_element(nearest_distance.begin(), nearest_distance.end());
}

BipartiteEdges cutoff_edges(const LatLonPoints& sources, const LatLonPoints& targets, double cutoff_factor,
                            int64_t max_neighbours) {
  const double radius = cutoff_factor * grid_reference_distance(targets);
  const std::vector<Vec3> s = to_xyz(sources), t = to_xyz(targets);
  const SpatialIndex index(s, std::max(radius, spacing(sources.size())));
  std::vector<std::vector<int64_t>> per_target(t.size());
  at::parallel_for(0, static_cast<int64_t>(t.size()), 64, [&](int64_t begin, int64_t end) {
    std::vector<std::pair<double, int64_t>> found;
    for (int64_t i = begin; i < end; ++i) {
      index.within(t[static_cast<size_t>(i)], radius, found);
      // CutOffEdges keeps the max_neighbours nearest of a target (lexsort by distance).
      std::sort(found.begin(), found.end());
      if (static_cast<int64_t>(found.size()) > max_neighbours) found.resize(static_cast<size_t>(max_neighbours));
      for (const auto& f : found) per_target[static_cast<size_t>(i)].push_back(f.second);
    }
  });
  return make_edges(sources, targets, per_target);
}

BipartiteEdges knn_edges(const LatLonPoints& sources, const LatLonPoints& targets, int64_t k) {
  const std::vector<Vec3> s = to_xyz(sources), t = to_xyz(targets);
  const SpatialIndex index(s, spacing(sources.size()));
  std::vector<std::vector<int64_t>> per_target(t.size());
  at::parallel_for(0, static_cast<int64_t>(t.size()), 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      for (const auto& f : nearest(index, t[static_cast<size_t>(i)], k, static_cast<int64_t>(s.size())))
        per_target[static_cast<size_t>(i)].push_back(f.second);
  });
  return make_edges(sources, targets, per_target);
}

}  // namespace wxtrain::models
