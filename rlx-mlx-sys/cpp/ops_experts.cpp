// Products with a matrix chosen per pair (a token and one of its routed experts):
// `gather_matmul` through MLX's gather_mm, its transpose `scatter_matmul` through
// segmented_mm over the pairs sorted by matrix. Indices are clamped in range and flagged as a
// gather's. MLX's CPU kernels for both take float32 only: other float types go through it.
#include "shim_internal.h"

namespace rlx {
namespace {

struct Pairs {
  int64_t count;     // pairs
  int per_token;     // pairs per row of x when x is shared by a token's pairs, else 1
  mx::array matrix;  // uint32 [count], each pair's matrix, in range
};

Pairs pairs_of(const mx::array& x, const mx::array& indices, int groups,
               std::optional<mx::array>* bad) {
  const int64_t count = static_cast<int64_t>(indices.size());
  const bool shared = x.ndim() == indices.ndim();
  const int per_token = shared && indices.ndim() > 0 ? indices.shape(-1) : 1;
  const mx::array idx = in_range_indices(indices, groups, bad);
  return {count, per_token, mx::astype(mx::reshape(idx, {static_cast<int>(count)}), mx::uint32)};
}

// `x` as a matrix of its last dim's rows (explicit sizes: an empty array cannot infer one).
mx::array flat_rows(const mx::array& x) {
  int rows = 1;
  for (int d = 0; d + 1 < static_cast<int>(x.ndim()); ++d) rows *= x.shape(d);
  return mx::reshape(x, {rows, x.shape(-1)});
}

// The rows of x, one per pair, as [count, K].
mx::array rows_per_pair(const mx::array& x, const Pairs& p) {
  const mx::array flat = flat_rows(x);
  if (p.per_token == 1) return flat;
  return mx::repeat(flat, p.per_token, 0);
}

bool on_gpu() { return mx::default_device() == mx::Device::gpu; }

bool cpu_needs_f32(const mx::array& x) { return x.dtype() != mx::float32 && !on_gpu(); }

// MLX's CUDA kernels for gather_mm read rows in aligned vectors: a row length that is not
// a multiple of 8 faults with a misaligned address (and poisons the CUDA context). On a GPU
// such dims are padded with zeros, which add nothing to the products, and sliced off after.
constexpr int ALIGN = 8;

int aligned(int n) { return on_gpu() ? (n + ALIGN - 1) / ALIGN * ALIGN : n; }

// `x` with `axis` zero-padded to `size`.
mx::array padded(const mx::array& x, int axis, int size) {
  if (axis < 0) axis += static_cast<int>(x.ndim());
  const int have = x.shape(axis);
  if (have == size) return x;
  std::vector<std::pair<int, int>> widths(x.ndim(), {0, 0});
  widths[axis] = {0, size - have};
  return mx::pad(x, widths, mx::array(0, x.dtype()));
}

// The first `size` entries of the last axis of `x`.
mx::array first_columns(const mx::array& x, int size) {
  if (x.shape(-1) == size) return x;
  mx::Shape start(x.ndim(), 0);
  mx::Shape stop = x.shape();
  stop.back() = size;
  return mx::slice(x, start, stop);
}

// Sorting pairs by matrix lets gather_mm run each matrix's rows as one block; below this
// many pairs (decoding) the sort costs more than it saves.
constexpr int SORT_FROM = 64;

// MLX's CUDA gather_mm fails to launch ("cuLaunchKernelEx ... invalid argument") for a
// product of 108,672 pairs (a random graph on an H200): a grid dimension past CUDA's
// 65,535. On a GPU the pairs go through it in calls of at most this many.
constexpr int GPU_PAIRS_PER_CALL = 32768;

int pairs_per_call() {
  return on_gpu() ? GPU_PAIRS_PER_CALL : std::numeric_limits<int>::max();
}

// segmented_mm's [groups, 2] ranges of the pairs sorted by matrix (`order`): matrix e's
// pairs are the sorted positions [pairs below e, pairs up to e).
mx::array segments(const Pairs& p, const mx::array& order, int groups) {
  const mx::array sorted = mx::take(p.matrix, order);
  const mx::array ids = mx::reshape(mx::arange(groups, mx::uint32), {groups, 1});
  const mx::array column = mx::reshape(sorted, {1, static_cast<int>(p.count)});
  const mx::array starts = mx::sum(mx::astype(mx::less(column, ids), mx::uint32), 1);
  const mx::array ends = mx::sum(mx::astype(mx::less_equal(column, ids), mx::uint32), 1);
  return mx::stack({starts, ends}, -1);
}

}  // namespace
}  // namespace rlx

using namespace rlx;

