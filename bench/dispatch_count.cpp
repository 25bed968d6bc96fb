// dispatch_count.cpp — N one-element f32 adds on cpu:0 through the public
// API, and nothing else: the program to count instructions per dispatch with
// callgrind, which stays repeatable where wall time on a shared machine does
// not. Two runs with different N cancel start-up:
//
//   valgrind --tool=callgrind --callgrind-out-file=/dev/null bench_dispatch_count 10000
//   valgrind --tool=callgrind --callgrind-out-file=/dev/null bench_dispatch_count 30000
//   (difference of the two "Collected" totals) / 20000 = instructions per add
//
// With a second argument `backward`, each of the N steps is instead a
// recorded forward (y = sum(x * x + x), three ops on a one-element leaf) and
// its backward(): the count per step is the tape's hot path, recording and
// the reverse pass together.
//
// docs/performance.md quotes the figures.
#include "bench_common.hpp"

#include <strata/strata.hpp>

#include <cstdio>
#include <cstdlib>
#include <string_view>

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 10000;
  const bool backward = argc > 2 && std::string_view(argv[2]) == "backward";
  if (n <= 0 || (argc > 2 && !backward)) {
    std::fprintf(stderr, "usage: %s N [backward]   (N > 0 one-element adds, or forward-backward steps)\n", argv[0]);
    return 2;
  }
  strata::bench::configure_cpu_only(1);
  if (backward) {
    strata::Tensor x = strata::full({1}, 2.0);
    x.set_requires_grad();
    for (long i = 0; i < n; ++i) {
      x.zero_grad();
      strata::sum(x * x + x).backward();
    }
    const float g = x.grad().item<float>();  // d/dx (x^2 + x) at 2 = 5
    std::printf("%ld forward-backward steps, last grad = %g\n", n, g);
    return g == 5.0f ? 0 : 1;
  }
  strata::Tensor a = strata::full({1}, 1.0);
  strata::Tensor b = strata::full({1}, 2.0);
  strata::Tensor c;
  for (long i = 0; i < n; ++i) c = strata::add(a, b);
  std::printf("%ld adds, last = %g\n", n, c.item<float>());
  return c.item<float>() == 3.0f ? 0 : 1;
}
