// A kernel-level trace of any CUDA program, for machines without Nsight Systems.
//
// Built as a shared library and loaded by the CUDA driver through
// CUDA_INJECTION64_PATH (the hook Nsight tools use), it records every kernel and copy the
// process runs through CUPTI's activity API (kernels inside CUDA graphs included), and at
// exit prints:
//   - the time the GPU was busy against the span from first to last activity, and the idle
//     gaps between activities bucketed by length (many 10-100 us gaps inside a run mean the
//     host does not feed the GPU fast enough);
//   - kernels grouped by name, by total time;
//   - copies by direction.
// RLX_TRACE_OUT=FILE writes the report there instead of stderr. RLX_TRACE_TOP=N keeps N
// kernel rows (default 40).
//
// Build (scripts/gpu-check.sh does this on the GPU machine):
//   g++ -O2 -shared -fPIC -o libkernel_trace.so kernel_trace.cpp -I$CUDA/include
//       -L$CUPTI_LIB -l:libcupti.so.13 -Wl,-rpath,$CUPTI_LIB
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Interval {
  uint64_t start;
  uint64_t end;
  int name;  // index into `names`
};

struct GapSite {
  uint64_t count = 0;
  uint64_t nanos = 0;
};

struct KernelTotal {
  uint64_t count = 0;
  uint64_t nanos = 0;
};

struct CopyTotal {
  uint64_t count = 0;
  uint64_t bytes = 0;
  uint64_t nanos = 0;
};

std::mutex lock;
std::vector<Interval> intervals;
std::map<std::string, KernelTotal> kernels;
std::map<std::string, CopyTotal> copies;
std::vector<std::string> names;
std::map<std::string, int> name_ids;

int name_id(const std::string& name) {
  auto [it, fresh] = name_ids.emplace(name, static_cast<int>(names.size()));
  if (fresh) names.push_back(name);
  return it->second;
}
uint64_t dropped = 0;
bool reported = false;

constexpr size_t kBufferBytes = 8 << 20;

std::string short_name(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = (status == 0 && demangled != nullptr) ? demangled : mangled;
  std::free(demangled);
  // Template arguments make names unreadable in a table; the head and the start of the
  // arguments are enough to tell kernels apart.
  if (name.size() > 110) name = name.substr(0, 110) + "...";
  return name;
}

const char* copy_kind(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "host to device";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "device to host";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "device to device";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "peer to peer";
    default:
      return "other copy";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> guard(lock);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
        record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(record);
      const std::string name = short_name(k->name);
      intervals.push_back({k->start, k->end, name_id(name)});
      auto& total = kernels[name];
      total.count++;
      total.nanos += k->end - k->start;
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      auto* c = reinterpret_cast<CUpti_ActivityMemcpy6*>(record);
      intervals.push_back({c->start, c->end, name_id(std::string("copy ") + copy_kind(c->copyKind))});
      auto& total = copies[copy_kind(c->copyKind)];
      total.count++;
      total.bytes += c->bytes;
      total.nanos += c->end - c->start;
    }
  }
  size_t lost = 0;
  if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &lost) == CUPTI_SUCCESS) dropped += lost;
  std::free(buffer);
}

