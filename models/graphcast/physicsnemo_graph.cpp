// PhysicsNeMo's GraphCastNet graph (model.graph = "physicsnemo"), rebuilt in C++ so that a model
// imported from a PhysicsNeMo checkpoint sees the graph it was trained on. The reference computes
// in float32 (numpy for the mesh, torch for the features) and picks neighbours by distances that
// tie on symmetric grids, so "the same rules" is not enough: the arithmetic is the reference's, in
// its order (physicsnemo/models/graphcast/utils/{icosahedral_mesh,graph,graph_utils,
// graph_backend}.py of nvidia-physicsnemo 2.2.2), and the features come from the same LibTorch
// operations on tensors of the same layouts (a strided view takes another kernel path than a
// contiguous tensor, a last bit apart). This file is built with -ffp-contract=off
// (models/CMakeLists.txt): no fused multiply-adds where the reference rounds twice.
// tests/models/test_graphcast_reference.cpp compares the graph with the reference's, tensor by
// tensor.
#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <utility>

#include <ATen/Parallel.h>

#include "core/error.h"
#include "models/graphcast/graphcast.h"

namespace wxtrain::models {
namespace {

constexpr double kPi = 3.14159265358979323846;  // np.pi

using Vec3f = std::array<float, 3>;
Vec3f to_float(const Vec3& v) {
  return {static_cast<float>(v[0]), static_cast<float>(v[1]), static_cast<float>(v[2])};
}

// numpy's float32 x.dot(x) of a 3-vector (OpenBLAS sdot): float products summed in double.
float float32_dot(const Vec3f& v) {
  const double sum = static_cast<double>(v[0] * v[0]) + static_cast<double>(v[1] * v[1]) +
                     static_cast<double>(v[2] * v[2]);
  return static_cast<float>(sum);
}

// scikit-learn's KD tree (sklearn/neighbors/_binary_tree.pxi.tp, _kd_tree.pyx.tp,
// _partition_nodes.pyx, utils/_heap.pyx, utils/_sorting.pyx of scikit-learn 1.9.1), which
// GraphCastNet's NearestNeighbors uses with its defaults (leaf_size 30, Euclidean). Ported, not
// replaced by any exact search, because of ties: on a regular grid many points are exactly as far
// from two mesh nodes or two face centroids, and which one the reference takes is decided by the
// tree's layout (std::nth_element on the split dimension) and its depth-first visiting order.
class SklearnKDTree {
 public:
  explicit SklearnKDTree(std::vector<Vec3> data, int64_t leaf_size = 30) : data_(std::move(data)) {
    const auto n = static_cast<int64_t>(data_.size());
    const int64_t levels =
        static_cast<int64_t>(std::log2(std::fmax(1.0, static_cast<double>(n - 1) / static_cast<double>(leaf_size))) + 1);
    nodes_.resize(static_cast<size_t>((int64_t{1} << levels) - 1));
    index_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) index_[static_cast<size_t>(i)] = i;
    build(0, 0, n);
  }

  // The k nearest points to `p`, nearer first: their indices and Euclidean distances, as
  // KDTree.query(X, k) returns them (ties in the order the reference lists them).
  void query(const Vec3& p, int64_t k, int64_t* indices, double* distances) const {
    std::vector<double> heap_values(static_cast<size_t>(k), std::numeric_limits<double>::infinity());
    std::vector<int64_t> heap_indices(static_cast<size_t>(k), 0);
    search(0, p, min_rdist(0, p), heap_values.data(), heap_indices.data(), k);
    // simultaneous_sort: an insertion sort up to 15 entries (k here is 1 or 4).
    for (int64_t i = 1; i < k; ++i) {
      const double v = heap_values[static_cast<size_t>(i)];
      const int64_t id = heap_indices[static_cast<size_t>(i)];
      int64_t j = i;
      while (j > 0 && heap_values[static_cast<size_t>(j - 1)] > v) {
        heap_values[static_cast<size_t>(j)] = heap_values[static_cast<size_t>(j - 1)];
        heap_indices[static_cast<size_t>(j)] = heap_indices[static_cast<size_t>(j - 1)];
        --j;
      }
      heap_values[static_cast<size_t>(j)] = v;
      heap_indices[static_cast<size_t>(j)] = id;
    }
    for (int64_t i = 0; i < k; ++i) {
      indices[i] = heap_indices[static_cast<size_t>(i)];
      distances[i] = std::sqrt(heap_values[static_cast<size_t>(i)]);
    }
  }

