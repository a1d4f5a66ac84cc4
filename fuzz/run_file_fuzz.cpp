// libFuzzer target for the run-file parser (core/config.cpp): the bytes up to the first NUL are a
// run file, the lines after it --set overrides ("section.key=value"). parse_config must accept it
// or throw ConfigError; a crash, leak, sanitizer report or another exception is a bug.
//
// What `train` records as <out_dir>/run.toml is checked too: when parse_config accepts a file with
// overrides, apply_overrides_to_text must give a file that alone parses to the same run (unless it
// fell back to listing the overrides in a comment, which it does when the line editor cannot place
// a key). Seeds: fuzz/corpus/run_file_fuzz/ (configs/*.toml, some with overrides), written by
// fuzz/make_seeds_run_file.sh.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/run_file_text.h"

namespace {

// What identifies a run, as text: two configs that print the same train the same model the same way.
std::string fingerprint(const wxtrain::RunConfig& c) {
  std::ostringstream s;
  s.precision(17);
  s << c.model.name << '|' << c.model.preset << '\n' << wxtrain::model_options_text(c.model);
  const auto& d = c.data;
  s << "\n" << d.lat << '|' << d.lon << '|' << d.history << '|' << d.rollout_steps << '|' << d.val_fraction << '|'
    << d.time_step << '|' << d.prefetch << '|' << d.queue_depth << '|' << d.load_delay_ms;
  for (const auto& src : d.sources) {
    s << "\nsource " << src.file << '|' << src.variable << '|' << src.name;
    for (double level : src.levels) s << ',' << level;
  }
  for (const auto& v : d.variables) s << "\nvariable " << v;
  for (const auto& p : d.train_period) s << "\ntrain_period " << p;
  for (const auto& p : d.val_period) s << "\nval_period " << p;
  const auto& t = c.train;
  s << "\n" << t.batch_size << '|' << t.batch_auto << '|' << t.accumulation << '|' << to_string(t.precision) << '|'
    << t.checkpointing << '|' << t.optimizer << '|' << t.lr << '|' << t.weight_decay << '|' << t.momentum << '|'
    << t.beta1 << '|' << t.beta2 << '|' << t.eps << '|' << t.steps << '|' << t.warmup_steps << '|'
    << t.min_lr_ratio << '|' << t.grad_clip << '|' << t.seed << '|' << t.device << '|' << t.out_dir << '|'
    << t.checkpoint_every << '|' << t.log_every << '|' << t.val_every << '|' << t.loss_scale << '|'
    << t.scale_growth << '|' << t.scale_backoff << '|' << t.scale_interval << '|' << t.init_from << '|' << t.strict
    << '|' << t.frozen_lr_scale << '|' << t.prediction;
  for (const auto& f : t.freeze) s << ',' << f;
  s << "\n" << c.memory.limit << '|' << c.memory.margin << '|' << c.memory.multiple_of << '|' << c.memory.max_batch
    << '|' << c.memory.probe_steps;
  s << "\n" << c.distributed.zero_stage << '|' << c.distributed.world_size << '|' << c.distributed.bucket_mb << '|'
    << c.distributed.backend;
  return s.str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string text = input.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string::npos) {
    std::istringstream lines(input.substr(nul + 1));
    for (std::string line; std::getline(lines, line) && overrides.size() < 8;) overrides.push_back(line);
  }
  wxtrain::RunConfig config;
  try {
    config = wxtrain::parse_config(text, "fuzz.toml", overrides);
  } catch (const wxtrain::ConfigError&) {
    return 0;  // a wrong run file is reported, which is what is asked of the parser
  }
  (void)config.num_variables();
  if (overrides.empty()) return 0;
  // run.toml: the file with the overrides written in must replay the same run.
  const std::string recorded = wxtrain::apply_overrides_to_text(text, overrides);
  if (recorded.rfind(text + "\n# applied on top of the above with --set:\n", 0) == 0) return 0;  // the fallback
  wxtrain::RunConfig replayed;
  try {
    replayed = wxtrain::parse_config(recorded, "run.toml");
  } catch (const wxtrain::ConfigError& e) {
    std::fprintf(stderr, "run.toml does not parse: %s\n--- run.toml ---\n%s\n", e.what(), recorded.c_str());
    __builtin_trap();
  }
  if (fingerprint(replayed) != fingerprint(config)) {
    std::fprintf(stderr, "run.toml replays another run\n--- with --set ---\n%s\n--- run.toml ---\n%s\n",
                 fingerprint(config).c_str(), fingerprint(replayed).c_str());
    __builtin_trap();
  }
  return 0;
}
