#include "engine/device_scenarios.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/status.h"
#include "engine/device_scenarios_internal.h"

namespace terse {
namespace testing {
namespace device_scenarios_internal {

absl::StatusOr<RankDevice> MakeDevice(SimRuntime* sim, const Engine& engine) {
  RankDevice d;
  d.sim = sim;
  d.ordinal = engine.local_rank();
  TERSE_ASSIGN_OR_RETURN(
      d.producer,
      sim->CreateSimStream(d.ordinal, std::chrono::milliseconds(2)));
  // The consumer is prompt, so that reading a result before the engine's
  // (late) stream wrote it is visible.
  TERSE_ASSIGN_OR_RETURN(
      d.consumer,
      sim->CreateSimStream(d.ordinal, std::chrono::microseconds(0)));
  return d;
}

namespace {

// Host bytes of `values` in `dtype` (small integers: exact in every type).
std::vector<uint8_t> Encode(DataType dtype, const std::vector<double>& values) {
  const size_t elem = DataTypeSize(dtype);
  std::vector<uint8_t> out(values.size() * elem);
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t* p = out.data() + i * elem;
    const double v = values[i];
    switch (dtype) {
      case DataType::kFloat32: {
        float f = static_cast<float>(v);
        std::memcpy(p, &f, 4);
        break;
      }
      case DataType::kFloat64:
        std::memcpy(p, &v, 8);
        break;
      case DataType::kFloat16: {
        uint16_t h = FloatToHalf(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kBFloat16: {
        uint16_t h = FloatToBFloat16(static_cast<float>(v));
        std::memcpy(p, &h, 2);
        break;
      }
      case DataType::kInt32: {
        int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::kInt64: {
        int64_t x = static_cast<int64_t>(v);
        std::memcpy(p, &x, 8);
        break;
      }
      default:
        break;
    }
  }
  return out;
}

double Decode(DataType dtype, const uint8_t* p) {
  switch (dtype) {
    case DataType::kFloat32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DataType::kFloat64: {
      double d;
      std::memcpy(&d, p, 8);
      return d;
    }
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return HalfToFloat(h);
    }
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return BFloat16ToFloat(h);
    }
    case DataType::kInt32: {
      int32_t x;
      std::memcpy(&x, p, 4);
      return x;
    }
    case DataType::kInt64: {
      int64_t x;
      std::memcpy(&x, p, 8);
      return static_cast<double>(x);
    }
    default:
      return NAN;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Uploaded>> Upload(RankDevice& d, DataType dtype,
                                                 const std::vector<double>& v) {
  auto u = std::make_unique<Uploaded>();
  u->host = Encode(dtype, v);
  TERSE_ASSIGN_OR_RETURN(
      u->buffer, DeviceBuffer::Allocate(d.sim, d.ordinal,
                                        static_cast<int64_t>(u->host.size())));
  // Stale contents, so that reading before the copy is visibly wrong.
  std::memset(u->buffer.data(), 0x7f, u->host.size());
  TERSE_RETURN_IF_ERROR(d.producer->Memcpy(
      u->buffer.data(), u->host.data(), static_cast<int64_t>(u->host.size())));
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Event> ready,
                         d.sim->CreateEvent(d.ordinal));
  TERSE_RETURN_IF_ERROR(d.producer->Record(ready.get()));
  u->ready = std::move(ready);
  u->view = TensorView(u->buffer.data(), static_cast<int64_t>(v.size()), dtype,
                       Device::Sim(d.ordinal));
  return u;
}

// The consumer's view of `u` after the op's completion event: the consumer
// stream waits on `done` (device side) and copies the result out.
absl::StatusOr<std::vector<double>> Download(RankDevice& d, Event* done,
                                             const Uploaded& u) {
  std::vector<uint8_t> bytes(u.host.size());
  if (done != nullptr) TERSE_RETURN_IF_ERROR(d.consumer->WaitEvent(done));
  TERSE_RETURN_IF_ERROR(d.consumer->Memcpy(bytes.data(), u.buffer.data(),
                                           static_cast<int64_t>(bytes.size())));
  TERSE_RETURN_IF_ERROR(d.consumer->Synchronize());
  const size_t elem = DataTypeSize(u.view.dtype);
  std::vector<double> out(bytes.size() / elem);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = Decode(u.view.dtype, bytes.data() + i * elem);
  }
  return out;
}

}  // namespace device_scenarios_internal

namespace {
using namespace device_scenarios_internal;  // NOLINT: this file's helpers.

double Value(int rank, int t, int64_t i) {
  return static_cast<double>((rank + 1) * ((t + i) % 4 + 1));
}

// Every dtype the backends reduce, sum / average / max, several steps (the
// second on cached responses): results through the consumer stream.
absl::Status AllreduceDtypes(SimRuntime* sim, int rank, Engine& engine) {
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  const std::vector<DataType> dtypes = {DataType::kFloat32, DataType::kFloat64,
                                        DataType::kFloat16, DataType::kBFloat16,
                                        DataType::kInt32,   DataType::kInt64};
  const int n = engine.size();
  for (int step = 0; step < 2; ++step) {
    std::vector<std::unique_ptr<Uploaded>> ups;
    std::vector<Handle> handles;
    std::vector<ReduceOp> ops;
    for (size_t t = 0; t < dtypes.size(); ++t) {
      const DataType dt = dtypes[t];
      const int64_t count = 37 + 11 * t;
      std::vector<double> v(count);
      for (int64_t i = 0; i < count; ++i) v[i] = Value(rank, t, i);
      TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Uploaded> u, Upload(d, dt, v));
      const ReduceOp op = t == 1   ? ReduceOp::kAverage
                          : t == 4 ? ReduceOp::kMax
                                   : ReduceOp::kSum;
      TERSE_ASSIGN_OR_RETURN(
          Handle h,
          engine.AllreduceAsync(absl::StrCat("dt", t), u->view, u->view,
                                {count}, op, 1.0, 1.0, nullptr, "", u->ready));
      ups.push_back(std::move(u));
      handles.push_back(h);
      ops.push_back(op);
    }
    for (size_t t = 0; t < dtypes.size(); ++t) {
      TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Event> done,
                             engine.WaitIssued(handles[t]));
      TERSE_RETURN_IF_ERROR(
          Expect(done != nullptr, "a device allreduce has a done event"));
      TERSE_ASSIGN_OR_RETURN(std::vector<double> got,
                             Download(d, done.get(), *ups[t]));
      for (size_t i = 0; i < got.size(); ++i) {
        double want = 0;
        for (int r = 0; r < n; ++r) {
          const double x = Value(r, t, i);
          want = ops[t] == ReduceOp::kMax ? std::max(want, x) : want + x;
        }
        if (ops[t] == ReduceOp::kAverage) want /= n;
        if (std::abs(got[i] - want) > 1e-12 * std::abs(want)) {
          return absl::InternalError(
              absl::StrCat("step ", step, " ", DataTypeName(dtypes[t]), "[", i,
                           "] = ", got[i], ", want ", want));
        }
      }
    }
  }
  return absl::OkStatus();
}

// Many small tensors fused, prescale and postscale, written out of place;
// Wait() (host) instead of the consumer stream.
absl::Status FusionAndScaling(SimRuntime* sim, int rank, Engine& engine) {
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  const int tensors = 40;
  std::vector<std::unique_ptr<Uploaded>> in, out;
  std::vector<Handle> handles;
  for (int t = 0; t < tensors; ++t) {
    const int64_t count = 1 + (t * 13) % 50;
    std::vector<double> v(count), zeros(count, 0.0);
    for (int64_t i = 0; i < count; ++i) v[i] = Value(rank, t, i);
    // The output first: the input's event then covers both writes (one
    // producer stream, in order).
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Uploaded> b,
                           Upload(d, DataType::kFloat32, zeros));
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Uploaded> a,
                           Upload(d, DataType::kFloat32, v));
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine.AllreduceAsync(absl::StrCat("f", t), a->view, b->view,
                                        {count}, ReduceOp::kSum, 2.0, 0.25,
                                        nullptr, "", a->ready));
    in.push_back(std::move(a));
    out.push_back(std::move(b));
    handles.push_back(h);
  }
  for (int t = 0; t < tensors; ++t) {
    TERSE_RETURN_IF_ERROR(engine.Wait(handles[t]));
    // After Wait the host may read device memory (simulated: host memory).
    const float* got = out[t]->buffer.as<float>();
    for (int64_t i = 0; i < out[t]->view.count; ++i) {
      double want = 0;
      for (int r = 0; r < engine.size(); ++r) want += Value(r, t, i);
      want *= 0.5;
      if (got[i] != want) {
        return absl::InternalError(
            absl::StrCat("f", t, "[", i, "] = ", got[i], ", want ", want));
      }
    }
  }
  return absl::OkStatus();
}

