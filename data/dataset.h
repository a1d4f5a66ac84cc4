#pragma once
// A gridded weather dataset: one channel per (file, variable, name) source, all sharing one time
// axis and one lat x lon grid. Values are in the file's units after scale_factor/add_offset;
// points equal to _FillValue / missing_value are NaN (callers mask them, statistics skip them).
//
// Small datasets (the storm data is ~1.8 MB) are read whole at construction; larger ones are read
// lazily one time slice at a time (nc_get_vara_float) through a small LRU cache, so a 100 GB
// dataset never sits in memory. Thread-safe: loader workers call state() concurrently.
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

#include "core/config.h"

namespace wxtrain::data {

// What a channel is and where it came from (kept for messages, checkpoints and the forecast file).
struct VariableInfo {
  std::string name;           // wxtrain's name for the channel (DataSource::name)
  std::string units;          // "units" attribute, "" when absent
  std::string long_name;      // "long_name" attribute, "" when absent
  std::string file;           // source path
  std::string file_variable;  // variable name inside the file
};

struct DatasetOptions {
  // Read everything at construction when the float32 data is at most this big.
  int64_t preload_max_bytes = 256LL * 1024 * 1024;
  // Time slices ([V, lat, lon]) kept by the lazy reader; history + rollout + a batch is plenty.
  int64_t cache_states = 64;
};

class Dataset {
 public:
  // Throws DataError (naming file and variable) for a missing or corrupt file, a missing variable
  // (listing the ones the file has), a variable that is not (time, lat, lon), or sources whose grid
  // or time axis disagree.
  explicit Dataset(const std::vector<DataSource>& sources, DatasetOptions options = {});
  explicit Dataset(const DataConfig& config, DatasetOptions options = {})
      : Dataset(config.sources, options) {}

  int64_t num_times() const { return num_times_; }
  int64_t num_variables() const { return static_cast<int64_t>(variables_.size()); }
  int64_t num_lat() const { return static_cast<int64_t>(lat_.size()); }
  int64_t num_lon() const { return static_cast<int64_t>(lon_.size()); }

  const std::vector<VariableInfo>& variables() const { return variables_; }
  std::vector<std::string> variable_names() const;

  // Grid coordinates in degrees (the latitude-weighted loss needs lat). When a file has no
  // coordinate variable they are indices 0..n-1 and has_coordinates() is false.
  const std::vector<double>& lat() const { return lat_; }
  const std::vector<double>& lon() const { return lon_; }
  bool has_coordinates() const { return has_coordinates_; }

  // The time coordinate of the first source (indices when it has none) and its units attribute
  // ("hours since 1996-01-05", or "" when the file gives none).
  const std::vector<double>& times() const { return times_; }
  const std::string& time_units() const { return time_units_; }
  const std::string& time_dimension() const { return time_dimension_; }

  // True when any source declares _FillValue or missing_value: samples then carry a target mask.
  bool has_fill_values() const { return has_fill_values_; }
  bool preloaded() const { return preloaded_.defined(); }

  // float32 [V, lat, lon] in raw units; NaN where the file has fill values.
  torch::Tensor state(int64_t t) const;

 private:
  // Where a source's (time, lat, lon) sits among the variable's dims (a singleton level is skipped).
  struct SourceLayout {
    size_t ndims = 3;
    size_t time_dim = 0, lat_dim = 1, lon_dim = 2;
    double scale = 1.0, offset = 0.0;
    std::vector<double> fill_values;  // _FillValue, missing_value as stored (before scaling)
  };

  void inspect_source(size_t index, const DataSource& source);
  void read_state(int64_t t, float* out) const;           // all variables at time t
  void read_all(float* out) const;                         // [T, V, lat, lon]
  void clean_values(size_t variable, float* values, int64_t count) const;  // scale, fill -> NaN

  std::vector<DataSource> sources_;
  std::vector<SourceLayout> layouts_;
  std::vector<VariableInfo> variables_;
  std::vector<double> lat_, lon_, times_;
  std::string time_units_, time_dimension_;
  bool has_coordinates_ = true;
  bool has_time_coordinates_ = false;
  bool has_fill_values_ = false;
  int64_t num_times_ = 0;
  DatasetOptions options_;

  torch::Tensor preloaded_;  // [T, V, lat, lon] when small enough

  // LRU of lazily read states: most recent at the front.
  mutable std::mutex cache_mutex_;
  mutable std::list<int64_t> cache_order_;
  mutable std::unordered_map<int64_t, std::pair<torch::Tensor, std::list<int64_t>::iterator>> cache_;
};

}  // namespace wxtrain::data
