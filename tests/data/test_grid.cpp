// Grids as cells (data/grid.h): Gaussian latitudes and weights, reduced Gaussian and octahedral
// grids, rectangles and lists of cells, each cell's share of the sphere, and the boundary band of a
// regional point set. The area weights must make a weighted mean the mean over the sphere: a
// constant averages to itself, sin^2(latitude) to 1/3, cos(longitude) to 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/error.h"
#include "data/grid.h"
#include "data/named_grids.h"

using namespace wxtrain;
using namespace wxtrain::data;

namespace {

constexpr double kPi = 3.14159265358979323846;

double total(const Grid& g) { return std::accumulate(g.areas.begin(), g.areas.end(), 0.0); }

// The area-weighted mean of f(lat, lon) over the grid's cells.
template <typename F>
double weighted_mean(const Grid& g, F f) {
  double s = 0, w = 0;
  for (size_t c = 0; c < g.areas.size(); ++c) {
    s += g.areas[c] * f(g.latitudes[c] * kPi / 180, g.longitudes[c] * kPi / 180);
    w += g.areas[c];
  }
  return s / w;
}

TEST(Grid, GaussianLatitudesAreLegendreZerosWithQuadratureWeights) {
  // N = 1: the zeros of P2 are +-1/sqrt(3), each weight 1.
  const GaussianLatitudes one = gaussian_latitudes(1);
  ASSERT_EQ(one.latitudes.size(), 2u);
  EXPECT_NEAR(one.latitudes[0], std::asin(1 / std::sqrt(3.0)) * 180 / kPi, 1e-12);
  EXPECT_NEAR(one.latitudes[1], -one.latitudes[0], 1e-12);
  EXPECT_NEAR(one.weights[0], 1.0, 1e-12);
  // O96 (AIFS's grid): 192 latitudes north to south, weights summing to 2, exact for x^2 and x^4.
  const GaussianLatitudes g = gaussian_latitudes(96);
  ASSERT_EQ(g.latitudes.size(), 192u);
  EXPECT_TRUE(std::is_sorted(g.latitudes.rbegin(), g.latitudes.rend()));
  double sum = 0, x2 = 0, x4 = 0;
  for (size_t i = 0; i < 192; ++i) {
    const double x = std::sin(g.latitudes[i] * kPi / 180);
    sum += g.weights[i], x2 += g.weights[i] * x * x, x4 += g.weights[i] * std::pow(x, 4);
  }
  EXPECT_NEAR(sum, 2.0, 1e-12);
  EXPECT_NEAR(x2, 2.0 / 3, 1e-12);
  EXPECT_NEAR(x4, 2.0 / 5, 1e-12);
  // ECMWF's N96 first latitude (ecCodes' codes_get_gaussian_latitudes gives the same).
  EXPECT_NEAR(g.latitudes[0], 89.28422753251364, 1e-9);
  EXPECT_THROW(gaussian_latitudes(0), DataError);
}

TEST(Grid, OctahedralO96HasAifsCellsAndAveragesExactly) {
  const Grid g = octahedral_grid(96);
  EXPECT_EQ(g.kind, GridKind::kReducedGaussian);
  EXPECT_TRUE(g.point_set());
  EXPECT_EQ(g.size(), 40320);  // AIFS's O96: 40,320 cells
  EXPECT_EQ(g.points_per_row.front(), 20);
  EXPECT_EQ(g.points_per_row[95], 20 + 4 * 95);
  EXPECT_EQ(g.points_per_row[96], 20 + 4 * 95);
  EXPECT_NEAR(total(g), 1.0, 1e-12);  // the whole sphere
  EXPECT_NEAR(weighted_mean(g, [](double, double) { return 273.15; }), 273.15, 1e-10);
  EXPECT_NEAR(weighted_mean(g, [](double phi, double) { return std::pow(std::sin(phi), 2); }), 1.0 / 3, 1e-12);
  EXPECT_NEAR(weighted_mean(g, [](double, double lambda) { return std::cos(lambda); }), 0.0, 1e-12);
  EXPECT_NE(g.description.find("O96"), std::string::npos) << g.description;
}

TEST(Grid, ReducedGaussianFromPlAndItsErrors) {
  // An N grid: rows of any length (here a made-up pl), the same weights per row.
  const std::vector<int64_t> pl = {8, 12, 16, 16, 12, 8};
  const Grid g = reduced_gaussian_grid(3, pl);
  EXPECT_EQ(g.size(), 72);
  EXPECT_NEAR(total(g), 1.0, 1e-12);
  EXPECT_NEAR(g.longitudes[8 + 1], 30.0, 1e-12);  // row 1, second point: 360 / 12
  EXPECT_NE(g.description.find("N3"), std::string::npos) << g.description;
  try {
    reduced_gaussian_grid(3, {8, 12, 16});
    FAIL() << "a pl of the wrong length was taken";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("pl"), std::string::npos) << e.what();
  }
  EXPECT_THROW(reduced_gaussian_grid(1, {4, 0}), DataError);
}

