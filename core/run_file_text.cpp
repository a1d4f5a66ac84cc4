#include "core/run_file_text.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <sys/stat.h>

#include "core/atomic_file.h"
#include "core/config_reader.h"
#include "core/error.h"

namespace wxtrain {

std::string read_run_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw ConfigError(path + ": is a folder; expected a run file (TOML), e.g. configs/storm_unet.toml");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open the run file (does it exist?)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
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

// Byte offset of a toml++ source position (1-based line and column, the column in code points).
size_t offset_of(const std::string& text, const toml::source_position& at) {
  size_t offset = 0;
  for (toml::source_index line = 1; line < at.line && offset < text.size(); ++line) {
    const size_t newline = text.find('\n', offset);
    if (newline == std::string::npos) return text.size();
    offset = newline + 1;
  }
  for (toml::source_index column = 1; column < at.column && offset < text.size(); ++column) {
    ++offset;  // past one code point: its lead byte and its continuation bytes
    while (offset < text.size() && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) ++offset;
  }
  return offset;
}

}  // namespace

std::string absolute_paths_in_text(const std::string& text, const std::string& folder) {
  namespace fs = std::filesystem;
  const toml::table root = parse_toml(text, "run file");
  std::vector<const toml::node*> paths;  // the string values that name a file the run reads
  auto add = [&](const toml::node* n) {
    if (n && n->is_string() && !n->as_string()->get().empty() && !fs::path(n->as_string()->get()).is_absolute())
      paths.push_back(n);
  };
  for (const char* list : {"sources", "static"})
    if (const toml::array* a = root.at_path(std::string("data.") + list).as_array())
      for (const auto& entry : *a)
        if (const toml::table* t = entry.as_table()) add(t->get("file"));
  add(root.at_path("train.init_from").node());
  // Replaced from the last to the first, so the earlier offsets stay valid.
  std::sort(paths.begin(), paths.end(), [&](const toml::node* a, const toml::node* b) {
    return offset_of(text, a->source().begin) > offset_of(text, b->source().begin);
  });
  std::string out = text;
  for (const toml::node* n : paths) {
    const size_t begin = offset_of(text, n->source().begin), end = offset_of(text, n->source().end);
    const std::string absolute = (fs::path(folder) / n->as_string()->get()).lexically_normal().string();
    out.replace(begin, end - begin, toml_text(absolute));
  }
  parse_toml(out, "run file");  // never hand on a text that does not read back
  return out;
}

std::vector<std::string> absolute_paths_in_overrides(const std::vector<std::string>& overrides) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const auto& o : overrides) {
    const auto eq = o.find('=');
    if (eq == std::string::npos || o.substr(0, eq) != "train.init_from") {
      out.push_back(o);
      continue;
    }
    std::string value = o.substr(eq + 1);
    try {
      const toml::table t = toml::parse("v = " + value);
      if (const auto s = t["v"].value<std::string>()) value = *s;
    } catch (const toml::parse_error&) {
      // a bare path such as ckpt/checkpoint.pt, as --set reads it
    }
    if (!value.empty() && !fs::path(value).is_absolute()) value = (fs::current_path() / value).lexically_normal().string();
    out.push_back("train.init_from=" + toml_text(value));
  }
  return out;
}

void write_config_value(const std::string& path, const std::string& section, const std::string& key,
                        const std::string& toml_value) {
  const std::string out = set_value_in_text(read_run_file(path), section, key, toml_value);
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

void flatten_node(const toml::node& node, const std::string& key, std::vector<std::pair<std::string, std::string>>& out);

// TOML text of a value as a run file writes it: "0.002", "\"a.nc\"", "[8, 16]" (toml++'s own
// formatter pads arrays: "[ 8, 16 ]").
std::string value_text(const toml::node& node) {
  if (const toml::array* a = node.as_array()) {
    std::string text = "[";
    for (size_t i = 0; i < a->size(); ++i) text += (i ? ", " : "") + value_text((*a)[i]);
    return text + "]";
  }
  std::ostringstream text;
  text << toml::toml_formatter(node, toml::format_flags::none);
  return text.str();
}

void flatten_table(const toml::table& table, const std::string& prefix,
                   std::vector<std::pair<std::string, std::string>>& out) {
  // toml++ keeps a table's keys sorted; the file's order is the order of their lines.
  std::vector<std::pair<std::string, const toml::node*>> entries;
  for (const auto& [k, v] : table) entries.emplace_back(std::string(k.str()), &v);
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.second->source().begin.line < b.second->source().begin.line;
  });
  for (const auto& [k, v] : entries) flatten_node(*v, prefix.empty() ? k : prefix + "." + k, out);
}

void flatten_node(const toml::node& node, const std::string& key, std::vector<std::pair<std::string, std::string>>& out) {
  if (const toml::table* t = node.as_table()) return flatten_table(*t, key, out);
  if (const toml::array* a = node.as_array(); a && a->is_array_of_tables()) {
    for (size_t i = 0; i < a->size(); ++i) flatten_table(*(*a)[i].as_table(), key + "." + std::to_string(i), out);
    return;
  }
  if (const auto* s = node.as_string()) {
    out.emplace_back(key, s->get());
    return;
  }
  out.emplace_back(key, value_text(node));
}

}  // namespace

std::vector<std::pair<std::string, std::string>> flatten_run_file(const std::string& toml_text,
                                                                  const std::string& source_name) {
  std::vector<std::pair<std::string, std::string>> out;
  flatten_table(parse_toml(toml_text, source_name), "", out);
  return out;
}

}  // namespace wxtrain
