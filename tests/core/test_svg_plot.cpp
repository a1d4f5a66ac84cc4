// The SVG plots the CLI writes (estimate, profile) and the validation figure: what a reader of the
// file sees (titles, tick labels, legend, one line per series), whatever the data.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/svg_plot.h"

using namespace wxtrain;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(SvgPlot, OnePlotHasItsTextsTicksAndALinePerSeries) {
  PlotSpec plot;
  plot.title = "memory <per rank> & more";
  plot.x_label = "micro-batch size";
  plot.y_label = "memory per rank (GiB)";
  plot.series = {{"CPU", {1, 2, 3, 4}, {1, 2, 3, 4}}, {"T4 16GB", {1, 4}, {14.56, 14.56}, "#2ca02c", true}};
  const std::string svg = render_svg(plot);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find(">memory &lt;per rank&gt; &amp; more</text>"), std::string::npos);
  EXPECT_NE(svg.find(">micro-batch size</text>"), std::string::npos);
  EXPECT_NE(svg.find(">memory per rank (GiB)</text>"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_EQ(count(svg, "stroke-dasharray"), 2u);  // the dashed line and its legend entry
  EXPECT_NE(svg.find(">T4 16GB</text>"), std::string::npos);
  // Memory starts at 0; the ticks are round numbers written without trailing zeros.
  EXPECT_NE(svg.find(">0</text>"), std::string::npos);
  EXPECT_NE(svg.find(">10</text>"), std::string::npos);
  EXPECT_NE(svg.find(">2.5</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">2.50</text>"), std::string::npos);
}

TEST(SvgPlot, AFigureHasOneLegendAndEveryPlotsTitle) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  FigureSpec figure;
  figure.title = "validation";
  for (const char* name : {"z_500 RMSE", "t_850 RMSE"}) {
    PlotSpec plot;
    plot.title = name;
    plot.x_label = "lead (hours)";
    plot.y_includes_zero = false;
    plot.series = {{"model", {6, 12, 18}, {0.5, nan, 0.7}}, {"persistence", {6, 12, 18}, {0.6, 0.8, 1.0}, "#ff7f0e"}};
    for (Series& s : plot.series) s.dots = true;
    figure.rows.push_back({plot});
  }
  const std::string svg = render_svg(figure);
  EXPECT_NE(svg.find(">z_500 RMSE</text>"), std::string::npos);
  EXPECT_NE(svg.find(">t_850 RMSE</text>"), std::string::npos);
  EXPECT_EQ(count(svg, ">model</text>"), 1u);  // one legend for the figure
  EXPECT_EQ(count(svg, "<polyline"), 4u);
  EXPECT_EQ(count(svg, "<circle"), 2u * (2 + 3));  // the NaN point has no dot
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  // Small plots' axes span whole ticks: 0.4 .. 1 in steps of 0.2, the hours 5 .. 20 in steps of 5.
  EXPECT_NE(svg.find(">0.4</text>"), std::string::npos);
  EXPECT_NE(svg.find(">1</text>"), std::string::npos);
  EXPECT_NE(svg.find(">5</text>"), std::string::npos);
  EXPECT_NE(svg.find(">20</text>"), std::string::npos);
}

TEST(SvgPlot, AFlatOrEmptyPlotStillHasAxes) {
  PlotSpec flat;
  flat.series = {{"zero", {0, 1}, {0, 0}}};
  const std::string svg = render_svg(flat);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
  EXPECT_EQ(svg.find("inf"), std::string::npos);
  EXPECT_NE(svg.find(">1</text>"), std::string::npos);  // a flat zero line: the axis runs 0 .. 1
  EXPECT_EQ(svg.find(">-"), std::string::npos);         // and not below zero
  const std::string empty = render_svg(PlotSpec{});
  EXPECT_EQ(empty.find("nan"), std::string::npos);
  EXPECT_EQ(empty.find("inf"), std::string::npos);
}

namespace {

double attribute(const std::string& svg, const std::string& name) {
  const size_t at = svg.find(" " + name + "=\"");
  return at == std::string::npos ? -1 : std::stod(svg.substr(at + name.size() + 3));
}

// The x where the text element holding exactly `text` starts (-1 when absent).
double text_x(const std::string& svg, const std::string& text) {
  const size_t end = svg.find(">" + text + "</text>");
  if (end == std::string::npos) return -1;
  const size_t at = svg.rfind("<text x=\"", end);
  return std::stod(svg.substr(at + 9));
}

}  // namespace

// validation.svg of a run with one variable: one column of small plots under a legend of three
// forecasters and a long title; every word of them lies inside the page (7 px a glyph of the 12 px
// labels, 9 of the 15 px title), which was 290 px wide and cut "climatology" off.
TEST(SvgPlot, AFigureIsWideEnoughForItsLegendAndTitle) {
  FigureSpec figure;
  figure.title = "unet at step 120 (/home/someone/experiments/configs/storm_unet.toml)";
  PlotSpec plot;
  plot.title = "t RMSE";
  plot.series = {{"model", {6, 12}, {0.5, 0.7}}, {"persistence", {6, 12}, {0.6, 0.8}, "#ff7f0e"},
                 {"climatology", {6, 12}, {0.9, 0.9}, "#2ca02c"}};
  figure.rows.push_back({plot});
  const std::string svg = render_svg(figure);
  const double width = attribute(svg, "width");
  const double climatology = text_x(svg, "climatology");
  ASSERT_GT(climatology, 0);
  EXPECT_LE(climatology + 7.0 * 11, width);
  EXPECT_LE(10 + 9.0 * static_cast<double>(figure.title.size()), width);
}

// estimate --svg: a legend entry as long as "GPU with H100 80GB's overhead" stays inside the page.
TEST(SvgPlot, OnePlotIsWideEnoughForItsLegend) {
  PlotSpec plot;
  const std::string label = "GPU (with the overhead of an H100 NVL 94GB)";
  plot.series = {{label, {1, 2}, {1, 2}}, {"T4 16GB", {1, 2}, {14.56, 14.56}, "#2ca02c", true}};
  const std::string svg = render_svg(plot);
  const double x = text_x(svg, label);
  ASSERT_GT(x, 0);
  EXPECT_LE(x + 7.0 * static_cast<double>(label.size()), attribute(svg, "width"));
}
