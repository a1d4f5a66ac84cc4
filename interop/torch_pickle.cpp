#include "interop/torch_pickle.h"

#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "interop/archive.h"

namespace wxtrain::interop {
namespace {

using Kind = PyObject::Kind;

PyRef make(Kind kind) {
  auto o = std::make_shared<PyObject>();
  o->kind = kind;
  return o;
}
PyRef make_int(int64_t v) {
  auto o = std::make_shared<PyObject>();
  o->kind = Kind::kInt;
  o->integer = v;
  return o;
}
PyRef make_text(Kind kind, std::string text) {
  auto o = std::make_shared<PyObject>();
  o->kind = kind;
  o->text = std::move(text);
  return o;
}

// The storage classes torch.save names (torch.FloatStorage, ...) and their element types.
const std::map<std::string, torch::ScalarType>& storage_types() {
  static const std::map<std::string, torch::ScalarType> types = {
      {"FloatStorage", torch::kFloat32},       {"DoubleStorage", torch::kFloat64},
      {"HalfStorage", torch::kFloat16},        {"BFloat16Storage", torch::kBFloat16},
      {"LongStorage", torch::kInt64},          {"IntStorage", torch::kInt32},
      {"ShortStorage", torch::kInt16},         {"CharStorage", torch::kInt8},
      {"ByteStorage", torch::kUInt8},          {"BoolStorage", torch::kBool},
      {"ComplexFloatStorage", torch::kComplexFloat}, {"ComplexDoubleStorage", torch::kComplexDouble},
      {"UntypedStorage", torch::kUInt8}};
  return types;
}

std::string storage_class(torch::ScalarType type) {
  for (const auto& [name, t] : storage_types())
    if (t == type && name != "UntypedStorage") return name;
  throw Error(std::string("torch.save cannot name a storage of ") + c10::toString(type));
}

class Unpickler {
 public:
  Unpickler(const std::string& pickle, std::string source, std::function<PyRef(const PyRef&)> persistent_load)
      : p_(pickle), source_(std::move(source)), persistent_load_(std::move(persistent_load)) {}

