/* The C ABI of RLX's shim over MLX.
 *
 * Contract (see DESIGN §7 and rlx-mlx-sys/src/lib.rs):
 * - Arrays are opaque handles. Every call that makes an array writes a fresh handle the
 *   caller owns and frees with rlx_mlx_array_free (freeing NULL is fine). Cloning is a
 *   reference-count bump.
 * - Every fallible call returns 0 on success and nonzero on failure. No C++ exception leaves
 *   the shim: each is caught and its message kept in a thread-local string that
 *   rlx_mlx_last_error returns (cleared by the next successful call).
 * - Tensor data crosses as raw little-endian bytes in the array's own dtype.
 * - Every enum that crosses the ABI is one of the typedef'd enums below. Both sides map
 *   them with exhaustive matches by name (the Rust constants are generated from this
 *   header), so the numbers themselves carry no meaning and may be reordered.
 */
#ifndef RLX_MLX_H
#define RLX_MLX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rlx_mlx_array rlx_mlx_array;
typedef struct rlx_mlx_function rlx_mlx_function;
typedef struct rlx_mlx_group rlx_mlx_group;

/* Element types (rlx::ir::DType). */
typedef enum rlx_mlx_dtype {
  RLX_MLX_BOOL = 0,
  RLX_MLX_U8 = 1,
  RLX_MLX_U16 = 2,
  RLX_MLX_U32 = 3,
  RLX_MLX_U64 = 4,
  RLX_MLX_I8 = 5,
  RLX_MLX_I16 = 6,
  RLX_MLX_I32 = 7,
  RLX_MLX_I64 = 8,
  RLX_MLX_F16 = 9,
  RLX_MLX_F32 = 10,
  RLX_MLX_F64 = 11,
  RLX_MLX_BF16 = 12,
} rlx_mlx_dtype;

/* Elementwise functions of one array (rlx::ir::UnaryOp). */
typedef enum rlx_mlx_unary_op {
  RLX_MLX_UNARY_NEG = 0,
  RLX_MLX_UNARY_ABS = 1,
  RLX_MLX_UNARY_EXP = 2,
  RLX_MLX_UNARY_LOG = 3,
  RLX_MLX_UNARY_SQRT = 4,
  RLX_MLX_UNARY_RSQRT = 5,
  RLX_MLX_UNARY_RECIP = 6,
  RLX_MLX_UNARY_SIN = 7,
  RLX_MLX_UNARY_COS = 8,
  RLX_MLX_UNARY_TANH = 9,
  RLX_MLX_UNARY_SIGMOID = 10,
  RLX_MLX_UNARY_RELU = 11,
  RLX_MLX_UNARY_GELU = 12,
  RLX_MLX_UNARY_GELU_TANH = 13,
  RLX_MLX_UNARY_SILU = 14,
  RLX_MLX_UNARY_ERF = 15,
  RLX_MLX_UNARY_FLOOR = 16,
  RLX_MLX_UNARY_CEIL = 17,
  RLX_MLX_UNARY_ROUND = 18,
  RLX_MLX_UNARY_SIGN = 19,
  RLX_MLX_UNARY_SOFTPLUS = 20,
} rlx_mlx_unary_op;

/* Elementwise functions of two arrays (rlx::ir::BinaryOp). */
typedef enum rlx_mlx_binary_op {
  RLX_MLX_BINARY_ADD = 0,
  RLX_MLX_BINARY_SUB = 1,
  RLX_MLX_BINARY_MUL = 2,
  RLX_MLX_BINARY_DIV = 3,
  RLX_MLX_BINARY_POW = 4,
  RLX_MLX_BINARY_MAX = 5,
  RLX_MLX_BINARY_MIN = 6,
  RLX_MLX_BINARY_REM = 7,
} rlx_mlx_binary_op;

