// bench_common.hpp — what the benchmarks with a libtorch peer share: the
// thread count both sides use, the CPU-only configuration, and a console
// reporter that keeps each benchmark's times (its median when repeated, else
// its single run) so a program can print peer ratios after the runs.
#pragma once

#include <strata/config.hpp>
#include <strata/runtime.hpp>

#include <benchmark/benchmark.h>

#ifdef STRATA_HAVE_TORCH
#include <torch/torch.h>
#endif
#include <dlfcn.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::bench {

// Which peers this program was built with (bench/CMakeLists.txt defines the
// macros per target).
#ifdef STRATA_HAVE_TORCH
inline constexpr bool kTorchPeer = true;
#else
inline constexpr bool kTorchPeer = false;
#endif
#ifdef STRATA_HAVE_OPENBLAS
inline constexpr bool kOpenBlasPeer = true;
#else
inline constexpr bool kOpenBlasPeer = false;
#endif

/// STRATA_BENCH_THREADS when set to a positive number, else `fallback`.
inline int bench_threads(int fallback) {
  const char* env = std::getenv("STRATA_BENCH_THREADS");
  const int n = env != nullptr ? std::atoi(env) : 0;
  return n > 0 ? n : fallback;
}

/// Sets OpenBLAS's own pool (libtorch's f32 BLAS), which torch::set_num_threads
/// does not control; false when OpenBLAS is not loaded.
inline bool set_openblas_threads(int threads) {
  using SetThreads = void (*)(int);
  auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (set != nullptr) set(threads);
  return set != nullptr;
}

/// Peers run as they run on a user's machine. OpenBLAS reads
/// OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE once, when it is loaded (before
/// main), and the machines these benchmarks run on set them, pinning OpenBLAS
/// — and libtorch's f32 GEMM through it — to kernels about half as fast as
/// the ones it picks itself. So when either is set the program executes
/// itself again without them, which must happen before anything else in
/// main. STRATA_BENCH_KEEP_OPENBLAS_ENV=1 keeps them (to measure the pinned
/// peer on purpose).
inline void unpin_openblas(char** argv) {
  const char* keep = std::getenv("STRATA_BENCH_KEEP_OPENBLAS_ENV");
  if (keep != nullptr && std::string(keep) == "1") return;
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr && std::getenv("OPENBLAS_L2_SIZE") == nullptr) return;
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("OPENBLAS_L2_SIZE");
  execv("/proc/self/exe", argv);
  std::perror("bench: re-executing without OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE failed");
  std::exit(1);
}

/// One line per peer, before any timing: which peer runs, with the kernel
/// OpenBLAS picked for this CPU, or that the peer was left out of this build
/// (STRATA_BENCH_PEERS=OFF, or not installed) and Strata is measured alone.
/// `peer` is what this program compares with: "libtorch" or "OpenBLAS".
inline void print_peers(const char* peer = "libtorch") {
  const bool built = std::string(peer) == "OpenBLAS" ? kOpenBlasPeer : kTorchPeer;
  if (built) {
    std::printf("peer: %s, in this process\n", peer);
  } else {
    std::printf("peer: %s left out of this build (STRATA_BENCH_PEERS=OFF, or not installed: "
                "tools/install-bench-deps.sh adds it); Strata is measured alone\n", peer);
  }
  using CoreName = char* (*)();
  auto corename = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (corename != nullptr) {
    const char* pinned = std::getenv("OPENBLAS_CORETYPE");
    std::printf("peer: OpenBLAS kernel %s (%s)\n", corename(),
                pinned != nullptr ? "pinned by OPENBLAS_CORETYPE" : "its own choice for this CPU");
  }
}

/// The CPU plugin alone, with `threads` threads.
inline void configure_cpu_only(int threads) {
  Config config = Config::builtin_default();
  config.prefer = {"cpu"};
  config.disabled_plugins = {"cuda", "hip", "vulkan"};
  config.devices["cpu"].threads = threads;
  config.log_level = "warn";
  runtime().configure(config);
}

/// The start every one-device CPU benchmark shares: OpenBLAS unpinned (this
/// re-executes the program, so it comes first), one thread unless
/// STRATA_BENCH_THREADS says otherwise — for Strata and for libtorch when it
/// is the peer — the CPU plugin alone, the peers line,
/// Google Benchmark's flags. Returns the thread count, or -1 for flags it
/// does not know (main returns 1).
inline int start_cpu_bench(int& argc, char** argv) {
  unpin_openblas(argv);
  const int threads = bench_threads(1);
#ifdef STRATA_HAVE_TORCH
  torch::set_num_threads(threads);
#endif
  configure_cpu_only(threads);
  print_peers();
  benchmark::Initialize(&argc, argv);
  return benchmark::ReportUnrecognizedArguments(argc, argv) ? -1 : threads;
}

/// The console output plus each benchmark's real and CPU time in ms.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  explicit RatioReporter(OutputOptions options) : ConsoleReporter(options) {}
  struct Times {
    double real_ms, cpu_ms;
  };
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      const double to_ms = 1e3 / benchmark::GetTimeUnitMultiplier(r.time_unit);
      const Times t{r.GetAdjustedRealTime() * to_ms, r.GetAdjustedCPUTime() * to_ms};
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name == "median") {
        median_[r.run_name.function_name] = t;
      } else if (r.run_type == Run::RT_Iteration) {
        single_[r.run_name.function_name] = t;
      }
    }
  }
  std::optional<Times> times(const std::string& name) const {
    if (auto it = median_.find(name); it != median_.end()) return it->second;
    if (auto it = single_.find(name); it != single_.end()) return it->second;
    return std::nullopt;
  }
  /// One line "what  real a / b ms = a/b x" for benchmarks `num` and `den`
  /// (nothing when either did not run).
  void print_ratio(const std::string& what, const std::string& num, const std::string& den) const {
    auto a = times(num), b = times(den);
    if (!a || !b) return;
    std::printf("  %-58s real %10.3f / %10.3f ms = %7.3fx\n", what.c_str(), a->real_ms, b->real_ms,
                a->real_ms / b->real_ms);
  }

 private:
  std::map<std::string, Times> median_, single_;
};

}  // namespace strata::bench
