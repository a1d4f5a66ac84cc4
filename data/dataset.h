#pragma once
// A gridded weather dataset: channels cut from (file, variable[, levels]) sources, on one time axis
// of dates and one lat x lon grid. A source is a NetCDF file, a Zarr store or a GRIB file, read
// through data/readers/reader.h; a variable with a level dimension gives one channel per selected
// level, named <name>_<level> (z_500). Values are in the file's units after
// scale_factor/add_offset; points equal to _FillValue / missing_value / Zarr's fill_value are NaN
// (callers mask them, statistics skip them).
//
// Time: each source's time coordinate is decoded from its CF units and calendar; sources are
// merged on the dates they all have. With data.time_step the axis keeps the states aligned to that
// step from the first one (hourly data, "6h": every sixth state); the step must be a multiple of
// the data's spacing. Monthly data (one state per calendar month, dated in days or in "months
// since") steps in calendar months ("1mo", the default for such data; "3mo", "1y"). Samples are
// cut in data/samples.h, which skips windows that a gap in the archive breaks.
//
// Grids are matched by value: a source whose latitudes run the other way, or whose longitudes are
// -180..180 where the first source's are 0..360, is flipped or rolled onto the first source's grid.
//
// A point-set grid (data/grid.h: a reduced Gaussian grid, anemoi-datasets' cells) is a variable
// with one cell dimension instead of (lat, lon): (time, [level,] cell), the cell dimension carrying
// 1-D latitude and longitude variables (found as CF finds coordinates, grid_coordinate). Its
// states are [V, 1, cells] and lat()/lon() hold one value per cell; every source must have the
// same cells in the same order.
//
// Small datasets (the storm data is ~1.8 MB) are read whole at construction; larger ones one time
// slice at a time (only the chunks a state needs, for Zarr) through a small LRU cache of states, so
// a 100 GB archive never sits in memory. Thread-safe: loader workers call state() concurrently.
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

#include "core/config.h"
#include "data/grid.h"
#include "data/time/cf_time.h"

namespace wxtrain::data {

class Reader;

// What a channel is and where it came from (kept for messages, checkpoints and the forecast file).
struct VariableInfo {
  std::string name;           // wxtrain's name for the channel: the source's name, + "_<level>"
  std::string units;          // "units" attribute, "" when absent
  std::string long_name;      // "long_name" attribute, "" when absent
  std::string file;           // source path
  std::string file_variable;  // variable name inside the file
  std::string source_name;    // the source's name (z for z_500); equals name without levels
  std::optional<double> level;  // the level's coordinate value (500), when cut from a level dimension
  std::string level_units;      // the level coordinate's units ("hPa", "millibars"), "" when absent
  std::string role = "prognostic";  // the source's role: prognostic, forcing or diagnostic
  // The store's own statistics of the channel, when it records them (anemoi-datasets' mean and
  // stdev, data/readers/zarr/anemoi_reader.h): Normalization::take_stored_statistics uses them.
  std::optional<double> stored_mean, stored_stdev;
};

// The dataset's time axis. With dates (a CF time coordinate) each state has a time in seconds
// within its calendar; without (a time dimension with no units, like the storm files' timestep)
// states are only ordered, one time_step apart by assumption.
struct TimeAxis {
  bool has_dates = false;
  Calendar calendar = Calendar::kStandard;
  std::vector<int64_t> seconds;   // per state, when has_dates
  // The model's step between consecutive states of a sample: a fixed step_seconds, or with
  // monthly data (data.time_step = "1mo", or monthly states without one) step_months calendar
  // months where months differ in length (in 360_day a month is 30 days, in step_seconds). Both
  // are 0 without dates; at most one is non-zero.
  int64_t step_seconds = 0;
  int64_t step_months = 0;
  std::string units;              // the first source's time units, "" when it has none
  std::vector<double> raw;        // the first source's time coordinate per state (indices without one)

  int64_t size() const { return static_cast<int64_t>(raw.size()); }
  // "1979-01-01T06:00:00", or "time index 12" without dates.
  std::string label(int64_t t) const;
  TimeStep step() const { return {step_seconds, step_months}; }
  // "6h", "1mo".
  std::string step_text() const { return format_time_step(step()); }
  // Whether state b directly follows state a at the model's step (true without dates: states are
  // then one step apart by assumption).
  bool one_step_apart(int64_t a, int64_t b) const;
  // The valid time `steps` model steps after time point `seconds` (a forecast past the archive's
  // end): for a month step the same day of the month, or the month's last day when it is shorter.
  int64_t after(int64_t seconds, int64_t steps) const { return steps_after(seconds, step(), steps, calendar); }
};

struct DatasetOptions {
  // Read everything at construction when the float32 data is at most this big.
  int64_t preload_max_bytes = 256LL * 1024 * 1024;
  // Time slices ([V, lat, lon]) kept by the lazy reader; history + rollout + a batch is plenty.
  int64_t cache_states = 64;
};

class Dataset {
 public:
  // Throws DataError (naming file, variable, level or key) for a missing or corrupt file, a missing
  // variable (listing the ones the file has), a level the file lacks (listing those it has), a
  // variable whose dimensions cannot be read as (time, [level,] lat, lon), grids that differ by
  // value, sources with no date in common, or a data.time_step the axis cannot give.
  explicit Dataset(const DataConfig& config, DatasetOptions options = {});
  explicit Dataset(const std::vector<DataSource>& sources, DatasetOptions options = {});
  ~Dataset();

