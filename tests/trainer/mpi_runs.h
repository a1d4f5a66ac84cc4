#pragma once
// What the tests that run the wxtrain binary under mpirun share (test_train_mpi.cpp,
// test_train_zero3_mpi.cpp, test_train_model_parallel_mpi.cpp, test_ensemble_group_train.cpp): the
// mpirun line, a folder for a test binary's runs, and a command run with a time limit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "run_outputs.h"

namespace wxtrain::testing_support {

// `mpirun -np N ` as the tests run it: as root (CI runs as root), oversubscribed (two cores), one
// intra-op thread per rank (as the benchmarks run them).
inline std::string mpirun(int ranks = 2) {
  return std::string(WXTRAIN_MPIEXEC) + " -np " + std::to_string(ranks) +
         " --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 ";
}

// TempDir()/<name>_<pid>, emptied and made: call once per test binary (a function-local static).
inline std::string fresh_run_folder(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name + "_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

struct CommandResult {
  int code;  // the command's exit status; 124 when the time limit killed it, -1 on a signal
  std::string output;
};

// `bash -c command` with one intra-op thread, killed after timeout_s, stdout and stderr into `log`.
inline CommandResult run_logged(const std::string& command, const std::string& log, int timeout_s) {
  const std::string line = "OMP_NUM_THREADS=1 timeout -k 5 " + std::to_string(timeout_s) + " bash -c '" + command +
                           "' > " + log + " 2>&1";
  const int status = std::system(line.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(log)};
}

}  // namespace wxtrain::testing_support