// One tensor per bucket (each waited for before the next is enqueued), so
// the executor reduces it in its own output without the fusion buffer: in
// place unscaled, and out of place with prescale, postscale and Average,
// the input left as it was.
absl::Status SoloBuckets(SimRuntime* sim, int rank, Engine& engine) {
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  const int n = engine.size();
  const int64_t count = 1000;
  for (int variant = 0; variant < 2; ++variant) {
    const bool in_place = variant == 0;
    std::vector<double> v(count), zeros(count, 0.0);
    for (int64_t i = 0; i < count; ++i) v[i] = Value(rank, 7 + variant, i);
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Uploaded> b,
                           Upload(d, DataType::kFloat32, zeros));
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Uploaded> a,
                           Upload(d, DataType::kFloat32, v));
    const ReduceOp op = in_place ? ReduceOp::kSum : ReduceOp::kAverage;
    const double pre = in_place ? 1.0 : 2.0, post = in_place ? 1.0 : 0.25;
    TERSE_ASSIGN_OR_RETURN(
        Handle h, engine.AllreduceAsync(absl::StrCat("solo", variant), a->view,
                                        in_place ? a->view : b->view, {count},
                                        op, pre, post, nullptr, "", a->ready));
    TERSE_RETURN_IF_ERROR(engine.Wait(h));
    const float* got = (in_place ? a : b)->buffer.as<float>();
    const float* input = a->buffer.as<float>();
    for (int64_t i = 0; i < count; ++i) {
      double want = 0;
      for (int r = 0; r < n; ++r) want += Value(r, 7 + variant, i);
      want *= pre * post;
      if (op == ReduceOp::kAverage) want /= n;
      if (std::abs(got[i] - want) > 1e-6 * std::abs(want)) {
        return absl::InternalError(absl::StrCat(
            "solo", variant, "[", i, "] = ", got[i], ", want ", want));
      }
      if (!in_place && input[i] != static_cast<float>(v[i])) {
        return absl::InternalError(absl::StrCat(
            "solo", variant, ": the input changed at ", i, ": ", input[i]));
      }
    }
  }
  return absl::OkStatus();
}

