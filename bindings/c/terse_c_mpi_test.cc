// The C ABI (libterse.so, linked dynamically) under mpirun with 2 and 4
// ranks: callback-mode and handle-mode operations, allgather, alltoall and
// reducescatter results,
// errors delivered through callbacks, callbacks that enqueue, shutdown
// with operations pending, and terse_init_with_comm's rank lists. Every rank
// runs the same tests in the same order.
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "bindings/c/terse_c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::HasSubstr;

// One callback's outcome, handed from the completion thread to the test.
class Outcome {
 public:
  static void Done(void* user_data, const terse_error* error,
                   const terse_allgather_result* result) {
    auto* self = static_cast<Outcome*>(user_data);
    std::lock_guard<std::mutex> lock(self->mu_);
    self->calls_++;
    self->code_ = terse_error_code(error);
    self->message_ = terse_error_message(error);
    if (result != nullptr) {
      const auto* bytes =
          static_cast<const uint8_t*>(terse_allgather_result_data(result));
      self->data_.assign(bytes, bytes + terse_allgather_result_nbytes(result));
      const int64_t* shape = terse_allgather_result_shape(result);
      self->shape_.assign(shape, shape + terse_allgather_result_ndim(result));
      const int64_t* first = terse_allgather_result_first_dims(result);
      self->first_dims_.assign(
          first, first + terse_allgather_result_num_ranks(result));
      self->dtype_ = terse_allgather_result_dtype(result);
    }
    self->cv_.notify_all();
  }

  // Blocks until the callback ran; returns its error code (0: OK).
  int Await() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return calls_ > 0; });
    return code_;
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::string message() {
    std::lock_guard<std::mutex> lock(mu_);
    return message_;
  }
  template <typename T>
  std::vector<T> data() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<T> out(data_.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), data_.data(), data_.size());
    return out;
  }
  std::vector<int64_t> shape() { return shape_; }
  std::vector<int64_t> first_dims() { return first_dims_; }
  int dtype() { return dtype_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int calls_ = 0;
  int code_ = -1;
  std::string message_;
  std::vector<uint8_t> data_;
  std::vector<int64_t> shape_;
  std::vector<int64_t> first_dims_;
  int dtype_ = -1;
};

// OK, or the error's message as a failure (and frees it).
::testing::AssertionResult Ok(terse_error* error) {
  if (error == nullptr) return ::testing::AssertionSuccess();
  ::testing::AssertionResult failure = ::testing::AssertionFailure()
                                       << "code " << terse_error_code(error)
                                       << ": " << terse_error_message(error);
  terse_error_free(error);
  return failure;
}

class TerseCMpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* names[] = {"TERSE_CYCLE_TIME_MS"};
    const char* values[] = {"1"};
    ASSERT_TRUE(Ok(terse_init(names, values, 1)));
    ASSERT_TRUE(Ok(terse_rank(&rank_)));
    ASSERT_TRUE(Ok(terse_size(&size_)));
    ASSERT_GE(size_, 2);
  }
  void TearDown() override { EXPECT_TRUE(Ok(terse_shutdown())); }

  int rank_ = -1;
  int size_ = 0;
};

TEST_F(TerseCMpiTest, InitTwiceFailsAndQueriesAnswer) {
  terse_error* again = terse_init_from_environment();
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(terse_error_code(again), 9);  // FailedPrecondition.
  EXPECT_THAT(terse_error_message(again), HasSubstr("already initialised"));
  terse_error_free(again);
  EXPECT_EQ(terse_is_initialized(), 1);
  int local_rank = -1;
  int local_size = -1;
  ASSERT_TRUE(Ok(terse_local_rank(&local_rank)));
  ASSERT_TRUE(Ok(terse_local_size(&local_size)));
  EXPECT_EQ(local_size, size_);  // One host.
  EXPECT_EQ(local_rank, rank_);
  EXPECT_TRUE(Ok(terse_barrier()));
}

