#pragma once
// NetCDF-3 (classic, 64-bit offset, CDF-5) and NetCDF-4 files through netCDF-C, as a Reader.
#include <memory>
#include <string>

#include "data/readers/reader.h"

namespace wxtrain::data {

// Reads the header once; each read opens the file again (data/readers/netcdf_file.h), so a dataset
// of many files keeps no descriptors open and a file removed or replaced mid-run is reported, not
// read stale. Throws DataError for a missing, truncated or non-NetCDF file.
std::unique_ptr<Reader> open_netcdf(const std::string& path);

}  // namespace wxtrain::data
