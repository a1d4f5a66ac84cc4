#include "trainer/checkpoint_io.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "core/atomic_file.h"
#include "core/config_reader.h"
#include "core/error.h"
#include "data/normalization.h"

namespace wxtrain::trainer {

namespace {

void write_map(torch::serialize::OutputArchive& root, const std::string& key, const TensorMap& map) {
  torch::serialize::OutputArchive nested;
  for (const auto& [name, tensor] : map) nested.write(name, tensor.detach().cpu());
  root.write(key, nested);
}

// A loaded tensor is a dense CPU tensor within its storage. LibTorch's unpickler takes a tensor's
// sizes, strides and offset from the pickle as written, without checking them against the storage
// it reads from the zip (nor the entry's CRC): a damaged data.pkl gave a 20-element tensor over an
// 8-byte storage, which load_weights' copy_ would read past (found by fuzz/checkpoint_fuzz).
void check_tensor(const std::string& path, const std::string& key, const torch::Tensor& t) {
  if (!t.defined()) return;
  auto damaged = [&](const std::string& what) {
    throw Error(path + ": not a readable wxtrain checkpoint (damaged): tensor '" + key + "' " + what);
  };
  if (t.layout() != torch::kStrided || !t.device().is_cpu() || !t.has_storage())
    damaged("is not a dense CPU tensor");
  if (t.numel() == 0) return;
  __int128 low = t.storage_offset(), high = t.storage_offset();  // the elements it reaches
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) < 0) damaged("has a negative size");
    const __int128 reach = static_cast<__int128>(t.size(d) - 1) * t.stride(d);
    (reach < 0 ? low : high) += reach;
  }
  const __int128 end = (high + 1) * static_cast<__int128>(t.element_size());
  if (low < 0 || end > static_cast<__int128>(t.storage().nbytes()))
    damaged("reaches past its data (" + std::to_string(t.numel()) + " elements of " + std::to_string(t.element_size()) +
            " bytes in " + std::to_string(t.storage().nbytes()) + " stored)");
}

TensorMap read_map(torch::serialize::InputArchive& root, const std::string& key, const std::string& path) {
  torch::serialize::InputArchive nested;
  TensorMap map;
  if (!root.try_read(key, nested)) return map;
  for (const auto& name : nested.keys()) {
    torch::Tensor t;
    nested.read(name, t);
    check_tensor(path, key + "." + name, t);
    map[name] = t;
  }
  return map;
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  torch::serialize::OutputArchive archive;
  archive.write("format", c10::IValue(std::string("wxtrain-checkpoint-1")));
  archive.write("step", c10::IValue(c.step));
  archive.write("loader_epoch", c10::IValue(c.loader.epoch));
  archive.write("loader_batch", c10::IValue(c.loader.batch_index));
  archive.write("config_text", c10::IValue(c.config_text));
  std::string overrides;
  for (const auto& o : c.overrides) overrides += o + "\n";
  archive.write("config_overrides", c10::IValue(overrides));
  archive.write("model_name", c10::IValue(c.model_name));
  archive.write("world_size", c10::IValue(c.world_size));
  archive.write("channels", c10::IValue(c.channels));
  archive.write("ensemble_members", c10::IValue(c.ensemble_members));
  archive.write("ensemble_group", c10::IValue(c.ensemble_group));
  archive.write("crps_alpha", c10::IValue(c.crps_alpha));
  archive.write("noise_channels", c10::IValue(c.noise_channels));
  archive.write("noise_std", c10::IValue(c.noise_std));
  archive.write("noise_correlation", c10::IValue(c.noise_correlation));
  if (c.rng_state.defined()) archive.write("rng_state", c.rng_state);
  if (c.noise_rng_state.defined()) archive.write("noise_rng_state", c.noise_rng_state);
  write_map(archive, "model", c.model);
  write_map(archive, "optimizer", c.optimizer);
  write_map(archive, "scaler", c.scaler);
  write_map(archive, "normalization", c.normalization);
  // LibTorch's zip writer runs our sink from C code and finishes the archive in its destructor, so
  // the sink never throws: it keeps the first error (ENOSPC, EIO) for commit() to report, which
  // leaves the previous checkpoint in place and no checkpoint.pt.tmp behind.
  AtomicFile file(path);
  try {
    archive.save_to(file.sink());
  } catch (const c10::Error& e) {
    throw Error("cannot write " + path + ": " + e.what_without_backtrace());
  }
  file.commit("the previous checkpoint, if any, is unchanged");
}