// data.grid = "n320" / "o96" (data/named_grids.h): N320 is ecCodes' classic reduced Gaussian grid
// (its reduced_gg_pl_320 sample: numberOfDataPoints 542080, pl from 18 at the pole to 1280 at the
// equator), the data grid of AIFS Single; O96 the octahedral grid of its hidden nodes.
TEST(Grid, NamedGridsAreEcCodesN320AndOctahedralO96) {
  const Grid n320 = named_grid("n320");
  EXPECT_EQ(n320.kind, GridKind::kReducedGaussian);
  EXPECT_EQ(n320.size(), 542080);
  EXPECT_EQ(n320.gaussian_n, 320);
  ASSERT_EQ(n320.points_per_row.size(), 640u);
  EXPECT_EQ(n320.points_per_row.front(), 18);
  EXPECT_EQ(n320.points_per_row[1], 25);
  EXPECT_EQ(n320.points_per_row[319], 1280);
  EXPECT_EQ(n320.points_per_row[320], 1280);
  EXPECT_EQ(n320.points_per_row.back(), 18);
  EXPECT_TRUE(std::equal(n320.points_per_row.begin(), n320.points_per_row.begin() + 320, n320.points_per_row.rbegin()));
  EXPECT_NEAR(total(n320), 1.0, 1e-12);
  EXPECT_NEAR(weighted_mean(n320, [](double phi, double) { return std::pow(std::sin(phi), 2); }), 1.0 / 3, 1e-12);
  EXPECT_NEAR(n320.latitudes.front(), 89.7849, 1e-4);  // `grib_get -p latitudeOfFirstGridPointInDegrees` on the sample
  EXPECT_NEAR(n320.longitudes[1], 20.0, 1e-12);                    // 360 / 18
  EXPECT_NE(n320.description.find("N320"), std::string::npos) << n320.description;
  EXPECT_EQ(named_grid("N32").size(), 6114);  // ecCodes' reduced_gg_pl_32
  EXPECT_EQ(named_grid("o96").size(), 40320);
  EXPECT_EQ(named_grid("O96").points_per_row, octahedral_grid(96).points_per_row);
  GridName parsed;
  ASSERT_TRUE(parse_grid_name("n320", parsed));
  EXPECT_EQ(named_grid_cells(parsed), 542080);
  for (const std::string bad : {"n321", "f320", "o", "o0", "n32x", ""}) {
    try {
      named_grid(bad);
      FAIL() << "'" << bad << "' was taken";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(Grid, RectangleAreasAreBandsAndARegionCoversItsShare) {
  std::vector<double> rows, columns;
  for (int i = 0; i <= 180; ++i) rows.push_back(90.0 - i);
  for (int j = 0; j < 360; ++j) columns.push_back(j);
  const Grid global = rectangle_grid(rows, columns);
  EXPECT_EQ(global.size(), 181 * 360);
  EXPECT_NEAR(total(global), 1.0, 1e-12);
  EXPECT_NEAR(weighted_mean(global, [](double phi, double) { return std::pow(std::sin(phi), 2); }), 1.0 / 3, 1e-4);
  // A region 20..55 N, 230..300 E at 1 degree: its rows' bands, 71 columns of 1/360 each.
  rows.clear(), columns.clear();
  for (int i = 55; i >= 20; --i) rows.push_back(i);
  for (int j = 230; j <= 300; ++j) columns.push_back(j);
  const Grid region = rectangle_grid(rows, columns);
  const double expected = (std::sin(55.5 * kPi / 180) - std::sin(19.5 * kPi / 180)) / 2 * 71.0 / 360;
  EXPECT_NEAR(total(region), expected, 1e-12);
}

TEST(Grid, CellListsRecogniseGaussianRowsRowsAndScatteredCells) {
  // An O12 grid stored as cells, shuffled, coordinates rounded to float32 as stores keep them.
  const Grid o12 = octahedral_grid(12);
  std::vector<size_t> order(static_cast<size_t>(o12.size()));
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::vector<double> lat, lon;
  for (size_t k : order) {
    lat.push_back(static_cast<float>(o12.latitudes[k]));
    lon.push_back(static_cast<float>(o12.longitudes[k]));
  }
  const Grid cells = cell_grid(lat, lon, "test cells");
  EXPECT_EQ(cells.kind, GridKind::kReducedGaussian);
  EXPECT_EQ(cells.gaussian_n, 12);
  for (size_t c = 0; c < order.size(); ++c) ASSERT_NEAR(cells.areas[c], o12.areas[order[c]], 1e-15) << c;

  // Rows that are not Gaussian (a 5-degree grid without the poles): the band rule, all round.
  lat.clear(), lon.clear();
  for (double phi = 87.5; phi > -90; phi -= 5)
    for (double lambda = 0; lambda < 360; lambda += 5) lat.push_back(phi), lon.push_back(lambda);
  const Grid banded = cell_grid(lat, lon, "test cells");
  EXPECT_EQ(banded.kind, GridKind::kCells);
  EXPECT_NEAR(total(banded), 1.0, 1e-12);
  EXPECT_NEAR(weighted_mean(banded, [](double phi, double) { return std::pow(std::sin(phi), 2); }), 1.0 / 3, 2e-3);

  // Scattered cells (no two on a latitude): equal weights summing to 1.
  std::mt19937 random(3);
  std::uniform_real_distribution<double> u(-1, 1), l(0, 360);
  lat.clear(), lon.clear();
  for (int c = 0; c < 500; ++c) lat.push_back(std::asin(u(random)) * 180 / kPi), lon.push_back(l(random));
  const Grid scattered = cell_grid(lat, lon, "test cells");
  EXPECT_NEAR(total(scattered), 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(scattered.areas.front(), 1.0 / 500);
  EXPECT_NE(scattered.description.find("equal"), std::string::npos);

  try {
    cell_grid({0, 95}, {0, 10}, "cells.nc");
    FAIL() << "a latitude of 95 was taken";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("cells.nc"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("95"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cell_grid({0, 1}, {0}, "x"), DataError);
}

TEST(Grid, SelectedCellsKeepTheirAreas) {
  const Grid o12 = octahedral_grid(12);
  std::vector<int64_t> north;
  double expected = 0;
  for (int64_t c = 0; c < o12.size(); ++c)
    if (o12.latitudes[static_cast<size_t>(c)] > 0) north.push_back(c), expected += o12.areas[static_cast<size_t>(c)];
  const Grid half = select_cells(o12, north);
  EXPECT_EQ(half.size(), o12.size() / 2);
  EXPECT_NEAR(total(half), 0.5, 1e-12);  // the northern hemisphere
  EXPECT_NEAR(total(half), expected, 1e-15);
}

TEST(Grid, BoundaryBandIsByDistanceToTheRegionsEdge) {
  // Cells every degree over 20..55 N, 230..300 E; a band 2.5 degrees wide.
  std::vector<double> lat, lon;
  for (int i = 55; i >= 20; --i)
    for (int j = 230; j <= 300; ++j) lat.push_back(i), lon.push_back(j);
  const Box box{20, 55, 230, 300};
  const auto band = boundary_band(lat, lon, &box, 2.5);
  auto at = [&](double phi, double lambda) {
    for (size_t c = 0; c < lat.size(); ++c)
      if (lat[c] == phi && lon[c] == lambda) return static_cast<int>(band[c]);
    return -1;
  };
  EXPECT_EQ(at(55, 260), 1);  // on the northern edge
  EXPECT_EQ(at(53, 260), 1);  // two rows in
  EXPECT_EQ(at(52, 260), 0);  // three rows in: inside
  EXPECT_EQ(at(40, 230), 1);  // on the western edge
  // At 40 N a degree of longitude is cos(40) = 0.77 degrees of arc: three columns in is 2.3 degrees
  // of arc from the edge, so still in the band, four (3.06) is not.
  EXPECT_EQ(at(40, 233), 1);
  EXPECT_EQ(at(40, 234), 0);
  EXPECT_EQ(at(40, 297), 1);
  EXPECT_EQ(at(40, 260), 0);
  // Without a box: the cells' own extent, the same band here.
  EXPECT_EQ(boundary_band(lat, lon, nullptr, 2.5), band);
  // A band round a polar cap: no east-west edge, only the cap's southern edge.
  const Grid o12 = octahedral_grid(12);
  const Box cap{60, 90, 0, 0};
  const auto polar = boundary_band(o12.latitudes, o12.longitudes, &cap, 5.0);
  for (size_t c = 0; c < polar.size(); ++c)
    if (o12.latitudes[c] >= 60) ASSERT_EQ(polar[c], o12.latitudes[c] - 60 < 5 ? 1 : 0) << c;
  EXPECT_NEAR(typical_spacing_degrees(o12), std::sqrt(4 * kPi / 1008) * 180 / kPi, 1e-12);
}

}  // namespace
