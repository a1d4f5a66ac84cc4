// interop/ without the reference implementations: the zip, tar, pickle and .npy layers, the
// FourCastNet mapping's refusals, and export -> import through wxtrain alone. The files PyTorch
// and PhysicsNeMo write themselves are read in test_torch_save_python.cpp and test_reference.cpp.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include <gtest/gtest.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "interop/archive.h"
#include "interop/npy.h"
#include "interop/reference_checkpoint.h"
#include "interop/torch_pickle.h"
#include "models/fourcastnet/fourcastnet.h"
#include "models/registry.h"

namespace wxtrain::interop {
namespace {
namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("wxtrain_interop_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

models::StateDict sample_state() {
  torch::manual_seed(0);
  models::StateDict s;
  s["a.weight"] = torch::randn({3, 4});
  s["a.bias"] = torch::randn({4}, torch::kFloat64);
  s["counts"] = torch::tensor({int64_t{1} << 40, int64_t{-5}}, torch::kInt64);
  s["half"] = torch::randn({2, 3}).to(torch::kBFloat16);
  s["mask"] = torch::tensor({true, false});
  s["scalar"] = torch::tensor(3.5f);
  s["empty"] = torch::zeros({0, 2});
  s["transposed"] = torch::arange(6, torch::kFloat32).view({2, 3}).t();  // written contiguous
  return s;
}

TEST(TorchPickle, WhatWxtrainWritesReadsBackEqual) {
  const models::StateDict s = sample_state();
  const std::string bytes = write_torch_state_dict(s);
  const models::StateDict back = state_dict_of(read_torch_save(bytes, "mem.pt"), "mem.pt");
  ASSERT_EQ(back.size(), s.size());
  for (const auto& [n, t] : s) {
    EXPECT_EQ(back.at(n).scalar_type(), t.scalar_type()) << n;
    EXPECT_EQ(back.at(n).sizes(), t.sizes()) << n;
    EXPECT_TRUE(torch::equal(back.at(n), t)) << n;
  }
  // torch.save's layout: entries under archive/, the storages as data/N.
  const Archive zip = read_archive(bytes, "mem.pt");
  EXPECT_TRUE(zip.files.count("archive/data.pkl"));
  EXPECT_TRUE(zip.files.count("archive/data/0"));
  EXPECT_EQ(zip.files.at("archive/byteorder"), "little");
}

TEST(TorchPickle, ADamagedFileIsAnErrorNamingItNeverACrash) {
  const std::string bytes = write_torch_state_dict(sample_state());
  int errors = 0;
  for (size_t cut = 0; cut < bytes.size(); cut += 97) {
    try {
      read_torch_save(bytes.substr(0, cut), "cut.pt");
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cut.pt"), std::string::npos) << e.what();
      ++errors;
    }
  }
  EXPECT_GT(errors, 0);
  // Flipped bytes inside the pickle: read or refused with the file's name, nothing else.
  const Archive zip = read_archive(bytes, "mem.pt");
  const std::string& pickle = zip.files.at("archive/data.pkl");
  const size_t at = bytes.find(pickle);
  ASSERT_NE(at, std::string::npos);
  for (size_t i = 0; i < pickle.size(); i += 3) {
    std::string damaged = bytes;
    damaged[at + i] = static_cast<char>(damaged[at + i] ^ 0x5A);
    try {
      state_dict_of(read_torch_save(damaged, "flip.pt"), "flip.pt");
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("flip.pt"), std::string::npos) << e.what();
    }
  }
}

TEST(TorchPickle, AFileWithoutAStateDictSaysWhatItHolds) {
  models::StateDict empty;
  try {
    state_dict_of(read_torch_save(write_torch_state_dict(empty), "empty.pt"), "empty.pt");
    FAIL() << "an empty dict is no state_dict";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty.pt: holds no state_dict"), std::string::npos) << e.what();
  }
}

TEST(Archive, StoredZipRoundTripsAndCrcIsZips) {
  EXPECT_EQ(crc32("123456789"), 0xCBF43926u);
  const std::string zip = write_stored_zip({{"model.pt", std::string("\x00\x01zz", 4)}, {"args.json", "{}"}});
  const Archive a = read_archive(zip, "x.zip");
  EXPECT_EQ(a.format, "zip");
  EXPECT_EQ(a.files.at("model.pt"), std::string("\x00\x01zz", 4));
  EXPECT_EQ(a.files.at("args.json"), "{}");
  EXPECT_THROW(read_archive(zip.substr(0, zip.size() - 30), "x.zip"), Error);
  EXPECT_THROW(read_archive("neither", "x"), Error);
}

TEST(Npy, RoundTripAndRefusals) {
  const fs::path dir = scratch("npy");
  const torch::Tensor v = torch::randn({1, 5, 1, 1});
  write_npy((dir / "m.npy").string(), v);
  const torch::Tensor back = read_npy((dir / "m.npy").string());
  EXPECT_EQ(back.sizes(), v.sizes());
  EXPECT_TRUE(torch::equal(back, v));
  std::ofstream((dir / "bad.npy").string(), std::ios::binary) << std::string("\x93NUMPY\x01\x00", 8) << std::string("\x2a\x00", 2)
                                                              << "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }";
  try {
    read_npy((dir / "bad.npy").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dtype '<i8'"), std::string::npos) << e.what();
  }
}

const models::ReferenceModel& afno() { return models::find_model("fourcastnet").references.at(0); }

nlohmann::json small_afno_args() {
  return {{"inp_shape", {8, 16}}, {"in_channels", 3}, {"out_channels", 2}, {"patch_size", {4, 4}},
          {"embed_dim", 16},      {"depth", 2},       {"num_blocks", 4}};
}

std::string refusal(nlohmann::json args) {
  try {
    afno().from_reference_args(args);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(FourCastNetReference, ArgumentsBecomeOptionsWithTheReferencesDefaults) {
  const auto [config, shape] = afno().from_reference_args(small_afno_args());
  const auto& o = config.options.as<models::FourCastNetOptions>();
  EXPECT_EQ(o.patch_size, 4);
  EXPECT_EQ(o.embed_dim, 16);
  EXPECT_EQ(o.afno_blocks, 4);
  EXPECT_DOUBLE_EQ(o.mlp_ratio, 4.0);          // AFNO's default
  EXPECT_DOUBLE_EQ(o.sparsity_threshold, 0.01);
  EXPECT_EQ(o.spectral_modes, "reference");
  EXPECT_EQ(shape.in_channels, 3);
  EXPECT_EQ(shape.out_channels, 2);
  EXPECT_EQ(shape.lat, 8);
  EXPECT_EQ(shape.lon, 16);
}

TEST(FourCastNetReference, AnArgumentWxtrainCannotHonourIsRefusedByName) {
  auto with = [](const std::string& key, nlohmann::json value) {
    nlohmann::json a = small_afno_args();
    a[key] = value;
    return refusal(a);
  };
  EXPECT_NE(with("drop_rate", 0.1).find("'drop_rate' = 0.1: wxtrain's FourCastNet has no dropout"), std::string::npos);
  EXPECT_NE(with("patch_size", {4, 2}).find("'patch_size' = [4,2]: wxtrain's FourCastNet takes square patches"),
            std::string::npos);
  EXPECT_NE(with("inp_shape", {10, 16}).find("'inp_shape' = [10,16]: must be positive multiples of patch_size"),
            std::string::npos);
  EXPECT_NE(with("embed_dims", 8).find("did you mean 'embed_dim'"), std::string::npos);
  EXPECT_NE(with("num_blocks", 5).find("model.embed_dim = 16 must be divisible by model.afno_blocks = 5"),
            std::string::npos);
  nlohmann::json missing = small_afno_args();
  missing.erase("in_channels");
  EXPECT_NE(refusal(missing).find("'in_channels' is missing"), std::string::npos);
}

TEST(FourCastNetReference, NamesMapBothWaysAndAStrayTensorIsNamed) {
  const auto [config, shape] = afno().from_reference_args(small_afno_args());
  models::WeatherModel model = models::find_model("fourcastnet").build(config, shape);
  models::StateDict ours;
  for (const auto& p : model->named_parameters()) ours[p.key()] = p.value();
  const models::StateDict theirs = afno().to_reference_state(ours, config, shape);
  EXPECT_TRUE(theirs.count("patch_embed.proj.weight"));
  EXPECT_TRUE(theirs.count("pos_embed"));
  EXPECT_TRUE(theirs.count("blocks.1.mlp.fc2.bias"));
  EXPECT_TRUE(theirs.count("blocks.0.filter.w1"));
  const models::StateDict back = afno().from_reference_state(theirs, config, shape);
  ASSERT_EQ(back.size(), ours.size());
  for (const auto& [n, t] : ours) EXPECT_TRUE(back.at(n).is_same(t)) << n;

  models::StateDict stray = theirs;
  stray["norm.weight"] = torch::ones({16});  // NVlabs' unused final norm
  try {
    afno().from_reference_state(stray, config, shape);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'norm.weight' [16] has no counterpart in wxtrain's FourCastNet"),
              std::string::npos) << e.what();
  }
  models::StateDict short_one = theirs;
  short_one.erase("head.weight");
  EXPECT_THROW(afno().from_reference_state(short_one, config, shape), ConfigError);
}

TEST(FourCastNetReference, ReferenceModesOnAWideGridKeepTheFirstHalfPlusOneZonalWavenumbers) {
  // A 4 x 8 patch grid: rfft2 gives 4 x 5 modes; the reference filters columns 0..2 of all rows.
  const torch::Tensor mask = models::afno_mode_mask(4, 5, 1.0, /*reference=*/true, torch::kFloat);
  ASSERT_TRUE(mask.defined());
  EXPECT_EQ(mask.sum().item<float>(), 12.0f);
  EXPECT_EQ(mask.index({torch::indexing::Slice(), 3}).sum().item<float>(), 0.0f);
  EXPECT_FALSE(models::afno_mode_mask(4, 5, 1.0, /*reference=*/false, torch::kFloat).defined());
  // Square 6 x 6 patches, fraction 0.5: kept = int(4 x 0.5) = 2, rows 2..5, columns 0..1.
  const torch::Tensor half = models::afno_mode_mask(6, 4, 0.5, true, torch::kFloat);
  EXPECT_EQ(half.sum().item<float>(), 8.0f);
  EXPECT_EQ(half[2][0].item<float>(), 1.0f);
  EXPECT_EQ(half[1][0].item<float>(), 0.0f);
}

TEST(Export, ThenImportGivesTheSameModelWeightsAndStatistics) {
  const fs::path dir = scratch("export");
  auto [config, shape] = afno().from_reference_args(small_afno_args());
  models::WeatherModel model = models::find_model("fourcastnet").build(config, shape);
  MdlusExport request;
  request.path = (dir / "model.mdlus").string();
  request.model = config;
  request.shape = shape;
  for (const auto& p : model->named_parameters()) request.weights[p.key()] = p.value().detach();
  request.means = torch::tensor({1.0f, 2.0f, 3.0f});
  request.stds = torch::tensor({0.5f, 1.5f, 2.5f});
  request.input_channels = {"a@t0", "b@t0", "lsm"};
  request.output_channels = {"a", "b"};
  request.source = "test";
  const std::vector<std::string> written = export_mdlus(request);
  ASSERT_EQ(written.size(), 3u);
  EXPECT_EQ(read_npy((dir / "global_means.npy").string()).sizes().vec(), (std::vector<int64_t>{1, 3, 1, 1}));
  EXPECT_EQ(checkpoint_kind(request.path), CheckpointKind::kMdlus);

  const ImportedModel imported = import_reference_checkpoint(request.path);
  EXPECT_EQ(imported.reference, "physicsnemo.models.afno.afno.AFNO");
  EXPECT_TRUE(model_differences(imported.model, config).empty());
  EXPECT_EQ(imported.input_channels, request.input_channels);
  EXPECT_EQ(imported.output_channels, request.output_channels);
  ASSERT_EQ(imported.weights.size(), request.weights.size());
  for (const auto& [n, t] : request.weights) EXPECT_TRUE(torch::equal(imported.weights.at(n), t)) << n;
  EXPECT_TRUE(torch::equal(imported.means, request.means));
  EXPECT_TRUE(torch::equal(imported.stds, request.stds));
  EXPECT_NE(imported.summary().find("statistics: global_means.npy, global_stds.npy"), std::string::npos);

  // The same three files as a tar, as Modulus and PhysicsNeMo before 2.0 wrote a .mdlus.
  const Archive zip = read_archive(read_file_bytes(request.path), request.path);
  const fs::path parts = dir / "parts";
  fs::create_directories(parts);
  for (const auto& [name, bytes] : zip.files) write_file_atomically((parts / name).string(), bytes);
  const std::string tar = (dir / "legacy.mdlus").string();
  ASSERT_EQ(std::system(("tar -cf " + tar + " -C " + parts.string() + " model.pt args.json metadata.json").c_str()), 0);
  const ImportedModel legacy = import_reference_checkpoint(tar);
  EXPECT_EQ(legacy.container, "Modulus/PhysicsNeMo .mdlus (tar)");
  for (const auto& [n, t] : request.weights) EXPECT_TRUE(torch::equal(legacy.weights.at(n), t)) << n;
}

TEST(Export, ConfigurationsTheReferenceCannotBuildAreRefusedByName) {
  auto [config, shape] = afno().from_reference_args(small_afno_args());
  models::ModelShape padded = shape;
  padded.lat = 9;  // wxtrain pads to whole patches; AFNO cannot
  EXPECT_THROW(afno().to_reference_args(config, padded), ConfigError);
  config.options.as<models::FourCastNetOptions>().spectral_modes = "lowest";
  try {
    afno().to_reference_args(config, shape);  // 2 x 4 patches: the reference filters 2 of 3 zonal modes
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.spectral_modes = \"lowest\" filters other Fourier modes"),
              std::string::npos) << e.what();
  }
  MdlusExport own;
  own.path = (scratch("own") / "u.mdlus").string();
  own.model.name = "unet";
  EXPECT_THROW(export_mdlus(own), ConfigError);
}

}  // namespace
}  // namespace wxtrain::interop
