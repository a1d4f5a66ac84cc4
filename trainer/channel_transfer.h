#pragma once
// Fine-tuning onto another set of channels. A checkpoint trained on one list of input channels
// ("t_850@t-1", "t_850@t0", "lsm", ...) and output channels ("t_850", "tp", ...) initialises a
// model built for another list: a variable added, one dropped, the order changed. Everything that
// does not depend on the channels loads as load_weights would; the parameters the model lists in
// channel_axes() (its first and last layers) are carried over slice by slice, by channel name, and
// a channel the checkpoint does not have keeps the model's fresh initialisation.
#include <string>
#include <vector>

#include "models/weather_model.h"
#include "trainer/checkpoint_io.h"

namespace wxtrain::trainer {

struct ChannelTransferReport {
  // By channel name, in the new lists' order (dropped: the checkpoint's order).
  std::vector<std::string> matched_inputs, new_inputs, dropped_inputs;
  std::vector<std::string> matched_outputs, new_outputs, dropped_outputs;
  std::vector<std::string> loaded;       // parameters and buffers copied whole
  std::vector<std::string> remapped;     // parameters copied channel by channel
  std::vector<std::string> regridded;    // grid-sized tensors fitted to this grid ("name: how"; GridFit)
  std::vector<std::string> initialised;  // left at their fresh init: absent from the checkpoint, or
                                         // channel-indexed with no channel in common
  std::vector<std::string> unexpected;   // in the checkpoint, not in the model
  // The share of the model's values (elements of its parameters and buffers) in tensors loaded,
  // remapped or fitted to this grid; a remapped tensor counts whole.
  double loaded_share = 0;
  // Buffers built from the grid (GraphCast's graph; GridFit::rebuilt) that the checkpoint has for
  // another grid, or not at all: the model keeps its own. grid_change: what differs, in a line.
  std::vector<std::string> rebuilt;
  std::string grid_change;
  // A few lines for the terminal:
  //   input channels: 12 matched, 1 new (insolation@t+1), 0 dropped
  //   output channels: 6 matched, 1 new (tp), 0 dropped
  //   tensors: 40 loaded, 3 remapped, 0 initialised, 0 unexpected; 100.0% of the model's values come from the checkpoint
  //   grid: graph built for this grid: 1188 grid points (checkpoint 65160), ... (11 buffers)
  //   regridded for the region:
  //     layer1_block0.attn.earth_bias: Earth-specific bias: 2 latitude windows ...
  //     embed.pos_embed: cut from the checkpoint's 8 x 16 patches to this grid's 2 x 4 (...)
  std::string summary() const;
  // Under this share of the model's values from the checkpoint, a fine-tuning run says so loudly.
  static constexpr double kFewLoaded = 0.5;
};

// Copies `weights` (a checkpoint's model TensorMap) into `model`, which must have been built for
// new_inputs -> new_outputs. A parameter or buffer with the same name and shape is copied whole; one
// named in model.channel_axes() is, when its side's channel list changed, copied slice by slice for
// the channels present in both lists (by name), and the rest keep their initialisation.
//
// First the model fits the checkpoint to its grid (WeatherModelImpl::fit_checkpoint_to_grid, on a
// copy of `weights`): `placement`, when known, says where the model's grid lies in the grid the
// checkpoint was trained on (a data.region crop of it), and `trained_grid` is the grid the
// checkpoint recorded (checkpoint_grid; lat = 0: none). The tensors it fitted (positional
// embeddings, Pangu's bias tables and masks) are reported as regridded, not loaded; the buffers it
// keeps as its own (GraphCast's graph, when the checkpoint's is another grid's or absent, as in a
// reference's state_dict) are listed in `rebuilt` and are not part of the loaded share.
//
// `strict` (train.strict): any parameter that is neither loaded nor remapped, or an unexpected name,
// is a ConfigError listing them; without, they are reported. A transfer that would load no tensor at
// all (another architecture) is a ConfigError either way. A shape mismatch on anything else — or
// a channel-indexed parameter whose other dimensions differ, or whose channel dimension does not
// hold the listed channels — is always a ConfigError naming it and both shapes: silently skipping it
// would train a different model than the user thinks. Channel names must be unique within each list
// and the new lists must match the model's shape (else ConfigError). Nothing is copied when it throws.
//
// With old lists equal to new ones it behaves as load_weights (same loaded/missing/unexpected,
// same errors and messages; the strict failure is a ConfigError, a kind of Error).
ChannelTransferReport transfer_weights(models::WeatherModelImpl& model, const TensorMap& weights,
                                       const std::vector<std::string>& old_inputs,
                                       const std::vector<std::string>& old_outputs,
                                       const std::vector<std::string>& new_inputs,
                                       const std::vector<std::string>& new_outputs, bool strict,
                                       const std::string& source, const models::GridPlacement& placement = {},
                                       const models::ModelShape& trained_grid = {});

}  // namespace wxtrain::trainer
