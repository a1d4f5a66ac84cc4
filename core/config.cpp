#include "core/config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "core/config_keys.h"
#include "core/config_reader.h"
#include "core/error.h"
#include "core/model_presets.h"
#include "core/run_file_text.h"
#include "data/named_grids.h"
#include "data/time/cf_time.h"
#include "core/tracking_config.h"

namespace wxtrain {

std::string to_string(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16Mixed: return "bf16-mixed";
    case Precision::kFp16Mixed: return "fp16-mixed";
    case Precision::kBf16: return "bf16";
  }
  return "?";
}

std::string describe_checkpointing(const TrainConfig& t) {
  if (t.rollout_checkpointing) return t.checkpointing ? "per block and per rollout step" : "per rollout step";
  return t.checkpointing ? "on" : "off";
}

Precision parse_precision(const std::string& text) {
  if (text == "fp32") return Precision::kFp32;
  if (text == "bf16-mixed") return Precision::kBf16Mixed;
  if (text == "fp16-mixed") return Precision::kFp16Mixed;
  if (text == "bf16") return Precision::kBf16;
  throw ConfigError("invalid precision '" + text + "': expected fp32, bf16-mixed, fp16-mixed or bf16");
}

const std::vector<std::string>& computed_forcing_names() {
  static const std::vector<std::string> names = {
      "cos_latitude",    "sin_latitude",    "cos_longitude",   "sin_longitude", "cos_local_time",
      "sin_local_time",  "cos_day_of_year", "sin_day_of_year", "insolation"};
  return names;
}

std::string level_channel_name(const std::string& source_name, double level) {
  std::ostringstream s;
  s << level;  // 500 -> "500", 0.5 -> "0.5"
  return source_name + "_" + s.str();
}

ChannelLayout RunConfig::channels() const {
  ChannelLayout layout;
  layout.history = data.history;
  auto add = [](std::vector<ChannelLayout::Channel>& list, const std::vector<std::string>& names) {
    for (const auto& n : names) list.push_back({n, std::nullopt});
  };
  if (data.sources.empty()) {
    add(layout.prognostic, data.variables);
    add(layout.diagnostic, data.diagnostic_variables);
    add(layout.forcing, data.forcing_variables);
  }
  for (const auto& source : data.sources) {
    auto& list = source.role == "forcing" ? layout.forcing : source.role == "diagnostic" ? layout.diagnostic
                                                                                          : layout.prognostic;
    const std::string name = source.name.empty() ? source.variable : source.name;
    if (source.levels.empty()) list.push_back({name, std::nullopt});
    for (double level : source.levels) list.push_back({level_channel_name(name, level), level});
  }
  add(layout.forcing, data.forcings);
  for (const auto& field : data.statics) layout.statics.push_back({field.name, std::nullopt});
  layout.noise = train.input_noise_channels();
  return layout;
}

std::vector<std::string> ChannelLayout::input_names() const {
  std::vector<std::string> names;
  for (int64_t h = 0; h < history; ++h) {
    const int64_t lag = history - 1 - h;
    for (const auto& c : prognostic) names.push_back(c.name + "@t" + (lag ? "-" + std::to_string(lag) : "0"));
  }
  for (const auto& c : forcing) names.push_back(c.name + "@t+1");
  for (const auto& c : statics) names.push_back(c.name);
  for (int64_t i = 0; i < noise; ++i) names.push_back("noise_" + std::to_string(i));
  return names;
}

std::vector<ChannelLayout::Channel> ChannelLayout::outputs() const {
  std::vector<Channel> out = prognostic;
  out.insert(out.end(), diagnostic.begin(), diagnostic.end());
  return out;
}

std::vector<std::string> ChannelLayout::output_names() const {
  std::vector<std::string> names;
  for (const auto& c : outputs()) names.push_back(c.name);
  return names;
}

std::vector<std::string> ChannelLayout::prognostic_names() const {
  std::vector<std::string> names;
  for (const auto& c : prognostic) names.push_back(c.name);
  return names;
}

int64_t RunConfig::num_variables() const { return static_cast<int64_t>(channels().prognostic.size()); }

int64_t RunConfig::rollout_at(int64_t step) const {
  int64_t length = data.rollout_steps;
  for (const auto& [from, steps] : train.rollout_schedule)
    if (step >= from) length = steps;
  return length;
}

int64_t RunConfig::max_rollout() const {
  int64_t longest = train.rollout_schedule.empty() ? data.rollout_steps : 0;
  for (const auto& entry : train.rollout_schedule) longest = std::max(longest, entry.second);
  return longest;
}

