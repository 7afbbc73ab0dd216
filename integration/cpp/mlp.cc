#include "integration/cpp/mlp.h"

#include <cmath>
#include <random>

#include "Eigen/Dense"

namespace terse {
namespace {

using RowMatrix =
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapConst = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;
using VecMapConst = Eigen::Map<const Eigen::RowVectorXf>;
using VecMap = Eigen::Map<Eigen::RowVectorXf>;

Mlp::Tensor MakeTensor(const std::string& name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return Mlp::Tensor{name, std::move(shape), std::vector<float>(n, 0.0f),
                     std::vector<float>(n, 0.0f)};
}

void InitUniform(std::vector<float>* v, int fan_in, std::mt19937_64* rng) {
  const float limit = std::sqrt(6.0f / fan_in);
  std::uniform_real_distribution<float> dist(-limit, limit);
  for (float& x : *v) x = dist(*rng);
}

}  // namespace

Mlp::Mlp(int inputs, int hidden, int classes, uint64_t seed)
    : inputs_(inputs), hidden_(hidden), classes_(classes) {
  tensors_.push_back(MakeTensor("mlp.w1", {hidden, inputs}));
  tensors_.push_back(MakeTensor("mlp.b1", {hidden}));
  tensors_.push_back(MakeTensor("mlp.w2", {classes, hidden}));
  tensors_.push_back(MakeTensor("mlp.b2", {classes}));
  std::mt19937_64 rng(seed);
  InitUniform(&tensors_[0].value, inputs, &rng);
  InitUniform(&tensors_[2].value, hidden, &rng);
}

float Mlp::LossAndGradient(const float* images, const int32_t* labels,
                           int64_t n) {
  MapConst x(images, n, inputs_);
  MapConst w1(tensors_[0].value.data(), hidden_, inputs_);
  VecMapConst b1(tensors_[1].value.data(), hidden_);
  MapConst w2(tensors_[2].value.data(), classes_, hidden_);
  VecMapConst b2(tensors_[3].value.data(), classes_);

  RowMatrix h = (x * w1.transpose()).rowwise() + b1;
  h = h.cwiseMax(0.0f);
  RowMatrix z = (h * w2.transpose()).rowwise() + b2;
  // Softmax with the row maximum subtracted; dz = (p - onehot) / n.
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float m = z.row(i).maxCoeff();
    z.row(i).array() = (z.row(i).array() - m).exp();
    const float sum = z.row(i).sum();
    z.row(i) /= sum;
    loss -= std::log(std::max(z(i, labels[i]), 1e-30f));
    z(i, labels[i]) -= 1.0f;
  }
  z /= static_cast<float>(n);

  Map dw2(tensors_[2].grad.data(), classes_, hidden_);
  VecMap db2(tensors_[3].grad.data(), classes_);
  dw2.noalias() = z.transpose() * h;
  db2 = z.colwise().sum();
  RowMatrix dh = z * w2;
  dh.array() *= (h.array() > 0.0f).cast<float>();
  Map dw1(tensors_[0].grad.data(), hidden_, inputs_);
  VecMap db1(tensors_[1].grad.data(), hidden_);
  dw1.noalias() = dh.transpose() * x;
  db1 = dh.colwise().sum();
  return static_cast<float>(loss / n);
}

void Mlp::Step(float lr) {
  for (Tensor& t : tensors_) {
    for (size_t i = 0; i < t.value.size(); ++i) t.value[i] -= lr * t.grad[i];
  }
}

int64_t Mlp::Correct(const float* images, const int32_t* labels,
                     int64_t n) const {
  MapConst x(images, n, inputs_);
  MapConst w1(tensors_[0].value.data(), hidden_, inputs_);
  VecMapConst b1(tensors_[1].value.data(), hidden_);
  MapConst w2(tensors_[2].value.data(), classes_, hidden_);
  VecMapConst b2(tensors_[3].value.data(), classes_);
  RowMatrix h = ((x * w1.transpose()).rowwise() + b1).cwiseMax(0.0f);
  RowMatrix z = (h * w2.transpose()).rowwise() + b2;
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    Eigen::Index best;
    z.row(i).maxCoeff(&best);
    correct += (best == labels[i]);
  }
  return correct;
}

}  // namespace terse
