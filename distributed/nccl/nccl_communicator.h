#pragma once
// NCCL collectives on CUDA tensors, one GPU per rank (cuda:<local_rank>). Compiled only with
// WXTRAIN_CUDA; otherwise nccl_stub.cpp provides these two functions and make_communicator()
// reports that the build has no NCCL.
#include <memory>
#include <string>

#include <torch/torch.h>

#include "distributed/communicator.h"

namespace wxtrain::distributed {

// Whether this build has the NCCL backend.
bool nccl_available();
// The NCCL library's version ("2.28.9"); empty without NCCL.
std::string nccl_version();

// Bootstraps an NCCL communicator over MPI (rank 0's ncclUniqueId is broadcast to all ranks).
// Collective: every rank of `world` must call it.
std::shared_ptr<Communicator> make_nccl_communicator(const World& world, const torch::Device& device);

}  // namespace wxtrain::distributed