// The producer stream is held while the op is enqueued: the engine cannot
// have read the input until it is released, so a missing stream wait would
// fuse the stale bytes. The handle stays incomplete meanwhile.
absl::Status WaitsForTheProducer(SimRuntime* sim, int rank, Engine& engine) {
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  d.producer->Hold();
  std::vector<double> v(100, rank + 1.0);
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Uploaded> u,
                         Upload(d, DataType::kFloat32, v));
  TERSE_ASSIGN_OR_RETURN(
      Handle h,
      engine.AllreduceAsync("held", u->view, u->view, {100}, ReduceOp::kSum,
                            1.0, 1.0, nullptr, "", u->ready));
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  absl::StatusOr<bool> polled = engine.Poll(h);
  d.producer->Release();
  TERSE_RETURN_IF_ERROR(polled.status());
  TERSE_RETURN_IF_ERROR(
      Expect(!*polled, "the op completed while its producer was held"));
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, engine.WaitIssued(h));
  TERSE_ASSIGN_OR_RETURN(std::vector<double> got, Download(d, done.get(), *u));
  const double want = engine.size() * (engine.size() + 1) / 2.0;
  for (double x : got) {
    if (x != want) {
      return absl::InternalError(absl::StrCat("held: ", x, ", want ", want));
    }
  }
  return absl::OkStatus();
}

