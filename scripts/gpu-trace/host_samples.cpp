// Where a program's host threads spend their CPU time, for machines without perf.
//
// Loaded with LD_PRELOAD, it samples the process every millisecond of CPU time
// (ITIMER_PROF, which Linux delivers to the thread that used it; the kernel checks the timer
// at its tick, so a tick longer than the interval samples less often: compare shares, not
// counts), records each sample's
// thread and call stack (glibc's `backtrace`, which unwinds through frames without frame
// pointers by their unwind tables), and at exit writes them with the process's memory map
// to RLX_HOST_SAMPLES=FILE. `host_samples.py FILE` turns the file into flat and inclusive
// profiles by function. Nothing happens when RLX_HOST_SAMPLES is unset.
//
// RLX_HOST_SAMPLES_US=N samples every N microseconds of CPU time instead (default 1000).
//
// Build: g++ -O2 -shared -fPIC -o libhost_samples.so host_samples.cpp
#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kDepth = 48;
constexpr size_t kCapacity = 400000;

struct Sample {
  uint32_t thread;
  uint32_t depth;
  void* frames[kDepth];
};

Sample* samples = nullptr;
std::atomic<size_t> taken{0};
std::atomic<size_t> dropped{0};
const char* out_path = nullptr;

void on_tick(int) {
  const int saved = errno;
  const size_t i = taken.fetch_add(1, std::memory_order_relaxed);
  if (i >= kCapacity) {
    dropped.fetch_add(1, std::memory_order_relaxed);
  } else {
    Sample& s = samples[i];
    s.thread = static_cast<uint32_t>(syscall(SYS_gettid));
    s.depth = static_cast<uint32_t>(backtrace(s.frames, kDepth));
  }
  errno = saved;
}

void write_samples() {
  itimerval off{};
  setitimer(ITIMER_PROF, &off, nullptr);
  FILE* out = std::fopen(out_path, "w");
  if (out == nullptr) {
    std::fprintf(stderr, "host_samples: cannot write %s\n", out_path);
    return;
  }
  // The map first (text), then one line per sample: thread, then frames in hex.
  if (FILE* maps = std::fopen("/proc/self/maps", "r")) {
    char line[4096];
    while (std::fgets(line, sizeof line, maps) != nullptr) std::fprintf(out, "map %s", line);
    std::fclose(maps);
  }
  const size_t n = std::min(taken.load(), kCapacity);
  std::fprintf(out, "main %d\n", static_cast<int>(getpid()));
  for (size_t i = 0; i < n; ++i) {
    std::fprintf(out, "s %u", samples[i].thread);
    for (uint32_t d = 0; d < samples[i].depth; ++d) std::fprintf(out, " %p", samples[i].frames[d]);
    std::fputc('\n', out);
  }
  std::fclose(out);
  std::fprintf(stderr, "host_samples: %zu samples (%zu dropped) in %s\n", n, dropped.load(),
               out_path);
}

__attribute__((constructor)) void start() {
  out_path = std::getenv("RLX_HOST_SAMPLES");
  if (out_path == nullptr) return;
  void* room = mmap(nullptr, sizeof(Sample) * kCapacity, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (room == MAP_FAILED) return;
  samples = static_cast<Sample*>(room);
  // The first `backtrace` loads libgcc's unwinder (it allocates): do it here, not in the
  // signal handler.
  void* warm[4];
  backtrace(warm, 4);
  struct sigaction action {};
  action.sa_handler = on_tick;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGPROF, &action, nullptr);
  long us = 1000;
  if (const char* every = std::getenv("RLX_HOST_SAMPLES_US")) us = std::max(50L, std::atol(every));
  itimerval timer{};
  timer.it_interval.tv_sec = us / 1000000;
  timer.it_interval.tv_usec = us % 1000000;
  timer.it_value = timer.it_interval;
  setitimer(ITIMER_PROF, &timer, nullptr);
  std::atexit(write_samples);
}

}  // namespace
