#include "cli/table.h"

#include <algorithm>
#include <sstream>

namespace wxtrain::cli {

Table::Table(std::vector<std::string> header, std::vector<bool> right_align)
    : header_(std::move(header)), right_(std::move(right_align)) {
  right_.resize(header_.size(), false);
}

void Table::add(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

std::string Table::str() const {
  std::vector<size_t> width(header_.size());
  for (size_t c = 0; c < header_.size(); ++c) {
    width[c] = header_[c].size();
    for (const auto& r : rows_) width[c] = std::max(width[c], r[c].size());
  }
  std::ostringstream out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t c = 0; c < cells.size(); ++c) {
      const size_t pad = width[c] - cells[c].size();
      if (c) out << "  ";
      if (right_[c]) out << std::string(pad, ' ') << cells[c];
      else out << cells[c] << (c + 1 < cells.size() ? std::string(pad, ' ') : "");
    }
    out << "\n";
  };
  line(header_);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  line(rule);
  for (const auto& r : rows_) line(r);
  return out.str();
}

}  // namespace wxtrain::cli
