#include "data/grid.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

#include "core/error.h"
#include "data/named_grids.h"

namespace wxtrain::data {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kDegree = kPi / 180.0;

double wrap360(double v) {
  double w = std::fmod(v, 360.0);
  if (w < 0) w += 360.0;
  return w;
}

// The share of the sphere between latitudes a < b (degrees).
double band(double a, double b) {
  a = std::clamp(a, -90.0, 90.0);
  b = std::clamp(b, -90.0, 90.0);
  return (std::sin(b * kDegree) - std::sin(a * kDegree)) / 2.0;
}

// Band edges of rows at `lat` (any order): midpoints between neighbours, a half spacing beyond the
// outer rows, clamped to the poles. Returned per row as (south, north).
std::vector<std::pair<double, double>> row_bands(const std::vector<double>& lat) {
  const size_t n = lat.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lat[a] < lat[b]; });
  std::vector<std::pair<double, double>> out(n);
  if (n == 1) {
    out[0] = {-90.0, 90.0};  // one row: the whole sphere's band (a single ring)
    return out;
  }
  for (size_t k = 0; k < n; ++k) {
    const double here = lat[order[k]];
    const double south = k > 0 ? (here + lat[order[k - 1]]) / 2 : here - (lat[order[1]] - here) / 2;
    const double north = k + 1 < n ? (here + lat[order[k + 1]]) / 2 : here + (here - lat[order[k - 1]]) / 2;
    out[order[k]] = {std::max(-90.0, south), std::min(90.0, north)};
  }
  return out;
}

// The share of 360 degrees each of these longitudes stands for: its spacing to its neighbours on
// the circle (the median gap for the ends of a partial circle).
std::vector<double> column_shares(const std::vector<double>& lon) {
  const size_t n = lon.size();
  if (n == 1) return {1.0};
  std::vector<double> sorted;
  for (double v : lon) sorted.push_back(wrap360(v));
  std::sort(sorted.begin(), sorted.end());
  std::vector<double> gaps;
  for (size_t k = 1; k < n; ++k) gaps.push_back(sorted[k] - sorted[k - 1]);
  gaps.push_back(sorted.front() + 360.0 - sorted.back());
  std::vector<double> g = gaps;
  std::nth_element(g.begin(), g.begin() + static_cast<long>(g.size() / 2), g.end());
  const double median = g[g.size() / 2];
  // A whole circle (every gap the same, or the wrap gap no larger than the others): 1/n each. A
  // partial one (a region): each column a median spacing wide.
  const double wrap_gap = gaps.back();
  const double share = wrap_gap <= 1.5 * median ? 1.0 / static_cast<double>(n) : median / 360.0;
  return std::vector<double>(n, share);
}

std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

GaussianLatitudes gaussian_latitudes(int64_t n) {
  if (n < 1) throw DataError("a Gaussian grid needs N >= 1, got N = " + std::to_string(n));
  const int64_t m = 2 * n;  // the zeros of P_m
  GaussianLatitudes out;
  out.latitudes.resize(static_cast<size_t>(m));
  out.weights.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < n; ++i) {
    // Newton's method from Tricomi's estimate of the i-th zero (north to south: x decreasing).
    double x = std::cos(kPi * (static_cast<double>(i) + 0.75) / (static_cast<double>(m) + 0.5));
    double dp = 0;
    for (int iteration = 0; iteration < 100; ++iteration) {
      double p0 = 1.0, p1 = x;
      for (int64_t k = 2; k <= m; ++k) {
        const double p2 = ((2.0 * static_cast<double>(k) - 1.0) * x * p1 - (static_cast<double>(k) - 1.0) * p0) /
                          static_cast<double>(k);
        p0 = p1;
        p1 = p2;
      }
      dp = static_cast<double>(m) * (x * p1 - p0) / (x * x - 1.0);
      const double step = p1 / dp;
      x -= step;
      if (std::abs(step) < 1e-15) break;
    }
    const double w = 2.0 / ((1.0 - x * x) * dp * dp);
    const double lat = std::asin(x) / kDegree;
    out.latitudes[static_cast<size_t>(i)] = lat;
    out.latitudes[static_cast<size_t>(m - 1 - i)] = -lat;
    out.weights[static_cast<size_t>(i)] = w;
    out.weights[static_cast<size_t>(m - 1 - i)] = w;
  }
  return out;
}

