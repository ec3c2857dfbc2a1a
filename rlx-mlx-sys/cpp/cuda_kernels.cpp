// RLX's own CUDA kernels, compiled at first use by MLX's NVRTC path
// (mx::fast::cuda_kernel): attention (cpp/attention.cu) and row gathers. Each returns
// nothing where it does not apply, and MLX's own op runs instead.
#include "shim_internal.h"

// kAttentionSource, kDecodeAttentionSource, kResidualNormSource, kRopeHeadsSource,
// kColumnsSource, kQuantizedRowsSource, kGatedRowsSource, kRotatedRowsSource: the cpp/*.cu
// files of those names, embedded by build.rs. A kernel joins only the files it needs: MLX
// hashes a custom kernel's source at every call.
#include "attention_source.h"
#include "decode_attention_source.h"
#include "residual_norm_source.h"
#include "rope_heads_source.h"
#include "columns_source.h"
#include "quantized_rows_source.h"
#include "gated_rows_source.h"
#include "rotated_rows_source.h"

namespace rlx {


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
  const int compute_major = cuda_build_compute_major();
  if (!enabled || compute_major == 0) return std::nullopt;
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4) return std::nullopt;
  if (q.dtype() != mx::float32 || k.dtype() != mx::float32 || v.dtype() != mx::float32) return std::nullopt;
  const int batch = q.shape(0), hq = q.shape(1), sq = q.shape(2), dk = q.shape(3);
  const int hk = k.shape(1), dv = v.shape(3);
  if (dk < 1 || dk > max_features || dv < 1 || dv > max_features) return std::nullopt;
  if (hk < 1 || hq % hk != 0 || batch > grid_axis_limit || hq > grid_axis_limit) return std::nullopt;
  // A few query rows (a decode step) fill one 64-row tile per head and walk every key in
  // it: 9 blocks over 1,024 cached keys took 232 us a layer on an H100 for SmolLM2, where
  // MLX's attention, which splits the keys among blocks, made decoding 30% faster.
  constexpr int few_rows = 8;
  if (sq <= few_rows) return std::nullopt;
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
  const bool tensor_cores = dk % 8 == 0 && dv % 8 == 0 && compute_major >= 8;
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

