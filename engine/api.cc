#include "engine/api.h"

#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "collectives/registry.h"
#include "common/logging.h"
#include "common/status.h"
#include "engine/engine.h"

namespace terse {
namespace {

// The process-wide instance. Callers take a reference to the engine under
// the mutex and use it outside, so a blocking Wait never holds the mutex;
// Shutdown drops the instance's references and stops the engine, and the
// last caller holding a reference destroys it.
struct Instance {
  absl::Mutex mu;
  std::shared_ptr<Engine> engine ABSL_GUARDED_BY(mu);
};

Instance& TheInstance() {
  static Instance* instance = new Instance();  // Never destroyed.
  return *instance;
}

absl::Status NotInitialized() {
  return absl::FailedPreconditionError(
      "terse is not initialised; call init() first");
}

absl::StatusOr<std::shared_ptr<Engine>> Current() {
  Instance& instance = TheInstance();
  absl::MutexLock lock(&instance.mu);
  if (instance.engine == nullptr) return NotInitialized();
  return instance.engine;
}

}  // namespace

absl::Status Init(const Config& config,
                  const std::vector<std::vector<int>>& process_sets,
                  const WorldOptions& world) {
  Instance& instance = TheInstance();
  absl::MutexLock lock(&instance.mu);
  if (instance.engine != nullptr) {
    return absl::FailedPreconditionError("terse is already initialised");
  }
  absl::StatusOr<LogLevel> level = ParseLogLevel(config.log_level);
  if (level.ok()) SetLogLevel(*level);
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<CommunicatorRegistry> registry,
                         CommunicatorRegistry::Create(config, world));
  SetLogRank(registry->control()->rank());
  EngineOptions options;
  options.process_sets = process_sets;
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                         Engine::Create(config, registry.get(), options));
  if (engine->rank() == 0) {
    TERSE_LOG(Debug) << "terse initialised on " << engine->size() << " ranks:\n"
                     << config.Describe();
  }
  // The engine uses the registry: the engine's deleter keeps the registry
  // alive until the engine is gone.
  std::shared_ptr<CommunicatorRegistry> shared_registry(std::move(registry));
  instance.engine = std::shared_ptr<Engine>(
      engine.release(), [shared_registry](Engine* e) { delete e; });
  return absl::OkStatus();
}

absl::Status InitFromEnvironment() {
  TERSE_ASSIGN_OR_RETURN(Config config, Config::FromEnvironment());
  return Init(config, {});
}

absl::Status Shutdown() {
  std::shared_ptr<Engine> engine;
  {
    Instance& instance = TheInstance();
    absl::MutexLock lock(&instance.mu);
    engine = std::move(instance.engine);
    instance.engine = nullptr;
  }
  if (engine == nullptr) return absl::OkStatus();
  return engine->Shutdown();
}

bool IsInitialized() {
  Instance& instance = TheInstance();
  absl::MutexLock lock(&instance.mu);
  return instance.engine != nullptr;
}

absl::Status FatalStatus() {
  std::shared_ptr<Engine> engine;
  {
    Instance& instance = TheInstance();
    absl::MutexLock lock(&instance.mu);
    engine = instance.engine;
  }
  return engine == nullptr ? absl::OkStatus() : engine->fatal_status();
}

absl::StatusOr<int> Rank() {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->rank();
}

absl::StatusOr<int> Size() {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->size();
}

absl::StatusOr<int> LocalRank() {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->local_rank();
}

absl::StatusOr<int> LocalSize() {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->local_size();
}

absl::StatusOr<Handle> AllreduceAsync(
    const std::string& name, TensorView in, TensorView out,
    const std::vector<int64_t>& shape, ReduceOp op, double prescale,
    double postscale, DoneCallback callback, const std::string& compression,
    std::shared_ptr<Event> ready, int32_t process_set) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->AllreduceAsync(name, in, out, shape, op, prescale, postscale,
                           std::move(callback), compression, std::move(ready),
                           process_set);
}

