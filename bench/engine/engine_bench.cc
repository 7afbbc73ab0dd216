// engine_bench: the terse engine against plain MPI on the same data, in one
// run (run under mpirun -np 4; see run.sh). Not a test: prints a table and
// a final JSON line, never asserts a time.
//
// Workloads:
//   resnet50  the 161 fp32 parameter tensors of ResNet-50 (real sizes from
//             resnet50_param_shapes.tsv, 25,557,032 floats)
//   small     1,000 fp32 tensors of 1-64 KiB (fixed seed)
// The headline compares (a) with (b), the same tensors reduced the way a
// trainer without an engine would:
//   (a)  terse: AllreduceAsync per tensor through the process-wide API, then
//        Wait for all (separately allocated tensors, so fused buckets copy)
//   (b)  one MPI_Allreduce per tensor, in order
// speed-up = (b) / (a). Secondary columns, for context:
//   (a') terse with the tensors adjacent in one allocation (buckets are
//        reduced in place, no fusion copies)
//   (c)  one MPI_Allreduce over a flat buffer of the same total size: the
//        practical limit of any fusing engine, so (b)/(c) is the ceiling of
//        (a)'s speed-up over (b) on this machine and transport
// The ways alternate in short rounds (each round: one untimed warm-up step,
// then --steps timed steps per way, the engine initialised afresh) so that
// machine noise hits all of them alike; each figure is the median over all
// timed steps of the slowest rank's step time.
//
//   engine_bench [--shapes PATH] [--steps N] [--rounds R]
//                [--workloads resnet50,small]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/api.h"

