// GGUF's block formats on MLX: rows of blocks as the file stores them, multiplied
// (`block_matmul`) or turned into float32 (`block_dequantize`). Formats that are MLX affine
// groups of 32 exactly (Q8_0, Q4_0, Q4_1, Q4_K) run through `quantized_matmul`; the others
// become their float32 values by array ops, as `rlx::gguf` defines them.
#include "shim_internal.h"

#include <variant>

using namespace rlx;

namespace {

/// Bytes of one block of GGML type `format` (8 = Q8_0, 2 = Q4_0, 3 = Q4_1, 6 = Q5_0,
/// 7 = Q5_1 of 32 values; 10 to 14 = Q2_K to Q6_K of 256); `op` names the caller in the
/// error for any other format.
int block_bytes_of(int32_t format, const char* op) {
  switch (format) {
    case 8: return 34;
    case 2: return 18;
    case 3: return 20;
    case 6: return 22;
    case 7: return 24;
    case 10: return 84;
    case 11: return 110;
    case 12: return 144;
    case 13: return 176;
    case 14: return 210;
    default:
      throw std::invalid_argument(std::string(op) + ": format " + std::to_string(format) +
                                  " is not Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 or Q2_K to Q6_K");
  }
}

/// Values of one block of `format`.
int block_values_of(int32_t format) { return format >= 10 && format <= 14 ? 256 : 32; }

/// A `[n, nb, block_bytes]` view of rows of blocks, cut into fields.
struct BlockFields {
  mx::array blocks;
  int n;
  int nb;

  BlockFields(const mx::array& bytes, int block_bytes)
      : blocks(mx::reshape(bytes, {bytes.shape(0), bytes.shape(1) / block_bytes, block_bytes})),
        n(bytes.shape(0)),
        nb(bytes.shape(1) / block_bytes) {}

  /// Bytes `start..stop` of every block as they are, contiguous, `[n, nb, stop - start]`.
  mx::array raw(int start, int stop) const {
    return mx::contiguous(mx::slice(blocks, {0, 0, start}, {n, nb, stop}));
  }

  /// Bytes `start..stop` of every block, `[n, nb, stop - start]`, as uint32.
  mx::array bytes(int start, int stop) const {
    return mx::astype(mx::slice(blocks, {0, 0, start}, {n, nb, stop}), mx::uint32);
  }

  /// Bytes `start..stop` of every block as signed bytes, in float32.
  mx::array signed_bytes(int start, int stop) const {
    return mx::astype(mx::view(raw(start, stop), mx::int8), mx::float32);
  }

