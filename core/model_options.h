#pragma once
// The [model] table belongs to the models. core reads `name` and `preset`; everything else is the
// chosen model's own options struct (models/<name>/<name>_options.h), read and checked by that
// model's schema. core knows the schemas only through this interface: the models' registry
// (models/registry.cpp) hands them over before main() runs, so the run-file parser, the key
// catalogue and the presets all follow the registry without naming a model.
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/error.h"

namespace wxtrain {

class SectionReader;
struct ConfigKey;

// A model's options: a plain struct deriving from ModelOptionsOf<Itself>.
class ModelOptions {
 public:
  virtual ~ModelOptions() = default;
  virtual std::unique_ptr<ModelOptions> clone() const = 0;
};

template <typename Derived>
class ModelOptionsOf : public ModelOptions {
 public:
  std::unique_ptr<ModelOptions> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};

// A published configuration by name: `[model] preset = "graphcast-0.25"` fills the [model] keys of
// the paper's model and, for a run file without data sources (an estimate before the data exists),
// the [data] shape of its inputs and outputs. Keys the run file sets itself win; a run file with
// [[data.sources]] keeps its own data. Each preset cites where its figures come from;
// docs/estimator.md sets the parameter counts and memory beside the papers'.
struct ModelPreset {
  std::string name;       // the value of model.preset
  std::string summary;    // one line: the model, its grid, its channels
  std::string citation;   // the paper (and table) the figures come from
  std::string model_toml; // [model] keys, TOML (with the model's name)
  std::string data_toml;  // [data] keys for a run file without sources, TOML
};

// What the run-file parser needs of one architecture.
struct ModelSchema {
  std::string name;     // model.name
  std::string summary;  // one line for docs/config.md
  std::function<std::unique_ptr<ModelOptions>()> make_defaults;
  // Reads the model's keys from the [model] reader into `options` (its defaults, or values set in
  // code when the reader checks values), then checks the rules that tie keys together, failing
  // through the reader (file, line, key). The one place a model's option rules live.
  std::function<void(SectionReader&, ModelOptions&)> read;
  std::vector<ModelPreset> presets;
  // distributed.model_parallel: the model splits its grid over the ranks of a group
  // (WeatherModelImpl::set_node_shard); the run file is refused for the others.
  bool shards_grid = false;
};

// Builds a schema from a typed reader: `read(reader, UNetOptions&)`.
template <typename Options>
ModelSchema make_model_schema(std::string name, std::string summary, void (*read)(SectionReader&, Options&),
                              std::vector<ModelPreset> presets = {}) {
  return {std::move(name), std::move(summary), [] { return std::make_unique<Options>(); },
          [read](SectionReader& r, ModelOptions& o) { read(r, dynamic_cast<Options&>(o)); }, std::move(presets)};
}

// The registered schemas, in registry order. The provider is called once, on first use; a program
// that reads run files without linking the models (a bug) gets a clear error, not an empty zoo.
void set_model_schema_provider(std::vector<ModelSchema> (*provider)());
const std::vector<ModelSchema>& model_schemas();
const ModelSchema* find_model_schema(const std::string& name);  // nullptr when there is none
std::vector<std::string> model_names();
// The keys a model's schema reads (without name and preset), in the order it reads them.
std::vector<std::string> model_option_keys(const ModelSchema& schema);
// Each key of the model's schema with its type, default, range and meaning (key "model.<key>").
std::vector<ConfigKey> model_option_catalogue(const ModelSchema& schema);

// A model's options, held by value (copies clone). Empty until the run file is read or a caller
// asks for a type: then it holds that type's defaults.
class ModelOptionsBox {
 public:
  ModelOptionsBox() = default;
  explicit ModelOptionsBox(std::unique_ptr<ModelOptions> options) : options_(std::move(options)) {}
  ModelOptionsBox(const ModelOptionsBox& other) : options_(other.options_ ? other.options_->clone() : nullptr) {}
  ModelOptionsBox& operator=(const ModelOptionsBox& other) {
    options_ = other.options_ ? other.options_->clone() : nullptr;
    return *this;
  }
  ModelOptionsBox(ModelOptionsBox&&) = default;
  ModelOptionsBox& operator=(ModelOptionsBox&&) = default;

  bool empty() const { return options_ == nullptr; }
  const ModelOptions* get() const { return options_.get(); }
  ModelOptions* get() { return options_.get(); }

  template <typename Options>
  const Options& as() const {
    if (!options_) {
      static const Options defaults;
      return defaults;
    }
    const auto* typed = dynamic_cast<const Options*>(options_.get());
    if (!typed) throw_mismatch(typeid(Options));
    return *typed;
  }
  template <typename Options>
  Options& as() {
    if (!options_) options_ = std::make_unique<Options>();
    auto* typed = dynamic_cast<Options*>(options_.get());
    if (!typed) throw_mismatch(typeid(Options));
    return *typed;
  }

 private:
  // Options set in code for one model and read as another's: a programmer's error.
  [[noreturn]] void throw_mismatch(const std::type_info& asked) const {
    const ModelOptions& held = *options_;
    throw ConfigError(std::string("[model]: the options held (") + typeid(held).name() +
                      ") are not those asked for (" + asked.name() + "): set model.name before its options");
  }

  std::unique_ptr<ModelOptions> options_;
};

}  // namespace wxtrain
