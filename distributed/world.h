#pragma once
// Who this process is in the job. Launched by mpirun or srun, rank/size/local rank come from MPI;
// started on its own, the process is a world of one and the same training code runs unchanged.
#include <functional>
#include <string>

namespace wxtrain::distributed {

struct World {
  int rank = 0;
  int size = 1;
  int local_rank = 0;   // rank among the processes on this node: picks the GPU (cuda:<local_rank>)
  bool mpi = false;     // MPI was initialised (a launcher was detected)
};

// Initialises MPI when a launcher is present (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMI_RANK, PMIX_RANK
// or SLURM_STEP_ID in the environment), else returns the world of one. Idempotent: later calls
// return the same World. MPI is initialised with MPI_THREAD_SERIALIZED: every MPI call after start-up
// is made by one progress thread (see mpi_communicator.h), so no finer thread level is needed.
World init_world();

// The World from init_world() (the world of one before it is called).
const World& current_world();

// Stops the MPI progress thread and calls MPI_Finalize. Communicators must not be used afterwards.
void finalize_world();

// Prints "rank R: message" to stderr and takes the whole job down (MPI_Abort with `code`), so one
// rank's exception never leaves the others waiting in a collective. Without MPI: exits with `code`.
[[noreturn]] void abort_world(const std::string& message, int code = 1);

// Runs `body`; if it throws, the message goes through abort_world() when the world has more than
// one rank (otherwise the exception propagates, so a single process reports it normally). A
// ConfigError keeps its exit code 2 (the user's input), anything else ends the job with 1.
int run_or_abort(const std::function<int()>& body);

}  // namespace wxtrain::distributed
