#pragma once
// anemoi-datasets' Zarr stores as a Reader: one array `data` of (dates, variables, ensembles,
// cells), `dates` (datetime64), `latitudes` / `longitudes` per cell, the variable names in the
// group's attribute `variables` (or `name_to_index`), and per-variable statistics (`mean`,
// `stdev`, `minimum`, `maximum`, over the dataset's statistics period). Presented as one variable
// per anemoi variable, (time, cell), with the coordinates time (seconds since 1970, the dates
// anemoi lists in `missing_dates` left out, so the time axis shows the gap), latitude(cell) and
// longitude(cell), and the statistics as the variable's attributes anemoi_mean, anemoi_stdev,
// anemoi_minimum and anemoi_maximum. A store with more than one ensemble member is refused naming
// the count: wxtrain trains on one state per date.
#include <memory>
#include <string>

#include "data/readers/reader.h"

namespace wxtrain::data {

// Whether the Zarr store at `path` (opened as `zarr`) is laid out as anemoi-datasets writes.
bool is_anemoi_store(const std::string& path, const Reader& zarr);
// The store as described above; throws DataError naming the store and the key that is wrong.
std::unique_ptr<Reader> open_anemoi(const std::string& path, std::unique_ptr<Reader> zarr);

}  // namespace wxtrain::data
