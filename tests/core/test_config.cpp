#include <gtest/gtest.h>
#include "core/config.h"
TEST(Config, Placeholder) { EXPECT_EQ(wxtrain::to_string(wxtrain::Precision::kBf16), "bf16"); }