namespace terse {
namespace {

struct Options {
  std::string shapes = "bench/engine/resnet50_param_shapes.tsv";
  int steps = 2;
  int rounds = 5;
  std::vector<std::string> workloads = {"resnet50", "small"};
};

struct Workload {
  std::string name;
  std::vector<int64_t> sizes;  // Elements per tensor.
  int64_t total = 0;
};

bool ReadResnet(const std::string& path, Workload* w) {
  std::ifstream in(path);
  if (!in) return false;
  w->name = "resnet50";
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols = absl::StrSplit(line, '\t');
    int64_t n = 0;
    if (cols.size() != 3 || !absl::SimpleAtoi(cols[2], &n)) return false;
    w->sizes.push_back(n);
    w->total += n;
  }
  return !w->sizes.empty();
}

Workload Small() {
  Workload w;
  w.name = "small";
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int64_t> bytes(1024, 64 * 1024);
  for (int i = 0; i < 1000; ++i) {
    const int64_t n = bytes(rng) / 4;
    w.sizes.push_back(n);
    w.total += n;
  }
  return w;
}

double Now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Tensors either separately allocated or views of one allocation.
struct Tensors {
  Tensors(const Workload& w, bool adjacent) {
    if (adjacent) {
      flat.resize(w.total);
      int64_t offset = 0;
      for (int64_t n : w.sizes) {
        views.push_back(flat.data() + offset);
        offset += n;
      }
    } else {
      separate.resize(w.sizes.size());
      for (size_t i = 0; i < w.sizes.size(); ++i) {
        separate[i].resize(w.sizes[i]);
        views.push_back(separate[i].data());
      }
    }
  }
  void Fill(const Workload& w, float value) {
    for (size_t i = 0; i < views.size(); ++i) {
      std::fill(views[i], views[i] + w.sizes[i], value);
    }
  }
  bool Check(const Workload& w, float want) const {
    for (size_t i = 0; i < views.size(); ++i) {
      if (w.sizes[i] > 0 &&
          (views[i][0] != want || views[i][w.sizes[i] - 1] != want)) {
        return false;
      }
    }
    return true;
  }
  std::vector<float> flat;
  std::vector<std::vector<float>> separate;
  std::vector<float*> views;
};

void Die(const std::string& what) {
  std::fprintf(stderr, "engine_bench: %s\n", what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

// Runs `steps` timed steps (after one warm-up) and returns this rank's time
// of each. `barrier` runs untimed before every step; when `starts` is not
// null it receives the clock at each timed step's start, so that the skew
// of the ranks' starts (how unevenly the barrier let them go) can be told
// apart from the step itself.
std::vector<double> TimeSteps(int steps, const std::function<void()>& reset,
                              const std::function<void()>& barrier,
                              const std::function<void()>& step,
                              std::vector<double>* starts = nullptr) {
  std::vector<double> times;
  for (int s = -1; s < steps; ++s) {
    reset();
    barrier();
    const double start = Now();
    step();
    if (s >= 0) {
      times.push_back(Now() - start);
      if (starts != nullptr) starts->push_back(start);
    }
  }
  return times;
}

void MaxOverRanks(std::vector<double>* times) {
  MPI_Allreduce(MPI_IN_PLACE, times->data(), static_cast<int>(times->size()),
                MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Per step, how far apart the ranks started it: max - min over ranks of the
// step's start (one machine, so one clock). Call when MPI is the caller's.
std::vector<double> StartSkew(std::vector<double> starts) {
  std::vector<double> earliest(starts.size());
  for (size_t i = 0; i < starts.size(); ++i) earliest[i] = -starts[i];
  MPI_Allreduce(MPI_IN_PLACE, starts.data(), static_cast<int>(starts.size()),
                MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, earliest.data(),
                static_cast<int>(earliest.size()), MPI_DOUBLE, MPI_MAX,
                MPI_COMM_WORLD);
  for (size_t i = 0; i < starts.size(); ++i) starts[i] += earliest[i];
  return starts;
}

struct Result {
  std::vector<double> terse, terse_adjacent, per_tensor, flat;
  // Each way's StartSkew, every step.
  std::vector<double> terse_skew, adjacent_skew, per_tensor_skew, flat_skew;
  // (a)'s time until its last AllreduceAsync returned, per step.
  std::vector<double> terse_enqueue;
};

void RunMpiWays(const Workload& w, const Options& opt, int size, Result* r) {
  const float want = size * (size + 1) / 2.0f;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto mpi_barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };

  std::vector<float> flat(w.total);
  std::vector<double> starts;
  std::vector<double> t = TimeSteps(
      opt.steps, [&] { std::fill(flat.begin(), flat.end(), rank + 1.0f); },
      mpi_barrier,
      [&] {
        MPI_Allreduce(MPI_IN_PLACE, flat.data(), static_cast<int>(w.total),
                      MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      },
      &starts);
  if (flat[0] != want || flat[w.total - 1] != want) Die("flat: wrong sum");
  MaxOverRanks(&t);
  r->flat.insert(r->flat.end(), t.begin(), t.end());
  std::vector<double> skew = StartSkew(starts);
  r->flat_skew.insert(r->flat_skew.end(), skew.begin(), skew.end());
  starts.clear();
  flat = std::vector<float>();

  Tensors tensors(w, /*adjacent=*/false);
  t = TimeSteps(
      opt.steps, [&] { tensors.Fill(w, rank + 1.0f); }, mpi_barrier,
      [&] {
        for (size_t i = 0; i < w.sizes.size(); ++i) {
          MPI_Allreduce(MPI_IN_PLACE, tensors.views[i],
                        static_cast<int>(w.sizes[i]), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
        }
      },
      &starts);
  if (!tensors.Check(w, want)) Die("per tensor: wrong sum");
  MaxOverRanks(&t);
  r->per_tensor.insert(r->per_tensor.end(), t.begin(), t.end());
  skew = StartSkew(starts);
  r->per_tensor_skew.insert(r->per_tensor_skew.end(), skew.begin(), skew.end());
}

void RunTerse(const Workload& w, const Options& opt, int size, bool adjacent,
              std::vector<double>* out, std::vector<double>* enqueue_out,
              std::vector<double>* skew_out) {
  Config config = Config::Defaults();
  absl::StatusOr<Config> env = Config::FromEnvironment();
  if (env.ok()) config = *env;
  // One timeline per way: TERSE_TIMELINE=x gives x.separate and x.adjacent.
  if (!config.timeline_path.empty()) {
    config.timeline_path += adjacent ? ".adjacent" : ".separate";
  }
  absl::Status init = Init(config);
  if (!init.ok()) Die(init.ToString());
  const int rank = *Rank();
  const float want = size * (size + 1) / 2.0f;
  Tensors tensors(w, adjacent);
  std::vector<std::string> names;
  for (size_t i = 0; i < w.sizes.size(); ++i) {
    names.push_back(absl::StrCat(w.name, ".", i));
  }
  std::vector<Handle> handles(w.sizes.size());
  std::vector<double> enqueue;  // Every step's, warm-up first (dropped).
  std::vector<double> starts;
  std::vector<double> t = TimeSteps(
      opt.steps, [&] { tensors.Fill(w, rank + 1.0f); },
      [] {
        absl::Status s = Barrier();
        if (!s.ok()) Die(s.ToString());
      },
      [&] {
        const double start = Now();
        for (size_t i = 0; i < w.sizes.size(); ++i) {
          TensorView v(tensors.views[i], w.sizes[i], DataType::kFloat32);
          absl::StatusOr<Handle> h =
              AllreduceAsync(names[i], v, v, {w.sizes[i]}, ReduceOp::kSum);
          if (!h.ok()) Die(h.status().ToString());
          handles[i] = *h;
        }
        enqueue.push_back(Now() - start);
        for (Handle h : handles) {
          absl::Status s = Wait(h);
          if (!s.ok()) Die(s.ToString());
        }
      },
      &starts);
  if (!tensors.Check(w, want)) Die("terse: wrong sum");
  absl::Status down = Shutdown();
  if (!down.ok()) Die(down.ToString());
  MaxOverRanks(&t);  // The engine is stopped: MPI is ours again.
  out->insert(out->end(), t.begin(), t.end());
  std::vector<double> skew = StartSkew(starts);
  skew_out->insert(skew_out->end(), skew.begin(), skew.end());
  enqueue.erase(enqueue.begin());  // The warm-up step's.
  MaxOverRanks(&enqueue);
  enqueue_out->insert(enqueue_out->end(), enqueue.begin(), enqueue.end());
}

std::string Ms(double s) { return absl::StrCat(s * 1e3); }

}  // namespace
}  // namespace terse

int main(int argc, char** argv) {
  using namespace terse;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Options opt;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--shapes") {
      opt.shapes = value;
    } else if (flag == "--steps") {
      opt.steps = std::atoi(value.c_str());
    } else if (flag == "--rounds") {
      opt.rounds = std::atoi(value.c_str());
    } else if (flag == "--workloads") {
      opt.workloads = absl::StrSplit(value, ',');
    } else {
      Die("unknown flag " + flag);
    }
  }
  std::vector<Workload> workloads;
  for (const std::string& name : opt.workloads) {
    if (name == "resnet50") {
      Workload w;
      if (!ReadResnet(opt.shapes, &w)) Die("cannot read " + opt.shapes);
      workloads.push_back(w);
    } else if (name == "small") {
      workloads.push_back(Small());
    } else {
      Die("unknown workload " + name);
    }
  }

  std::string json = absl::StrCat("{\"bench\":\"engine\",\"ranks\":", size);
  if (rank == 0) {
    double load[3] = {0, 0, 0};
    if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
      if (std::fscanf(f, "%lf %lf %lf", &load[0], &load[1], &load[2]) != 3) {
        load[0] = -1;
      }
      std::fclose(f);
    }
    std::printf(
        "engine_bench: %d ranks, %d rounds x %d steps per way, load average "
        "%.1f (1 min)\n",
        size, opt.rounds, opt.steps, load[0]);
    std::printf("%-9s %-38s %10s %10s %10s\n", "workload", "way", "median ms",
                "min ms", "max ms");
  }
  for (const Workload& w : workloads) {
    Result r;
    for (int round = 0; round < opt.rounds; ++round) {
      RunMpiWays(w, opt, size, &r);
      std::vector<double> unused;
      RunTerse(w, opt, size, /*adjacent=*/false, &r.terse, &r.terse_enqueue,
               &r.terse_skew);
      RunTerse(w, opt, size, /*adjacent=*/true, &r.terse_adjacent, &unused,
               &r.adjacent_skew);
    }
    const double a = Median(r.terse), a2 = Median(r.terse_adjacent);
    const double b = Median(r.per_tensor), c = Median(r.flat);
    if (rank == 0) {
      auto row = [&](const char* way, const std::vector<double>& t) {
        std::printf("%-9s %-38s %10.2f %10.2f %10.2f\n", w.name.c_str(), way,
                    Median(t) * 1e3,
                    *std::min_element(t.begin(), t.end()) * 1e3,
                    *std::max_element(t.begin(), t.end()) * 1e3);
      };
      std::printf("%-9s %zu tensors, %.1f MB\n", w.name.c_str(), w.sizes.size(),
                  w.total * 4 / 1e6);
      row("(a)  terse engine", r.terse);
      row("(b)  MPI_Allreduce per tensor", r.per_tensor);
      std::printf("%-9s SPEED-UP (a) over (b): %.2fx\n", w.name.c_str(), b / a);
      std::printf(
          "%-9s (a)'s enqueue (until its last AllreduceAsync "
          "returned, slowest rank): %.2f ms\n",
          w.name.c_str(), Median(r.terse_enqueue) * 1e3);
      std::printf("%-9s secondary:\n", w.name.c_str());
      row("(a') terse, tensors adjacent in memory", r.terse_adjacent);
      row("(c)  MPI_Allreduce of one flat buffer", r.flat);
      // (c) is the practical limit of any fusing engine, so (b)/(c) bounds
      // what (a) can gain over (b) on this machine and transport.
      std::printf(
          "%-9s (a') over (b): %.2fx; ceiling (c) over (b): %.2fx = the most "
          "any fusion can gain here, (a) reaches %.0f%% of it\n",
          w.name.c_str(), b / a2, b / c, 100.0 * (b / a) / (b / c));
      // Included in every way's time above: a rank's step starts when its
      // barrier returns, so a rank let go early waits for the late ones.
      std::printf(
          "%-9s start skew over ranks, median ms: (a) %.2f  (b) %.2f  "
          "(a') %.2f  (c) %.2f\n",
          w.name.c_str(), Median(r.terse_skew) * 1e3,
          Median(r.per_tensor_skew) * 1e3, Median(r.adjacent_skew) * 1e3,
          Median(r.flat_skew) * 1e3);
    }
    absl::StrAppend(&json, ",\"", w.name, "\":{\"tensors\":", w.sizes.size(),
                    ",\"bytes\":", w.total * 4, ",\"terse_ms\":", Ms(a),
                    ",\"per_tensor_ms\":", Ms(b),
                    ",\"terse_enqueue_ms\":", Ms(Median(r.terse_enqueue)),
                    ",\"terse_speedup_vs_per_tensor\":", b / a,
                    ",\"secondary\":{\"terse_adjacent_ms\":", Ms(a2),
                    ",\"flat_ms\":", Ms(c),
                    ",\"terse_adjacent_speedup_vs_per_tensor\":", b / a2,
                    ",\"ceiling_flat_speedup_vs_per_tensor\":", b / c,
                    ",\"terse_share_of_ceiling\":", (b / a) / (b / c),
                    ",\"start_skew_ms\":{\"terse\":", Ms(Median(r.terse_skew)),
                    ",\"per_tensor\":", Ms(Median(r.per_tensor_skew)),
                    ",\"terse_adjacent\":", Ms(Median(r.adjacent_skew)),
                    ",\"flat\":", Ms(Median(r.flat_skew)), "}}}");
  }
  json += "}";
  if (rank == 0) std::printf("%s\n", json.c_str());
  MPI_Finalize();
  return 0;
}
