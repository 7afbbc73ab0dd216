// The contract shared by terse's fuzz targets.
//
// Each *_fuzzer.cc defines LLVMFuzzerTestOneInput. The same object file is
// linked two ways (tests/fuzz/fuzz.bzl):
//   - with libFuzzer (clang, --config=fuzz, tests/fuzz/run_fuzzers.sh), which
//     generates inputs;
//   - with corpus_main.cc into a cc_test that replays the checked-in seed
//     corpus (tests/fuzz/corpus/<target>/) in every plain gcc build.
// A target returns 0 for every input it handled (an error Status for a bad
// input is a correct outcome); a broken invariant calls FuzzFail, which
// prints the reason and aborts, so both drivers report it as a crash.
#ifndef TERSE_TESTS_FUZZ_FUZZ_TARGET_H_
#define TERSE_TESTS_FUZZ_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace terse {
namespace fuzz {

// Prints "fuzz invariant broken: <what>" to stderr and aborts.
[[noreturn]] inline void FuzzFail(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Reads the input front to back; past the end every read yields zeros, so a
// target never reads outside the input whatever its length.
class InputReader {
 public:
  InputReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // Everything not yet read.
  const uint8_t* rest() const { return data_ + pos_; }
  size_t rest_size() const { return size_ - pos_; }
  void Skip(size_t n) { pos_ = n > size_ - pos_ ? size_ : pos_ + n; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace fuzz
}  // namespace terse

#endif  // TERSE_TESTS_FUZZ_FUZZ_TARGET_H_