namespace {

namespace fs = std::filesystem;

// A path the run reads, made absolute: a relative one written in the run file against the run
// file's folder (so the run reads the same files from any directory, and a checkpoint's embedded
// run file still finds them), one given with --set (no source line) against the working directory.
std::string absolute_input_path(const std::string& path, const toml::node* node, const std::string& folder) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  const bool written_in_file = node && node->source().begin.line > 0;
  const fs::path base = written_in_file && !folder.empty() ? fs::path(folder) : fs::current_path();
  return (base / path).lexically_normal().string();
}

// Before a section's finish(): a key this section does not have but another section does is an
// error that names the section to move it to (val_fraction under [train] belongs in [data]).
void point_to_owning_section(const SectionReader& r, const toml::table* table) {
  if (!table) return;
  const auto& known = r.known_keys();
  for (const auto& [k, v] : *table) {
    const std::string key(k.str());
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::vector<std::string> owners;
    for (const ConfigKey& c : config_keys()) {
      const auto dot = c.key.rfind('.');
      const std::string section = c.key.substr(0, dot);
      if (c.key.substr(dot + 1) != key || section == r.section()) continue;
      const std::string shown = section == "data.sources" || section == "data.static" ? "[[" + section + "]]"
                                                                                       : "[" + section + "]";
      if (std::find(owners.begin(), owners.end(), shown) == owners.end()) owners.push_back(shown);
    }
    if (owners.empty()) continue;  // finish() reports it, with a did-you-mean
    throw ConfigError(r.where(&v) + ": unknown key " + r.section() + "." + key + ": " + key + " belongs in " +
                      join_list(owners, " or ") + ", not in [" + r.section() + "]");
  }
}

// [train.loss_weights] / [train.level_weights]: a table of name = number, kept in file order.
void read_number_table(SectionReader& r, const std::string& key, std::vector<std::pair<std::string, double>>& out) {
  r.record(key, "table of numbers", "{}", ">= 0");
  const toml::node* n = r.node(key);
  if (!n) return;
  if (!n->is_table()) r.fail(key, "must be a table of numbers, e.g. [train." + key + "] t_850 = 1.0");
  std::vector<std::pair<const toml::node*, std::pair<std::string, double>>> entries;
  for (const auto& [k, v] : *n->as_table()) {
    double value = 0;
    if (v.is_floating_point()) value = v.as_floating_point()->get();
    else if (v.is_integer()) value = static_cast<double>(v.as_integer()->get());
    else r.fail(key, "has " + std::string(k.str()) + " = " + SectionReader::type_name(v) + ": expected a number");
    if (!(value >= 0) || !std::isfinite(value))
      r.fail(key, "has " + std::string(k.str()) + " = " + toml_text(value) + ": weights must be finite and >= 0");
    entries.push_back({&v, {std::string(k.str()), value}});
  }
  // toml++ keeps tables sorted by key; the file's order is the line order (glob precedence).
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.first->source().begin.line < b.first->source().begin.line;
  });
  for (auto& e : entries) out.push_back(e.second);
}

// [tracking.tags]: a table of name = "text", kept in file order.
void read_string_table(SectionReader& r, const std::string& key, std::vector<std::pair<std::string, std::string>>& out) {
  r.record(key, "table of strings", "{}", "");
  const toml::node* n = r.node(key);
  if (!n) return;
  if (!n->is_table()) r.fail(key, "must be a table of strings, e.g. [tracking." + key + "] team = \"nwp\"");
  std::vector<std::pair<const toml::node*, std::pair<std::string, std::string>>> entries;
  for (const auto& [k, v] : *n->as_table()) {
    if (!v.is_string())
      r.fail(key, "has " + std::string(k.str()) + " = " + SectionReader::type_name(v) + ": expected a string");
    entries.push_back({&v, {std::string(k.str()), v.as_string()->get()}});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.first->source().begin.line < b.first->source().begin.line;
  });
  for (auto& e : entries) out.push_back(e.second);
}

