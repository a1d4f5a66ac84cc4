// wxtrain import / wxtrain export: a reference implementation's checkpoint in (the run-file lines
// that fine-tune from it), a wxtrain checkpoint out (a .mdlus PhysicsNeMo and Earth2Studio load).
// The files themselves are interop/'s; these commands only connect them to run files.
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "cli/run_setup.h"
#include "core/atomic_file.h"
#include "core/config_reader.h"
#include "core/error.h"
#include "data/normalization.h"
#include "interop/reference_checkpoint.h"
#include "models/weather_model.h"
#include "trainer/checkpoint_io.h"

namespace wxtrain::cli {
namespace fs = std::filesystem;

namespace {

struct ImportArgs {
  std::string package;
  std::string output;  // "" = stdout
  RunOptions run;      // for a bare state_dict: the run file whose [model] builds it
};

// A package folder (Earth2Studio's: fcn.mdlus with its statistics) holds one .mdlus.
std::string checkpoint_in(const std::string& package) {
  if (!fs::is_directory(package)) return package;
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(package))
    if (entry.path().extension() == ".mdlus") found.push_back(entry.path().string());
  if (found.size() != 1)
    throw ConfigError(package + ": a package folder must hold exactly one .mdlus file, it holds " +
                      (found.empty() ? std::string("none") : join_list(found)));
  return found.front();
}

// A TOML string literal. Not `quoted`: std::quoted (<iomanip>) wins that name by argument-dependent lookup.
std::string toml_quoted(const std::string& s) { return toml_text(s); }

int run_import(const ImportArgs& args) {
  const std::string path = checkpoint_in(args.package);
  interop::ImportedModel imported;
  if (!args.run.config_path.empty()) {
    const RunSetup run = setup_run(args.run);
    const models::ModelShape shape = models::model_shape(run.config);
    imported = interop::import_reference_checkpoint(path, &run.config.model, &shape);
    // The run's channels, where the reference reads a fixed order and the file does not name them.
    if (imported.check_channels && imported.input_channels.empty())
      if (const std::string problem = imported.check_channels(run.channels); !problem.empty())
        throw ConfigError(args.run.config_path + ": " + problem);
  } else {
    imported = interop::import_reference_checkpoint(path);
  }
  std::cerr << imported.summary();
  const std::string absolute = fs::absolute(path).lexically_normal().string();
  std::string toml = "# wxtrain import " + path + "\n# " + imported.container + " of " + imported.reference + "\n";
  toml += "# The model takes " + std::to_string(imported.shape.in_channels) + " input channels and gives " +
          std::to_string(imported.shape.out_channels) + " on a " + std::to_string(imported.shape.lat) + " x " +
          std::to_string(imported.shape.lon) + " grid (data.grid, or a data.region of it).\n";
  if (!imported.input_channels.empty()) {
    toml += "# Its input channels, as the file records them: " + join_list(imported.input_channels) + "\n";
  } else if (!imported.channel_order.empty()) {
    // Wrapped at the list's commas, as a comment.
    std::string line = "# It reads them in a fixed order, which the file does not record: " + imported.channel_order +
                       ". List [[data.sources]] and [[data.static]] in that order (init_from refuses another).";
    std::string wrapped;
    while (line.size() > 100) {
      const size_t cut = line.rfind(' ', 100);
      wrapped += line.substr(0, cut) + "\n";
      line = "#   " + line.substr(cut + 1);
    }
    toml += wrapped + line + "\n";
  } else {
    toml += "# The file does not name its channels: list [[data.sources]] (then forcings and static fields)\n"
            "# in the order the model was trained with; they are matched by position.\n";
  }
  toml += "\n[model]\nname = " + toml_quoted(imported.model.name) + "\n" + model_options_text(imported.model);
  toml += "\n[train]\ninit_from = " + toml_quoted(absolute) + "\n";
  toml += "prediction = \"state\"  # " + imported.reference + " predicts the next state, not a tendency\n";
  if (imported.means.defined())
    toml += "# init_from brings the statistics beside it (" + imported.statistics_from + ", " +
            std::to_string(imported.means.numel()) + " channels): a fine-tune scales its inputs as the model was trained.\n";
  if (args.output.empty()) {
    std::cout << toml;
  } else {
    write_file_atomically(args.output, toml);
    std::cerr << "wrote " << args.output << ": [model] and [train] lines to fine-tune from " << path << "\n";
  }
  return 0;
}

struct ExportArgs {
  std::string checkpoint;
  std::string output;
};

int run_export(const ExportArgs& args) {
  if (fs::path(args.output).extension() != ".mdlus")
    throw ConfigError("-o " + args.output + ": expected a file name ending in .mdlus (PhysicsNeMo loads only those)");
  const trainer::Checkpoint ckpt = trainer::load_checkpoint(args.checkpoint);
  // The run the checkpoint was trained as: its [model], and the data's grid and channels.
  const RunSetup run = setup_run({ckpt.config_text, ckpt.overrides}, args.checkpoint + " (embedded run file)");
  const RunConfig& config = run.config;
  if (config.train.prediction != "state")
    throw ConfigError(args.checkpoint + ": trained with train.prediction = \"" + config.train.prediction +
                      "\" (the next state is the newest plus the model's output), but a reference implementation's "
                      "model predicts the state itself: its forecast would differ. Fine-tune with train.prediction = "
                      "\"state\" to export");
  interop::MdlusExport request;
  request.path = args.output;
  request.model = config.model;
  request.shape = models::model_shape(config);
  request.weights = ckpt.model;
  request.input_channels = run.channels.input_names();
  request.output_channels = run.channels.output_names();
  request.source = fs::absolute(args.checkpoint).lexically_normal().string() + " at step " + std::to_string(ckpt.step);
  if (!ckpt.normalization.empty()) {
    // One mean and standard deviation per input channel, as Earth2Studio normalises the model's input.
    const data::Normalization norm = data::Normalization::from_map(ckpt.normalization);
    std::vector<std::string> names;
    for (const auto& input : request.input_channels) names.push_back(input.substr(0, input.find('@')));
    const data::Normalization per_input = norm.subset(names);
    request.means = per_input.mean();
    request.stds = per_input.std();
  }
  const std::vector<std::string> written = interop::export_mdlus(request);
  std::cout << "export: " << args.checkpoint << " (step " << ckpt.step << ", " << config.model.name << ", "
            << request.shape.in_channels << " -> " << request.shape.out_channels << " channels on " << request.shape.lat
            << " x " << request.shape.lon << ") written as " << join_list(written) << "\n";
  return 0;
}

}  // namespace

Action add_import_command(CLI::App& app) {
  auto args = std::make_shared<ImportArgs>();
  auto* cmd = app.add_subcommand(
      "import", "read a reference implementation's checkpoint (PhysicsNeMo .mdlus, or a state_dict with --config) and "
                "write the run-file lines that fine-tune from it");
  cmd->add_option("package", args->package, "a .mdlus, a package folder holding one, or a torch.save state_dict")->required();
  cmd->add_option("-o,--output", args->output, "write the [model] and [train] lines here (default: standard output)");
  cmd->add_option("-c,--config", args->run.config_path, "run file whose [model] builds a bare state_dict");
  cmd->add_option("--set", args->run.overrides, "override a value of --config's run file");
  return [args]() { return run_import(*args); };
}

Action add_export_command(CLI::App& app) {
  auto args = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand("export", "write a wxtrain checkpoint as a PhysicsNeMo .mdlus with its statistics beside it");
  cmd->add_option("--checkpoint", args->checkpoint, "checkpoint written by wxtrain train")->required();
  cmd->add_option("-o,--output", args->output, "the .mdlus to write; global_means.npy and global_stds.npy go beside it")
      ->required();
  return [args]() { return run_export(*args); };
}

}  // namespace wxtrain::cli
