// autotune_bench: TERSE_AUTOTUNE against a sweep of fixed settings, on the
// workloads of engine_bench (the ResNet-50 list and 1,000 small tensors),
// in one mpirun (bench/engine/run_autotune.sh). Not a test: prints a table
// and one JSON line, never asserts a time.
//
// For each workload:
//   sweep     every (fusion threshold, cycle time) of the autotuner's grid
//             (engine/autotune.h), each on a fresh engine: one warm-up step,
//             then --steps timed steps;
//   autotune  a fresh engine with TERSE_AUTOTUNE=1 (--steps_per_sample,
//             --warmup_samples, --samples), stepped until every rank's
//             search is over (checked through the engine, so all ranks stop
//             together), then one warm-up and --steps timed steps at the
//             chosen setting.
//   confirm   --confirm_rounds rounds, each a fresh engine at the sweep's
//             best setting and a fresh autotune run as above (tuned anew),
//             in alternating order.
// A step: AllreduceAsync (Sum) of every separately allocated tensor, then
// Wait for all, after a barrier; its time is the slowest rank's. The figure
// of each setting is the median of its steps. The table gives each
// setting's speed relative to the sweep's best; the target of issue 19 is
// autotune's >= 0.9.
//
// Two measures of that target. "Strict": the first autotune run against
// the sweep's best time. The best of 24 settings measured once each is the
// minimum of 24 noisy draws, so where the settings are within noise of one
// another (the ResNet-50 list here) it sits below what that setting gives
// when timed again, and the strict ratio is biased low. "Confirm": the
// median over rounds of (best setting's time / autotune's time) with both
// re-timed side by side in each round, as every other comparison in bench/
// is made.
//
//   autotune_bench [--shapes PATH] [--steps N] [--workloads resnet50,small]
//                  [--steps_per_sample K] [--warmup_samples W] [--samples S]
//                  [--max_tune_steps M] [--confirm_rounds R]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collectives/registry.h"
#include "engine/autotune.h"
#include "engine/engine.h"

namespace terse {
namespace {

struct Options {
  std::string shapes = "bench/engine/resnet50_param_shapes.tsv";
  int steps = 4;
  std::vector<std::string> workloads = {"resnet50", "small"};
  int steps_per_sample = 2;
  int warmup_samples = 1;
  int samples = 2;
  int max_tune_steps = 400;
  int confirm_rounds = 3;
};

struct Workload {
  std::string name;
  std::vector<int64_t> sizes;
};

void Die(const std::string& what) {
  std::fprintf(stderr, "autotune_bench: %s\n", what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
}

Workload Load(const std::string& name, const Options& opt) {
  Workload w;
  w.name = name;
  if (name == "small") {  // engine_bench's draws.
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int64_t> bytes(1024, 64 * 1024);
    for (int i = 0; i < 1000; ++i) w.sizes.push_back(bytes(rng) / 4);
    return w;
  }
  if (name != "resnet50") Die("--workloads: resnet50 or small, got " + name);
  std::ifstream in(opt.shapes);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> cols = absl::StrSplit(line, '\t');
    int64_t n = 0;
    if (cols.size() != 3 || !absl::SimpleAtoi(cols[2], &n)) Die("bad shapes");
    w.sizes.push_back(n);
  }
  if (w.sizes.empty()) Die("cannot read " + opt.shapes);
  return w;
}

double Now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Check(const absl::Status& s) {
  if (!s.ok()) Die(s.ToString());
}

// A fresh engine over the same tensors.
class Run {
 public:
  Run(const Workload& w, const Config& config) : w_(w) {
    auto registry = CommunicatorRegistry::Create(config);
    Check(registry.status());
    registry_ = *std::move(registry);
    auto engine = Engine::Create(config, registry_.get());
    Check(engine.status());
    engine_ = *std::move(engine);
    tensors_.resize(w.sizes.size());
    for (size_t i = 0; i < w.sizes.size(); ++i) {
      tensors_[i].resize(w.sizes[i]);
      names_.push_back(absl::StrCat(w.name, ".", i));
    }
  }
  ~Run() { Check(engine_->Shutdown()); }

