#include "distributed/world.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include <c10/util/Exception.h>
#include <mpi.h>

#include "core/error.h"
#include "distributed/mpi_communicator.h"

namespace wxtrain::distributed {
namespace {

World g_world;
bool g_initialized = false;

bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMI_RANK", "PMIX_RANK", "SLURM_STEP_ID"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

int local_rank_from_env() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return -1;
}

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

}  // namespace

World init_world() {
  if (g_initialized) return g_world;
  if (launched_by_mpi()) {
    int provided = 0;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      throw Error("the MPI library provides thread level " + std::to_string(provided) +
                  "; wxtrain needs MPI_THREAD_SERIALIZED (its progress thread makes the MPI calls)");
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world.size);
    g_world.local_rank = local_rank_from_env();
    if (g_world.local_rank < 0) {
      MPI_Comm node;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_world.rank, MPI_INFO_NULL, &node);
      MPI_Comm_rank(node, &g_world.local_rank);
      MPI_Comm_free(&node);
    }
    g_world.mpi = true;
  }
  g_initialized = true;
  return g_world;
}

const World& current_world() { return g_world; }

void finalize_world() {
  if (!g_world.mpi) return;
  detail::stop_progress_thread();
  if (mpi_running()) MPI_Finalize();
}

void abort_world(const std::string& message, int code) {
  std::fflush(stdout);
  std::fprintf(stderr, "error: rank %d: %s\n", g_world.rank, message.c_str());
  std::fflush(stderr);
  if (g_world.mpi && mpi_running()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

int run_or_abort(const std::function<int()>& body) {
  if (g_world.size <= 1) return body();
  try {
    return body();
  } catch (const ConfigError& e) {
    abort_world(e.what(), kExitBadInput);
  } catch (const c10::Error& e) {
    abort_world(e.what_without_backtrace());  // a message, not LibTorch's C++ stack
  } catch (const std::exception& e) {
    abort_world(e.what());
  } catch (...) {
    abort_world("unknown exception");
  }
}

}  // namespace wxtrain::distributed
