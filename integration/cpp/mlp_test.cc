#include "integration/cpp/mlp.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace terse {
namespace {

TEST(MlpTest, GradientMatchesFiniteDifferences) {
  Mlp model(5, 4, 3, /*seed=*/7);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  std::vector<float> x(6 * 5);
  for (float& v : x) v = normal(rng);
  std::vector<int32_t> y = {0, 1, 2, 2, 1, 0};
  // Non-zero biases so that every parameter matters.
  for (float& b : model.tensors()[1].value) b = 0.1f;
  model.LossAndGradient(x.data(), y.data(), 6);
  for (size_t t = 0; t < model.tensors().size(); ++t) {
    const std::vector<float> grad = model.tensors()[t].grad;
    for (size_t i = 0; i < grad.size(); ++i) {
      float& p = model.tensors()[t].value[i];
      const float saved = p;
      const float eps = 1e-2f;
      p = saved + eps;
      const double up = model.LossAndGradient(x.data(), y.data(), 6);
      p = saved - eps;
      const double down = model.LossAndGradient(x.data(), y.data(), 6);
      p = saved;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(grad[i], numeric, 2e-3 + 2e-2 * std::abs(numeric))
          << model.tensors()[t].name << "[" << i << "]";
    }
  }
}

TEST(MlpTest, SgdLearnsASeparableProblem) {
  Mlp model(2, 8, 2, /*seed=*/1);
  std::vector<float> x;
  std::vector<int32_t> y;
  for (int i = 0; i < 64; ++i) {
    const float a = (i % 8) / 4.0f - 1.0f, b = (i / 8) / 4.0f - 1.0f;
    x.push_back(a);
    x.push_back(b);
    y.push_back(a + b > 0 ? 1 : 0);
  }
  const float first = model.LossAndGradient(x.data(), y.data(), 64);
  for (int step = 0; step < 300; ++step) {
    model.LossAndGradient(x.data(), y.data(), 64);
    model.Step(0.5f);
  }
  const float last = model.LossAndGradient(x.data(), y.data(), 64);
  EXPECT_LT(last, first / 3);
  EXPECT_GE(model.Correct(x.data(), y.data(), 64), 60);
}

TEST(MlpTest, SameSeedSameModel) {
  Mlp a(784, 16, 10, 5), b(784, 16, 10, 5), c(784, 16, 10, 6);
  EXPECT_EQ(a.tensors()[0].value, b.tensors()[0].value);
  EXPECT_NE(a.tensors()[0].value, c.tensors()[0].value);
}

}  // namespace
}  // namespace terse
