#pragma once
// Files torch.save writes, read and written without Python: a zip holding data.pkl (a pickle) and
// one entry per storage (data/0, data/1, ...). LibTorch's own torch::pickle_load cannot read a
// state_dict: its unpickler resolves collections.OrderedDict to None by design, and a state_dict is
// an OrderedDict (with a `_metadata` attribute). So this is a small unpickler of the subset
// torch.save emits: the protocol 2-5 opcodes for None, bools, ints, floats, strings, bytes, tuples,
// lists, dicts, the memo and marks; GLOBAL/STACK_GLOBAL names that are never imported or run;
// REDUCE of the callables a state_dict uses (collections.OrderedDict,
// torch._utils._rebuild_tensor_v2 and _rebuild_tensor, _rebuild_parameter); and BINPERSID
// ('storage', torch.FloatStorage, key, location, numel) resolved to the zip's data/<key>.
// Any other callable becomes an opaque object that names it, so a whole training checkpoint reads
// and its model state can still be picked out. Nothing in a file is executed.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "models/reference_model.h"

namespace wxtrain::interop {

struct PyObject;
using PyRef = std::shared_ptr<const PyObject>;

// A Python value as a torch.save pickle holds it.
struct PyObject {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kBytes, kTuple, kList, kDict, kGlobal, kTensor, kStorage, kOpaque };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;
  // kString, kBytes: the value; kGlobal: "module.name"; kOpaque: the callable that made it.
  std::string text;
  std::vector<PyRef> items;                      // kTuple, kList
  std::vector<std::pair<PyRef, PyRef>> entries;  // kDict, in insertion order (OrderedDict or dict)
  torch::Tensor tensor;                          // kTensor; kStorage: the storage as a 1-D tensor

  // The value of key `key` (a string) in a dict, nullptr when absent or not a dict.
  PyRef get(const std::string& key) const;
  std::string describe() const;  // "dict of 12 entries", "tensor float32 [2, 3]", ...
};

// The object torch.save wrote into the zip in `bytes` (tensors on the CPU, sharing storages as
// saved). `source` names the file in errors: a damaged or foreign file is an Error naming it and
// what was wrong (opcode, offset, entry), never a crash.
PyRef read_torch_save(const std::string& bytes, const std::string& source);

// The state_dict in `object`: a dict whose values are all tensors. A training checkpoint that holds
// one (under "state_dict", "model_state_dict", "model_state", "model" or "module") is opened, and a
// "module." prefix on every name (DistributedDataParallel's) is dropped; `where` says what was
// done ("the 'model_state' entry, 'module.' prefix dropped"). Error naming `source` otherwise.
models::StateDict state_dict_of(const PyRef& object, const std::string& source, std::string* where = nullptr);

// torch.save(OrderedDict(state_dict)) as bytes: what torch.load(weights_only=True) and
// nn.Module.load_state_dict take. Tensors are written contiguous, one storage each, in name order.
std::string write_torch_state_dict(const models::StateDict& state_dict);

}  // namespace wxtrain::interop
