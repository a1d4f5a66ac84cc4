#pragma once
// Errors a user can act on. Anything thrown as wxtrain::Error is printed by the CLI as one
// "error: ..." line with a non-zero exit code; its message must name the file, key or value at
// fault and say what was expected.
//
// The exit codes of `wxtrain`, one meaning each (README, "Exit codes"; tests/cli/exit_codes.sh):
//   0  done (estimate: the run fits; profile: PASS)
//   1  the work failed: data missing, unreadable or inconsistent, a file that cannot be written,
//      out of memory, training diverged (wxtrain::Error, DataError, anything else)
//   2  the input is wrong: the run file, a value in it, a command-line argument, or a checkpoint
//      that does not match the run file (ConfigError)
//   3  the answer is no: estimate: the run fits none of the GPUs asked about; profile: the peak is
//      over --threshold (FAIL)
#include <stdexcept>
#include <string>

namespace wxtrain {

enum ExitCode : int { kExitOk = 0, kExitFailed = 1, kExitBadInput = 2, kExitNo = 3 };

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A run file or command-line value is wrong, or a checkpoint does not fit the run file (exit code 2,
// like a usage error).
class ConfigError : public Error {
 public:
  using Error::Error;
};

// An input data file is missing, corrupt or inconsistent with the others.
class DataError : public Error {
 public:
  using Error::Error;
};

}  // namespace wxtrain
