// How fast does wxtrain's loader read training samples out of a chunked, Blosc-compressed Zarr
// store (the way WeatherBench2 and ARCO-ERA5 keep their data)? bench/run_loader_bench.sh runs it
// side by side with the peer users have, xarray + zarr-python (bench/peer/xarray_loader.py), on
// the same store, the same channels and the same number of samples.
//
//   loader_archive --store era5.zarr --batches 40 [--batch-size 4] [--prefetch 0] [--rounds 3]
//
// The dataset is opened lazily (nothing preloaded: every state is read from the store, through the
// reader's chunk cache) with z, t, u, v on 3 pressure levels and t2m: 13 channels. Samples are the
// shuffled training windows (history 2, rollout 1) in batches; the time is from opening the
// store to the last batch, normalisation included (the statistics are fixed, not computed,
// on both sides). Prints one line per round and the median samples/s.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/memory_meter.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/normalization.h"
#include "data/samples.h"

using namespace wxtrain;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string store;
  int64_t batches = 40, batch_size = 4, prefetch = 0, rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--store") store = value;
    else if (key == "--batches") batches = std::atoll(value.c_str());
    else if (key == "--batch-size") batch_size = std::atoll(value.c_str());
    else if (key == "--prefetch") prefetch = std::atoll(value.c_str());
    else if (key == "--rounds") rounds = std::atoll(value.c_str());
    else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      return 2;
    }
  }
  if (store.empty()) {
    std::fprintf(stderr, "usage: loader_archive --store STORE.zarr [--batches N] [--batch-size B] [--prefetch P]\n");
    return 2;
  }
  // The allocator `wxtrain train` runs with (it keeps freed blocks for the next batch of that size).
  memory_meter(torch::Device(torch::kCPU));
  try {
    DataConfig config;
    config.sources = {{store, "z", "z", {500, 700, 850}}, {store, "t", "t", {500, 700, 850}},
                      {store, "u", "u", {500, 700, 850}}, {store, "v", "v", {500, 700, 850}},
                      {store, "t2m", "t2m", {}}};
    config.val_fraction = 0.0;
    data::DatasetOptions lazy;
    lazy.preload_max_bytes = 0;
    std::vector<double> rates;
    for (int64_t round = 0; round < rounds; ++round) {
      // A fresh dataset each round, opened inside the timing as the peer opens its store: no state or
      // chunk survives from the round before.
      const auto start = Clock::now();
      auto dataset = std::make_shared<data::Dataset>(config, lazy);
      const data::TimeSplit split(dataset->time_axis(), config, {2, 1});
      const int64_t V = dataset->num_variables();
      const data::Normalization normalization(dataset->variable_names(), torch::full({V}, 100.0f),
                                              torch::full({V}, 10.0f));
      data::LoaderOptions options;
      options.batch_size = batch_size;
      options.prefetch = prefetch;
      options.seed = static_cast<uint64_t>(round);
      options.window = {2, 1};
      data::Loader loader(dataset, normalization, split.sample_times(data::Split::kTrain), options);
      int64_t samples = 0;
      double checksum = 0;
      for (int64_t b = 0; b < batches; ++b) {
        auto batch = loader.next();
        if (!batch) batch = loader.next();  // the next epoch
        samples += batch->input.size(0);
        checksum += batch->target.sum().item<double>();
      }
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      rates.push_back(static_cast<double>(samples) / seconds);
      std::printf("round %lld: %lld samples in %.3f s = %.1f samples/s (checksum %.6g)\n",
                  static_cast<long long>(round), static_cast<long long>(samples), seconds, rates.back(), checksum);
    }
    std::sort(rates.begin(), rates.end());
    std::printf("wxtrain loader (prefetch %lld): median %.1f samples/s\n", static_cast<long long>(prefetch),
                rates[rates.size() / 2]);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
  return 0;
}
