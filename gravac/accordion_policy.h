// AccordionPolicy: the Accordion baseline (Agarwal et al., MLSys 2021) per
// bucket.
//
// Every `switch_steps` steps it compares the norm of the gradient accumulated
// over the period that just ended with the same norm one period earlier: a
// relative change below `threshold` means the bucket is not in a critical
// regime and gets the weak setting; otherwise (and before two periods exist)
// it gets the strong one. Right after a learning-rate drop the strong setting
// is used for the next period. The engine keeps the accumulated gradient and
// is told to restart it by Decision::reset_accumulator on a period's last
// step.
//
// Two variants, by `compressor`:
//   - "powersgd" (as Accordion's paper runs it): PowerSGD's rank switches,
//     high_rank in critical regimes, low_rank otherwise. Decisions carry
//     compressor "powersgd", level = the rank and send_cf = 1 (a decision
//     with a level is never dense; PowerSGD's CF depends on the tensors'
//     shapes, which the policy does not know).
//   - a sparsifier (topk, dgc, redsync, randomk): its CF switches, low_cf in
//     critical regimes, high_cf otherwise (low_cf <= 1 sends dense).
#ifndef TERSE_GRAVAC_ACCORDION_POLICY_H_
#define TERSE_GRAVAC_ACCORDION_POLICY_H_

#include <string>

#include "gravac/policy.h"

namespace terse {
namespace gravac {

struct AccordionOptions {
  std::string compressor = "topk";
  // Sparsifiers: CF in critical regimes (low) and outside them (high).
  double low_cf = 10;
  double high_cf = 1000;
  // PowerSGD: rank in critical regimes (high) and outside them (low).
  int64_t high_rank = 4;
  int64_t low_rank = 1;
  int64_t switch_steps = 500;
  double threshold = 0.5;
};

class AccordionPolicy : public Policy {
 public:
  explicit AccordionPolicy(const AccordionOptions& options);

  Decision Decide() override;
  void Observe(const Decision& taken, const StepStats& stats) override;
  void OnLearningRateDrop() override;
  std::string Describe() const override;
  void SaveState(proto::PolicyState* state) const override;
  absl::Status RestoreState(const proto::PolicyState& state) override;

  bool critical() const { return critical_; }
  // The PowerSGD variant (compressor "powersgd") switches ranks.
  bool switches_rank() const { return options_.compressor == "powersgd"; }

 private:
  const AccordionOptions options_;
  int64_t step_ = 0;
  double previous_norm_ = 0;
  bool has_previous_ = false;
  bool critical_ = true;
};

}  // namespace gravac
}  // namespace terse

#endif  // TERSE_GRAVAC_ACCORDION_POLICY_H_
