#pragma once
// The U-Net's 2x resampling on the CPU: 2x2 max pooling, and nearest 2x upsampling fused with the
// skip connection's concatenation.
//
// Why: LibTorch's CPU max_pool2d saves int64 indices (8 bytes per output); here the pooling saves
// the winner's place in its window as one byte. The decoder's input is written in one pass
// (upsampled coarse channels, then the skip's) instead of upsampling and then copying both into
// cat's output. On LibTorch 2.11 the storm U-Net's step runs 1.03x (fp32) and 1.05x (bf16-mixed)
// faster with max_pool_2x2, its peak 2.8 / 1.9 MB lower (27.1 MB fp32, 15.8 MB bf16-mixed), and
// 1.05x / 1.07x faster with upsample_2x_concat (`OMP_NUM_THREADS=1 build/bench/fusion_ab --fusions max_pool_2x2,upsample_2x_concat --pairs 21`,
// docs/benchmarks.md "Fusions on LibTorch 2.11"). Values are ATen's bit for bit in both dtypes (the same element wins a
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
