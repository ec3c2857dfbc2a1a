// RLX's C ABI over MLX. See rlx_mlx.h for the contract.
//
// Every entry point runs its body inside `guard`, which turns any C++ exception into a
// nonzero status and a thread-local message. Ops whose MLX semantics differ from the RLX IR
// (integer division, saturating casts, masked attention rows, stable descending sorts,
// out-of-range indices) are composed here so the Rust side sees IR semantics.

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
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>

#include "mlx/allocator.h"
#include "mlx/compile.h"
#include "mlx/compile_impl.h"
#include "mlx/distributed/distributed.h"
#include "mlx/distributed/ops.h"
#include "mlx/fast.h"
#include "mlx/linalg.h"
#include "mlx/ops.h"
#include "mlx/transforms.h"
#include "mlx/utils.h"
#include "mlx/version.h"

// kAttentionSource: cpp/attention.cu, embedded by build.rs.
#include "attention_source.h"

namespace mx = mlx::core;

struct rlx_mlx_array {
  mx::array value;
};

namespace {

std::atomic<int64_t> live_arrays{0};
thread_local std::string last_error;

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

rlx_mlx_array* wrap(mx::array a) {
  auto* h = new rlx_mlx_array{std::move(a)};
  live_arrays.fetch_add(1, std::memory_order_relaxed);
  return h;
}

const mx::array& get(const rlx_mlx_array* h) {
  if (h == nullptr) {
    throw std::invalid_argument("[rlx] a required array handle is NULL");
  }
  return h->value;
}

void put(rlx_mlx_array** out, mx::array a) {
  if (out == nullptr) {
    throw std::invalid_argument("[rlx] output pointer is NULL");
  }
  *out = wrap(std::move(a));
}

mx::Dtype dtype_of(rlx_mlx_dtype code) {
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

rlx_mlx_dtype code_of(mx::Dtype d) {
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

bool is_float(mx::Dtype d) { return mx::issubdtype(d, mx::floating); }
bool is_half(mx::Dtype d) { return d == mx::float16 || d == mx::bfloat16; }
bool is_signed_int(mx::Dtype d) { return mx::issubdtype(d, mx::signedinteger); }

// RLX computes f16/bf16 in f32 and rounds once at the end; do the same so both backends
// agree to the last bit where they can.
mx::Dtype compute_type(mx::Dtype d) { return is_half(d) ? mx::float32 : d; }
// Off while lowering a graph that asked for half-precision speed (rlx_mlx_set_exact_halves).
thread_local bool exact_halves = true;

mx::array up(const mx::array& a) { return exact_halves && is_half(a.dtype()) ? mx::astype(a, mx::float32) : a; }
mx::array down(const mx::array& a, mx::Dtype d) { return a.dtype() == d ? a : mx::astype(a, d); }

mx::Shape shape_of(const int64_t* dims, size_t n) {
  mx::Shape s;
  for (size_t i = 0; i < n; ++i) {
    if (dims[i] < 0 || dims[i] > std::numeric_limits<int32_t>::max()) {
      throw std::invalid_argument("[rlx] dim " + std::to_string(dims[i]) + " is out of MLX's range");
    }
    s.push_back(static_cast<mx::ShapeElem>(dims[i]));
  }
  return s;
}

std::vector<int> ints_of(const int32_t* v, size_t n) { return std::vector<int>(v, v + n); }

// ---- elementwise ----

const char* unary_name(rlx_mlx_unary_op kind) {
  switch (kind) {
    case RLX_MLX_UNARY_NEG: return "neg";
    case RLX_MLX_UNARY_ABS: return "abs";
    case RLX_MLX_UNARY_EXP: return "exp";
    case RLX_MLX_UNARY_LOG: return "log";
    case RLX_MLX_UNARY_SQRT: return "sqrt";
    case RLX_MLX_UNARY_RSQRT: return "rsqrt";
    case RLX_MLX_UNARY_RECIP: return "recip";
    case RLX_MLX_UNARY_SIN: return "sin";
    case RLX_MLX_UNARY_COS: return "cos";
    case RLX_MLX_UNARY_TANH: return "tanh";
    case RLX_MLX_UNARY_SIGMOID: return "sigmoid";
    case RLX_MLX_UNARY_RELU: return "relu";
    case RLX_MLX_UNARY_GELU: return "gelu";
    case RLX_MLX_UNARY_GELU_TANH: return "gelu_tanh";
    case RLX_MLX_UNARY_SILU: return "silu";
    case RLX_MLX_UNARY_ERF: return "erf";
    case RLX_MLX_UNARY_FLOOR: return "floor";
    case RLX_MLX_UNARY_CEIL: return "ceil";
    case RLX_MLX_UNARY_ROUND: return "round";
    case RLX_MLX_UNARY_SIGN: return "sign";
    case RLX_MLX_UNARY_SOFTPLUS: return "softplus";
  }
  throw std::invalid_argument("[rlx] unknown unary op code " + std::to_string(kind));
}

// Integer operands: the kinds whose domain admits them.
mx::array unary_int(rlx_mlx_unary_op kind, const mx::array& x) {
  switch (kind) {
    case RLX_MLX_UNARY_NEG: return mx::negative(x);
    case RLX_MLX_UNARY_ABS: return mx::abs(x);
    case RLX_MLX_UNARY_RELU: return mx::maximum(x, mx::zeros({}, x.dtype()));
    case RLX_MLX_UNARY_SIGN: return mx::sign(x);
    case RLX_MLX_UNARY_EXP:
    case RLX_MLX_UNARY_LOG:
    case RLX_MLX_UNARY_SQRT:
    case RLX_MLX_UNARY_RSQRT:
    case RLX_MLX_UNARY_RECIP:
    case RLX_MLX_UNARY_SIN:
    case RLX_MLX_UNARY_COS:
    case RLX_MLX_UNARY_TANH:
    case RLX_MLX_UNARY_SIGMOID:
    case RLX_MLX_UNARY_GELU:
    case RLX_MLX_UNARY_GELU_TANH:
    case RLX_MLX_UNARY_SILU:
    case RLX_MLX_UNARY_ERF:
    case RLX_MLX_UNARY_FLOOR:
    case RLX_MLX_UNARY_CEIL:
    case RLX_MLX_UNARY_ROUND:
    case RLX_MLX_UNARY_SOFTPLUS:
      throw std::invalid_argument(std::string("[rlx] ") + unary_name(kind) + " needs a float input");
  }
  throw std::invalid_argument("[rlx] unknown unary op code " + std::to_string(kind));
}

mx::array unary_float(rlx_mlx_unary_op kind, const mx::array& x) {
  const mx::Dtype ct = x.dtype();
  auto c = [&](double v) { return mx::array(v, ct); };
  switch (kind) {
    case RLX_MLX_UNARY_NEG: return mx::negative(x);
    case RLX_MLX_UNARY_ABS: return mx::abs(x);
    case RLX_MLX_UNARY_EXP: return mx::exp(x);
    case RLX_MLX_UNARY_LOG: return mx::log(x);
    case RLX_MLX_UNARY_SQRT: return mx::sqrt(x);
    case RLX_MLX_UNARY_RSQRT: return mx::rsqrt(x);
    case RLX_MLX_UNARY_RECIP: return mx::reciprocal(x);
    case RLX_MLX_UNARY_SIN: return mx::sin(x);
    case RLX_MLX_UNARY_COS: return mx::cos(x);
    case RLX_MLX_UNARY_TANH: return mx::tanh(x);
    case RLX_MLX_UNARY_SIGMOID: return mx::sigmoid(x);
    case RLX_MLX_UNARY_RELU: return mx::where(mx::greater(x, c(0)), x, c(0));
    case RLX_MLX_UNARY_GELU: return x * c(0.5) * (c(1) + mx::erf(x * c(0.70710678118654752440)));
    case RLX_MLX_UNARY_GELU_TANH: {
      const mx::array inner = c(0.79788456080286535588) * (x + c(0.044715) * x * x * x);
      return c(0.5) * x * (c(1) + mx::tanh(inner));
    }
    case RLX_MLX_UNARY_SILU: return x * mx::sigmoid(x);
    case RLX_MLX_UNARY_ERF: return mx::erf(x);
    case RLX_MLX_UNARY_FLOOR: return mx::floor(x);
    case RLX_MLX_UNARY_CEIL: return mx::ceil(x);
    case RLX_MLX_UNARY_ROUND: return mx::round(x);
    case RLX_MLX_UNARY_SIGN: return mx::where(mx::isnan(x), x, mx::sign(x));
    case RLX_MLX_UNARY_SOFTPLUS: return mx::logaddexp(x, c(0));
  }
  throw std::invalid_argument("[rlx] unknown unary op code " + std::to_string(kind));
}

mx::array unary(rlx_mlx_unary_op kind, const mx::array& x0) {
  const mx::Dtype dt = x0.dtype();
  if (!is_float(dt)) {
    return unary_int(kind, x0);
  }
  return down(unary_float(kind, up(x0)), dt);
}

// Floor division and floor remainder of integers; a zero divisor gives 0, never a trap.
std::pair<mx::array, mx::array> int_divmod(const mx::array& a, const mx::array& b) {
  const mx::Dtype dt = a.dtype();
  const mx::array zero = mx::zeros({}, dt);
  const mx::array one = mx::ones({}, dt);
  mx::array zero_div = mx::equal(b, zero);
  mx::array unsafe = zero_div;
  if (is_signed_int(dt)) {
    // MIN / -1 traps on x86; dividing by 1 and negating gives the wrapped result.
    unsafe = mx::logical_or(unsafe, mx::equal(b, mx::negative(one)));
  }
  const mx::array safe_b = mx::where(unsafe, one, b);
  // C++ semantics: truncated quotient and a remainder with the dividend's sign.
  mx::array q = mx::floor_divide(a, safe_b);
  mx::array r = mx::subtract(a, mx::multiply(q, safe_b));
  if (is_signed_int(dt)) {
    const mx::array fix = mx::logical_and(mx::not_equal(r, zero),
                                          mx::not_equal(mx::less(r, zero), mx::less(safe_b, zero)));
    q = mx::where(fix, mx::subtract(q, one), q);
    r = mx::where(fix, mx::add(r, safe_b), r);
    const mx::array minus_one = mx::logical_and(unsafe, mx::logical_not(zero_div));
    q = mx::where(minus_one, mx::negative(a), q);
    r = mx::where(minus_one, zero, r);
  }
  q = mx::where(zero_div, zero, q);
  r = mx::where(zero_div, zero, r);
  return {q, r};
}

mx::array binary_int(rlx_mlx_binary_op kind, const mx::array& a, const mx::array& b) {
  switch (kind) {
    case RLX_MLX_BINARY_ADD: return mx::add(a, b);
    case RLX_MLX_BINARY_SUB: return mx::subtract(a, b);
    case RLX_MLX_BINARY_MUL: return mx::multiply(a, b);
    case RLX_MLX_BINARY_DIV: return int_divmod(a, b).first;
    case RLX_MLX_BINARY_MAX: return mx::maximum(a, b);
    case RLX_MLX_BINARY_MIN: return mx::minimum(a, b);
    case RLX_MLX_BINARY_REM: return int_divmod(a, b).second;
    case RLX_MLX_BINARY_POW: throw std::invalid_argument("[rlx] pow needs float inputs");
  }
  throw std::invalid_argument("[rlx] unknown binary op code " + std::to_string(kind));
}

mx::array binary_float(rlx_mlx_binary_op kind, const mx::array& a, const mx::array& b) {
  switch (kind) {
    case RLX_MLX_BINARY_ADD: return mx::add(a, b);
    case RLX_MLX_BINARY_SUB: return mx::subtract(a, b);
    case RLX_MLX_BINARY_MUL: return mx::multiply(a, b);
    case RLX_MLX_BINARY_DIV: return mx::divide(a, b);
    case RLX_MLX_BINARY_POW: return mx::power(a, b);
    case RLX_MLX_BINARY_MAX: return mx::maximum(a, b);
    case RLX_MLX_BINARY_MIN: return mx::minimum(a, b);
    case RLX_MLX_BINARY_REM: {
      const mx::array r = mx::subtract(a, mx::multiply(mx::floor(mx::divide(a, b)), b));
      return mx::where(mx::logical_or(mx::isnan(a), mx::isnan(b)), mx::divide(a, b), r);
    }
  }
  throw std::invalid_argument("[rlx] unknown binary op code " + std::to_string(kind));
}

mx::array binary(rlx_mlx_binary_op kind, const mx::array& a, const mx::array& b) {
  const mx::Dtype dt = a.dtype();
  if (!is_float(dt)) {
    return binary_int(kind, a, b);
  }
  return down(binary_float(kind, up(a), up(b)), dt);
}

mx::array compare(rlx_mlx_compare_op kind, const mx::array& a, const mx::array& b) {
  switch (kind) {
    case RLX_MLX_COMPARE_EQ: return mx::equal(a, b);
    case RLX_MLX_COMPARE_NE: return mx::not_equal(a, b);
    case RLX_MLX_COMPARE_LT: return mx::less(a, b);
    case RLX_MLX_COMPARE_LE: return mx::less_equal(a, b);
    case RLX_MLX_COMPARE_GT: return mx::greater(a, b);
    case RLX_MLX_COMPARE_GE: return mx::greater_equal(a, b);
  }
  throw std::invalid_argument("[rlx] unknown comparison code " + std::to_string(kind));
}

// Rust `as`: floats to integers saturate and NaN becomes 0; anything to bool is `!= 0`.
mx::array cast(const mx::array& x, mx::Dtype to) {
  const mx::Dtype from = x.dtype();
  if (from == to) {
    return x;
  }
  if (to == mx::bool_) {
    return mx::not_equal(x, mx::zeros({}, from));
  }
  if (!is_float(from) || is_float(to)) {
    return mx::astype(x, to);
  }
  const int bits = 8 * to.size();
  const bool is_signed = is_signed_int(to);
  const double hi = is_signed ? std::ldexp(1.0, bits - 1) : std::ldexp(1.0, bits);
  const double lo = is_signed ? -std::ldexp(1.0, bits - 1) : 0.0;
  const mx::array xf = up(x);
  const mx::array big = mx::greater_equal(xf, mx::array(hi, xf.dtype()));
  const mx::array small = mx::less(xf, mx::array(lo, xf.dtype()));
  const mx::array nan = mx::isnan(xf);
  const mx::array out_of_range = mx::logical_or(mx::logical_or(big, small), nan);
  mx::array r = mx::astype(mx::where(out_of_range, mx::zeros({}, xf.dtype()), xf), to);
  // Saturation bounds, exact in int64 for every signed width; unsigned MAX is all ones.
  const int64_t max_signed = static_cast<int64_t>((uint64_t{1} << (bits - 1)) - 1);
  const mx::array max_v = mx::astype(mx::array(is_signed ? max_signed : int64_t{-1}, mx::int64), to);
  const mx::array min_v = is_signed ? mx::astype(mx::array(-max_signed - 1, mx::int64), to) : mx::zeros({}, to);
  r = mx::where(big, max_v, r);
  return mx::where(small, min_v, r);
}

mx::array reduce(rlx_mlx_reduce_op kind, const mx::array& x0, const std::vector<int>& axes, bool keep) {
  const mx::Dtype dt = x0.dtype();
  const mx::array x = up(x0);
  // NaN wins max and min, as in numpy and the CPU backend.
  auto nan_wins = [&](const mx::array& y) {
    if (!is_float(dt)) return y;
    const mx::array has_nan = mx::any(mx::isnan(x), axes, keep);
    return mx::where(has_nan, mx::array(std::numeric_limits<float>::quiet_NaN(), y.dtype()), y);
  };
  // An empty operand never reaches MLX, which refuses max and min over an empty axis and
  // whose CPU reductions of empty arrays read shapes they do not have: seen as a stall of
  // minutes, at random, in layer and RMS norms of `[4, 0]` (norms guard the same way). The result is filled with
  // what the CPU gives: sum 0, prod 1, mean NaN (floats) or 0, max and min their identity
  // (floats) or 0 (an empty result when only other axes are empty).
  if (x0.size() == 0) {
    mx::Shape shape;
    for (int a = 0; a < static_cast<int>(x0.ndim()); ++a) {
      const bool reduced = std::find(axes.begin(), axes.end(), a) != axes.end();
      if (!reduced) shape.push_back(x0.shape(a));
      else if (keep) shape.push_back(1);
    }
    const double inf = std::numeric_limits<double>::infinity();
    double fill = 0.0;
    switch (kind) {
      case RLX_MLX_REDUCE_SUM: fill = 0.0; break;
      case RLX_MLX_REDUCE_PROD: fill = 1.0; break;
      case RLX_MLX_REDUCE_MEAN: fill = is_float(dt) ? std::numeric_limits<double>::quiet_NaN() : 0.0; break;
      case RLX_MLX_REDUCE_MAX: fill = is_float(dt) ? -inf : 0.0; break;
      case RLX_MLX_REDUCE_MIN: fill = is_float(dt) ? inf : 0.0; break;
    }
    return mx::full(shape, mx::array(fill, dt));
  }
  switch (kind) {
    case RLX_MLX_REDUCE_SUM: return down(mx::sum(x, axes, keep), dt);
    case RLX_MLX_REDUCE_MEAN: return down(mx::mean(x, axes, keep), dt);
    case RLX_MLX_REDUCE_MAX: return down(nan_wins(mx::max(x, axes, keep)), dt);
    case RLX_MLX_REDUCE_MIN: return down(nan_wins(mx::min(x, axes, keep)), dt);
    case RLX_MLX_REDUCE_PROD: return down(mx::prod(x, axes, keep), dt);
  }
  throw std::invalid_argument("[rlx] unknown reduction code " + std::to_string(kind));
}

// Rows of `ok` (bool, [.., Sq, Sk]) with no visible key produce zeros in the RLX IR.
mx::array zero_blind_rows(const mx::array& out, const mx::array& ok) {
  const mx::array seen = mx::any(ok, -1, true);
  return mx::where(seen, out, mx::zeros({}, out.dtype()));
}

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
// 1024x128: 88.0 against 87.3), so RLX turns graphs off unless the user chose
// (ARCHITECTURE.md).
const bool cuda_graphs_default_set = [] {
  setenv("MLX_USE_CUDA_GRAPHS", "0", /*overwrite=*/0);
  return true;
}();

// ---- the CUDA driver, found at run time ----
// The shim links no CUDA library, so one binary runs on MLX's CPU and CUDA builds. MLX's
// CUDA build links the driver (libcuda.so.1; its runtime is linked statically and hidden),
// so the driver's entry points are looked up in the process when that build is loaded.

using CuResult = int;
using CuDevicePtr = unsigned long long;
using CuContext = void*;
using CuStream = void*;
using CuMemoryPool = void*;
struct CuMemPoolProps {  // CUmemPoolProps (v1): fields RLX sets, then zeros
  int alloc_type;
  int handle_types;
  int location_type;
  int location_id;
  void* win32_security_attributes;
  size_t max_size;
  unsigned short usage;
  unsigned char reserved[54];
};
constexpr int kCuMemAllocationTypePinned = 1;
constexpr int kCuMemLocationTypeDevice = 1;
constexpr int kCuMempoolAttrReleaseThreshold = 4;
constexpr unsigned kCuStreamNonBlocking = 1;
constexpr int kCuDeviceAttributeConcurrentManagedAccess = 89;
constexpr int kCuDeviceAttributeComputeCapabilityMajor = 75;

struct CudaDriver {
  CuResult (*device_get)(int*, int);
  CuResult (*device_get_attribute)(int*, int, int);
  CuResult (*ctx_get_current)(CuContext*);
  CuResult (*primary_ctx_retain)(CuContext*, int);
  CuResult (*ctx_set_current)(CuContext);
  CuResult (*stream_create)(CuStream*, unsigned);
  CuResult (*stream_synchronize)(CuStream);
  CuResult (*mem_pool_create)(CuMemoryPool*, const CuMemPoolProps*);
  CuResult (*mem_pool_set_attribute)(CuMemoryPool, int, void*);
  CuResult (*mem_alloc_from_pool_async)(CuDevicePtr*, size_t, CuMemoryPool, CuStream);
  CuResult (*mem_free_async)(CuDevicePtr, CuStream);
  CuResult (*mem_free)(CuDevicePtr);
  CuResult (*mem_free_host)(void*);
  CuResult (*memcpy_htod_async)(CuDevicePtr, const void*, size_t, CuStream);
  CuResult (*memcpy_dtoh)(void*, CuDevicePtr, size_t);
};

template <class F>
bool find_symbol(F& f, const char* name) {
  f = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  return f != nullptr;
}

// The driver's entry points, or null without a driver that has them (stream-ordered
// memory pools came with CUDA 11.2).
const CudaDriver* cuda_driver() {
  static const std::optional<CudaDriver> driver = []() -> std::optional<CudaDriver> {
    CuResult (*driver_version)(int*) = nullptr;
    int version = 0;
    if (!find_symbol(driver_version, "cuDriverGetVersion") || driver_version(&version) != 0 ||
        version < 11020) {
      return std::nullopt;
    }
    CudaDriver d{};
    const bool all = find_symbol(d.device_get, "cuDeviceGet") &&
                     find_symbol(d.device_get_attribute, "cuDeviceGetAttribute") &&
                     find_symbol(d.ctx_get_current, "cuCtxGetCurrent") &&
                     find_symbol(d.primary_ctx_retain, "cuDevicePrimaryCtxRetain") &&
                     find_symbol(d.ctx_set_current, "cuCtxSetCurrent") &&
                     find_symbol(d.stream_create, "cuStreamCreate") &&
                     find_symbol(d.stream_synchronize, "cuStreamSynchronize") &&
                     find_symbol(d.mem_pool_create, "cuMemPoolCreate") &&
                     find_symbol(d.mem_pool_set_attribute, "cuMemPoolSetAttribute") &&
                     find_symbol(d.mem_alloc_from_pool_async, "cuMemAllocFromPoolAsync") &&
                     find_symbol(d.mem_free_async, "cuMemFreeAsync") &&
                     find_symbol(d.mem_free, "cuMemFree_v2") &&
                     find_symbol(d.mem_free_host, "cuMemFreeHost") &&
                     find_symbol(d.memcpy_htod_async, "cuMemcpyHtoDAsync_v2") &&
                     find_symbol(d.memcpy_dtoh, "cuMemcpyDtoH_v2");
    return all ? std::optional<CudaDriver>(d) : std::nullopt;
  }();
  return driver ? &*driver : nullptr;
}

void check_cuda(CuResult status, const char* call) {
  if (status != 0) {
    throw std::runtime_error(std::string("[rlx] ") + call + " failed with CUDA error " + std::to_string(status));
  }
}

// RLX's GPU (MLX's device 0) as the driver sees it, looked up once: null without a driver
// or a GPU, so also on MLX's CPU and Metal builds.
struct CudaGpu {
  const CudaDriver* cu;
  int device;
  // Concurrent managed access: MLX's unified memory is managed memory with it, pinned host
  // memory without it (Windows, WSL, Jetson).
  bool managed;
  int compute_major;
};

const CudaGpu* cuda_gpu() {
  static const std::optional<CudaGpu> gpu = []() -> std::optional<CudaGpu> {
    const CudaDriver* cu = cuda_driver();
    if (cu == nullptr || !mx::is_available(mx::Device(mx::Device::gpu, 0))) return std::nullopt;
    CudaGpu g{};
    g.cu = cu;
    int managed = 0;
    if (cu->device_get(&g.device, 0) != 0 ||
        cu->device_get_attribute(&managed, kCuDeviceAttributeConcurrentManagedAccess, g.device) != 0 ||
        cu->device_get_attribute(&g.compute_major, kCuDeviceAttributeComputeCapabilityMajor, g.device) != 0) {
      return std::nullopt;
    }
    g.managed = managed != 0;
    return g;
  }();
  return gpu ? &*gpu : nullptr;
}

// Driver calls need a current context on the calling thread: MLX's is the device's primary
// one. Checked once per thread.
void make_context_current(const CudaGpu& gpu) {
  thread_local bool context_current = false;
  if (context_current) return;
  CuContext context = nullptr;
  check_cuda(gpu.cu->ctx_get_current(&context), "cuCtxGetCurrent");
  if (context == nullptr) {
    check_cuda(gpu.cu->primary_ctx_retain(&context, gpu.device), "cuDevicePrimaryCtxRetain");
    check_cuda(gpu.cu->ctx_set_current(context), "cuCtxSetCurrent");
  }
  context_current = true;
}

// The CUDA GPU when ops are being built for it (MLX's default device is the GPU and that
// GPU is CUDA, not Metal): where RLX's own CUDA kernels may replace MLX's ops.
const CudaGpu* building_for_cuda_gpu() {
  const CudaGpu* gpu = cuda_gpu();
  return gpu != nullptr && mx::default_device() == mx::Device::gpu ? gpu : nullptr;
}

// What a Buffer of MLX's CUDA build points at (`cu::CudaBuffer`, mlx/backend/cuda/
// allocator.h, the same from 0.32.1 to the pinned 0.32.4; not in the installed headers).
// MLX's kernels use `data` as a device pointer; a host read of a buffer with `device >= 0`
// first replaces it with a unified-memory copy (`device` then -1) and frees the original
// with cudaFreeAsync.
struct MlxCudaBuffer {
  void* data;
  size_t size;
  int device;  // -1: unified memory
};

// Where host bytes go on a CUDA GPU: device memory from a stream-ordered pool of RLX's own,
// filled on a stream of its own.
//
// Why not MLX's allocator: it puts host-made arrays in managed memory, and its buffer cache
// hands a freed buffer to whatever asks for its size next, device or managed. A GPU kernel
// that then writes a managed buffer the host touched faults on every page (a 3 us divide
// took 135 us on an H100), and a host read of a GPU result makes a fresh managed copy each
// time. Device memory of RLX's own never enters that cache.
//
// Why a pool: freed memory is kept (up to the release threshold) for the next run's inputs
// of the same sizes, instead of being mapped again each run; cudaFreeAsync, which MLX uses
// on a buffer it moves to unified memory, accepts its pointers.
struct UploadPool {
  CuStream stream;
  CuMemoryPool pool;
};

constexpr unsigned long long kUploadPoolKeep = 256ull << 20;

// Made at first use, by a thread with the context current.
const UploadPool& upload_pool(const CudaGpu& gpu) {
  static const UploadPool made = [&] {
    const CudaDriver* cu = gpu.cu;
    UploadPool p{};
    check_cuda(cu->stream_create(&p.stream, kCuStreamNonBlocking), "cuStreamCreate");
    CuMemPoolProps props{};
    props.alloc_type = kCuMemAllocationTypePinned;
    props.location_type = kCuMemLocationTypeDevice;
    props.location_id = gpu.device;
    check_cuda(cu->mem_pool_create(&p.pool, &props), "cuMemPoolCreate");
    unsigned long long keep = kUploadPoolKeep;
    check_cuda(cu->mem_pool_set_attribute(p.pool, kCuMempoolAttrReleaseThreshold, &keep),
               "cuMemPoolSetAttribute");
    return p;
  }();
  return made;
}

// The deleter of arrays made by `device_array`. MLX calls it once nothing refers to the
// buffer any more, which is after every kernel that read it has finished (MLX keeps a
// kernel's inputs alive until then), so the memory goes back to the pool at once.
void free_device_array(mx::allocator::Buffer buffer) {
  auto* record = static_cast<MlxCudaBuffer*>(buffer.ptr());
  if (record == nullptr) return;
  const CudaGpu* gpu = cuda_gpu();
  // A failure here has no caller to report to (MLX may call this from its own thread, or at
  // exit after the driver has shut down): the memory then goes with the process.
  try {
    // Only `device_array` makes these, and only with a GPU.
    if (gpu == nullptr) throw std::logic_error("no CUDA GPU");
    make_context_current(*gpu);
    const CuDevicePtr p = reinterpret_cast<CuDevicePtr>(record->data);
    if (record->device >= 0) {
      gpu->cu->mem_free_async(p, upload_pool(*gpu).stream);
    } else if (gpu->managed) {
      gpu->cu->mem_free(p);  // MLX moved it to managed memory
    } else {
      gpu->cu->mem_free_host(record->data);  // or to pinned host memory
    }
  } catch (...) {
  }
  delete record;
}

// Host bytes as an array in device memory of RLX's CUDA GPU; none without one.
std::optional<mx::array> device_array(const void* data, size_t nbytes, mx::Shape shape,
                                      mx::Dtype dtype) {
  const CudaGpu* gpu = cuda_gpu();
  if (gpu == nullptr || nbytes == 0) return std::nullopt;
  const CudaDriver* cu = gpu->cu;
  make_context_current(*gpu);
  const UploadPool& up = upload_pool(*gpu);
  CuDevicePtr p = 0;
  check_cuda(cu->mem_alloc_from_pool_async(&p, nbytes, up.pool, up.stream), "cuMemAllocFromPoolAsync");
  // Owned by the array from here on, so an error below frees it.
  mx::array a(mx::allocator::Data(mx::allocator::Buffer(new MlxCudaBuffer{reinterpret_cast<void*>(p), nbytes, gpu->device}),
                                  free_device_array),
              std::move(shape), dtype);
  check_cuda(cu->memcpy_htod_async(p, data, nbytes, up.stream), "cuMemcpyHtoDAsync");
  // MLX's streams do not wait for this one: the bytes are there before the array is used.
  check_cuda(cu->stream_synchronize(up.stream), "cuStreamSynchronize");
  return a;
}

// Copies an evaluated, row-contiguous array held in device memory straight to `dst`; false
// (copying nothing) for any other array. MLX's own read (`data()`) would first move the
// buffer to a fresh unified-memory allocation, on every read.
bool copy_from_device(const mx::array& x, void* dst, size_t nbytes) {
  const CudaGpu* gpu = cuda_gpu();
  if (gpu == nullptr) return false;
  const auto* record = static_cast<const MlxCudaBuffer*>(x.buffer().ptr());
  if (record == nullptr || record->device < 0) return false;
  make_context_current(*gpu);
  // Evaluating waited for the kernels that wrote it.
  check_cuda(gpu->cu->memcpy_dtoh(dst, reinterpret_cast<CuDevicePtr>(record->data) + x.offset(), nbytes),
             "cuMemcpyDtoH");
  return true;
}

// The body MLX wraps in a __global__ function: a call of one of cpp/attention.cu's kernels
// (`name` with its template arguments) on the arrays MLX passes by name.
std::string attention_call(const std::string& name) {
  return R"(
  auto stride = [&](int i) -> long long { return mask_shape[i] == 1 ? 0 : mask_strides[i]; };
  rlx_attention::)" + name + R"((
      q, k, v, mask, scale, q_shape[1], k_shape[1], q_shape[2], k_shape[2],
      q_strides[0], q_strides[1], q_strides[2], q_strides[3],
      k_strides[0], k_strides[1], k_strides[2], k_strides[3],
      v_strides[0], v_strides[1], v_strides[2], v_strides[3],
      stride(0), stride(1), stride(2), stride(3), out);
)";
}

// Attention in one kernel on an NVIDIA GPU (cpp/attention.cu) for float32 [B, H, S, D]
// operands of at most 64 features, or nothing where it does not apply (another device, a
// dtype or size it does not take) and MLX's own attention runs instead. `mask_kind` and
// `mask` are the lowering's: `mask` is bool (true: may attend) or additive float32, of
// rank <= 4, broadcastable to [B, H, Sq, Sk].
std::optional<mx::array> fused_attention_gpu(const mx::array& q, const mx::array& k,
                                             const mx::array& v, float scale,
                                             rlx_mlx_mask_kind mask_kind, int64_t window,
                                             const std::optional<mx::array>& mask) {
  // Both kernels keep a query row (or its fragments) and its output in registers: past 64
  // features each they would spill, and MLX's GEMM path is the better one.
  constexpr int max_features = 64;
  constexpr int grid_axis_limit = 65535;
  // RLX_MLX_FUSED_ATTENTION=0 turns the kernel off (to compare against MLX's attention).
  static const bool enabled = [] {
    const char* flag = std::getenv("RLX_MLX_FUSED_ATTENTION");
    return flag == nullptr || std::string(flag) != "0";
  }();
  // The kernels are CUDA: on Metal (also a GPU to MLX) MLX's own attention runs.
  const CudaGpu* gpu = building_for_cuda_gpu();
  if (!enabled || gpu == nullptr) return std::nullopt;
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4) return std::nullopt;
  if (q.dtype() != mx::float32 || k.dtype() != mx::float32 || v.dtype() != mx::float32) return std::nullopt;
  const int batch = q.shape(0), hq = q.shape(1), sq = q.shape(2), dk = q.shape(3);
  const int hk = k.shape(1), dv = v.shape(3);
  if (dk < 1 || dk > max_features || dv < 1 || dv > max_features) return std::nullopt;
  if (hk < 1 || hq % hk != 0 || batch > grid_axis_limit || hq > grid_axis_limit) return std::nullopt;
  if (window < 0 || window > std::numeric_limits<int>::max()) return std::nullopt;
  // The kernel's MASK_* codes (cpp/attention.cu).
  int kind = 0;
  switch (mask_kind) {
    case RLX_MLX_MASK_NONE: kind = 0; break;
    case RLX_MLX_MASK_CAUSAL: kind = 1; break;
    case RLX_MLX_MASK_WINDOW: kind = 2; break;
    case RLX_MLX_MASK_ARRAY: kind = 3; break;
  }
  mx::array m = mx::zeros({1, 1, 1, 1}, mx::bool_);
  if (kind == 3) {
    if (!mask || mask->ndim() > 4) return std::nullopt;
    if (mask->dtype() != mx::bool_ && mask->dtype() != mx::float32) return std::nullopt;
    mx::Shape shape(4 - mask->ndim(), 1);
    shape.insert(shape.end(), mask->shape().begin(), mask->shape().end());
    m = mx::reshape(*mask, shape);
  }
  // Two kernels (cpp/attention.cu): on tensor cores (sm_80 and later; features in groups
  // of eight), with TF32 products under Precision::Tf32 and 3xTF32 ones (float32 accuracy)
  // otherwise; else one thread a query row on the FP32 units.
  const bool tensor_cores = dk % 8 == 0 && dv % 8 == 0 && gpu->compute_major >= 8;
  std::vector<std::pair<std::string, mx::fast::TemplateArg>> template_args{
      {"DK", dk}, {"DV", dv}, {"MASK", kind}, {"WINDOW", kind == 2 ? static_cast<int>(window) : 0},
      {"MaskT", m.dtype()}};
  std::vector<mx::array> out;
  const std::vector<mx::array> inputs{q, k, v, m, mx::array(scale, mx::float32)};
  if (tensor_cores) {
    // MLX writes the __global__ function itself and has no way to give it launch bounds,
    // so the header, the last text before that function, makes the `__global__` NVRTC
    // defines carry them. Four blocks of 128 threads per SM cap registers at 128 (147
    // unbounded, so three blocks): 257-272 against 292-313 us for 3xTF32 at [256, 12, 128,
    // 32] on an H100, with a few bytes spilled.
    static const std::string header = std::string(kAttentionSource) + R"(
#undef __global__
#define __global__ __location__(global) __launch_bounds__(128, 4)
)";
    static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
        "rlx_attention_mma", {"q", "k", "v", "mask", "scale"}, {"out"},
        attention_call("rlx_attention_mma<DK, DV, MASK, WINDOW, MaskT, SPLIT>"), header,
        /*ensure_row_contiguous=*/false);
    constexpr int rows = 64, threads = 128;  // four warps of sixteen rows
    template_args.emplace_back("SPLIT", !tf32_from_environment());
    out = kernel(inputs, {{batch, sq, hq, dv}}, {mx::float32},
                 {((sq + rows - 1) / rows) * threads, hq, batch}, {threads, 1, 1}, template_args,
                 std::nullopt, false, {});
  } else {
    static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
        "rlx_attention", {"q", "k", "v", "mask", "scale"}, {"out"},
        attention_call("rlx_attention_f32<DK, DV, BQ, BK, MASK, WINDOW, MaskT>"), kAttentionSource,
        /*ensure_row_contiguous=*/false);
    // Rows per block: one thread a row; short sequences take smaller blocks.
    const int rows = sq > 64 ? 128 : 64;
    template_args.emplace_back("BQ", rows);
    template_args.emplace_back("BK", 64);
    out = kernel(inputs, {{batch, sq, hq, dv}}, {mx::float32},
                 {((sq + rows - 1) / rows) * rows, hq, batch}, {rows, 1, 1}, template_args,
                 std::nullopt, false, {});
  }
  // The kernel writes [B, Sq, H, Dv]; the result is its [B, H, Sq, Dv] view, so the head
  // merge that usually follows is a free view too.
  return mx::transpose(out.at(0), {0, 2, 1, 3});
}

