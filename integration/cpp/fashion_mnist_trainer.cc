// Data-parallel Fashion-MNIST training of a small MLP through terse's C++
// API (engine/api.h). Run under mpirun, e.g. 4 ranks:
//
//   mpirun -np 4 fashion_mnist_trainer [--data_dir DIR] [--train_examples N]
//       [--test_examples N] [--epochs E] [--batch GLOBAL_BATCH] [--hidden H]
//       [--lr LR] [--seed S] [--verify]
//
// Every step takes one global batch (the same on every rank: a per-epoch
// permutation from the seed); each rank computes the mean-loss gradient of
// its 1/size share and terse averages the gradients (one AllreduceAsync per
// parameter tensor, plus the loss), so the update equals single-process SGD
// on the global batch. Rank 0 prints the loss per epoch and the final test
// accuracy (each rank scores a share of the test set; the counts are
// summed). With --verify, rank 0 then trains the same model alone on the
// same global batches and fails (exit 1) unless parameters and accuracy
// agree within float tolerance. TERSE_* variables configure terse. A missing
// dataset is a clean error (exit 2).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "engine/api.h"
#include "integration/cpp/fashion_mnist.h"
#include "integration/cpp/mlp.h"

namespace terse {
namespace {

struct Options {
  std::string data_dir = kFashionMnistDir;
  int64_t train_examples = 10000;
  int64_t test_examples = 10000;
  int epochs = 5;
  int64_t batch = 128;
  int hidden = 64;
  double lr = 0.1;
  uint64_t seed = 1;
  bool verify = false;
};

absl::StatusOr<Options> ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--verify") {
      o.verify = true;
      continue;
    }
    if (i + 1 >= argc) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    }
    const std::string v = argv[++i];
    bool ok = true;
    if (flag == "--data_dir") {
      o.data_dir = v;
    } else if (flag == "--train_examples") {
      ok = absl::SimpleAtoi(v, &o.train_examples);
    } else if (flag == "--test_examples") {
      ok = absl::SimpleAtoi(v, &o.test_examples);
    } else if (flag == "--epochs") {
      ok = absl::SimpleAtoi(v, &o.epochs);
    } else if (flag == "--batch") {
      ok = absl::SimpleAtoi(v, &o.batch);
    } else if (flag == "--hidden") {
      ok = absl::SimpleAtoi(v, &o.hidden);
    } else if (flag == "--lr") {
      ok = absl::SimpleAtod(v, &o.lr);
    } else if (flag == "--seed") {
      ok = absl::SimpleAtoi(v, &o.seed);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag));
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": bad value '", v, "'"));
    }
  }
  if (o.batch <= 0 || o.epochs < 0 || o.hidden <= 0) {
    return absl::InvalidArgumentError("batch, epochs and hidden must be > 0");
  }
  return o;
}

// Global batch `step` of `epoch`: example indices, the same on every rank.
std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int epoch) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed * 1000003 + epoch);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// Copies examples idx[begin, end) into contiguous buffers.
void Gather(const Dataset& d, const std::vector<int64_t>& idx, int64_t begin,
            int64_t end, std::vector<float>* images,
            std::vector<int32_t>* labels) {
  images->resize((end - begin) * kImagePixels);
  labels->resize(end - begin);
  for (int64_t i = begin; i < end; ++i) {
    std::copy_n(d.images.begin() + idx[i] * kImagePixels, kImagePixels,
                images->begin() + (i - begin) * kImagePixels);
    (*labels)[i - begin] = d.labels[idx[i]];
  }
}

absl::Status AverageOverRanks(Mlp& model, float* loss) {
  std::vector<Handle> handles;
  for (Mlp::Tensor& t : model.tensors()) {
    TensorView v(t.grad.data(), static_cast<int64_t>(t.grad.size()),
                 DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(
        Handle h,
        AllreduceAsync(t.name + ".grad", v, v, t.shape, ReduceOp::kAverage));
    handles.push_back(h);
  }
  TensorView lv(loss, 1, DataType::kFloat32);
  TERSE_ASSIGN_OR_RETURN(
      Handle h, AllreduceAsync("loss", lv, lv, {}, ReduceOp::kAverage));
  handles.push_back(h);
  for (Handle handle : handles) TERSE_RETURN_IF_ERROR(Wait(handle));
  return absl::OkStatus();
}

absl::Status BroadcastParameters(Mlp& model) {
  std::vector<Handle> handles;
  for (Mlp::Tensor& t : model.tensors()) {
    TensorView v(t.value.data(), static_cast<int64_t>(t.value.size()),
                 DataType::kFloat32);
    TERSE_ASSIGN_OR_RETURN(Handle h, BroadcastAsync(t.name, v, t.shape, 0));
    handles.push_back(h);
  }
  for (Handle handle : handles) TERSE_RETURN_IF_ERROR(Wait(handle));
  return absl::OkStatus();
}

// Test accuracy; with `distributed`, each rank scores a share and the
// counts are summed over ranks.
absl::StatusOr<double> Accuracy(const Mlp& model, const Dataset& test, int rank,
                                int size, bool distributed) {
  int64_t begin = 0, end = test.size;
  if (distributed) {
    begin = test.size * rank / size;
    end = test.size * (rank + 1) / size;
  }
  int64_t correct = model.Correct(test.images.data() + begin * kImagePixels,
                                  test.labels.data() + begin, end - begin);
  if (distributed) {
    TensorView v(&correct, 1, DataType::kInt64);
    TERSE_ASSIGN_OR_RETURN(Handle h,
                           AllreduceAsync("correct", v, v, {}, ReduceOp::kSum));
    TERSE_RETURN_IF_ERROR(Wait(h));
  }
  return static_cast<double>(correct) / std::max<int64_t>(test.size, 1);
}

// Trains `model` for o.epochs on the global batches; with `distributed`,
// this rank uses its share of each batch and gradients are averaged.
absl::Status Train(const Options& o, const Dataset& train, Mlp& model, int rank,
                   int size, bool distributed) {
  const int64_t steps = train.size / o.batch;
  const int64_t share = distributed ? o.batch / size : o.batch;
  const int64_t offset = distributed ? share * rank : 0;
  std::vector<float> images;
  std::vector<int32_t> labels;
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    const std::vector<int64_t> order = EpochOrder(train.size, o.seed, epoch);
    double loss_sum = 0;
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t begin = step * o.batch + offset;
      Gather(train, order, begin, begin + share, &images, &labels);
      float loss = model.LossAndGradient(images.data(), labels.data(), share);
      if (distributed) TERSE_RETURN_IF_ERROR(AverageOverRanks(model, &loss));
      model.Step(static_cast<float>(o.lr));
      loss_sum += loss;
    }
    if (rank == 0 && distributed) {
      std::printf("epoch %d: loss %.4f\n", epoch + 1,
                  loss_sum / std::max<int64_t>(steps, 1));
      std::fflush(stdout);
    }
  }
  return absl::OkStatus();
}