// Sum over ranks of (rank + 1) * (i + 1) for every integer and float type,
// all in flight at once (so they fuse), finished by callbacks.
TEST_F(TerseCMpiTest, CallbackAllreduceOfEveryType) {
  const int64_t n = 1000;
  const int64_t shape[] = {10, 100};
  std::vector<float> f32(n);
  std::vector<double> f64(n);
  std::vector<int32_t> i32(n);
  std::vector<int64_t> i64(n);
  for (int64_t i = 0; i < n; ++i) {
    f32[i] = static_cast<float>((rank_ + 1) * (i % 7 + 1));
    f64[i] = (rank_ + 1) * (i % 7 + 1) * 0.5;
    i32[i] = (rank_ + 1) * static_cast<int32_t>(i);
    i64[i] = (rank_ + 1) * (int64_t{1} << 40) + i;
  }
  Outcome o32, o64, oi32, oi64;
  ASSERT_TRUE(Ok(terse_allreduce_async(
      "f32", f32.data(), f32.data(), n, TERSE_FLOAT32, TERSE_DEVICE_CPU, shape,
      2, TERSE_OP_SUM, 1.0, 1.0, &Outcome::Done, &o32, nullptr)));
  ASSERT_TRUE(Ok(terse_allreduce_async(
      "f64", f64.data(), f64.data(), n, TERSE_FLOAT64, TERSE_DEVICE_CPU, shape,
      2, TERSE_OP_AVERAGE, 1.0, 1.0, &Outcome::Done, &o64, nullptr)));
  ASSERT_TRUE(Ok(terse_allreduce_async(
      "i32", i32.data(), i32.data(), n, TERSE_INT32, TERSE_DEVICE_CPU, shape, 2,
      TERSE_OP_MAX, 1.0, 1.0, &Outcome::Done, &oi32, nullptr)));
  std::vector<int64_t> i64_out(n, -1);
  ASSERT_TRUE(Ok(terse_allreduce_async(
      "i64", i64.data(), i64_out.data(), n, TERSE_INT64, TERSE_DEVICE_CPU,
      shape, 2, TERSE_OP_SUM, 1.0, 1.0, &Outcome::Done, &oi64, nullptr)));
  EXPECT_EQ(o32.Await(), 0) << o32.message();
  EXPECT_EQ(o64.Await(), 0) << o64.message();
  EXPECT_EQ(oi32.Await(), 0) << oi32.message();
  EXPECT_EQ(oi64.Await(), 0) << oi64.message();
  const int64_t rank_sum = int64_t{size_} * (size_ + 1) / 2;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(f32[i], static_cast<float>(rank_sum * (i % 7 + 1))) << i;
    ASSERT_EQ(f64[i], rank_sum * (i % 7 + 1) * 0.5 / size_) << i;
    ASSERT_EQ(i32[i], size_ * static_cast<int32_t>(i)) << i;
    ASSERT_EQ(i64_out[i], rank_sum * (int64_t{1} << 40) + size_ * i) << i;
  }
  EXPECT_EQ(o32.calls(), 1);
}

TEST_F(TerseCMpiTest, PrescaleAndPostscale) {
  std::vector<float> x(8, 1.0f);
  const int64_t shape[] = {8};
  Outcome o;
  ASSERT_TRUE(Ok(terse_allreduce_async(
      "scaled", x.data(), x.data(), 8, TERSE_FLOAT32, TERSE_DEVICE_CPU, shape,
      1, TERSE_OP_SUM, 2.0, 0.25, &Outcome::Done, &o, nullptr)));
  ASSERT_EQ(o.Await(), 0) << o.message();
  EXPECT_FLOAT_EQ(x[7], 2.0f * size_ * 0.25f);
}

