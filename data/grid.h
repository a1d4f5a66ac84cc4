#pragma once
// A grid is cells: a latitude, a longitude and an area weight per cell. Three kinds:
//   - the regular latitude-longitude rectangle (rows x columns; the tensors' [lat, lon]);
//   - reduced Gaussian grids (ECMWF's N and O grids: 2N Gaussian latitudes, pl[i] equally spaced
//     points on row i from longitude 0), read from GRIB (N and the `pl` array) or generated
//     (octahedral O grids: pl = 20, 24, ..., 20 + 4(N-1) from each pole to the equator);
//   - any list of cells (anemoi-datasets' stores, a NetCDF/Zarr file with a 1-D cell dimension).
// The last two are point sets: the tensors are [.., 1, cells] (models/weather_model.h ModelShape).
//
// Area weights are each cell's share of the sphere's area (a global grid's sum to 1, a region's to
// the fraction of the sphere it covers). They weight the loss, the scores and the normalisation
// statistics, so a field's weighted mean is its mean over the sphere:
//   - rectangle: the band between the midpoints of neighbouring rows (a half spacing beyond the
//     outer rows, never past a pole), (sin(north) - sin(south)) / 2, times the column's share of
//     360 degrees. (The loss of a rectangle keeps its cos(latitude) row weights, which are the
//     same up to a constant on every row but a pole's.)
//   - reduced Gaussian: row i's Gaussian quadrature weight w_i / 2 (the w_i sum to 2) divided by
//     its pl[i] points. Quadrature is exact for polynomials in sin(latitude) of degree < 4N: a
//     constant, sin^2 (mean 1/3) average exactly.
//   - a list of cells: the cells are grouped into rows of equal latitude. When the rows are the 2N
//     Gaussian latitudes of some N (a reduced Gaussian grid stored as cells, as anemoi-datasets
//     stores O96), the Gaussian weights above; when the cells lie on rows (at least 4 cells per
//     row on average), the rectangle's band rule per row, split over the row's cells by their
//     longitude spacing; scattered cells (icosahedral, HEALPix, stations) get equal weights that
//     sum to 1, right for the quasi-uniform meshes such lists usually hold (see docs/data.md).
// Torch-free (used by data/ and models/ alike).
#include <cstdint>
#include <string>
#include <vector>

namespace wxtrain::data {

// The 2N Gaussian latitudes (degrees, north to south: the zeros of the Legendre polynomial P_2N
// as arcsin) and their quadrature weights (summing to 2, the integral of d(sin lat)).
struct GaussianLatitudes {
  std::vector<double> latitudes, weights;
};
GaussianLatitudes gaussian_latitudes(int64_t n);

// Points per row of the octahedral grid O<n>, north to south: 20 + 4i from the pole, mirrored.
std::vector<int64_t> octahedral_points_per_row(int64_t n);

enum class GridKind { kRectangle, kReducedGaussian, kCells };

struct Grid {
  GridKind kind = GridKind::kRectangle;
  // Per cell, in the tensors' order (row-major for a rectangle).
  std::vector<double> latitudes, longitudes;
  // Each cell's share of the sphere's area (see above).
  std::vector<double> areas;
  // For a rectangle, its rows and columns (latitudes/longitudes above are their product).
  std::vector<double> rows, columns;
  // Reduced Gaussian: N and points per row.
  int64_t gaussian_n = 0;
  std::vector<int64_t> points_per_row;
  // How the area weights were chosen, for `train`'s first lines and messages:
  // "regular 19 x 36", "reduced Gaussian N32 (Gaussian weight / points in the row)".
  std::string description;

  bool point_set() const { return kind != GridKind::kRectangle; }
  int64_t size() const { return static_cast<int64_t>(latitudes.size()); }
};

// A rectangle of rows x columns (degrees).
Grid rectangle_grid(const std::vector<double>& rows, const std::vector<double>& columns);
// Reduced Gaussian N<n> with pl[i] points on row i (north to south), longitudes 360 j / pl[i]:
// the cells row after row, as GRIB orders them. pl must have 2n entries, each >= 1.
Grid reduced_gaussian_grid(int64_t n, const std::vector<int64_t>& points_per_row);
// The octahedral grid O<n>: reduced_gaussian_grid(n, octahedral_points_per_row(n)).
Grid octahedral_grid(int64_t n);
// A grid by name (data/named_grids.h): "o96" the octahedral O96, "n320" the classic N320 with
// ecCodes' points per row. A name that is not one (or a classic N whose pl is not kept) throws
// DataError naming it and what is known.
Grid named_grid(const std::string& name);
// Cells given by their coordinates (degrees), weighted as described above; a reduced Gaussian
// grid is recognised (kind kReducedGaussian, gaussian_n and points_per_row set when its rows are
// whole). `where` names the data in messages.
Grid cell_grid(const std::vector<double>& latitudes, const std::vector<double>& longitudes, const std::string& where);

// The cells of `grid` that `keep` selects, in that order, keeping their area weights (a region cut
// from a point set covers less of the sphere: its weights sum to its share).
Grid select_cells(const Grid& grid, const std::vector<int64_t>& keep);

// Great-circle distance between two points, in degrees of arc.
double arc_degrees(double lat1, double lon1, double lat2, double lon2);

// The spacing of a grid's cells, in degrees of arc: the side of a square of its mean cell area.
double typical_spacing_degrees(const Grid& grid);

// The regional model's boundary frame on a point set (data.boundary): 1 for the cells within
// `width` degrees of arc of the edge of the box [lat_min, lat_max] x [lon_min, lon_max] (longitudes
// eastwards from lon_min, across 0/360 when lon_max < lon_min; an edge at a pole is no edge, and
// a box all round the circle has no east or west edge), 0 inside. Without a box (`box` false), the
// cells' own bounding box: their latitude range and, unless they go all round, the arc of
// longitudes they span.
struct Box {
  double lat_min = -90, lat_max = 90, lon_min = 0, lon_max = 360;
};
std::vector<uint8_t> boundary_band(const std::vector<double>& latitudes, const std::vector<double>& longitudes,
                                   const Box* box, double width);

}  // namespace wxtrain::data