std::vector<int64_t> octahedral_points_per_row(int64_t n) {
  if (n < 1) throw DataError("an octahedral grid needs N >= 1, got O" + std::to_string(n));
  std::vector<int64_t> pl(static_cast<size_t>(2 * n));
  for (int64_t i = 0; i < n; ++i) pl[static_cast<size_t>(i)] = pl[static_cast<size_t>(2 * n - 1 - i)] = 20 + 4 * i;
  return pl;
}

Grid rectangle_grid(const std::vector<double>& rows, const std::vector<double>& columns) {
  // Latitudes a rounding past a pole are clamped to it (band() does): the weights stay defined.
  Grid grid;
  grid.kind = GridKind::kRectangle;
  grid.rows = rows;
  grid.columns = columns;
  const auto bands = row_bands(rows);
  const auto shares = column_shares(columns);
  for (size_t i = 0; i < rows.size(); ++i) {
    const double row_area = band(bands[i].first, bands[i].second);
    for (size_t j = 0; j < columns.size(); ++j) {
      grid.latitudes.push_back(rows[i]);
      grid.longitudes.push_back(columns[j]);
      grid.areas.push_back(row_area * shares[j]);
    }
  }
  grid.description = "regular " + std::to_string(rows.size()) + " x " + std::to_string(columns.size());
  return grid;
}

Grid reduced_gaussian_grid(int64_t n, const std::vector<int64_t>& points_per_row) {
  const GaussianLatitudes g = gaussian_latitudes(n);
  if (static_cast<int64_t>(points_per_row.size()) != 2 * n)
    throw DataError("a reduced Gaussian grid N" + std::to_string(n) + " has " + std::to_string(2 * n) +
                    " rows, but its points per row (pl) has " + std::to_string(points_per_row.size()) + " entries");
  Grid grid;
  grid.kind = GridKind::kReducedGaussian;
  grid.gaussian_n = n;
  grid.points_per_row = points_per_row;
  for (size_t i = 0; i < points_per_row.size(); ++i) {
    const int64_t pl = points_per_row[i];
    if (pl < 1)
      throw DataError("a reduced Gaussian grid N" + std::to_string(n) + " has " + std::to_string(pl) + " points on row " +
                      std::to_string(i) + " (pl must be >= 1)");
    for (int64_t j = 0; j < pl; ++j) {
      grid.latitudes.push_back(g.latitudes[i]);
      grid.longitudes.push_back(360.0 * static_cast<double>(j) / static_cast<double>(pl));
      grid.areas.push_back(g.weights[i] / 2.0 / static_cast<double>(pl));
    }
  }
  const bool octahedral = points_per_row == octahedral_points_per_row(n);
  grid.description = std::string("reduced Gaussian ") + (octahedral ? "O" : "N") + std::to_string(n) + ", " +
                     std::to_string(grid.size()) + " cells (Gaussian weight / points in the row)";
  return grid;
}

Grid octahedral_grid(int64_t n) { return reduced_gaussian_grid(n, octahedral_points_per_row(n)); }

Grid named_grid(const std::string& name) {
  GridName g;
  if (!parse_grid_name(name, g))
    throw DataError("'" + name + "' is not a reduced Gaussian grid name: expected o<N> (octahedral, e.g. o96) or n<N> "
                    "(classic, n32 or n320)");
  if (g.octahedral) return octahedral_grid(g.n);
  std::vector<int64_t> pl = classic_half_points_per_row(g.n);
  if (pl.empty())
    throw DataError("'" + name + "': the classic reduced Gaussian N" + std::to_string(g.n) +
                    " is not known here (its points per row are kept for n32 and n320; data/named_grids.h)");
  const std::vector<int64_t> south(pl.rbegin(), pl.rend());  // the southern half mirrors the northern
  pl.insert(pl.end(), south.begin(), south.end());
  return reduced_gaussian_grid(g.n, pl);
}

