// anemoi-datasets' stores read through the Zarr reader: see anemoi_reader.h. The layout is the one
// anemoi-datasets' own reader opens (anemoi/datasets/data/stores.py: `data`, `dates`,
// `latitudes`, `longitudes`, `mean`/`stdev`/`minimum`/`maximum`, attributes `variables` or
// `name_to_index`, `missing_dates`).
#include "data/readers/zarr/anemoi_reader.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/readers/zarr/zarr_metadata.h"
#include "data/time/cf_time.h"

namespace wxtrain::data {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The group's attributes: .zattrs, else the consolidated metadata's copy of it.
nlohmann::json group_attributes(const std::string& path) {
  const std::filesystem::path root(path);
  if (std::filesystem::exists(root / ".zattrs")) return zarr::parse_metadata_json(read_text(root / ".zattrs"), path + "/.zattrs");
  if (std::filesystem::exists(root / ".zmetadata")) {
    const nlohmann::json consolidated = zarr::parse_metadata_json(read_text(root / ".zmetadata"), path + "/.zmetadata");
    if (consolidated.contains("metadata") && consolidated["metadata"].contains(".zattrs"))
      return consolidated["metadata"][".zattrs"];
  }
  return nlohmann::json::object();
}

// The variable names in data's order: `variables`, else `name_to_index` (name -> index).
std::vector<std::string> variable_names_of(const nlohmann::json& attributes, const std::string& path) {
  std::vector<std::string> names;
  if (attributes.contains("variables") && attributes["variables"].is_array()) {
    for (const auto& name : attributes["variables"]) {
      if (!name.is_string()) throw DataError(path + ": attribute 'variables' holds " + name.dump() + ", not a name");
      names.push_back(name.get<std::string>());
    }
    return names;
  }
  if (attributes.contains("name_to_index") && attributes["name_to_index"].is_object()) {
    std::map<int64_t, std::string> by_index;
    for (const auto& [name, index] : attributes["name_to_index"].items()) {
      if (!index.is_number_integer()) throw DataError(path + ": attribute 'name_to_index' maps '" + name + "' to " + index.dump());
      by_index[index.get<int64_t>()] = name;
    }
    for (const auto& [index, name] : by_index) {
      if (index != static_cast<int64_t>(names.size()))
        throw DataError(path + ": attribute 'name_to_index' has no variable at index " + std::to_string(names.size()));
      names.push_back(name);
    }
  }
  return names;
}

// Seconds per unit of a datetime64 dtype ("<M8[s]", "<M8[ns]").
double seconds_per_unit(const std::string& dtype, const std::string& where) {
  const size_t open = dtype.find('['), close = dtype.find(']');
  const std::string unit = open != std::string::npos && close > open ? dtype.substr(open + 1, close - open - 1) : "";
  static const std::map<std::string, double> kUnits = {{"D", 86400.0}, {"h", 3600.0}, {"m", 60.0},  {"s", 1.0},
                                                        {"ms", 1e-3},   {"us", 1e-6},   {"ns", 1e-9}};
  auto it = kUnits.find(unit);
  if (dtype.size() < 2 || dtype[1] != 'M' || it == kUnits.end())
    throw DataError(where + " has dtype '" + dtype + "'; expected datetime64 (\"<M8[s]\", as anemoi-datasets writes)");
  return it->second;
}

Attribute text_attribute(const std::string& value) {
  Attribute a;
  a.text = value;
  return a;
}
Attribute number_attribute(double value) {
  Attribute a;
  a.numbers = {value};
  return a;
}

class AnemoiReader final : public Reader {
 public:
  AnemoiReader(const std::string& path, std::unique_ptr<Reader> zarr) : path_(path), zarr_(std::move(zarr)) {
    const nlohmann::json attributes = group_attributes(path);
    const std::vector<std::string> names = variable_names_of(attributes, path);
    const VariableMeta& data = zarr_->variable("data");
    if (data.dims.size() != 4) {
      throw DataError(path + ": array 'data' has " + std::to_string(data.dims.size()) +
                      " dimensions; an anemoi-datasets store's is (dates, variables, ensembles, cells)");
    }
    const size_t D = data.dims[0].length, V = data.dims[1].length, E = data.dims[2].length, C = data.dims[3].length;
    if (names.size() != V) {
      throw DataError(path + ": array 'data' holds " + std::to_string(V) + " variables but the attribute 'variables' names " +
                      std::to_string(names.size()));
    }
    if (E != 1) {
      throw DataError(path + ": array 'data' holds " + std::to_string(E) +
                      " ensemble members (dates x variables x ensembles x cells = " + std::to_string(D) + " x " +
                      std::to_string(V) + " x " + std::to_string(E) + " x " + std::to_string(C) +
                      "); wxtrain reads one state per date: write a store of one member (anemoi-datasets' "
                      "open_dataset(..., number=...) selects one)");
    }
    auto cells_of = [&](const std::vector<std::string>& candidates) {
      for (const auto& name : candidates) {
        if (!zarr_->has_variable(name)) continue;
        std::vector<double> values = zarr_->read_doubles(name);
        if (values.size() != C)
          throw DataError(path + ": array '" + name + "' has " + std::to_string(values.size()) + " values for " +
                          std::to_string(C) + " cells");
        return values;
      }
      throw DataError(path + ": no array '" + candidates.front() + "' (the cells' coordinates of an anemoi-datasets store)");
    };
    latitudes_ = cells_of({"latitudes", "latitude"});
    longitudes_ = cells_of({"longitudes", "longitude"});
    if (!zarr_->has_variable("dates")) throw DataError(path + ": no array 'dates' (an anemoi-datasets store's times)");
    const VariableMeta& dates = zarr_->variable("dates");
    const double unit = seconds_per_unit(dates.dtype, path + ": array 'dates'");
    const std::vector<double> raw = zarr_->read_doubles("dates");
    if (raw.size() != D)
      throw DataError(path + ": array 'dates' has " + std::to_string(raw.size()) + " dates for " + std::to_string(D) + " states");
    // missing_dates: states anemoi could not fill; left out, so the axis has a gap there.
    std::set<int64_t> missing;
    if (attributes.contains("missing_dates") && attributes["missing_dates"].is_array()) {
      for (const auto& date : attributes["missing_dates"]) {
        if (!date.is_string()) continue;
        try {
          missing.insert(to_seconds(parse_date(date.get<std::string>()), Calendar::kProlepticGregorian));
        } catch (const DataError& e) {
          throw DataError(path + ": attribute 'missing_dates' holds '" + date.get<std::string>() + "': " + e.what());
        }
      }
    }
    for (size_t d = 0; d < D; ++d) {
      const int64_t seconds = static_cast<int64_t>(std::llround(raw[d] * unit));
      if (missing.count(seconds)) continue;
      rows_.push_back(d);
      times_.push_back(static_cast<double>(seconds));
    }
    // Per-variable statistics, when the store has them.
    std::map<std::string, std::vector<double>> statistics;
    for (const char* name : {"mean", "stdev", "minimum", "maximum"}) {
      if (!zarr_->has_variable(name)) continue;
      std::vector<double> values = zarr_->read_doubles(name);
      if (values.size() == V) statistics[name] = std::move(values);
    }
    for (size_t v = 0; v < V; ++v) {
      const std::string& name = names[v];
      if (name == "time" || name == "latitude" || name == "longitude")
        throw DataError(path + ": an anemoi variable is named '" + name + "', the name of a coordinate");
      VariableMeta meta;
      meta.name = name;
      meta.dims = {{"time", rows_.size()}, {"cell", C}};
      meta.dtype = data.dtype;
      meta.attributes = data.attributes;
      meta.attributes.erase("_FillValue");
      for (const auto& [statistic, values] : statistics) meta.attributes["anemoi_" + statistic] = number_attribute(values[v]);
      // anemoi-datasets marks missing values as NaN in the data; declare none here (float NaN is seen).
      index_[name] = v;
      variables_.emplace(name, std::move(meta));
      names_.push_back(name);
    }
    coordinate("time", "time", times_.size(),
               {{"units", text_attribute("seconds since 1970-01-01 00:00:00")},
                {"calendar", text_attribute("proleptic_gregorian")},
                {"standard_name", text_attribute("time")}});
    coordinate("latitude", "cell", C,
               {{"units", text_attribute("degrees_north")}, {"standard_name", text_attribute("latitude")}});
    coordinate("longitude", "cell", C,
               {{"units", text_attribute("degrees_east")}, {"standard_name", text_attribute("longitude")}});
  }

