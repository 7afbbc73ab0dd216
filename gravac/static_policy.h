// StaticPolicy: one compressor at one fixed CF, every step (the baseline of
// TERSE_COMPRESSION=<compressor>, and dense for "none").
#ifndef TERSE_GRAVAC_STATIC_POLICY_H_
#define TERSE_GRAVAC_STATIC_POLICY_H_

#include <string>

#include "gravac/policy.h"

namespace terse {
namespace gravac {

class StaticPolicy : public Policy {
 public:
  // `cf` is ignored by compressors that have no CF (none, fp16, ...): for
  // those the decision's send_cf is what the compressor itself achieves and
  // the engine asks the compressor, not the policy.
  StaticPolicy(std::string compressor, double cf);

  Decision Decide() override;
  void Observe(const Decision& taken, const StepStats& stats) override;
  std::string Describe() const override;
  void SaveState(proto::PolicyState* state) const override;
  absl::Status RestoreState(const proto::PolicyState& state) override;

 private:
  const std::string compressor_;
  const double cf_;
  int64_t step_ = 0;
};

}  // namespace gravac
}  // namespace terse

#endif  // TERSE_GRAVAC_STATIC_POLICY_H_
