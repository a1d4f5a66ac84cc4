// PLACEHOLDER until the GRIB reader lands (being written now); replaced wholesale.
#include "data/readers/grib/grib_reader.h"
#include "core/error.h"
namespace wxtrain::data {
bool looks_like_grib(const std::string&) { return false; }
std::unique_ptr<Reader> open_grib(const std::string& path) { throw DataError("grib: " + path); }
}  // namespace wxtrain::data
