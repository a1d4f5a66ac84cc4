#pragma once
// [model] keys of FourCastNet (model.name = "fourcastnet"), read by fourcastnet_schema(), and its
// published preset (fourcastnet-0.25).
#include <cstdint>
#include <string>

#include "core/model_options.h"

namespace wxtrain::models {

struct FourCastNetOptions : ModelOptionsOf<FourCastNetOptions> {
  int64_t patch_size = 4;                   // model.patch_size
  int64_t embed_dim = 128;                  // model.embed_dim
  int64_t depth = 4;                        // model.depth: AFNO blocks
  double mlp_ratio = 4.0;                   // model.mlp_ratio
  int64_t afno_blocks = 8;                  // model.afno_blocks: block-diagonal blocks of the spectral MLP
  double sparsity_threshold = 0.01;         // model.sparsity_threshold: softshrink lambda on the modes
  double hard_thresholding_fraction = 1.0;  // model.hard_thresholding_fraction: share of modes kept
  // model.spectral_modes: which Fourier modes the filter sees. "lowest": the lowest frequencies of
  // each axis, hard_thresholding_fraction of them. "reference": the modes PhysicsNeMo's
  // AFNO2DLayer (and NVlabs' afnonet.py, which trained the published weights) slice: a band of the
  // unshifted spectrum around h/2 along latitude and the first int((h/2 + 1) x fraction) zonal
  // wavenumbers, counted on the latitude axis, so a grid wider than tall filters only the lowest
  // h/2 + 1 zonal wavenumbers even at fraction 1.
  std::string spectral_modes = "lowest";
};

ModelSchema fourcastnet_schema();

}  // namespace wxtrain::models
