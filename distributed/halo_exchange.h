#pragma once
// Model parallelism's collectives (distributed.model_parallel; docs/distributed.md, "Model
// parallelism"): the differentiable halo exchange the sharded gnn runs before each message-passing
// layer, and the plain gather of a sharded prediction for validation.
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "distributed/communicator.h"

namespace wxtrain::distributed {

// send [rows[rank], ...] on every rank of `comm` (the rows this rank owns that another rank's edges
// read; the trailing dimensions the same everywhere) -> [sum(rows), ...]: every rank's send rows in
// rank order, one variable-count all-gather. Backward: the gradient of those rows summed over the
// ranks that read them and handed back to their owner (a reduce-scatter with the same counts), so a
// halo node's gradient reaches the parameters of the rank that computed it. A world of one returns
// send itself.
torch::Tensor exchange_halo_rows(const std::shared_ptr<Communicator>& comm, const torch::Tensor& send,
                                 const std::vector<int64_t>& rows);

// x sharded along `dim` (rank r holds sizes[r] entries of it) -> the whole tensor on every rank of
// `comm`, in rank order. Not differentiable (validation's prediction).
torch::Tensor allgather_along(const std::shared_ptr<Communicator>& comm, const torch::Tensor& x, int64_t dim,
                              const std::vector<int64_t>& sizes);

// What the halo exchanges of this process have moved (forward all-gathers and backward
// reduce-scatters apart), for tests and bench: bytes are the collectives' whole payload per rank
// (the gathered tensor, the tensor reduced), as CommStats counts them.
struct HaloStats {
  int64_t exchanges = 0, forward_bytes = 0;
  int64_t backward_exchanges = 0, backward_bytes = 0;
};
HaloStats halo_stats();

}  // namespace wxtrain::distributed
