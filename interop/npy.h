#pragma once
// NumPy's .npy files, the form normalisation statistics travel in beside a .mdlus (Earth2Studio's
// FourCastNet package: global_means.npy and global_stds.npy, shape [1, C, 1, 1]).
#include <string>

#include <torch/torch.h>

namespace wxtrain::interop {

// A little-endian float32 or float64 array in C order, any shape, as a float32 tensor of that
// shape. Error naming the file for another dtype, Fortran order or a damaged header.
torch::Tensor read_npy(const std::string& path);

// `values` as float32 in C order (format 1.0), written atomically.
void write_npy(const std::string& path, const torch::Tensor& values);

}  // namespace wxtrain::interop
