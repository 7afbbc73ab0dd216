// QSGD's code layout shared by the host and CUDA implementations of
// DeviceOps::QsgdEncode / QsgdDecodeAdd (the CPU compressor's, see
// compressors/qsgd_compressor.cc): code width, packed size, and one code
// read back.
#ifndef TERSE_COMPRESSORS_DEVICE_QSGD_BITS_H_
#define TERSE_COMPRESSORS_DEVICE_QSGD_BITS_H_

#include <cstdint>

// CodeAt runs on the host and, compiled by nvcc, in kernels.
#if defined(__CUDACC__)
#define TERSE_QSGD_BITS_HD __host__ __device__
#else
#define TERSE_QSGD_BITS_HD
#endif

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

// Element i's code, (level << 1) | sign, from a packed stream of `bits`-bit
// codes in the CPU encoder's bit order (little-endian within the stream).
TERSE_QSGD_BITS_HD inline uint32_t CodeAt(const uint8_t* codes, uint64_t i,
                                          int bits) {
  const uint64_t pos = i * static_cast<uint64_t>(bits);
  uint32_t code = 0;
  for (int done = 0; done < bits;) {
    const int bit = static_cast<int>((pos + done) & 7);
    const int take = 8 - bit < bits - done ? 8 - bit : bits - done;
    code |= ((static_cast<uint32_t>(codes[(pos + done) >> 3]) >> bit) &
             ((1u << take) - 1))
            << done;
    done += take;
  }
  return code;
}

}  // namespace qsgd_bits
}  // namespace terse

#endif  // TERSE_COMPRESSORS_DEVICE_QSGD_BITS_H_