// Rows of a float32 [rows, width] table by index on an NVIDIA GPU, four floats a thread, or
// nothing where it does not apply (another device or dtype, a width not a multiple of four)
// and MLX's take runs instead. MLX's gather moves one element a thread through general
// index arithmetic: 98 us where PyTorch's embedding lookup takes 17, for MiniLM's word
// embeddings at 256x128 on an H100. `idx` holds indices already clamped into range.
std::optional<mx::array> take_rows_gpu(const mx::array& table, const mx::array& idx) {
  if (building_for_cuda_gpu() == nullptr) return std::nullopt;
  if (table.ndim() != 2 || table.dtype() != mx::float32) return std::nullopt;
  const int width = table.shape(1);
  const int64_t n = static_cast<int64_t>(idx.size());
  // An empty table has no row to clamp a bad index to (MLX's take and the run's index
  // check deal with it).
  if (table.shape(0) == 0 || width == 0 || width % 4 != 0 || n == 0) return std::nullopt;
  const int64_t threads = n * (width / 4);
  if (threads > std::numeric_limits<int32_t>::max() - 256) return std::nullopt;
  // A row-contiguous view may start anywhere: the 16-byte copies need both ends aligned,
  // else each thread copies its four floats one by one.
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "rlx_take_rows", {"table", "idx"}, {"out"}, R"(
  const long long e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= static_cast<long long>(idx_shape[0]) * QUADS) return;
  const long long from = static_cast<long long>(idx[e / QUADS]) * QUADS + e % QUADS;
  if (reinterpret_cast<unsigned long long>(table) % 16 == 0 &&
      reinterpret_cast<unsigned long long>(out) % 16 == 0) {
    reinterpret_cast<float4*>(out)[e] = reinterpret_cast<const float4*>(table)[from];
  } else {
    for (int i = 0; i < 4; ++i) out[4 * e + i] = table[4 * from + i];
  }
)",
      "", /*ensure_row_contiguous=*/true);
  constexpr int block = 256;
  const int grid = static_cast<int>((threads + block - 1) / block) * block;
  std::vector<mx::array> out =
      kernel({table, mx::flatten(idx)}, {{static_cast<int>(n), width}}, {mx::float32},
             {grid, 1, 1}, {block, 1, 1}, {{"QUADS", width / 4}}, std::nullopt, false, {});
  mx::Shape shape = idx.shape();
  shape.push_back(width);
  return mx::reshape(out.at(0), shape);
}

