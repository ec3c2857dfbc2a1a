// Ops that move, select and order values: reshape, permute, slice, concat, broadcast, pad,
// gather and scatter-add (indices clamped in range, with a flag for any that were not),
// windows at run-time offsets (offsets outside read as 0, flagged the same way),
// sort and top-k (stable, ties in index order both ways).
#include "shim_internal.h"

#include "mlx/primitives.h"

namespace rlx {

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


mx::array in_range_indices(const mx::array& idx, int size, std::optional<mx::array>* bad) {
  const mx::array below = mx::less(idx, mx::zeros({}, idx.dtype()));
  const mx::array above = mx::greater_equal(idx, mx::array(static_cast<int64_t>(size), idx.dtype()));
  const mx::array wrong = mx::logical_or(below, above);
  *bad = mx::any(wrong);
  return mx::where(wrong, mx::zeros({}, idx.dtype()), idx);
}

// The offsets of a window of `window` (one size per axis of `shape`) along `axes`, one per
// axis as a vector (or [rows, axes]: a window per row of axis 0); an offset that puts a
// non-empty window outside `shape` is read as 0 and flagged in `bad`.
mx::array window_offsets(const mx::array& offsets, const mx::Shape& shape,
                         const std::vector<int>& axes, const mx::Shape& window,
                         std::optional<mx::array>* bad) {
  const int n = static_cast<int>(axes.size());
  const mx::array o = offsets.ndim() == 2 ? offsets : mx::reshape(offsets, {n});
  bool empty = false;
  std::vector<int64_t> last;
  for (int k = 0; k < n; ++k) {
    last.push_back(static_cast<int64_t>(shape[axes[k]]) - window[axes[k]]);
  }
  for (int d : window) empty = empty || d == 0;
  const mx::array limit = mx::astype(mx::array(last.begin(), {n}, mx::int64), o.dtype());
  const mx::array wrong = mx::logical_or(mx::less(o, mx::zeros({}, o.dtype())), mx::greater(o, limit));
  *bad = empty ? mx::array(false) : mx::any(wrong);
  return mx::where(wrong, mx::zeros({}, o.dtype()), o);
}

// The indices of windows per row of axis 0 at `start` ([rows, axes]) for MLX's gather and
// scatter: the row, then each axis's offset; with the axes they index (0 first).
std::pair<std::vector<mx::array>, std::vector<int>> row_window_indices(
    const mx::array& start, const std::vector<int>& axes) {
  const int rows = start.shape(0);
  std::vector<mx::array> indices{mx::arange(rows, mx::int32)};
  std::vector<int> all{0};
  for (int k = 0; k < static_cast<int>(axes.size()); ++k) {
    indices.push_back(mx::reshape(mx::slice(start, {0, k}, {rows, k + 1}), {rows}));
    all.push_back(axes[k]);
  }
  return {indices, all};
}

// The window of `sizes` of each row of axis 0 of `x`, row r's at `start[r]` along `axes`
// (in range): one gather.
mx::array read_row_windows(const mx::array& x, const mx::array& start, const std::vector<int>& axes,
                           const mx::Shape& sizes) {
  if (x.shape(0) == 0 || std::any_of(sizes.begin(), sizes.end(), [](int d) { return d == 0; })) {
    return mx::zeros(sizes, x.dtype());
  }
  auto [indices, all] = row_window_indices(start, axes);
  mx::Shape slice = sizes;
  slice[0] = 1;
  return mx::reshape(mx::gather(x, indices, all, slice), sizes);
}

// `v` with each row r of `u` written over its window at `start[r]` along `axes` (in range):
// one scatter, in place when MLX may donate `v`. MLX's GPU scatter has no 8-byte elements:
// those write a row at a time.
mx::array write_row_windows(const mx::array& v, const mx::array& u, const mx::array& start,
                            const std::vector<int>& axes) {
  if (u.size() == 0) return v;
  const int rows = u.shape(0);
  const mx::array update = mx::astype(u, v.dtype());
  if (mx::default_device() == mx::Device::gpu && mx::size_of(v.dtype()) == 8) {
    mx::array out = v;
    std::vector<int> all{0};
    all.insert(all.end(), axes.begin(), axes.end());
    const int n = static_cast<int>(axes.size());
    for (int r = 0; r < rows; ++r) {
      const mx::array at = mx::concatenate(
          {mx::array({r}, {1}, mx::int32), mx::reshape(mx::slice(start, {r, 0}, {r + 1, n}), {n})});
      mx::Shape lo(u.ndim(), 0), hi = u.shape();
      lo[0] = r;
      hi[0] = r + 1;
      out = mx::slice_update(out, mx::slice(update, lo, hi), at, all);
    }
    return out;
  }
  auto [indices, all] = row_window_indices(start, axes);
  mx::Shape slices = update.shape();
  slices.insert(slices.begin() + 1, 1);
  return mx::scatter(v, indices, mx::reshape(update, slices), all);
}

/// `v` with `u` written at `start` along `axes` (in range: `window_offsets`' result). On a
/// GPU this is a scatter of `u`, one thread per element of `u`: MLX 0.32's CUDA
/// `slice_update` at run-time offsets launches a thread per element of `v` that all write
/// `u` again (a decoding step's cache write of one row cost about 12 µs on an H200, a
/// quarter of the step). Both update `v` in place when MLX may donate it. GPU scatter has
/// no 8-byte elements; those keep `slice_update`.
mx::array write_window(const mx::array& v, const mx::array& u, const mx::array& start,
                       const std::vector<int>& axes) {
  const bool gpu = mx::default_device() == mx::Device::gpu;
  if (start.ndim() == 2) return write_row_windows(v, u, start, axes);
  if (!gpu || u.size() == 0 || mx::size_of(v.dtype()) == 8) return mx::slice_update(v, u, start, axes);
  std::vector<mx::array> indices;
  for (int k = 0; k < static_cast<int>(axes.size()); ++k) {
    indices.push_back(mx::reshape(mx::slice(start, {k}, {k + 1}), {}));
  }
  return mx::scatter(v, indices, mx::astype(u, v.dtype()), axes);
}

std::vector<int> axes_of(const int32_t* axes, size_t n) {
  return std::vector<int>(axes, axes + n);
}

// Whether `x` is a view that only gives its one operand another shape, elements in the same
// order, and is not evaluated yet (so its operand is still there to read).
bool pending_reshape(const mx::array& x) {
  if (!x.has_primitive() || x.is_available() || x.inputs().size() != 1) return false;
  // By name: libmlx does not export its primitives' type information.
  const char* kind = x.primitive().name();
  for (const char* view : {"Reshape", "Flatten", "Unflatten", "ExpandDims", "Squeeze"}) {
    if (std::strcmp(kind, view) == 0) return true;
  }
  return false;
}

// `x` with `shape`. A chain of such views is one MLX node: reshaping a pending reshape
// reshapes its operand instead. A decoding step's heads are split off a position's features
// and then swap a size-1 axis (two views, each a node every step would build and walk).
mx::array reshaped(const mx::array& x, const mx::Shape& shape) {
  if (x.shape() == shape) return x;
  if (pending_reshape(x)) return mx::reshape(x.inputs()[0], shape);
  return mx::reshape(x, shape);
}

// Whether `perm` (a permutation of `x`'s axes) keeps the axes longer than 1 in order, so
// the elements stay in order and the permutation is a reshape.
bool keeps_order(const mx::array& x, const std::vector<int>& perm) {
  const int rank = static_cast<int>(x.ndim());
  if (static_cast<int>(perm.size()) != rank) return false;
  std::vector<bool> seen(rank, false);
  int last = -1;
  for (int axis : perm) {
    if (axis < 0 || axis >= rank || seen[axis]) return false;
    seen[axis] = true;
    if (x.shape(axis) == 1) continue;
    if (axis < last) return false;
    last = axis;
  }
  return true;
}

}  // namespace rlx

