#include "models/graphcast/graphcast.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <unordered_map>
#include <utility>

#include <ATen/Parallel.h>

#include "core/error.h"
#include "models/graphcast/graphcast_reference.h"
#include "ops/edge_gather.h"

namespace wxtrain::models {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kRadians = kPi / 180.0;

Vec3 operator+(const Vec3& a, const Vec3& b) { return {a[0] + b[0], a[1] + b[1], a[2] + b[2]}; }
Vec3 operator-(const Vec3& a, const Vec3& b) { return {a[0] - b[0], a[1] - b[1], a[2] - b[2]}; }
double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
double norm(const Vec3& a) { return std::sqrt(dot(a, a)); }
Vec3 normalized(const Vec3& a) {
  const double n = norm(a);
  return {a[0] / n, a[1] / n, a[2] / n};
}

// How far inside face (a, b, c) the unit vector p lies: the smallest of its heights over the
// face's three great-circle planes (all >= 0 inside, counter-clockwise faces).
double inside_margin(const IcosahedralMesh& mesh, const Face& f, const Vec3& p) {
  const Vec3 &a = mesh.vertices[f[0]], &b = mesh.vertices[f[1]], &c = mesh.vertices[f[2]];
  return std::min({dot(cross(a, b), p), dot(cross(b, c), p), dot(cross(c, a), p)});
}

// The node features of a point at (lat, lon): sin lat (= cos of the polar angle, the reference's
// "latitude" feature), cos lon, sin lon.
void node_features(double sin_lat, double lon_rad, float* out) {
  out[0] = static_cast<float>(sin_lat);
  out[1] = static_cast<float>(std::cos(lon_rad));
  out[2] = static_cast<float>(std::sin(lon_rad));
}

// Edge features [E, 4] (length, then sender - receiver in the receiver's local frame), divided by
// the longest edge of the set, as the reference's get_relative_position_in_receiver_local_coordinates:
// rotate by -lon about z, then by lat about y, which takes the receiver to (1, 0, 0) and keeps
// north pointing along +z.
torch::Tensor edge_features(const std::vector<Vec3>& sender_pos, const std::vector<Vec3>& receiver_pos,
                            const std::vector<int64_t>& senders, const std::vector<int64_t>& receivers) {
  const auto edges = static_cast<int64_t>(senders.size());
  std::vector<double> f(static_cast<size_t>(edges) * 4);
  at::parallel_for(0, edges, 16384, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const Vec3& r = receiver_pos[static_cast<size_t>(receivers[k])];
      const Vec3 d = sender_pos[static_cast<size_t>(senders[k])] - r;
      const double lon = std::atan2(r[1], r[0]), sin_lat = std::clamp(r[2], -1.0, 1.0);
      const double cos_lat = std::sqrt(std::max(0.0, 1 - sin_lat * sin_lat));
      const double x1 = std::cos(lon) * d[0] + std::sin(lon) * d[1];
      const double y1 = -std::sin(lon) * d[0] + std::cos(lon) * d[1];
      double* out = f.data() + 4 * k;
      out[0] = norm(d);
      out[1] = cos_lat * x1 + sin_lat * d[2];
      out[2] = y1;
      out[3] = -sin_lat * x1 + cos_lat * d[2];
    }
  });
  double longest = 0;
  for (int64_t k = 0; k < edges; ++k) longest = std::max(longest, f[4 * k]);
  if (longest == 0) longest = 1;
  torch::Tensor t = torch::empty({edges, 4}, torch::kFloat);
  float* p = t.data_ptr<float>();
  for (size_t i = 0; i < f.size(); ++i) p[i] = static_cast<float>(f[i] / longest);
  return t;
}

torch::Tensor to_tensor(const std::vector<int64_t>& v) {
  return torch::from_blob(const_cast<int64_t*>(v.data()), {static_cast<int64_t>(v.size())}, torch::kLong).clone();
}

}  // namespace

// ---- the mesh ----

IcosahedralMesh icosahedral_mesh(int64_t refinement) {
  TORCH_CHECK(refinement >= 0 && refinement <= 10, "icosahedral_mesh: refinement must be in 0 .. 10, got ", refinement);
  IcosahedralMesh mesh;
  // The 12 vertices: cyclic permutations of (0, +-1, +-phi).
  const double phi = (1 + std::sqrt(5.0)) / 2;
  for (double s1 : {-1.0, 1.0})
    for (double s2 : {-1.0, 1.0})
      for (const Vec3& v : {Vec3{0, s1, s2 * phi}, Vec3{s1, s2 * phi, 0}, Vec3{s2 * phi, 0, s1}})
        mesh.vertices.push_back(normalized(v));
  // The 20 faces are the triples of mutual nearest neighbours (each vertex has 5 at the edge length),
  // turned counter-clockwise seen from outside.
  double edge = std::numeric_limits<double>::max();
  for (size_t i = 1; i < 12; ++i) edge = std::min(edge, norm(mesh.vertices[0] - mesh.vertices[i]));
  auto adjacent = [&](int64_t i, int64_t j) { return norm(mesh.vertices[i] - mesh.vertices[j]) < edge * 1.01; };
  std::vector<Face> faces;
  for (int64_t i = 0; i < 12; ++i)
    for (int64_t j = i + 1; j < 12; ++j)
      for (int64_t k = j + 1; k < 12; ++k) {
        if (!adjacent(i, j) || !adjacent(j, k) || !adjacent(i, k)) continue;
        const Vec3 &a = mesh.vertices[i], &b = mesh.vertices[j], &c = mesh.vertices[k];
        faces.push_back(dot(cross(b - a, c - a), a + b + c) > 0 ? Face{i, j, k} : Face{i, k, j});
      }
  TORCH_CHECK(faces.size() == 20, "icosahedral_mesh: found ", faces.size(), " faces");
  mesh.faces.push_back(std::move(faces));
  // A midpoint stays on its edge's great circle, so the children tile the parent exactly.
  refine_icosahedral_mesh(mesh, refinement, [](const Vec3& a, const Vec3& b) { return normalized(a + b); });
  return mesh;
}

