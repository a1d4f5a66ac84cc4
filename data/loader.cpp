#include "data/loader.h"

#include <chrono>
#include <numeric>

#include "core/error.h"
#include "data/dataset.h"

namespace wxtrain::data {
namespace {

// splitmix64: a fixed, portable generator, so permutations are identical on every platform and
// standard library (std::uniform_int_distribution is not).
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  uint64_t state = seed * 0xD1B54A32D192ED03ULL + static_cast<uint64_t>(epoch) + 1;
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace

LoaderOptions LoaderOptions::from_config(const RunConfig& run, int64_t batch_size, uint64_t seed) {
  const DataConfig& config = run.data;
  LoaderOptions options;
  options.batch_size = batch_size;
  options.seed = seed;
  options.window = {config.history, run.max_rollout()};
  options.prefetch = config.prefetch;
  options.queue_depth = config.queue_depth;
  options.load_delay_ms = config.load_delay_ms;
  return options;
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, Normalization normalization,
               std::vector<int64_t> sample_times, LoaderOptions options)
    : dataset_(std::move(dataset)), normalization_(std::move(normalization)),
      sample_times_(std::move(sample_times)), options_(options) {
  TORCH_CHECK(dataset_ != nullptr, "Loader needs a dataset");
  if (options_.batch_size < 1) throw DataError("batch size must be at least 1, got " + std::to_string(options_.batch_size));
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size) {
    throw DataError("loader rank " + std::to_string(options_.rank) + " is not in a world of size " +
                    std::to_string(options_.world_size));
  }
  if (options_.prefetch < 0 || options_.queue_depth < 1) {
    throw DataError("data.prefetch must be >= 0 and data.queue_depth >= 1, got " +
                    std::to_string(options_.prefetch) + " and " + std::to_string(options_.queue_depth));
  }
  // Throws DataError naming a channel the statistics do not cover.
  maker_ = std::make_unique<SampleMaker>(*dataset_, normalization_, options_.window);
  // Training (drop_last): every rank gets the same number of samples (the remainder is dropped),
  // so collectives in the training step never wait on a rank that has run out of batches.
  // Evaluation (!drop_last): every sample is seen exactly once over the ranks, so a metric summed
  // over ranks is the same for any world size; ranks may then differ by one sample.
  const int64_t n = num_samples(), W = options_.world_size;
  per_rank_ = options_.drop_last ? n / W : (n - options_.rank + W - 1) / W;
  batches_per_epoch_ = options_.drop_last ? per_rank_ / options_.batch_size
                                          : (per_rank_ + options_.batch_size - 1) / options_.batch_size;
  if (batches_per_epoch_ == 0 && options_.drop_last) {
    throw DataError("the split has " + std::to_string(num_samples()) + " samples: too few for one batch of " +
                    std::to_string(options_.batch_size) + " on each of " + std::to_string(options_.world_size) +
                    " rank(s); lower train.batch_size or data.val_fraction");
  }
}

Loader::~Loader() { stop_workers(); }

std::vector<int64_t> Loader::shard(int64_t epoch) const {
  const int64_t n = num_samples();
  std::vector<int64_t> order(static_cast<size_t>(n));
  if (options_.shuffle) {
    order = permutation(n, options_.seed, epoch);
  } else {
    std::iota(order.begin(), order.end(), 0);
  }
  // Strided like torch's DistributedSampler: rank r takes positions r, r + W, ...
  std::vector<int64_t> mine;
  for (int64_t i = 0; i < per_rank_; ++i) {
    mine.push_back(sample_times_[order[i * options_.world_size + options_.rank]]);
  }
  return mine;
}

std::vector<int64_t> Loader::batch_times(int64_t epoch, int64_t k) const {
  TORCH_CHECK(k >= 0 && k < batches_per_epoch_, "batch ", k, " outside [0, ", batches_per_epoch_, ")");
  const std::vector<int64_t> times = shard(epoch);
  const int64_t begin = k * options_.batch_size;
  const int64_t end = std::min<int64_t>(begin + options_.batch_size, per_rank_);
  return {times.begin() + begin, times.begin() + end};
}

Batch Loader::build_batch(int64_t epoch, int64_t k) const {
  Batch batch;
  batch.epoch = epoch;
  batch.index = k;
  batch.times = batch_times(epoch, k);
  if (options_.load_delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(options_.load_delay_ms));
  }
  std::vector<torch::Tensor> inputs, forcings, targets, masks;
  for (int64_t t : batch.times) {
    Sample sample = maker_->make(t);
    inputs.push_back(sample.input);
    forcings.push_back(sample.forcings);
    targets.push_back(sample.target);
    if (sample.target_mask.defined()) masks.push_back(sample.target_mask);
  }
  batch.input = torch::stack(inputs);
  batch.forcings = torch::stack(forcings);
  batch.target = torch::stack(targets);
  if (!masks.empty()) batch.target_mask = torch::stack(masks);
  int64_t bytes = 0;
  for (const torch::Tensor* t : {&batch.input, &batch.forcings, &batch.target, &batch.target_mask})
    if (t->defined()) bytes += t->numel() * t->element_size();
  batch_bytes_ = bytes;
  if (options_.device.is_cuda()) {
    // Page-locked memory lets the copy in next() run asynchronously.
    batch.input = batch.input.pin_memory();
    batch.target = batch.target.pin_memory();
    batch.forcings = batch.forcings.pin_memory();
    if (batch.target_mask.defined()) batch.target_mask = batch.target_mask.pin_memory();
  }
  return batch;
}

