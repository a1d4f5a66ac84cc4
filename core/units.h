#pragma once
// Byte sizes as users write them ("24GiB", "80GB", "512MiB", "1e9") and as we print them.
#include <cstdint>
#include <optional>
#include <string>

namespace wxtrain {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGB = 1e9;

// Parses "24GiB", "80 GB", "512MiB", "1.5TB", "123456" (bytes). Returns nullopt when the text is
// not a size; callers turn that into an error naming the key.
std::optional<int64_t> parse_bytes(const std::string& text);

// "23.4 GiB" style with a sensible unit; for tables and logs.
std::string format_bytes(double bytes);
// The number of GiB alone, with `decimals` decimals ("1.234"): for table columns and lines that
// name the unit once ("peak GiB").
std::string format_gib(double bytes, int decimals);

}  // namespace wxtrain