  const std::string& path() const override { return path_; }
  std::string format() const override { return "anemoi-datasets (" + zarr_->format() + ")"; }
  std::vector<std::string> variable_names() const override { return names_; }
  std::vector<std::string> notes() const override { return zarr_->notes(); }

  const VariableMeta& variable(const std::string& name) const override {
    if (auto it = variables_.find(name); it != variables_.end()) return it->second;
    std::string listing;
    for (const auto& n : names_) listing += (listing.empty() ? "" : ", ") + n;
    throw DataError("variable '" + name + "' not found in anemoi-datasets store " + path_ + "; its variables are: " + listing);
  }

  void read(const std::string& name, const std::vector<size_t>& start, const std::vector<size_t>& count,
            float* out) const override {
    const VariableMeta& meta = variable(name);
    check_slab(path_, meta, start, count);
    if (name == "time" || name == "latitude" || name == "longitude") {
      const std::vector<double>& values = name == "time" ? times_ : name == "latitude" ? latitudes_ : longitudes_;
      for (size_t k = 0; k < count[0]; ++k) out[k] = static_cast<float>(values[start[0] + k]);
      return;
    }
    const size_t v = index_.at(name);
    // Date by date: the rows of a time range need not be consecutive (missing dates).
    for (size_t t = 0; t < count[0]; ++t) {
      zarr_->read("data", {rows_[start[0] + t], v, 0, start[1]}, {1, 1, 1, count[1]}, out + t * count[1]);
    }
  }