  int64_t num_times() const { return time_.size(); }
  int64_t num_variables() const { return static_cast<int64_t>(variables_.size()); }
  // The tensors' grid dimensions: rows x columns, or 1 x cells for a point set.
  int64_t num_lat() const { return point_set_ ? 1 : static_cast<int64_t>(lat_.size()); }
  int64_t num_lon() const { return static_cast<int64_t>(lon_.size()); }
  // Whether the grid is a point set (one latitude and longitude per cell in lat() and lon()).
  bool point_set() const { return point_set_; }
  // The grid as cells with their area weights (data/grid.h), after data.region; for a rectangle
  // without coordinates, equal weights.
  const Grid& grid() const { return grid_; }

  const std::vector<VariableInfo>& variables() const { return variables_; }
  std::vector<std::string> variable_names() const;
  // Indices into variables() of the channels with `role` ("prognostic", "forcing", "diagnostic"),
  // in source order: what a sample takes from a state for each part of the model's input and output.
  std::vector<int64_t> channel_indices(const std::string& role) const;

  // [[data.static]] fields, float32 [S, lat, lon] in the file's units (NaN at fill points), on the
  // dataset's grid (cropped to data.region); names in config order. S may be 0.
  const torch::Tensor& static_fields() const { return statics_; }
  const std::vector<std::string>& static_names() const { return static_names_; }
  // data.forcings, computed at a valid time (seconds as in TimeAxis::seconds; ignored by the
  // coordinate forcings): float32 [F, lat, lon], F may be 0.
  const std::vector<std::string>& computed_forcing_names() const { return computed_forcings_; }
  torch::Tensor computed_forcings(int64_t seconds) const;
  // Whether a computed forcing needs the valid time (so the time axis must have dates).
  bool forcings_need_dates() const;

  // Grid coordinates in degrees of the first source (the latitude-weighted loss needs lat; a point
  // set has one of each per cell), found
  // as CF finds them (data/readers/reader.h, grid_coordinate: a coordinate variable, the
  // `coordinates` attribute, a 1-D variable in degrees_north/degrees_east along the dimension),
  // cut to data.region when one is set (rows in the file's order; columns from the region's west
  // edge eastwards, across the 0/360 seam when it crosses it). When the first source has none they
  // are indices 0..n-1, has_coordinates() is false and no_coordinates() says what is missing
  // ("variable 'u' in f.nc (time=8, y=20, x=18) has no latitudes (...)").
  const std::vector<double>& lat() const { return lat_; }
  const std::vector<double>& lon() const { return lon_; }
  bool has_coordinates() const { return has_coordinates_; }
  const std::string& no_coordinates() const { return no_coordinates_; }
  // What the sources' readers read on an assumption (Reader::notes), `train` prints them under
  // the data's summary (data::describe_samples).
  const std::vector<std::string>& reader_notes() const { return reader_notes_; }
  // data.region: the rows and columns of the sources' full grid (full_lat() x full_lon()) it
  // keeps; empty without a region. A point set's region keeps the cells inside it: row 0 and
  // the cells' indices as columns.
  const std::vector<int64_t>& region_rows() const { return region_rows_; }
  const std::vector<int64_t>& region_cols() const { return region_cols_; }
  int64_t full_lat() const { return full_lat_; }
  int64_t full_lon() const { return full_lon_; }

  const TimeAxis& time_axis() const { return time_; }
  // States in the sources' time axes before data.time_step picked its subset, and the spacing
  // found there (for the first line of `train`).
  int64_t source_times() const { return source_times_; }
  int64_t source_step_seconds() const { return source_step_seconds_; }
  // That spacing as text: "1h", or "1mo" for monthly states (one per calendar month).
  std::string source_spacing() const { return source_monthly_ ? "1mo" : format_duration(source_step_seconds_); }

  // True when any source declares _FillValue or missing_value: samples then carry a target mask.
  bool has_fill_values() const { return has_fill_values_; }
  bool preloaded() const { return preloaded_.defined() || band_preloaded_.defined(); }

  // float32 [V, lat, lon] in physical units; NaN where the file has fill values. A copy the caller
  // may change. Always the whole grid (after data.region), also after set_band.
  torch::Tensor state(int64_t t) const;
  // The same values without the copy: the preloaded data's or the state cache's own tensor, which
  // the caller must not modify in place. After set_band, read from the archive at every call
  // (the cache and the preloaded data then hold the band only).
  torch::Tensor shared_state(int64_t t) const;

