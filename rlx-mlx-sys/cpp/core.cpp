// The ABI's handles and errors: array handles (made, cloned, described, read, freed),
// evaluation with and without a deadline, devices, and the thread-local error message and
// half-precision mode every entry point shares.
#include "shim_internal.h"

#include <chrono>
#include <thread>

namespace rlx {

std::atomic<int64_t> live_arrays{0};
thread_local std::string last_error;
thread_local bool exact_halves = true;


}  // namespace rlx

using namespace rlx;

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

int64_t rlx_mlx_live_arrays(void) { return live_arrays.load(std::memory_order_relaxed); }

int rlx_mlx_memory(rlx_mlx_memory_counter counter, size_t* out) {
  return guard([&] {
    switch (counter) {
      case RLX_MLX_MEMORY_ACTIVE: *out = mx::get_active_memory(); return;
      case RLX_MLX_MEMORY_PEAK: *out = mx::get_peak_memory(); return;
      case RLX_MLX_MEMORY_RESET_PEAK: mx::reset_peak_memory(); *out = 0; return;
    }
    throw std::invalid_argument("[rlx] unknown memory counter " + std::to_string(counter));
  });
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
      // On a GPU, made there: the CPU stream would move the buffer `x` shares to unified
      // memory, under whatever else reads it (see `for_cpu_stream`). Float64 is only ever
      // on the CPU.
      const bool on_gpu = mx::default_device() == mx::Device::gpu && x.dtype() != mx::float64;
      x = on_gpu ? mx::contiguous(x) : mx::contiguous(x, false, mx::Device(mx::Device::cpu));
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


}  // extern "C"