  std::vector<double> read_doubles(const std::string& name) const override {
    if (name == "time") return times_;
    if (name == "latitude") return latitudes_;
    if (name == "longitude") return longitudes_;
    const VariableMeta& meta = variable(name);
    std::vector<float> values(meta.dims[0].length * meta.dims[1].length);
    read(name, {0, 0}, {meta.dims[0].length, meta.dims[1].length}, values.data());
    return std::vector<double>(values.begin(), values.end());
  }

 private:
  void coordinate(const std::string& name, const std::string& dim, size_t length, std::map<std::string, Attribute> attributes) {
    VariableMeta meta;
    meta.name = name;
    meta.dims = {{dim, length}};
    meta.attributes = std::move(attributes);
    meta.dtype = "f8";
    variables_.emplace(name, std::move(meta));
    names_.push_back(name);
  }

  std::string path_;
  std::unique_ptr<Reader> zarr_;
  std::vector<std::string> names_;
  std::map<std::string, VariableMeta> variables_;
  std::map<std::string, size_t> index_;  // variable -> its index along data's second dimension
  std::vector<size_t> rows_;             // time index -> data's first dimension (missing dates left out)
  std::vector<double> times_, latitudes_, longitudes_;
};

}  // namespace

bool is_anemoi_store(const std::string& path, const Reader& zarr) {
  if (!zarr.has_variable("data") || !zarr.has_variable("dates")) return false;
  if (!zarr.has_variable("latitudes") && !zarr.has_variable("latitude")) return false;
  const nlohmann::json attributes = group_attributes(path);
  return attributes.contains("variables") || attributes.contains("name_to_index");
}

std::unique_ptr<Reader> open_anemoi(const std::string& path, std::unique_ptr<Reader> zarr) {
  return std::make_unique<AnemoiReader>(path, std::move(zarr));
}

}  // namespace wxtrain::data