void refine_icosahedral_mesh(IcosahedralMesh& mesh, int64_t refinement,
                             const std::function<Vec3(const Vec3&, const Vec3&)>& midpoint_of) {
  // Each refinement splits every triangle in four at its edges' midpoints, pushed out onto the
  // sphere; midpoints are numbered in the order the faces first ask for them (ab, bc, ca).
  for (int64_t r = 1; r <= refinement; ++r) {
    const std::vector<Face>& parent = mesh.faces.back();
    std::unordered_map<int64_t, int64_t> midpoints;  // key min * 2^32 + max
    auto midpoint = [&](int64_t a, int64_t b) {
      const int64_t key = (std::min(a, b) << 32) | std::max(a, b);
      auto it = midpoints.find(key);
      if (it != midpoints.end()) return it->second;
      const Vec3 m = midpoint_of(mesh.vertices[a], mesh.vertices[b]);
      mesh.vertices.push_back(m);
      const auto id = static_cast<int64_t>(mesh.vertices.size()) - 1;
      midpoints.emplace(key, id);
      return id;
    };
    std::vector<Face> children;
    children.reserve(parent.size() * 4);
    for (const Face& f : parent) {
      const int64_t a = f[0], b = f[1], c = f[2];
      const int64_t ab = midpoint(a, b), bc = midpoint(b, c), ca = midpoint(c, a);
      children.push_back({a, ab, ca});
      children.push_back({ab, b, bc});
      children.push_back({ca, bc, c});
      children.push_back({ab, bc, ca});
    }
    mesh.faces.push_back(std::move(children));
  }
}

void mesh_level_edges(const IcosahedralMesh& mesh, int64_t level, std::vector<int64_t>& senders,
                      std::vector<int64_t>& receivers) {
  TORCH_CHECK(level >= 0 && level <= mesh.refinement(), "mesh_level_edges: no level ", level);
  // Faces are counter-clockwise, so each edge appears once in each direction: a -> b in one face,
  // b -> a in its neighbour.
  for (const Face& f : mesh.faces[static_cast<size_t>(level)]) {
    for (int i = 0; i < 3; ++i) {
      senders.push_back(f[i]);
      receivers.push_back(f[(i + 1) % 3]);
    }
  }
}

void multimesh_edges(const IcosahedralMesh& mesh, std::vector<int64_t>& senders, std::vector<int64_t>& receivers) {
  for (int64_t r = 0; r <= mesh.refinement(); ++r) mesh_level_edges(mesh, r, senders, receivers);
}

double longest_finest_edge(const IcosahedralMesh& mesh) {
  double longest = 0;
  for (const Face& f : mesh.faces.back())
    for (int i = 0; i < 3; ++i)
      longest = std::max(longest, norm(mesh.vertices[f[i]] - mesh.vertices[f[(i + 1) % 3]]));
  return longest;
}

int64_t walk_to_face(const IcosahedralMesh& mesh, const Vec3& p) {
  // At each level the child with the largest margin: the one holding p (a point on a shared edge
  // has margin 0 in both faces, and either will do).
  int64_t best = 0;
  double best_margin = -std::numeric_limits<double>::infinity();
  for (int64_t f = 0; f < 20; ++f) {
    const double m = inside_margin(mesh, mesh.faces[0][static_cast<size_t>(f)], p);
    if (m > best_margin) best_margin = m, best = f;
  }
  for (int64_t r = 1; r <= mesh.refinement(); ++r) {
    const int64_t first = 4 * best;
    best_margin = -std::numeric_limits<double>::infinity();
    for (int64_t f = first; f < first + 4; ++f) {
      const double m = inside_margin(mesh, mesh.faces[static_cast<size_t>(r)][static_cast<size_t>(f)], p);
      if (m > best_margin) best_margin = m, best = f;
    }
  }
  return best;
}

Vec3 lat_lon_to_xyz(double lat_deg, double lon_deg) {
  const double lat = lat_deg * kRadians, lon = lon_deg * kRadians;
  return {std::cos(lat) * std::cos(lon), std::cos(lat) * std::sin(lon), std::sin(lat)};
}

std::vector<double> global_latitudes(int64_t n) {
  std::vector<double> lat(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) lat[i] = n == 1 ? 0.0 : 90.0 - 180.0 * static_cast<double>(i) / static_cast<double>(n - 1);
  return lat;
}

std::vector<double> global_longitudes(int64_t n) {
  std::vector<double> lon(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) lon[j] = 360.0 * static_cast<double>(j) / static_cast<double>(n);
  return lon;
}

std::pair<std::vector<double>, std::vector<double>> graphcast_grid(const ModelShape& shape) {
  if (shape.point_set) {
    // One latitude and longitude per cell (cell_coordinates checks the counts).
    const CellCoordinates cells = cell_coordinates(shape);
    for (double lat : cells.latitudes)
      if (!(lat >= -90 && lat <= 90)) throw Error("graphcast: cell latitude " + std::to_string(lat) + " is outside [-90, 90]");
    for (double lon : cells.longitudes)
      if (!std::isfinite(lon)) throw Error("graphcast: a cell longitude is not finite");
    return {cells.latitudes, cells.longitudes};
  }
  if (shape.latitudes.empty() && shape.longitudes.empty())
    return {global_latitudes(shape.lat), global_longitudes(shape.lon)};
  TORCH_CHECK(static_cast<int64_t>(shape.latitudes.size()) == shape.lat &&
                  static_cast<int64_t>(shape.longitudes.size()) == shape.lon,
              "graphcast: the grid is ", shape.lat, " x ", shape.lon, " but its coordinates are ", shape.latitudes.size(),
              " x ", shape.longitudes.size());
  for (double lat : shape.latitudes)
    if (!(lat >= -90 && lat <= 90))
      throw Error("graphcast: grid latitude " + std::to_string(lat) + " is outside [-90, 90]");
  for (double lon : shape.longitudes)
    if (!std::isfinite(lon)) throw Error("graphcast: a grid longitude is not finite");
  return {shape.latitudes, shape.longitudes};
}

