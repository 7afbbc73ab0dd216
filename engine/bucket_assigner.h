// BucketAssigner: which allreduce tensors are fused together, decided once
// and then kept, and when a bucket is ready to run.
//
// Assignment (identical on every rank because it only consumes the
// negotiated responses, which every rank receives in the same order): the
// first time a tensor is ready on every rank it is appended to the bucket
// most recently opened in the same negotiation cycle with the same key
// (dtype, device kind, reduce op, prescale, postscale, the per-call
// compression spec, the op group of a grouped allreduce, group -- the
// effective compression policy) if that bucket
// stays within the fusion threshold; otherwise it opens a new bucket (next fit,
// so a bucket's members are consecutive in negotiated order among tensors of
// that key). A tensor of at least `solo_bytes` that the solo filter allows (the
// engine allows dense and GraVAC ones: process_set_runner.cc) gets a bucket of
// its own and leaves the open bucket open: copying a large tensor into a fusion
// buffer costs more than the one extra collective it saves, and alone it is
// reduced in place. From then on the bucket keeps its members and order, so
// per-bucket state (fusion buffer, compressor state) survives across steps, and
// a bucket runs once every member is ready on every rank.
//
// Exceptions, all driven by negotiated events and so identical everywhere:
// a tensor whose parameters change, or that fails (ERROR response), leaves
// its bucket; a bucket that stays partially ready for `stuck_limit`
// consecutive cycles is split so its ready members run on their own (a
// tensor that was submitted together with others once and never again must
// not block them forever).
//
// Forgetting (bounded state): a tensor name that has not been ready for
// `forget_after_steps` steps leaves its bucket (an emptied bucket is
// deleted and reported by TakeChanged, so its fusion buffer and compressor
// state go) and is reported by TakeForgotten, so per-name state elsewhere
// (error-feedback residuals, velocities) can be dropped; if it comes back it
// starts afresh, as a tensor seen for the first time. Steps are counted from
// the negotiated responses alone (so every rank forgets the same names at
// the same point): a step ends when a name that was already ready since the
// last step that a repeat ended is ready again (a training loop reduces each
// gradient once per step), or, when no name repeats (every op under a fresh
// name), once it has seen more distinct names than max(kMinStepNames, twice
// the distinct names between the last two repeats). So at most about
// (forget_after_steps + 1) times that many names are tracked, whatever the
// workload. Until the first repeat the step's length is unknown, so steps of
// kMinStepNames names are counted: a loop of more than about
// forget_after_steps * kMinStepNames tensors forgets its first names before
// they come back. A forgotten name that comes back (one of the last
// kRecentlyForgotten forgotten) doubles the length of a step of fresh
// names, so such a loop loses the state of its earliest names in its first
// few passes, and then steps as a small loop does; a workload whose names
// never come back keeps the bound above.
//
// Not thread-safe; used by the engine's background thread only.
#ifndef TERSE_ENGINE_BUCKET_ASSIGNER_H_
#define TERSE_ENGINE_BUCKET_ASSIGNER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "collectives/communicator.h"
#include "common/control.pb.h"
#include "common/data_type.h"

namespace terse {

struct BucketMember {
  std::string name;
  int64_t count = 0;  // Elements.
  // The tensor's shape as negotiated (its product is count); layer-wise
  // compressors (PowerSGD) read each member as a matrix of this shape.
  std::vector<int64_t> shape;
};

struct Bucket {
  int id = 0;
  DataType dtype = DataType::kFloat32;
  bool cuda = false;        // On a device (any non-CPU kind).
  int32_t device_kind = 0;  // terse::Device::Kind; part of the key.
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  // The members' per-call compression spec (Response.compression; empty:
  // the engine's policy). Part of the key: members all share it.
  std::string compression;
  std::string group;  // See BucketAssigner's group function.
  // Grouped ops (Response.group): the group's members fuse only together.
  std::string op_group;
  std::vector<BucketMember> members;
  int64_t count = 0;  // Sum of member counts.
  int64_t bytes = 0;

  // Readiness in the current round.
  std::vector<bool> ready;
  int ready_count = 0;
  int64_t stuck_cycles = 0;

  bool complete() const {
    return ready_count == static_cast<int>(members.size());
  }
};

class BucketAssigner {
 public:
  // `group` maps a tensor name and its per-call compression spec (empty:
  // none given) to its group; tensors of different groups never share a
  // bucket. It must be deterministic and the same on every rank. Null: one
  // group.
  using GroupFunction =
      std::function<std::string(const std::string&, const std::string&)>;
  // Whether a tensor (name, compression spec) may get a bucket of its own
  // for its size (e.g. only uncompressed ones: a compressed bucket copies
  // anyway). Null: all may.
  using SoloFilter =
      std::function<bool(const std::string&, const std::string&)>;
  // `solo_bytes` <= 0: no tensor is put alone because of its size alone
  // (it still is when larger than the threshold). `forget_after_steps` <= 0:
  // names are never forgotten.
  BucketAssigner(int64_t threshold_bytes, int64_t solo_bytes,
                 GroupFunction group = nullptr, SoloFilter solo = nullptr,
                 int64_t forget_after_steps = 0);

