// CompressedReducer's checkpoints: the chunked format, the older protobuf
// format, the file API, and loads that must fail without touching the state.
// The oracle is a proto::CompressionState built here by hand (the older
// format, which LoadState must keep reading) and the format's layout.
#include <google/protobuf/util/message_differencer.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/checkpoint_format.h"
#include "engine/compressed_reducer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace terse {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::AllOf;
using ::testing::HasSubstr;

Config MakeConfig() {
  absl::StatusOr<Config> c = Config::FromMap({{"TERSE_COMPRESSION", "topk"}});
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

std::vector<float> Values(int n, float base) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = base + 0.25f * i;
  if (n > 2) {
    v[1] = -0.0f;
    v[2] = std::numeric_limits<float>::quiet_NaN();
  }
  return v;
}

void AddTensor(const std::string& name, int64_t offset,
               const std::vector<float>& v,
               google::protobuf::RepeatedPtrField<proto::ResidualState>* out) {
  proto::ResidualState* r = out->Add();
  r->set_name(name);
  r->set_tensor_offset(offset);
  r->mutable_values()->Add(v.begin(), v.end());
}

// A state with every kind of content, in the older format's message.
proto::CompressionState FullState(float base) {
  proto::CompressionState s;
  proto::BucketCompressionState* a = s.add_buckets();
  a->set_key("layer1.bias,layer1.weight");
  a->mutable_policy()->set_kind("accordion");
  a->mutable_policy()->set_step(17);
  a->mutable_policy()->set_previous_norm(3.5);
  a->mutable_policy()->set_has_previous(true);
  const std::vector<float> acc = Values(13, base + 100);
  a->mutable_accumulator()->Add(acc.begin(), acc.end());
  a->set_has_pending(true);
  a->set_pending_compressor("powersgd");
  a->set_pending_send_cf(10);
  a->set_pending_level(4);
  a->add_pending_norms(1.5);
  a->add_pending_norms(2.5);
  proto::BucketCompressionState* p = s.add_buckets();
  p->set_key("layer2.weight");
  proto::PolicyState* policy = p->mutable_policy();
  policy->set_kind("portfolio");
  policy->set_step(9);
  policy->set_decisions(3);
  proto::PortfolioCandidate* c = policy->mutable_portfolio()->add_candidates();
  c->set_name("topk@100");
  c->set_gain(0.75);
  c->set_has_gain(true);
  c->set_throughput_sum(12);
  c->set_throughput_count(2);
  policy->mutable_portfolio()->set_current(1);
  policy->mutable_portfolio()->add_queue(2);
  policy->mutable_portfolio()->set_reason("trial");
  p->set_has_pending(true);
  p->set_pending_compressor("topk");
  p->set_pending_send_cf(100);
  p->set_pending_probe_cf_min(10);
  p->set_pending_probe_cf_candidate(100);
  p->set_pending_quiet(true);
  p->set_pending_level(0);
  proto::PendingProbe* probe = p->add_pending_probes();
  probe->set_compressor("powersgd");
  probe->set_cf(8);
  probe->set_level(2);
  for (int i = 0; i < 6; ++i) p->add_pending_norms(0.5 * i);
  AddTensor("layer1.weight", 0, Values(21, base), s.mutable_residuals());
  AddTensor("layer2.weight", 64, Values(9, base + 10), s.mutable_residuals());
  AddTensor("layer1.weight", 0, Values(21, base + 20), s.mutable_velocities());
  s.set_bytes_sent(int64_t{1} << 40);
  return s;
}

bool BitEqual(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() &&
         (x.empty() || std::memcmp(x.data(), y.data(), 4 * x.size()) == 0);
}

std::vector<float> ToVector(const google::protobuf::RepeatedField<float>& f) {
  return std::vector<float>(f.begin(), f.end());
}

std::string Save(const CompressedReducer& r) {
  absl::StatusOr<std::string> bytes = r.SaveState();
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : "";
}

