#include "models/gnn/gnn.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include <string>

#include "core/error.h"
#include "ops/edge_gather.h"
#include "ops/linear.h"

namespace wxtrain::models {
namespace {

// SiLU between the MLP's Linears, on the Linear's output as it is: bf16 under autocast and in pure
// bf16. CUDA's autocast leaves silu alone (it is on none of its lists, ATen/autocast_mode.h), so the
// GPU saves the bf16 input and hands the bf16 output to the next Linear, which saves it as it is;
// LibTorch 2.11's CPU bf16 SiLU computes in fp32 and rounds once, and ran the gnn's and GraphCast's
// bf16-mixed steps 1.02-1.04x faster than the fused kernel 1.13 needed (docs/benchmarks.md, "Fusions
// on LibTorch 2.11"). The GPU-standing CPU trace once kept 1.13's fp32 SiLU, an fp32 copy and its
// bf16 cast where the GPU keeps two bf16 tensors: on an H100 the storm gnn's bf16-mixed total at
// batch 64 came out 9.7% above the measurement (docs/estimator.md, "What the GPU keeps").
torch::Tensor silu_between_linears(const torch::Tensor& x) { return torch::silu(x); }

}  // namespace

// ---- GraphMLP ----

GraphMLPImpl::GraphMLPImpl(const GraphMLPOptions& options_) : options(options_) {
  TORCH_CHECK(!options.in_features().empty(), "GraphMLP: needs at least one input");
  TORCH_CHECK(options.layers() >= 1, "GraphMLP: layers must be >= 1, got ", options.layers());
  const int64_t first_out = options.layers() == 1 ? options.out() : options.hidden();
  first = register_module("first", torch::nn::ModuleList());
  for (size_t k = 0; k < options.in_features().size(); ++k) {
    first_linears.emplace_back(torch::nn::LinearOptions(options.in_features()[k], first_out).bias(k == 0));
    first->push_back(first_linears.back());
  }
  for (int64_t i = 1; i < options.layers(); ++i) {
    const int64_t out = i + 1 == options.layers() ? options.out() : options.hidden();
    layers.push_back(register_module("layer" + std::to_string(i), torch::nn::Linear(options.hidden(), out)));
  }
  if (options.layer_norm() && options.condition() > 0)
    cond_norm = register_module("norm", ConditionalLayerNorm(options.out(), options.condition()));
  else if (options.layer_norm())
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options.out()})));
}

torch::Tensor GraphMLPImpl::project(size_t k, const torch::Tensor& x) {
  TORCH_CHECK(k < first_linears.size(), "GraphMLP: input ", k, " of ", first_linears.size());
  return ops::apply_linear(first_linears[k], x);
}

torch::Tensor GraphMLPImpl::finish(torch::Tensor x, const torch::Tensor& cond) {
  TORCH_CHECK(cond.defined() == static_cast<bool>(cond_norm),
              "GraphMLP: a conditional norm needs the noise embedding, and only it reads one");
  for (auto& layer : layers) x = ops::apply_linear(layer, silu_between_linears(x));
  if (cond_norm) {
    const auto dtype = cond_norm->scale->weight.scalar_type();  // fp32 statistics, as below
    return cond_norm->forward(x.scalar_type() == dtype ? x : x.to(dtype), cond);
  }
  if (!norm) return x;
  // LayerNorm in LibTorch 1.13 needs input and affine parameters of one dtype, and CPU autocast
  // hands it the bf16 Linear output: normalise in the parameters' dtype (fp32 statistics).
  const auto dtype = norm->weight.scalar_type();
  return norm->forward(x.scalar_type() == dtype ? x : x.to(dtype));
}

torch::Tensor GraphMLPImpl::forward(const std::vector<torch::Tensor>& inputs, const torch::Tensor& cond) {
  TORCH_CHECK(inputs.size() == first_linears.size(), "GraphMLP: expected ", first_linears.size(), " inputs, got ",
              inputs.size());
  torch::Tensor sum = project(0, inputs[0]);
  for (size_t k = 1; k < inputs.size(); ++k) sum = sum + project(k, inputs[k]);
  return finish(sum, cond);
}

// ---- the grid graph ----

