// cuda_emu's stand-in for CUDA's <cooperative_groups.h> (see ../cuda_emu.h).
#ifndef TERSE_CUDA_EMU_INCLUDE_COOPERATIVE_GROUPS_H_
#define TERSE_CUDA_EMU_INCLUDE_COOPERATIVE_GROUPS_H_
#include "compressors/kernels/cuda_emu/cuda_emu.h"
#endif  // TERSE_CUDA_EMU_INCLUDE_COOPERATIVE_GROUPS_H_