mx::array attention(const mx::array& q0, const mx::array& k0, const mx::array& v, double scale,
                    rlx_mlx_mask_kind mask_kind, int64_t window, const rlx_mlx_array* mask_h) {
  const int rank = static_cast<int>(q0.ndim());
  if (rank < 2 || static_cast<int>(k0.ndim()) != rank || static_cast<int>(v.ndim()) != rank) {
    throw std::invalid_argument("[rlx] attention needs q, k, v of one rank >= 2");
  }
  const int sq = q0.shape(-2), sk = k0.shape(-2), dv = v.shape(-1);
  // Empty operands, which MLX's reshapes cannot take: an empty result, or with no keys
  // zeros (a row with no key to see is zeros in the IR).
  mx::Shape result_shape = q0.shape();
  result_shape.back() = dv;
  const bool empty_result =
      std::any_of(result_shape.begin(), result_shape.end(), [](int d) { return d == 0; });
  if (empty_result || sk == 0) {
    return mx::zeros(result_shape, q0.dtype());
  }
  // No features: every score is 0, as with one zero feature.
  auto one_zero_feature = [](const mx::array& t) {
    mx::Shape shape = t.shape();
    shape.back() = 1;
    return mx::zeros(shape, t.dtype());
  };
  const bool featureless = q0.shape(-1) == 0;
  const mx::array q = featureless ? one_zero_feature(q0) : q0;
  const mx::array k = featureless ? one_zero_feature(k0) : k0;
  // MLX wants [B, H, S, D]: fold leading batch axes, add missing ones.
  auto four = [&](const mx::array& t) {
    const int s = t.shape(-2), f = t.shape(-1);
    const int h = rank >= 3 ? t.shape(-3) : 1;
    return mx::reshape(t, {-1, h, s, f});
  };
  mx::Shape out_shape = q.shape();
  out_shape.back() = dv;
  const int hq = rank >= 3 ? q.shape(-3) : 1;
  mx::Shape score_shape(out_shape.begin(), out_shape.end() - 1);
  score_shape.push_back(sk);

  auto causal = [&](std::optional<int64_t> w) {
    const mx::array qi = mx::reshape(mx::add(mx::arange(sq, mx::int32), mx::array(sk - sq, mx::int32)), {sq, 1});
    const mx::array ki = mx::reshape(mx::arange(sk, mx::int32), {1, sk});
    mx::array m = mx::less_equal(ki, qi);
    if (w) {
      m = mx::logical_and(m, mx::greater(ki, mx::subtract(qi, mx::array(static_cast<int>(*w), mx::int32))));
    }
    return m;
  };
  using Opt = std::optional<mx::array>;
  // Which keys a query sees (bool [.., Sq, Sk]), and the additive mask when there is one.
  auto visible = [&]() -> std::pair<Opt, Opt> {
    switch (mask_kind) {
      case RLX_MLX_MASK_NONE: return {std::nullopt, std::nullopt};
      case RLX_MLX_MASK_CAUSAL: return {causal(std::nullopt), std::nullopt};
      case RLX_MLX_MASK_WINDOW: return {causal(window), std::nullopt};
      case RLX_MLX_MASK_ARRAY: {
        const mx::array& m = get(mask_h);
        if (m.dtype() == mx::bool_) {
          return {m, std::nullopt};
        }
        return {mx::greater(m, mx::array(-std::numeric_limits<float>::infinity(), m.dtype())), m};
      }
    }
    throw std::invalid_argument("[rlx] unknown attention mask code " + std::to_string(mask_kind));
  };
  const mx::Dtype dt = q.dtype();
  const float s = static_cast<float>(scale);
  if (rank == 4) {
    // The kernel reads a mask tensor as given (bool, or additive in float32) and computes
    // the causal kinds itself.
    std::optional<mx::array> mask_arg;
    if (mask_kind == RLX_MLX_MASK_ARRAY) mask_arg = up(get(mask_h));
    const std::optional<mx::array> fused =
        fused_attention_gpu(up(q), up(k), up(v), s, mask_kind, window, mask_arg);
    if (fused) return down(*fused, dt);
  }
  const auto [ok, additive] = visible();
  const mx::array q4 = four(up(q)), k4 = four(up(k)), v4 = four(up(v));
  if (!ok) {
    return down(mx::reshape(mx::fast::scaled_dot_product_attention(q4, k4, v4, s), out_shape), dt);
  }
  if (rank == 4 && ok->ndim() == 4) {
    // MLX broadcasts a [B|1, H|1, Sq|1, Sk] mask itself: never materialize the scores'
    // shape (a padding mask is [B, 1, 1, Sk], H*Sq times smaller).
    const mx::array m4 = additive ? up(*additive) : *ok;
    const mx::array out = mx::fast::scaled_dot_product_attention(q4, k4, v4, s, "array", m4);
    return down(zero_blind_rows(out, *ok), dt);
  }
  const mx::array seen = mx::broadcast_to(*ok, score_shape);
  const mx::array m4 = mx::reshape(additive ? mx::broadcast_to(up(*additive), score_shape) : seen, {-1, hq, sq, sk});
  const mx::array out = mx::reshape(mx::fast::scaled_dot_product_attention(q4, k4, v4, s, "array", m4), out_shape);
  return down(zero_blind_rows(out, seen), dt);
}

