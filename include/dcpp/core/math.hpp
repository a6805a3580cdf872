// Small integer helpers used by planner and kernels alike (device-safe).
#pragma once

#include <cstdint>
#include <type_traits>

#include "dcpp/core/config.hpp"

namespace dcpp {

//! ceil(a / b) for non-negative a and positive b.
template <class Int>
DCPP_HOST_DEVICE constexpr Int ceil_div(Int a, Int b) noexcept {
  static_assert(std::is_integral_v<Int>);
  return (a + b - 1) / b;
}

//! Smallest multiple of `unit` that is >= `value` (value >= 0, unit > 0).
template <class Int>
DCPP_HOST_DEVICE constexpr Int round_up(Int value, Int unit) noexcept {
  return ceil_div(value, unit) * unit;
}

template <class Int>
DCPP_HOST_DEVICE constexpr bool is_power_of_two(Int value) noexcept {
  return value > 0 && (value & (value - 1)) == 0;
}

//! Smallest power of two >= value (value >= 1).
template <class Int>
DCPP_HOST_DEVICE constexpr Int next_power_of_two(Int value) noexcept {
  Int result = 1;
  while (result < value)
    result <<= 1;
  return result;
}

//! floor(log2(value)) for value >= 1.
template <class Int>
DCPP_HOST_DEVICE constexpr int log2_floor(Int value) noexcept {
  int result = 0;
  while (value > 1) {
    value >>= 1;
    ++result;
  }
  return result;
}

//! Padded length of a sample of `length` tokens split over `cp` ranks in zigzag chunks:
//! a multiple of `2 * cp * padding_unit` (2*cp chunks, each a multiple of `padding_unit`).
DCPP_HOST_DEVICE constexpr std::int64_t padded_length(std::int64_t length, std::int64_t cp,
                                                      std::int64_t padding_unit = 1) noexcept {
  return round_up<std::int64_t>(length, 2 * cp * padding_unit);
}

//! 64-bit FNV-1a over a sequence of 64-bit integers (little-endian bytes): the fingerprints
//! ranks compare collectively (plans, options, attention calls).
class fnv1a {
public:
  constexpr void mix(std::int64_t value) noexcept {
    const auto v = static_cast<std::uint64_t>(value);
    for (int byte = 0; byte < 8; ++byte) {
      h_ ^= (v >> (8 * byte)) & 0xffU;
      h_ *= 0x100000001b3ULL;
    }
  }
  [[nodiscard]] constexpr std::uint64_t value() const noexcept { return h_; }

private:
  std::uint64_t h_ = 0xcbf29ce484222325ULL;
};

//! Whether the byte ranges [a, a + a_bytes) and [b, b + b_bytes) share a byte; an empty range
//! or a null pointer shares none. Exact for ranges that end at the top of the address space (no
//! `a + a_bytes` is formed, so nothing wraps).
DCPP_HOST_DEVICE inline bool bytes_overlap(const void* a, std::uint64_t a_bytes, const void* b,
                                           std::uint64_t b_bytes) noexcept {
  if (a == nullptr || b == nullptr || a_bytes == 0 || b_bytes == 0)
    return false;
  const auto x = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(a));
  const auto y = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(b));
  return x <= y ? y - x < a_bytes : x - y < b_bytes;
}

} // namespace dcpp
