// Every use of MLX internals (types and functions outside its installed, documented API) in
// one place, each checked against the MLX version it was read from. A version bump fails
// here first: re-read each item in the new MLX's sources, then move the version bound.
#pragma once

#include "mlx/compile_impl.h"
#include "mlx/version.h"

#if MLX_VERSION_MAJOR != 0 || MLX_VERSION_MINOR != 32 || MLX_VERSION_PATCH < 1 || MLX_VERSION_PATCH > 4
#error "rlx-mlx-sys uses MLX internals checked against MLX 0.32.1 to 0.32.4: re-check mlx_internals.h"
#endif

namespace rlx {

// What a Buffer of MLX's CUDA build points at (`cu::CudaBuffer`, mlx/backend/cuda/
// allocator.h, the same from 0.32.1 to the pinned 0.32.4; not in the installed headers).
// MLX's kernels use `data` as a device pointer; a host read of a buffer with `device >= 0`
// first replaces it with a unified-memory copy (`device` then -1) and frees the original
// with cudaFreeAsync. Used by cuda_memory.cpp.
struct MlxCudaBuffer {
  void* data;
  size_t size;
  int device;
};

// Also internal, from mlx/compile_impl.h, used by compile.cpp: `mx::detail::compile` (a
// trace keyed by an id of the caller's), `compile_cache` and `compile_erase` (each thread's
// trace cache, and erasing one function's traces from it).

}  // namespace rlx
