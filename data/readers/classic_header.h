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

// Run before nc_open on a file with a classic magic number: netCDF-C allocates every name, attribute
// and list as large as the header declares before reading it, so a corrupt length field would have
// it allocate up to 2^64 bytes. Throws DataError naming the file when a length reaches far past the
// end of the file or the header is otherwise malformed; a header merely cut short is left to
// netCDF-C (and classic_data_end).
void check_classic_header(const std::string& path);

}  // namespace wxtrain::data
