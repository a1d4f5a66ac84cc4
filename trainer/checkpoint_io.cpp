#include "trainer/checkpoint_io.h"

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"

namespace wxtrain::trainer {

namespace {

void write_map(torch::serialize::OutputArchive& root, const std::string& key, const TensorMap& map) {
  torch::serialize::OutputArchive nested;
  for (const auto& [name, tensor] : map) nested.write(name, tensor.detach().cpu());
  root.write(key, nested);
}

TensorMap read_map(torch::serialize::InputArchive& root, const std::string& key) {
  torch::serialize::InputArchive nested;
  TensorMap map;
  if (!root.try_read(key, nested)) return map;
  for (const auto& name : nested.keys()) {
    torch::Tensor t;
    nested.read(name, t);
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
  if (c.rng_state.defined()) archive.write("rng_state", c.rng_state);
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

Checkpoint load_checkpoint(const std::string& path) {
  if (!std::filesystem::exists(path)) throw Error(path + ": checkpoint not found");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const c10::Error& e) {
    throw Error(path + ": not a readable wxtrain checkpoint (truncated or another format?): " +
                e.what_without_backtrace());
  }
  c10::IValue v;
  if (!archive.try_read("format", v) || !v.isString() || v.toStringRef() != "wxtrain-checkpoint-1")
    throw Error(path + ": not a wxtrain checkpoint (no 'format' = wxtrain-checkpoint-1 entry)");
  Checkpoint c;
  auto required = [&](const char* key) {
    if (!archive.try_read(key, v)) throw Error(path + ": not a complete wxtrain checkpoint: it lacks '" + key + "'");
    return v;
  };
  c.step = required("step").toInt();
  c.loader.epoch = required("loader_epoch").toInt();
  c.loader.batch_index = required("loader_batch").toInt();
  c.config_text = required("config_text").toStringRef();
  if (archive.try_read("config_overrides", v)) {
    std::istringstream lines(v.toStringRef());
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) c.overrides.push_back(line);
  }
  c.model_name = required("model_name").toStringRef();
  c.world_size = required("world_size").toInt();
  torch::Tensor rng;
  if (archive.try_read("rng_state", rng)) c.rng_state = rng;
  c.model = read_map(archive, "model");
  c.optimizer = read_map(archive, "optimizer");
  c.scaler = read_map(archive, "scaler");
  c.normalization = read_map(archive, "normalization");
  return c;
}

TensorMap model_weights(const models::WeatherModelImpl& model) {
  TensorMap map;
  for (const auto& p : model.named_parameters()) map[p.key()] = p.value().detach();
  for (const auto& b : model.named_buffers()) map[b.key()] = b.value().detach();
  return map;
}

WeightLoadReport load_weights(models::WeatherModelImpl& model, const TensorMap& weights, bool strict,
                              const std::string& source) {
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
    throw Error(source + ": weights do not fit this model: " + list(shape_errors) +
                " — is [model] the same architecture as the checkpoint's?");
  if (strict && (!report.missing.empty() || !report.unexpected.empty()))
    throw Error(source + ": strict loading failed: missing " + (report.missing.empty() ? "none" : list(report.missing)) +
                "; unexpected " + (report.unexpected.empty() ? "none" : list(report.unexpected)) +
                " (set train.strict = false to load what matches)");
  for (const auto& name : report.loaded) own[name].copy_(weights.at(name));
  return report;
}

}  // namespace wxtrain::trainer
