#pragma once
// The graphs AIFS runs on, built as anemoi-graphs 0.9.8 builds them (anemoi/graphs/nodes/builders/
// from_reduced_gaussian.py, edges/builders/{cutoff,knn}.py, edges/attributes.py), so that a model
// imported from anemoi-models sees the same edges and edge features:
//   hidden   the octahedral reduced Gaussian grid O_N (ECMWF's "oN"): the N Gaussian latitudes of
//            each hemisphere (roots of the Legendre polynomial P_2N), 4i + 16 longitudes on the
//            i-th row from the pole, from 0 degrees eastwards; 4N(N + 9) nodes (O48: 10,944).
//   encoder  data -> hidden cut-off edges: every data cell within cutoff_factor x the hidden grid's
//            reference distance (the largest distance from a hidden node to its nearest neighbour,
//            a chord of the unit sphere) of a hidden node, at most max_neighbours per hidden node
//            (the nearest), as CutOffEdges.
//   decoder  hidden -> data: each data cell receives from its k nearest hidden nodes (KNNEdges).
// Edge features (anemoi's edge_length and edge_dirs): the great-circle length (haversine, radians)
// divided by the longest edge of the set ("unit-max"), and the direction of the sender seen from
// the receiver rotated to the north pole (x, y of the unit vector on the tangent plane, Rodrigues'
// rotation as anemoi's compute_directions) divided by the standard deviation of all direction
// components of the set ("unit-std", torch.std: n - 1).
// Coordinates are doubles here; anemoi computes in float32 from float32 radians, so features agree
// to float32 round-off and an edge whose length is within round-off of the cut-off may differ.
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace wxtrain::models {

struct LatLonPoints {
  std::vector<double> latitudes, longitudes;  // degrees, one per node
  int64_t size() const { return static_cast<int64_t>(latitudes.size()); }
};

// The N Gaussian latitudes of the northern hemisphere, north to south, degrees.
std::vector<double> gaussian_latitudes(int64_t n);
// O_N, north to south, each row west to east from longitude 0.
LatLonPoints octahedral_grid(int64_t n);
// "o48" / "O48" -> 48; a ConfigError naming the value otherwise (key: the key that gave it).
int64_t octahedral_number(const std::string& grid, const std::string& key);

// A bipartite edge set: senders index the source nodes, receivers the target nodes; features
// [E, 3] = edge_length, edge_dirs x, edge_dirs y (anemoi's concatenation order). Sorted by
// receiver, then sender (what anemoi-models' graph provider feeds its mappers: sorted by receiver).
struct BipartiteEdges {
  torch::Tensor senders, receivers;  // [E] int64
  torch::Tensor features;            // [E, 3] float32
  int64_t edges() const { return senders.defined() ? senders.size(0) : 0; }
};

// anemoi-graphs' reference distance of a set of nodes (chord on the unit sphere).
double grid_reference_distance(const LatLonPoints& nodes);
BipartiteEdges cutoff_edges(const LatLonPoints& sources, const LatLonPoints& targets, double cutoff_factor,
                            int64_t max_neighbours);
BipartiteEdges knn_edges(const LatLonPoints& sources, const LatLonPoints& targets, int64_t k);

}  // namespace wxtrain::models