  /// The f16 at byte `at` of every block as float32, `[n, nb, 1]`.
  mx::array half(int at) const {
    return mx::astype(mx::view(raw(at, at + 2), mx::float16), mx::float32);
  }
};

mx::array u32(uint32_t v) { return mx::array(v, mx::uint32); }

/// `v >> shifts & mask` with `shifts` a list broadcast along a new axis before the last.
mx::array shifted(const mx::array& v, std::vector<uint32_t> shifts, uint32_t mask) {
  const int count = static_cast<int>(shifts.size());
  const mx::array by = mx::reshape(mx::array(shifts.begin(), {count}, mx::uint32), {count, 1});
  return mx::bitwise_and(mx::right_shift(mx::expand_dims(v, -2), by), u32(mask));
}

/// The 8 6-bit scales and minimums of Q4_K/Q5_K blocks (12 bytes from byte 4), each
/// `[n, nb, 8]` float32: scales j < 4 are the low 6 bits of bytes j, minimums of bytes
/// j + 4; j >= 4 take their low 4 bits from byte j + 4 (low or high nibble) and their high
/// 2 from the top bits of bytes j - 4 (scales) or j (minimums).
std::pair<mx::array, mx::array> k_scales_minimums(const BlockFields& f) {
  const mx::array first = f.bytes(4, 8), second = f.bytes(8, 12), third = f.bytes(12, 16);
  auto join = [](const mx::array& low, const mx::array& high) {
    return mx::astype(mx::concatenate({low, high}, 2), mx::float32);
  };
  const mx::array scales = join(
      mx::bitwise_and(first, u32(63)),
      mx::bitwise_or(mx::bitwise_and(third, u32(15)), mx::left_shift(mx::right_shift(first, u32(6)), u32(4))));
  const mx::array minimums = join(
      mx::bitwise_and(second, u32(63)),
      mx::bitwise_or(mx::right_shift(third, u32(4)), mx::left_shift(mx::right_shift(second, u32(6)), u32(4))));
  return {scales, minimums};
}

/// Q4_K's nibbles, `[n, nb, 8, 32]` (group c: the low nibbles of bytes 32 (c / 2).. for
/// even c, the high ones for odd), from 128 bytes at `at`.
mx::array k_nibbles(const BlockFields& f, int at) {
  const mx::array qs = mx::reshape(f.bytes(at, at + 128), {f.n, f.nb, 4, 32});
  return mx::reshape(shifted(qs, {0, 4}, 15), {f.n, f.nb, 8, 32});
}

/// The float32 values `[n, nb * 256]` of rows of K-quant blocks, each format as
/// `rlx::gguf` defines it (the scale products first, then the integer, then the minimum).
mx::array k_quant_values(const mx::array& bytes, int32_t format) {
  const BlockFields f(bytes, block_bytes_of(format, "k_quant_values"));
  const int n = f.n, nb = f.nb;
  auto flat = [&](const mx::array& v) { return mx::reshape(v, {n, nb * 256}); };
  auto ints = [](const mx::array& v) { return mx::astype(v, mx::float32); };
  switch (format) {
    case 10: {  // Q2_K: groups of 16, scale and minimum nibbles, 2-bit values.
      const mx::array sc = f.bytes(0, 16);
      const mx::array dl = mx::reshape(mx::multiply(f.half(80), ints(mx::bitwise_and(sc, u32(15)))), {n, nb, 8, 2, 1});
      const mx::array ml = mx::reshape(mx::multiply(f.half(82), ints(mx::right_shift(sc, u32(4)))), {n, nb, 8, 2, 1});
      const mx::array qs = mx::reshape(f.bytes(16, 80), {n, nb, 2, 32});
      const mx::array q = mx::reshape(shifted(qs, {0, 2, 4, 6}, 3), {n, nb, 8, 2, 16});
      return flat(mx::subtract(mx::multiply(dl, ints(q)), ml));
    }
    case 11: {  // Q3_K: groups of 16, 6-bit signed scales, 2-bit values, high bits.
      const mx::array packed = f.bytes(96, 104);
      const mx::array low = mx::concatenate({mx::bitwise_and(packed, u32(15)), mx::right_shift(packed, u32(4))}, 2);
      const mx::array high = mx::reshape(shifted(f.bytes(104, 108), {0, 2, 4, 6}, 3), {n, nb, 16});
      const mx::array scale = mx::subtract(ints(mx::bitwise_or(low, mx::left_shift(high, u32(4)))), mx::array(32.0f));
      const mx::array dl = mx::reshape(mx::multiply(f.half(108), scale), {n, nb, 8, 2, 1});
      const mx::array qs = mx::reshape(f.bytes(32, 96), {n, nb, 2, 32});
      const mx::array low2 = mx::reshape(shifted(qs, {0, 2, 4, 6}, 3), {n, nb, 8, 32});
      const mx::array bit = shifted(f.bytes(0, 32), {0, 1, 2, 3, 4, 5, 6, 7}, 1);
      const mx::array q = mx::subtract(ints(low2), mx::multiply(mx::array(4.0f), mx::subtract(mx::array(1.0f), ints(bit))));
      return flat(mx::multiply(dl, mx::reshape(q, {n, nb, 8, 2, 16})));
    }
    case 12:
    case 13: {  // Q4_K, Q5_K: groups of 32, 6-bit scales and minimums, (fifth bits,) nibbles.
      const auto [scales, minimums] = k_scales_minimums(f);
      const mx::array dl = mx::expand_dims(mx::multiply(f.half(0), scales), -1);
      const mx::array ml = mx::expand_dims(mx::multiply(f.half(2), minimums), -1);
      mx::array q = k_nibbles(f, format == 12 ? 16 : 48);
      if (format == 13) {
        const mx::array fifth = shifted(f.bytes(16, 48), {0, 1, 2, 3, 4, 5, 6, 7}, 1);
        q = mx::bitwise_or(q, mx::left_shift(fifth, u32(4)));
      }
      return flat(mx::subtract(mx::multiply(dl, ints(q)), ml));
    }
    default: {  // Q6_K: groups of 16, signed 8-bit scales, 4 + 2 bits less 32.
      const mx::array ql = mx::reshape(f.bytes(0, 128), {n, nb, 2, 2, 32});
      const mx::array low = mx::concatenate({mx::bitwise_and(ql, u32(15)), mx::right_shift(ql, u32(4))}, 3);
      const mx::array qh = mx::reshape(f.bytes(128, 192), {n, nb, 2, 32});
      const mx::array high = shifted(qh, {0, 2, 4, 6}, 3);
      const mx::array q = mx::subtract(ints(mx::bitwise_or(low, mx::left_shift(high, u32(4)))), mx::array(32.0f));
      const mx::array scale = f.signed_bytes(192, 208);
      const mx::array dl = mx::reshape(mx::multiply(f.half(208), scale), {n, nb, 2, 4, 2, 1});
      return flat(mx::multiply(dl, mx::reshape(q, {n, nb, 2, 4, 2, 16})));
    }
  }
}

/// Whether `format` is a K-quant (10 to 14 = Q2_K to Q6_K).
bool k_quant(int32_t format) { return format >= 10 && format <= 14; }

/// GGUF blocks of 32 values as MLX's affine groups of 32, exactly.
struct AffineBlocks {
  mx::array words;
  mx::array scales;
  mx::array biases;
  int bits;
};

/// `bytes` `[n, blocks * block_bytes]` of `format` (GGML's ids: 8 = Q8_0, 2 = Q4_0,
/// 3 = Q4_1) as MLX affine groups: Q8_0 (f16 d, 32 signed bytes) is d * (q + 128) - 128 d;
/// Q4_0 (f16 d, 16 bytes of nibbles) is d * q - 8 d; Q4_1 (f16 d, f16 m, nibbles) is
/// d * q + m. A block holds values 0..15 in the low nibbles and 16..31 in the high ones;
/// MLX wants value 2i in the low nibble of byte i.
AffineBlocks affine_blocks(const mx::array& bytes, int32_t format, const char* op) {
  const BlockFields f(bytes, block_bytes_of(format, op));
  const int n = f.n;
  const int nb = f.nb;
  auto half_at = [&](int at) { return mx::reshape(f.half(at), {n, nb}); };
  const mx::array d = half_at(0);
  if (format == 8) {
    const mx::array q = mx::reshape(mx::bitwise_xor(f.raw(2, 34), mx::array(128, mx::uint8)), {n, nb * 32});
    return {mx::view(mx::contiguous(q), mx::uint32), d, mx::multiply(d, mx::array(-128.0f)), 8};
  }
  const int head = format == 3 ? 4 : 2;
  const mx::array qs = f.raw(head, head + 16);
  const mx::array values = mx::reshape(
      mx::concatenate({mx::bitwise_and(qs, mx::array(15, mx::uint8)),
                       mx::right_shift(qs, mx::array(4, mx::uint8))},
                      2),
      {n, nb, 16, 2});
  const mx::array even = mx::slice(values, {0, 0, 0, 0}, {n, nb, 16, 1});
  const mx::array odd = mx::slice(values, {0, 0, 0, 1}, {n, nb, 16, 2});
  const mx::array q = mx::reshape(mx::bitwise_or(even, mx::left_shift(odd, mx::array(4, mx::uint8))), {n, nb * 16});
  const mx::array bias = format == 3 ? half_at(2) : mx::multiply(d, mx::array(-8.0f));
  return {mx::view(mx::contiguous(q), mx::uint32), d, bias, 4};
}

/// Whether `format` is a 5-bit format (6 = Q5_0, 7 = Q5_1), which MLX's affine groups do
/// not take: they are dequantized to float32 instead.
bool five_bit(int32_t format) { return format == 6 || format == 7; }

/// Q4_K blocks as MLX's affine groups of 32, exactly: group c of a block is
/// `(d · scale_c) · q - dmin · min_c` (`d · scale_c · q` is exact in float32, so the one
/// addition rounds as the CPU's does), its nibbles repacked in value order.
AffineBlocks q4_k_affine(const mx::array& bytes) {
  const BlockFields f(bytes, block_bytes_of(12, "q4_k_affine"));
  const int n = f.n, nb = f.nb;
  const auto [scales, minimums] = k_scales_minimums(f);
  const mx::array dl = mx::reshape(mx::multiply(f.half(0), scales), {n, nb * 8});
  const mx::array ml = mx::reshape(mx::multiply(f.half(2), minimums), {n, nb * 8});
  const mx::array q = mx::reshape(k_nibbles(f, 16), {n, nb * 128, 2});
  const mx::array even = mx::slice(q, {0, 0, 0}, {n, nb * 128, 1});
  const mx::array odd = mx::slice(q, {0, 0, 1}, {n, nb * 128, 2});
  const mx::array packed = mx::astype(
      mx::reshape(mx::bitwise_or(even, mx::left_shift(odd, u32(4))), {n, nb * 128}), mx::uint8);
  return {mx::view(mx::contiguous(packed), mx::uint32), dl, mx::negative(ml), 4};
}


/// The float32 values of `bytes` `[n, blocks * block_bytes]` in a 5-bit format: nibbles
/// (values 0..15 low, 16..31 high) with a fifth bit each from the block's 32-bit word;
/// Q5_0 is d * (q - 16), Q5_1 is d * q + m. Exact: d * q is exact in float32, and the
/// addition rounds once, as the CPU's dequantization does.
mx::array five_bit_values(const mx::array& bytes, int32_t format) {
  const BlockFields f(bytes, block_bytes_of(format, "five_bit_values"));
  const int head = format == 6 ? 2 : 4;
  const mx::array d = f.half(0);  // [n, nb, 1]
  const mx::array word = mx::view(f.raw(head, head + 4), mx::uint32);  // [n, nb, 1]
  const mx::array fifth = mx::bitwise_and(
      mx::right_shift(word, mx::arange(0, 32, mx::uint32)), mx::array(1u, mx::uint32));
  const mx::array qs = f.bytes(head + 4, head + 20);
  const mx::array nibbles = mx::concatenate(
      {mx::bitwise_and(qs, mx::array(15u, mx::uint32)), mx::right_shift(qs, mx::array(4u, mx::uint32))}, 2);
  const mx::array q = mx::astype(
      mx::bitwise_or(nibbles, mx::left_shift(fifth, mx::array(4u, mx::uint32))), mx::float32);
  const mx::array values = format == 6 ? mx::multiply(mx::subtract(q, mx::array(16.0f)), d)
                                       : mx::add(mx::multiply(q, d), f.half(2));
  return mx::reshape(values, {f.n, f.nb * 32});
}

/// `bytes` as MLX affine groups of 32 where the format maps onto them exactly (Q8_0, Q4_0,
/// Q4_1, Q4_K); the other formats' float values instead.
/// Whether `format`'s values are exactly MLX affine groups of 32 (Q8_0, Q4_0, Q4_1, Q4_K);
/// the other formats are multiplied as float32 values.
bool affine_form(int32_t format) { return format == 12 || !(k_quant(format) || five_bit(format)); }

std::variant<AffineBlocks, mx::array> groups_or_values(const mx::array& bytes, int32_t format,
                                                       const char* op) {
  if (format == 12) return q4_k_affine(bytes);
  if (!affine_form(format)) {
    return k_quant(format) ? k_quant_values(bytes, format) : five_bit_values(bytes, format);
  }
  return affine_blocks(bytes, format, op);
}

}  // namespace