// MLX convolves f32 and halves only: f64 runs in f32 (as MLX's f64 math does elsewhere).
mx::array f32(const mx::array& a) {
  return is_float(a.dtype()) && a.dtype() != mx::float32 ? mx::astype(a, mx::float32) : a;
}

// A convolution's channels-first result `y` (f32), plus the bias `[O]` when there is one,
// in the operands' dtype `dt`.
mx::array finish_conv(const mx::array& y, const rlx_mlx_array* bias, mx::Dtype dt) {
  if (bias == nullptr) return down(y, dt);
  mx::Shape bshape{-1};
  for (int i = 2; i < static_cast<int>(y.ndim()); ++i) bshape.push_back(1);
  return down(mx::add(y, mx::reshape(f32(get(bias)), bshape)), dt);
}

// Channels first in, channels last for MLX, channels first out.
// Whether a convolution over these arrays must leave the GPU: MLX 0.32's CUDA allocator
// places arrays of at most 8 bytes in 8-byte blocks of its small pool, and cuDNN refuses
// pointers that are not 16-byte aligned (CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER, found by
// fuzz_graphs on an H100). Such tiny convolutions run on the CPU stream instead.
bool tiny_conv_on_gpu(std::initializer_list<const mx::array*> arrays) {
  if (!(mx::default_device() == mx::Device::gpu)) return false;
  return std::any_of(arrays.begin(), arrays.end(), [](const mx::array* a) { return a->nbytes() <= 8; });
}

