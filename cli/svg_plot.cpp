#include "cli/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace wxtrain::cli {

namespace {

std::string esc(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

// Round axis ticks: 1, 2, 5 x 10^k.
std::vector<double> ticks(double lo, double hi, int target = 6) {
  double span = hi - lo;
  if (span <= 0) span = std::fabs(hi) > 0 ? std::fabs(hi) : 1.0;
  double raw = span / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) t.push_back(v);
  return t;
}

std::string num(double v) {
  char buf[32];
  if (std::fabs(v) >= 1000 && std::fabs(v) < 1e7 && v == std::round(v)) std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (std::fabs(v) >= 1e7 || (std::fabs(v) < 0.01 && v != 0)) std::snprintf(buf, sizeof buf, "%.3g", v);
  else std::snprintf(buf, sizeof buf, "%g", std::round(v * 1000) / 1000);
  return buf;
}

}  // namespace

std::string render_svg(const PlotSpec& spec) {
  const double left = 70, right = 180, top = 40, bottom = 50;
  const double pw = spec.width - left - right, ph = spec.height - top - bottom;
  double xmin = std::numeric_limits<double>::max(), xmax = -xmin, ymin = 0, ymax = -xmin;
  for (const auto& s : spec.series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      xmin = std::min(xmin, s.x[i]);
      xmax = std::max(xmax, s.x[i]);
      ymax = std::max(ymax, s.y[i]);
      ymin = std::min(ymin, s.y[i]);
    }
  if (xmin > xmax) xmin = 0, xmax = 1;
  if (xmax == xmin) xmax = xmin + 1;
  if (ymax <= ymin) ymax = ymin + 1;
  ymax *= 1.05;
  auto X = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
  auto Y = [&](double y) { return top + ph - (y - ymin) / (ymax - ymin) * ph; };

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << spec.width << "\" height=\"" << spec.height
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << left + pw / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" << esc(spec.title)
    << "</text>\n";
  for (double t : ticks(xmin, xmax)) {
    o << "<line x1=\"" << X(t) << "\" y1=\"" << top << "\" x2=\"" << X(t) << "\" y2=\"" << top + ph
      << "\" stroke=\"#eee\"/>\n<text x=\"" << X(t) << "\" y=\"" << top + ph + 16 << "\" text-anchor=\"middle\">"
      << num(t) << "</text>\n";
  }
  for (double t : ticks(ymin, ymax)) {
    o << "<line x1=\"" << left << "\" y1=\"" << Y(t) << "\" x2=\"" << left + pw << "\" y2=\"" << Y(t)
      << "\" stroke=\"#eee\"/>\n<text x=\"" << left - 6 << "\" y=\"" << Y(t) + 4 << "\" text-anchor=\"end\">"
      << num(t) << "</text>\n";
  }
  o << "<rect x=\"" << left << "\" y=\"" << top << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#333\"/>\n"
    << "<text x=\"" << left + pw / 2 << "\" y=\"" << spec.height - 10 << "\" text-anchor=\"middle\">"
    << esc(spec.x_label) << "</text>\n"
    << "<text transform=\"translate(16," << top + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << esc(spec.y_label) << "</text>\n";
  double ly = top + 10;
  for (const auto& s : spec.series) {
    o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2\""
      << (s.dashed ? " stroke-dasharray=\"6,4\"" : "") << " points=\"";
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (s.step && i > 0) o << X(s.x[i]) << "," << Y(s.y[i - 1]) << " ";
      o << X(s.x[i]) << "," << Y(s.y[i]) << " ";
    }
    o << "\"/>\n";
    o << "<line x1=\"" << left + pw + 12 << "\" y1=\"" << ly << "\" x2=\"" << left + pw + 32 << "\" y2=\"" << ly
      << "\" stroke=\"" << s.color << "\" stroke-width=\"2\"" << (s.dashed ? " stroke-dasharray=\"6,4\"" : "")
      << "/>\n<text x=\"" << left + pw + 36 << "\" y=\"" << ly + 4 << "\">" << esc(s.label) << "</text>\n";
    ly += 18;
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace wxtrain::cli