// Attention of a few query rows over the first `length` keys (cpp/decode_attention.cu), or
// nothing where it does not apply (another device or dtype, more than 16 query rows per
// key head, features not in fours or past 128, a mask tensor) and the lowering masks the
// keys instead. `length` is a scalar integer array, possibly out of [0, Sk] (the lowering
// checks it; the kernel clamps it), or a vector of one length per batch row.
std::optional<mx::array> prefix_attention_gpu(const mx::array& q, const mx::array& k,
                                              const mx::array& v, float scale,
                                              const mx::array& length,
                                              rlx_mlx_mask_kind mask_kind, int64_t window) {
  constexpr int max_rows = 16, max_features = 128, threads = 256, grid_axis_limit = 65535;
  if (cuda_build_compute_major() == 0) return std::nullopt;
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4) return std::nullopt;
  const bool per_batch = length.ndim() == 1 && length.size() > 1;
  if (length.size() != 1 && !(per_batch && length.size() == static_cast<size_t>(q.shape(0)))) {
    return std::nullopt;
  }
  if (q.dtype() != mx::float32 || k.dtype() != mx::float32 || v.dtype() != mx::float32) return std::nullopt;
  if (!mx::issubdtype(length.dtype(), mx::integer)) return std::nullopt;
  const int batch = q.shape(0), hq = q.shape(1), sq = q.shape(2), dk = q.shape(3);
  const int hk = k.shape(1), sk = k.shape(2), dv = v.shape(3);
  if (k.shape(0) != batch || v.shape(0) != batch || v.shape(1) != hk || v.shape(2) != sk) return std::nullopt;
  if (hk < 1 || hq % hk != 0 || batch > grid_axis_limit || hk > grid_axis_limit) return std::nullopt;
  const int rows = (hq / hk) * sq;
  if (rows < 1 || rows > max_rows || sk < 1) return std::nullopt;
  if (dk % 4 != 0 || dv % 4 != 0 || dk < 4 || dk > max_features || dv < 4 || dv > max_features) return std::nullopt;
  int kind = 0;
  switch (mask_kind) {
    case RLX_MLX_MASK_NONE: kind = 0; break;
    case RLX_MLX_MASK_CAUSAL: kind = 1; break;
    case RLX_MLX_MASK_WINDOW: kind = 2; break;
    default: return std::nullopt;
  }
  if (kind == 2 && (window < 1 || window > std::numeric_limits<int>::max())) return std::nullopt;
  // Keys a block scores: the scores of every row fit 16 KB of shared memory.
  int chunk = 1024;
  while (chunk * rows > 4096) chunk /= 2;
  const int splits = (sk + chunk - 1) / chunk;
  if (splits > grid_axis_limit) return std::nullopt;
  const std::vector<std::pair<std::string, mx::fast::TemplateArg>> template_args{
      {"D", dk}, {"DV", dv}, {"ROWS", rows}, {"CHUNK", chunk}, {"MASK", kind},
      {"WINDOW", kind == 2 ? static_cast<int>(window) : 0}, {"LenT", length.dtype()},
      {"PER_BATCH", per_batch ? 1 : 0}};
  const std::string args = R"((
      q, k, v, length, PER_BATCH, scale, q_shape[1], k_shape[1], q_shape[2], k_shape[2],
      q_strides[0], q_strides[1], q_strides[2], q_strides[3],
      k_strides[0], k_strides[1], k_strides[2], k_strides[3],
      v_strides[0], v_strides[1], v_strides[2], v_strides[3], )";
  const std::string name = "rlx_decode::decode_attention<D, DV, ROWS, CHUNK, MASK, WINDOW, LenT, ";
  const std::vector<mx::array> inputs{q, k, v, length, mx::array(scale, mx::float32)};
  const mx::Shape out_shape{batch, sq, hq, dv};
  const std::tuple<int, int, int> grid{splits * threads, hk, batch}, block{threads, 1, 1};
  // [B, Sq, Hq, Dv] as its [B, Hq, Sq, Dv] view, as the other attention kernels return it.
  // With one query position both hold the values in the same order: a reshape, which the
  // permute back to positions first and the merge of the heads that follow in a decoding
  // step fold into (one MLX node where a transpose made three).
  auto heads_first = [&](const mx::array& out) {
    return sq == 1 ? mx::reshape(out, {batch, hq, sq, dv}) : mx::transpose(out, {0, 2, 1, 3});
  };
  if (splits == 1) {
    static const mx::fast::CustomKernelFunction whole = mx::fast::cuda_kernel(
        "rlx_decode_attention", {"q", "k", "v", "length", "scale"}, {"out"},
        name + "true>" + args + "out, nullptr);", kDecodeAttentionSource,
        /*ensure_row_contiguous=*/false);
    return heads_first(whole(inputs, {out_shape}, {mx::float32}, grid, block, template_args,
                             std::nullopt, false, {})
                           .at(0));
  }
  static const mx::fast::CustomKernelFunction split = mx::fast::cuda_kernel(
      "rlx_decode_attention_split", {"q", "k", "v", "length", "scale"}, {"parts", "stats"},
      name + "false>" + args + "parts, stats);", kDecodeAttentionSource,
      /*ensure_row_contiguous=*/false);
  static const mx::fast::CustomKernelFunction combine = mx::fast::cuda_kernel(
      "rlx_decode_combine", {"parts", "stats", "length"}, {"out"}, R"(
rlx_decode::decode_combine<DV, CHUNK, LenT>(parts, stats, length, ROWS_PER_LENGTH,
                                            parts_shape[0], parts_shape[1], SK, out);
)",
      kDecodeAttentionSource, /*ensure_row_contiguous=*/true);
  const int total_rows = batch * sq * hq;
  std::vector<mx::array> halves =
      split(inputs, {{total_rows, splits, dv}, {total_rows, splits, 2}},
            {mx::float32, mx::float32}, grid, block, template_args, std::nullopt, false, {});
  const int elements = total_rows * dv;
  const int combine_block = 128;
  return heads_first(
      combine({halves.at(0), halves.at(1), length}, {out_shape}, {mx::float32},
              {(elements + combine_block - 1) / combine_block * combine_block, 1, 1},
              {combine_block, 1, 1},
              {{"DV", dv}, {"CHUNK", chunk}, {"LenT", length.dtype()}, {"SK", sk},
               {"ROWS_PER_LENGTH", per_batch ? sq * hq : total_rows}},
              std::nullopt, false, {})
          .at(0));
}