  // One step (untimed fill and barrier first); returns this rank's time.
  double Step() {
    for (auto& t : tensors_) std::fill(t.begin(), t.end(), 1.0f);
    Check(engine_->Barrier());
    const double start = Now();
    std::vector<Handle> handles(tensors_.size());
    for (size_t i = 0; i < tensors_.size(); ++i) {
      TensorView v(tensors_[i].data(), w_.sizes[i], DataType::kFloat32);
      auto h = engine_->AllreduceAsync(names_[i], v, v, {w_.sizes[i]},
                                       ReduceOp::kSum);
      Check(h.status());
      handles[i] = *h;
    }
    for (Handle h : handles) Check(engine_->Wait(h));
    const double took = Now() - start;
    const float want = static_cast<float>(engine_->size());
    if (tensors_.front().front() != want || tensors_.back().back() != want) {
      Die("wrong sum");
    }
    return took;
  }

  // Whether every rank's autotune search is over (collective).
  bool AllDone() {
    double done = engine_->stats().autotune_done ? 1 : 0;
    TensorView v(&done, 1, DataType::kFloat64);
    auto h = engine_->AllreduceAsync("autotune.done", v, v, {1}, ReduceOp::kMin);
    Check(h.status());
    Check(engine_->Wait(*h));
    return done == 1;
  }
  EngineStats stats() const { return engine_->stats(); }

