#pragma once
// The U-Net's 2x resampling on the CPU: 2x2 max pooling, and nearest 2x upsampling fused with the
// skip connection's concatenation.
//
// Why: LibTorch 1.13's CPU max_pool2d on NCHW tensors runs a scalar loop per window and saves
// int64 indices (8 bytes per output); on the storm U-Net it took 2.1 ms of a 49 ms fp32 step and
// 2.3 ms of a 33 ms bf16 one, and upsample_nearest2d's backward 1.0 / 1.8 ms more. Here the
// pooling saves the winner's place in its window as one byte, and the decoder's input is written
// in one pass (upsampled coarse channels, then the skip's) instead of upsampling and then copying
// both into cat's output. Values are ATen's bit for bit in both dtypes (the same element wins a
// window, NaN included); gradients are ATen's in fp32 and sum the four bf16 gradients of an
// upsampled pixel in fp32 before rounding once, where ATen rounds after each.
//
// Both take LibTorch's ops when cpu_fusion_enabled() is off (ops/cpu_fusion.h), off the CPU,
// for dtypes other than fp32 and bf16, and for odd sizes.
#include <torch/torch.h>

namespace wxtrain::ops {

// max_pool2d(x, 2) of a [N, C, H, W] tensor.
torch::Tensor max_pool_2x2(const torch::Tensor& x);

// cat({upsample_nearest2d(coarse, 2x), skip}, 1): coarse [N, Cc, h, w], skip [N, Cs, 2h, 2w], the
// result in coarse's dtype (skip cast to it). LibTorch's path under CPU autocast upsamples in fp32.
torch::Tensor upsample_2x_concat(const torch::Tensor& coarse, const torch::Tensor& skip);

}  // namespace wxtrain::ops