// Rows of a float32 [rows, width] table by index on an NVIDIA GPU, four floats a thread, or
// nothing where it does not apply (another device or dtype, a width not a multiple of four)
// and MLX's take runs instead. MLX's gather moves one element a thread through general
// index arithmetic: 98 us where PyTorch's embedding lookup takes 17, for MiniLM's word
// embeddings at 256x128 on an H100. `idx` holds indices already clamped into range.
std::optional<mx::array> take_rows_gpu(const mx::array& table, const mx::array& idx) {
  if (cuda_build_compute_major() == 0) return std::nullopt;
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

// The bits of `v` as a float32, for kernels that take a float constant as a template
// argument (MLX's template arguments are integers, booleans and dtypes).
namespace {
int float_bits(double v) {
  const float f = static_cast<float>(v);
  int bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}
}  // namespace

// `a + b` and its RMS normalization with `weight` (cpp/residual_norm.cu) on an NVIDIA GPU,
// for float32 operands of one shape with rows of the weight's width, or nothing where it
// does not apply (another device or dtype, shapes that differ or broadcast) and the caller
// composes MLX's add and RMS norm instead.
std::optional<std::pair<mx::array, mx::array>> add_rms_norm_gpu(const mx::array& a,
                                                                const mx::array& b,
                                                                const mx::array& weight,
                                                                float eps) {
  constexpr int threads = 128, grid_axis_limit = std::numeric_limits<int32_t>::max();
  if (cuda_build_compute_major() == 0) return std::nullopt;
  if (a.dtype() != mx::float32 || b.dtype() != mx::float32 || weight.dtype() != mx::float32) {
    return std::nullopt;
  }
  if (a.shape() != b.shape() || a.ndim() < 1 || weight.ndim() != 1) return std::nullopt;
  const int width = a.shape(-1);
  if (width < 1 || weight.shape(0) != width) return std::nullopt;
  const size_t rows = a.size() / static_cast<size_t>(width);
  if (rows < 1 || rows > static_cast<size_t>(grid_axis_limit / threads)) return std::nullopt;
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "rlx_add_rms_norm", {"a", "b", "w"}, {"sum", "out"},
      "rlx_norm::add_rms_norm<THREADS, PER, EPS_BITS>(a, b, w, w_shape[0], sum, out);",
      kResidualNormSource, /*ensure_row_contiguous=*/true);
  // Rows of up to 8 values a thread are held in registers (a decoder's hidden width up to
  // 1,024); wider ones loop.
  const int per = width <= 8 * threads ? (width + threads - 1) / threads : 0;
  std::vector<mx::array> out = kernel(
      {a, b, weight}, {a.shape(), a.shape()}, {mx::float32, mx::float32},
      {static_cast<int>(rows) * threads, 1, 1}, {threads, 1, 1},
      {{"THREADS", threads}, {"PER", per}, {"EPS_BITS", float_bits(eps)}}, std::nullopt, false, {});
  return std::make_pair(out.at(0), out.at(1));
}

