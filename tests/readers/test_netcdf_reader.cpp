// The NetCDF reader on the real storm files: what netCDF-C itself says, through the Reader API.
#include <gtest/gtest.h>
#include <netcdf.h>

#include <fstream>
#include <string>

#include "core/error.h"
#include "data/readers/netcdf_file.h"
#include "data/readers/reader.h"

using namespace wxtrain;
using namespace wxtrain::data;

namespace {
const std::string kPstorm = "/usr/share/ncarg/data/cdf/Pstorm.cdf";
}

TEST(NetcdfReader, DimensionsAttributesAndTypeOfAStormVariable) {
  auto reader = open_reader(kPstorm);
  EXPECT_EQ(reader->format(), "NetCDF");
  EXPECT_TRUE(reader->has_variable("p"));
  const VariableMeta& p = reader->variable("p");
  ASSERT_EQ(p.dims.size(), 3u);
  EXPECT_EQ(p.dims[0].name, "timestep");
  EXPECT_EQ(p.dims[0].length, 64u);
  EXPECT_EQ(p.dims[1].name, "lat");
  EXPECT_EQ(p.dims[1].length, 33u);
  EXPECT_EQ(p.dims[2].length, 36u);
  EXPECT_EQ(p.dtype, "float");
  ASSERT_TRUE(p.number("_FillValue"));
  EXPECT_DOUBLE_EQ(*p.number("_FillValue"), -9999.0);
  EXPECT_EQ(reader->variable("reftime").text("units").value_or(""), "text_time");
}

TEST(NetcdfReader, ReadsTheSlabNetcdfCReturns) {
  auto reader = open_reader(kPstorm);
  std::vector<float> slab(2 * 33 * 36);
  reader->read("p", {10, 0, 0}, {2, 33, 36}, slab.data());
  int ncid = -1, varid = -1;
  ASSERT_EQ(nc_open(kPstorm.c_str(), NC_NOWRITE, &ncid), NC_NOERR);
  ASSERT_EQ(nc_inq_varid(ncid, "p", &varid), NC_NOERR);
  const size_t index[3] = {11, 20, 7};
  float expected = 0;
  ASSERT_EQ(nc_get_var1_float(ncid, varid, index, &expected), NC_NOERR);
  nc_close(ncid);
  EXPECT_EQ(slab[(1 * 33 + 20) * 36 + 7], expected);
  const std::vector<double> lat = reader->read_doubles("lat");
  EXPECT_EQ(lat.size(), 33u);
  EXPECT_DOUBLE_EQ(lat.front(), 20.0);
}

TEST(NetcdfReader, ErrorsNameTheFileAndWhatIsThere) {
  try {
    open_reader("/nonexistent/era5.nc");
    FAIL() << "no error for a missing file";
  } catch (const DataError& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent/era5.nc"), std::string::npos);
  }
  auto reader = open_reader(kPstorm);
  try {
    reader->variable("z");
    FAIL() << "no error for a missing variable";
  } catch (const DataError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("'z'"), std::string::npos) << message;
    EXPECT_NE(message.find("p, timestep, lat, lon"), std::string::npos) << message;
  }
  std::vector<float> slab(10);
  EXPECT_THROW(reader->read("p", {63, 0, 0}, {2, 1, 5}, slab.data()), DataError);
}

// Found by fuzz/netcdf_reader_fuzz: inputs that made netCDF-C leak or allocate what a corrupt header
// declares. Each is now a DataError naming the file, raised before netCDF-C is asked.
namespace {

std::string error_reading(const std::string& path, const std::string& variable) {
  try {
    auto reader = open_reader(path);
    if (!variable.empty()) {
      float value = 0;
      reader->read(variable, {}, {}, &value);
    }
  } catch (const DataError& error) {
    return error.what();
  }
  return "no error";
}

}  // namespace

TEST(NetcdfReader, AStringVariableIsRefusedBeforeNetcdfCReadsIt) {
  // Read as float, netCDF-C 4.9.0 fetched the strings through HDF5 and leaked them before failing.
  const std::string path = ::testing::TempDir() + "/wxtrain_string_variable.nc";
  int ncid = -1, varid = -1;
  ASSERT_EQ(nc_create(path.c_str(), NC_CLOBBER | NC_NETCDF4, &ncid), NC_NOERR);
  ASSERT_EQ(nc_def_var(ncid, "name", NC_STRING, 0, nullptr, &varid), NC_NOERR);
  const char* value = "seed";
  ASSERT_EQ(nc_put_var_string(ncid, varid, &value), NC_NOERR);
  ASSERT_EQ(nc_close(ncid), NC_NOERR);
  const std::string message = error_reading(path, "name");
  EXPECT_NE(message.find(path + ", variable 'name' as numbers: it holds string values"), std::string::npos) << message;
}