/* Comparisons (rlx::ir::CompareOp). */
typedef enum rlx_mlx_compare_op {
  RLX_MLX_COMPARE_EQ = 0,
  RLX_MLX_COMPARE_NE = 1,
  RLX_MLX_COMPARE_LT = 2,
  RLX_MLX_COMPARE_LE = 3,
  RLX_MLX_COMPARE_GT = 4,
  RLX_MLX_COMPARE_GE = 5,
} rlx_mlx_compare_op;

/* Reductions (rlx::ir::ReduceOp). */
typedef enum rlx_mlx_reduce_op {
  RLX_MLX_REDUCE_SUM = 0,
  RLX_MLX_REDUCE_MEAN = 1,
  RLX_MLX_REDUCE_MAX = 2,
  RLX_MLX_REDUCE_MIN = 3,
  RLX_MLX_REDUCE_PROD = 4,
} rlx_mlx_reduce_op;

/* Index reductions (rlx::ir::ArgReduceOp). */
typedef enum rlx_mlx_arg_reduce_op {
  RLX_MLX_ARGMAX = 0,
  RLX_MLX_ARGMIN = 1,
} rlx_mlx_arg_reduce_op;

/* What a sort or top-k returns (rlx::ir::SortOutput). */
typedef enum rlx_mlx_sort_output {
  RLX_MLX_SORT_VALUES = 0,
  RLX_MLX_SORT_INDICES = 1,
} rlx_mlx_sort_output;

/* Pooling functions (rlx::ir::PoolKind). */
typedef enum rlx_mlx_pool_kind {
  RLX_MLX_POOL_MAX = 0,
  RLX_MLX_POOL_AVG = 1,
} rlx_mlx_pool_kind;

/* Attention mask kinds (rlx::ir::AttentionMask). */
typedef enum rlx_mlx_mask_kind {
  RLX_MLX_MASK_NONE = 0,
  RLX_MLX_MASK_CAUSAL = 1,
  RLX_MLX_MASK_WINDOW = 2,
  RLX_MLX_MASK_ARRAY = 3,
} rlx_mlx_mask_kind;

/* How the processes of a distributed group talk (mlx::core::distributed backends). */
typedef enum rlx_mlx_transport {
  RLX_MLX_TRANSPORT_RING = 0,
  RLX_MLX_TRANSPORT_MPI = 1,
  RLX_MLX_TRANSPORT_NCCL = 2,
} rlx_mlx_transport;

/* Statuses beyond 0 (success) and 1 (failure, with a message). */
typedef enum rlx_mlx_status {
  RLX_MLX_STATUS_OK = 0,
  RLX_MLX_STATUS_FAILED = 1,
  /* rlx_mlx_eval_within ran out of time; the arrays are still being evaluated. */
  RLX_MLX_STATUS_TIMED_OUT = 2,
} rlx_mlx_status;

/* Kinds of device (mlx::core::Device::DeviceType). */
typedef enum rlx_mlx_device_kind {
  RLX_MLX_DEVICE_CPU = 0,
  RLX_MLX_DEVICE_GPU = 1,
} rlx_mlx_device_kind;

/* ---- status, errors, bookkeeping ---- */
const char* rlx_mlx_last_error(void);
/* Stores `message` as the last error (used by callbacks into Rust). */
void rlx_mlx_set_last_error(const char* message);
const char* rlx_mlx_version(void);
/* Writes the default device's name ("cpu", "gpu") into buf (NUL-terminated, truncated). */
int rlx_mlx_device_name(char* buf, size_t len);
/* How many devices of `kind` this MLX build can use (0 GPUs on a CPU-only build, or with no
 * GPU or driver present). */
int rlx_mlx_device_count(rlx_mlx_device_kind kind, int32_t* count);
/* Process-wide: the device (index 0 of `kind`) that ops built without an explicit stream
 * run on, and its current value. */
int rlx_mlx_set_default_device(rlx_mlx_device_kind kind);
int rlx_mlx_default_device(rlx_mlx_device_kind* kind);
/* Whether float32 matmuls, convolutions and attention on an NVIDIA GPU run in TF32. MLX
 * reads MLX_ENABLE_TF32 once per process; the shim sets it to 0 (full float32) at load
 * unless the environment already has it, so this is fixed for the process. */
