#include "distributed/flat_parameters.h"

#include <set>

#include "core/error.h"

namespace wxtrain::distributed {

FlatParameters::FlatParameters(std::vector<ParamGroup> groups, int ranks, int rank) {
  torch::NoGradGuard no_grad;
  std::set<const void*> seen;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    FlatGroup g;
    g.spec = std::move(groups[gi]);
    auto& params = g.spec.params;
    auto& names = g.spec.names;
    if (names.empty()) {
      for (size_t i = 0; i < params.size(); ++i) names.push_back("group" + std::to_string(gi) + ".param" + std::to_string(i));
    }
    if (names.size() != params.size()) {
      throw Error("parameter group " + std::to_string(gi) + " has " + std::to_string(params.size()) +
                  " parameters but " + std::to_string(names.size()) + " names");
    }
    torch::TensorOptions options = torch::TensorOptions().dtype(torch::kFloat);
    int64_t numel = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const torch::Tensor& p = params[i];
      const std::string where = "parameter '" + names[i] + "' (group " + std::to_string(gi) + ")";
      if (!p.defined()) throw Error(where + " is undefined");
      if (!p.requires_grad() || !p.is_leaf()) {
        throw Error(where + " is not a trainable leaf tensor; frozen parameters belong in no group");
      }
      if (!seen.insert(p.unsafeGetTensorImpl()).second) throw Error(where + " appears twice");
      if (i == 0) {
        options = p.options();
      } else if (p.scalar_type() != params[0].scalar_type() || p.device() != params[0].device()) {
        throw Error(where + " is " + std::string(c10::toString(p.scalar_type())) + " on " + p.device().str() +
                    "; the group's first parameter is " + c10::toString(params[0].scalar_type()) + " on " +
                    params[0].device().str() + " (one dtype and device per group)");
      }
      g.offsets.push_back(numel);
      g.numels.push_back(p.numel());
      g.shapes.push_back(p.sizes().vec());
      numel += p.numel();
    }
    g.layout = ShardLayout::of(numel, ranks, rank);
    g.flat = torch::zeros({g.layout.padded}, options);
    for (size_t i = 0; i < params.size(); ++i) {
      torch::Tensor view = g.flat.narrow(0, g.offsets[i], g.numels[i]).view(g.shapes[i]);
      view.copy_(params[i]);
      params[i].set_data(view);
    }
    groups_.push_back(std::move(g));
  }
}

void FlatParameters::broadcast(Communicator& comm) {
  if (comm.size() == 1) return;
  std::vector<WorkHandle> works;
  for (FlatGroup& g : groups_) {
    if (g.layout.padded > 0) works.push_back(comm.broadcast_async(g.flat, 0));
  }
  for (WorkHandle& w : works) w->wait();
}

void FlatParameters::allgather_shards(Communicator& comm) {
  std::vector<WorkHandle> works;
  for (FlatGroup& g : groups_) {
    if (g.layout.padded > 0) works.push_back(comm.allgather_async(g.owned(), g.flat, {}));
  }
  for (WorkHandle& w : works) w->wait();
}

}  // namespace wxtrain::distributed
