#pragma once
// Line plots as standalone SVG files (memory vs batch size, memory timeline of a step), so users
// see them in any browser without a plotting library.
#include <string>
#include <vector>

namespace wxtrain::cli {

struct Series {
  std::string label;
  std::vector<double> x, y;
  std::string color = "#1f77b4";
  bool dashed = false;
  bool step = false;  // draw as horizontal line (for a threshold / capacity)
};

struct PlotSpec {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  double width = 760, height = 440;
};

std::string render_svg(const PlotSpec& spec);

}  // namespace wxtrain::cli