  PyRef load() {
    while (true) {
      if (at_ >= p_.size()) fail("the pickle ends before its STOP opcode");
      const size_t op_at = at_;
      const unsigned char op = static_cast<unsigned char>(p_[at_++]);
      switch (op) {
        case 0x80: take(1); break;        // PROTO
        case 0x95: take(8); break;        // FRAME: the length of what follows, which we read anyway
        case '.':                         // STOP
          if (stack_.size() != 1) fail("STOP with " + std::to_string(stack_.size()) + " values on the stack");
          return stack_.back();
        case 'N': push(make(Kind::kNone)); break;
        case 0x88: case 0x89: {           // NEWTRUE NEWFALSE
          auto o = std::make_shared<PyObject>();
          o->kind = Kind::kBool;
          o->boolean = op == 0x88;
          push(o);
          break;
        }
        case 'K': push(make_int(static_cast<unsigned char>(take(1)[0]))); break;      // BININT1
        case 'M': push(make_int(static_cast<int64_t>(unsigned_le(take(2))))); break;  // BININT2
        case 'J': push(make_int(static_cast<int32_t>(unsigned_le(take(4))))); break;  // BININT
        case 0x8a: push(make_int(signed_le(take(static_cast<unsigned char>(take(1)[0]))))); break;  // LONG1
        case 0x8b: push(make_int(signed_le(take(length(4))))); break;                             // LONG4
        case 'I': {                       // INT (protocol 0): "01"/"00" are True/False
          const std::string text = line();
          if (text == "01" || text == "00") {
            auto o = std::make_shared<PyObject>();
            o->kind = Kind::kBool;
            o->boolean = text == "01";
            push(o);
          } else {
            push(make_int(parse_int(text)));
          }
          break;
        }
        case 'L': {                       // LONG (protocol 0): digits and an L
          std::string text = line();
          if (!text.empty() && text.back() == 'L') text.pop_back();
          push(make_int(parse_int(text)));
          break;
        }
        case 'G': {                       // BINFLOAT: big-endian double
          const std::string b = take(8);
          uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(b[i]);
          auto o = std::make_shared<PyObject>();
          o->kind = Kind::kFloat;
          std::memcpy(&o->real, &bits, 8);
          push(o);
          break;
        }
        case 'X': push(make_text(Kind::kString, take(length(4)))); break;     // BINUNICODE
        case 0x8c: push(make_text(Kind::kString, take(length(1)))); break;    // SHORT_BINUNICODE
        case 0x8d: push(make_text(Kind::kString, take(length(8)))); break;    // BINUNICODE8
        case 'T': push(make_text(Kind::kString, take(length(4)))); break;     // BINSTRING
        case 'U': push(make_text(Kind::kString, take(length(1)))); break;     // SHORT_BINSTRING
        case 'B': push(make_text(Kind::kBytes, take(length(4)))); break;      // BINBYTES
        case 'C': push(make_text(Kind::kBytes, take(length(1)))); break;      // SHORT_BINBYTES
        case 0x8e: push(make_text(Kind::kBytes, take(length(8)))); break;     // BINBYTES8
        case 0x96: push(make_text(Kind::kBytes, take(length(8)))); break;     // BYTEARRAY8
        case '(': marks_.push_back(stack_.size()); break;                     // MARK
        case ')': push(make(Kind::kTuple)); break;                            // EMPTY_TUPLE
        case ']': push(make(Kind::kList)); break;                             // EMPTY_LIST
        case '}': push(make(Kind::kDict)); break;                             // EMPTY_DICT
        case 't': case 'l': {                                                 // TUPLE LIST
          auto o = std::make_shared<PyObject>();
          o->kind = op == 't' ? Kind::kTuple : Kind::kList;
          o->items = pop_to_mark();
          push(o);
          break;
        }
        case 0x85: case 0x86: case 0x87: {                                    // TUPLE1 TUPLE2 TUPLE3
          const size_t n = op - 0x84;
          need(n);
          auto o = std::make_shared<PyObject>();
          o->kind = Kind::kTuple;
          o->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(o);
          break;
        }
        case 'd': {                                                           // DICT
          auto o = std::make_shared<PyObject>();
          o->kind = Kind::kDict;
          const std::vector<PyRef> items = pop_to_mark();
          if (items.size() % 2) fail("DICT with an odd number of items");
          for (size_t i = 0; i < items.size(); i += 2) o->entries.emplace_back(items[i], items[i + 1]);
          push(o);
          break;
        }
        case 'a': {                                                           // APPEND
          need(2);
          PyRef value = pop();
          mutable_top(Kind::kList, "APPEND").items.push_back(value);
          break;
        }
        case 'e': {                                                           // APPENDS
          std::vector<PyRef> values = pop_to_mark();
          auto& list = mutable_top(Kind::kList, "APPENDS").items;
          list.insert(list.end(), values.begin(), values.end());
          break;
        }
        case 's': {                                                           // SETITEM
          need(3);
          PyRef value = pop();
          PyRef key = pop();
          mutable_top(Kind::kDict, "SETITEM").entries.emplace_back(key, value);
          break;
        }
        case 'u': {                                                           // SETITEMS
          std::vector<PyRef> items = pop_to_mark();
          if (items.size() % 2) fail("SETITEMS with an odd number of items");
          auto& dict = mutable_top(Kind::kDict, "SETITEMS").entries;
          for (size_t i = 0; i < items.size(); i += 2) dict.emplace_back(items[i], items[i + 1]);
          break;
        }
        case 'q': memo_put(static_cast<unsigned char>(take(1)[0])); break;    // BINPUT
        case 'r': memo_put(unsigned_le(take(4))); break;                      // LONG_BINPUT
        case 0x94: memo_put(memo_.size()); break;                             // MEMOIZE
        case 'p': memo_put(static_cast<uint64_t>(parse_int(line()))); break;  // PUT
        case 'h': memo_get(static_cast<unsigned char>(take(1)[0])); break;    // BINGET
        case 'j': memo_get(unsigned_le(take(4))); break;                      // LONG_BINGET
        case 'g': memo_get(static_cast<uint64_t>(parse_int(line()))); break;  // GET
        case '0': pop(); break;                                               // POP
        case '1': pop_to_mark(); break;                                       // POP_MARK
        case '2': need(1); push(stack_.back()); break;                        // DUP
        case 'c': {                                                           // GLOBAL
          std::string module = line();
          std::string name = line();
          push(make_text(Kind::kGlobal, module + "." + name));
          break;
        }
        case 0x93: {                                                          // STACK_GLOBAL
          need(2);
          PyRef name = pop(), module = pop();
          if (module->kind != Kind::kString || name->kind != Kind::kString) fail("STACK_GLOBAL of a non-string");
          push(make_text(Kind::kGlobal, module->text + "." + name->text));
          break;
        }
        case 'R': case 0x81: {                                                // REDUCE NEWOBJ
          need(2);
          PyRef args = pop();
          PyRef callable = pop();
          push(call(callable, args));
          break;
        }
        case 'b': {                                                           // BUILD
          // The state of an object: an OrderedDict's `_metadata`, a parameter's attributes. A
          // state_dict's values do not depend on it.
          need(2);
          pop();
          break;
        }
        case 'Q': {                                                           // BINPERSID
          need(1);
          PyRef pid = pop();
          push(persistent_load_(pid));
          break;
        }
        default: {
          char hex[8];
          std::snprintf(hex, sizeof hex, "0x%02x", op);
          at_ = op_at;
          fail(std::string("opcode ") + hex + " is not one torch.save writes");
        }
      }
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(source_ + ": not a readable torch.save file (damaged, or not a state_dict): data.pkl byte " +
                std::to_string(at_) + ": " + what);
  }
  std::string take(uint64_t n) {
    if (n > p_.size() - at_) fail("a value of " + std::to_string(n) + " bytes runs past the pickle's end");
    std::string out = p_.substr(at_, n);
    at_ += n;
    return out;
  }
  uint64_t length(int width) { return unsigned_le(take(width)); }
  static uint64_t unsigned_le(const std::string& b) {
    uint64_t v = 0;
    for (size_t i = b.size(); i-- > 0;) v = (v << 8) | static_cast<unsigned char>(b[i]);
    return v;
  }
  int64_t signed_le(const std::string& b) {
    if (b.empty()) return 0;
    if (b.size() > 8) fail("an integer of " + std::to_string(b.size()) + " bytes");
    uint64_t v = unsigned_le(b);
    if (b.size() < 8 && (static_cast<unsigned char>(b.back()) & 0x80)) v |= ~uint64_t{0} << (8 * b.size());
    return static_cast<int64_t>(v);
  }
  std::string line() {
    const size_t end = p_.find('\n', at_);
    if (end == std::string::npos) fail("a text argument without its newline");
    std::string out = p_.substr(at_, end - at_);
    at_ = end + 1;
    return out;
  }
  int64_t parse_int(const std::string& text) {
    try {
      size_t used = 0;
      const int64_t v = std::stoll(text, &used);
      if (used != text.size()) fail("'" + text + "' is not an integer");
      return v;
    } catch (const std::logic_error&) {
      fail("'" + text + "' is not an integer");
    }
  }
  void push(PyRef o) { stack_.push_back(std::move(o)); }
  void need(size_t n) const {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) fail("an opcode needs " + std::to_string(n) + " values on the stack");
  }
  PyRef pop() {
    need(1);
    PyRef o = stack_.back();
    stack_.pop_back();
    return o;
  }
  std::vector<PyRef> pop_to_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PyRef> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }
  // Containers are filled in place after they are made (and memoised): the one mutation.
  PyObject& mutable_top(Kind kind, const char* op) {
    need(1);
    if (stack_.back()->kind != kind) fail(std::string(op) + " on a " + stack_.back()->describe());
    return const_cast<PyObject&>(*stack_.back());
  }
  void memo_put(uint64_t index) {
    need(1);
    // Picklers number memo entries from 0, at most one per two bytes: larger is damage.
    if (index > p_.size()) fail("memo index " + std::to_string(index));
    memo_[index] = stack_.back();
  }
  void memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) fail("memo entry " + std::to_string(index) + " was never stored");
    push(it->second);
  }

  static int64_t as_int(const PyRef& o, bool& ok) {
    if (o->kind == Kind::kInt) return o->integer;
    ok = false;
    return 0;
  }
  std::vector<int64_t> int_tuple(const PyRef& o, const char* what) {
    if (o->kind != Kind::kTuple && o->kind != Kind::kList) fail(std::string(what) + " is a " + o->describe());
    std::vector<int64_t> out;
    for (const PyRef& item : o->items) {
      bool ok = true;
      out.push_back(as_int(item, ok));
      if (!ok) fail(std::string(what) + " holds a " + item->describe());
    }
    return out;
  }

  PyRef rebuild_tensor(const std::vector<PyRef>& args) {
    if (args.size() < 4) fail("a tensor rebuilt from " + std::to_string(args.size()) + " arguments");
    if (args[0]->kind != Kind::kStorage) fail("a tensor over a " + args[0]->describe());
    bool ok = true;
    const int64_t offset = as_int(args[1], ok);
    if (!ok) fail("a tensor's storage offset is a " + args[1]->describe());
    const std::vector<int64_t> sizes = int_tuple(args[2], "a tensor's size");
    const std::vector<int64_t> strides = int_tuple(args[3], "a tensor's stride");
    if (sizes.size() != strides.size()) fail("a tensor with " + std::to_string(sizes.size()) + " sizes and " +
                                             std::to_string(strides.size()) + " strides");
    const torch::Tensor& storage = args[0]->tensor;
    // The elements it reaches must lie within the storage: a pickle's sizes are taken as written.
    bool empty = false;
    __int128 low = offset, high = offset;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] < 0) fail("a tensor with a negative size");
      empty = empty || sizes[d] == 0;
      const __int128 reach = static_cast<__int128>(sizes[d] - (sizes[d] > 0 ? 1 : 0)) * strides[d];
      (reach < 0 ? low : high) += reach;
    }
    if (!empty && (low < 0 || high >= storage.numel()))
      fail("a tensor of size " + c10::str(c10::IntArrayRef(sizes)) + " reaches past its storage of " +
           std::to_string(storage.numel()) + " elements");
    auto o = std::make_shared<PyObject>();
    o->kind = Kind::kTensor;
    o->tensor = empty ? torch::empty(sizes, storage.options()) : storage.as_strided(sizes, strides, offset);
    return o;
  }

  PyRef call(const PyRef& callable, const PyRef& args) {
    if (args->kind != Kind::kTuple) fail("a call with arguments that are a " + args->describe());
    const std::string name = callable->kind == Kind::kGlobal ? callable->text : callable->describe();
    if (name == "collections.OrderedDict" || name == "builtins.dict") {
      if (!args->items.empty()) fail(name + " called with arguments");
      return make(Kind::kDict);
    }
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor")
      return rebuild_tensor(args->items);
    if (name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") {
      if (args->items.empty() || args->items[0]->kind != Kind::kTensor) fail(name + " of a non-tensor");
      return args->items[0];
    }
    if (name == "_codecs.encode" && args->items.size() == 2 && args->items[0]->kind == Kind::kString) {
      // Protocol 2's bytes: _codecs.encode(text, "latin1").
      std::string bytes;
      const std::string& t = args->items[0]->text;  // UTF-8 of code points < 256
      for (size_t i = 0; i < t.size(); ++i) {
        const auto c = static_cast<unsigned char>(t[i]);
        if (c < 0x80 || i + 1 >= t.size()) bytes.push_back(static_cast<char>(c));
        else bytes.push_back(static_cast<char>(((c & 0x1F) << 6) | (static_cast<unsigned char>(t[++i]) & 0x3F)));
      }
      return make_text(Kind::kBytes, bytes);
    }
    return make_text(Kind::kOpaque, name);
  }

  const std::string& p_;
  std::string source_;
  std::function<PyRef(const PyRef&)> persistent_load_;
  size_t at_ = 0;
  std::vector<PyRef> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PyRef> memo_;
};

