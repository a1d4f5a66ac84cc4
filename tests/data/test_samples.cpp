// The time split and the sample window: which states go into input and target, in which order.
#include <gtest/gtest.h>
#include <netcdf.h>

#include <cmath>

#include "core/error.h"
#include "data/dataset.h"
#include "data/normalization.h"
#include "data/readers/netcdf_file.h"
#include "data/samples.h"
#include "storm_fixture.h"

using namespace wxtrain;
using namespace wxtrain::data;
using namespace wxtrain::data::testing;

TEST(TimeSplit, TrailingValidationAndNoWindowCrossesTheBoundary) {
  TimeSplit split(64, 0.2, {2, 1});
  EXPECT_EQ(split.end(Split::kTrain), 51);  // round(0.2 * 64) = 13 validation times
  EXPECT_EQ(split.begin(Split::kValidation), 51);
  EXPECT_EQ(split.end(Split::kValidation), 64);
  const auto train = split.sample_times(Split::kTrain);
  const auto val = split.sample_times(Split::kValidation);
  ASSERT_EQ(train.size(), 49u);
  EXPECT_EQ(train.front(), 1);   // needs t-1 >= 0
  EXPECT_EQ(train.back(), 49);   // target t+1 = 50 < 51
  ASSERT_EQ(val.size(), 11u);
  EXPECT_EQ(val.front(), 52);    // input t-1 = 51 >= 51
  EXPECT_EQ(val.back(), 62);     // target 63

  TimeSplit rollout(64, 0.25, {3, 4});
  for (int64_t t : rollout.sample_times(Split::kTrain)) EXPECT_LT(t + 4, 48);
  for (int64_t t : rollout.sample_times(Split::kValidation)) EXPECT_GE(t - 2, 48);
}

TEST(TimeSplit, RejectsImpossibleSplits) {
  EXPECT_THROW(TimeSplit(64, 1.0, {2, 1}), DataError);
  EXPECT_THROW(TimeSplit(64, -0.1, {2, 1}), DataError);
  EXPECT_THROW(TimeSplit(4, 0.5, {2, 1}), DataError);  // 2 training times, window needs 3
}

TEST(Samples, WindowContentAndChannelOrder) {
  Dataset dataset(storm_sources());
  const Normalization norm = Normalization::compute(dataset, 0, 51);
  const SampleWindow window{3, 2};
  const int64_t V = 6;
  const Sample sample = make_sample(dataset, norm, window, 10);
  EXPECT_EQ(sample.time, 10);
  EXPECT_EQ(sample.input.sizes(), (std::vector<int64_t>{V * 3, 33, 36}));
  EXPECT_EQ(sample.target.sizes(), (std::vector<int64_t>{2, V, 33, 36}));
  ASSERT_TRUE(sample.target_mask.defined());
  EXPECT_EQ(sample.target_mask.sizes(), sample.target.sizes());

  // History-major, oldest first: channel h * V + v holds state t - 2 + h, variable v.
  for (int64_t h = 0; h < 3; ++h) {
    const torch::Tensor expected = norm.normalize(dataset.state(10 - 2 + h));
    EXPECT_TRUE(torch::equal(sample.input.slice(0, h * V, (h + 1) * V), expected)) << "h=" << h;
  }
  // Targets are states t+1, t+2; the mask marks exactly the fill points.
  for (int64_t r = 0; r < 2; ++r) {
    const torch::Tensor raw = dataset.state(11 + r);
    EXPECT_TRUE(torch::equal(sample.target[r], norm.normalize(raw))) << "r=" << r;
    EXPECT_TRUE(torch::equal(sample.target_mask[r], (~torch::isnan(raw)).to(torch::kFloat32)));
  }
  EXPECT_GT(sample.target_mask.sum().item<float>(), 0.5f * sample.target_mask.numel());
  EXPECT_LT(sample.target_mask.sum().item<float>(), sample.target_mask.numel());  // the storm has fill points

  // The first target of sample t is the newest input state of sample t + 1.
  const Sample following = make_sample(dataset, norm, window, 11);
  EXPECT_TRUE(torch::equal(sample.target[0], following.input.slice(0, 2 * V, 3 * V)));
  EXPECT_TRUE(torch::equal(sample.input.slice(0, V, 3 * V), following.input.slice(0, 0, 2 * V)));
}

