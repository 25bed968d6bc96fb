// vector_math_avx512.cpp — vector_math.hpp's loops for AVX-512 (compiled with
// -mavx512f -mfma; see vector_math_isa.inc). Nothing else belongs here.
#include "vector_math.hpp"

#include <immintrin.h>
#include <sleef.h>

namespace {

/// vmath::fix_nan on 16 lanes.
__m512 fix_nan16(__m512 x, __m512 r) {
  const __mmask16 r_nan = _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q);
  const __mmask16 x_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512 quiet_x = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x00400000)));
  r = _mm512_mask_mov_ps(r, r_nan, _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int32_t>(0xffc00000u))));
  return _mm512_mask_mov_ps(r, static_cast<__mmask16>(r_nan & x_nan), quiet_x);
}

}  // namespace

#define VMATH_NS avx512
#define VMATH_LANES 16
#define VMATH_VEC __m512
#define VMATH_LOAD _mm512_loadu_ps
#define VMATH_STORE _mm512_storeu_ps
#define VMATH_SET1 _mm512_set1_ps
#define VMATH_ADD _mm512_add_ps
#define VMATH_DIV _mm512_div_ps
#define VMATH_NEG(v) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)))
#define VMATH_FIX_NAN fix_nan16
#define VMATH_SLEEF(fn) Sleef_##fn##f16_u10avx512f
#define VMATH_ALL_SMALL(v) \
  (_mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(100.0f), _CMP_LT_OQ) == static_cast<__mmask16>(0xffff))
#include "vector_math_isa.inc"
