#pragma once
// Errors a user can act on. Anything thrown as wxtrain::Error is printed by the CLI as one
// "error: ..." line with a non-zero exit code; its message must name the file, key or value at
// fault and say what was expected.
#include <stdexcept>
#include <string>

namespace wxtrain {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A run file or command-line value is wrong (exit code 2, like a usage error).
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