absl::Status BroadcastAndAllgather(SimRuntime* sim, int rank, Engine& engine) {
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  const int root = engine.size() - 1;
  std::vector<double> v(64);
  for (int i = 0; i < 64; ++i) v[i] = Value(rank, 3, i);
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Uploaded> b,
                         Upload(d, DataType::kBFloat16, v));
  TERSE_ASSIGN_OR_RETURN(
      Handle hb,
      engine.BroadcastAsync("bc", b->view, {8, 8}, root, nullptr, b->ready));
  // Rank r contributes r + 1 rows of 3 int32.
  std::vector<double> rows(3 * (rank + 1));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 100 * rank + i;
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Uploaded> g,
                         Upload(d, DataType::kInt32, rows));
  TERSE_ASSIGN_OR_RETURN(
      Handle hg,
      engine.AllgatherAsync("ag", g->view, {rank + 1, 3}, nullptr, g->ready));
  TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, engine.WaitIssued(hb));
  TERSE_ASSIGN_OR_RETURN(std::vector<double> got, Download(d, done.get(), *b));
  for (int i = 0; i < 64; ++i) {
    if (got[i] != Value(root, 3, i)) {
      return absl::InternalError(absl::StrCat("broadcast[", i, "] = ", got[i]));
    }
  }
  TERSE_RETURN_IF_ERROR(engine.Wait(hg));
  TERSE_ASSIGN_OR_RETURN(AllgatherResult result,
                         engine.TakeAllgatherResult(hg));
  std::vector<int32_t> want;
  for (int r = 0; r < engine.size(); ++r) {
    for (int i = 0; i < 3 * (r + 1); ++i) want.push_back(100 * r + i);
  }
  TERSE_RETURN_IF_ERROR(Expect(
      result.data.size() == want.size() * 4 &&
          std::memcmp(result.data.data(), want.data(), result.data.size()) == 0,
      "allgather of device tensors differs from the concatenation"));
  return Expect(result.shape[0] == engine.size() * (engine.size() + 1) / 2,
                absl::StrCat("allgather first dim ", result.shape[0]));
}

// The last rank joins at once; the others' device allreduces count it as
// zeros (it takes part with a device buffer of zeros of its own).
absl::Status JoinOnDevice(SimRuntime* sim, int rank, Engine& engine) {
  const int last = engine.size() - 1;
  if (rank == last) {
    TERSE_ASSIGN_OR_RETURN(int joined_last, engine.Join());
    return Expect(joined_last >= 0 && joined_last < last,
                  absl::StrCat("last joined ", joined_last));
  }
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  for (int step = 0; step < 3; ++step) {
    std::vector<double> v(20, rank + 1.0);
    TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Uploaded> u,
                           Upload(d, DataType::kFloat32, v));
    TERSE_ASSIGN_OR_RETURN(
        Handle h,
        engine.AllreduceAsync("j", u->view, u->view, {20}, ReduceOp::kSum, 1.0,
                              1.0, nullptr, "", u->ready));
    TERSE_ASSIGN_OR_RETURN(std::shared_ptr<Event> done, engine.WaitIssued(h));
    TERSE_ASSIGN_OR_RETURN(std::vector<double> got,
                           Download(d, done.get(), *u));
    const double want = last * (last + 1) / 2.0;
    TERSE_RETURN_IF_ERROR(
        Expect(got[19] == want,
               absl::StrCat("joined sum ", got[19], ", want ", want)));
  }
  TERSE_ASSIGN_OR_RETURN(int joined_last, engine.Join());
  return Expect(joined_last >= 0 && joined_last < last,
                absl::StrCat("last joined ", joined_last));
}