 private:
  const Workload& w_;
  std::unique_ptr<CommunicatorRegistry> registry_;
  std::unique_ptr<Engine> engine_;
  std::vector<std::vector<float>> tensors_;
  std::vector<std::string> names_;
};

// Median over steps of the slowest rank's time; call after the engine is
// shut down (MPI is the bench's again).
double SlowestMedian(std::vector<double> t) {
  MPI_Allreduce(MPI_IN_PLACE, t.data(), static_cast<int>(t.size()), MPI_DOUBLE,
                MPI_MAX, MPI_COMM_WORLD);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<double> Timed(Run& run, int steps) {
  run.Step();  // Warm-up.
  std::vector<double> t;
  for (int s = 0; s < steps; ++s) t.push_back(run.Step());
  return t;
}

struct Row {
  AutotuneSetting setting;
  double ms = 0;
};

std::string Label(const AutotuneSetting& s) {
  return absl::StrFormat("%g MiB / %g ms",
                         s.fusion_threshold_bytes / double(1 << 20),
                         s.cycle_time_ms);
}

// A fresh engine at `config`: the median of the slowest rank's step times.
double TimeFixed(const Workload& w, const Config& config, int steps) {
  std::vector<double> times;
  {
    Run run(w, config);
    times = Timed(run, steps);
  }
  return SlowestMedian(times) * 1e3;
}

struct Tuned {
  AutotuneSetting chosen;
  int tune_steps = 0;
  double tune_seconds = 0;
  double ms = 0;  // Median step at the chosen setting, slowest rank.
};

// A fresh engine with TERSE_AUTOTUNE: stepped until every rank's search is
// over, then timed at its choice.
Tuned TimeAutotune(const Workload& w, const Config& base, const Options& opt) {
  Config config = base;
  config.autotune = true;
  config.autotune_steps_per_sample = opt.steps_per_sample;
  config.autotune_warmup_samples = opt.warmup_samples;
  config.autotune_samples = opt.samples;
  Tuned tuned;
  std::vector<double> times;
  {
    Run run(w, config);
    const double start = Now();
    while (!run.AllDone()) {
      if (++tuned.tune_steps > opt.max_tune_steps) {
        Die("autotune did not finish");
      }
      run.Step();
    }
    tuned.tune_seconds = Now() - start;
    const EngineStats s = run.stats();
    tuned.chosen = {s.autotune_threshold_bytes, s.autotune_cycle_time_ms};
    times = Timed(run, opt.steps);
  }
  tuned.ms = SlowestMedian(times) * 1e3;
  return tuned;
}

double MedianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace
}  // namespace terse

int main(int argc, char** argv) {
  using namespace terse;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Options opt;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    int n = 0;
    const bool num = absl::SimpleAtoi(value, &n);
    if (flag == "--shapes") {
      opt.shapes = value;
    } else if (flag == "--workloads") {
      opt.workloads = absl::StrSplit(value, ',');
    } else if (flag == "--steps" && num && n > 0) {
      opt.steps = n;
    } else if (flag == "--steps_per_sample" && num && n > 0) {
      opt.steps_per_sample = n;
    } else if (flag == "--warmup_samples" && num && n >= 0) {
      opt.warmup_samples = n;
    } else if (flag == "--samples" && num && n > 0) {
      opt.samples = n;
    } else if (flag == "--max_tune_steps" && num && n > 0) {
      opt.max_tune_steps = n;
    } else if (flag == "--confirm_rounds" && num && n >= 0) {
      opt.confirm_rounds = n;
    } else {
      Die(absl::StrCat("bad flag ", flag, " ", value));
    }
  }
  Config base = Config::Defaults();
  const AutotuneOptions grid = DefaultAutotuneOptions(base);
  std::vector<std::string> json;
  for (const std::string& name : opt.workloads) {
    const Workload w = Load(name, opt);
    std::vector<Row> sweep;
    for (int64_t t : grid.thresholds_bytes) {
      for (double c : grid.cycle_times_ms) {
        Config config = base;
        config.fusion_threshold_bytes = t;
        config.cycle_time_ms = c;
        sweep.push_back(Row{{t, c}, TimeFixed(w, config, opt.steps)});
      }
    }
    const Tuned first = TimeAutotune(w, base, opt);
    const Row* best = &sweep.front();
    for (const Row& r : sweep) {
      if (r.ms < best->ms) best = &r;
    }
    double chosen_fixed = 0;
    for (const Row& r : sweep) {
      if (r.setting == first.chosen) chosen_fixed = r.ms;
    }
    // Confirm: the best setting and autotune re-timed side by side.
    Config best_config = base;
    best_config.fusion_threshold_bytes = best->setting.fusion_threshold_bytes;
    best_config.cycle_time_ms = best->setting.cycle_time_ms;
    std::vector<double> ratios;
    std::vector<std::string> rounds;
    for (int r = 0; r < opt.confirm_rounds; ++r) {
      double fixed_ms = 0;
      Tuned again;
      if (r % 2 == 0) {
        fixed_ms = TimeFixed(w, best_config, opt.steps);
        again = TimeAutotune(w, base, opt);
      } else {
        again = TimeAutotune(w, base, opt);
        fixed_ms = TimeFixed(w, best_config, opt.steps);
      }
      ratios.push_back(fixed_ms / again.ms);
      rounds.push_back(absl::StrFormat("%.2f / %.2f ms = %.3f (chose %s)",
                                       fixed_ms, again.ms, ratios.back(),
                                       Label(again.chosen)));
    }
    const double confirm = ratios.empty() ? 0 : MedianOf(ratios);
    if (rank == 0) {
      std::printf("\n%s (%zu tensors): median step ms, slowest rank\n",
                  name.c_str(), w.sizes.size());
      std::printf("%-22s %10s %14s\n", "threshold / cycle", "ms",
                  "speed vs best");
      for (const Row& r : sweep) {
        std::printf("%-22s %10.2f %14.3f%s\n", Label(r.setting).c_str(), r.ms,
                    best->ms / r.ms, &r == best ? "  <- best fixed" : "");
      }
      std::printf("%-22s %10.2f %14.3f  (chose %s after %d steps, %.1f s)\n",
                  "autotune", first.ms, best->ms / first.ms,
                  Label(first.chosen).c_str(), first.tune_steps,
                  first.tune_seconds);
      std::printf("confirm, best fixed / autotune, re-timed side by side:\n");
      for (size_t r = 0; r < rounds.size(); ++r) {
        std::printf("  round %zu: %s\n", r + 1, rounds[r].c_str());
      }
      std::printf("  median %.3f\n", confirm);
      json.push_back(absl::StrFormat(
          "\"%s\": {\"best_fixed\": \"%s\", \"best_fixed_ms\": %.3f, "
          "\"autotune_choice\": \"%s\", \"autotune_ms\": %.3f, "
          "\"choice_in_sweep_ms\": %.3f, \"autotune_speed_vs_best\": %.4f, "
          "\"tune_steps\": %d, \"confirm_speed_vs_best\": [%s], "
          "\"confirm_median\": %.4f}",
          name, Label(best->setting), best->ms, Label(first.chosen), first.ms,
          chosen_fixed, best->ms / first.ms, first.tune_steps,
          absl::StrJoin(ratios, ", ",
                        [](std::string* out, double v) {
                          absl::StrAppend(out, absl::StrFormat("%.4f", v));
                        }),
          confirm));
    }
  }
  if (rank == 0) {
    std::printf("\nJSON {\"autotune_bench\": {%s}}\n",
                absl::StrJoin(json, ", ").c_str());
  }
  MPI_Finalize();
  return 0;
}