// Rank r contributes r + 1 rows of 3 values r*100 + j.
TEST_F(TerseCMpiTest, CallbackAllgatherHandsOverTheResult) {
  const int64_t rows = rank_ + 1;
  std::vector<int32_t> mine(rows * 3);
  for (int64_t j = 0; j < rows * 3; ++j) {
    mine[j] = rank_ * 100 + static_cast<int32_t>(j);
  }
  const int64_t shape[] = {rows, 3};
  Outcome o;
  ASSERT_TRUE(Ok(terse_allgather_async("rows", mine.data(), rows * 3,
                                       TERSE_INT32, TERSE_DEVICE_CPU, shape, 2,
                                       &Outcome::Done, &o, nullptr)));
  ASSERT_EQ(o.Await(), 0) << o.message();
  std::vector<int32_t> want;
  std::vector<int64_t> want_first;
  for (int r = 0; r < size_; ++r) {
    want_first.push_back(r + 1);
    for (int j = 0; j < (r + 1) * 3; ++j) want.push_back(r * 100 + j);
  }
  EXPECT_EQ(o.data<int32_t>(), want);
  EXPECT_EQ(o.first_dims(), want_first);
  EXPECT_EQ(o.shape(),
            (std::vector<int64_t>{int64_t{size_} * (size_ + 1) / 2, 3}));
  EXPECT_EQ(o.dtype(), TERSE_INT32);
}

TEST_F(TerseCMpiTest, CallbackBroadcastFromTheLastRank) {
  const int root = size_ - 1;
  std::vector<double> buffer(5, rank_ == root ? 3.25 : -1.0);
  const int64_t shape[] = {5};
  Outcome o;
  ASSERT_TRUE(Ok(terse_broadcast_async("bcast", buffer.data(), 5, TERSE_FLOAT64,
                                       TERSE_DEVICE_CPU, shape, 1, root,
                                       &Outcome::Done, &o, nullptr)));
  ASSERT_EQ(o.Await(), 0) << o.message();
  EXPECT_EQ(buffer, std::vector<double>(5, 3.25));
}

TEST_F(TerseCMpiTest, HandleModeWaitPollAndTake) {
  std::vector<float> x(4, static_cast<float>(rank_));
  const int64_t shape[] = {4};
  int64_t reduce = 0;
  ASSERT_TRUE(Ok(terse_allreduce_async(
      "h", x.data(), x.data(), 4, TERSE_FLOAT32, TERSE_DEVICE_CPU, shape, 1,
      TERSE_OP_MIN, 1.0, 1.0, nullptr, nullptr, &reduce)));
  int done = 0;
  while (done == 0) ASSERT_TRUE(Ok(terse_poll(reduce, &done)));
  ASSERT_TRUE(Ok(terse_wait(reduce)));
  EXPECT_EQ(x, std::vector<float>(4, 0.0f));
  terse_error* unknown = terse_poll(reduce, &done);  // Released by the wait.
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(terse_error_code(unknown), 5);  // NotFound.
  terse_error_free(unknown);

  const int64_t one[] = {1};
  int64_t value = rank_;
  int64_t gather = 0;
  ASSERT_TRUE(
      Ok(terse_allgather_async("g", &value, 1, TERSE_INT64, TERSE_DEVICE_CPU,
                               one, 1, nullptr, nullptr, &gather)));
  ASSERT_TRUE(Ok(terse_wait(gather)));
  terse_allgather_result* result = nullptr;
  ASSERT_TRUE(Ok(terse_take_allgather(gather, &result)));
  ASSERT_EQ(terse_allgather_result_nbytes(result), 8 * size_);
  const auto* got =
      static_cast<const int64_t*>(terse_allgather_result_data(result));
  for (int r = 0; r < size_; ++r) EXPECT_EQ(got[r], r);
  terse_allgather_result_free(result);
}

