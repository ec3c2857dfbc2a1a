// The gated delta rule of Gated DeltaNet (`delta_rule`) in MLX ops, a chunk of steps at a
// time: inside a chunk every step's effect is a matrix product (the chunk's unit lower
// triangular system inverted by doubling, since its strictly lower part is nilpotent), and
// the state moves from chunk to chunk in a loop of two products per chunk. Its gradient
// (`delta_rule_grad`) is MLX's vjp of the same function. Computed in float32: MLX's CPU
// matmul takes float32, and half inputs would round the chunk's products.
#include "shim_internal.h"

namespace rlx {
namespace {

// Steps per chunk: long enough that the products fill a GPU, short enough that the
// doubling (log2 of it products of chunk x chunk matrices) stays cheap and accurate.
constexpr int CHUNK = 64;

mx::array transposed(const mx::array& x) { return mx::swapaxes(x, -1, -2); }

// Entries `start..stop` of `axis`.
mx::array range_of(const mx::array& x, int axis, int start, int stop) {
  if (axis < 0) axis += static_cast<int>(x.ndim());
  mx::Shape lo(x.ndim(), 0);
  mx::Shape hi = x.shape();
  lo[axis] = start;
  hi[axis] = stop;
  return mx::slice(x, lo, hi);
}

// `x` with `axis` zero-padded by `extra` at its end.
mx::array padded_end(const mx::array& x, int axis, int extra) {
  if (extra == 0) return x;
  if (axis < 0) axis += static_cast<int>(x.ndim());
  std::vector<std::pair<int, int>> widths(x.ndim(), {0, 0});
  widths[axis] = {0, extra};
  return mx::pad(x, widths, mx::array(0.0f));
}

mx::Shape with_tail(const mx::Shape& lead, std::initializer_list<int> tail) {
  mx::Shape shape = lead;
  shape.insert(shape.end(), tail.begin(), tail.end());
  return shape;
}

struct Dims {
  mx::Shape lead;
  int t, k, v;
  int64_t lines;
};

Dims dims_of(const std::vector<mx::array>& x) {
  const mx::array& q = x[0];
  Dims d{mx::Shape(q.shape().begin(), q.shape().end() - 2), q.shape(-2), q.shape(-1),
         x[2].shape(-1), 1};
  for (int s : d.lead) d.lines *= s;
  return d;
}

// The rule on float32 operands `q, k, v, g, beta, s0` (all six): `[.., T + K, V]`, the
// outputs then the final state.
// The rule step by step: for a few steps (decoding) a handful of elementwise ops and
// reductions per step beat the chunked form's dozens of ops.
mx::array stepwise(const std::vector<mx::array>& x, const Dims& d) {
  mx::array state = x[5];
  std::vector<mx::array> outputs;
  outputs.reserve(d.t + 1);
  for (int t = 0; t < d.t; ++t) {
    auto at = [t](const mx::array& a, int axis) { return mx::squeeze(range_of(a, axis, t, t + 1), axis); };
    const mx::array q = mx::expand_dims(at(x[0], -2), -1);
    const mx::array k = mx::expand_dims(at(x[1], -2), -1);
    const mx::array v = at(x[2], -2);
    const mx::array alpha = mx::expand_dims(mx::exp(at(x[3], -1)), -1);
    const mx::array beta = mx::expand_dims(at(x[4], -1), -1);
    const mx::array read = mx::sum(state * k, -2);
    const mx::array delta = beta * (v - alpha * read);
    state = mx::expand_dims(alpha, -1) * state + k * mx::expand_dims(delta, -2);
    outputs.push_back(mx::expand_dims(mx::sum(state * q, -2), -2));
  }
  outputs.push_back(state);
  return mx::concatenate(outputs, -2);
}

// Up to this many steps run step by step.
constexpr int STEPWISE = 4;

mx::array rule(const std::vector<mx::array>& x) {
  const Dims d = dims_of(x);
  mx::array state = x[5];
  if (d.t == 0) return state;
  if (d.t <= STEPWISE) return stepwise(x, d);
  const int c = std::min(d.t, CHUNK);
  const int chunks = (d.t + c - 1) / c;
  const int extra = chunks * c - d.t;
  // Padding steps decay by exp(0) = 1 and step by 0: they leave the state as it is.
  const mx::array q = mx::reshape(padded_end(x[0], -2, extra), with_tail(d.lead, {chunks, c, d.k}));
  const mx::array k = mx::reshape(padded_end(x[1], -2, extra), with_tail(d.lead, {chunks, c, d.k}));
  const mx::array v = mx::reshape(padded_end(x[2], -2, extra), with_tail(d.lead, {chunks, c, d.v}));
  const mx::array g = mx::reshape(padded_end(x[3], -1, extra), with_tail(d.lead, {chunks, c}));
  const mx::array beta =
      mx::expand_dims(mx::reshape(padded_end(x[4], -1, extra), with_tail(d.lead, {chunks, c})), -1);

  // Log decay from the chunk's start through each step, and between steps j <= i.
  const mx::array decay = mx::cumsum(g, -1);
  const mx::array between = mx::expand_dims(decay, -1) - mx::expand_dims(decay, -2);
  const mx::array causal = mx::tri(c, c, 0, mx::bool_);
  const mx::array earlier = mx::tri(c, c, -1, mx::bool_);
  const mx::array zero = mx::array(0.0f);
  // Masked before exp: the entries above the diagonal would overflow.
  const mx::array pairwise = mx::where(causal, mx::exp(mx::where(causal, between, zero)), zero);

  // δ = U − W S_start, from (I + L) δ = β v − β γ K S_start with
  // L[i, j] = β_i (γ_i / γ_j) k_i·k_j for j < i.
  const mx::array k_beta = k * beta;
  const mx::array lower = mx::where(earlier, mx::matmul(k_beta, transposed(k)) * pairwise, zero);
  mx::array inverse = mx::eye(c, mx::float32) - lower;
  mx::array power = lower;
  for (int m = 2; m < c; m *= 2) {
    power = mx::matmul(power, power);
    inverse = inverse + mx::matmul(inverse, power);
  }
  const mx::array gamma = mx::expand_dims(mx::exp(decay), -1);
  const mx::array u = mx::matmul(inverse, v * beta);
  const mx::array w = mx::matmul(inverse, k_beta * gamma);

  // Outputs: O = (γ Q − P W) S_start + P U with P the decayed causal scores.
  const mx::array scores = mx::where(causal, mx::matmul(q, transposed(k)) * pairwise, zero);
  const mx::array reads = q * gamma - mx::matmul(scores, w);
  const mx::array local = mx::matmul(scores, u);

  // The next chunk's state: S_end = (γ_end I − K̃ᵀ W) S_start + K̃ᵀ U, K̃ the keys decayed
  // to the chunk's end.
  const mx::array last = range_of(decay, -1, c - 1, c);
  const mx::array to_end = transposed(k * mx::expand_dims(mx::exp(last - decay), -1));
  const mx::array carry =
      mx::expand_dims(mx::exp(last), -1) * mx::eye(d.k, mx::float32) - mx::matmul(to_end, w);
  const mx::array fresh = mx::matmul(to_end, u);

  std::vector<mx::array> outputs;
  outputs.reserve(chunks + 1);
  for (int i = 0; i < chunks; ++i) {
    auto at = [i](const mx::array& a) { return mx::squeeze(range_of(a, -3, i, i + 1), -3); };
    outputs.push_back(mx::matmul(at(reads), state) + at(local));
    state = mx::matmul(at(carry), state) + at(fresh);
  }
  mx::array all = mx::concatenate(outputs, -2);
  if (extra > 0) all = range_of(all, -2, 0, d.t);
  return mx::concatenate({all, state}, -2);
}

// The operands (five or six) in float32, with a zero starting state when there is none.
std::vector<mx::array> operands_of(rlx_mlx_array* const* xs, size_t n) {
  std::vector<mx::array> x;
  x.reserve(6);
  for (size_t i = 0; i < n; ++i) x.push_back(mx::astype(get(xs[i]), mx::float32));
  if (n == 5) {
    const Dims d = dims_of(x);
    x.push_back(mx::zeros(with_tail(d.lead, {d.k, d.v}), mx::float32));
  }
  return x;
}

bool empty(const Dims& d) { return d.lines == 0 || d.k == 0 || d.v == 0; }

}  // namespace
}  // namespace rlx

