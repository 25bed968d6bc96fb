// fuzz_config.cpp — bytes → Config::from_string. A ConfigError (any
// strata::Error) is the expected answer to a bad file; any other exception,
// a crash or a sanitizer report is a bug.
#include <strata/config.hpp>
#include <strata/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    strata::Config c = strata::Config::from_string(text, "fuzz.json", "/tmp");
    // What the runtime asks of a configuration it accepted.
    (void)c.device("cpu", 0);
    (void)c.device("cuda", 1);
    (void)c.fallback_for("matmul");
  } catch (const strata::Error&) {
  }
  return 0;
}