// Bad device arguments fail at enqueue with the tensor's name.
absl::Status DeviceArgumentErrors(SimRuntime* sim, int rank, Engine& engine) {
  (void)rank;
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  std::vector<float> host(8);
  const Device mine = Device::Sim(d.ordinal);
  TensorView fake(host.data(), 8, DataType::kFloat32, mine);
  absl::StatusOr<Handle> h =
      engine.AllreduceAsync("hostmem", fake, fake, {8}, ReduceOp::kSum);
  TERSE_RETURN_IF_ERROR(ExpectContains(h.status(), "tensor 'hostmem'"));
  TERSE_RETURN_IF_ERROR(
      ExpectContains(h.status(), "not simulated-device memory"));

  TERSE_ASSIGN_OR_RETURN(DeviceBuffer buf,
                         DeviceBuffer::Allocate(sim, d.ordinal, 32));
  TensorView good(buf.data(), 8, DataType::kFloat32, mine);
  h = engine.AllreduceAsync("badspec", good, good, {8}, ReduceOp::kSum, 1.0,
                            1.0, nullptr, "zip");
  TERSE_RETURN_IF_ERROR(ExpectContains(h.status(), "tensor 'badspec'"));
  TensorView cpu(host.data(), 8, DataType::kFloat32);
  h = engine.AllreduceAsync("mixed", good, cpu, {8}, ReduceOp::kSum);
  TERSE_RETURN_IF_ERROR(ExpectContains(h.status(), "output on cpu"));

  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Event> event,
                         sim->CreateEvent(d.ordinal));
  h = engine.AllreduceAsync("cpu-ready", cpu, cpu, {8}, ReduceOp::kSum, 1.0,
                            1.0, nullptr, "", std::move(event));
  TERSE_RETURN_IF_ERROR(
      ExpectContains(h.status(), "a ready event is for device tensors"));

  TensorView other(buf.data(), 8, DataType::kFloat32,
                   Device::Sim(d.ordinal + 1));
  h = engine.AllreduceAsync("otherdev", other, other, {8}, ReduceOp::kSum);
  TERSE_RETURN_IF_ERROR(ExpectContains(h.status(), "one device per kind"));

  TensorView cuda(buf.data(), 8, DataType::kFloat32, Device::Cuda(0));
  h = engine.AllreduceAsync("cuda", cuda, cuda, {8}, ReduceOp::kSum);
  return ExpectContains(h.status(), "no device runtime is registered for cuda");
}

// Rank 0 passes a device tensor, the others a CPU one of the same name:
// every rank fails that op with the disagreement, and the engine goes on.
absl::Status DeviceKindMismatch(SimRuntime* sim, int rank, Engine& engine) {
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  std::vector<double> v(5, 1.0);
  TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Uploaded> u,
                         Upload(d, DataType::kFloat32, v));
  std::vector<float> host(5, 1.0f);
  TensorView cpu(host.data(), 5, DataType::kFloat32);
  absl::StatusOr<Handle> h =
      rank == 0
          ? engine.AllreduceAsync("mm", u->view, u->view, {5}, ReduceOp::kSum,
                                  1.0, 1.0, nullptr, "", u->ready)
          : engine.AllreduceAsync("mm", cpu, cpu, {5}, ReduceOp::kSum);
  TERSE_RETURN_IF_ERROR(h.status());
  absl::Status status = engine.Wait(*h);
  TERSE_RETURN_IF_ERROR(ExpectContains(status, "device"));
  TERSE_RETURN_IF_ERROR(ExpectContains(status, "sim"));
  TERSE_RETURN_IF_ERROR(d.producer->Synchronize());
  // Still usable afterwards.
  return AllreduceDtypes(sim, rank, engine);
}

}  // namespace

// One X event of a timeline file: its phase, track id, start and duration
// (microseconds), and the raw line (for its arguments).
struct TimelineEvent {
  std::string name, line;
  int64_t tid = -1;
  double ts = 0, dur = 0;
};

// The number after `"key":` in `line` (the timeline's own format: one
// event per line), or -1.
double NumberAfter(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return -1;
  return std::strtod(line.c_str() + at + key.size() + 3, nullptr);
}

