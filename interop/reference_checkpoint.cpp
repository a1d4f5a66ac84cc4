#include "interop/reference_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/atomic_file.h"
#include "core/config_reader.h"
#include "core/error.h"
#include "interop/archive.h"
#include "interop/npy.h"
#include "interop/torch_pickle.h"
#include "models/registry.h"

namespace wxtrain::interop {
namespace fs = std::filesystem;

namespace {

// PhysicsNeMo still loads files that name Modulus' modules (module.py maps the prefix); so do we.
std::string physicsnemo_module(const std::string& module) {
  if (module.rfind("modulus.", 0) == 0) return "physicsnemo." + module.substr(8);
  return module;
}

struct Found {
  const models::ModelEntry* entry = nullptr;
  const models::ReferenceModel* reference = nullptr;
};

Found find_reference(const std::string& cls, const std::string& module, const std::string& source) {
  std::vector<std::string> known;
  for (const models::ModelEntry& entry : models::model_registry()) {
    for (const models::ReferenceModel& reference : entry.references) {
      if (reference.python_class == cls && reference.python_module == physicsnemo_module(module)) return {&entry, &reference};
      known.push_back(reference.python_module + "." + reference.python_class + " (" + entry.schema.name + ")");
    }
  }
  throw ConfigError(source + ": args.json names " + module + "." + cls + ", whose checkpoints wxtrain does not read; it reads " +
                    (known.empty() ? std::string("none") : join_list(known)));
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

nlohmann::json parse_json(const std::string& text, const std::string& source) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + ": not valid JSON (" + std::string(e.what()) + ")");
  }
}

// Rethrows a ConfigError of the mapping with the file in front: "fcn.mdlus: args.json: AFNO argument ...".
template <typename F>
auto naming(const std::string& source, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ConfigError& e) {
    throw ConfigError(source + ": " + e.what());
  }
}