// --- writing ---

class Pickler {
 public:
  void op(unsigned char c) { out_.push_back(static_cast<char>(c)); }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      op('K');
      out_.push_back(static_cast<char>(v));
    } else if (v >= 0 && v < 65536) {
      op('M');
      le(static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      op('J');
      le(static_cast<uint64_t>(static_cast<uint32_t>(static_cast<int32_t>(v))), 4);
    } else {
      op(0x8a);
      out_.push_back(8);
      le(static_cast<uint64_t>(v), 8);
    }
  }
  void text(const std::string& s) {
    op('X');
    le(s.size(), 4);
    out_ += s;
  }
  void global(const std::string& module, const std::string& name) {
    op('c');
    out_ += module + "\n" + name + "\n";
  }
  void int_tuple(c10::IntArrayRef values) {
    op('(');
    for (int64_t v : values) integer(v);
    op('t');
  }
  std::string& bytes() { return out_; }

 private:
  void le(uint64_t v, int width) {
    for (int i = 0; i < width; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
  std::string out_;
};

}  // namespace

PyRef PyObject::get(const std::string& key) const {
  if (kind != Kind::kDict) return nullptr;
  for (const auto& [k, v] : entries)
    if (k->kind == Kind::kString && k->text == key) return v;
  return nullptr;
}

