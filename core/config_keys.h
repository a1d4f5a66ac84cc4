#pragma once
// Every key of the run file, from the parser itself: `wxtrain config-keys` prints them and
// docs/config.md is their Markdown (the CTest docs.config_keys fails when the two differ). Types,
// defaults and ranges are recorded by the SectionReaders as they read (core/config_reader.h); the
// meanings of core's keys are below in config_keys.cpp, each model's with its options.
#include <string>
#include <vector>

#include "core/config_reader.h"

namespace wxtrain {

// core's sections' keys in reading order, with each model's own [model] keys after model.preset
// (key "model.<key>", ConfigKey::model naming the model; a key several models read is listed
// once for each, as each has its own default and meaning).
std::vector<ConfigKey> config_keys();
// docs/config.md: every key in a Markdown table per section.
std::string config_keys_markdown();

}  // namespace wxtrain
