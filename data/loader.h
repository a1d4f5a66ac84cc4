#pragma once
// Batches of samples for training and validation: deterministic shuffling from (seed, epoch),
// disjoint equal-sized shards per rank, and background workers that build batches ahead into a
// bounded queue. Batch k of an epoch is a pure function of (seed, epoch, rank, k), so the number of
// workers never changes what a run sees, and a resumed run continues with exactly the batch it
// would have seen.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "core/config.h"
#include "data/normalization.h"
#include "data/samples.h"

namespace wxtrain::data {

class Dataset;

struct LoaderOptions {
  int64_t batch_size = 8;      // samples per batch on this rank
  bool shuffle = true;         // false keeps time order (validation)
  bool drop_last = true;       // drop the final partial batch
  uint64_t seed = 0;           // with the epoch, fixes the permutation
  int64_t rank = 0;            // this process's shard ...
  int64_t world_size = 1;      // ... of this many
  int64_t prefetch = 2;        // background workers (0 = build batches inline in next())
  int64_t queue_depth = 4;     // batches built ahead of the consumer, at most
  double load_delay_ms = 0;    // artificial delay per batch inside loading (prefetch benchmark)
  SampleWindow window;         // history and rollout_steps
  torch::Device device = torch::kCPU;  // CUDA: pinned host batch, copied non_blocking

  // prefetch, queue_depth and load_delay_ms from [data]; the window is history and the longest
  // rollout the run reaches (train.rollout_schedule or data.rollout_steps).
  static LoaderOptions from_config(const RunConfig& config, int64_t batch_size, uint64_t seed);
};

struct Batch {
  torch::Tensor input;             // [B, P * history, lat, lon]
  torch::Tensor forcings;          // [B, rollout_steps, F + S, lat, lon] (data/samples.h)
  torch::Tensor target;            // [B, rollout_steps, P + D, lat, lon]
  torch::Tensor target_mask;       // like target (1 valid / 0 fill); undefined without fill values
  std::vector<int64_t> times;      // each sample's time index t
  int64_t epoch = 0;
  int64_t index = 0;               // batch number within the epoch
};

// Where the loader stands: the next batch next() returns. Saved in checkpoints for resume.
struct LoaderState {
  int64_t epoch = 0;
  int64_t batch_index = 0;
  bool operator==(const LoaderState& other) const {
    return epoch == other.epoch && batch_index == other.batch_index;
  }
};

class Loader {
 public:
  // sample_times come from TimeSplit::sample_times. Throws DataError when this rank would get no
  // batch (too few samples for batch_size x world_size).
  Loader(std::shared_ptr<const Dataset> dataset, Normalization normalization,
         std::vector<int64_t> sample_times, LoaderOptions options);
  ~Loader();  // stops and joins the workers, also mid-epoch
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch of the current epoch, or nullopt once the epoch is over; the call that returns
  // nullopt moves on to the next epoch. A worker's error is re-thrown here with its message.
  // One consumer thread only.
  std::optional<Batch> next();

  LoaderState state() const { return position_; }
  void set_state(const LoaderState& state);

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  int64_t num_samples() const { return static_cast<int64_t>(sample_times_.size()); }
  // Bytes of the last batch built (input, forcings, target and the mask; 0 before the first): what
  // one batch moves to the device. Under model parallelism the band's (Dataset::set_band).
  int64_t batch_bytes() const { return batch_bytes_.load(); }
  // The sample times of batch k in `epoch` on this rank (what next() will load).
  std::vector<int64_t> batch_times(int64_t epoch, int64_t k) const;

 private:
  struct Built {
    Batch batch;
    std::exception_ptr error;
  };

  Batch build_batch(int64_t epoch, int64_t k) const;
  std::vector<int64_t> shard(int64_t epoch) const;  // this rank's sample times, in epoch order
  // Position in the endless sequence of batches (epoch after epoch) the workers build from.
  int64_t sequence_index(const LoaderState& s) const { return s.epoch * batches_per_epoch_ + s.batch_index; }
  void start_workers();
  void stop_workers();
  void work();

  std::shared_ptr<const Dataset> dataset_;
  Normalization normalization_;
  std::unique_ptr<SampleMaker> maker_;  // refers to *dataset_, which the loader keeps alive
  std::vector<int64_t> sample_times_;
  LoaderOptions options_;
  int64_t per_rank_ = 0;
  int64_t batches_per_epoch_ = 0;
  LoaderState position_;

  // Worker pipeline: workers claim sequence indices (across epochs) in order and publish them into
  // `ready_`, at most queue_depth ahead of the consumer, who takes them in order.
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool stopping_ = false;
  bool running_ = false;
  int64_t next_to_build_ = 0;
  int64_t next_to_consume_ = 0;
  std::map<int64_t, Built> ready_;
  mutable std::atomic<int64_t> batch_bytes_{0};  // build_batch is const and runs on the workers
};

}  // namespace wxtrain::data
