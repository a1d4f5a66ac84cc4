// crps_cases OUT — writes random afCRPS cases and wxtrain's values for crps_reference.py: for
// alpha 0, 0.95 and 1, members 2..16, in fp32 and under bf16-mixed autocast (members and target
// rounded to bf16, as a bf16 layer's output is). One case is four lines of text:
//   alpha M P precision
//   the members, M x P values (member-major)
//   the target, P values
//   wxtrain's afCRPS per point, P values
#include <cstdio>
#include <fstream>
#include <iostream>

#include "core/autocast.h"
#include "trainer/training_step.h"

namespace {

void write_values(std::ostream& out, const torch::Tensor& t) {
  const torch::Tensor v = t.to(torch::kFloat64).contiguous().view({-1});
  const double* p = v.data_ptr<double>();
  char buf[40];
  for (int64_t i = 0; i < v.numel(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.17g", i ? " " : "", p[i]);
    out << buf;
  }
  out << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: crps_cases OUT\n";
    return 2;
  }
  std::ofstream out(argv[1]);
  torch::manual_seed(2024);
  const int64_t P = 24;
  for (const bool bf16 : {false, true}) {
    for (const double alpha : {0.0, 0.95, 1.0}) {
      for (int64_t M = 2; M <= 16; ++M) {
        torch::Tensor members = torch::randn({1, M, P}) * 3 + 1, target = torch::randn({1, P}) * 3 + 1;
        if (bf16) members = members.to(torch::kBFloat16), target = target.to(torch::kBFloat16);
        torch::Tensor crps;
        {
          wxtrain::AutocastGuard guard(torch::kCPU, torch::kBFloat16, bf16);
          crps = wxtrain::trainer::afcrps(members, target, alpha, 1);
        }
        out << alpha << " " << M << " " << P << " " << (bf16 ? "bf16-mixed" : "fp32") << "\n";
        write_values(out, members);
        write_values(out, target);
        write_values(out, crps);
      }
    }
  }
  return out ? 0 : 1;
}
