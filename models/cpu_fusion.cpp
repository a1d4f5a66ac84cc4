#include "models/cpu_fusion.h"

namespace wxtrain::models {
namespace {
thread_local bool cpu_fusion = true;  // per thread, as autocast's state: the step runs on one
}  // namespace

bool cpu_fusion_enabled() { return cpu_fusion; }

CpuFusionGuard::CpuFusionGuard(bool enabled) : previous_(cpu_fusion) { cpu_fusion = enabled; }

CpuFusionGuard::~CpuFusionGuard() { cpu_fusion = previous_; }

}  // namespace wxtrain::models
