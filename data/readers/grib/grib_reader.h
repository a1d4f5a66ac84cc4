#pragma once
// GRIB (edition 2, and 1) through ecCodes, as a Reader. See grib_reader.cpp.
#include <memory>
#include <string>

#include "data/readers/reader.h"

namespace wxtrain::data {

// True when the file starts with "GRIB" (or is named .grib, .grib2, .grb, .grb2).
bool looks_like_grib(const std::string& path);

// Indexes every message of the file (shortName, level, valid time) and serves them as variables.
std::unique_ptr<Reader> open_grib(const std::string& path);

}  // namespace wxtrain::data