 private:
  struct Node {
    Vec3 lower, upper;
    int64_t start = 0, end = 0;
    bool leaf = true;
  };

  void build(int64_t node, int64_t start, int64_t end) {
    Node& nd = nodes_[static_cast<size_t>(node)];
    nd.start = start;
    nd.end = end;
    for (int k = 0; k < 3; ++k) {
      nd.lower[k] = std::numeric_limits<double>::infinity();
      nd.upper[k] = -std::numeric_limits<double>::infinity();
    }
    for (int64_t i = start; i < end; ++i)
      for (int k = 0; k < 3; ++k) {
        nd.lower[k] = std::fmin(nd.lower[k], data_[static_cast<size_t>(index_[static_cast<size_t>(i)])][k]);
        nd.upper[k] = std::fmax(nd.upper[k], data_[static_cast<size_t>(index_[static_cast<size_t>(i)])][k]);
      }
    const int64_t points = end - start;
    if (2 * node + 1 >= static_cast<int64_t>(nodes_.size()) || points < 2) {
      nd.leaf = true;
      return;
    }
    nd.leaf = false;
    // find_node_split_dim: the dimension of largest spread (the first one on a tie).
    int split = 0;
    double widest = 0;
    for (int k = 0; k < 3; ++k) {
      double hi = data_[static_cast<size_t>(index_[static_cast<size_t>(start)])][k], lo = hi;
      for (int64_t i = start + 1; i < end; ++i) {
        const double v = data_[static_cast<size_t>(index_[static_cast<size_t>(i)])][k];
        hi = std::fmax(hi, v);
        lo = std::fmin(lo, v);
      }
      if (hi - lo > widest) widest = hi - lo, split = k;
    }
    // partition_node_indices: nth_element by the split coordinate, then the index.
    const int64_t mid = points / 2;
    std::nth_element(index_.begin() + start, index_.begin() + start + mid, index_.begin() + end,
                     [&](int64_t a, int64_t b) {
                       const double va = data_[static_cast<size_t>(a)][split], vb = data_[static_cast<size_t>(b)][split];
                       return va == vb ? a < b : va < vb;
                     });
    build(2 * node + 1, start, start + mid);
    build(2 * node + 2, start + mid, end);
  }

  double min_rdist(int64_t node, const Vec3& p) const {
    const Node& nd = nodes_[static_cast<size_t>(node)];
    double rdist = 0;
    for (int k = 0; k < 3; ++k) {
      const double lo = nd.lower[k] - p[k], hi = p[k] - nd.upper[k];
      const double d = (lo + std::fabs(lo)) + (hi + std::fabs(hi));
      rdist += std::pow(0.5 * d, 2.0);
    }
    return rdist;
  }

  // heap_push: a fixed-size max-heap of the k nearest so far.
  static void push(double* values, int64_t* indices, int64_t size, double value, int64_t index) {
    if (value >= values[0]) return;
    int64_t at = 0;
    while (true) {
      const int64_t left = 2 * at + 1, right = left + 1;
      int64_t swap = 0;
      if (left >= size) {
        break;
      } else if (right >= size) {
        if (values[left] > value) swap = left;
        else break;
      } else if (values[left] >= values[right]) {
        if (value < values[left]) swap = left;
        else break;
      } else {
        if (value < values[right]) swap = right;
        else break;
      }
      values[at] = values[swap];
      indices[at] = indices[swap];
      at = swap;
    }
    values[at] = value;
    indices[at] = index;
  }

  // _query_single_depthfirst.
  void search(int64_t node, const Vec3& p, double lower_bound, double* values, int64_t* indices, int64_t k) const {
    const Node& nd = nodes_[static_cast<size_t>(node)];
    if (lower_bound > values[0]) return;
    if (nd.leaf) {
      for (int64_t i = nd.start; i < nd.end; ++i) {
        const int64_t id = index_[static_cast<size_t>(i)];
        const Vec3& q = data_[static_cast<size_t>(id)];
        double d = 0;
        for (int c = 0; c < 3; ++c) {
          const double t = p[c] - q[c];
          d += t * t;
        }
        push(values, indices, k, d, id);
      }
      return;
    }
    const int64_t a = 2 * node + 1, b = a + 1;
    const double la = min_rdist(a, p), lb = min_rdist(b, p);
    if (la <= lb) {
      search(a, p, la, values, indices, k);
      search(b, p, lb, values, indices, k);
    } else {
      search(b, p, lb, values, indices, k);
      search(a, p, la, values, indices, k);
    }
  }