bool rlx_mlx_tf32(void);
/* Whether MLX's CUDA backend records this process's kernels into CUDA graphs, as
 * MLX_USE_CUDA_GRAPHS says now (the shim sets it to 0 at load unless the environment has
 * it). MLX reads the variable once, at the process's first GPU kernel. */
bool rlx_mlx_cuda_graphs(void);
/* Sets MLX_USE_CUDA_GRAPHS for this process unless the user's environment set it before
 * the library loaded (returns false then, and changes nothing). Only a call before the
 * first GPU kernel has an effect; it writes the environment, so no other thread may read
 * or write the environment during the call. */
bool rlx_mlx_set_cuda_graphs(bool enabled);
/* This thread: whether ops on float16/bfloat16 arrays compute in float32 and round once
 * (true, the default: the numbers of RLX's CPU backend) or run MLX's half-precision
 * kernels (false: faster). Returns the previous setting. */
bool rlx_mlx_set_exact_halves(bool exact);
/* Process-wide: whether mlx::compile fuses kernels (on Linux CPU fusing runs g++ at run
 * time). Off, compiled functions still trace and simplify once but run stock kernels. */
int rlx_mlx_set_fusion(bool enabled);
/* Array handles alive right now (for leak tests). */
int64_t rlx_mlx_live_arrays(void);
/* MLX's allocator counters: bytes held by live arrays, the most held since the last reset
 * (RESET_PEAK resets it and writes 0). */
typedef enum rlx_mlx_memory_counter {
  RLX_MLX_MEMORY_ACTIVE = 0,
  RLX_MLX_MEMORY_PEAK = 1,
  RLX_MLX_MEMORY_RESET_PEAK = 2,
} rlx_mlx_memory_counter;
int rlx_mlx_memory(rlx_mlx_memory_counter counter, size_t* out);
/* Name of the BLAS the process resolved cblas_sgemm to, when known. */
const char* rlx_mlx_blas(void);

/* ---- arrays ---- */
void rlx_mlx_array_free(rlx_mlx_array* a);
int rlx_mlx_array_clone(const rlx_mlx_array* a, rlx_mlx_array** out);
/* A copy of `nbytes` host bytes as an array for `device`. For a CUDA GPU the copy is in
 * device memory of RLX's own (MLX's allocator would put it in managed memory, whose pages
 * GPU kernels fault on, and recycle it into its cache of buffers for GPU results);
 * elsewhere, and for the CPU, in memory of MLX's allocator. */
int rlx_mlx_array_from_bytes(const void* data, size_t nbytes, const int64_t* shape,
                             size_t ndim, rlx_mlx_dtype dtype, rlx_mlx_device_kind device,
                             rlx_mlx_array** out);
/* dtype, rank, and up to `cap` dims. */
int rlx_mlx_array_info(const rlx_mlx_array* a, rlx_mlx_dtype* dtype, size_t* ndim, int64_t* dims,
                       size_t cap);
/* Evaluates `a`, makes it row-contiguous and copies exactly `nbytes` bytes out (from a
 * CUDA GPU's memory straight into `dst`). */
int rlx_mlx_array_read(const rlx_mlx_array* a, void* dst, size_t nbytes);
/* The same values stored with the last two axes swapped in memory: a transposed view of a
 * transposed copy (rank >= 2). Matrix products on a GPU prefer a right operand whose rows
 * run along the reduced axis (cuBLAS's "T" layout, which TF32 tensor cores read directly). */
int rlx_mlx_k_major(const rlx_mlx_array* x, rlx_mlx_array** out);

/* ---- evaluation ---- */
int rlx_mlx_eval(rlx_mlx_array* const* arrays, size_t n);
int rlx_mlx_async_eval(rlx_mlx_array* const* arrays, size_t n);
int rlx_mlx_synchronize(void);
/* Like rlx_mlx_eval, but returns RLX_MLX_STATUS_TIMED_OUT once `timeout_ms` milliseconds
 * have passed with some array not yet computed (a collective whose peer stalls). The arrays
 * then stay pending; their computation may still finish or fail later. */
