// cuda_emu's stand-in for CUDA's <cuda_fp16.h> (see ../cuda_emu.h).
#ifndef TERSE_CUDA_EMU_INCLUDE_CUDA_FP16_H_
#define TERSE_CUDA_EMU_INCLUDE_CUDA_FP16_H_
#include "compressors/kernels/cuda_emu/cuda_emu.h"
#endif  // TERSE_CUDA_EMU_INCLUDE_CUDA_FP16_H_
