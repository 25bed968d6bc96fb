// loop_isa.hpp — which instruction set the plugin's own loops run in.
//
// The plugin is compiled for the baseline x86-64 (SSE2) so that it loads on
// every x86-64 CPU. Its hot contiguous loops (elementwise.hpp) are compiled
// twice more, for x86-64-v3 (AVX2, FMA, F16C) and x86-64-v4 (AVX-512 F/BW/DQ/
// VL), by GCC's auto-vectoriser from the same source, and every call picks
// one by the level set here at init. The level follows oneDNN's effective
// ISA, so one knob limits both the matmuls and these loops: the plugin
// option "isa" or oneDNN's ONEDNN_MAX_CPU_ISA environment variable ("avx2",
// "sse41", ...). Every level computes the same bits: the loops use only
// correctly rounded IEEE operations and integer arithmetic, and the plugin
// is built with -ffp-contract=off, so a*b+c is never fused into an FMA in
// the wide copies only (CMakeLists.txt; cpu_isa_test checks it).
#pragma once

#include <atomic>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define STRATA_CPU_ISA_CLONES 1
#else
#define STRATA_CPU_ISA_CLONES 0
#endif

namespace strata::cpu {

enum class LoopIsa : int { generic = 0, avx2 = 1, avx512 = 2 };

/// The level in effect (relaxed: set once at init, before any kernel runs).
inline std::atomic<LoopIsa> g_loop_isa{LoopIsa::generic};

inline LoopIsa loop_isa() noexcept { return g_loop_isa.load(std::memory_order_relaxed); }

/// How many loops ran at each level since the plugin loaded (relaxed
/// counters, indexed by LoopIsa; the baseline is counted only where a wide
/// level could have been chosen). The plugin logs them at shutdown, so a test
/// can see that its loops reach the level it claims (cpu_isa_test), not
/// only that every level computes the same bits. One cache line of
/// counters per thread slot: the fused kernel runs a loop per statement
/// per tile on every worker, and one shared line would bounce between
/// their cores.
struct alignas(64) LoopRuns {
  std::atomic<uint64_t> runs[3];
};
inline constexpr int kLoopRunSlots = 16;
inline LoopRuns g_loop_runs[kLoopRunSlots];
inline std::atomic<int> g_loop_run_next_slot{0};

/// Loops run at `isa`, over every slot.
inline uint64_t loop_runs(LoopIsa isa) noexcept {
  uint64_t n = 0;
  for (const LoopRuns& slot : g_loop_runs) n += slot.runs[static_cast<int>(isa)].load(std::memory_order_relaxed);
  return n;
}

/// loop_isa() for a loop about to run: counts the run at its level.
inline LoopIsa dispatch_loop_isa() noexcept {
  thread_local LoopRuns& mine = g_loop_runs[g_loop_run_next_slot.fetch_add(1) % kLoopRunSlots];
  const LoopIsa isa = loop_isa();
  mine.runs[static_cast<int>(isa)].fetch_add(1, std::memory_order_relaxed);
  return isa;
}

namespace detail {

template <class Body>
[[gnu::always_inline]] inline void range_body(int64_t begin, int64_t end, const Body& body) {
  for (int64_t i = begin; i < end; ++i) body(i);
}

#if STRATA_CPU_ISA_CLONES
template <class Body>
[[gnu::target("arch=x86-64-v4"), gnu::noinline]] void range_v4(int64_t begin, int64_t end, Body body) {
  range_body(begin, end, body);
}
template <class Body>
[[gnu::target("arch=x86-64-v3"), gnu::noinline]] void range_v3(int64_t begin, int64_t end, Body body) {
  range_body(begin, end, body);
}
#endif

}  // namespace detail

/// body(i) for begin <= i < end, the loop compiled for every level and run
/// in the one loop_isa() selects. For kernels whose loop is not an
/// elementwise map (several outputs, as the optimizer updates): `body` must
/// be inlinable and free of calls, so that the loop vectorises.
template <class Body>
inline void vector_range(int64_t begin, int64_t end, const Body& body) {
#if STRATA_CPU_ISA_CLONES
  switch (dispatch_loop_isa()) {
    case LoopIsa::avx512: return detail::range_v4(begin, end, body);
    case LoopIsa::avx2: return detail::range_v3(begin, end, body);
    case LoopIsa::generic: break;
  }
#endif
  detail::range_body(begin, end, body);
}

inline const char* loop_isa_name(LoopIsa isa) noexcept {
  switch (isa) {
    case LoopIsa::avx512: return "x86-64-v4 (AVX-512)";
    case LoopIsa::avx2: return "x86-64-v3 (AVX2)";
    case LoopIsa::generic: break;
  }
  return "x86-64 (SSE2)";
}

}  // namespace strata::cpu
