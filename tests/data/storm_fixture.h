#pragma once
// Shared by the data tests: the January 1996 blizzard files from Debian's libncarg-data, and a
// temporary directory that cleans up after itself.
#include <filesystem>
#include <string>
#include <vector>

#include "core/config.h"

namespace wxtrain::data::testing {

inline const std::string kStormDir = "/usr/share/ncarg/data/cdf/";

// u and v live in two files each (surface and 500 hPa), so the 500 hPa ones are renamed.
inline std::vector<DataSource> storm_sources() {
  return {{kStormDir + "Pstorm.cdf", "p", "p"},      {kStormDir + "Tstorm.cdf", "t", "t"},
          {kStormDir + "Ustorm.cdf", "u", "u"},      {kStormDir + "Vstorm.cdf", "v", "v"},
          {kStormDir + "U500storm.cdf", "u", "u500"}, {kStormDir + "V500storm.cdf", "v", "v500"}};
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "wxtrain-data-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace wxtrain::data::testing