  // A step that no repeated name ends is ended after this many distinct
  // names at least (see Forgetting above); twice as many each time a name
  // forgotten among the last kRecentlyForgotten comes back, up to
  // kMaxFreshStepNames.
  static constexpr int64_t kMinStepNames = 16;
  static constexpr size_t kRecentlyForgotten = 4096;
  static constexpr int64_t kMaxFreshStepNames = int64_t{1} << 20;

  // One cycle's EXECUTE allreduce responses, in negotiated order: advances
  // the step count and forgets stale names (see Forgetting above), assigns
  // the tensors seen for the first time (or with changed parameters), then
  // marks every one ready. Returns the buckets that became complete (also
  // those whose last unready members were forgotten), in the order they
  // completed.
  std::vector<int> OnReady(const std::vector<const proto::Response*>& ready);

  // The tensor failed: it leaves its bucket. Returns the bucket id if the
  // remaining members are now all ready (else nothing).
  std::vector<int> Remove(const std::string& name);

  // End of a cycle: counts the cycles each bucket stays partially ready and
  // splits those stuck for `stuck_limit` cycles; returns the new buckets of
  // ready members (complete).
  std::vector<int> Tick(int64_t stuck_limit);

  // After a complete bucket ran: clears its readiness for the next round.
  void Reset(int id);

  // Ids of buckets whose membership changed (or that were deleted) since the
  // last call, so per-bucket state elsewhere can be dropped.
  std::vector<int> TakeChanged();

  // Names forgotten (see Forgetting above) since the last call.
  std::vector<std::string> TakeForgotten();

  // Autotune (engine/autotune.h): from now on buckets hold up to
  // `threshold_bytes`, and every bucket is dropped (reported by TakeChanged)
  // so each tensor is assigned afresh the next time it is ready. Refused
  // (false, nothing changed) while some bucket holds ready members.
  bool Regroup(int64_t threshold_bytes);

  // Names tracked now (members of some bucket).
  int64_t num_names() const { return static_cast<int64_t>(places_.size()); }
  // Steps counted so far (see Forgetting above).
  int64_t steps() const { return step_; }

  bool exists(int id) const { return buckets_.count(id) > 0; }
  const Bucket& bucket(int id) const { return buckets_.at(id); }
  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // The bucket of `name`, or -1.
  int BucketOf(const std::string& name) const;

 private:
  struct Place {
    int bucket;
    int index;
  };
  struct Seen {
    int64_t step = 0;  // The last step the name was ready in.
  };

  bool SameKey(const Bucket& b, const proto::Response& r) const;
  int NewBucket(const proto::Response& r);
  void Reindex(const Bucket& b);
  // Removes member `index` of bucket `id`; deletes the bucket when empty.
  void Erase(int id, int index);
  // Marks `name` ready; true if its bucket just became complete.
  bool MarkReady(const std::string& name);

  std::string GroupOf(const std::string& name,
                      const std::string& compression) const;

  // Counts `name` ready in the current step, ending the step first if it
  // already was (or the step is full); forgets stale names at a step's end,
  // appending buckets that became complete by it to `completed`.
  void CountStep(const std::string& name, std::vector<int>* completed);
  void EndStep(std::vector<int>* completed);

  int64_t threshold_;
  const int64_t solo_bytes_;
  const GroupFunction group_;
  const SoloFilter solo_filter_;
  int next_id_ = 0;
  std::map<int, Bucket> buckets_;
  absl::flat_hash_map<std::string, Place> places_;
  std::vector<int> changed_;

  const int64_t forget_after_;
  int64_t step_ = 0;
  // Distinct names ready in the current step, and in the last run of steps
  // that a repeated name ended.
  int64_t step_names_ = 0;
  int64_t working_set_ = 0;
  // The current run: steps since the last one a repeated name ended (steps
  // ended by the fresh-name rule do not end a run), and its names. A name
  // ready twice within a run ends the run and the step.
  int64_t run_start_ = 0;
  int64_t run_names_ = 0;
  // The length of a step of fresh names (kMinStepNames, doubled by each
  // return of a recently forgotten name), and the last kRecentlyForgotten
  // names forgotten, oldest first.
  int64_t fresh_step_names_ = kMinStepNames;
  absl::flat_hash_set<std::string> recently_forgotten_;
  std::deque<std::string> recent_order_;
  absl::flat_hash_map<std::string, Seen> seen_;
  std::vector<std::string> forgotten_;
};

}  // namespace terse

#endif  // TERSE_ENGINE_BUCKET_ASSIGNER_H_