extern "C" {

int rlx_mlx_block_prepared_parts(int32_t format, size_t* count) {
  return guard([&] {
    block_bytes_of(format, "block_prepared_parts");
    *count = affine_form(format) ? 3 : 1;
  });
}

int rlx_mlx_block_prepare(const rlx_mlx_array* w, int32_t format, rlx_mlx_array** out,
                          size_t* count) {
  return guard([&] {
    auto weights = groups_or_values(get(w), format, "block_prepare");
    if (const mx::array* values = std::get_if<mx::array>(&weights)) {
      put(out, *values);
      *count = 1;
      return;
    }
    const AffineBlocks& a = std::get<AffineBlocks>(weights);
    put(out, a.words);
    put(out + 1, a.scales);
    put(out + 2, a.biases);
    *count = 3;
  });
}

namespace {

/// `x · dequant(w)ᵀ` from `w`'s prepared form: MLX's affine groups (words, scales,
/// biases) through `quantized_matmul`, or the float32 values through a plain product.
mx::array prepared_product(const mx::array& x, const std::vector<mx::array>& parts,
                           int32_t format) {
  if (parts.size() == 1) return matmul_rows(x, mx::transpose(parts[0]));
  if (parts.size() != 3) throw std::invalid_argument("[rlx] a prepared block weight has 1 or 3 arrays");
  const int bits = format == 8 ? 8 : 4;
  if (auto fused = quantized_rows_gpu(x, parts[0], parts[1], parts[2], bits)) return *fused;
  const bool vector = x.ndim() == 1;
  const mx::array rows = vector ? mx::reshape(x, {1, x.shape(0)}) : x;
  mx::array y = mx::quantized_matmul(rows, parts[0], parts[1], parts[2], true, 32, bits);
  return vector ? mx::reshape(y, {y.shape(-1)}) : y;
}

// The arrays of a weight's `count` parts, none of them null (`op` names the caller).
std::vector<mx::array> weight_parts(rlx_mlx_array* const* parts, size_t count, const char* op) {
  std::vector<mx::array> arrays;
  for (size_t i = 0; i < count; ++i) {
    if (parts[i] == nullptr) throw std::invalid_argument(std::string("[rlx] ") + op + ": a null weight part");
    arrays.push_back(get(parts[i]));
  }
  return arrays;
}

}  // namespace

int rlx_mlx_block_matmul_prepared(const rlx_mlx_array* x, rlx_mlx_array* const* parts,
                                  size_t count, int32_t format, rlx_mlx_array** out) {
  return guard([&] {
    put(out, prepared_product(get(x), weight_parts(parts, count, "block_matmul_prepared"), format));
  });
}

int rlx_mlx_gated_product(const rlx_mlx_array* x, rlx_mlx_array* const* parts, size_t count,
                          int32_t format, int64_t gate_col, int64_t up_col, int64_t width,
                          int32_t act, rlx_mlx_array** out) {
  return guard([&] {
    if (x == nullptr || parts == nullptr || out == nullptr) {
      throw std::invalid_argument("[rlx] gated_product needs an operand, a weight and an output");
    }
    *out = nullptr;
    const std::vector<mx::array> arrays = weight_parts(parts, count, "gated_product");
    const mx::array& v = get(x);
    if (v.size() == 0) return;
    if (auto fused = gated_rows_gpu(v, arrays, format, gate_col, up_col, width, act)) put(out, *fused);
  });
}

int rlx_mlx_rotated_product(const rlx_mlx_array* x, rlx_mlx_array* const* parts, size_t count,
                            int32_t format, const rlx_mlx_head_groups* groups, int64_t v_col,
                            const rlx_mlx_array* offset, const rlx_mlx_array* periods,
                            rlx_mlx_array** q_out, rlx_mlx_array** k_out, rlx_mlx_array** v_out) {
  return guard([&] {
    if (x == nullptr || parts == nullptr || groups == nullptr || offset == nullptr ||
        q_out == nullptr || k_out == nullptr || v_out == nullptr) {
      throw std::invalid_argument(
          "[rlx] rotated_product needs an operand, a weight, head groups, an offset and three outputs");
    }
    *q_out = *k_out = *v_out = nullptr;
    const std::vector<mx::array> arrays = weight_parts(parts, count, "rotated_product");
    const mx::array& v = get(x);
    if (v.size() == 0) return;
    const std::optional<mx::array> period =
        periods != nullptr ? std::optional<mx::array>(get(periods)) : std::nullopt;
    if (auto made = rotated_rows_gpu(v, arrays, format, *groups, v_col, get(offset), period)) {
      put(q_out, std::get<0>(*made));
      put(k_out, std::get<1>(*made));
      put(v_out, std::get<2>(*made));
    }
  });
}

int rlx_mlx_block_matmul(const rlx_mlx_array* x, const rlx_mlx_array* w, int32_t format,
                         rlx_mlx_array** out) {
  return guard([&] {
    auto weights = groups_or_values(get(w), format, "block_matmul");
    std::vector<mx::array> parts;
    if (const mx::array* values = std::get_if<mx::array>(&weights)) {
      parts.push_back(*values);
    } else {
      const AffineBlocks& a = std::get<AffineBlocks>(weights);
      parts = {a.words, a.scales, a.biases};
    }
    put(out, prepared_product(get(x), parts, format));
  });
}

int rlx_mlx_block_dequantize(const rlx_mlx_array* w, int32_t format, rlx_mlx_array** out) {
  return guard([&] {
    const mx::array& bytes = get(w);
    mx::Shape shape = bytes.shape();
    const int row_bytes = shape.back();
    const int rows = static_cast<int>(bytes.size() / std::max(row_bytes, 1));
    if (rows == 0) {
      shape.back() = row_bytes / block_bytes_of(format, "block_dequantize") * block_values_of(format);
      put(out, mx::zeros(shape, mx::float32));
      return;
    }
    const mx::array table = mx::reshape(bytes, {rows, row_bytes});
    auto weights = groups_or_values(table, format, "block_dequantize");
    mx::array values = mx::array(0.0f);
    if (const mx::array* dense = std::get_if<mx::array>(&weights)) {
      values = *dense;
    } else {
      const AffineBlocks& a = std::get<AffineBlocks>(weights);
      values = mx::dequantize(a.words, a.scales, a.biases, 32, a.bits);
    }
    shape.back() = values.shape(-1);
    put(out, mx::reshape(values, shape));
  });
}

}  // extern "C"