void Loader::start_workers() {
  stop_workers();
  next_to_build_ = sequence_index(position_);
  next_to_consume_ = next_to_build_;
  ready_.clear();
  stopping_ = false;
  running_ = true;
  for (int64_t i = 0; i < options_.prefetch; ++i) workers_.emplace_back([this] { work(); });
}

void Loader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& worker : workers_) worker.join();
  workers_.clear();
  ready_.clear();
  running_ = false;
}

void Loader::work() {
  while (true) {
    int64_t k = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || next_to_build_ < next_to_consume_ + options_.queue_depth; });
      if (stopping_) return;
      k = next_to_build_++;
    }
    Built built;
    try {
      // The pipeline runs on across epoch boundaries, so the next epoch's first batches are ready
      // when the consumer gets there.
      built.batch = build_batch(k / batches_per_epoch_, k % batches_per_epoch_);
    } catch (...) {
      built.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ready_[k] = std::move(built);
    }
    changed_.notify_all();
  }
}

std::optional<Batch> Loader::next() {
  if (position_.batch_index >= batches_per_epoch_) {
    position_ = {position_.epoch + 1, 0};
    return std::nullopt;
  }
  const int64_t k = position_.batch_index;
  const int64_t g = sequence_index(position_);
  Batch batch;
  if (options_.prefetch == 0) {
    ++position_.batch_index;
    batch = build_batch(position_.epoch, k);
  } else {
    if (!running_ || next_to_consume_ != g) start_workers();
    Built built;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return ready_.count(g) > 0; });
      built = std::move(ready_[g]);
      ready_.erase(g);
      ++next_to_consume_;
    }
    changed_.notify_all();
    ++position_.batch_index;
    if (built.error) std::rethrow_exception(built.error);
    batch = std::move(built.batch);
  }
  if (options_.device.is_cuda()) {
    batch.input = batch.input.to(options_.device, /*non_blocking=*/true);
    batch.target = batch.target.to(options_.device, /*non_blocking=*/true);
    batch.forcings = batch.forcings.to(options_.device, /*non_blocking=*/true);
    if (batch.target_mask.defined()) batch.target_mask = batch.target_mask.to(options_.device, true);
  }
  return batch;
}

void Loader::set_state(const LoaderState& state) {
  if (state.epoch < 0 || state.batch_index < 0 || state.batch_index > batches_per_epoch_) {
    throw DataError("loader state (epoch " + std::to_string(state.epoch) + ", batch " +
                    std::to_string(state.batch_index) + ") does not fit an epoch of " +
                    std::to_string(batches_per_epoch_) + " batches; was the checkpoint made with another "
                    "batch size, world size or dataset?");
  }
  stop_workers();
  position_ = state;
}

}  // namespace wxtrain::data