// ---- the graph ----

GraphCastGraph build_graphcast_graph(const std::vector<double>& latitudes, const std::vector<double>& longitudes,
                                     int64_t refinement, double radius_fraction) {
  TORCH_CHECK(!latitudes.empty() && !longitudes.empty(), "build_graphcast_graph: empty grid");
  // A rectangle is its cells, row-major: the same nodes in the same order as the tensors flatten.
  std::vector<double> cell_lat, cell_lon;
  cell_lat.reserve(latitudes.size() * longitudes.size());
  cell_lon.reserve(latitudes.size() * longitudes.size());
  for (double lat : latitudes)
    for (double lon : longitudes) cell_lat.push_back(lat), cell_lon.push_back(lon);
  return build_graphcast_cell_graph(cell_lat, cell_lon, refinement, radius_fraction);
}

GraphCastGraph build_graphcast_cell_graph(const std::vector<double>& latitudes, const std::vector<double>& longitudes,
                                          int64_t refinement, double radius_fraction) {
  TORCH_CHECK(!latitudes.empty() && latitudes.size() == longitudes.size(),
              "build_graphcast_cell_graph: one latitude and longitude per cell, got ", latitudes.size(), " and ",
              longitudes.size());
  TORCH_CHECK(radius_fraction > 0, "build_graphcast_graph: radius_fraction must be positive");
  const IcosahedralMesh mesh = icosahedral_mesh(refinement);
  const int64_t ng = static_cast<int64_t>(latitudes.size());
  const auto nm_full = static_cast<int64_t>(mesh.vertices.size());

  GraphCastGraph g;
  g.grid_nodes = ng;
  g.grid_features = torch::empty({ng, 3}, torch::kFloat);
  std::vector<Vec3> grid(static_cast<size_t>(ng));
  {
    float* gf = g.grid_features.data_ptr<float>();
    for (int64_t n = 0; n < ng; ++n) {
      const double lat = latitudes[static_cast<size_t>(n)], lon = longitudes[static_cast<size_t>(n)];
      grid[static_cast<size_t>(n)] = lat_lon_to_xyz(lat, lon);
      node_features(std::sin(lat * kRadians), lon * kRadians, gf + 3 * n);
    }
  }

  // Grid -> mesh: every mesh node within the radius. The spatial index buckets the mesh nodes in
  // cubes of side `radius`, so a query looks at the 27 cubes around the point only.
  const double radius = radius_fraction * longest_finest_edge(mesh), radius2 = radius * radius;
  g.g2m_radius = radius;
  const int64_t span = static_cast<int64_t>(std::ceil(2.0 / radius)) + 3;
  auto cell = [&](double x) { return static_cast<int64_t>(std::floor((x + 1.0) / radius)) + 1; };
  auto cell_key = [&](int64_t i, int64_t j, int64_t k) { return (i * span + j) * span + k; };
  std::vector<std::pair<int64_t, int64_t>> keyed(static_cast<size_t>(nm_full));  // (cube, node)
  for (int64_t v = 0; v < nm_full; ++v) {
    const Vec3& p = mesh.vertices[static_cast<size_t>(v)];
    keyed[static_cast<size_t>(v)] = {cell_key(cell(p[0]), cell(p[1]), cell(p[2])), v};
  }
  std::sort(keyed.begin(), keyed.end());
  std::unordered_map<int64_t, std::pair<int64_t, int64_t>> cubes;  // cube -> [begin, end) in keyed
  for (int64_t b = 0; b < nm_full;) {
    int64_t e = b;
    while (e < nm_full && keyed[static_cast<size_t>(e)].first == keyed[static_cast<size_t>(b)].first) ++e;
    cubes.emplace(keyed[static_cast<size_t>(b)].first, std::make_pair(b, e));
    b = e;
  }
  auto for_each_near = [&](const Vec3& p, auto&& visit) {
    const int64_t ci = cell(p[0]), cj = cell(p[1]), ck = cell(p[2]);
    for (int64_t di = -1; di <= 1; ++di)
      for (int64_t dj = -1; dj <= 1; ++dj)
        for (int64_t dk = -1; dk <= 1; ++dk) {
          auto it = cubes.find(cell_key(ci + di, cj + dj, ck + dk));
          if (it == cubes.end()) continue;
          for (int64_t s = it->second.first; s < it->second.second; ++s) {
            const int64_t v = keyed[static_cast<size_t>(s)].second;
            const Vec3 d = p - mesh.vertices[static_cast<size_t>(v)];
            if (dot(d, d) <= radius2) visit(v);
          }
        }
  };
  // Two passes (count, then fill at the prefix sums) keep the edge order independent of threads.
  std::vector<int64_t> offsets(static_cast<size_t>(ng) + 1, 0);
  at::parallel_for(0, ng, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      int64_t count = 0;
      for_each_near(grid[static_cast<size_t>(n)], [&](int64_t) { ++count; });
      offsets[static_cast<size_t>(n) + 1] = count;
    }
  });
  for (int64_t n = 0; n < ng; ++n) offsets[static_cast<size_t>(n) + 1] += offsets[static_cast<size_t>(n)];
  std::vector<int64_t> g2m_s(static_cast<size_t>(offsets.back())), g2m_r(static_cast<size_t>(offsets.back()));
  at::parallel_for(0, ng, 2048, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> near;
    for (int64_t n = begin; n < end; ++n) {
      auto k = static_cast<size_t>(offsets[static_cast<size_t>(n)]);
      near.clear();
      for_each_near(grid[static_cast<size_t>(n)], [&](int64_t v) { near.push_back(v); });
      std::sort(near.begin(), near.end());  // receivers in id order, whatever the cube order
      for (int64_t v : near) g2m_s[k] = n, g2m_r[k++] = v;
    }
  });

  // Mesh -> grid: the three corners of the finest face holding each grid point.
  const std::vector<Face>& finest = mesh.faces.back();
  std::vector<int64_t> m2g_s(static_cast<size_t>(3 * ng)), m2g_r(static_cast<size_t>(3 * ng));
  at::parallel_for(0, ng, 2048, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const Face& f = finest[static_cast<size_t>(walk_to_face(mesh, grid[static_cast<size_t>(n)]))];
      for (int i = 0; i < 3; ++i) m2g_s[static_cast<size_t>(3 * n + i)] = f[i], m2g_r[static_cast<size_t>(3 * n + i)] = n;
    }
  });

  // Keep the mesh nodes the grid talks to: those a grid point sends to or reads from. A regional
  // grid keeps only the mesh over its region (the storm grid's 33 x 36 points keep a few hundred of
  // M5's 10,242 nodes); mesh edges are kept where both ends are.
  std::vector<int64_t> new_id(static_cast<size_t>(nm_full), -1);
  for (int64_t v : g2m_r) new_id[static_cast<size_t>(v)] = 0;
  for (int64_t v : m2g_s) new_id[static_cast<size_t>(v)] = 0;
  std::vector<int64_t> kept;
  for (int64_t v = 0; v < nm_full; ++v)
    if (new_id[static_cast<size_t>(v)] == 0) {
      new_id[static_cast<size_t>(v)] = static_cast<int64_t>(kept.size());
      kept.push_back(v);
    }
  g.mesh_nodes = static_cast<int64_t>(kept.size());
  std::vector<Vec3> mesh_pos(kept.size());
  g.mesh_features = torch::empty({g.mesh_nodes, 3}, torch::kFloat);
  for (size_t k = 0; k < kept.size(); ++k) {
    const Vec3& p = mesh.vertices[static_cast<size_t>(kept[k])];
    mesh_pos[k] = p;
    node_features(p[2], std::atan2(p[1], p[0]), g.mesh_features.data_ptr<float>() + 3 * k);
  }
  for (int64_t& v : g2m_r) v = new_id[static_cast<size_t>(v)];
  for (int64_t& v : m2g_s) v = new_id[static_cast<size_t>(v)];
  std::vector<int64_t> all_s, all_r, mesh_s, mesh_r, kept_edges;
  multimesh_edges(mesh, all_s, all_r);
  for (size_t k = 0; k < all_s.size(); ++k) {
    const int64_t s = new_id[static_cast<size_t>(all_s[k])], r = new_id[static_cast<size_t>(all_r[k])];
    if (s >= 0 && r >= 0) mesh_s.push_back(s), mesh_r.push_back(r), kept_edges.push_back(static_cast<int64_t>(k));
  }

  g.kept_mesh_nodes = to_tensor(kept);
  g.g2m_senders = to_tensor(g2m_s);
  g.g2m_receivers = to_tensor(g2m_r);
  g.g2m_features = edge_features(grid, mesh_pos, g2m_s, g2m_r);
  g.mesh_senders = to_tensor(mesh_s);
  g.mesh_receivers = to_tensor(mesh_r);
  // Over the whole multi-mesh, then cut: a regional mesh keeps the features (and their scale, the
  // longest M0 edge) of the global model it may start from.
  g.mesh_edge_features =
      edge_features(mesh.vertices, mesh.vertices, all_s, all_r).index_select(0, to_tensor(kept_edges)).contiguous();
  g.m2g_senders = to_tensor(m2g_s);
  g.m2g_receivers = to_tensor(m2g_r);
  g.m2g_features = edge_features(mesh_pos, grid, m2g_s, m2g_r);
  return g;
}

