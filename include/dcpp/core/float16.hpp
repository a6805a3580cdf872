// 16-bit floating-point storage types (IEEE binary16 and bfloat16) with exact conversions,
// identical on host and device (device-safe): the same bits as CUDA's __half / __nv_bfloat16,
// so kernels read the same buffers on the GPU and in the host launcher.
#pragma once

#include <cstdint>
#include <cstring>

#include "dcpp/core/config.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace dcpp {

//! IEEE 754 binary16 storage.
struct half {
  std::uint16_t bits; // no initialiser: trivially copyable storage, like __half
};
//! bfloat16 storage (the high half of a binary32).
struct bfloat16 {
  std::uint16_t bits; // no initialiser: trivially copyable storage, like __half
};

namespace detail {
DCPP_HOST_DEVICE inline std::uint32_t float_bits(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
DCPP_HOST_DEVICE inline float bits_float(std::uint32_t u) noexcept {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
} // namespace detail

//! Exact widening conversions.
DCPP_HOST_DEVICE inline float to_float(float x) noexcept {
  return x;
}
DCPP_HOST_DEVICE inline float to_float(bfloat16 x) noexcept {
  return detail::bits_float(static_cast<std::uint32_t>(x.bits) << 16);
}
DCPP_HOST_DEVICE inline float to_float(half x) noexcept {
#if defined(__CUDA_ARCH__) // the hardware conversion (same result)
  return __half2float(__ushort_as_half(x.bits));
#endif
  const std::uint32_t sign = static_cast<std::uint32_t>(x.bits & 0x8000u) << 16;
  std::uint32_t exponent = (x.bits >> 10) & 0x1fu;
  std::uint32_t mantissa = x.bits & 0x3ffu;
  if (exponent == 0x1f) // inf / nan
    return detail::bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0)
      return detail::bits_float(sign);
    // subnormal: normalise
    int shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    exponent = static_cast<std::uint32_t>(1 - shift);
  }
  return detail::bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

//! Narrowing conversions, round to nearest even (as __float2half_rn / __float2bfloat16_rn).
template <class T>
DCPP_HOST_DEVICE inline T from_float(float f) noexcept;

template <>
DCPP_HOST_DEVICE inline float from_float<float>(float f) noexcept {
  return f;
}

template <>
DCPP_HOST_DEVICE inline bfloat16 from_float<bfloat16>(float f) noexcept {
#if defined(__CUDA_ARCH__)
  return bfloat16{__bfloat16_as_ushort(__float2bfloat16_rn(f))};
#endif
  const std::uint32_t u = detail::float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // nan: keep it a quiet nan
    return bfloat16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return bfloat16{static_cast<std::uint16_t>((u + rounding) >> 16)};
}

template <>
DCPP_HOST_DEVICE inline half from_float<half>(float f) noexcept {
#if defined(__CUDA_ARCH__)
  return half{__half_as_ushort(__float2half_rn(f))};
#endif
  const std::uint32_t u = detail::float_bits(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // nan
    return half{static_cast<std::uint16_t>(sign | 0x7e00u)};
  if (magnitude >= 0x477ff000u) // rounds to >= 65520: infinity
    return half{static_cast<std::uint16_t>(sign | 0x7c00u)};
  if (magnitude < 0x38800000u) { // below the smallest normal 2^-14: subnormal or zero
    if (magnitude < 0x33000000u) // below half the smallest subnormal 2^-25: zero
      return half{sign};
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    // value = mantissa * 2^(exponent - 150); in units of the subnormal step 2^-24:
    const std::uint32_t shift = 126u - exponent; // 14 .. 24
    const std::uint32_t kept = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    const std::uint32_t rounded =
        kept + ((rest > halfway || (rest == halfway && (kept & 1u))) ? 1u : 0u);
    return half{static_cast<std::uint16_t>(sign | rounded)};
  }
  const std::uint32_t rebased = magnitude - (112u << 23); // exponent 127 -> 15
  const std::uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return half{static_cast<std::uint16_t>(sign | ((rebased + rounding) >> 13))};
}

//! Loads any supported element as float.
template <class T>
DCPP_HOST_DEVICE inline float load_float(const T* p, std::int64_t i) noexcept {
  return to_float(p[i]);
}

} // namespace dcpp
