#include "core/config_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.h"
#include "core/units.h"

namespace wxtrain {
namespace {

// The catalogue the SectionReaders of this thread record into while a KeyCatalogue is open.
thread_local std::vector<ConfigKey>* g_catalogue = nullptr;

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

// "1 to 64"; bounds at the type's practical limit are left out (">= 1").
std::string range_text(int64_t min, int64_t max) {
  if (max >= (int64_t{1} << 40)) return ">= " + std::to_string(min);
  return std::to_string(min) + " to " + std::to_string(max);
}

std::string range_text(double min, double max, Lower lower) {
  const std::string low = (lower == Lower::kExclusive ? "> " : ">= ") + toml_text(min);
  if (max >= 1e9) return low;
  return lower == Lower::kExclusive ? low + " and <= " + toml_text(max) : toml_text(min) + " to " + toml_text(max);
}

}  // namespace

KeyCatalogue::KeyCatalogue(std::vector<ConfigKey>& keys) : previous_(g_catalogue) { g_catalogue = &keys; }
KeyCatalogue::~KeyCatalogue() { g_catalogue = previous_; }

std::string did_you_mean(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = 3;  // further than two edits is not a typo
  for (const auto& k : known) {
    size_t d = edit_distance(key, k);
    if (d < best_d) best_d = d, best = k;
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

std::string join_list(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

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

toml::table parse_toml(const std::string& text, const std::string& source_name) {
  try {
    return toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    throw ConfigError(source_name + ":" + std::to_string(e.source().begin.line) + ":" +
                      std::to_string(e.source().begin.column) + ": malformed TOML: " +
                      std::string(e.description()));
  }
}

std::string SectionReader::where(const toml::node* node) const {
  if (node && node->source().begin.line > 0) return file_ + ":" + std::to_string(node->source().begin.line);
  if (node) return "command line (--set)";
  return file_;
}

void SectionReader::fail(const std::string& key, const std::string& what) const {
  const toml::node* node = table_ ? table_->get(key) : nullptr;
  const std::string at = where(node);
  throw ConfigError((at.empty() ? "" : at + ": ") + section_ + "." + key + " " + what);
}

const toml::node* SectionReader::node(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  record(key, "", "", "");
  return table_ ? table_->get(key) : nullptr;
}

void SectionReader::accept(const std::vector<std::string>& keys) {
  for (const auto& k : keys)
    if (std::find(known_.begin(), known_.end(), k) == known_.end()) known_.push_back(k);
}

void SectionReader::record(const std::string& key, const std::string& type, const std::string& default_value,
                           const std::string& range, const std::string& doc) const {
  if (!g_catalogue) return;
  const std::string full = section_ + "." + key;
  auto it = std::find_if(g_catalogue->begin(), g_catalogue->end(), [&](const ConfigKey& k) { return k.key == full; });
  if (it == g_catalogue->end()) it = g_catalogue->insert(g_catalogue->end(), ConfigKey{full, "", "", "", ""});
  if (!type.empty()) it->type = type;
  if (!default_value.empty()) it->default_value = default_value;
  if (!range.empty()) it->range = range;
  if (!doc.empty()) it->doc = doc;
}

void SectionReader::check_int(const std::string& key, int64_t v, int64_t min, int64_t max) const {
  if (v < min || v > max) fail(key, "= " + std::to_string(v) + " is out of range: expected " + range_text(min, max));
}

void SectionReader::get(const std::string& key, int64_t& out, int64_t min, int64_t max) {
  record(key, "integer", toml_text(out), range_text(min, max));
  if (!reading()) {
    if (checking_values()) check_int(key, out, min, max);
    return;
  }
  const toml::node* n = node(key);
  if (!n) return;
  if (!n->is_integer()) fail(key, "must be an integer, got " + type_name(*n));
  const int64_t v = n->as_integer()->get();
  check_int(key, v, min, max);
  out = v;
}

void SectionReader::get(const std::string& key, double& out, double min, double max, Lower lower) {
  record(key, "number", toml_text(out), range_text(min, max, lower));
  double v = out;
  if (describing()) return;
  if (reading()) {
    const toml::node* n = node(key);
    if (!n) return;
    if (n->is_floating_point()) v = n->as_floating_point()->get();
    else if (n->is_integer()) v = static_cast<double>(n->as_integer()->get());
    else fail(key, "must be a number, got " + type_name(*n));
  }
  if (!(v >= min && v <= max) || (lower == Lower::kExclusive && v == min)) {
    std::ostringstream s;
    s << "= " << v << " is out of range: expected " << range_text(min, max, lower);
    fail(key, s.str());
  }
  out = v;
}

void SectionReader::get(const std::string& key, bool& out) {
  record(key, "boolean", toml_text(out), "");
  if (!reading()) return;
  const toml::node* n = node(key);
  if (!n) return;
  if (!n->is_boolean()) fail(key, "must be true or false, got " + type_name(*n));
  out = n->as_boolean()->get();
}

void SectionReader::get(const std::string& key, std::string& out) {
  record(key, "string", toml_text(out), "");
  if (!reading()) return;
  const toml::node* n = node(key);
  if (!n) return;
  if (!n->is_string()) fail(key, "must be a string, got " + type_name(*n));
  out = n->as_string()->get();
}

void SectionReader::get_choice(const std::string& key, std::string& out, const std::vector<std::string>& choices) {
  record(key, "", "", "one of " + join_list(choices));
  get(key, out);
  if (describing()) return;
  if (std::find(choices.begin(), choices.end(), out) == choices.end())
    fail(key, "= '" + out + "' is not valid: expected one of " + join_list(choices) + did_you_mean(out, choices));
}

void SectionReader::get(const std::string& key, std::vector<int64_t>& out, int64_t min) {
  record(key, "array of integers", toml_text(out), "entries >= " + std::to_string(min));
  if (!reading()) {
    if (checking_values())
      for (int64_t v : out)
        if (v < min) fail(key, "has " + std::to_string(v) + ": every entry must be >= " + std::to_string(min));
    return;
  }
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

void SectionReader::get(const std::string& key, std::vector<double>& out) {
  record(key, "array of numbers", toml_text(out), "");
  if (!reading()) return;
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

void SectionReader::get(const std::string& key, std::vector<std::string>& out) {
  record(key, "array of strings", toml_text(out), "");
  if (!reading()) return;
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

void SectionReader::get_bytes(const std::string& key, int64_t& out) {
  record(key, "size (\"24GiB\" or bytes)", toml_text(out), ">= 0");
  if (describing()) return;
  if (reading()) {
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
  }
  if (out < 0) fail(key, "must not be negative");
}

void SectionReader::finish() const {
  if (!table_) return;
  for (const auto& [k, v] : *table_) {
    std::string key(k.str());
    if (std::find(known_.begin(), known_.end(), key) == known_.end())
      throw ConfigError(where(&v) + ": unknown key " + section_ + "." + key + did_you_mean(key, known_) +
                        "; known keys: " + join_list(known_));
  }
}

std::string SectionReader::type_name(const toml::node& n) {
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

}  // namespace wxtrain
