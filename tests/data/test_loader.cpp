// The loader: batch shapes, deterministic shuffling, rank shards, prefetching that never changes
// what is loaded, worker errors reaching the consumer, and resuming mid-epoch.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/normalization.h"
#include "data/samples.h"
#include "storm_fixture.h"

using namespace wxtrain;
using namespace wxtrain::data;
using namespace wxtrain::data::testing;

namespace {

struct Storm {
  std::shared_ptr<const Dataset> dataset = std::make_shared<Dataset>(storm_sources());
  TimeSplit split{64, 0.2, {2, 1}};
  Normalization norm = Normalization::compute(*dataset, 0, split.end(Split::kTrain));
  std::vector<int64_t> train = split.sample_times(Split::kTrain);  // 49 samples
};

LoaderOptions options_with(int64_t batch_size, int64_t prefetch, uint64_t seed = 7) {
  LoaderOptions options;
  options.batch_size = batch_size;
  options.prefetch = prefetch;
  options.seed = seed;
  return options;
}

std::vector<Batch> whole_epoch(Loader& loader) {
  std::vector<Batch> batches;
  while (auto batch = loader.next()) batches.push_back(std::move(*batch));
  return batches;
}

void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.times, b.times);
  EXPECT_EQ(a.index, b.index);
  EXPECT_TRUE(torch::equal(a.input, b.input));
  EXPECT_TRUE(torch::equal(a.target, b.target));
  ASSERT_EQ(a.target_mask.defined(), b.target_mask.defined());
  if (a.target_mask.defined()) {
    EXPECT_TRUE(torch::equal(a.target_mask, b.target_mask));
  }
}

}  // namespace

TEST(Loader, BatchShapesAndEpochLength) {
  Storm storm;
  LoaderOptions options = options_with(4, 0);
  options.window = {2, 3};
  TimeSplit split(64, 0.2, {2, 3});
  Loader loader(storm.dataset, storm.norm, split.sample_times(Split::kTrain), options);
  EXPECT_EQ(loader.num_samples(), 47);
  EXPECT_EQ(loader.batches_per_epoch(), 11);  // 47 / 4, remainder dropped
  auto batch = loader.next();
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->input.sizes(), (std::vector<int64_t>{4, 12, 33, 36}));
  EXPECT_EQ(batch->target.sizes(), (std::vector<int64_t>{4, 3, 6, 33, 36}));
  ASSERT_TRUE(batch->target_mask.defined());
  EXPECT_EQ(batch->target_mask.sizes(), batch->target.sizes());
  EXPECT_EQ(batch->times.size(), 4u);
  // The batch holds the samples it names.
  const Sample first = make_sample(*storm.dataset, storm.norm, {2, 3}, batch->times[0]);
  EXPECT_TRUE(torch::equal(batch->input[0], first.input));
  EXPECT_TRUE(torch::equal(batch->target[0], first.target));
  EXPECT_EQ(whole_epoch(loader).size(), 10u);  // the other 10 batches
  EXPECT_EQ(loader.state(), (LoaderState{1, 0}));
}

