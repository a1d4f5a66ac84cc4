#include "core/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/model_presets.h"
#include "core/units.h"

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

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string did_you_mean(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = 3;  // further than two edits is not a typo
  for (const auto& k : known) {
    size_t d = edit_distance(key, k);
    if (d < best_d) best_d = d, best = k;
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

std::string join(const std::vector<std::string>& v, const std::string& sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// While config_keys() runs, every SectionReader records the keys it reads here.
thread_local std::vector<ConfigKey>* g_catalogue = nullptr;

// TOML text of a default value, shortest form that reads back the same.
std::string toml_text(int64_t v) { return std::to_string(v); }
std::string toml_text(double v) {
  std::string best;
  for (int precision = 1; precision <= 17; ++precision) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v && (best.empty() || std::strlen(buf) < best.size())) best = buf;
  }
  if (best.find_first_of(".eEn") == std::string::npos) best += ".0";  // a float, as TOML wants it
  return best;
}
std::string toml_text(bool v) { return v ? "true" : "false"; }
std::string toml_text(const std::string& v) {
  std::string out = "\"";
  for (char ch : v) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", ch);
      out += esc;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}
template <typename T>
std::string toml_text(const std::vector<T>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_text(v[i]);
  return out + "]";
}

// "1 to 64"; bounds at the type's practical limit are left out (">= 1").
std::string range_text(int64_t min, int64_t max) {
  if (max >= (int64_t{1} << 40)) return ">= " + std::to_string(min);
  return std::to_string(min) + " to " + std::to_string(max);
}

// Whether a lower bound is itself allowed: eps = 0 would divide by zero in Adam.
enum class Lower { kInclusive, kExclusive };

std::string range_text(double min, double max, Lower lower) {
  const std::string low = (lower == Lower::kExclusive ? "> " : ">= ") + toml_text(min);
  if (max >= 1e9) return low;
  return lower == Lower::kExclusive ? low + " and <= " + toml_text(max) : toml_text(min) + " to " + toml_text(max);
}

// Reads one [section]: every get() marks its key as known, finish() rejects the rest.
class SectionReader {
 public:
  SectionReader(const toml::table* table, std::string file, std::string section)
      : table_(table), file_(std::move(file)), section_(std::move(section)) {}

  std::string where(const toml::node* node) const {
    if (node && node->source().begin.line > 0)
      return file_ + ":" + std::to_string(node->source().begin.line);
    return node ? std::string("command line (--set)") : file_;
  }

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    const toml::node* node = table_ ? table_->get(key) : nullptr;
    throw ConfigError(where(node) + ": " + section_ + "." + key + " " + what);
  }

  const toml::node* node(const std::string& key) {
    if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
    record(key, "", "", "");
    return table_ ? table_->get(key) : nullptr;
  }

  // Adds the key to config_keys()'s catalogue (when one is being made); empty fields leave what an
  // earlier call recorded.
  void record(const std::string& key, const std::string& type, const std::string& default_value,
              const std::string& range) const {
    if (!g_catalogue) return;
    const std::string full = section_ + "." + key;
    auto it = std::find_if(g_catalogue->begin(), g_catalogue->end(), [&](const ConfigKey& k) { return k.key == full; });
    if (it == g_catalogue->end()) it = g_catalogue->insert(g_catalogue->end(), ConfigKey{full, "", "", "", ""});
    if (!type.empty()) it->type = type;
    if (!default_value.empty()) it->default_value = default_value;
    if (!range.empty()) it->range = range;
  }

  void get(const std::string& key, int64_t& out, int64_t min, int64_t max) {
    record(key, "integer", toml_text(out), range_text(min, max));
    const toml::node* n = node(key);
    if (!n) return;
    if (!n->is_integer()) fail(key, "must be an integer, got " + type_name(*n));
    int64_t v = n->as_integer()->get();
    if (v < min || v > max)
      fail(key, "= " + std::to_string(v) + " is out of range: expected " + range_text(min, max));
    out = v;
  }

  void get(const std::string& key, double& out, double min, double max, Lower lower = Lower::kInclusive) {
    record(key, "number", toml_text(out), range_text(min, max, lower));
    const toml::node* n = node(key);
    if (!n) return;
    double v;
    if (n->is_floating_point()) v = n->as_floating_point()->get();
    else if (n->is_integer()) v = static_cast<double>(n->as_integer()->get());
    else fail(key, "must be a number, got " + type_name(*n));
    if (!(v >= min && v <= max) || (lower == Lower::kExclusive && v == min)) {
      std::ostringstream s;
      s << "= " << v << " is out of range: expected " << range_text(min, max, lower);
      fail(key, s.str());
    }
    out = v;
  }

  void get(const std::string& key, bool& out) {
    record(key, "boolean", toml_text(out), "");
    const toml::node* n = node(key);
    if (!n) return;
    if (!n->is_boolean()) fail(key, "must be true or false, got " + type_name(*n));
    out = n->as_boolean()->get();
  }

  void get(const std::string& key, std::string& out) {
    record(key, "string", toml_text(out), "");
    const toml::node* n = node(key);
    if (!n) return;
    if (!n->is_string()) fail(key, "must be a string, got " + type_name(*n));
    out = n->as_string()->get();
  }

  void get_choice(const std::string& key, std::string& out, const std::vector<std::string>& choices) {
    record(key, "", "", "one of " + join(choices));
    get(key, out);
    if (std::find(choices.begin(), choices.end(), out) == choices.end())
      fail(key, "= '" + out + "' is not valid: expected one of " + join(choices) +
                    did_you_mean(out, choices));
  }

  void get(const std::string& key, std::vector<int64_t>& out, int64_t min) {
    record(key, "array of integers", toml_text(out), "entries >= " + std::to_string(min));
    const toml::node* n = node(key);
    if (!n) return;
    if (!n->is_array()) fail(key, "must be an array of integers, got " + type_name(*n));
    std::vector<int64_t> values;
    for (const auto& e : *n->as_array()) {
      if (!e.is_integer()) fail(key, "must be an array of integers, found " + type_name(e));
      int64_t v = e.as_integer()->get();
      if (v < min) fail(key, "has " + std::to_string(v) + ": every entry must be >= " + std::to_string(min));
      values.push_back(v);
    }
    out = values;
  }

  void get(const std::string& key, std::vector<double>& out) {
    record(key, "array of numbers", toml_text(out), "");
    const toml::node* n = node(key);
    if (!n) return;
    if (!n->is_array()) fail(key, "must be an array of numbers, got " + type_name(*n));
    std::vector<double> values;
    for (const auto& e : *n->as_array()) {
      if (e.is_integer()) values.push_back(static_cast<double>(e.as_integer()->get()));
      else if (e.is_floating_point()) values.push_back(e.as_floating_point()->get());
      else fail(key, "must be an array of numbers, found " + type_name(e));
    }
    out = values;
  }

  void get(const std::string& key, std::vector<std::string>& out) {
    record(key, "array of strings", toml_text(out), "");
    const toml::node* n = node(key);
    if (!n) return;
    if (!n->is_array()) fail(key, "must be an array of strings, got " + type_name(*n));
    std::vector<std::string> values;
    for (const auto& e : *n->as_array()) {
      if (!e.is_string()) fail(key, "must be an array of strings, found " + type_name(e));
      values.push_back(e.as_string()->get());
    }
    out = values;
  }

  void get_bytes(const std::string& key, int64_t& out) {
    record(key, "size (\"24GiB\" or bytes)", toml_text(out), ">= 0");
    const toml::node* n = node(key);
    if (!n) return;
    if (n->is_integer()) {
      out = n->as_integer()->get();
    } else if (n->is_string()) {
      auto v = parse_bytes(n->as_string()->get());
      if (!v) fail(key, "= '" + n->as_string()->get() + "' is not a size: expected e.g. \"24GiB\", \"80GB\", \"512MiB\"");
      out = *v;
    } else {
      fail(key, "must be a size such as \"24GiB\", got " + type_name(*n));
    }
    if (out < 0) fail(key, "must not be negative");
  }

  void finish() const {
    if (!table_) return;
    for (const auto& [k, v] : *table_) {
      std::string key(k.str());
      if (std::find(known_.begin(), known_.end(), key) == known_.end())
        throw ConfigError(where(&v) + ": unknown key " + section_ + "." + key + did_you_mean(key, known_) +
                          "; known keys: " + join(known_));
    }
  }

  static std::string type_name(const toml::node& n) {
    switch (n.type()) {
      case toml::node_type::string: return "a string";
      case toml::node_type::integer: return "an integer";
      case toml::node_type::floating_point: return "a float";
      case toml::node_type::boolean: return "a boolean";
      case toml::node_type::array: return "an array";
      case toml::node_type::table: return "a table";
      default: return "a date/time";
    }
  }

 private:
  const toml::table* table_;
  std::string file_;
  std::string section_;
  std::vector<std::string> known_;
};

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

