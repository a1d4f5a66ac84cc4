#include "data/readers/netcdf_reader.h"

#include <netcdf.h>

#include <mutex>

#include "core/error.h"
#include "data/readers/netcdf_file.h"

namespace wxtrain::data {
namespace {

class NetcdfReader final : public Reader {
 public:
  explicit NetcdfReader(const std::string& path) : path_(path) {
    NetcdfFile file = NetcdfFile::open(path);
    names_ = file.variable_names();
    for (const auto& name : names_) {
      VariableMeta meta;
      meta.name = name;
      for (const auto& dim : file.dimensions_of(name)) meta.dims.push_back({dim.name, dim.length});
      for (const auto& attribute : file.attribute_names(name)) {
        Attribute value;
        if (auto text = file.text_attribute(name, attribute)) {
          value.text = *text;
        } else {
          value.numbers = file.number_attributes(name, attribute);
        }
        meta.attributes[attribute] = std::move(value);
      }
      meta.dtype = file.type_name(name);
      variables_.emplace(name, std::move(meta));
    }
  }

  const std::string& path() const override { return path_; }
  std::string format() const override { return "NetCDF"; }
  std::vector<std::string> variable_names() const override { return names_; }

  const VariableMeta& variable(const std::string& name) const override {
    auto it = variables_.find(name);
    if (it == variables_.end()) {
      std::string listing;
      for (const auto& n : names_) listing += (listing.empty() ? "" : ", ") + n;
      throw DataError("variable '" + name + "' not found in " + path_ + "; the file has: " + listing);
    }
    return it->second;
  }

  void read(const std::string& name, const std::vector<size_t>& start, const std::vector<size_t>& count,
            float* out) const override {
    check_slab(path_, variable(name), start, count);
    NetcdfFile::open(path_).read_floats(name, start, count, out);
  }

  std::vector<double> read_doubles(const std::string& name) const override {
    variable(name);  // names the variables when missing
    return NetcdfFile::open(path_).read_doubles(name);
  }

 private:
  std::string path_;
  std::vector<std::string> names_;
  std::map<std::string, VariableMeta> variables_;
};

}  // namespace

std::unique_ptr<Reader> open_netcdf(const std::string& path) { return std::make_unique<NetcdfReader>(path); }

}  // namespace wxtrain::data
