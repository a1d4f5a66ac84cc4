#pragma once
// The zoo as one table. Each architecture is described once, in its own folder, and registered
// by name here: its options (read from [model] by its schema, with ranges, rules, key docs and the
// published presets), its builder, its parameter count and activation formulas for
// `estimate --analytic`, the graph buffers a trace counts, and the GPU libraries its step calls.
// The model factory, the run-file parser (through core/model_options.h), the key catalogue
// (docs/config.md), the analytic estimator and the GPU overhead model read this table; no other
// file names a model.
//
// Adding an architecture: a folder models/<name>/ with the network (<name>.h/.cpp, ending in
// <name>_entry()), its options (<name>_options.h/.cpp) and its formulas (<name>_memory.cpp); its
// name in WXTRAIN_ZOO (models/CMakeLists.txt), its declaration and table line in registry.cpp, and
// its schema in fuzz/model_schemas.cpp (tests/models/check_model_names.sh fails until all are
// there). docs/architecture.md walks through an example.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/config.h"
#include "models/memory_formula.h"
#include "models/reference_model.h"
#include "models/weather_model.h"

namespace wxtrain::models {

// Which CUDA libraries a training step of the model calls: each costs its kernels in the context
// and cuBLAS its workspaces (estimator/gpu_overhead.h).
struct GpuLibraries {
  bool gemms = true;         // Linear layers and matmuls: cuBLAS
  bool convolutions = true;  // Conv2d (patch embeddings too): cuDNN
};

// A setting of a model's own that lowers its memory, offered by `estimate` and `tune-batch` beside
// the generic ones (checkpointing, precision, ZeRO).
struct ModelMemorySaver {
  std::string setting;                   // as the run file says it: "model.encoder_chunks = 8, ..."
  std::function<void(RunConfig&)> apply;  // the change
};

struct ModelEntry {
  ModelSchema schema;  // name, summary, options and presets (core/model_options.h)
  std::function<WeatherModel(const ModelConfig&, const ModelShape&)> build;
  // estimate --analytic: parameters by formula (no tensors), activations block by block.
  std::function<int64_t(const ModelConfig&, const ModelShape&)> parameter_count;
  std::function<ModelMemory(const ModelConfig&, const ModelShape&, const FormulaSettings&)> activation_memory;
  // Bytes of the buffers the model holds beyond its parameters (graphs, index tables), which the
  // trace counts with the model states; `param_bytes` is the width buffers are cast to.
  std::function<double(const ModelConfig&, const ModelShape&, double param_bytes)> buffer_bytes;
  GpuLibraries gpu_libraries;
  // The reference implementations whose checkpoints this architecture reads and writes
  // (models/reference_model.h); empty for our own designs.
  std::vector<ReferenceModel> references;
  // Takes an ensemble's noise through conditional LayerNorms (train.noise_injection =
  // "conditional_norm", ModelShape::conditional_noise); else only as input channels.
  bool conditional_noise = false;
  // The model's own memory savers for this run, in the order to offer them (`inference`: for a
  // forward pass); unset when it has none.
  std::function<std::vector<ModelMemorySaver>(const RunConfig&, bool inference)> memory_savers;
};

// Typed wrappers: the functions take the model's own options struct.
template <typename Options, typename Network>
ModelEntry make_model_entry(ModelSchema schema,
                            int64_t (*parameter_count)(const Options&, const ModelShape&),
                            ModelMemory (*activation_memory)(const Options&, const ModelShape&, const FormulaSettings&),
                            GpuLibraries gpu_libraries,
                            double (*buffer_bytes)(const Options&, const ModelShape&, double) = nullptr) {
  ModelEntry e;
  e.schema = std::move(schema);
  e.build = [](const ModelConfig& c, const ModelShape& s) -> WeatherModel {
    return std::make_shared<Network>(c.options.as<Options>(), s);
  };
  e.parameter_count = [parameter_count](const ModelConfig& c, const ModelShape& s) {
    return parameter_count(c.options.as<Options>(), s);
  };
  e.activation_memory = [activation_memory](const ModelConfig& c, const ModelShape& s, const FormulaSettings& f) {
    return activation_memory(c.options.as<Options>(), s, f);
  };
  e.buffer_bytes = [buffer_bytes](const ModelConfig& c, const ModelShape& s, double param_bytes) {
    return buffer_bytes ? buffer_bytes(c.options.as<Options>(), s, param_bytes) : 0.0;
  };
  e.gpu_libraries = gpu_libraries;
  return e;
}

// Every architecture, in the order names are listed to users (model.name's first is the default).
const std::vector<ModelEntry>& model_registry();
// The entry of `name`; a ConfigError naming the accepted ones (with a did-you-mean) otherwise.
const ModelEntry& find_model(const std::string& name);

}  // namespace wxtrain::models
