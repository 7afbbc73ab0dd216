// StableHash: a 64-bit FNV-1a hash whose value depends only on the bytes fed
// to it, for values that ranks compare with each other (a list of sizes or
// ranks every rank must pass identically). absl::Hash is salted per process,
// so two ranks' absl hashes of equal values differ.
//
// Not cryptographic: it catches honest mistakes, not forgeries. Header-only;
// a StableHash is a value, safe to use from any thread that owns it.
#ifndef TERSE_COMMON_STABLE_HASH_H_
#define TERSE_COMMON_STABLE_HASH_H_

#include <cstdint>
#include <string_view>
#include <vector>

namespace terse {

class StableHash {
 public:
  // Feeds the 8 bytes of `v`, least significant first (the same on every
  // host, whatever its byte order).
  void AddInt64(int64_t v) {
    for (int b = 0; b < 8; ++b) {
      AddByte(static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * b)));
    }
  }
  void AddByte(uint8_t byte) {
    h_ ^= byte;
    h_ *= kPrime;
  }
  uint64_t value() const { return h_; }

 private:
  static constexpr uint64_t kOffsetBasis = 0xcbf29ce484222325ull;
  static constexpr uint64_t kPrime = 0x100000001b3ull;
  uint64_t h_ = kOffsetBasis;
};

// The StableHash of the bytes of `s` in order: FNV-1a of the string.
inline uint64_t StableHashOfBytes(std::string_view s) {
  StableHash h;
  for (char c : s) h.AddByte(static_cast<uint8_t>(c));
  return h.value();
}

// The StableHash of every value of `values` in order, each as AddInt64.
template <typename Int>
uint64_t StableHashOf(const std::vector<Int>& values) {
  StableHash h;
  for (Int v : values) h.AddInt64(static_cast<int64_t>(v));
  return h.value();
}

}  // namespace terse

#endif  // TERSE_COMMON_STABLE_HASH_H_
