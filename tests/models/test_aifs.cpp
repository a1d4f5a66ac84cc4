// AIFS (models/aifs/): the octahedral grid and the graphs, chunking (the same output and gradients
// for any chunk count; traced memory going down with chunks and the analytic formula beside the
// trace), point-set grids, and the options' errors. Equality with anemoi itself is
// test_aifs_reference.cpp (label reference).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/autocast.h"
#include "core/memory_history.h"
#include "core/memory_meter.h"
#include "estimator/activation_trace.h"
#include "estimator/analytic.h"
#include "models/aifs/aifs.h"
#include "models/registry.h"
#include "distributed/communicator.h"
#include "ops/group_norm_silu.h"
#include "trainer/training_step.h"

namespace wxtrain::models {
namespace {

// The counting allocator, before any tensor (the traces read it).
const bool kMeterInstalled = (memory_meter(c10::Device(c10::DeviceType::CPU)), true);

ModelConfig aifs_config(const std::string& extra = "", int64_t channels = 16, const std::string& hidden_grid = "o4") {
  return parse_config("[model]\nname = \"aifs\"\nnum_channels = " + std::to_string(channels) +
                          "\nnum_heads = 4\nmapper_num_heads = 2\nprocessor_layers = 2\nwindow_size = 40\nhidden_grid = \"" +
                          hidden_grid + "\"\n" +
                          extra + "[data]\nvariables = [\"a\"]\ngrid = [8, 8]\n",
                      "aifs.toml")
      .model;
}

TEST(AifsGrid, OctahedralGridSizesAndGaussianLatitudes) {
  for (int64_t n : {1, 4, 48, 96}) EXPECT_EQ(octahedral_grid(n).size(), 4 * n * (n + 9)) << "O" << n;
  EXPECT_EQ(octahedral_grid(48).size(), 10944);
  EXPECT_EQ(octahedral_grid(96).size(), 40320);
  // P_2 has its root at 1/sqrt(3); ECMWF's N320 (AIFS's data grid) starts at 89.784877 N.
  EXPECT_NEAR(gaussian_latitudes(1)[0], std::asin(1 / std::sqrt(3.0)) * 180 / M_PI, 1e-12);
  EXPECT_NEAR(gaussian_latitudes(320)[0], 89.784877, 1e-6);
  const LatLonPoints o2 = octahedral_grid(2);
  // Rows of 20 and 24 points from each pole, longitudes from 0, mirrored about the equator.
  EXPECT_EQ(o2.longitudes[1], 18.0);
  EXPECT_EQ(o2.latitudes.front(), -o2.latitudes.back());
  EXPECT_THROW(octahedral_number("n48", "model.hidden_grid"), ConfigError);
  EXPECT_EQ(octahedral_number("O96", "model.hidden_grid"), 96);
}

TEST(AifsGraph, EncoderEdgesLieWithinTheCutOffAndDecoderReadsKNearest) {
  const LatLonPoints hidden = octahedral_grid(8);
  LatLonPoints data;
  for (int i = 0; i < 40; ++i)
    for (int j = 0; j < 80; ++j) data.latitudes.push_back(87.75 - 4.5 * i), data.longitudes.push_back(4.5 * j);
  const double radius = 0.6 * grid_reference_distance(hidden);
  const BipartiteEdges enc = cutoff_edges(data, hidden, 0.6, 64);
  ASSERT_GT(enc.edges(), hidden.size());
  auto chord = [](double la1, double lo1, double la2, double lo2) {
    const double r = M_PI / 180;
    const double x = std::cos(la1 * r) * std::cos(lo1 * r) - std::cos(la2 * r) * std::cos(lo2 * r);
    const double y = std::cos(la1 * r) * std::sin(lo1 * r) - std::cos(la2 * r) * std::sin(lo2 * r);
    const double z = std::sin(la1 * r) - std::sin(la2 * r);
    return std::sqrt(x * x + y * y + z * z);
  };
  // Every pair within the radius is an edge, and no other (brute force over all pairs).
  int64_t within = 0;
  for (int64_t h = 0; h < hidden.size(); ++h)
    for (int64_t d = 0; d < data.size(); ++d)
      if (chord(hidden.latitudes[h], hidden.longitudes[h], data.latitudes[d], data.longitudes[d]) <= radius) ++within;
  EXPECT_EQ(enc.edges(), within);
  const BipartiteEdges dec = knn_edges(hidden, data, 3);
  EXPECT_EQ(dec.edges(), 3 * data.size());
  EXPECT_TRUE(torch::equal(dec.receivers, torch::arange(data.size()).repeat_interleave(3)));
  // Features: lengths in (0, 1] after "unit-max", directions of unit norm before "unit-std".
  EXPECT_LE(enc.features.select(1, 0).max().item<float>(), 1.0f);
  EXPECT_GT(enc.features.select(1, 0).min().item<float>(), 0.0f);
  const torch::Tensor norms = dec.features.narrow(1, 1, 2).norm(2, 1);
  EXPECT_LT((norms - norms.mean()).abs().max().item<float>(), 1e-4);
}

// The same weights with 1, 2, 4 and 8 chunks in encoder and decoder (and 1 or 2 processor chunks),
// with and without checkpointing: the same output and gradients.
TEST(AifsChunks, SameOutputAndGradientsForAnyChunkCount) {
  const ModelShape shape{6, 3, 9, 16};
  const torch::Tensor x = torch::randn({2, 6, 9, 16});
  const torch::Tensor w = torch::randn({2, 3, 9, 16});
  torch::Tensor y1;
  std::vector<torch::Tensor> g1;
  for (const auto& [checkpointing, chunks] :
       std::vector<std::pair<bool, int64_t>>{{false, 1}, {false, 2}, {false, 4}, {false, 8}, {true, 4}}) {
      ModelConfig c = aifs_config("encoder_chunks = " + std::to_string(chunks) + "\ndecoder_chunks = " +
                                  std::to_string(chunks) + "\nprocessor_chunks = " + std::to_string(chunks > 1 ? 2 : 1) +
                                  "\nedge_trainable = 2\n");
      torch::manual_seed(3);
      WeatherModel model = build_model(c, shape);
      {
        torch::NoGradGuard no_grad;  // the learned features start at zero: make them count
        for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.1);
      }
      model->set_checkpointing(checkpointing);
      torch::Tensor y = model->forward(x);
      (y * w).sum().backward();
      std::vector<torch::Tensor> g;
      for (const auto& p : model->parameters()) g.push_back(p.grad().clone());
      if (!y1.defined()) {
        y1 = y.detach(), g1 = g;
        continue;
      }
      EXPECT_LT((y - y1).abs().max().item<double>(), 1e-5 * y1.abs().max().item<double>())
          << chunks << " chunks, checkpointing " << checkpointing;
      // Floored at 1e-4 of the largest gradient: the attention's key bias has a gradient of exactly
      // zero (a constant per receiver cancels in the softmax), round-off on every side.
      double largest = 0;
      for (const torch::Tensor& t : g1) largest = std::max(largest, t.abs().max().item<double>());
      for (size_t i = 0; i < g.size(); ++i)
        EXPECT_LT((g[i] - g1[i]).abs().max().item<double>(), 1e-4 * std::max(g1[i].abs().max().item<double>(), largest * 1e-3))
            << "parameter " << i << ", " << chunks << " chunks, checkpointing " << checkpointing;
    }
}

// Inference (autograd off) runs the mapper and processor with in-place sums, products and GELU
// and lets intermediates go early (aifs.cpp, issue 23): the same kernels on the same values, so its
// output is the training forward's to the bit, with 1 and 3 mapper chunks; fp32 and bf16-mixed
// (autocast keeps its promotions: an op is in place only where the out-of-place one gives a's dtype).
TEST(AifsInference, SameOutputAsTheTrainingForward) {
  const ModelShape shape{6, 3, 9, 16};
  const torch::Tensor x = torch::randn({2, 6, 9, 16});
  for (const int64_t chunks : {1, 3}) {
    for (const bool autocast : {false, true}) {
      ModelConfig c = aifs_config("encoder_chunks = " + std::to_string(chunks) + "\ndecoder_chunks = " +
                                  std::to_string(chunks) + "\nedge_trainable = 2\n");
      torch::manual_seed(3);
      WeatherModel model = build_model(c, shape);
      {
        torch::NoGradGuard no_grad;
        for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.1);
      }
      AutocastGuard guard(torch::kCPU, torch::kBFloat16, autocast);
      const torch::Tensor trained = model->forward(x).detach();
      torch::Tensor inferred;
      {
        torch::NoGradGuard no_grad;
        inferred = model->forward(x);
      }
      ASSERT_EQ(inferred.scalar_type(), trained.scalar_type()) << chunks << " chunks, autocast " << autocast;
      EXPECT_TRUE(torch::equal(inferred, trained))
          << chunks << " chunks, autocast " << autocast << ": largest difference "
          << (inferred - trained).abs().max().item<double>();
    }
  }
}

