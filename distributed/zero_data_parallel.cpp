#include "distributed/zero_data_parallel.h"

#include "core/error.h"

namespace wxtrain::distributed {

namespace {

// Checks the settings before any piece touches the parameters; returns the stage that runs (0 on
// a world of one).
int effective_stage(const std::shared_ptr<Communicator>& comm, const OptimizerOptions& opt, int zero_stage,
                    double bucket_mb) {
  parse_optimizer_kind(opt.kind);
  if (!comm) throw Error("ZeroDataParallel needs a communicator (make_communicator)");
  if (zero_stage < 0 || zero_stage > 3) {
    throw ConfigError("distributed.zero_stage = " + std::to_string(zero_stage) + ": expected 0, 1, 2 or 3");
  }
  if (!(bucket_mb > 0)) throw ConfigError("distributed.bucket_mb = " + std::to_string(bucket_mb) + ": must be > 0");
  return comm->size() > 1 ? zero_stage : 0;
}

}  // namespace

ZeroDataParallel::ZeroDataParallel(std::shared_ptr<Communicator> comm, std::vector<ParamGroup> groups,
                                   OptimizerOptions opt, int zero_stage, double bucket_mb,
                                   const std::vector<std::vector<torch::Tensor>>& blocks)
    : comm_(std::move(comm)),
      stage_(effective_stage(comm_, opt, zero_stage, bucket_mb)),
      parameters_(stage_ < 3 ? std::make_unique<FlatParameters>(std::move(groups), stage_ >= 1 ? comm_->size() : 1,
                                                                comm_->rank())
                             : nullptr),
      sharded_(stage_ == 3 ? std::make_shared<ShardedParameters>(comm_, std::move(groups), blocks) : nullptr),
      reducer_(comm_, store_groups(),
               stage_ >= 2 ? GradientReducer::Mode::kReduceScatter : GradientReducer::Mode::kAllReduce, bucket_mb),
      optimizer_(comm_, store_groups(), std::move(opt)) {}

std::vector<FlatGroup>& ZeroDataParallel::store_groups() { return sharded_ ? sharded_->units() : parameters_->groups(); }

void ZeroDataParallel::broadcast_parameters() {
  if (sharded_) {
    sharded_->broadcast();
  } else {
    parameters_->broadcast(*comm_);
  }
  optimizer_.sync_master_weights();
}

void ZeroDataParallel::step(double lr) {
  if (sharded_) sharded_->release_blocks();  // their full values are about to go stale
  optimizer_.step(lr, reducer_.owned_gradients());
  if (sharded_) {
    sharded_->after_update();
  } else if (stage_ >= 1) {
    parameters_->allgather_shards(*comm_);
  }
}

std::map<std::string, torch::Tensor> ZeroDataParallel::optimizer_state() {
  std::map<std::string, torch::Tensor> state = optimizer_.consolidated_state();
  return sharded_ ? sharded_->to_group_state(state) : state;
}

void ZeroDataParallel::load_optimizer_state(const std::map<std::string, torch::Tensor>& state) {
  optimizer_.load_state(sharded_ ? sharded_->to_unit_state(state) : state);
}

std::shared_ptr<void> ZeroDataParallel::gather_full_parameters() {
  if (!sharded_) return nullptr;
  sharded_->gather_all();
  std::shared_ptr<ShardedParameters> store = sharded_;
  return std::shared_ptr<void>(nullptr, [store](void*) { store->release_all(); });
}

}  // namespace wxtrain::distributed