namespace {

// --- A look at the archive before LibTorch reads it ---
//
// LibTorch sizes its buffers from what a file declares before it checks that the file holds that
// much: the zip reader allocates an entry's declared size (mz_zip_reader_file_stat ->
// getRecord), and the unpickler a string's (Unpickler::readBytes resizes a std::string to a
// BINUNICODE/BINBYTES length, up to 4 GiB, or 2^64 for the 8-byte forms, zero-filling it). One
// flipped byte in a length field then costs gigabytes and seconds before "Unexpected end of
// pickler archive" (found by fuzz/checkpoint_fuzz: 4 GiB and 15 s for a 6 KB file). The zip's
// central directory and the pickles (data.pkl, constants.pkl, code/*.debug_pkl; LibTorch stores
// them uncompressed) are walked here first and a length past the end of the file is refused. Whatever this walk does
// not understand (another compression, an unknown opcode) it leaves to LibTorch's own checks.

class FileBytes {
 public:
  explicit FileBytes(const std::string& path) : in_(path, std::ios::binary) {
    in_.seekg(0, std::ios::end);
    size_ = in_ ? static_cast<uint64_t>(in_.tellg()) : 0;
  }
  uint64_t size() const { return size_; }
  // `length` bytes at `offset`, or nothing when the file is shorter.
  std::optional<std::string> read(uint64_t offset, uint64_t length) {
    if (offset > size_ || length > size_ - offset) return std::nullopt;
    std::string out(length, '\0');
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    if (!in_.read(out.data(), static_cast<std::streamsize>(length))) return std::nullopt;
    return out;
  }

