// THD ring attention, the softmax numerics: infinities, exp2/log on the fast path of the device and
// exactly on the host, a NaN-propagating max, and the quad reductions over one fragment row.
#pragma once

#include "dcpp/kernels/attention/traits.hpp"

namespace dcpp::kernels {

namespace detail {

DCPP_HOST_DEVICE constexpr float attention_neg_inf() noexcept {
  return -__builtin_huge_valf();
}
DCPP_HOST_DEVICE constexpr float attention_pos_inf() noexcept {
  return __builtin_huge_valf();
}
DCPP_HOST_DEVICE constexpr float attention_nan() noexcept {
  return __builtin_nanf("");
}
inline constexpr float attention_log2e = 1.4426950408889634f;
inline constexpr float attention_ln2 = 0.6931471805599453f;

DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_exp2(float x) {
#if defined(__CUDA_ARCH__)
  return exp2f(x);
#else
  return std::exp2(x);
#endif
}
DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_log(float x) {
#if defined(__CUDA_ARCH__)
  return logf(x);
#else
  return std::log(x);
#endif
}
//! The larger of a and b, NaN when either is NaN: the online softmax's running max must not
//! step over a NaN score (a plain `a > b ? a : b` drops a NaN that a later key follows, and the
//! row's LSE came out finite and wrong). One FMNMX.NAN on the device (PTX max.NaN, sm_80+).
DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_max(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a != a ? a : (a > b ? a : b); // b NaN: a > b is false, b is returned
#endif
}
DCPP_HOST_DEVICE DCPP_FORCE_INLINE int attention_min(int a, int b) {
  return a < b ? a : b;
}

//! Maximum / sum over the four lanes of a quad (the lanes holding one fragment row).
template <class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_quad_max(Ctx& ctx, float x) {
  x = attention_max(x, ctx.shuffle_xor(x, 1));
  return attention_max(x, ctx.shuffle_xor(x, 2));
}
template <class Ctx>
DCPP_HOST_DEVICE DCPP_FORCE_INLINE float attention_quad_sum(Ctx& ctx, float x) {
  x += ctx.shuffle_xor(x, 1);
  return x + ctx.shuffle_xor(x, 2);
}

} // namespace detail

} // namespace dcpp::kernels
