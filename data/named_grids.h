#pragma once
// Reduced Gaussian grids by name, as run files and ECMWF name them: "n320" (the classic reduced
// Gaussian N320 of the IFS and ERA5, the grid AIFS Single 1.0 is trained on) and "o96" (octahedral,
// AIFS's hidden grid). The number of cells is known without generating the grid, so that the run
// file's reader (core/config.cpp, torch- and data-free) can size [data] from `grid = "n320"`; the
// cells themselves come from data/grid.h (named_grid).
//
// The classic grids' points per row (pl) are ecCodes' (the samples reduced_gg_pl_<N>_grib2.tmpl of
// ecCodes 2.x, read with `grib_dump -j`), north pole to equator; the southern half mirrors them.
// Only the N a run is likely to name are kept: N32 (small, for tests) and N320 (542,080 cells).
// Torch-free and dependency-free (header only).
#include <cstdint>
#include <string>
#include <vector>

namespace wxtrain::data {

// pl from the north pole to the equator for the classic N<n>; empty when not kept here.
inline std::vector<int64_t> classic_half_points_per_row(int64_t n) {
  if (n == 32)
    return {
      20, 27, 36, 40, 45, 50, 60, 64, 72, 75, 80, 90, 90, 96, 100, 108, 108, 120, 120, 120, 128, 128, 128,
      128, 128, 128, 128, 128, 128, 128, 128, 128};
  if (n == 320)
    return {
      18, 25, 36, 40, 45, 50, 60, 64, 72, 72, 75, 81, 90, 96, 100, 108, 120, 120, 125, 135, 144, 144, 150,
      160, 180, 180, 180, 192, 192, 200, 216, 216, 216, 225, 240, 240, 240, 250, 256, 270, 270, 288, 288,
      288, 300, 300, 320, 320, 320, 324, 360, 360, 360, 360, 360, 360, 375, 375, 384, 384, 400, 400, 405,
      432, 432, 432, 432, 450, 450, 450, 480, 480, 480, 480, 480, 486, 500, 500, 500, 512, 512, 540, 540,
      540, 540, 540, 576, 576, 576, 576, 576, 576, 600, 600, 600, 600, 640, 640, 640, 640, 640, 640, 640,
      648, 648, 675, 675, 675, 675, 720, 720, 720, 720, 720, 720, 720, 720, 720, 729, 750, 750, 750, 750,
      768, 768, 768, 768, 800, 800, 800, 800, 800, 800, 810, 810, 864, 864, 864, 864, 864, 864, 864, 864,
      864, 864, 864, 900, 900, 900, 900, 900, 900, 900, 900, 960, 960, 960, 960, 960, 960, 960, 960, 960,
      960, 960, 960, 960, 960, 972, 972, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1024, 1024, 1024,
      1024, 1024, 1024, 1080, 1080, 1080, 1080, 1080, 1080, 1080, 1080, 1080, 1080, 1080, 1080, 1080, 1080,
      1125, 1125, 1125, 1125, 1125, 1125, 1125, 1125, 1125, 1125, 1125, 1125, 1125, 1125, 1152, 1152, 1152,
      1152, 1152, 1152, 1152, 1152, 1152, 1200, 1200, 1200, 1200, 1200, 1200, 1200, 1200, 1200, 1200, 1200,
      1200, 1200, 1200, 1200, 1200, 1200, 1200, 1215, 1215, 1215, 1215, 1215, 1215, 1215, 1280, 1280, 1280,
      1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280,
      1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280,
      1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280,
      1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280, 1280,
      1280, 1280, 1280};
  return {};
}

// A grid name: 'n' (classic) or 'o' (octahedral), upper or lower case, then N >= 1.
struct GridName {
  bool octahedral = false;
  int64_t n = 0;
};

// Parses "n320" / "O96"; false when `text` is no such name (n then 0).
inline bool parse_grid_name(const std::string& text, GridName& out) {
  out = {};
  if (text.size() < 2 || text.size() > 6) return false;
  const char k = text[0];
  if (k != 'n' && k != 'N' && k != 'o' && k != 'O') return false;
  int64_t n = 0;
  for (size_t i = 1; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    n = n * 10 + (text[i] - '0');
  }
  if (n < 1) return false;
  out.octahedral = k == 'o' || k == 'O';
  out.n = n;
  return true;
}

// The cells of a named grid: 4N(N + 9) for O<N>, twice the half pl's sum for a classic N<n>; 0 for a
// classic N whose pl is not kept here.
inline int64_t named_grid_cells(const GridName& g) {
  if (g.octahedral) return 4 * g.n * (g.n + 9);
  int64_t sum = 0;
  for (int64_t p : classic_half_points_per_row(g.n)) sum += p;
  return 2 * sum;
}

}  // namespace wxtrain::data