TEST(Loader, ShufflingIsDeterministicPerSeedAndEpoch) {
  Storm storm;
  Loader a(storm.dataset, storm.norm, storm.train, options_with(5, 0, 42));
  Loader b(storm.dataset, storm.norm, storm.train, options_with(5, 0, 42));
  Loader other_seed(storm.dataset, storm.norm, storm.train, options_with(5, 0, 43));
  EXPECT_EQ(a.batch_times(0, 0), b.batch_times(0, 0));
  EXPECT_EQ(a.batch_times(3, 2), b.batch_times(3, 2));
  EXPECT_NE(a.batch_times(0, 0), a.batch_times(1, 0));
  EXPECT_NE(a.batch_times(0, 0), other_seed.batch_times(0, 0));
  // Shuffled, yet every training sample appears at most once per epoch.
  std::set<int64_t> seen;
  for (int64_t k = 0; k < a.batches_per_epoch(); ++k) {
    for (int64_t t : a.batch_times(0, k)) EXPECT_TRUE(seen.insert(t).second);
  }
  EXPECT_EQ(seen.size(), 45u);  // 9 batches of 5

  LoaderOptions ordered = options_with(5, 0);
  ordered.shuffle = false;
  Loader in_order(storm.dataset, storm.norm, storm.train, ordered);
  EXPECT_EQ(in_order.batch_times(0, 0), (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

TEST(Loader, RankShardsAreDisjointEqualAndCovering) {
  Storm storm;
  const int64_t world = 7;  // 49 samples: 7 per rank, nothing dropped
  std::set<int64_t> all;
  for (int64_t rank = 0; rank < world; ++rank) {
    LoaderOptions options = options_with(2, 0);
    options.rank = rank;
    options.world_size = world;
    options.drop_last = false;
    Loader loader(storm.dataset, storm.norm, storm.train, options);
    EXPECT_EQ(loader.batches_per_epoch(), 4);  // 2 + 2 + 2 + 1 on every rank
    for (int64_t k = 0; k < 4; ++k) {
      for (int64_t t : loader.batch_times(0, k)) EXPECT_TRUE(all.insert(t).second) << "t=" << t << " twice";
    }
  }
  EXPECT_EQ(all, std::set<int64_t>(storm.train.begin(), storm.train.end()));

  // With a remainder every rank still gets the same number of batches.
  for (int64_t rank = 0; rank < 4; ++rank) {
    LoaderOptions options = options_with(3, 0);
    options.rank = rank;
    options.world_size = 4;
    Loader loader(storm.dataset, storm.norm, storm.train, options);
    EXPECT_EQ(loader.batches_per_epoch(), 4);  // 49 / 4 = 12 per rank, 4 batches of 3
  }
  LoaderOptions too_many = options_with(8, 0);
  too_many.world_size = 8;
  EXPECT_THROW(Loader(storm.dataset, storm.norm, storm.train, too_many), DataError);
}

TEST(Loader, PrefetchingYieldsExactlyTheInlineBatches) {
  Storm storm;
  Loader inline_loader(storm.dataset, storm.norm, storm.train, options_with(4, 0));
  LoaderOptions prefetching = options_with(4, 2);
  prefetching.queue_depth = 3;
  prefetching.load_delay_ms = 2;  // lets workers finish out of order
  Loader background(storm.dataset, storm.norm, storm.train, prefetching);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto expected = whole_epoch(inline_loader);
    const auto got = whole_epoch(background);
    ASSERT_EQ(expected.size(), got.size());
    ASSERT_EQ(got.size(), 12u);
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k].epoch, epoch);
      expect_same_batch(expected[k], got[k]);
    }
  }
}

// How much of a loading delay prefetching hides is a performance figure, measured side by side in
// bench/prefetch_epoch.cpp (docs/benchmarks.md), not asserted on wall time here.

TEST(Loader, WorkerErrorReachesTheConsumer) {
  TempDir dir;
  auto sources = storm_sources();
  for (auto& source : sources) {
    const std::string copy = dir.file(std::filesystem::path(source.file).filename().string());
    std::filesystem::copy_file(source.file, copy, std::filesystem::copy_options::overwrite_existing);
    source.file = copy;
  }
  DatasetOptions lazy;
  lazy.preload_max_bytes = 0;  // read slices on demand ...
  lazy.cache_states = 0;       // ... every time
  auto dataset = std::make_shared<Dataset>(sources, lazy);
  const Normalization norm = Normalization::identity(dataset->variable_names());
  LoaderOptions options = options_with(4, 2);
  options.queue_depth = 2;
  Loader loader(dataset, norm, TimeSplit(64, 0.2, {2, 1}).sample_times(Split::kTrain), options);
  ASSERT_TRUE(loader.next().has_value());
  std::filesystem::remove(dir.file("Tstorm.cdf"));
  std::string message;
  try {
    while (loader.next()) {
    }
  } catch (const DataError& error) {
    message = error.what();
  }
  EXPECT_NE(message.find("Tstorm.cdf"), std::string::npos) << "got: '" << message << "'";
  EXPECT_NE(message.find("not found"), std::string::npos) << message;
}  // the destructor joins the workers mid-epoch

TEST(Loader, DestructionMidEpochDoesNotHang) {
  Storm storm;
  LoaderOptions options = options_with(2, 4);
  options.load_delay_ms = 5;
  for (int i = 0; i < 5; ++i) {
    Loader loader(storm.dataset, storm.norm, storm.train, options);
    ASSERT_TRUE(loader.next().has_value());
  }
}

TEST(Loader, ResumeStateReproducesTheNextBatch) {
  Storm storm;
  Loader first(storm.dataset, storm.norm, storm.train, options_with(4, 2));
  whole_epoch(first);  // epoch 0
  for (int i = 0; i < 3; ++i) first.next();
  const LoaderState saved = first.state();
  EXPECT_EQ(saved, (LoaderState{1, 3}));
  const Batch expected = *first.next();

  Loader resumed(storm.dataset, storm.norm, storm.train, options_with(4, 1));
  resumed.set_state(saved);
  const Batch got = *resumed.next();
  EXPECT_EQ(got.epoch, 1);
  expect_same_batch(expected, got);

  // At the end of an epoch the resumed loader rolls over just like the original.
  resumed.set_state({1, resumed.batches_per_epoch()});
  EXPECT_FALSE(resumed.next().has_value());
  EXPECT_EQ(resumed.state(), (LoaderState{2, 0}));
  EXPECT_THROW(resumed.set_state({0, resumed.batches_per_epoch() + 1}), DataError);
}