 private:
  std::ifstream in_;
  uint64_t size_ = 0;
};

uint64_t little_endian(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  return value;
}

// Throws when a pickle declares a string or bytes longer than what is left of it.
void check_pickle(const std::string& path, const std::string& name, const std::string& pickle) {
  size_t at = 0;
  auto fail = [&](uint64_t length, size_t where) {
    throw Error(path + ": not a readable wxtrain checkpoint (damaged): its '" + name + "' declares " +
                std::to_string(length) + " bytes at byte " + std::to_string(where) + " of " +
                std::to_string(pickle.size()));
  };
  auto length_field = [&](int width) -> uint64_t {  // a length of `width` bytes, then that many bytes
    if (pickle.size() - at < static_cast<size_t>(width)) fail(width, at);
    const uint64_t length = little_endian(pickle, at, width);
    at += width;
    if (length > pickle.size() - at) fail(length, at);
    at += length;
    return length;
  };
  auto fixed = [&](size_t width) {
    if (pickle.size() - at < width) fail(width, at);
    at += width;
  };
  auto line = [&] {  // newline-terminated text arguments of the protocol 0 opcodes
    const size_t end = pickle.find('\n', at);
    if (end == std::string::npos) fail(pickle.size() - at + 1, at);
    at = end + 1;
  };
  while (at < pickle.size()) {
    const unsigned char op = static_cast<unsigned char>(pickle[at++]);
    switch (op) {
      case '.': return;                                                    // STOP
      case 0x80: case 'K': case 'q': case 'h': fixed(1); break;            // PROTO BININT1 BINPUT BINGET
      case 'M': fixed(2); break;                                           // BININT2
      case 'J': case 'j': fixed(4); break;                                 // BININT LONG_BINGET
      case 'r': {                                                          // LONG_BINPUT
        // LibTorch sizes its memo to the index (Unpickler::setInput): 2^32 entries of 16 bytes from
        // four bytes (found by the fuzzer). Picklers number memo entries from 0, one per PUT of
        // at least 2 bytes, so an index past the pickle's size is damage.
        if (pickle.size() - at < 4) fail(4, at);
        const uint64_t index = little_endian(pickle, at, 4);
        if (index > pickle.size()) {
          throw Error(path + ": not a readable wxtrain checkpoint (damaged): its '" + name + "' stores memo entry " +
                      std::to_string(index) + " at byte " + std::to_string(at) + " of " + std::to_string(pickle.size()));
        }
        at += 4;
        break;
      }
      case 'G': case 0x95: fixed(8); break;                                // BINFLOAT FRAME
      case 0x8a: case 0x8c: case 'C': case 'U': length_field(1); break;    // LONG1 SHORT_BINUNICODE SHORT_BINBYTES SHORT_BINSTRING
      case 0x8b: case 'X': case 'B': case 'T': length_field(4); break;     // LONG4 BINUNICODE BINBYTES BINSTRING
      case 0x8d: case 0x8e: case 0x96: length_field(8); break;             // BINUNICODE8 BINBYTES8 BYTEARRAY8
      case 'c': case 'i': line(); line(); break;                           // GLOBAL INST
      case 'I': case 'L': case 'S': case 'V': case 'F': case 'P': case 'g': case 'p': line(); break;
      case '(': case '0': case '1': case '2': case 'N': case 0x88: case 0x89: case ']': case 'a': case 'e':
      case 'l': case ')': case 't': case 0x85: case 0x86: case 0x87: case '}': case 'd': case 's': case 'u':
      case 0x8f: case 0x90: case 0x91: case 'b': case 'R': case 0x81: case 0x92: case 0x93: case 0x94:
      case 'Q': case 'o': case 0x97: case 0x98:
        break;                                                             // no argument
      default: return;  // not an opcode this walk knows: LibTorch's unpickler says what is wrong
    }
  }
}

// The zip's central directory: every entry within the file, a stored entry as long as it says,
// and the pickles checked by check_pickle. Throws Error naming the file and the entry.
void check_archive(const std::string& path) {
  FileBytes file(path);
  const uint64_t size = file.size();
  auto damaged = [&](const std::string& what) {
    throw Error(path + ": not a readable wxtrain checkpoint (damaged): " + what);
  };
  // End of central directory: 22 bytes and a comment of up to 64 KiB at the end of the file.
  const uint64_t tail_length = std::min<uint64_t>(size, 22 + 65535);
  const std::optional<std::string> tail = file.read(size - tail_length, tail_length);
  if (!tail || tail->size() < 22) return;
  size_t eocd = std::string::npos;
  for (size_t i = tail->size() - 22 + 1; i-- > 0;) {
    if (little_endian(*tail, i, 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd == std::string::npos) return;  // not a zip: LibTorch says so
  uint64_t entries = little_endian(*tail, eocd + 10, 2);
  uint64_t directory_size = little_endian(*tail, eocd + 12, 4);
  uint64_t directory_offset = little_endian(*tail, eocd + 16, 4);
  // Zip64, which LibTorch always writes: its locator just before, pointing at the zip64 record,
  // whose values miniz then uses (as here) whatever the 32-bit fields say.
  if (eocd >= 20 && little_endian(*tail, eocd - 20, 4) == 0x07064b50) {
    const std::optional<std::string> record = file.read(little_endian(*tail, eocd - 20 + 8, 8), 56);
    if (record && little_endian(*record, 0, 4) == 0x06064b50) {
      entries = little_endian(*record, 32, 8);
      directory_size = little_endian(*record, 40, 8);
      directory_offset = little_endian(*record, 48, 8);
    }
  }
  if (directory_offset > size || directory_size > size - directory_offset || entries > directory_size / 46)
    damaged("its zip directory declares " + std::to_string(entries) + " entries in " +
            std::to_string(directory_size) + " bytes at byte " + std::to_string(directory_offset) +
            " of a " + std::to_string(size) + "-byte file");
  const std::optional<std::string> directory = file.read(directory_offset, directory_size);
  if (!directory) return;
  // Every entry the directory holds, whatever count the end records give (one of which miniz
  // believes: a count cut from 24 to 8 in one field hid data.pkl from a walk that trusted it).
  size_t at = 0;
  while (true) {
    if (directory->size() - at < 46 || little_endian(*directory, at, 4) != 0x02014b50) return;
    const uint64_t method = little_endian(*directory, at + 10, 2);
    uint64_t compressed = little_endian(*directory, at + 20, 4);
    uint64_t uncompressed = little_endian(*directory, at + 24, 4);
    const size_t name_length = little_endian(*directory, at + 28, 2);
    const size_t extra_length = little_endian(*directory, at + 30, 2);
    const size_t comment_length = little_endian(*directory, at + 32, 2);
    uint64_t local = little_endian(*directory, at + 42, 4);
    if (directory->size() - at - 46 < name_length + extra_length + comment_length) return;
    const std::string name = directory->substr(at + 46, name_length);
    // Zip64 sizes and offset: in the extra field with id 1, for each field that reads 0xFFFFFFFF.
    for (size_t e = at + 46 + name_length; e + 4 <= at + 46 + name_length + extra_length;) {
      const uint64_t id = little_endian(*directory, e, 2), length = little_endian(*directory, e + 2, 2);
      size_t field = e + 4;
      const size_t field_end = std::min<size_t>(field + length, at + 46 + name_length + extra_length);
      if (id == 1) {
        for (uint64_t* value : {&uncompressed, &compressed, &local}) {
          if (*value != 0xFFFFFFFF) continue;
          if (field + 8 > field_end) break;
          *value = little_endian(*directory, field, 8);
          field += 8;
        }
      }
      e += 4 + length;
    }
    at += 46 + name_length + extra_length + comment_length;
    if (local > size || compressed > size - local)
      damaged("its entry '" + name + "' declares " + std::to_string(compressed) + " bytes at byte " +
              std::to_string(local) + " of a " + std::to_string(size) + "-byte file");
    // Stored entries are as long as they say; deflate expands at most 1032:1.
    if ((method == 0 && uncompressed != compressed) ||
        (method != 0 && compressed > 0 && uncompressed / 1032 > compressed + 1))
      damaged("its entry '" + name + "' declares " + std::to_string(uncompressed) + " bytes from " +
              std::to_string(compressed) + " stored");
    // Every pickle: data.pkl, constants.pkl and the TorchScript sources' .debug_pkl (unpickled to
    // word a TorchScript error; a 1.7 GB string from one, found by the fuzzer).
    auto ends_with = [&](const char* suffix) {
      const size_t n = std::strlen(suffix);
      return name.size() >= n && name.compare(name.size() - n, n, suffix) == 0;
    };
    const bool pickle = ends_with(".pkl") || ends_with(".debug_pkl");
    if (!pickle || method != 0 || compressed > (uint64_t{64} << 20)) continue;
    const std::optional<std::string> header = file.read(local, 30);
    if (!header || little_endian(*header, 0, 4) != 0x04034b50) continue;
    const uint64_t data = local + 30 + little_endian(*header, 26, 2) + little_endian(*header, 28, 2);
    if (const std::optional<std::string> bytes = file.read(data, compressed)) check_pickle(path, name, *bytes);
  }
}

// The first line of a LibTorch error: torch::jit's ErrorReport adds the TorchScript source around
// the fault and c10::Error a backtrace, neither of which tells a user anything about their file.
std::string first_line(const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.find_first_not_of(" \t") != std::string::npos) return line;
  }
  return "no message";
}

Checkpoint read_checkpoint(const std::string& path) {
  check_archive(path);
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  c10::IValue v;
  if (!archive.try_read("format", v) || !v.isString() || v.toStringRef() != "wxtrain-checkpoint-1")
    throw Error(path + ": not a wxtrain checkpoint (no 'format' = wxtrain-checkpoint-1 entry)");
  Checkpoint c;
  auto required = [&](const char* key) -> const c10::IValue& {
    if (!archive.try_read(key, v)) throw Error(path + ": not a complete wxtrain checkpoint: it lacks '" + key + "'");
    return v;
  };
  // Each entry of the type it is written with: toInt() or toStringRef() on another type would throw
  // c10::Error with a backtrace rather than say which entry is wrong.
  auto integer = [&](const char* key) {
    const c10::IValue& value = required(key);
    if (!value.isInt()) throw Error(path + ": corrupt wxtrain checkpoint: '" + key + "' is not an integer");
    return value.toInt();
  };
  auto text = [&](const char* key) {
    const c10::IValue& value = required(key);
    if (!value.isString()) throw Error(path + ": corrupt wxtrain checkpoint: '" + key + "' is not a string");
    return value.toStringRef();
  };
  c.step = integer("step");
  c.loader.epoch = integer("loader_epoch");
  c.loader.batch_index = integer("loader_batch");
  c.config_text = text("config_text");
  if (archive.try_read("config_overrides", v) && v.isString()) {
    std::istringstream lines(v.toStringRef());
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) c.overrides.push_back(line);
  }
  c.model_name = text("model_name");
  c.world_size = integer("world_size");
  if (archive.try_read("channels", v) && v.isString()) c.channels = v.toStringRef();
  // The ensemble record (absent from older checkpoints: members 0, "unknown").
  if (archive.try_read("ensemble_members", v) && v.isInt()) c.ensemble_members = v.toInt();
  if (archive.try_read("ensemble_group", v) && v.isInt()) c.ensemble_group = std::max<int64_t>(1, v.toInt());
  if (archive.try_read("crps_alpha", v) && v.isDouble()) c.crps_alpha = v.toDouble();
  if (archive.try_read("noise_channels", v) && v.isInt()) c.noise_channels = v.toInt();
  if (archive.try_read("noise_std", v) && v.isDouble()) c.noise_std = v.toDouble();
  if (archive.try_read("noise_correlation", v) && v.isDouble()) c.noise_correlation = v.toDouble();
  torch::Tensor rng;
  if (archive.try_read("rng_state", rng)) {
    check_tensor(path, "rng_state", rng);
    c.rng_state = rng;
  }
  torch::Tensor noise_rng;
  if (archive.try_read("noise_rng_state", noise_rng)) {
    check_tensor(path, "noise_rng_state", noise_rng);
    c.noise_rng_state = noise_rng;
  }
  c.model = read_map(archive, "model", path);
  c.optimizer = read_map(archive, "optimizer", path);
  c.scaler = read_map(archive, "scaler", path);
  c.normalization = read_map(archive, "normalization", path);
  return c;
}

}  // namespace