RunConfig build(const toml::table& root, const std::string& file) {
  static const std::vector<std::string> kSections = {"model", "data", "train", "memory", "distributed"};
  for (const auto& [k, v] : root) {
    std::string key(k.str());
    if (std::find(kSections.begin(), kSections.end(), key) == kSections.end() || !v.is_table()) {
      std::string line = v.source().begin.line ? ":" + std::to_string(v.source().begin.line) : "";
      throw ConfigError(file + line + ": unknown section or top-level key '" + key + "'" +
                        did_you_mean(key, kSections) + "; expected sections " + join(kSections));
    }
  }
  RunConfig c;
  c.path = file;

  {  // [model]
    SectionReader r(root.get_as<toml::table>("model"), file, "model");
    auto& m = c.model;
    r.get_choice("name", m.name, {"unet", "vit", "gnn", "fourcastnet", "graphcast", "pangu"});
    r.get("preset", m.preset);  // already merged into the tables (apply_model_preset)
    r.get("channels", m.channels, 1);
    r.get("groups", m.groups, 1, 1024);
    r.get("patch_size", m.patch_size, 1, 64);
    r.get("embed_dim", m.embed_dim, 1, 1 << 16);
    r.get("depth", m.depth, 1, 512);
    r.get("heads", m.heads, 1, 1024);
    r.get("mlp_ratio", m.mlp_ratio, 0.25, 64.0);
    r.get("latent", m.latent, 1, 1 << 16);
    r.get("processor_layers", m.processor_layers, 1, 512);
    r.get("neighbourhood", m.neighbourhood, 1, 8);
    r.get("mlp_layers", m.mlp_layers, 1, 8);
    r.get("afno_blocks", m.afno_blocks, 1, 1024);
    r.get("sparsity_threshold", m.sparsity_threshold, 0.0, 1e9);
    r.get("hard_thresholding_fraction", m.hard_thresholding_fraction, 0.0, 1.0, Lower::kExclusive);
    r.get("mesh_refinement", m.mesh_refinement, 0, 7);
    r.get("edge_block", m.edge_block, 0, int64_t{1} << 40);  // M7: 163,842 nodes, beyond any published GraphCast
    r.get("upper_variables", m.upper_variables, 0, 1 << 16);
    r.get("levels", m.levels, 0, 1 << 16);
    r.get("level_patch", m.level_patch, 1, 64);
    r.get("window", m.window, 1);
    r.get("stage_depths", m.stage_depths, 1);
    r.get("stage_heads", m.stage_heads, 1);
    r.finish();
    if (m.channels.empty()) r.fail("channels", "must list at least one level, e.g. [32, 64, 128]");
    for (int64_t ch : m.channels)
      if (ch % m.groups != 0)
        r.fail("channels", "entry " + std::to_string(ch) + " is not divisible by model.groups = " +
                               std::to_string(m.groups));
    // Each model checks only the keys it reads: heads means nothing to fourcastnet, afno_blocks
    // nothing to the vit.
    if (m.name == "vit" && m.embed_dim % m.heads != 0)
      r.fail("embed_dim", "= " + std::to_string(m.embed_dim) + " must be divisible by model.heads = " +
                              std::to_string(m.heads));
    if (m.name == "fourcastnet" && m.embed_dim % m.afno_blocks != 0)
      r.fail("embed_dim", "= " + std::to_string(m.embed_dim) + " must be divisible by model.afno_blocks = " +
                              std::to_string(m.afno_blocks));
    if (m.name == "pangu") {
      // The shapes alone; whether upper_variables x levels fits the data's channels is checked
      // where the channels are known (models/pangu.cpp).
      if (m.window.size() != 3) r.fail("window", "must hold 3 entries (levels, lat, lon), e.g. [2, 6, 12]");
      if (m.stage_depths.size() != 4) r.fail("stage_depths", "must hold 4 entries, e.g. [2, 6, 6, 2]");
      if (m.stage_heads.size() != 4) r.fail("stage_heads", "must hold 4 entries, e.g. [6, 12, 12, 6]");
      if ((m.upper_variables == 0) != (m.levels == 0))
        r.fail(m.levels == 0 ? "levels" : "upper_variables",
               "must be set with model." + std::string(m.levels == 0 ? "upper_variables" : "levels") +
                   " (both 0: no upper-air volume)");
      for (size_t i = 0; i < m.stage_heads.size(); ++i) {
        const int64_t width = (i == 1 || i == 2 ? 2 : 1) * m.embed_dim;  // stages 2 and 3 run at 2 x embed_dim
        if (width % m.stage_heads[i] != 0)
          r.fail("stage_heads", "entry " + std::to_string(i) + " = " + std::to_string(m.stage_heads[i]) +
                                    " must divide that stage's width " + std::to_string(width) +
                                    " (model.embed_dim, doubled in stages 2 and 3)");
      }
    }
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
                               ": expected " + join(known));
    }
    r.get("time_origin", d.time_origin);
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
    std::vector<int64_t> grid;
    r.get("grid", grid, 1);
    if (!grid.empty()) {
      if (grid.size() != 2) r.fail("grid", "must be [lat, lon]");
      d.lat = grid[0];
      d.lon = grid[1];
    }
    r.get("history", d.history, 1, 64);
    d.rollout_steps_set = r.node("rollout_steps") != nullptr;
    r.get("rollout_steps", d.rollout_steps, 1, 64);
    r.get("val_fraction", d.val_fraction, 0.0, 0.9);
    r.get("time_step", d.time_step);
    for (auto [key, period] : {std::pair<const char*, std::vector<std::string>*>{"train_period", &d.train_period},
                               {"val_period", &d.val_period}}) {
      r.get(key, *period);
      if (!period->empty() && period->size() != 2)
        r.fail(key, "must be [first, last] dates, e.g. [\"1979-01-01\", \"2015-12-31\"]");
    }
    if (d.train_period.empty() != d.val_period.empty())
      r.fail(d.train_period.empty() ? "val_period" : "train_period",
             "is given without its partner: set both data.train_period and data.val_period (or neither, to split by val_fraction)");
    r.get("prefetch", d.prefetch, 0, 64);
    r.get("queue_depth", d.queue_depth, 1, 1024);
    r.get("load_delay_ms", d.load_delay_ms, 0.0, 1e6);
    r.finish();
    if (d.sources.empty() && d.variables.empty())
      throw ConfigError(file + ": [data] needs either [[data.sources]] (files to train on) or "
                        "variables = [...] with grid = [lat, lon] (to estimate without data)");
    if (d.sources.empty() && (d.lat == 0 || d.lon == 0))
      throw ConfigError(file + ": [data] without sources needs grid = [lat, lon]");
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
    r.get("loss_scale", t.loss_scale, 1.0, 1e38);
    r.get("scale_growth", t.scale_growth, 1.0, 1e3);
    r.get("scale_backoff", t.scale_backoff, 1e-6, 1.0);
    r.get("scale_interval", t.scale_interval, 1, int64_t{1} << 40);
    r.get("init_from", t.init_from);
    r.get("strict", t.strict);
    r.get("freeze", t.freeze);
    r.get("frozen_lr_scale", t.frozen_lr_scale, 0.0, 1.0);
    r.finish();
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
    r.finish();
  }

  {  // [distributed]
    SectionReader r(root.get_as<toml::table>("distributed"), file, "distributed");
    auto& d = c.distributed;
    r.get("zero_stage", d.zero_stage, 0, 3);
    r.get("world_size", d.world_size, 0, 1 << 20);
    r.get("bucket_mb", d.bucket_mb, 0.001, 1e5);
    r.get_choice("backend", d.backend, {"auto", "mpi", "nccl"});
    r.finish();
  }
  return c;
}