TEST(NetcdfReader, AClassicLengthPastTheEndIsRefusedBeforeNetcdfCAllocatesIt) {
  // CDF-5, one dimension whose name declares 2^42 bytes: netCDF-C would calloc that much first.
  const std::string path = ::testing::TempDir() + "/wxtrain_huge_name.nc";
  std::string header("CDF\x05", 4);
  auto u64 = [&](uint64_t v) {
    for (int i = 7; i >= 0; --i) header += static_cast<char>((v >> (8 * i)) & 0xFF);
  };
  u64(0);                    // numrecs
  header += std::string("\0\0\0\x0A", 4);  // the dimension list
  u64(1);
  u64(uint64_t{1} << 42);    // its name's length
  header += std::string(64, 'x');
  std::ofstream(path, std::ios::binary) << header;
  const std::string message = error_reading(path, "");
  EXPECT_NE(message.find(path + " is not a readable NetCDF file: its classic header is malformed (a name declares "
                                "4398046511104 x 1 bytes"),
            std::string::npos)
      << message;
}

TEST(NetcdfReader, ALengthSplitByTheEndOfTheFileIsReadAsNetcdfCReadsIt) {
  // The file ends 4 bytes into a CDF-5 name length: netCDF-C reads zeros past the end, so the
  // length is 0x007fc000'00000000 to it (and a calloc of 2^55 bytes), not a header merely cut short.
  const std::string path = ::testing::TempDir() + "/wxtrain_split_length.nc";
  std::string header("CDF\x05", 4);
  header += std::string(8, '\0');                             // numrecs
  header += std::string("\0\0\0\x0A\0\0\0\0\0\0\0\x01", 12);   // a dimension list of one
  header += std::string("\0\x7f\xc0\0", 4);                 // its name's length, cut after 4 of 8 bytes
  std::ofstream(path, std::ios::binary) << header;
  const std::string message = error_reading(path, "");
  EXPECT_NE(message.find(path + " is not a readable NetCDF file: its classic header is malformed (a name declares "
                                "35958428274786304 x 1 bytes where the file has 0 left)"),
            std::string::npos)
      << message;
}

TEST(NetcdfReader, ANameCutByTheEndOfTheFileIsATruncatedHeader) {
  // A name running past the end: netCDF-C would read on beyond it and take what it finds there as
  // the next lengths (a 32 GiB calloc in the fuzzer's case).
  const std::string path = ::testing::TempDir() + "/wxtrain_cut_name.nc";
  std::string header("CDF\x01\0\0\0\0\0\0\0\x0A\0\0\0\x01\0\0\0\x64", 20);  // one dimension, a 100-byte name
  header += "abcdefgh";
  std::ofstream(path, std::ios::binary) << header;
  const std::string message = error_reading(path, "");
  EXPECT_NE(message.find(path + " is truncated: its NetCDF header is cut short (a name declares 100 x 1 bytes where "
                                "the file has 8 left)"),
            std::string::npos)
      << message;
}

namespace {
// Writes a NetCDF-4 file with netCDF-C, as a C tool would: `define` adds dimensions, variables and
// attributes (define mode), then the file is closed with every variable's values left as fill.
template <typename Define>
std::string write_netcdf4(const std::string& name, Define define) {
  const std::string path = ::testing::TempDir() + "/" + name;
  int ncid = -1;
  EXPECT_EQ(nc_create(path.c_str(), NC_CLOBBER | NC_NETCDF4, &ncid), NC_NOERR);
  define(ncid);
  EXPECT_EQ(nc_close(ncid), NC_NOERR);
  return path;
}
int dim(int ncid, const char* name, size_t length) {
  int id = -1;
  EXPECT_EQ(nc_def_dim(ncid, name, length, &id), NC_NOERR);
  return id;
}
int var(int ncid, const char* name, std::vector<int> dims) {
  int id = -1;
  EXPECT_EQ(nc_def_var(ncid, name, NC_FLOAT, static_cast<int>(dims.size()), dims.data(), &id), NC_NOERR);
  return id;
}
void string_att(int ncid, int varid, const char* name, const char* value) {
  EXPECT_EQ(nc_put_att_string(ncid, varid, name, 1, &value), NC_NOERR);
}
void char_att(int ncid, int varid, const char* name, const std::string& value) {
  EXPECT_EQ(nc_put_att_text(ncid, varid, name, value.size(), value.c_str()), NC_NOERR);
}
}  // namespace

