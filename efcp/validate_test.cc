#include "efcp/validate.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

TEST(ValidateTest, Shape) {
  EXPECT_TRUE(CheckShape(1, 1).ok());
  EXPECT_FALSE(CheckShape(0, 4).ok());
  EXPECT_FALSE(CheckShape(10, 0).ok());
  EXPECT_FALSE(CheckShape(int64_t{1} << 32, 4).ok());
  EXPECT_TRUE(CheckShape((int64_t{1} << 32) - 1, 1024).ok());  // sparse: fine
  EXPECT_FALSE(CheckShape(10, 16385).ok());
  EXPECT_TRUE(CheckDenseWindowSize(int64_t{1} << 30, 1024).ok());
  EXPECT_FALSE(CheckDenseWindowSize(int64_t{1} << 31, 1024).ok());
}

TEST(ValidateTest, Scalars) {
  EXPECT_TRUE(CheckPositive(1e-12, "x").ok());
  EXPECT_FALSE(CheckPositive(0, "x").ok());
  EXPECT_FALSE(CheckPositive(std::nan(""), "x").ok());
  EXPECT_FALSE(CheckPositive(INFINITY, "x").ok());
  EXPECT_TRUE(CheckDensity(1.0).ok());
  EXPECT_TRUE(CheckDensity(1e-9).ok());
  EXPECT_FALSE(CheckDensity(0.0).ok());
  EXPECT_FALSE(CheckDensity(1.01).ok());
  EXPECT_FALSE(CheckDensity(std::nan("")).ok());
}

TEST(ValidateTest, Vectors) {
  std::vector<float> v = {1, 2, 3, 4, 5};
  EXPECT_TRUE(CheckFiniteVector(v, 5, "g").ok());
  EXPECT_FALSE(CheckFiniteVector(v, 4, "g").ok());
  v[3] = std::numeric_limits<float>::quiet_NaN();
  absl::Status status = CheckFiniteVector(v, 5, "g");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("g[3]"), std::string::npos) << status;
  v[3] = -INFINITY;
  EXPECT_FALSE(CheckFiniteVector(v, 5, "g").ok());

  const float big = std::numeric_limits<float>::max();
  std::vector<float> a = {0, big, 1}, b = {1, big, 2};
  EXPECT_FALSE(CheckFiniteSum(a.data(), b.data(), 3, "g").ok());  // overflow
  b[1] = -big;
  EXPECT_TRUE(CheckFiniteSum(a.data(), b.data(), 3, "g").ok());
  EXPECT_TRUE(CheckLength(3, 3, "x").ok());
  EXPECT_FALSE(CheckLength(2, 3, "x").ok());
  EXPECT_FALSE(CheckOutputVector(absl::MakeConstSpan(a), 4, "u").ok());
}

}  // namespace
}  // namespace efcp
}  // namespace terse
