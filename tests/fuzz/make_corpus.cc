// Writes the seed corpus of the fuzz targets (tests/fuzz/make_corpus.sh):
//   make_corpus OUT_DIR    -> OUT_DIR/{payload,control,config}/<seed name>
// Valid inputs of every kind the targets parse, plus a few near misses; the
// fuzzer mutates from there. Deterministic: the same files on every run.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/control.pb.h"
#include "compressors/compressor.h"
#include "compressors/powersgd_compressor.h"
#include "compressors/registry.h"

namespace terse {
namespace {

namespace fs = std::filesystem;

// Must match kDenseSizes in payload_fuzzer.cc.
constexpr int64_t kDenseSizes[] = {1, 7, 64, 1000};

void Write(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "make_corpus: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

std::vector<float> Gaussian(int64_t d, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(d);
  for (float& v : x) v = dist(rng);
  return x;
}

struct Variant {
  std::string tag;
  CompressorOptions options;
};

std::vector<Variant> VariantsFor(const std::string& name) {
  CompressorOptions base;
  base.error_feedback = ErrorFeedbackMode::kOff;
  base.num_threads = 1;
  std::vector<Variant> out;
  auto add = [&](std::string tag, auto tweak) {
    CompressorOptions o = base;
    tweak(&o);
    out.push_back({std::move(tag), o});
  };
  if (name == "topk" || name == "dgc" || name == "redsync" ||
      name == "threshold") {
    add("u32_bf16", [](CompressorOptions*) {});
    add("delta16_bf16",
        [](CompressorOptions* o) { o->index_coding = IndexCoding::kDelta16; });
    add("varint_fp16", [](CompressorOptions* o) {
      o->index_coding = IndexCoding::kVarint;
      o->value_type = ValueType::kFloat16;
    });
    add("u32_fp32",
        [](CompressorOptions* o) { o->value_type = ValueType::kFloat32; });
  } else if (name == "randomk") {
    add("fp32", [](CompressorOptions*) {});
    add("bf16", [](CompressorOptions* o) {
      o->randomk_value_type = ValueType::kBFloat16;
    });
  } else if (name == "qsgd") {
    add("default", [](CompressorOptions*) {});
    add("s4_b16", [](CompressorOptions* o) {
      o->qsgd_levels = 4;
      o->qsgd_bucket_size = 16;
    });
  } else if (name == "efsignsgd") {
    add("one_scale", [](CompressorOptions*) {});
    add("block16", [](CompressorOptions* o) { o->sign_block_size = 16; });
  } else {
    add("default", [](CompressorOptions*) {});
  }
  return out;
}

void PayloadSeeds(const fs::path& dir) {
  const std::vector<std::string>& names = CompressorNames();
  for (size_t id = 0; id < names.size(); ++id) {
    for (int s = 0; s < 4; ++s) {
      const int64_t d = kDenseSizes[s];
      const std::string head = {static_cast<char>(id), static_cast<char>(s)};
      if (names[id] == "powersgd") {
        for (int rank = 1; rank <= 2; ++rank) {
          const PowerSgdShape shape = PowerSgdShapeFor(d, rank);
          const int64_t floats = 2 * (shape.rows + shape.cols) * shape.rank;
          const std::vector<float> sums = Gaussian(floats, 7 + s, 2.0f);
          std::string bytes = head + static_cast<char>(rank - 1);
          bytes.append(reinterpret_cast<const char*>(sums.data()),
                       4 * sums.size());
          Write(dir / absl::StrCat("powersgd_r", rank, "_d", d), bytes);
        }
        continue;
      }
      for (const Variant& v : VariantsFor(names[id])) {
        absl::StatusOr<std::unique_ptr<Compressor>> c =
            CreateCompressor(names[id], 20, v.options);
        Payload p;
        if (!c.ok() || !(*c)->Compress(Gaussian(d, 1 + s, 1.0f), {}, &p).ok()) {
          std::fprintf(stderr, "make_corpus: %s failed\n", names[id].c_str());
          std::exit(1);
        }
        Write(dir / absl::StrCat(names[id], "_", v.tag, "_d", d),
              head + std::string(p.bytes.begin(), p.bytes.end()));
      }
    }
  }
}

// Length-prefixed records after the mode byte (see control_fuzzer.cc).
std::string Records(uint8_t head, const std::vector<std::string>& messages) {
  std::string out(1, static_cast<char>(head));
  for (const std::string& m : messages) {
    out += static_cast<char>(m.size() & 0xff);
    out += static_cast<char>((m.size() >> 8) & 0xff);
    out += m;
  }
  return out;
}

uint8_t RequestHead(int size) { return static_cast<uint8_t>((size - 1) << 1); }
// Worker view with a response cache of `capacity` slots.
uint8_t ResponseHead(int capacity) {
  return static_cast<uint8_t>(1 | (capacity << 1));
}

proto::Request MakeRequest(int rank, const std::string& name, proto::OpType op,
                           int dtype, std::vector<int64_t> shape) {
  proto::Request r;
  r.set_rank(rank);
  r.set_name(name);
  r.set_op(op);
  r.set_reduce_op(proto::AVERAGE);
  r.set_dtype(dtype);
  for (int64_t s : shape) r.add_shape(s);
  r.set_device(-1);
  r.set_prescale(1.0);
  r.set_postscale(1.0);
  return r;
}

// One request list per rank; `tweak` may alter rank r's requests.
template <typename Tweak>
std::vector<std::string> RankLists(int size, Tweak tweak) {
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) {
    proto::RequestList list;
    list.set_rank(r);
    *list.add_requests() =
        MakeRequest(r, "layer1.weight", proto::ALLREDUCE, 0, {64, 32});
    *list.add_requests() =
        MakeRequest(r, "layer1.bias", proto::ALLREDUCE, 0, {64});
    tweak(r, &list);
    out.push_back(list.SerializeAsString());
  }
  return out;
}

void ControlSeeds(const fs::path& dir) {
  for (int size : {2, 4}) {
    Write(dir / absl::StrCat("requests_agree_np", size),
          Records(RequestHead(size),
                  RankLists(size, [](int, proto::RequestList*) {})));
    Write(dir / absl::StrCat("requests_shape_mismatch_np", size),
          Records(RequestHead(size),
                  RankLists(size, [](int r, proto::RequestList* l) {
                    if (r == 1) l->mutable_requests(0)->set_shape(1, 33);
                  })));
    Write(dir / absl::StrCat("requests_dtype_mismatch_np", size),
          Records(RequestHead(size),
                  RankLists(size, [](int r, proto::RequestList* l) {
                    if (r == 1) l->mutable_requests(1)->set_dtype(1);
                  })));
    Write(dir / absl::StrCat("requests_broadcast_join_np", size),
          Records(RequestHead(size),
                  RankLists(size, [size](int r, proto::RequestList* l) {
                    proto::Request* b = l->add_requests();
                    *b = MakeRequest(r, "init", proto::BROADCAST, 3, {10});
                    b->set_root_rank(size - 1);
                    if (r == 0) {
                      *l->add_requests() =
                          MakeRequest(r, "__terse.join", proto::JOIN, 0, {});
                    }
                  })));
    Write(dir / absl::StrCat("requests_allgather_np", size),
          Records(RequestHead(size),
                  RankLists(size, [](int r, proto::RequestList* l) {
                    *l->add_requests() = MakeRequest(
                        r, "embeddings", proto::ALLGATHER, 4, {r + 1, 8});
                  })));
    // Alltoall with uneven splits (rank r sends r + j rows to rank j), and
    // one where rank 1's splits do not sum to its first dimension.
    for (const bool bad : {false, true}) {
      Write(dir / absl::StrCat(bad ? "requests_alltoall_bad_splits_np"
                                   : "requests_alltoall_np",
                               size),
            Records(RequestHead(size),
                    RankLists(size, [size, bad](int r, proto::RequestList* l) {
                      int64_t rows = 0;
                      proto::Request a =
                          MakeRequest(r, "tokens", proto::ALLTOALL, 0, {});
                      for (int j = 0; j < size; ++j) {
                        a.add_splits(r + j);
                        rows += r + j;
                      }
                      if (bad && r == 1) rows += 1;
                      a.add_shape(rows);
                      a.add_shape(4);
                      *l->add_requests() = a;
                    })));
    }
    // Reducescatter; rank 0 asks for Sum where the others average.
    Write(dir / absl::StrCat("requests_reducescatter_np", size),
          Records(RequestHead(size),
                  RankLists(size, [](int r, proto::RequestList* l) {
                    *l->add_requests() = MakeRequest(
                        r, "grads", proto::REDUCESCATTER, 0, {10, 3});
                    proto::Request m = MakeRequest(
                        r, "grads.mixed", proto::REDUCESCATTER, 0, {7});
                    if (r == 0) m.set_reduce_op(proto::SUM);
                    *l->add_requests() = m;
                  })));
    // Rank size-1 never sends layer1.bias: a stall after two cycles.
    Write(dir / absl::StrCat("requests_stalled_np", size),
          Records(RequestHead(size),
                  RankLists(size, [size](int r, proto::RequestList* l) {
                    l->mutable_requests(0)->set_queued_seconds(0.5);
                    if (r == size - 1) l->mutable_requests()->RemoveLast();
                  })));
    Write(dir / absl::StrCat("requests_error_shutdown_np", size),
          Records(RequestHead(size),
                  RankLists(size, [](int r, proto::RequestList* l) {
                    if (r == 1) l->set_error("rank 1: out of memory");
                    if (r == 0) l->set_shutdown(true);
                  })));
  }
  proto::ResponseList ok;
  proto::Response* e = ok.add_responses();
  e->set_kind(proto::Response::EXECUTE);
  e->set_op(proto::ALLREDUCE);
  e->add_names("layer1.weight");
  e->add_names("layer1.bias");
  e->set_dtype(0);
  e->set_device(-1);
  proto::Response* g = ok.add_responses();
  g->set_kind(proto::Response::EXECUTE);
  g->set_op(proto::ALLGATHER);
  g->add_names("embeddings");
  for (int64_t n : {3, 5, 0, 2}) g->add_tensor_sizes(n);
  proto::Response* x = ok.add_responses();
  x->set_kind(proto::Response::EXECUTE);
  x->set_op(proto::ALLTOALL);
  x->add_names("tokens");
  x->set_dtype(0);
  x->set_device(-1);
  for (int64_t n : {0, 1, 2, 3, 1, 2, 3, 4, 2, 3, 4, 5, 3, 4, 5, 6}) {
    x->add_tensor_sizes(n);
  }
  proto::Response* rs = ok.add_responses();
  rs->set_kind(proto::Response::EXECUTE);
  rs->set_op(proto::REDUCESCATTER);
  rs->add_names("grads");
  rs->set_dtype(0);
  rs->set_device(-1);
  rs->set_reduce_op(proto::AVERAGE);
  rs->add_shape(10);
  rs->add_shape(3);
  rs->set_prescale(1);
  rs->set_postscale(1);
  proto::ResponseList failed;
  proto::Response* f = failed.add_responses();
  f->set_kind(proto::Response::ERROR);
  f->set_op(proto::ALLREDUCE);
  f->add_names("w");
  f->set_error("tensor 'w': shape [4] on ranks 0,2 but [5] on rank 1");
  proto::ResponseList down;
  down.set_shutdown(true);
  down.set_error("rank 2: lost");
  proto::ResponseList cacheable;
  for (const char* name : {"a", "b", "c", "a"}) {
    proto::Response* c = cacheable.add_responses();
    c->set_kind(proto::Response::EXECUTE);
    c->set_op(proto::ALLREDUCE);
    c->add_names(name);
    c->set_dtype(0);
    c->set_device(-1);
    c->add_shape(16);
    c->set_reduce_op(proto::SUM);
    c->set_prescale(1);
    c->set_postscale(0.25);
  }
  Write(dir / "responses_execute",
        Records(ResponseHead(4), {ok.SerializeAsString()}));
  Write(dir / "responses_cache_evicts",
        Records(ResponseHead(2), {cacheable.SerializeAsString(),
                                  cacheable.SerializeAsString()}));
  Write(dir / "responses_error_then_shutdown",
        Records(ResponseHead(1),
                {failed.SerializeAsString(), down.SerializeAsString()}));
  Write(dir / "empty", "");
}

void ConfigSeeds(const fs::path& dir) {
  std::string defaults;
  for (const KnobDoc& k : ConfigKnobDocs()) {
    absl::StrAppend(&defaults, k.name, "=", k.default_value, "\n");
  }
  Write(dir / "defaults", defaults);
  Write(dir / "empty", "");
  Write(dir / "rules",
        "TERSE_COMPRESSION=gravac\nTERSE_CF=50\n"
        "TERSE_COMPRESSION_RULES=*.bias=none;conv?.weight=topk:200;"
        "fc*=accordion; emb*=randomk:1e3 \n"
        "@conv1.weight\n@fc2.weight\n@layer.bias\n@embedding\n@other\n");
  Write(dir / "gravac",
        "TERSE_GRAVAC_COMPRESSOR=dgc\nTERSE_GRAVAC_CF_MIN=20\n"
        "TERSE_GRAVAC_CF_MAX=2000\nTERSE_GRAVAC_EPSILON=0.7\n"
        "TERSE_GRAVAC_OMEGA=0.05\nTERSE_GRAVAC_WINDOW=2000\n"
        "TERSE_GRAVAC_POLICY=geometric\nTERSE_GRAVAC_SCOPE=global\n"
        "TERSE_GRAVAC_EWMA=0.04\n");
  Write(dir / "accordion_powersgd",
        "TERSE_COMPRESSION=accordion\nTERSE_ACCORDION_LOW_CF=4\n"
        "TERSE_ACCORDION_HIGH_CF=400\nTERSE_ACCORDION_SWITCH_STEPS=10\n"
        "TERSE_ACCORDION_THRESHOLD=inf\nTERSE_POWERSGD_RANK=4\n"
        "TERSE_POWERSGD_START_STEP=100\n");
  Write(dir / "engine",
        "TERSE_FUSION_THRESHOLD=0\nTERSE_CYCLE_TIME_MS=0.5\n"
        "TERSE_CACHE_CAPACITY=0\nTERSE_BACKEND=mpi\n"
        "TERSE_TIMELINE=/tmp/terse timeline.json\n"
        "TERSE_STALL_CHECK_SECONDS=5\nTERSE_STALL_SHUTDOWN_SECONDS=30\n"
        "TERSE_LOG_LEVEL=debug\nTERSE_SEED=18446744073709551615\n"
        "TERSE_MIN_COMPRESS_BYTES=1099511627776\n");
  Write(dir / "bad_values",
        "TERSE_CF=0.5\nTERSE_SEED=-1\nTERSE_GRAVAC_EPSILON=0\n");
  Write(dir / "inconsistent",
        "TERSE_GRAVAC_CF_MIN=500\nTERSE_GRAVAC_CF_MAX=100\n");
  Write(dir / "typo", "TERSE_COMPRESION=topk\n");
  Write(dir / "unknown", "TERSE_SOMETHING_ELSE=1\nPATH=/bin\nTERSE_=\n");
  Write(dir / "bad_rules", "TERSE_COMPRESSION_RULES=a=topk:0.5;=none\n");
}

}  // namespace
}  // namespace terse

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus OUT_DIR\n");
    return 2;
  }
  const std::filesystem::path out(argv[1]);
  for (const char* target : {"payload", "control", "config"}) {
    std::filesystem::create_directories(out / target);
  }
  terse::PayloadSeeds(out / "payload");
  terse::ControlSeeds(out / "control");
  terse::ConfigSeeds(out / "config");
  return 0;
}