TEST(AifsGrid, PointSetGridsAreTheirCells) {
  ModelShape cells{4, 2, 1, 300};
  cells.point_set = true;
  for (int i = 0; i < 300; ++i) {
    cells.latitudes.push_back(-80 + 160.0 * ((i * 37) % 300) / 300);
    cells.longitudes.push_back(360.0 * ((i * 101) % 300) / 300);
  }
  WeatherModel model = build_model(aifs_config(), cells);
  const torch::Tensor y = model->forward(torch::randn({2, 4, 1, 300}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 2, 1, 300}));
  EXPECT_TRUE(torch::isfinite(y).all().item<bool>());
}

TEST(AifsOptions, BadValuesNameTheKey) {
  auto error = [](const std::string& keys) {
    try {
      parse_config("[model]\nname = \"aifs\"\n" + keys + "[data]\nvariables = [\"a\"]\ngrid = [8, 8]\n", "bad.toml");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("hidden_grid = \"n320\"\n").find("model.hidden_grid"), std::string::npos);
  EXPECT_NE(error("num_heads = 5\n").find("model.num_heads = 5 must divide model.num_channels = 128"), std::string::npos)
      << error("num_heads = 5\n");
  EXPECT_NE(error("processor_chunks = 3\n").find("model.processor_chunks"), std::string::npos);
  EXPECT_NE(error("processor = \"gnn\"\n").find("model.processor"), std::string::npos);
}

TEST(AifsParameters, FormulaCountsTheInstantiatedModel) {
  for (const ModelShape& shape : {ModelShape{6, 3, 9, 16}, ModelShape{12, 6, 33, 36}}) {
    const ModelConfig c = aifs_config();
    WeatherModel model = build_model(c, shape);
    int64_t n = 0;
    for (const auto& p : model->parameters()) n += p.numel();
    EXPECT_EQ(find_model("aifs").parameter_count(c, shape), n);
  }
}

// Checkpointed, the traced step's peak goes down as the mappers are chunked (anemoi: 22 -> 9 GB
// from 1 to 4 chunks at its size), and the analytic formula stays beside the trace.
TEST(AifsChunks, TracedPeakGoesDownWithChunksAndTheFormulaFollows) {
  const ModelShape shape{12, 6, 65, 72};  // 4,680 cells onto O4 (208 hidden nodes): the mappers dominate
  double previous = 0;
  for (int64_t chunks : {1, 2, 4, 8}) {
    RunConfig r;
    r.model = aifs_config("encoder_chunks = " + std::to_string(chunks) + "\ndecoder_chunks = " + std::to_string(chunks) +
                              "\n",
                          32, "o4");
    r.train.checkpointing = true;
    r.train.device = "cuda";  // the formulas follow the unfused path a GPU runs
    const estimator::ActivationFit traced = estimator::trace_activations(r, shape, estimator::Mode::kTrain, {2, 4});
    const estimator::ActivationFit analytic = estimator::analytic_activations(r, shape, estimator::Mode::kTrain);
    EXPECT_EQ(analytic.num_params, traced.num_params);
    for (const double batch : {2.0, 4.0}) {
      const double t = traced.at(batch), a = analytic.at(batch);
      std::printf("[ aifs chunks ] %lld chunk(s), checkpointed, batch %.0f: traced %.0f bytes, analytic %.0f (%+.1f%%)\n",
                  static_cast<long long>(chunks), batch, t, a, 100 * (a / t - 1));
      EXPECT_LT(std::abs(a / t - 1), 0.08) << chunks << " chunks, batch " << batch << ": traced " << t << " analytic " << a;
    }
    const double t = traced.at(4);
    if (previous > 0) EXPECT_LT(t, previous) << chunks << " chunks";
    previous = t;
  }
}


// ---- diagnostics (run with --gtest_also_run_disabled_tests) ----

// The live blocks at the highest point of a traced step, from the counting allocator's history
// (core/memory_history.h): what the formulas must count. Prints each size with its count and the
// allocations just before the peak, largest first.
void print_peak_tensors(const RunConfig& r, const ModelShape& shape, int64_t batch, estimator::Mode mode,
                        const std::vector<std::pair<std::string, int64_t>>& dims) {
  namespace mh = memory_history;
  const torch::Device cpu(torch::kCPU);
  MemoryMeter& meter = memory_meter(cpu);
  const RunConfig c = estimator::trace_config(r);
  const ops::CpuFusionGuard fusion(estimator::uses_cpu_fusion(r));  // as measure_step
  mh::start(size_t{1} << 22);
  const int64_t base = meter.snapshot().allocated;
  std::vector<mh::Entry> entries;
  if (mode == estimator::Mode::kInference) {
    torch::NoGradGuard no_grad;
    auto model = build_model(c.model, shape);
    model->eval();
    if (c.train.precision == Precision::kBf16) model->to(torch::kBFloat16);
    torch::Tensor x = torch::randn({batch, shape.in_channels, shape.lat, shape.lon});
    std::printf("[ peak ] states %lld\n", static_cast<long long>(meter.snapshot().allocated - base));
    mh::clear();
    AutocastGuard guard(torch::kCPU, torch::kBFloat16, c.train.precision == Precision::kBf16Mixed);
    torch::Tensor y = model->forward(x);
    entries = mh::entries();
  } else {
    auto comm = distributed::make_communicator(distributed::World{}, c.distributed, cpu);
    auto state = trainer::build_training_state(c, shape, comm, cpu);
    auto micro = trainer::synthetic_micro_batches(c, shape, batch, c.train.accumulation, cpu);
    trainer::TrainingStep step(*state, &meter);
    step.run(micro, 1e-6);
    std::printf("[ peak ] states + batch %lld\n", static_cast<long long>(meter.snapshot().allocated - base));
    mh::clear();
    step.run(micro, 1e-6);
    entries = mh::entries();
  }
  mh::stop();
  std::map<uint64_t, std::pair<int64_t, size_t>> live;  // addr -> size, entry index
  int64_t total = 0, peak = 0;
  size_t at = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    const mh::Entry& e = entries[i];
    if (e.action == mh::Action::alloc) {
      live[e.addr] = {e.size, i};
      total += e.size;
      if (total > peak) peak = total, at = i;
    } else if (e.action == mh::Action::free_completed) {
      auto it = live.find(e.addr);
      if (it != live.end()) total -= it->second.first, live.erase(it);
    }
  }
  live.clear();
  for (size_t i = 0; i <= at; ++i) {
    const mh::Entry& e = entries[i];
    if (e.action == mh::Action::alloc) live[e.addr] = {e.size, i};
    else if (e.action == mh::Action::free_completed) live.erase(e.addr);
  }
  // Names a size as width x B x X x Y over the dims given ("E", "C", ...; "1" stands for none).
  auto name = [&](int64_t size) {
    std::string out;
    for (int64_t width : {4, 2, 8})
      for (int64_t b : {batch, int64_t{1}})
        for (size_t i = 0; i < dims.size(); ++i)
          for (size_t j = i; j < dims.size(); ++j)
            if (width * b * dims[i].second * dims[j].second == size)
              out += " " + std::to_string(width) + "*" + (b == 1 ? "" : "B*") + dims[i].first + "*" + dims[j].first;
    return out;
  };
  std::vector<std::pair<size_t, int64_t>> order;
  for (const auto& [addr, v] : live) order.push_back({v.second, v.first});
  std::sort(order.begin(), order.end());
  std::printf("[ peak ] batch %lld: step peak %lld bytes (live allocated in this step), at event %zu of %zu; oldest first:\n",
              static_cast<long long>(batch), static_cast<long long>(peak), at, entries.size());
  for (const auto& [i, size] : order)
    if (size >= 1024) std::printf("[ peak ]   #%zu %10lld %s\n", i, static_cast<long long>(size), name(size).c_str());
}