GridGraph build_grid_graph(int64_t lat, int64_t lon, int64_t radius) {
  TORCH_CHECK(lat > 0 && lon > 0 && radius > 0, "build_grid_graph: bad grid ", lat, " x ", lon, " radius ", radius);
  const auto i64 = torch::TensorOptions().dtype(torch::kLong);
  // Receiver coordinates [N, 1]; offsets [1, K] (the (2r+1)^2 - 1 cells around, without the centre).
  const torch::Tensor node = torch::arange(lat * lon, i64);
  const torch::Tensor rlat = node.div(lon, "floor").unsqueeze(1), rlon = node.remainder(lon).unsqueeze(1);
  const torch::Tensor span = torch::arange(-radius, radius + 1, i64);
  auto mesh = torch::meshgrid({span, span}, "ij");
  torch::Tensor dlat = mesh[0].flatten(), dlon = mesh[1].flatten();
  const torch::Tensor not_centre = (dlat != 0).logical_or(dlon != 0);
  dlat = dlat.masked_select(not_centre).unsqueeze(0);
  dlon = dlon.masked_select(not_centre).unsqueeze(0);

  const torch::Tensor slat = rlat + dlat, slon = rlon + dlon;  // [N, K] sender coordinates
  const torch::Tensor valid = (slat >= 0) & (slat < lat) & (slon >= 0) & (slon < lon);
  // Row-major over [N, K] keeps the edges sorted by receiver.
  GridGraph g;
  g.senders = (slat * lon + slon).masked_select(valid);
  g.receivers = node.unsqueeze(1).expand_as(valid).masked_select(valid);
  const torch::Tensor fdlat = dlat.expand_as(valid).masked_select(valid).to(torch::kFloat);
  const torch::Tensor fdlon = dlon.expand_as(valid).masked_select(valid).to(torch::kFloat);
  g.edge_features = torch::stack({fdlat, fdlon, torch::sqrt(fdlat * fdlat + fdlon * fdlon)}, 1) / static_cast<double>(radius);
  auto scaled = [](const torch::Tensor& idx, int64_t n) {
    return n > 1 ? idx.to(torch::kFloat) * (2.0 / static_cast<double>(n - 1)) - 1.0 : torch::zeros_like(idx, torch::kFloat);
  };
  g.node_positions = torch::stack({scaled(rlat.squeeze(1), lat), scaled(rlon.squeeze(1), lon)}, 1);
  return g;
}