int rlx_mlx_eval_within(rlx_mlx_array* const* arrays, size_t n, int64_t timeout_ms);

/* ---- distributed groups ----
 * A group is the set of processes one launch started; ops on it are lazy arrays evaluated
 * like any other (collectives run on the transport's stream). */
/* Whether this MLX build has `transport`. */
bool rlx_mlx_transport_available(rlx_mlx_transport transport);
/* Forms the group the environment describes over `transport` (MLX_RANK and MLX_HOSTFILE
 * for the ring; NCCL_HOST_IP, NCCL_PORT, MLX_RANK and MLX_WORLD_SIZE for NCCL; the MPI
 * launcher's for MPI). Fails, never returning a group of one, when none can be formed.
 * Blocks until every rank has joined: callers bound the wait themselves. */
int rlx_mlx_group_init(rlx_mlx_transport transport, rlx_mlx_group** out);
void rlx_mlx_group_free(rlx_mlx_group* g);
int rlx_mlx_group_rank(const rlx_mlx_group* g, int32_t* rank, int32_t* size);
/* The sum over every rank of `x` (same shape and dtype on every rank). */
int rlx_mlx_all_sum(const rlx_mlx_group* g, const rlx_mlx_array* x, rlx_mlx_array** out);
/* Every rank's `x`, concatenated along axis 0 in rank order. */
int rlx_mlx_all_gather(const rlx_mlx_group* g, const rlx_mlx_array* x, rlx_mlx_array** out);
/* Sends `x` to rank `dst`; `out` is the array whose evaluation performs the send. */
int rlx_mlx_send(const rlx_mlx_group* g, const rlx_mlx_array* x, int32_t dst,
                 rlx_mlx_array** out);
/* An array of `shape` and `dtype` whose evaluation receives it from rank `src`. */
int rlx_mlx_recv(const rlx_mlx_group* g, const int64_t* shape, size_t ndim, rlx_mlx_dtype dtype,
                 int32_t src, rlx_mlx_array** out);

/* ---- compile ----
 * `lower` is called while MLX traces: it receives borrowed input handles and must write
 * `n_outputs` fresh handles into `outputs`, returning 0; on failure it sets the last error
 * (rlx_mlx_set_last_error) and returns nonzero. `drop` frees `userdata` when the function
 * is freed. */
typedef int (*rlx_mlx_lower_fn)(void* userdata, rlx_mlx_array* const* inputs, size_t n_inputs,
                                rlx_mlx_array** outputs, size_t n_outputs);
int rlx_mlx_compile(rlx_mlx_lower_fn lower, void* userdata, void (*drop)(void*),
                    size_t n_outputs, bool shapeless, rlx_mlx_function** out);
int rlx_mlx_function_call(rlx_mlx_function* f, rlx_mlx_array* const* inputs, size_t n_inputs,
                          rlx_mlx_array** outputs, size_t n_outputs);
void rlx_mlx_function_free(rlx_mlx_function* f);

/* ---- ops ---- */
int rlx_mlx_unary(rlx_mlx_unary_op kind, const rlx_mlx_array* x, rlx_mlx_array** out);
int rlx_mlx_binary(rlx_mlx_binary_op kind, const rlx_mlx_array* a, const rlx_mlx_array* b,
                   rlx_mlx_array** out);
int rlx_mlx_compare(rlx_mlx_compare_op kind, const rlx_mlx_array* a, const rlx_mlx_array* b,
                    rlx_mlx_array** out);
int rlx_mlx_where(const rlx_mlx_array* cond, const rlx_mlx_array* a, const rlx_mlx_array* b,
                  rlx_mlx_array** out);
int rlx_mlx_cast(const rlx_mlx_array* x, rlx_mlx_dtype dtype, rlx_mlx_array** out);
int rlx_mlx_matmul(const rlx_mlx_array* a, const rlx_mlx_array* b, bool transpose_a,
                   bool transpose_b, rlx_mlx_array** out);
