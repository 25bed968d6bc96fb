// work_pool.hpp — the CPU plugin's own threads for its elementwise and
// reduction loops: work sharing that a descheduled thread cannot stall.
//
// An OpenMP team splits a loop into one fixed share per thread and waits at
// the join for every share. On a machine where another process competes for
// the cores, one member of the team is often descheduled; its share then
// waits for a whole scheduler time slice, and so does the op (a two-thread
// epoch of the digits demo took 3x as long with one core busy). Here a loop
// is cut into more chunks than threads, and every thread — the caller too —
// claims chunks one at a time from a shared counter: a worker that has not
// started yet simply finds nothing left to do, so the caller only ever waits
// for chunks that are actually running.
//
// Chunk boundaries depend on the chunk count alone, never on which thread
// ran a chunk, so results that combine per-chunk partials in chunk order are
// the same run after run.
#pragma once

#include <cstdint>
#include <type_traits>

namespace strata::cpu {

/// Runs body(chunk) for every chunk in [0, chunks), spread over the calling
/// thread and up to `threads - 1` pool workers; returns when all are done.
/// Runs everything on the calling thread when threads <= 1, chunks <= 1, or
/// the pool is busy with another caller's loop (a kernel running on another
/// host thread, or a loop inside a loop). `body` must not throw.
void run_chunks(int64_t chunks, int threads, void (*body)(void* context, int64_t chunk), void* context);

/// run_chunks with a callable.
template <class F>
void for_each_chunk(int64_t chunks, int threads, F&& f) {
  using Fn = std::remove_reference_t<F>;
  run_chunks(
      chunks, threads, [](void* context, int64_t chunk) { (*static_cast<Fn*>(context))(chunk); },
      const_cast<void*>(static_cast<const void*>(&f)));
}

/// Chunks a loop of `threads` threads is cut into: enough that a thread that
/// starts late leaves little for the others to wait on.
inline constexpr int kChunksPerThread = 4;

}  // namespace strata::cpu