// ---- blocks ----

namespace {
GraphMLP graph_mlp(std::vector<int64_t> in, int64_t latent, int64_t out, int64_t layers, bool layer_norm = true) {
  return GraphMLP(GraphMLPOptions(std::move(in), latent, out).layers(layers).layer_norm(layer_norm));
}

// The edges' updates summed into their receivers, `block` edges at a time (all at once when block
// is 0 or covers them). update(nodes, begin, count) returns the sum over edges [begin, begin +
// count) of one block; `nodes` are the node-level tensors it reads (its only saved inputs when the
// block is checkpointed: the edge-sized tensors it builds from them are rebuilt in backward, one
// block at a time). `params`: what the update reads that needs gradients.
using EdgeBlockFn = std::function<torch::Tensor(const std::vector<torch::Tensor>&, int64_t, int64_t)>;
torch::Tensor sum_edge_blocks(int64_t edges, int64_t block, bool checkpointed, const std::vector<torch::Tensor>& nodes,
                              const std::vector<torch::Tensor>& params, const EdgeBlockFn& update) {
  if (block <= 0 || block >= edges) return update(nodes, 0, edges);
  torch::Tensor sum;
  for (int64_t begin = 0; begin < edges; begin += block) {
    const int64_t count = std::min(block, edges - begin);
    torch::Tensor part;
    if (checkpointed && torch::GradMode::is_enabled()) {
      part = ops::checkpoint([update, begin, count](const std::vector<torch::Tensor>& in) {
        return std::vector<torch::Tensor>{update(in, begin, count)};
      }, nodes, params)[0];
    } else {
      part = update(nodes, begin, count);
    }
    // The running sum saves nothing for backward: each block's part is freed once added.
    sum = sum.defined() ? sum + part : part;
  }
  return sum;
}

std::vector<torch::Tensor> parameters_of(std::initializer_list<const torch::nn::Module*> modules) {
  std::vector<torch::Tensor> out;
  for (const torch::nn::Module* m : modules)
    for (const torch::Tensor& p : m->parameters()) out.push_back(p);
  return out;
}
}  // namespace