/* a·b plus bias [N] added to every row (dtype of a), as one GEMM with a bias epilogue where
   MLX has one. */
int rlx_mlx_matmul_bias(const rlx_mlx_array* a, const rlx_mlx_array* b, const rlx_mlx_array* bias,
                        bool transpose_a, bool transpose_b, rlx_mlx_array** out);
/* Products with a matrix chosen per pair (indices [.., S], x [.., K] shared by a token's S
   pairs or [.., S, K]): y [.., S, N] = x · w[index] (w [E, K, N], or [E, N, K] when
   transpose_b), and its transpose out[e] = sum of x^T g over the pairs of e ([groups, K, N],
   or [groups, N, K] when transpose). `bad` receives a bool scalar, true when an index was
   outside [0, E) (read as 0). */
int rlx_mlx_gather_matmul(const rlx_mlx_array* x, const rlx_mlx_array* w,
                          const rlx_mlx_array* indices, bool transpose_b, rlx_mlx_array** out,
                          rlx_mlx_array** bad);
int rlx_mlx_scatter_matmul(const rlx_mlx_array* x, const rlx_mlx_array* g,
                           const rlx_mlx_array* indices, int32_t groups, bool transpose,
                           rlx_mlx_array** out, rlx_mlx_array** bad);
int rlx_mlx_reduce(rlx_mlx_reduce_op kind, const rlx_mlx_array* x, const int32_t* axes, size_t n_axes,
                   bool keep_dims, rlx_mlx_array** out);
int rlx_mlx_arg_reduce(rlx_mlx_arg_reduce_op kind, const rlx_mlx_array* x, int32_t axis, bool keep_dims,
                       rlx_mlx_array** out);
int rlx_mlx_cumsum(const rlx_mlx_array* x, int32_t axis, bool exclusive, bool reverse,
                   rlx_mlx_array** out);
int rlx_mlx_softmax(const rlx_mlx_array* x, int32_t axis, bool log, rlx_mlx_array** out);
/* weight and bias may be NULL. */
int rlx_mlx_layer_norm(const rlx_mlx_array* x, const rlx_mlx_array* weight,
                       const rlx_mlx_array* bias, double eps, rlx_mlx_array** out);
int rlx_mlx_rms_norm(const rlx_mlx_array* x, const rlx_mlx_array* weight, double eps,
                     rlx_mlx_array** out);
/* `sum = a + b` (one shape) and `out` its RMS normalization over the last axis with
 * `weight`: one kernel on an NVIDIA GPU for float32, MLX's add and RMS norm elsewhere. A
 * decoder's residual add and the norm of the next sublayer. */
int rlx_mlx_add_rms_norm(const rlx_mlx_array* a, const rlx_mlx_array* b,
                         const rlx_mlx_array* weight, double eps, rlx_mlx_array** sum,
                         rlx_mlx_array** out);
int rlx_mlx_reshape(const rlx_mlx_array* x, const int64_t* shape, size_t ndim,
                    rlx_mlx_array** out);
int rlx_mlx_permute(const rlx_mlx_array* x, const int32_t* perm, size_t ndim,
                    rlx_mlx_array** out);
/* Per-axis start, stop and stride, all in range (stride >= 1). */
int rlx_mlx_slice(const rlx_mlx_array* x, const int64_t* start, const int64_t* stop,
                  const int64_t* step, size_t ndim, rlx_mlx_array** out);
int rlx_mlx_concat(rlx_mlx_array* const* xs, size_t n, int32_t axis, rlx_mlx_array** out);
int rlx_mlx_broadcast(const rlx_mlx_array* x, const int64_t* shape, size_t ndim,
                      rlx_mlx_array** out);
/* `value` is a scalar array of x's dtype. */
int rlx_mlx_pad(const rlx_mlx_array* x, const int64_t* low, const int64_t* high, size_t ndim,
                const rlx_mlx_array* value, rlx_mlx_array** out);
/* numpy.take. `bad` receives a bool scalar that is true when an index is out of range
 * (those are clamped so nothing reads out of bounds). */