// train.rollout_schedule = [[0, 1], [2000, 2]]: steps strictly increasing from 0, lengths 1..64.
void read_rollout_schedule(SectionReader& r, std::vector<std::pair<int64_t, int64_t>>& out) {
  r.record("rollout_schedule", "array of [step, rollout] pairs", "[]", "steps from 0, increasing; rollout 1 to 64");
  const toml::node* n = r.node("rollout_schedule");
  if (!n) return;
  const std::string example = "e.g. [[0, 1], [2000, 2], [4000, 4]] (from step, rollout length)";
  if (!n->is_array()) r.fail("rollout_schedule", "must be an array of [step, rollout] pairs, " + example);
  for (const auto& e : *n->as_array()) {
    const toml::array* pair = e.as_array();
    if (!pair || pair->size() != 2 || !(*pair)[0].is_integer() || !(*pair)[1].is_integer())
      r.fail("rollout_schedule", "must hold [step, rollout] pairs of integers, " + example);
    const int64_t from = (*pair)[0].as_integer()->get(), steps = (*pair)[1].as_integer()->get();
    if (out.empty() && from != 0) r.fail("rollout_schedule", "must start at step 0, " + example);
    if (!out.empty() && from <= out.back().first)
      r.fail("rollout_schedule", "steps must increase: " + std::to_string(from) + " follows " +
                                     std::to_string(out.back().first));
    if (steps < 1 || steps > 64)
      r.fail("rollout_schedule", "rollout " + std::to_string(steps) + " at step " + std::to_string(from) +
                                     " is out of range: expected 1 to 64");
    out.emplace_back(from, steps);
  }
}

void apply_override(toml::table& root, const std::string& text) {
  auto eq = text.find('=');
  auto dot = text.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    throw ConfigError("--set '" + text + "': expected section.key=value, e.g. train.batch_size=16");
  std::string section = text.substr(0, dot);
  std::string key = text.substr(dot + 1, eq - dot - 1);
  std::string value = text.substr(eq + 1);
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + value);
  } catch (const toml::parse_error&) {
    parsed.insert_or_assign("v", value);  // a bare word such as bf16-mixed is a string
  }
  auto* sec = root.get_as<toml::table>(section);
  if (!sec) {
    root.insert_or_assign(section, toml::table{});
    sec = root.get_as<toml::table>(section);
  }
  // Nodes built here carry no source line; SectionReader reports them as "command line (--set)".
  toml::node* v = parsed.get("v");
  v->visit([&](auto&& n) { sec->insert_or_assign(key, n); });
}

// [tracking] (core/tracking_config.h).
void read_tracking(const toml::table* table, const std::string& file, TrackingConfig& t) {
  SectionReader r(table, file, "tracking");
  r.get("mlflow_uri", t.mlflow_uri);
  r.get("experiment", t.experiment);
  r.get("run_name", t.run_name);
  read_string_table(r, "tags", t.tags);
  r.get("tensorboard", t.tensorboard);
  r.get("tensorboard_dir", t.tensorboard_dir);
  r.get_bytes("checkpoint_max_size", t.checkpoint_max_size);
  r.get("timeout", t.timeout, 0.1, 3600.0);
  r.get("flush_timeout", t.flush_timeout, 0.0, 86400.0);
  r.finish();
  if (!t.mlflow_uri.empty()) {
    const bool http = t.mlflow_uri.rfind("http://", 0) == 0 || t.mlflow_uri.rfind("https://", 0) == 0;
    if (!http || t.mlflow_uri.find_first_of(" \t\n") != std::string::npos ||
        t.mlflow_uri.size() <= t.mlflow_uri.find("//") + 2)
      r.fail("mlflow_uri", "= \"" + t.mlflow_uri + "\" is not an MLflow server's address: expected "
                           "http://host:port or https://host:port, e.g. \"http://127.0.0.1:5000\"");
  }
  if (!t.mlflow_uri.empty() && t.experiment.empty())
    r.fail("experiment", "must not be empty: name the MLflow experiment, e.g. \"storm\"");
}

