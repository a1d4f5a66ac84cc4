#pragma once
// The classic NetCDF formats (CDF-1, CDF-2 "64-bit offset", CDF-5) keep their data at offsets
// written in the header, and netCDF-C reads a region past the end of a short file as zeros without
// an error: a file truncated by an interrupted copy would load as a grid of zeros. The header says
// how far the data must run, so a truncated file can be named as such before anything is read.
#include <cstdint>
#include <string>

namespace wxtrain::data {

// The byte offset one past the last data byte that the header at `path` promises: the end of the
// farthest fixed-size variable or of the last record. Throws DataError naming the file when the
// header itself is cut short or malformed.
uint64_t classic_data_end(const std::string& path);

}  // namespace wxtrain::data
