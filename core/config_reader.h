#pragma once
// How a run file's tables are read. A SectionReader reads one [section] key by key: each get()
// checks the value's type and range and names the file, line and key when it is wrong; finish()
// rejects the keys nobody asked for, with a did-you-mean. The run-file schema (core/config.cpp)
// and each model's own [model] keys (models/<name>/<name>_options.cpp) are written with it, so
// every key of wxtrain is read, checked and documented the same way:
//   - while a KeyCatalogue is open, every key a reader is asked for is recorded with its type,
//     default (the value in the struct before reading) and range: docs/config.md is the parser;
//   - a reader with no table in Mode::kCheckValues reads nothing and checks the values already
//     in the struct against the same ranges, so options built in code (tests, benchmarks) are
//     held to the rules the run file is (models::build_model does this).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <toml++/toml.h>

namespace wxtrain {

// One key of the run file as the parser reads it (config_keys(), `wxtrain config-keys`).
struct ConfigKey {
  std::string key;            // "train.steps", "data.sources.file", "model.channels"
  std::string type;           // "integer", "number", "string", "array of integers", ...
  std::string default_value;  // TOML text of the built-in default
  std::string range;          // ">= 1", "0 to 0.9", "one of fp32, bf16-mixed, ...", "" = any
  std::string doc;            // what it means
  std::string model;          // [model] keys: the model whose options they are ("" otherwise)
};

// While one is alive (on this thread), SectionReaders record every key they are asked for into
// `keys`; a key asked for again keeps what was recorded first unless new fields are given.
class KeyCatalogue {
 public:
  explicit KeyCatalogue(std::vector<ConfigKey>& keys);
  ~KeyCatalogue();
  KeyCatalogue(const KeyCatalogue&) = delete;
  KeyCatalogue& operator=(const KeyCatalogue&) = delete;

 private:
  std::vector<ConfigKey>* previous_;
};

// Whether a lower bound is itself allowed: eps = 0 would divide by zero in Adam.
enum class Lower { kInclusive, kExclusive };

class SectionReader {
 public:
  // kRead: values come from `table` (nullptr: an absent section, every key keeps its default).
  // kCheckValues: nothing is read; each get() checks the value already in `out`.
  // kDescribe: nothing is read or checked; each get() only records the key and its value.
  enum class Mode { kRead, kCheckValues, kDescribe };

  SectionReader(const toml::table* table, std::string file, std::string section, Mode mode = Mode::kRead)
      : table_(table), file_(std::move(file)), section_(std::move(section)), mode_(mode) {}

  const std::string& section() const { return section_; }

  // "file:line" of a node, "command line (--set)" for a value given with --set, the file otherwise.
  std::string where(const toml::node* node) const;
  // Throws ConfigError "<where>: <section>.<key> <what>".
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;

  // The key's node (nullptr when absent), marking the key as known.
  const toml::node* node(const std::string& key);
  // Records the key in the open catalogue; empty fields keep what an earlier call recorded.
  void record(const std::string& key, const std::string& type, const std::string& default_value,
              const std::string& range, const std::string& doc = "") const;
  // The key's meaning, for the catalogue.
  void describe(const std::string& key, const std::string& doc) const { record(key, "", "", "", doc); }

  void get(const std::string& key, int64_t& out, int64_t min, int64_t max);
  void get(const std::string& key, double& out, double min, double max, Lower lower = Lower::kInclusive);
  void get(const std::string& key, bool& out);
  void get(const std::string& key, std::string& out);
  void get_choice(const std::string& key, std::string& out, const std::vector<std::string>& choices);
  void get(const std::string& key, std::vector<int64_t>& out, int64_t min);
  void get(const std::string& key, std::vector<double>& out);
  void get(const std::string& key, std::vector<std::string>& out);
  void get_bytes(const std::string& key, int64_t& out);
  // Marks keys as known without reading them (keys another reader owns).
  void accept(const std::vector<std::string>& keys);

  // Rejects every key of the table that no get()/node()/accept() asked for.
  void finish() const;
  const std::vector<std::string>& known_keys() const { return known_; }

  static std::string type_name(const toml::node& n);

 private:
  bool reading() const { return mode_ == Mode::kRead; }
  bool checking_values() const { return mode_ == Mode::kCheckValues; }
  bool describing() const { return mode_ == Mode::kDescribe; }
  void check_int(const std::string& key, int64_t v, int64_t min, int64_t max) const;

  const toml::table* table_;
  std::string file_;
  std::string section_;
  Mode mode_;
  std::vector<std::string> known_;
};

// Parses TOML text; a syntax error is a ConfigError "<source>:<line>:<column>: malformed TOML: ...".
toml::table parse_toml(const std::string& text, const std::string& source_name);

// " (did you mean 'x'?)" for the closest of `known` within two edits of `key`, "" otherwise.
std::string did_you_mean(const std::string& key, const std::vector<std::string>& known);
std::string join_list(const std::vector<std::string>& v, const std::string& sep = ", ");

// TOML text of a value, shortest form that reads back the same ("0.1", "1.0", "[2, 6, 12]").
std::string toml_text(int64_t v);
std::string toml_text(double v);
std::string toml_text(bool v);
std::string toml_text(const std::string& v);
template <typename T>
std::string toml_text(const std::vector<T>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + toml_text(v[i]);
  return out + "]";
}

}  // namespace wxtrain