RunConfig build(const toml::table& root, const std::string& file, const std::string& folder) {
  static const std::vector<std::string> kSections = {"model", "data", "train", "memory", "distributed", "tracking"};
  for (const auto& [k, v] : root) {
    std::string key(k.str());
    if (std::find(kSections.begin(), kSections.end(), key) == kSections.end() || !v.is_table()) {
      std::string line = v.source().begin.line ? ":" + std::to_string(v.source().begin.line) : "";
      throw ConfigError(file + line + ": unknown section or top-level key '" + key + "'" +
                        did_you_mean(key, kSections) + "; expected sections " + join_list(kSections));
    }
  }
  RunConfig c;
  c.path = file;

  {  // [model]: name and preset; the rest are the chosen model's own keys, read by its schema.
    SectionReader r(root.get_as<toml::table>("model"), file, "model");
    auto& m = c.model;
    const std::vector<std::string> names = model_names();
    m.name = names.front();  // the registry's first model is the default
    r.get_choice("name", m.name, names);
    r.get("preset", m.preset);  // already merged into the tables (apply_model_preset)
    const ModelSchema& schema = *find_model_schema(m.name);
    m.options = ModelOptionsBox(schema.make_defaults());
    schema.read(r, *m.options.get());
    // A run file that switches model.name may keep the other models' keys: they are known (a typo
    // is still an unknown key with a did-you-mean) and this model ignores them.
    for (const auto& other : model_schemas())
      if (other.name != schema.name) r.accept(model_option_keys(other));
    point_to_owning_section(r, root.get_as<toml::table>("model"));
    r.finish();
  }

  {  // [data]
    const toml::table* t = root.get_as<toml::table>("data");
    SectionReader r(t, file, "data");
    auto& d = c.data;
    if (const toml::node* n = r.node("sources")) {
      const toml::array* arr = n->as_array();
      if (!arr || !arr->is_array_of_tables())
        r.fail("sources", "must be an array of tables: [[data.sources]] file = ..., variable = ..., name = ...");
      for (const auto& e : *arr) {
        SectionReader s(e.as_table(), file, "data.sources");
        DataSource src;
        s.get("file", src.file);
        src.file = absolute_input_path(src.file, s.node("file"), folder);
        s.get("variable", src.variable);
        s.get("name", src.name);
        s.get("levels", src.levels);
        s.get_choice("role", src.role, {"prognostic", "forcing", "diagnostic"});
        s.finish();
        for (size_t i = 0; i < src.levels.size(); ++i)
          for (size_t j = 0; j < i; ++j)
            if (src.levels[i] == src.levels[j]) s.fail("levels", "lists level " + std::to_string(src.levels[i]) + " twice");
        if (src.file.empty()) s.fail("file", "is required: the NetCDF file or Zarr store to read");
        if (src.variable.empty()) s.fail("variable", "is required: the variable's name in " + src.file);
        if (src.name.empty()) src.name = src.variable;
        for (const auto& other : d.sources)
          if (other.name == src.name)
            s.fail("name", "'" + src.name + "' is used twice (from " + other.file + " and " + src.file +
                               "): give one of them another name, e.g. name = \"" + src.name + "500\"");
        d.sources.push_back(src);
      }
    }
    if (const toml::node* n = r.node("static")) {
      const toml::array* arr = n->as_array();
      if (!arr || !arr->is_array_of_tables())
        r.fail("static", "must be an array of tables: [[data.static]] file = ..., variable = ..., name = ...");
      for (const auto& e : *arr) {
        SectionReader s(e.as_table(), file, "data.static");
        StaticField field;
        s.get("file", field.file);
        field.file = absolute_input_path(field.file, s.node("file"), folder);
        s.get("variable", field.variable);
        s.get("name", field.name);
        s.get_choice("regrid", field.regrid, {"none", "nearest"});
        s.finish();
        if (field.file.empty()) s.fail("file", "is required: the file holding the 2-D field");
        if (field.variable.empty()) s.fail("variable", "is required: the field's name in " + field.file);
        if (field.name.empty()) field.name = field.variable;
        d.statics.push_back(field);
      }
    }
    r.get("forcings", d.forcings);
    for (const auto& f : d.forcings) {
      const auto& known = computed_forcing_names();
      if (std::find(known.begin(), known.end(), f) == known.end())
        r.fail("forcings", "has '" + f + "', which is not a computed forcing" + did_you_mean(f, known) +
                               ": expected " + join_list(known));
    }
    r.get("time_origin", d.time_origin);
    if (!d.time_origin.empty()) {
      try {
        data::parse_date(d.time_origin);  // dates undated data: the standard calendar
      } catch (const DataError& error) {
        r.fail("time_origin", "= \"" + d.time_origin + "\": " + error.what());
      }
    }
    r.record("region", "inline table", "", "");
    if (const toml::node* n = r.node("region")) {
      if (!n->is_table()) r.fail("region", "must be a table: region = { lat = [20, 55], lon = [230, 300] }");
      SectionReader s(n->as_table(), file, "data.region");
      std::vector<double> lat, lon;
      s.get("lat", lat);
      s.get("lon", lon);
      s.finish();
      if (lat.size() != 2 || lat[0] >= lat[1] || lat[0] < -90 || lat[1] > 90)
        s.fail("lat", "must be [south, north] in degrees, -90 <= south < north <= 90, e.g. [20, 55]");
      if (lon.size() != 2 || lon[0] == lon[1] || std::abs(lon[0]) > 360 || std::abs(lon[1]) > 360)
        s.fail("lon", "must be [west, east] in degrees (-360..360; west > east crosses the 0/360 seam), e.g. [230, 300]");
      d.region = {true, lat[0], lat[1], lon[0], lon[1]};
    }
    r.get("boundary", d.boundary, 0, 1 << 16);
    if (d.boundary > 0 && !d.region.set)
      r.fail("boundary", "needs data.region: the boundary frame belongs to a limited-area run");
    r.get("variables", d.variables);
    r.get("diagnostic_variables", d.diagnostic_variables);
    r.get("forcing_variables", d.forcing_variables);
    // grid = [lat, lon] (a rectangle) or a reduced Gaussian grid by name, "n320" / "o96": a point set
    // whose cells are generated (data::named_grid, where setup fills the coordinates in), so that a
    // preset on such a grid (aifs-single-1.0) estimates without data.
    const toml::node* grid_node = r.node("grid");
    if (grid_node && grid_node->is_string()) {
      d.grid_name = grid_node->value_or(std::string());
      data::GridName g;
      if (!data::parse_grid_name(d.grid_name, g))
        r.fail("grid", "= \"" + d.grid_name + "\" is not a grid: expected [lat, lon] or a reduced Gaussian grid's name, "
                       "\"o<N>\" (octahedral, e.g. \"o96\") or \"n<N>\" (classic: \"n32\", \"n320\")");
      const int64_t cells = data::named_grid_cells(g);
      if (cells <= 0)
        r.fail("grid", "= \"" + d.grid_name + "\": the classic reduced Gaussian N" + std::to_string(g.n) +
                           " is not known (its points per row are kept for n32 and n320); use an octahedral \"o<N>\"");
      d.lat = 1;  // a point set: one row of cells (models::model_shape)
      d.lon = cells;
    } else {
      std::vector<int64_t> grid;
      r.get("grid", grid, 1);
      if (!grid.empty()) {
        if (grid.size() != 2) r.fail("grid", "must be [lat, lon] or a reduced Gaussian grid's name (\"n320\", \"o96\")");
        d.lat = grid[0];
        d.lon = grid[1];
      }
    }
    r.get("history", d.history, 1, 64);
    d.rollout_steps_set = r.node("rollout_steps") != nullptr;
    r.get("rollout_steps", d.rollout_steps, 1, 64);
    d.val_fraction_set = r.node("val_fraction") != nullptr;
    r.get("val_fraction", d.val_fraction, 0.0, 0.9);
    r.get("time_step", d.time_step);
    if (!d.time_step.empty()) {
      data::TimeStep step;
      try {
        step = data::parse_time_step(d.time_step);
      } catch (const DataError& error) {
        r.fail("time_step", "= \"" + d.time_step + "\": " + error.what());
      }
      if (step.seconds <= 0 && step.months <= 0)
        r.fail("time_step", "= \"" + d.time_step + "\" must be a positive duration, e.g. \"6h\", \"1d\" or \"1mo\"");
    }
    for (auto [key, period] : {std::pair<const char*, std::vector<std::string>*>{"train_period", &d.train_period},
                               {"val_period", &d.val_period}}) {
      r.get(key, *period);
      if (!period->empty() && period->size() != 2)
        r.fail(key, "must be [first, last] dates, e.g. [\"1979-01-01\", \"2015-12-31\"]");
      // The data's calendar is known only once the files are open (where a date missing from it,
      // Feb 30 outside 360_day, is refused); here, text that is a date in no calendar.
      for (const auto& text : *period) {
        try {
          data::parse_date(text);
        } catch (const DataError& error) {
          bool in_some_calendar = false;
          for (auto calendar : {data::Calendar::kAllLeap, data::Calendar::k360Day}) {
            try {
              data::parse_date(text, calendar);
              in_some_calendar = true;
            } catch (const DataError&) {
            }
          }
          if (!in_some_calendar) r.fail(key, "has \"" + text + "\": " + error.what());
        }
      }
    }
    if (d.train_period.empty() != d.val_period.empty())
      r.fail(d.train_period.empty() ? "val_period" : "train_period",
             "is given without its partner: set both data.train_period and data.val_period (or neither, to split by val_fraction)");
    r.get("prefetch", d.prefetch, 0, 64);
    r.get("queue_depth", d.queue_depth, 1, 1024);
    r.get("load_delay_ms", d.load_delay_ms, 0.0, 1e6);
    point_to_owning_section(r, t);
    r.finish();
    if (d.sources.empty() && d.variables.empty())
      throw ConfigError(file + ": [data] needs either [[data.sources]] (files to train on) or "
                        "variables = [...] with grid = [lat, lon] or a named grid such as \"n320\" (to estimate without data)");
    if (d.sources.empty() && (d.lat == 0 || d.lon == 0))
      throw ConfigError(file + ": [data] without sources needs grid = [lat, lon] or a reduced Gaussian grid's name (\"n320\", \"o96\")");
    // Every channel name once, whatever its role: checkpoints, loss weights and forecasts name them.
    std::set<std::string> names;
    const ChannelLayout layout = c.channels();
    for (const auto* list : {&layout.prognostic, &layout.diagnostic, &layout.forcing, &layout.statics})
      for (const auto& ch : *list)
        if (!names.insert(ch.name).second)
          throw ConfigError(file + ": [data] has two channels called '" + ch.name +
                            "' (sources, static fields and forcings share one namespace): rename one with name = ...");
    if (layout.prognostic.empty())
      throw ConfigError(file + ": [data] has no prognostic channel: the model needs at least one state variable "
                        "(a source with role = \"prognostic\", the default)");
  }

  {  // [train]
    SectionReader r(root.get_as<toml::table>("train"), file, "train");
    auto& t = c.train;
    const toml::node* batch = r.node("batch_size");
    if (batch && batch->is_string() && batch->as_string()->get() == "auto") t.batch_auto = true;
    else r.get("batch_size", t.batch_size, 1, 1 << 20);
    r.get("accumulation", t.accumulation, 1, 4096);
    std::string precision = to_string(t.precision);
    r.get_choice("precision", precision, {"fp32", "bf16-mixed", "fp16-mixed", "bf16"});
    t.precision = parse_precision(precision);
    r.get("checkpointing", t.checkpointing);
    r.get("rollout_checkpointing", t.rollout_checkpointing);
    r.get_choice("optimizer", t.optimizer, {"adamw", "adam", "sgd"});
    r.get("lr", t.lr, 0.0, 10.0);
    r.get("weight_decay", t.weight_decay, 0.0, 10.0);
    r.get("momentum", t.momentum, 0.0, 0.9999);
    r.get("beta1", t.beta1, 0.0, 0.9999999);
    r.get("beta2", t.beta2, 0.0, 0.9999999);
    r.get("eps", t.eps, 0.0, 1.0, Lower::kExclusive);  // Adam divides by sqrt(v) + eps
    r.get("steps", t.steps, 1, int64_t{1} << 40);      // 0 steps would only write a checkpoint
    r.get("warmup_steps", t.warmup_steps, 0, int64_t{1} << 40);
    r.get("min_lr_ratio", t.min_lr_ratio, 0.0, 1.0);
    r.get("grad_clip", t.grad_clip, 0.0, 1e9);
    int64_t seed = static_cast<int64_t>(t.seed);
    r.get("seed", seed, 0, INT64_MAX);
    t.seed = static_cast<uint64_t>(seed);
    r.get("device", t.device);
    r.get("out_dir", t.out_dir);
    r.get("checkpoint_every", t.checkpoint_every, 0, int64_t{1} << 40);
    r.get("log_every", t.log_every, 1, int64_t{1} << 40);
    r.get("val_every", t.val_every, 0, int64_t{1} << 40);
    t.val_lead_steps_set = r.node("val_lead_steps") != nullptr;
    r.get("val_lead_steps", t.val_lead_steps, 0, 1000);
    r.get("climatology_window", t.climatology_window, 0, 183);
    read_number_table(r, "loss_weights", t.loss_weights);
    r.get_choice("level_weighting", t.level_weighting, {"uniform", "linear", "table"});
    std::vector<std::pair<std::string, double>> level_table;
    read_number_table(r, "level_weights", level_table);
    for (const auto& [key, weight] : level_table) {
      char* end = nullptr;
      const double level = std::strtod(key.c_str(), &end);
      if (key.empty() || *end != '\0')
        r.fail("level_weights", "has key '" + key + "': keys are levels as numbers, e.g. \"500\" = 1.0");
      t.level_weights.emplace_back(level, weight);
    }
    if (t.level_weighting == "table" && t.level_weights.empty())
      r.fail("level_weighting", "= \"table\" needs [train.level_weights], e.g. \"500\" = 1.0");
    if (t.level_weighting != "table" && !t.level_weights.empty())
      r.fail("level_weights", "is given but train.level_weighting is \"" + t.level_weighting + "\": set it to \"table\"");
    read_rollout_schedule(r, t.rollout_schedule);
    r.get("residual_normalization", t.residual_normalization);
    r.get_choice("prediction", t.prediction, {"tendency", "state"});
    r.get("loss_scale", t.loss_scale, 1.0, 1e38);
    r.get("scale_growth", t.scale_growth, 1.0, 1e3);
    r.get("scale_backoff", t.scale_backoff, 1e-6, 1.0);
    r.get("scale_interval", t.scale_interval, 1, int64_t{1} << 40);
    r.get("init_from", t.init_from);
    t.init_from = absolute_input_path(t.init_from, r.node("init_from"), folder);
    r.get("strict", t.strict);
    r.get("freeze", t.freeze);
    r.get("frozen_lr_scale", t.frozen_lr_scale, 0.0, 1.0);
    r.get("ensemble_members", t.ensemble_members, 1, 1024);
    r.get("crps_alpha", t.crps_alpha, 0.0, 1.0);
    r.get("noise_channels", t.noise_channels, 0, 1024);
    r.get("noise_std", t.noise_std, 0.0, 1e3, Lower::kExclusive);
    r.get("noise_correlation", t.noise_correlation, 0.0, 1.0);
    r.get_choice("noise_injection", t.noise_injection, {"input", "conditional_norm"});
    r.get_choice("loss", t.loss, {"auto", "mse", "crps"});
    point_to_owning_section(r, root.get_as<toml::table>("train"));
    r.finish();
    const std::string members = std::to_string(t.ensemble_members);
    if (t.ensemble() && t.loss == "mse")
      r.fail("loss", "= \"mse\" cannot train train.ensemble_members = " + members +
                         ": MSE pulls every member onto the ensemble mean; an ensemble trains on the afCRPS "
                         "(train.loss = \"crps\", or \"auto\")");
    if (!t.ensemble() && t.loss == "crps")
      r.fail("loss", "= \"crps\" needs an ensemble: set train.ensemble_members to 2 or more (the CRPS of one "
                     "member has no spread term), or train.loss = \"mse\"");
    if (t.ensemble() && t.noise_channels == 0)
      r.fail("noise_channels", "= 0 with train.ensemble_members = " + members +
                                   ": without noise every member computes the same forecast; use 1 or more (default 4)");
    if (!t.rollout_schedule.empty() && c.data.rollout_steps_set)
      r.fail("rollout_schedule", "and data.rollout_steps are both given: the schedule sets the rollout length, "
                                 "remove data.rollout_steps");
    if (t.out_dir.empty()) r.fail("out_dir", "must not be empty: name the run's folder, e.g. \"runs/storm\"");
    if (t.device != "auto" && t.device != "cpu" && t.device.rfind("cuda", 0) != 0)
      r.fail("device", "= '" + t.device + "' is not valid: expected auto, cpu, cuda or cuda:N");
  }

  {  // [memory]
    SectionReader r(root.get_as<toml::table>("memory"), file, "memory");
    auto& m = c.memory;
    r.get_bytes("limit", m.limit);
    r.get("margin", m.margin, 0.0, 0.9);
    r.get("multiple_of", m.multiple_of, 1, 1 << 20);
    r.get("max_batch", m.max_batch, 1, 1 << 24);
    r.get("probe_steps", m.probe_steps, 1, 100);
    point_to_owning_section(r, root.get_as<toml::table>("memory"));
    r.finish();
  }

  {  // [distributed]
    SectionReader r(root.get_as<toml::table>("distributed"), file, "distributed");
    auto& d = c.distributed;
    r.get("zero_stage", d.zero_stage, 0, 3);
    r.get("world_size", d.world_size, 0, 1 << 20);
    r.get("bucket_mb", d.bucket_mb, 0.001, 1e5);
    r.get_choice("backend", d.backend, {"auto", "mpi", "nccl"});
    r.get("ensemble_group", d.ensemble_group, 1, 1024);
    r.get("model_parallel", d.model_parallel, 1, 1024);
    point_to_owning_section(r, root.get_as<toml::table>("distributed"));
    r.finish();
    if (c.train.ensemble_members % d.ensemble_group != 0)
      r.fail("ensemble_group", "= " + std::to_string(d.ensemble_group) + " does not divide train.ensemble_members = " +
                                   std::to_string(c.train.ensemble_members) +
                                   ": each rank of an ensemble group holds ensemble_members / ensemble_group members "
                                   "(ensemble_members is the members per sample over the whole group)");
    if (d.model_parallel > 1) {
      // The graph models split their graphs by region (models' set_node_shard); the others would
      // silently run whole.
      if (const ModelSchema* schema = find_model_schema(c.model.name); schema && !schema->shards_grid) {
        std::string takers;
        for (const ModelSchema& s : model_schemas())
          if (s.shards_grid) takers += (takers.empty() ? "model.name = \"" : "\", \"") + s.name;
        r.fail("model_parallel", "= " + std::to_string(d.model_parallel) + " needs a model that can shard its grid: " +
                                 takers + "\", this run has \"" + c.model.name + "\" (set model_parallel = 1)");
      }
      // AIFS-ENS averages the noise onto the hidden nodes over the encoder's edges outside its
      // sharded mapper.
      if (c.train.conditional_noise())
        r.fail("model_parallel", "= " + std::to_string(d.model_parallel) + " with train.noise_injection = "
                                 "\"conditional_norm\": model parallelism cannot shard the noise conditioning yet; "
                                 "use noise_injection = \"input\"");
      if (d.ensemble_group > 1)
        r.fail("model_parallel", "= " + std::to_string(d.model_parallel) + " with ensemble_group = " +
                                 std::to_string(d.ensemble_group) + ": the two groupings cannot be combined yet");
      if (d.zero_stage != 0)
        r.fail("model_parallel", "= " + std::to_string(d.model_parallel) + " with zero_stage = " +
                                 std::to_string(d.zero_stage) + ": model parallelism runs with zero_stage = 0 only so far");
    }
  }

  {  // [tracking]: checked here with every other key; the trainer reads it with tracking_config().
    TrackingConfig unused;
    read_tracking(root.get_as<toml::table>("tracking"), file, unused);
  }
  return c;
}

