// Writes small checkpoints in the layout trainer/checkpoint_io.cpp saves, for checkpoint_fuzz's
// seed corpus (fuzz/make_seeds_checkpoint.sh runs it): a real one from `wxtrain train` holds a
// 5 KB RNG state and the model's weights, which the fuzzer would spend its time mutating. These hold
// a few elements each, with the structures a real one has: parameters as views of one flat buffer
// (FlatParameters), optimizer and scaler state, normalisation, overrides.
//   make_checkpoint_seeds OUTPUT_DIR
#include <cstdio>
#include <string>

#include "trainer/checkpoint_io.h"

using wxtrain::trainer::Checkpoint;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_checkpoint_seeds OUTPUT_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  Checkpoint c;
  c.step = 3;
  c.loader.epoch = 1;
  c.loader.batch_index = 2;
  c.config_text = "[model]\nname = \"unet\"\nchannels = [2]\n";
  c.overrides = {"train.steps=3"};
  c.model_name = "unet";
  c.world_size = 2;
  // Parameters as views of one flat buffer, as distributed::FlatParameters keeps them.
  const torch::Tensor flat = torch::arange(6, torch::kFloat32);
  c.model["conv.weight"] = flat.narrow(0, 0, 4).view({2, 2});
  c.model["conv.bias"] = flat.narrow(0, 4, 2);
  c.optimizer["group0.exp_avg"] = torch::zeros({6});
  c.optimizer["group0.step"] = torch::tensor(int64_t{3});
  c.normalization["mean"] = torch::tensor({1.0f, 2.0f});
  c.normalization["std"] = torch::tensor({0.5f, 0.25f});
  wxtrain::trainer::save_checkpoint(dir + "/small.pt", c);

  // With the fp16 loss scaler's state, bf16 and int tensors and a short stand-in for the RNG state.
  c.scaler["scale"] = torch::tensor(65536.0f);
  c.scaler["growth_tracker"] = torch::tensor(int32_t{7});
  c.model["conv.weight"] = torch::ones({2, 2}, torch::kBFloat16);
  c.rng_state = torch::arange(16, torch::kUInt8);
  wxtrain::trainer::save_checkpoint(dir + "/scaler_rng.pt", c);

  // The least the loader accepts: the scalars and empty maps.
  wxtrain::trainer::save_checkpoint(dir + "/empty_maps.pt", Checkpoint{});
  return 0;
}