toml::table parse_toml(const std::string& text, const std::string& source_name) {
  try {
    return toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    throw ConfigError(source_name + ":" + std::to_string(e.source().begin.line) + ":" +
                      std::to_string(e.source().begin.column) + ": malformed TOML: " +
                      std::string(e.description()));
  }
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
  if (!name) throw ConfigError(where + ": model.preset must be a string, one of " + join(names));
  if (name->empty()) return;  // the default: no preset
  const ModelPreset* preset = find_model_preset(*name);
  if (!preset)
    throw ConfigError(where + ": model.preset = \"" + *name + "\" is not a preset" + did_you_mean(*name, names) +
                      "; expected one of " + join(names));
  auto merge_under = [](toml::table& into, const toml::table& from) {
    for (auto&& [k, v] : from)
      if (!into.contains(k.str())) v.visit([&, key = std::string(k.str())](auto&& n) { into.insert(key, n); });
  };
  merge_under(*model, parse_toml(preset->model_toml, "preset " + preset->name));
  if (!root.contains("data")) root.insert("data", toml::table{});
  toml::table* data = root.get_as<toml::table>("data");
  if (!data->contains("sources")) merge_under(*data, parse_toml(preset->data_toml, "preset " + preset->name));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open the run file (does it exist?)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

RunConfig parse_config(const std::string& toml_text, const std::string& source_name,
                       const std::vector<std::string>& overrides) {
  toml::table root = parse_toml(toml_text, source_name);
  for (const auto& o : overrides) apply_override(root, o);
  apply_model_preset(root, source_name);
  return build(root, source_name);
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_config(read_file(path), path, overrides);
}

namespace {

// Sets `key = value` in `section` of a run file's text, line by line so comments and layout stay.
std::string set_value_in_text(const std::string& text, const std::string& section, const std::string& key,
                              const std::string& toml_value) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  auto trim = [](std::string s) {
    s.erase(0, s.find_first_not_of(" \t"));
    s.erase(s.find_last_not_of(" \t\r") + 1);
    return s;
  };
  std::string current;
  int section_line = -1;
  int key_line = -1;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string t = trim(lines[i]);
    if (!t.empty() && t[0] == '[') {
      current = trim(t.substr(t[1] == '[' ? 2 : 1, t.find(']') - (t[1] == '[' ? 2 : 1)));
      if (current == section && t[1] != '[') section_line = static_cast<int>(i);
      continue;
    }
    if (current == section && t.rfind(key, 0) == 0) {
      std::string rest = trim(t.substr(key.size()));
      if (!rest.empty() && rest[0] == '=') key_line = static_cast<int>(i);
    }
  }
  std::string entry = key + " = " + toml_value;
  if (key_line >= 0) {
    auto comment = lines[key_line].find('#');
    lines[key_line] = entry + (comment != std::string::npos ? "  " + lines[key_line].substr(comment) : "");
  } else if (section_line >= 0) {
    lines.insert(lines.begin() + section_line + 1, entry);
  } else {
    lines.push_back("");
    lines.push_back("[" + section + "]");
    lines.push_back(entry);
  }
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

}  // namespace

