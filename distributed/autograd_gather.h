#pragma once
// A differentiable all-gather along dim 0, for an ensemble group's members (trainer::gather_members).
#include <memory>

#include <torch/torch.h>

#include "distributed/communicator.h"

namespace wxtrain::distributed {

// x [R, ...] on every rank of `comm` (the same shape everywhere) -> [size * R, ...]: the ranks' x in
// rank order along dim 0. Backward: this rank's rows of the incoming gradient, with no
// communication. That is the gradient when every rank of `comm` computes the same function of the
// gathered tensor (an ensemble group's loss): the gathered rows of rank g depend on rank g's
// parameters only through rank g's own computation, so each rank back-propagates the loss through
// its own rows, and the ranks' parameter gradients are summed afterwards (the caller's job; see
// TrainingStep::run). A world of one returns x itself.
torch::Tensor allgather_rows(const std::shared_ptr<Communicator>& comm, const torch::Tensor& x);

}  // namespace wxtrain::distributed