absl::StatusOr<Handle> AllgatherAsync(const std::string& name, TensorView in,
                                      const std::vector<int64_t>& shape,
                                      DoneCallback callback,
                                      std::shared_ptr<Event> ready,
                                      int32_t process_set) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->AllgatherAsync(name, in, shape, std::move(callback),
                           std::move(ready), process_set);
}

absl::StatusOr<Handle> AlltoallAsync(const std::string& name, TensorView in,
                                     const std::vector<int64_t>& shape,
                                     const std::vector<int64_t>& splits,
                                     DoneCallback callback,
                                     int32_t process_set) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->AlltoallAsync(name, in, shape, splits, std::move(callback),
                          process_set);
}

absl::StatusOr<Handle> ReducescatterAsync(
    const std::string& name, TensorView in, const std::vector<int64_t>& shape,
    ReduceOp op, double prescale, double postscale, DoneCallback callback,
    int32_t process_set) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->ReducescatterAsync(name, in, shape, op, prescale, postscale,
                               std::move(callback), process_set);
}

absl::StatusOr<Handle> BroadcastAsync(const std::string& name,
                                      TensorView buffer,
                                      const std::vector<int64_t>& shape,
                                      int root_rank, DoneCallback callback,
                                      std::shared_ptr<Event> ready,
                                      int32_t process_set) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->BroadcastAsync(name, buffer, shape, root_rank, std::move(callback),
                           std::move(ready), process_set);
}

absl::StatusOr<bool> Poll(Handle handle) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->Poll(handle);
}

absl::Status Wait(Handle handle) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->Wait(handle);
}

absl::StatusOr<std::shared_ptr<Event>> WaitIssued(Handle handle) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->WaitIssued(handle);
}

absl::StatusOr<AllgatherResult> TakeAllgatherResult(Handle handle) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->TakeAllgatherResult(handle);
}

absl::StatusOr<AllgatherResult> TakeAlltoallResult(Handle handle) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->TakeAlltoallResult(handle);
}

absl::StatusOr<AllgatherResult> TakeReducescatterResult(Handle handle) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->TakeReducescatterResult(handle);
}

absl::Status GroupStart(const std::string& name) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->GroupStart(name);
}

absl::Status GroupEnd() {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->GroupEnd();
}

absl::Status Barrier(int32_t process_set) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->Barrier(process_set);
}

absl::StatusOr<int32_t> AddProcessSet(const std::vector<int>& ranks) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->AddProcessSet(ranks);
}

absl::Status RemoveProcessSet(int32_t id) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->RemoveProcessSet(id);
}

absl::StatusOr<std::vector<int>> ProcessSetRanks(int32_t id) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->ProcessSetRanks(id);
}

absl::StatusOr<std::vector<int32_t>> ProcessSetIds() {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->ProcessSetIds();
}

absl::StatusOr<int> Join() {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> e, Current());
  return e->Join();
}

absl::StatusOr<std::vector<BucketReport>> BucketReports() {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> engine, Current());
  return engine->BucketReports();
}

absl::StatusOr<int64_t> BytesSent() {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> engine, Current());
  return engine->BytesSent();
}

absl::Status NotifyLearningRateDrop() {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> engine, Current());
  engine->NotifyLearningRateDrop();
  return absl::OkStatus();
}

absl::Status StartTimeline(const std::string& path) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> engine, Current());
  return engine->StartTimeline(path);
}

absl::Status StopTimeline() {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> engine, Current());
  return engine->StopTimeline();
}

absl::StatusOr<std::string> SaveCompressionState() {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> engine, Current());
  return engine->SaveCompressionState();
}

absl::Status LoadCompressionState(const std::string& state) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> engine, Current());
  return engine->LoadCompressionState(state);
}

absl::Status SaveCompressionStateToFile(const std::string& path) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> engine, Current());
  return engine->SaveCompressionStateToFile(path);
}

absl::Status LoadCompressionStateFromFile(const std::string& path) {
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Engine> engine, Current());
  return engine->LoadCompressionStateFromFile(path);
}

}  // namespace terse