std::string Path(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/", name);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The older format loads; the save is the chunked format and holds the same
// state, field by field and bit for bit; loading it and saving again gives
// the same bytes.
TEST(CompressedReducerCheckpointTest, OlderFormatLoadsAndRoundTrips) {
  const proto::CompressionState old = FullState(1.0f);
  CompressedReducer reducer(MakeConfig(), 0, 2);
  ASSERT_TRUE(reducer.LoadState(old.SerializeAsString()).ok());
  EXPECT_EQ(reducer.bytes_sent(), int64_t{1} << 40);
  EXPECT_TRUE(
      BitEqual(reducer.Residual("layer1.weight", 21), Values(21, 1.0f)));

  const std::string saved = Save(reducer);
  ASSERT_TRUE(checkpoint::HasMagic(saved));
  checkpoint::StringSource source(saved);
  absl::StatusOr<checkpoint::Checkpoint> read =
      checkpoint::ReadCheckpoint(&source);
  ASSERT_TRUE(read.ok()) << read.status();
  const proto::CheckpointHeader& h = read->header;
  EXPECT_EQ(h.bytes_sent(), old.bytes_sent());
  ASSERT_EQ(h.buckets_size(), old.buckets_size());
  for (int i = 0; i < old.buckets_size(); ++i) {
    proto::BucketCompressionState expected = old.buckets(i);
    expected.clear_accumulator();  // In its own tensor.
    std::string diff;
    MessageDifferencer differencer;
    differencer.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differencer.Compare(expected, h.buckets(i))) << diff;
  }
  // Tensors: accumulators, then residuals, then velocities.
  ASSERT_EQ(h.tensors_size(), 4);
  using T = proto::CheckpointTensor;
  EXPECT_EQ(h.tensors(0).kind(), T::ACCUMULATOR);
  EXPECT_EQ(h.tensors(0).name(), old.buckets(0).key());
  EXPECT_TRUE(
      BitEqual(read->values[0], ToVector(old.buckets(0).accumulator())));
  for (int i = 0; i < 2; ++i) {
    const proto::ResidualState& r = old.residuals(i);
    EXPECT_EQ(h.tensors(1 + i).kind(), T::RESIDUAL);
    EXPECT_EQ(h.tensors(1 + i).name(), r.name());
    EXPECT_EQ(h.tensors(1 + i).tensor_offset(), r.tensor_offset());
    EXPECT_TRUE(BitEqual(read->values[1 + i], ToVector(r.values())));
  }
  EXPECT_EQ(h.tensors(3).kind(), T::VELOCITY);
  EXPECT_TRUE(BitEqual(read->values[3], ToVector(old.velocities(0).values())));

  CompressedReducer again(MakeConfig(), 0, 2);
  ASSERT_TRUE(again.LoadState(saved).ok());
  EXPECT_EQ(Save(again), saved);
  EXPECT_EQ(again.bytes_sent(), int64_t{1} << 40);
}

TEST(CompressedReducerCheckpointTest, EmptyOlderStateStillLoads) {
  CompressedReducer reducer(MakeConfig(), 0, 1);
  ASSERT_TRUE(reducer.LoadState(FullState(1.0f).SerializeAsString()).ok());
  ASSERT_TRUE(reducer.LoadState("").ok());  // What an idle reducer saved.
  EXPECT_EQ(reducer.bytes_sent(), 0);
  EXPECT_TRUE(BitEqual(reducer.Residual("layer1.weight", 21),
                       std::vector<float>(21, 0.0f)));
}

// Every truncation and every damaged chunk fails, names the problem, and
// leaves the reducer's previous state as it was.
TEST(CompressedReducerCheckpointTest, DamagedCheckpointsFailAndChangeNothing) {
  CompressedReducer source(MakeConfig(), 0, 2);
  ASSERT_TRUE(source.LoadState(FullState(1.0f).SerializeAsString()).ok());
  source.set_checkpoint_chunk_bytes(16);
  const std::string good = Save(source);
  checkpoint::StringSource in(good);
  absl::StatusOr<checkpoint::Checkpoint> layout =
      checkpoint::ReadCheckpoint(&in);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const int64_t data = checkpoint::kPrefixBytes +
                       static_cast<int64_t>(good[12] & 0xff) +
                       (static_cast<int64_t>(good[13] & 0xff) << 8);
  ASSERT_EQ(good[14], 0);
  ASSERT_EQ(good[15], 0);

  CompressedReducer target(MakeConfig(), 1, 2);
  ASSERT_TRUE(target.LoadState(FullState(-7.0f).SerializeAsString()).ok());
  const std::string before = Save(target);
  const std::string file = Path("damaged.ckpt");
  auto expect_fails = [&](const std::string& bad, const std::string& where,
                          const std::vector<std::string>& says) {
    for (bool via_file : {false, true}) {
      absl::Status status;
      if (via_file) {
        WriteFile(file, bad);
        status = target.LoadStateFromFile(file);
        EXPECT_THAT(status.message(), HasSubstr(file)) << where;
      } else {
        status = target.LoadState(bad);
      }
      EXPECT_FALSE(status.ok()) << where;
      for (const std::string& s : says) {
        EXPECT_THAT(status.message(), HasSubstr(s)) << where;
      }
      ASSERT_EQ(Save(target), before) << where << " changed the state";
    }
  };
  // Truncated inside the prefix and the header.
  for (int64_t cut : {int64_t{8}, int64_t{19}}) {
    expect_fails(good.substr(0, cut), absl::StrCat("cut at ", cut),
                 {"truncated inside its 20-byte prefix"});
  }
  for (int64_t cut : {int64_t{20}, data / 2, data - 1}) {
    expect_fails(good.substr(0, cut), absl::StrCat("cut at ", cut),
                 {"truncated inside its header"});
  }
  // At every chunk boundary (the chunk that starts there is missing), in
  // the middle of every chunk, and a flipped byte in every chunk.
  int64_t at = data;
  int chunks = 0;
  for (const proto::CheckpointTensor& t : layout->header.tensors()) {
    for (int c = 0; c < t.chunk_crc32_size(); ++c, ++chunks) {
      const int64_t len = std::min<int64_t>(16, t.count() * 4 - 16 * c);
      const std::string chunk =
          absl::StrCat("'", t.name(), "' (", checkpoint::KindName(t.kind()));
      const std::string index =
          absl::StrCat("chunk ", c, " of ", t.chunk_crc32_size());
      expect_fails(good.substr(0, at), absl::StrCat("cut at ", at),
                   {"truncated", chunk, index});
      expect_fails(good.substr(0, at + len / 2),
                   absl::StrCat("cut at ", at + len / 2),
                   {"truncated", chunk, index});
      std::string bad = good;
      bad[at + len - 1] ^= 0x40;
      expect_fails(bad, absl::StrCat("flip at ", at + len - 1),
                   {"corrupt", chunk, index, "CRC-32 expected", "found"});
      at += len;
    }
  }
  EXPECT_EQ(at, static_cast<int64_t>(good.size()));
  EXPECT_GT(chunks, 8);
  // A flipped byte in every byte of the header, and trailing bytes.
  for (int64_t i = checkpoint::kPrefixBytes; i < data; ++i) {
    std::string bad = good;
    bad[i] ^= 0x01;
    expect_fails(bad, absl::StrCat("header flip at ", i),
                 {"header", "corrupt"});
  }
  expect_fails(good + "junk", "trailing", {"4 bytes after its last chunk"});
  // Not a checkpoint at all.
  expect_fails("not a checkpoint", "garbage", {"does not parse"});
  // The good one loads.
  ASSERT_TRUE(target.LoadState(good).ok());
  EXPECT_EQ(target.bytes_sent(), source.bytes_sent());
}