Checkpoint load_checkpoint(const std::string& path) {
  if (!std::filesystem::exists(path)) throw Error(path + ": checkpoint not found");
  // A damaged file fails anywhere in LibTorch's zip reader, unpickler or TorchScript importer:
  // c10::Error from the first two, torch::jit::ErrorReport (a std::exception) from the last, and
  // from reading an entry of another type than written. Each becomes one message naming the file
  // (found by fuzz/checkpoint_fuzz: a flipped byte in the embedded TorchScript ended the process).
  const std::string prefix = path + ": not a readable wxtrain checkpoint (truncated, damaged or another format?): ";
  try {
    return read_checkpoint(path);
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw Error(prefix + first_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw Error(prefix + first_line(e.what()));
  }
}

TensorMap model_weights(const models::WeatherModelImpl& model) {
  TensorMap map;
  for (const auto& p : model.named_parameters()) map[p.key()] = p.value().detach();
  for (const auto& b : model.named_buffers()) map[b.key()] = b.value().detach();
  return map;
}

WeightLoadReport load_weights(models::WeatherModelImpl& model, const TensorMap& weights, bool strict,
                              const std::string& source, const std::string& remedy) {
  WeightLoadReport report;
  torch::NoGradGuard no_grad;
  std::vector<std::string> shape_errors;
  std::map<std::string, torch::Tensor> own;
  for (const auto& p : model.named_parameters()) own[p.key()] = p.value();
  for (const auto& b : model.named_buffers()) own[b.key()] = b.value();
  for (const auto& [name, target] : own) {
    auto it = weights.find(name);
    if (it == weights.end()) {
      report.missing.push_back(name);
    } else if (it->second.sizes() != target.sizes()) {
      shape_errors.push_back(name + " (checkpoint " + c10::str(it->second.sizes()) + ", model " +
                             c10::str(target.sizes()) + ")");
    } else {
      report.loaded.push_back(name);
    }
  }
  for (const auto& [name, t] : weights)
    if (!own.count(name)) report.unexpected.push_back(name);
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size() && i < 8; ++i) s += (i ? ", " : "") + v[i];
    if (v.size() > 8) s += ", ... (" + std::to_string(v.size()) + " in all)";
    return s;
  };
  if (!shape_errors.empty())
    throw ConfigError(source + ": weights do not fit this model: " + list(shape_errors) +
                      " — is [model] the same architecture as the checkpoint's? (" + remedy + ")");
  if (strict && (!report.missing.empty() || !report.unexpected.empty()))
    throw ConfigError(source + ": strict loading failed: missing " + (report.missing.empty() ? "none" : list(report.missing)) +
                      "; unexpected " + (report.unexpected.empty() ? "none" : list(report.unexpected)) + " (" +
                      remedy + ")");
  for (const auto& name : report.loaded) own[name].copy_(weights.at(name));
  return report;
}