using namespace rlx;

extern "C" {

int rlx_mlx_reshape(const rlx_mlx_array* x, const int64_t* shape, size_t ndim, rlx_mlx_array** out) {
  return guard([&] { put(out, reshaped(get(x), shape_of(shape, ndim))); });
}

int rlx_mlx_permute(const rlx_mlx_array* x, const int32_t* perm, size_t ndim, rlx_mlx_array** out) {
  return guard([&] {
    const mx::array& v = get(x);
    const std::vector<int> axes = ints_of(perm, ndim);
    if (!keeps_order(v, axes)) {
      put(out, mx::transpose(v, axes));
      return;
    }
    mx::Shape shape;
    for (int axis : axes) shape.push_back(v.shape(axis));
    put(out, reshaped(v, shape));
  });
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

int rlx_mlx_window_start(const rlx_mlx_array* offsets, const int64_t* shape, const int64_t* window,
                         size_t ndim, const int32_t* axes, size_t n_axes, rlx_mlx_array** start,
                         rlx_mlx_array** bad) {
  return guard([&] {
    std::optional<mx::array> wrong;
    const mx::array at = window_offsets(get(offsets), shape_of(shape, ndim), axes_of(axes, n_axes),
                                        shape_of(window, ndim), &wrong);
    // MLX's dims are int32, so is every in-range offset.
    put(start, mx::astype(at, mx::int32));
    put(bad, *wrong);
  });
}

int rlx_mlx_dynamic_slice_at(const rlx_mlx_array* x, const rlx_mlx_array* start,
                             const int32_t* axes, size_t n_axes, const int64_t* sizes,
                             size_t ndim, rlx_mlx_array** out) {
  return guard([&] {
    const mx::array& at = get(start);
    const std::vector<int> along = axes_of(axes, n_axes);
    const mx::Shape window = shape_of(sizes, ndim);
    put(out, at.ndim() == 2 ? read_row_windows(get(x), at, along, window)
                            : mx::slice(get(x), at, along, window));
  });
}

int rlx_mlx_slice_update_at(const rlx_mlx_array* x, const rlx_mlx_array* update,
                            const rlx_mlx_array* start, const int32_t* axes, size_t n_axes,
                            rlx_mlx_array** out) {
  return guard([&] { put(out, write_window(get(x), get(update), get(start), axes_of(axes, n_axes))); });
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
    const auto operand = [&](const mx::array& x) { return wide_int ? for_cpu_stream(x) : x; };
    mx::array y = mx::scatter_add(operand(up(d)), std::vector<mx::array>{operand(idx)},
                                  operand(up(u)), std::vector<int>{axis}, where_);
    put(out, down(y, dt));
    put(bad, *wrong);
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


}  // extern "C"