// Alltoall in callback mode: rank r sends j + 1 rows of {r, j} to rank j,
// so rank j receives j + 1 rows from every rank.
TEST_F(TerseCMpiTest, CallbackAlltoallHandsOverTheRows) {
  std::vector<int64_t> splits, mine;
  for (int j = 0; j < size_; ++j) {
    splits.push_back(j + 1);
    for (int k = 0; k <= j; ++k) {
      mine.push_back(rank_ * 100 + j);
      mine.push_back(k);
    }
  }
  const int64_t rows = static_cast<int64_t>(mine.size()) / 2;
  const int64_t shape[] = {rows, 2};
  Outcome o;
  ASSERT_TRUE(Ok(terse_alltoall_set_async(
      "a2a", mine.data(), rows * 2, TERSE_INT64, TERSE_DEVICE_CPU, shape, 2,
      splits.data(), size_, 0, &Outcome::Done, &o, nullptr)));
  ASSERT_EQ(o.Await(), 0) << o.message();
  std::vector<int64_t> want;
  for (int q = 0; q < size_; ++q) {
    for (int k = 0; k <= rank_; ++k) {
      want.push_back(q * 100 + rank_);
      want.push_back(k);
    }
  }
  EXPECT_EQ(o.data<int64_t>(), want);
  EXPECT_EQ(o.first_dims(), std::vector<int64_t>(size_, rank_ + 1));
  EXPECT_EQ(o.shape(), (std::vector<int64_t>{int64_t{size_} * (rank_ + 1), 2}));
}

// A group through the ABI: three allreduces and an alltoall whose splits
// the last rank gets wrong. Every op of the group fails on every rank,
// naming that rank and its reason; then the same allreduces, grouped again
// with good splits, sum right.
TEST_F(TerseCMpiTest, AGroupFailsOnEveryRankWhenOneRankRefusesItsSplits) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool bad = attempt == 0 && rank_ == size_ - 1;
    std::vector<std::vector<float>> x(3, std::vector<float>(4, rank_ + 1.0f));
    std::vector<float> rows(size_, 1.0f);
    std::vector<int64_t> splits(bad ? 1 : size_, bad ? size_ : 1);
    ASSERT_TRUE(Ok(terse_group_start("cg")));
    std::vector<int64_t> handles(4);
    const int64_t shape[] = {4};
    for (int t = 0; t < 3; ++t) {
      const std::string name = "cg." + std::to_string(t);
      ASSERT_TRUE(Ok(terse_allreduce_async(
          name.c_str(), x[t].data(), x[t].data(), 4, TERSE_FLOAT32,
          TERSE_DEVICE_CPU, shape, 1, TERSE_OP_SUM, 1.0, 1.0, nullptr, nullptr,
          &handles[t])));
    }
    const int64_t a2a_shape[] = {size_};
    ASSERT_TRUE(Ok(terse_alltoall_set_async(
        "cg.a2a", rows.data(), size_, TERSE_FLOAT32, TERSE_DEVICE_CPU,
        a2a_shape, 1, splits.data(), static_cast<int>(splits.size()), 0,
        nullptr, nullptr, &handles[3])));
    ASSERT_TRUE(Ok(terse_group_end()));
    for (int t = 0; t < 4; ++t) {
      terse_error* e = terse_wait(handles[t]);
      if (attempt == 0) {
        ASSERT_NE(e, nullptr) << "op " << t;
        EXPECT_THAT(terse_error_message(e),
                    ::testing::HasSubstr("tensor 'cg.a2a': rank " +
                                         std::to_string(size_ - 1) +
                                         " refused it: splits has 1 entries"));
        terse_error_free(e);
      } else {
        ASSERT_TRUE(Ok(e)) << "op " << t;
      }
    }
    if (attempt == 1) {
      terse_allgather_result* result = nullptr;
      ASSERT_TRUE(Ok(terse_take_alltoall(handles[3], &result)));
      terse_allgather_result_free(result);
      for (int t = 0; t < 3; ++t) {
        EXPECT_EQ(x[t][3], size_ * (size_ + 1) / 2.0f);
      }
    }
  }
  terse_error* none_open = terse_group_end();
  EXPECT_EQ(terse_error_code(none_open), 9);  // FailedPrecondition.
  terse_error_free(none_open);
}

