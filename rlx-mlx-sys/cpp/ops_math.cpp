// Arithmetic ops: elementwise math, casts, reductions, scans, softmax, norms, matrix
// products, solve and quantized matmul (GGUF's blocks are in ops_gguf_blocks.cpp). Where
// MLX's semantics differ from the IR's (integer division and remainder, saturating casts,
// NaN-propagating max and min) the IR's are composed here from MLX ops.
#include "shim_internal.h"

#include <numeric>

namespace rlx {

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

// x·y for a matrix `y`. MLX multiplies an `x` of rank 3 or more by a matrix by flattening
// `x` to rows and unflattening the result: two graph nodes around every product, which a
// decoding step (one token, leading axes all 1) pays in host time per node. When `x`'s
// leading axes are all 1, `y` takes `x`'s rank instead (one view), and the product is the
// same single matrix product.
mx::array matmul_rows(const mx::array& x, const mx::array& y) {
  const int rank = static_cast<int>(x.ndim());
  if (y.ndim() != 2 || rank <= 2 || x.size() != static_cast<size_t>(x.shape(-2)) * x.shape(-1)) {
    return mx::matmul(x, y);
  }
  std::vector<int> leading(rank - 2);
  std::iota(leading.begin(), leading.end(), 0);
  return mx::matmul(x, mx::expand_dims(y, leading));
}

}  // namespace rlx

using namespace rlx;

extern "C" {

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
  if (!c) return down(matmul_rows(x, y), dt);
  if (x.dtype() == mx::float32 && c->ndim() == 1) return down(mx::addmm(*c, x, y), dt);
  return down(mx::add(matmul_rows(x, y), *c), dt);
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
    const int at = axis < 0 ? axis + static_cast<int>(v.ndim()) : axis;
    if (at >= 0 && at < static_cast<int>(v.ndim()) && v.shape(at) == 1) {
      // One position: the value itself, or nothing before it. MLX's CUDA scan must not see
      // it: an axis of one position may carry any stride (a [1, 1] slice of an [8, 8]
      // array keeps the stride 8), and its strided kernel then reads and writes `stride`
      // values past a one-value array (an H200's memcheck, a random graph).
      put(out, exclusive ? mx::zeros_like(v) : v);
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

int rlx_mlx_add_rms_norm(const rlx_mlx_array* a, const rlx_mlx_array* b,
                         const rlx_mlx_array* weight, double eps, rlx_mlx_array** sum,
                         rlx_mlx_array** out) {
  return guard([&] {
    if (a == nullptr || b == nullptr || weight == nullptr || sum == nullptr || out == nullptr) {
      throw std::invalid_argument("[rlx] add_rms_norm needs two operands, a weight and two outputs");
    }
    const mx::array& x = get(a);
    const mx::array& y = get(b);
    const mx::array& w = get(weight);
    if (auto fused = add_rms_norm_gpu(x, y, w, static_cast<float>(eps))) {
      put(sum, fused->first);
      put(out, fused->second);
      return;
    }
    // Elsewhere: the add and the norm as the unfused lowering builds them.
    const mx::array s = binary(RLX_MLX_BINARY_ADD, x, y);
    put(sum, s);
    put(out, s.size() == 0 ? s : down(mx::fast::rms_norm(up(s), up(w), static_cast<float>(eps)), s.dtype()));
  });
}

int rlx_mlx_solve(const rlx_mlx_array* a, const rlx_mlx_array* b, rlx_mlx_array** out) {
  return guard([&] {
    const mx::Dtype dt = get(a).dtype();
    // LAPACK runs on the CPU stream on every device.
    put(out, down(mx::linalg::solve(for_cpu_stream(up(get(a))), for_cpu_stream(up(get(b))),
                                    mx::Device(mx::Device::cpu)),
                  dt));
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
    // MLX 0.32's CUDA quantized matmul fails on a vector ("SmallVector out of range",
    // found by fuzz_graphs on an H100): a rank-1 `x` goes in as one row.
    const bool vector = xv.ndim() == 1;
    const mx::array rows = vector ? mx::reshape(xv, {1, xv.shape(0)}) : xv;
    // f16/bf16 multiply in f32 and round once, as RLX's CPU kernels do.
    mx::array y = mx::quantized_matmul(up(rows), words, up(get(scales)), up(get(biases)), true, group_size, bits);
    if (vector) y = mx::reshape(y, {y.shape(-1)});
    put(out, down(y, xv.dtype()));
  });
}

int rlx_mlx_random_uniform(const rlx_mlx_array* seed, uint32_t stream, const int64_t* shape,
                           size_t ndim, rlx_mlx_array** out) {
  return guard([&] {
    // RLX's draw (`ops/random.rs`): unsigned 32-bit arithmetic wraps alike on every device.
    const auto u32 = [](uint32_t v) { return mx::array(v, mx::uint32); };
    const auto mix = [&](mx::array x) {
      x = mx::bitwise_xor(x, mx::right_shift(x, u32(16)));
      x = mx::multiply(x, u32(0x7feb352du));
      x = mx::bitwise_xor(x, mx::right_shift(x, u32(15)));
      x = mx::multiply(x, u32(0x846ca68bu));
      return mx::bitwise_xor(x, mx::right_shift(x, u32(16)));
    };
    uint32_t s = stream;
    s ^= s >> 16; s *= 0x7feb352du; s ^= s >> 15; s *= 0x846ca68bu; s ^= s >> 16;
    const mx::array key = mix(mx::bitwise_xor(mx::astype(get(seed), mx::uint32), u32(s)));
    const mx::Shape dims = shape_of(shape, ndim);
    int64_t n = 1;
    for (auto d : dims) n *= d;
    const mx::array index = mx::astype(mx::arange(static_cast<double>(n), mx::int64), mx::uint32);
    const mx::array bits = mix(mx::bitwise_xor(index, key));
    const mx::array unit = mx::multiply(mx::astype(mx::right_shift(bits, u32(8)), mx::float32),
                                        mx::array(1.0f / 16777216.0f));
    put(out, mx::reshape(unit, dims));
  });
}

int rlx_mlx_after(const rlx_mlx_array* x, const rlx_mlx_array* token, rlx_mlx_array** out) {
  return guard([&] { put(out, mx::depends({get(x)}, {get(token)})[0]); });
}

int rlx_mlx_dequantize(const rlx_mlx_array* w, const rlx_mlx_array* scales,
                       const rlx_mlx_array* biases, int32_t bits, int32_t group_size,
                       rlx_mlx_array** out) {
  return guard([&] {
    // The same reinterpretation of packed bytes as `rlx_mlx_quantized_matmul`'s; MLX
    // dequantizes in f16/bf16/f32, so f64 scales go through f32 (exact for the f32 values
    // RLX's weights are).
    const mx::array words = mx::view(get(w), mx::uint32);
    const mx::Dtype dt = get(scales).dtype();
    const bool wide = dt == mx::float64;
    const mx::array s = wide ? mx::astype(get(scales), mx::float32) : get(scales);
    const mx::array b = wide ? mx::astype(get(biases), mx::float32) : get(biases);
    mx::array dense = mx::dequantize(words, s, b, group_size, bits);
    put(out, mx::astype(dense, dt));
  });
}

}  // extern "C"
