// Tests for include/dcpp/core/math.hpp.
#include "../support.hpp"

#include "dcpp/core/math.hpp"

#include "dcpp/workload/generators.hpp"

TEST_CASE("math: ceil_div and round_up agree with the definitions on seeded values") {
  dcpp::workload::rng r(11);
  for (int i = 0; i < 5000; ++i) {
    const std::int64_t a = r.uniform_int(0, 1 << 20);
    const std::int64_t b = r.uniform_int(1, 1000);
    const std::int64_t q = dcpp::ceil_div(a, b);
    CHECK(q * b >= a);
    CHECK((q - 1) * b < a + (a == 0 ? b : 0));
    CHECK(dcpp::round_up(a, b) == q * b);
  }
}

TEST_CASE("math: powers of two") {
  CHECK_FALSE(dcpp::is_power_of_two(0));
  CHECK(dcpp::is_power_of_two(1));
  CHECK(dcpp::is_power_of_two(1024));
  CHECK_FALSE(dcpp::is_power_of_two(24));
  CHECK(dcpp::next_power_of_two(1) == 1);
  CHECK(dcpp::next_power_of_two(17) == 32);
  CHECK(dcpp::next_power_of_two(32) == 32);
  CHECK(dcpp::log2_floor(1) == 0);
  CHECK(dcpp::log2_floor(24) == 4);
  static_assert(dcpp::next_power_of_two(5) == 8);
}

TEST_CASE("math: padded_length is the smallest multiple of 2*cp*unit at or above the length") {
  for (std::int64_t cp = 1; cp <= 9; ++cp)
    for (std::int64_t unit = 1; unit <= 3; ++unit)
      for (std::int64_t l = 1; l <= 200; ++l) {
        const std::int64_t p = dcpp::padded_length(l, cp, unit);
        CHECK(p % (2 * cp * unit) == 0);
        CHECK(p >= l);
        CHECK(p - l < 2 * cp * unit);
      }
}

TEST_CASE("math: bytes_overlap against a byte-by-byte check, at the top of the address space") {
  // ranges of 0-6 bytes at offsets 0-9 from a base, both orders, and at the very top, where
  // `base + bytes` would wrap
  const auto brute = [](std::uint64_t x, std::uint64_t xn, std::uint64_t y, std::uint64_t yn) {
    for (std::uint64_t i = 0; i < xn; ++i)
      for (std::uint64_t j = 0; j < yn; ++j)
        if (x + i == y + j)
          return true;
    return false;
  };
  for (const std::uint64_t base : {std::uint64_t{4096}, ~std::uint64_t{0} - 15}) {
    for (std::uint64_t a = 0; a < 10; ++a)
      for (std::uint64_t b = 0; b < 10; ++b)
        for (std::uint64_t an = 0; an <= 6; ++an)
          for (std::uint64_t bn = 0; bn <= 6; ++bn) {
            const std::uint64_t x = base + a, y = base + b;
            if (x > ~std::uint64_t{0} - an || y > ~std::uint64_t{0} - bn)
              continue; // a range past the end of memory is not a range
            const auto* px = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(x));
            const auto* py = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(y));
            CHECK(dcpp::bytes_overlap(px, an, py, bn) == brute(x, an, y, bn));
          }
  }
  int value = 0;
  CHECK_FALSE(dcpp::bytes_overlap(nullptr, 8, &value, 4));
  CHECK_FALSE(dcpp::bytes_overlap(&value, 4, nullptr, 8));
  CHECK(dcpp::bytes_overlap(&value, 4, &value, 4));
  // the last 8 bytes of memory: `top + 8` wraps to 0, so the form `y < x + n` said no here
  const auto* top = reinterpret_cast<const void*>(~std::uintptr_t{0} - 7);
  CHECK(dcpp::bytes_overlap(top, 8, reinterpret_cast<const void*>(~std::uintptr_t{0} - 1), 1));
  CHECK_FALSE(dcpp::bytes_overlap(top, 8, reinterpret_cast<const void*>(std::uintptr_t{16}), 8));
}
