// A program built against the installed SDK: it uses the installed default
// configuration (found relative to libstrata.so), computes on cpu:0, and on
// the sdkmini:0 device of the plugin built next to it (STRATA_PLUGIN_PATH).
#include <strata/strata.hpp>

#include <iostream>

int main() {
  using namespace strata;
  std::cout << "config " << runtime().config().source << "\n";
  Tensor x = full({3}, 2.0);
  std::cout << "cpu sum " << sum(x).item<double>() << "\n";
  try {
    Device mini("sdkmini:0");
    Tensor a = full({4}, 1.5, {.device = mini});
    Tensor b = add(a, a).to(Device("cpu:0"));
    std::cout << "sdkmini add " << sum(b).item<double>() << "\n";
  } catch (const Error& e) {
    std::cout << "sdkmini unavailable: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
