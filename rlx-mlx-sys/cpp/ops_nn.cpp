// Attention, rope, convolutions and pooling: channels-first in and out, attention rows with
// no visible key giving zeros, and the workarounds MLX 0.32's CUDA backend needs (tiny
// convolutions on the CPU stream, rope composed from elementwise ops where its kernel would
// launch with a geometry CUDA refuses). RLX's own GPU kernels are tried first
// (cuda_kernels.cpp).
#include "shim_internal.h"

namespace rlx {

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
    y = mx::conv_general(for_cpu_stream(xl), for_cpu_stream(wl), stride, lo, hi, dilation,
                         std::vector<int>{}, groups, false, mx::Device(mx::Device::cpu));
  }
  y = mx::transpose(y, to_first);
  return finish_conv(y, bias, dt);
}

// The adjoint of `conv`, as an ordinary convolution (`conv` above, with its workarounds):
// `x` with `stride − 1` zeros inserted between neighbours, padded by `dilation·(k − 1)`
// less the crop (plus the output padding after), convolved at stride 1 with the kernel
// flipped; RLX's weight `[C, O/g, *k]` becomes `[O, C/g, *k]` per group. A crop larger than
// that padding is sliced off. MLX's own input-dilated convolution is not used: on CUDA
// (MLX 0.32) it gave wrong values with strides above 1 and with some 1-channel inputs
// (found by fuzz_graphs on an H100).
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
  // Zeros between neighbours along each strided spatial axis: [.., L, ..] -> [.., L, s, ..]
  // (the new positions zero) -> [.., L·s, ..] -> the first (L − 1)·s + 1.
  mx::array xd = x;
  for (int i = 0; i < n; ++i) {
    const int axis = 2 + i, s = stride[i], len = x.shape(axis);
    if (s == 1) continue;
    mx::array spread = mx::expand_dims(xd, axis + 1);
    std::vector<std::pair<int, int>> widths(spread.ndim(), {0, 0});
    widths[axis + 1] = {0, s - 1};
    spread = mx::pad(spread, widths);
    mx::Shape merged = xd.shape();
    merged[axis] = len * s;
    spread = mx::reshape(spread, merged);
    mx::Shape start(spread.ndim(), 0);
    mx::Shape stop = spread.shape();
    stop[axis] = (len - 1) * s + 1;
    xd = mx::slice(spread, start, stop);
  }
  // [C, O/g, *k] -> [g, C/g, O/g, *k] -> [g, O/g, C/g, *k] -> [O, C/g, *k], each spatial
  // axis reversed.
  const int cg = w.shape(0) / groups;
  const int og = w.shape(1);
  mx::Shape grouped{groups, cg, og};
  std::vector<int> perm{0, 2, 1};
  mx::Shape merged{groups * og, cg};
  for (int i = 0; i < n; ++i) {
    grouped.push_back(w.shape(2 + i));
    perm.push_back(3 + i);
    merged.push_back(w.shape(2 + i));
  }
  mx::array wf = mx::reshape(mx::transpose(mx::reshape(w, grouped), perm), merged);
  for (int i = 0; i < n; ++i) {
    const int k = w.shape(2 + i);
    wf = mx::take(wf, mx::arange(k - 1, -1, -1, mx::int32), 2 + i);
  }
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
  mx::array y = conv(xd, wf, bias, std::vector<int>(n, 1), lo, hi, dilation, groups);
  if (std::any_of(cut_lo.begin(), cut_lo.end(), [](int c) { return c > 0; }) ||
      std::any_of(cut_hi.begin(), cut_hi.end(), [](int c) { return c > 0; })) {
    mx::Shape start(y.ndim(), 0);
    mx::Shape stop = y.shape();
    for (int i = 0; i < n; ++i) {
      start[2 + i] = cut_lo[i];
      stop[2 + i] -= cut_hi[i];
    }
    y = mx::slice(y, start, stop);
  }
  return y;
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

// Rope from elementwise ops, for where MLX's CUDA kernel cannot launch: the decomposition
// that defines the op (rlx/src/ops/nn/decompose.rs), with the angles computed as MLX's
// kernels do (inverse frequency 2^(-(i / (dims / 2)) * log2(base)), angle = scale *
// (position + offset) * it), so both MLX paths agree. `x` is float32 [.., T, D]; `offset` a
// scalar or one per row of axis 0.
mx::array rope_from_ops(const mx::array& x, int dims, bool traditional, float base, float scale,
                        const mx::array& offset, const std::optional<mx::array>& periods) {
  const int nd = static_cast<int>(x.ndim());
  const int T = x.shape(-2), D = x.shape(-1), half = dims / 2;
  // Positions as [1, .., T, 1], or [B, 1, .., T, 1] for an offset per row of axis 0.
  mx::Shape rows(nd, 1), each(nd, 1), per_pair(nd, 1);
  rows[nd - 2] = T;
  per_pair[nd - 1] = half;
  mx::array start = mx::astype(offset, mx::float32);
  if (offset.size() > 1) {
    each[0] = static_cast<int>(offset.size());
    start = mx::reshape(start, each);
  }
  const mx::array position = mx::multiply(
      mx::add(mx::reshape(mx::astype(mx::arange(T), mx::float32), rows), start), mx::array(scale));
  const mx::array step = mx::divide(mx::astype(mx::arange(half), mx::float32), mx::array(static_cast<float>(half)));
  // 2^y as e^(y ln 2); or the reciprocals of the periods given, as MLX's kernels take them.
  const mx::array inverse =
      periods ? mx::reciprocal(*periods)
              : mx::exp(mx::multiply(mx::negative(step), mx::array(std::log2(base) * static_cast<float>(M_LN2))));
  const mx::array angle = mx::multiply(position, mx::reshape(inverse, per_pair));
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

bool head_groups_fit(const HeadGroups& g, int64_t width) {
  return g.q_heads >= 1 && g.k_heads >= 1 && g.head_dim >= 2 && g.dims >= 2 && g.dims % 2 == 0 &&
         g.dims <= g.head_dim && g.q_col >= 0 && g.k_col >= 0 &&
         g.q_col + int64_t{g.q_heads} * g.head_dim <= width &&
         g.k_col + int64_t{g.k_heads} * g.head_dim <= width;
}

}  // namespace rlx

