#pragma once
// One API for NetCDF files and Zarr stores. netCDF-C opens both with nc_open: a Zarr store is a
// URL such as "file:///abs/path/store.zarr#mode=nczarr,file" (or "#mode=zarr,file" for pure Zarr),
// read through its NCZarr layer. Every nc_* call in wxtrain goes through this file so that two
// rules hold everywhere:
//   - netCDF-C is not thread-safe, so every call holds netcdf_mutex();
//   - every failure becomes a wxtrain::DataError naming the file, the variable and nc_strerror.
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace wxtrain::data {

// The process-wide lock around netCDF-C (readers, the forecast writer and loader threads share it).
std::mutex& netcdf_mutex();

// Whether this netCDF-C build has NCZarr (Debian's 4.9 does); without it Zarr paths are refused
// with a DataError that says so.
bool nczarr_available();

// True for "file://...#mode=..." style paths that netCDF-C routes to NCZarr.
bool is_zarr_url(const std::string& path);

// "file:///abs/store.zarr#mode=nczarr,file" for a directory path: how to name a local Zarr store.
std::string zarr_url(const std::string& directory, bool pure_zarr = false);

struct NcDimension {
  std::string name;
  size_t length = 0;
  bool unlimited = false;
};

// An open NetCDF file or Zarr store; closes itself. Move-only.
class NetcdfFile {
 public:
  // Read-only. Missing file, not-NetCDF content and a Zarr path without NCZarr each get their own
  // message naming the path.
  static NetcdfFile open(const std::string& path);
  // A new netCDF-4 file (or Zarr store for a Zarr URL), replacing any existing one; starts in
  // define mode.
  static NetcdfFile create(const std::string& path);

  NetcdfFile(NetcdfFile&& other) noexcept;
  NetcdfFile& operator=(NetcdfFile&& other) noexcept;
  NetcdfFile(const NetcdfFile&) = delete;
  NetcdfFile& operator=(const NetcdfFile&) = delete;
  ~NetcdfFile();

  const std::string& path() const { return path_; }
  void close();  // flushes a written file; errors are thrown here rather than lost in the destructor
  // Writes what is buffered to the file (HDF5's chunks and metadata): the file on disk is whole up
  // to here.
  void sync();

  // --- reading ---
  std::vector<std::string> variable_names() const;
  bool has_variable(const std::string& variable) const;
  std::vector<NcDimension> dimensions_of(const std::string& variable) const;
  // A text attribute, stored as `char` (NetCDF-3 and most tools) or as NetCDF-4 `string`
  // (NC_STRING: netCDF4-python's default); nullopt when absent or numeric.
  std::optional<std::string> text_attribute(const std::string& variable, const std::string& name) const;
  // Numeric attribute converted to double (first element); nullopt when absent or textual.
  std::optional<double> number_attribute(const std::string& variable, const std::string& name) const;
  // All of a numeric attribute converted to double; empty when absent or textual.
  std::vector<double> number_attributes(const std::string& variable, const std::string& name) const;
  // The attribute names of a variable ("" for the file's global attributes).
  std::vector<std::string> attribute_names(const std::string& variable) const;
  // The variable's storage type as netCDF names it ("float", "short", ...).
  std::string type_name(const std::string& variable) const;
  // A whole variable converted to double (coordinate variables).
  std::vector<double> read_doubles(const std::string& variable) const;
  // A hyperslab converted to float; `out` holds the product of `count`.
  void read_floats(const std::string& variable, const std::vector<size_t>& start,
                   const std::vector<size_t>& count, float* out) const;

  // --- writing (define mode, then end_define, then write) ---
  void define_dimension(const std::string& name, size_t length /* 0 = unlimited */);
  // type is an nc_type (NC_FLOAT, NC_DOUBLE, ...), dims are dimension names in order.
  void define_variable(const std::string& name, int nc_type, const std::vector<std::string>& dims);
  void put_text_attribute(const std::string& variable, const std::string& name, const std::string& value);
  void put_float_attribute(const std::string& variable, const std::string& name, float value);
  // Chunked storage with these chunk lengths, one per dimension (netCDF-4, define mode).
  void define_chunking(const std::string& variable, const std::vector<size_t>& chunks);
  // The variable's HDF5 chunk cache in bytes; 0 writes each chunk straight to the file, which keeps
  // memory flat when every write is one whole chunk (a forecast written step by step).
  void set_chunk_cache(const std::string& variable, size_t bytes);
  void end_define();
  void write_floats(const std::string& variable, const std::vector<size_t>& start,
                    const std::vector<size_t>& count, const float* values);
  void write_doubles(const std::string& variable, const std::vector<double>& values);
  // A hyperslab of doubles (one record of a variable along an unlimited dimension).
  void write_doubles(const std::string& variable, const std::vector<size_t>& start,
                     const std::vector<size_t>& count, const double* values);

 private:
  NetcdfFile(std::string path, int ncid) : path_(std::move(path)), ncid_(ncid) {}
  static NetcdfFile open_checked(const std::string& path);  // open() past its existence check
  void check_not_truncated() const;  // classic formats: the data the header promises is all there
  int variable_id(const std::string& variable) const;  // lock must be held
  std::vector<int> dimension_ids(int varid, const std::string& variable) const;  // lock must be held
  struct AttributeInfo {
    int varid = 0;
    int type = 0;  // nc_type
    size_t length = 0;
  };
  // Where an attribute is and what it holds; nullopt when the variable (or file, for "") lacks it.
  std::optional<AttributeInfo> attribute(const std::string& variable, const std::string& name) const;  // lock held
  int dimension_id(const std::string& name) const;      // lock must be held
  // An NC_STRING attribute's strings, joined by ", " when there are several (lock held).
  std::string string_attribute(const AttributeInfo& att, const std::string& variable, const std::string& name) const;

  std::string path_;
  int ncid_ = -1;
};

}  // namespace wxtrain::data
