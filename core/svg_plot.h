#pragma once
// Line plots as self-contained SVG files, so users open them in any browser without a plotting
// library: one plot with its legend beside it (`estimate --svg`: memory against batch size,
// `profile --svg`: the memory timeline of a step), or a figure of small plots in rows under one
// legend (the validation scores, trainer/scores.cpp). Both draw their axes, ticks, lines and
// legends with the same code.
#include <string>
#include <vector>

namespace wxtrain {

struct Series {
  std::string label;
  std::vector<double> x, y;  // points whose x or y is not finite are left out of the line
  std::string color = "#1f77b4";
  bool dashed = false;
  bool dots = false;  // a dot at each point, so a series of a single point still shows
  // Bars from 0 to y at each x instead of a line (a histogram): the bar series of a plot stand side
  // by side within a unit-wide slot around each x, in the order given; the x axis then reaches
  // half a unit beyond the outermost x.
  bool bars = false;
};

struct PlotSpec {
  std::string title, x_label, y_label;  // an empty label is not drawn
  std::vector<Series> series;
  bool y_includes_zero = true;  // the y axis reaches down to 0 (bytes), not just to the lowest value
};

// One plot, 760 x 440, titled with its title, the legend (every series) to the right of the axes.
// The axes span the data (the y axis with 5% room above it), with round ticks inside.
std::string render_svg(const PlotSpec& plot);

// A titled figure of small plots, 270 x 200 each, in rows as given (a figure may start a new row
// for a new quantity), under one legend: each series label once, in the order first met. Each
// plot is headed by its title; its axes span whole ticks, so neighbouring plots read alike.
struct FigureSpec {
  std::string title;
  std::vector<std::vector<PlotSpec>> rows;
};
std::string render_svg(const FigureSpec& figure);

}  // namespace wxtrain