void report() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> guard(lock);
  if (reported) return;
  reported = true;
  FILE* out = stderr;
  if (const char* path = std::getenv("RLX_TRACE_OUT")) {
    if (FILE* f = std::fopen(path, "w")) out = f;
  }
  size_t top = 40;
  if (const char* n = std::getenv("RLX_TRACE_TOP")) top = std::strtoul(n, nullptr, 10);

  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.start < b.start; });
  uint64_t busy = 0, span = 0;
  // Gaps between the end of all work so far and the next start, by length.
  const uint64_t bounds[] = {2000, 10000, 100000, 1000000, UINT64_MAX};
  const char* labels[] = {"< 2 us", "2-10 us", "10-100 us", "0.1-1 ms", ">= 1 ms"};
  uint64_t gap_count[5] = {}, gap_nanos[5] = {};
  // Where the host kept the GPU waiting: gaps of 10 us to 5 ms by the work on either side
  // (longer ones are set-up and the pauses between a benchmark's phases).
  std::map<std::pair<int, int>, GapSite> sites;
  if (!intervals.empty()) {
    uint64_t cur_start = intervals[0].start, cur_end = intervals[0].end;
    int last = intervals[0].name;
    for (size_t i = 1; i < intervals.size(); i++) {
      const auto& iv = intervals[i];
      if (iv.start > cur_end) {
        busy += cur_end - cur_start;
        uint64_t gap = iv.start - cur_end;
        for (int b = 0; b < 5; b++) {
          if (gap < bounds[b]) {
            gap_count[b]++;
            gap_nanos[b] += gap;
            break;
          }
        }
        if (gap >= 10000 && gap < 5000000) {
          auto& site = sites[{last, iv.name}];
          site.count++;
          site.nanos += gap;
        }
        cur_start = iv.start;
        cur_end = iv.end;
      } else {
        cur_end = std::max(cur_end, iv.end);
      }
      if (iv.end >= cur_end) last = iv.name;
    }
    busy += cur_end - cur_start;
    span = cur_end - intervals[0].start;
  }
  std::fprintf(out, "kernel-trace: %zu activities, GPU busy %.3f ms of a %.3f ms span",
               intervals.size(), busy / 1e6, span / 1e6);
  if (dropped) std::fprintf(out, " (%llu records dropped)", (unsigned long long)dropped);
  std::fprintf(out, "\nkernel-trace: idle gaps:");
  for (int b = 0; b < 5; b++)
    std::fprintf(out, "  %s: %llu, %.3f ms;", labels[b], (unsigned long long)gap_count[b],
                 gap_nanos[b] / 1e6);
  std::fprintf(out, "\n");

  std::vector<std::pair<std::string, KernelTotal>> rows(kernels.begin(), kernels.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.nanos > b.second.nanos; });
  uint64_t kernel_total = 0;
  for (const auto& r : rows) kernel_total += r.second.nanos;
  std::fprintf(out, "kernel-trace: %-8s %10s %10s %6s  %s\n", "calls", "total ms", "mean us",
               "share", "kernel");
  for (size_t i = 0; i < rows.size() && i < top; i++) {
    const auto& [name, t] = rows[i];
    std::fprintf(out, "kernel-trace: %-8llu %10.3f %10.2f %5.1f%%  %s\n",
                 (unsigned long long)t.count, t.nanos / 1e6, t.nanos / 1e3 / t.count,
                 100.0 * t.nanos / std::max<uint64_t>(kernel_total, 1), name.c_str());
  }
  std::fprintf(out, "kernel-trace: all kernels %.3f ms in %zu names\n", kernel_total / 1e6,
               rows.size());
  std::vector<std::pair<std::pair<int, int>, GapSite>> gaps(sites.begin(), sites.end());
  std::sort(gaps.begin(), gaps.end(),
            [](const auto& a, const auto& b) { return a.second.nanos > b.second.nanos; });
  std::fprintf(out, "kernel-trace: idle 10 us - 5 ms by site (count, total ms, mean us: after -> before)\n");
  for (size_t i = 0; i < gaps.size() && i < 12; i++) {
    const auto& [where, g] = gaps[i];
    std::fprintf(out, "kernel-trace:   %llu, %.3f ms, %.1f us: %.60s -> %.60s\n",
                 (unsigned long long)g.count, g.nanos / 1e6, g.nanos / 1e3 / g.count,
                 names[where.first].c_str(), names[where.second].c_str());
  }
  for (const auto& [kind, t] : copies) {
    std::fprintf(out, "kernel-trace: copies %s: %llu, %.1f MB, %.3f ms\n", kind.c_str(),
                 (unsigned long long)t.count, t.bytes / 1e6, t.nanos / 1e6);
  }
  if (out != stderr) std::fclose(out);
}

}  // namespace

// Called by the CUDA driver when it loads this library through CUDA_INJECTION64_PATH.
extern "C" int InitializeInjection(void) {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS)
    return 0;
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  std::atexit(report);
  return 1;
}