absl::Status Verify(const Options& o, const Dataset& train, const Dataset& test,
                    const Mlp& trained, double accuracy) {
  Mlp alone(kImagePixels, o.hidden, kClasses, o.seed);
  TERSE_RETURN_IF_ERROR(Train(o, train, alone, 0, 1, /*distributed=*/false));
  TERSE_ASSIGN_OR_RETURN(double alone_accuracy,
                         Accuracy(alone, test, 0, 1, /*distributed=*/false));
  double max_diff = 0;
  for (size_t t = 0; t < alone.tensors().size(); ++t) {
    const auto& a = alone.tensors()[t].value;
    const auto& b = trained.tensors()[t].value;
    for (size_t i = 0; i < a.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::abs(a[i] - b[i])));
    }
  }
  std::printf(
      "single-rank reference: test accuracy %.4f, max |parameter "
      "difference| %.3g\n",
      alone_accuracy, max_diff);
  const double examples = std::max<int64_t>(test.size, 1);
  if (max_diff > 1e-3 || std::abs(alone_accuracy - accuracy) * examples > 2) {
    return absl::InternalError(absl::StrCat(
        "distributed training differs from single-rank training: accuracy ",
        accuracy, " vs ", alone_accuracy, ", max parameter difference ",
        max_diff));
  }
  std::printf("verified: distributed == single-rank within float tolerance\n");
  return absl::OkStatus();
}

absl::Status Run(const Options& o, int* exit_code) {
  const int rank = *Rank();
  const int size = *Size();
  if (o.batch % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("the global batch ", o.batch,
                                                   " must be a multiple of ",
                                                   size, " ranks"));
  }
  absl::StatusOr<Dataset> train =
      LoadFashionMnist(o.data_dir, "train", o.train_examples);
  absl::StatusOr<Dataset> test =
      LoadFashionMnist(o.data_dir, "t10k", o.test_examples);
  if (!train.ok() || !test.ok()) {
    *exit_code = 2;
    return train.ok() ? test.status() : train.status();
  }
  if (rank == 0) {
    std::printf(
        "fashion_mnist_trainer: %d ranks, %lld train / %lld test examples, "
        "MLP 784-%d-10, global batch %lld, lr %g, %d epochs\n",
        size, static_cast<long long>(train->size),
        static_cast<long long>(test->size), o.hidden,
        static_cast<long long>(o.batch), o.lr, o.epochs);
  }
  Mlp model(kImagePixels, o.hidden, kClasses, o.seed);
  TERSE_RETURN_IF_ERROR(BroadcastParameters(model));
  TERSE_RETURN_IF_ERROR(Train(o, *train, model, rank, size, true));
  TERSE_ASSIGN_OR_RETURN(double accuracy,
                         Accuracy(model, *test, rank, size, true));
  if (rank == 0) std::printf("test accuracy: %.4f\n", accuracy);
  if (o.verify && rank == 0) {
    TERSE_RETURN_IF_ERROR(Verify(o, *train, *test, model, accuracy));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace terse

int main(int argc, char** argv) {
  absl::StatusOr<terse::Options> options = terse::ParseArgs(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "fashion_mnist_trainer: %s\n",
                 options.status().ToString().c_str());
    return 2;
  }
  absl::Status init = terse::InitFromEnvironment();
  if (!init.ok()) {
    std::fprintf(stderr, "fashion_mnist_trainer: %s\n",
                 init.ToString().c_str());
    return 2;
  }
  int exit_code = 1;
  absl::Status status = terse::Run(*options, &exit_code);
  // Every rank reaches the barrier (a failed rank too, unless terse itself
  // failed), so that no rank shuts terse down under the others.
  if (status.ok() || exit_code == 2) terse::Barrier().IgnoreError();
  absl::Status down = terse::Shutdown();
  if (!status.ok()) {
    std::fprintf(stderr, "fashion_mnist_trainer: %s\n",
                 status.ToString().c_str());
    return exit_code;
  }
  if (!down.ok()) {
    std::fprintf(stderr, "fashion_mnist_trainer: %s\n",
                 down.ToString().c_str());
    return 1;
  }
  return 0;
}
