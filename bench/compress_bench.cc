// compress_bench: the sparse-encoding kernels against the memory limit.
//
// d = 2^24 floats (Gaussian), keep 1%. Times, in one run and with the same
// threads: one plain read pass over the array (the memory limit), exact
// top-k, sampled top-k (DGC), random-k (indices + gather), encode of one
// payload (u32 + bf16), and decode + scatter-add of 4 payloads. Also bytes
// per kept entry for each index coding. Prints a table, then one JSON line
// with the ratios to the read pass and the targets.
//
// Usage: compress_bench [--threads=N] [--reps=R] [--log2d=L]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "compressors/kernels/parallel.h"
#include "compressors/kernels/randomk.h"
#include "compressors/kernels/select.h"
#include "compressors/kernels/sparse_ops.h"
#include "compressors/kernels/topk.h"
#include "compressors/payload.h"
#include "compressors/registry.h"

namespace terse {
namespace {

double MedianMs(int reps, const std::function<void()>& fn) {
  fn();  // Warm-up (page faults, caches).
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// One read of every element (a bitwise reduction the compiler keeps).
uint64_t ReadPass(const float* x, int64_t d, int threads) {
  std::vector<uint64_t> partial(threads, 0);
  kernels::ParallelFor(threads, [&](int t) {
    const int64_t begin = kernels::ChunkBegin(d, threads, t);
    const int64_t end = kernels::ChunkBegin(d, threads, t + 1);
    uint32_t acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
      uint32_t v[8];
      std::memcpy(v, x + i, sizeof(v));
      for (int j = 0; j < 8; ++j) acc[j] ^= v[j];
    }
    for (; i < end; ++i) {
      uint32_t v;
      std::memcpy(&v, x + i, 4);
      acc[0] ^= v;
    }
    uint64_t s = 0;
    for (int j = 0; j < 8; ++j) s += acc[j];
    partial[t] = s;
  });
  uint64_t s = 0;
  for (uint64_t p : partial) s += p;
  return s;
}

int Flag(int argc, char** argv, const char* name, int fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      return std::atoi(argv[i] + prefix.size());
    }
  }
  return fallback;
}

