// demo.cpp — `strata demo`: a matmul and reductions on the selected device,
// checked against the same computation on the host.
#include "commands.hpp"

#include <strata/strata.hpp>

#include <cmath>
#include <iostream>

namespace strata::cli {

int run_demo(const std::string& device_id) {
  Device dev = device_id.empty() ? runtime().default_device() : Device(device_id);
  std::cout << "Running on " << dev << " (" << runtime().device_info(dev).name << ")\n";

  manual_seed(42);
  const int64_t m = 64, k = 128, n = 32;
  Tensor a = randn({m, k}, {.device = dev});
  Tensor b = randn({k, n}, {.device = dev});
  Tensor c = matmul(a, b);
  Tensor row_sums = sum(c, {1});
  Tensor total = sum(c);
  Tensor probs = softmax(c.slice(0, 0, 2), 1);

  std::cout << "a: " << a.sizes().size() << "-D " << m << "x" << k << ", b: " << k << "x" << n << "\n";
  std::cout << "c = a @ b, c[:2, :4] =\n" << c.slice(0, 0, 2).slice(1, 0, 4) << "\n";
  std::cout << "row sums of c (first 4): " << row_sums.slice(0, 0, 4) << "\n";
  std::cout << "sum(c) = " << total.item<double>() << "\n";
  std::cout << "softmax(c[:2]) rows sum to " << sum(probs, {1}) << "\n";

  // Host reference in double precision.
  std::vector<double> ha = a.to_vector<double>();
  std::vector<double> hb = b.to_vector<double>();
  double reference = 0.0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) reference += ha[static_cast<size_t>(i * k + p)] * hb[static_cast<size_t>(p * n + j)];
  double error = std::fabs(total.item<double>() - reference);
  std::cout << "host reference sum = " << reference << ", |difference| = " << error << "\n";
  if (error > 1e-3 * std::max(1.0, std::fabs(reference))) {
    std::cerr << "strata demo: result differs from the host reference\n";
    return kFailure;
  }
  std::cout << "demo OK\n";
  return kOk;
}

}  // namespace strata::cli
