#include "core/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <sstream>

namespace wxtrain {

namespace {

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += ch;
    }
  }
  return out;
}

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) { lo = std::min(lo, v), hi = std::max(hi, v); }
};

// An axis: the values at its two ends and the round values ticked between them.
struct Axis {
  double lo, hi;
  std::vector<double> ticks;
  std::vector<std::string> labels;
};

// How a plot is drawn at its size.
struct Style {
  int tick_intervals;  // about this many between ticks
  bool round_axes_out;  // axes span whole ticks; otherwise they follow the data
  double headroom;      // share of the y span left free above the data (axes that follow the data)
  double line_width;
};
constexpr Style kSinglePlot{6, false, 0.05, 2};
constexpr Style kSmallPlot{4, true, 0, 1.5};

// Where a plot's axes go in the figure.
struct Frame {
  double x, y, width, height;
};

// A tick value as text, with the decimals its step needs ("0.5", "10", "0.0015"), not "0.50".
std::string tick_label(double value, double step) {
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value + 0.0);  // + 0.0: no "-0"
  std::string text = buf;
  if (text.find('.') != std::string::npos) {
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
  }
  return text;
}

// Ticks at 1, 2 or 5 x 10^k, about `intervals` of them over [lo, hi]. A flat range (one value)
// is widened around it, except that a range starting at a zero floor stays there.
Axis make_axis(Range r, const Style& style, bool zero_floor, double headroom) {
  if (!std::isfinite(r.lo) || !std::isfinite(r.hi)) r.lo = 0, r.hi = 1;
  if (r.hi <= r.lo) {
    const double pad = r.lo == 0 ? 1.0 : std::abs(r.lo) * 0.1;
    r.hi += pad;
    if (!(zero_floor && r.lo == 0)) r.lo -= pad;
  }
  r.hi += headroom * (r.hi - r.lo);
  const double raw = (r.hi - r.lo) / style.tick_intervals;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw) break;
  }
  if (style.round_axes_out) {
    r.lo = std::floor(r.lo / step + 1e-9) * step;
    r.hi = std::ceil(r.hi / step - 1e-9) * step;
  }
  Axis axis{r.lo, r.hi, {}, {}};
  const double first = std::ceil(r.lo / step - 1e-9), last = std::floor(r.hi / step + 1e-9);
  for (double k = first; k <= last; ++k) {
    axis.ticks.push_back(k * step);
    axis.labels.push_back(tick_label(k * step, step));
  }
  return axis;
}

// Estimated widths of text as drawn (sans-serif, no font metrics at hand): an average glyph of the
// 12 px labels, and of the 15 px bold title. A legend or title wider than its plots widens the
// page, so nothing is cut off at the right edge.
constexpr double kCharWidth = 7.0, kTitleCharWidth = 9.0;
double text_width(const std::string& text, double per_char = kCharWidth) {
  return per_char * static_cast<double>(text.size());
}
// A legend entry: a 20 px line, 4 px, then the label.
double legend_entry_width(const Series& s) { return 24 + text_width(s.label); }

void legend_entry(std::ostream& o, const Series& s, double x, double y) {
  if (s.bars) {
    o << "<rect x=\"" << x + 4 << "\" y=\"" << y - 6 << "\" width=\"12\" height=\"12\" fill=\"" << s.color
      << "\"/><text x=\"" << x + 24 << "\" y=\"" << y + 4 << "\">" << xml_escape(s.label) << "</text>\n";
    return;
  }
  o << "<line x1=\"" << x << "\" y1=\"" << y << "\" x2=\"" << x + 20 << "\" y2=\"" << y << "\" stroke=\"" << s.color
    << "\" stroke-width=\"2\"" << (s.dashed ? " stroke-dasharray=\"6,4\"" : "") << "/><text x=\"" << x + 24
    << "\" y=\"" << y + 4 << "\">" << xml_escape(s.label) << "</text>\n";
}

