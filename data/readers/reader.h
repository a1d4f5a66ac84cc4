#pragma once
// One interface over the archive formats weather data comes in: NetCDF-3/4 (netCDF-C), Zarr v2/v3
// (read natively: data/readers/zarr/) and GRIB2 (ecCodes). A Reader answers what a file or store
// holds (variables, their dimensions, attributes, coordinates by value) and reads a hyperslab of
// one variable as float32. Everything above it (levels, dates, masks, grids) is written once, in
// data/dataset.cpp, against this interface.
//
// Values come back as stored, converted to float: no scale_factor/add_offset applied and fill
// values not masked. The attributes carry what is needed to decode them, under the CF names
// (scale_factor, add_offset, _FillValue, missing_value, units, calendar), so one decoder serves
// every format. A Zarr array's fill_value is reported as _FillValue unless the array's attributes
// already give one (what xarray does).
//
// Readers are torch-free and thread-safe: the loader's worker threads read concurrently.
// Every failure is a wxtrain::DataError naming the file or store, the variable and what was wrong.
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace wxtrain::data {

struct Dimension {
  std::string name;
  size_t length = 0;
};

// A text attribute or a list of numbers (CF attributes are one or the other).
struct Attribute {
  std::optional<std::string> text;
  std::vector<double> numbers;
};

struct VariableMeta {
  std::string name;
  std::vector<Dimension> dims;                 // outermost first (C order)
  std::map<std::string, Attribute> attributes;
  std::string dtype;                           // as stored, e.g. "f4", "<i2", "int16"; for messages

  std::optional<std::string> text(const std::string& key) const;   // nullopt when absent or numeric
  std::optional<double> number(const std::string& key) const;      // the first number, else nullopt
};

class Reader {
 public:
  virtual ~Reader() = default;

  // The path the user gave, for messages.
  virtual const std::string& path() const = 0;
  // "NetCDF", "Zarr v2", "Zarr v3", "GRIB2": for messages and `wxtrain info`-style listings.
  virtual std::string format() const = 0;

  virtual std::vector<std::string> variable_names() const = 0;
  bool has_variable(const std::string& name) const;
  // Throws DataError naming the path and listing the variables there when `name` is missing.
  virtual const VariableMeta& variable(const std::string& name) const = 0;

  // A hyperslab of `name` as float32: start/count per dimension (size of dims), C order into `out`,
  // which holds the product of `count`. Throws DataError when the slab is outside the variable or
  // a chunk or message cannot be decoded (naming the store, the variable and the chunk key).
  virtual void read(const std::string& name, const std::vector<size_t>& start,
                    const std::vector<size_t>& count, float* out) const = 0;

  // A whole (small) variable as double: coordinates (time as stored, levels, lat, lon).
  virtual std::vector<double> read_doubles(const std::string& name) const = 0;

  // What the reader read on an assumption the user should hear of, a sentence each naming the
  // variable (a Zarr v3 array with an empty codecs list); empty for a file read as written.
  virtual std::vector<std::string> notes() const { return {}; }
};

// What every read() checks first: `start` and `count` have the variable's rank and stay inside
// it (the zarr form of the check guards against overflow too). Throws DataError naming the path,
// the variable and the dimension.
void check_slab(const std::string& path, const VariableMeta& meta, const std::vector<size_t>& start,
                const std::vector<size_t>& count);

// The grid's latitudes and longitudes, found the way CF finds them (CF 1.11, sections 4.1, 4.2 and
// 5): for the dimension `dim` of `data_variable`, the first of
//   1. its coordinate variable (the 1-D variable named like the dimension),
//   2. a 1-D variable along `dim` named in the data variable's `coordinates` attribute,
//   3. any other 1-D variable along `dim`,
// that is a latitude (longitude): units degrees_north (degrees_east) or one of CF's spellings of
// it (degree_north, degree_N, degrees_N, degreeN, degreesN), or standard_name latitude
// (longitude); or, with neither attribute saying it is something else (metres of a projection,
// a rotated pole's grid_latitude), a conventional name (lat, latitude, ...). So `float
// lat(latitude)` on a dimension without a coordinate variable is found, and a projection's
// `y(y)` in metres is never taken for degrees.
enum class GridAxis { kLatitude, kLongitude };
// The name of that variable; nullopt when the file has none (`data_variable` may be null: then
// step 2 is skipped).
std::optional<std::string> grid_coordinate(const Reader& reader, const VariableMeta* data_variable,
                                           const Dimension& dim, GridAxis axis);
// Why grid_coordinate found nothing, for messages: "no 1-D variable along dimension 'y' has
// units degrees_north or standard_name latitude" or, when the `coordinates` attribute names a
// 2-D one, that the grid is curvilinear.
std::string missing_grid_coordinate(const Reader& reader, const VariableMeta* data_variable, const Dimension& dim,
                                    GridAxis axis);

// How the dataset and the static fields recognise a variable's dimensions: by name (time, valid_time,
// lat, latitude, y, ...), by their coordinate variable's CF attributes (units "<unit> since
// <date>"), or, for lat and lon, by a latitude or longitude along them (grid_coordinate).
bool is_time_dimension(const Reader& reader, const Dimension& dim);
bool is_lat_dimension(const Reader& reader, const Dimension& dim, const VariableMeta* data_variable = nullptr);
bool is_lon_dimension(const Reader& reader, const Dimension& dim, const VariableMeta* data_variable = nullptr);
// Attribute `key` of variable `name` as text, "" when either is absent.
std::string coordinate_text(const Reader& reader, const std::string& name, const std::string& key);
// "(time=24, lat=33, lon=36)": a variable's dimensions for messages.
std::string dims_text(const std::vector<Dimension>& dims);

// The libraries behind the readers and their versions, as they report them at run time:
// {"netCDF-C", "4.9.0"}, {"c-blosc", "1.21.3"}, {"zstd", ...}, {"lz4", ...}, {"zlib", ...},
// {"ecCodes", "2.28.0"} (for `wxtrain info`).
std::vector<std::pair<std::string, std::string>> reader_library_versions();

// Opens by what is at `path`: a directory holding .zgroup, .zarray, .zmetadata or zarr.json is a
// Zarr store; a file starting with "GRIB" (or named .grib/.grib2/.grb/.grb2) is GRIB; anything else
// goes to netCDF-C. The legacy NCZarr URL form "file:///abs/store.zarr#mode=..." opens the store at
// that path natively. A missing path is a DataError saying so.
std::unique_ptr<Reader> open_reader(const std::string& path);

}  // namespace wxtrain::data