// NetCDF-4 `string` attributes (NC_STRING: netCDF4-python's setncattr_string, h5netcdf, ncgen's
// `string units = ...`) read exactly like `char` ones.
TEST(NetcdfReader, StringAttributesReadLikeCharOnes) {
  const std::string path = write_netcdf4("wxtrain_string_attributes.nc", [](int ncid) {
    const int time = dim(ncid, "time", 2);
    const int t = var(ncid, "time", {time});
    string_att(ncid, t, "units", "hours since 2000-01-01 00:00:00");
    string_att(ncid, t, "calendar", "noleap");
    const int x = var(ncid, "x", {time});
    char_att(ncid, x, "units", "K");
    string_att(ncid, x, "long_name", "air temperature");
    const char* two[] = {"first", "second"};
    EXPECT_EQ(nc_put_att_string(ncid, x, "history", 2, two), NC_NOERR);
  });
  auto reader = open_reader(path);
  EXPECT_EQ(reader->variable("time").text("units").value_or("?"), "hours since 2000-01-01 00:00:00");
  EXPECT_EQ(reader->variable("time").text("calendar").value_or("?"), "noleap");
  EXPECT_EQ(reader->variable("x").text("units").value_or("?"), "K");
  EXPECT_EQ(reader->variable("x").text("long_name").value_or("?"), "air temperature");
  EXPECT_EQ(reader->variable("x").text("history").value_or("?"), "first, second");
  EXPECT_FALSE(reader->variable("x").number("long_name"));
}

// The grid's latitudes and longitudes found as CF finds them, on files as tools write them.
TEST(NetcdfReader, FindsLatitudesAndLongitudesAsCfDoes) {
  const std::string path = write_netcdf4("wxtrain_cf_grid.nc", [](int ncid) {
    const int time = dim(ncid, "time", 2), latitude = dim(ncid, "latitude", 3), longitude = dim(ncid, "longitude", 4);
    // Latitudes on a dimension without a coordinate variable (xarray: "Dimensions without coordinates").
    char_att(ncid, var(ncid, "lat", {latitude}), "units", "degrees_north");
    char_att(ncid, var(ncid, "lon", {longitude}), "units", "degree_E");  // one of CF's spellings
    var(ncid, "t", {time, latitude, longitude});
    // A projection: y(y), x(x) in metres, the latitudes 2-D and named by `coordinates`.
    const int y = dim(ncid, "y", 3), x = dim(ncid, "x", 4);
    char_att(ncid, var(ncid, "y", {y}), "units", "m");
    char_att(ncid, var(ncid, "x", {x}), "units", "m");
    const int lat2d = var(ncid, "lat2d", {y, x}), lon2d = var(ncid, "lon2d", {y, x});
    char_att(ncid, lat2d, "standard_name", "latitude");
    char_att(ncid, lon2d, "standard_name", "longitude");
    char_att(ncid, var(ncid, "p", {time, y, x}), "coordinates", "lon2d lat2d");
    // Named in the `coordinates` attribute, on dimensions called anything.
    const int row = dim(ncid, "row", 3), column = dim(ncid, "column", 4);
    const int northings = var(ncid, "geo_lat", {row});
    char_att(ncid, northings, "standard_name", "latitude");
    char_att(ncid, var(ncid, "geo_lon", {column}), "units", "degrees_east");
    char_att(ncid, var(ncid, "q", {time, row, column}), "coordinates", "geo_lat geo_lon");
  });
  auto reader = open_reader(path);
  const VariableMeta& t = reader->variable("t");
  EXPECT_EQ(grid_coordinate(*reader, &t, t.dims[1], GridAxis::kLatitude).value_or("-"), "lat");
  EXPECT_EQ(grid_coordinate(*reader, &t, t.dims[2], GridAxis::kLongitude).value_or("-"), "lon");
  EXPECT_FALSE(grid_coordinate(*reader, &t, t.dims[1], GridAxis::kLongitude));
  const VariableMeta& p = reader->variable("p");
  EXPECT_FALSE(grid_coordinate(*reader, &p, p.dims[1], GridAxis::kLatitude)) << "metres taken for degrees";
  EXPECT_NE(missing_grid_coordinate(*reader, &p, p.dims[1], GridAxis::kLatitude)
                .find("its latitudes 'lat2d' (y=3, x=4) are 2-D"),
            std::string::npos);
  const VariableMeta& q = reader->variable("q");
  EXPECT_EQ(grid_coordinate(*reader, &q, q.dims[1], GridAxis::kLatitude).value_or("-"), "geo_lat");
  EXPECT_EQ(grid_coordinate(*reader, &q, q.dims[2], GridAxis::kLongitude).value_or("-"), "geo_lon");
  EXPECT_TRUE(is_lat_dimension(*reader, q.dims[1], &q));
  EXPECT_TRUE(is_lon_dimension(*reader, q.dims[2], &q));
  // The storm files' lat(lat) without attributes: by its name, as before.
  auto storm = open_reader(kPstorm);
  const VariableMeta& storm_p = storm->variable("p");
  EXPECT_EQ(grid_coordinate(*storm, &storm_p, storm_p.dims[1], GridAxis::kLatitude).value_or("-"), "lat");
}
