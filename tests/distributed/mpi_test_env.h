#pragma once
// The world communicator of the mpirun test binary (set up in mpi_main.cpp).
#include <memory>

#include "distributed/communicator.h"

namespace wxtrain::distributed::fixture {
std::shared_ptr<Communicator> world_comm();
}  // namespace wxtrain::distributed::fixture
