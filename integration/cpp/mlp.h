// Mlp: a 784 -> hidden (ReLU) -> 10 softmax classifier on flat float
// buffers (Eigen), with the gradient of the mean cross-entropy.
//
// The parameters are separate tensors (w1, b1, w2, b2), each with its value
// and gradient buffer, so a trainer can hand each gradient to terse as it
// would a framework's. Deterministic: the same seed gives the same
// initialisation on every rank. Not thread-safe.
#ifndef TERSE_INTEGRATION_CPP_MLP_H_
#define TERSE_INTEGRATION_CPP_MLP_H_

#include <cstdint>
#include <string>
#include <vector>

namespace terse {

class Mlp {
 public:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> value;
    std::vector<float> grad;
  };

  // Weights uniform in +-sqrt(6 / fan_in) (He), biases zero.
  Mlp(int inputs, int hidden, int classes, uint64_t seed);

  std::vector<Tensor>& tensors() { return tensors_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }

  // Mean cross-entropy over the n examples (`images`: n x inputs, row-major;
  // `labels` in [0, classes)); writes its gradient into every tensor's
  // grad. Returns the loss.
  float LossAndGradient(const float* images, const int32_t* labels, int64_t n);

  // value -= lr * grad for every tensor.
  void Step(float lr);

  // How many of the n examples the model classifies correctly.
  int64_t Correct(const float* images, const int32_t* labels, int64_t n) const;

 private:
  const int inputs_;
  const int hidden_;
  const int classes_;
  std::vector<Tensor> tensors_;  // w1 (hidden x inputs), b1, w2, b2.
};

}  // namespace terse

#endif  // TERSE_INTEGRATION_CPP_MLP_H_