// `x · dequant(w)ᵀ` (cpp/quantized_rows.cu) on an NVIDIA GPU for float32 `x` of 1 to 8
// rows and a weight in MLX's affine groups of 32 (`words` [N, K * bits / 32] uint32,
// float32 `scales` and `biases` [N, K / 32]), or nothing where it does not apply and MLX's
// quantized product runs instead.
std::optional<mx::array> quantized_rows_gpu(const mx::array& x, const mx::array& words,
                                            const mx::array& scales, const mx::array& biases,
                                            int bits) {
  constexpr int warps = 8;
  // RLX_MLX_QUANTIZED_ROWS=N (or M-N) runs the kernel for products of 1 (or M) to N rows,
  // 0 for none, to compare it with MLX's own kernels.
  static const std::pair<int, int> row_range = [] {
    const char* flag = std::getenv("RLX_MLX_QUANTIZED_ROWS");
    if (flag == nullptr) return std::make_pair(1, 8);
    const std::string text(flag);
    const size_t dash = text.find('-');
    const int low = dash == std::string::npos ? 1 : std::atoi(text.substr(0, dash).c_str());
    const int high = std::atoi(dash == std::string::npos ? flag : text.substr(dash + 1).c_str());
    return std::make_pair(std::max(low, 1), std::clamp(high, 0, 8));
  }();
  if (cuda_build_compute_major() == 0) return std::nullopt;
  if (x.dtype() != mx::float32 || words.dtype() != mx::uint32 || scales.dtype() != mx::float32 ||
      biases.dtype() != mx::float32) {
    return std::nullopt;
  }
  if ((bits != 4 && bits != 8) || x.ndim() < 1 || words.ndim() != 2) return std::nullopt;
  const int k = x.shape(-1);
  const int n = words.shape(0);
  if (k < 32 || k % 32 != 0 || n < 1 || words.shape(1) != k * bits / 32) return std::nullopt;
  if (scales.shape() != mx::Shape{n, k / 32} || biases.shape() != scales.shape()) return std::nullopt;
  const size_t rows = x.size() / static_cast<size_t>(k);
  if (rows < static_cast<size_t>(row_range.first) || rows > static_cast<size_t>(row_range.second)) {
    return std::nullopt;
  }
  if (n > std::numeric_limits<int32_t>::max() / 32 - warps * 32) return std::nullopt;
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "rlx_quantized_rows", {"x", "words", "scales", "biases"}, {"out"},
      "rlx_qrows::quantized_rows<ROWS, BITS, WARPS>(x, words, scales, biases, words_shape[0], "
      "x_shape[x_ndim - 1], out);",
      std::string(kColumnsSource) + kQuantizedRowsSource, /*ensure_row_contiguous=*/true);
  const int r = static_cast<int>(rows);
  const int blocks = (n + warps - 1) / warps;
  std::vector<mx::array> out = kernel(
      {x, words, scales, biases}, {{r, n}}, {mx::float32}, {blocks * warps * 32, 1, 1},
      {warps * 32, 1, 1}, {{"ROWS", r}, {"BITS", bits}, {"WARPS", warps}}, std::nullopt, false, {});
  mx::Shape shape = x.shape();
  shape.back() = n;
  return mx::reshape(out.at(0), shape);
}