extern "C" {

int rlx_mlx_gather_matmul(const rlx_mlx_array* x, const rlx_mlx_array* w,
                          const rlx_mlx_array* indices, bool transpose_b, rlx_mlx_array** out,
                          rlx_mlx_array** bad) {
  return guard([&] {
    const mx::array& xv = get(x);
    const mx::array& wv = get(w);
    const mx::array& iv = get(indices);
    std::optional<mx::array> wrong;
    const Pairs p = pairs_of(xv, iv, wv.shape(0), &wrong);
    const int k = xv.shape(-1);
    const mx::Dtype dt = xv.dtype();
    const bool widen = cpu_needs_f32(xv);
    mx::Shape shape = iv.shape();
    shape.push_back(transpose_b ? wv.shape(1) : wv.shape(2));
    if (p.count == 0 || k == 0) {
      put(out, mx::zeros(shape, dt));
      put(bad, *wrong);
      return;
    }
    const int n = transpose_b ? wv.shape(1) : wv.shape(2);
    const int k_pad = aligned(k);
    const int n_pad = aligned(n);
    mx::array rows = mx::expand_dims(padded(flat_rows(xv), -1, k_pad), 1);
    // Padded as stored ([E, K, N], or [E, N, K] when transposed), then read as [E, K, N].
    mx::array weights = transpose_b
                            ? mx::swapaxes(padded(padded(wv, 1, n_pad), 2, k_pad), -1, -2)
                            : padded(padded(wv, 1, k_pad), 2, n_pad);
    if (widen) {
      rows = mx::astype(rows, mx::float32);
      weights = mx::astype(weights, mx::float32);
    }
    const int count = static_cast<int>(p.count);
    mx::array lhs = mx::arange(count, mx::uint32);
    if (p.per_token > 1) lhs = mx::floor_divide(lhs, mx::array(p.per_token, mx::uint32));
    // The products of pairs `from..to`, [to - from, 1, N].
    const auto products = [&](int from, int to) {
      const mx::array left = mx::slice(lhs, {from}, {to});
      const mx::array matrix = mx::slice(p.matrix, {from}, {to});
      if (to - from < SORT_FROM) return mx::gather_mm(rows, weights, left, matrix, false);
      const mx::array order = mx::argsort(matrix);
      const mx::array sorted = mx::gather_mm(rows, weights, mx::take(left, order),
                                             mx::take(matrix, order), true);
      return mx::take(sorted, mx::argsort(order), 0);
    };
    const int per_call = pairs_per_call();
    std::vector<mx::array> parts;
    for (int from = 0; from < count; from += per_call) {
      parts.push_back(products(from, std::min(count, from + per_call)));
    }
    mx::array y = parts.size() == 1 ? parts[0] : mx::concatenate(parts, 0);
    y = mx::reshape(first_columns(y, n), shape);
    put(out, widen ? mx::astype(y, dt) : y);
    put(bad, *wrong);
  });
}

int rlx_mlx_scatter_matmul(const rlx_mlx_array* x, const rlx_mlx_array* g,
                           const rlx_mlx_array* indices, int32_t groups, bool transpose,
                           rlx_mlx_array** out, rlx_mlx_array** bad) {
  return guard([&] {
    const mx::array& xv = get(x);
    const mx::array& gv = get(g);
    const mx::array& iv = get(indices);
    std::optional<mx::array> wrong;
    const Pairs p = pairs_of(xv, iv, groups, &wrong);
    const int k = xv.shape(-1);
    const int n = gv.shape(-1);
    const mx::Dtype dt = xv.dtype();
    const bool widen = cpu_needs_f32(xv);
    if (p.count == 0 || k == 0 || n == 0) {
      put(out, mx::zeros(transpose ? mx::Shape{groups, n, k} : mx::Shape{groups, k, n}, dt));
      put(bad, *wrong);
      return;
    }
    // With one group every pair's matrix is the one (indices out of range are clamped to it
    // and flagged): a single product over all pairs, without the sort, the padding and MLX's
    // grouped GEMM. Otherwise the pairs go sorted by matrix through segmented_mm.
    const bool single = groups == 1;
    const std::optional<mx::array> order =
        single ? std::nullopt : std::optional<mx::array>(mx::argsort(p.matrix));
    auto operand = [&](mx::array v, int width) {
      if (order) v = mx::take(padded(v, -1, aligned(width)), *order, 0);
      return widen ? mx::astype(v, mx::float32) : v;
    };
    const mx::array rows = operand(rows_per_pair(xv, p), k);
    const mx::array grads = operand(flat_rows(gv), n);
    const mx::array left = mx::transpose(transpose ? grads : rows);
    const mx::array& right = transpose ? rows : grads;
    mx::array y = single ? mx::expand_dims(mx::matmul(left, right), 0)
                         : mx::segmented_mm(left, right, segments(p, *order, groups));
    // The padding off: rows then columns of each matrix.
    const int rows_kept = transpose ? n : k;
    const int cols_kept = transpose ? k : n;
    if (y.shape(1) != rows_kept || y.shape(2) != cols_kept) {
      y = mx::slice(y, {0, 0, 0}, {groups, rows_kept, cols_kept});
    }
    put(out, widen ? mx::astype(y, dt) : y);
    put(bad, *wrong);
  });
}

}  // extern "C"