// NaN stored without a _FillValue (as netCDF4-python writes np.nan with fill_value=False) is
// missing all the same: preloaded or read lazily, the targets carry a mask that is 0 there, and
// the statistics record the share missing and the cells missing in every state, also through a
// checkpoint's map.
TEST(Samples, NanWithoutFillValueIsMaskedAndCounted) {
  TempDir dir;
  const std::string path = dir.file("nan_nofill.nc");
  const size_t T = 6, H = 4, W = 5;
  {
    NetcdfFile file = NetcdfFile::create(path);
    file.define_dimension("time", T);
    file.define_dimension("lat", H);
    file.define_dimension("lon", W);
    file.define_variable("time", NC_DOUBLE, {"time"});
    file.put_text_attribute("time", "units", "hours since 2020-01-01");
    file.define_variable("swh", NC_FLOAT, {"time", "lat", "lon"});  // no _FillValue
    file.end_define();
    file.write_doubles("time", {0, 6, 12, 18, 24, 30});
    std::vector<float> values(T * H * W);
    for (size_t i = 0; i < values.size(); ++i) values[i] = 1.0f + 0.01f * static_cast<float>(i);
    for (size_t t = 0; t < T; ++t) values[(t * H + 1) * W + 2] = std::nanf("");  // cell (1, 2): land
    values[(3 * H + 0) * W + 0] = std::nanf("");                                  // (0, 0) once
    file.write_floats("swh", {0, 0, 0}, {T, H, W}, values.data());
    file.close();
  }
  for (int64_t preload : {int64_t{0}, int64_t{1} << 20}) {
    SCOPED_TRACE(preload ? "preloaded" : "read lazily");
    DatasetOptions options;
    options.preload_max_bytes = preload;
    Dataset dataset({{path, "swh", "swh"}}, options);
    const Normalization norm = Normalization::compute(dataset, 0, 6);
    EXPECT_TRUE(norm.missing().any());
    EXPECT_DOUBLE_EQ(norm.missing().share("swh"), 7.0 / (T * H * W));
    EXPECT_DOUBLE_EQ(norm.missing().always_share("swh"), 1.0 / (H * W));
    const torch::Tensor always = norm.missing().always_missing("swh");
    ASSERT_TRUE(always.defined());
    EXPECT_EQ(always.sum().item<int64_t>(), 1);
    EXPECT_TRUE(always[1][2].item<bool>());
    EXPECT_NE(norm.missing().report().find("swh 5.0% of cells in every state (5.8% of all values)"), std::string::npos)
        << norm.missing().report();

    const Sample sample = make_sample(dataset, norm, {2, 1}, 2);  // target: state 3
    ASSERT_TRUE(sample.target_mask.defined());
    EXPECT_EQ(sample.target_mask[0][0][1][2].item<float>(), 0.0f);
    EXPECT_EQ(sample.target_mask[0][0][0][0].item<float>(), 0.0f);
    EXPECT_EQ(sample.target_mask.sum().item<float>(), static_cast<float>(H * W - 2));
    EXPECT_TRUE(torch::isfinite(sample.target).all().item<bool>());

    // Through a checkpoint's map and back.
    const Normalization back = Normalization::from_map(norm.to_map());
    EXPECT_DOUBLE_EQ(back.missing().share("swh"), norm.missing().share("swh"));
    ASSERT_TRUE(back.missing().always_missing("swh").defined());
    EXPECT_TRUE(torch::equal(back.missing().always_missing("swh"), always));
  }
}