// `act(x · gate columns) * (x · up columns)` of a gated feed-forward (cpp/gated_rows.cu) on
// an NVIDIA GPU for float32 `x` of 1 to 8 rows, or nothing where it does not apply and the
// caller composes the product, its slices and the activation. `parts` and `format` as
// rlx_mlx_gated_product takes them (rlx_mlx.h).
std::optional<mx::array> gated_rows_gpu(const mx::array& x, const std::vector<mx::array>& parts,
                                        int32_t format, int64_t gate_col, int64_t up_col,
                                        int64_t width, int32_t act) {
  constexpr int warps = 8;
  // RLX_MLX_GATED_ROWS=0 turns the kernel off (to compare it with the composed ops).
  static const bool enabled = [] {
    const char* flag = std::getenv("RLX_MLX_GATED_ROWS");
    return flag == nullptr || std::string(flag) != "0";
  }();
  if (!enabled || cuda_build_compute_major() == 0) return std::nullopt;
  if (x.dtype() != mx::float32 || x.ndim() < 1 || (act != 0 && act != 1)) return std::nullopt;
  const int k = x.shape(-1);
  if (k < 1 || width < 1 || gate_col < 0 || up_col < 0) return std::nullopt;
  const size_t rows = x.size() / static_cast<size_t>(k);
  if (rows < 1 || rows > 8 || width > std::numeric_limits<int32_t>::max() / 32 - warps * 32) {
    return std::nullopt;
  }
  const int r = static_cast<int>(rows), n = static_cast<int>(width);
  const int blocks = (n + warps - 1) / warps;
  mx::Shape shape = x.shape();
  shape.back() = n;
  const std::tuple<int, int, int> grid{blocks * warps * 32, 1, 1}, block{warps * 32, 1, 1};
  auto fits = [&](int64_t columns) { return gate_col + width <= columns && up_col + width <= columns; };
  if (parts.size() == 1) {
    // Float32 values: a float group's operand [K, N], or a block format's values [N, K].
    const mx::array& w = parts[0];
    const bool k_first = format < 0;
    if (w.dtype() != mx::float32 || w.ndim() != 2) return std::nullopt;
    if (w.shape(k_first ? 0 : 1) != k || !fits(w.shape(k_first ? 1 : 0))) return std::nullopt;
    if (x.ndim() > 8) return std::nullopt;
    // Strides are read where the kernel runs: while MLX traces a compiled function the
    // arrays here are placeholders.
    static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
        "rlx_gated_rows", {"x", "w"}, {"out"},
        "rlx_gated::gated_rows<ROWS, WARPS, ACT, K_FIRST>(x, x_shape, x_strides, x_ndim, w, "
        "w_strides, GATE, UP, WIDTH, out);",
        std::string(kColumnsSource) + kGatedRowsSource, /*ensure_row_contiguous=*/false);
    return kernel({x, w}, {shape}, {mx::float32}, grid, block,
                  {{"ROWS", r}, {"WARPS", warps}, {"ACT", act}, {"K_FIRST", k_first},
                   {"GATE", static_cast<int>(gate_col)}, {"UP", static_cast<int>(up_col)},
                   {"WIDTH", n}},
                  std::nullopt, false, {})
        .at(0);
  }
  if (parts.size() != 3 || format < 0) return std::nullopt;
  const int bits = format == 8 ? 8 : 4;
  const mx::array &words = parts[0], &scales = parts[1], &biases = parts[2];
  if (words.dtype() != mx::uint32 || scales.dtype() != mx::float32 || biases.dtype() != mx::float32) {
    return std::nullopt;
  }
  if (k % 32 != 0 || words.ndim() != 2 || words.shape(1) != k * bits / 32) return std::nullopt;
  const int columns = words.shape(0);
  if (!fits(columns) || scales.shape() != mx::Shape{columns, k / 32} || biases.shape() != scales.shape()) {
    return std::nullopt;
  }
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "rlx_gated_quantized_rows", {"x", "words", "scales", "biases"}, {"out"},
      "rlx_gated::gated_quantized_rows<ROWS, BITS, WARPS, ACT>(x, words, scales, biases, GATE, "
      "UP, WIDTH, x_shape[x_ndim - 1], out);",
      std::string(kColumnsSource) + kGatedRowsSource, /*ensure_row_contiguous=*/true);
  return kernel({x, words, scales, biases}, {shape}, {mx::float32}, grid, block,
                {{"ROWS", r}, {"BITS", bits}, {"WARPS", warps}, {"ACT", act},
                 {"GATE", static_cast<int>(gate_col)}, {"UP", static_cast<int>(up_col)},
                 {"WIDTH", n}},
                std::nullopt, false, {})
      .at(0);
}

