// dispatch_count.cpp — N one-element f32 adds on cpu:0 through the public
// API, and nothing else: the program to count instructions per dispatch with
// callgrind, which stays repeatable where wall time on a shared machine does
// not. Two runs with different N cancel start-up:
//
//   valgrind --tool=callgrind --callgrind-out-file=/dev/null bench_dispatch_count 10000
//   valgrind --tool=callgrind --callgrind-out-file=/dev/null bench_dispatch_count 30000
//   (difference of the two "Collected" totals) / 20000 = instructions per add
//
// docs/performance.md quotes the figure.
#include "bench_common.hpp"

#include <strata/strata.hpp>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 10000;
  if (n <= 0) {
    std::fprintf(stderr, "usage: %s N   (N > 0 one-element adds)\n", argv[0]);
    return 2;
  }
  strata::bench::configure_cpu_only(1);
  strata::Tensor a = strata::full({1}, 1.0);
  strata::Tensor b = strata::full({1}, 2.0);
  strata::Tensor c;
  for (long i = 0; i < n; ++i) c = strata::add(a, b);
  std::printf("%ld adds, last = %g\n", n, c.item<float>());
  return c.item<float>() == 3.0f ? 0 : 1;
}