int rlx_mlx_gather(const rlx_mlx_array* data, const rlx_mlx_array* indices, int32_t axis,
                   rlx_mlx_array** out, rlx_mlx_array** bad);
int rlx_mlx_scatter_add(const rlx_mlx_array* data, const rlx_mlx_array* indices,
                        const rlx_mlx_array* updates, int32_t axis, rlx_mlx_array** out,
                        rlx_mlx_array** bad);
/* Where a window of dims `window` inside an array of dims `shape` (`ndim` each) starts
 * along `axes`: the run-time `offsets` (int32/int64, a scalar or one per entry of `axes`) as
 * int32 [n_axes], each read as 0 where it puts a non-empty window outside, and `bad`, a
 * bool scalar that is true when one did. Offsets [rows, n_axes] give each row of axis 0 a
 * window of its own (axis 0 not among `axes`; `window` then holds one row's window, its
 * first dim the rows) and a start of that shape. The two ops below take such a start:
 * several windows at the same offsets share one. */
int rlx_mlx_window_start(const rlx_mlx_array* offsets, const int64_t* shape, const int64_t* window,
                         size_t ndim, const int32_t* axes, size_t n_axes, rlx_mlx_array** start,
                         rlx_mlx_array** bad);
/* The window of `sizes` (one per axis of x) at `start` (from rlx_mlx_window_start; one
 * gather for a start per row of axis 0). */
int rlx_mlx_dynamic_slice_at(const rlx_mlx_array* x, const rlx_mlx_array* start,
                             const int32_t* axes, size_t n_axes, const int64_t* sizes,
                             size_t ndim, rlx_mlx_array** out);
/* x with `update` written over the window at `start` (from rlx_mlx_window_start) along
 * `axes`; in place where MLX may donate x. A start per row of axis 0 writes each row of
 * `update` over its own window (one scatter). */
int rlx_mlx_slice_update_at(const rlx_mlx_array* x, const rlx_mlx_array* update,
                            const rlx_mlx_array* start, const int32_t* axes, size_t n_axes,
                            rlx_mlx_array** out);
/* mask may be NULL unless mask_kind is RLX_MLX_MASK_ARRAY; window is for _WINDOW. */
int rlx_mlx_attention(const rlx_mlx_array* q, const rlx_mlx_array* k, const rlx_mlx_array* v,
                      double scale, rlx_mlx_mask_kind mask_kind, int64_t window, const rlx_mlx_array* mask,
                      rlx_mlx_array** out);
/* Attention of q over the first `length` keys of k and v (`length` a scalar integer
   array, or one per row of axis 0; the caller checks it against the keys), under mask_kind NONE, CAUSAL (aligned to
   `length`) or WINDOW, by RLX's decoding kernel on an NVIDIA GPU. Writes NULL to `out`
   where that kernel does not apply (another device or dtype, too many query rows, a mask
   array): the caller then masks the keys itself. */
int rlx_mlx_attention_prefix(const rlx_mlx_array* q, const rlx_mlx_array* k,
                             const rlx_mlx_array* v, double scale, const rlx_mlx_array* length,
                             rlx_mlx_mask_kind mask_kind, int64_t window, rlx_mlx_array** out);
/* Two groups of heads packed along the last axis of a [B, S, W] array, queries at columns
 * [q_col, q_col + q_heads * head_dim) and keys at [k_col, ..), and how they are rotated:
 * the first `dims` features of each head (even, at most head_dim), as rlx_mlx_rope says. */
typedef struct rlx_mlx_head_groups {
  int64_t q_col;
  int32_t q_heads;
  int64_t k_col;
  int32_t k_heads;
  int32_t head_dim;
  int32_t dims;
  double base;
  double scale;
  bool traditional;
} rlx_mlx_head_groups;
/* Rotary embeddings of the query and key heads of x ([B, S, W], float), each group rotated
 * as rlx_mlx_rope rotates [B, heads, S, head_dim] (offset a scalar or one per row of axis 0;
 * periods as there) and returned heads-first in q_out and k_out. One kernel on an NVIDIA
 * GPU for float32; slices, views and MLX's rope elsewhere. */
