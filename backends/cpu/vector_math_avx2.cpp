// vector_math_avx2.cpp — vector_math.hpp's loops for AVX2 (compiled with
// -mavx2 -mfma; see vector_math_isa.inc). Nothing else belongs here.
#include "vector_math.hpp"

#include <immintrin.h>
#include <sleef.h>

namespace {

/// vmath::fix_nan on 8 lanes.
__m256 fix_nan8(__m256 x, __m256 r) {
  const __m256 r_nan = _mm256_cmp_ps(r, r, _CMP_UNORD_Q);
  const __m256 x_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256 quiet_x = _mm256_or_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x00400000)));
  r = _mm256_blendv_ps(r, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int32_t>(0xffc00000u))), r_nan);
  return _mm256_blendv_ps(r, quiet_x, _mm256_and_ps(r_nan, x_nan));
}

}  // namespace

#define VMATH_NS avx2
#define VMATH_LANES 8
#define VMATH_VEC __m256
#define VMATH_LOAD _mm256_loadu_ps
#define VMATH_STORE _mm256_storeu_ps
#define VMATH_SET1 _mm256_set1_ps
#define VMATH_ADD _mm256_add_ps
#define VMATH_DIV _mm256_div_ps
#define VMATH_NEG(v) _mm256_xor_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)))
#define VMATH_FIX_NAN fix_nan8
#define VMATH_SLEEF(fn) Sleef_##fn##f8_u10avx2
#define VMATH_ALL_SMALL(v)                                                                                     \
  (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v), _mm256_set1_ps(100.0f), \
                                    _CMP_LT_OQ)) == 0xff)
#include "vector_math_isa.inc"
