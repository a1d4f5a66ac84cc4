#pragma once
// The model buffers the Python peers read (bench/peer/train_peer.py load_npy): train_throughput
// and gpu_check `describe --buffers DIR` write each as DIR/<name>.npy.
#include <cstdint>
#include <cstdio>
#include <string>

#include <torch/torch.h>

#include "core/error.h"

namespace wxtrain::bench {

// One tensor as a NumPy .npy file (format 1.0, C order, little-endian), which the Python peer reads
// with train_peer.load_npy (the wheel's environment has no NumPy; numpy.load reads it too): the peer
// then runs on the very graph or table the C++ model built, rather than a second implementation of
// its construction (the step, not the set-up, is what is compared).
inline void write_npy(const std::string& path, const torch::Tensor& tensor) {
  const torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
  std::string descr;
  switch (t.scalar_type()) {
    case torch::kFloat: descr = "<f4"; break;
    case torch::kDouble: descr = "<f8"; break;
    case torch::kLong: descr = "<i8"; break;
    case torch::kInt: descr = "<i4"; break;
    case torch::kBool: descr = "|b1"; break;
    default: throw Error("buffer " + path + " has a dtype .npy writing does not cover");
  }
  std::string shape = "(";
  for (int64_t d = 0; d < t.dim(); ++d) shape += std::to_string(t.size(d)) + (t.dim() == 1 || d + 1 < t.dim() ? "," : "");
  shape += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic (6) + version (2) + header length (2) + header, padded with spaces to a multiple of 64 and
  // ended by a newline.
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error("cannot write " + path);
  const unsigned char preamble[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const uint16_t length = static_cast<uint16_t>(header.size());
  const unsigned char length_le[2] = {static_cast<unsigned char>(length & 0xff), static_cast<unsigned char>(length >> 8)};
  const size_t bytes = static_cast<size_t>(t.numel()) * t.element_size();
  const bool ok = std::fwrite(preamble, 1, 8, f) == 8 && std::fwrite(length_le, 1, 2, f) == 2 &&
                  std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
                  std::fwrite(t.data_ptr(), 1, bytes, f) == bytes;
  if (std::fclose(f) != 0 || !ok) throw Error("writing " + path + " failed");
}

// Every named buffer of `model` into `dir` (which must exist), as write_npy.
inline void write_buffers(const torch::nn::Module& model, const std::string& dir) {
  for (const auto& b : model.named_buffers()) write_npy(dir + "/" + b.key() + ".npy", b.value());
}

}  // namespace wxtrain::bench
