// The CUDA driver, found at run time, and the device memory RLX keeps of its own: host
// bytes uploaded into a stream-ordered pool and results read straight from device memory,
// so nothing of a run goes through MLX's managed buffers (docs/decisions/010).
#include "shim_internal.h"
#include <dlfcn.h>

#include "mlx_internals.h"

namespace rlx {

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

int cuda_build_compute_major() {
  const CudaGpu* gpu = building_for_cuda_gpu();
  return gpu == nullptr ? 0 : gpu->compute_major;
}


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

// When an op on MLX's CPU stream reads an array held in device memory, MLX (0.32) moves the
// buffer to unified memory there and then: it copies the bytes, frees the device memory with
// `cudaFreeAsync` on a stream of its own, and repoints the buffer, from the CPU stream's
// thread. Nothing orders that free after GPU kernels that read the same buffer and are still
// queued or running, nor the repointing after the main thread encoding them, so another
// array could be given the memory while a kernel read it (found by fuzz_graphs on an H100:
// a solve's weight read as other values by a permute of it, integer results holding float
// bits, once a crash, in the lazy and compiled modes only). Such an op therefore reads a
// copy made on the GPU stream that nothing else reads; the CPU stream waits for the copy.
// Float64 never lives on a GPU.
mx::array for_cpu_stream(const mx::array& x) {
  if (!(mx::default_device() == mx::Device::gpu) || x.dtype() == mx::float64) return x;
  return mx::multiply(x, mx::array(1, x.dtype()));
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

}  // namespace rlx