  std::vector<Vec3> data_;
  std::vector<Node> nodes_;
  std::vector<int64_t> index_;
};

// ---- graph_utils.py, with LibTorch's operations where the reference uses torch's ----

torch::Tensor degrees_to_radians(const torch::Tensor& deg) { return deg * kPi / 180; }
torch::Tensor radians_to_degrees(const torch::Tensor& rad) { return rad * 180 / kPi; }

// latlon2xyz: [N, 2] degrees -> [N, 3] on the unit sphere.
torch::Tensor latlon2xyz(torch::Tensor latlon) {
  latlon = degrees_to_radians(latlon);
  const torch::Tensor lat = latlon.select(1, 0), lon = latlon.select(1, 1);
  const torch::Tensor x = 1 * torch::cos(lat) * torch::cos(lon);
  const torch::Tensor y = 1 * torch::cos(lat) * torch::sin(lon);
  const torch::Tensor z = 1 * torch::sin(lat);
  return torch::stack({x, y, z}, 1);
}

// xyz2latlon: [N, 3] -> [N, 2] (lat, lon) in degrees or radians.
torch::Tensor xyz2latlon(const torch::Tensor& xyz, bool degrees) {
  const torch::Tensor lat = torch::arcsin(xyz.select(1, 2) / 1);
  const torch::Tensor lon = torch::arctan2(xyz.select(1, 1), xyz.select(1, 0));
  if (degrees) return torch::stack({radians_to_degrees(lat), radians_to_degrees(lon)}, 1);
  return torch::stack({lat, lon}, 1);
}

// geospatial_rotation about z or y by theta [N] (radians), of points [N, 3].
torch::Tensor geospatial_rotation(const torch::Tensor& points, const torch::Tensor& theta, char axis) {
  const torch::Tensor in = points.unsqueeze(-1);
  torch::Tensor rotation = torch::zeros({theta.size(0), 3, 3});
  const torch::Tensor cos = torch::cos(theta), sin = torch::sin(theta);
  auto at = [&](int64_t i, int64_t j) { return rotation.select(2, j).select(1, i); };
  if (axis == 'y') {
    at(0, 0) += cos;
    at(0, 2) += sin;
    at(1, 1) += 1.0;
    at(2, 0) -= sin;
    at(2, 2) += cos;
  } else {
    at(0, 0) += cos;
    at(0, 1) -= sin;
    at(1, 0) += sin;
    at(1, 1) += cos;
    at(2, 2) += 1.0;
  }
  return torch::matmul(rotation, in).squeeze();
}

// graph_backend.py add_edge_features: [dx, dy, dz, |d|] / max |d|, d = sender - receiver after the
// rotations that take the receiver to (1, 0, 0).
torch::Tensor edge_features(const torch::Tensor& sender_pos, const torch::Tensor& receiver_pos,
                            const torch::Tensor& senders, const torch::Tensor& receivers) {
  torch::Tensor src = sender_pos.index_select(0, senders), dst = receiver_pos.index_select(0, receivers);
  const torch::Tensor dst_latlon = xyz2latlon(dst, /*degrees=*/false);
  const torch::Tensor dst_lat = dst_latlon.select(1, 0), dst_lon = dst_latlon.select(1, 1);
  const torch::Tensor azimuthal = torch::where(dst_lon >= 0.0, torch::rsub(dst_lon, 2 * kPi), -dst_lon);
  const torch::Tensor polar = torch::where(dst_lat >= 0.0, dst_lat, dst_lat + 2 * kPi);
  src = geospatial_rotation(src, azimuthal, 'z');
  dst = geospatial_rotation(dst, azimuthal, 'z');
  src = geospatial_rotation(src, polar, 'y');
  dst = geospatial_rotation(dst, polar, 'y');
  const torch::Tensor disp = src - dst;
  const std::vector<int64_t> last{-1};
  const torch::Tensor length = torch::linalg_vector_norm(disp, 2, last, /*keepdim=*/true);
  const torch::Tensor longest = torch::max(length);
  return torch::cat({disp / longest, length / longest}, -1);
}

// graph_backend.py add_node_features: (cos lat, sin lon, cos lon) of the latitude and longitude in
// degrees, passed to cos and sin as they are (the reference's formula, kept for its weights).
torch::Tensor mesh_node_features(const torch::Tensor& pos) {
  const torch::Tensor latlon = xyz2latlon(pos, /*degrees=*/true);
  const torch::Tensor lat = latlon.select(1, 0), lon = latlon.select(1, 1);
  return torch::stack({torch::cos(lat), torch::sin(lon), torch::cos(lon)}, -1);
}

torch::Tensor index_tensor(const std::vector<int64_t>& v) {
  return torch::tensor(at::ArrayRef<int64_t>(v), torch::kLong);
}

}  // namespace

