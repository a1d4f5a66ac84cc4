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
  if (zero_stage < 0 || zero_stage > 2) {
    throw ConfigError("distributed.zero_stage = " + std::to_string(zero_stage) +
                      ": expected 0, 1 or 2 (stage 3 is for `wxtrain estimate` only)");
  }
  if (!(bucket_mb > 0)) throw ConfigError("distributed.bucket_mb = " + std::to_string(bucket_mb) + ": must be > 0");
  return comm->size() > 1 ? zero_stage : 0;
}

}  // namespace

ZeroDataParallel::ZeroDataParallel(std::shared_ptr<Communicator> comm, std::vector<ParamGroup> groups,
                                   OptimizerOptions opt, int zero_stage, double bucket_mb)
    : comm_(std::move(comm)),
      stage_(effective_stage(comm_, opt, zero_stage, bucket_mb)),
      parameters_(std::move(groups), stage_ >= 1 ? comm_->size() : 1, comm_->rank()),
      reducer_(comm_, parameters_.groups(),
               stage_ == 2 ? GradientReducer::Mode::kReduceScatter : GradientReducer::Mode::kAllReduce, bucket_mb),
      optimizer_(comm_, parameters_.groups(), std::move(opt)) {}

void ZeroDataParallel::broadcast_parameters() {
  parameters_.broadcast(*comm_);
  optimizer_.sync_master_weights();
}

void ZeroDataParallel::step(double lr) {
  optimizer_.step(lr, reducer_.owned_gradients());
  if (stage_ >= 1) parameters_.allgather_shards(*comm_);
}

}  // namespace wxtrain::distributed
