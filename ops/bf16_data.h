#pragma once
// A bf16 CPU tensor's storage as the raw 16-bit words that the torch-free kernels
// (ops/kernels/fused_kernels.h) read and write.
#include <cstdint>

#include <torch/torch.h>

namespace wxtrain::ops {

inline const uint16_t* bf16_data(const torch::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}
inline uint16_t* bf16_data(torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

}  // namespace wxtrain::ops