// model.preset: the preset's [model] keys under the run file's own, which win; its [data] shape
// (variables, grid, history, ...) only for a run file without [[data.sources]], whose data is its own.
void apply_model_preset(toml::table& root, const std::string& file) {
  toml::table* model = root.get_as<toml::table>("model");
  const toml::node* node = model ? model->get("preset") : nullptr;
  if (!node) return;
  const std::string where =
      node->source().begin.line ? file + ":" + std::to_string(node->source().begin.line) : file + " (--set)";
  const std::vector<std::string> names = model_preset_names();
  const std::optional<std::string> name = node->value<std::string>();
  if (!name) throw ConfigError(where + ": model.preset must be a string, one of " + join_list(names));
  if (name->empty()) return;  // the default: no preset
  const ModelPreset* preset = find_model_preset(*name);
  if (!preset)
    throw ConfigError(where + ": model.preset = \"" + *name + "\" is not a preset" + did_you_mean(*name, names) +
                      "; expected one of " + join_list(names));
  auto merge_under = [](toml::table& into, const toml::table& from) {
    for (auto&& [k, v] : from)
      if (!into.contains(k.str())) v.visit([&, key = std::string(k.str())](auto&& n) { into.insert(key, n); });
  };
  merge_under(*model, parse_toml(preset->model_toml, "preset " + preset->name));
  if (!root.contains("data")) root.insert("data", toml::table{});
  toml::table* data = root.get_as<toml::table>("data");
  if (!data->contains("sources")) merge_under(*data, parse_toml(preset->data_toml, "preset " + preset->name));
}

}  // namespace

RunConfig parse_config(const std::string& toml_text, const std::string& source_name,
                       const std::vector<std::string>& overrides, const std::string& folder) {
  toml::table root = parse_toml(toml_text, source_name);
  for (const auto& o : overrides) apply_override(root, o);
  apply_model_preset(root, source_name);
  return build(root, source_name, folder);
}

TrackingConfig tracking_config(const std::string& toml_text, const std::string& source_name,
                               const std::vector<std::string>& overrides) {
  toml::table root = parse_toml(toml_text, source_name);
  for (const auto& o : overrides) apply_override(root, o);
  TrackingConfig t;
  read_tracking(root.get_as<toml::table>("tracking"), source_name, t);
  return t;
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_config(read_run_file(path), path, overrides, run_file_folder(path));
}

std::string run_file_folder(const std::string& path) {
  return fs::absolute(fs::path(path)).lexically_normal().parent_path().string();
}

}  // namespace wxtrain
