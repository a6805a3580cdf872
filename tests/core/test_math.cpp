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
