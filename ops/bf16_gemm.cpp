#include "ops/bf16_gemm.h"

#include <ATen/ops/addmm_cpu_dispatch.h>
#include <ATen/ops/baddbmm_cpu_dispatch.h>
#include <ATen/ops/bmm_cpu_dispatch.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <mutex>

#include "core/memory_meter.h"
#include "ops/conv2d.h"
#include "ops/cpu_fusion.h"

namespace wxtrain::ops {
namespace {

std::atomic<bool> g_installed{false};
std::atomic<bool> g_enabled{true};

bool bf16(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16; }

// Runs `fp32_kernel` on fp32 copies of the operands and returns its result rounded to bf16. The
// copies and the fp32 result are host-only workspace in a GPU-standing trace (see the header); the
// bf16 result is allocated outside that scope, so it is counted as the bf16 kernel's output is.
template <typename Kernel>
at::Tensor in_fp32(Kernel&& fp32_kernel) {
  at::Tensor y32;
  {
    const UncountedScope host_only(!cpu_fusion_enabled());
    y32 = fp32_kernel();
  }
  at::Tensor y = at::empty(y32.sizes(), y32.options().dtype(at::kBFloat16));
  y.copy_(y32);
  return y;
}

at::Tensor f32(const at::Tensor& t) { return t.to(at::kFloat); }

at::Tensor mm_kernel(const at::Tensor& self, const at::Tensor& mat2) {
  if (!(g_enabled && bf16(self) && bf16(mat2))) return at::cpu::mm(self, mat2);
  return in_fp32([&] { return at::cpu::mm(f32(self), f32(mat2)); });
}

at::Tensor bmm_kernel(const at::Tensor& self, const at::Tensor& mat2) {
  if (!(g_enabled && bf16(self) && bf16(mat2))) return at::cpu::bmm(self, mat2);
  return in_fp32([&] { return at::cpu::bmm(f32(self), f32(mat2)); });
}

at::Tensor addmm_kernel(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                        const at::Scalar& alpha) {
  if (!(g_enabled && bf16(self) && bf16(mat1) && bf16(mat2))) return at::cpu::addmm(self, mat1, mat2, beta, alpha);
  return in_fp32([&] { return at::cpu::addmm(f32(self), f32(mat1), f32(mat2), beta, alpha); });
}

at::Tensor baddbmm_kernel(const at::Tensor& self, const at::Tensor& batch1, const at::Tensor& batch2,
                          const at::Scalar& beta, const at::Scalar& alpha) {
  if (!(g_enabled && bf16(self) && bf16(batch1) && bf16(batch2)))
    return at::cpu::baddbmm(self, batch1, batch2, beta, alpha);
  return in_fp32([&] { return at::cpu::baddbmm(f32(self), f32(batch1), f32(batch2), beta, alpha); });
}

// Registering a second CPU kernel for an ATen operator makes the dispatcher warn that it overrides
// the first; that is the intent here, so the warnings of the registration are dropped.
class DropWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning&) override {}
};

}  // namespace

bool install_bf16_gemm_in_fp32() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The same check ATen makes before handing a bf16 GEMM to oneDNN (mkldnn_bf16_device_check).
    if (cpu_bf16_convolution_uses_onednn()) return;
    DropWarnings drop;
    const c10::WarningUtils::WarningHandlerGuard quiet(&drop);
    // Kept for the process's lifetime: destroying it would unregister the kernels.
    static torch::Library* library =
        new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
    library->impl("mm", TORCH_FN(mm_kernel));
    library->impl("bmm", TORCH_FN(bmm_kernel));
    library->impl("addmm", TORCH_FN(addmm_kernel));
    library->impl("baddbmm", TORCH_FN(baddbmm_kernel));
    g_installed = true;
  });
  return g_installed;
}

void set_bf16_gemm_in_fp32(bool enabled) { g_enabled = enabled; }

bool bf16_gemm_in_fp32() { return g_installed && g_enabled; }

}  // namespace wxtrain::ops
