// The ceiling on bf16 against fp32 on this CPU: a square matmul at a few sizes, in GFLOP/s, in fp32
// through LibTorch's own path (torch::mm: the torch wheel's MKL) and through oneDNN's
// sgemm (ops/cpu_gemm.h, what the zoo's fp32 Linear layers and attention use on the CPU), and in
// bf16 (torch::mm: oneDNN), alternating over rounds and taking medians. A training step also runs
// normalisation, activations and casts that bf16 does not speed up, so its bf16 / fp32 ratio is
// below this one.
//
//   matmul_precision [--rounds 5]        (threads: LibTorch's default, or OMP_NUM_THREADS)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "ops/cpu_gemm.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GFLOP/s of `reps` products of n x n matrices of `dtype`, by torch::mm or by ops::scaled_matmul.
double gflops(int64_t n, torch::Dtype dtype, int reps, bool onednn_fp32 = false) {
  torch::NoGradGuard no_grad;
  const torch::Tensor a = torch::randn({n, n}).to(dtype), b = torch::randn({n, n}).to(dtype);
  auto product = [&] { return onednn_fp32 ? wxtrain::ops::scaled_matmul(a, b) : torch::mm(a, b); };
  torch::Tensor c = product();  // warm-up (and oneDNN's primitive cache)
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) c = product();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 2.0 * static_cast<double>(n * n * n) * reps / seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: matmul_precision [--rounds N]\n");
      return 2;
    }
  }
  std::printf("GEMMs, %d intra-op thread(s), median of %d alternating rounds\n\n", at::get_num_threads(), rounds);
  std::printf("| n | fp32 torch::mm GFLOP/s | fp32 oneDNN GFLOP/s | bf16 GFLOP/s | oneDNN / torch::mm fp32 | bf16 / fp32 oneDNN |\n"
              "|---:|---:|---:|---:|---:|---:|\n");
  for (const int64_t n : {128, 256, 512, 1024, 2048}) {
    const int reps = static_cast<int>(std::max<int64_t>(2, (int64_t{1} << 31) / (n * n * n)));
    std::vector<double> fp32, fp32_onednn, bf16, onednn_ratio, bf16_ratio;
    for (int r = 0; r < rounds; ++r) {
      fp32.push_back(gflops(n, torch::kFloat32, reps));
      fp32_onednn.push_back(gflops(n, torch::kFloat32, reps, true));
      bf16.push_back(gflops(n, torch::kBFloat16, reps));
      onednn_ratio.push_back(fp32_onednn.back() / fp32.back());
      bf16_ratio.push_back(bf16.back() / fp32_onednn.back());
    }
    std::printf("| %lld | %.1f | %.1f | %.1f | %.2fx | %.2fx |\n", static_cast<long long>(n), median(fp32),
                median(fp32_onednn), median(bf16), median(onednn_ratio), median(bf16_ratio));
  }
  return 0;
}