Grid2MeshImpl::Grid2MeshImpl(int64_t in_channels, int64_t latent, int64_t mlp_layers, int64_t edge_block,
                             bool grid_position_features)
    : edge_block(edge_block), grid_position_features(grid_position_features) {
  const int64_t L = latent, m = mlp_layers;
  grid_embed = register_module(
      "grid_embed", graph_mlp(grid_position_features ? std::vector<int64_t>{in_channels, 3} : std::vector<int64_t>{in_channels},
                              L, L, m));
  mesh_embed = register_module("mesh_embed", graph_mlp({3}, L, L, m));
  g2m_edge_embed = register_module("g2m_edge_embed", graph_mlp({4}, L, L, m));
  mesh_edge_embed = register_module("mesh_edge_embed", graph_mlp({4}, L, L, m));
  edge_mlp = register_module("edge_mlp", graph_mlp({L, L, L}, L, L, m));
  mesh_node_mlp = register_module("mesh_node_mlp", graph_mlp({L, L}, L, L, m));
  grid_node_mlp = register_module("grid_node_mlp", graph_mlp({L}, L, L, m));
}

std::vector<torch::Tensor> Grid2MeshImpl::forward(const torch::Tensor& grid, const GraphCastGraph& g,
                                                  bool checkpoint_edge_blocks,
                                                  const std::function<torch::Tensor(const torch::Tensor&)>& grid_halo) {
  // [B, Ng, L]; the positional term is [Ng, L] and broadcasts over the batch.
  torch::Tensor h_grid = grid_position_features
                            ? grid_embed->finish(grid_embed->project(0, grid) + grid_embed->project(1, g.grid_features))
                            : grid_embed->forward({grid});
  // Batch-independent embeddings: [Nm, L], [Em, L] (the grid2mesh edges' [Eg, L] is made per block).
  torch::Tensor h_mesh = mesh_embed->forward({g.mesh_features});
  torch::Tensor e_mesh = mesh_edge_embed->forward({g.mesh_edge_features});

  // Edge update. The edge's and the receiving mesh node's shares of the first layer are the same
  // for every sample: summed once per edge, then the sending grid node's share added per sample.
  // The encoder's edges are not used again: only their updates, summed into the mesh nodes (in a
  // function: no edge-sized temporary outlives the sum).
  const torch::Tensor senders = g.g2m_senders, receivers = g.g2m_receivers, features = g.g2m_features;
  const int64_t mesh_nodes = g.mesh_nodes;
  Grid2MeshImpl* self = this;  // the module outlives the step's backward (the model owns it)
  const EdgeBlockFn update_block = [self, senders, receivers, features, mesh_nodes](
                                       const std::vector<torch::Tensor>& nodes, int64_t begin, int64_t count) {
    const torch::Tensor r = receivers.narrow(0, begin, count);
    const torch::Tensor e = self->g2m_edge_embed->forward({features.narrow(0, begin, count)});
    torch::Tensor shared = self->edge_mlp->project(0, e) + nodes[1].index_select(0, r);
    torch::Tensor update = self->edge_mlp->finish(nodes[0].index_select(1, senders.narrow(0, begin, count)) + shared);
    return torch::zeros({update.size(0), mesh_nodes, update.size(2)}, update.options()).index_add_(1, r, update);
  };
  const torch::Tensor agg = sum_edge_blocks(
      senders.size(0), edge_block, checkpoint_edge_blocks,
      {edge_mlp->project(1, grid_halo ? grid_halo(h_grid) : h_grid), edge_mlp->project(2, h_mesh)},  // [B, Ng, L]; [Nm, L]
      parameters_of({g2m_edge_embed.get(), edge_mlp.get()}), update_block);
  torch::Tensor mesh = h_mesh + mesh_node_mlp->finish(mesh_node_mlp->project(0, h_mesh) + mesh_node_mlp->project(1, agg));
  torch::Tensor grid_out = h_grid + grid_node_mlp->forward({h_grid});
  return {grid_out, mesh, e_mesh};
}

Mesh2GridImpl::Mesh2GridImpl(int64_t latent, int64_t out_channels, int64_t mlp_layers, int64_t edge_block)
    : edge_block(edge_block) {
  const int64_t L = latent, m = mlp_layers;
  m2g_edge_embed = register_module("m2g_edge_embed", graph_mlp({4}, L, L, m));
  edge_mlp = register_module("edge_mlp", graph_mlp({L, L, L}, L, L, m));
  grid_node_mlp = register_module("grid_node_mlp", graph_mlp({L, L}, L, L, m));
  output_mlp = register_module("output_mlp", graph_mlp({L}, L, out_channels, m, /*layer_norm=*/false));
}