  // Model parallelism (docs/distributed.md): this rank's band of the grid, the rows [begin, begin +
  // length) of the region-cut grid (its cells on a point set). From then on band_state reads only
  // those rows from the archive (one hyperslab along the latitude or cell dimension per source and
  // state: NetCDF and Zarr read just those rows and the chunks holding them; GRIB decodes the
  // message and keeps the rows), the state cache holds band states, and data preloaded at
  // construction is cut to the band. Metadata (lat(), lon(), grid(), static_fields(),
  // computed_forcings()) stays the whole grid's: the model, the loss weights and the statistics are
  // built on it. The whole grid (begin 0, length all) removes the band. Call before the loaders
  // start (not thread-safe against concurrent reads). Throws DataError for a band outside the grid.
  void set_band(int64_t begin, int64_t length);
  bool banded() const { return band_length_ > 0; }
  int64_t band_begin() const { return banded() ? band_begin_ : 0; }
  int64_t band_length() const { return banded() ? band_length_ : grid_extent(); }
  // Rows of a rectangle, cells of a point set: what a band counts.
  int64_t grid_extent() const;
  // float32 [V, band rows, lon] ([V, 1, band cells]): the band of state t, shared as shared_state's
  // (read it, do not modify it); shared_state(t) itself without a band.
  torch::Tensor band_state(int64_t t) const;
  // t [..., lat, lon] of the whole grid cut to the band (t itself without one).
  torch::Tensor band(const torch::Tensor& t) const;
  // The band of static_fields(), and computed_forcings at `seconds` computed for the band's cells.
  torch::Tensor band_static_fields() const;
  torch::Tensor band_computed_forcings(int64_t seconds) const;
  // float32 bytes the sources' readers were asked for so far (every state and band read, the
  // preload at construction included; not the static fields): what this process read from the
  // archive, for `train`'s data line and bench/sharded_read.
  int64_t archive_bytes_read() const { return archive_bytes_.load(); }

 private:
  struct Source;  // one [[data.sources]] entry: its reader, dimension layout, decoding, grid mapping

  void open_source(size_t index, const DataSource& config);
  void merge_time_axes(const DataConfig& config);
  void cut_region(const DataConfig& config);
  void read_statics(const DataConfig& config);
  void read_state(int64_t t, float* out) const;  // all channels at time t, the whole grid
  // All channels at time t on rows (cells) [begin, begin + length) of the region-cut grid.
  void read_rows(int64_t t, int64_t begin, int64_t length, float* out) const;
  // The band's state (the whole grid's without a band) through the LRU cache.
  torch::Tensor cached(int64_t t) const;

  std::vector<std::unique_ptr<Source>> sources_;
  std::vector<VariableInfo> variables_;
  std::vector<double> lat_, lon_;
  bool point_set_ = false;
  Grid grid_;
  bool has_coordinates_ = true;
  std::string no_coordinates_;  // why has_coordinates_ is false
  std::vector<std::string> reader_notes_;
  // data.region: the rows and columns of the sources' full grid (full_lat x full_lon) it keeps;
  // empty without a region.
  std::vector<int64_t> region_rows_, region_cols_;
  int64_t full_lat_ = 0, full_lon_ = 0;
  torch::Tensor statics_;
  std::vector<std::string> static_names_;
  std::vector<std::string> computed_forcings_;
  bool has_fill_values_ = false;
  TimeAxis time_;
  int64_t source_times_ = 0;
  int64_t source_step_seconds_ = 0;
  bool source_monthly_ = false;
  DatasetOptions options_;

  torch::Tensor preloaded_;  // [T, V, lat, lon] when small enough (undefined once a band is set)
  torch::Tensor band_preloaded_;  // the band of it after set_band
  int64_t band_begin_ = 0, band_length_ = 0;  // set_band's; length 0: no band
  mutable std::atomic<int64_t> archive_bytes_{0};

  // LRU of lazily read states: most recent at the front.
  mutable std::mutex cache_mutex_;
  mutable std::list<int64_t> cache_order_;
  mutable std::unordered_map<int64_t, std::pair<torch::Tensor, std::list<int64_t>::iterator>> cache_;
};

// Band `index` of `parts` of a grid of `extent` rows (cells): {begin, length}, bands of extent / parts
// rows, the first extent % parts of them one more (the model-parallel split, docs/distributed.md).
std::pair<int64_t, int64_t> grid_band(int64_t extent, int64_t parts, int64_t index);

// The dataset's grid into `config`: [data] lat and lon and, where the files give them, the
// coordinates (a point set: lat = 1, lon = cells, one coordinate per cell in both lists), so that models::model_shape(config) builds a model where the data lies (graphcast's
// mesh) without the files being opened again (estimate, tune-batch, the benchmarks).
void take_grid(RunConfig& config, const Dataset& dataset);
// A run file without sources whose data.grid names a reduced Gaussian grid ("n320", "o96"): its
// generated cells' coordinates into config.data (lat = 1, lon = cells), as take_grid gives a
// point set's. Nothing when data.grid_name is empty.
void take_named_grid(RunConfig& config);

}  // namespace wxtrain::data