GridGraph build_cell_graph(const std::vector<double>& latitudes, const std::vector<double>& longitudes, int64_t radius) {
  const auto n = static_cast<int64_t>(latitudes.size());
  TORCH_CHECK(n > 1 && longitudes.size() == latitudes.size() && radius > 0, "build_cell_graph: ", latitudes.size(),
              " latitudes, ", longitudes.size(), " longitudes, radius ", radius);
  const int64_t k = std::min<int64_t>(n - 1, (2 * radius + 1) * (2 * radius + 1) - 1);
  constexpr double kDegree = M_PI / 180.0;
  std::vector<std::array<double, 3>> xyz(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) {
    const double phi = latitudes[static_cast<size_t>(c)] * kDegree, lambda = longitudes[static_cast<size_t>(c)] * kDegree;
    xyz[static_cast<size_t>(c)] = {std::cos(phi) * std::cos(lambda), std::cos(phi) * std::sin(lambda), std::sin(phi)};
  }
  // Cells sorted by latitude: a search walks outwards from its own latitude and stops where the
  // latitude difference alone exceeds the k-th nearest found (a chord is at least that arc's chord).
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return latitudes[static_cast<size_t>(a)] < latitudes[static_cast<size_t>(b)];
  });
  std::vector<int64_t> rank(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) rank[static_cast<size_t>(order[static_cast<size_t>(r)])] = r;
  std::vector<int64_t> senders(static_cast<size_t>(n * k));
  std::vector<double> lengths(static_cast<size_t>(n * k));
  at::parallel_for(0, n, 256, [&](int64_t begin, int64_t end) {
    std::vector<std::pair<double, int64_t>> best;  // (chord^2, cell), a max-heap of the k nearest
    for (int64_t c = begin; c < end; ++c) {
      best.clear();
      const auto& p = xyz[static_cast<size_t>(c)];
      auto consider = [&](int64_t other) {
        const auto& q = xyz[static_cast<size_t>(other)];
        const double d2 = (p[0] - q[0]) * (p[0] - q[0]) + (p[1] - q[1]) * (p[1] - q[1]) + (p[2] - q[2]) * (p[2] - q[2]);
        if (static_cast<int64_t>(best.size()) < k) {
          best.emplace_back(d2, other);
          std::push_heap(best.begin(), best.end());
        } else if (std::make_pair(d2, other) < best.front()) {
          std::pop_heap(best.begin(), best.end());
          best.back() = {d2, other};
          std::push_heap(best.begin(), best.end());
        }
      };
      auto bound = [&](int64_t other) {  // the chord^2 of the latitude difference alone
        const double dphi = (latitudes[static_cast<size_t>(other)] - latitudes[static_cast<size_t>(c)]) * kDegree;
        return 4.0 * std::sin(dphi / 2) * std::sin(dphi / 2);
      };
      const int64_t r = rank[static_cast<size_t>(c)];
      bool up = true, down = true;
      for (int64_t step = 1; up || down; ++step) {
        for (int64_t dir : {1, -1}) {
          bool& open = dir > 0 ? up : down;
          if (!open) continue;
          const int64_t s = r + dir * step;
          if (s < 0 || s >= n) {
            open = false;
            continue;
          }
          const int64_t other = order[static_cast<size_t>(s)];
          if (static_cast<int64_t>(best.size()) == k && bound(other) > best.front().first) {
            open = false;
            continue;
          }
          consider(other);
        }
      }
      std::sort(best.begin(), best.end());  // nearest first: the edge order is fixed
      for (int64_t e = 0; e < k; ++e) {
        senders[static_cast<size_t>(c * k + e)] = best[static_cast<size_t>(e)].second;
        lengths[static_cast<size_t>(c * k + e)] = 2.0 * std::asin(std::min(1.0, std::sqrt(best[static_cast<size_t>(e)].first) / 2));
      }
    }
  });
  // The grid's spacing: the mean distance to the nearest cell (radians).
  double spacing = 0;
  for (int64_t c = 0; c < n; ++c) spacing += lengths[static_cast<size_t>(c * k)];
  spacing = std::max(spacing / static_cast<double>(n), 1e-9);
  GridGraph g;
  g.senders = torch::tensor(senders, torch::kLong);
  g.receivers = torch::arange(n, torch::kLong).repeat_interleave(k);
  std::vector<float> features(static_cast<size_t>(n * k * 3)), positions(static_cast<size_t>(n * 2));
  for (int64_t c = 0; c < n; ++c) {
    const double phi = latitudes[static_cast<size_t>(c)], lambda = longitudes[static_cast<size_t>(c)];
    positions[static_cast<size_t>(2 * c)] = static_cast<float>(phi / 90.0);
    positions[static_cast<size_t>(2 * c + 1)] = static_cast<float>(std::remainder(lambda, 360.0) / 180.0);
    for (int64_t e = 0; e < k; ++e) {
      const int64_t s = senders[static_cast<size_t>(c * k + e)];
      const double dlat = (latitudes[static_cast<size_t>(s)] - phi) * kDegree;
      const double dlon = std::remainder(longitudes[static_cast<size_t>(s)] - lambda, 360.0) * kDegree * std::cos(phi * kDegree);
      const double scale = spacing * static_cast<double>(radius);
      float* f = features.data() + 3 * (c * k + e);
      f[0] = static_cast<float>(dlat / scale);
      f[1] = static_cast<float>(dlon / scale);
      f[2] = static_cast<float>(lengths[static_cast<size_t>(c * k + e)] / scale);
    }
  }
  g.edge_features = torch::tensor(features, torch::kFloat).view({n * k, 3});
  g.node_positions = torch::tensor(positions, torch::kFloat).view({n, 2});
  return g;
}

// ---- blocks ----

GraphEncoderImpl::GraphEncoderImpl(int64_t node_in, int64_t latent, int64_t mlp_layers) {
  node_mlp = register_module("node_mlp", GraphMLP(GraphMLPOptions({node_in, 2}, latent, latent).layers(mlp_layers)));
  edge_mlp = register_module("edge_mlp", GraphMLP(GraphMLPOptions({3}, latent, latent).layers(mlp_layers)));
}

std::vector<torch::Tensor> GraphEncoderImpl::forward(const torch::Tensor& nodes, const torch::Tensor& node_positions,
                                                     const torch::Tensor& edge_features) {
  // The position term is [N, L] and broadcasts over the batch.
  torch::Tensor h = node_mlp->finish(node_mlp->project(0, nodes) + node_mlp->project(1, node_positions));
  torch::Tensor e = edge_mlp->forward({edge_features});
  return {h, e};
}