torch::Tensor Mesh2GridImpl::forward(const torch::Tensor& mesh, const torch::Tensor& grid, const GraphCastGraph& g,
                                     bool checkpoint_edge_blocks,
                                     const std::function<torch::Tensor(const torch::Tensor&)>& mesh_halo) {
  // In a function: no edge-sized temporary outlives the sum into the grid nodes.
  const torch::Tensor senders = g.m2g_senders, receivers = g.m2g_receivers, features = g.m2g_features;
  const int64_t grid_nodes = g.grid_nodes;
  Mesh2GridImpl* self = this;  // the module outlives the step's backward (the model owns it)
  const EdgeBlockFn update_block = [self, senders, receivers, features, grid_nodes](
                                       const std::vector<torch::Tensor>& nodes, int64_t begin, int64_t count) {
    const torch::Tensor r = receivers.narrow(0, begin, count);
    const torch::Tensor e = self->m2g_edge_embed->forward({features.narrow(0, begin, count)});  // batch-independent
    torch::Tensor update = self->edge_mlp->finish(
        ops::gather_edges(nodes[0], nodes[1], self->edge_mlp->project(0, e), senders.narrow(0, begin, count), r));
    return torch::zeros({update.size(0), grid_nodes, update.size(2)}, update.options()).index_add_(1, r, update);
  };
  const torch::Tensor agg = sum_edge_blocks(senders.size(0), edge_block, checkpoint_edge_blocks,
                                            {edge_mlp->project(1, mesh_halo ? mesh_halo(mesh) : mesh),
                                             edge_mlp->project(2, grid)},
                                            parameters_of({m2g_edge_embed.get(), edge_mlp.get()}), update_block);
  torch::Tensor h = grid + grid_node_mlp->finish(grid_node_mlp->project(0, grid) + grid_node_mlp->project(1, agg));
  return output_mlp->forward({h});
}

// ---- the model ----

GraphCastImpl::GraphCastImpl(const GraphCastOptions& options, const ModelShape& shape)
    : WeatherModelImpl(shape), latent_(options.latent) {
  const auto [latitudes, longitudes] = graphcast_grid(shape);
  graph_ = build_model_graph(options, latitudes, longitudes, shape.point_set);
  // Buffers, so that the graph moves with the model (once) and lands in checkpoints, where loading
  // it into a model built on another grid fails on the shapes.
  graph_.grid_features = register_buffer("grid_features", graph_.grid_features);
  graph_.mesh_features = register_buffer("mesh_features", graph_.mesh_features);
  graph_.g2m_senders = register_index_buffer("g2m_senders", graph_.g2m_senders);
  graph_.g2m_receivers = register_index_buffer("g2m_receivers", graph_.g2m_receivers);
  graph_.g2m_features = register_buffer("g2m_features", graph_.g2m_features);
  graph_.mesh_senders = register_index_buffer("mesh_senders", graph_.mesh_senders);
  graph_.mesh_receivers = register_index_buffer("mesh_receivers", graph_.mesh_receivers);
  graph_.mesh_edge_features = register_buffer("mesh_edge_features", graph_.mesh_edge_features);
  graph_.m2g_senders = register_index_buffer("m2g_senders", graph_.m2g_senders);
  graph_.m2g_receivers = register_index_buffer("m2g_receivers", graph_.m2g_receivers);
  graph_.m2g_features = register_buffer("m2g_features", graph_.m2g_features);

  // Conditional-norm noise (docs/ensembles.md): the last k input channels are noise fields, which
  // grid2mesh does not read; averaged onto the mesh nodes, they condition the processor's norms.
  const int64_t k = shape.conditional_noise;
  if (k < 0 || k >= shape.in_channels)
    throw ConfigError("graphcast: " + std::to_string(k) + " conditional noise channel(s) of " +
                      std::to_string(shape.in_channels) + " input channels leave no input");
  grid2mesh_ = register_block("grid2mesh", Grid2Mesh(shape.in_channels - k, options.latent, options.mlp_layers,
                                                     options.edge_block, options.grid_position_features));
  if (k > 0) noise_injector_ = register_block("noise_injector", NoiseInjector(k));
  for (int64_t i = 0; i < options.processor_layers; ++i) {
    processors_.push_back(register_block(
        "processor" + std::to_string(i),
        InteractionLayer(options.latent, options.mlp_layers, options.aggregate_residual, k)));
  }
  mesh2grid_ = register_block("mesh2grid",
                              Mesh2Grid(options.latent, shape.out_channels, options.mlp_layers, options.edge_block));
}

std::vector<ChannelAxis> GraphCastImpl::channel_axes() const {
  // Linear weights are [out, in]; the output MLP's last Linear is first.0 when it has one layer.
  const int64_t layers = mesh2grid_->output_mlp->options.layers();
  const std::string last =
      layers == 1 ? "mesh2grid.output_mlp.first.0" : "mesh2grid.output_mlp.layer" + std::to_string(layers - 1);
  ChannelAxis grid{"grid2mesh.grid_embed.first.0.weight", 1, true};
  grid.skip_begin = shape().in_channels - shape().conditional_noise;  // noise channels: not grid2mesh inputs
  grid.skip_count = shape().conditional_noise;
  return {grid, {last + ".weight", 0, false}, {last + ".bias", 0, false}};
}

GridFit GraphCastImpl::fit_checkpoint_to_grid(std::map<std::string, torch::Tensor>& weights,
                                              const GridPlacement& where, const ModelShape& from) const {
  (void)where, (void)from;  // the graph is built from this model's grid; the checkpoint's is compared
  static const char* const kGraphBuffers[] = {"grid_features",  "mesh_features",      "g2m_senders",
                                              "g2m_receivers",  "g2m_features",       "mesh_senders",
                                              "mesh_receivers", "mesh_edge_features", "m2g_senders",
                                              "m2g_receivers",  "m2g_features"};
  bool same = true;
  const auto buffers = named_buffers();
  for (const char* name : kGraphBuffers) {
    auto it = weights.find(name);
    const torch::Tensor& own = buffers[name];
    if (it == weights.end() || it->second.sizes() != own.sizes() ||
        !torch::equal(it->second.to(own.device(), own.scalar_type()), own))
      same = false;
  }
  GridFit fit;
  if (same) return fit;
  // Sizes of the checkpoint's graph next to ours.
  auto count = [&](const std::string& name) -> std::string {
    auto it = weights.find(name);
    return it == weights.end() ? "none" : std::to_string(it->second.size(0));
  };
  fit.grid_change = "graph built for this grid: " + std::to_string(graph_.grid_nodes) + " grid points (checkpoint " +
                    count("grid_features") + "), " + std::to_string(graph_.mesh_nodes) + " mesh nodes (checkpoint " +
                    count("mesh_features") + "), " + std::to_string(graph_.mesh_senders.size(0)) +
                    " mesh edges (checkpoint " + count("mesh_senders") + "), " +
                    std::to_string(graph_.g2m_senders.size(0)) + " grid2mesh edges (checkpoint " +
                    count("g2m_senders") + "), " + std::to_string(graph_.m2g_senders.size(0)) +
                    " mesh2grid edges (checkpoint " + count("m2g_senders") + ")";
  for (const char* name : kGraphBuffers) {
    weights[name] = buffers[name];
    fit.rebuilt.insert(name);
  }
  return fit;
}