TEST(CompressedReducerCheckpointTest, FileApiRoundTripsAndIsAtomic) {
  CompressedReducer reducer(MakeConfig(), 0, 2);
  ASSERT_TRUE(reducer.LoadState(FullState(2.0f).SerializeAsString()).ok());
  reducer.set_checkpoint_chunk_bytes(64);
  const std::string path = Path("state.ckpt");
  ASSERT_TRUE(reducer.SaveStateToFile(path).ok());
  EXPECT_FALSE(Exists(path + ".tmp"));
  EXPECT_EQ(ReadFile(path), Save(reducer));

  CompressedReducer loaded(MakeConfig(), 0, 2);
  ASSERT_TRUE(loaded.LoadStateFromFile(path).ok());
  loaded.set_checkpoint_chunk_bytes(64);
  EXPECT_EQ(Save(loaded), Save(reducer));

  // A failing save leaves the previous file and no temporary.
  const std::string previous = ReadFile(path);
  reducer.set_checkpoint_chunk_bytes(6);  // Invalid: the save fails.
  EXPECT_FALSE(reducer.SaveStateToFile(path).ok());
  EXPECT_EQ(ReadFile(path), previous);
  EXPECT_FALSE(Exists(path + ".tmp"));
  // Unwritable and missing paths name the path.
  const std::string nowhere = Path("no/such/dir/state.ckpt");
  EXPECT_THAT(reducer.SaveStateToFile(nowhere).message(), HasSubstr(nowhere));
  EXPECT_THAT(loaded.LoadStateFromFile(nowhere).message(), HasSubstr(nowhere));

  // A file holding the older format loads too.
  const std::string old_path = Path("old.ckpt");
  WriteFile(old_path, FullState(3.0f).SerializeAsString());
  ASSERT_TRUE(loaded.LoadStateFromFile(old_path).ok());
  EXPECT_TRUE(BitEqual(loaded.Residual("layer1.weight", 21), Values(21, 3.0f)));
}

TEST(CompressedReducerCheckpointTest, AccumulatorWithoutBucketIsRejected) {
  proto::CheckpointHeader meta;
  std::vector<float> acc(4, 1.0f);
  std::string bytes;
  checkpoint::StringSink sink(&bytes);
  ASSERT_TRUE(
      checkpoint::WriteCheckpoint(
          meta, {{"a,b", 0, proto::CheckpointTensor::ACCUMULATOR, acc}}, &sink)
          .ok());
  CompressedReducer reducer(MakeConfig(), 0, 1);
  EXPECT_THAT(reducer.LoadState(bytes).message(),
              AllOf(HasSubstr("accumulator 'a,b'"), HasSubstr("no bucket")));
  std::string twice;
  checkpoint::StringSink sink2(&twice);
  ASSERT_TRUE(checkpoint::WriteCheckpoint(
                  meta,
                  {{"x", 0, proto::CheckpointTensor::RESIDUAL, acc},
                   {"x", 0, proto::CheckpointTensor::RESIDUAL, acc}},
                  &sink2)
                  .ok());
  EXPECT_THAT(reducer.LoadState(twice).message(), HasSubstr("twice"));
}

}  // namespace
}  // namespace terse