// Reducescatter in handle mode: size + 1 rows of (rank + 1) each, summed;
// rank 0 gets two rows, the others one.
TEST_F(TerseCMpiTest, HandleModeReducescatter) {
  const int64_t rows = size_ + 1;
  std::vector<float> x(rows * 2, static_cast<float>(rank_ + 1));
  const int64_t shape[] = {rows, 2};
  int64_t handle = 0;
  ASSERT_TRUE(Ok(terse_reducescatter_set_async(
      "rs", x.data(), rows * 2, TERSE_FLOAT32, TERSE_DEVICE_CPU, shape, 2,
      TERSE_OP_SUM, 1.0, 1.0, 0, nullptr, nullptr, &handle)));
  ASSERT_TRUE(Ok(terse_wait(handle)));
  terse_allgather_result* result = nullptr;
  ASSERT_TRUE(Ok(terse_take_reducescatter(handle, &result)));
  const int64_t mine = rank_ == 0 ? 2 : 1;
  ASSERT_EQ(terse_allgather_result_nbytes(result), mine * 2 * 4);
  const auto* got =
      static_cast<const float*>(terse_allgather_result_data(result));
  const float sum = static_cast<float>(size_) * (size_ + 1) / 2;
  for (int64_t i = 0; i < mine * 2; ++i) EXPECT_EQ(got[i], sum);
  EXPECT_EQ(terse_allgather_result_shape(result)[0], mine);
  terse_allgather_result_free(result);
  // A device tensor is refused at enqueue, naming the op.
  terse_error* device = terse_reducescatter_set_async(
      "rs_dev", x.data(), rows * 2, TERSE_FLOAT32, 0, shape, 2, TERSE_OP_SUM,
      1.0, 1.0, 0, nullptr, nullptr, &handle);
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(terse_error_code(device), 12);  // Unimplemented.
  EXPECT_THAT(terse_error_message(device),
              HasSubstr("reducescatter of 'rs_dev'"));
  terse_error_free(device);
}

// A shape that differs on rank 1 fails every rank's callback with a message
// naming the tensor; the engine carries on.
TEST_F(TerseCMpiTest, MismatchedShapeReachesTheCallback) {
  const int64_t n = rank_ == 1 ? 5 : 4;
  std::vector<float> w(n, 1.0f);
  const int64_t shape[] = {n};
  Outcome bad;
  ASSERT_TRUE(Ok(terse_allreduce_async(
      "w", w.data(), w.data(), n, TERSE_FLOAT32, TERSE_DEVICE_CPU, shape, 1,
      TERSE_OP_SUM, 1.0, 1.0, &Outcome::Done, &bad, nullptr)));
  EXPECT_EQ(bad.Await(), 3);  // InvalidArgument.
  EXPECT_THAT(bad.message(), HasSubstr("tensor 'w': shape [4] on"));
  EXPECT_THAT(bad.message(), HasSubstr("but [5] on rank 1"));

  float y = 1.0f;
  const int64_t one[] = {1};
  Outcome good;
  ASSERT_TRUE(Ok(terse_allreduce_async(
      "w", &y, &y, 1, TERSE_FLOAT32, TERSE_DEVICE_CPU, one, 1, TERSE_OP_SUM,
      1.0, 1.0, &Outcome::Done, &good, nullptr)));
  EXPECT_EQ(good.Await(), 0) << good.message();
  EXPECT_EQ(y, static_cast<float>(size_));
}