InteractionLayerImpl::InteractionLayerImpl(int64_t latent, int64_t mlp_layers, bool aggregate_residual_,
                                           int64_t condition)
    : aggregate_residual(aggregate_residual_) {
  edge_mlp = register_module(
      "edge_mlp",
      GraphMLP(GraphMLPOptions({latent, latent, latent}, latent, latent).layers(mlp_layers).condition(condition)));
  node_mlp = register_module(
      "node_mlp", GraphMLP(GraphMLPOptions({latent, latent}, latent, latent).layers(mlp_layers).condition(condition)));
}

std::vector<torch::Tensor> InteractionLayerImpl::forward(const torch::Tensor& h, const torch::Tensor& e,
                                                         const torch::Tensor& senders,
                                                         const torch::Tensor& receivers,
                                                         const torch::Tensor& h_senders, const torch::Tensor& cond) {
  // Under model parallelism senders index the owned nodes followed by the halo; the receiver
  // projection is taken of the same tensor (receivers index its first N rows) so the fused kernel,
  // which wants equal shapes, still applies.
  const torch::Tensor& hs = h_senders.defined() ? h_senders : h;
  // Edge update. The sender/receiver parts of the first layer are applied per node, then gathered:
  // E is ~(2r+1)^2 times N. e is [E, L] in the first layer: it broadcasts over the batch.
  torch::Tensor pre = ops::gather_edges(edge_mlp->project(1, hs), edge_mlp->project(2, hs), edge_mlp->project(0, e),
                                        senders, receivers);
  // Sum the updated edges (or only their updates) into their receivers. Scoped so that no
  // edge-sized temporary outlives the aggregation into the node MLP below.
  torch::Tensor e_new, agg;
  // Conditional norms: an edge reads its receiver's noise embedding (an owned node under model
  // parallelism, so no halo of embeddings is needed).
  const torch::Tensor edge_cond = cond.defined() ? cond.index_select(1, receivers) : torch::Tensor();
  auto aggregate = [&](const torch::Tensor& sent) {
    return torch::zeros({h.size(0), h.size(1), sent.size(-1)}, sent.options()).index_add_(1, receivers, sent);
  };
  if (aggregate_residual) {
    e_new = e + edge_mlp->finish(pre, edge_cond);
    agg = aggregate(e_new);
  } else {
    torch::Tensor update = edge_mlp->finish(pre, edge_cond);
    agg = aggregate(update);
    e_new = e + update;
  }

  torch::Tensor h_new = h + node_mlp->finish(node_mlp->project(0, h) + node_mlp->project(1, agg), cond);
  return {h_new, e_new};
}

// ---- the model ----

GraphNetImpl::GraphNetImpl(const GraphNetOptions& options, const ModelShape& shape) : WeatherModelImpl(shape) {
  latent_ = options.latent;
  GridGraph g;
  if (shape.point_set) {
    const CellCoordinates cells = cell_coordinates(shape);
    g = build_cell_graph(cells.latitudes, cells.longitudes, options.neighbourhood);
  } else {
    g = build_grid_graph(shape.lat, shape.lon, options.neighbourhood);
  }
  senders_ = register_index_buffer("senders", g.senders);
  receivers_ = register_index_buffer("receivers", g.receivers);
  edge_features_ = register_buffer("edge_features", g.edge_features);
  node_positions_ = register_buffer("node_positions", g.node_positions);

  // Conditional-norm noise (docs/ensembles.md): the last k input channels are noise fields, which
  // the encoder does not read.
  const int64_t k = shape.conditional_noise;
  if (k < 0 || k >= shape.in_channels)
    throw ConfigError("gnn: " + std::to_string(k) + " conditional noise channel(s) of " +
                      std::to_string(shape.in_channels) + " input channels leave no input");
  encoder_ = register_block("encoder", GraphEncoder(shape.in_channels - k, options.latent, options.mlp_layers));
  if (k > 0) noise_injector_ = register_block("noise_injector", NoiseInjector(k));
  for (int64_t i = 0; i < options.processor_layers; ++i) {
    processors_.push_back(register_block("processor" + std::to_string(i),
                                         InteractionLayer(options.latent, options.mlp_layers, true, k)));
  }
  decoder_ = register_block(
      "decoder",
      GraphMLP(GraphMLPOptions({options.latent}, options.latent, shape.out_channels).layers(options.mlp_layers).layer_norm(false)));
}

