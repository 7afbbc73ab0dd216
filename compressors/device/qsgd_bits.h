// QSGD's code layout shared by the host and CUDA implementations of
// DeviceOps::QsgdEncode / QsgdDecodeAdd (the CPU compressor's, see
// compressors/qsgd_compressor.cc): code width and packed size.
#ifndef TERSE_COMPRESSORS_DEVICE_QSGD_BITS_H_
#define TERSE_COMPRESSORS_DEVICE_QSGD_BITS_H_

#include <cstdint>

namespace terse {
namespace qsgd_bits {

// 1 sign bit + ceil(log2(levels + 1)) level bits.
inline int CodeBits(int levels) {
  int bits = 0;
  while ((1 << bits) <= levels) ++bits;
  return 1 + bits;
}
inline uint64_t PackedBytes(uint64_t d, int bits) { return (d * bits + 7) / 8; }
// PackedBytes rounded up to whole 4-byte words (the device buffers).
inline uint64_t PackedWords(uint64_t d, int bits) {
  return (PackedBytes(d, bits) + 3) / 4;
}

}  // namespace qsgd_bits
}  // namespace terse

#endif  // TERSE_COMPRESSORS_DEVICE_QSGD_BITS_H_