IcosahedralMesh deepmind_icosahedral_mesh(int64_t refinement) {
  TORCH_CHECK(refinement >= 0 && refinement <= 10, "deepmind_icosahedral_mesh: refinement must be in 0 .. 10, got ",
              refinement);
  // get_icosahedron: (c1, c2, 0), (0, c1, c2), (c2, 0, c1) for c1 in (1, -1), c2 in (phi, -phi),
  // as float32, divided by |(1, phi)| in double, then turned about y so that faces, not vertices,
  // sit at the poles (scipy's rotation matrix from the quaternion, applied in double, rounded).
  const double phi = (1 + std::sqrt(5.0)) / 2;
  const double length = std::sqrt(1.0 + phi * phi);
  const double angle = (kPi - 2 * std::asin(phi / std::sqrt(3.0))) / 2;
  const double s = std::sin(angle / 2), c = std::cos(angle / 2);
  const double r00 = -(s * s) + c * c, r02 = 2 * (s * c), r11 = s * s + c * c, r20 = 2 * (-(s * c)),
               r22 = -(s * s) + c * c;
  IcosahedralMesh mesh;
  for (double c1 : {1.0, -1.0})
    for (double c2 : {phi, -phi})
      for (const Vec3& v : {Vec3{c1, c2, 0.0}, Vec3{0.0, c1, c2}, Vec3{c2, 0.0, c1}}) {
        Vec3 p;
        for (int k = 0; k < 3; ++k) p[k] = static_cast<double>(static_cast<float>(static_cast<float>(v[k]) / length));
        const Vec3 turned = {p[0] * r00 + p[1] * 0.0 + p[2] * r20, p[0] * 0.0 + p[1] * r11 + p[2] * 0.0,
                             p[0] * r02 + p[1] * 0.0 + p[2] * r22};
        mesh.vertices.push_back({static_cast<float>(turned[0]), static_cast<float>(turned[1]),
                                 static_cast<float>(turned[2])});
      }
  mesh.faces.push_back({{0, 1, 2},  {0, 6, 1},  {8, 0, 2},  {8, 4, 0},  {3, 8, 2},  {3, 2, 7},  {7, 2, 1},
                        {0, 4, 6},  {4, 11, 6}, {6, 11, 5}, {1, 5, 7},  {4, 10, 11}, {4, 8, 10}, {10, 8, 3},
                        {10, 3, 9}, {11, 10, 9}, {11, 9, 5}, {5, 9, 7},  {9, 3, 7},  {1, 6, 5}});
  // _ChildVerticesBuilder: the float32 mean of the two parents over its float32 norm.
  refine_icosahedral_mesh(mesh, refinement, [](const Vec3& a, const Vec3& b) {
    const Vec3f fa = to_float(a), fb = to_float(b);
    Vec3f m;
    for (int k = 0; k < 3; ++k) m[k] = (fa[k] + fb[k]) / 2.0f;
    const float n = std::sqrt(float32_dot(m));
    return Vec3{m[0] / n, m[1] / n, m[2] / n};
  });
  return mesh;
}

