// Fashion-MNIST as float images in [0, 1] and integer labels, from the IDX
// files of Debian's dataset-fashion-mnist package.
#ifndef TERSE_INTEGRATION_CPP_FASHION_MNIST_H_
#define TERSE_INTEGRATION_CPP_FASHION_MNIST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace terse {

inline constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
inline constexpr int kImagePixels = 28 * 28;
inline constexpr int kClasses = 10;

struct Dataset {
  int64_t size = 0;
  std::vector<float> images;    // size x 784, row-major, pixel / 255.
  std::vector<int32_t> labels;  // size, in [0, 10).
};

// `split`: "train" or "t10k". Reads <dir>/<split>-images-idx3-ubyte.gz and
// <split>-labels-idx1-ubyte.gz, the first `max_examples` examples (<= 0:
// all). NotFound (saying which package provides the files) when they are
// missing; DataLoss when they are malformed or disagree.
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir,
                                         const std::string& split,
                                         int64_t max_examples);

}  // namespace terse

#endif  // TERSE_INTEGRATION_CPP_FASHION_MNIST_H_