using namespace rlx;

extern "C" {

int rlx_mlx_delta_rule(rlx_mlx_array* const* xs, size_t n, rlx_mlx_array** out) {
  return guard([&] {
    if (n != 5 && n != 6) throw std::invalid_argument("[rlx] delta_rule takes 5 or 6 operands");
    const mx::Dtype dt = get(xs[0]).dtype();
    const std::vector<mx::array> x = operands_of(xs, n);
    const Dims d = dims_of(x);
    if (empty(d)) {
      put(out, mx::zeros(with_tail(d.lead, {d.t + d.k, d.v}), dt));
      return;
    }
    put(out, mx::astype(rule(x), dt));
  });
}

int rlx_mlx_delta_rule_grad(rlx_mlx_array* const* xs, size_t n, rlx_mlx_array** out) {
  return guard([&] {
    if (n != 6 && n != 7) {
      throw std::invalid_argument("[rlx] delta_rule_grad takes 6 or 7 operands");
    }
    const mx::Dtype dt = get(xs[0]).dtype();
    const std::vector<mx::array> x = operands_of(xs, n - 1);
    const mx::array cot = mx::astype(get(xs[n - 1]), mx::float32);
    const Dims d = dims_of(x);
    const int width = 2 * d.k + d.v + 2;
    if (empty(d)) {
      put(out, mx::zeros(with_tail(d.lead, {d.t + d.k, width}), dt));
      return;
    }
    auto forward = [](const std::vector<mx::array>& p) { return std::vector<mx::array>{rule(p)}; };
    const auto grads = mx::vjp(forward, x, {cot}).second;
    const mx::array steps = mx::concatenate(
        {grads[0], grads[1], grads[2], mx::expand_dims(grads[3], -1), mx::expand_dims(grads[4], -1)},
        -1);
    const mx::array start = padded_end(grads[5], -1, width - d.v);
    put(out, mx::astype(mx::concatenate({steps, start}, -2), dt));
  });
}

}  // extern "C"