bool covers_the_sphere(const std::vector<double>& latitudes, const std::vector<double>& longitudes) {
  if (latitudes.size() < 2 || longitudes.size() < 2) return false;
  const auto [lo, hi] = std::minmax_element(latitudes.begin(), latitudes.end());
  const double row = (*hi - *lo) / static_cast<double>(latitudes.size() - 1);
  if (*lo > -90 + row + 1e-9 || *hi < 90 - row - 1e-9) return false;
  std::vector<double> lon;
  for (double l : longitudes) lon.push_back(l - 360.0 * std::floor(l / 360.0));
  std::sort(lon.begin(), lon.end());
  double gap = lon.front() + 360.0 - lon.back();
  for (size_t j = 1; j < lon.size(); ++j) gap = std::max(gap, lon[j] - lon[j - 1]);
  return gap <= 1.5 * 360.0 / static_cast<double>(lon.size());
}

GraphCastGraph build_physicsnemo_graph(const std::vector<double>& latitudes, const std::vector<double>& longitudes,
                                       int64_t refinement) {
  TORCH_CHECK(!latitudes.empty() && !longitudes.empty(), "build_physicsnemo_graph: empty grid");
  const IcosahedralMesh mesh = deepmind_icosahedral_mesh(refinement);
  const auto nlat = static_cast<int64_t>(latitudes.size()), nlon = static_cast<int64_t>(longitudes.size());
  const int64_t ng = nlat * nlon;
  const auto nm_full = static_cast<int64_t>(mesh.vertices.size());
  std::vector<Vec3f> mesh_xyz(mesh.vertices.size());
  for (size_t v = 0; v < mesh.vertices.size(); ++v) mesh_xyz[v] = to_float(mesh.vertices[v]);

  // The grid as the reference lays it out: stack(meshgrid(lat, lon, "ij"), -1), flattened to
  // [lat * lon, 2], then latlon2xyz (torch, float32).
  std::vector<float> lat_f(latitudes.begin(), latitudes.end()), lon_f(longitudes.begin(), longitudes.end());
  const torch::Tensor lat_t = torch::tensor(lat_f), lon_t = torch::tensor(lon_f);
  const torch::Tensor grid_latlon =
      torch::stack(torch::meshgrid({lat_t, lon_t}, "ij"), -1).permute({2, 0, 1}).view({2, -1}).permute({1, 0});
  const torch::Tensor grid_pos = latlon2xyz(grid_latlon).contiguous();
  std::vector<Vec3f> grid_xyz(static_cast<size_t>(ng));
  {
    const auto a = grid_pos.accessor<float, 2>();
    for (int64_t n = 0; n < ng; ++n) grid_xyz[static_cast<size_t>(n)] = {a[n][0], a[n][1], a[n][2]};
  }

  // max_edge_length over the finest level's face edges: float32 differences, squares and sums.
  float longest2 = 0;
  for (const Face& f : mesh.faces.back())
    for (int i = 0; i < 3; ++i) {
      const Vec3f &a = mesh_xyz[static_cast<size_t>(f[i])], &b = mesh_xyz[static_cast<size_t>(f[(i + 1) % 3])];
      float sum = 0;
      for (int k = 0; k < 3; ++k) {
        const float d = a[k] - b[k];
        const float d2 = d * d;
        sum += d2;
      }
      longest2 = std::max(longest2, sum);
    }
  const float longest = std::sqrt(longest2);
  const double radius = static_cast<double>(0.6f * longest);  // 0.6 * np.float32: a float32 product

  GraphCastGraph g;
  g.grid_nodes = ng;
  g.g2m_radius = radius;

  // Grid -> mesh: NearestNeighbors(n_neighbors=4) over the mesh nodes, queried with the grid
  // points (both as double from float32), keeping those within the radius, in the order returned.
  std::vector<Vec3> grid_points(static_cast<size_t>(ng));
  for (int64_t n = 0; n < ng; ++n)
    for (int k = 0; k < 3; ++k) grid_points[static_cast<size_t>(n)][k] = grid_xyz[static_cast<size_t>(n)][k];
  std::vector<int64_t> offsets(static_cast<size_t>(ng) + 1, 0);
  std::vector<std::array<int64_t, 4>> near4(static_cast<size_t>(ng));
  {
    std::vector<Vec3> points(mesh_xyz.size());
    for (size_t v = 0; v < mesh_xyz.size(); ++v)
      for (int k = 0; k < 3; ++k) points[v][k] = mesh_xyz[v][k];
    const SklearnKDTree tree(std::move(points));
    const int64_t k4 = std::min<int64_t>(4, nm_full);
    at::parallel_for(0, ng, 2048, [&](int64_t begin, int64_t end) {
      int64_t ids[4];
      double dist[4];
      for (int64_t n = begin; n < end; ++n) {
        tree.query(grid_points[static_cast<size_t>(n)], k4, ids, dist);
        int64_t keep = 0;
        for (int64_t j = 0; j < k4; ++j)
          if (dist[j] <= radius) near4[static_cast<size_t>(n)][static_cast<size_t>(keep++)] = ids[j];
        offsets[static_cast<size_t>(n) + 1] = keep;
      }
    });
  }
  for (int64_t n = 0; n < ng; ++n) offsets[static_cast<size_t>(n) + 1] += offsets[static_cast<size_t>(n)];
  std::vector<int64_t> g2m_s(static_cast<size_t>(offsets.back())), g2m_r(static_cast<size_t>(offsets.back()));
  for (int64_t n = 0; n < ng; ++n)
    for (int64_t k = offsets[static_cast<size_t>(n)]; k < offsets[static_cast<size_t>(n) + 1]; ++k) {
      g2m_s[static_cast<size_t>(k)] = n;
      g2m_r[static_cast<size_t>(k)] = near4[static_cast<size_t>(n)][static_cast<size_t>(k - offsets[static_cast<size_t>(n)])];
    }

  // Mesh -> grid: the corners of the face whose centroid ((a + b + c) / 3 in float32) is nearest,
  // over the faces of every level (the reference's merged mesh); ties to the lower face.
  std::vector<Face> faces;
  for (const std::vector<Face>& level : mesh.faces) faces.insert(faces.end(), level.begin(), level.end());
  std::vector<Vec3f> centroids(faces.size());
  for (size_t f = 0; f < faces.size(); ++f)
    for (int k = 0; k < 3; ++k)
      centroids[f][k] = (mesh_xyz[static_cast<size_t>(faces[f][0])][k] + mesh_xyz[static_cast<size_t>(faces[f][1])][k] +
                         mesh_xyz[static_cast<size_t>(faces[f][2])][k]) /
                        3.0f;
  // NearestNeighbors(n_neighbors=1) over the centroids.
  std::vector<int64_t> m2g_s(static_cast<size_t>(3 * ng)), m2g_r(static_cast<size_t>(3 * ng));
  {
    std::vector<Vec3> points(centroids.size());
    for (size_t f = 0; f < centroids.size(); ++f)
      for (int k = 0; k < 3; ++k) points[f][k] = centroids[f][k];
    const SklearnKDTree tree(std::move(points));
    at::parallel_for(0, ng, 2048, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        int64_t face = 0;
        double dist = 0;
        tree.query(grid_points[static_cast<size_t>(n)], 1, &face, &dist);
        for (int i = 0; i < 3; ++i) {
          m2g_s[static_cast<size_t>(3 * n + i)] = faces[static_cast<size_t>(face)][static_cast<size_t>(i)];
          m2g_r[static_cast<size_t>(3 * n + i)] = n;
        }
      }
    });
  }

  // The multi-mesh: every face's three edges, both directions, unique, sorted by (sender,
  // receiver) as PyG's to_undirected leaves them.
  std::vector<std::pair<int64_t, int64_t>> pairs;
  pairs.reserve(faces.size() * 6);
  for (const Face& f : faces)
    for (int i = 0; i < 3; ++i) {
      pairs.emplace_back(f[i], f[(i + 1) % 3]);
      pairs.emplace_back(f[(i + 1) % 3], f[i]);
    }
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());

  // Features over the whole mesh (the reference's normalisation), before a regional grid's cut.
  const torch::Tensor mesh_pos = torch::from_blob(mesh_xyz.data(), {nm_full, 3}, torch::kFloat).clone();
  std::vector<int64_t> all_s(pairs.size()), all_r(pairs.size());
  for (size_t e = 0; e < pairs.size(); ++e) all_s[e] = pairs[e].first, all_r[e] = pairs[e].second;
  const torch::Tensor all_mesh_features = edge_features(mesh_pos, mesh_pos, index_tensor(all_s), index_tensor(all_r));
  const torch::Tensor all_node_features = mesh_node_features(mesh_pos);

  // Which mesh nodes stay: all of them on a global grid (the reference's graph), else those the
  // grid sends to or reads from.
  std::vector<int64_t> new_id(static_cast<size_t>(nm_full), -1);
  const bool global = covers_the_sphere(latitudes, longitudes);
  for (int64_t v = 0; v < nm_full; ++v)
    if (global) new_id[static_cast<size_t>(v)] = 0;
  for (int64_t v : g2m_r) new_id[static_cast<size_t>(v)] = 0;
  for (int64_t v : m2g_s) new_id[static_cast<size_t>(v)] = 0;
  std::vector<int64_t> kept;
  for (int64_t v = 0; v < nm_full; ++v)
    if (new_id[static_cast<size_t>(v)] == 0) {
      new_id[static_cast<size_t>(v)] = static_cast<int64_t>(kept.size());
      kept.push_back(v);
    }
  std::vector<int64_t> mesh_s, mesh_r, kept_edges;
  for (size_t e = 0; e < pairs.size(); ++e) {
    const int64_t s = new_id[static_cast<size_t>(all_s[e])], r = new_id[static_cast<size_t>(all_r[e])];
    if (s >= 0 && r >= 0) mesh_s.push_back(s), mesh_r.push_back(r), kept_edges.push_back(static_cast<int64_t>(e));
  }
  const torch::Tensor kept_t = index_tensor(kept);
  const torch::Tensor kept_pos = mesh_pos.index_select(0, kept_t);

  g.mesh_nodes = static_cast<int64_t>(kept.size());
  g.kept_mesh_nodes = kept_t;
  g.mesh_features = all_node_features.index_select(0, kept_t).contiguous();
  g.grid_features = torch::empty({ng, 3});
  {
    float* gf = g.grid_features.data_ptr<float>();
    for (int64_t i = 0; i < nlat; ++i)
      for (int64_t j = 0; j < nlon; ++j) {
        const double lat = latitudes[static_cast<size_t>(i)] * kPi / 180, lon = longitudes[static_cast<size_t>(j)] * kPi / 180;
        float* out = gf + 3 * (i * nlon + j);
        out[0] = static_cast<float>(std::sin(lat));
        out[1] = static_cast<float>(std::cos(lon));
        out[2] = static_cast<float>(std::sin(lon));
      }
  }
  for (int64_t& v : g2m_r) v = new_id[static_cast<size_t>(v)];
  for (int64_t& v : m2g_s) v = new_id[static_cast<size_t>(v)];
  g.g2m_senders = index_tensor(g2m_s);
  g.g2m_receivers = index_tensor(g2m_r);
  g.g2m_features = edge_features(grid_pos, kept_pos, g.g2m_senders, g.g2m_receivers).contiguous();
  g.mesh_senders = index_tensor(mesh_s);
  g.mesh_receivers = index_tensor(mesh_r);
  g.mesh_edge_features = all_mesh_features.index_select(0, index_tensor(kept_edges)).contiguous();
  g.m2g_senders = index_tensor(m2g_s);
  g.m2g_receivers = index_tensor(m2g_r);
  g.m2g_features = edge_features(kept_pos, grid_pos, g.m2g_senders, g.m2g_receivers).contiguous();
  return g;
}

GraphCastGraph build_model_graph(const GraphCastOptions& o, const std::vector<double>& latitudes,
                                 const std::vector<double>& longitudes, bool point_set) {
  if (point_set) {
    if (o.graph == "physicsnemo")
      throw ConfigError("model.graph = \"physicsnemo\" builds PhysicsNeMo's graph on a latitude x longitude rectangle, "
                        "but the data is a point-set grid of " + std::to_string(latitudes.size()) +
                        " cells; use model.graph = \"graphcast\"");
    return build_graphcast_cell_graph(latitudes, longitudes, o.mesh_refinement);
  }
  if (o.graph == "physicsnemo") return build_physicsnemo_graph(latitudes, longitudes, o.mesh_refinement);
  return build_graphcast_graph(latitudes, longitudes, o.mesh_refinement);
}

}  // namespace wxtrain::models
