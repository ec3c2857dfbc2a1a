// What every file of the shim shares: the array handle, the exception guard, dtype and
// shape conversions, the half-precision policy, and the functions one concern offers
// another. Not part of the ABI (rlx_mlx.h is).
#pragma once

#include "rlx_mlx.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <tuple>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>


#include "mlx/allocator.h"
#include "mlx/compile.h"
#include "mlx/distributed/distributed.h"
#include "mlx/distributed/ops.h"
#include "mlx/fast.h"
#include "mlx/linalg.h"
#include "mlx/memory.h"
#include "mlx/ops.h"
#include "mlx/transforms.h"
#include "mlx/utils.h"
#include "mlx/version.h"

namespace mx = mlx::core;

struct rlx_mlx_array {
  mx::array value;
};

namespace rlx {

// Live array handles (rlx_mlx_live_arrays), the calling thread's last error message, and
// whether half-precision ops compute in float32 and round once (core.cpp).
extern std::atomic<int64_t> live_arrays;
extern thread_local std::string last_error;
extern thread_local bool exact_halves;

// Runs `body`, turning any C++ exception into status 1 and the thread's last error.
template <class F>
int guard(F&& body) {
  try {
    body();
    last_error.clear();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  } catch (...) {
    last_error = "unknown C++ exception inside MLX";
  }
  if (last_error.empty()) {
    last_error = "MLX failed without a message";
  }
  return 1;
}

inline rlx_mlx_array* wrap(mx::array a) {
  auto* h = new rlx_mlx_array{std::move(a)};
  live_arrays.fetch_add(1, std::memory_order_relaxed);
  return h;
}

inline const mx::array& get(const rlx_mlx_array* h) {
  if (h == nullptr) {
    throw std::invalid_argument("[rlx] a required array handle is NULL");
  }
  return h->value;
}

inline void put(rlx_mlx_array** out, mx::array a) {
  if (out == nullptr) {
    throw std::invalid_argument("[rlx] output pointer is NULL");
  }
  *out = wrap(std::move(a));
}

inline mx::Dtype dtype_of(rlx_mlx_dtype code) {
  switch (code) {
    case RLX_MLX_BOOL: return mx::bool_;
    case RLX_MLX_U8: return mx::uint8;
    case RLX_MLX_U16: return mx::uint16;
    case RLX_MLX_U32: return mx::uint32;
    case RLX_MLX_U64: return mx::uint64;
    case RLX_MLX_I8: return mx::int8;
    case RLX_MLX_I16: return mx::int16;
    case RLX_MLX_I32: return mx::int32;
    case RLX_MLX_I64: return mx::int64;
    case RLX_MLX_F16: return mx::float16;
    case RLX_MLX_F32: return mx::float32;
    case RLX_MLX_F64: return mx::float64;
    case RLX_MLX_BF16: return mx::bfloat16;
  }
  throw std::invalid_argument("[rlx] unknown dtype code " + std::to_string(code));
}

inline rlx_mlx_dtype code_of(mx::Dtype d) {
  switch (d.val()) {
    case mx::Dtype::Val::bool_: return RLX_MLX_BOOL;
    case mx::Dtype::Val::uint8: return RLX_MLX_U8;
    case mx::Dtype::Val::uint16: return RLX_MLX_U16;
    case mx::Dtype::Val::uint32: return RLX_MLX_U32;
    case mx::Dtype::Val::uint64: return RLX_MLX_U64;
    case mx::Dtype::Val::int8: return RLX_MLX_I8;
    case mx::Dtype::Val::int16: return RLX_MLX_I16;
    case mx::Dtype::Val::int32: return RLX_MLX_I32;
    case mx::Dtype::Val::int64: return RLX_MLX_I64;
    case mx::Dtype::Val::float16: return RLX_MLX_F16;
    case mx::Dtype::Val::float32: return RLX_MLX_F32;
    case mx::Dtype::Val::float64: return RLX_MLX_F64;
    case mx::Dtype::Val::bfloat16: return RLX_MLX_BF16;
    default: throw std::invalid_argument("[rlx] MLX produced a dtype RLX does not know");
  }
}

inline bool is_float(mx::Dtype d) { return mx::issubdtype(d, mx::floating); }
inline bool is_half(mx::Dtype d) { return d == mx::float16 || d == mx::bfloat16; }
inline bool is_signed_int(mx::Dtype d) { return mx::issubdtype(d, mx::signedinteger); }

// RLX computes f16/bf16 in f32 and rounds once at the end; do the same so both backends
// agree to the last bit where they can.
inline mx::Dtype compute_type(mx::Dtype d) { return is_half(d) ? mx::float32 : d; }
// `exact_halves` is off while lowering a graph that asked for half-precision speed
// (rlx_mlx_set_exact_halves).

inline mx::array up(const mx::array& a) { return exact_halves && is_half(a.dtype()) ? mx::astype(a, mx::float32) : a; }
inline mx::array down(const mx::array& a, mx::Dtype d) { return a.dtype() == d ? a : mx::astype(a, d); }

inline mx::Shape shape_of(const int64_t* dims, size_t n) {
  mx::Shape s;
  for (size_t i = 0; i < n; ++i) {
    if (dims[i] < 0 || dims[i] > std::numeric_limits<int32_t>::max()) {
      throw std::invalid_argument("[rlx] dim " + std::to_string(dims[i]) + " is out of MLX's range");
    }
    s.push_back(static_cast<mx::ShapeElem>(dims[i]));
  }
  return s;
}

inline std::vector<int> ints_of(const int32_t* v, size_t n) { return std::vector<int>(v, v + n); }
inline mx::Device::DeviceType device_type_of(rlx_mlx_device_kind kind) {
  switch (kind) {
    case RLX_MLX_DEVICE_CPU: return mx::Device::cpu;
    case RLX_MLX_DEVICE_GPU: return mx::Device::gpu;
  }
  throw std::invalid_argument("[rlx] unknown device code " + std::to_string(kind));
}

inline std::vector<mx::array> arrays_of(rlx_mlx_array* const* xs, size_t n) {
  std::vector<mx::array> v;
  v.reserve(n);
  for (size_t i = 0; i < n; ++i) v.push_back(get(xs[i]));
  return v;
}

// ---- offered by one concern to another ----

// ops_layout.cpp: `idx` with entries outside [0, size) replaced by 0, and in `bad` a bool
// scalar, true when there was one.
mx::array in_range_indices(const mx::array& idx, int size, std::optional<mx::array>* bad);

// ops_math.cpp: x·y for a matrix `y`, without flattening an `x` whose leading axes are all 1.
mx::array matmul_rows(const mx::array& x, const mx::array& y);

// ops_math.cpp: rows of `ok` (bool, [.., Sq, Sk]) with no visible key produce zeros.
mx::array zero_blind_rows(const mx::array& out, const mx::array& ok);

// process.cpp: MLX_ENABLE_TF32 as MLX reads it (an integer, 1 when unset).
bool tf32_from_environment();

// cuda_memory.cpp: host bytes as an array in device memory of RLX's CUDA GPU (none without
// one), and a read straight from device memory (false, copying nothing, for any other
// array).
std::optional<mx::array> device_array(const void* data, size_t nbytes, mx::Shape shape,
                                      mx::Dtype dtype);
bool copy_from_device(const mx::array& x, void* dst, size_t nbytes);
// An operand of an op that runs on MLX's CPU stream while the default device is a GPU; see
// cuda_memory.cpp.
mx::array for_cpu_stream(const mx::array& x);
// The compute capability's major version of the CUDA GPU ops are being built for; 0 when
// they are not being built for a CUDA GPU (the CPU device, a Metal GPU, a CPU-only MLX).
int cuda_build_compute_major();

// cuda_kernels.cpp: RLX's CUDA kernels, or nothing where they do not apply.
std::optional<mx::array> fused_attention_gpu(const mx::array& q, const mx::array& k,
                                             const mx::array& v, float scale,
                                             rlx_mlx_mask_kind mask_kind, int64_t window,
                                             const std::optional<mx::array>& mask);
std::optional<mx::array> prefix_attention_gpu(const mx::array& q, const mx::array& k,
                                              const mx::array& v, float scale,
                                              const mx::array& length,
                                              rlx_mlx_mask_kind mask_kind, int64_t window);
std::optional<mx::array> take_rows_gpu(const mx::array& table, const mx::array& idx);
using HeadGroups = rlx_mlx_head_groups;
// Whether `g` describes heads within `width` columns that rope_heads_gpu can rotate.
bool head_groups_fit(const HeadGroups& g, int64_t width);
std::optional<std::pair<mx::array, mx::array>> rope_heads_gpu(const mx::array& x, const HeadGroups& g,
                                                              const mx::array& offset,
                                                              const std::optional<mx::array>& periods);
// A block's rotated queries and keys and its values from the joined q/k/v weight
// (rlx_mlx_rotated_product).
std::optional<std::tuple<mx::array, mx::array, mx::array>> rotated_rows_gpu(
    const mx::array& x, const std::vector<mx::array>& parts, int32_t format, const HeadGroups& g,
    int64_t v_col, const mx::array& offset, const std::optional<mx::array>& periods);
// A gated feed-forward's hidden values from its joined gate and up weight (rlx_mlx_gated_product).
std::optional<mx::array> gated_rows_gpu(const mx::array& x, const std::vector<mx::array>& parts,
                                        int32_t format, int64_t gate_col, int64_t up_col,
                                        int64_t width, int32_t act);
// `x · dequant(w)ᵀ` for a few float32 rows and a weight in MLX's affine groups of 32.
std::optional<mx::array> quantized_rows_gpu(const mx::array& x, const mx::array& words,
                                            const mx::array& scales, const mx::array& biases,
                                            int bits);
std::optional<std::pair<mx::array, mx::array>> add_rms_norm_gpu(const mx::array& a,
                                                                const mx::array& b,
                                                                const mx::array& weight,
                                                                float eps);

}  // namespace rlx