void write_config_value(const std::string& path, const std::string& section, const std::string& key,
                        const std::string& toml_value) {
  const std::string out = set_value_in_text(read_file(path), section, key, toml_value);
  parse_toml(out, path);  // never write a file we could not read back
  write_file_atomically(path, out, "the run file is unchanged");
}

std::string apply_overrides_to_text(const std::string& original, const std::vector<std::string>& overrides) {
  std::string text = original;
  for (const auto& o : overrides) {
    const auto eq = o.find('='), dot = o.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq) continue;  // load_config rejected it
    std::string value = o.substr(eq + 1);
    try {
      (void)toml::parse("v = " + value);
    } catch (const toml::parse_error&) {
      value = wxtrain::toml_text(value);  // a bare word such as bf16-mixed is a string, as --set reads it
    }
    text = set_value_in_text(text, o.substr(0, dot), o.substr(dot + 1, eq - dot - 1), value);
  }
  try {
    (void)toml::parse(text);
    return text;
  } catch (const toml::parse_error&) {
    // A layout the line editor cannot place a key in: keep the file as written and say what was set.
    std::string out = original;
    out += "\n# applied on top of the above with --set:\n";
    for (const auto& o : overrides) out += "#   " + o + "\n";
    return out;
  }
}

namespace {

// What each key means, and a type where the parser's own word would mislead. The parser records
// key, type, default and range itself; a key missing here still appears, with no description.
const std::map<std::string, std::pair<std::string, std::string>>& key_docs() {
  static const std::map<std::string, std::pair<std::string, std::string>> docs = {
      {"model.name", {"", "architecture from the zoo"}},
      {"model.preset", {"", "a published configuration (docs/estimator.md): its [model] keys, and for a run file "
                            "without sources its [data] shape; keys set here win"}},
      {"model.channels", {"", "unet: width per level"}},
      {"model.groups", {"", "unet: GroupNorm groups (each width a multiple)"}},
      {"model.patch_size", {"", "vit, fourcastnet, pangu: patch edge in grid points"}},
      {"model.embed_dim", {"", "vit, fourcastnet, pangu: token width (a multiple of heads, of afno_blocks)"}},
      {"model.depth", {"", "vit: transformer blocks; fourcastnet: AFNO blocks"}},
      {"model.heads", {"", "vit: attention heads"}},
      {"model.mlp_ratio", {"", "vit, fourcastnet, pangu: MLP width / embed_dim"}},
      {"model.latent", {"", "gnn, graphcast: node and edge latent width"}},
      {"model.processor_layers", {"", "gnn, graphcast: message-passing rounds"}},
      {"model.neighbourhood", {"", "gnn: grid radius of each node's edges (1 = 8 neighbours)"}},
      {"model.mlp_layers", {"", "gnn, graphcast: Linear layers of every MLP (GraphCast: 2)"}},
      {"model.afno_blocks", {"", "fourcastnet: blocks of the block-diagonal spectral MLP (divides embed_dim)"}},
      {"model.sparsity_threshold", {"", "fourcastnet: soft-shrinkage lambda on the filtered Fourier modes"}},
      {"model.hard_thresholding_fraction", {"", "fourcastnet: share of the lowest Fourier modes filtered (1 = all)"}},
      {"model.mesh_refinement", {"", "graphcast: icosahedron refinements of the multi-mesh (10 x 4^r + 2 nodes; GraphCast 0.25: 6)"}},
      {"model.edge_block",
       {"", "graphcast: grid2mesh/mesh2grid edges updated this many at a time (0 = all); with checkpointing "
            "no edge-sized tensor of the whole set is held"}},
      {"model.upper_variables", {"", "pangu: upper-air variables V; the first V x levels channels of each state, variable-major"}},
      {"model.levels", {"", "pangu: pressure levels of each upper-air variable (0 with upper_variables = 0)"}},
      {"model.level_patch", {"", "pangu: levels per patch of the 3-D embedding (patch_size is its lat/lon edge)"}},
      {"model.window", {"", "pangu: attention window [levels, lat, lon] in tokens"}},
      {"model.stage_depths", {"", "pangu: transformer blocks of the four stages"}},
      {"model.stage_heads", {"", "pangu: attention heads of the four stages (stages 2 and 3 are 2 x embed_dim wide)"}},
      {"data.sources", {"array of tables", "[[data.sources]]: one variable from one file each (keys below)"}},
      {"data.sources.file", {"", "NetCDF file, Zarr store or GRIB file (required)"}},
      {"data.sources.variable", {"", "the variable's name in the file (required)"}},
      {"data.sources.name", {"", "wxtrain's name for it (default: variable); unique"}},
      {"data.sources.levels", {"", "level coordinate values to take, one channel <name>_<level> each"}},
      {"data.sources.role", {"", "prognostic (input and predicted), forcing (input only) or diagnostic (predicted only)"}},
      {"data.static", {"array of tables", "[[data.static]]: constant 2-D input fields (keys below)"}},
      {"data.static.file", {"", "file holding the field (required)"}},
      {"data.static.variable", {"", "the field's name in the file (required)"}},
      {"data.static.name", {"", "wxtrain's name for it (default: variable); unique"}},
      {"data.static.regrid", {"", "none: on the data's grid; nearest: nearest point of another lat/lon grid"}},
      {"data.forcings", {"", "computed input forcings, each at the step's valid time: " + join(computed_forcing_names())}},
      {"data.time_origin", {"", "date of the first state for data without CF time units (with time_step)"}},
      {"data.region", {"", "{ lat = [south, north], lon = [west, east] }: crop every source (west > east crosses 0/360)"}},
      {"data.region.lat", {"", "[south, north] in degrees"}},
      {"data.region.lon", {"", "[west, east] in degrees"}},
      {"data.boundary", {"", "cells of the region's frame overwritten by the truth each step and kept out of the loss"}},
      {"data.variables", {"", "without sources: prognostic channel names, to estimate without data"}},
      {"data.diagnostic_variables", {"", "without sources: predicted-only channel names"}},
      {"data.forcing_variables", {"", "without sources: input-only channel names from files"}},
      {"data.grid", {"", "without sources: [lat, lon]"}},
      {"data.history", {"", "input states per sample"}},
      {"data.rollout_steps", {"", "predicted states per sample (autoregressive); or train.rollout_schedule"}},
      {"data.val_fraction", {"", "trailing share of the time axis for validation"}},
      {"data.time_step", {"", "the model's step, e.g. \"6h\"; \"\" = the data's spacing"}},
      {"data.train_period", {"", "[first, last] dates of training samples (with val_period)"}},
      {"data.val_period", {"", "[first, last] dates of validation samples (with train_period)"}},
      {"data.prefetch", {"", "background loader workers (0 = load inline)"}},
      {"data.queue_depth", {"", "batches buffered ahead"}},
      {"data.load_delay_ms", {"", "artificial delay per batch (benchmarks)"}},
      {"train.batch_size", {"integer or \"auto\"", "micro-batch per rank; \"auto\" tunes it first"}},
      {"train.accumulation", {"", "micro-batches per optimizer step"}},
      {"train.precision", {"", "fp32, autocast mixed (bf16/fp16), or pure bf16 with fp32 master weights"}},
      {"train.checkpointing", {"", "recompute each block in backward (activation checkpointing)"}},
      {"train.rollout_checkpointing",
       {"", "keep only each rollout step's input and replay the step in backward (long rollouts)"}},
      {"train.optimizer", {"", "optimizer"}},
      {"train.lr", {"", "peak learning rate"}},
      {"train.weight_decay", {"", "decoupled (adamw) or L2 (adam, sgd) weight decay"}},
      {"train.momentum", {"", "sgd: momentum (0 = none)"}},
      {"train.beta1", {"", "adam, adamw: first-moment decay"}},
      {"train.beta2", {"", "adam, adamw: second-moment decay"}},
      {"train.eps", {"", "adam, adamw: denominator term"}},
      {"train.steps", {"", "optimizer steps in the run"}},
      {"train.warmup_steps", {"", "linear warmup steps, then cosine decay"}},
      {"train.min_lr_ratio", {"", "cosine floor as a fraction of lr"}},
      {"train.grad_clip", {"", "max global gradient norm (0 = off)"}},
      {"train.seed", {"", "model init, shuffling, dropout"}},
      {"train.device", {"", "auto, cpu, cuda or cuda:N"}},
      {"train.out_dir", {"", "the run's folder: checkpoint.pt, metrics.csv, validation.csv, run.toml, command.txt"}},
      {"train.checkpoint_every", {"", "steps between checkpoints (0 = only at the end and on a stop)"}},
      {"train.log_every", {"", "steps between progress lines when not on a terminal"}},
      {"train.val_every", {"", "steps between validations (0 = at each epoch's end)"}},
      {"train.val_lead_steps", {"", "validation rollout length in steps (0 = the longest training rollout)"}},
      {"train.climatology_window", {"", "climatology: training states within this many days of the day of year"}},
      {"train.loss_weights", {"", "[train.loss_weights] channel or glob = weight (first match in file order)"}},
      {"train.level_weighting", {"", "uniform, linear (proportional to the level, as GraphCast) or table"}},
      {"train.level_weights", {"", "[train.level_weights] \"500\" = weight (level_weighting = \"table\")"}},
      {"train.rollout_schedule", {"", "curriculum: [[from step, rollout], ...]; replaces data.rollout_steps"}},
      {"train.residual_normalization", {"", "scale the predicted tendency by the std of one-step differences"}},
      {"train.loss_scale", {"", "fp16-mixed: initial loss scale"}},
      {"train.scale_growth", {"", "fp16-mixed: scale factor after scale_interval finite steps"}},
      {"train.scale_backoff", {"", "fp16-mixed: scale factor after a non-finite step"}},
      {"train.scale_interval", {"", "fp16-mixed: finite steps before the scale grows"}},
      {"train.init_from", {"", "checkpoint whose weights start this run (\"\" = none)"}},
      {"train.strict", {"", "init_from: every name must match"}},
      {"train.freeze", {"", "glob patterns of parameter names to freeze"}},
      {"train.frozen_lr_scale", {"", "lr multiplier of frozen groups (0 = frozen)"}},
      {"memory.limit", {"", "device budget for tune-batch and estimate (0 = the device's size)"}},
      {"memory.margin", {"", "share of the budget tune-batch keeps free"}},
      {"memory.multiple_of", {"", "tune-batch keeps batch sizes multiples of this"}},
      {"memory.max_batch", {"", "tune-batch never goes above"}},
      {"memory.probe_steps", {"", "training steps per tune-batch probe"}},
      {"distributed.zero_stage", {"", "0 = DDP, 1-2 = ZeRO (3: estimate only)"}},
      {"distributed.world_size", {"", "ranks for estimate (0 = from MPI)"}},
      {"distributed.bucket_mb", {"", "gradient bucket size in MB"}},
      {"distributed.backend", {"", "collectives: auto, mpi or nccl"}},
  };
  return docs;
}

}  // namespace

