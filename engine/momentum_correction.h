// MomentumCorrection: DGC's momentum correction and momentum factor masking
// (Lin et al., "Deep Gradient Compression", ICLR 2018, §3.2), per tensor.
//
// Top-k with error feedback under an optimizer's momentum applies momentum
// to an update that is already delayed by the residual, and the two
// interact badly at high compression factors. With momentum correction the
// engine applies the momentum itself, before compression, and the wrapped
// optimizer runs without momentum:
//
//   u = m * u + g                 Accumulate (g is replaced by u)
//   a = u + residual; send what the compressor picks; residual = a - sent
//   u[i] = 0 where entry i was sent (MaskSent; sparsifiers only)
//
// A dense send keeps u whole, so a bucket that never compresses sums
// sum_ranks u_r, which divided by the ranks is exactly the velocity of
// torch.optim.SGD(momentum=m, dampening=0) over the averaged gradient.
//
// Velocities are kept per tensor segment, keyed like ResidualStore's
// residuals (name, tensor_offset, count), and only for tensors named as
// terse's gradient wrappers name gradients ("grad.", "tape.grad.",
// "keras.grad."): other float sums (a loss or metric averaged over ranks)
// pass through untouched.
//
// The velocities live in a ResidualStore (thread-safe like it).
#ifndef TERSE_ENGINE_MOMENTUM_CORRECTION_H_
#define TERSE_ENGINE_MOMENTUM_CORRECTION_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compressors/compressor.h"
#include "compressors/residual_store.h"

namespace terse {

class MomentumCorrection {
 public:
  // momentum in [0, 1); 0 turns every call into a no-op.
  explicit MomentumCorrection(double momentum) : momentum_(momentum) {}

  bool enabled() const { return momentum_ > 0; }
  // Whether the segment named `name` carries a velocity (see above).
  static bool Applies(absl::string_view name);
  // Whether compressor `name` sends a subset of entries (masking applies).
  static bool IsSparsifier(absl::string_view name);

  // For every segment that Applies: u = m * u + g over the segment's range
  // of `g`, then g = u.
  void Accumulate(absl::Span<float> g, const std::vector<Segment>& segments);
  // For every segment that Applies: u[i] = 0 where sent[i] != 0.
  void MaskSent(absl::Span<const float> sent,
                const std::vector<Segment>& segments);

  // Checkpointing, in ResidualStore's entry format. Import replaces all.
  std::vector<ResidualStore::Entry> Export() const {
    return velocities_.Export();
  }
  void Import(std::vector<ResidualStore::Entry> entries) {
    velocities_.Import(std::move(entries));
  }
  // ResidualStore::WithEntries of the velocities.
  absl::Status WithEntries(
      absl::FunctionRef<
          absl::Status(const std::vector<const ResidualStore::Entry*>&)>
          fn) const {
    return velocities_.WithEntries(fn);
  }
  int64_t size() const { return velocities_.size(); }
  // ResidualStore::EraseNames of the velocities.
  int64_t EraseNames(const std::vector<std::string>& names) {
    return velocities_.EraseNames(names);
  }

 private:
  // The segments that Apply.
  static std::vector<Segment> Gradients(const std::vector<Segment>& segments);

  const double momentum_;
  ResidualStore velocities_;
};

}  // namespace terse

#endif  // TERSE_ENGINE_MOMENTUM_CORRECTION_H_