std::vector<ChannelAxis> GraphNetImpl::channel_axes() const {
  // Linear weights are [out, in]. The decoder's last Linear is first.0 when it has one layer (the
  // bias is on first.0), layer{L-1} otherwise.
  const int64_t layers = decoder_->options.layers();
  const std::string last = layers == 1 ? "decoder.first.0" : "decoder.layer" + std::to_string(layers - 1);
  ChannelAxis encoder{"encoder.node_mlp.first.0.weight", 1, true};
  encoder.skip_begin = shape().in_channels - shape().conditional_noise;  // noise channels: not encoder inputs
  encoder.skip_count = shape().conditional_noise;
  return {encoder,
          {last + ".weight", 0, false},
          {last + ".bias", 0, false}};
}

void GraphNetImpl::set_node_shard(const NodeShard& shard) {
  const int64_t N = num_nodes();
  const auto P = static_cast<int>(shard.bounds.size()) - 1;
  TORCH_CHECK(P >= 1 && shard.rank >= 0 && shard.rank < P && shard.bounds.front() == 0 && shard.bounds.back() == N,
              "gnn: node shard bounds must run from 0 to the ", N, " nodes, one range per rank");
  const torch::Device device = senders_.device();
  const torch::Tensor senders = senders_.cpu().contiguous(), receivers = receivers_.cpu().contiguous();
  const int64_t* snd = senders.data_ptr<int64_t>();
  const int64_t* rcv = receivers.data_ptr<int64_t>();
  const int64_t E = senders.numel();
  auto owner = [&](int64_t node) {
    return static_cast<int>(std::upper_bound(shard.bounds.begin(), shard.bounds.end(), node) - shard.bounds.begin()) - 1;
  };
  // Each rank's edge range (edges are sorted by receiver) and the nodes it reads from other ranks.
  std::vector<int64_t> edge_begin(static_cast<size_t>(P) + 1);
  for (int q = 0; q <= P; ++q)
    edge_begin[static_cast<size_t>(q)] = std::lower_bound(rcv, rcv + E, shard.bounds[static_cast<size_t>(q)]) - rcv;
  std::vector<std::vector<int64_t>> needs(static_cast<size_t>(P));      // sorted, unique, global ids
  std::vector<std::vector<int64_t>> sends(static_cast<size_t>(P));      // sorted, unique, global ids
  for (int q = 0; q < P; ++q) {
    auto& need = needs[static_cast<size_t>(q)];
    for (int64_t k = edge_begin[static_cast<size_t>(q)]; k < edge_begin[static_cast<size_t>(q) + 1]; ++k)
      if (owner(snd[k]) != q) need.push_back(snd[k]);
    std::sort(need.begin(), need.end());
    need.erase(std::unique(need.begin(), need.end()), need.end());
    for (int64_t g : need) sends[static_cast<size_t>(owner(g))].push_back(g);
  }
  for (auto& s : sends) {
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
  }
  const int r = shard.rank;
  const int64_t n0 = shard.bounds[static_cast<size_t>(r)], n1 = shard.bounds[static_cast<size_t>(r) + 1];
  owned_ = n1 - n0;
  send_rows_.clear();
  std::vector<int64_t> offset(static_cast<size_t>(P) + 1, 0);
  for (int q = 0; q < P; ++q) {
    send_rows_.push_back(static_cast<int64_t>(sends[static_cast<size_t>(q)].size()));
    offset[static_cast<size_t>(q) + 1] = offset[static_cast<size_t>(q)] + send_rows_.back();
  }
  const auto& need = needs[static_cast<size_t>(r)];
  std::vector<int64_t> halo, send_local, local_snd;
  for (int64_t g : need) {
    const auto& from = sends[static_cast<size_t>(owner(g))];
    halo.push_back(offset[static_cast<size_t>(owner(g))] + (std::lower_bound(from.begin(), from.end(), g) - from.begin()));
  }
  for (int64_t g : sends[static_cast<size_t>(r)]) send_local.push_back(g - n0);
  const int64_t e0 = edge_begin[static_cast<size_t>(r)], e1 = edge_begin[static_cast<size_t>(r) + 1];
  for (int64_t k = e0; k < e1; ++k) {
    const int64_t g = snd[k];
    local_snd.push_back(g >= n0 && g < n1 ? g - n0
                                          : owned_ + (std::lower_bound(need.begin(), need.end(), g) - need.begin()));
  }
  auto on_device = [&](const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong).to(device); };
  local_senders_ = on_device(local_snd);
  local_receivers_ = (receivers.narrow(0, e0, e1 - e0) - n0).to(device);
  local_edge_features_ = edge_features_.narrow(0, e0, e1 - e0);
  local_positions_ = node_positions_.narrow(0, n0, owned_);
  send_index_ = on_device(send_local);
  halo_index_ = on_device(halo);
  exchange_ = shard.exchange;
  sharded_ = P > 1;
}

