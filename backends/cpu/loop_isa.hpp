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
// correctly rounded IEEE operations and integer arithmetic, and the build
// does not contract a*b+c into FMAs (-std=c++20: -ffp-contract=off).
#pragma once

#include <atomic>

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

inline const char* loop_isa_name(LoopIsa isa) noexcept {
  switch (isa) {
    case LoopIsa::avx512: return "x86-64-v4 (AVX-512)";
    case LoopIsa::avx2: return "x86-64-v3 (AVX2)";
    case LoopIsa::generic: break;
  }
  return "x86-64 (SSE2)";
}

}  // namespace strata::cpu