// "key = value" lines of a model's options, by key.
std::map<std::string, std::string> option_values(const ModelConfig& config) {
  std::map<std::string, std::string> out;
  std::istringstream lines(model_options_text(config));
  for (std::string line; std::getline(lines, line);) {
    const size_t eq = line.find(" = ");
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

void read_statistics(ImportedModel& m) {
  const fs::path folder = fs::path(m.path).parent_path();
  const fs::path means = folder / "global_means.npy", stds = folder / "global_stds.npy";
  const bool has_means = fs::exists(means), has_stds = fs::exists(stds);
  if (!has_means && !has_stds) return;
  if (has_means != has_stds)
    throw Error(m.path + ": beside it is " + (has_means ? means : stds).string() + " but not " +
                (has_means ? stds : means).string() + ": the statistics come as a pair");
  m.means = read_npy(means.string()).flatten();
  m.stds = read_npy(stds.string()).flatten();
  if (m.means.numel() != m.stds.numel())
    throw Error(means.string() + " holds " + std::to_string(m.means.numel()) + " values but " + stds.string() + " " +
                std::to_string(m.stds.numel()) + ": expected one mean and one standard deviation per channel");
  if ((m.stds <= 0).any().item<bool>() || !torch::isfinite(m.stds).all().item<bool>())
    throw Error(stds.string() + ": every standard deviation must be positive and finite");
  m.statistics_from = "global_means.npy, global_stds.npy in " + (folder.empty() ? std::string(".") : folder.string());
}

}  // namespace

const char* describe(CheckpointKind kind) {
  switch (kind) {
    case CheckpointKind::kWxtrain: return "wxtrain checkpoint";
    case CheckpointKind::kMdlus: return "PhysicsNeMo .mdlus";
    case CheckpointKind::kStateDict: return "torch.save state_dict";
  }
  return "checkpoint";
}

CheckpointKind checkpoint_kind(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return CheckpointKind::kWxtrain;  // its reader says the file is missing
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  if (is_tar(head)) return CheckpointKind::kMdlus;
  if (!is_zip(head) || head.size() < 30) return CheckpointKind::kWxtrain;
  auto le = [&](size_t at, int width) {
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(head[at + i]);
    return v;
  };
  // The first entry says most: PhysicsNeMo writes model.pt first, torch.save and LibTorch data.pkl.
  const size_t name_length = le(26, 2), extra_length = le(28, 2);
  const std::string first = head.substr(30, std::min(name_length, head.size() - 30));
  if (first == "model.pt" || first == "args.json" || first == "metadata.json") return CheckpointKind::kMdlus;
  if (first.size() >= 8 && first.compare(first.size() - 8, 8, "data.pkl") == 0 && 30 + name_length + extra_length < head.size()) {
    // A TorchScript archive (LibTorch's, which wxtrain train writes) pickles a __torch__ class first.
    const std::string pickle = head.substr(30 + name_length + extra_length, 256);
    return pickle.find("__torch__") != std::string::npos ? CheckpointKind::kWxtrain : CheckpointKind::kStateDict;
  }
  try {
    const Archive archive = read_archive(read_file_bytes(path), path);
    if (archive.files.count("model.pt") && archive.files.count("args.json")) return CheckpointKind::kMdlus;
    bool pickle = false, torchscript = false;
    for (const auto& [name, data] : archive.files) {
      pickle = pickle || name.find("data.pkl") != std::string::npos;
      torchscript = torchscript || name.find("constants.pkl") != std::string::npos;
    }
    if (pickle && !torchscript) return CheckpointKind::kStateDict;
  } catch (const Error&) {
    // Not for us to judge: the wxtrain reader names the file and what is wrong.
  }
  return CheckpointKind::kWxtrain;
}

ImportedModel import_reference_checkpoint(const std::string& path, const ModelConfig* run_model,
                                          const models::ModelShape* run_shape) {
  ImportedModel m;
  m.path = path;
  const std::string bytes = read_file_bytes(path);
  const bool container = is_tar(bytes) || (is_zip(bytes) && checkpoint_kind(path) == CheckpointKind::kMdlus);
  if (container) {
    const Archive archive = read_archive(bytes, path);
    m.container = std::string(archive.format == "zip" ? "PhysicsNeMo .mdlus (zip)" : "Modulus/PhysicsNeMo .mdlus (tar)");
    for (const char* required : {"args.json", "model.pt"})
      if (!archive.files.count(required))
        throw Error(path + ": a .mdlus without " + required + " (it holds model.pt, args.json and metadata.json)");
    const nlohmann::json args = parse_json(archive.files.at("args.json"), path + ": args.json");
    if (!args.is_object() || !args.contains("__name__") || !args.contains("__module__") || !args.contains("__args__") ||
        !args["__name__"].is_string() || !args["__module__"].is_string())
      throw Error(path + ": args.json lacks \"__name__\", \"__module__\" or \"__args__\" (PhysicsNeMo writes all three)");
    const std::string cls = args["__name__"], module = args["__module__"];
    const Found found = find_reference(cls, module, path);
    m.reference = physicsnemo_module(module) + "." + cls;
    m.model_name = found.entry->schema.name;
    m.channel_order = found.reference->channel_order;
    m.check_channels = found.reference->check_channels;
    m.args = args["__args__"];
    m.has_args = true;
    std::tie(m.model, m.shape) = naming(path + ": args.json", [&] { return found.reference->from_reference_args(m.args); });
    if (archive.files.count("metadata.json")) {
      m.metadata = parse_json(archive.files.at("metadata.json"), path + ": metadata.json");
      if (m.metadata.is_object() && m.metadata.contains("wxtrain_channels")) {
        try {
          m.input_channels = m.metadata["wxtrain_channels"].at("inputs").get<std::vector<std::string>>();
          m.output_channels = m.metadata["wxtrain_channels"].at("outputs").get<std::vector<std::string>>();
        } catch (const nlohmann::json::exception& e) {
          throw Error(path + ": metadata.json's wxtrain_channels does not read (" + std::string(e.what()) + ")");
        }
      }
    }
    const models::StateDict state =
        state_dict_of(read_torch_save(archive.files.at("model.pt"), path + ": model.pt"), path + ": model.pt", &m.state_from);
    m.weights = naming(path, [&] { return found.reference->from_reference_state(state, m.model, m.shape); });
  } else if (is_zip(bytes)) {
    m.container = "torch.save state_dict";
    if (!run_model || !run_shape)
      throw ConfigError(path + ": a bare state_dict does not say its architecture: give the run file whose [model] "
                               "builds it (the .mdlus of a PhysicsNeMo model carries its own)");
    const models::ModelEntry& entry = models::find_model(run_model->name);
    if (entry.references.empty()) {
      std::vector<std::string> with;
      for (const auto& e : models::model_registry())
        if (!e.references.empty()) with.push_back(e.schema.name);
      throw ConfigError(path + ": model.name = \"" + run_model->name + "\" is wxtrain's own design; state_dicts of a "
                        "reference implementation load into " + (with.empty() ? std::string("no model") : join_list(with)));
    }
    const models::StateDict state = state_dict_of(read_torch_save(bytes, path), path, &m.state_from);
    std::string first_error;
    for (const models::ReferenceModel& reference : entry.references) {
      try {
        m.weights = reference.from_reference_state(state, *run_model, *run_shape);
        m.reference = reference.python_module + "." + reference.python_class;
        m.channel_order = reference.channel_order;
        m.check_channels = reference.check_channels;
        break;
      } catch (const ConfigError& e) {
        if (first_error.empty()) first_error = e.what();
      }
    }
    if (m.reference.empty()) throw ConfigError(path + ": " + first_error);
    m.model_name = run_model->name;
    m.model = *run_model;
    m.shape = *run_shape;
  } else {
    throw Error(path + ": neither a .mdlus (zip or tar) nor a torch.save file");
  }
  for (const auto& [name, t] : m.weights) m.values += t.numel();
  if (m.metadata.is_object() && m.metadata.contains("wxtrain_grid")) {
    try {
      m.latitudes = m.metadata["wxtrain_grid"].at("lat").get<std::vector<double>>();
      m.longitudes = m.metadata["wxtrain_grid"].at("lon").get<std::vector<double>>();
      m.grid_recorded = true;
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ": metadata.json's wxtrain_grid does not read (" + std::string(e.what()) + ")");
    }
  } else if (static_cast<int64_t>(m.shape.latitudes.size()) == m.shape.lat &&
             static_cast<int64_t>(m.shape.longitudes.size()) == m.shape.lon && m.shape.lat > 0) {
    // The reference builds on a grid of its own (GraphCastNet: south first, longitudes -180..180).
    m.latitudes = m.shape.latitudes;
    m.longitudes = m.shape.longitudes;
    m.grid_from_reference = true;
  } else {
    for (int64_t i = 0; i < m.shape.lat; ++i)
      m.latitudes.push_back(90.0 - 180.0 * static_cast<double>(i) / static_cast<double>(m.shape.lat));
    for (int64_t j = 0; j < m.shape.lon; ++j)
      m.longitudes.push_back(360.0 * static_cast<double>(j) / static_cast<double>(m.shape.lon));
  }
  read_statistics(m);
  return m;
}