std::optional<models::ModelShape> checkpoint_grid(const Checkpoint& checkpoint, const std::string& path) {
  if (checkpoint.channels.empty()) return std::nullopt;
  try {
    const auto json = nlohmann::json::parse(checkpoint.channels);
    if (!json.contains("grid")) return std::nullopt;
    models::ModelShape grid;
    grid.latitudes = json["grid"].at("lat").get<std::vector<double>>();
    grid.longitudes = json["grid"].at("lon").get<std::vector<double>>();
    grid.lat = static_cast<int64_t>(grid.latitudes.size());
    grid.lon = static_cast<int64_t>(grid.longitudes.size());
    if (json["grid"].value("cells", false)) {
      // A point set: one latitude and longitude per cell (models/weather_model.h).
      grid.point_set = true;
      grid.lat = 1;
    }
    return grid;
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": corrupt wxtrain checkpoint: its grid record does not read (" + e.what() + ")");
  }
}

ChannelNames checkpoint_channels(const Checkpoint& checkpoint, const std::string& path) {
  ChannelNames names;
  if (!checkpoint.channels.empty()) {
    try {
      const auto json = nlohmann::json::parse(checkpoint.channels);
      names.inputs = json.at("inputs").get<std::vector<std::string>>();
      names.outputs = json.at("outputs").get<std::vector<std::string>>();
      return names;
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ": corrupt wxtrain checkpoint: its channels record does not read (" + e.what() + ")");
    }
  }
  // Older checkpoints: the channels follow from the run file they were trained with.
  try {
    const ChannelLayout layout = parse_config(checkpoint.config_text, path + " (its run file)", checkpoint.overrides).channels();
    names.inputs = layout.input_names();
    names.outputs = layout.output_names();
  } catch (const ConfigError& e) {
    throw Error(path + ": cannot tell which channels the checkpoint was trained on: " + e.what());
  }
  return names;
}

}  // namespace wxtrain::trainer