std::string PyObject::describe() const {
  switch (kind) {
    case Kind::kNone: return "None";
    case Kind::kBool: return boolean ? "True" : "False";
    case Kind::kInt: return "int " + std::to_string(integer);
    case Kind::kFloat: return "float " + std::to_string(real);
    case Kind::kString: return "string '" + text.substr(0, 40) + "'";
    case Kind::kBytes: return std::to_string(text.size()) + " bytes";
    case Kind::kTuple: return "tuple of " + std::to_string(items.size());
    case Kind::kList: return "list of " + std::to_string(items.size());
    case Kind::kDict: return "dict of " + std::to_string(entries.size()) + " entries";
    case Kind::kGlobal: return "reference to " + text;
    case Kind::kTensor: return std::string("tensor ") + c10::toString(tensor.scalar_type()) + " " + c10::str(tensor.sizes());
    case Kind::kStorage: return "storage";
    case Kind::kOpaque: return "object made by " + text;
  }
  return "value";
}

PyRef read_torch_save(const std::string& bytes, const std::string& source) {
  if (!is_zip(bytes))
    throw Error(source + ": not a torch.save file (not a zip; files of torch.save before PyTorch 1.6, "
                         "_use_new_zipfile_serialization=False, are not read: save it again with a current PyTorch)");
  const Archive zip = read_archive(bytes, source);
  // Entries sit under one folder named by the writer ("archive", or the file's stem).
  std::string prefix;
  bool found = false;
  for (const auto& [name, data] : zip.files) {
    if (name == "data.pkl" || (name.size() > 9 && name.compare(name.size() - 9, 9, "/data.pkl") == 0 &&
                               name.find('/') == name.size() - 9)) {
      prefix = name.substr(0, name.size() - 8);
      found = true;
      break;
    }
  }
  if (!found) {
    const bool torchscript = std::any_of(zip.files.begin(), zip.files.end(),
                                         [](const auto& f) { return f.first.find("constants.pkl") != std::string::npos; });
    throw Error(source + (torchscript ? ": a TorchScript archive (torch.jit.save or a wxtrain checkpoint), not a torch.save file"
                                      : ": a zip without data.pkl: not a torch.save file"));
  }
  if (auto order = zip.files.find(prefix + "byteorder"); order != zip.files.end() && order->second != "little")
    throw Error(source + ": saved with byte order '" + order->second + "'; wxtrain reads little-endian files");
  std::map<std::string, PyRef> storages;  // by key: tensors that shared a storage share it again
  auto persistent_load = [&](const PyRef& pid) -> PyRef {
    const std::string where = source + ": data.pkl";
    if (pid->kind != Kind::kTuple || pid->items.size() < 5 || pid->items[0]->kind != Kind::kString ||
        pid->items[0]->text != "storage")
      throw Error(where + ": a persistent id that is not ('storage', type, key, location, size): " + pid->describe());
    const PyRef& type = pid->items[1];
    const PyRef& key = pid->items[2];
    if (type->kind != Kind::kGlobal || key->kind != Kind::kString || pid->items[4]->kind != Kind::kInt)
      throw Error(where + ": a storage reference of unexpected types");
    const std::string type_name = type->text.substr(type->text.rfind('.') + 1);
    const auto dtype = storage_types().find(type_name);
    if (dtype == storage_types().end()) throw Error(where + ": storage type " + type->text + " is not one wxtrain reads");
    if (auto it = storages.find(key->text); it != storages.end()) return it->second;
    const auto entry = zip.files.find(prefix + "data/" + key->text);
    if (entry == zip.files.end()) throw Error(source + ": the storage data/" + key->text + " is missing from the zip");
    const int64_t numel = pid->items[4]->integer;
    const auto element = static_cast<int64_t>(c10::elementSize(dtype->second));
    if (numel < 0 || static_cast<uint64_t>(numel) * element > entry->second.size())
      throw Error(source + ": the storage data/" + key->text + " holds " + std::to_string(entry->second.size()) +
                  " bytes, not the " + std::to_string(numel) + " x " + std::to_string(element) + " declared");
    auto o = std::make_shared<PyObject>();
    o->kind = Kind::kStorage;
    o->tensor = torch::empty({numel}, torch::TensorOptions().dtype(dtype->second));
    if (numel > 0) std::memcpy(o->tensor.data_ptr(), entry->second.data(), static_cast<size_t>(numel * element));
    storages[key->text] = o;
    return o;
  };
  return Unpickler(zip.files.at(prefix + "data.pkl"), source, persistent_load).load();
}