int rlx_mlx_rope_heads(const rlx_mlx_array* x, const rlx_mlx_head_groups* groups,
                       const rlx_mlx_array* offset, const rlx_mlx_array* periods,
                       rlx_mlx_array** q_out, rlx_mlx_array** k_out);
/* A decoder block's queries, keys and values from its rows x ([B, S, K], float32) and the
 * joined weight W of its q/k/v products: q_out and k_out the heads of x · W that
 * rlx_mlx_rope_heads would make of it, v_out its k_heads value heads at columns [v_col,
 * v_col + k_heads * head_dim) as they are ([B, k_heads, S, head_dim]). `parts` and `format`
 * as rlx_mlx_gated_product takes them. One kernel on an NVIDIA GPU for 1 to 8 rows unless the
 * environment sets RLX_MLX_ROTATED_ROWS=0 (decision 048); elsewhere the outputs are left
 * NULL and the caller makes the product and rotates it. */
int rlx_mlx_rotated_product(const rlx_mlx_array* x, rlx_mlx_array* const* parts, size_t count,
                            int32_t format, const rlx_mlx_head_groups* groups, int64_t v_col,
                            const rlx_mlx_array* offset, const rlx_mlx_array* periods,
                            rlx_mlx_array** q_out, rlx_mlx_array** k_out, rlx_mlx_array** v_out);
/* offset may be NULL (positions start at 0), a scalar, or for x of rank 3 or more one per
   row of axis 0; periods (float, dims / 2 of them: each pair
   turns by 1 / period radians per position) may be NULL (base's frequencies). */
int rlx_mlx_rope(const rlx_mlx_array* x, int32_t dims, double base, double scale,
                 bool traditional, const rlx_mlx_array* offset, const rlx_mlx_array* periods,
                 rlx_mlx_array** out);
/* Channels first, as in the IR; bias may be NULL. */
int rlx_mlx_conv(const rlx_mlx_array* x, const rlx_mlx_array* w, const rlx_mlx_array* bias,
                 const int32_t* stride, const int32_t* pad_low, const int32_t* pad_high,
                 const int32_t* dilation, size_t spatial, int32_t groups, rlx_mlx_array** out);
/* Channels first; w is [C, O/groups, *kernel] (PyTorch's layout); bias may be NULL. The
   crops are the transposed conv's `padding`, removed from each end of the full output. */
int rlx_mlx_conv_transpose(const rlx_mlx_array* x, const rlx_mlx_array* w, const rlx_mlx_array* bias,
                           const int32_t* stride, const int32_t* crop_low, const int32_t* crop_high,
                           const int32_t* output_padding, const int32_t* dilation, size_t spatial,
                           int32_t groups, rlx_mlx_array** out);
int rlx_mlx_pool(rlx_mlx_pool_kind kind, const rlx_mlx_array* x, const int32_t* kernel,
                 const int32_t* stride, const int32_t* pad_low, const int32_t* pad_high,
                 size_t spatial, rlx_mlx_array** out);
/* Stable sort; indices come back as int64. */
int rlx_mlx_sort(const rlx_mlx_array* x, int32_t axis, bool descending,
                 rlx_mlx_sort_output output, rlx_mlx_array** out);
int rlx_mlx_topk(const rlx_mlx_array* x, int32_t k, int32_t axis, rlx_mlx_sort_output output,
                 rlx_mlx_array** out);
int rlx_mlx_solve(const rlx_mlx_array* a, const rlx_mlx_array* b, rlx_mlx_array** out);
/* The gated delta rule: xs = q, k [.., T, K], v [.., T, V], g, beta [.., T] and optionally
   s0 [.., K, V] (n = 5 or 6); out [.., T + K, V], the outputs then the final state. */
int rlx_mlx_delta_rule(rlx_mlx_array* const* xs, size_t n, rlx_mlx_array** out);
/* Its gradient: xs = the rule's operands then the cotangent of its result (n = 6 or 7);
   out [.., T + K, 2K + V + 2] packed as the IR's delta_rule_grad. */
