// Compiled functions: a lowering callback traced by mlx::compile once per function, with
// trace ids that are never reused, erased from every calling thread's cache when freed.
#include "shim_internal.h"

#include "mlx_internals.h"

struct rlx_mlx_function {
  std::function<std::vector<mx::array>(const std::vector<mx::array>&)> call;
  void* userdata = nullptr;
  void (*drop)(void*) = nullptr;
  // The key of this function's traces. MLX keeps one trace cache per thread; ids are never
  // reused, so an entry left in some thread's cache can never answer for a later function.
  std::uintptr_t id = 0;
  // The cache of every thread that called the function, each erased when it is freed.
  std::mutex caches_mutex;
  std::vector<mx::detail::CompileCacheWeakPtr> caches;
};

namespace {
std::atomic<std::uintptr_t> next_function_id{1};
}  // namespace

using namespace rlx;

extern "C" {

int rlx_mlx_set_fusion(bool enabled) {
  return guard([&] { mx::set_compile_mode(enabled ? mx::CompileMode::enabled : mx::CompileMode::no_fuse); });
}

int rlx_mlx_compile(rlx_mlx_lower_fn lower, void* userdata, void (*drop)(void*),
                    size_t n_outputs, bool shapeless, rlx_mlx_function** out) {
  return guard([&] {
    if (lower == nullptr || out == nullptr) {
      throw std::invalid_argument("[rlx] compile needs a lowering callback and an output");
    }
    // Owned here until compiling succeeds: on failure the caller still owns `userdata`.
    auto f = std::make_unique<rlx_mlx_function>();
    f->userdata = userdata;
    f->drop = drop;
    f->id = next_function_id.fetch_add(1);
    auto traced = [lower, userdata, n_outputs](const std::vector<mx::array>& inputs) {
      std::vector<rlx_mlx_array*> in;
      in.reserve(inputs.size());
      for (const auto& a : inputs) in.push_back(wrap(a));
      std::vector<rlx_mlx_array*> outs(n_outputs, nullptr);
      const int status = lower(userdata, in.data(), in.size(), outs.data(), n_outputs);
      for (auto* h : in) rlx_mlx_array_free(h);
      std::vector<mx::array> result;
      bool missing = false;
      for (auto* h : outs) {
        if (h == nullptr) {
          missing = true;
        } else {
          result.push_back(h->value);
          rlx_mlx_array_free(h);
        }
      }
      if (status != 0) {
        throw std::runtime_error(last_error.empty() ? "the lowering callback failed" : last_error);
      }
      if (missing) {
        throw std::runtime_error("[rlx] the lowering callback left an output unset");
      }
      return result;
    };
    f->call = mx::detail::compile(traced, f->id, shapeless);
    *out = f.release();
  });
}

int rlx_mlx_function_call(rlx_mlx_function* f, rlx_mlx_array* const* inputs, size_t n_inputs,
                          rlx_mlx_array** outputs, size_t n_outputs) {
  return guard([&] {
    if (f == nullptr) {
      throw std::invalid_argument("[rlx] function handle is NULL");
    }
    {
      auto cache = mx::detail::compile_cache();
      std::lock_guard<std::mutex> lock(f->caches_mutex);
      const bool known = std::any_of(f->caches.begin(), f->caches.end(), [&](const auto& c) {
        return !c.owner_before(cache) && !cache.owner_before(c);
      });
      if (!known) f->caches.push_back(cache);
    }
    std::vector<mx::array> result = f->call(arrays_of(inputs, n_inputs));
    if (result.size() != n_outputs) {
      throw std::runtime_error("[rlx] the compiled function returned " + std::to_string(result.size()) + " outputs, expected " + std::to_string(n_outputs));
    }
    for (size_t i = 0; i < n_outputs; ++i) outputs[i] = wrap(result[i]);
  });
}

void rlx_mlx_function_free(rlx_mlx_function* f) {
  if (f == nullptr) {
    return;
  }
  try {
    // A cache whose thread has exited is gone already; `compile_erase` skips it.
    for (const auto& cache : f->caches) mx::detail::compile_erase(cache, f->id);
  } catch (...) {
    // The cache may already be gone at process exit; nothing to release then.
  }
  if (f->drop != nullptr) {
    f->drop(f->userdata);
  }
  delete f;
}


}  // extern "C"