// Per-call compression: a bad spec is refused at enqueue; a spec that
// differs on rank 0 fails every rank naming the tensor; agreeing specs run.
TEST_F(TerseCMpiTest, CompressedAllreduceSpecs) {
  std::vector<float> x(16, 1.0f);
  const int64_t shape[] = {16};
  int64_t handle = 0;
  terse_error* bad = terse_allreduce_compressed_async(
      "c.bad", x.data(), x.data(), 16, TERSE_FLOAT32, TERSE_DEVICE_CPU, shape,
      1, TERSE_OP_SUM, 1.0, 1.0, "zip:3", nullptr, nullptr, &handle);
  ASSERT_NE(bad, nullptr);
  EXPECT_EQ(terse_error_code(bad), 3);
  EXPECT_THAT(terse_error_message(bad), HasSubstr("tensor 'c.bad'"));
  terse_error_free(bad);

  Outcome mismatch;
  ASSERT_TRUE(Ok(terse_allreduce_compressed_async(
      "c.w", x.data(), x.data(), 16, TERSE_FLOAT32, TERSE_DEVICE_CPU, shape, 1,
      TERSE_OP_SUM, 1.0, 1.0, rank_ == 0 ? "topk:4" : "fp16", &Outcome::Done,
      &mismatch, nullptr)));
  EXPECT_EQ(mismatch.Await(), 3);
  EXPECT_THAT(mismatch.message(),
              HasSubstr("tensor 'c.w': compression topk:4 on rank 0 but fp16"));

  Outcome good;
  ASSERT_TRUE(Ok(terse_allreduce_compressed_async(
      "c.w", x.data(), x.data(), 16, TERSE_FLOAT32, TERSE_DEVICE_CPU, shape, 1,
      TERSE_OP_SUM, 1.0, 1.0, "fp16", &Outcome::Done, &good, nullptr)));
  EXPECT_EQ(good.Await(), 0) << good.message();
  EXPECT_EQ(x[15], static_cast<float>(size_));
}

// A callback may enqueue the next operation (a chain of three), but not
// shut terse down.
struct Chain {
  float value = 1.0f;
  int links = 0;
  int shutdown_code = -1;
  Outcome last;

  static void Done(void* user_data, const terse_error* error,
                   const terse_allgather_result*) {
    auto* chain = static_cast<Chain*>(user_data);
    if (error != nullptr || ++chain->links == 3) {
      terse_error* refused = terse_shutdown();
      chain->shutdown_code = terse_error_code(refused);
      terse_error_free(refused);
      Outcome::Done(&chain->last, error, nullptr);
      return;
    }
    const int64_t one[] = {1};
    const std::string name = "chain." + std::to_string(chain->links);
    terse_error* e = terse_allreduce_async(
        name.c_str(), &chain->value, &chain->value, 1, TERSE_FLOAT32,
        TERSE_DEVICE_CPU, one, 1, TERSE_OP_SUM, 1.0, 1.0, &Chain::Done, chain,
        nullptr);
    if (e != nullptr) {
      Outcome::Done(&chain->last, e, nullptr);
      terse_error_free(e);
    }
  }
};

TEST_F(TerseCMpiTest, CallbackEnqueuesTheNextOperation) {
  Chain chain;
  const int64_t one[] = {1};
  ASSERT_TRUE(Ok(terse_allreduce_async(
      "chain.0", &chain.value, &chain.value, 1, TERSE_FLOAT32, TERSE_DEVICE_CPU,
      one, 1, TERSE_OP_SUM, 1.0, 1.0, &Chain::Done, &chain, nullptr)));
  ASSERT_EQ(chain.last.Await(), 0) << chain.last.message();
  EXPECT_EQ(chain.links, 3);
  EXPECT_EQ(chain.value, static_cast<float>(size_ * size_ * size_));
  EXPECT_EQ(chain.shutdown_code, 9);  // FailedPrecondition: refused.
  EXPECT_EQ(terse_is_initialized(), 1);
}

