#pragma once
// [model] keys of FourCastNet (model.name = "fourcastnet"), read by fourcastnet_schema(), and its
// published preset (fourcastnet-0.25).
#include <cstdint>

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
};

ModelSchema fourcastnet_schema();

}  // namespace wxtrain::models
