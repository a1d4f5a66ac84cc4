// The NetCDF reader on the real storm files: what netCDF-C itself says, through the Reader API.
#include <gtest/gtest.h>
#include <netcdf.h>

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