// A decoder block's rotated queries and keys and its values, from float32 rows `x` ([B, S,
// K], 1 to 8 of them) and the joined weight of its q/k/v products (cpp/rotated_rows.cu), on
// an NVIDIA GPU; nothing where it does not apply, and the caller makes the product and
// rotates it. `parts` and `format` as rlx_mlx_gated_product takes them (rlx_mlx.h).
std::optional<std::tuple<mx::array, mx::array, mx::array>> rotated_rows_gpu(
    const mx::array& x, const std::vector<mx::array>& parts, int32_t format, const HeadGroups& g,
    int64_t v_col, const mx::array& offset, const std::optional<mx::array>& periods) {
  constexpr int warps = 8;
  // RLX_MLX_ROTATED_ROWS=0 turns the kernel off (to compare it with the product and
  // rope_heads' kernel, decision 048).
  static const bool enabled = [] {
    const char* flag = std::getenv("RLX_MLX_ROTATED_ROWS");
    return flag == nullptr || std::string(flag) != "0";
  }();
  if (!enabled || cuda_build_compute_major() == 0) return std::nullopt;
  if (x.dtype() != mx::float32 || x.ndim() != 3 || parts.empty()) return std::nullopt;
  if (!mx::issubdtype(offset.dtype(), mx::integer)) return std::nullopt;
  const int batch = x.shape(0), seq = x.shape(1), k = x.shape(2);
  const int64_t rows = int64_t{batch} * seq;
  if (rows < 1 || rows > 8 || k < 1) return std::nullopt;
  const bool per_row = offset.ndim() == 1 && offset.size() > 1;
  if (offset.size() != 1 && !(per_row && offset.size() == static_cast<size_t>(batch))) {
    return std::nullopt;
  }
  if (periods && (periods->dtype() != mx::float32 || periods->size() != static_cast<size_t>(g.dims / 2))) {
    return std::nullopt;
  }
  // The weight's columns, and whether it is read [K, N] (a float group's operand).
  const bool quantized = parts.size() == 3 && format >= 0;
  const bool k_first = format < 0;
  int64_t columns = 0;
  if (quantized) {
    columns = parts[0].shape(0);
  } else if (parts.size() == 1 && parts[0].dtype() == mx::float32 && parts[0].ndim() == 2 &&
             parts[0].shape(k_first ? 0 : 1) == k) {
    columns = parts[0].shape(k_first ? 1 : 0);
  } else {
    return std::nullopt;
  }
  const int64_t values_end = v_col + int64_t{g.k_heads} * g.head_dim;
  if (!head_groups_fit(g, columns) || v_col < 0 || values_end > columns ||
      columns > std::numeric_limits<int32_t>::max()) {
    return std::nullopt;
  }
  const int64_t units = int64_t{g.q_heads + g.k_heads} * (g.dims / 2 + g.head_dim - g.dims) +
                        int64_t{g.k_heads} * g.head_dim;
  if (units > std::numeric_limits<int32_t>::max() / 32 - warps) return std::nullopt;
  const int blocks = static_cast<int>((units + warps - 1) / warps);
  const std::vector<mx::Shape> shapes = {{batch, g.q_heads, seq, g.head_dim},
                                         {batch, g.k_heads, seq, g.head_dim},
                                         {batch, g.k_heads, seq, g.head_dim}};
  const std::vector<mx::Dtype> dtypes(3, mx::float32);
  const std::tuple<int, int, int> grid{blocks * warps * 32, 1, 1}, block{warps * 32, 1, 1};
  std::vector<std::pair<std::string, mx::fast::TemplateArg>> args = {
      {"ROWS", static_cast<int>(rows)}, {"WARPS", warps}, {"HQ", g.q_heads}, {"HK", g.k_heads},
      {"D", g.head_dim}, {"DIMS", g.dims}, {"QCOL", static_cast<int>(g.q_col)},
      {"KCOL", static_cast<int>(g.k_col)}, {"VCOL", static_cast<int>(v_col)},
      {"TRADITIONAL", g.traditional}, {"PER_ROW", per_row}, {"PERIODS", periods.has_value()},
      {"BASE_BITS", float_bits(g.base)}, {"SCALE_BITS", float_bits(g.scale)},
      {"OffT", offset.dtype()}};
  // The kernels' source, joined once (MLX keeps each kernel it is given).
  static const std::string source =
      std::string(kColumnsSource) + kRopeHeadsSource + kRotatedRowsSource;
  // Without periods the kernel reads none: `x` stands in for the operand.
  const mx::array& period = periods ? *periods : x;
  std::vector<mx::array> out;
  if (!quantized) {
    // Strides are read where the kernel runs: while MLX traces a compiled function the
    // arrays here are placeholders.
    static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
        "rlx_rotated_rows", {"x", "w", "offset", "periods"}, {"q", "k", "v"},
        "rlx_rotated::rotated_rows<ROWS, WARPS, HQ, HK, D, DIMS, QCOL, KCOL, VCOL, TRADITIONAL, "
        "PER_ROW, PERIODS, BASE_BITS, SCALE_BITS, K_FIRST, OffT>(x, x_shape, x_strides, w, "
        "w_strides, offset, periods, q, k, v);",
        source, /*ensure_row_contiguous=*/false);
    args.emplace_back("K_FIRST", k_first);
    out = kernel({x, parts[0], offset, period}, shapes, dtypes, grid, block, args, std::nullopt,
                 false, {});
  } else {
    const int bits = format == 8 ? 8 : 4;
    const mx::array &words = parts[0], &scales = parts[1], &biases = parts[2];
    if (words.dtype() != mx::uint32 || scales.dtype() != mx::float32 || biases.dtype() != mx::float32) {
      return std::nullopt;
    }
    const mx::Shape groups{static_cast<int>(columns), k / 32};
    if (k % 32 != 0 || words.ndim() != 2 || words.shape(1) != k * bits / 32 ||
        scales.shape() != groups || biases.shape() != groups) {
      return std::nullopt;
    }
    static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
        "rlx_rotated_quantized_rows", {"x", "words", "scales", "biases", "offset", "periods"},
        {"q", "k", "v"},
        "rlx_rotated::rotated_quantized_rows<ROWS, BITS, WARPS, HQ, HK, D, DIMS, QCOL, KCOL, VCOL, "
        "TRADITIONAL, PER_ROW, PERIODS, BASE_BITS, SCALE_BITS, OffT>(x, words, scales, biases, "
        "x_shape[1], x_shape[2], offset, periods, q, k, v);",
        source, /*ensure_row_contiguous=*/true);
    args.emplace_back("BITS", bits);
    out = kernel({x, words, scales, biases, offset, period}, shapes, dtypes, grid, block, args,
                 std::nullopt, false, {});
  }
  return std::make_tuple(out.at(0), out.at(1), out.at(2));
}