std::string ImportedModel::summary() const {
  std::string s = path + ": " + container + " of " + reference + "\n";
  s += std::string("  architecture ") + (has_args ? "from args.json" : "from the run's [model]") + ": " + model_name + ", " +
       std::to_string(shape.in_channels) + " -> " + std::to_string(shape.out_channels) + " channels on " +
       std::to_string(shape.lat) + " x " + std::to_string(shape.lon) + "\n";
  s += "  weights: " + std::to_string(weights.size()) + " tensors, " + with_commas(values) + " values" +
       (state_from.empty() ? "" : " (" + state_from + ")") + ", mapped onto " + model_name + "'s names\n";
  if (means.defined())
    s += "  statistics: " + statistics_from + " (" + std::to_string(means.numel()) + " channels)\n";
  else
    s += "  statistics: none beside it (global_means.npy, global_stds.npy)\n";
  auto degrees = [](double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  if (grid_recorded)
    s += "  grid: as metadata.json records it\n";
  else if (grid_from_reference)
    s += "  grid: the reference's own, latitudes " + degrees(latitudes.front()) + " .. " + degrees(latitudes.back()) +
         ", longitudes " + degrees(longitudes.front()) + " .. " + degrees(longitudes.back()) + "\n";
  else
    s += "  grid: taken as global, from 90N and 0E\n";
  if (!input_channels.empty())
    s += "  channels: " + std::to_string(input_channels.size()) + " in, " + std::to_string(output_channels.size()) +
         " out, as metadata.json records them\n";
  return s;
}

std::vector<std::string> model_differences(const ModelConfig& imported, const ModelConfig& run) {
  if (imported.name != run.name) return {"model.name = \"" + imported.name + "\" (the file) but \"" + run.name + "\" (the run)"};
  std::vector<std::string> out;
  const auto theirs = option_values(imported), ours = option_values(run);
  for (const auto& [key, value] : theirs) {
    const auto it = ours.find(key);
    if (it != ours.end() && it->second != value)
      out.push_back("model." + key + " = " + value + " (the file) but " + it->second + " (the run)");
  }
  return out;
}

std::vector<std::string> export_mdlus(const MdlusExport& r) {
  const models::ModelEntry& entry = models::find_model(r.model.name);
  if (entry.references.empty())
    throw ConfigError("model.name = \"" + r.model.name + "\" is wxtrain's own design: it has no reference "
                      "implementation to export to (.mdlus files are written for models that have one)");
  const models::ReferenceModel& reference = entry.references.front();
  const nlohmann::json args = reference.to_reference_args(r.model, r.shape);
  const models::StateDict state = reference.to_reference_state(r.weights, r.model, r.shape);
  nlohmann::json metadata = {{"mdlus_file_version", "0.1.0"}, {"exported_by", "wxtrain export"}, {"source", r.source}};
  if (!r.input_channels.empty())
    metadata["wxtrain_channels"] = {{"inputs", r.input_channels}, {"outputs", r.output_channels}};
  if (static_cast<int64_t>(r.shape.latitudes.size()) == r.shape.lat && static_cast<int64_t>(r.shape.longitudes.size()) == r.shape.lon &&
      r.shape.lat > 0)
    metadata["wxtrain_grid"] = {{"lat", r.shape.latitudes}, {"lon", r.shape.longitudes}};
  const nlohmann::json args_file = {{"__name__", reference.python_class}, {"__module__", reference.python_module},
                                    {"__args__", args}};
  const std::string zip = write_stored_zip(
      {{"model.pt", write_torch_state_dict(state)}, {"args.json", args_file.dump()}, {"metadata.json", metadata.dump()}});
  write_file_atomically(r.path, zip);
  std::vector<std::string> written = {r.path};
  if (r.means.defined()) {
    const fs::path folder = fs::path(r.path).parent_path();
    const int64_t c = r.means.numel();
    const std::string means = (folder / "global_means.npy").string(), stds = (folder / "global_stds.npy").string();
    write_npy(means, r.means.reshape({1, c, 1, 1}));
    write_npy(stds, r.stds.reshape({1, c, 1, 1}));
    written.push_back(means);
    written.push_back(stds);
  }
  return written;
}

}  // namespace wxtrain::interop
