#include "trainer/reference_init.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/config_reader.h"
#include "core/error.h"
#include "data/normalization.h"
#include "interop/reference_checkpoint.h"

namespace wxtrain::trainer {

bool is_reference_checkpoint(const std::string& path) {
  return interop::checkpoint_kind(path) != interop::CheckpointKind::kWxtrain;
}

Checkpoint load_reference_checkpoint(const std::string& path, const RunConfig& config, std::string* report) {
  if (!std::filesystem::exists(path)) throw Error(path + ": checkpoint not found");
  const models::ModelShape shape = models::model_shape(config);
  const interop::ImportedModel imported = interop::import_reference_checkpoint(path, &config.model, &shape);
  const ChannelLayout layout = config.channels();
  const std::string fix = " (wxtrain import " + path + " writes the run-file lines that match it)";
  if (imported.has_args) {
    const std::vector<std::string> differences = interop::model_differences(imported.model, config.model);
    if (!differences.empty())
      throw ConfigError(path + ": its args.json builds another network than the run's [model]: " + join_list(differences, "; ") + fix);
  }
  if (config.train.prediction != "state")
    throw ConfigError(path + ": " + imported.reference + " predicts the next state, but the run has train.prediction = \"" +
                      config.train.prediction + "\": set train.prediction = \"state\" to start from its weights" + fix);
  // Its channels: recorded by the file, or the run's own when the counts agree.
  std::vector<std::string> inputs = imported.input_channels, outputs = imported.output_channels;
  if (inputs.empty()) {
    if (imported.shape.in_channels != shape.in_channels || imported.shape.out_channels != shape.out_channels)
      throw ConfigError(path + ": the model takes " + std::to_string(imported.shape.in_channels) + " input and gives " +
                        std::to_string(imported.shape.out_channels) + " output channels, the run's data " +
                        std::to_string(shape.in_channels) + " and " + std::to_string(shape.out_channels) +
                        " (the file does not name its channels: they are matched to the run's by position, in the order "
                        "of [[data.sources]], then forcings and static fields)" + fix);
    // Matched by position: where the reference reads a fixed order, the run's must be it, or the
    // weights would meet other channels than they were trained on.
    if (imported.check_channels)
      if (const std::string problem = imported.check_channels(layout); !problem.empty())
        throw ConfigError(path + ": " + problem);
    inputs = layout.input_names();
    outputs = layout.output_names();
  }
  Checkpoint c;
  c.model = imported.weights;
  c.model_name = config.model.name;
  c.channels = nlohmann::json{{"inputs", inputs},
                              {"outputs", outputs},
                              {"grid", {{"lat", imported.latitudes}, {"lon", imported.longitudes}}}}
                   .dump();
  if (imported.means.defined()) {
    // One statistic per input channel: "t_850@t-1" and "t_850@t0" share t_850's.
    if (imported.means.numel() != static_cast<int64_t>(inputs.size()))
      throw ConfigError(imported.statistics_from + ": " + std::to_string(imported.means.numel()) +
                        " channels, but the model's input has " + std::to_string(inputs.size()));
    std::vector<std::string> names;
    std::vector<int64_t> first;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string name = inputs[i].substr(0, inputs[i].find('@'));
      if (std::find(names.begin(), names.end(), name) != names.end()) continue;
      names.push_back(name);
      first.push_back(static_cast<int64_t>(i));
    }
    const torch::Tensor index = torch::tensor(first, torch::kInt64);
    c.normalization = data::Normalization(names, imported.means.index_select(0, index).contiguous(),
                                          imported.stds.index_select(0, index).contiguous())
                          .to_map();
  }
  if (report) *report = imported.summary();
  return c;
}

}  // namespace wxtrain::trainer
