#pragma once
// Starting from a reference implementation's checkpoint (train.init_from, forecast --checkpoint):
// kept apart from checkpoint_io so that the loader of wxtrain's own files needs no model code (the
// checkpoint fuzzer links checkpoint_io.cpp alone; interop/ pulls in every model's translation).
#include <string>

#include "core/config.h"
#include "trainer/checkpoint_io.h"

namespace wxtrain::trainer {

// Whether `path` holds a reference implementation's checkpoint (a PhysicsNeMo .mdlus or a
// torch.save state_dict: interop/reference_checkpoint.h) rather than one wxtrain wrote.
bool is_reference_checkpoint(const std::string& path);
// Such a checkpoint as one of `config`'s model, for train.init_from and forecast --checkpoint: its
// weights under our names; its channels those it records (a .mdlus wxtrain exported) or else the
// run's, by position; the statistics beside it (global_means.npy, global_stds.npy) under those
// channels' names. ConfigError, naming the keys, when args.json builds another network than the
// run's [model], when the channel counts differ, or when the run does not predict the state as
// the reference does (train.prediction). `report` receives what was loaded, for the terminal.
Checkpoint load_reference_checkpoint(const std::string& path, const RunConfig& config, std::string* report = nullptr);

}  // namespace wxtrain::trainer
