// `wxtrain config-keys`: every run-file key with its type, default and range, as the parser records
// them while it reads (core/config.cpp). `--markdown` prints docs/config.md, which CTest compares
// with this output so the documentation cannot drift from the code.
#include <iostream>

#include "cli/commands.h"
#include "cli/table.h"
#include "core/config_keys.h"

namespace wxtrain::cli {

Action add_config_keys_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("config-keys", "list every run-file key with its type, default and accepted range");
  auto markdown = std::make_shared<bool>(false);
  cmd->add_flag("--markdown", *markdown, "print docs/config.md (Markdown tables per section)");
  return [markdown]() {
    if (*markdown) {
      std::cout << config_keys_markdown();
      return 0;
    }
    Table t({"key", "type", "default", "range", "meaning"}, {false, false, false, false, false});
    for (const auto& k : config_keys()) t.add({k.key, k.type, k.default_value, k.range, k.doc});
    std::cout << t.str();
    return 0;
  };
}

}  // namespace wxtrain::cli