mx::array conv(const mx::array& x, const mx::array& w, const rlx_mlx_array* bias,
               std::vector<int> stride, std::vector<int> lo, std::vector<int> hi,
               std::vector<int> dilation, int groups) {
  const int n = static_cast<int>(stride.size());
  std::vector<int> to_last{0}, to_first{0, n + 1};
  for (int i = 0; i < n; ++i) to_last.push_back(i + 2);
  to_last.push_back(1);
  for (int i = 0; i < n; ++i) to_first.push_back(i + 1);
  const mx::Dtype dt = x.dtype();
  if (x.size() == 0 || w.size() == 0) {
    // Nothing to sum (no input channels or no window): the bias alone. MLX's CPU
    // convolution divides by zero on empty operands. (Empty results never get here.)
    mx::Shape shape{x.shape(0), w.shape(0)};
    for (int i = 0; i < n; ++i) {
      const int span = dilation[i] * (w.shape(2 + i) - 1) + 1;
      shape.push_back(std::max(0, (x.shape(2 + i) + lo[i] + hi[i] - span) / stride[i] + 1));
    }
    return finish_conv(mx::zeros(shape, mx::float32), bias, dt);
  }
  mx::array xl = mx::transpose(f32(x), to_last);
  const mx::array wl = mx::transpose(f32(w), to_last);
  if (lo != hi) {
    // Unequal padding is padded here: MLX 0.32's CUDA convolution computes wrong values
    // with it (found by fuzz_graphs on an H100: a 1-D conv padded (1, 0)).
    std::vector<std::pair<int, int>> widths{{0, 0}};
    for (int i = 0; i < n; ++i) widths.emplace_back(lo[i], hi[i]);
    widths.emplace_back(0, 0);
    xl = mx::pad(xl, widths);
    std::fill(lo.begin(), lo.end(), 0);
    std::fill(hi.begin(), hi.end(), 0);
  }
  mx::array y = mx::conv_general(xl, wl, stride, lo, hi, dilation, std::vector<int>{}, groups, false);
  if (tiny_conv_on_gpu({&xl, &wl, &y})) {
    y = mx::conv_general(xl, wl, stride, lo, hi, dilation, std::vector<int>{}, groups, false,
                         mx::Device(mx::Device::cpu));
  }
  y = mx::transpose(y, to_first);
  return finish_conv(y, bias, dt);
}

// The adjoint of `conv`: MLX's general convolution of `x` dilated by the stride, padded by
// `dilation·(k − 1)` less the crop, with the kernel flipped. RLX's weight `[C, O/g, *k]`
// becomes MLX's `[O, *k, C/g]` per group. A crop larger than that padding is sliced off.
mx::array conv_transpose(const mx::array& x, const mx::array& w, const rlx_mlx_array* bias,
                         std::vector<int> stride, std::vector<int> crop_lo, std::vector<int> crop_hi,
                         std::vector<int> output_padding, std::vector<int> dilation, int groups) {
  const int n = static_cast<int>(stride.size());
  const mx::Dtype dt = x.dtype();
  if (x.size() == 0 || w.size() == 0) {
    // As in `conv`: the bias alone, kept from MLX's CPU convolution.
    mx::Shape shape{x.shape(0), w.shape(1) * groups};
    for (int i = 0; i < n; ++i) {
      const int span = dilation[i] * (w.shape(2 + i) - 1) + 1;
      shape.push_back(std::max(0, (x.shape(2 + i) - 1) * stride[i] + span - crop_lo[i] -
                                      crop_hi[i] + output_padding[i]));
    }
    return finish_conv(mx::zeros(shape, mx::float32), bias, dt);
  }
  std::vector<int> to_last{0};
  for (int i = 0; i < n; ++i) to_last.push_back(i + 2);
  to_last.push_back(1);
  const mx::array xl = mx::transpose(f32(x), to_last);
  // [C, O/g, *k] -> [g, C/g, O/g, *k] -> [g, O/g, *k, C/g] -> [O, *k, C/g]
  const int cg = w.shape(0) / groups;
  const int og = w.shape(1);
  mx::Shape grouped{groups, cg, og};
  std::vector<int> perm{0, 2};
  mx::Shape merged{groups * og};
  for (int i = 0; i < n; ++i) {
    grouped.push_back(w.shape(2 + i));
    perm.push_back(3 + i);
    merged.push_back(w.shape(2 + i));
  }
  perm.push_back(1);
  merged.push_back(cg);
  const mx::array wl = mx::reshape(mx::transpose(mx::reshape(f32(w), grouped), perm), merged);
  std::vector<int> lo(n), hi(n), cut_lo(n), cut_hi(n);
  for (int i = 0; i < n; ++i) {
    const int span = dilation[i] * (w.shape(2 + i) - 1);
    const int want_lo = span - crop_lo[i];
    const int want_hi = span - crop_hi[i] + output_padding[i];
    lo[i] = std::max(want_lo, 0);
    hi[i] = std::max(want_hi, 0);
    cut_lo[i] = lo[i] - want_lo;
    cut_hi[i] = hi[i] - want_hi;
  }
  const std::vector<int> ones(n, 1);
  mx::array y = mx::conv_general(xl, wl, ones, lo, hi, dilation, stride, groups, true);
  if (tiny_conv_on_gpu({&xl, &wl, &y})) {
    y = mx::conv_general(xl, wl, ones, lo, hi, dilation, stride, groups, true,
                         mx::Device(mx::Device::cpu));
  }
  if (std::any_of(cut_lo.begin(), cut_lo.end(), [](int c) { return c > 0; }) ||
      std::any_of(cut_hi.begin(), cut_hi.end(), [](int c) { return c > 0; })) {
    mx::Shape start(y.ndim(), 0);
    mx::Shape stop = y.shape();
    for (int i = 0; i < n; ++i) {
      start[1 + i] = cut_lo[i];
      stop[1 + i] -= cut_hi[i];
    }
    y = mx::slice(y, start, stop);
  }
  std::vector<int> to_first{0, n + 1};
  for (int i = 0; i < n; ++i) to_first.push_back(i + 1);
  y = mx::transpose(y, to_first);
  return finish_conv(y, bias, dt);
}

// One strided slice per window offset, combined with max or sum.
mx::array pool(rlx_mlx_pool_kind kind, const mx::array& x0, const std::vector<int>& kernel,
               const std::vector<int>& stride, const std::vector<int>& lo,
               const std::vector<int>& hi) {
  const mx::Dtype dt = x0.dtype();
  const mx::array x = up(x0);
  const int n = static_cast<int>(kernel.size());
  const int rank = x.ndim();
  std::vector<int> axes;
  mx::Shape low, high;
  for (int i = 0; i < n; ++i) {
    axes.push_back(rank - n + i);
    low.push_back(lo[i]);
    high.push_back(hi[i]);
  }
  const bool max = [&] {
    switch (kind) {
      case RLX_MLX_POOL_MAX: return true;
      case RLX_MLX_POOL_AVG: return false;
    }
    throw std::invalid_argument("[rlx] unknown pool code " + std::to_string(kind));
  }();
  const double fill = max ? -std::numeric_limits<double>::infinity() : 0.0;
  const mx::array padded = mx::pad(x, axes, low, high, mx::array(fill, x.dtype()));
  mx::Shape out_spatial;
  for (int i = 0; i < n; ++i) {
    const int size = padded.shape(rank - n + i);
    out_spatial.push_back((size - kernel[i]) / stride[i] + 1);
  }
  std::optional<mx::array> acc;
  int windows = 1;
  for (int k : kernel) windows *= k;
  for (int w = 0; w < windows; ++w) {
    mx::Shape start(rank, 0), stop(padded.shape()), step(rank, 1);
    int rest = w;
    for (int i = n - 1; i >= 0; --i) {
      const int offset = rest % kernel[i];
      rest /= kernel[i];
      const int axis = rank - n + i;
      start[axis] = offset;
      stop[axis] = offset + (out_spatial[i] - 1) * stride[i] + 1;
      step[axis] = stride[i];
    }
    mx::array part = mx::slice(padded, start, stop, step);
    if (!acc) {
      acc = part;
    } else {
      acc = max ? mx::maximum(*acc, part) : mx::add(*acc, part);
    }
  }
  mx::array y = *acc;
  if (!max) {
    y = mx::divide(y, mx::array(static_cast<double>(windows), y.dtype()));
  }
  return down(y, dt);
}

// Stable, with ties in index order for both directions.
bool wants_indices(rlx_mlx_sort_output output) {
  switch (output) {
    case RLX_MLX_SORT_VALUES: return false;
    case RLX_MLX_SORT_INDICES: return true;
  }
  throw std::invalid_argument("[rlx] unknown sort output code " + std::to_string(output));
}

mx::array sort(const mx::array& x, int axis, bool descending, bool indices) {
  if (axis < 0) axis += x.ndim();
  const int n = x.shape(axis);
  if (!descending) {
    return indices ? mx::astype(mx::argsort(x, axis), mx::int64) : mx::sort(x, axis);
  }
  // Sort the reversed axis ascending, then reverse again: descending values whose ties
  // keep their original order.
  const mx::array flipped = mx::flip(x, axis);
  const mx::array order = mx::flip(mx::argsort(flipped, axis), axis);
  if (indices) {
    return mx::subtract(mx::array(static_cast<int64_t>(n - 1), mx::int64), mx::astype(order, mx::int64));
  }
  return mx::take_along_axis(flipped, order, axis);
}

// Whether MLX 0.32's CUDA rope would launch with a geometry CUDA refuses ("invalid
// argument"): it sizes its block by doubling each of (dims / 2, T, B * ceil(N / 4)) in
// turn up to 1024 threads, so small rotations over many rows put more than 64 threads
// along z, CUDA's limit there. `x` is [B, .., T, D] as the kernel sees it.
bool cuda_rope_launch_invalid(const mx::array& x, int dims) {
  const int64_t B = x.shape(0), T = x.shape(-2);
  int64_t N = 1;
  for (int i = 1; i + 2 < static_cast<int>(x.ndim()); ++i) N *= x.shape(i);
  int64_t extent[3] = {dims / 2, T, B * ((N + 3) / 4)};
  if (B == 1 && T == 1) {  // MLX's single-position kernel: a 2-D grid
    extent[1] = N;
    extent[2] = 1;
  }
  int pows[3] = {0, 0, 0};
  for (int sum = 0;;) {
    const int before = sum;
    for (int i = 0; i < 3 && sum < 10; ++i) {
      if (extent[i] >= (int64_t{1} << (pows[i] + 1))) {
        ++pows[i];
        ++sum;
      }
    }
    if (sum == before || sum == 10) break;
  }
  const int64_t grid_y = (extent[1] + (1 << pows[1]) - 1) >> pows[1];
  const int64_t grid_z = (extent[2] + (1 << pows[2]) - 1) >> pows[2];
  return (1 << pows[2]) > 64 || grid_y > 65535 || grid_z > 65535;
}

// Rope from elementwise ops, computing the angles as MLX's kernels do (inverse frequency
// 2^(-(i / (dims / 2)) * log2(base)), angle = scale * (position + offset) * it). `x` is
// float32 [.., T, D].
mx::array rope_from_ops(const mx::array& x, int dims, bool traditional, float base, float scale,
                        const mx::array& offset) {
  const int nd = static_cast<int>(x.ndim());
  const int T = x.shape(-2), D = x.shape(-1), half = dims / 2;
  const mx::array position =
      mx::multiply(mx::add(mx::astype(mx::arange(T), mx::float32), mx::astype(offset, mx::float32)),
                   mx::array(scale));
  const mx::array step = mx::divide(mx::astype(mx::arange(half), mx::float32), mx::array(static_cast<float>(half)));
  // 2^y as e^(y ln 2).
  const mx::array inverse =
      mx::exp(mx::multiply(mx::negative(step), mx::array(std::log2(base) * static_cast<float>(M_LN2))));
  const mx::array angle = mx::multiply(mx::reshape(position, {T, 1}), mx::reshape(inverse, {1, half}));
  const mx::array cos = mx::cos(angle), sin = mx::sin(angle);
  auto last = [&](int start, int stop) {
    mx::Shape lo(nd, 0), hi = x.shape();
    lo[nd - 1] = start;
    hi[nd - 1] = stop;
    return mx::slice(x, lo, hi);
  };
  mx::array rotated = x;
  if (traditional) {
    mx::Shape pairs = x.shape();
    pairs[nd - 1] = half;
    pairs.push_back(2);
    const mx::array p = mx::reshape(last(0, dims), pairs);
    mx::Shape lo(nd + 1, 0), hi = p.shape();
    hi[nd] = 1;
    const mx::array x1 = mx::squeeze(mx::slice(p, lo, hi), nd);
    lo[nd] = 1;
    hi[nd] = 2;
    const mx::array x2 = mx::squeeze(mx::slice(p, lo, hi), nd);
    const mx::array r1 = mx::subtract(mx::multiply(x1, cos), mx::multiply(x2, sin));
    const mx::array r2 = mx::add(mx::multiply(x1, sin), mx::multiply(x2, cos));
    mx::Shape flat = x.shape();
    flat[nd - 1] = dims;
    rotated = mx::reshape(mx::stack({r1, r2}, nd), flat);
  } else {
    const mx::array x1 = last(0, half), x2 = last(half, dims);
    rotated = mx::concatenate({mx::subtract(mx::multiply(x1, cos), mx::multiply(x2, sin)),
                               mx::add(mx::multiply(x1, sin), mx::multiply(x2, cos))},
                              nd - 1);
  }
  return dims < D ? mx::concatenate({rotated, last(dims, D)}, nd - 1) : rotated;
}

