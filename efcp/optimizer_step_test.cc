#include "efcp/optimizer_step.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "efcp/dense_mfac.h"
#include "efcp/oracle_testutil.h"
#include "efcp/state_blob.h"
#include "efcp/validate.h"
#include "gtest/gtest.h"

namespace terse {
namespace efcp {
namespace {

// u = 2 g: isolates the optimizer arithmetic from any preconditioning.
class Doubling final : public Preconditioner {
 public:
  explicit Doubling(int64_t d) : d_(d) {}
  int64_t dim() const override { return d_; }
  absl::Status Step(absl::Span<const float> grad,
                    absl::Span<float> update) override {
    absl::Status s = CheckFiniteVector(grad, d_, "gradient");
    if (!s.ok()) return s;
    for (int64_t i = 0; i < d_; ++i) update[i] = 2 * grad[i];
    ++steps_;
    return absl::OkStatus();
  }
  absl::Status Apply(absl::Span<const float> x,
                     absl::Span<float> out) const override {
    for (int64_t i = 0; i < d_; ++i) out[i] = 2 * x[i];
    return absl::OkStatus();
  }
  int64_t steps() const override { return steps_; }
  MemoryUsage memory() const override { return {}; }
  std::string SaveState() const override {
    BlobWriter writer(name());
    writer.PutI64(steps_);
    return writer.Release();
  }
  absl::Status RestoreState(absl::string_view blob) override {
    absl::StatusOr<BlobReader> reader = BlobReader::Open(blob, name());
    if (!reader.ok()) return reader.status();
    absl::StatusOr<int64_t> steps = reader->GetI64();
    if (!steps.ok()) return steps.status();
    steps_ = *steps;
    return absl::OkStatus();
  }
  absl::string_view name() const override { return "doubling"; }

