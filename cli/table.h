#pragma once
// Plain-text tables for the terminal: columns sized to their widest cell, numbers right-aligned.
#include <string>
#include <vector>

namespace wxtrain::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header, std::vector<bool> right_align = {});
  void add(std::vector<std::string> row);
  std::string str() const;

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace wxtrain::cli
