#include "core/model_options.h"

#include <mutex>

#include "core/config.h"
#include "core/config_reader.h"

namespace wxtrain {
namespace {

std::vector<ModelSchema> (*g_provider)() = nullptr;

}  // namespace

void set_model_schema_provider(std::vector<ModelSchema> (*provider)()) { g_provider = provider; }

const std::vector<ModelSchema>& model_schemas() {
  static const std::vector<ModelSchema> schemas = [] {
    if (!g_provider)
      throw Error("no models are linked into this program: it reads run files, so it must link wxtrain_models "
                  "(whose registry hands the [model] schemas to the parser)");
    return g_provider();
  }();
  return schemas;
}

const ModelSchema* find_model_schema(const std::string& name) {
  for (const auto& s : model_schemas())
    if (s.name == name) return &s;
  return nullptr;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& s : model_schemas()) names.push_back(s.name);
  return names;
}

std::vector<ConfigKey> model_option_catalogue(const ModelSchema& schema) {
  std::vector<ConfigKey> keys;
  KeyCatalogue catalogue(keys);
  const std::unique_ptr<ModelOptions> defaults = schema.make_defaults();
  SectionReader r(nullptr, "", "model", SectionReader::Mode::kDescribe);
  try {
    schema.read(r, *defaults);
  } catch (const ConfigError&) {
    // A rule tying keys together may throw on the bare defaults: the keys are recorded by then.
  }
  return keys;
}

std::vector<std::string> model_option_keys(const ModelSchema& schema) {
  // Asked on every parse for every other model: made once per schema.
  static std::mutex mutex;
  static std::vector<std::pair<std::string, std::vector<std::string>>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [name, keys] : cache)
    if (name == schema.name) return keys;
  std::vector<std::string> keys;
  for (const auto& k : model_option_catalogue(schema)) keys.push_back(k.key.substr(k.key.find('.') + 1));
  cache.emplace_back(schema.name, keys);
  return keys;
}

namespace {

const ModelSchema& schema_of(const ModelConfig& config) {
  const ModelSchema* schema = find_model_schema(config.name);
  if (!schema)
    throw ConfigError("model.name = '" + config.name + "' is not a model: expected one of " +
                      join_list(model_names()) + did_you_mean(config.name, model_names()));
  return *schema;
}

}  // namespace

void check_model_options(const ModelConfig& config) {
  const ModelSchema& schema = schema_of(config);
  ModelOptionsBox options = config.options;  // read() writes what it checks back: a copy
  if (options.empty()) options = ModelOptionsBox(schema.make_defaults());
  SectionReader r(nullptr, "", "model", SectionReader::Mode::kCheckValues);
  schema.read(r, *options.get());
}

std::string model_options_text(const ModelConfig& config) {
  const ModelSchema& schema = schema_of(config);
  ModelOptionsBox options = config.options;
  if (options.empty()) options = ModelOptionsBox(schema.make_defaults());
  std::vector<ConfigKey> keys;
  {
    KeyCatalogue catalogue(keys);
    SectionReader r(nullptr, "", "model", SectionReader::Mode::kDescribe);
    try {
      schema.read(r, *options.get());
    } catch (const ConfigError&) {
      // A rule tying keys together may throw: the keys are recorded by then.
    }
  }
  std::string text;
  for (const auto& k : keys)
    if (!k.default_value.empty()) text += k.key.substr(k.key.find('.') + 1) + " = " + k.default_value + "\n";
  return text;
}

}  // namespace wxtrain