using namespace rlx;

extern "C" {

int rlx_mlx_attention(const rlx_mlx_array* q, const rlx_mlx_array* k, const rlx_mlx_array* v,
                      double scale, rlx_mlx_mask_kind mask_kind, int64_t window,
                      const rlx_mlx_array* mask,
                      rlx_mlx_array** out) {
  return guard([&] { put(out, attention(get(q), get(k), get(v), scale, mask_kind, window, mask)); });
}

int rlx_mlx_attention_prefix(const rlx_mlx_array* q, const rlx_mlx_array* k,
                             const rlx_mlx_array* v, double scale, const rlx_mlx_array* length,
                             rlx_mlx_mask_kind mask_kind, int64_t window, rlx_mlx_array** out) {
  return guard([&] {
    *out = nullptr;
    const std::optional<mx::array> y = prefix_attention_gpu(
        get(q), get(k), get(v), static_cast<float>(scale), get(length), mask_kind, window);
    if (y) put(out, *y);
  });
}

namespace {

// `v` rotated as the IR's rope (see rlx_mlx_rope), through MLX's rope where it launches.
mx::array rope_array(const mx::array& v, int32_t dims, double base, double scale, bool traditional,
                     const rlx_mlx_array* offset, const rlx_mlx_array* periods) {
  if (v.size() == 0) return v;  // MLX's CUDA rope launches an empty grid, which CUDA refuses
  const mx::Shape shape = v.shape();
  // MLX rotates [.., L, D] with at least three axes. Its CUDA kernel gives its output the
  // input's strides, so a broadcast input (a gradient of ones, stride 0) came back
  // wrong, and some small strided inputs failed to launch: it gets a row-contiguous one.
  mx::array x3 = mx::contiguous(v.ndim() < 3 ? mx::reshape(up(v), {1, shape[0], shape[1]}) : up(v));
  mx::array off = offset != nullptr ? mx::astype(get(offset), mx::int32) : mx::array(0, mx::int32);
  const bool on_gpu = mx::default_device() == mx::Device::gpu;
  const std::optional<mx::array> period =
      periods != nullptr ? std::optional<mx::array>(mx::astype(get(periods), mx::float32)) : std::nullopt;
  const std::optional<float> with_base =
      period ? std::nullopt : std::optional<float>(static_cast<float>(base));
  mx::array y = on_gpu && cuda_rope_launch_invalid(x3, dims)
                    ? rope_from_ops(x3, dims, traditional, static_cast<float>(base),
                                    static_cast<float>(scale), off, period)
                    : mx::fast::rope(x3, dims, traditional, with_base, static_cast<float>(scale), off,
                                     period);
  return down(mx::reshape(y, shape), v.dtype());
}

}  // namespace

int rlx_mlx_rope(const rlx_mlx_array* x, int32_t dims, double base, double scale, bool traditional,
                 const rlx_mlx_array* offset, const rlx_mlx_array* periods, rlx_mlx_array** out) {
  return guard([&] { put(out, rope_array(get(x), dims, base, scale, traditional, offset, periods)); });
}

int rlx_mlx_rope_heads(const rlx_mlx_array* x, const rlx_mlx_head_groups* groups,
                       const rlx_mlx_array* offset, const rlx_mlx_array* periods,
                       rlx_mlx_array** q_out, rlx_mlx_array** k_out) {
  return guard([&] {
    if (x == nullptr || groups == nullptr || offset == nullptr || q_out == nullptr || k_out == nullptr) {
      throw std::invalid_argument("[rlx] rope_heads needs an operand, head groups, an offset and two outputs");
    }
    const mx::array& v = get(x);
    const HeadGroups& g = *groups;
    if (!head_groups_fit(g, v.ndim() == 3 ? v.shape(2) : -1)) {
      throw std::invalid_argument("[rlx] rope_heads: the head groups do not fit the rows");
    }
    const std::optional<mx::array> period =
        periods != nullptr ? std::optional<mx::array>(get(periods)) : std::nullopt;
    if (v.size() > 0) {
      if (auto fused = rope_heads_gpu(v, g, get(offset), period)) {
        put(q_out, fused->first);
        put(k_out, fused->second);
        return;
      }
    }
    // Elsewhere: each group's columns, split into heads, heads first, then rotated.
    auto heads = [&](int64_t col, int32_t count) {
      const int b = v.shape(0), s = v.shape(1);
      const mx::array columns =
          mx::slice(v, {0, 0, static_cast<int>(col)}, {b, s, static_cast<int>(col + int64_t{count} * g.head_dim)});
      const mx::array split = mx::transpose(mx::reshape(columns, {b, s, count, g.head_dim}), {0, 2, 1, 3});
      return rope_array(split, g.dims, g.base, g.scale, g.traditional, offset, periods);
    };
    put(q_out, heads(g.q_col, g.q_heads));
    put(k_out, heads(g.k_col, g.k_heads));
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


}  // extern "C"
