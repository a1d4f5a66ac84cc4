// What one rank of a model-parallel group reads and holds (distributed.model_parallel = P, issue 26;
// docs/data.md "Bands", docs/benchmarks.md): the run file's data opened lazily (nothing preloaded:
// every state is read from the archive), each rank's band set (Dataset::set_band, as `wxtrain
// train` sets it), and the training loader's first batches built from it. Per P and rank: the band's
// rows, the bytes its readers were asked for (float32 values, Dataset::archive_bytes_read) per
// batch and the batch's bytes (input, forcings, target, mask: Loader::batch_bytes), and both as a
// share of one process's.
//
//   sharded_read -c configs/storm_gnn.toml [--parts 1,2,4] [--batches 4]
//
// The statistics are the identity (their pass over the whole training split is every rank's, as in
// train, and is not what is measured here); the loader runs inline (prefetch 0), batch size and
// window from the run file.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/normalization.h"
#include "data/samples.h"

using namespace wxtrain;

int main(int argc, char** argv) {
  std::string run_file;
  std::vector<int64_t> parts = {1, 2, 4};
  int64_t batches = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "-c") {
      run_file = value;
    } else if (key == "--parts") {
      parts.clear();
      std::stringstream list(value);
      for (std::string p; std::getline(list, p, ',');) parts.push_back(std::atoll(p.c_str()));
    } else if (key == "--batches") {
      batches = std::atoll(value.c_str());
    } else {
      std::fprintf(stderr, "unknown option %s\n", key.c_str());
      return 2;
    }
  }
  if (run_file.empty()) {
    std::fprintf(stderr, "usage: sharded_read -c RUN.toml [--parts 1,2,4] [--batches N]\n");
    return 2;
  }
  try {
    const RunConfig config = load_config(run_file);
    data::DatasetOptions lazy;
    lazy.preload_max_bytes = 0;
    double whole_read = 0, whole_batch = 0;
    std::printf("%-3s %-4s %-14s %18s %9s %16s %9s\n", "P", "rank", "band", "archive B/batch", "share", "batch bytes",
                "share");
    for (const int64_t P : parts) {
      for (int64_t r = 0; r < P; ++r) {
        auto dataset = std::make_shared<data::Dataset>(config.data, lazy);
        const int64_t extent = dataset->grid_extent();
        const auto [begin, length] = data::grid_band(extent, P, r);
        dataset->set_band(begin, length);
        std::vector<std::string> names = dataset->variable_names();
        for (const auto& n : dataset->static_names()) names.push_back(n);
        for (const auto& n : dataset->computed_forcing_names()) names.push_back(n);
        const data::TimeSplit split(dataset->time_axis(), config.data, {config.data.history, config.max_rollout()});
        data::LoaderOptions options = data::LoaderOptions::from_config(config, config.train.batch_size, 0);
        options.prefetch = 0;
        data::Loader loader(dataset, data::Normalization::identity(names), split.sample_times(data::Split::kTrain),
                            options);
        const int64_t before = dataset->archive_bytes_read();
        double batch_bytes = 0;
        for (int64_t b = 0; b < batches; ++b) {
          auto batch = loader.next();
          if (!batch) batch = loader.next();
          batch_bytes += static_cast<double>(loader.batch_bytes());
        }
        const double read = static_cast<double>(dataset->archive_bytes_read() - before) / static_cast<double>(batches);
        batch_bytes /= static_cast<double>(batches);
        if (P == 1) whole_read = read, whole_batch = batch_bytes;
        char band[64];
        std::snprintf(band, sizeof band, "%lld-%lld of %lld", static_cast<long long>(begin),
                      static_cast<long long>(begin + length - 1), static_cast<long long>(extent));
        std::printf("%-3lld %-4lld %-14s %18.0f %9s %16.0f %9s\n", static_cast<long long>(P), static_cast<long long>(r),
                    band, read, whole_read > 0 ? (std::to_string(read / whole_read).substr(0, 5)).c_str() : "-",
                    batch_bytes, whole_batch > 0 ? (std::to_string(batch_bytes / whole_batch).substr(0, 5)).c_str() : "-");
      }
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
  return 0;
}
