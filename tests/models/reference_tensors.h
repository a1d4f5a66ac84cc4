#pragma once
// The one place the reference tests read what the reference's Python wrote: a torch.save'd plain
// dict of name -> tensor. torch::pickle_load reads torch.save's zip format; it cannot read the
// OrderedDict a state_dict is (its unpickler has no OrderedDict), so the Python side saves
// dict(state_dict). When the .mdlus reader lands in interop/, a test can read the reference's own
// checkpoint through it instead.
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/error.h"
#include "models/reference_model.h"

namespace wxtrain::testing {

inline models::StateDict load_tensor_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const c10::IValue value = torch::pickle_load(bytes);
  if (!value.isGenericDict()) throw Error(path + ": expected a dict of tensors, got " + value.tagKind());
  models::StateDict out;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor())
      throw Error(path + ": expected string keys and tensor values");
    out[entry.key().toStringRef()] = entry.value().toTensor();
  }
  return out;
}

}  // namespace wxtrain::testing
