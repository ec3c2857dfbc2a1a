// What the shim sets up when the library loads: MLX's environment defaults that RLX
// changes (full float32 rather than TF32, no CUDA graphs) unless the user set them, and the
// reference that keeps OpenBLAS ahead of MLX's bundled BLAS.
#include "shim_internal.h"

namespace rlx {


// MLX_ENABLE_TF32 as MLX reads it (an integer, 1 when unset).
bool tf32_from_environment() {
  const char* value = std::getenv("MLX_ENABLE_TF32");
  return value == nullptr ? true : std::atoi(value) != 0;
}

// MLX defaults to TF32 for float32 matmuls on NVIDIA GPUs and reads the variable once, at
// its first such matmul. RLX's default is full float32 (the numbers every other backend
// gives), so the variable is set before anything can run, unless the user chose already.
const bool tf32_default_set = [] {
  setenv("MLX_ENABLE_TF32", "0", /*overwrite=*/0);
  return true;
}();

// MLX's CUDA backend records kernels into CUDA graphs by default, and stream-captures every
// cuBLAS call into a child graph of its own. Launching directly was as fast or faster for
// MiniLM at every batch measured on an H100 (TF32 32x128: 2.66 against 3.87 ms; f32
// 1024x128: 88.0 against 87.3), so RLX turns graphs off unless the user chose (decision
// 011); a process that decodes turns them back on with rlx_mlx_set_cuda_graphs (decision
// 040). Whether the user chose is read first: the default below is then indistinguishable.
const bool cuda_graphs_chosen_by_user = std::getenv("MLX_USE_CUDA_GRAPHS") != nullptr;
const bool cuda_graphs_default_set = [] {
  setenv("MLX_USE_CUDA_GRAPHS", "0", /*overwrite=*/0);
  return true;
}();

}  // namespace rlx

using namespace rlx;

extern "C" {

#ifdef RLX_MLX_OPENBLAS
// Referencing OpenBLAS makes the linker keep it as a direct dependency of the binary, which
// puts it ahead of the reference BLAS libmlx brings, so MLX's cblas calls resolve to it.
extern "C" int openblas_get_num_threads(void);
namespace {
// A static initializer keeps the reference alive even in binaries that never ask which
// BLAS they have (the linker drops unreferenced --as-needed libraries).
const int openblas_threads_at_load = openblas_get_num_threads();
}  // namespace
#endif

bool rlx_mlx_cuda_graphs(void) {
  // As MLX reads it (env::get_var: an integer, MLX's default 1 when unset).
  const char* value = std::getenv("MLX_USE_CUDA_GRAPHS");
  return value == nullptr ? true : std::atoi(value) != 0;
}

bool rlx_mlx_set_cuda_graphs(bool enabled) {
  if (cuda_graphs_chosen_by_user) return false;
  setenv("MLX_USE_CUDA_GRAPHS", enabled ? "1" : "0", /*overwrite=*/1);
  return true;
}

const char* rlx_mlx_blas(void) {
#ifdef RLX_MLX_OPENBLAS
  static const std::string name = "openblas (" + std::to_string(openblas_get_num_threads()) + " threads)";
  return name.c_str();
#else
  return "bundled reference BLAS";
#endif
}

}  // extern "C"
