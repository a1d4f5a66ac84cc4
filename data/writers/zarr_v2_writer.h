#pragma once
// Writes a Zarr v2 group the way xarray's to_zarr does, so xarray, zarr-python and wxtrain's own
// reader open it: a .zgroup, one folder per array with .zarray and .zattrs (dimension names in
// _ARRAY_DIMENSIONS), chunks compressed with Blosc (lz4, byte shuffle: zarr-python's default), and
// consolidated metadata (.zmetadata). An array is written whole (add_array) or declared first and
// then filled chunk by chunk (define_array, write_chunk: a forecast writes one time step's chunk
// as it is produced, holding no more than that chunk). The store is built in a temporary folder
// beside the target and renamed into place on commit(), so a killed job never leaves a
// half-written store under the real name. Torch-free.
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace wxtrain::data {

struct ZarrArraySpec {
  std::string name;
  std::vector<std::string> dims;     // _ARRAY_DIMENSIONS, outermost first
  std::vector<size_t> shape;
  std::vector<size_t> chunks;        // same rank as shape
  bool float64 = false;              // "<f8", else "<f4"
  nlohmann::json attributes = nlohmann::json::object();
  std::optional<double> fill_value;  // written as "NaN" when NaN; null when absent
  bool int64 = false;                // "<i8" (values int64_t: a forecast's member numbers), whatever float64 says
};

class ZarrV2Writer {
 public:
  // Throws DataError naming the folder when the temporary store cannot be created.
  explicit ZarrV2Writer(std::string target);
  ~ZarrV2Writer();  // removes the temporary store unless committed
  ZarrV2Writer(const ZarrV2Writer&) = delete;
  ZarrV2Writer& operator=(const ZarrV2Writer&) = delete;

  // `values` holds the whole array in C order: float for f4, double for f8. A 0-d array (shape {})
  // holds one value.
  void add_array(const ZarrArraySpec& spec, const void* values);
  // The array's metadata only; its chunks follow through write_chunk (a chunk never written reads
  // as the fill value).
  void define_array(const ZarrArraySpec& spec);
  // One chunk of a defined array at chunk-grid position `index` (one entry per dimension): `values`
  // holds the whole chunk in C order at the chunk shape (an edge chunk padded past the array's end).
  void write_chunk(const std::string& name, const std::vector<size_t>& index, const void* values);
  void set_group_attributes(const nlohmann::json& attributes);
  // Writes .zgroup/.zattrs/.zmetadata and renames the store onto the target (replacing an earlier
  // store there). Throws DataError naming the file that could not be written and why.
  void commit();

 private:
  void write_file(const std::string& relative, const std::string& bytes) const;

  std::string target_;
  std::string temporary_;
  std::map<std::string, ZarrArraySpec> arrays_;  // defined so far, by name
  nlohmann::json consolidated_ = nlohmann::json::object();
  nlohmann::json group_attributes_ = nlohmann::json::object();
  bool committed_ = false;
};

}  // namespace wxtrain::data