// The compression reports and state go through the ABI (no compression
// here: every bucket reports "none"; the state survives a round trip).
TEST_F(TerseCMpiTest, CompressionReportsAndState) {
  std::vector<float> g(4096, 1.0f);
  const int64_t shape[] = {4096};
  Outcome o;
  ASSERT_TRUE(Ok(terse_allreduce_async(
      "report", g.data(), g.data(), 4096, TERSE_FLOAT32, TERSE_DEVICE_CPU,
      shape, 1, TERSE_OP_SUM, 1.0, 1.0, &Outcome::Done, &o, nullptr)));
  ASSERT_EQ(o.Await(), 0) << o.message();
  terse_bucket_reports* reports = nullptr;
  ASSERT_TRUE(Ok(terse_bucket_reports_get(&reports)));
  for (int i = 0; i < terse_bucket_reports_count(reports); ++i) {
    EXPECT_GE(terse_bucket_report_bytes(reports, i), 0);
    EXPECT_GE(terse_bucket_report_tensors(reports, i), 0);
    EXPECT_NE(terse_bucket_report_policy(reports, i), nullptr);
    EXPECT_NE(terse_bucket_report_compressor(reports, i), nullptr);
    EXPECT_GE(terse_bucket_report_cf(reports, i), 1.0);
  }
  terse_bucket_reports_free(reports);
  int64_t sent = -1;
  ASSERT_TRUE(Ok(terse_bytes_sent(&sent)));
  EXPECT_GE(sent, 0);
  EXPECT_TRUE(Ok(terse_notify_learning_rate_drop()));
  char* state = nullptr;
  size_t size = 0;
  ASSERT_TRUE(Ok(terse_save_compression_state(&state, &size)));
  ASSERT_NE(state, nullptr);
  EXPECT_TRUE(Ok(terse_load_compression_state(state, size)));
  terse_free(state);
  // Through a file: the same bytes; a damaged file fails and names itself.
  const std::string path = ::testing::TempDir() + "/terse_c_state." +
                           std::to_string(rank_) + ".ckpt";
  ASSERT_TRUE(Ok(terse_save_compression_state_to_file(path.c_str())));
  EXPECT_TRUE(Ok(terse_load_compression_state_from_file(path.c_str())));
  const std::string missing = path + ".missing";
  terse_error* error = terse_load_compression_state_from_file(missing.c_str());
  ASSERT_NE(error, nullptr);
  EXPECT_THAT(terse_error_message(error), HasSubstr(missing));
  terse_error_free(error);
}

// Rank 0 enqueues an op no other rank joins; shutdown fails it through the
// callback before returning.
TEST(TerseCMpiShutdownTest, PendingCallbackRunsBeforeShutdownReturns) {
  const char* names[] = {"TERSE_CYCLE_TIME_MS"};
  const char* values[] = {"1"};
  ASSERT_TRUE(Ok(terse_init(names, values, 1)));
  int rank = -1;
  ASSERT_TRUE(Ok(terse_rank(&rank)));
  float lonely = 1.0f;
  const int64_t one[] = {1};
  Outcome o;
  if (rank == 0) {
    ASSERT_TRUE(Ok(terse_allreduce_async(
        "lonely", &lonely, &lonely, 1, TERSE_FLOAT32, TERSE_DEVICE_CPU, one, 1,
        TERSE_OP_SUM, 1.0, 1.0, &Outcome::Done, &o, nullptr)));
  }
  EXPECT_TRUE(Ok(terse_shutdown()));
  EXPECT_EQ(terse_is_initialized(), 0);
  if (rank == 0) {
    ASSERT_EQ(o.calls(), 1);  // Already ran: no waiting here.
    EXPECT_NE(o.Await(), 0);
    EXPECT_THAT(o.message(), HasSubstr("shut down"));
  }
  // Enqueueing after shutdown fails at once, in either mode.
  terse_error* late = terse_allreduce_async(
      "late", &lonely, &lonely, 1, TERSE_FLOAT32, TERSE_DEVICE_CPU, one, 1,
      TERSE_OP_SUM, 1.0, 1.0, &Outcome::Done, &o, nullptr);
  ASSERT_NE(late, nullptr);
  EXPECT_THAT(terse_error_message(late), HasSubstr("call init() first"));
  terse_error_free(late);
}