std::vector<ConfigKey> config_keys() {
  // The smallest run file every section accepts: one source, so [[data.sources]]'s keys are read
  // too. Defaults are recorded from the structs before a key is read, so nothing here shows.
  std::vector<ConfigKey> keys;
  g_catalogue = &keys;
  try {
    build(parse_toml("[data]\nregion = { lat = [0, 1], lon = [0, 1] }\n[[data.sources]]\nfile = \"f\"\n"
                     "variable = \"v\"\n[[data.static]]\nfile = \"f\"\nvariable = \"s\"\n",
                     "config_keys"),
          "config_keys");
  } catch (...) {
    g_catalogue = nullptr;
    throw;
  }
  g_catalogue = nullptr;
  for (auto& k : keys) {
    auto it = key_docs().find(k.key);
    if (it == key_docs().end()) continue;
    if (!it->second.first.empty()) k.type = it->second.first;
    k.doc = it->second.second;
  }
  return keys;
}

std::string config_keys_markdown() {
  auto cell = [](const std::string& text) {
    std::string out;
    for (char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
    return out;
  };
  std::string md =
      "# Run-file keys\n\n"
      "Every key of the run file (TOML) with its type, built-in default and accepted range. A value\n"
      "outside its range is an error naming the file, line and key (exit code 2). This file is\n"
      "generated from the parser itself (core/config.cpp) by `wxtrain config-keys --markdown`; the\n"
      "CTest `docs.config_keys` fails when the two differ. Regenerate it with\n\n"
      "    build/cli/wxtrain config-keys --markdown > docs/config.md\n";
  // Sections in the order the parser reads them, [[data.sources]] after the rest of [data].
  std::vector<ConfigKey> keys = config_keys();
  auto section_of = [](const ConfigKey& k) { return k.key.substr(0, k.key.rfind('.')); };
  std::vector<std::string> order;
  for (const auto& k : keys)
    if (std::find(order.begin(), order.end(), section_of(k)) == order.end()) order.push_back(section_of(k));
  auto rank = [&](const std::string& s) {
    const auto own = std::find(order.begin(), order.end(), s) - order.begin();
    // Sub-tables of [data] ([[data.sources]], [[data.static]], data.region) follow [data] itself.
    if (s.rfind("data.", 0) == 0)
      return 2.0 * static_cast<double>(std::find(order.begin(), order.end(), "data") - order.begin()) + 1 +
             static_cast<double>(own) / 1000.0;
    return 2.0 * static_cast<double>(own);
  };
  std::stable_sort(keys.begin(), keys.end(),
                   [&](const ConfigKey& a, const ConfigKey& b) { return rank(section_of(a)) < rank(section_of(b)); });
  std::string section;
  for (const auto& k : keys) {
    const std::string s = section_of(k);
    if (s != section) {
      section = s;
      md += "\n## " + (s == "data.sources" || s == "data.static" ? "[[" + s + "]]" : "[" + s + "]") + "\n\n";
      md += "| key | type | default | range | meaning |\n|---|---|---|---|---|\n";
    }
    md += "| `" + k.key.substr(s.size() + 1) + "` | " + cell(k.type) + " | " +
          (k.default_value.empty() ? "" : "`" + cell(k.default_value) + "`") + " | " + cell(k.range) + " | " +
          cell(k.doc) + " |\n";
  }
  return md;
}

}  // namespace wxtrain