mx::array in_range_indices(const mx::array& idx, int size, std::optional<mx::array>* bad) {
  const mx::array below = mx::less(idx, mx::zeros({}, idx.dtype()));
  const mx::array above = mx::greater_equal(idx, mx::array(static_cast<int64_t>(size), idx.dtype()));
  const mx::array wrong = mx::logical_or(below, above);
  *bad = mx::any(wrong);
  return mx::where(wrong, mx::zeros({}, idx.dtype()), idx);
}

mx::Device::DeviceType device_type_of(rlx_mlx_device_kind kind) {
  switch (kind) {
    case RLX_MLX_DEVICE_CPU: return mx::Device::cpu;
    case RLX_MLX_DEVICE_GPU: return mx::Device::gpu;
  }
  throw std::invalid_argument("[rlx] unknown device code " + std::to_string(kind));
}

std::vector<mx::array> arrays_of(rlx_mlx_array* const* xs, size_t n) {
  std::vector<mx::array> v;
  v.reserve(n);
  for (size_t i = 0; i < n; ++i) v.push_back(get(xs[i]));
  return v;
}

}  // namespace

struct rlx_mlx_function {
  std::function<std::vector<mx::array>(const std::vector<mx::array>&)> call;
  void* userdata = nullptr;
  void (*drop)(void*) = nullptr;
  // The key of this function's traces. MLX keeps one trace cache per thread; ids are never
  // reused, so an entry left in some thread's cache can never answer for a later function.
  std::uintptr_t id = 0;
  // The cache of every thread that called the function, each erased when it is freed.
  std::mutex caches_mutex;
  std::vector<mx::detail::CompileCacheWeakPtr> caches;
};

namespace {
std::atomic<std::uintptr_t> next_function_id{1};
}  // namespace

struct rlx_mlx_group {
  mx::distributed::Group group;
};

namespace {

const char* transport_name(rlx_mlx_transport transport) {
  switch (transport) {
    case RLX_MLX_TRANSPORT_RING:
      return "ring";
    case RLX_MLX_TRANSPORT_MPI:
      return "mpi";
    case RLX_MLX_TRANSPORT_NCCL:
      return "nccl";
  }
  throw std::invalid_argument("[rlx] unknown transport code");
}

const mx::distributed::Group& group_of(const rlx_mlx_group* g) {
  if (g == nullptr) {
    throw std::invalid_argument("[rlx] a required group handle is NULL");
  }
  return g->group;
}

}  // namespace

extern "C" {

const char* rlx_mlx_last_error(void) { return last_error.c_str(); }

void rlx_mlx_set_last_error(const char* message) {
  last_error = message != nullptr ? message : "";
}

const char* rlx_mlx_version(void) {
  static const std::string v = mx::version();
  return v.c_str();
}

int rlx_mlx_device_name(char* buf, size_t len) {
  return guard([&] {
    const mx::Device& d = mx::default_device();
    const char* name = d.type == mx::Device::gpu ? "gpu" : "cpu";
    if (buf != nullptr && len > 0) {
      std::snprintf(buf, len, "%s", name);
    }
  });
}

int rlx_mlx_device_count(rlx_mlx_device_kind kind, int32_t* count) {
  return guard([&] {
    if (count == nullptr) {
      throw std::invalid_argument("[rlx] device_count needs an output");
    }
    *count = mx::is_available(mx::Device(device_type_of(kind), 0)) ? mx::device_count(device_type_of(kind)) : 0;
  });
}

int rlx_mlx_set_default_device(rlx_mlx_device_kind kind) {
  return guard([&] {
    const mx::Device d(device_type_of(kind), 0);
    if (!mx::is_available(d)) {
      throw std::invalid_argument(std::string("[rlx] this MLX has no ") + (kind == RLX_MLX_DEVICE_GPU ? "GPU" : "CPU") + " device");
    }
    if (!(mx::default_device() == d)) {
      mx::set_default_device(d);
    }
  });
}

int rlx_mlx_default_device(rlx_mlx_device_kind* kind) {
  return guard([&] {
    if (kind == nullptr) {
      throw std::invalid_argument("[rlx] default_device needs an output");
    }
    *kind = mx::default_device().type == mx::Device::gpu ? RLX_MLX_DEVICE_GPU : RLX_MLX_DEVICE_CPU;
  });
}

bool rlx_mlx_tf32(void) { return tf32_from_environment(); }

bool rlx_mlx_set_exact_halves(bool exact) {
  const bool previous = exact_halves;
  exact_halves = exact;
  return previous;
}

int rlx_mlx_set_fusion(bool enabled) {
  return guard([&] { mx::set_compile_mode(enabled ? mx::CompileMode::enabled : mx::CompileMode::no_fuse); });
}

int64_t rlx_mlx_live_arrays(void) { return live_arrays.load(std::memory_order_relaxed); }

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

const char* rlx_mlx_blas(void) {
#ifdef RLX_MLX_OPENBLAS
  static const std::string name = "openblas (" + std::to_string(openblas_get_num_threads()) + " threads)";
  return name.c_str();
#else
  return "bundled reference BLAS";
#endif
}

void rlx_mlx_array_free(rlx_mlx_array* a) {
  if (a != nullptr) {
    delete a;
    live_arrays.fetch_sub(1, std::memory_order_relaxed);
  }
}

int rlx_mlx_array_clone(const rlx_mlx_array* a, rlx_mlx_array** out) {
  return guard([&] { put(out, get(a)); });
}

int rlx_mlx_array_from_bytes(const void* data, size_t nbytes, const int64_t* shape, size_t ndim,
                             rlx_mlx_dtype dtype, rlx_mlx_device_kind device, rlx_mlx_array** out) {
  return guard([&] {
    const mx::Dtype dt = dtype_of(dtype);
    const mx::Shape s = shape_of(shape, ndim);
    size_t count = 1;
    for (auto d : s) count *= static_cast<size_t>(d);
    if (count * dt.size() != nbytes) {
      throw std::invalid_argument("[rlx] " + std::to_string(nbytes) + " bytes do not fill the array");
    }
    device_type_of(device);  // a valid code
    if (device == RLX_MLX_DEVICE_GPU) {
      if (std::optional<mx::array> a = device_array(data, nbytes, s, dt)) {
        put(out, std::move(*a));
        return;
      }
    }
    // One copy, straight into memory of MLX's allocator (on CUDA, unified memory): wrapping
    // a host buffer makes MLX copy it again on devices that cannot use it.
    mx::array a(mx::allocator::malloc(nbytes), s, dt);
    if (nbytes > 0) {
      std::memcpy(a.data<uint8_t>(), data, nbytes);
    }
    put(out, std::move(a));
  });
}

int rlx_mlx_array_info(const rlx_mlx_array* a, rlx_mlx_dtype* dtype, size_t* ndim, int64_t* dims,
                       size_t cap) {
  return guard([&] {
    const mx::array& x = get(a);
    if (dtype != nullptr) *dtype = code_of(x.dtype());
    if (ndim != nullptr) *ndim = x.ndim();
    for (size_t i = 0; i < x.ndim() && i < cap && dims != nullptr; ++i) {
      dims[i] = x.shape(static_cast<int>(i));
    }
  });
}

int rlx_mlx_k_major(const rlx_mlx_array* x, rlx_mlx_array** out) {
  return guard([&] {
    const mx::array& a = get(x);
    const int rank = static_cast<int>(a.ndim());
    if (rank < 2) {
      throw std::invalid_argument("[rlx] k_major needs rank >= 2, got " + std::to_string(rank));
    }
    put(out, mx::swapaxes(mx::contiguous(mx::swapaxes(a, rank - 2, rank - 1)), rank - 2, rank - 1));
  });
}

int rlx_mlx_array_read(const rlx_mlx_array* a, void* dst, size_t nbytes) {
  return guard([&] {
    mx::array x = get(a);
    mx::eval(x);
    // Only a strided or broadcast result needs a copy (and another trip through the
    // scheduler) before its bytes can be read as they are.
    if (!x.flags().row_contiguous) {
      // On the CPU stream: the copy is read by the host next, and a GPU has no float64.
      x = mx::contiguous(x, false, mx::Device(mx::Device::cpu));
      mx::eval(x);
    }
    if (x.nbytes() != nbytes) {
      throw std::invalid_argument("[rlx] reading " + std::to_string(nbytes) + " bytes from an array of " + std::to_string(x.nbytes()));
    }
    if (nbytes > 0 && !copy_from_device(x, dst, nbytes)) {
      std::memcpy(dst, x.data<uint8_t>(), nbytes);
    }
  });
}

int rlx_mlx_eval(rlx_mlx_array* const* arrays, size_t n) {
  return guard([&] { mx::eval(arrays_of(arrays, n)); });
}

int rlx_mlx_async_eval(rlx_mlx_array* const* arrays, size_t n) {
  return guard([&] { mx::async_eval(arrays_of(arrays, n)); });
}

int rlx_mlx_synchronize(void) {
  return guard([&] { mx::synchronize(); });
}

int rlx_mlx_eval_within(rlx_mlx_array* const* arrays, size_t n, int64_t timeout_ms) {
  bool timed_out = false;
  const int status = guard([&] {
    const std::vector<mx::array> xs = arrays_of(arrays, n);
    mx::async_eval(xs);
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::milliseconds(std::max<int64_t>(timeout_ms, 0));
    // Yield first (a collective on a fast link is done in microseconds), then sleep in
    // growing steps up to a millisecond, so a long wait costs no core.
    int polls = 0;
    auto pause = std::chrono::microseconds(10);
    for (const mx::array& x : xs) {
      while (!x.is_available()) {
        if (clock::now() >= deadline) {
          timed_out = true;
          return;
        }
        if (++polls < 2000) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(pause);
          pause = std::min(pause * 2, std::chrono::microseconds(1000));
        }
      }
    }
    // Everything is computed; this rethrows a failure a stream recorded (a lost peer).
    mx::eval(xs);
  });
  if (status == 0 && timed_out) {
    last_error = "[rlx] evaluation did not finish within " + std::to_string(timeout_ms) + " ms";
    return RLX_MLX_STATUS_TIMED_OUT;
  }
  return status;
}

bool rlx_mlx_transport_available(rlx_mlx_transport transport) {
  try {
    return mx::distributed::is_available(transport_name(transport));
  } catch (...) {
    return false;
  }
}