 private:
  int64_t d_;
  int64_t steps_ = 0;
};

// torch.optim.SGD with decoupled weight decay, in double.
struct SgdReference {
  OptimizerStepOptions options;
  std::vector<double> buf;
  void Step(std::vector<double>* w, const std::vector<double>& u_in) {
    std::vector<double> u = u_in;
    if (options.momentum > 0) {
      if (buf.empty()) {
        buf = u;
      } else {
        for (size_t i = 0; i < u.size(); ++i) {
          buf[i] = options.momentum * buf[i] + (1 - options.dampening) * u[i];
        }
      }
      for (size_t i = 0; i < u.size(); ++i) {
        u[i] = options.nesterov ? u[i] + options.momentum * buf[i] : buf[i];
      }
    }
    const double decay = options.weight_decay_mode == WeightDecayMode::kLrScaled
                             ? 1 - options.lr * options.weight_decay
                             : 1 - options.weight_decay;
    for (size_t i = 0; i < u.size(); ++i) {
      (*w)[i] = decay * (*w)[i] - options.lr * u[i];
    }
  }
};

TEST(OptimizerStepTest, MatchesSgdReference) {
  const int64_t d = 33;
  std::vector<OptimizerStepOptions> cases(6);
  cases[0].lr = 0.1;
  cases[1].lr = 0.1, cases[1].momentum = 0.9;
  cases[2].lr = 0.05, cases[2].momentum = 0.8, cases[2].dampening = 0.3;
  cases[3].lr = 0.05, cases[3].momentum = 0.7, cases[3].nesterov = true;
  cases[4].lr = 0.1, cases[4].weight_decay = 0.5;  // (1 - lr*wd) = 0.95
  cases[5].lr = 0.1, cases[5].weight_decay = 0.01, cases[5].momentum = 0.5;
  cases[5].weight_decay_mode = WeightDecayMode::kUnscaled;  // (1 - wd)
  for (size_t c = 0; c < cases.size(); ++c) {
    std::mt19937 rng(60 + c);
    auto opt = *PreconditionedOptimizer::Create(std::make_unique<Doubling>(d),
                                                cases[c]);
    SgdReference reference{cases[c], {}};
    std::vector<float> w = RandomVector(d, &rng);
    std::vector<double> w_ref = ToDouble(w);
    for (int step = 0; step < 6; ++step) {
      const std::vector<float> g = RandomVector(d, &rng);
      ASSERT_TRUE(opt->Step(absl::MakeSpan(w), g).ok());
      std::vector<double> u(d);
      for (int64_t i = 0; i < d; ++i) u[i] = 2.0 * g[i];
      reference.Step(&w_ref, u);
    }
    EXPECT_LT(RelativeError(w, w_ref), 1e-6) << "case " << c;
    EXPECT_EQ(opt->steps(), 6);
  }
}

TEST(OptimizerStepTest, WeightDecayConventions) {
  OptimizerStepOptions options;
  options.lr = 0.5;
  options.weight_decay = 0.1;
  std::vector<float> w = {10.0f}, direction = {0.0f};
  ApplyDecayAndUpdate(options, direction.data(), 1, w.data());
  EXPECT_FLOAT_EQ(w[0], 10.0f * (1 - 0.5 * 0.1));
  options.weight_decay_mode = WeightDecayMode::kUnscaled;
  w = {10.0f};
  ApplyDecayAndUpdate(options, direction.data(), 1, w.data());
  EXPECT_FLOAT_EQ(w[0], 10.0f * (1 - 0.1));
}

TEST(OptimizerStepTest, RejectsBadOptions) {
  auto bad = [](auto edit) {
    OptimizerStepOptions options;
    edit(&options);
    return !ValidateOptimizerStepOptions(options).ok();
  };
  EXPECT_TRUE(bad([](auto* o) { o->lr = -1; }));
  EXPECT_TRUE(bad([](auto* o) { o->lr = std::nan(""); }));
  EXPECT_TRUE(bad([](auto* o) { o->momentum = 1.0; }));
  EXPECT_TRUE(bad([](auto* o) { o->dampening = 1.5; }));
  EXPECT_TRUE(bad([](auto* o) { o->nesterov = true; }));  // no momentum
  EXPECT_TRUE(bad([](auto* o) { o->weight_decay = -0.1; }));
  EXPECT_TRUE(bad([](auto* o) {
    o->weight_decay = 2;
    o->weight_decay_mode = WeightDecayMode::kUnscaled;
  }));
  EXPECT_TRUE(bad(
      [](auto* o) { o->weight_decay_mode = static_cast<WeightDecayMode>(5); }));
  EXPECT_FALSE(bad([](auto* o) {
    o->momentum = 0.9;
    o->nesterov = true;
  }));
  EXPECT_FALSE(PreconditionedOptimizer::Create(nullptr, {}).ok());
}

TEST(OptimizerStepTest, BadGradientChangesNothing) {
  OptimizerStepOptions options;
  options.lr = 0.1;
  options.momentum = 0.9;
  auto opt =
      *PreconditionedOptimizer::Create(std::make_unique<Doubling>(4), options);
  std::vector<float> w = {1, 2, 3, 4};
  ASSERT_TRUE(
      opt->Step(absl::MakeSpan(w), std::vector<float>{1, 1, 1, 1}).ok());
  const std::vector<float> w_before = w;
  const std::string state = opt->SaveState();
  std::vector<float> g = {1, std::numeric_limits<float>::quiet_NaN(), 1, 1};
  EXPECT_EQ(opt->Step(absl::MakeSpan(w), g).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> short_w = {1, 2};
  EXPECT_FALSE(
      opt->Step(absl::MakeSpan(short_w), std::vector<float>{1, 1, 1, 1}).ok());
  EXPECT_EQ(w, w_before);
  EXPECT_EQ(opt->SaveState(), state);
}

// Save/restore around a real preconditioner: both copies continue alike.
TEST(OptimizerStepTest, SaveRestoreWithDenseMfac) {
  const int64_t d = 40;
  DenseMfacOptions mfac;
  mfac.dim = d;
  mfac.window = 4;
  mfac.damp = 0.1;
  OptimizerStepOptions options;
  options.lr = 0.01;
  options.momentum = 0.9;
  options.weight_decay = 0.1;
  std::mt19937 rng(61);
  auto a = *PreconditionedOptimizer::Create(*DenseMfac::Create(mfac), options);
  std::vector<float> wa = RandomVector(d, &rng);
  for (int step = 0; step < 6; ++step) {
    ASSERT_TRUE(a->Step(absl::MakeSpan(wa), RandomVector(d, &rng)).ok());
  }
  auto b = *PreconditionedOptimizer::Create(*DenseMfac::Create(mfac), options);
  const std::string saved = a->SaveState();
  for (size_t cut = 0; cut < saved.size(); cut += 11) {
    EXPECT_FALSE(b->RestoreState(saved.substr(0, cut)).ok());
  }
  EXPECT_EQ(b->steps(), 0);
  EXPECT_EQ(b->preconditioner().steps(), 0);
  ASSERT_TRUE(b->RestoreState(saved).ok());
  EXPECT_EQ(b->steps(), 6);
  EXPECT_EQ(b->preconditioner().steps(), 6);
  std::vector<float> wb = wa;
  for (int step = 0; step < 5; ++step) {
    const std::vector<float> g = RandomVector(d, &rng);
    ASSERT_TRUE(a->Step(absl::MakeSpan(wa), g).ok());
    ASSERT_TRUE(b->Step(absl::MakeSpan(wb), g).ok());
  }
  EXPECT_LT(RelativeError(wb, ToDouble(wa)), 1e-6);
  EXPECT_EQ(a->memory().scratch, 2 * d * 4);  // update + momentum buffers
  EXPECT_EQ(a->memory().window, 4 * d * 4);

  OptimizerStepOptions lower = options;
  lower.lr = 0.001;
  EXPECT_TRUE(a->SetOptions(lower).ok());
  lower.lr = -1;
  EXPECT_FALSE(a->SetOptions(lower).ok());
  EXPECT_EQ(a->options().lr, 0.001);
}

}  // namespace
}  // namespace efcp
}  // namespace terse