Grid cell_grid(const std::vector<double>& latitudes, const std::vector<double>& longitudes, const std::string& where) {
  if (latitudes.size() != longitudes.size())
    throw DataError(where + " has " + std::to_string(latitudes.size()) + " latitudes but " +
                    std::to_string(longitudes.size()) + " longitudes; a list of cells needs one of each per cell");
  if (latitudes.empty()) throw DataError(where + " has no cells");
  for (size_t c = 0; c < latitudes.size(); ++c)
    if (!(latitudes[c] >= -90.0 && latitudes[c] <= 90.0) || !std::isfinite(longitudes[c]))
      throw DataError(where + ": cell " + std::to_string(c) + " is at latitude " + number_text(latitudes[c]) +
                      ", longitude " + number_text(longitudes[c]) + " (latitudes must lie in [-90, 90])");
  Grid grid;
  grid.kind = GridKind::kCells;
  grid.latitudes = latitudes;
  grid.longitudes = longitudes;
  const size_t cells = latitudes.size();

  // Rows: cells of the same latitude (to 1e-5 degrees; a row stored as float32 holds one value).
  std::map<int64_t, std::vector<size_t>> by_row;  // key: latitude in micro-degrees, south first
  for (size_t c = 0; c < cells; ++c) by_row[std::llround(latitudes[c] * 1e5)].push_back(c);
  std::vector<double> row_lat;
  std::vector<const std::vector<size_t>*> row_cells;
  for (auto it = by_row.rbegin(); it != by_row.rend(); ++it) {  // north to south
    double sum = 0;
    for (size_t c : it->second) sum += latitudes[c];
    row_lat.push_back(sum / static_cast<double>(it->second.size()));
    row_cells.push_back(&it->second);
  }
  const size_t R = row_lat.size();
  grid.areas.assign(cells, 0.0);

  // The 2N rows of a Gaussian grid (float32 coordinates agree to ~1e-5 degrees).
  if (R >= 2 && R % 2 == 0) {
    const GaussianLatitudes g = gaussian_latitudes(static_cast<int64_t>(R / 2));
    bool gaussian = true;
    for (size_t i = 0; i < R && gaussian; ++i) gaussian = std::abs(g.latitudes[i] - row_lat[i]) < 1e-4;
    if (gaussian) {
      const int64_t n = static_cast<int64_t>(R / 2);
      std::vector<int64_t> pl;
      for (size_t i = 0; i < R; ++i) {
        const auto& members = *row_cells[i];
        pl.push_back(static_cast<int64_t>(members.size()));
        for (size_t c : members) grid.areas[c] = g.weights[i] / 2.0 / static_cast<double>(members.size());
      }
      grid.kind = GridKind::kReducedGaussian;
      grid.gaussian_n = n;
      grid.points_per_row = pl;
      const bool octahedral = pl == octahedral_points_per_row(n);
      grid.description = std::string("reduced Gaussian ") + (octahedral ? "O" : "N") + std::to_string(n) + ", " +
                         std::to_string(cells) + " cells (Gaussian weight / points in the row)";
      return grid;
    }
  }
  if (R >= 2 && cells >= 4 * R) {
    const auto bands = row_bands(row_lat);
    for (size_t i = 0; i < R; ++i) {
      std::vector<double> lon;
      for (size_t c : *row_cells[i]) lon.push_back(longitudes[c]);
      const auto shares = column_shares(lon);
      const double area = band(bands[i].first, bands[i].second);
      for (size_t k = 0; k < lon.size(); ++k) grid.areas[(*row_cells[i])[k]] = area * shares[k];
    }
    grid.description = std::to_string(cells) + " cells on " + std::to_string(R) +
                       " latitude rows (the band between neighbouring rows / cells in the row)";
    return grid;
  }
  grid.areas.assign(cells, 1.0 / static_cast<double>(cells));
  grid.description = std::to_string(cells) + " scattered cells (equal weights)";
  return grid;
}

