#pragma once
// Editing a run file's text in place, keeping its comments and layout: what `tune-batch --write`
// writes back and what `train` records as <out_dir>/run.toml. The edits are line by line; the
// result is always parsed back before it is used.
#include <string>
#include <utility>
#include <vector>

namespace wxtrain {

// Writes `key = value` into `section` of the run file in place, keeping everything else
// (used by tune-batch --write). The value is TOML text. The file is replaced atomically; a failed
// write throws WriteError ("cannot write <path>: No space left on device") and leaves it as it was.
void write_config_value(const std::string& path, const std::string& section, const std::string& key,
                        const std::string& toml_value);

// The run file's text with the --set values written into it (comments and layout kept), so the
// result alone reproduces the run: what `train` records as <out_dir>/run.toml.
std::string apply_overrides_to_text(const std::string& toml_text, const std::vector<std::string>& overrides);

// Every value of a run file's text as (flattened key, value): "train.lr" -> "0.002", arrays as
// TOML text ("model.channels" -> "[32, 64, 128]"), strings without quotes, the tables of an array
// of tables numbered from 0 ("data.sources.0.file"); in the file's order. What a tracking server
// stores as the run's parameters. Throws ConfigError for malformed TOML.
std::vector<std::pair<std::string, std::string>> flatten_run_file(const std::string& toml_text,
                                                                  const std::string& source_name);

// The whole text of a run file; a ConfigError naming it when it cannot be opened or is a folder.
std::string read_run_file(const std::string& path);

// The run file's text with the relative paths of what the run reads (data.sources.file,
// data.static.file, train.init_from) made absolute against `folder` (the run file's), the rest kept
// as written: what a checkpoint embeds and run.toml records, so `forecast` from another directory,
// or a run started again from run.toml, reads the same files.
std::string absolute_paths_in_text(const std::string& text, const std::string& folder);
// --set values of those keys (train.init_from) made absolute against the working directory.
std::vector<std::string> absolute_paths_in_overrides(const std::vector<std::string>& overrides);

}  // namespace wxtrain