int Main(int argc, char** argv) {
  const int log2d = Flag(argc, argv, "log2d", 24);
  const int reps = std::max(1, Flag(argc, argv, "reps", 7));
  const int64_t d = int64_t{1} << log2d;
  const int64_t k = d / 100;
  const int threads =
      kernels::ResolveThreads(Flag(argc, argv, "threads", 0), d, 1);

  std::vector<std::vector<float>> inputs(4, std::vector<float>(d));
  for (int p = 0; p < 4; ++p) {
    std::mt19937 rng(p + 1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : inputs[p]) v = normal(rng);
  }
  const float* x = inputs[0].data();

  volatile uint64_t sink = 0;
  const double read_ms =
      MedianMs(reps, [&] { sink = sink + ReadPass(x, d, threads); });

  std::vector<uint32_t> topk(k);
  const double topk_ms =
      MedianMs(reps, [&] { kernels::TopK(x, d, k, topk.data(), threads); });

  std::vector<uint32_t> sampled;
  kernels::SampledTopKOptions sopt;
  sopt.num_threads = threads;
  kernels::SelectStats sstats;
  const double sampled_ms = MedianMs(
      reps, [&] { kernels::SampledTopK(x, d, k, sopt, &sampled, &sstats); });

  std::vector<uint32_t> random_idx;
  std::vector<float> random_val(k);
  const double randomk_ms = MedianMs(reps, [&] {
    kernels::RandomKIndices(kernels::MixSeed(1, 2, 3), d, k, &random_idx);
    kernels::Gather(x, random_idx.data(), k, random_val.data());
  });

  // Payloads of the 4 inputs (u32 indices + bf16 values).
  std::vector<Payload> payloads(4);
  std::vector<std::vector<uint32_t>> idx(4, std::vector<uint32_t>(k));
  std::vector<std::vector<float>> val(4, std::vector<float>(k));
  for (int p = 0; p < 4; ++p) {
    kernels::TopK(inputs[p].data(), d, k, idx[p].data(), threads);
    kernels::Gather(inputs[p].data(), idx[p].data(), k, val[p].data());
  }
  const double encode_ms = MedianMs(reps, [&] {
    kernels::Gather(x, idx[0].data(), k, val[0].data());
    EncodeSparsePayload(CompressorId::kTopK, ValueType::kBFloat16,
                        IndexCoding::kU32, d, idx[0].data(), val[0].data(), k,
                        &payloads[0]);
  });
  for (int p = 1; p < 4; ++p) {
    EncodeSparsePayload(CompressorId::kTopK, ValueType::kBFloat16,
                        IndexCoding::kU32, d, idx[p].data(), val[p].data(), k,
                        &payloads[p]);
  }
  std::vector<float> dense(d, 0.0f);
  bool decode_ok = true;
  const double decode_ms = MedianMs(reps, [&] {
    for (int p = 0; p < 4; ++p) {
      absl::StatusOr<SparseEntries> e =
          DecodeSparsePayload(payloads[p].bytes, CompressorId::kTopK, d);
      if (!e.ok()) {
        decode_ok = false;
        continue;
      }
      kernels::ScatterAdd(e->indices.data(), e->values.data(), k, dense.data());
    }
  });

  // The whole compressor as the engine calls it: top-k at cf 100 with error
  // feedback (residual add, select, encode, own decode, residual update).
  std::unique_ptr<Compressor> topk_ef;
  {
    CompressorOptions options;
    options.num_threads = threads;
    absl::StatusOr<std::unique_ptr<Compressor>> made =
        CreateCompressor("topk", 100, options);
    if (made.ok()) topk_ef = std::move(*made);
  }
  Payload ef_payload;
  const double topk_ef_ms = MedianMs(reps, [&] {
    if (topk_ef != nullptr) {
      topk_ef->Compress(absl::MakeConstSpan(x, d), {}, &ef_payload)
          .IgnoreError();
    }
  });

  auto per_entry = [&](IndexCoding coding) {
    Payload p;
    EncodeSparsePayload(CompressorId::kTopK, ValueType::kBFloat16, coding, d,
                        idx[0].data(), val[0].data(), k, &p);
    // The fixed 40-byte header is not per entry.
    return static_cast<double>(p.bytes.size() - kPayloadHeaderBytes) / k;
  };
  const double bytes_u32 = per_entry(IndexCoding::kU32);
  const double bytes_delta16 = per_entry(IndexCoding::kDelta16);
  const double bytes_varint = per_entry(IndexCoding::kVarint);

  std::printf(
      "compress_bench: d = 2^%d = %lld floats, k = %lld (1%%), "
      "threads = %d, median of %d\n",
      log2d, static_cast<long long>(d), static_cast<long long>(k), threads,
      reps);
  std::printf("%-34s %10s %10s\n", "operation", "ms", "x read");
  auto row = [&](const char* name, double ms) {
    std::printf("%-34s %10.2f %10.2f\n", name, ms, ms / read_ms);
  };
  row("read pass (memory limit)", read_ms);
  row("exact top-k (radix select)", topk_ms);
  row("sampled top-k (DGC)", sampled_ms);
  row("random-k (indices + gather)", randomk_ms);
  row("encode (gather + u32/bf16)", encode_ms);
  row("decode + scatter-add, 4 payloads", decode_ms);
  row("topk compressor + error feedback", topk_ef_ms);
  std::printf("sampled top-k kept %zu of k = %lld (%d pass(es)%s)\n",
              sampled.size(), static_cast<long long>(k), sstats.passes,
              sstats.fell_back_to_exact ? ", fell back to exact" : "");
  std::printf(
      "bytes per kept entry (+ 40-byte header): u32+bf16 %.3f, "
      "delta16+bf16 %.3f, varint+bf16 %.3f\n",
      bytes_u32, bytes_delta16, bytes_varint);

  const double topk_ratio = topk_ms / read_ms;
  const double sampled_ratio = sampled_ms / read_ms;
  const bool pass = topk_ratio <= 10 && sampled_ratio <= 3 &&
                    bytes_u32 <= 6.0 && bytes_delta16 <= 4.0 && decode_ok;
  std::printf(
      "{\"bench\":\"compress_bench\",\"d\":%lld,\"k\":%lld,\"threads\":%d,"
      "\"read_ms\":%.3f,\"topk_ms\":%.3f,\"sampled_topk_ms\":%.3f,"
      "\"randomk_ms\":%.3f,\"encode_ms\":%.3f,\"decode4_ms\":%.3f,"
      "\"topk_over_read\":%.3f,\"sampled_over_read\":%.3f,"
      "\"randomk_over_read\":%.3f,\"encode_over_read\":%.3f,"
      "\"decode4_over_read\":%.3f,\"topk_ef_compress_ms\":%.3f,"
      "\"bytes_per_entry_u32_bf16\":%.4f,"
      "\"bytes_per_entry_delta16_bf16\":%.4f,"
      "\"bytes_per_entry_varint_bf16\":%.4f,"
      "\"targets\":{\"topk_over_read\":10,\"sampled_over_read\":3,"
      "\"bytes_per_entry\":6,\"bytes_per_entry_delta\":4},\"pass\":%s}\n",
      static_cast<long long>(d), static_cast<long long>(k), threads, read_ms,
      topk_ms, sampled_ms, randomk_ms, encode_ms, decode_ms, topk_ratio,
      sampled_ratio, randomk_ms / read_ms, encode_ms / read_ms,
      decode_ms / read_ms, topk_ef_ms, bytes_u32, bytes_delta16, bytes_varint,
      pass ? "true" : "false");
  return 0;
}

}  // namespace
}  // namespace terse

int main(int argc, char** argv) { return terse::Main(argc, argv); }