int rlx_mlx_delta_rule_grad(rlx_mlx_array* const* xs, size_t n, rlx_mlx_array** out);
/* w is uint8 [N, K*bits/8] with the low bits first. */
int rlx_mlx_quantized_matmul(const rlx_mlx_array* x, const rlx_mlx_array* w,
                             const rlx_mlx_array* scales, const rlx_mlx_array* biases,
                             int32_t bits, int32_t group_size, rlx_mlx_array** out);
/* w is uint8 [N, blocks] in the GGUF block format `format` (its GGML type id: Q8_0, Q4_0,
   Q4_1, Q5_0, Q5_1, Q2_K to Q6_K), one row of blocks per output feature. */
int rlx_mlx_block_matmul(const rlx_mlx_array* x, const rlx_mlx_array* w, int32_t format,
                         rlx_mlx_array** out);
/* `w`'s form for `rlx_mlx_block_matmul_prepared`, made once for a weight that many runs
   multiply by: MLX affine groups of 32 (words, scales, biases: 3 arrays) for Q8_0, Q4_0,
   Q4_1 and Q4_K, the float32 values `[N, K]` (1 array) for the other formats. `out` has
   room for 3 handles; `count` receives how many were written. */
int rlx_mlx_block_prepare(const rlx_mlx_array* w, int32_t format, rlx_mlx_array** out,
                          size_t* count);
/* How many arrays `rlx_mlx_block_prepare` makes of a weight in `format` (3 or 1), known
   before any weight is bound so that a lowering can place them. */
int rlx_mlx_block_prepared_parts(int32_t format, size_t* count);
/* `rlx_mlx_block_matmul(x, w, format)` from the `count` arrays `rlx_mlx_block_prepare`
   made of `w`. */
int rlx_mlx_block_matmul_prepared(const rlx_mlx_array* x, rlx_mlx_array* const* parts,
                                  size_t count, int32_t format, rlx_mlx_array** out);
/* A gated feed-forward's hidden values, act(x · W[:, gate]) * (x · W[:, up]), from the
   joined weight W of its gate and up products: gate at columns [gate_col, gate_col +
   width), up at [up_col, ..). `parts`: W as a float group's product reads it (format < 0:
   one float32 array [K, N], any strides) or its `rlx_mlx_block_prepare` form (format its
   GGML type id). act 0 is SiLU, 1 GELU's tanh approximation. One kernel on an NVIDIA GPU
   for float32 x of 1 to 8 rows; elsewhere *out is left NULL and the caller composes the
   product, the slices and the activation. */
int rlx_mlx_gated_product(const rlx_mlx_array* x, rlx_mlx_array* const* parts, size_t count,
                          int32_t format, int64_t gate_col, int64_t up_col, int64_t width,
                          int32_t act, rlx_mlx_array** out);
// f32 values uniform in [0, 1) of `shape`, RLX's draw of `seed` (a rank-0 int64) and `stream`.
int rlx_mlx_random_uniform(const rlx_mlx_array* seed, uint32_t stream, const int64_t* shape,
                           size_t ndim, rlx_mlx_array** out);
// `x`, computed only after `token` (`mx::depends`).
int rlx_mlx_after(const rlx_mlx_array* x, const rlx_mlx_array* token, rlx_mlx_array** out);
// `[N, K]` values of group-affine packed rows (the weights of `rlx_mlx_quantized_matmul`).
int rlx_mlx_dequantize(const rlx_mlx_array* w, const rlx_mlx_array* scales,
                       const rlx_mlx_array* biases, int32_t bits, int32_t group_size,
                       rlx_mlx_array** out);
/* The float32 values of `w`'s rows of GGUF blocks (`[.., row bytes]` -> `[.., values]`). */
int rlx_mlx_block_dequantize(const rlx_mlx_array* w, int32_t format, rlx_mlx_array** out);

#ifdef __cplusplus
}
#endif

#endif