// A timeline written while device buckets run (Engine::StartTimeline):
// 6 tensors (a fused bucket, or more than one when they reach the engine in
// different cycles), then a single tensor (reduced in its own output). Each
// bucket's track gets the host's NEGOTIATE and QUEUE, and FUSE, COMMUNICATE,
// UNFUSE, timed where the engine stream reached each boundary: one after the
// other, each starting where the one before ended.
absl::Status TimelineOnDevice(SimRuntime* sim, int rank, Engine& engine) {
  TERSE_ASSIGN_OR_RETURN(RankDevice d, MakeDevice(sim, engine));
  const char* dir = std::getenv("TEST_TMPDIR");
  // Every rank writes its own file ({rank}: only rank 0 would otherwise).
  const std::string stem =
      absl::StrCat(dir != nullptr ? dir : "/tmp", "/device_timeline_", getpid(),
                   "_", reinterpret_cast<uintptr_t>(&engine), "_");
  const std::string path = absl::StrCat(stem, rank, ".json");
  TERSE_RETURN_IF_ERROR(engine.StartTimeline(stem + "{rank}.json"));
  for (int tensors : {6, 1}) {
    std::vector<std::unique_ptr<Uploaded>> held;
    std::vector<Handle> handles;
    for (int t = 0; t < tensors; ++t) {
      std::vector<double> v(100);
      for (int64_t i = 0; i < 100; ++i) v[i] = Value(rank, t, i);
      TERSE_ASSIGN_OR_RETURN(std::unique_ptr<Uploaded> a,
                             Upload(d, DataType::kFloat32, v));
      TERSE_ASSIGN_OR_RETURN(
          Handle h,
          engine.AllreduceAsync(absl::StrCat("tl", tensors, ".", t), a->view,
                                a->view, {100}, ReduceOp::kSum, 1.0, 1.0,
                                nullptr, "", a->ready));
      held.push_back(std::move(a));
      handles.push_back(h);
    }
    for (Handle h : handles) TERSE_RETURN_IF_ERROR(engine.Wait(h));
  }
  TERSE_RETURN_IF_ERROR(engine.StopTimeline());

  std::ifstream in(path);
  std::map<int64_t, std::string> track_names;
  std::map<int64_t, std::vector<TimelineEvent>> device_phases;
  std::set<std::string> host_phases;
  for (std::string line; std::getline(in, line);) {
    const int64_t tid = static_cast<int64_t>(NumberAfter(line, "tid"));
    if (line.find("\"name\":\"thread_name\"") != std::string::npos) {
      const size_t at = line.find("\"args\":{\"name\":\"");
      if (at != std::string::npos) {
        const size_t from = at + 16;
        track_names[tid] = line.substr(from, line.find('"', from) - from);
      }
      continue;
    }
    if (line.find("\"ph\":\"X\"") == std::string::npos) continue;
    TimelineEvent e;
    e.name = line.substr(9, line.find('"', 9) - 9);  // {"name":"...
    e.line = line;
    e.tid = tid;
    e.ts = NumberAfter(line, "ts");
    e.dur = NumberAfter(line, "dur");
    if (e.name == "FUSE" || e.name == "COMMUNICATE" || e.name == "UNFUSE") {
      device_phases[tid].push_back(e);
    } else {
      host_phases.insert(e.name);
    }
  }
  TERSE_RETURN_IF_ERROR(Expect(
      host_phases.count("NEGOTIATE") == 1 && host_phases.count("QUEUE") == 1,
      "NEGOTIATE and QUEUE on the timeline"));
  int runs = 0;
  const char* kOrder[] = {"FUSE", "COMMUNICATE", "UNFUSE"};
  for (const auto& [tid, events] : device_phases) {
    TERSE_RETURN_IF_ERROR(Expect(
        track_names[tid].rfind("bucket ", 0) == 0,
        absl::StrCat("device phases on track '", track_names[tid], "'")));
    TERSE_RETURN_IF_ERROR(
        Expect(events.size() % 3 == 0,
               absl::StrCat(events.size(), " device phases on a track")));
    for (size_t i = 0; i < events.size(); ++i) {
      const TimelineEvent& e = events[i];
      TERSE_RETURN_IF_ERROR(Expect(e.name == kOrder[i % 3] && e.dur >= 0,
                                   "phase order: " + e.line));
      if (i % 3 != 0) {  // Starts where the phase before it ended.
        const TimelineEvent& before = events[i - 1];
        TERSE_RETURN_IF_ERROR(
            Expect(std::abs(before.ts + before.dur - e.ts) < 0.0025,
                   "contiguous phases: " + before.line + " then " + e.line));
      }
      if (e.name == "COMMUNICATE") {
        TERSE_RETURN_IF_ERROR(
            Expect(e.line.find("\"compression\":\"none\"") != std::string::npos,
                   "COMMUNICATE names its compression: " + e.line));
      }
    }
    runs += static_cast<int>(events.size() / 3);
  }
  std::remove(path.c_str());
  // The six tensors form one bucket, or more when they reach the engine in
  // different cycles; the single tensor is a bucket of its own.
  return Expect(runs >= 2, absl::StrCat(runs, " device bucket runs timed"));
}