torch::Tensor GraphNetImpl::forward(torch::Tensor x) {
  const int64_t nodes_here = sharded_ ? owned_ : num_nodes();
  TORCH_CHECK(x.dim() == 4 && x.size(1) == shape().in_channels && x.size(2) * x.size(3) == nodes_here &&
                  (sharded_ || x.size(2) == shape().lat),
              "gnn: expected input [batch, ", shape().in_channels, ", ", shape().lat, ", ", shape().lon, "]",
              sharded_ ? " (this rank's " + std::to_string(owned_) + " cells of them)" : std::string(), ", got ",
              x.sizes());
  const int64_t lat = x.size(2), lon = x.size(3);
  // [B, C, lat, lon] -> [B, N, C]
  torch::Tensor nodes = x.flatten(2).transpose(1, 2);
  // Conditional-norm noise: each node's noise fields embedded by the noise MLP, outside every block
  // as the ViT's; no gradient flows into the noise.
  torch::Tensor cond;
  if (const int64_t k = shape().conditional_noise; k > 0) {
    cond = run_forward(noise_injector_,
                       nodes.narrow(2, nodes.size(2) - k, k).detach(), /*checkpointed=*/false);  // [B, N, k]
    nodes = nodes.narrow(2, 0, nodes.size(2) - k);
  }

  // The lambdas hold the blocks by shared_ptr (by value, see run_block) and call non-const forward.
  std::shared_ptr<GraphEncoderImpl> encoder = encoder_.ptr();
  const torch::Tensor positions = sharded_ ? local_positions_ : node_positions_;
  const torch::Tensor edge_features = sharded_ ? local_edge_features_ : edge_features_;
  std::vector<torch::Tensor> state = run_block(
      *encoder,
      [encoder, positions, edge_features](const std::vector<torch::Tensor>& in) {
        return encoder->forward(in[0], positions, edge_features);
      },
      {nodes});

  const torch::Tensor senders = sharded_ ? local_senders_ : senders_;
  const torch::Tensor receivers = sharded_ ? local_receivers_ : receivers_;
  // Model parallelism: the halo is fetched inside the block, so a checkpointed block's replay
  // fetches it again (the same collective on every rank of the group, in the same order).
  const bool sharded = sharded_;
  const torch::Tensor send_index = send_index_, halo_index = halo_index_;
  const std::vector<int64_t> send_rows = send_rows_;
  const auto exchange = exchange_;
  for (const InteractionLayer& p : processors_) {
    std::shared_ptr<InteractionLayerImpl> layer = p.ptr();
    // The noise embedding is a third input of every layer (so a checkpointed layer replays with it).
    std::vector<torch::Tensor> inputs = state;
    if (cond.defined()) inputs.push_back(cond);
    state = run_block(
        *layer,
        [layer, senders, receivers, sharded, send_index, halo_index, send_rows,
         exchange](const std::vector<torch::Tensor>& in) {
          const torch::Tensor layer_cond = in.size() > 2 ? in[2] : torch::Tensor();
          if (!sharded) return layer->forward(in[0], in[1], senders, receivers, {}, layer_cond);
          // [B, S, L] -> [S, B, L] rows to send -> every rank's -> this rank's halo [B, H, L].
          const torch::Tensor sent = exchange(in[0].index_select(1, send_index).transpose(0, 1), send_rows);
          const torch::Tensor halo = sent.index_select(0, halo_index).transpose(0, 1);
          return layer->forward(in[0], in[1], senders, receivers, torch::cat({in[0], halo}, 1), layer_cond);
        },
        inputs);
  }

  std::shared_ptr<GraphMLPImpl> decoder = decoder_.ptr();
  return run_block(
      *decoder,
      [decoder, lat, lon](const torch::Tensor& h) {
        torch::Tensor out = decoder->forward({h});  // [B, N, C]
        return out.transpose(1, 2).reshape({out.size(0), out.size(2), lat, lon});
      },
      state[0]);
}

ModelEntry gnn_entry() {
  // Linear layers only, with index_select/index_add on the edges: GEMMs, no convolutions.
  ModelEntry e = make_model_entry<GraphNetOptions, GraphNetImpl>(
      gnn_schema(), &gnn_parameter_count, &gnn_activation_memory, {/*gemms=*/true, /*convolutions=*/false},
      &gnn_buffer_bytes);
  e.conditional_noise = true;
  return e;
}

}  // namespace wxtrain::models