models::StateDict state_dict_of(const PyRef& object, const std::string& source, std::string* where) {
  auto all_tensors = [](const PyRef& o) {
    if (!o || o->kind != Kind::kDict || o->entries.empty()) return false;
    for (const auto& [k, v] : o->entries)
      if (k->kind != Kind::kString || v->kind != Kind::kTensor) return false;
    return true;
  };
  PyRef dict = object;
  std::string how;
  if (!all_tensors(dict)) {
    dict = nullptr;
    for (const char* key : {"state_dict", "model_state_dict", "model_state", "model", "module"}) {
      if (PyRef inner = object->get(key); all_tensors(inner)) {
        dict = inner;
        how = std::string("its '") + key + "' entry";
        break;
      }
    }
  }
  if (!dict) {
    std::string found = object->describe();
    if (object->kind == Kind::kDict) {
      found += " (";
      for (size_t i = 0; i < object->entries.size() && i < 6; ++i) {
        const auto& [k, v] = object->entries[i];
        found += (i ? ", " : "") + (k->kind == Kind::kString ? "'" + k->text + "'" : k->describe()) + ": " + v->describe();
      }
      found += object->entries.size() > 6 ? ", ...)" : ")";
    }
    throw Error(source + ": holds no state_dict (a dict of parameter names to tensors, at the top or under "
                         "'state_dict', 'model_state_dict', 'model_state', 'model' or 'module'); found " + found);
  }
  models::StateDict out;
  bool every_module = true;
  for (const auto& [k, v] : dict->entries) every_module = every_module && k->text.rfind("module.", 0) == 0;
  for (const auto& [k, v] : dict->entries) out[every_module ? k->text.substr(7) : k->text] = v->tensor;
  if (every_module) how += std::string(how.empty() ? "" : ", ") + "'module.' prefix dropped";
  if (where) *where = how;
  return out;
}