// The plot's axes in `f` (ticks, grid, frame, axis labels) and its lines; its title above `f`
// when `titled`.
void draw_plot(std::ostream& o, const PlotSpec& plot, const Frame& f, const Style& style, bool titled) {
  Range xr, yr;
  size_t bar_series = 0;
  for (const Series& s : plot.series) {
    if (s.bars) ++bar_series;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) {
        xr.add(s.x[i]), yr.add(s.y[i]);
        if (s.bars) xr.add(s.x[i] - 0.5), xr.add(s.x[i] + 0.5), yr.add(0);  // bars stand on 0
      }
  }
  if (plot.y_includes_zero) yr.add(0);
  const Axis xa = make_axis(xr, style, false, 0);
  const Axis ya = make_axis(yr, style, plot.y_includes_zero, style.headroom);
  auto X = [&](double x) { return f.x + (x - xa.lo) / (xa.hi - xa.lo) * f.width; };
  auto Y = [&](double y) { return f.y + f.height - (y - ya.lo) / (ya.hi - ya.lo) * f.height; };

  if (titled && !plot.title.empty()) {
    o << "<text x=\"" << f.x + f.width / 2 << "\" y=\"" << f.y - 10 << "\" text-anchor=\"middle\" font-weight=\"bold\">"
      << xml_escape(plot.title) << "</text>\n";
  }
  for (size_t i = 0; i < xa.ticks.size(); ++i) {
    const double x = X(xa.ticks[i]);
    o << "<line x1=\"" << x << "\" y1=\"" << f.y << "\" x2=\"" << x << "\" y2=\"" << f.y + f.height
      << "\" stroke=\"#eee\"/><text x=\"" << x << "\" y=\"" << f.y + f.height + 16 << "\" text-anchor=\"middle\">"
      << xa.labels[i] << "</text>\n";
  }
  for (size_t i = 0; i < ya.ticks.size(); ++i) {
    const double y = Y(ya.ticks[i]);
    o << "<line x1=\"" << f.x << "\" y1=\"" << y << "\" x2=\"" << f.x + f.width << "\" y2=\"" << y
      << "\" stroke=\"#eee\"/><text x=\"" << f.x - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
      << ya.labels[i] << "</text>\n";
  }
  o << "<rect x=\"" << f.x << "\" y=\"" << f.y << "\" width=\"" << f.width << "\" height=\"" << f.height
    << "\" fill=\"none\" stroke=\"#333\"/>\n";
  if (!plot.x_label.empty()) {
    o << "<text x=\"" << f.x + f.width / 2 << "\" y=\"" << f.y + f.height + 32 << "\" text-anchor=\"middle\">"
      << xml_escape(plot.x_label) << "</text>\n";
  }
  if (!plot.y_label.empty()) {
    o << "<text transform=\"translate(" << f.x - 54 << "," << f.y + f.height / 2
      << ") rotate(-90)\" text-anchor=\"middle\">" << xml_escape(plot.y_label) << "</text>\n";
  }
  size_t bar_index = 0;
  for (const Series& s : plot.series) {
    if (s.bars) {
      // This series' share of the slot's middle 80%, so neighbouring slots keep a gap.
      const double share = 0.8 / static_cast<double>(bar_series), offset = -0.4 + share * static_cast<double>(bar_index++);
      for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
        if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
        const double x0 = X(s.x[i] + offset), x1 = X(s.x[i] + offset + share);
        const double top = Y(std::max(s.y[i], 0.0)), bottom = Y(std::min(s.y[i], 0.0));
        o << "<rect x=\"" << x0 << "\" y=\"" << top << "\" width=\"" << x1 - x0 << "\" height=\"" << bottom - top
          << "\" fill=\"" << s.color << "\"/>\n";
      }
      continue;
    }
    o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"" << style.line_width << "\""
      << (s.dashed ? " stroke-dasharray=\"6,4\"" : "") << " points=\"";
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i)
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) o << X(s.x[i]) << "," << Y(s.y[i]) << " ";
    o << "\"/>\n";
    if (!s.dots) continue;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      o << "<circle cx=\"" << X(s.x[i]) << "\" cy=\"" << Y(s.y[i]) << "\" r=\"2\" fill=\"" << s.color << "\"/>\n";
    }
  }
}

// The document's head: coordinates with one decimal, then the white page and the title.
void open_svg(std::ostringstream& o, double width, double height, const std::string& title) {
  o << std::fixed << std::setprecision(1);
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width
    << "\" height=\"" << height << "\" viewBox=\"0 0 " << width << " " << height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">" << xml_escape(title) << "</text>\n";
}

}  // namespace

std::string render_svg(const PlotSpec& plot) {
  const double height = 440;
  const Frame f{70, 40, 760 - 70 - 180, height - 40 - 50};
  double width = std::max(760.0, 10 + text_width(plot.title, kTitleCharWidth) + 10);
  for (const Series& s : plot.series) width = std::max(width, f.x + f.width + 12 + legend_entry_width(s) + 10);
  std::ostringstream o;
  open_svg(o, width, height, plot.title);
  draw_plot(o, plot, f, kSinglePlot, /*titled=*/false);
  for (size_t i = 0; i < plot.series.size(); ++i)
    legend_entry(o, plot.series[i], f.x + f.width + 12, f.y + 10 + 18.0 * static_cast<double>(i));
  o << "</svg>\n";
  return o.str();
}

std::string render_svg(const FigureSpec& figure) {
  constexpr double kPlotW = 270, kPlotH = 200, kHeader = 64;
  size_t columns = 0;
  for (const auto& row : figure.rows) columns = std::max(columns, row.size());
  std::vector<const Series*> legend;
  for (const auto& row : figure.rows)
    for (const PlotSpec& plot : row)
      for (const Series& s : plot.series)
        if (std::none_of(legend.begin(), legend.end(), [&](const Series* l) { return l->label == s.label; }))
          legend.push_back(&s);
  // The page is as wide as the plots, the legend in one line and the title, whichever is widest.
  double legend_width = 10;
  for (const Series* s : legend) legend_width += legend_entry_width(*s) + 16;
  const double width = std::max({static_cast<double>(columns) * kPlotW + 20, legend_width,
                                 10 + text_width(figure.title, kTitleCharWidth) + 10});
  const double height = kHeader + static_cast<double>(figure.rows.size()) * kPlotH + 10;
  std::ostringstream o;
  open_svg(o, width, height, figure.title);
  double x = 10;
  for (const Series* s : legend) {
    legend_entry(o, *s, x, 44);
    x += legend_entry_width(*s) + 16;
  }
  for (size_t r = 0; r < figure.rows.size(); ++r) {
    for (size_t c = 0; c < figure.rows[r].size(); ++c) {
      const double x0 = 10 + static_cast<double>(c) * kPlotW, y0 = kHeader + static_cast<double>(r) * kPlotH;
      draw_plot(o, figure.rows[r][c], Frame{x0 + 58, y0 + 26, kPlotW - 58 - 12, kPlotH - 26 - 36}, kSmallPlot,
                /*titled=*/true);
    }
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace wxtrain