int rlx_mlx_group_init(rlx_mlx_transport transport, rlx_mlx_group** out) {
  return guard([&] {
    if (out == nullptr) {
      throw std::invalid_argument("[rlx] output pointer is NULL");
    }
    const char* name = transport_name(transport);
    if (!mx::distributed::is_available(name)) {
      throw std::runtime_error(std::string("[rlx] this MLX build has no ") + name + " transport");
    }
    mx::distributed::Group g = mx::distributed::init(true, name);
    *out = new rlx_mlx_group{std::move(g)};
  });
}

void rlx_mlx_group_free(rlx_mlx_group* g) { delete g; }

int rlx_mlx_group_rank(const rlx_mlx_group* g, int32_t* rank, int32_t* size) {
  return guard([&] {
    if (rank == nullptr || size == nullptr) {
      throw std::invalid_argument("[rlx] output pointer is NULL");
    }
    *rank = group_of(g).rank();
    *size = group_of(g).size();
  });
}

int rlx_mlx_all_sum(const rlx_mlx_group* g, const rlx_mlx_array* x, rlx_mlx_array** out) {
  return guard([&] { put(out, mx::distributed::all_sum(get(x), group_of(g))); });
}

int rlx_mlx_all_gather(const rlx_mlx_group* g, const rlx_mlx_array* x, rlx_mlx_array** out) {
  return guard([&] { put(out, mx::distributed::all_gather(get(x), group_of(g))); });
}

int rlx_mlx_send(const rlx_mlx_group* g, const rlx_mlx_array* x, int32_t dst,
                 rlx_mlx_array** out) {
  return guard([&] { put(out, mx::distributed::send(get(x), dst, group_of(g))); });
}

int rlx_mlx_recv(const rlx_mlx_group* g, const int64_t* shape, size_t ndim, rlx_mlx_dtype dtype,
                 int32_t src, rlx_mlx_array** out) {
  return guard([&] {
    put(out, mx::distributed::recv(shape_of(shape, ndim), dtype_of(dtype), src, group_of(g)));
  });
}

int rlx_mlx_compile(rlx_mlx_lower_fn lower, void* userdata, void (*drop)(void*),
                    size_t n_outputs, bool shapeless, rlx_mlx_function** out) {
  return guard([&] {
    if (lower == nullptr || out == nullptr) {
      throw std::invalid_argument("[rlx] compile needs a lowering callback and an output");
    }
    // Owned here until compiling succeeds: on failure the caller still owns `userdata`.
    auto f = std::make_unique<rlx_mlx_function>();
    f->userdata = userdata;
    f->drop = drop;
    f->id = next_function_id.fetch_add(1);
    auto traced = [lower, userdata, n_outputs](const std::vector<mx::array>& inputs) {
      std::vector<rlx_mlx_array*> in;
      in.reserve(inputs.size());
      for (const auto& a : inputs) in.push_back(wrap(a));
      std::vector<rlx_mlx_array*> outs(n_outputs, nullptr);
      const int status = lower(userdata, in.data(), in.size(), outs.data(), n_outputs);
      for (auto* h : in) rlx_mlx_array_free(h);
      std::vector<mx::array> result;
      bool missing = false;
      for (auto* h : outs) {
        if (h == nullptr) {
          missing = true;
        } else {
          result.push_back(h->value);
          rlx_mlx_array_free(h);
        }
      }
      if (status != 0) {
        throw std::runtime_error(last_error.empty() ? "the lowering callback failed" : last_error);
      }
      if (missing) {
        throw std::runtime_error("[rlx] the lowering callback left an output unset");
      }
      return result;
    };
    f->call = mx::detail::compile(traced, f->id, shapeless);
    *out = f.release();
  });
}

int rlx_mlx_function_call(rlx_mlx_function* f, rlx_mlx_array* const* inputs, size_t n_inputs,
                          rlx_mlx_array** outputs, size_t n_outputs) {
  return guard([&] {
    if (f == nullptr) {
      throw std::invalid_argument("[rlx] function handle is NULL");
    }
    {
      auto cache = mx::detail::compile_cache();
      std::lock_guard<std::mutex> lock(f->caches_mutex);
      const bool known = std::any_of(f->caches.begin(), f->caches.end(), [&](const auto& c) {
        return !c.owner_before(cache) && !cache.owner_before(c);
      });
      if (!known) f->caches.push_back(cache);
    }
    std::vector<mx::array> result = f->call(arrays_of(inputs, n_inputs));
    if (result.size() != n_outputs) {
      throw std::runtime_error("[rlx] the compiled function returned " + std::to_string(result.size()) + " outputs, expected " + std::to_string(n_outputs));
    }
    for (size_t i = 0; i < n_outputs; ++i) outputs[i] = wrap(result[i]);
  });
}

void rlx_mlx_function_free(rlx_mlx_function* f) {
  if (f == nullptr) {
    return;
  }
  try {
    // A cache whose thread has exited is gone already; `compile_erase` skips it.
    for (const auto& cache : f->caches) mx::detail::compile_erase(cache, f->id);
  } catch (...) {
    // The cache may already be gone at process exit; nothing to release then.
  }
  if (f->drop != nullptr) {
    f->drop(f->userdata);
  }
  delete f;
}

int rlx_mlx_unary(rlx_mlx_unary_op kind, const rlx_mlx_array* x, rlx_mlx_array** out) {
  return guard([&] { put(out, unary(kind, get(x))); });
}

int rlx_mlx_binary(rlx_mlx_binary_op kind, const rlx_mlx_array* a, const rlx_mlx_array* b, rlx_mlx_array** out) {
  return guard([&] { put(out, binary(kind, get(a), get(b))); });
}

int rlx_mlx_compare(rlx_mlx_compare_op kind, const rlx_mlx_array* a, const rlx_mlx_array* b, rlx_mlx_array** out) {
  return guard([&] { put(out, compare(kind, get(a), get(b))); });
}

int rlx_mlx_where(const rlx_mlx_array* cond, const rlx_mlx_array* a, const rlx_mlx_array* b,
                  rlx_mlx_array** out) {
  return guard([&] { put(out, mx::where(get(cond), get(a), get(b))); });
}

int rlx_mlx_cast(const rlx_mlx_array* x, rlx_mlx_dtype dtype, rlx_mlx_array** out) {
  return guard([&] { put(out, cast(get(x), dtype_of(dtype))); });
}

namespace {

// a·b (either transposed), plus `bias` [N] over every row when given. A float32 product
// with a bias is one `addmm`, which MLX's CUDA backend runs as a cuBLASLt GEMM with a bias
// epilogue: the bias costs no pass over the result.
mx::array product(const rlx_mlx_array* a, const rlx_mlx_array* b, const rlx_mlx_array* bias,
                  bool transpose_a, bool transpose_b) {
  const mx::Dtype dt = get(a).dtype();
  mx::array x = up(get(a));
  mx::array y = up(get(b));
  if (transpose_a) x = mx::swapaxes(x, -1, -2);
  if (transpose_b) y = mx::swapaxes(y, -1, -2);
  std::optional<mx::array> c;
  if (bias != nullptr) c = up(get(bias));
  if (x.size() == 0 || y.size() == 0) {
    // An empty product (or one over nothing, which is zeros) is made here: MLX's GPU
    // kernels fail or crash on empty operands.
    mx::Shape shape = mx::broadcast_shapes(mx::Shape(x.shape().begin(), x.shape().end() - 2),
                                           mx::Shape(y.shape().begin(), y.shape().end() - 2));
    shape.push_back(x.shape(-2));
    shape.push_back(y.shape(-1));
    const mx::array zeros = mx::zeros(shape, x.dtype());
    return down(c ? mx::add(zeros, *c) : zeros, dt);
  }
  if (!c) return down(mx::matmul(x, y), dt);
  if (x.dtype() == mx::float32 && c->ndim() == 1) return down(mx::addmm(*c, x, y), dt);
  return down(mx::add(mx::matmul(x, y), *c), dt);
}

}  // namespace

int rlx_mlx_matmul(const rlx_mlx_array* a, const rlx_mlx_array* b, bool transpose_a,
                   bool transpose_b, rlx_mlx_array** out) {
  return guard([&] { put(out, product(a, b, nullptr, transpose_a, transpose_b)); });
}

int rlx_mlx_matmul_bias(const rlx_mlx_array* a, const rlx_mlx_array* b, const rlx_mlx_array* bias,
                        bool transpose_a, bool transpose_b, rlx_mlx_array** out) {
  return guard([&] {
    get(bias);  // required here: NULL is an error, not "no bias"
    put(out, product(a, b, bias, transpose_a, transpose_b));
  });
}

int rlx_mlx_reduce(rlx_mlx_reduce_op kind, const rlx_mlx_array* x, const int32_t* axes, size_t n_axes,
                   bool keep_dims, rlx_mlx_array** out) {
  return guard([&] { put(out, reduce(kind, get(x), ints_of(axes, n_axes), keep_dims)); });
}

int rlx_mlx_arg_reduce(rlx_mlx_arg_reduce_op kind, const rlx_mlx_array* x, int32_t axis,
                       bool keep_dims, rlx_mlx_array** out) {
  return guard([&] {
    const mx::array& v = get(x);
    const int rank = static_cast<int>(v.ndim());
    if (axis >= 0 && axis < rank && v.size() == 0) {
      // Of an empty array (MLX refuses it): an empty result, or over an empty axis the
      // first index, 0, as on the CPU.
      mx::Shape shape = v.shape();
      if (keep_dims) shape[axis] = 1;
      else shape.erase(shape.begin() + axis);
      put(out, mx::zeros(shape, mx::int64));
      return;
    }
    switch (kind) {
      case RLX_MLX_ARGMAX: put(out, mx::astype(mx::argmax(v, axis, keep_dims), mx::int64)); return;
      case RLX_MLX_ARGMIN: put(out, mx::astype(mx::argmin(v, axis, keep_dims), mx::int64)); return;
    }
    throw std::invalid_argument("[rlx] unknown arg-reduce code " + std::to_string(kind));
  });
}

int rlx_mlx_cumsum(const rlx_mlx_array* x, int32_t axis, bool exclusive, bool reverse,
                   rlx_mlx_array** out) {
  return guard([&] {
    const mx::array& v = get(x);
    const mx::Dtype dt = v.dtype();
    if (v.size() == 0) {
      put(out, v);  // nothing to sum (and kept away from MLX's CPU reductions, as above)
      return;
    }
    const bool on_gpu = mx::default_device() == mx::Device::gpu;
    if (!(on_gpu && exclusive)) {
      put(out, down(mx::cumsum(up(v), axis, reverse, !exclusive, compute_type(dt)), dt));
      return;
    }
    // MLX 0.32's CUDA exclusive scan gave wrong sums (an f16 [64, 33, 3] reverse scan along
    // axis 0: 94 where 63 is right). An exclusive scan is the inclusive one shifted by one
    // position, with the identity where nothing precedes: the same sums in the same order.
    const mx::array inclusive = mx::cumsum(up(v), axis, reverse, true, compute_type(dt));
    const int n = inclusive.shape(axis);
    mx::Shape start(inclusive.ndim(), 0);
    mx::Shape stop = inclusive.shape();
    mx::Shape edge = inclusive.shape();
    edge[axis] = 1;
    const mx::array zero = mx::zeros(edge, inclusive.dtype());
    if (reverse) {
      start[axis] = 1;  // exclusive[i] = inclusive[i + 1]; the last is 0
      put(out, down(mx::concatenate({mx::slice(inclusive, start, stop), zero}, axis), dt));
    } else {
      stop[axis] = n - 1;  // exclusive[i] = inclusive[i - 1]; the first is 0
      put(out, down(mx::concatenate({zero, mx::slice(inclusive, start, stop)}, axis), dt));
    }
  });
}

