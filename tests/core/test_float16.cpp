// Tests for include/dcpp/core/float16.hpp: every binary16 value round-trips; narrowing rounds to
// nearest even, checked against the compiler's _Float16 and a direct bfloat16 reference.
#include "../support.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "dcpp/core/float16.hpp"

namespace {
float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
//! Round-to-nearest-even to bfloat16 by comparing the two neighbours in double.
std::uint16_t bfloat16_reference(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t down = u & 0xffff0000u, up = down + 0x10000u;
  const double d = f, lo = bits_to_float(down);
  // Past the largest finite value the next step up is infinity, at 2^128 for rounding purposes.
  const double hi = std::isinf(bits_to_float(up)) ? std::copysign(std::ldexp(1.0, 128), d)
                                                  : static_cast<double>(bits_to_float(up));
  if (std::fabs(d - lo) < std::fabs(hi - d))
    return static_cast<std::uint16_t>(down >> 16);
  if (std::fabs(d - lo) > std::fabs(hi - d))
    return static_cast<std::uint16_t>(up >> 16);
  return static_cast<std::uint16_t>(((down >> 16) & 1u) == 0 ? down >> 16 : up >> 16);
}
} // namespace

TEST_CASE("float16: every binary16 value widens exactly and narrows back") {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const dcpp::half h{static_cast<std::uint16_t>(b)};
    const float f = dcpp::to_float(h);
    _Float16 reference;
    std::memcpy(&reference, &h.bits, 2);
    if (std::isnan(f)) {
      CHECK(std::isnan(static_cast<float>(reference)));
      CHECK(std::isnan(dcpp::to_float(dcpp::from_float<dcpp::half>(f))));
      continue;
    }
    REQUIRE(f == static_cast<float>(reference));
    REQUIRE(dcpp::from_float<dcpp::half>(f).bits == h.bits);
  }
}

TEST_CASE("float16: narrowing rounds to nearest even like _Float16, bfloat16 like the reference") {
  std::mt19937 rng(7);
  for (int i = 0; i < 400000; ++i) {
    // Random bit patterns cover every exponent; a third of them near the half range.
    std::uint32_t u = rng();
    if (i % 3 == 0)
      u = (u & 0x807fffffu) | ((100u + rng() % 45u) << 23);
    const float f = bits_to_float(u);
    if (std::isnan(f))
      continue;
    const _Float16 reference = static_cast<_Float16>(f);
    std::uint16_t reference_bits;
    std::memcpy(&reference_bits, &reference, 2);
    REQUIRE(dcpp::from_float<dcpp::half>(f).bits == reference_bits);
    REQUIRE(dcpp::from_float<dcpp::bfloat16>(f).bits == bfloat16_reference(f));
  }
  CHECK(dcpp::from_float<dcpp::half>(65519.0f).bits == 0x7bff);
  CHECK(dcpp::from_float<dcpp::half>(65520.0f).bits == 0x7c00);
  CHECK(dcpp::to_float(dcpp::from_float<dcpp::bfloat16>(1.00390625f)) == 1.0f); // tie to even
  CHECK(std::isnan(dcpp::to_float(dcpp::from_float<dcpp::bfloat16>(std::nanf("")))));
}