std::vector<Scenario> DeviceScenarios(SimRuntime* sim,
                                      const DeviceRuntimes* runtimes) {
  using Body = absl::Status (*)(SimRuntime*, int, Engine&);
  const std::vector<std::pair<std::string, Body>> bodies = {
      {"AllreduceDtypes", AllreduceDtypes},
      {"FusionAndScaling", FusionAndScaling},
      {"SoloBuckets", SoloBuckets},
      {"WaitsForTheProducer", WaitsForTheProducer},
      {"BroadcastAndAllgather", BroadcastAndAllgather},
      {"JoinOnDevice", JoinOnDevice},
      {"DeviceArgumentErrors", DeviceArgumentErrors},
      {"DeviceKindMismatch", DeviceKindMismatch},
      {"TimelineOnDevice", TimelineOnDevice},
      {"CompressedEqualsCpu", CompressedEqualsCpu},
      {"CheckpointAcrossDeviceKinds", CheckpointAcrossDeviceKinds},
      {"DeviceTensorsOnProcessSets", DeviceTensorsOnProcessSets},
  };
  std::vector<Scenario> all;
  for (const char* mode : {"nccl", "mpi"}) {
    for (const auto& [name, body] : bodies) {
      Scenario s;
      s.name = std::string(mode) == "mpi" ? name + "Staged" : name;
      const std::string ops = mode;
      s.configure = [ops](Config* c) {
        c->gpu_operations = ops;
        c->min_compress_bytes = 0;  // Compress the scenarios' small buckets.
      };
      Body b = body;
      s.body = [sim, b](int rank, Engine& engine) {
        return b(sim, rank, engine);
      };
      s.options.devices = runtimes;
      all.push_back(std::move(s));
    }
  }
  // Scenarios with a configuration of their own: momentum correction,
  // gravac's portfolio with the step gain and a survey at every decision,
  // and a portfolio with a qsgd candidate.
  struct Configured {
    std::string name;
    Body body;
    std::function<void(Config*)> configure;
  };
  const std::vector<Configured> configured = {
      {"MomentumAcrossDeviceKinds", MomentumAcrossDeviceKinds,
       [](Config* c) { c->momentum_correction = 0.9; }},
      {"PortfolioProbesAcrossDeviceKinds", PortfolioProbesAcrossDeviceKinds,
       [](Config* c) {
         c->gravac_gain = "step";
         c->gravac_window = 1;
       }},
      {"QsgdPortfolioOnDevice", QsgdPortfolioOnDevice,
       [](Config* c) {
         c->gravac_candidates = {"none", "topk:10", "qsgd:8"};
         // Trials cut short by measured throughput would make the two
         // tensors' decisions differ; short trials reach QSGD's soon.
         c->gravac_throughput_guard = false;
         c->gravac_gain_window = 2;
         c->gravac_window = 4;
       }},
  };
  for (const char* mode : {"nccl", "mpi"}) {
    for (const Configured& one : configured) {
      Scenario s;
      s.name = std::string(mode) == "mpi" ? one.name + "Staged" : one.name;
      const std::string ops = mode;
      const std::function<void(Config*)> more = one.configure;
      s.configure = [ops, more](Config* c) {
        c->gpu_operations = ops;
        c->min_compress_bytes = 0;
        more(c);
      };
      Body b = one.body;
      s.body = [sim, b](int rank, Engine& engine) {
        return b(sim, rank, engine);
      };
      s.options.devices = runtimes;
      all.push_back(std::move(s));
    }
  }
  return all;
}

}  // namespace testing
}  // namespace terse