std::vector<int> graphcast_mesh_owners(const GraphCastGraph& graph, const std::vector<int64_t>& bounds) {
  const NodePartition grid = NodePartition::from_bounds(bounds);
  TORCH_CHECK(bounds.back() == graph.grid_nodes, "graphcast: node shard bounds must end at the ", graph.grid_nodes,
              " grid cells, got ", bounds.back());
  const int64_t nm = graph.mesh_nodes;
  std::vector<int64_t> lowest(static_cast<size_t>(nm), graph.grid_nodes), highest(static_cast<size_t>(nm), -1);
  auto visit = [&](const torch::Tensor& grid_ids, const torch::Tensor& mesh_ids) {
    const torch::Tensor g = grid_ids.cpu().contiguous(), m = mesh_ids.cpu().contiguous();
    const int64_t* gp = g.data_ptr<int64_t>();
    const int64_t* mp = m.data_ptr<int64_t>();
    for (int64_t k = 0; k < g.numel(); ++k) {
      auto node = static_cast<size_t>(mp[k]);
      lowest[node] = std::min(lowest[node], gp[k]);
      highest[node] = std::max(highest[node], gp[k]);
    }
  };
  visit(graph.g2m_senders, graph.g2m_receivers);
  visit(graph.m2g_receivers, graph.m2g_senders);
  std::vector<int> owner(static_cast<size_t>(nm));
  for (int64_t m = 0; m < nm; ++m) {
    const auto i = static_cast<size_t>(m);
    owner[i] = highest[i] >= 0 ? grid.owner[static_cast<size_t>((lowest[i] + highest[i]) / 2)]
                               : static_cast<int>(m * grid.ranks / nm);
  }
  return owner;
}

GraphCastShard shard_graphcast_graph(const GraphCastGraph& graph, const std::vector<int64_t>& bounds, int rank) {
  const auto P = static_cast<int>(bounds.size()) - 1;
  TORCH_CHECK(P >= 1 && rank >= 0 && rank < P && bounds.front() == 0 && bounds.back() == graph.grid_nodes,
              "graphcast: node shard bounds must run from 0 to the ", graph.grid_nodes, " grid cells, one range per rank");
  GraphCastShard s;
  s.grid = NodePartition::from_bounds(bounds);
  s.mesh = NodePartition::from_owners(graphcast_mesh_owners(graph, bounds), P);
  s.g2m = shard_graph(graph.g2m_senders, graph.g2m_receivers, s.grid, s.mesh, rank);
  s.mesh_edges = shard_graph(graph.mesh_senders, graph.mesh_receivers, s.mesh, s.mesh, rank);
  s.m2g = shard_graph(graph.m2g_senders, graph.m2g_receivers, s.mesh, s.grid, rank);
  return s;
}

std::vector<int> GraphCastImpl::mesh_owners(const std::vector<int64_t>& bounds) const {
  return graphcast_mesh_owners(graph_, bounds);
}

void GraphCastImpl::set_node_shard(const NodeShard& shard) {
  const torch::Device device = graph_.g2m_senders.device();
  GraphCastShard parts = shard_graphcast_graph(graph_, shard.bounds, shard.rank);
  const auto P = parts.grid.ranks;
  mesh_nodes_ = std::move(parts.mesh);
  const int r = shard.rank;
  g2m_shard_ = std::move(parts.g2m);
  mesh_shard_ = std::move(parts.mesh_edges);
  m2g_shard_ = std::move(parts.m2g);
  for (ShardedGraph* g : {&g2m_shard_, &mesh_shard_, &m2g_shard_}) g->to(device);
  // This rank's graph, as the blocks read a whole one: its cells (a contiguous range), its mesh
  // nodes, its edges with senders indexing its own nodes followed by the halo.
  const int64_t n0 = shard.bounds[static_cast<size_t>(r)], n1 = shard.bounds[static_cast<size_t>(r) + 1];
  local_ = graph_;
  local_.grid_nodes = n1 - n0;
  local_.mesh_nodes = mesh_nodes_.owned_by(r);
  local_.grid_features = graph_.grid_features.narrow(0, n0, n1 - n0);
  const torch::Tensor mine = torch::tensor(mesh_nodes_.owned[static_cast<size_t>(r)], torch::kLong).to(device);
  local_.kept_mesh_nodes = graph_.kept_mesh_nodes.index_select(0, mine.cpu());
  local_.mesh_features = graph_.mesh_features.index_select(0, mine);
  local_.g2m_senders = g2m_shard_.senders, local_.g2m_receivers = g2m_shard_.receivers;
  local_.g2m_features = graph_.g2m_features.index_select(0, g2m_shard_.edges);
  local_.mesh_senders = mesh_shard_.senders, local_.mesh_receivers = mesh_shard_.receivers;
  local_.mesh_edge_features = graph_.mesh_edge_features.index_select(0, mesh_shard_.edges);
  local_.m2g_senders = m2g_shard_.senders, local_.m2g_receivers = m2g_shard_.receivers;
  local_.m2g_features = graph_.m2g_features.index_select(0, m2g_shard_.edges);
  shard_ = shard;
  sharded_ = P > 1;
}