void print_chunks(const RunConfig& r, const ModelShape& shape) {
  WeatherModel model = build_model(r.model, shape);
  const auto& a = dynamic_cast<const AifsImpl&>(*model);
  const AifsOptions& o = a.options();
  std::printf("[ peak ] data %lld hidden %lld encoder edges %lld decoder edges %lld\n",
              static_cast<long long>(shape.lat * shape.lon), static_cast<long long>(a.hidden_grid().size()),
              static_cast<long long>(a.encoder_edges().edges()), static_cast<long long>(a.decoder_edges().edges()));
  for (const auto& [name, edges, receivers, n] :
       {std::make_tuple("encoder", &a.encoder_edges(), a.hidden_grid().size(), o.encoder_chunks),
        std::make_tuple("decoder", &a.decoder_edges(), shape.lat * shape.lon, o.decoder_chunks)})
    for (const EdgeChunk& c : chunk_edges(*edges, receivers, n))
      std::printf("[ peak ]   %s chunk: senders %lld receivers %lld edges %lld\n", name,
                  static_cast<long long>(c.senders.size(0)), static_cast<long long>(c.dst_end - c.dst_begin),
                  static_cast<long long>(c.edge_end - c.edge_begin));
}

// AIFS_MP=P: rank 0 of a model-parallel group of P (the stand-in group, as estimate runs it) on the
// model and region of tests/estimator/test_model_parallel.cpp, its partition's sizes named too.
TEST(AifsChunks, DISABLED_PeakTensors) {
  const char* mp = std::getenv("AIFS_MP");
  ModelShape shape{12, 6, 65, 72};
  const char* env = std::getenv("AIFS_CHUNKS");
  const int64_t chunks = env ? std::atoll(env) : 4;
  RunConfig r;
  r.model = aifs_config("encoder_chunks = " + std::to_string(chunks) + "\ndecoder_chunks = " + std::to_string(chunks) +
                            "\n",
                        32, "o4");
  if (mp) {
    shape = ModelShape{12, 6, 33, 36};
    for (int64_t i = 0; i < 33; ++i) shape.latitudes.push_back(20.0 + 1.25 * static_cast<double>(i));
    for (int64_t j = 0; j < 36; ++j) shape.longitudes.push_back(-140.0 + 2.5 * static_cast<double>(j));
    r.model = parse_config("[model]\nname = \"aifs\"\nnum_channels = 16\nnum_heads = 2\nmapper_num_heads = 2\n"
                           "mlp_hidden_ratio = 2\nprocessor_layers = 2\nhidden_grid = \"o8\"\nwindow_size = 32\n"
                           "encoder_chunks = " + std::to_string(chunks) + "\ndecoder_chunks = " + std::to_string(chunks) +
                               "\n[data]\nvariables = [\"a\"]\ngrid = [8, 8]\n",
                           "aifs.toml")
                  .model;
    // AIFS_O4: the model of tests/estimator AnalyticVsTrace.AifsFollowsTheTrace instead.
    if (std::getenv("AIFS_O4"))
      r.model = parse_config("[model]\nname = \"aifs\"\nnum_channels = 32\nnum_heads = 4\nmapper_num_heads = 4\n"
                             "processor_layers = 2\nwindow_size = 40\nhidden_grid = \"o4\"\nencoder_chunks = " +
                                 std::to_string(chunks) + "\ndecoder_chunks = " + std::to_string(chunks) +
                                 "\n[data]\nvariables = [\"a\"]\ngrid = [8, 8]\n",
                             "aifs.toml")
                    .model;
    r.distributed.model_parallel = std::atoll(mp);
  }
  r.train.checkpointing = std::getenv("AIFS_NOCKPT") == nullptr;
  if (const char* p = std::getenv("AIFS_PRECISION")) r.train.precision = parse_precision(p);
  r.train.device = "cuda";
  const estimator::Mode mode = std::getenv("AIFS_INFERENCE") ? estimator::Mode::kInference : estimator::Mode::kTrain;
  print_chunks(r, shape);
  std::vector<std::pair<std::string, int64_t>> dims = {{"1", 1}, {"C", 32}, {"H", 2}, {"M", 128}, {"Nd", 4680},
                                                       {"Nh", 208}, {"Ee", 3584}, {"Ed", 14040}, {"out", 6}, {"in", 12}, {"din", 24}, {"ef", 11}};
  if (mp) {
    const int64_t P = std::atoll(mp);
    const auto& ro = r.model.options.as<AifsOptions>();
    dims = {{"1", 1}, {"C", ro.num_channels}, {"H", ro.num_heads}, {"M", aifs_mlp_hidden(ro)}, {"in", 12}, {"out", 6},
            {"din", 24}, {"ef", 11}, {"hf", 12}};
    WeatherModel model = build_model(r.model, shape);
    const auto& a = dynamic_cast<const AifsImpl&>(*model);
    LatLonPoints data;
    const CellCoordinates cells = cell_coordinates(shape);
    data.latitudes = cells.latitudes, data.longitudes = cells.longitudes;
    std::vector<int64_t> bounds{0};
    for (int64_t q = 0; q < P; ++q) bounds.push_back(bounds.back() + (33 / P + (q < 33 % P ? 1 : 0)) * 36);
    const AifsPartition part =
        aifs_partition(data, a.hidden_grid(), a.encoder_edges(), a.decoder_edges(), bounds, 0, a.options());
    auto add = [&](const std::string& n, int64_t v) {
      dims.push_back({n, v});
      std::printf("[ peak ] %s = %lld\n", n.c_str(), static_cast<long long>(v));
    };
    add("Ndw", shape.lat * shape.lon), add("Nhw", a.hidden_grid().size());
    add("Eew", a.encoder_edges().edges()), add("Edw", a.decoder_edges().edges());
    add("Nd", part.cell_count), add("Nh", part.hidden_count);
    add("Ee", part.encoder.edges.numel()), add("Ed", part.decoder.edges.numel());
    for (const auto& [n, g] : {std::make_pair(std::string("e"), &part.encoder), std::make_pair(std::string("w"), &part.window),
                               std::make_pair(std::string("d"), &part.decoder)}) {
      add("S" + n, g->send_rows[0]), add("X" + n, g->exchange_nodes()), add("H" + n, g->halo_nodes());
    }
    add("Nd+He", part.cell_count + part.encoder.halo_nodes()), add("K", part.hidden_count + part.window.halo_nodes());
    add("Nh+Hd", part.hidden_count + part.decoder.halo_nodes());
    for (size_t i = 0; i < part.encoder_chunks.size(); ++i) {
      const EdgeChunk& c = part.encoder_chunks[i];
      add("Ee" + std::to_string(i), c.edge_end - c.edge_begin), add("Se" + std::to_string(i), c.senders.size(0));
      add("Re" + std::to_string(i), c.dst_end - c.dst_begin);
    }
    for (size_t i = 0; i < part.decoder_chunks.size(); ++i) {
      const EdgeChunk& c = part.decoder_chunks[i];
      add("Ed" + std::to_string(i), c.edge_end - c.edge_begin), add("Sd" + std::to_string(i), c.senders.size(0));
      add("Rd" + std::to_string(i), c.dst_end - c.dst_begin);
    }
  } else {
    WeatherModel model = build_model(r.model, shape);
    const auto& a = dynamic_cast<const AifsImpl&>(*model);
    int k = 0;
    for (const EdgeChunk& c : chunk_edges(a.encoder_edges(), a.hidden_grid().size(), chunks)) {
      dims.push_back({"Ee" + std::to_string(k), c.edge_end - c.edge_begin});
      dims.push_back({"Se" + std::to_string(k), c.senders.size(0)});
      dims.push_back({"Re" + std::to_string(k++), c.dst_end - c.dst_begin});
    }
    k = 0;
    for (const EdgeChunk& c : chunk_edges(a.decoder_edges(), shape.lat * shape.lon, chunks)) {
      dims.push_back({"Ed" + std::to_string(k), c.edge_end - c.edge_begin});
      dims.push_back({"Sd" + std::to_string(k), c.senders.size(0)});
      dims.push_back({"Rd" + std::to_string(k++), c.dst_end - c.dst_begin});
    }
  }
  for (int64_t batch : {2, 4}) print_peak_tensors(r, shape, batch, mode, dims);
  const estimator::ActivationFit analytic = estimator::analytic_activations(r, shape, mode);
  const estimator::ActivationFit traced = estimator::trace_activations(r, shape, mode, {2, 4});
  std::printf("[ peak ] analytic: %.0f + %.0f x batch (states %lld); traced %.0f + %.0f x batch (states %lld)\n",
              analytic.forward_backward.fixed, analytic.forward_backward.per_sample,
              static_cast<long long>(analytic.traced_states), traced.forward_backward.fixed,
              traced.forward_backward.per_sample, static_cast<long long>(traced.traced_states));
}

}  // namespace
}  // namespace wxtrain::models
