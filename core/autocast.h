#pragma once
// Scoped autocast for one device type, as torch.autocast does it: enable, set the lower-precision
// dtype, and clear the cast cache when the outermost scope ends (otherwise the bf16 copies of the
// weights stay alive after the step and show up as memory).
#include <ATen/autocast_mode.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace wxtrain {

struct AutocastState {
  bool cpu_enabled = false;
  c10::ScalarType cpu_dtype = c10::kBFloat16;
  bool cuda_enabled = false;
  c10::ScalarType cuda_dtype = c10::kHalf;

  // The device-generic calls of LibTorch 2.x (the CPU/GPU-specific ones are deprecated since 2.4
  // and warn on every call).
  static AutocastState current() {
    return {at::autocast::is_autocast_enabled(at::kCPU), at::autocast::get_autocast_dtype(at::kCPU),
            at::autocast::is_autocast_enabled(at::kCUDA), at::autocast::get_autocast_dtype(at::kCUDA)};
  }
  void apply() const {
    at::autocast::set_autocast_enabled(at::kCPU, cpu_enabled);
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
    at::autocast::set_autocast_enabled(at::kCUDA, cuda_enabled);
    at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
  }
};

class AutocastGuard {
 public:
  // Makes `state` current for the scope; restores the previous state afterwards.
  explicit AutocastGuard(const AutocastState& state) : previous_(AutocastState::current()) {
    state.apply();
    at::autocast::increment_nesting();
  }
  // Autocast to `dtype` on `device` (disabled when `enabled` is false).
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, bool enabled)
      : AutocastGuard(with(device, dtype, enabled)) {}
  ~AutocastGuard() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    previous_.apply();
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

  // The current state with autocast for `device` set to (enabled, dtype).
  static AutocastState with(c10::DeviceType device, c10::ScalarType dtype, bool enabled) {
    AutocastState s = AutocastState::current();
    if (device == c10::DeviceType::CUDA) {
      s.cuda_enabled = enabled;
      s.cuda_dtype = dtype;
    } else {
      s.cpu_enabled = enabled;
      s.cpu_dtype = dtype;
    }
    return s;
  }

 private:
  AutocastState previous_;
};

}  // namespace wxtrain