std::string write_torch_state_dict(const models::StateDict& state_dict) {
  Pickler p;
  p.op(0x80);
  p.op(2);
  p.global("collections", "OrderedDict");
  p.op(')');
  p.op('R');
  p.op('(');
  std::vector<torch::Tensor> storages;
  for (const auto& [name, tensor] : state_dict) {
    const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const std::string key = std::to_string(storages.size());
    storages.push_back(t);
    p.text(name);
    p.global("torch._utils", "_rebuild_tensor_v2");
    p.op('(');
    {  // the storage: ('storage', torch.FloatStorage, key, 'cpu', numel) as a persistent id
      p.op('(');
      p.text("storage");
      p.global("torch", storage_class(t.scalar_type()));
      p.text(key);
      p.text("cpu");
      p.integer(t.numel());
      p.op('t');
      p.op('Q');
    }
    p.integer(0);
    p.int_tuple(t.sizes());
    p.int_tuple(t.strides());
    p.op(0x89);  // requires_grad False
    p.global("collections", "OrderedDict");  // backward hooks: none
    p.op(')');
    p.op('R');
    p.op('t');
    p.op('R');
  }
  p.op('u');
  p.op('.');
  // The zip layer is LibTorch's own writer (the one torch.save uses): entries under archive/,
  // storages aligned to 64 bytes, the format version and a serialization id.
  std::string out;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&out](const void* data, size_t size) {
      out.append(static_cast<const char*>(data), size);
      return size;
    });
    writer.writeRecord("data.pkl", p.bytes().data(), p.bytes().size());
    const std::string format_version = "1", alignment = "64", byteorder = "little";
    writer.writeRecord(".format_version", format_version.data(), format_version.size());
    writer.writeRecord(".storage_alignment", alignment.data(), alignment.size());
    writer.writeRecord("byteorder", byteorder.data(), byteorder.size());
    for (size_t i = 0; i < storages.size(); ++i)
      writer.writeRecord("data/" + std::to_string(i), storages[i].data_ptr(), storages[i].nbytes());
    writer.writeEndOfFile();
  }
  return out;
}

}  // namespace wxtrain::interop
