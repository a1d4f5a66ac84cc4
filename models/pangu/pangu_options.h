#pragma once
// [model] keys of Pangu-Weather (model.name = "pangu"), read by pangu_schema(), and its published
// preset (pangu-0.25). The first upper_variables x levels channels of each state are upper air,
// variable-major (v0 at every level, then v1, ...); the rest is 2-D.
#include <cstdint>
#include <vector>

#include "core/model_options.h"

namespace wxtrain::models {

struct PanguOptions : ModelOptionsOf<PanguOptions> {
  int64_t patch_size = 4;                            // model.patch_size: lat/lon patch edge
  int64_t embed_dim = 128;                           // model.embed_dim
  double mlp_ratio = 4.0;                            // model.mlp_ratio
  int64_t upper_variables = 0;                       // model.upper_variables: V (0 = no upper-air volume)
  int64_t levels = 0;                                // model.levels: Z, pressure levels per upper-air variable
  int64_t level_patch = 2;                           // model.level_patch: levels per 3-D patch
  std::vector<int64_t> window = {2, 6, 12};          // model.window: attention window (levels, lat, lon) in tokens
  std::vector<int64_t> stage_depths = {2, 6, 6, 2};  // model.stage_depths: blocks of the four stages
  std::vector<int64_t> stage_heads = {4, 8, 8, 4};   // model.stage_heads: attention heads of the four stages
  // Where readings of the paper differ, the reference's behaviour (PhysicsNeMo's Pangu, see
  // docs/interop_pangu.md) as an option; the defaults are the pseudocode's reading (pangu.h).
  std::string block_norm = "post";     // model.block_norm: "post" (x + norm(f(x))) or "pre" (x + f(norm(x)))
  std::string padding = "end";         // model.padding: zero padding and crops "end" or "centered"
  std::vector<int64_t> window_shift;   // model.window_shift: the odd blocks' roll; empty = half the window
  bool fit_window = true;              // model.fit_window: cut a window larger than a stage's grid to it
  std::string shift_mask = "periodic";  // model.shift_mask: "periodic" or "all_edges"
};

ModelSchema pangu_schema();

}  // namespace wxtrain::models
