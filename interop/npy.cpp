#include "interop/npy.h"

#include <cstring>
#include <regex>

#include "core/atomic_file.h"
#include "core/error.h"
#include "interop/archive.h"

namespace wxtrain::interop {

torch::Tensor read_npy(const std::string& path) {
  const std::string bytes = read_file_bytes(path);
  auto bad = [&](const std::string& what) { return Error(path + ": not a readable .npy file: " + what); };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) throw bad("no \\x93NUMPY magic");
  const int major = static_cast<unsigned char>(bytes[6]);
  const size_t length_bytes = major == 1 ? 2 : 4;
  if (bytes.size() < 8 + length_bytes) throw bad("truncated header");
  size_t header_length = 0;
  for (size_t i = length_bytes; i-- > 0;) header_length = (header_length << 8) | static_cast<unsigned char>(bytes[8 + i]);
  const size_t data = 8 + length_bytes + header_length;
  if (data > bytes.size()) throw bad("the header runs past the file");
  const std::string header = bytes.substr(8 + length_bytes, header_length);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')"))) throw bad("no 'descr' in " + header);
  const std::string descr = m[1];
  torch::ScalarType type;
  if (descr == "<f4" || descr == "=f4") type = torch::kFloat32;
  else if (descr == "<f8" || descr == "=f8") type = torch::kFloat64;
  else throw bad("dtype '" + descr + "'; expected little-endian float32 ('<f4') or float64 ('<f8')");
  if (std::regex_search(header, std::regex(R"('fortran_order'\s*:\s*True)")))
    throw bad("Fortran order; save it with np.ascontiguousarray first");
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))"))) throw bad("no 'shape' in " + header);
  std::vector<int64_t> shape;
  const std::string dims = m[1];
  static const std::regex number(R"(\d+)");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it)
    shape.push_back(std::stoll(it->str()));
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  const size_t element = type == torch::kFloat32 ? 4 : 8;
  if (bytes.size() - data < static_cast<size_t>(numel) * element)
    throw bad("shape " + c10::str(c10::IntArrayRef(shape)) + " needs " + std::to_string(numel * element) +
              " bytes of data, the file holds " + std::to_string(bytes.size() - data));
  torch::Tensor out = torch::empty(shape, torch::TensorOptions().dtype(type));
  if (numel > 0) std::memcpy(out.data_ptr(), bytes.data() + data, static_cast<size_t>(numel) * element);
  return out.to(torch::kFloat32);
}

void write_npy(const std::string& path, const torch::Tensor& values) {
  const torch::Tensor v = values.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  std::string shape;
  for (int64_t d : v.sizes()) shape += std::to_string(d) + ", ";
  if (v.dim() > 1) shape.erase(shape.size() - 2);
  else if (v.dim() == 1) shape.erase(shape.size() - 1);
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + shape + "), }";
  // The whole header, with its 10-byte preamble, is a multiple of 64 bytes and ends in a newline.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header += std::string(total - 10 - header.size() - 1, ' ') + "\n";
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out.push_back(static_cast<char>(header.size() & 0xFF));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(static_cast<const char*>(v.data_ptr()), static_cast<size_t>(v.nbytes()));
  write_file_atomically(path, out);
}

}  // namespace wxtrain::interop
