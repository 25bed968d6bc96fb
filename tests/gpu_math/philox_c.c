/* philox_c.c — strata/plugin/philox.h included by a C99 translation unit,
 * as a plugin written in C includes it (tests/gpu_math/philox_test.cpp
 * compares these bits with the C++ and the recorded ones). */
#include <stdint.h>

#include <strata/plugin/philox.h>

void gpu_math_test_philox_c(uint64_t first, uint64_t n, uint64_t offset, uint64_t seed, uint32_t* words,
                            uint32_t* uniform_bits, uint32_t* normal_bits);

void gpu_math_test_philox_c(uint64_t first, uint64_t n, uint64_t offset, uint64_t seed, uint32_t* words,
                            uint32_t* uniform_bits, uint32_t* normal_bits) {
  uint64_t i;
  for (i = 0; i < n; ++i) {
    words[i] = strata_philox_word(first + i, offset, seed);
    uniform_bits[i] = strata_philox_float_to_bits(strata_philox_uniform(words[i]));
    normal_bits[i] = strata_philox_float_to_bits(strata_philox_normal(first + i, offset, seed));
  }
}