Grid select_cells(const Grid& grid, const std::vector<int64_t>& keep) {
  Grid out;
  out.kind = grid.kind == GridKind::kRectangle ? GridKind::kCells : grid.kind;
  if (out.kind == GridKind::kReducedGaussian) out.kind = GridKind::kCells;  // no longer whole rows
  for (int64_t c : keep) {
    const size_t k = static_cast<size_t>(c);
    out.latitudes.push_back(grid.latitudes.at(k));
    out.longitudes.push_back(grid.longitudes.at(k));
    out.areas.push_back(grid.areas.at(k));
  }
  out.description = std::to_string(keep.size()) + " cells of " + grid.description;
  return out;
}

double arc_degrees(double lat1, double lon1, double lat2, double lon2) {
  const double p1 = lat1 * kDegree, p2 = lat2 * kDegree, dl = (lon2 - lon1) * kDegree;
  // The haversine form: accurate for the small distances a boundary band measures.
  const double a = std::sin((p2 - p1) / 2), b = std::sin(dl / 2);
  const double h = a * a + std::cos(p1) * std::cos(p2) * b * b;
  return 2.0 * std::asin(std::min(1.0, std::sqrt(h))) / kDegree;
}

double typical_spacing_degrees(const Grid& grid) {
  if (grid.areas.empty()) return 0;
  double total = 0;
  for (double a : grid.areas) total += a;
  const double mean_steradians = 4.0 * kPi * total / static_cast<double>(grid.areas.size());
  return std::sqrt(mean_steradians) / kDegree;
}

std::vector<uint8_t> boundary_band(const std::vector<double>& latitudes, const std::vector<double>& longitudes,
                                   const Box* box, double width) {
  const size_t n = latitudes.size();
  Box b;
  bool east_west = true;
  if (box) {
    b = *box;
    double span = wrap360(b.lon_max - b.lon_min);
    if (span == 0) span = 360;
    b.lon_max = b.lon_min + span;
    east_west = span < 360 - 1e-9;
  } else {
    b.lat_min = *std::min_element(latitudes.begin(), latitudes.end());
    b.lat_max = *std::max_element(latitudes.begin(), latitudes.end());
    // The widest gap between the cells' longitudes on the circle: the box is the arc outside it.
    std::vector<double> sorted;
    for (double v : longitudes) sorted.push_back(wrap360(v));
    std::sort(sorted.begin(), sorted.end());
    double gap = sorted.front() + 360.0 - sorted.back(), start = sorted.back();
    for (size_t k = 1; k < sorted.size(); ++k) {
      if (sorted[k] - sorted[k - 1] > gap) gap = sorted[k] - sorted[k - 1], start = sorted[k - 1];
    }
    // A gap no wider than a few spacings is the grid's own spacing: the cells go all round.
    east_west = gap > 3.0 * width && gap > 1e-9;
    b.lon_min = wrap360(start + gap);
    b.lon_max = b.lon_min + (360.0 - gap);
  }
  std::vector<uint8_t> band(n, 0);
  for (size_t c = 0; c < n; ++c) {
    const double phi = latitudes[c];
    double d = std::numeric_limits<double>::infinity();
    if (b.lat_min > -90 + 1e-9) d = std::min(d, phi - b.lat_min);
    if (b.lat_max < 90 - 1e-9) d = std::min(d, b.lat_max - phi);
    if (east_west) {
      // The arc to a meridian edge: asin(cos(lat) sin(dlon)), the shortest way to that great circle.
      const double east_of_west_edge = wrap360(longitudes[c] - b.lon_min);
      const double west_of_east_edge = (b.lon_max - b.lon_min) - east_of_west_edge;
      for (double dl : {east_of_west_edge, west_of_east_edge}) {
        const double s = std::sin(std::min(90.0, std::max(0.0, dl)) * kDegree) * std::cos(phi * kDegree);
        d = std::min(d, std::asin(std::clamp(s, -1.0, 1.0)) / kDegree);
      }
    }
    band[c] = d < width ? 1 : 0;
  }
  return band;
}

}  // namespace wxtrain::data
