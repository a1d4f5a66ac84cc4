#include "data/readers/netcdf_file.h"

#include <cerrno>

#include <netcdf.h>
#include <netcdf_meta.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "data/readers/classic_header.h"

namespace wxtrain::data {
namespace {

using Lock = std::lock_guard<std::mutex>;

std::string describe(const std::string& path, const std::string& variable) {
  return variable.empty() ? path : path + ", variable '" + variable + "'";
}

// Throws when status is an error; `what` says which operation failed.
void check(int status, const std::string& path, const std::string& variable, const std::string& what) {
  if (status == NC_NOERR) return;
  throw DataError("netCDF error in " + describe(path, variable) + ": " + what + ": " +
                  nc_strerror(status));
}

// The directory behind "file:///abs/store.zarr#mode=..." (empty when the URL is not file://).
std::string zarr_directory(const std::string& url) {
  const std::string scheme = "file://";
  if (url.rfind(scheme, 0) != 0) return {};
  return url.substr(scheme.size(), url.find('#') - scheme.size());
}

std::vector<std::string> names_of_variables(int ncid, const std::string& path) {
  int count = 0;
  check(nc_inq_nvars(ncid, &count), path, "", "listing variables");
  std::vector<std::string> names;
  for (int id = 0; id < count; ++id) {
    char name[NC_MAX_NAME + 1] = {};
    check(nc_inq_varname(ncid, id, name), path, "", "reading a variable name");
    names.emplace_back(name);
  }
  return names;
}

// Values are read converted to float or double: only the numeric atomic types convert. netCDF-C
// refuses the others (NC_ECHAR, NC_EBADTYPE), but only after reading them: a NetCDF-4 string
// variable read as float leaks every string HDF5 allocated (netCDF-C 4.9.0, NC4_get_vars ->
// H5Dread -> H5T__conv_vlen; found by fuzz/netcdf_reader_fuzz), so they are refused before the call.
void check_numeric(int ncid, int varid, const std::string& path, const std::string& variable) {
  nc_type type = NC_NAT;
  check(nc_inq_vartype(ncid, varid, &type), path, variable, "reading the type");
  const bool numeric = type != NC_CHAR && type != NC_STRING && type >= NC_BYTE && type <= NC_MAX_ATOMIC_TYPE;
  if (numeric) return;
  const std::string name = type == NC_CHAR ? "char" : type == NC_STRING ? "string" : "user-defined";
  throw DataError("cannot read " + describe(path, variable) + " as numbers: it holds " + name +
                  " values (a coordinate or field must be numeric)");
}

// "CDF" and version 1, 2 or 5: a classic file, whose header check_classic_header checks first.
bool has_classic_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  if (!in.read(magic, 4)) return false;
  return magic[0] == 'C' && magic[1] == 'D' && magic[2] == 'F' && (magic[3] == 1 || magic[3] == 2 || magic[3] == 5);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

std::mutex& netcdf_mutex() {
  static std::mutex mutex;
  return mutex;
}

bool nczarr_available() { return NC_HAS_NCZARR != 0; }

bool is_zarr_url(const std::string& path) { return path.find("#mode=") != std::string::npos; }

std::string zarr_url(const std::string& directory, bool pure_zarr) {
  return "file://" + std::filesystem::absolute(directory).lexically_normal().string() +
         (pure_zarr ? "#mode=zarr,file" : "#mode=nczarr,file");
}

NetcdfFile NetcdfFile::open(const std::string& path) {
  if (is_zarr_url(path)) {
    if (!nczarr_available()) {
      throw DataError("cannot open Zarr store " + path +
                      ": this netCDF-C library was built without NCZarr (nc-config --has-nczarr says no)");
    }
    const std::string directory = zarr_directory(path);
    if (!directory.empty() && !std::filesystem::is_directory(directory)) {
      throw DataError("Zarr store not found: " + directory + " (from " + path + ")");
    }
    return open_checked(path);
  }
  if (!std::filesystem::exists(path)) throw DataError("data file not found: " + path);
  try {
    return open_checked(path);
  } catch (const std::exception&) {
    // Removed between the check above and a later step (a loader worker reading lazily while the
    // file goes away): whatever that step reported, the cause is this.
    std::error_code error;
    if (!std::filesystem::exists(path, error)) throw DataError("data file not found: " + path);
    throw;
  }
}

NetcdfFile NetcdfFile::open_checked(const std::string& path) {
  if (!is_zarr_url(path) && has_classic_magic(path)) check_classic_header(path);
  int ncid = -1;
  int status = NC_NOERR;
  {
    Lock lock(netcdf_mutex());
    status = nc_open(path.c_str(), NC_NOWRITE, &ncid);
  }
  if (status == ENOENT) throw DataError("data file not found: " + path);
  if (status == NC_ENOTNC || status == NC_ENOTBUILT || status == NC_EHDFERR) {
    throw DataError(path + " is not a readable NetCDF file (corrupt or another format): " +
                    nc_strerror(status));
  }
  check(status, path, "", "opening");
  NetcdfFile file(path, ncid);
  file.check_not_truncated();
  return file;
}

void NetcdfFile::check_not_truncated() const {
  int format = 0;
  {
    Lock lock(netcdf_mutex());
    check(nc_inq_format(ncid_, &format), path_, "", "reading the file format");
  }
  // NetCDF-4 (HDF5) files carry their own checks; the classic formats are read blindly (see
  // data/classic_header.h).
  if (format != NC_FORMAT_CLASSIC && format != NC_FORMAT_64BIT_OFFSET && format != NC_FORMAT_CDF5) return;
  const uint64_t needed = classic_data_end(path_);
  std::error_code error;
  const uint64_t size = std::filesystem::file_size(path_, error);
  if (error) throw DataError("cannot read the size of " + path_ + ": " + error.message());
  if (size < needed) {
    throw DataError(path_ + " is truncated: its header places data up to byte " + std::to_string(needed) +
                    " but the file has " + std::to_string(size) + " bytes (an interrupted copy or download?)");
  }
}

NetcdfFile NetcdfFile::create(const std::string& path) {
  if (is_zarr_url(path) && !nczarr_available()) {
    throw DataError("cannot create Zarr store " + path +
                    ": this netCDF-C library was built without NCZarr");
  }
  int ncid = -1;
  Lock lock(netcdf_mutex());
  check(nc_create(path.c_str(), NC_CLOBBER | NC_NETCDF4, &ncid), path, "", "creating");
  return NetcdfFile(path, ncid);
}

NetcdfFile::NetcdfFile(NetcdfFile&& other) noexcept
    : path_(std::move(other.path_)), ncid_(other.ncid_) {
  other.ncid_ = -1;
}

NetcdfFile& NetcdfFile::operator=(NetcdfFile&& other) noexcept {
  if (this != &other) {
    try {
      close();
    } catch (...) {
    }
    path_ = std::move(other.path_);
    ncid_ = other.ncid_;
    other.ncid_ = -1;
  }
  return *this;
}

NetcdfFile::~NetcdfFile() {
  try {
    close();
  } catch (...) {
    // A destructor cannot report; callers that write call close() themselves.
  }
}

void NetcdfFile::close() {
  if (ncid_ < 0) return;
  const int ncid = ncid_;
  ncid_ = -1;
  Lock lock(netcdf_mutex());
  check(nc_close(ncid), path_, "", "closing");
}

void NetcdfFile::sync() {
  Lock lock(netcdf_mutex());
  check(nc_sync(ncid_), path_, "", "flushing to disk");
}

int NetcdfFile::variable_id(const std::string& variable) const {
  int id = -1;
  const int status = nc_inq_varid(ncid_, variable.c_str(), &id);
  if (status == NC_ENOTVAR) {
    throw DataError("variable '" + variable + "' not found in " + path_ +
                    "; the file has: " + join(names_of_variables(ncid_, path_)));
  }
  check(status, path_, variable, "looking up the variable");
  return id;
}

int NetcdfFile::dimension_id(const std::string& name) const {
  int id = -1;
  check(nc_inq_dimid(ncid_, name.c_str(), &id), path_, "", "looking up dimension '" + name + "'");
  return id;
}

std::vector<std::string> NetcdfFile::variable_names() const {
  Lock lock(netcdf_mutex());
  return names_of_variables(ncid_, path_);
}

bool NetcdfFile::has_variable(const std::string& variable) const {
  Lock lock(netcdf_mutex());
  int id = -1;
  return nc_inq_varid(ncid_, variable.c_str(), &id) == NC_NOERR;
}

std::vector<int> NetcdfFile::dimension_ids(int varid, const std::string& variable) const {
  int ndims = 0;
  check(nc_inq_varndims(ncid_, varid, &ndims), path_, variable, "reading the number of dimensions");
  std::vector<int> dimids(static_cast<size_t>(ndims));
  check(nc_inq_vardimid(ncid_, varid, dimids.data()), path_, variable, "reading dimensions");
  return dimids;
}

std::vector<NcDimension> NetcdfFile::dimensions_of(const std::string& variable) const {
  Lock lock(netcdf_mutex());
  const int varid = variable_id(variable);
  const std::vector<int> dimids = dimension_ids(varid, variable);
  int nunlimited = 0;
  check(nc_inq_unlimdims(ncid_, &nunlimited, nullptr), path_, variable, "reading unlimited dimensions");
  std::vector<int> unlimited(static_cast<size_t>(nunlimited));
  if (nunlimited > 0) {
    check(nc_inq_unlimdims(ncid_, &nunlimited, unlimited.data()), path_, variable,
          "reading unlimited dimensions");
  }
  std::vector<NcDimension> dims;
  for (int dimid : dimids) {
    char name[NC_MAX_NAME + 1] = {};
    size_t length = 0;
    check(nc_inq_dim(ncid_, dimid, name, &length), path_, variable, "reading a dimension");
    const bool is_unlimited = std::find(unlimited.begin(), unlimited.end(), dimid) != unlimited.end();
    dims.push_back({name, length, is_unlimited});
  }
  return dims;
}

std::optional<NetcdfFile::AttributeInfo> NetcdfFile::attribute(const std::string& variable,
                                                              const std::string& name) const {
  AttributeInfo info;
  info.varid = variable.empty() ? NC_GLOBAL : variable_id(variable);
  if (nc_inq_att(ncid_, info.varid, name.c_str(), &info.type, &info.length) != NC_NOERR) return std::nullopt;
  return info;
}

std::optional<std::string> NetcdfFile::text_attribute(const std::string& variable,
                                                      const std::string& name) const {
  Lock lock(netcdf_mutex());
  const auto att = attribute(variable, name);
  if (!att) return std::nullopt;
  if (att->type == NC_STRING) return string_attribute(*att, variable, name);
  if (att->type != NC_CHAR) return std::nullopt;
  const int varid = att->varid;
  const size_t length = att->length;
  std::string value(length, '\0');
  check(nc_get_att_text(ncid_, varid, name.c_str(), value.data()), path_, variable,
        "reading attribute '" + name + "'");
  while (!value.empty() && value.back() == '\0') value.pop_back();
  return value;
}

std::string NetcdfFile::string_attribute(const AttributeInfo& att, const std::string& variable,
                                         const std::string& name) const {
  // NetCDF-4 `string` attributes (what netCDF4-python writes for a Python str, and ncgen for
  // `string units = "K"`): netCDF-C allocates each string, and nc_free_string gives them back.
  std::vector<char*> strings(att.length, nullptr);
  check(nc_get_att_string(ncid_, att.varid, name.c_str(), strings.data()), path_, variable,
        "reading attribute '" + name + "'");
  std::string value;
  for (size_t i = 0; i < strings.size(); ++i) {
    // A list of strings (rare for the attributes CF defines) reads as netCDF4-python prints it.
    if (i > 0) value += ", ";
    if (strings[i] != nullptr) value += strings[i];
  }
  nc_free_string(strings.size(), strings.data());
  return value;
}

std::optional<double> NetcdfFile::number_attribute(const std::string& variable,
                                                   const std::string& name) const {
  const std::vector<double> values = number_attributes(variable, name);
  if (values.empty()) return std::nullopt;
  return values.front();
}

std::vector<double> NetcdfFile::number_attributes(const std::string& variable, const std::string& name) const {
  Lock lock(netcdf_mutex());
  const auto att = attribute(variable, name);
  // Numeric atomic types only: a string or user-defined (vlen, compound) attribute is not a number.
  if (!att || att->type == NC_CHAR || att->type == NC_STRING || att->type > NC_MAX_ATOMIC_TYPE || att->length == 0)
    return {};
  std::vector<double> values(att->length);
  check(nc_get_att_double(ncid_, att->varid, name.c_str(), values.data()), path_, variable,
        "reading attribute '" + name + "'");
  return values;
}

std::vector<std::string> NetcdfFile::attribute_names(const std::string& variable) const {
  Lock lock(netcdf_mutex());
  const int varid = variable.empty() ? NC_GLOBAL : variable_id(variable);
  int count = 0;
  check(nc_inq_varnatts(ncid_, varid, &count), path_, variable, "counting attributes");
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i) {
    char name[NC_MAX_NAME + 1] = {};
    check(nc_inq_attname(ncid_, varid, i, name), path_, variable, "reading an attribute name");
    names.emplace_back(name);
  }
  return names;
}

std::string NetcdfFile::type_name(const std::string& variable) const {
  Lock lock(netcdf_mutex());
  nc_type type = NC_NAT;
  check(nc_inq_vartype(ncid_, variable_id(variable), &type), path_, variable, "reading the type");
  char name[NC_MAX_NAME + 1] = {};
  if (nc_inq_type(ncid_, type, name, nullptr) != NC_NOERR) return "type " + std::to_string(type);
  return name;
}

std::vector<double> NetcdfFile::read_doubles(const std::string& variable) const {
  Lock lock(netcdf_mutex());
  const int varid = variable_id(variable);
  const std::vector<int> dimids = dimension_ids(varid, variable);
  size_t total = 1;
  for (int dimid : dimids) {
    size_t length = 0;
    check(nc_inq_dimlen(ncid_, dimid, &length), path_, variable, "reading a dimension length");
    // A corrupt header's lengths could overflow the count and have netCDF-C write past `values`.
    if (__builtin_mul_overflow(total, length, &total) || total > std::vector<double>().max_size()) {
      throw DataError("cannot read " + describe(path_, variable) + " whole: its dimensions hold more values than fit in memory");
    }
  }
  check_numeric(ncid_, varid, path_, variable);
  std::vector<double> values(total);
  if (total > 0) check(nc_get_var_double(ncid_, varid, values.data()), path_, variable, "reading values");
  return values;
}

void NetcdfFile::read_floats(const std::string& variable, const std::vector<size_t>& start,
                             const std::vector<size_t>& count, float* out) const {
  Lock lock(netcdf_mutex());
  const int varid = variable_id(variable);
  std::ostringstream what;
  what << "reading a slab starting at (";
  for (size_t i = 0; i < start.size(); ++i) what << (i ? ", " : "") << start[i];
  what << ")";
  check_numeric(ncid_, varid, path_, variable);
  check(nc_get_vara_float(ncid_, varid, start.data(), count.data(), out), path_, variable, what.str());
}

void NetcdfFile::define_dimension(const std::string& name, size_t length) {
  Lock lock(netcdf_mutex());
  int id = -1;
  check(nc_def_dim(ncid_, name.c_str(), length == 0 ? NC_UNLIMITED : length, &id), path_, "",
        "defining dimension '" + name + "'");
}

void NetcdfFile::define_variable(const std::string& name, int nc_type,
                                 const std::vector<std::string>& dims) {
  Lock lock(netcdf_mutex());
  std::vector<int> dimids;
  for (const auto& dim : dims) dimids.push_back(dimension_id(dim));
  int id = -1;
  check(nc_def_var(ncid_, name.c_str(), nc_type, static_cast<int>(dimids.size()), dimids.data(), &id),
        path_, name, "defining the variable");
}

void NetcdfFile::put_text_attribute(const std::string& variable, const std::string& name,
                                    const std::string& value) {
  Lock lock(netcdf_mutex());
  const int varid = variable.empty() ? NC_GLOBAL : variable_id(variable);
  check(nc_put_att_text(ncid_, varid, name.c_str(), value.size(), value.c_str()), path_, variable,
        "writing attribute '" + name + "'");
}

void NetcdfFile::put_float_attribute(const std::string& variable, const std::string& name, float value) {
  Lock lock(netcdf_mutex());
  const int varid = variable.empty() ? NC_GLOBAL : variable_id(variable);
  check(nc_put_att_float(ncid_, varid, name.c_str(), NC_FLOAT, 1, &value), path_, variable,
        "writing attribute '" + name + "'");
}

void NetcdfFile::define_chunking(const std::string& variable, const std::vector<size_t>& chunks) {
  Lock lock(netcdf_mutex());
  check(nc_def_var_chunking(ncid_, variable_id(variable), NC_CHUNKED, chunks.data()), path_, variable,
        "setting its chunks");
}

void NetcdfFile::set_chunk_cache(const std::string& variable, size_t bytes) {
  Lock lock(netcdf_mutex());
  check(nc_set_var_chunk_cache(ncid_, variable_id(variable), bytes, bytes > 0 ? 1009 : 0, 1.0f), path_, variable,
        "setting its chunk cache");
}

void NetcdfFile::end_define() {
  Lock lock(netcdf_mutex());
  check(nc_enddef(ncid_), path_, "", "leaving define mode");
}

void NetcdfFile::write_floats(const std::string& variable, const std::vector<size_t>& start,
                              const std::vector<size_t>& count, const float* values) {
  Lock lock(netcdf_mutex());
  check(nc_put_vara_float(ncid_, variable_id(variable), start.data(), count.data(), values), path_,
        variable, "writing values");
}

void NetcdfFile::write_doubles(const std::string& variable, const std::vector<double>& values) {
  Lock lock(netcdf_mutex());
  const size_t start = 0;
  const size_t count = values.size();
  check(nc_put_vara_double(ncid_, variable_id(variable), &start, &count, values.data()), path_,
        variable, "writing values");
}

void NetcdfFile::write_doubles(const std::string& variable, const std::vector<size_t>& start,
                               const std::vector<size_t>& count, const double* values) {
  Lock lock(netcdf_mutex());
  check(nc_put_vara_double(ncid_, variable_id(variable), start.data(), count.data(), values), path_,
        variable, "writing values");
}

}  // namespace wxtrain::data
