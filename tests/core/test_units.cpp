// Byte counts as the CLI prints them in its GiB columns (estimate, profile, tune-batch).
#include <gtest/gtest.h>

#include "core/units.h"

using namespace wxtrain;

TEST(Units, GibAloneWithTheDecimalsAsked) {
  EXPECT_EQ(format_gib(3.0 * kGiB, 2), "3.00");
  EXPECT_EQ(format_gib(1.5 * kGiB + 1, 3), "1.500");
  EXPECT_EQ(format_gib(80.0 * kGB, 2), "74.51");
  EXPECT_EQ(format_gib(5.0 * kMiB, 3), "0.005");
  EXPECT_EQ(format_gib(0, 1), "0.0");
}
