#pragma once
// What the tests that run the wxtrain binary read back from a run: its files, the losses of its
// metrics.csv, and how far two checkpoints' tensors are apart (test_train_mpi.cpp,
// test_ensemble_group_train.cpp).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "trainer/checkpoint_io.h"

namespace wxtrain::testing_support {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The largest absolute difference between same-named tensors (in double), naming the tensor in
// `worst`; a tensor missing from `b` or of another shape fails the test.
inline double max_difference(const trainer::TensorMap& a, const trainer::TensorMap& b, std::string* worst) {
  EXPECT_EQ(a.size(), b.size());
  double most = 0;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end()) {
      ADD_FAILURE() << "tensor " << name << " missing";
      continue;
    }
    EXPECT_EQ(t.sizes(), it->second.sizes()) << name;
    const double d = (t.to(torch::kDouble) - it->second.to(torch::kDouble)).abs().max().item<double>();
    if (d > most) most = d, *worst = name;
  }
  return most;
}

// Takes out of `weights` the parameters whose gradient is zero in exact arithmetic: attention's key
// biases (`...lin_key.bias`; the softmax ignores a shift common to all of a receiver's scores).
// Theirs is round-off in any two runs, which Adam's 1/sqrt(v) scales up to a fraction of an lr step,
// so tests hold them apart by a looser bound than the other weights.
inline trainer::TensorMap take_round_off_weights(trainer::TensorMap& weights) {
  const std::string suffix = "lin_key.bias";
  trainer::TensorMap taken;
  for (auto it = weights.begin(); it != weights.end();)
    if (it->first.size() >= suffix.size() &&
        it->first.compare(it->first.size() - suffix.size(), suffix.size(), suffix) == 0) {
      taken.insert(*it);
      it = weights.erase(it);
    } else {
      ++it;
    }
  return taken;
}

// The losses of a run's metrics.csv (third column), a step per row.
inline std::vector<double> losses(const std::string& dir) {
  std::ifstream csv(dir + "/metrics.csv");
  std::string line;
  std::getline(csv, line);
  std::vector<double> out;
  while (std::getline(csv, line)) {
    std::stringstream s(line);
    std::string cell;
    std::vector<std::string> cells;
    while (std::getline(s, cell, ',')) cells.push_back(cell);
    out.push_back(std::stod(cells.at(2)));
  }
  return out;
}

}  // namespace wxtrain::testing_support