// terse_init_with_comm over a rank list: the world reversed (terse rank i
// is world rank size-1-i), with a static set of the new rank 0; then every
// rank but the last (which must be refused, naming itself); then bad lists.
TEST(TerseCMpiCommTest, RankListsMakeTheWorld) {
  const char* names[] = {"TERSE_CYCLE_TIME_MS"};
  const char* values[] = {"1"};
  int world_rank = -1;
  int world_size = 0;
  ASSERT_TRUE(Ok(terse_init(names, values, 1)));
  ASSERT_TRUE(Ok(terse_rank(&world_rank)));
  ASSERT_TRUE(Ok(terse_size(&world_size)));
  ASSERT_TRUE(Ok(terse_shutdown()));

  std::vector<int> reversed;
  for (int r = world_size - 1; r >= 0; --r) reversed.push_back(r);
  const int set_ranks[] = {0};
  const int set_sizes[] = {1};
  ASSERT_TRUE(Ok(terse_init_with_comm(names, values, 1, set_ranks, set_sizes, 1,
                                      reversed.data(), world_size, nullptr)));
  int rank = -1;
  int size = 0;
  ASSERT_TRUE(Ok(terse_rank(&rank)));
  ASSERT_TRUE(Ok(terse_size(&size)));
  EXPECT_EQ(rank, world_size - 1 - world_rank);
  EXPECT_EQ(size, world_size);
  // Oracle: sum over terse ranks i of (world rank of i + 1) * (i + 1).
  int64_t product = static_cast<int64_t>(world_rank + 1) * (rank + 1);
  int64_t want = 0;
  for (int i = 0; i < world_size; ++i) {
    want += static_cast<int64_t>(reversed[i] + 1) * (i + 1);
  }
  const int64_t one[] = {1};
  int64_t handle = 0;
  ASSERT_TRUE(Ok(terse_allreduce_async(
      "placed", &product, &product, 1, TERSE_INT64, TERSE_DEVICE_CPU, one, 1,
      TERSE_OP_SUM, 1.0, 1.0, nullptr, nullptr, &handle)));
  ASSERT_TRUE(Ok(terse_wait(handle)));
  EXPECT_EQ(product, want);
  int set_rank = -1;
  ASSERT_TRUE(Ok(terse_process_set_ranks(1, &set_rank, 1)));
  EXPECT_EQ(set_rank, 0);  // A rank of the new world, as given.
  ASSERT_TRUE(Ok(terse_shutdown()));

  std::vector<int> all_but_last(reversed.rbegin(), reversed.rend() - 1);
  terse_error* error = terse_init_with_comm(
      names, values, 1, nullptr, nullptr, 0, all_but_last.data(),
      static_cast<int>(all_but_last.size()), nullptr);
  if (world_rank == world_size - 1) {
    ASSERT_NE(error, nullptr);
    EXPECT_EQ(terse_error_code(error), 3);  // InvalidArgument.
    EXPECT_THAT(terse_error_message(error),
                HasSubstr("rank " + std::to_string(world_rank) +
                          " of MPI_COMM_WORLD) is not in the rank list"));
    terse_error_free(error);
    EXPECT_EQ(terse_is_initialized(), 0);
  } else {
    ASSERT_TRUE(Ok(error));
    ASSERT_TRUE(Ok(terse_size(&size)));
    EXPECT_EQ(size, world_size - 1);
    EXPECT_TRUE(Ok(terse_barrier()));
    ASSERT_TRUE(Ok(terse_shutdown()));
  }

  const int twice[] = {0, 0};
  const int outside[] = {world_size};
  struct Bad {
    const int* ranks;
    int n;
    const char* says;
  } bad[] = {{twice, 2, "rank 0 is listed twice in the rank list [0, 0]"},
             {outside, 1, "is outside [0, "},
             {nullptr, 2, "world_ranks non-NULL"},
             {twice, -1, "num_world_ranks is -1"}};
  for (const Bad& b : bad) {
    error = terse_init_with_comm(names, values, 1, nullptr, nullptr, 0, b.ranks,
                                 b.n, nullptr);
    ASSERT_NE(error, nullptr) << b.says;
    EXPECT_EQ(terse_error_code(error), 3) << terse_error_message(error);
    EXPECT_THAT(terse_error_message(error), HasSubstr(b.says));
    terse_error_free(error);
  }
  EXPECT_EQ(terse_is_initialized(), 0);
}

}  // namespace