int rlx_mlx_softmax(const rlx_mlx_array* x, int32_t axis, bool log, rlx_mlx_array** out) {
  return guard([&] {
    const mx::array& v = get(x);
    if (v.size() == 0) {
      // Nothing to normalize (MLX's logsumexp refuses empty arrays).
      put(out, v);
      return;
    }
    const mx::array u = up(v);
    mx::array y = log ? mx::subtract(u, mx::logsumexp(u, axis, true)) : mx::softmax(u, axis, true);
    put(out, down(y, v.dtype()));
  });
}

int rlx_mlx_layer_norm(const rlx_mlx_array* x, const rlx_mlx_array* weight,
                       const rlx_mlx_array* bias, double eps, rlx_mlx_array** out) {
  return guard([&] {
    const mx::array& v = get(x);
    if (v.size() == 0) {
      put(out, v);  // nothing to normalize; kept from MLX's CPU reductions (see `reduce`)
      return;
    }
    std::optional<mx::array> w, b;
    if (weight != nullptr) w = up(get(weight));
    if (bias != nullptr) b = up(get(bias));
    put(out, down(mx::fast::layer_norm(up(v), w, b, static_cast<float>(eps)), v.dtype()));
  });
}

int rlx_mlx_rms_norm(const rlx_mlx_array* x, const rlx_mlx_array* weight, double eps,
                     rlx_mlx_array** out) {
  return guard([&] {
    const mx::array& v = get(x);
    if (v.size() == 0) {
      put(out, v);  // nothing to normalize; kept from MLX's CPU reductions (see `reduce`)
      return;
    }
    std::optional<mx::array> w;
    if (weight != nullptr) w = up(get(weight));
    put(out, down(mx::fast::rms_norm(up(v), w, static_cast<float>(eps)), v.dtype()));
  });
}

int rlx_mlx_reshape(const rlx_mlx_array* x, const int64_t* shape, size_t ndim, rlx_mlx_array** out) {
  return guard([&] { put(out, mx::reshape(get(x), shape_of(shape, ndim))); });
}

int rlx_mlx_permute(const rlx_mlx_array* x, const int32_t* perm, size_t ndim, rlx_mlx_array** out) {
  return guard([&] { put(out, mx::transpose(get(x), ints_of(perm, ndim))); });
}

int rlx_mlx_slice(const rlx_mlx_array* x, const int64_t* start, const int64_t* stop,
                  const int64_t* step, size_t ndim, rlx_mlx_array** out) {
  return guard([&] {
    put(out, mx::slice(get(x), shape_of(start, ndim), shape_of(stop, ndim), shape_of(step, ndim)));
  });
}

int rlx_mlx_concat(rlx_mlx_array* const* xs, size_t n, int32_t axis, rlx_mlx_array** out) {
  return guard([&] { put(out, mx::concatenate(arrays_of(xs, n), axis)); });
}

int rlx_mlx_broadcast(const rlx_mlx_array* x, const int64_t* shape, size_t ndim, rlx_mlx_array** out) {
  return guard([&] { put(out, mx::broadcast_to(get(x), shape_of(shape, ndim))); });
}

int rlx_mlx_pad(const rlx_mlx_array* x, const int64_t* low, const int64_t* high, size_t ndim,
                const rlx_mlx_array* value, rlx_mlx_array** out) {
  return guard([&] {
    std::vector<int> axes;
    for (size_t i = 0; i < ndim; ++i) axes.push_back(static_cast<int>(i));
    put(out, mx::pad(get(x), axes, shape_of(low, ndim), shape_of(high, ndim), get(value)));
  });
}

int rlx_mlx_gather(const rlx_mlx_array* data, const rlx_mlx_array* indices, int32_t axis,
                   rlx_mlx_array** out, rlx_mlx_array** bad) {
  return guard([&] {
    const mx::array& d = get(data);
    std::optional<mx::array> wrong;
    const mx::array idx = in_range_indices(get(indices), d.shape(axis), &wrong);
    std::optional<mx::array> rows = axis == 0 ? take_rows_gpu(d, idx) : std::nullopt;
    put(out, rows ? *rows : mx::take(d, idx, axis));
    put(bad, *wrong);
  });
}

int rlx_mlx_scatter_add(const rlx_mlx_array* data, const rlx_mlx_array* indices,
                        const rlx_mlx_array* updates, int32_t axis, rlx_mlx_array** out,
                        rlx_mlx_array** bad) {
  return guard([&] {
    const mx::array& d = get(data);
    const mx::array& raw = get(indices);
    std::optional<mx::array> wrong;
    const mx::array idx = mx::flatten(in_range_indices(raw, d.shape(axis), &wrong));
    if (d.size() == 0 || get(updates).size() == 0) {
      // Nothing to add (and MLX's CPU scatter divides by zero on empty operands).
      put(out, d);
      put(bad, *wrong);
      return;
    }
    const int n = idx.shape(0);
    // updates: data[..axis] ++ indices ++ data[axis+1..] -> [n, data[..axis], 1, data[axis+1..]]
    mx::Shape flat(d.shape().begin(), d.shape().begin() + axis);
    flat.push_back(n);
    flat.insert(flat.end(), d.shape().begin() + axis + 1, d.shape().end());
    mx::array u = mx::reshape(get(updates), flat);
    u = mx::moveaxis(u, axis, 0);
    u = mx::expand_dims(u, axis + 1);
    const mx::Dtype dt = d.dtype();
    // MLX's GPU scatter has no 64-bit integers: those run on the CPU stream (memory is
    // shared, so only the scatter moves).
    const bool wide_int = dt == mx::int64 || dt == mx::uint64;
    const mx::StreamOrDevice where_ = wide_int && mx::default_device() == mx::Device::gpu
        ? mx::StreamOrDevice(mx::Device(mx::Device::cpu))
        : mx::StreamOrDevice{};
    mx::array y = mx::scatter_add(up(d), std::vector<mx::array>{idx}, up(u), std::vector<int>{axis}, where_);
    put(out, down(y, dt));
    put(bad, *wrong);
  });
}

int rlx_mlx_attention(const rlx_mlx_array* q, const rlx_mlx_array* k, const rlx_mlx_array* v,
                      double scale, rlx_mlx_mask_kind mask_kind, int64_t window,
                      const rlx_mlx_array* mask,
                      rlx_mlx_array** out) {
  return guard([&] { put(out, attention(get(q), get(k), get(v), scale, mask_kind, window, mask)); });
}

int rlx_mlx_rope(const rlx_mlx_array* x, int32_t dims, double base, double scale, bool traditional,
                 const rlx_mlx_array* offset, rlx_mlx_array** out) {
  return guard([&] {
    const mx::array& v = get(x);
    if (v.size() == 0) {
      put(out, v);  // MLX's CUDA rope launches an empty grid, which CUDA refuses
      return;
    }
    const mx::Shape shape = v.shape();
    // MLX rotates [.., L, D] with at least three axes. Its CUDA kernel gives its output the
    // input's strides, so a broadcast input (a gradient of ones, stride 0) came back
    // wrong, and some small strided inputs failed to launch: it gets a row-contiguous one.
    mx::array x3 = mx::contiguous(v.ndim() < 3 ? mx::reshape(up(v), {1, shape[0], shape[1]}) : up(v));
    mx::array off = offset != nullptr ? mx::astype(get(offset), mx::int32) : mx::array(0, mx::int32);
    const bool on_gpu = mx::default_device() == mx::Device::gpu;
    mx::array y = on_gpu && cuda_rope_launch_invalid(x3, dims)
                      ? rope_from_ops(x3, dims, traditional, static_cast<float>(base),
                                      static_cast<float>(scale), off)
                      : mx::fast::rope(x3, dims, traditional, static_cast<float>(base),
                                       static_cast<float>(scale), off);
    put(out, down(mx::reshape(y, shape), v.dtype()));
  });
}

int rlx_mlx_conv(const rlx_mlx_array* x, const rlx_mlx_array* w, const rlx_mlx_array* bias,
                 const int32_t* stride, const int32_t* pad_low, const int32_t* pad_high,
                 const int32_t* dilation, size_t spatial, int32_t groups, rlx_mlx_array** out) {
  return guard([&] {
    put(out, conv(get(x), get(w), bias, ints_of(stride, spatial), ints_of(pad_low, spatial),
                  ints_of(pad_high, spatial), ints_of(dilation, spatial), groups));
  });
}

int rlx_mlx_conv_transpose(const rlx_mlx_array* x, const rlx_mlx_array* w, const rlx_mlx_array* bias,
                           const int32_t* stride, const int32_t* crop_low, const int32_t* crop_high,
                           const int32_t* output_padding, const int32_t* dilation, size_t spatial,
                           int32_t groups, rlx_mlx_array** out) {
  return guard([&] {
    put(out, conv_transpose(get(x), get(w), bias, ints_of(stride, spatial), ints_of(crop_low, spatial),
                            ints_of(crop_high, spatial), ints_of(output_padding, spatial),
                            ints_of(dilation, spatial), groups));
  });
}

int rlx_mlx_pool(rlx_mlx_pool_kind kind, const rlx_mlx_array* x, const int32_t* kernel, const int32_t* stride,
                 const int32_t* pad_low, const int32_t* pad_high, size_t spatial,
                 rlx_mlx_array** out) {
  return guard([&] {
    put(out, pool(kind, get(x), ints_of(kernel, spatial), ints_of(stride, spatial),
                  ints_of(pad_low, spatial), ints_of(pad_high, spatial)));
  });
}

int rlx_mlx_sort(const rlx_mlx_array* x, int32_t axis, bool descending,
                 rlx_mlx_sort_output output, rlx_mlx_array** out) {
  return guard([&] { put(out, sort(get(x), axis, descending, wants_indices(output))); });
}

int rlx_mlx_topk(const rlx_mlx_array* x, int32_t k, int32_t axis, rlx_mlx_sort_output output,
                 rlx_mlx_array** out) {
  return guard([&] {
    const mx::array& v = get(x);
    const mx::array sorted = sort(v, axis, true, wants_indices(output));
    mx::Shape start(v.ndim(), 0), stop(sorted.shape());
    const int a = axis < 0 ? axis + static_cast<int>(v.ndim()) : axis;
    stop[a] = k;
    put(out, mx::slice(sorted, start, stop));
  });
}

int rlx_mlx_solve(const rlx_mlx_array* a, const rlx_mlx_array* b, rlx_mlx_array** out) {
  return guard([&] {
    const mx::Dtype dt = get(a).dtype();
    // LAPACK runs on the CPU stream on every device.
    put(out, down(mx::linalg::solve(up(get(a)), up(get(b)), mx::Device(mx::Device::cpu)), dt));
  });
}

int rlx_mlx_quantized_matmul(const rlx_mlx_array* x, const rlx_mlx_array* w,
                             const rlx_mlx_array* scales, const rlx_mlx_array* biases,
                             int32_t bits, int32_t group_size, rlx_mlx_array** out) {
  return guard([&] {
    // RLX packs little-endian bytes low bits first; MLX packs uint32 words the same way,
    // so the bytes reinterpret as words unchanged.
    const mx::array words = mx::view(get(w), mx::uint32);
    const mx::array& xv = get(x);
    if (xv.dtype() == mx::float64) {
      // MLX quantizes in f16/bf16/f32 only: dequantize in f32, multiply in f64.
      const mx::array dense = mx::dequantize(words, mx::astype(get(scales), mx::float32),
                                             mx::astype(get(biases), mx::float32), group_size, bits);
      put(out, mx::matmul(xv, mx::swapaxes(mx::astype(dense, mx::float64), -1, -2)));
      return;
    }
    // f16/bf16 multiply in f32 and round once, as RLX's CPU kernels do.
    const mx::array y = mx::quantized_matmul(up(xv), words, up(get(scales)), up(get(biases)), true, group_size, bits);
    put(out, down(y, xv.dtype()));
  });
}

}  // extern "C"
