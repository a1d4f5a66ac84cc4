// Does the prefetching loader hide loading behind the training step? Real training (Loader +
// TrainingStep on the storm data) timed three ways:
//   (a) no loading delay                                      (prefetch = 0: loading inline)
//   (b) load_delay_ms = 80% of the step time, prefetch = 0    (the delay adds to every step)
//   (c) the same delay, prefetch = 2                           (workers build batches ahead)
// Target: (c) within 10% of (a). Each case runs two epochs on one Loader, as training does. The
// workers start at the run's first next(), so the first epoch includes one wait nothing can hide
// (the table gives it); they then run on across the epoch boundary, so the second epoch is the
// steady state that every later epoch of a run repeats, and the target applies to it.
//
//   prefetch_epoch [--config configs/storm_unet.toml] [--rounds 5] [--delay-fraction 0.8]
//
// The step time is the median of timed steps on real batches (loading excluded). Each round runs
// (a), (b), (c) in turn, each with a fresh Loader built before its timer starts, so machine noise
// spreads evenly; the printed epoch times are medians over rounds and the ratios are taken round by
// round, then their median.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/memory_meter.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/normalization.h"
#include "data/samples.h"
#include "distributed/communicator.h"
#include "distributed/world.h"
#include "trainer/training_step.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace wxtrain;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

trainer::MicroBatch micro_batch(const data::Batch& b) { return {b.input, b.forcings, b.target, b.target_mask}; }

struct EpochTime {
  double seconds = 0;          // first next() to the last step's end
  double first_batch_wait = 0; // time spent in the epoch's first next()
  int64_t steps = 0;
};

struct Bench {
  RunConfig config;
  std::shared_ptr<data::Dataset> dataset;
  std::optional<data::TimeSplit> split;
  data::Normalization normalization;
  std::unique_ptr<trainer::TrainingState> state;
  std::unique_ptr<trainer::TrainingStep> step;

  std::unique_ptr<data::Loader> loader(double delay_ms, int64_t prefetch) const {
    data::LoaderOptions o = data::LoaderOptions::from_config(config, config.train.batch_size, config.train.seed);
    o.load_delay_ms = delay_ms;
    o.prefetch = prefetch;
    return std::make_unique<data::Loader>(dataset, normalization, split->sample_times(data::Split::kTrain), o);
  }

  EpochTime epoch(data::Loader& l) {
    EpochTime t;
    const auto start = Clock::now();
    bool first = true;
    while (auto batch = l.next()) {
      if (first) t.first_batch_wait = seconds_since(start);
      first = false;
      step->run({micro_batch(*batch)}, config.train.lr);
      ++t.steps;
    }
    t.seconds = seconds_since(start);
    return t;
  }
};

}  // namespace

int main(int argc, char** argv) {
  // LibTorch's CPU allocator is wxtrain's counting, caching one from the start, as in `wxtrain`.
  wxtrain::memory_meter(torch::Device(torch::kCPU));
  std::string config_path = "configs/storm_unet.toml";
  int rounds = 5;
  double fraction = 0.8;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: prefetch_epoch [--config FILE] [--rounds N] [--delay-fraction F]\n");
      return 2;
    }
    if (arg == "--config") config_path = argv[++i];
    else if (arg == "--rounds") rounds = std::atoi(argv[++i]);
    else if (arg == "--delay-fraction") fraction = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "prefetch_epoch: unknown argument '%s'\n", arg.c_str());
      return 2;
    }
  }
  try {
    Bench b;
    b.config = load_config(config_path);
    b.dataset = std::make_shared<data::Dataset>(b.config.data);
    b.split.emplace(b.dataset->time_axis(), b.config.data,
                    data::SampleWindow{b.config.data.history, b.config.max_rollout()});
    b.normalization = data::Normalization::compute(*b.dataset, b.split->begin(data::Split::kTrain),
                                                   b.split->end(data::Split::kTrain));
    models::ModelShape shape = [&] {
      RunConfig c = b.config;
      c.data.lat = b.dataset->num_lat();
      c.data.lon = b.dataset->num_lon();
      return models::model_shape(c);
    }();
    auto comm = distributed::make_communicator(distributed::World{}, b.config.distributed, torch::kCPU);
    b.state = trainer::build_training_state(b.config, shape, comm, torch::kCPU,
                                            b.dataset->has_coordinates() ? b.dataset->lat() : std::vector<double>{});
    b.step = std::make_unique<trainer::TrainingStep>(*b.state);

    // Step time on real batches, loading excluded: one warm-up epoch, then every step of two more.
    std::vector<double> step_seconds;
    for (int e = 0; e < 3; ++e) {
      auto l = b.loader(0, 0);
      while (auto batch = l->next()) {
        const auto start = Clock::now();
        b.step->run({micro_batch(*batch)}, b.config.train.lr);
        if (e > 0) step_seconds.push_back(seconds_since(start));
      }
    }
    const double step_ms = 1e3 * median(step_seconds);
    const double delay_ms = fraction * step_ms;
    auto probe = b.loader(0, 0);
    std::printf("prefetch_epoch: %s (%s, %s), batch %lld, %lld batches/epoch; step %.1f ms (median of %zu); "
                "load_delay_ms = %.1f (%.0f%% of the step)\n",
                config_path.c_str(), b.config.model.name.c_str(), to_string(b.config.train.precision).c_str(),
                static_cast<long long>(b.config.train.batch_size), static_cast<long long>(probe->batches_per_epoch()),
                step_ms, step_seconds.size(), delay_ms, 100 * fraction);

    struct Case {
      const char* name;
      double delay;
      int64_t prefetch;
      std::vector<double> first, first_wait, second;  // per round: epoch 1, its first next(), epoch 2
    };
    std::vector<Case> cases = {{"(a) no delay, prefetch 0", 0, 0, {}, {}, {}},
                               {"(b) delay, prefetch 0", delay_ms, 0, {}, {}, {}},
                               {"(c) delay, prefetch 2", delay_ms, 2, {}, {}, {}}};
    for (int r = 0; r < rounds; ++r) {
      for (auto& c : cases) {
        auto l = b.loader(c.delay, c.prefetch);
        const EpochTime first = b.epoch(*l);
        const EpochTime second = b.epoch(*l);
        c.first.push_back(first.seconds);
        c.first_wait.push_back(first.first_batch_wait);
        c.second.push_back(second.seconds);
      }
    }
    auto ratio = [&](const std::vector<double>& x, const std::vector<double>& y) {
      std::vector<double> v;
      for (int r = 0; r < rounds; ++r) v.push_back(x[r] / y[r]);
      return median(v);
    };
    std::printf("\n| case | first epoch (ms) | its first batch wait (ms) | first epoch vs (a) | second epoch (ms) | "
                "second epoch vs (a) |\n|---|---|---|---|---|---|\n");
    for (const auto& c : cases)
      std::printf("| %s | %.1f | %.1f | %.3f | %.1f | %.3f |\n", c.name, 1e3 * median(c.first),
                  1e3 * median(c.first_wait), ratio(c.first, cases[0].first), 1e3 * median(c.second),
                  ratio(c.second, cases[0].second));
    std::printf("\nsecond epoch: (b)/(a) = %.3f   (c)/(a) = %.3f   (target: (c)/(a) <= 1.10)   "
                "first epoch: (c)/(a) = %.3f   [median of %d rounds]\n",
                ratio(cases[1].second, cases[0].second), ratio(cases[2].second, cases[0].second),
                ratio(cases[2].first, cases[0].first), rounds);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "prefetch_epoch: %s\n", e.what());
    return 1;
  }
}