// The query and key heads of `x` ([B, S, W] float32) rotated and written heads-first
// (cpp/rope_heads.cu) on an NVIDIA GPU, or nothing where it does not apply (another device
// or dtype, an offset that is not an integer scalar or one per batch row) and the caller
// rotates them as separate MLX ops. The column ranges are checked by the caller.
std::optional<std::pair<mx::array, mx::array>> rope_heads_gpu(const mx::array& x, const HeadGroups& g,
                                                              const mx::array& offset,
                                                              const std::optional<mx::array>& periods) {
  constexpr int block = 256;
  if (cuda_build_compute_major() == 0) return std::nullopt;
  if (x.dtype() != mx::float32 || x.ndim() != 3) return std::nullopt;
  if (!mx::issubdtype(offset.dtype(), mx::integer)) return std::nullopt;
  const bool per_row = offset.ndim() == 1 && offset.size() > 1;
  if (offset.size() != 1 && !(per_row && offset.size() == static_cast<size_t>(x.shape(0)))) {
    return std::nullopt;
  }
  if (periods && (periods->dtype() != mx::float32 || periods->size() != static_cast<size_t>(g.dims / 2))) {
    return std::nullopt;
  }
  const int64_t batch = x.shape(0), seq = x.shape(1);
  const int64_t threads = batch * seq * (g.q_heads + g.k_heads) * (g.dims / 2 + g.head_dim - g.dims);
  if (threads < 1 || threads > std::numeric_limits<int32_t>::max() - block) return std::nullopt;
  static const mx::fast::CustomKernelFunction kernel = mx::fast::cuda_kernel(
      "rlx_rope_heads", {"x", "offset", "periods"}, {"q", "k"},
      "rlx_rope::rope_heads<HQ, HK, D, DIMS, QCOL, KCOL, TRADITIONAL, PER_ROW, PERIODS, BASE_BITS, "
      "SCALE_BITS, OffT>(x, offset, periods, x_shape[0], x_shape[1], x_shape[2], q, k);",
      kRopeHeadsSource, /*ensure_row_contiguous=*/true);
  const int b = static_cast<int>(batch), s = static_cast<int>(seq);
  // Without periods the kernel reads none: `x` stands in for the operand.
  std::vector<mx::array> out = kernel(
      {x, offset, periods ? *periods : x}, {{b, g.q_heads, s, g.head_dim}, {b, g.k_heads, s, g.head_dim}},
      {mx::float32, mx::float32},
      {static_cast<int>((threads + block - 1) / block * block), 1, 1}, {block, 1, 1},
      {{"HQ", g.q_heads}, {"HK", g.k_heads}, {"D", g.head_dim}, {"DIMS", g.dims},
       {"QCOL", static_cast<int>(g.q_col)}, {"KCOL", static_cast<int>(g.k_col)},
       {"TRADITIONAL", g.traditional}, {"PER_ROW", per_row}, {"PERIODS", periods.has_value()},
       {"BASE_BITS", float_bits(g.base)}, {"SCALE_BITS", float_bits(g.scale)}, {"OffT", offset.dtype()}},
      std::nullopt, false, {});
  return std::make_pair(out.at(0), out.at(1));
}

}  // namespace rlx
