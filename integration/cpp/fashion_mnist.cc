#include "integration/cpp/fashion_mnist.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "integration/cpp/idx_reader.h"

namespace terse {

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir,
                                         const std::string& split,
                                         int64_t max_examples) {
  if (split != "train" && split != "t10k") {
    return absl::InvalidArgumentError(
        absl::StrCat("split must be 'train' or 't10k', not '", split, "'"));
  }
  const std::string images_path =
      absl::StrCat(dir, "/", split, "-images-idx3-ubyte.gz");
  const std::string labels_path =
      absl::StrCat(dir, "/", split, "-labels-idx1-ubyte.gz");
  absl::StatusOr<IdxArray> images = ReadIdx(images_path, max_examples);
  if (absl::IsNotFound(images.status())) {
    return absl::NotFoundError(absl::StrCat(
        "Fashion-MNIST not found: ", images.status().message(),
        " (install Debian's dataset-fashion-mnist, or pass its directory)"));
  }
  TERSE_RETURN_IF_ERROR(images.status());
  TERSE_ASSIGN_OR_RETURN(IdxArray labels, ReadIdx(labels_path, max_examples));
  if (images->dims.size() != 3 || images->dims[1] != 28 ||
      images->dims[2] != 28) {
    return absl::DataLossError(
        absl::StrCat(images_path, ": expected N x 28 x 28 images"));
  }
  if (labels.dims.size() != 1 || labels.dims[0] != images->dims[0]) {
    return absl::DataLossError(absl::StrCat(labels_path, ": ", labels.dims[0],
                                            " labels for ", images->dims[0],
                                            " images"));
  }
  Dataset data;
  data.size = images->dims[0];
  data.images.resize(images->data.size());
  for (size_t i = 0; i < images->data.size(); ++i) {
    data.images[i] = images->data[i] / 255.0f;
  }
  data.labels.resize(data.size);
  for (int64_t i = 0; i < data.size; ++i) {
    if (labels.data[i] >= kClasses) {
      return absl::DataLossError(absl::StrCat(labels_path, ": label ",
                                              int{labels.data[i]}, " at index ",
                                              i, " is not a class"));
    }
    data.labels[i] = labels.data[i];
  }
  return data;
}

}  // namespace terse