torch::Tensor GraphCastImpl::forward(torch::Tensor x) {
  const int64_t cells = sharded_ ? local_.grid_nodes : graph_.grid_nodes;
  TORCH_CHECK(x.dim() == 4 && x.size(1) == shape().in_channels && x.size(2) * x.size(3) == cells &&
                  (sharded_ || (x.size(2) == shape().lat && x.size(3) == shape().lon)),
              "graphcast: expected input [batch, ", shape().in_channels, ", ", shape().lat, ", ", shape().lon, "]",
              sharded_ ? " (this rank's " + std::to_string(cells) + " cells of them)" : std::string(), ", got ",
              x.sizes());
  const int64_t lat = x.size(2), lon = x.size(3);
  torch::Tensor nodes = x.flatten(2).transpose(1, 2);  // [B, C, lat, lon] -> [B, Ng, C]
  // Conditional-norm noise: each mesh node's noise is the mean of its grid2mesh senders' (as AIFS
  // averages over its encoder edges; a mesh node without any gets zero), embedded by the noise MLP
  // outside every block; no gradient flows into the noise.
  torch::Tensor cond;
  if (const int64_t k = shape().conditional_noise; k > 0) {
    const torch::Tensor noise = nodes.narrow(2, nodes.size(2) - k, k).detach();
    nodes = nodes.narrow(2, 0, nodes.size(2) - k);
    const torch::Tensor& snd = graph_.g2m_senders;
    const torch::Tensor& rcv = graph_.g2m_receivers;
    const torch::Tensor sums = torch::zeros({noise.size(0), graph_.mesh_nodes, k}, noise.options())
                                   .index_add_(1, rcv, noise.index_select(1, snd));
    const torch::Tensor counts = torch::zeros({graph_.mesh_nodes}, noise.options())
                                     .index_add_(0, rcv, torch::ones({rcv.size(0)}, noise.options()))
                                     .clamp_min(1.0);
    cond = run_forward(noise_injector_, sums / counts.view({1, -1, 1}), /*checkpointed=*/false);  // [B, Nm, k]
  }

  // The lambdas hold the blocks by shared_ptr and the graph's tensors by value (see run_block).
  // Model parallelism: each halo is fetched inside its block, so a checkpointed block's replay
  // fetches it again (the same collectives on every rank of the group, in the same order).
  const GraphCastGraph graph = sharded_ ? local_ : graph_;
  using Halo = std::function<torch::Tensor(const torch::Tensor&)>;
  Halo grid_halo, mesh_halo, decoder_halo;
  if (sharded_) {
    const NodeShard shard = shard_;
    const ShardedGraph g2m = g2m_shard_, mesh = mesh_shard_, m2g = m2g_shard_;
    grid_halo = [shard, g2m](const torch::Tensor& h) { return g2m.with_halo(h, 1, shard); };
    mesh_halo = [shard, mesh](const torch::Tensor& h) { return mesh.with_halo(h, 1, shard); };
    decoder_halo = [shard, m2g](const torch::Tensor& h) { return m2g.with_halo(h, 1, shard); };
  }
  const bool blocks_checkpointed = checkpointing();  // edge blocks are checkpointed inside the block's replay
  std::shared_ptr<Grid2MeshImpl> encoder = grid2mesh_.ptr();
  const std::vector<torch::Tensor> encoded = run_block(
      *encoder,
      [encoder, graph, blocks_checkpointed, grid_halo](const std::vector<torch::Tensor>& in) {
        return encoder->forward(in[0], graph, blocks_checkpointed, grid_halo);
      },
      {nodes});
  const torch::Tensor grid = encoded[0];
  std::vector<torch::Tensor> state = {encoded[1], encoded[2]};  // mesh nodes, mesh edges

  const torch::Tensor senders = graph.mesh_senders, receivers = graph.mesh_receivers;
  for (const InteractionLayer& p : processors_) {
    std::shared_ptr<InteractionLayerImpl> layer = p.ptr();
    // The noise embedding is a third input of every layer (so a checkpointed layer replays with it).
    std::vector<torch::Tensor> inputs = state;
    if (cond.defined()) inputs.push_back(cond);
    state = run_block(
        *layer,
        [layer, senders, receivers, mesh_halo](const std::vector<torch::Tensor>& in) {
          const torch::Tensor cond = in.size() > 2 ? in[2] : torch::Tensor();
          return layer->forward(in[0], in[1], senders, receivers, mesh_halo ? mesh_halo(in[0]) : torch::Tensor(), cond);
        },
        inputs);
  }

  std::shared_ptr<Mesh2GridImpl> decoder = mesh2grid_.ptr();
  return run_block(*decoder,
                   [decoder, graph, lat, lon, blocks_checkpointed, decoder_halo](const std::vector<torch::Tensor>& in) {
                     torch::Tensor out =
                         decoder->forward(in[0], in[1], graph, blocks_checkpointed, decoder_halo);  // [B, Ng, C]
                     return std::vector<torch::Tensor>{
                         out.transpose(1, 2).reshape({out.size(0), out.size(2), lat, lon})};
                   },
                   {state[0], grid})[0];
}

ModelEntry graphcast_entry() {
  // MLPs with index_select/index_add on the edges: GEMMs, no convolutions.
  ModelEntry entry = make_model_entry<GraphCastOptions, GraphCastImpl>(
      graphcast_schema(), &graphcast_parameter_count, &graphcast_activation_memory,
      {/*gemms=*/true, /*convolutions=*/false}, &graphcast_buffer_bytes);
  entry.references = {graphcast_reference()};  // PhysicsNeMo's GraphCastNet
  entry.conditional_noise = true;
  return entry;
}

}  // namespace wxtrain::models
